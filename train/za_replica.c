/*  za_replica.c: a model's states per thread, its value, gradient and slot
    blocks, one batch split over threads and micro-batches, and checkpoints
    of all of it.                                                            */
#include "za/za_replica.h"
#include "za/za_hooks.h"
#include "za/za_parallel.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Each thread walks its slice of a batch in micro-batches of at most this
//  many examples, unless the back end asks for another size: activations
//  and im2col buffers then stay in cache (the seed CNN runs ~25% faster
//  per core at 16 than at 128 examples).
#define MICRO_BATCH_MAX 16
//  How long the CPU's threads watch for the next fork before they sleep
//  (za_parallel_set_spin): a step forks every millisecond or so, and waking
//  a sleeping thread took tens of microseconds on a 2-core VM.
#define POOL_SPIN_S 200e-6
//  Values from which the gradients' sum and the optimizer's update are
//  split over the threads (below, one thread takes less than waking the
//  others).
#define APPLY_SPLIT_MIN 16384
//  mixed_float16's loss scale: Keras's initial_scale and dynamic_growth_steps.
#define LOSS_SCALE_INITIAL 32768.0f
#define LOSS_SCALE_GROWTH_STEPS 2000
#define LOSS_SCALE_MAX 0x1p24f          //  doubled no further (2^128 would be inf)
#define CKPT_META_MODEL "model"
#define CKPT_LOSS_SCALE "current_loss_scale"    //  Keras's LossScaleOptimizer's names
#define CKPT_GOOD_STEPS "good_steps"
#define CKPT_META_MODEL_FN "model_fn"
#define SLOT_NAME_MAX (ZA_VAR_NAME_MAX + 16)

struct _za_replica_t {
    const za_model_fn_t *model_fn;
    const void *params;
    za_input_shape_t input;
    const za_backend_t *be;
    int has_optim;
    za_optim_config_t optim;
    int train;
    const za_warm_start_t *warm_start;
    //  The block's runs of variables that train, [from, to): set once the
    //  variables are declared; one run [0, total) when nothing is frozen
    //  (a frozen variable's floats are never updated, clipped or summed).
    size_t run_from [ZA_MAX_VARS], run_to [ZA_MAX_VARS];
    int run_count;
    int frozen_count;

    //  Data parallelism inside the process: each batch is split over `threads`
    //  threads, each with its own model state and gradient buffer (thread 0's
    //  is `grads`); OpenBLAS runs single-threaded under them.
    int threads;
    int first_thread;               //  thread 0's number in the dropout seeds
    za_parallel_t *pool;
    void *states [ZA_REPLICA_MAX_THREADS];
    float *thread_grads [ZA_REPLICA_MAX_THREADS];
    int per_thread;                 //  examples each state is planned for
    int micro;                      //  on the CPU: a micro-batch's examples at most
    size_t feature_size;
    za_vars_t vars;
    float *values;                  //  [vars.total]
    float *grads;                   //  = thread_grads [0], or NULL
    float *slots [ZA_OPTIM_MAX_SLOTS];
    int disk_failing;               //  a save failed on the disk: said, until one succeeds
    //  On a device with memory of its own (be->host_memory 0) the blocks
    //  above are host mirrors of these; thread t runs on device
    //  device_of [t], its gradient in dev_grads [t]; device_values [d] is the
    //  values' copy on the d-th device used (0 holds the slots and applies).
    int device_count;
    int device_of [ZA_REPLICA_MAX_THREADS];
    float *device_values [ZA_DEVICE_MAX];
    float *dev_grads [ZA_REPLICA_MAX_THREADS];
    float *dev_slots [ZA_OPTIM_MAX_SLOTS];
    float *dev_peer;                //  on device 0: a gradient from another device
    float *dev_features [ZA_REPLICA_MAX_THREADS];
    int32_t *dev_labels [ZA_REPLICA_MAX_THREADS];
    float *host_logits [ZA_REPLICA_MAX_THREADS];
    size_t host_logits_floats [ZA_REPLICA_MAX_THREADS];
    //  Which copy is newer (s_at_t): values, gradient, slots.
    int values_at, grads_at, slots_at;
    int copies_stale;               //  device_values [1..] older than [0]
    //  Who hears of the gradient as it becomes final (za_replica_on_gradients).
    za_grads_final_fn *final_fn;
    void *final_arg;
    pthread_mutex_t final_mutex;
    //  mixed_float16's dynamic loss scale (1 otherwise).
    float loss_scale;
    int64_t good_steps, skipped_steps;
};

//  Where a block's newest numbers are, on a device with memory of its own.
typedef enum { S_AT_BOTH = 0, S_AT_HOST, S_AT_DEVICE } s_at_t;

typedef struct _s_batch_run_t s_batch_run_t;

//  What a thread's model_fn tells (za_model_grads_final) goes to its run.
typedef struct {
    s_batch_run_t *run;
    int t;
} s_listener_t;

//  One batch over the threads.
struct _s_batch_run_t {
    za_replica_t *self;
    const za_batch_t *batch;
    za_mode_t mode;
    int64_t step;
    uint64_t values_epoch;                      //  za_model_set_values_epoch's, for this batch
    int first [ZA_REPLICA_MAX_THREADS];         //  each thread's slice of the batch
    int count [ZA_REPLICA_MAX_THREADS];
    int last_micro [ZA_REPLICA_MAX_THREADS];    //  examples in its last micro-batch
    za_spec_t specs [ZA_REPLICA_MAX_THREADS];
    int rc [ZA_REPLICA_MAX_THREADS];
    char error [ZA_REPLICA_MAX_THREADS][ZA_ERROR_MAX_CHARS];
    //  Streaming (TRAIN with a final_fn): from where each thread's buffer is
    //  final in its last micro-batch, and from where the combined gradient
    //  is; under final_mutex.
    int streaming;
    size_t ready [ZA_REPLICA_MAX_THREADS];
    size_t combined;
    s_listener_t listeners [ZA_REPLICA_MAX_THREADS];
};

static void
s_destroy_states (za_replica_t *self)
{
    for (int t = 0; t < ZA_REPLICA_MAX_THREADS; t++) {
        if (self->states [t]) {
            if (!self->be->host_memory)
                self->be->bind (self->device_of [t]);
            self->model_fn->destroy (&self->states [t]);
        }
        if (self->dev_features [t])
            self->be->buffer_free (self->dev_features [t]);
        if (self->dev_labels [t])
            self->be->buffer_free (self->dev_labels [t]);
        self->dev_features [t] = NULL;
        self->dev_labels [t] = NULL;
    }
    self->per_thread = 0;
}

//  (Re)plans the threads' model states for batches of up to batch_max
//  examples (on the CPU each state holds one micro-batch at most; on a
//  device, its whole slice, and a buffer the slice is copied up into). The
//  variable table comes out the same each time; values are kept. On
//  failure no state is left, so the next call plans again.
//  The runs of variables that train: consecutive ones (and the padding
//  between them) join; a frozen one ends a run. Nothing frozen: [0, total).
static void
s_plan_runs (za_replica_t *self)
{
    const za_vars_t *vars = &self->vars;
    self->run_count = self->frozen_count = 0;
    int open = 0;
    for (int v = 0; v < vars->count; v++) {
        const za_var_t *var = &vars->vars [v];
        if (var->frozen) {
            self->frozen_count++;
            open = 0;
            continue;
        }
        if (!open)
            self->run_from [self->run_count++] = self->frozen_count? var->offset: 0;
        self->run_to [self->run_count - 1] = var->offset + var->size;
        open = 1;
    }
    //  The last run takes the block's tail (padding, zero).
    if (open && self->run_count)
        self->run_to [self->run_count - 1] = vars->total;
}

//  The micro-batch's examples: ZA_MICRO_BATCH from the environment (1 to
//  4096; for measuring, as bench/step_breakdown.sh does), else what the
//  back end asks for (a matrix unit such as AMX may want larger products
//  than cache does), else MICRO_BATCH_MAX.
static int
s_micro_batch (const za_backend_t *be)
{
    const char *text = getenv ("ZA_MICRO_BATCH");
    char *end = NULL;
    long n = text? strtol (text, &end, 10): 0;
    if (text && *text && !*end && n >= 1 && n <= 4096)
        return (int) n;
    int wanted = be->micro_batch? be->micro_batch (): 0;
    return wanted > 0? wanted: MICRO_BATCH_MAX;
}

static int
s_plan (za_replica_t *self, int batch_max)
{
    int per_thread = (batch_max + self->threads - 1) / self->threads;
    if (per_thread > self->micro && self->be->host_memory)
        per_thread = self->micro;
    if (self->states [0] && per_thread <= self->per_thread)
        return 0;
    s_destroy_states (self);
    for (int t = 0; t < self->threads; t++) {
        za_vars_t vars = {0};
        if (!self->be->host_memory) {
            if (self->be->bind (self->device_of [t])
                || !(self->dev_features [t] = (float *) self->be->buffer_alloc (
                         (size_t) per_thread * self->feature_size * sizeof (float)))
                || !(self->dev_labels [t] = (int32_t *) self->be->buffer_alloc (
                         (size_t) per_thread * sizeof (int32_t)))) {
                s_destroy_states (self);
                return -1;
            }
        }
        self->states [t] = self->model_fn->create (self->params, self->input, per_thread,
                                                   self->be, &vars);
        if (!self->states [t] || (self->values && vars.total != self->vars.total)) {
            if (self->states [t])
                za_error ("model_fn '%s' declared different variables on re-planning",
                          self->model_fn->name);
            s_destroy_states (self);
            return -1;
        }
        self->vars = vars;
    }
    self->per_thread = per_thread;
    s_plan_runs (self);
    return 0;
}

//  A block on a device (NULL on failure, with the error said).
static float *
s_device_block (za_replica_t *self, int device, size_t bytes)
{
    if (self->be->bind (device))
        return NULL;
    return (float *) self->be->buffer_alloc (bytes);
}

//  The device blocks: values on each device used, a gradient per thread,
//  slots and a scratch for other devices' gradients on the first.
static int
s_device_new (za_replica_t *self, int slot_count)
{
    size_t bytes = self->vars.total * sizeof (float);
    for (int d = 0; d < self->device_count; d++)
        if (!(self->device_values [d] = s_device_block (self, self->device_of [0] + d, bytes)))
            return -1;
    for (int t = 0; t < self->threads && self->train; t++)
        if (!(self->dev_grads [t] = s_device_block (self, self->device_of [t], bytes)))
            return -1;
    for (int s = 0; s < slot_count; s++)
        if (!(self->dev_slots [s] = s_device_block (self, self->device_of [0], bytes)))
            return -1;
    if (self->device_count > 1 && self->train
        && !(self->dev_peer = s_device_block (self, self->device_of [0], bytes)))
        return -1;
    self->values_at = self->slots_at = S_AT_HOST;
    return 0;
}

static void
s_device_destroy (za_replica_t *self)
{
    const za_backend_t *be = self->be;
    for (int d = 0; d < ZA_DEVICE_MAX; d++)
        if (self->device_values [d])
            be->buffer_free (self->device_values [d]);
    for (int t = 0; t < ZA_REPLICA_MAX_THREADS; t++) {
        if (self->dev_grads [t])
            be->buffer_free (self->dev_grads [t]);
        if (self->host_logits [t])
            be->host_free (self->host_logits [t]);
    }
    for (int s = 0; s < ZA_OPTIM_MAX_SLOTS; s++)
        if (self->dev_slots [s])
            be->buffer_free (self->dev_slots [s]);
    if (self->dev_peer)
        be->buffer_free (self->dev_peer);
}

static int
s_slot_count (const za_replica_t *self)
{
    return self->has_optim? za_optim_slot_count (self->optim.kind): 0;
}

//  Brings the host copies of `count` blocks that move together (the
//  values; the gradient; the slots) up to date: a copy down when the first
//  device's are newer. `write`: the caller will change them.
static void
s_to_host (za_replica_t *self, int *at, float *const *host, float *const *device, int count,
           int write)
{
    if (self->be->host_memory || count == 0)
        return;
    if (*at == S_AT_DEVICE) {
        self->be->bind (self->device_of [0]);
        for (int b = 0; b < count; b++)
            if (self->be->download (host [b], device [b], self->vars.total * sizeof (float)))
                za_error ("the device's numbers could not be read back; the run will stop");
        *at = S_AT_BOTH;
    }
    if (write)
        *at = S_AT_HOST;
}

//  Brings the first device's copies of `count` blocks up to date. 0 or -1.
static int
s_to_device (za_replica_t *self, int *at, float *const *host, float *const *device, int count)
{
    if (self->be->host_memory || *at != S_AT_HOST)
        return 0;
    self->be->bind (self->device_of [0]);
    for (int b = 0; b < count; b++)
        if (self->be->upload (device [b], host [b], self->vars.total * sizeof (float)))
            return -1;
    *at = S_AT_BOTH;
    return 0;
}

//  The first device's values and slots up to date (what the host wrote).
static int
s_state_to_device (za_replica_t *self)
{
    if (self->values_at == S_AT_HOST)
        self->copies_stale = self->device_count > 1;
    return s_to_device (self, &self->values_at, &self->values, self->device_values, 1)
        || s_to_device (self, &self->slots_at, self->slots, self->dev_slots,
                        s_slot_count (self));
}

//  Before a step: that, and the values' copies on the other devices.
static int
s_values_to_devices (za_replica_t *self)
{
    if (self->be->host_memory)
        return 0;
    if (s_state_to_device (self))
        return -1;
    for (int d = 1; d < self->device_count && self->copies_stale; d++)
        if (self->be->copy (self->device_values [d], self->device_values [0],
                            self->vars.total * sizeof (float)))
            return -1;
    self->copies_stale = 0;
    //  The other threads (their own streams) read what this one's wrote: the
    //  update, the copies. Done before they start.
    return self->threads > 1? self->be->sync (): 0;
}

za_replica_t *
za_replica_new (const za_replica_config_t *config, uint64_t seed)
{
    const za_model_fn_t *model_fn = config->model_fn;
    if (!model_fn || !model_fn->create || !model_fn->model_fn || !model_fn->destroy
        || !model_fn->init_vars) {
        za_error ("model_fn must provide create, init_vars, model_fn, destroy");
        return NULL;
    }
    za_input_shape_t input = config->input;
    if (input.height <= 0 || input.width <= 0 || input.channels <= 0) {
        za_error ("bad input shape %dx%dx%d", input.height, input.width, input.channels);
        return NULL;
    }
    if (config->optim && !(config->optim->learning_rate > 0)) {
        za_error ("learning rate must be positive (got %g)",
                  (double) config->optim->learning_rate);
        return NULL;
    }
    za_replica_t *self = (za_replica_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->final_mutex, NULL);
    self->model_fn = model_fn;
    self->params = config->params;
    self->warm_start = config->warm_start;
    self->input = input;
    self->train = config->train != 0;
    self->has_optim = config->optim != NULL;
    if (config->optim)
        self->optim = *config->optim;
    int first = 0;
    if (!(self->be = za_device_backend (&config->device, &first, &self->device_count))
        || !(self->be = za_backend_mixed (self->be, config->precision)))
        goto fail;
    self->loss_scale = self->be->precision != ZA_PRECISION_FP16? 1.0f
                     : config->initial_loss_scale > 0? config->initial_loss_scale
                     : LOSS_SCALE_INITIAL;
    if (self->be->host_memory) {
        //  Our threads own the cores: one OpenBLAS thread under each.
        self->be->set_threads (1);
        self->threads = config->threads > 0? config->threads
                      : (int) sysconf (_SC_NPROCESSORS_ONLN);
        if (self->threads < 1)
            self->threads = 1;
        if (self->threads > ZA_REPLICA_MAX_THREADS)
            self->threads = ZA_REPLICA_MAX_THREADS;
        self->micro = s_micro_batch (self->be);
    }
    else {
        char text [ZA_DEVICE_TEXT_MAX];
        if (!model_fn->device_ready) {
            za_error ("model_fn '%s' reads host memory itself: it runs on --device cpu "
                      "alone, not on %s", model_fn->name,
                      za_device_text (&config->device, text, sizeof text));
            goto fail;
        }
        //  A thread per model copy: replicas_per_device on each device.
        int per_device = config->replicas_per_device > 0? config->replicas_per_device: 1;
        if (self->device_count < 1 || self->device_count > ZA_DEVICE_MAX
            || per_device * self->device_count > ZA_REPLICA_MAX_THREADS) {
            za_error ("%d device%s x %d replicas each: at most %d replicas",
                      self->device_count, self->device_count == 1? "": "s", per_device,
                      ZA_REPLICA_MAX_THREADS);
            goto fail;
        }
        self->threads = per_device * self->device_count;
        for (int t = 0; t < self->threads; t++)
            self->device_of [t] = first + t / per_device;
    }
    self->first_thread = config->replica_index > 0? config->replica_index * self->threads: 0;
    self->feature_size = (size_t) input.height * input.width * input.channels;
    if (!(self->pool = za_parallel_new (self->threads)) || s_plan (self, 1))
        goto fail;
    //  On the CPU, threads that own a core each watch for the next step
    //  briefly instead of sleeping (more threads than cores: never spun).
    if (self->be->host_memory && self->threads <= sysconf (_SC_NPROCESSORS_ONLN))
        za_parallel_set_spin (self->pool, POOL_SPIN_S);
    size_t bytes = self->vars.total * sizeof (float);
    //  On a device, one host gradient block mirrors the combined one.
    int host_grads = !self->train? 0: self->be->host_memory? self->threads: 1;
    if (!(self->values = (float *) self->be->host_alloc (bytes)))
        goto fail;
    for (int t = 0; t < host_grads; t++)
        if (!(self->thread_grads [t] = (float *) self->be->host_alloc (bytes)))
            goto fail;
    self->grads = self->thread_grads [0];
    int slot_count = self->has_optim? za_optim_slot_count (self->optim.kind): 0;
    for (int s = 0; s < slot_count; s++)
        if (!(self->slots [s] = (float *) self->be->host_alloc (bytes)))
            goto fail;
    if (!self->be->host_memory && s_device_new (self, slot_count))
        goto fail;
    model_fn->init_vars (self->states [0], &self->vars, self->values, seed);
    za_replica_reset_slots (self);
    return self;
fail:
    za_replica_destroy (&self);
    return NULL;
}

void
za_replica_destroy (za_replica_t **self_p)
{
    za_replica_t *self = *self_p;
    if (!self)
        return;
    if (self->be) {
        s_destroy_states (self);
        s_device_destroy (self);
        for (int t = 0; t < ZA_REPLICA_MAX_THREADS; t++)
            self->be->host_free (self->thread_grads [t]);
        self->be->host_free (self->values);
        for (int s = 0; s < ZA_OPTIM_MAX_SLOTS; s++)
            self->be->host_free (self->slots [s]);
    }
    za_parallel_destroy (&self->pool);
    pthread_mutex_destroy (&self->final_mutex);
    free (self);
    *self_p = NULL;
}

const za_vars_t *
za_replica_vars (const za_replica_t *self)
{
    return &self->vars;
}

float *
za_replica_values (za_replica_t *self)
{
    s_to_host (self, &self->values_at, &self->values, self->device_values, 1, 1);
    return self->values;
}

float *
za_replica_gradients (za_replica_t *self)
{
    s_to_host (self, &self->grads_at, &self->grads, self->dev_grads, self->train, 1);
    return self->grads;
}

float *
za_replica_slot (za_replica_t *self, int slot)
{
    if (!self->has_optim || slot < 0 || slot >= za_optim_slot_count (self->optim.kind))
        return NULL;
    s_to_host (self, &self->slots_at, self->slots, self->dev_slots, s_slot_count (self), 1);
    return self->slots [slot];
}

const za_optim_config_t *
za_replica_optim (const za_replica_t *self)
{
    return self->has_optim? &self->optim: NULL;
}

const char *
za_replica_model_text (const za_replica_t *self)
{
    const char *text = self->model_fn->describe? self->model_fn->describe (self->params): NULL;
    return text? text: self->model_fn->name;
}

void
za_replica_on_gradients (za_replica_t *self, za_grads_final_fn *fn, void *arg)
{
    self->final_fn = fn;
    self->final_arg = arg;
}

void
za_replica_reset_slots (za_replica_t *self)
{
    if (self->has_optim)
        za_optim_init_slots (&self->optim, self->slots, self->vars.total);
    self->slots_at = S_AT_HOST;
}

// ---------------------------------------------------------------------------
//  One batch over the threads

//  Thread t's gradient buffer, where the back end computes.
static float *
s_thread_grads (za_replica_t *self, int t)
{
    return self->be->host_memory? self->thread_grads [t]: self->dev_grads [t];
}

//  grads [lo .. hi) = sum over threads of (last_micro / n) x that thread's
//  buffer: the batch's mean gradient, from buffers final over that range.
//  The same arithmetic, element by element, whatever the ranges. On a
//  device it runs on the first; a buffer on another is copied there first.
static void
s_combine (s_batch_run_t *run, size_t lo, size_t hi)
{
    za_replica_t *self = run->self;
    const za_backend_t *be = self->be;
    float *sum = s_thread_grads (self, 0);
    //  In mixed_float16 the model_fns' gradients come multiplied by the loss
    //  scale: divided again here.
    const float inv_n = 1.0f / ((float) run->batch->size * self->loss_scale);
    be->scale_add (hi - lo, (float) run->last_micro [0] * inv_n, sum + lo, 0.0f, NULL);
    for (int t = 1; t < self->threads; t++) {
        if (run->count [t] == 0)
            continue;
        const float *g = s_thread_grads (self, t);
        if (self->device_of [t] != self->device_of [0]) {
            be->copy (self->dev_peer + lo, g + lo, (hi - lo) * sizeof (float));
            g = self->dev_peer;
        }
        be->scale_add (hi - lo, 1.0f, sum + lo, (float) run->last_micro [t] * inv_n, g + lo);
    }
}

//  In host memory: thread t combines the t-th share of what is not
//  combined yet (element by element: the same sums however it is split).
static void
s_combine_share (void *arg, int t)
{
    s_batch_run_t *run = (s_batch_run_t *) arg;
    int threads = run->self->threads;
    s_combine (run, run->combined * t / threads, run->combined * (t + 1) / threads);
}

//  A thread's model_fn says its buffer is final from `offset` up: once every
//  thread's is, that range is combined and the listener told.
static void
s_thread_final (void *arg, size_t offset)
{
    s_listener_t *listener = (s_listener_t *) arg;
    s_batch_run_t *run = listener->run;
    za_replica_t *self = run->self;
    pthread_mutex_lock (&self->final_mutex);
    if (offset < run->ready [listener->t])
        run->ready [listener->t] = offset;
    size_t all = 0;
    for (int t = 0; t < self->threads; t++)
        if (run->ready [t] > all)
            all = run->ready [t];
    if (all < run->combined) {
        s_combine (run, all, run->combined);
        run->combined = all;
        self->final_fn (self->final_arg, all);
    }
    pthread_mutex_unlock (&self->final_mutex);
}

//  On a device: copies a micro-batch's examples up to thread t's buffers.
static int
s_upload_batch (za_replica_t *self, int t, const float *features, const int32_t *labels,
                int count)
{
    const za_backend_t *be = self->be;
    if (be->upload (self->dev_features [t], features,
                    (size_t) count * self->feature_size * sizeof (float)))
        return -1;
    return labels? be->upload (self->dev_labels [t], labels, (size_t) count * sizeof (int32_t))
                 : 0;
}

//  On a device: the predicted logits back in thread t's host buffer.
static int
s_download_logits (za_replica_t *self, int t, za_spec_t *spec, int count)
{
    size_t floats = (size_t) count * spec->n_classes;
    if (floats > self->host_logits_floats [t]) {
        self->be->host_free (self->host_logits [t]);
        self->host_logits_floats [t] = 0;
        if (!(self->host_logits [t] = (float *) self->be->host_alloc (floats * sizeof (float))))
            return -1;
        self->host_logits_floats [t] = floats;
    }
    if (self->be->download (self->host_logits [t], spec->logits, floats * sizeof (float)))
        return -1;
    spec->logits = self->host_logits [t];
    return 0;
}

static void
s_batch_slice (void *arg, int t)
{
    s_batch_run_t *run = (s_batch_run_t *) arg;
    za_replica_t *self = run->self;
    const za_backend_t *be = self->be;
    const za_batch_t *batch = run->batch;
    int first = run->first [t], last = first + run->count [t];
    int on_device = !be->host_memory;
    memset (&run->specs [t], 0, sizeof run->specs [t]);
    run->rc [t] = on_device? be->bind (self->device_of [t]): 0;
    const float *values = on_device
                        ? self->device_values [self->device_of [t] - self->device_of [0]]
                        : self->values;
    float *grads = run->mode == ZA_MODE_TRAIN? s_thread_grads (self, t): NULL;
    if (grads)
        be->zero (grads, self->vars.total * sizeof (float));
    //  The values stay as they are until the batch ends: what a back end
    //  derives from them in one micro-batch serves the next.
    za_model_set_values_epoch (run->values_epoch);
    //  A thread without examples adds nothing: final once cleared (thread
    //  0's buffer is where the others combine).
    if (grads && run->streaming && first == last)
        s_thread_final (&run->listeners [t], 0);
    //  A model_fn adds the gradient of its call's MEAN loss. The buffer is kept
    //  as (gradient of the summed loss so far) / (this micro-batch's count):
    //  when the count changes it is rescaled once, and s_batch_run weighs each
    //  thread by last_micro / batch size, so the step's gradient is the mean
    //  over the whole batch whatever the split. last_micro (0 at first) is the
    //  count of the micro-batch before, then of the last. On a device a
    //  thread's slice is one micro-batch.
    for (int lo = first; lo < last && run->rc [t] == 0; lo += self->per_thread) {
        int count = last - lo < self->per_thread? last - lo: self->per_thread;
        int previous = run->last_micro [t];
        if (grads && previous && count != previous)
            be->scale_add (self->vars.total, (float) previous / (float) count, grads, 0.0f,
                           NULL);
        run->last_micro [t] = count;
        const float *features = batch->features + (size_t) lo * self->feature_size;
        const int32_t *labels = run->mode == ZA_MODE_PREDICT? NULL: batch->labels + lo;
        if (on_device) {
            if ((run->rc [t] = s_upload_batch (self, t, features, labels, count)))
                break;
            features = self->dev_features [t];
            labels = labels? self->dev_labels [t]: NULL;
        }
        //  In its last micro-batch a thread's buffer becomes final layer by
        //  layer: the model_fn says so (when it does), and we pass it on.
        int streamed = grads && run->streaming && lo + count >= last;
        if (streamed)
            za_model_on_grads_final (s_thread_final, &run->listeners [t]);
        //  Randomness (dropout) differs per thread and micro-batch, fixed by the step.
        uint64_t seed = (uint64_t) run->step * 0x9e3779b97f4a7c15ULL
                      ^ ((uint64_t) (self->first_thread + t) << 40)
                      ^ (uint64_t) (lo - first);
        za_spec_t spec;
        float scale = run->mode == ZA_MODE_TRAIN? self->loss_scale: 1.0f;
        za_model_set_loss_scale (scale);
        run->rc [t] = self->model_fn->model_fn (self->states [t], features, labels, count,
                                                run->mode, values, grads, (int64_t) seed,
                                                &spec);
        if (run->rc [t] == 0 && scale != 1.0f && !za_model_loss_scale_asked ())
            run->rc [t] = za_error ("model_fn '%s' does not apply the loss scale that "
                                    "--precision mixed_float16 needs (za_model_loss_scale, "
                                    "za_model.h)", self->model_fn->name);
        //  EVAL and PREDICT on a device: the logits to the host (batch x classes
        //  floats), for the metrics and the predictions.
        if (run->rc [t] == 0 && on_device && run->mode != ZA_MODE_TRAIN)
            run->rc [t] = s_download_logits (self, t, &spec, count);
        run->specs [t].logits = spec.logits;
        run->specs [t].n_classes = spec.n_classes;
        run->specs [t].loss_sum += spec.loss_sum;
        run->specs [t].correct += spec.correct;
        if (streamed)
            za_model_on_grads_final (NULL, NULL);
    }
    za_model_set_values_epoch (0);
    //  A device's work ends here, so the batch's end is the threads' join.
    if (on_device && be->sync () && run->rc [t] == 0)
        run->rc [t] = -1;
    if (run->rc [t])
        snprintf (run->error [t], ZA_ERROR_MAX_CHARS, "%s", za_last_error ());
}

//  Runs the model_fn over a batch split across the threads; in TRAIN leaves
//  the batch's mean gradient in self->grads. *loss_sum and *correct add up
//  the slices. Returns 0, or -1 with the first thread's error.
static int
s_batch_run (za_replica_t *self, const za_batch_t *batch, za_mode_t mode, int64_t step,
             s_batch_run_t *run, double *loss_sum, int *correct)
{
    *loss_sum = 0;
    *correct = 0;
    if (batch->feature_size != (int64_t) self->feature_size)
        return za_error ("input_fn gives examples of %lld values; the model expects %dx%dx%d"
                         " = %zu", (long long) batch->feature_size, self->input.height,
                         self->input.width, self->input.channels, self->feature_size);
    if (mode == ZA_MODE_TRAIN && !self->train)
        return za_error ("this replica computes no gradients (built for inference)");
    if (s_plan (self, batch->size))
        return -1;
    run->self = self;
    run->batch = batch;
    run->mode = mode;
    run->step = step;
    //  Unique in the process (replicas of one process share its back end's
    //  threads' state), never 0.
    static _Atomic uint64_t epochs;
    run->values_epoch = atomic_fetch_add (&epochs, 1) + 1;
    run->streaming = mode == ZA_MODE_TRAIN && self->final_fn && self->be->host_memory;
    if (s_values_to_devices (self))
        return -1;
    run->combined = self->vars.total;
    for (int t = 0; t < self->threads; t++) {
        //  Each thread's slice; nothing of it is final yet.
        int first = (int) ((int64_t) batch->size * t / self->threads);
        int last = (int) ((int64_t) batch->size * (t + 1) / self->threads);
        run->first [t] = first;
        run->count [t] = last - first;
        run->ready [t] = self->vars.total;
        run->last_micro [t] = 0;
        run->listeners [t] = (s_listener_t) {run, t};
    }
    za_parallel_run (self->pool, s_batch_slice, run);
    for (int t = 0; t < self->threads; t++) {
        if (run->rc [t])
            return za_error_adopt (run->error [t]);
        *loss_sum += run->specs [t].loss_sum;
        *correct += run->specs [t].correct;
    }
    if (mode == ZA_MODE_TRAIN && run->combined > 0) {
        //  What the threads did not say was final is final now.
        if (!self->be->host_memory && self->be->bind (self->device_of [0]))
            return -1;
        if (self->be->host_memory && self->threads > 1 && run->combined >= APPLY_SPLIT_MIN)
            za_parallel_run (self->pool, s_combine_share, run);
        else
            s_combine (run, 0, run->combined);
        run->combined = 0;
        if (run->streaming)
            self->final_fn (self->final_arg, 0);
        else
        if (!self->be->host_memory) {
            if (self->be->sync ())
                return -1;
            self->grads_at = S_AT_DEVICE;
            //  A listener reads the host block: it gets the whole gradient at once.
            if (self->final_fn) {
                s_to_host (self, &self->grads_at, &self->grads, self->dev_grads, 1, 1);
                self->final_fn (self->final_arg, 0);
            }
        }
    }
    return 0;
}

int
za_replica_compute_gradients (za_replica_t *self, const za_batch_t *batch, int64_t step,
                              double *loss_mean)
{
    s_batch_run_t run;
    double loss_sum;
    int correct;
    if (s_batch_run (self, batch, ZA_MODE_TRAIN, step, &run, &loss_sum, &correct))
        return -1;
    *loss_mean = loss_sum / batch->size;
    //  A frozen layer above one that trains got a gradient on its way down:
    //  it is none of the update's (a ps or the ring sees zeros).
    for (int v = 0; self->frozen_count && self->be->host_memory && v < self->vars.count; v++)
        if (self->vars.vars [v].frozen)
            memset (self->grads + self->vars.vars [v].offset, 0,
                    self->vars.vars [v].size * sizeof (float));
    return 0;
}

//  Calls the optimizer over share `share` of `shares` of each run of
//  variables that train (frozen ones are never updated; the update is
//  element by element, so the values are the same however it is split), on
//  values, grads and slots in either memory.
static void
s_apply_trainable (za_replica_t *self, int64_t step, float *values, const float *grads,
                   float **slots, void (*apply) (const za_optim_config_t *, int64_t, float *,
                                                 const float *, float **, size_t),
                   int share, int shares)
{
    int slot_count = s_slot_count (self);
    for (int r = 0; r < self->run_count; r++) {
        size_t length = self->run_to [r] - self->run_from [r];
        size_t from = self->run_from [r] + length * share / shares;
        size_t to = self->run_from [r] + length * (share + 1) / shares;
        float *views [ZA_OPTIM_MAX_SLOTS];
        for (int s = 0; s < slot_count; s++)
            views [s] = slots [s] + from;
        apply (&self->optim, step, values + from, grads + from, views, to - from);
    }
}

//  The optimizer's update in host memory split over the replica's threads:
//  thread t takes the t-th share.
typedef struct {
    za_replica_t *self;
    int64_t step;
} s_apply_run_t;

static void
s_apply_share (void *arg, int t)
{
    s_apply_run_t *run = (s_apply_run_t *) arg;
    za_replica_t *self = run->self;
    s_apply_trainable (self, run->step, self->values, self->grads, self->slots, za_optim_apply,
                       t, self->threads);
}

double
za_replica_clip_gradients (za_replica_t *self, float clip)
{
    if (!self->be->host_memory)
        return -1;
    size_t size [ZA_MAX_VARS];
    for (int r = 0; r < self->run_count; r++)
        size [r] = self->run_to [r] - self->run_from [r];
    return za_optim_clip_by_global_norm (self->grads, self->run_from, size, self->run_count,
                                         clip);
}

//  The loss scale's step for the gradient block `grads` (in the memory of
//  back end `be`): 1 when its trainable runs are finite, else 0, the scale
//  halved.
static int
s_loss_scale_step (za_replica_t *self, const za_backend_t *be, const float *grads)
{
    if (self->be->precision != ZA_PRECISION_FP16)
        return 1;
    int finite = 1;
    for (int r = 0; r < self->run_count && finite; r++)
        finite = be->all_finite (self->run_to [r] - self->run_from [r],
                                 grads + self->run_from [r]);
    if (finite) {
        if (++self->good_steps >= LOSS_SCALE_GROWTH_STEPS) {
            if (self->loss_scale < LOSS_SCALE_MAX)
                self->loss_scale *= 2.0f;
            self->good_steps = 0;
        }
        return 1;
    }
    self->loss_scale = self->loss_scale > 2.0f? self->loss_scale / 2.0f: 1.0f;
    self->good_steps = 0;
    self->skipped_steps++;
    return 0;
}

int
za_replica_loss_scale_check (za_replica_t *self)
{
    if (self->be->precision != ZA_PRECISION_FP16 || !self->train)
        return 1;
    float *grads = za_replica_gradients (self);
    if (s_loss_scale_step (self, za_backend_cpu (), grads))
        return 1;
    memset (grads, 0, self->vars.total * sizeof (float));
    return 0;
}

float
za_replica_loss_scale (const za_replica_t *self, int64_t *skipped)
{
    if (skipped)
        *skipped = self->skipped_steps;
    return self->be->precision == ZA_PRECISION_FP16? self->loss_scale: 0.0f;
}

void
za_replica_loss_scale_state (const za_replica_t *self, float *scale, int64_t *good_steps)
{
    *scale = self->loss_scale;
    *good_steps = self->good_steps;
}

void
za_replica_set_loss_scale (za_replica_t *self, float scale, int64_t good_steps)
{
    if (self->be->precision != ZA_PRECISION_FP16 || !isfinite (scale) || scale < 1
        || scale > LOSS_SCALE_MAX || good_steps < 0)
        return;
    self->loss_scale = scale;
    self->good_steps = good_steps;
}

void
za_replica_apply (za_replica_t *self, int64_t step)
{
    //  An overflow in mixed_float16 updates nothing (values and slots as they were).
    if (self->be->precision == ZA_PRECISION_FP16 && self->be->host_memory
        && !s_loss_scale_step (self, self->be, self->grads))
        return;
    if (self->optim.global_clipnorm > 0)
        za_replica_clip_gradients (self, self->optim.global_clipnorm);
    if (self->be->host_memory) {
        s_apply_run_t run = {self, step};
        if (self->threads > 1 && self->vars.total >= APPLY_SPLIT_MIN)
            za_parallel_run (self->pool, s_apply_share, &run);
        else
            s_apply_trainable (self, step, self->values, self->grads, self->slots,
                               za_optim_apply, 0, 1);
        return;
    }
    //  On the device: a failed copy shows at the next step's sync.
    if (s_state_to_device (self)
        || s_to_device (self, &self->grads_at, &self->grads, self->dev_grads, 1)
        || !s_loss_scale_step (self, self->be, self->dev_grads [0]))
        return;
    s_apply_trainable (self, step, self->device_values [0], self->dev_grads [0],
                       self->dev_slots, self->be->optim_apply, 0, 1);
    self->values_at = self->slots_at = S_AT_DEVICE;
    self->copies_stale = self->device_count > 1;
}

//  Runs `batch` in `mode` in views of at most one micro-batch per thread,
//  so each thread's logits cover its whole slice, and gives rows_fn the
//  logits of each slice in order (the examples from `at` in the batch).
//  Sums the loss and the correct. 0, 1 when rows_fn said stop, or -1.
typedef int (s_rows_fn_t) (void *arg, const za_batch_t *batch, int at, const float *logits,
                           int count, int n_classes);

static int
s_run_in_views (za_replica_t *self, const za_batch_t *batch, za_mode_t mode,
                s_rows_fn_t *rows_fn, void *arg, double *loss_sum, int *correct)
{
    int view_max = self->be->host_memory? self->threads * self->micro: batch->size;
    *loss_sum = 0;
    *correct = 0;
    s_batch_run_t run;
    int rc = 0;
    for (int lo = 0; lo < batch->size && rc == 0; lo += view_max) {
        za_batch_t view = {batch->features + (size_t) lo * self->feature_size,
                           batch->labels? batch->labels + lo: NULL,
                           batch->size - lo < view_max? batch->size - lo: view_max,
                           batch->feature_size, NULL};
        double view_loss;
        int view_correct;
        rc = s_batch_run (self, &view, mode, 0, &run, &view_loss, &view_correct);
        *loss_sum += view_loss;
        *correct += view_correct;
        for (int t = 0; t < self->threads && rc == 0; t++)
            rc = rows_fn (arg, batch, lo + run.first [t], run.specs [t].logits, run.count [t],
                          run.specs [t].n_classes);
    }
    return rc;
}

static int
s_metrics_rows (void *arg, const za_batch_t *batch, int at, const float *logits, int count,
                int n_classes)
{
    return count > 0? za_eval_metrics_update ((za_eval_metrics_t *) arg, logits,
                                              batch->labels + at, count, n_classes): 0;
}

int
za_replica_evaluate_batch (za_replica_t *self, const za_batch_t *batch, double *loss_sum,
                           int *correct, za_eval_metrics_t *metrics)
{
    if (metrics)
        return s_run_in_views (self, batch, ZA_MODE_EVAL, s_metrics_rows, metrics, loss_sum,
                               correct);
    s_batch_run_t run;
    return s_batch_run (self, batch, ZA_MODE_EVAL, 0, &run, loss_sum, correct);
}

typedef struct {
    za_predict_fn_t fn;
    void *arg;
    int64_t *index;
} s_predict_t;

static int
s_predict_rows (void *arg, const za_batch_t *batch, int at, const float *logits, int count,
                int n_classes)
{
    s_predict_t *predict = (s_predict_t *) arg;
    for (int r = 0; r < count; r++, at++) {
        const float *z = logits + (size_t) r * n_classes;
        int best = 0;
        for (int k = 1; k < n_classes; k++)
            if (z [k] > z [best])
                best = k;
        int64_t number = (*predict->index)++;
        if (predict->fn (predict->arg, batch->indices? batch->indices [at]: number, z,
                         n_classes, best))
            return 1;
    }
    return 0;
}

int
za_replica_predict_batch (za_replica_t *self, const za_batch_t *batch, za_predict_fn_t fn,
                          void *arg, int64_t *index)
{
    //  PREDICT has no labels: the view's are NULL.
    za_batch_t unlabelled = *batch;
    unlabelled.labels = NULL;
    s_predict_t predict = {fn, arg, index};
    double unused_loss;
    int unused_correct;
    return s_run_in_views (self, &unlabelled, ZA_MODE_PREDICT, s_predict_rows, &predict,
                           &unused_loss, &unused_correct);
}

// ---------------------------------------------------------------------------
//  Checkpoints

static void
s_tensor_of_var (za_ckpt_tensor_t *t, const za_var_t *var, const char *name,
                 const float *block)
{
    memset (t, 0, sizeof *t);
    t->name = name;
    t->dtype = ZA_DTYPE_F32;
    t->ndim = var->ndim;
    for (int d = 0; d < var->ndim; d++)
        t->shape [d] = var->shape [d];
    t->data = block + var->offset;
}

int
za_replica_save (za_replica_t *self, const char *model_dir, int64_t step, int keep_max)
{
    if (!model_dir)
        return za_error ("save: no model_dir");
    int slot_count = s_slot_count (self);
    s_to_host (self, &self->values_at, &self->values, self->device_values, 1, 0);
    s_to_host (self, &self->slots_at, self->slots, self->dev_slots, slot_count, 0);
    za_ckpt_tensor_t tensors [ZA_MAX_VARS * (1 + ZA_OPTIM_MAX_SLOTS) + 3];
    char names [ZA_MAX_VARS * ZA_OPTIM_MAX_SLOTS][SLOT_NAME_MAX];
    int t = 0;
    for (int v = 0; v < self->vars.count; v++)
        s_tensor_of_var (&tensors [t++], &self->vars.vars [v], self->vars.vars [v].name,
                         self->values);
    for (int s = 0; s < slot_count; s++)
        for (int v = 0; v < self->vars.count; v++) {
            if (self->vars.vars [v].frozen)
                continue;                   //  a frozen variable has no slots
            char *name = names [s * self->vars.count + v];
            snprintf (name, SLOT_NAME_MAX, "%s/%s", self->vars.vars [v].name,
                      za_optim_slot_name (self->optim.kind, s));
            s_tensor_of_var (&tensors [t++], &self->vars.vars [v], name, self->slots [s]);
        }
    tensors [t++] = (za_ckpt_tensor_t) {.name = "global_step", .dtype = ZA_DTYPE_I64,
                                        .ndim = 0, .data = &step};
    //  mixed_float16: the loss scale goes on from where it was.
    float scale = self->loss_scale;
    int64_t good_steps = self->good_steps;
    if (self->be->precision == ZA_PRECISION_FP16 && self->train) {
        tensors [t++] = (za_ckpt_tensor_t) {.name = CKPT_LOSS_SCALE, .dtype = ZA_DTYPE_F32,
                                            .ndim = 0, .data = &scale};
        tensors [t++] = (za_ckpt_tensor_t) {.name = CKPT_GOOD_STEPS, .dtype = ZA_DTYPE_I64,
                                            .ndim = 0, .data = &good_steps};
    }
    char lr [32];
    snprintf (lr, sizeof lr, "%g", (double) self->optim.learning_rate);
    za_ckpt_meta_t meta [] = {
        {CKPT_META_MODEL, za_replica_model_text (self)},
        {CKPT_META_MODEL_FN, self->model_fn->name},
        {"optimizer", self->has_optim? za_optim_name (self->optim.kind): "none"},
        {"learning_rate", lr},
    };
    int meta_count = self->has_optim? 4: 3;
    if (za_mkdirs (model_dir))
        return -1;
    return za_checkpoint_write_atomic (model_dir, step, tensors, t, meta, meta_count, keep_max);
}

int
za_replica_save_through (za_replica_t *self, const char *model_dir, int64_t step, int keep_max,
                         int final)
{
    int waiting = 0;
    za_checkpoint_disk_errno_clear ();
    while (za_replica_save (self, model_dir, step, keep_max)) {
        int err = za_checkpoint_disk_errno ();
        za_checkpoint_disk_errno_clear ();
        if (!err)
            return -1;
        if (!self->disk_failing)
            za_info ("cannot write the checkpoint of step %" PRId64 " in %s (%s): the "
                     "checkpoints before it and the index stay intact; training goes on and "
                     "the next save tries again", step, model_dir, strerror (err));
        self->disk_failing = 1;
        if (!final)
            return ZA_SAVE_SKIPPED;
        //  Room may come back; a disk that fails (EIO) or went read-only
        //  does not by waiting: the run fails, and its supervisor may
        //  restart it on another.
        if (err != ENOSPC && err != EDQUOT)
            return za_error ("the final checkpoint (step %" PRId64 ") cannot be written in "
                             "%s: %s", step, model_dir, strerror (err));
        if (!waiting++)
            za_info ("waiting for room in %s to write the final checkpoint (step %" PRId64
                     "): tried again every %d s; Ctrl-C gives up", model_dir, step,
                     ZA_SAVE_RETRY_SECS);
        if (zsys_interrupted)
            return -1;
        zclock_sleep (ZA_SAVE_RETRY_SECS * 1000);
        if (zsys_interrupted)
            return za_error ("interrupted while waiting to write the final checkpoint");
    }
    if (self->disk_failing)
        za_info ("checkpoints are written again (step %" PRId64 ")", step);
    self->disk_failing = 0;
    return 0;
}

//  Finds `name` in the checkpoint and checks it has var's shape; copies it
//  into block (when block is not NULL). Returns 0, 1 when the checkpoint
//  lacks it, or -1 with an error on another shape or type.
static int
s_copy_tensor (const za_checkpoint_t *ckpt, const char *name, const za_var_t *var,
               float *block)
{
    const za_ckpt_tensor_t *t = za_checkpoint_find (ckpt, name);
    if (!t)
        return 1;
    int same = t->dtype == ZA_DTYPE_F32 && t->ndim == var->ndim;
    for (int d = 0; same && d < var->ndim; d++)
        same = t->shape [d] == var->shape [d];
    if (!same)
        return za_error ("'%s': tensor '%s' has another shape or type than the model's",
                         za_checkpoint_filename (ckpt), name);
    if (block)
        memcpy (block + var->offset, t->data, var->size * sizeof (float));
    return 0;
}

int
za_replica_restore (za_replica_t *self, const za_checkpoint_t *ckpt, int64_t *step)
{
    const char *model = za_checkpoint_meta (ckpt, CKPT_META_MODEL);
    const char *text = za_replica_model_text (self);
    if (model && strcmp (model, text) != 0)
        return za_error ("'%s' holds another model:\n  checkpoint: %s\n  this run:   %s\n"
                         "Use another --model-dir, or the same model.",
                         za_checkpoint_filename (ckpt), model, text);
    int slot_count = s_slot_count (self);
    int missing_slots = 0;
    for (int pass = 0; pass < 2; pass++) {
        int copy = pass == 1;
        for (int v = 0; v < self->vars.count; v++) {
            const za_var_t *var = &self->vars.vars [v];
            int rc = s_copy_tensor (ckpt, var->name, var, copy? self->values: NULL);
            if (rc > 0)
                return za_error ("'%s' has no variable '%s': written by another model?",
                                 za_checkpoint_filename (ckpt), var->name);
            if (rc < 0)
                return -1;
            for (int s = 0; s < slot_count && !var->frozen; s++) {
                char name [SLOT_NAME_MAX];
                snprintf (name, sizeof name, "%s/%s", var->name,
                          za_optim_slot_name (self->optim.kind, s));
                rc = s_copy_tensor (ckpt, name, var, copy && !missing_slots? self->slots [s]: NULL);
                if (rc < 0)
                    return -1;
                if (!copy)
                    missing_slots += rc;
            }
        }
    }
    if (missing_slots) {
        za_info ("'%s' has no %s slots: starting them fresh",
                 za_checkpoint_filename (ckpt), za_optim_name (self->optim.kind));
        za_replica_reset_slots (self);
    }
    //  mixed_float16: the scale it had (a checkpoint of another precision
    //  has none: the initial one stays).
    const za_ckpt_tensor_t *scale = za_checkpoint_find (ckpt, CKPT_LOSS_SCALE);
    const za_ckpt_tensor_t *good = za_checkpoint_find (ckpt, CKPT_GOOD_STEPS);
    if (scale && good && scale->dtype == ZA_DTYPE_F32 && scale->ndim == 0
        && good->dtype == ZA_DTYPE_I64 && good->ndim == 0) {
        float value;
        int64_t count;
        memcpy (&value, scale->data, sizeof value);
        memcpy (&count, good->data, sizeof count);
        za_replica_set_loss_scale (self, value, count);
    }
    //  Every value and slot was written on the host.
    self->values_at = self->slots_at = S_AT_HOST;
    *step = za_checkpoint_step (ckpt);
    return 0;
}

//  A model dir with no checkpoint: the variables a warm start selects come
//  from its file, the others keep their initial values; slots and the step
//  start fresh.
static int
s_warm_start (za_replica_t *self)
{
    if (!self->warm_start || !self->warm_start->from)
        return 0;
    float *values = za_replica_values (self);
    int loaded = za_warm_start_load (self->warm_start, &self->vars, values);
    if (loaded < 0)
        return -1;
    self->values_at = S_AT_HOST;
    za_info ("warm start: %d variables from %s", loaded, self->warm_start->from);
    return 0;
}

int
za_replica_restore_newest (za_replica_t *self, const char *model_dir, int *restored,
                           int64_t *step)
{
    int found_any = 0;
    *restored = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (model_dir, &found_any);
    if (!ckpt) {
        if (found_any)
            return za_error ("no intact checkpoint in '%s' (all are corrupt; see above)",
                             model_dir);
        return s_warm_start (self);
    }
    int rc = za_replica_restore (self, ckpt, step);
    za_checkpoint_destroy (&ckpt);
    *restored = rc == 0;
    return rc;
}
