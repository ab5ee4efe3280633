/*  za_export.c: a layer stack and its checkpoint as an ONNX graph. The
    graph keeps zactor's NHWC between layers that need no other (the
    preprocessing, flatten, dense) and goes to NCHW, ONNX's, for the
    convolutions and pools, transposing only where the layout changes.      */
#include "za/za_export.h"
#include "za/za_onnx.h"
#include "za/za_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ZA_VERSION_TEXT
#define ZA_VERSION_TEXT "0"
#endif

#define PATH_CHARS 4096
#define NAME_CHARS 96
#define BASE_CHARS 40                   //  a layer's name: conv2d_12

// ---------------------------------------------------------------------------
//  What a model dir says of its input

static int
s_parse_size (const char *text, za_input_shape_t *input)
{
    int h = 0, w = 0;
    char tail;
    int n = sscanf (text, "%d,%d%c", &h, &w, &tail);
    if (n == 1)
        w = h;
    if ((n != 1 && n != 2) || h <= 0 || w <= 0)
        return -1;
    input->height = h, input->width = w;
    return 0;
}

int
za_export_config_load (const char *model_dir, za_export_config_t *config, void **json)
{
    memset (config, 0, sizeof *config);
    *json = NULL;
    config->input = (za_input_shape_t) {28, 28, 1};
    config->preprocess = ZA_PREPROCESS_NONE;
    config->softmax = 1;
    char path [PATH_CHARS];
    snprintf (path, sizeof path, "%s/input.json", model_dir);
    if (access (path, F_OK))
        return 0;                       //  trained from IDX files
    json_error_t error;
    json_t *root = json_load_file (path, 0, &error);
    if (!json_is_object (root)) {
        json_decref (root);
        return za_error ("%s: not a JSON object (%s)", path, root? "another value": error.text);
    }
    const char *size = json_string_value (json_object_get (root, "image_size"));
    const char *preprocess = json_string_value (json_object_get (root, "preprocess"));
    json_int_t channels = json_integer_value (json_object_get (root, "channels"));
    if ((size && s_parse_size (size, &config->input))
    ||  (preprocess && za_preprocess_parse (preprocess) < 0)
    ||  channels < 0 || channels > 64) {
        json_decref (root);
        return za_error ("%s: its image_size, channels or preprocess is not one zactor wrote "
                         "(give --input-shape and --preprocess)", path);
    }
    if (channels)
        config->input.channels = (int) channels;
    if (preprocess)
        config->preprocess = (za_preprocess_t) za_preprocess_parse (preprocess);
    config->class_names = json_string_value (json_object_get (root, "class_names"));
    config->image_size = size;
    config->resize = json_string_value (json_object_get (root, "resize"));
    config->crop_to_aspect_ratio = json_is_true (json_object_get (root,
                                                                  "crop_to_aspect_ratio"));
    *json = root;
    return 0;
}

void
za_export_config_free (void **json)
{
    json_decref ((json_t *) *json);
    *json = NULL;
}

// ---------------------------------------------------------------------------
//  The graph

typedef enum { LAYOUT_NHWC, LAYOUT_NCHW } s_layout_t;

//  One example's shape between two layers.
typedef struct {
    int h, w, c;
} s_shape_t;

typedef struct {
    za_onnx_t *onnx;
    const za_checkpoint_t *ckpt;
    char at [NAME_CHARS];               //  the tensor the next node reads
    s_layout_t layout;
    int flat;                           //  1: `at` is [batch, values], not 4-d
    int seen [ZA_LAYER_TYPE_COUNT];     //  layers of each type so far
    int failed;
} s_graph_t;

//  A node of one output named `output` reading `at` and the others, after
//  which `at` is its output.
static void
s_node (s_graph_t *self, const char *op, const char *output, int count, const char *other1,
        const char *other2)
{
    const char *inputs [3] = {self->at, other1, other2};
    za_onnx_node (self->onnx, op, output, count, inputs, output);
    snprintf (self->at, sizeof self->at, "%s", output);
}

static void
s_transpose (s_graph_t *self, const char *base, s_layout_t to)
{
    if (self->layout == to)
        return;
    static const int64_t to_nchw [4] = {0, 3, 1, 2}, to_nhwc [4] = {0, 2, 3, 1};
    char name [NAME_CHARS];
    snprintf (name, sizeof name, "%s/%s", base, to == LAYOUT_NCHW? "nchw": "nhwc");
    s_node (self, "Transpose", name, 1, NULL, NULL);
    za_onnx_attr_ints (self->onnx, "perm", 4, to == LAYOUT_NCHW? to_nchw: to_nhwc);
    self->layout = to;
    self->flat = 0;
}

//  The checkpoint's variable `name` as an initializer, checked against the
//  shape the stack gives it. 0, or -1 with an error.
static int
s_variable (s_graph_t *self, const char *name, int ndim, const int64_t *shape,
            za_input_shape_t input)
{
    const za_ckpt_tensor_t *t = za_checkpoint_find (self->ckpt, name);
    if (!t)
        return za_error ("export: the checkpoint %s has no '%s' (is it this model's?)",
                         za_checkpoint_filename (self->ckpt), name);
    int same = t->dtype == ZA_DTYPE_F32 && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape [d] == shape [d];
    if (!same) {
        char have [64] = "", want [64] = "";
        for (int d = 0, a = 0; d < t->ndim && a < 60; d++)
            a += snprintf (have + a, sizeof have - (size_t) a, "%s%lld", d? ",": "",
                           (long long) t->shape [d]);
        for (int d = 0, a = 0; d < ndim && a < 60; d++)
            a += snprintf (want + a, sizeof want - (size_t) a, "%s%lld", d? ",": "",
                           (long long) shape [d]);
        return za_error ("export: the checkpoint's '%s' is [%s], an input of %dx%dx%d makes "
                         "it [%s]: give the training's --input-shape HxWxC", name, have,
                         input.height, input.width, input.channels, want);
    }
    za_onnx_initializer (self->onnx, name, ndim, shape, (const float *) t->data);
    return 0;
}

//  The layer's name as its variables are named (conv2d, conv2d_1, ...).
static void
s_base (s_graph_t *self, const za_layer_spec_t *l, const char *type, char *base)
{
    int seen = self->seen [l->type]++;
    if (seen)
        snprintf (base, BASE_CHARS, "%.16s_%d", type, seen);
    else
        snprintf (base, BASE_CHARS, "%.16s", type);
}

static void
s_relu (s_graph_t *self, const char *base)
{
    char name [NAME_CHARS];
    snprintf (name, sizeof name, "%s/relu", base);
    s_node (self, "Relu", name, 1, NULL, NULL);
}

//  The input in zactor's H, W, C order as [batch, H x W x C].
static void
s_flatten (s_graph_t *self, const char *base, s_shape_t in)
{
    if (in.h > 1 || in.w > 1)
        s_transpose (self, base, LAYOUT_NHWC);
    char name [NAME_CHARS];
    snprintf (name, sizeof name, "%s/flat", base);
    s_node (self, "Flatten", name, 1, NULL, NULL);
    za_onnx_attr_int (self->onnx, "axis", 1);
    self->layout = LAYOUT_NHWC;         //  a flat vector is 1 x 1 x C either way
    self->flat = 1;
}

static int
s_conv2d (s_graph_t *self, const za_layer_spec_t *l, const char *base, s_shape_t in,
          za_input_shape_t input)
{
    za_conv2d_dims_t d;
    if (za_conv2d_dims (&d, 1, in.h, in.w, in.c, l->units, l->kernel, l->stride, l->padding))
        return -1;
    char kernel [NAME_CHARS], bias [NAME_CHARS], oihw [NAME_CHARS], out [NAME_CHARS];
    snprintf (kernel, sizeof kernel, "%s/kernel", base);
    snprintf (bias, sizeof bias, "%s/bias", base);
    snprintf (oihw, sizeof oihw, "%s/kernel/oihw", base);
    snprintf (out, sizeof out, "%s/conv", base);
    int64_t kshape [4] = {l->kernel, l->kernel, in.c, l->units}, bshape [1] = {l->units};
    if (s_variable (self, kernel, 4, kshape, input) || s_variable (self, bias, 1, bshape, input))
        return -1;
    static const int64_t hwio_to_oihw [4] = {3, 2, 0, 1};
    const char *from = kernel;
    za_onnx_node (self->onnx, "Transpose", oihw, 1, &from, oihw);
    za_onnx_attr_ints (self->onnx, "perm", 4, hwio_to_oihw);
    s_transpose (self, base, LAYOUT_NCHW);
    //  TensorFlow's SAME: the odd row or column of padding at the end.
    int64_t pad_bottom = (int64_t) (d.oh - 1) * d.stride + d.kh - d.h - d.pad_top;
    int64_t pad_right = (int64_t) (d.ow - 1) * d.stride + d.kw - d.w - d.pad_left;
    int64_t pads [4] = {d.pad_top, d.pad_left, pad_bottom > 0? pad_bottom: 0,
                        pad_right > 0? pad_right: 0};
    int64_t kernel_shape [2] = {d.kh, d.kw}, strides [2] = {d.stride, d.stride};
    s_node (self, "Conv", out, 3, oihw, bias);
    za_onnx_attr_ints (self->onnx, "kernel_shape", 2, kernel_shape);
    za_onnx_attr_ints (self->onnx, "strides", 2, strides);
    za_onnx_attr_ints (self->onnx, "pads", 4, pads);
    if (l->act == ZA_ACT_RELU)
        s_relu (self, base);
    return 0;
}

static int
s_dense (s_graph_t *self, const za_layer_spec_t *l, const char *base, s_shape_t in,
         za_input_shape_t input)
{
    if (!self->flat)
        s_flatten (self, base, in);
    char kernel [NAME_CHARS], bias [NAME_CHARS], out [NAME_CHARS];
    snprintf (kernel, sizeof kernel, "%s/kernel", base);
    snprintf (bias, sizeof bias, "%s/bias", base);
    snprintf (out, sizeof out, "%s/gemm", base);
    int64_t kshape [2] = {(int64_t) in.h * in.w * in.c, l->units}, bshape [1] = {l->units};
    if (s_variable (self, kernel, 2, kshape, input) || s_variable (self, bias, 1, bshape, input))
        return -1;
    s_node (self, "Gemm", out, 3, kernel, bias);
    if (l->act == ZA_ACT_RELU)
        s_relu (self, base);
    return 0;
}

//  The layer's nodes; *out is its output shape. 0, or -1 with an error.
static int
s_layer (s_graph_t *self, const za_layer_spec_t *l, s_shape_t in, s_shape_t *out,
         za_input_shape_t input)
{
    static const char *names [] = {
#define ZA_LAYER_NAME(TYPE, name) #name,
        ZA_LAYER_TYPES (ZA_LAYER_NAME)
#undef ZA_LAYER_NAME
    };
    char base [BASE_CHARS], name [NAME_CHARS];
    s_base (self, l, names [l->type], base);
    *out = in;
    switch (l->type) {
        case ZA_LAYER_CONV2D: {
            za_conv2d_dims_t d;
            if (za_conv2d_dims (&d, 1, in.h, in.w, in.c, l->units, l->kernel, l->stride,
                                l->padding))
                return -1;
            *out = (s_shape_t) {d.oh, d.ow, d.oc};
            return s_conv2d (self, l, base, in, input);
        }
        case ZA_LAYER_MAXPOOL: {
            za_pool2d_dims_t d;
            if (za_pool2d_dims (&d, 1, in.h, in.w, in.c, l->pool, l->stride))
                return -1;
            *out = (s_shape_t) {d.oh, d.ow, in.c};
            s_transpose (self, base, LAYOUT_NCHW);
            int64_t window [2] = {l->pool, l->pool}, strides [2] = {d.stride, d.stride};
            snprintf (name, sizeof name, "%s/pool", base);
            s_node (self, "MaxPool", name, 1, NULL, NULL);
            za_onnx_attr_ints (self->onnx, "kernel_shape", 2, window);
            za_onnx_attr_ints (self->onnx, "strides", 2, strides);
            return 0;
        }
        case ZA_LAYER_GLOBALAVGPOOL:
            *out = (s_shape_t) {1, 1, in.c};
            s_transpose (self, base, LAYOUT_NCHW);
            snprintf (name, sizeof name, "%s/pool", base);
            s_node (self, "GlobalAveragePool", name, 1, NULL, NULL);
            s_flatten (self, base, *out);
            return 0;
        case ZA_LAYER_FLATTEN:
            *out = (s_shape_t) {1, 1, in.h * in.w * in.c};
            s_flatten (self, base, in);
            return 0;
        case ZA_LAYER_DENSE:
            *out = (s_shape_t) {1, 1, l->units};
            return s_dense (self, l, base, in, input);
        case ZA_LAYER_RELU:
            s_relu (self, base);
            return 0;
        case ZA_LAYER_DROPOUT:          //  inference: the identity
            return 0;
        default:
            return za_error ("export: layer type %d has no ONNX form", (int) l->type);
    }
}

//  pixels / 255, then the preprocessing's channel order, scale and offset.
static void
s_preprocess (s_graph_t *self, const za_export_config_t *config)
{
    int64_t scalar_shape [1] = {1};
    float divisor [1] = {ZA_DATASET_PIXEL_MAX};
    za_onnx_initializer (self->onnx, "preprocess/divisor", 0, scalar_shape, divisor);
    s_node (self, "Div", "preprocess/unit", 2, "preprocess/divisor", NULL);
    //  Channels beyond ZA_INPUT_CHANNELS_MAX take channel 0's constants
    //  each, as zactor's input does: one scale and offset for all.
    int channels = config->input.channels;
    int planned = channels > ZA_INPUT_CHANNELS_MAX? 1: channels;
    if (config->preprocess == ZA_PREPROCESS_NONE)
        return;
    int64_t from [ZA_INPUT_CHANNELS_MAX], shape [1] = {planned};
    float scale [ZA_INPUT_CHANNELS_MAX], offset [ZA_INPUT_CHANNELS_MAX];
    int reordered = 0;
    for (int k = 0; k < planned; k++) {
        int c;
        za_preprocess_channel (config->preprocess, channels, k, &c, &scale [k], &offset [k]);
        from [k] = c;
        reordered |= c != k;
    }
    if (reordered) {
        za_onnx_initializer_i64 (self->onnx, "preprocess/channels", 1, shape, from);
        s_node (self, "Gather", "preprocess/bgr", 2, "preprocess/channels", NULL);
        za_onnx_attr_int (self->onnx, "axis", 3);
    }
    za_onnx_initializer (self->onnx, "preprocess/scale", 1, shape, scale);
    za_onnx_initializer (self->onnx, "preprocess/offset", 1, shape, offset);
    s_node (self, "Mul", "preprocess/scaled", 2, "preprocess/scale", NULL);
    s_node (self, "Add", "preprocess/input", 2, "preprocess/offset", NULL);
}

int
za_export_onnx (const char *model_text, const za_checkpoint_t *ckpt,
                const za_export_config_t *config, const char *path)
{
    za_stack_spec_t spec;
    if (!model_text || !*model_text)
        return za_error ("export: the checkpoint %s names no model: only a layer stack or "
                         "premade model exports", za_checkpoint_filename (ckpt));
    if (za_stack_parse (model_text, &spec))
        return za_error ("export: the checkpoint's model '%s' is not a layer stack (a "
                         "program's own model_fn does not export)", model_text);
    za_input_shape_t input = config->input;
    if (input.height <= 0 || input.width <= 0 || input.channels <= 0)
        return za_error ("export: the input shape %dx%dx%d is not one", input.height,
                         input.width, input.channels);
    s_graph_t self = {.ckpt = ckpt, .layout = LAYOUT_NHWC};
    self.onnx = za_onnx_new ("zactor", ZA_VERSION_TEXT);
    if (!self.onnx)
        return -1;
    int64_t in_shape [4] = {-1, input.height, input.width, input.channels};
    za_onnx_input (self.onnx, "pixels", 4, in_shape);
    snprintf (self.at, sizeof self.at, "pixels");
    s_preprocess (&self, config);
    s_shape_t shape = {input.height, input.width, input.channels};
    int rc = 0;
    for (int i = 0; i < spec.count && !rc; i++)
        rc = s_layer (&self, &spec.layers [i], shape, &shape, input);
    //  The last layer is dense (the parser's rule): its Gemm (or Relu) is
    //  the logits, named so by an Identity.
    int64_t out_shape [2] = {-1, shape.c};
    if (!rc) {
        s_node (&self, "Identity", "logits", 1, NULL, NULL);
        za_onnx_output (self.onnx, "logits", 2, out_shape);
        if (config->softmax) {
            s_node (&self, "Softmax", "probabilities", 1, NULL, NULL);
            za_onnx_attr_int (self.onnx, "axis", 1);
            za_onnx_output (self.onnx, "probabilities", 2, out_shape);
        }
        char text [64];
        za_onnx_meta (self.onnx, "model", model_text);
        snprintf (text, sizeof text, "%lld", (long long) za_checkpoint_step (ckpt));
        za_onnx_meta (self.onnx, "global_step", text);
        snprintf (text, sizeof text, "%dx%dx%d", input.height, input.width, input.channels);
        za_onnx_meta (self.onnx, "input_shape", text);
        static const char *modes [] = {"none", "tf", "torch", "caffe"};
        za_onnx_meta (self.onnx, "preprocess", modes [config->preprocess]);
        if (config->class_names)
            za_onnx_meta (self.onnx, "class_names", config->class_names);
        if (config->image_size)
            za_onnx_meta (self.onnx, "image_size", config->image_size);
        if (config->resize)
            za_onnx_meta (self.onnx, "resize", config->resize);
        za_onnx_doc (self.onnx, "A zactor model. Input 'pixels': float32 [batch, H, W, C] "
                     "of values 0 to 255 (RGB or gray), resized to the input_shape as "
                     "image_size and resize say. Outputs: 'logits' [batch, classes] and "
                     "(unless exported without) their softmax 'probabilities'.");
        rc = za_onnx_save (self.onnx, path);
    }
    za_onnx_destroy (&self.onnx);
    return rc;
}
