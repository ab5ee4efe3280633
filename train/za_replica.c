/*  za_replica.c: a model's states per thread, planned for micro-batches,
    and its value, gradient and slot blocks on the host and on a device.  */
#include "za_replica_private.h"

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
//  mixed_float16's loss scale: Keras's initial_scale.
#define LOSS_SCALE_INITIAL 32768.0f

static void
s_destroy_states (za_replica_t *self)
{
    for (int t = 0; t < ZA_REPLICA_MAX_THREADS; t++) {
        //  A recording holds the buffers it was made on: it goes with them.
        for (int g = 0; g < ZA_REPLICA_GRAPHS; g++) {
            za_replica_graph_t *graph = &self->graphs [t][g];
            if (graph->graph) {
                self->be->bind (self->device_of [t]);
                self->be->graph_free (graph->graph);
            }
            memset (graph, 0, sizeof *graph);
        }
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

//  The runs of variables that train: consecutive ones (and the padding
//  between them) join; a frozen one ends a run. Nothing frozen: [0, total).
//  The optimizer's pieces: the runs, cut where slots_step changes.
void
za_replica_plan_runs (za_replica_t *self)
{
    const za_vars_t *vars = &self->vars;
    self->run_count = self->frozen_count = self->piece_count = 0;
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
        if (!open || self->slots_step [v] != self->piece_slots_step [self->piece_count - 1]) {
            self->piece_from [self->piece_count] = open? var->offset
                                                 : self->run_from [self->run_count - 1];
            self->piece_slots_step [self->piece_count++] = self->slots_step [v];
        }
        self->run_to [self->run_count - 1] = var->offset + var->size;
        self->piece_to [self->piece_count - 1] = var->offset + var->size;
        open = 1;
    }
    //  The last run takes the block's tail (padding, zero).
    if (open && self->run_count) {
        self->run_to [self->run_count - 1] = vars->total;
        self->piece_to [self->piece_count - 1] = vars->total;
    }
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

//  (Re)plans the threads' model states for batches of up to batch_max
//  examples (on the CPU each state holds one micro-batch at most; on a
//  device, its whole slice, and a buffer the slice is copied up into). The
//  variable table comes out the same each time; values are kept. On
//  failure no state is left, so the next call plans again.
int
za_replica_plan (za_replica_t *self, int batch_max)
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
    self->frozen_epoch = 0;
    za_replica_plan_runs (self);
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
    self->values_at = self->slots_at = REPLICA_AT_HOST;
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

//  Brings the host copies of `count` blocks that move together (the
//  values; the gradient; the slots) up to date: a copy down when the first
//  device's are newer. `write`: the caller will change them.
void
za_replica_to_host (za_replica_t *self, int *at, float *const *host, float *const *device,
                    int count, int write)
{
    if (self->be->host_memory || count == 0)
        return;
    //  The steps that did not wait are done first; a failure of theirs is
    //  the next take's to say.
    if (!self->kept [0] && za_replica_settle (self))
        snprintf (self->kept, sizeof self->kept, "%s", za_last_error ());
    if (*at == REPLICA_AT_DEVICE) {
        self->be->bind (self->device_of [0]);
        for (int b = 0; b < count; b++)
            if (self->be->download (host [b], device [b], self->vars.total * sizeof (float)))
                za_error ("the device's numbers could not be read back; the run will stop");
        *at = REPLICA_AT_BOTH;
    }
    if (write)
        *at = REPLICA_AT_HOST;
}

//  Brings the first device's copies of `count` blocks up to date. 0 or -1.
int
za_replica_to_device (za_replica_t *self, int *at, float *const *host, float *const *device,
                      int count)
{
    if (self->be->host_memory || *at != REPLICA_AT_HOST)
        return 0;
    self->be->bind (self->device_of [0]);
    for (int b = 0; b < count; b++)
        if (self->be->upload (device [b], host [b], self->vars.total * sizeof (float)))
            return -1;
    *at = REPLICA_AT_BOTH;
    return 0;
}

//  The first device's values and slots up to date (what the host wrote).
int
za_replica_state_to_device (za_replica_t *self)
{
    if (self->values_at == REPLICA_AT_HOST)
        self->copies_stale = self->device_count > 1;
    return za_replica_to_device (self, &self->values_at, &self->values, self->device_values, 1)
        || za_replica_to_device (self, &self->slots_at, self->slots, self->dev_slots,
                                 za_replica_slot_count (self));
}

void
za_replica_collectives_off (za_replica_t *self)
{
    fprintf (stderr, "zactor: %s; the devices' gradients and values go by copies through "
                     "the first instead\n", za_last_error ());
    self->collectives_off = 1;
}

//  Before a step: that, and the values' copies on the other devices (a
//  broadcast where the back end has one).
int
za_replica_values_to_devices (za_replica_t *self)
{
    if (self->be->host_memory)
        return 0;
    if (za_replica_state_to_device (self))
        return -1;
    if (self->copies_stale && self->device_count > 1 && !self->collectives_off) {
        int devices [ZA_DEVICE_MAX];
        for (int d = 0; d < self->device_count; d++)
            devices [d] = self->device_of [0] + d;
        if (self->be->devices_broadcast (self->device_values, devices, self->device_count,
                                         self->vars.total) == 0)
            self->copies_stale = 0;
        else
            za_replica_collectives_off (self);
    }
    for (int d = 1; d < self->device_count && self->copies_stale; d++)
        if (self->be->copy (self->device_values [d], self->device_values [0],
                            self->vars.total * sizeof (float)))
            return -1;
    self->copies_stale = 0;
    //  The other threads (their own streams) read what this one's wrote: the
    //  update, the copies. Done before they start.
    return self->threads > 1? self->be->sync (): 0;
}

//  The config's model_fn, input shape and learning rate: 0, or -1 with the
//  error said.
static int
s_config_check (const za_replica_config_t *config)
{
    const za_model_fn_t *model_fn = config->model_fn;
    if (!model_fn || !model_fn->create || !model_fn->model_fn || !model_fn->destroy
        || !model_fn->init_vars)
        return za_error ("model_fn must provide create, init_vars, model_fn, destroy");
    za_input_shape_t input = config->input;
    if (input.height <= 0 || input.width <= 0 || input.channels <= 0)
        return za_error ("bad input shape %dx%dx%d", input.height, input.width,
                         input.channels);
    if (config->optim && !(config->optim->learning_rate > 0))
        return za_error ("learning rate must be positive (got %g)",
                         (double) config->optim->learning_rate);
    return 0;
}

//  On the CPU: config->threads threads (0: one per online core), each with
//  one OpenBLAS thread under it, and the micro-batch's size.
static void
s_threads_on_cpu (za_replica_t *self, const za_replica_config_t *config)
{
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

//  On devices from the `first`: a thread per model copy, replicas_per_device
//  on each. 0, or -1 with the error said.
static int
s_threads_on_devices (za_replica_t *self, const za_replica_config_t *config, int first)
{
    char text [ZA_DEVICE_TEXT_MAX];
    if (!self->model_fn->device_ready)
        return za_error ("model_fn '%s' reads host memory itself: it runs on --device cpu "
                         "alone, not on %s", self->model_fn->name,
                         za_device_text (&config->device, text, sizeof text));
    int per_device = config->replicas_per_device > 0? config->replicas_per_device: 1;
    if (self->device_count < 1 || self->device_count > ZA_DEVICE_MAX
        || per_device * self->device_count > ZA_REPLICA_MAX_THREADS)
        return za_error ("%d device%s x %d replicas each: at most %d replicas",
                         self->device_count, self->device_count == 1? "": "s", per_device,
                         ZA_REPLICA_MAX_THREADS);
    self->threads = per_device * self->device_count;
    for (int t = 0; t < self->threads; t++)
        self->device_of [t] = first + t / per_device;
    return 0;
}

//  The value, gradient and slot blocks in host memory (on a device, one
//  host gradient block mirrors the combined one), and the device's. 0 or -1.
static int
s_blocks_new (za_replica_t *self)
{
    size_t bytes = self->vars.total * sizeof (float);
    int host_grads = !self->train? 0: self->be->host_memory? self->threads: 1;
    if (!(self->values = (float *) self->be->host_alloc (bytes)))
        return -1;
    for (int t = 0; t < host_grads; t++)
        if (!(self->thread_grads [t] = (float *) self->be->host_alloc (bytes)))
            return -1;
    self->grads = self->thread_grads [0];
    int slot_count = za_replica_slot_count (self);
    for (int s = 0; s < slot_count; s++)
        if (!(self->slots [s] = (float *) self->be->host_alloc (bytes)))
            return -1;
    if (!self->be->host_memory && s_device_new (self, slot_count))
        return -1;
    return 0;
}

za_replica_t *
za_replica_new (const za_replica_config_t *config, uint64_t seed)
{
    if (s_config_check (config))
        return NULL;
    za_replica_t *self = (za_replica_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->final_mutex, NULL);
    self->model_fn = config->model_fn;
    self->params = config->params;
    self->warm_start = config->warm_start;
    self->input = config->input;
    self->train = config->train != 0;
    self->has_optim = config->optim != NULL;
    if (config->optim)
        self->optim = *config->optim;
    int first = 0;
    if (!(self->be = za_device_backend (&config->device, &first, &self->device_count))
        || !(self->be = za_backend_policy (self->be, config->precision)))
        goto fail;
    self->loss_scale = self->be->precision != ZA_PRECISION_FP16? 1.0f
                     : config->initial_loss_scale > 0? config->initial_loss_scale
                     : LOSS_SCALE_INITIAL;
    if (self->be->host_memory)
        s_threads_on_cpu (self, config);
    else
    if (s_threads_on_devices (self, config, first))
        goto fail;
    self->first_thread = config->replica_index > 0? config->replica_index * self->threads: 0;
    self->feature_size = (size_t) self->input.height * self->input.width
                       * self->input.channels;
    if (!(self->pool = za_parallel_new (self->threads)) || za_replica_plan (self, 1))
        goto fail;
    //  On the CPU, threads that own a core each watch for the next step
    //  briefly instead of sleeping (more threads than cores: never spun).
    if (self->be->host_memory && self->threads <= sysconf (_SC_NPROCESSORS_ONLN))
        za_parallel_set_spin (self->pool, POOL_SPIN_S);
    if (s_blocks_new (self))
        goto fail;
    //  A step replayed as a CUDA graph where the caller asks and it can be,
    //  in fp32 (measured on a GPU so far); ZA_CUDA_GRAPHS=0: never; =1: every
    //  replica in any precision, the log saying why not where it cannot.
    const char *graphs = getenv ("ZA_CUDA_GRAPHS");
    int forced = graphs && !strcmp (graphs, "1"), off = graphs && !strcmp (graphs, "0");
    if (graphs && *graphs && !forced && !off)
        za_info ("warning: ZA_CUDA_GRAPHS=%s is neither 0 nor 1: taken as unset", graphs);
    if (forced || (!off && config->graphs && self->be->precision == ZA_PRECISION_FP32)) {
        self->graphs_on = self->be->graph_begin && self->model_fn->replayable
                       && self->model_fn->replayable (self->states [0])
                       && self->loss_scale == 1.0f;
        if (!self->graphs_on && forced)
            za_info ("ZA_CUDA_GRAPHS=1: steps run without CUDA graphs (%s)",
                     !self->be->graph_begin? "this device records none"
                     : self->loss_scale != 1.0f? "mixed_float16 checks each step's gradients"
                     : "the model has a dropout or frozen layers");
    }
    self->model_fn->init_vars (self->states [0], &self->vars, self->values, seed);
    za_replica_reset_slots (self);
    //  (TensorFlow's minimize: "No variables to optimize".)
    if (self->train && self->vars.count > 0 && self->run_count == 0) {
        za_error ("every variable of the model is frozen (--freeze, --trainable, "
                  "trainable=false): nothing would train");
        goto fail;
    }
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
    za_replica_to_host (self, &self->values_at, &self->values, self->device_values, 1, 1);
    self->frozen_epoch = 0;             //  the caller may write any variable
    return self->values;
}

float *
za_replica_gradients (za_replica_t *self)
{
    za_replica_to_host (self, &self->grads_at, &self->grads, self->dev_grads, self->train, 1);
    return self->grads;
}

float *
za_replica_slot (za_replica_t *self, int slot)
{
    if (!self->has_optim || slot < 0 || slot >= za_optim_slot_count (self->optim.kind))
        return NULL;
    za_replica_to_host (self, &self->slots_at, self->slots, self->dev_slots,
                        za_replica_slot_count (self), 1);
    return self->slots [slot];
}

const za_optim_config_t *
za_replica_optim (const za_replica_t *self)
{
    return self->has_optim? &self->optim: NULL;
}

void
za_replica_set_learning_rate (za_replica_t *self, float learning_rate)
{
    if (self->has_optim && learning_rate > 0)
        self->optim.learning_rate = learning_rate;
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

int
za_replica_feed (za_replica_t *self, za_input_t *input)
{
    if (!self || !input)
        return za_error ("za_replica_feed: replica and input are required");
    //  ZA_FEED=0: the steps copy their batches (to measure what feeding gains).
    const char *feed = getenv ("ZA_FEED");
    return self->be->host_memory || (feed && strcmp (feed, "0") == 0)
         ? 0: za_input_to_device (input, self->be, self->threads, self->device_of);
}

const za_backend_t *
za_replica_backend (const za_replica_t *self)
{
    return self->be;
}

int
za_replica_bind (za_replica_t *self)
{
    return self->be->host_memory? 0: self->be->bind (self->device_of [0]);
}

float *
za_replica_device_gradients (za_replica_t *self)
{
    if (self->be->host_memory || self->be->bind (self->device_of [0])
        || za_replica_to_device (self, &self->grads_at, &self->grads, self->dev_grads, 1))
        return NULL;
    //  The caller writes it there: the host's copy is older from now on.
    self->grads_at = REPLICA_AT_DEVICE;
    return self->dev_grads [0];
}

int64_t
za_replica_replayed (const za_replica_t *self)
{
    return __atomic_load_n (&self->replayed, __ATOMIC_RELAXED);
}

int64_t
za_replica_fed (const za_replica_t *self)
{
    return self? self->fed: 0;
}

void
za_replica_reset_slots (za_replica_t *self)
{
    if (self->has_optim)
        za_optim_init_slots (&self->optim, self->slots, self->vars.total);
    self->slots_at = REPLICA_AT_HOST;
    memset (self->slots_step, 0, sizeof self->slots_step);
    za_replica_plan_runs (self);
}
