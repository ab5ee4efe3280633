/*  za_predict.c: `zactor-run predict`.                                      */
#include "za_predict.h"
#include "za_task.h"

#include "za/za_estimator.h"
#include "za/za_images.h"
#include "za/za_util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CHARS 4096
#define NAME_CHARS 256

// ---------------------------------------------------------------------------
//  Predictions

typedef struct {
    za_task_t *task;
    FILE *out;
    int csv;
    int logits;                         //  --logits: write them too, to 9 digits
    char **names;                       //  the class names, or NULL: their numbers
    char **json_names;                  //  the same as JSON strings take them (s_utf8)
    int n_names;
    int64_t written;
    int failed;
} s_writer_t;

//  text as a JSON string takes it: each byte that is not of valid UTF-8 (a
//  Latin-1 file or folder name) as \xNN, as Python writes such a name;
//  into out [size]. Returns out.
static const char *
s_utf8 (const char *text, char *out, size_t size)
{
    size_t at = 0;
    for (const unsigned char *p = (const unsigned char *) text; *p && at + 5 < size;) {
        int len = *p < 0x80? 1: (*p & 0xe0) == 0xc0 && *p >= 0xc2? 2: (*p & 0xf0) == 0xe0? 3
                : (*p & 0xf8) == 0xf0 && *p <= 0xf4? 4: 0;
        for (int k = 1; k < len; k++)
            if ((p [k] & 0xc0) != 0x80)
                len = 0;
        //  (Overlong three-byte forms and surrogates, jansson refuses too.)
        if (len == 3 && ((*p == 0xe0 && p [1] < 0xa0) || (*p == 0xed && p [1] >= 0xa0)))
            len = 0;
        if (len == 4 && ((*p == 0xf0 && p [1] < 0x90) || (*p == 0xf4 && p [1] >= 0x90)))
            len = 0;
        if (len == 0) {
            at += (size_t) snprintf (out + at, size - at, "\\x%02x", *p++);
            continue;
        }
        memcpy (out + at, p, (size_t) len);
        at += (size_t) len;
        p += len;
    }
    out [at] = 0;
    return out;
}

//  The class names of --class-names (or input.json's) into writer.
static void
s_names (s_writer_t *self, const char *text)
{
    if (!text)
        return;
    char *copy = strdup (text);
    self->names = calloc (strlen (text) + 2, sizeof *self->names);
    self->json_names = calloc (strlen (text) + 2, sizeof *self->json_names);
    char clean [4 * NAME_CHARS];
    for (char *save = NULL, *name = copy && self->names && self->json_names
                                  ? strtok_r (copy, ",", &save): NULL;
         name; name = strtok_r (NULL, ",", &save)) {
        self->json_names [self->n_names] = strdup (s_utf8 (name, clean, sizeof clean));
        self->names [self->n_names++] = strdup (name);
    }
    free (copy);
}

//  Class k's name (its number without --class-names); json: as a JSON
//  string takes it (s_utf8).
static const char *
s_name (const s_writer_t *self, int k, char *buffer, int json)
{
    if (self->names && self->n_names && k < self->n_names)
        return json? self->json_names [k]: self->names [k];
    snprintf (buffer, NAME_CHARS, "%d", k);
    return buffer;
}

//  A CSV field: quoted when it holds a comma, a quote or a line break.
static void
s_csv_field (FILE *out, const char *text)
{
    if (!strpbrk (text, ",\"\r\n")) {
        fputs (text, out);
        return;
    }
    fputc ('"', out);
    for (const char *p = text; *p; p++) {
        if (*p == '"')
            fputc ('"', out);
        fputc (*p, out);
    }
    fputc ('"', out);
}

//  The example's name: its file (FILE@OFFSET for a TFRecord's), or its
//  number in the IDX file.
static void
s_example_name (const s_writer_t *self, int64_t index, char *name, size_t size)
{
    const za_dataset_t *data = self->task->eval;
    const char *path = za_images_path (data, index);
    int64_t offset = za_images_offset (data, index);
    if (path && offset >= 0)
        snprintf (name, size, "%s@%lld", path, (long long) offset);
    else
    if (path)
        snprintf (name, size, "%s", path);
    else
        snprintf (name, size, "%lld", (long long) index);
}

static int
s_write (void *arg, int64_t index, const float *logits, int n_classes, int class_id)
{
    s_writer_t *self = (s_writer_t *) arg;
    char name [PATH_CHARS + 32], buffer [NAME_CHARS];
    s_example_name (self, index, name, sizeof name);
    //  The softmax, from the largest logit for its range.
    double total = 0, top = logits [class_id];
    for (int k = 0; k < n_classes; k++)
        total += exp ((double) logits [k] - top);
    if (self->csv) {
        if (self->written == 0) {
            fputs ("file,class", self->out);
            for (int k = 0; k < n_classes; k++) {
                fputs (",p_", self->out);
                s_csv_field (self->out, s_name (self, k, buffer, 0));
            }
            for (int k = 0; k < n_classes && self->logits; k++) {
                fputs (",logit_", self->out);
                s_csv_field (self->out, s_name (self, k, buffer, 0));
            }
            fputc ('\n', self->out);
        }
        s_csv_field (self->out, name);
        fputc (',', self->out);
        s_csv_field (self->out, s_name (self, class_id, buffer, 0));
        //  --logits: every number to 9 digits, as the JSON lines.
        for (int k = 0; k < n_classes; k++)
            fprintf (self->out, self->logits? ",%.9g": ",%.6g",
                     exp ((double) logits [k] - top) / total);
        for (int k = 0; k < n_classes && self->logits; k++)
            fprintf (self->out, ",%.9g", (double) logits [k]);
        fputc ('\n', self->out);
    }
    else {
        //  (Names that are not UTF-8 with their odd bytes as \xNN: the line
        //  was left out, and counted.)
        char file [4 * sizeof name];
        json_t *probabilities = json_object ();
        for (int k = 0; k < n_classes; k++)
            json_object_set_new (probabilities, s_name (self, k, buffer, 1),
                                 json_real (exp ((double) logits [k] - top) / total));
        json_t *line = json_pack ("{s:s, s:s, s:i, s:o}", "file",
                                  s_utf8 (name, file, sizeof file), "class",
                                  s_name (self, class_id, buffer, 1), "class_id", class_id,
                                  "probabilities", probabilities);
        json_t *values = self->logits? json_array (): NULL;
        for (int k = 0; values && k < n_classes; k++)
            json_array_append_new (values, json_real ((double) logits [k]));
        if (line && values)
            json_object_set_new (line, "logits", values);
        else
            json_decref (values);
        char *text = line? json_dumps (line, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                             JSON_REAL_PRECISION (self->logits? 9: 6)): NULL;
        if (text)
            fprintf (self->out, "%s\n", text);
        free (text);
        json_decref (line);
        if (!text) {
            self->failed = ENOMEM;
            return 1;
        }
    }
    self->written++;
    if (ferror (self->out)) {
        self->failed = errno? errno: EIO;
        return 1;
    }
    return 0;
}

int
za_predict_run (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    if (!s->run.model_dir || !*s->run.model_dir) {
        za_error ("predict: give --model-dir, the folder training wrote its checkpoints to");
        return ZA_EXIT_USAGE;
    }
    if (s->data) {                      //  the images are the model's input
        s->train_data = s->data;
        s->eval_data = s->data;
    }
    else
    if (s->train_data) {
        za_error ("predict: give --data SPEC, the images to predict");
        return ZA_EXIT_USAGE;
    }
    za_task_t task;
    int rc = za_task_prepare (&task, program, options, s, 1, 1);
    //  A plain file is written beside it and takes its name once whole: a
    //  run that fails (a bad --checkpoint) leaves the one there as it was.
    //  Anything else (a pipe, /dev/stdout, a link) is written as it is.
    FILE *out = NULL;
    struct stat st;
    int to_stdout = streq (s->output, "-");
    int beside = !to_stdout && (lstat (s->output, &st) ? errno == ENOENT: S_ISREG (st.st_mode));
    char temp [PATH_CHARS + 32];
    snprintf (temp, sizeof temp, "%s.%d.tmp", beside? s->output: "", (int) getpid ());
    const char *path = beside? temp: s->output;
    if (!rc && !(out = to_stdout? stdout: fopen (path, "w"))) {
        za_error ("predict: cannot write %s: %s", path, strerror (errno));
        rc = ZA_EXIT_USAGE;
    }
    za_run_config_t run = za_settings_run_config (s);
    run.progress = 0;
    za_estimator_t *estimator = rc? NULL: za_estimator_new (task.model_fn, task.params,
                                                             task.input, NULL, &run);
    s_writer_t writer = {.task = &task, .out = out, .csv = streq (s->format, "csv"),
                         .logits = s->logits};
    s_names (&writer, s->class_names);
    int64_t predicted = -1;
    if (estimator)
        predicted = za_estimator_predict_from (estimator, s->checkpoint, za_task_input, &task,
                                               s_write, &writer);
    if (out && out != stdout && fclose (out) && !writer.failed)
        writer.failed = errno;
    if (beside && out && !rc && predicted >= 0 && !writer.failed && rename (temp, s->output))
        writer.failed = errno;
    if (beside && out)
        unlink (temp);                  //  (gone when renamed)
    if (!rc && predicted < 0)
        rc = 1;
    else
    if (!rc && writer.failed) {
        za_error ("predict: writing %s failed: %s", s->output, strerror (writer.failed));
        rc = 1;
    }
    else
    if (!rc) {
        char skipped [96] = "";
        int64_t bad = za_images_bad (task.eval);
        if (bad)
            snprintf (skipped, sizeof skipped, "; %lld could not be decoded (named above)",
                      (long long) bad);
        za_info ("predicted %lld examples with the checkpoint of step %lld into %s%s",
                 (long long) predicted, (long long) za_estimator_global_step (estimator),
                 streq (s->output, "-")? "standard output": s->output, skipped);
    }
    if (out == stdout)
        fflush (stdout);
    za_estimator_destroy (&estimator);
    for (int k = 0; k < writer.n_names; k++)
        free (writer.names [k]), free (writer.json_names [k]);
    free (writer.names);
    free (writer.json_names);
    za_task_release (&task);
    return rc;
}
