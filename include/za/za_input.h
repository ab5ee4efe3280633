/*  za_input.h: the input pipeline: streams a data set's batches through
    shard -> shuffle -> repeat -> batch -> prefetch, the order of tf.data's
    `ds.shard(n,i).shuffle(buf, seed).repeat(epochs).batch(b).prefetch(k)`.  */
#ifndef ZA_INPUT_H_INCLUDED
#define ZA_INPUT_H_INCLUDED

#include "za/za_augment.h"
#include "za/za_dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

//  How to stream a dataset.
//  How pixels (0 .. 255) become a model's input, as Keras's preprocess_input
//  modes for ImageNet weights (VGG16's are caffe's, torchvision's torch's).
typedef enum {
    ZA_PREPROCESS_NONE = 0,     //  value / 255: 0 .. 1
    ZA_PREPROCESS_TF,           //  value / 127.5 - 1: -1 .. 1
    ZA_PREPROCESS_TORCH,        //  (value / 255 - mean) / std per RGB channel,
                                //  ImageNet's (0.485 0.456 0.406, 0.229 0.224 0.225)
    ZA_PREPROCESS_CAFFE         //  BGR, value - mean (103.939 116.779 123.68)
} za_preprocess_t;

//  Names "none", "tf", "torch", "caffe" (-1: none of them).
int za_preprocess_parse (const char *name);

#define ZA_INPUT_CHANNELS_MAX 4

//  How `mode` makes channel k (< ZA_INPUT_CHANNELS_MAX) of an image of
//  `channels`: it takes channel *from's value v (0 .. 1: a pixel / 255;
//  caffe's reverses RGB) and gives v * *scale + *offset.
void za_preprocess_channel (za_preprocess_t mode, int channels, int k, int *from,
                            float *scale, float *offset);

//  How many of a data set's files may fail to decode before its input fails
//  (--max-bad-images): a count, or a fraction of the examples it lists.
//  All zero (set 0): no limit.
typedef struct {
    int set;                    //  1: a limit is given
    int64_t count;              //  at most this many, when fraction is < 0
    double fraction;            //  at most this fraction of the listed (0 .. 1)
    char text [24];             //  as given ("1%", "25"), for messages
} za_bad_limit_t;

//  "N" (a count >= 0) or "F%" (0 <= F <= 100) into *limit. 0, or -1 with
//  an error that says what to give.
int za_bad_limit_parse (const char *text, za_bad_limit_t *limit);

//  The most of `listed` examples that may fail under limit (INT64_MAX: any).
int64_t za_bad_limit_most (const za_bad_limit_t *limit, int64_t listed);

typedef struct {
    int num_shards;             //  shard (num_shards, shard_index): keep examples
    int shard_index;            //  i, i + n, i + 2n, ...; default 1, 0 (all)
    int shuffle_buffer;         //  0: no shuffle; >= count: full permutation
    uint64_t seed;              //  shuffle seed; each epoch reshuffles
    int epochs;                 //  repeat (epochs); -1 repeats forever
    int batch_size;             //  > 0
    int drop_remainder;         //  1: drop the last partial batch of the stream
    int prefetch;               //  batches prepared ahead on a background thread;
                                //  0: prepared on the caller's thread
    int replicas;               //  split batches (TensorFlow's auto-shard by data):
    int replica;                //  the stream is cut into global batches of
                                //  batch_size x replicas and this input keeps
                                //  slice `replica` of each; 0 or 1: not split
    int global_batch;           //  split batches: 0, global batches of batch_size
                                //  x replicas; else of this many examples, of
                                //  which replica r keeps [G r / R, G (r + 1) / R)
                                //  (an elastic job's trainers sharing a global
                                //  batch that does not divide evenly): at most
                                //  batch_size each
    int threads;                //  a data set of files (a loader): each batch's
                                //  examples are decoded on this many threads
                                //  (the producer's among them); default 1
    za_preprocess_t preprocess; //  of each pixel; a gray image takes the means
                                //  of the three channels' constants
    za_augment_t augment;       //  random steps per example (za_augment.h), drawn
                                //  from (seed, the example's place in the stream:
                                //  the same whatever the replicas); zero: none
    za_bad_limit_t max_bad;     //  a data set of files: when more than this fail
                                //  to decode, the input fails (za_input_next -1);
                                //  zero: no limit
    int64_t skip;               //  examples of the stream passed over before the
                                //  first batch, nothing read (a resumed run's
                                //  place: its batches x batch_size x replicas);
                                //  the shuffle and the augmentation go on as if
                                //  they had been read
} za_input_config_t;

//  Defaults: 1 shard, no shuffle, seed 0, 1 epoch, batch 32, keep remainder,
//  prefetch 2, 1 decoding thread.
za_input_config_t za_input_config_default (void);

//  Where slice t of `slices` of a batch of `size` examples starts (it ends
//  where slice t + 1 starts): the replica's threads cut a batch so, and an
//  input copying batches to them (za_input_to_device) cuts alike.
static inline int
za_batch_slice_first (int size, int t, int slices)
{
    return (int) ((int64_t) size * t / slices);
}

//  A batch's copy on a device's memory (za_input_to_device): slice t of the
//  batch (za_batch_slice_first) on device_of [t] of the back end `be`.
#define ZA_INPUT_SLICES_MAX 64
typedef struct {
    const struct za_backend_t *be;
    int slices;
    int device_of [ZA_INPUT_SLICES_MAX];
    float *features [ZA_INPUT_SLICES_MAX];
    int32_t *labels [ZA_INPUT_SLICES_MAX];
} za_batch_device_t;

//  One batch. Memory belongs to the iterator and stays valid until the next
//  za_input_next or za_input_destroy.
typedef struct {
    const float *features;      //  [size, feature_size]
    const int32_t *labels;      //  [size]
    int size;                   //  examples in this batch
    int64_t feature_size;       //  values per example (height * width * channels)
    const int64_t *indices;     //  [size]: each example's index in its data set
                                //  (predictions name the file); NULL: unknown
    const za_batch_device_t *device;    //  its copy on a device, made by the
                                //  prefetch thread while the batches before
                                //  were computed (za_input_to_device); NULL: none
} za_batch_t;

typedef struct _za_input_t za_input_t;

//  Creates an iterator over `dataset` (which must outlive it). Returns NULL
//  with an error on a bad config (batch_size <= 0, shard_index out of range,
//  epochs == 0 or < -1, negative buffer sizes, augmentation of more than
//  ZA_INPUT_CHANNELS_MAX channels).
za_input_t *za_input_new (const za_dataset_t *dataset, const za_input_config_t *config);

//  Fills *batch with the next batch. Returns 1 when a batch was produced,
//  0 at the end of the stream, -1 when more of its data set's files failed
//  to decode than config.max_bad allows (za_input_failed; said once, with
//  the count and the limit).
int za_input_next (za_input_t *self, za_batch_t *batch);

//  Examples of its data set that could not be made so far (za_dataset_bad),
//  and how many it lists (its files and records; 0 for data held in memory,
//  which cannot fail).
int64_t za_input_bad (const za_input_t *self);
int64_t za_input_listed (const za_input_t *self);

//  1 once the input failed on config.max_bad: a fault of the data, which a
//  restart would meet again.
int za_input_failed (const za_input_t *self);

//  Examples one pass (epoch) over this iterator's shard yields.
int64_t za_input_shard_count (const za_input_t *self);

//  tf.data's prefetch_to_device: from now on the prefetch thread copies each
//  batch it makes to `be`'s devices too, cut in `slices` slices (slice t to
//  device_of [t]), before the consumer may take it, so that the copy runs
//  while the batches before it are computed; batch->device then says where
//  (NULL for a batch made before, or whose copy failed: the consumer copies
//  it itself). The copies live in the iterator, one set per prefetch slot,
//  until za_input_destroy. be NULL: no copies of the batches made from then
//  on (one under way is still made). An iterator without a
//  prefetch thread (prefetch 0) makes none. 0, or -1 with an error (slices
//  outside 1 .. ZA_INPUT_SLICES_MAX).
int za_input_to_device (za_input_t *self, const struct za_backend_t *be, int slices,
                        const int *device_of);

//  Stops the prefetch thread, frees the iterator, sets *self_p to NULL.
void za_input_destroy (za_input_t **self_p);

#ifdef __cplusplus
}
#endif
#endif
