/*  zactor-ckpt: inspects checkpoints. `ls DIR` lists every checkpoint with its
    step, time, size, tensor count and whether it is intact; `show FILE|DIR`
    prints one checkpoint's metadata and tensors; `export` writes one as an
    ONNX model.                                                             */
#include "za/za_checkpoint.h"
#include "za/za_export.h"
#include "za/za_image.h"
#include "za/za_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define EXIT_USAGE 2

static void
s_usage (FILE *out)
{
    fprintf (out,
"Usage: zactor-ckpt ls DIR          list the checkpoints in a model directory\n"
"       zactor-ckpt show FILE|DIR   one checkpoint (DIR: its newest intact one):\n"
"                                   metadata, and each tensor's shape and values\n"
"       zactor-ckpt export [OPTIONS] FILE|DIR\n"
"                                   the checkpoint (DIR: its newest intact one) as an\n"
"                                   ONNX model (opset 13) for onnxruntime and others:\n"
"                                   input 'pixels' float32 [batch, H, W, C] of values\n"
"                                   0 .. 255, outputs 'logits' and 'probabilities'\n"
"         --format onnx             the format (onnx, the one there is)\n"
"         -o, --output FILE         where (default: the model dir's model.onnx)\n"
"         --input-shape HxWxC       the images' shape after resizing (default: the\n"
"                                   model dir's input.json, else 28x28x1)\n"
"         --preprocess MODE         none, tf, torch or caffe (default: input.json's,\n"
"                                   else none), as a graph node\n"
"         --no-softmax              no 'probabilities' output\n"
"A checkpoint is intact when its size, header and CRC32 check out; one that is not\n"
"is listed with the reason and never used for training or evaluation.\n"
"Exit status: 0 all listed checkpoints intact, 1 some are not or none found, 2 usage.\n");
}

static int
s_ls (const char *dir)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (dir, &steps);
    if (count < 0)
        return 1;
    if (count == 0) {
        fprintf (stderr, "zactor-ckpt: no checkpoint in '%s'\n", dir);
        return 1;
    }
    printf ("%-10s %-19s %10s %8s  %s\n", "step", "written", "bytes", "tensors", "state");
    int bad = 0;
    za_error_set_quiet (1);
    for (int i = 0; i < count; i++) {
        char *path = za_checkpoint_path (dir, steps [i]);
        struct stat st;
        char when [32] = "?";
        long long bytes = -1;
        if (stat (path, &st) == 0) {
            struct tm tm;
            localtime_r (&st.st_mtime, &tm);
            strftime (when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
            bytes = (long long) st.st_size;
        }
        //  As every loader takes it (a copy under another step's name is
        //  corrupt too).
        za_checkpoint_t *ckpt = za_checkpoint_load_step (dir, steps [i]);
        if (ckpt)
            printf ("%-10" PRId64 " %-19s %10lld %8d  intact\n", steps [i], when, bytes,
                    za_checkpoint_tensor_count (ckpt));
        else {
            printf ("%-10" PRId64 " %-19s %10lld %8s  CORRUPT: %s\n", steps [i], when, bytes,
                    "-", za_last_error ());
            bad++;
        }
        za_checkpoint_destroy (&ckpt);
        free (path);
    }
    za_error_set_quiet (0);
    free (steps);
    return bad? 1: 0;
}

static int
s_show (const char *target)
{
    struct stat st;
    za_checkpoint_t *ckpt = NULL;
    if (stat (target, &st) == 0 && S_ISDIR (st.st_mode)) {
        int found = 0;
        ckpt = za_checkpoint_load_newest (target, &found);
        if (!ckpt && !found)
            fprintf (stderr, "zactor-ckpt: no checkpoint in '%s'\n", target);
    }
    else
        ckpt = za_checkpoint_load (target);
    if (!ckpt)
        return 1;
    printf ("%s: step %" PRId64 ", intact\n", za_checkpoint_filename (ckpt),
            za_checkpoint_step (ckpt));
    const char *keys [] = {"model", "model_fn", "optimizer", "learning_rate", "format", "crc32"};
    for (size_t k = 0; k < sizeof keys / sizeof keys [0]; k++) {
        const char *value = za_checkpoint_meta (ckpt, keys [k]);
        if (value)
            printf ("  %-14s %s\n", keys [k], value);
    }
    printf ("  %-28s %-5s %-18s %12s %12s %12s\n", "tensor", "dtype", "shape", "min", "max",
            "mean");
    int count = za_checkpoint_tensor_count (ckpt);
    for (int i = 0; i < count; i++) {
        const za_ckpt_tensor_t *t = za_checkpoint_tensor (ckpt, i);
        char shape [64] = "[";
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) {
            char dim [24];
            snprintf (dim, sizeof dim, "%s%" PRId64, d? ",": "", t->shape [d]);
            strncat (shape, dim, sizeof shape - strlen (shape) - 2);
            n *= (size_t) t->shape [d];
        }
        strcat (shape, "]");
        double lo = INFINITY, hi = -INFINITY, sum = 0;
        for (size_t j = 0; j < n; j++) {
            double v;
            if (t->dtype == ZA_DTYPE_F32) {
                float f;
                memcpy (&f, (const char *) t->data + j * sizeof f, sizeof f);
                v = f;
            }
            else {
                int64_t x;
                memcpy (&x, (const char *) t->data + j * sizeof x, sizeof x);
                v = (double) x;
            }
            lo = v < lo? v: lo;
            hi = v > hi? v: hi;
            sum += v;
        }
        printf ("  %-28s %-5s %-18s %12.5g %12.5g %12.5g\n", t->name,
                t->dtype == ZA_DTYPE_F32? "f32": "i64", shape, lo, hi, n? sum / (double) n: 0.0);
    }
    za_checkpoint_destroy (&ckpt);
    return 0;
}

//  The folder a checkpoint file lies in, or the dir itself.
static void
s_model_dir (const char *target, int is_dir, char *dir, size_t size)
{
    snprintf (dir, size, "%s", target);
    char *slash = strrchr (dir, '/');
    if (!is_dir)
        snprintf (dir, size, "%.*s", slash? (int) (slash - dir): 1, slash? target: ".");
}

static int
s_export (int argc, char **argv)
{
    const char *target = NULL, *output = NULL, *shape = NULL, *preprocess = NULL;
    int softmax = 1;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv [i], *value = i + 1 < argc? argv [i + 1]: NULL;
        int takes = !strcmp (arg, "--format") || !strcmp (arg, "-o")
                 || !strcmp (arg, "--output") || !strcmp (arg, "--input-shape")
                 || !strcmp (arg, "--preprocess");
        if (takes && !value) {
            fprintf (stderr, "zactor-ckpt export: %s needs a value\n", arg);
            return EXIT_USAGE;
        }
        if (!strcmp (arg, "--format")) {
            if (strcmp (value, "onnx")) {
                fprintf (stderr, "zactor-ckpt export: --format %s: the format is onnx\n",
                         value);
                return EXIT_USAGE;
            }
        }
        else
        if (!strcmp (arg, "-o") || !strcmp (arg, "--output"))
            output = value;
        else
        if (!strcmp (arg, "--input-shape"))
            shape = value;
        else
        if (!strcmp (arg, "--preprocess"))
            preprocess = value;
        else
        if (!strcmp (arg, "--no-softmax"))
            softmax = 0;
        else
        if (!strcmp (arg, "-h") || !strcmp (arg, "--help")) {
            s_usage (stdout);
            return 0;
        }
        else
        if (arg [0] == '-') {
            fprintf (stderr, "zactor-ckpt export: '%s' is not an option here (see --help)\n",
                     arg);
            return EXIT_USAGE;
        }
        else
        if (target) {
            fprintf (stderr, "zactor-ckpt export: '%s' after '%s': export takes one checkpoint "
                     "or model dir (-o FILE names the output)\n", arg, target);
            return EXIT_USAGE;
        }
        else
            target = arg;
        i += takes;
    }
    if (!target) {
        fprintf (stderr, "zactor-ckpt export: give the checkpoint or model dir to export\n");
        return EXIT_USAGE;
    }
    struct stat st;
    int is_dir = stat (target, &st) == 0 && S_ISDIR (st.st_mode);
    char dir [4096], path [4200];
    s_model_dir (target, is_dir, dir, sizeof dir);
    za_export_config_t config;
    void *json = NULL;
    if (za_export_config_load (dir, &config, &json))
        return 1;
    config.softmax = softmax;
    //  (Each side at most --image-size's most: a %d of 99999999999 wrapped.)
    char tail;
    long sides [3];
    if (shape && (sscanf (shape, "%ldx%ldx%ld%c", &sides [0], &sides [1], &sides [2],
                          &tail) != 3
                  || sides [0] <= 0 || sides [1] <= 0 || sides [2] <= 0
                  || sides [0] > ZA_IMAGE_SIDE_MAX || sides [1] > ZA_IMAGE_SIDE_MAX
                  || sides [2] > 4)) {
        fprintf (stderr, "zactor-ckpt export: --input-shape %s: give HxWxC, e.g. 224x224x3 "
                 "(sides up to %d, channels up to 4)\n", shape, ZA_IMAGE_SIDE_MAX);
        za_export_config_free (&json);
        return EXIT_USAGE;
    }
    //  A shape given is the graph's: training's --image-size no longer says
    //  what the images are resized to.
    if (shape) {
        config.input.height = (int) sides [0];
        config.input.width = (int) sides [1];
        config.input.channels = (int) sides [2];
        config.image_size = NULL;
    }
    if (preprocess && za_preprocess_parse (preprocess) < 0) {
        fprintf (stderr, "zactor-ckpt export: --preprocess %s: none, tf, torch or caffe\n",
                 preprocess);
        za_export_config_free (&json);
        return EXIT_USAGE;
    }
    if (preprocess)
        config.preprocess = (za_preprocess_t) za_preprocess_parse (preprocess);
    za_checkpoint_t *ckpt = NULL;
    int found = 0;
    if (is_dir && !(ckpt = za_checkpoint_load_newest (target, &found)) && !found)
        fprintf (stderr, "zactor-ckpt: no checkpoint in '%s'\n", target);
    if (!is_dir)
        ckpt = za_checkpoint_load (target);
    snprintf (path, sizeof path, "%s/model.onnx", dir);
    if (!output)
        output = path;
    int rc = ckpt? za_export_onnx (za_checkpoint_meta (ckpt, "model"), ckpt, &config,
                                   output): 1;
    if (ckpt && rc == 0) {
        stat (output, &st);
        printf ("exported step %" PRId64 " of %s to %s (%.1f MB, ONNX opset 13): input "
                "'pixels' [batch, %d, %d, %d] 0 .. 255, outputs 'logits'%s\n",
                za_checkpoint_step (ckpt), za_checkpoint_filename (ckpt), output,
                (double) st.st_size / 1e6, config.input.height, config.input.width,
                config.input.channels, softmax? " and 'probabilities'": "");
    }
    else
    if (ckpt)
        rc = 1;
    za_checkpoint_destroy (&ckpt);
    za_export_config_free (&json);
    return rc;
}

int
main (int argc, char **argv)
{
    if (argc >= 2 && strcmp (argv [1], "export") == 0)
        return s_export (argc, argv);
    //  (`ls --help` too: not a model dir named --help.)
    if ((argc == 2 || argc == 3)
        && (!strcmp (argv [argc - 1], "-h") || !strcmp (argv [argc - 1], "--help"))) {
        s_usage (stdout);
        return 0;
    }
    if (argc != 3) {
        s_usage (stderr);
        return EXIT_USAGE;
    }
    if (strcmp (argv [1], "ls") == 0)
        return s_ls (argv [2]);
    if (strcmp (argv [1], "show") == 0)
        return s_show (argv [2]);
    fprintf (stderr, "zactor-ckpt: unknown command '%s' (ls, show or export)\n", argv [1]);
    return EXIT_USAGE;
}
