/*  za_images.h: images as a data set, from one of four sources:
    - a folder of MNIST-format IDX files and a split (za_idx.h), read whole,
      the pixels kept in memory (Fashion-MNIST, zactor-run's default);
    - a folder of class folders, with the semantics of Keras's
      image_dataset_from_directory: one sub-folder per class, the class
      names sorted (label = index), the files found recursively in a
      defined order (.jpg, .jpeg, .png), a seeded validation split;
    - a file pattern of images (in a name '*', '?', '[...]'; a name "**"
      is any number of folders), the label from the parent folder's name
      (the class names: the sorted parent names, or the given ones);
    - TFRecord files of tf.train.Example (a pattern or a file, or
      "tfrecord:PATTERN"; plain or GZIP) with the encoded image and an
      integer label under two feature keys.
    Listing the other three decodes no image: examples are decoded when the pipeline needs
    them (za_image.h), so memory holds paths, offsets and labels, not
    pixels.                                                                 */
#ifndef ZA_IMAGES_H_INCLUDED
#define ZA_IMAGES_H_INCLUDED

#include <stdint.h>

#include "za/za_dataset.h"
#include "za/za_image.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_IMAGES_MAX_CLASSES 4096
//  Keras's defaults: 256 x 256, RGB.
#define ZA_IMAGE_SIZE 256
#define ZA_IMAGE_CHANNELS 3
//  The feature keys TensorFlow's image tools write (build_image_data.py).
#define ZA_IMAGES_IMAGE_KEY "image/encoded"
#define ZA_IMAGES_LABEL_KEY "image/class/label"

typedef enum {
    ZA_SUBSET_ALL = 0,                  //  every file
    ZA_SUBSET_TRAINING,                 //  the first 1 - validation_split
    ZA_SUBSET_VALIDATION                //  the last validation_split
} za_subset_t;

typedef struct {
    const char *source;                 //  DIR (DIR/CLASS/**/FILE), a pattern of
                                        //  images or TFRecord files, a TFRecord
                                        //  file, or tfrecord:PATTERN
    const char *class_names;            //  "a,b,c": these sub-folders, in this
                                        //  order; NULL: every sub-folder, sorted
    za_image_spec_t image;              //  the pixels every example becomes
    double validation_split;            //  0 <= F < 1
    za_subset_t subset;
    uint64_t seed;                      //  of the split's shuffle (as Keras's)
    int num_shards, shard_index;        //  keep files i, i + n, ... of the
                                        //  subset (a worker's own); 0, 0: all
    const char *image_key;              //  TFRecord: the image's bytes feature
                                        //  (NULL: ZA_IMAGES_IMAGE_KEY)
    const char *label_key;              //  the int64 label (NULL: ZA_IMAGES_LABEL_KEY)
    int label_base;                     //  the label that means class 0: 0, or 1
                                        //  for files whose labels start at 1
                                        //  (build_image_data.py's, 0 = background)
    const char *idx_split;              //  IDX files (za_idx.h): source is their
                                        //  folder, this their split, "train" or
                                        //  "t10k"; NULL: images
    int unlabeled;                      //  for predictions: a folder's every image
                                        //  (class folders or not), a pattern's,
                                        //  a TFRecord's with or without a label;
                                        //  labels 0
} za_images_config_t;

//  What the source holds for config: examples (of the subset and shard),
//  the image shape, the classes. 0, or -1 with an error: no such folder or
//  file, no class folders, a class named that has no folder, no image at
//  all, a TFRecord label out of range. TFRecord files are read whole (their
//  records' CRCs and labels, no image decoded); a bad record is skipped
//  with one warning naming the file and the offset.
int za_images_info (const za_images_config_t *config, za_dataset_info_t *info);

//  The data set of config: labels now, pixels when the pipeline asks. An
//  empty class folder keeps its label, with one warning naming it. NULL with
//  an error as za_images_info.
za_dataset_t *za_images_load (const za_images_config_t *config);

//  The class names of config's source, "a,b,c" (caller frees): the class
//  folders, the parent folders of a pattern, the given ones; NULL when it
//  has none (TFRecord labels without --class-names) or on an error.
char *za_images_class_names (const za_images_config_t *config);

//  A hash of what config lists and makes (source, image spec, split, seed,
//  shard, keys): the name of its cache file (za_cache.h).
uint64_t za_images_config_hash (const za_images_config_t *config);

//  The path of example `index` of a data set za_images_load made (for
//  messages and predictions; a TFRecord example's is its file's), or NULL.
const char *za_images_path (const za_dataset_t *dataset, int64_t index);
//  A TFRecord example's offset in its (uncompressed) file, else -1.
int64_t za_images_offset (const za_dataset_t *dataset, int64_t index);

//  How many of the data set's examples could not be decoded so far.
int64_t za_images_bad (const za_dataset_t *dataset);

#ifdef __cplusplus
}
#endif
#endif
