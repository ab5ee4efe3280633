/*  za_stack.c: the layer stack's model_fn. create plans every layer (its
    shape, variables and buffers) so that a step allocates nothing; the step
    runs each layer's forward, the loss, and each backward in reverse.      */
#include "za_layer.h"
#include "za_elem.h"
#include "za_feature_cache.h"

#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const za_backend_t *be;
    int batch_max;
    int count;
    za_layer_t layers [ZA_MAX_LAYERS];
    za_var_t vars [ZA_MAX_VARS];        //  copy of the table entries we use
    int var_count;
    float *scratch;                     //  shared backward scratch
    size_t in_size;
    int n_classes;
    int lowest_trainable;               //  backward stops at this layer (-1: none
                                        //  trains: no backward at all)
    za_feature_cache_t *cache;          //  --cache-frozen: the output of layer
                                        //  lowest_trainable - 1 per example, or NULL
    uint8_t fused [ZA_MAX_LAYERS];      //  1: conv2d i and the maxpool after it went
                                        //  as one in the last forward
} s_stack_t;

//  The profile (za_model.h): nanoseconds per row and pass, the rows' names.
static _Atomic int s_profile_on;
static _Atomic uint64_t s_profile_ns [ZA_MAX_LAYERS + 1][2];
static const char *_Atomic s_profile_name [ZA_MAX_LAYERS + 1];

void
za_stack_profile_start (void)
{
    for (int i = 0; i <= ZA_MAX_LAYERS; i++) {
        s_profile_ns [i][0] = s_profile_ns [i][1] = 0;
        s_profile_name [i] = NULL;
    }
    s_profile_on = 1;
}

void
za_stack_profile_stop (void)
{
    s_profile_on = 0;
}

int
za_stack_profile_get (int i, double *forward, double *backward, const char **name)
{
    if (i < 0 || i > ZA_MAX_LAYERS)
        return -1;
    *forward = (double) s_profile_ns [i][0] / 1e9;
    *backward = (double) s_profile_ns [i][1] / 1e9;
    *name = s_profile_name [i];
    return 0;
}

//  The profile's clock: 0 while it is off.
static uint64_t
s_profile_clock (void)
{
    if (!s_profile_on)
        return 0;
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

//  Adds the time since `from` (a s_profile_clock) to row i's pass.
static void
s_profile_add (uint64_t from, int i, int pass, const char *name)
{
    uint64_t now = s_profile_clock ();
    if (!from || !now)
        return;
    s_profile_ns [i][pass] += now - from;
    s_profile_name [i] = name;
}

//  Output shape of each layer for one example, checked at a batch of n.
//  Returns 0 or -1 with an error.
static int
s_infer_shapes (const za_stack_spec_t *spec, za_input_shape_t input, int n,
                za_shape_t *out)
{
    za_shape_t s = {input.height, input.width, input.channels};
    for (int i = 0; i < spec->count; i++) {
        const za_layer_spec_t *l = &spec->layers [i];
        const za_layer_ops_t *type = za_layer_ops (l->type);
        if (type->shape && type->shape (l, n, s, &s)) {
            if (n == 1)
                za_error ("layer %d (%s) does not fit its %dx%dx%d input", i + 1,
                          type->name, s.h, s.w, s.c);
            return -1;
        }
        out [i] = s;
    }
    return 0;
}

double
za_stack_forward_flops (const za_stack_spec_t *spec, za_input_shape_t input)
{
    za_shape_t shapes [ZA_MAX_LAYERS];
    if (s_infer_shapes (spec, input, 1, shapes))
        return -1;
    double flops = 0;
    za_shape_t in = {input.height, input.width, input.channels};
    for (int i = 0; i < spec->count; i++) {
        const za_layer_ops_t *type = za_layer_ops (spec->layers [i].type);
        if (type->flops)
            flops += type->flops (&spec->layers [i], in, shapes [i]);
        in = shapes [i];
    }
    return flops;
}

static void
s_stack_destroy (void **state_p)
{
    s_stack_t *self = (s_stack_t *) *state_p;
    if (!self)
        return;
    za_feature_cache_give (&self->cache);
    for (int i = 0; i < self->count; i++) {
        za_layer_t *l = &self->layers [i];
        if (l->owns_out) {
            self->be->buffer_free (l->out);
            self->be->buffer_free (l->dout);
        }
        self->be->buffer_free (l->cols);
        self->be->buffer_free (l->argmax);
        self->be->buffer_free (l->mask);
    }
    self->be->buffer_free (self->scratch);
    free (self);
    *state_p = NULL;
}

//  Checks every layer's geometry at batch_max before anything is allocated
//  (a batch too large for BLAS's int sizes is refused here).
static int
s_check_batch (const za_stack_spec_t *spec, za_input_shape_t input, int batch_max,
               const za_shape_t *shapes)
{
    za_shape_t at [ZA_MAX_LAYERS];
    if (s_infer_shapes (spec, input, batch_max, at))
        return -1;
    for (int i = 0; i < spec->count; i++)
        if ((double) batch_max * shapes [i].h * shapes [i].w * shapes [i].c > INT32_MAX)
            return za_error ("model: a batch of %d is too large for layer %d", batch_max,
                             i + 1);
    return 0;
}

//  Plans layer i: its shapes, its output buffers (or its input's, for a
//  reshape), its variables and its own buffers.
static int
s_plan_layer (s_stack_t *self, int i, const za_layer_spec_t *spec, za_shape_t in,
              za_shape_t out, za_layer_plan_t *plan)
{
    za_layer_t *l = &self->layers [i];
    const za_layer_ops_t *type = za_layer_ops (spec->type);
    l->spec = *spec;
    l->index = i;
    l->in_shape = in;
    l->out_shape = out;
    l->in_size = (size_t) in.h * in.w * in.c;
    l->out_size = (size_t) out.h * out.w * out.c;
    l->kernel_var = l->bias_var = -1;
    if (type->reshapes && i > 0) {
        l->out = self->layers [i - 1].out;
        l->dout = self->layers [i - 1].dout;
    }
    else {
        size_t bytes = l->out_size * (size_t) self->batch_max * sizeof (float);
        l->out = (float *) self->be->buffer_alloc (bytes);
        l->dout = (float *) self->be->buffer_alloc (bytes);
        l->owns_out = 1;
        if (!l->out || !l->dout)
            return -1;
    }
    return type->plan? type->plan (l, plan): 0;
}

//  Which variables do not train: a layer's trainable=false, the spec's
//  freeze regex, or what its trainable regex leaves out.
typedef struct {
    regex_t freeze, trainable;
    int has_freeze, has_trainable;
    int froze, kept;                    //  variables each regex selected
} s_freezer_t;

static int
s_freezer_new (s_freezer_t *self, const za_stack_spec_t *spec)
{
    memset (self, 0, sizeof *self);
    char anchored [ZA_REGEX_MAX + 8];
    if (spec->freeze [0]) {
        snprintf (anchored, sizeof anchored, "^(%s)", spec->freeze);
        if (regcomp (&self->freeze, anchored, REG_EXTENDED | REG_NOSUB))
            return za_error ("--freeze '%s' is not an extended regular expression",
                             spec->freeze);
        self->has_freeze = 1;
    }
    if (spec->trainable [0]) {
        snprintf (anchored, sizeof anchored, "^(%s)", spec->trainable);
        if (regcomp (&self->trainable, anchored, REG_EXTENDED | REG_NOSUB)) {
            if (self->has_freeze)
                regfree (&self->freeze);
            return za_error ("--trainable '%s' is not an extended regular expression",
                             spec->trainable);
        }
        self->has_trainable = 1;
    }
    return 0;
}

static void
s_freezer_free (s_freezer_t *self)
{
    if (self->has_freeze)
        regfree (&self->freeze);
    if (self->has_trainable)
        regfree (&self->trainable);
}

//  Marks layer l's variables frozen or not (in the table and the stack's
//  copy). 1 when one of them trains.
static int
s_freeze (s_freezer_t *self, s_stack_t *stack, const za_layer_t *l, za_vars_t *vars)
{
    int trains = 0;
    int ids [2] = {l->kernel_var, l->bias_var};
    for (int k = 0; k < 2; k++) {
        if (ids [k] < 0)
            continue;
        const char *name = vars->vars [ids [k]].name;
        int froze = self->has_freeze && regexec (&self->freeze, name, 0, NULL, 0) == 0;
        int kept = self->has_trainable && regexec (&self->trainable, name, 0, NULL, 0) == 0;
        self->froze += froze;
        self->kept += kept;
        int frozen = l->spec.frozen || froze || (self->has_trainable && !kept);
        vars->vars [ids [k]].frozen = stack->vars [ids [k]].frozen = frozen;
        trains |= !frozen;
    }
    return trains;
}

//  --cache-frozen: the cache of the frozen layers' output, when there are
//  frozen layers below the lowest that trains, none of them random, and the
//  buffers are the host's. Else one line says why not, and the run goes on
//  without. 0, or -1 (out of memory).
static int
s_cache_start (s_stack_t *self, const za_stack_spec_t *spec)
{
    int base = self->lowest_trainable;
    const char *why = NULL;
    if (!self->be->host_memory)
        why = "the model runs on a device";
    else
    if (base <= 0)
        why = "no frozen layer lies below the lowest layer that trains";
    for (int i = 0; !why && i < base; i++)
        if (spec->layers [i].type == ZA_LAYER_DROPOUT)
            why = "a dropout among the frozen layers makes their output random";
    if (why) {
        za_info ("--cache-frozen: no cache: %s", why);
        return 0;
    }
    //  At most a quarter of the memory.
    long pages = sysconf (_SC_PHYS_PAGES), page = sysconf (_SC_PAGESIZE);
    size_t max_bytes = pages > 0 && page > 0? (size_t) pages * (size_t) page / 4: 1u << 30;
    self->cache = za_feature_cache_take (spec, self->layers [base - 1].out_size, max_bytes);
    return self->cache? 0: -1;
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
    za_shape_t shapes [ZA_MAX_LAYERS];
    if (s_infer_shapes (spec, input, 1, shapes)
        || s_check_batch (spec, input, batch_max, shapes))
        return NULL;
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
    za_layer_plan_t plan = {.be = be, .vars = vars, .batch_max = batch_max,
                            .copies = self->vars, .copy_count = &self->var_count};
    int seen [ZA_LAYER_TYPE_COUNT] = {0};
    za_shape_t in = {input.height, input.width, input.channels};
    s_freezer_t freezer;
    if (s_freezer_new (&freezer, spec))
        goto fail;
    self->lowest_trainable = -1;
    int failed = 0;
    for (int i = 0; i < spec->count && !failed; i++) {
        plan.seen = seen [spec->layers [i].type]++;
        if ((failed = s_plan_layer (self, i, &spec->layers [i], in, shapes [i], &plan)))
            break;
        if (s_freeze (&freezer, self, &self->layers [i], vars) && self->lowest_trainable < 0)
            self->lowest_trainable = i;
        in = shapes [i];
    }
    s_freezer_free (&freezer);
    //  A regex that selects nothing is a mistake (a typo froze everything).
    if (!failed && ((freezer.has_freeze && !freezer.froze)
                    || (freezer.has_trainable && !freezer.kept))) {
        za_error ("--%s '%s' selects none of the model's variables (their names: %s, "
                  "...; `zactor-ckpt show` lists a checkpoint's)", freezer.has_freeze
                  && !freezer.froze? "freeze": "trainable", freezer.has_freeze
                  && !freezer.froze? spec->freeze: spec->trainable,
                  vars->count? vars->vars [0].name: "conv2d");
        goto fail;
    }
    if (failed || (spec->cache_frozen && s_cache_start (self, spec)))
        goto fail;
    if (plan.scratch_floats) {
        self->scratch = (float *) be->buffer_alloc (plan.scratch_floats * sizeof (float));
        if (!self->scratch)
            goto fail;
    }
    return self;
fail:;
    void *state = self;
    s_stack_destroy (&state);
    return NULL;
}

static void
s_stack_init_vars (void *state, const za_vars_t *vars, float *values, uint64_t seed)
{
    s_stack_t *self = (s_stack_t *) state;
    for (int i = 0; i < self->count; i++) {
        const za_layer_ops_t *type = za_layer_ops (self->layers [i].spec.type);
        if (type->init_vars)
            type->init_vars (&self->layers [i], vars, values, seed);
    }
}

//  The values (or gradients) of variable `var` in the block, or NULL.
static float *
s_var (const s_stack_t *self, const float *block, int var)
{
    return var >= 0? (float *) block + self->vars [var].offset: NULL;
}

//  Layer l's calls run under the frozen epoch (za_model.h) when it has
//  variables and all of them are frozen: what a back end derives from its
//  kernel then lasts from batch to batch. Returns the epoch to put back.
static uint64_t
s_epoch_enter (const s_stack_t *self, const za_layer_t *l)
{
    uint64_t epoch = za_model_values_epoch ();
    int kernel = l->kernel_var, bias = l->bias_var;
    if (epoch && za_model_frozen_epoch () && kernel >= 0 && self->vars [kernel].frozen
        && (bias < 0 || self->vars [bias].frozen))
        za_model_set_values_epoch (za_model_frozen_epoch ());
    return epoch;
}

//  Whether layer i (a conv2d) may go as one with the maxpool after it: its
//  input's gradient is never asked (nothing below it trains), which the
//  pair's backward does not compute.
static int
s_fusable (const s_stack_t *self, int i)
{
    return i + 1 < self->count && self->layers [i].spec.type == ZA_LAYER_CONV2D
        && self->layers [i + 1].spec.type == ZA_LAYER_MAXPOOL
        && (self->lowest_trainable < 0 || self->lowest_trainable >= i);
}

static void
s_forward (s_stack_t *self, const float *features, int n, int train, const float *values,
           int64_t step, int from)
{
    //  Each layer's draws (dropout's mask) come from (step, layer).
    uint64_t step_seed = (uint64_t) step * 0x9e3779b97f4a7c15ULL + 1;
    const float *in = from > 0? self->layers [from - 1].out: features;
    memset (self->fused, 0, sizeof self->fused);
    for (int i = from; i < self->count; i++) {
        za_layer_t *l = &self->layers [i];
        za_layer_call_t call = {
            .be = self->be, .n = n, .train = train, .in = in,
            .kernel = s_var (self, values, l->kernel_var),
            .bias = s_var (self, values, l->bias_var),
            .seed = za_elem_hash (step_seed, (uint64_t) i),
        };
        //  A first layer and its max-pool, as one where the back end takes
        //  them: the convolution's output is never written.
        uint64_t t0 = s_profile_clock ();
        uint64_t epoch = s_epoch_enter (self, l);
        self->fused [i] = s_fusable (self, i)
                       && za_layer_conv2d_pool_forward (l, &self->layers [i + 1], &call) == 0;
        if (!self->fused [i])
            za_layer_ops (l->spec.type)->forward (l, &call);
        za_model_set_values_epoch (epoch);
        if (self->fused [i]) {
            s_profile_add (t0, i, 0, "conv2d+maxpool");
            in = self->layers [++i].out;
            continue;
        }
        s_profile_add (t0, i, 0, t0? za_layer_ops (l->spec.type)->name: NULL);
        in = l->out;
    }
}

//  The variables are declared layer by layer: once layer i is done, every
//  gradient from its lowest offset up is final, and the replica hears so.
static void
s_backward (s_stack_t *self, const float *features, int n, const float *values,
            float *grads)
{
    size_t final_from = SIZE_MAX;
    if (self->lowest_trainable < 0)
        return;                         //  every variable is frozen
    //  Below the lowest layer that trains nothing needs a gradient: backward
    //  stops there, and that layer computes none for its input.
    for (int i = self->count - 1; i >= self->lowest_trainable; i--) {
        za_layer_t *l = &self->layers [i];
        za_layer_t *below = i > 0? &self->layers [i - 1]: NULL;
        //  The max-pool of a pair that went as one: its gradient goes into
        //  the convolution's with it.
        if (below && self->fused [i - 1])
            continue;
        float *din = below && i > self->lowest_trainable? below->dout: NULL;
        //  A leading flatten's gradient would go nowhere: none is computed.
        if (i == 1 && za_layer_ops (below->spec.type)->reshapes)
            din = NULL;
        za_layer_call_t call = {
            .be = self->be, .n = n, .train = 1,
            .in = below? below->out: features,
            .kernel = s_var (self, values, l->kernel_var),
            .bias = s_var (self, values, l->bias_var),
            .din = din,
            .dkernel = s_var (self, grads, l->kernel_var),
            .dbias = s_var (self, grads, l->bias_var),
            .scratch = self->scratch,
        };
        uint64_t t0 = s_profile_clock ();
        const char *name = !t0? NULL: self->fused [i]? "conv2d+maxpool"
                                                    : za_layer_ops (l->spec.type)->name;
        uint64_t epoch = s_epoch_enter (self, l);
        if (self->fused [i]
            && za_layer_conv2d_pool_backward (l, &self->layers [i + 1], &call) != 0) {
            //  Not taken after all (the back end's forward did take it):
            //  what the pair did not keep, made again, then each on its own
            //  (another path may round the last bits otherwise than the
            //  pair did; argmax stays the pair's).
            za_layer_t *pool = &self->layers [i + 1];
            za_layer_call_t pooled = call;
            pooled.in = l->out;
            pooled.din = l->dout;
            za_layer_ops (l->spec.type)->forward (l, &call);
            za_layer_ops (pool->spec.type)->backward (pool, &pooled);
            self->fused [i] = 0;
        }
        if (!self->fused [i])
            za_layer_ops (l->spec.type)->backward (l, &call);
        za_model_set_values_epoch (epoch);
        s_profile_add (t0, i, 1, name);
        //  L2 on the kernel (Keras's kernel_regularizer): the gradient of
        //  l2 sum (w^2), added once per call like the mean loss's, and as
        //  it multiplied by mixed_float16's loss scale (the replica divides
        //  the whole gradient by it).
        if (l->spec.l2 > 0 && call.dkernel && !self->vars [l->kernel_var].frozen)
            self->be->scale_add (self->vars [l->kernel_var].size, 1.0f, call.dkernel,
                                 2.0f * l->spec.l2 * za_model_loss_scale (), call.kernel);
        if (l->kernel_var >= 0 && l->bias_var >= 0) {
            size_t kernel_at = self->vars [l->kernel_var].offset;
            size_t bias_at = self->vars [l->bias_var].offset;
            size_t from = kernel_at < bias_at? kernel_at: bias_at;
            if (from < final_from)
                za_model_grads_final (final_from = from);
        }
    }
}

//  The forward pass, from the frozen layers' kept output when every example
//  of the batch has one; else whole, its outputs kept.
static void
s_forward_cached (s_stack_t *self, const float *features, int n, int train,
                  const float *values, int64_t step)
{
    if (!self->cache) {
        s_forward (self, features, n, train, values, step, 0);
        return;
    }
    int base = self->lowest_trainable;
    za_layer_t *top = &self->layers [base - 1];
    uint64_t keys [n];
    int hits = 0;
    for (int i = 0; i < n; i++) {
        keys [i] = za_feature_cache_key (features + (size_t) i * self->in_size, self->in_size);
        hits += za_feature_cache_get (self->cache, keys [i], top->out + (size_t) i * top->out_size);
    }
    if (hits == n) {
        s_forward (self, features, n, train, values, step, base);
        return;
    }
    s_forward (self, features, n, train, values, step, 0);
    for (int i = 0; i < n; i++)
        za_feature_cache_put (self->cache, keys [i], top->out + (size_t) i * top->out_size);
}

static int
s_stack_model_fn (void *state, const float *features, const int32_t *labels, int n,
                  za_mode_t mode, const float *values, float *grads, int64_t step,
                  za_spec_t *spec)
{
    s_stack_t *self = (s_stack_t *) state;
    if (n <= 0 || n > self->batch_max)
        return za_error ("model: batch of %d examples (planned for 1 to %d)", n,
                         self->batch_max);
    int train = mode == ZA_MODE_TRAIN;
    if (train && (!grads || !labels))
        return za_error ("model: TRAIN needs labels and gradients");
    s_forward_cached (self, features, n, train, values, step);
    za_layer_t *last = &self->layers [self->count - 1];
    spec->logits = last->out;
    spec->n_classes = self->n_classes;
    spec->loss_sum = 0;
    spec->correct = 0;
    if (mode == ZA_MODE_PREDICT || !labels)
        return 0;
    int invalid = 0;
    uint64_t t0 = s_profile_clock ();
    if (self->be->softmax_xent_add && za_model_loss_deferred ())
        self->be->softmax_xent_add (n, self->n_classes, last->out, labels,
                                    train? last->dout: NULL);
    else
        spec->loss_sum = self->be->softmax_xent (n, self->n_classes, last->out, labels,
                                                 train? last->dout: NULL, &spec->correct,
                                                 &invalid);
    s_profile_add (t0, ZA_MAX_LAYERS, 0, "loss");
    if (invalid)
        return za_error ("model: %d labels outside [0, %d)", invalid, self->n_classes);
    if (train) {
        za_model_forward_done ();
        float scale = za_model_loss_scale ();
        if (scale != 1.0f)
            self->be->scale_add ((size_t) n * self->n_classes, scale, last->dout, 0.0f, NULL);
        s_backward (self, features, n, values, grads);
    }
    return 0;
}

static const char *
s_stack_describe (const void *params)
{
    return ((const za_stack_spec_t *) params)->text;
}

//  za_model_fn_t.replayable: no dropout (its mask follows the step), no
//  frozen variable (what a back end derives from one is kept across steps)
//  and no cache of their output.
static int
s_stack_replayable (const void *state)
{
    const s_stack_t *self = (const s_stack_t *) state;
    if (self->cache)
        return 0;
    for (int i = 0; i < self->count; i++)
        if (self->layers [i].spec.type == ZA_LAYER_DROPOUT)
            return 0;
    for (int v = 0; v < self->var_count; v++)
        if (self->vars [v].frozen)
            return 0;
    return 1;
}

static const za_model_fn_t s_stack_model = {
    .name = "layer_stack",
    .create = s_stack_create,
    .init_vars = s_stack_init_vars,
    .model_fn = s_stack_model_fn,
    .destroy = s_stack_destroy,
    .describe = s_stack_describe,
    .device_ready = 1,
    .replayable = s_stack_replayable,
};

const za_model_fn_t *
za_stack_model_fn (void)
{
    return &s_stack_model;
}
