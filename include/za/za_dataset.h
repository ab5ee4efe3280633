/*  za_dataset.h: the input pipeline. Loads MNIST-format IDX files (gzipped or
    not) or in-memory arrays into a dataset, then streams batches through
    shard -> shuffle -> repeat -> batch -> prefetch, the order of tf.data's
    `ds.shard(n,i).shuffle(buf, seed).repeat(epochs).batch(b).prefetch(k)`.  */
#ifndef ZA_DATASET_H_INCLUDED
#define ZA_DATASET_H_INCLUDED

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Where Debian's dataset-fashion-mnist package puts the files.
#define ZA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

//  An in-memory labelled data set: `count` examples of height x width x channels
//  features (NHWC, pixels scaled to [0, 1]) and one int32 label each. The
//  features are held as floats, or (za_dataset_load_dir_shard) as the files'
//  bytes, a quarter of the memory, turned into floats as batches are made.
typedef struct {
    int64_t count;
    int height, width, channels;
    int64_t feature_size;       //  height * width * channels
    float *features;            //  [count, feature_size], owned, 64-byte aligned; or NULL
    uint8_t *pixels;            //  [count, feature_size] bytes (value / 255), owned; or NULL
    int32_t *labels;            //  [count], owned
    int n_classes;              //  1 + the largest label
} za_dataset_t;

//  Loads an IDX image file (magic 0x00000803, uint8, dims count x rows x cols)
//  and its IDX label file (magic 0x00000801, uint8, dim count). Either may be
//  gzipped (detected by content, not name). Pixels become value / 255.
//  Returns NULL with one error naming the file and what was wrong: missing,
//  unreadable, wrong magic, truncated (fewer bytes than the header declares),
//  or image and label counts that differ.
za_dataset_t *za_dataset_load_idx (const char *images_path, const char *labels_path);

//  Loads "<dir>/<split>-images-idx3-ubyte[.gz]" and
//  "<dir>/<split>-labels-idx1-ubyte[.gz]"; split is "train" or "t10k".
//  Prefers the .gz name when both exist.
za_dataset_t *za_dataset_load_dir (const char *dir, const char *split);

//  Loads only shard `shard_index` of `num_shards` of a split (examples i,
//  i + n, i + 2n, ... in file order, as tf.data's shard) with its pixels kept
//  as bytes. The image file is streamed: loading costs the shard's size, not
//  the file's. n_classes is the whole split's. A shard of the whole split
//  (1, 0) gives the same batches as za_dataset_load_dir. NULL with an error
//  as za_dataset_load_idx, or for a shard that does not exist.
za_dataset_t *za_dataset_load_dir_shard (const char *dir, const char *split, int num_shards,
                                         int shard_index);

//  What a split holds, from the image file's header and the label file alone
//  (no pixel is read): for the processes that need a model's input shape, an
//  epoch's length or the class count, but no data.
typedef struct {
    int64_t count;
    int height, width, channels;
    int n_classes;              //  1 + the largest label
} za_dataset_info_t;

//  Fills *info for "<dir>/<split>-..." (as za_dataset_load_dir names the
//  files). Returns 0, or -1 with an error as za_dataset_load_idx.
int za_dataset_info_dir (const char *dir, const char *split, za_dataset_info_t *info);

//  Builds a dataset from caller arrays (the numpy_input_fn case); copies them.
//  Labels must be >= 0. Returns NULL with an error on bad arguments.
za_dataset_t *za_dataset_from_arrays (const float *features, const int32_t *labels,
                                      int64_t count, int height, int width, int channels);

//  Frees the dataset and sets *self_p to NULL. Safe on NULL.
void za_dataset_destroy (za_dataset_t **self_p);

//  How to stream a dataset.
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
} za_input_config_t;

//  Defaults: 1 shard, no shuffle, seed 0, 1 epoch, batch 32, keep remainder,
//  prefetch 2.
za_input_config_t za_input_config_default (void);

//  The shuffle seed for training that starts (or resumes) at `step`: the
//  step is mixed in, so a resumed or restarted trainer goes on with a new
//  order instead of replaying the examples it began with. Step 0 keeps seed.
uint64_t za_input_seed_at (uint64_t seed, int64_t step);

//  One batch. Memory belongs to the iterator and stays valid until the next
//  za_input_next or za_input_destroy.
typedef struct {
    const float *features;      //  [size, feature_size]
    const int32_t *labels;      //  [size]
    int size;                   //  examples in this batch
    int64_t feature_size;       //  values per example (height * width * channels)
} za_batch_t;

typedef struct _za_input_t za_input_t;

//  Creates an iterator over `dataset` (which must outlive it). Returns NULL
//  with an error on a bad config (batch_size <= 0, shard_index out of range,
//  epochs == 0 or < -1, negative buffer sizes).
za_input_t *za_input_new (const za_dataset_t *dataset, const za_input_config_t *config);

//  Fills *batch with the next batch. Returns 1 when a batch was produced,
//  0 at the end of the stream.
int za_input_next (za_input_t *self, za_batch_t *batch);

//  Examples one pass (epoch) over this iterator's shard yields.
int64_t za_input_shard_count (const za_input_t *self);

//  Stops the prefetch thread, frees the iterator, sets *self_p to NULL.
void za_input_destroy (za_input_t **self_p);

#ifdef __cplusplus
}
#endif
#endif
