/*  za_model.c: the variable table, the layer-stack parser and builders, and
    the stack's model_fn, whose buffers are all planned in create.          */
#include "za/za_model.h"
#include "za_elem.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAR_ALIGN_FLOATS 16

// ---------------------------------------------------------------------------
//  Variables

int
za_vars_add (za_vars_t *vars, const char *name, int ndim, const int64_t *shape)
{
    if (vars->count >= ZA_MAX_VARS)
        return za_error ("too many variables (at most %d)", ZA_MAX_VARS);
    if (strlen (name) >= ZA_VAR_NAME_MAX)
        return za_error ("variable name '%s' is too long", name);
    if (za_vars_find (vars, name) >= 0)
        return za_error ("variable '%s' declared twice", name);
    if (ndim <= 0 || ndim > ZA_MAX_DIMS)
        return za_error ("variable '%s': %d dimensions (1 to %d)", name, ndim, ZA_MAX_DIMS);
    za_var_t *var = &vars->vars [vars->count];
    memset (var, 0, sizeof *var);
    snprintf (var->name, sizeof var->name, "%s", name);
    var->ndim = ndim;
    var->size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape [d] <= 0)
            return za_error ("variable '%s': dimension %d is %lld", name, d,
                             (long long) shape [d]);
        var->shape [d] = shape [d];
        var->size *= (size_t) shape [d];
    }
    var->offset = (vars->total + VAR_ALIGN_FLOATS - 1) / VAR_ALIGN_FLOATS * VAR_ALIGN_FLOATS;
    vars->total = var->offset + var->size;
    return vars->count++;
}

int
za_vars_find (const za_vars_t *vars, const char *name)
{
    for (int i = 0; i < vars->count; i++)
        if (strcmp (vars->vars [i].name, name) == 0)
            return i;
    return -1;
}

// ---------------------------------------------------------------------------
//  Builders

void
za_stack_init (za_stack_spec_t *spec)
{
    memset (spec, 0, sizeof *spec);
}

static za_layer_spec_t *
s_stack_push (za_stack_spec_t *spec, za_layer_type_t type)
{
    if (spec->count >= ZA_MAX_LAYERS) {
        za_error ("model spec: more than %d layers", ZA_MAX_LAYERS);
        return NULL;
    }
    za_layer_spec_t *layer = &spec->layers [spec->count++];
    memset (layer, 0, sizeof *layer);
    layer->type = type;
    return layer;
}

int
za_stack_conv2d (za_stack_spec_t *spec, int filters, int kernel, int stride,
                 za_padding_t padding, za_act_t act)
{
    if (filters <= 0 || kernel <= 0 || stride <= 0)
        return za_error ("conv2d: filters, kernel and stride must be positive "
                         "(got %d, %d, %d)", filters, kernel, stride);
    za_layer_spec_t *layer = s_stack_push (spec, ZA_LAYER_CONV2D);
    if (!layer)
        return -1;
    layer->units = filters, layer->kernel = kernel, layer->stride = stride;
    layer->padding = padding, layer->act = act;
    return 0;
}

int
za_stack_maxpool (za_stack_spec_t *spec, int pool, int stride)
{
    if (pool <= 0 || stride < 0)
        return za_error ("maxpool: pool must be positive (got %d)", pool);
    za_layer_spec_t *layer = s_stack_push (spec, ZA_LAYER_MAXPOOL);
    if (!layer)
        return -1;
    layer->pool = pool;
    layer->stride = stride > 0? stride: pool;
    return 0;
}

int
za_stack_flatten (za_stack_spec_t *spec)
{
    return s_stack_push (spec, ZA_LAYER_FLATTEN)? 0: -1;
}

int
za_stack_dense (za_stack_spec_t *spec, int units, za_act_t act)
{
    if (units <= 0)
        return za_error ("dense: units must be positive (got %d)", units);
    za_layer_spec_t *layer = s_stack_push (spec, ZA_LAYER_DENSE);
    if (!layer)
        return -1;
    layer->units = units, layer->act = act;
    return 0;
}

int
za_stack_relu (za_stack_spec_t *spec)
{
    return s_stack_push (spec, ZA_LAYER_RELU)? 0: -1;
}

int
za_stack_dropout (za_stack_spec_t *spec, float rate)
{
    if (!(rate >= 0 && rate < 1))
        return za_error ("dropout: rate must be in [0, 1) (got %g)", (double) rate);
    za_layer_spec_t *layer = s_stack_push (spec, ZA_LAYER_DROPOUT);
    if (!layer)
        return -1;
    layer->rate = rate;
    return 0;
}

static int
s_layer_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    const char *act = l->act == ZA_ACT_RELU? ",relu": "";
    switch (l->type) {
        case ZA_LAYER_CONV2D: {
            char stride [32] = "", padding [32] = "";
            if (l->stride != 1)
                snprintf (stride, sizeof stride, ",stride=%d", l->stride);
            if (l->padding == ZA_PADDING_SAME)
                snprintf (padding, sizeof padding, ",padding=same");
            return snprintf (buf, size, "conv2d(%d,%d%s%s%s)", l->units, l->kernel,
                             stride, padding, act);
        }
        case ZA_LAYER_MAXPOOL:
            if (l->stride != l->pool)
                return snprintf (buf, size, "maxpool(%d,%d)", l->pool, l->stride);
            return snprintf (buf, size, "maxpool(%d)", l->pool);
        case ZA_LAYER_FLATTEN: return snprintf (buf, size, "flatten");
        case ZA_LAYER_DENSE:   return snprintf (buf, size, "dense(%d%s)", l->units, act);
        case ZA_LAYER_RELU:    return snprintf (buf, size, "relu");
        case ZA_LAYER_DROPOUT: return snprintf (buf, size, "dropout(%g)", (double) l->rate);
    }
    return 0;
}

int
za_stack_finish (za_stack_spec_t *spec)
{
    if (spec->count == 0)
        return za_error ("model spec: no layers");
    if (spec->layers [spec->count - 1].type != ZA_LAYER_DENSE)
        return za_error ("model spec: the last layer must be dense(N_CLASSES) "
                         "(it gives the logits)");
    if (spec->layers [spec->count - 1].units < 2)
        return za_error ("model spec: the last dense layer needs at least 2 units "
                         "(classes), got %d", spec->layers [spec->count - 1].units);
    size_t used = 0;
    spec->text [0] = 0;
    for (int i = 0; i < spec->count; i++) {
        char token [128];
        s_layer_format (&spec->layers [i], token, sizeof token);
        int wrote = snprintf (spec->text + used, sizeof spec->text - used, "%s%s",
                              i? " ": "", token);
        if (wrote < 0 || used + (size_t) wrote >= sizeof spec->text)
            return za_error ("model spec: longer than %d characters", ZA_SPEC_TEXT_MAX);
        used += (size_t) wrote;
    }
    return 0;
}

int
za_dnn_classifier_spec (za_stack_spec_t *spec, const int *hidden_units,
                        int hidden_count, int n_classes)
{
    if (n_classes < 2)
        return za_error ("dnn_classifier: n_classes must be >= 2 (got %d)", n_classes);
    za_stack_init (spec);
    if (za_stack_flatten (spec))
        return -1;
    for (int i = 0; i < hidden_count; i++)
        if (za_stack_dense (spec, hidden_units [i], ZA_ACT_RELU))
            return -1;
    if (za_stack_dense (spec, n_classes, ZA_ACT_NONE))
        return -1;
    return za_stack_finish (spec);
}

int
za_linear_classifier_spec (za_stack_spec_t *spec, int n_classes)
{
    return za_dnn_classifier_spec (spec, NULL, 0, n_classes);
}

// ---------------------------------------------------------------------------
//  Parser

//  One error for the whole parser: the message, the text, a caret under
//  the offending column.
static int
s_parse_error (const char *text, const char *at, const char *fmt, const char *what)
{
    int column = (int) (at - text);
    char caret [ZA_SPEC_TEXT_MAX + 2];
    int width = column < ZA_SPEC_TEXT_MAX? column: ZA_SPEC_TEXT_MAX;
    memset (caret, ' ', (size_t) width);
    caret [width] = '^';
    caret [width + 1] = 0;
    char message [256];
    snprintf (message, sizeof message, fmt, what);
    return za_error ("model spec: %s at column %d\n  %s\n  %s", message, column + 1,
                     text, caret);
}

static int
s_parse_int (const char *s, int *value)
{
    char *end;
    long v = strtol (s, &end, 10);
    if (end == s || *end || v <= 0 || v > 1000000)
        return -1;
    *value = (int) v;
    return 0;
}

#define MAX_ARGS 8
#define ARG_CHARS 32

typedef struct {
    int count;
    char text [MAX_ARGS][ARG_CHARS];
    const char *at [MAX_ARGS];
} s_args_t;

//  Applies the arguments of one layer. Returns 0, or -1 after reporting the
//  bad argument.
static int
s_apply_args (const char *text, const char *name_at, const char *name, s_args_t *args,
              za_stack_spec_t *spec)
{
    int ints [MAX_ARGS], int_count = 0;
    za_act_t act = ZA_ACT_NONE;
    za_padding_t padding = ZA_PADDING_VALID;
    int stride = 0;
    float rate = -1;
    //  Where each option was given, to refuse one the layer does not take.
    const char *stride_at = NULL, *padding_at = NULL, *act_at = NULL;
    for (int i = 0; i < args->count; i++) {
        char *arg = args->text [i];
        char *eq = strchr (arg, '=');
        const char *key = NULL, *value = arg;
        if (eq) {
            *eq = 0;
            key = arg;
            value = eq + 1;
        }
        if (key && strcmp (key, "stride") == 0) {
            if (s_parse_int (value, &stride))
                return s_parse_error (text, args->at [i], "bad stride '%s'", value);
            stride_at = args->at [i];
        }
        else
        if ((key && strcmp (key, "padding") == 0) || (!key && (!strcmp (value, "same")
                                                           || !strcmp (value, "valid")))) {
            padding_at = args->at [i];
            if (strcmp (value, "same") == 0)
                padding = ZA_PADDING_SAME;
            else
            if (strcmp (value, "valid") == 0)
                padding = ZA_PADDING_VALID;
            else
                return s_parse_error (text, args->at [i],
                                      "bad padding '%s' (same or valid)", value);
        }
        else
        if ((key && strcmp (key, "activation") == 0) || (!key && (!strcmp (value, "relu")
                                                              || !strcmp (value, "none")
                                                              || !strcmp (value, "linear")))) {
            act_at = args->at [i];
            if (strcmp (value, "relu") == 0)
                act = ZA_ACT_RELU;
            else
            if (strcmp (value, "none") == 0 || strcmp (value, "linear") == 0)
                act = ZA_ACT_NONE;
            else
                return s_parse_error (text, args->at [i],
                                      "unknown activation '%s' (relu or none)", value);
        }
        else
        if (key)
            return s_parse_error (text, args->at [i], "unknown option '%s'", key);
        else
        if (strcmp (name, "dropout") == 0) {
            char *end;
            rate = strtof (value, &end);
            if (end == value || *end || !(rate >= 0 && rate < 1))
                return s_parse_error (text, args->at [i],
                                      "dropout rate '%s' is not a number in [0, 1)", value);
        }
        else {
            if (int_count >= 3 || s_parse_int (value, &ints [int_count]))
                return s_parse_error (text, args->at [i],
                                      "unexpected argument '%s'", value);
            int_count++;
        }
    }
    const char *end_at = args->count? args->at [args->count - 1]: name_at;
    int is_conv = strcmp (name, "conv2d") == 0;
    int is_pool = strcmp (name, "maxpool") == 0 || strcmp (name, "maxpool2d") == 0;
    int is_dense = strcmp (name, "dense") == 0;
    if (stride_at && !is_conv && !is_pool)
        return s_parse_error (text, stride_at, "%s takes no stride", name);
    if (padding_at && !is_conv)
        return s_parse_error (text, padding_at, "%s takes no padding (conv2d does)", name);
    if (act_at && !is_conv && !is_dense)
        return s_parse_error (text, act_at, "%s takes no activation (add a relu layer)",
                              name);
    if (stride_at && ((is_conv && int_count == 3) || (is_pool && int_count == 2)))
        return s_parse_error (text, stride_at, "stride given twice in %s", name);
    if (is_conv) {
        if (int_count < 2)
            return s_parse_error (text, end_at, "%s needs FILTERS and KERNEL, "
                                  "e.g. conv2d(32,3,relu)", name);
        if (int_count == 3)
            stride = ints [2];
        return za_stack_conv2d (spec, ints [0], ints [1], stride? stride: 1, padding, act);
    }
    if (is_dense) {
        if (int_count != 1)
            return s_parse_error (text, end_at, "%s needs UNITS, e.g. dense(64,relu)", name);
        return za_stack_dense (spec, ints [0], act);
    }
    if (is_pool) {
        if (int_count < 1 || int_count > 2)
            return s_parse_error (text, end_at, "%s needs POOL [, STRIDE], e.g. maxpool(2)",
                                  name);
        return za_stack_maxpool (spec, ints [0], int_count == 2? ints [1]: stride);
    }
    if (strcmp (name, "dropout") == 0) {
        if (rate < 0)
            return s_parse_error (text, end_at, "%s needs RATE, e.g. dropout(0.4)", name);
        return za_stack_dropout (spec, rate);
    }
    if (args->count)
        return s_parse_error (text, args->at [0], "%s takes no arguments", name);
    if (strcmp (name, "flatten") == 0)
        return za_stack_flatten (spec);
    return za_stack_relu (spec);
}

int
za_stack_parse (const char *text, za_stack_spec_t *spec)
{
    static const char *known [] = {"conv2d", "maxpool", "maxpool2d", "flatten",
                                   "dense", "relu", "dropout"};
    za_stack_init (spec);
    if (strlen (text) >= ZA_SPEC_TEXT_MAX)
        return za_error ("model spec: longer than %d characters", ZA_SPEC_TEXT_MAX - 1);
    const char *p = text;
    while (1) {
        while (isspace ((unsigned char) *p))
            p++;
        if (!*p)
            break;
        const char *name_at = p;
        char name [32];
        size_t len = 0;
        while (isalnum ((unsigned char) *p) || *p == '_') {
            if (len + 1 < sizeof name)
                name [len++] = (char) tolower ((unsigned char) *p);
            p++;
        }
        name [len] = 0;
        if (len == 0) {
            char bad [2] = {*p, 0};
            return s_parse_error (text, p, "unexpected '%s'", bad);
        }
        int is_known = 0;
        for (size_t k = 0; k < sizeof known / sizeof known [0]; k++)
            is_known |= strcmp (name, known [k]) == 0;
        if (!is_known)
            return s_parse_error (text, name_at, "unknown layer '%s' (known: conv2d, "
                                  "maxpool, flatten, dense, relu, dropout)", name);
        s_args_t args = {0};
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '(') {
            p++;
            while (1) {
                while (isspace ((unsigned char) *p))
                    p++;
                if (*p == ')' && args.count == 0) {
                    p++;
                    break;
                }
                if (args.count >= MAX_ARGS)
                    return s_parse_error (text, p, "too many arguments to %s", name);
                args.at [args.count] = p;
                size_t n = 0;
                while (*p && *p != ',' && *p != ')' && !isspace ((unsigned char) *p)) {
                    if (n + 1 >= ARG_CHARS)
                        return s_parse_error (text, args.at [args.count],
                                              "argument too long in %s", name);
                    args.text [args.count][n++] = *p++;
                }
                args.text [args.count][n] = 0;
                while (isspace ((unsigned char) *p))
                    p++;
                if (n == 0)
                    return s_parse_error (text, p, "missing argument in %s", name);
                args.count++;
                if (*p == ',') {
                    p++;
                    continue;
                }
                if (*p == ')') {
                    p++;
                    break;
                }
                return s_parse_error (text, p, "expected ',' or ')' in %s", name);
            }
        }
        if (s_apply_args (text, name_at, name, &args, spec))
            return -1;
    }
    return za_stack_finish (spec);
}

// ---------------------------------------------------------------------------
//  Shapes

typedef struct {
    int h, w, c;
} s_shape_t;

//  Output shape of each layer for one example. Returns 0 or -1 with an error.
static int
s_infer_shapes (const za_stack_spec_t *spec, za_input_shape_t input, s_shape_t *out)
{
    s_shape_t s = {input.height, input.width, input.channels};
    for (int i = 0; i < spec->count; i++) {
        const za_layer_spec_t *l = &spec->layers [i];
        if (l->type == ZA_LAYER_CONV2D) {
            za_conv2d_dims_t d;
            if (za_conv2d_dims (&d, 1, s.h, s.w, s.c, l->units, l->kernel, l->stride,
                                l->padding))
                return za_error ("layer %d (conv2d) does not fit its %dx%dx%d input",
                                 i + 1, s.h, s.w, s.c);
            s = (s_shape_t) {d.oh, d.ow, d.oc};
        }
        else
        if (l->type == ZA_LAYER_MAXPOOL) {
            za_pool2d_dims_t d;
            if (za_pool2d_dims (&d, 1, s.h, s.w, s.c, l->pool, l->stride))
                return za_error ("layer %d (maxpool) does not fit its %dx%dx%d input",
                                 i + 1, s.h, s.w, s.c);
            s = (s_shape_t) {d.oh, d.ow, s.c};
        }
        else
        if (l->type == ZA_LAYER_FLATTEN)
            s = (s_shape_t) {1, 1, s.h * s.w * s.c};
        else
        if (l->type == ZA_LAYER_DENSE)
            s = (s_shape_t) {1, 1, l->units};
        out [i] = s;
    }
    return 0;
}

double
za_stack_forward_flops (const za_stack_spec_t *spec, za_input_shape_t input)
{
    s_shape_t shapes [ZA_MAX_LAYERS];
    if (s_infer_shapes (spec, input, shapes))
        return -1;
    double flops = 0;
    s_shape_t in = {input.height, input.width, input.channels};
    for (int i = 0; i < spec->count; i++) {
        const za_layer_spec_t *l = &spec->layers [i];
        s_shape_t o = shapes [i];
        if (l->type == ZA_LAYER_CONV2D)
            flops += 2.0 * o.h * o.w * o.c * l->kernel * l->kernel * in.c;
        else
        if (l->type == ZA_LAYER_DENSE)
            flops += 2.0 * in.h * in.w * in.c * o.c;
        in = o;
    }
    return flops;
}

// ---------------------------------------------------------------------------
//  Gradients final before the model_fn returns

static __thread za_grads_final_fn *s_final_fn;
static __thread void *s_final_arg;

void
za_model_on_grads_final (za_grads_final_fn *fn, void *arg)
{
    s_final_fn = fn;
    s_final_arg = arg;
}

void
za_model_grads_final (size_t offset)
{
    if (s_final_fn)
        s_final_fn (s_final_arg, offset);
}

// ---------------------------------------------------------------------------
//  The stack's model_fn

typedef struct {
    za_layer_spec_t spec;
    s_shape_t in_shape, out_shape;
    size_t in_size, out_size;           //  floats per example
    int kernel_var, bias_var;           //  indices into the vars table, or -1
    float *out, *dout;                  //  [batch_max, out_size]; may alias
    float *cols;                        //  conv2d im2col, kept for backward
    int32_t *argmax;                    //  maxpool
    float *mask;                        //  dropout
    int owns_out;
} s_layer_t;

typedef struct {
    const za_backend_t *be;
    int batch_max;
    int count;
    s_layer_t layers [ZA_MAX_LAYERS];
    za_var_t vars [ZA_MAX_VARS];        //  copy of the table entries we use
    int var_count;
    float *dcols;                       //  shared backward scratch
    size_t in_size;
    int n_classes;
} s_stack_t;

static void
s_stack_destroy (void **state_p)
{
    s_stack_t *self = (s_stack_t *) *state_p;
    if (!self)
        return;
    for (int i = 0; i < self->count; i++) {
        s_layer_t *l = &self->layers [i];
        if (l->owns_out) {
            self->be->buffer_free (l->out);
            self->be->buffer_free (l->dout);
        }
        self->be->buffer_free (l->cols);
        self->be->buffer_free (l->argmax);
        self->be->buffer_free (l->mask);
    }
    self->be->buffer_free (self->dcols);
    free (self);
    *state_p = NULL;
}

static int
s_declare (s_stack_t *self, za_vars_t *vars, const char *base, int index,
           const char *what, int ndim, const int64_t *shape)
{
    char name [ZA_VAR_NAME_MAX];
    if (index)
        snprintf (name, sizeof name, "%s_%d/%s", base, index, what);
    else
        snprintf (name, sizeof name, "%s/%s", base, what);
    int var = za_vars_add (vars, name, ndim, shape);
    if (var >= 0)
        self->vars [var] = vars->vars [var];
    if (var >= 0 && var + 1 > self->var_count)
        self->var_count = var + 1;
    return var;
}

static void *
s_stack_create (const void *params, za_input_shape_t input, int batch_max,
                const za_backend_t *be, za_vars_t *vars)
{
    const za_stack_spec_t *spec = (const za_stack_spec_t *) params;
    if (batch_max <= 0) {
        za_error ("model: batch size must be positive (got %d)", batch_max);
        return NULL;
    }
    if (spec->count <= 0 || spec->layers [spec->count - 1].type != ZA_LAYER_DENSE) {
        za_error ("model: the stack must end in a dense layer");
        return NULL;
    }
    s_shape_t shapes [ZA_MAX_LAYERS];
    if (s_infer_shapes (spec, input, shapes))
        return NULL;
    //  Every layer's geometry at batch_max is checked before anything is
    //  allocated (a batch too large for BLAS's int sizes is refused here).
    s_shape_t at = {input.height, input.width, input.channels};
    for (int i = 0; i < spec->count; i++) {
        const za_layer_spec_t *l = &spec->layers [i];
        za_conv2d_dims_t cd;
        za_pool2d_dims_t pd;
        if ((l->type == ZA_LAYER_CONV2D
             && za_conv2d_dims (&cd, batch_max, at.h, at.w, at.c, l->units, l->kernel,
                                l->stride, l->padding))
            || (l->type == ZA_LAYER_MAXPOOL
                && za_pool2d_dims (&pd, batch_max, at.h, at.w, at.c, l->pool, l->stride)))
            return NULL;
        if ((double) batch_max * shapes [i].h * shapes [i].w * shapes [i].c > INT32_MAX) {
            za_error ("model: a batch of %d is too large for layer %d", batch_max, i + 1);
            return NULL;
        }
        at = shapes [i];
    }
    s_stack_t *self = (s_stack_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    self->be = be;
    self->batch_max = batch_max;
    self->count = spec->count;
    self->in_size = (size_t) input.height * input.width * input.channels;
    self->n_classes = spec->layers [spec->count - 1].units;
    int conv_seen = 0, dense_seen = 0;
    size_t dcols_floats = 0;
    s_shape_t in = {input.height, input.width, input.channels};
    for (int i = 0; i < spec->count; i++) {
        s_layer_t *l = &self->layers [i];
        l->spec = spec->layers [i];
        l->in_shape = in;
        l->out_shape = shapes [i];
        l->in_size = (size_t) in.h * in.w * in.c;
        l->out_size = (size_t) shapes [i].h * shapes [i].w * shapes [i].c;
        l->kernel_var = l->bias_var = -1;
        size_t out_floats = l->out_size * (size_t) batch_max;
        if (l->spec.type == ZA_LAYER_FLATTEN && i > 0) {
            l->out = self->layers [i - 1].out;
            l->dout = self->layers [i - 1].dout;
        }
        else {
            l->out = (float *) be->buffer_alloc (out_floats * sizeof (float));
            l->dout = (float *) be->buffer_alloc (out_floats * sizeof (float));
            l->owns_out = 1;
            if (!l->out || !l->dout)
                goto fail;
        }
        if (l->spec.type == ZA_LAYER_CONV2D) {
            int64_t kshape [4] = {l->spec.kernel, l->spec.kernel, in.c, l->spec.units};
            int64_t bshape [1] = {l->spec.units};
            l->kernel_var = s_declare (self, vars, "conv2d", conv_seen, "kernel", 4, kshape);
            l->bias_var = s_declare (self, vars, "conv2d", conv_seen, "bias", 1, bshape);
            conv_seen++;
            za_conv2d_dims_t d;
            if (za_conv2d_dims (&d, batch_max, in.h, in.w, in.c, l->spec.units,
                                l->spec.kernel, l->spec.stride, l->spec.padding))
                goto fail;
            size_t cols = za_conv2d_cols_floats (&d);
            l->cols = (float *) be->buffer_alloc (cols * sizeof (float));
            if (!l->cols)
                goto fail;
            if (i > 0 && cols > dcols_floats)
                dcols_floats = cols;
        }
        else
        if (l->spec.type == ZA_LAYER_DENSE) {
            int64_t kshape [2] = {(int64_t) l->in_size, l->spec.units};
            int64_t bshape [1] = {l->spec.units};
            l->kernel_var = s_declare (self, vars, "dense", dense_seen, "kernel", 2, kshape);
            l->bias_var = s_declare (self, vars, "dense", dense_seen, "bias", 1, bshape);
            dense_seen++;
        }
        else
        if (l->spec.type == ZA_LAYER_MAXPOOL) {
            za_pool2d_dims_t d;
            if (za_pool2d_dims (&d, batch_max, in.h, in.w, in.c, l->spec.pool, l->spec.stride))
                goto fail;
            l->argmax = (int32_t *) be->buffer_alloc (out_floats * sizeof (int32_t));
            if (!l->argmax)
                goto fail;
        }
        else
        if (l->spec.type == ZA_LAYER_DROPOUT) {
            l->mask = (float *) be->buffer_alloc (out_floats * sizeof (float));
            if (!l->mask)
                goto fail;
        }
        if ((l->spec.type == ZA_LAYER_CONV2D || l->spec.type == ZA_LAYER_DENSE)
            && (l->kernel_var < 0 || l->bias_var < 0))
            goto fail;
        in = shapes [i];
    }
    if (dcols_floats) {
        self->dcols = (float *) be->buffer_alloc (dcols_floats * sizeof (float));
        if (!self->dcols)
            goto fail;
    }
    return self;
fail:;
    void *state = self;
    s_stack_destroy (&state);
    return NULL;
}

//  Glorot uniform for kernels (Keras's default), zeros for biases.
static void
s_stack_init_vars (void *state, const za_vars_t *vars, float *values, uint64_t seed)
{
    s_stack_t *self = (s_stack_t *) state;
    for (int i = 0; i < self->count; i++) {
        s_layer_t *l = &self->layers [i];
        if (l->kernel_var < 0)
            continue;
        const za_var_t *kernel = &vars->vars [l->kernel_var];
        double fan_in, fan_out;
        if (l->spec.type == ZA_LAYER_CONV2D) {
            double area = (double) l->spec.kernel * l->spec.kernel;
            fan_in = area * l->in_shape.c;
            fan_out = area * l->spec.units;
        }
        else {
            fan_in = (double) l->in_size;
            fan_out = l->spec.units;
        }
        float limit = (float) sqrt (6.0 / (fan_in + fan_out));
        za_rng_t rng;
        za_rng_seed (&rng, seed * 1000003ULL + (uint64_t) l->kernel_var);
        float *w = values + kernel->offset;
        for (size_t k = 0; k < kernel->size; k++)
            w [k] = (2.0f * za_rng_uniform (&rng) - 1.0f) * limit;
        const za_var_t *bias = &vars->vars [l->bias_var];
        memset (values + bias->offset, 0, bias->size * sizeof (float));
    }
}

//  A layer's geometry for a batch of n (the layer was checked at create).
static za_conv2d_dims_t
s_conv_dims (const s_layer_t *l, int n)
{
    za_conv2d_dims_t d;
    za_conv2d_dims (&d, n, l->in_shape.h, l->in_shape.w, l->in_shape.c, l->spec.units,
                    l->spec.kernel, l->spec.stride, l->spec.padding);
    return d;
}

static za_pool2d_dims_t
s_pool_dims (const s_layer_t *l, int n)
{
    za_pool2d_dims_t d;
    za_pool2d_dims (&d, n, l->in_shape.h, l->in_shape.w, l->in_shape.c, l->spec.pool,
                    l->spec.stride);
    return d;
}

static int
s_stack_model_fn (void *state, const float *features, const int32_t *labels, int n,
                  za_mode_t mode, const float *values, float *grads, int64_t step,
                  za_spec_t *spec)
{
    s_stack_t *self = (s_stack_t *) state;
    const za_backend_t *be = self->be;
    if (n <= 0 || n > self->batch_max)
        return za_error ("model: batch of %d examples (planned for 1 to %d)", n,
                         self->batch_max);
    int train = mode == ZA_MODE_TRAIN;
    if (train && (!grads || !labels))
        return za_error ("model: TRAIN needs labels and gradients");
    //  Each dropout layer's mask is drawn from (step, layer).
    uint64_t dropout_seed = (uint64_t) step * 0x9e3779b97f4a7c15ULL + 1;

    const float *in = features;
    for (int i = 0; i < self->count; i++) {
        s_layer_t *l = &self->layers [i];
        const float *kernel = l->kernel_var >= 0? values + self->vars [l->kernel_var].offset: NULL;
        const float *bias = l->bias_var >= 0? values + self->vars [l->bias_var].offset: NULL;
        size_t out_count = l->out_size * (size_t) n;
        switch (l->spec.type) {
            case ZA_LAYER_CONV2D: {
                za_conv2d_dims_t d = s_conv_dims (l, n);
                be->conv2d_forward (&d, in, kernel, bias, l->spec.act, l->cols, l->out);
                break;
            }
            case ZA_LAYER_DENSE:
                be->dense_forward (n, (int) l->in_size, l->spec.units, in, kernel, bias,
                                   l->spec.act, l->out);
                break;
            case ZA_LAYER_MAXPOOL: {
                za_pool2d_dims_t d = s_pool_dims (l, n);
                be->maxpool_forward (&d, in, l->out, l->argmax);
                break;
            }
            case ZA_LAYER_FLATTEN:
                if (i == 0)
                    be->copy (l->out, in, out_count * sizeof (float));
                break;
            case ZA_LAYER_RELU:
                be->relu_forward (out_count, in, l->out);
                break;
            case ZA_LAYER_DROPOUT:
                if (train)
                    be->dropout_forward (out_count, l->spec.rate,
                                         za_elem_hash (dropout_seed, (uint64_t) i), in,
                                         l->mask, l->out);
                else
                    be->copy (l->out, in, out_count * sizeof (float));
                break;
        }
        in = l->out;
    }
    s_layer_t *last = &self->layers [self->count - 1];
    spec->logits = last->out;
    spec->n_classes = self->n_classes;
    spec->loss_sum = 0;
    spec->correct = 0;
    if (mode == ZA_MODE_PREDICT || !labels)
        return 0;
    int invalid = 0;
    spec->loss_sum = be->softmax_xent (n, self->n_classes, last->out, labels,
                                       train? last->dout: NULL, &spec->correct, &invalid);
    if (invalid)
        return za_error ("model: %d labels outside [0, %d)", invalid, self->n_classes);
    if (!train)
        return 0;

    //  The variables are declared layer by layer: once layer i is done, every
    //  gradient from its lowest offset up is final.
    size_t final_from = SIZE_MAX;
    for (int i = self->count - 1; i >= 0; i--) {
        s_layer_t *l = &self->layers [i];
        const float *layer_in = i > 0? self->layers [i - 1].out: features;
        float *din = i > 0? self->layers [i - 1].dout: NULL;
        if (i > 0 && self->layers [i - 1].spec.type == ZA_LAYER_FLATTEN && i == 1)
            din = NULL;     //  a leading flatten aliases nothing: no gradient wanted
        const float *kernel = l->kernel_var >= 0? values + self->vars [l->kernel_var].offset: NULL;
        float *dkernel = l->kernel_var >= 0? grads + self->vars [l->kernel_var].offset: NULL;
        float *dbias = l->bias_var >= 0? grads + self->vars [l->bias_var].offset: NULL;
        size_t out_count = l->out_size * (size_t) n;
        switch (l->spec.type) {
            case ZA_LAYER_CONV2D: {
                za_conv2d_dims_t d = s_conv_dims (l, n);
                be->conv2d_backward (&d, l->cols, kernel, l->out, l->spec.act, l->dout,
                                     dkernel, dbias, self->dcols, din);
                break;
            }
            case ZA_LAYER_DENSE:
                be->dense_backward (n, (int) l->in_size, l->spec.units, layer_in, kernel,
                                    l->out, l->spec.act, l->dout, dkernel, dbias, din);
                break;
            case ZA_LAYER_MAXPOOL:
                if (din) {
                    za_pool2d_dims_t d = s_pool_dims (l, n);
                    be->maxpool_backward (&d, l->dout, l->argmax, din);
                }
                break;
            case ZA_LAYER_FLATTEN:
                break;
            case ZA_LAYER_RELU:
                if (din)
                    be->relu_backward (out_count, l->out, l->dout, din);
                break;
            case ZA_LAYER_DROPOUT:
                if (din)
                    be->dropout_backward (out_count, l->mask, l->dout, din);
                break;
        }
        if (l->kernel_var >= 0 && l->bias_var >= 0) {
            size_t from = self->vars [l->kernel_var].offset < self->vars [l->bias_var].offset
                        ? self->vars [l->kernel_var].offset: self->vars [l->bias_var].offset;
            if (from < final_from)
                za_model_grads_final (final_from = from);
        }
    }
    return 0;
}

static const char *
s_stack_describe (const void *params)
{
    return ((const za_stack_spec_t *) params)->text;
}

static const za_model_fn_t s_stack_model = {
    .name = "layer_stack",
    .create = s_stack_create,
    .init_vars = s_stack_init_vars,
    .model_fn = s_stack_model_fn,
    .destroy = s_stack_destroy,
    .describe = s_stack_describe,
    .device_ready = 1,
};

const za_model_fn_t *
za_stack_model_fn (void)
{
    return &s_stack_model;
}
