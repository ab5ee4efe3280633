/*  za_test_images.h: Fashion-MNIST's pixels as image folders and TFRecord
    shards, for the suites of data sets of images.                          */
#ifndef ZA_TEST_IMAGES_H_INCLUDED
#define ZA_TEST_IMAGES_H_INCLUDED

#include <stdint.h>

#include "za/za_dataset.h"
#include "za/za_images.h"

#define ZA_TEST_IMAGES_SIDE 28
#define ZA_TEST_IMAGES_CLASSES 10

enum { ZA_TEST_PNG, ZA_TEST_JPEG };

//  Example i of fashion (floats) as bytes, into out [28 * 28].
void za_test_images_pixels (const za_dataset_t *fashion, int64_t i, uint8_t *out);

//  Writes the first `count` examples of fashion into DIR/class_L/NNNNN.ext
//  (DIR: `name` in the test's temp dir) as PNG or JPEG (quality 95); `scale`
//  > 1 writes them that many times larger, as RGB. Returns DIR (free it).
char *za_test_images_folder (const za_dataset_t *fashion, int64_t count, const char *name,
                             int format, int scale);

//  A config for source, read as 28 x 28 gray.
za_images_config_t za_test_images_config (const char *source);

//  One pass over the data set in order, batches of `batch` on `threads`;
//  the examples into features (count x 28*28 floats) and labels. Returns
//  how many.
int64_t za_test_images_read_all (const za_dataset_t *dataset, int batch, int threads,
                                 float *features, int32_t *labels);

//  Writes dir's images as TFRecord shards with tests/write_tfrecord.py (an
//  independent writer: Python protobuf): NAME-0000k-of-0000n in the test's
//  temp dir, shard `gzip` (-1: none) GZIP-compressed, labels + label_base.
//  Returns the pattern "NAME-*" (free it).
char *za_test_images_tfrecords (const char *dir, const char *name, int shards, int gzip,
                                int label_base);
//  The same with the image's bytes under image_key (NULL: image/encoded).
char *za_test_images_tfrecords_keyed (const char *dir, const char *name, int shards, int gzip,
                                      int label_base, const char *image_key);

#endif
