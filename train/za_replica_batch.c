/*  za_replica_batch.c: one batch over a replica's threads and micro-batches,
    to train on (the gradients combined), to evaluate or to predict.      */
#include "za_replica_private.h"
#include "za/za_trace.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

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
    uint64_t frozen_epoch;                      //  za_model_set_frozen_epoch's
    int first [ZA_REPLICA_MAX_THREADS];         //  each thread's slice of the batch
    int count [ZA_REPLICA_MAX_THREADS];
    int last_micro [ZA_REPLICA_MAX_THREADS];    //  examples in its last micro-batch
    za_spec_t specs [ZA_REPLICA_MAX_THREADS];
    int deferred [ZA_REPLICA_MAX_THREADS];      //  its loss is the back end's to say (loss_take)
    int defer;                                  //  the batch does not wait for its work: the
                                                //  device keeps its loss (za_replica_defer_loss)
    const za_batch_device_t *fed;               //  the batch's copy on the devices, cut as
                                                //  the threads cut it; NULL: copied here
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

//  On several devices with the back end's collective (NCCL's reduce):
//  each device's threads summed there, by their weights, into its first
//  thread's buffer, then those sums into device 0's by the collective.
//  Where it fails before it starts, the sums go by copies through device 0
//  (and so from then on). 0 or -1.
static int
s_combine_devices (s_batch_run_t *run)
{
    za_replica_t *self = run->self;
    const za_backend_t *be = self->be;
    size_t total = self->vars.total;
    const float inv_n = 1.0f / ((float) run->batch->size * self->loss_scale);
    float *sums [ZA_DEVICE_MAX];
    int devices [ZA_DEVICE_MAX], count = 0;
    for (int t = 0; t < self->threads; t++) {
        float *g = s_thread_grads (self, t);
        float weight = (float) run->last_micro [t] * inv_n;
        if (t == 0 || self->device_of [t] != self->device_of [t - 1]) {
            if (be->bind (self->device_of [t]))
                return -1;
            be->scale_add (total, weight, g, 0.0f, NULL);
            sums [count] = g;
            devices [count++] = self->device_of [t];
        }
        else
        if (run->count [t])
            be->scale_add (total, 1.0f, sums [count - 1], weight, g);
    }
    if (be->bind (self->device_of [0]))
        return -1;
    if (be->devices_sum (sums, devices, count, total) == 0)
        return 0;
    za_replica_collectives_off (self);
    //  Each device's sum made (its own order) before device 0 copies it.
    for (int d = 1; d < count; d++)
        if (be->bind (devices [d]) || be->sync ())
            return -1;
    if (be->bind (self->device_of [0]))
        return -1;
    for (int d = 1; d < count; d++) {
        if (be->copy (self->dev_peer, sums [d], total * sizeof (float)))
            return -1;
        be->scale_add (total, 1.0f, sums [0], 1.0f, self->dev_peer);
    }
    return 0;
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

//  Thread t's recorded step for these buffers and examples (a CUDA graph),
//  or a place for one (the oldest made way where none was free); NULL where
//  its step is not to be recorded (not in TRAIN, a listener waiting on
//  layers, a loss scale, or a model_fn whose work differs between steps).
static za_replica_graph_t *
s_graph_of (s_batch_run_t *run, int t, const float *features, const int32_t *labels,
            const float *values, float *grads, int count, float scale)
{
    za_replica_t *self = run->self;
    if (!__atomic_load_n (&self->graphs_on, __ATOMIC_RELAXED) || run->mode != ZA_MODE_TRAIN
        || run->streaming || scale != 1.0f || !self->model_fn->replayable (self->states [t]))
        return NULL;
    za_replica_graph_t *place = NULL;
    for (int g = 0; g < ZA_REPLICA_GRAPHS; g++) {
        za_replica_graph_t *graph = &self->graphs [t][g];
        if (!graph->seen && !place)
            place = graph;
        if (graph->seen && graph->features == features && graph->labels == labels
            && graph->values == values && graph->grads == grads && graph->count == count)
            return graph;
    }
    if (!place) {
        place = &self->graphs [t][self->graph_next [t]];
        self->graph_next [t] = (self->graph_next [t] + 1) % ZA_REPLICA_GRAPHS;
        if (place->graph)
            self->be->graph_free (place->graph);
    }
    *place = (za_replica_graph_t) {features, labels, values, grads, count, 0, NULL, 0, 0};
    return place;
}

//  Steps run without CUDA graphs from now on: why, said once.
static void
s_graphs_off (za_replica_t *self, const char *why)
{
    if (__atomic_exchange_n (&self->graphs_on, 0, __ATOMIC_RELAXED))
        fprintf (stderr, "zactor: %s: steps run without CUDA graphs\n", why);
}

//  The model_fn's call on thread t's micro-batch, with its loss left on the
//  device where `deferred` (softmax_xent_add); run->deferred [t] set where
//  it was. With a `graph` place (s_graph_of): replayed where recorded, run
//  as it is the first time, recorded the second. 0, or the error's code.
static int
s_model_step (s_batch_run_t *run, int t, za_replica_graph_t *graph, const float *features,
              const int32_t *labels, int count, const float *values, float *grads,
              uint64_t seed, int deferred, za_spec_t *spec)
{
    za_replica_t *self = run->self;
    const za_backend_t *be = self->be;
    if (graph && graph->graph) {
        int rc = be->graph_launch (graph->graph);
        if (rc == 0) {
            __atomic_add_fetch (&self->replayed, 1, __ATOMIC_RELAXED);
            memset (spec, 0, sizeof *spec);
            spec->n_classes = graph->n_classes;
            run->deferred [t] |= graph->deferred;
            return 0;
        }
        //  Stale (scratch it used was replaced since): run and recorded
        //  again. One that did not launch: no graphs from now on.
        be->graph_free (graph->graph);
        graph->graph = NULL;
        if (rc < 0) {
            s_graphs_off (self, za_last_error ());
            graph = NULL;
        }
    }
    int recording = graph && graph->seen;
    if (recording && be->graph_begin ()) {
        s_graphs_off (self, za_last_error ());
        recording = 0;
    }
    for (;;) {
        za_model_set_loss_deferred (deferred);
        int rc = self->model_fn->model_fn (self->states [t], features, labels, count,
                                           run->mode, values, grads, (int64_t) seed, spec);
        int taken = za_model_loss_deferred_taken ();
        if (recording) {
            //  Its calls did not run: the launch runs them, or they run again.
            void *recorded = be->graph_end ();
            if (recorded && rc == 0 && be->graph_launch (recorded) == 0) {
                graph->graph = recorded;
                graph->n_classes = spec->n_classes;
                graph->deferred = taken;
            }
            else {
                s_graphs_off (self, recorded && rc? "the model_fn failed while recorded"
                                                  : za_last_error ());
                if (recorded)
                    be->graph_free (recorded);
                recording = 0;
                continue;
            }
        }
        if (graph)
            graph->seen = 1;
        run->deferred [t] |= taken;
        return rc;
    }
}

//  One micro-batch of thread t's slice: its examples [lo, lo + count) of
//  the batch, the slice ending at `last`. 0, or the error's non-zero code.
//  A model_fn adds the gradient of its call's MEAN loss. The buffer is kept
//  as (gradient of the summed loss so far) / (this micro-batch's count):
//  when the count changes it is rescaled once, and s_batch_run weighs each
//  thread by last_micro / batch size, so the step's gradient is the mean
//  over the whole batch whatever the split. last_micro (0 at first) is the
//  count of the micro-batch before, then of the last. On a device a
//  thread's slice is one micro-batch.
static int
s_micro_batch_run (s_batch_run_t *run, int t, int lo, int count, int last,
                   const float *values, float *grads)
{
    za_replica_t *self = run->self;
    const za_backend_t *be = self->be;
    int on_device = !be->host_memory;
    int previous = run->last_micro [t];
    if (grads && previous && count != previous)
        be->scale_add (self->vars.total, (float) previous / (float) count, grads, 0.0f, NULL);
    run->last_micro [t] = count;
    const float *features = run->batch->features + (size_t) lo * self->feature_size;
    const int32_t *labels = run->mode == ZA_MODE_PREDICT? NULL: run->batch->labels + lo;
    if (run->fed) {
        //  The input's copy of this thread's slice.
        size_t at = (size_t) (lo - run->first [t]);
        features = run->fed->features [t] + at * self->feature_size;
        labels = labels? run->fed->labels [t] + at: NULL;
    }
    else
    if (on_device) {
        int rc = s_upload_batch (self, t, features, labels, count);
        if (rc)
            return rc;
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
                  ^ (uint64_t) (lo - run->first [t]);
    za_spec_t spec;
    float scale = run->mode == ZA_MODE_TRAIN? self->loss_scale: 1.0f;
    za_model_set_loss_scale (scale);
    //  The trace's forward and backward: thread 0's, where the model_fn
    //  says where one ends (a device's: as launched); the loop records them
    //  with its step's (za_replica_trace_compute). No clock unless tracing.
    double start = t == 0 && za_trace_on ()? za_clock_mono (): 0;
    za_model_take_forward_done ();
    za_replica_graph_t *graph = on_device? s_graph_of (run, t, features, labels, values,
                                                       grads, count, scale): NULL;
    //  On a device the loss waits on the device for the batch's end.
    int rc = s_model_step (run, t, graph, features, labels, count, values, grads, seed,
                           on_device && labels && be->softmax_xent_add != NULL, &spec);
    za_model_set_loss_deferred (0);
    double forward_done = za_model_take_forward_done ();
    if (start > 0 && forward_done > 0 && self->traced_count < ZA_REPLICA_TRACED_MAX) {
        double *at = self->traced [self->traced_count++];
        at [0] = start, at [1] = forward_done, at [2] = za_clock_mono ();
    }
    if (rc == 0 && scale != 1.0f && !za_model_loss_scale_asked ())
        rc = za_error ("model_fn '%s' does not apply the loss scale that --precision "
                       "mixed_float16 needs (za_model_loss_scale, za_model.h)",
                       self->model_fn->name);
    //  EVAL and PREDICT on a device: the logits to the host (batch x classes
    //  floats), for the metrics and the predictions.
    if (rc == 0 && on_device && run->mode != ZA_MODE_TRAIN)
        rc = s_download_logits (self, t, &spec, count);
    run->specs [t].logits = spec.logits;
    run->specs [t].n_classes = spec.n_classes;
    run->specs [t].loss_sum += spec.loss_sum;
    run->specs [t].correct += spec.correct;
    if (streamed)
        za_model_on_grads_final (NULL, NULL);
    return rc;
}

//  The sums the back end kept on the calling thread's device (its
//  loss_take: read, so cleared). 0, or -1 with an error where the read
//  failed or a label was outside [0, n_classes).
static int
s_loss_take (za_replica_t *self, int n_classes, double *loss_sum, int *correct)
{
    int invalid;
    if (self->be->loss_take (loss_sum, correct, &invalid))
        return -1;
    return invalid? za_error ("model: %d labels outside [0, %d)", invalid, n_classes): 0;
}

//  What thread t's model_fn left on the device for the batch's end (its
//  sums read, so cleared, even where the batch failed).
static void
s_deferred_loss (s_batch_run_t *run, int t)
{
    double loss_sum;
    int correct;
    int rc = s_loss_take (run->self, run->specs [t].n_classes, &loss_sum, &correct);
    if (run->rc [t])
        return;
    run->rc [t] = rc;
    run->specs [t].loss_sum += loss_sum;
    run->specs [t].correct += correct;
}

//  Thread t's slice of the batch, in micro-batches of per_thread examples
//  at most (za_parallel_run's task).
static void
s_batch_slice (void *arg, int t)
{
    s_batch_run_t *run = (s_batch_run_t *) arg;
    za_replica_t *self = run->self;
    const za_backend_t *be = self->be;
    int first = run->first [t], last = first + run->count [t];
    int on_device = !be->host_memory;
    memset (&run->specs [t], 0, sizeof run->specs [t]);
    run->deferred [t] = 0;
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
    za_model_set_frozen_epoch (run->frozen_epoch);
    //  A thread without examples adds nothing: final once cleared (thread
    //  0's buffer is where the others combine).
    if (grads && run->streaming && first == last)
        s_thread_final (&run->listeners [t], 0);
    for (int lo = first; lo < last && run->rc [t] == 0; lo += self->per_thread) {
        int count = last - lo < self->per_thread? last - lo: self->per_thread;
        run->rc [t] = s_micro_batch_run (run, t, lo, count, last, values, grads);
    }
    za_model_set_values_epoch (0);
    za_model_set_frozen_epoch (0);
    //  A device's work ends here, so the batch's end is the threads' join;
    //  where it defers, it goes on while the host makes the next step.
    if (on_device && !run->defer && be->sync () && run->rc [t] == 0)
        run->rc [t] = -1;
    if (run->deferred [t] && run->defer) {
        self->on_device = 1;
        self->n_classes = run->specs [t].n_classes;
    }
    else
    if (run->deferred [t])
        s_deferred_loss (run, t);
    if (run->rc [t])
        snprintf (run->error [t], ZA_ERROR_MAX_CHARS, "%s", za_last_error ());
}

//  The batch's copy on this replica's devices, where its input made one as
//  the threads cut the batch (za_replica_feed); else NULL.
static const za_batch_device_t *
s_fed (const za_replica_t *self, const za_batch_t *batch)
{
    const za_batch_device_t *fed = batch->device;
    if (!fed || fed->be != self->be || fed->slices != self->threads)
        return NULL;
    for (int t = 0; t < self->threads; t++)
        if (fed->device_of [t] != self->device_of [t])
            return NULL;
    return fed;
}

int
za_replica_settle (za_replica_t *self)
{
    const za_backend_t *be = self->be;
    if (be->host_memory || !self->queued)      //  (on_device implies queued)
        return 0;
    self->queued = 0;
    int bound = be->bind (self->device_of [0]) == 0;
    int rc = bound? be->sync (): -1;
    if (self->on_device && bound) {
        //  The sums read, and so cleared, whatever came first; the first
        //  error is the one said.
        char first [ZA_ERROR_MAX_CHARS];
        snprintf (first, sizeof first, "%s", za_last_error ());
        double loss_sum;
        int correct;
        int took = s_loss_take (self, self->n_classes, &loss_sum, &correct);
        if (rc)
            za_error_adopt (first);
        else
        if ((rc = took) == 0)
            self->pending_sum += loss_sum;
    }
    self->on_device = 0;
    //  A failure starts the sums again.
    if (rc) {
        self->pending_sum = 0;
        self->pending_examples = self->pending_steps = 0;
    }
    return rc;
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
    if (za_replica_plan (self, batch->size))
        return -1;
    run->self = self;
    run->batch = batch;
    run->mode = mode;
    run->step = step;
    //  Unique in the process (replicas of one process share its back end's
    //  threads' state), never 0.
    static _Atomic uint64_t epochs;
    run->values_epoch = atomic_fetch_add (&epochs, 1) + 1;
    if (!self->frozen_epoch)
        self->frozen_epoch = atomic_fetch_add (&epochs, 1) + 1;
    run->frozen_epoch = self->frozen_epoch;
    run->streaming = mode == ZA_MODE_TRAIN && self->final_fn && self->be->host_memory;
    run->fed = s_fed (self, batch);
    self->fed += run->fed != NULL;
    //  A batch that waits reads the losses it adds alone: those that
    //  deferred steps left on the device are taken first.
    run->defer = mode == ZA_MODE_TRAIN && self->defer;
    if (!run->defer && za_replica_settle (self))
        return -1;
    self->queued |= run->defer;
    if (za_replica_values_to_devices (self))
        return -1;
    run->combined = self->vars.total;
    for (int t = 0; t < self->threads; t++) {
        //  Each thread's slice; nothing of it is final yet.
        int first = za_batch_slice_first (batch->size, t, self->threads);
        int last = za_batch_slice_first (batch->size, t + 1, self->threads);
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
        if (!self->be->host_memory && self->device_count > 1 && !self->collectives_off) {
            if (s_combine_devices (run))
                return -1;
        }
        else
            s_combine (run, 0, run->combined);
        run->combined = 0;
        if (run->streaming)
            self->final_fn (self->final_arg, 0);
        else
        if (!self->be->host_memory) {
            if (!run->defer && self->be->sync ())
                return -1;
            self->grads_at = REPLICA_AT_DEVICE;
            //  A listener reads the host block: it gets the whole gradient at once.
            if (self->final_fn) {
                za_replica_to_host (self, &self->grads_at, &self->grads, self->dev_grads, 1, 1);
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
    self->traced_count = 0;
    if (s_batch_run (self, batch, ZA_MODE_TRAIN, step, &run, &loss_sum, &correct))
        return -1;
    *loss_mean = loss_sum / batch->size;
    if (run.defer) {
        self->pending_sum += loss_sum;
        self->pending_examples += batch->size;
        self->pending_steps++;
        *loss_mean = NAN;
    }
    //  A frozen layer above one that trains got a gradient on its way down:
    //  it is none of the update's (a ps or the ring sees zeros).
    for (int v = 0; self->frozen_count && self->be->host_memory && v < self->vars.count; v++)
        if (self->vars.vars [v].frozen)
            memset (self->grads + self->vars.vars [v].offset, 0,
                    self->vars.vars [v].size * sizeof (float));
    return 0;
}

int
za_replica_defer_loss (za_replica_t *self, int on)
{
    self->defer = on && !self->be->host_memory && self->threads == 1 && !self->final_fn;
    return self->defer;
}

int
za_replica_take_loss (za_replica_t *self, double *loss_mean, int64_t *steps)
{
    int rc = za_replica_settle (self);
    if (rc == 0 && self->kept [0])
        rc = za_error_adopt (self->kept);
    self->kept [0] = 0;
    *loss_mean = self->pending_examples? self->pending_sum / (double) self->pending_examples
                                       : NAN;
    *steps = self->pending_steps;
    self->pending_sum = 0;
    self->pending_examples = self->pending_steps = 0;
    return rc;
}

void
za_replica_trace_compute (const za_replica_t *self, int64_t step)
{
    for (int i = 0; i < self->traced_count; i++) {
        za_trace_event (ZA_TRACE_COMPUTE, "forward", self->traced [i][0], self->traced [i][1],
                        step);
        za_trace_event (ZA_TRACE_COMPUTE, "backward", self->traced [i][1], self->traced [i][2],
                        step);
    }
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
        int size = batch->size - lo < view_max? batch->size - lo: view_max;
        za_batch_t view = {batch->features + (size_t) lo * self->feature_size,
                           batch->labels? batch->labels + lo: NULL, size,
                           batch->feature_size, NULL,
                           size == batch->size? batch->device: NULL};
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
