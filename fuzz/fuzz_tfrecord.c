/*  fuzz_tfrecord.c: libFuzzer harness for TFRecord files of tf.train.Example
    (za_tfrecord.c's framing and CRCs, plain or GZIP; the Example parser;
    the images inside, decoded by libjpeg-turbo or libspng). The input is
    written as a TFRecord file and listed as a data set of 8x8 gray images;
    every example streams as training reads it, each label in 0 .. 4095, and
    the Example parser reads the raw input too. Refused with one error, a
    bad record skipped, never a crash. Build with -DZA_FUZZ=ON (clang); run
    fuzz/run.sh fuzz_tfrecord. fuzz/replay.c runs the corpus in ctest.      */
#include "za/za_images.h"
#include "za/za_input.h"
#include "za/za_tfrecord.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);             //  a refusal is the expected outcome
    za_feature_t feature;
    const uint8_t *bytes;
    size_t length;
    int64_t value;
    if (za_example_feature (data, size, ZA_IMAGES_IMAGE_KEY, &feature) == 1)
        (void) za_feature_bytes (&feature, &bytes, &length);
    if (za_example_feature (data, size, ZA_IMAGES_LABEL_KEY, &feature) == 1)
        (void) za_feature_int64 (&feature, &value);
    const char *path = fuzz_file_write ("records.tfrecord", data, size);
    if (!path)
        return 0;
    za_images_config_t config = {
        .source = path, .image = {.height = 8, .width = 8, .channels = 1},
    };
    za_dataset_t *set = za_images_load (&config);
    if (set)
        fuzz_stream (set, ZA_IMAGES_MAX_CLASSES - 1);
    return 0;
}
