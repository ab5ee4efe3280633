/*  test_onnx.c: models that leave zactor as ONNX, and ONNX weights that come
    in. Every premade model (cnn, dnn, linear, vgg16) and stacks with every
    layer type export from a checkpoint; Debian's python3-onnx checks each
    file (checker with full_check, strict shape inference), its initializers
    are the checkpoint's bit for bit (read back by zactor's reader and by
    onnx's), and tests/check_onnx.py, evaluating the graph node by node in
    numpy, gets zactor's logits from the same real Fashion-MNIST pixels. A
    PyTorch export (tests/data/torch_small.onnx) warm-starts zactor to
    PyTorch's logits. Damaged and foreign files get one error each, and the
    good file after them loads exactly.                                     */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "za/za_checkpoint.h"
#include "za/za_export.h"
#include "za/za_kernels.h"
#include "za/za_model.h"
#include "za/za_onnx.h"
#include "za/za_predictor.h"
#include "za/za_util.h"
#include "za/za_warm_start.h"
#include "za_test.h"

#define IMAGES 4
#define STEP 7

//  A model with its variables, made from a stack text.
typedef struct {
    za_stack_spec_t spec;
    za_input_shape_t input;
    za_vars_t vars;
    float *values;
    void *state;
} s_model_t;

static void
s_model_new (s_model_t *m, const char *text, za_input_shape_t input, uint64_t seed)
{
    memset (m, 0, sizeof *m);
    cr_assert_eq (za_stack_parse (text, &m->spec), 0, "%s: %s", text, za_last_error ());
    m->input = input;
    m->state = za_stack_model_fn ()->create (&m->spec, input, IMAGES, za_backend_cpu (),
                                             &m->vars);
    cr_assert_not_null (m->state, "%s", za_last_error ());
    m->values = calloc (m->vars.total, sizeof (float));
    za_stack_model_fn ()->init_vars (m->state, &m->vars, m->values, seed);
    //  Biases too, so that a bias in the wrong place shows.
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    for (int v = 0; v < m->vars.count; v++)
        if (m->vars.vars [v].ndim == 1)
            for (size_t k = 0; k < m->vars.vars [v].size; k++)
                m->values [m->vars.vars [v].offset + k] = za_rng_uniform (&rng) * 0.2f - 0.1f;
}

static void
s_model_free (s_model_t *m)
{
    za_stack_model_fn ()->destroy (&m->state);
    free (m->values);
}

//  Writes the model's variables as the checkpoint of STEP in dir.
static char *
s_checkpoint (const s_model_t *m, const char *dir)
{
    za_ckpt_tensor_t tensors [ZA_MAX_VARS];
    for (int v = 0; v < m->vars.count; v++) {
        const za_var_t *var = &m->vars.vars [v];
        tensors [v] = (za_ckpt_tensor_t) {.name = var->name, .dtype = ZA_DTYPE_F32,
                                          .ndim = var->ndim, .data = m->values + var->offset};
        memcpy (tensors [v].shape, var->shape, sizeof var->shape);
    }
    za_ckpt_meta_t meta [] = {{"model", m->spec.text}, {"model_fn", "layer_stack"}};
    cr_assert_eq (za_checkpoint_write_atomic (dir, STEP, tensors, m->vars.count, meta, 2, 5), 0,
                  "%s", za_last_error ());
    return za_checkpoint_path (dir, STEP);
}

//  IMAGES real Fashion-MNIST test images as H x W x C pixels 0 .. 255: the
//  28 x 28 image cut or padded (with 0) to H x W about its centre, its
//  channels three different functions of its gray (so that a wrong channel
//  order shows).
static float *
s_pixels (za_input_shape_t in)
{
    za_dataset_t *data = za_test_fashion ("t10k", IMAGES);
    size_t row = (size_t) in.height * in.width * in.channels;
    float *pixels = calloc (IMAGES * row, sizeof (float));
    for (int i = 0; i < IMAGES; i++)
        for (int y = 0; y < in.height; y++)
            for (int x = 0; x < in.width; x++) {
                int sy = y + (28 - in.height) / 2, sx = x + (28 - in.width) / 2;
                float gray = 0;
                if (sy >= 0 && sy < 28 && sx >= 0 && sx < 28) {
                    size_t at = (size_t) i * 784 + (size_t) sy * 28 + (size_t) sx;
                    gray = data->pixels? data->pixels [at]
                                       : roundf (data->features [at] * 255.0f);
                }
                for (int c = 0; c < in.channels; c++) {
                    float value = c == 0? gray: c == 1? 255.0f - gray: floorf (gray / 2.0f);
                    pixels [(size_t) i * row + ((size_t) y * in.width + x) * in.channels + c]
                        = value;
                }
            }
    za_dataset_destroy (&data);
    return pixels;
}

//  The model's logits of the pixels, preprocessed as zactor's input does.
static float *
s_logits (const s_model_t *m, const float *pixels, za_preprocess_t mode)
{
    int channels = m->input.channels;
    size_t row = (size_t) m->input.height * m->input.width * channels;
    float *features = malloc (IMAGES * row * sizeof (float));
    for (size_t p = 0; p < IMAGES * row; p += (size_t) channels)
        for (int k = 0; k < channels; k++) {
            int from;
            float scale, offset;
            za_preprocess_channel (mode, channels, k, &from, &scale, &offset);
            float value = pixels [p + (size_t) from] / ZA_DATASET_PIXEL_MAX;
            features [p + (size_t) k] = mode == ZA_PREPROCESS_NONE? value
                                                                  : value * scale + offset;
        }
    za_spec_t spec;
    cr_assert_eq (za_stack_model_fn ()->model_fn (m->state, features, NULL, IMAGES,
                                                  ZA_MODE_PREDICT, m->values, NULL, 0,
                                                  &spec), 0, "%s", za_last_error ());
    float *logits = malloc ((size_t) IMAGES * spec.n_classes * sizeof (float));
    memcpy (logits, spec.logits, (size_t) IMAGES * spec.n_classes * sizeof (float));
    free (features);
    return logits;
}

static void
s_write_floats (const char *path, const float *values, size_t count)
{
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (values, sizeof (float), count, file), count);
    fclose (file);
}

//  1 when name is a model's variable (a layer's kernel or bias), not an
//  optimizer's slot or the step.
static int
s_is_variable (const char *name)
{
    size_t length = strlen (name);
    return (length > 7 && !strcmp (name + length - 7, "/kernel"))
        || (length > 5 && !strcmp (name + length - 5, "/bias"));
}

//  Every variable of the checkpoint is an initializer of the file, bit for
//  bit.
static void
s_expect_initializers (const char *onnx_path, const char *ckpt_path)
{
    za_safetensors_t *file = za_onnx_load_initializers (onnx_path);
    cr_assert_not_null (file, "%s", za_last_error ());
    za_checkpoint_t *ckpt = za_checkpoint_load (ckpt_path);
    cr_assert_not_null (ckpt);
    int checked = 0;
    for (int i = 0; i < za_checkpoint_tensor_count (ckpt); i++) {
        const za_ckpt_tensor_t *t = za_checkpoint_tensor (ckpt, i);
        if (!s_is_variable (t->name))
            continue;
        checked++;
        int index = za_safetensors_find (file, t->name);
        cr_assert_geq (index, 0, "%s: no initializer %s", onnx_path, t->name);
        int64_t shape [ZA_SAFETENSORS_MAX_DIMS];
        cr_assert_eq (za_safetensors_shape (file, index, shape), t->ndim);
        size_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            cr_assert_eq (shape [d], t->shape [d], "%s dim %d", t->name, d);
            count *= (size_t) t->shape [d];
        }
        cr_assert_str_eq (za_safetensors_dtype (file, index), "F32");
        float *values = malloc (count * sizeof (float) + 1);
        cr_assert_eq (za_safetensors_floats (file, index, values), 0);
        cr_assert_eq (memcmp (values, t->data, count * sizeof (float)), 0,
                      "%s: initializer %s is not the checkpoint's bit for bit", onnx_path,
                      t->name);
        free (values);
    }
    cr_expect_gt (checked, 0, "%s holds no variable", ckpt_path);
    cr_expect_str_eq (za_safetensors_meta (file, "producer_name"), "zactor");
    za_checkpoint_destroy (&ckpt);
    za_safetensors_destroy (&file);
}

typedef struct {
    const char *name;
    const char *text;                   //  NULL: a premade spec made in the test
    za_input_shape_t input;
    za_preprocess_t preprocess;
} s_case_t;

//  Exports one model and checks it on both sides.
static void
s_export_and_check (const s_case_t *c, const char *text)
{
    s_model_t m;
    s_model_new (&m, text, c->input, 42);
    char *dir = za_test_path (c->name);
    char *ckpt = s_checkpoint (&m, dir);
    char onnx_path [4200], pixels_path [4200], logits_path [4200];
    snprintf (onnx_path, sizeof onnx_path, "%s/model.onnx", dir);
    snprintf (pixels_path, sizeof pixels_path, "%s/pixels.f32", dir);
    snprintf (logits_path, sizeof logits_path, "%s/logits.f32", dir);
    za_checkpoint_t *loaded = za_checkpoint_load (ckpt);
    za_export_config_t config = {.input = c->input, .preprocess = c->preprocess,
                                 .softmax = 1, .class_names = "a,b,c"};
    cr_assert_eq (za_export_onnx (za_checkpoint_meta (loaded, "model"), loaded, &config,
                                  onnx_path), 0, "%s: %s", c->name, za_last_error ());
    za_checkpoint_destroy (&loaded);
    s_expect_initializers (onnx_path, ckpt);

    float *pixels = s_pixels (c->input);
    float *logits = s_logits (&m, pixels, c->preprocess);
    size_t row = (size_t) c->input.height * c->input.width * c->input.channels;
    s_write_floats (pixels_path, pixels, IMAGES * row);
    int classes = m.spec.layers [m.spec.count - 1].units;
    s_write_floats (logits_path, logits, (size_t) IMAGES * classes);
    char n [16], h [16], w [16], ch [16];
    snprintf (n, sizeof n, "%d", IMAGES);
    snprintf (h, sizeof h, "%d", c->input.height);
    snprintf (w, sizeof w, "%d", c->input.width);
    snprintf (ch, sizeof ch, "%d", c->input.channels);
    const char *args [] = {ZA_SOURCE_DIR "/tests/check_onnx.py", onnx_path, ckpt, pixels_path,
                           logits_path, n, h, w, ch, NULL};
    za_test_result_t result = za_test_run_program ("/usr/bin/python3", args, 600);
    printf ("%s: %s", c->name, result.out);
    cr_expect_eq (result.exit_code, 0, "%s (python3-onnx): %s%s", c->name, result.out,
                  result.err);
    za_test_result_free (&result);
    free (pixels), free (logits), free (ckpt), free (dir);
    s_model_free (&m);
}

Test (onnx, every_premade_model_and_layer_exports, .timeout = 1200)
{
    za_test_dir_create ("za_onnx");
    za_stack_spec_t dnn, linear;
    int hidden [] = {64, 32};
    cr_assert_eq (za_dnn_classifier_spec (&dnn, hidden, 2, 10), 0);
    cr_assert_eq (za_linear_classifier_spec (&linear, 10), 0);
    s_case_t cases [] = {
        {"cnn", ZA_SEED_CNN, {28, 28, 1}, ZA_PREPROCESS_NONE},
        {"dnn", dnn.text, {28, 28, 1}, ZA_PREPROCESS_TF},
        {"linear", linear.text, {28, 28, 1}, ZA_PREPROCESS_NONE},
        {"vgg16", "vgg16 globalavgpool dense(10)", {32, 32, 3}, ZA_PREPROCESS_CAFFE},
        //  Every layer type; SAME padding with strides, a pool whose stride is
        //  not its window, a non-square input, RGB reordered.
        {"every_layer", "conv2d(8,3,relu,same) conv2d(8,3,stride=2,padding=same) relu "
                        "maxpool(3,2) dropout(0.3) conv2d(12,3,padding=same) globalavgpool "
                        "dense(16,relu) dropout(0.2) dense(5)", {21, 19, 3},
                        ZA_PREPROCESS_TORCH},
        //  flatten of a map in zactor's H, W, C order; 2 channels.
        {"flatten", "conv2d(6,5,stride=2,relu) maxpool(2) flatten dense(12,relu) dense(4)",
                    {17, 23, 2}, ZA_PREPROCESS_CAFFE},
        //  a dense layer's own flattening of a map, and a 1 x 1 x C input.
        {"dense_of_map", "conv2d(4,3) dense(3)", {9, 9, 1}, ZA_PREPROCESS_NONE},
        {"vector", "dense(8,relu) dense(2)", {1, 1, 6}, ZA_PREPROCESS_TF},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases [0]; k++)
        s_export_and_check (&cases [k], cases [k].text);
    za_test_dir_remove ();
}

//  A good exported file's bytes, for the damaged copies.
static void *
s_good_file (const char *dir, size_t *size, char **onnx_path)
{
    s_model_t m;
    s_model_new (&m, ZA_SEED_CNN, (za_input_shape_t) {28, 28, 1}, 3);
    char *ckpt = s_checkpoint (&m, dir);
    *onnx_path = za_test_join (dir, "good.onnx");
    za_checkpoint_t *loaded = za_checkpoint_load (ckpt);
    za_export_config_t config = {.input = {28, 28, 1}, .softmax = 1};
    cr_assert_eq (za_export_onnx (za_checkpoint_meta (loaded, "model"), loaded, &config,
                                  *onnx_path), 0, "%s", za_last_error ());
    za_checkpoint_destroy (&loaded);
    s_model_free (&m);
    free (ckpt);
    return za_test_read_file (*onnx_path, size);
}

static void
s_write_bytes (const char *path, const void *bytes, size_t size)
{
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (bytes, 1, size, file), size);
    fclose (file);
}

//  The bad file gets one error holding `says`; the good file after it loads
//  whole, and warm-starts the seed CNN with its values.
static void
s_expect_refused (const char *bad, const char *says, const char *good, const char *ckpt_path)
{
    za_error_set_quiet (1);
    za_safetensors_t *file = za_onnx_load_initializers (bad);
    za_error_set_quiet (0);
    cr_expect_null (file, "%s loaded", bad);
    cr_expect (strstr (za_last_error (), says), "%s: the error '%s' does not say '%s'", bad,
               za_last_error (), says);
    cr_expect (strstr (za_last_error (), bad), "the error does not name the file");
    za_safetensors_destroy (&file);
    //  Warm start from it: the same error, nothing loaded.
    za_vars_t vars = {0};
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0);
    void *state = za_stack_model_fn ()->create (&spec, (za_input_shape_t) {28, 28, 1}, 1,
                                                za_backend_cpu (), &vars);
    float *values = calloc (vars.total, sizeof (float));
    za_warm_start_t ws = {.from = bad};
    za_error_set_quiet (1);
    cr_expect_eq (za_warm_start_load (&ws, &vars, values), -1);
    za_error_set_quiet (0);
    cr_expect (strstr (za_last_error (), says), "warm start: '%s'", za_last_error ());
    //  The good file after it: every variable, exactly.
    s_expect_initializers (good, ckpt_path);
    ws.from = good;
    cr_expect_eq (za_warm_start_load (&ws, &vars, values), vars.count, "%s",
                  za_last_error ());
    za_checkpoint_t *ckpt = za_checkpoint_load (ckpt_path);
    for (int v = 0; v < vars.count; v++)
        cr_expect_eq (memcmp (values + vars.vars [v].offset,
                              za_checkpoint_find (ckpt, vars.vars [v].name)->data,
                              vars.vars [v].size * sizeof (float)), 0, "%s",
                      vars.vars [v].name);
    za_checkpoint_destroy (&ckpt);
    free (values);
    za_stack_model_fn ()->destroy (&state);
}

//  A hand-made ModelProto: ir_version 8 and a graph of one initializer
//  `w` of dims {3}, FLOAT, with `payload` as its last field.
static size_t
s_tiny_model (uint8_t *out, const uint8_t *payload, size_t payload_size)
{
    uint8_t tensor [256], graph [300];
    size_t t = 0, g = 0, m = 0;
    tensor [t++] = 0x08, tensor [t++] = 3;                  //  dims 3
    tensor [t++] = 0x10, tensor [t++] = 1;                  //  data_type FLOAT
    tensor [t++] = 0x42, tensor [t++] = 1, tensor [t++] = 'w';      //  name
    memcpy (tensor + t, payload, payload_size);
    t += payload_size;
    graph [g++] = 0x2a, graph [g++] = (uint8_t) t;          //  initializer
    memcpy (graph + g, tensor, t);
    g += t;
    out [m++] = 0x08, out [m++] = 8;                        //  ir_version
    out [m++] = 0x3a, out [m++] = (uint8_t) g;              //  graph
    memcpy (out + m, graph, g);
    return m + g;
}

Test (onnx, damaged_and_foreign_files_get_one_error_and_the_next_loads, .timeout = 300)
{
    const char *dir = za_test_dir_create ("za_onnx_bad");
    size_t size;
    char *good;
    uint8_t *bytes = s_good_file (dir, &size, &good);
    char *ckpt = za_checkpoint_path (dir, STEP);
    char *bad = za_test_join (dir, "bad.onnx");

    //  Cut short in the middle of the weights.
    s_write_bytes (bad, bytes, size / 2);
    s_expect_refused (bad, "truncated", good, ckpt);
    //  Nothing.
    s_write_bytes (bad, "", 0);
    s_expect_refused (bad, "empty", good, ckpt);
    //  Not protobuf: a JPEG's first bytes.
    static const uint8_t jpeg [] = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F'};
    s_write_bytes (bad, jpeg, sizeof jpeg);
    s_expect_refused (bad, "not an ONNX model", good, ckpt);
    //  A safetensors file named .onnx.
    char *st = za_test_read_file (ckpt, &size);
    s_write_bytes (bad, st, size);
    free (st);
    s_expect_refused (bad, "not an ONNX model", good, ckpt);
    //  A tensor of 3 floats whose raw_data holds 2.
    uint8_t model [400];
    static const uint8_t short_raw [] = {0x4a, 8, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};
    s_write_bytes (bad, model, s_tiny_model (model, short_raw, sizeof short_raw));
    s_expect_refused (bad, "'w' holds another count of bytes", good, ckpt);
    //  External data outside the model's folder.
    static const uint8_t outside [] = {
        0x6a, 17, 0x0a, 8, 'l', 'o', 'c', 'a', 't', 'i', 'o', 'n',
                  0x12, 5, '.', '.', '/', 'x', 'y',
        0x70, 1};
    s_write_bytes (bad, model, s_tiny_model (model, outside, sizeof outside));
    s_expect_refused (bad, "not a file in the model's folder", good, ckpt);
    //  A missing file.
    char *missing = za_test_join (dir, "missing.onnx");
    za_error_set_quiet (1);
    cr_expect_null (za_onnx_load_initializers (missing));
    za_error_set_quiet (0);
    cr_expect (strstr (za_last_error (), "cannot open"), "%s", za_last_error ());
    s_expect_initializers (good, ckpt);
    //  The same 3 floats, whole, as float_data, load (the typed field).
    static const uint8_t floats [] = {0x22, 12, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40,
                                      0x40};
    s_write_bytes (bad, model, s_tiny_model (model, floats, sizeof floats));
    za_safetensors_t *file = za_onnx_load_initializers (bad);
    cr_assert_not_null (file, "%s", za_last_error ());
    float values [3];
    cr_assert_eq (za_safetensors_floats (file, za_safetensors_find (file, "w"), values), 0);
    cr_expect (values [0] == 1.0f && values [1] == 2.0f && values [2] == 3.0f);
    za_safetensors_destroy (&file);
    //  And as external data in a file beside the model (torch.onnx.export's
    //  way for large models), 4 bytes in.
    static const uint8_t beside [] = {
        0x6a, 17, 0x0a, 8, 'l', 'o', 'c', 'a', 't', 'i', 'o', 'n', 0x12, 5, 'w', '.', 'b', 'i', 'n',
        0x6a, 11, 0x0a, 6, 'o', 'f', 'f', 's', 'e', 't', 0x12, 1, '4',
        0x70, 1};
    char *data_path = za_test_join (dir, "w.bin");
    s_write_bytes (data_path, "skip" "\x00\x00\x80\x3f" "\x00\x00\x00\x40" "\x00\x00\x40\x40", 16);
    s_write_bytes (bad, model, s_tiny_model (model, beside, sizeof beside));
    file = za_onnx_load_initializers (bad);
    cr_assert_not_null (file, "%s", za_last_error ());
    memset (values, 0, sizeof values);
    cr_assert_eq (za_safetensors_floats (file, za_safetensors_find (file, "w"), values), 0);
    cr_expect (values [0] == 1.0f && values [1] == 2.0f && values [2] == 3.0f);
    za_safetensors_destroy (&file);
    //  ... and refused when that file is shorter than the tensor.
    s_write_bytes (data_path, "skip", 4);
    s_expect_refused (bad, "holds no 12 bytes at 4", good, ckpt);
    free (data_path);

    free (missing), free (bad), free (ckpt), free (good), free (bytes);
    za_test_dir_remove ();
}

Test (onnx, export_refuses_what_it_cannot_write, .timeout = 120)
{
    const char *dir = za_test_dir_create ("za_onnx_refuse");
    size_t size;
    char *good;
    free (s_good_file (dir, &size, &good));
    char *ckpt_path = za_checkpoint_path (dir, STEP);
    za_checkpoint_t *ckpt = za_checkpoint_load (ckpt_path);
    char *out = za_test_join (dir, "out.onnx");
    za_export_config_t config = {.input = {32, 32, 1}, .softmax = 1};
    za_error_set_quiet (1);
    //  Another input shape than the training's: the dense kernel says so.
    cr_expect_eq (za_export_onnx (za_checkpoint_meta (ckpt, "model"), ckpt, &config, out), -1);
    cr_expect (strstr (za_last_error (), "--input-shape"), "%s", za_last_error ());
    //  Not a layer stack.
    config.input = (za_input_shape_t) {28, 28, 1};
    cr_expect_eq (za_export_onnx ("my_model_fn", ckpt, &config, out), -1);
    cr_expect (strstr (za_last_error (), "not a layer stack"), "%s", za_last_error ());
    //  Another stack than the checkpoint's.
    cr_expect_eq (za_export_onnx ("dense(10)", ckpt, &config, out), -1);
    cr_expect (strstr (za_last_error (), "has no 'dense/kernel'")
               || strstr (za_last_error (), "'dense/kernel'"), "%s", za_last_error ());
    za_error_set_quiet (0);
    struct stat st;
    cr_expect_neq (stat (out, &st), 0, "a failed export left %s", out);
    //  The same checkpoint with the right shape writes.
    cr_expect_eq (za_export_onnx (za_checkpoint_meta (ckpt, "model"), ckpt, &config, out), 0);

    //  zactor-ckpt export as a process: the model dir's newest, and mistakes.
    char *written = za_test_join (dir, "cli.onnx");
    const char *args [] = {"export", "--format", "onnx", "-o", written, dir, NULL};
    za_test_result_t result = za_test_run_program ("zactor-ckpt", args, 60);
    cr_expect_eq (result.exit_code, 0, "%s%s", result.out, result.err);
    cr_expect (strstr (result.out, "exported step 7"), "%s", result.out);
    za_test_result_free (&result);
    s_expect_initializers (written, ckpt_path);
    const char *wrong_format [] = {"export", "--format", "savedmodel", dir, NULL};
    result = za_test_run_program ("zactor-ckpt", wrong_format, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "onnx"), "%s", result.err);
    za_test_result_free (&result);
    //  A shape of two sides, and one whose side overflowed an int (it
    //  exported "1215752191x2"): refused.
    const char *shapes [] = {"28x28", "99999999999x2x1"};
    for (int k = 0; k < 2; k++) {
        const char *wrong_shape [] = {"export", "--input-shape", shapes [k], dir, NULL};
        result = za_test_run_program ("zactor-ckpt", wrong_shape, 60);
        cr_expect_eq (result.exit_code, 2, "%s: %s", shapes [k], result.err);
        cr_expect (strstr (result.err, "HxWxC"), "%s", result.err);
        za_test_result_free (&result);
    }
    //  A second target is said as such (not "not an option").
    const char *two [] = {"export", dir, dir, NULL};
    result = za_test_run_program ("zactor-ckpt", two, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "export takes one checkpoint or model dir"), "%s",
               result.err);
    za_test_result_free (&result);
    //  --input-shape is the graph's: input.json's image size is not said
    //  beside it (without it, it is).
    char *input_json = za_test_join (dir, "input.json");
    FILE *f = fopen (input_json, "w");
    cr_assert_not_null (f);
    fputs ("{\"image_size\": \"28\", \"channels\": 1}\n", f);
    fclose (f);
    for (int given = 0; given < 2; given++) {
        const char *shaped [] = {"export", "-o", written, dir, given? "--input-shape": NULL,
                                 "28x28x1", NULL};
        result = za_test_run_program ("zactor-ckpt", shaped, 60);
        cr_expect_eq (result.exit_code, 0, "%s", result.err);
        za_test_result_free (&result);
        za_safetensors_t *exported = za_onnx_load_initializers (written);
        cr_assert_not_null (exported, "%s", za_last_error ());
        const char *said = za_safetensors_meta (exported, "image_size");
        if (given)
            cr_expect_null (said, "image_size %s beside --input-shape", said);
        else
            cr_expect (said && !strcmp (said, "28"), "image_size %s", said? said: "none");
        za_safetensors_destroy (&exported);
    }
    remove (input_json);
    free (input_json);
    //  --help after any command is the help (ls took it for a model dir).
    const char *commands [] = {"export", "ls", "show"};
    for (int c = 0; c < 3; c++) {
        const char *help [] = {commands [c], "--help", NULL};
        result = za_test_run_program ("zactor-ckpt", help, 60);
        cr_expect_eq (result.exit_code, 0, "%s --help: %s", commands [c], result.err);
        cr_expect (strstr (result.out, "--input-shape"), "%s", result.out);
        za_test_result_free (&result);
    }
    const char *no_ckpt [] = {"export", ZA_SOURCE_DIR "/docs", NULL};
    result = za_test_run_program ("zactor-ckpt", no_ckpt, 60);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "no checkpoint"), "%s", result.err);
    za_test_result_free (&result);

    free (written), free (out), free (ckpt_path), free (good);
    za_checkpoint_destroy (&ckpt);
    za_test_dir_remove ();
}

Test (onnx, a_pytorch_export_warm_starts_to_pytorchs_logits, .timeout = 120)
{
    json_error_t error;
    json_t *fixture = json_load_file (ZA_SOURCE_DIR "/tests/data/torch_small.json", 0, &error);
    cr_assert_not_null (fixture, "%s", error.text);
    const char *text = json_string_value (json_object_get (fixture, "model"));
    s_model_t m;
    s_model_new (&m, text, (za_input_shape_t) {28, 28, 1}, 1);
    memset (m.values, 0, m.vars.total * sizeof (float));
    za_warm_start_t ws = {
        .from = ZA_SOURCE_DIR "/tests/data/torch_small.onnx",
        .rename = json_string_value (json_object_get (fixture, "rename")),
        .layout = ZA_LAYOUT_TORCH,
    };
    cr_assert_eq (za_warm_start_load (&ws, &m.vars, m.values), m.vars.count, "%s",
                  za_last_error ());
    float *pixels = s_pixels (m.input);
    float *logits = s_logits (&m, pixels, ZA_PREPROCESS_NONE);
    json_t *expected = json_object_get (fixture, "logits");
    double worst = 0;
    for (int i = 0; i < IMAGES; i++)
        for (int k = 0; k < 10; k++) {
            double want = json_real_value (json_array_get (json_array_get (expected, (size_t) i),
                                                           (size_t) k));
            double diff = fabs (logits [i * 10 + k] - want);
            worst = diff > worst? diff: worst;
        }
    printf ("torch_small.onnx (torch %s) in zactor: largest logit difference %.3g\n",
            json_string_value (json_object_get (fixture, "torch")), worst);
    cr_expect_leq (worst, 1e-4, "zactor's logits are %.3g from PyTorch's", worst);
    free (pixels), free (logits);
    s_model_free (&m);
    json_decref (fixture);
}

Test (onnx, the_evaluator_exports_its_best_as_onnx_too, .timeout = 600)
{
    const char *dir = za_test_dir_create ("za_onnx_best");
    char *model = za_test_join (dir, "run");
    const char *args [] = {"--max-steps", "200", "--model-dir", model,
                           "--save-checkpoints-steps", "100", "--train-and-evaluate",
                           "--start-delay-secs", "0", "--throttle-secs", "0", "--export-onnx",
                           NULL};
    za_test_result_t result = za_test_run (args, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    //  The best checkpoint, named by best.json, and model.onnx beside it:
    //  the same tensors, bit for bit.
    char *best = za_test_join (model, "export/best/best.json");
    json_error_t error;
    json_t *json = json_load_file (best, 0, &error);
    cr_assert_not_null (json, "%s", error.text);
    char ckpt [4200], onnx [4200];
    snprintf (ckpt, sizeof ckpt, "%s/export/best/%s", model,
              json_string_value (json_object_get (json, "checkpoint")));
    snprintf (onnx, sizeof onnx, "%s/export/best/model.onnx", model);
    s_expect_initializers (onnx, ckpt);
    //  A model of its own: the predictor loads the folder.
    char *folder = za_test_join (model, "export/best");
    za_predictor_t *predictor = za_predictor_new (folder, NULL);
    cr_expect_not_null (predictor, "%s", za_last_error ());
    cr_expect_eq (za_predictor_step (predictor),
                  json_integer_value (json_object_get (json, "global_step")));
    za_predictor_destroy (&predictor);
    json_decref (json);
    free (folder), free (best), free (model);
    za_test_dir_remove ();
}
