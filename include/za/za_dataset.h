/*  za_dataset.h: a labelled data set in memory: what every source fills
    (IDX files: za_idx.h; caller arrays: below; a program's own) and the
    input pipeline (za_input.h) streams.                                    */
#ifndef ZA_DATASET_H_INCLUDED
#define ZA_DATASET_H_INCLUDED

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  A feature held as a byte is value x ZA_DATASET_PIXEL_MAX.
#define ZA_DATASET_PIXEL_MAX 255.0f

//  An in-memory labelled data set: `count` examples of height x width x channels
//  features (NHWC, pixels scaled to [0, 1]) and one int32 label each. The
//  features are held as floats, or (za_idx_load_dir_shard) as the files'
//  bytes, a quarter of the memory, turned into floats as batches are made.
//  A source that makes an example's bytes when the pipeline needs them (a
//  folder of image files): the data set then holds the labels, and no pixel.
typedef struct {
    //  Writes example `index` (feature_size bytes, value / 255) into out,
    //  with `scratch`, the calling thread's own. 0, or -1 when it cannot be
    //  read: the pipeline leaves it out of its batch, and of every later
    //  epoch (the loader says why, once).
    int (*load) (void *source, int64_t index, void *scratch, uint8_t *out);
    //  A thread's scratch (a decoder and its buffers); NULL when out of memory.
    void *(*scratch_new) (void *source);
    void (*scratch_destroy) (void **scratch_p);
    void (*destroy) (void **source_p);
    //  How many examples could not be made so far (each counted once).
    int64_t (*bad) (void *source);
    //  What example `index` is made from, for a cache (za_cache.h): a key
    //  naming it (its file) and a version that changes with it (the file's
    //  size and time); NULL: the index, never changing. 0, or -1 when it
    //  cannot be told (the example is made again).
    int (*identity) (void *source, int64_t index, uint64_t *key, uint64_t *version);
} za_dataset_loader_t;

typedef struct {
    int64_t count;
    int height, width, channels;
    int64_t feature_size;       //  height * width * channels
    float *features;            //  [count, feature_size], owned, 64-byte aligned; or NULL
    uint8_t *pixels;            //  [count, feature_size] bytes (value / 255), owned; or NULL
    int32_t *labels;            //  [count], owned
    int n_classes;              //  1 + the largest label
    //  Examples made on demand, when features and pixels are NULL.
    const za_dataset_loader_t *loader;
    void *source;               //  owned: the loader destroys it
} za_dataset_t;

//  An empty data set of `count` examples of height x width x channels, its
//  features as floats, or as bytes (value / 255) when `as_bytes`, for a
//  source to fill; labels zero. NULL with an error when the sizes overflow or
//  memory runs out.
za_dataset_t *za_dataset_new (int64_t count, int height, int width, int channels,
                              int as_bytes);

//  An empty data set whose examples `loader` makes from `source` (taken:
//  destroyed with the data set, or here on failure), for a source to fill
//  the labels of. NULL with an error.
za_dataset_t *za_dataset_new_loaded (int64_t count, int height, int width, int channels,
                                     const za_dataset_loader_t *loader, void *source);
//  How many of its examples a loader could not make so far (0 for data in
//  memory): corrupt or truncated images, skipped.
int64_t za_dataset_bad (const za_dataset_t *self);
//  How many examples it lists to be made by its loader (files, records);
//  0 for data in memory, which cannot fail.
int64_t za_dataset_listed (const za_dataset_t *self);

//  Sets n_classes to 1 + the largest label, once a source has filled them.
void za_dataset_count_classes (za_dataset_t *self);

//  What a split holds, from the image file's header and the label file alone
//  (no pixel is read): for the processes that need a model's input shape, an
//  epoch's length or the class count, but no data.
typedef struct {
    int64_t count;
    int height, width, channels;
    int n_classes;              //  1 + the largest label
} za_dataset_info_t;

//  Builds a dataset from caller arrays (the numpy_input_fn case); copies them.
//  Labels must be >= 0. Returns NULL with an error on bad arguments.
za_dataset_t *za_dataset_from_arrays (const float *features, const int32_t *labels,
                                      int64_t count, int height, int width, int channels);

//  Frees the dataset and sets *self_p to NULL. Safe on NULL.
void za_dataset_destroy (za_dataset_t **self_p);

#ifdef __cplusplus
}
#endif
#endif
