/*  za_input.c: the input pipeline: a data set streamed shard -> shuffle ->
    repeat -> batch -> prefetch, as tf.data's.                              */
#include "za/za_input.h"
#include "za/za_kernels.h"
#include "za/za_parallel.h"
#include "za/za_util.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  --------------------------------------------------------------------------
//  Input pipeline

//  One batch's storage.
typedef struct {
    float *features;            //  [batch_size, feature_size], 64-byte aligned
    int32_t *labels;            //  [batch_size]
    int64_t *indices;           //  [batch_size]: each example's in the data set
    int size;
    za_batch_device_t device;   //  its copy on a device (za_input_to_device)
    int device_ok;              //  1: `device` holds this batch
    void *fence;                //  device.be's mark after the last step that
                                //  read the copy (s_slot_fence), or NULL
    //  The back end whose host_alloc made features and labels (pinned for
    //  its copies); NULL: za_alloc.
    const za_backend_t *pinned;
} s_slot_t;

struct _za_input_t {
    const za_dataset_t *dataset;
    za_input_config_t config;
    int64_t shard_count;        //  examples per epoch in this shard
    //  The preprocessing: channel k of the input is in's channel from [k]
    //  (BGR reverses), times scale [k] plus offset [k].
    float scale [ZA_INPUT_CHANNELS_MAX], offset [ZA_INPUT_CHANNELS_MAX];
    int from [ZA_INPUT_CHANNELS_MAX];

    //  The example stream; touched only by the producer (the prefetch thread,
    //  or the caller when prefetch is 0).
    za_rng_t rng;
    int64_t *shuffle;           //  the shuffle buffer (1 slot when not shuffling)
    int64_t shuffle_capacity;
    int64_t shuffle_fill;
    int64_t epoch_next;         //  next position in this epoch's shard
    int epochs_done;
    int in_epoch;
    int stream_ended;

    //  The batch ring: slots [head .. head + count) are ready; the consumer holds
    //  slots [head] between two calls of za_input_next while `held` is 1.
    s_slot_t *slots;
    int n_slots;
    int head, count;
    int held;
    int producer_done;
    int stop;
    int thread_started;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t ready;       //  a slot was filled, or the stream ended
    pthread_cond_t space;       //  a slot was freed, or stop was asked

    //  A data set whose loader makes the examples: each batch's are decoded
    //  on `threads` threads (the producer's and the pool's), each with its
    //  scratch, into `staging` bytes.
    za_parallel_t *pool;
    void *scratch [ZA_PARALLEL_MAX_THREADS];
    int64_t *wanted;            //  [batch_size] the examples of the batch
    int *loaded;                //  [batch_size] 1: decoded
    uint8_t *staging;           //  [batch_size, feature_size]
    int wanted_count;
    uint64_t *wanted_at;        //  [batch_size] their places in the stream

    //  Augmentation: the stream's examples drawn so far (kept or not), and
    //  one image of scratch.
    uint64_t position;
    float *augment_scratch;
    int failed;                 //  more files failed than config.max_bad allows:
                                //  the producer's, read once it is done
    int failed_seen;            //  the consumer's: za_input_next returned -1

    //  za_input_to_device's: where the producer copies each batch (under
    //  the lock; the producer copies it before each batch).
    za_batch_device_t to_device;
    int to_device_failed;       //  said once
    int fence_failed;           //  said once (the consumer's)
};

za_input_config_t
za_input_config_default (void)
{
    za_input_config_t config = {
        .num_shards = 1,
        .shard_index = 0,
        .shuffle_buffer = 0,
        .seed = 0,
        .epochs = 1,
        .batch_size = 32,
        .drop_remainder = 0,
        .prefetch = 2,
        .replicas = 1,
        .replica = 0,
        .threads = 1,
    };
    return config;
}

//  The next example of this epoch's shard, in order; 0 at the end of the epoch.
static int
s_input_shard_next (za_input_t *self, int64_t *index)
{
    if (self->epoch_next >= self->shard_count)
        return 0;
    *index = self->config.shard_index + self->epoch_next * self->config.num_shards;
    self->epoch_next++;
    return 1;
}

//  The next example index of the whole stream (shard, shuffle, repeat); 0 at
//  its end. The shuffle buffer is filled at the start of each epoch, hands out a
//  random slot and refills it from the shard, and drains at the end of the epoch.
static int
s_input_example_next (za_input_t *self, int64_t *index)
{
    while (!self->stream_ended) {
        if (!self->in_epoch) {
            if (self->config.epochs != -1 && self->epochs_done >= self->config.epochs) {
                self->stream_ended = 1;
                break;
            }
            if (self->shard_count == 0) {
                //  An empty shard repeated forever is still empty.
                self->stream_ended = 1;
                break;
            }
            self->epoch_next = 0;
            self->shuffle_fill = 0;
            while (self->shuffle_fill < self->shuffle_capacity
            &&     s_input_shard_next (self, &self->shuffle [self->shuffle_fill]))
                self->shuffle_fill++;
            self->in_epoch = 1;
        }
        if (self->shuffle_fill > 0) {
            int64_t slot = self->shuffle_fill > 1
                         ? (int64_t) za_rng_below (&self->rng, (uint32_t) self->shuffle_fill)
                         : 0;
            *index = self->shuffle [slot];
            if (!s_input_shard_next (self, &self->shuffle [slot]))
                self->shuffle [slot] = self->shuffle [--self->shuffle_fill];
            return 1;
        }
        self->in_epoch = 0;
        self->epochs_done++;
    }
    return 0;
}

//  Decodes the batch's examples of thread `index`: i = index, index + T, ...
static void
s_input_load_part (void *arg, int index)
{
    za_input_t *self = (za_input_t *) arg;
    const za_dataset_t *dataset = self->dataset;
    size_t row = (size_t) dataset->feature_size;
    int threads = self->pool? za_parallel_threads (self->pool): 1;
    for (int i = index; i < self->wanted_count; i += threads)
        self->loaded [i] = dataset->loader->load (dataset->source, self->wanted [i],
                                                  self->scratch [index],
                                                  self->staging + (size_t) i * row) == 0;
}

//  ImageNet's per-channel constants (RGB), for the preprocessing modes.
static const float s_torch_mean [3] = {0.485f, 0.456f, 0.406f};
static const float s_torch_std [3] = {0.229f, 0.224f, 0.225f};
static const float s_caffe_mean [3] = {123.68f, 116.779f, 103.939f};

void
za_preprocess_channel (za_preprocess_t mode, int channels, int k, int *from, float *scale,
                       float *offset)
{
    int c = channels == 3? k % 3: -1;       //  -1: a gray or other image
    float mean = c >= 0? s_torch_mean [c]: 0.449f, std = c >= 0? s_torch_std [c]: 0.226f;
    float caffe = c >= 0? s_caffe_mean [2 - c]: 114.799f;   //  BGR order
    *from = channels == 3 && mode == ZA_PREPROCESS_CAFFE? 2 - k: k;
    switch (mode) {
        case ZA_PREPROCESS_TF:
            *scale = 2.0f, *offset = -1.0f;
            break;
        case ZA_PREPROCESS_TORCH:
            *scale = 1.0f / std, *offset = -mean / std;
            break;
        case ZA_PREPROCESS_CAFFE:
            *scale = ZA_DATASET_PIXEL_MAX, *offset = -caffe;
            break;
        default:
            *scale = 1.0f, *offset = 0.0f;
    }
}

//  The scale and offset each channel's value in 0 .. 1 gets.
static void
s_preprocess_plan (za_input_t *self)
{
    for (int k = 0; k < ZA_INPUT_CHANNELS_MAX; k++)
        za_preprocess_channel (self->config.preprocess, self->dataset->channels, k,
                               &self->from [k], &self->scale [k], &self->offset [k]);
}

//  row values in 0 .. 1 (floats, or bytes to divide by 255) into out, as
//  the preprocessing says.
static void
s_values_in (const za_input_t *self, const float *floats, const uint8_t *bytes, float *out,
             size_t row)
{
    if (self->config.preprocess == ZA_PREPROCESS_NONE) {
        if (floats)
            memcpy (out, floats, row * sizeof (float));
        else
            for (size_t k = 0; k < row; k++)
                out [k] = (float) bytes [k] / ZA_DATASET_PIXEL_MAX;
        return;
    }
    size_t channels = (size_t) self->dataset->channels;
    if (channels > ZA_INPUT_CHANNELS_MAX)
        channels = 1;
    for (size_t p = 0; p < row; p += channels)
        for (size_t k = 0; k < channels; k++) {
            size_t at = p + (size_t) self->from [k];
            float value = floats? floats [at]: (float) bytes [at] / ZA_DATASET_PIXEL_MAX;
            out [p + k] = value * self->scale [k] + self->offset [k];
        }
}

static void
s_floats_in (const za_input_t *self, const float *in, float *out, size_t row)
{
    s_values_in (self, in, NULL, out, row);
}

static void
s_bytes_in (const za_input_t *self, const uint8_t *in, float *out, size_t row)
{
    s_values_in (self, NULL, in, out, row);
}

//  The configured augmentation of one example, the `position`-th of the stream.
static void
s_augment (za_input_t *self, float *out, uint64_t position)
{
    const za_dataset_t *d = self->dataset;
    if (self->augment_scratch)
        za_augment_apply (&self->config.augment, out, d->height, d->width, d->channels,
                          self->scale, self->offset, self->config.seed, position,
                          self->augment_scratch);
}

#define BAD_LIMIT_COUNT_MAX 1e15

int
za_bad_limit_parse (const char *text, za_bad_limit_t *limit)
{
    memset (limit, 0, sizeof *limit);
    //  Digits (a share: with one '.' among them, then '%'), nothing else.
    size_t digits = text? strspn (text, "0123456789"): 0;
    size_t number = digits + (text && text [digits] == '.'? 1 + strspn (text + digits + 1,
                                                                          "0123456789"): 0);
    int percent = text && number > 0 && text [number] == '%' && text [number + 1] == 0;
    double value = digits > 0? strtod (text, NULL): -1;
    if (!text || digits == 0 || (!percent && (number != digits || text [digits] != 0))
        || (percent && value > 100) || (!percent && value > BAD_LIMIT_COUNT_MAX)
        || strlen (text) >= sizeof limit->text)
        return za_error ("--max-bad-images '%s': give a count of images (0, 25) or a share of "
                         "them ('1%%', '100%%' for any)", text? text: "");
    limit->set = 1;
    limit->count = percent? -1: (int64_t) value;
    limit->fraction = percent? value / 100: -1;
    snprintf (limit->text, sizeof limit->text, "%s", text);
    return 0;
}

int64_t
za_bad_limit_most (const za_bad_limit_t *limit, int64_t listed)
{
    if (!limit->set || (limit->fraction >= 1 && limit->count < 0))
        return INT64_MAX;
    return limit->count >= 0? limit->count: (int64_t) (limit->fraction * (double) listed);
}

//  1 (said once) when more of the data set's files failed to decode than
//  config.max_bad allows: the stream ends there, and za_input_next fails.
static int
s_too_many_bad (za_input_t *self)
{
    const za_dataset_t *dataset = self->dataset;
    int64_t bad = za_dataset_bad (dataset);
    int64_t most = za_bad_limit_most (&self->config.max_bad, dataset->count);
    if (bad <= most)
        return 0;
    char bad_text [ZA_COUNT_TEXT_MAX], listed [ZA_COUNT_TEXT_MAX], most_text [ZA_COUNT_TEXT_MAX];
    za_error ("%s images could not be decoded so far, of %s listed: more than "
              "--max-bad-images %s allows (%s). Mend or remove them (a warning names each), "
              "or give a larger --max-bad-images", za_count_text (bad, bad_text, sizeof bad_text),
              za_count_text (dataset->count, listed, sizeof listed),
              self->config.max_bad.text, za_count_text (most, most_text, sizeof most_text));
    self->failed = 1;
    return 1;
}

//  Fills a slot with the next batch: the next global batch's slice when the
//  batches are split across replicas. Returns its size, 0 at the end of the
//  stream (including a final partial batch dropped by drop_remainder). An
//  example its loader cannot make is left out (the batch is one smaller);
//  a batch left with none is followed by the next.
static int
s_input_produce (za_input_t *self, s_slot_t *slot)
{
    const za_dataset_t *dataset = self->dataset;
    size_t row = (size_t) dataset->feature_size;
    int batch = self->config.batch_size, replicas = self->config.replicas;
    int global = batch * replicas, first = batch * self->config.replica, take = batch;
    if (self->config.global_batch > 0 && replicas > 1) {
        global = self->config.global_batch;
        first = (int) ((int64_t) global * self->config.replica / replicas);
        take = (int) ((int64_t) global * (self->config.replica + 1) / replicas) - first;
    }
    int size = 0, drawn;
    //  Batches with no example made in a row: past two epochs' worth of this
    //  replica's slices (one whole epoch among them, whatever the shuffle),
    //  every example of the shard has failed, and the input fails
    //  (--max-bad-images 100%).
    int64_t empty = 0, empty_max = 2 * (self->shard_count / (take > 0? take: 1)) + 3;
    do {
        int64_t index;
        drawn = 0;
        self->wanted_count = 0;
        while (drawn < global && s_input_example_next (self, &index)) {
            int keep = drawn >= first && drawn < first + take;
            drawn++;
            uint64_t position = self->position++;
            if (!keep)
                continue;
            float *out = slot->features + (size_t) size * row;
            if (dataset->loader) {
                self->wanted_at [self->wanted_count] = position;
                self->wanted [self->wanted_count++] = index;
                continue;
            }
            if (dataset->features)
                s_floats_in (self, dataset->features + (size_t) index * row, out, row);
            else                    //  the value the float loader stores, per batch
                s_bytes_in (self, dataset->pixels + (size_t) index * row, out, row);
            s_augment (self, out, position);
            slot->labels [size] = dataset->labels [index];
            slot->indices [size] = index;
            size++;
        }
        if (dataset->loader && self->wanted_count) {
            if (self->pool)
                za_parallel_run (self->pool, s_input_load_part, self);
            else
                s_input_load_part (self, 0);
            for (int i = 0; i < self->wanted_count; i++) {
                if (!self->loaded [i])
                    continue;
                s_bytes_in (self, self->staging + (size_t) i * row,
                             slot->features + (size_t) size * row, row);
                s_augment (self, slot->features + (size_t) size * row, self->wanted_at [i]);
                slot->indices [size] = self->wanted [i];
                slot->labels [size++] = dataset->labels [self->wanted [i]];
            }
        }
        if (dataset->loader && self->wanted_count && s_too_many_bad (self)) {
            size = 0;
            break;
        }
        if (size == 0 && dataset->loader && ++empty > empty_max) {
            za_error ("input: no example of this shard could be made (every image failed "
                      "to decode)");
            self->failed = 1;
            break;
        }
    } while (size == 0 && drawn == global);
    if (drawn < global && self->config.drop_remainder)
        size = 0;
    slot->size = size;
    return size;
}

static void s_slot_device_free (s_slot_t *slot);

//  The consumer's, as it gives a slot back: where the work queued on this
//  thread (a step that does not wait for its own end: za_replica's
//  deferred loss, which only a one-slice batch's replica defers) may still
//  read the slot's copy, a fence after it, which the producer waits for
//  before it writes there again. Without one the back end has waited for
//  that work (said once).
static void
s_slot_fence (za_input_t *self, s_slot_t *slot)
{
    const za_batch_device_t *d = &slot->device;
    if (!slot->device_ok || !d->be->fence || d->slices != 1 || slot->fence)
        return;
    //  (A device that cannot be bound gets its copies freed: freeing waits.)
    if (d->be->bind (d->device_of [0])) {
        s_slot_device_free (slot);
        return;
    }
    slot->fence = d->be->fence ();
    if (!slot->fence && !self->fence_failed) {
        fprintf (stderr, "zactor: %s; the steps wait for their batch's work before they give "
                         "it back\n", za_last_error ());
        self->fence_failed = 1;
    }
}

//  The producer's, before it writes the slot's copy again or frees it: the
//  steps that read it are done. 0, or -1 with an error.
static int
s_slot_unfence (s_slot_t *slot)
{
    void *fence = slot->fence;
    slot->fence = NULL;
    return fence? slot->device.be->fence_wait (fence): 0;
}

//  The slot's copies on a device freed.
static void
s_slot_device_free (s_slot_t *slot)
{
    za_batch_device_t *d = &slot->device;
    if (s_slot_unfence (slot))
        fprintf (stderr, "zactor: %s\n", za_last_error ());
    for (int t = 0; d->be && t < d->slices; t++) {
        d->be->buffer_free (d->features [t]);
        d->be->buffer_free (d->labels [t]);
    }
    memset (d, 0, sizeof *d);
    slot->device_ok = 0;
}

//  The slot's features and labels freed, whoever made them.
static void
s_slot_host_free (s_slot_t *slot)
{
    if (slot->pinned) {
        slot->pinned->host_free (slot->features);
        slot->pinned->host_free (slot->labels);
    }
    else {
        za_free (slot->features);
        za_free (slot->labels);
    }
    slot->features = NULL;
    slot->labels = NULL;
    slot->pinned = NULL;
}

//  The producer's, before it fills a slot it copies to `be`'s devices:
//  the slot's host side in be's host memory (pinned on a GPU: the copy goes
//  straight, without the driver's staging copy); kept as it is where that
//  memory is short.
static void
s_slot_pin (za_input_t *self, s_slot_t *slot, const za_backend_t *be)
{
    if (slot->pinned == be)
        return;
    size_t rows = (size_t) self->config.batch_size;
    float *features = (float *) be->host_alloc (rows * self->dataset->feature_size
                                                * sizeof (float));
    int32_t *labels = (int32_t *) be->host_alloc (rows * sizeof (int32_t));
    if (!features || !labels) {
        be->host_free (features);
        be->host_free (labels);
        return;
    }
    s_slot_host_free (slot);
    slot->features = features;
    slot->labels = labels;
    slot->pinned = be;
}

//  The producer's: the slot's batch copied to the devices `to` names,
//  slice by slice, and waited for there (the consumer's work reads it on
//  another stream). The room is made once for the iterator's batch size.
//  A failure is said once; the consumer then copies that batch itself.
static void
s_slot_to_device (za_input_t *self, s_slot_t *slot, const za_batch_device_t *to)
{
    za_batch_device_t *d = &slot->device;
    slot->device_ok = 0;
    int rows = (self->config.batch_size + to->slices - 1) / to->slices;
    if (s_slot_unfence (slot))
        goto failed;
    if (d->be != to->be || d->slices != to->slices
        || memcmp (d->device_of, to->device_of, sizeof d->device_of)) {
        s_slot_device_free (slot);
        *d = *to;                   //  (its buffers NULL: za_input_to_device's)
        for (int t = 0; t < d->slices; t++)
            if (d->be->bind (d->device_of [t])
                || !(d->features [t] = (float *) d->be->buffer_alloc (
                         (size_t) rows * self->dataset->feature_size * sizeof (float)))
                || !(d->labels [t] = (int32_t *) d->be->buffer_alloc (
                         (size_t) rows * sizeof (int32_t))))
                goto failed;
    }
    size_t row = (size_t) self->dataset->feature_size;
    for (int t = 0; t < d->slices; t++) {
        int first = za_batch_slice_first (slot->size, t, d->slices);
        int last = za_batch_slice_first (slot->size, t + 1, d->slices);
        if (d->be->bind (d->device_of [t])
            || (last > first
                && (d->be->upload (d->features [t], slot->features + row * first,
                                   (size_t) (last - first) * row * sizeof (float))
                    || d->be->upload (d->labels [t], slot->labels + first,
                                      (size_t) (last - first) * sizeof (int32_t)))))
            goto failed;
    }
    //  Each device's copies done (a copy from pageable memory may return
    //  before the device has it).
    for (int t = 0; t < d->slices; t++)
        if ((t == 0 || d->device_of [t] != d->device_of [t - 1])
            && (d->be->bind (d->device_of [t]) || d->be->sync ()))
            goto failed;
    slot->device_ok = 1;
    return;
failed:
    if (!self->to_device_failed) {
        fprintf (stderr, "zactor: the input's copy of a batch to the device failed (%s); "
                         "the steps copy their batches themselves\n", za_last_error ());
        self->to_device_failed = 1;
    }
    s_slot_device_free (slot);
}

static void *
s_input_producer (void *args)
{
    za_input_t *self = (za_input_t *) args;
    pthread_mutex_lock (&self->mutex);
    while (!self->stop) {
        if (self->count == self->n_slots) {
            pthread_cond_wait (&self->space, &self->mutex);
            continue;
        }
        //  Only this thread adds slots, and the consumer reads only ready ones,
        //  so the slot after the ready ones is ours to fill without the lock.
        s_slot_t *slot = &self->slots [(self->head + self->count) % self->n_slots];
        za_batch_device_t to = self->to_device;
        pthread_mutex_unlock (&self->mutex);
        if (to.be)
            s_slot_pin (self, slot, to.be);
        int size = s_input_produce (self, slot);
        if (size > 0 && to.be)
            s_slot_to_device (self, slot, &to);
        else
            slot->device_ok = 0;
        pthread_mutex_lock (&self->mutex);
        if (size == 0) {
            self->producer_done = 1;
            pthread_cond_broadcast (&self->ready);
            break;
        }
        self->count++;
        pthread_cond_broadcast (&self->ready);
    }
    pthread_mutex_unlock (&self->mutex);
    return NULL;
}

//  What a loaded data set's batches need: their threads, scratch, staging.
//  0, or -1 with an error (the iterator destroyed).
static int
s_input_loader_new (za_input_t *self)
{
    const za_dataset_t *dataset = self->dataset;
    int threads = self->config.threads > 0? self->config.threads: 1;
    size_t batch = (size_t) self->config.batch_size;
    self->wanted = malloc (batch * sizeof (int64_t));
    self->wanted_at = malloc (batch * sizeof (uint64_t));
    self->loaded = malloc (batch * sizeof (int));
    self->staging = za_alloc (batch * (size_t) dataset->feature_size);
    int ok = self->wanted && self->wanted_at && self->loaded && self->staging;
    for (int t = 0; ok && t < threads; t++)
        ok = (self->scratch [t] = dataset->loader->scratch_new (dataset->source)) != NULL;
    if (ok && threads > 1)
        ok = (self->pool = za_parallel_new (threads)) != NULL;
    if (!ok) {
        za_error ("za_input_new: out of memory for the decoders of %d threads", threads);
        za_input_destroy (&self);
        return -1;
    }
    return 0;
}

//  Checks what za_input_new is given: the data set, and a configuration whose
//  sizes and counts fit; the replicas (at least 1) go to *replicas_p and a
//  batch's floats to *batch_floats_p. 0, or -1 with an error.
static int
s_input_config_check (const za_dataset_t *dataset, const za_input_config_t *config,
                      int *replicas_p, size_t *batch_floats_p)
{
    if (!dataset || !config) {
        za_error ("za_input_new: dataset and config are required");
        return -1;
    }
    if (dataset->count <= 0 || dataset->feature_size <= 0
    ||  (!dataset->features && !dataset->pixels && !dataset->loader) || !dataset->labels) {
        za_error ("za_input_new: dataset is empty or malformed");
        return -1;
    }
    const za_input_config_t *c = config;
    if (c->batch_size <= 0) {
        za_error ("za_input_new: batch_size is %d (must be > 0)", c->batch_size);
        return -1;
    }
    if (c->num_shards <= 0 || c->shard_index < 0 || c->shard_index >= c->num_shards) {
        za_error ("za_input_new: shard_index %d out of range for %d shards",
                  c->shard_index, c->num_shards);
        return -1;
    }
    //  (Augmentation takes each channel's preprocessing constants, which
    //  are kept for ZA_INPUT_CHANNELS_MAX channels.)
    if (za_augment_active (&c->augment) && dataset->channels > ZA_INPUT_CHANNELS_MAX) {
        za_error ("za_input_new: augmentation takes images of at most %d channels (these "
                  "have %d)", ZA_INPUT_CHANNELS_MAX, dataset->channels);
        return -1;
    }
    int replicas = c->replicas > 0? c->replicas: 1;
    if (c->skip < 0) {
        za_error ("za_input_new: skip %lld is negative", (long long) c->skip);
        return -1;
    }
    if (c->replicas < 0 || c->replica < 0 || c->replica >= replicas) {
        za_error ("za_input_new: replica %d out of range for %d replicas", c->replica,
                  c->replicas);
        return -1;
    }
    if (c->global_batch < 0 || (c->global_batch > 0 && replicas > 1
                                && ((int64_t) c->global_batch + replicas - 1) / replicas
                                   > c->batch_size)) {
        za_error ("za_input_new: a global batch of %d shared by %d replicas does not fit "
                  "batches of %d", c->global_batch, replicas, c->batch_size);
        return -1;
    }
    if ((int64_t) c->batch_size * replicas > INT_MAX) {
        za_error ("za_input_new: a global batch of %d x %d examples is too large",
                  c->batch_size, replicas);
        return -1;
    }
    if (c->epochs == 0 || c->epochs < -1) {
        za_error ("za_input_new: epochs is %d (must be > 0, or -1 for forever)",
                  c->epochs);
        return -1;
    }
    if (c->shuffle_buffer < 0 || c->prefetch < 0) {
        za_error ("za_input_new: shuffle_buffer %d and prefetch %d must be >= 0",
                  c->shuffle_buffer, c->prefetch);
        return -1;
    }
    if (c->threads < 0 || c->threads > ZA_PARALLEL_MAX_THREADS) {
        za_error ("za_input_new: %d threads (0 to %d)", c->threads, ZA_PARALLEL_MAX_THREADS);
        return -1;
    }
    if (c->prefetch >= INT_MAX) {
        za_error ("za_input_new: prefetch %d is too large", c->prefetch);
        return -1;
    }
    size_t batch_floats;
    if (__builtin_mul_overflow ((size_t) c->batch_size, (size_t) dataset->feature_size,
                                &batch_floats)
    ||  batch_floats > PTRDIFF_MAX / sizeof (float)) {
        za_error ("za_input_new: batch of %d examples of %lld features is too large",
                  c->batch_size, (long long) dataset->feature_size);
        return -1;
    }
    *replicas_p = replicas;
    *batch_floats_p = batch_floats;
    return 0;
}

//  Starts the prefetch thread, with the lock and the conditions it shares
//  with the consumer. 0, or -1 with an error (the lock and the conditions
//  destroyed again).
static int
s_input_prefetch_start (za_input_t *self)
{
    pthread_mutex_init (&self->mutex, NULL);
    pthread_cond_init (&self->ready, NULL);
    pthread_cond_init (&self->space, NULL);
    int rc = pthread_create (&self->thread, NULL, s_input_producer, self);
    if (rc != 0) {
        za_error ("za_input_new: cannot start the prefetch thread: %s", strerror (rc));
        pthread_cond_destroy (&self->space);
        pthread_cond_destroy (&self->ready);
        pthread_mutex_destroy (&self->mutex);
        return -1;
    }
    self->thread_started = 1;
    return 0;
}

za_input_t *
za_input_new (const za_dataset_t *dataset, const za_input_config_t *config)
{
    int replicas;
    size_t batch_floats;
    if (s_input_config_check (dataset, config, &replicas, &batch_floats))
        return NULL;
    const za_input_config_t *c = config;

    za_input_t *self = calloc (1, sizeof *self);
    if (!self) {
        za_error ("za_input_new: out of memory");
        return NULL;
    }
    self->dataset = dataset;
    self->config = *c;
    s_preprocess_plan (self);
    self->config.drop_remainder = c->drop_remainder != 0;
    self->config.replicas = replicas;
    self->shard_count = dataset->count > c->shard_index
                      ? (dataset->count - c->shard_index + c->num_shards - 1) / c->num_shards
                      : 0;
    za_rng_seed (&self->rng, c->seed);
    //  The buffer never holds more than one epoch of the shard.
    self->shuffle_capacity = c->shuffle_buffer < self->shard_count
                           ? c->shuffle_buffer: self->shard_count;
    if (self->shuffle_capacity < 1)
        self->shuffle_capacity = 1;
    self->shuffle = malloc ((size_t) self->shuffle_capacity * sizeof (int64_t));
    //  A resumed run's place: the order's draws made, nothing read.
    for (int64_t i = 0; i < c->skip; i++) {
        int64_t index;
        if (!s_input_example_next (self, &index))
            break;
        self->position++;
    }
    self->n_slots = c->prefetch > 0? c->prefetch + 1: 1;
    self->slots = calloc ((size_t) self->n_slots, sizeof (s_slot_t));
    if (!self->shuffle || !self->slots) {
        za_error ("za_input_new: out of memory");
        za_input_destroy (&self);
        return NULL;
    }
    for (int i = 0; i < self->n_slots; i++) {
        self->slots [i].features = za_alloc (batch_floats * sizeof (float));
        self->slots [i].labels = za_alloc ((size_t) c->batch_size * sizeof (int32_t));
        self->slots [i].indices = za_alloc ((size_t) c->batch_size * sizeof (int64_t));
        if (!self->slots [i].features || !self->slots [i].labels || !self->slots [i].indices) {
            za_input_destroy (&self);
            return NULL;
        }
    }
    if (dataset->loader && s_input_loader_new (self))
        return NULL;
    if (za_augment_active (&c->augment)
        && !(self->augment_scratch = za_alloc ((size_t) dataset->feature_size * sizeof (float)))) {
        za_input_destroy (&self);
        return NULL;
    }
    if (c->prefetch > 0 && s_input_prefetch_start (self)) {
        za_input_destroy (&self);
        return NULL;
    }
    return self;
}

int
za_input_next (za_input_t *self, za_batch_t *batch)
{
    if (!self || !batch) {
        za_error ("za_input_next: iterator and batch are required");
        return 0;
    }
    memset (batch, 0, sizeof *batch);
    s_slot_t *slot = NULL;
    if (!self->thread_started) {
        if (!self->producer_done && s_input_produce (self, &self->slots [0]) > 0)
            slot = &self->slots [0];
        else
            self->producer_done = 1;
    }
    else {
        //  Only this thread moves head.
        if (self->held)
            s_slot_fence (self, &self->slots [self->head]);
        pthread_mutex_lock (&self->mutex);
        if (self->held) {
            //  The caller is done with the batch it held: give its slot back.
            self->head = (self->head + 1) % self->n_slots;
            self->count--;
            self->held = 0;
            pthread_cond_signal (&self->space);
        }
        while (self->count == 0 && !self->producer_done)
            pthread_cond_wait (&self->ready, &self->mutex);
        if (self->count > 0) {
            slot = &self->slots [self->head];
            self->held = 1;
        }
        pthread_mutex_unlock (&self->mutex);
    }
    if (!slot) {
        //  producer_done was seen (under the mutex, or on this thread): so is failed.
        self->failed_seen = self->failed;
        return self->failed? -1: 0;
    }
    batch->features = slot->features;
    batch->labels = slot->labels;
    batch->indices = slot->indices;
    batch->size = slot->size;
    batch->feature_size = self->dataset->feature_size;
    batch->device = slot->device_ok? &slot->device: NULL;
    return 1;
}

int
za_input_to_device (za_input_t *self, const struct za_backend_t *be, int slices,
                    const int *device_of)
{
    if (!self)
        return za_error ("za_input_to_device: no iterator");
    if (be && (slices < 1 || slices > ZA_INPUT_SLICES_MAX || !device_of))
        return za_error ("za_input_to_device: %d slices (1 to %d, each with its device)",
                         slices, ZA_INPUT_SLICES_MAX);
    if (!self->thread_started)
        return 0;
    za_batch_device_t to = {.be = be, .slices = be? slices: 0};
    for (int t = 0; be && t < slices; t++)
        to.device_of [t] = device_of [t];
    pthread_mutex_lock (&self->mutex);
    self->to_device = to;
    pthread_mutex_unlock (&self->mutex);
    return 0;
}

int64_t
za_input_bad (const za_input_t *self)
{
    return self? za_dataset_bad (self->dataset): 0;
}

int64_t
za_input_listed (const za_input_t *self)
{
    return self? za_dataset_listed (self->dataset): 0;
}

int
za_input_failed (const za_input_t *self)
{
    return self? self->failed_seen: 0;
}

int64_t
za_input_shard_count (const za_input_t *self)
{
    return self? self->shard_count: 0;
}

void
za_input_destroy (za_input_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_input_t *self = *self_p;
    if (self->thread_started) {
        pthread_mutex_lock (&self->mutex);
        self->stop = 1;
        pthread_cond_broadcast (&self->space);
        pthread_mutex_unlock (&self->mutex);
        pthread_join (self->thread, NULL);
        pthread_cond_destroy (&self->space);
        pthread_cond_destroy (&self->ready);
        pthread_mutex_destroy (&self->mutex);
    }
    if (self->slots)
        for (int i = 0; i < self->n_slots; i++) {
            s_slot_device_free (&self->slots [i]);
            s_slot_host_free (&self->slots [i]);
            za_free (self->slots [i].indices);
        }
    free (self->slots);
    free (self->shuffle);
    za_parallel_destroy (&self->pool);
    for (int t = 0; t < ZA_PARALLEL_MAX_THREADS; t++)
        if (self->scratch [t])
            self->dataset->loader->scratch_destroy (&self->scratch [t]);
    free (self->wanted);
    free (self->wanted_at);
    za_free (self->augment_scratch);
    free (self->loaded);
    za_free (self->staging);
    free (self);
    *self_p = NULL;
}

int
za_preprocess_parse (const char *name)
{
    return !strcmp (name, "none")? ZA_PREPROCESS_NONE: !strcmp (name, "tf")? ZA_PREPROCESS_TF
         : !strcmp (name, "torch")? ZA_PREPROCESS_TORCH
         : !strcmp (name, "caffe")? ZA_PREPROCESS_CAFFE: -1;
}
