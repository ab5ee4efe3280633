/*  za_test_images.c: Fashion-MNIST's pixels written as image folders and
    TFRecord shards, and data sets of images read back in order.            */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "za/za_input.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define SIDE ZA_TEST_IMAGES_SIDE
#define CLASSES ZA_TEST_IMAGES_CLASSES

//  Example i of the data set as bytes (the IDX loader keeps floats here).
void
za_test_images_pixels (const za_dataset_t *fashion, int64_t i, uint8_t *out)
{
    for (int k = 0; k < SIDE * SIDE; k++)
        out [k] = (uint8_t) lrintf (fashion->features [i * SIDE * SIDE + k] * 255.0f);
}

//  Writes the first `count` examples into dir/class_L/NNNNN.ext; `scale` > 1
//  writes them that many times larger, as RGB. Returns dir.
char *
za_test_images_folder (const za_dataset_t *fashion, int64_t count, const char *name, int format,
                int scale)
{
    char *dir = za_test_path (name);
    mkdir (dir, 0755);
    for (int c = 0; c < CLASSES; c++) {
        char class_dir [512];
        snprintf (class_dir, sizeof class_dir, "%s/class_%d", dir, c);
        mkdir (class_dir, 0755);
    }
    int side = SIDE * scale, channels = scale > 1? 3: 1;
    uint8_t gray [SIDE * SIDE];
    uint8_t *image = malloc ((size_t) side * side * channels);
    for (int64_t i = 0; i < count; i++) {
        za_test_images_pixels (fashion, i, gray);
        for (int y = 0; y < side; y++)
            for (int x = 0; x < side; x++)
                for (int k = 0; k < channels; k++)
                    image [((size_t) y * side + x) * channels + k]
                        = gray [(y / scale) * SIDE + x / scale];
        char path [600];
        snprintf (path, sizeof path, "%s/class_%d/%05lld.%s", dir, fashion->labels [i],
                  (long long) i, format == ZA_TEST_PNG? "png": "jpg");
        int rc = format == ZA_TEST_PNG? za_image_write_png (path, image, side, side, channels)
                              : za_image_write_jpeg (path, image, side, side, channels, 95);
        cr_assert_eq (rc, 0, "%s", za_last_error ());
    }
    free (image);
    return dir;
}

za_images_config_t
za_test_images_config (const char *dir)
{
    za_images_config_t config = {
        .source = dir,
        .image = {.height = SIDE, .width = SIDE, .channels = 1, .resize = ZA_RESIZE_AREA},
    };
    return config;
}

//  One pass over the data set in order, batches of `batch` on `threads`;
//  the examples into features (count x SIDE*SIDE floats) and labels.
int64_t
za_test_images_read_all (const za_dataset_t *dataset, int batch, int threads, float *features,
            int32_t *labels)
{
    za_input_config_t config = za_input_config_default ();
    config.batch_size = batch;
    config.threads = threads;
    za_input_t *input = za_input_new (dataset, &config);
    cr_assert_not_null (input, "%s", za_last_error ());
    za_batch_t b;
    int64_t n = 0;
    while (za_input_next (input, &b) > 0) {
        memcpy (features + n * SIDE * SIDE, b.features, sizeof (float) * b.size * SIDE * SIDE);
        memcpy (labels + n, b.labels, sizeof (int32_t) * b.size);
        n += b.size;
    }
    za_input_destroy (&input);
    return n;
}

//  Writes dir's images as TFRecord shards OUT-0000k-of-0000n with the
//  independent writer (tests/write_tfrecord.py); shard `gzip` (or none: -1)
//  compressed, labels + label_base. Returns the pattern "OUT-*".
char *
za_test_images_tfrecords (const char *dir, const char *name, int shards, int gzip,
                          int label_base)
{
    return za_test_images_tfrecords_keyed (dir, name, shards, gzip, label_base, NULL);
}

char *
za_test_images_tfrecords_keyed (const char *dir, const char *name, int shards, int gzip,
                                int label_base, const char *image_key)
{
    char *out = za_test_path (name);
    char n [16], g [16], b [16];
    snprintf (n, sizeof n, "%d", shards);
    snprintf (g, sizeof g, "%d", gzip);
    snprintf (b, sizeof b, "%d", label_base);
    const char *args [] = {ZA_SOURCE_DIR "/tests/write_tfrecord.py", dir, out, n, "--gzip", g,
                           "--label-base", b, image_key? "--image-key": NULL, image_key, NULL};
    za_test_result_t result = za_test_run_program ("/usr/bin/python3", args, 300);
    //  CI installs python3-protobuf and protobuf-compiler: fail, never skip.
    cr_assert_eq (result.exit_code, 0, "tests/write_tfrecord.py: %s", result.err);
    za_test_result_free (&result);
    char *pattern = malloc (strlen (out) + 3);
    sprintf (pattern, "%s-*", out);
    free (out);
    return pattern;
}
