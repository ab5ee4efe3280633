/*  za_images.h: a folder of image folders as a data set, with the semantics
    of Keras's image_dataset_from_directory: one sub-folder per class, the
    class names sorted (label = index), the files found recursively in a
    defined order (.jpg, .jpeg, .png), a seeded validation split. Listing
    reads no image: examples are decoded when the pipeline needs them
    (za_image.h), so memory holds paths and labels, not pixels.            */
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

typedef enum {
    ZA_SUBSET_ALL = 0,                  //  every file
    ZA_SUBSET_TRAINING,                 //  the first 1 - validation_split
    ZA_SUBSET_VALIDATION                //  the last validation_split
} za_subset_t;

typedef struct {
    const char *dir;                    //  DIR/CLASS/**/FILE
    const char *class_names;            //  "a,b,c": these sub-folders, in this
                                        //  order; NULL: every sub-folder, sorted
    za_image_spec_t image;              //  the pixels every example becomes
    double validation_split;            //  0 <= F < 1
    za_subset_t subset;
    uint64_t seed;                      //  of the split's shuffle (as Keras's)
    int num_shards, shard_index;        //  keep files i, i + n, ... of the
                                        //  subset (a worker's own); 0, 0: all
} za_images_config_t;

//  What the folder holds for config: examples (of the subset and shard),
//  the image shape, the classes. 0, or -1 with an error: no such folder, no
//  class folders, a class named that has no folder, no image at all.
int za_images_info (const za_images_config_t *config, za_dataset_info_t *info);

//  The data set of config: labels now, pixels when the pipeline asks. An
//  empty class folder keeps its label, with one warning naming it. NULL with
//  an error as za_images_info.
za_dataset_t *za_images_load (const za_images_config_t *config);

//  The path of example `index` of a data set za_images_load made (for
//  messages and predictions), or NULL.
const char *za_images_path (const za_dataset_t *dataset, int64_t index);

//  How many of the data set's examples could not be decoded so far.
int64_t za_images_bad (const za_dataset_t *dataset);

#ifdef __cplusplus
}
#endif
#endif
