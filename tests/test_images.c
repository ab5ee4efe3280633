/*  test_images.c: folders of real Fashion-MNIST pixels written as PNG and
    JPEG files, read back as a data set (Keras's image_dataset_from_directory
    semantics), bad files skipped with the run going on, and zactor-run
    training from a folder to the IDX run's accuracy.                      */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "za/za_images.h"
#include "za/za_image.h"
#include "za/za_input.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define SIDE ZA_TEST_IMAGES_SIDE
#define CLASSES ZA_TEST_IMAGES_CLASSES

//  The index in `fashion` of the example a folder lists at position `at`:
//  class by class, by index within the class.
static int64_t
s_source_of (const za_dataset_t *fashion, int64_t count, int64_t at)
{
    for (int c = 0; c < CLASSES; c++)
        for (int64_t i = 0; i < count; i++)
            if (fashion->labels [i] == c && at-- == 0)
                return i;
    return -1;
}

Test (images, png_folder_gives_the_idx_pixels_and_labels)
{
    za_test_dir_create ("za_images");
    const int64_t count = 300;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "png", ZA_TEST_PNG, 1);
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_info_t info;
    cr_assert_eq (za_images_info (&config, &info), 0, "%s", za_last_error ());
    cr_expect_eq (info.count, count);
    cr_expect_eq (info.n_classes, CLASSES);
    za_dataset_t *dataset = za_images_load (&config);
    cr_assert_not_null (dataset, "%s", za_last_error ());
    cr_expect_null (dataset->pixels, "no pixel is held");
    float *features = malloc (sizeof (float) * count * SIDE * SIDE);
    int32_t *labels = malloc (sizeof (int32_t) * count);
    cr_assert_eq (za_test_images_read_all (dataset, 32, 2, features, labels), count);
    for (int64_t at = 0; at < count; at++) {
        int64_t i = s_source_of (fashion, count, at);
        cr_assert_eq (labels [at], fashion->labels [i], "example %lld", (long long) at);
        cr_assert_eq (memcmp (features + at * SIDE * SIDE, fashion->features + i * SIDE * SIDE,
                              sizeof (float) * SIDE * SIDE), 0,
                      "example %lld (%s) differs from Fashion-MNIST %lld", (long long) at,
                      za_images_path (dataset, at), (long long) i);
    }
    //  The gray PNGs read as RGB: each pixel's three channels the gray value.
    za_image_decoder_t *decoder = za_image_decoder_new ();
    za_image_spec_t rgb = {.height = SIDE, .width = SIDE, .channels = 3};
    uint8_t colour [SIDE * SIDE * 3], gray [SIDE * SIDE];
    cr_assert_eq (za_image_load (decoder, za_images_path (dataset, 0), &rgb, colour), 0);
    za_test_images_pixels (fashion, s_source_of (fashion, count, 0), gray);
    for (int k = 0; k < SIDE * SIDE; k++)
        cr_assert (colour [3 * k] == gray [k] && colour [3 * k + 1] == gray [k]
                   && colour [3 * k + 2] == gray [k], "pixel %d", k);
    za_image_decoder_destroy (&decoder);
    free (features), free (labels), free (dir);
    za_dataset_destroy (&dataset);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  JPEG at quality 95 of images upscaled to 56x56 RGB, read back at 28x28
//  gray: the same pixels but for the JPEG's loss.
Test (images, jpeg_upscaled_rgb_resized_back_to_gray)
{
    za_test_dir_create ("za_images");
    const int64_t count = 200;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "jpeg", ZA_TEST_JPEG, 2);
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_t *dataset = za_images_load (&config);
    cr_assert_not_null (dataset, "%s", za_last_error ());
    float *features = malloc (sizeof (float) * count * SIDE * SIDE);
    int32_t *labels = malloc (sizeof (int32_t) * count);
    cr_assert_eq (za_test_images_read_all (dataset, 64, 1, features, labels), count);
    double total = 0, worst = 0;
    for (int64_t at = 0; at < count; at++) {
        int64_t i = s_source_of (fashion, count, at);
        cr_assert_eq (labels [at], fashion->labels [i]);
        for (int k = 0; k < SIDE * SIDE; k++) {
            double d = fabs (features [at * SIDE * SIDE + k]
                             - fashion->features [i * SIDE * SIDE + k]) * 255;
            total += d;
            worst = d > worst? d: worst;
        }
    }
    double mean = total / ((double) count * SIDE * SIDE);
    cr_expect (mean < 2.0, "mean difference %.2f of 255", mean);
    cr_expect (worst < 64, "largest difference %.0f of 255", worst);
    free (features), free (labels), free (dir);
    za_dataset_destroy (&dataset);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  Writes `bytes` to path.
static void
s_write_bytes (const char *path, const void *bytes, size_t size)
{
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (bytes, 1, size, file), size);
    fclose (file);
}

//  A truncated JPEG, a PNG with a flipped byte (its CRC no longer holds) and
//  a text file named .jpg are skipped, each with one warning; the others
//  train, every epoch, with their own labels.
Test (images, bad_files_are_skipped_and_the_rest_go_on)
{
    za_test_dir_create ("za_images");
    const int64_t count = 60;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "bad", ZA_TEST_PNG, 1);
    char path [600], good [600];
    size_t size;
    //  A truncated JPEG in class 1.
    snprintf (good, sizeof good, "%s/class_1/whole.jpg", dir);
    uint8_t gray [SIDE * SIDE];
    za_test_images_pixels (fashion, 0, gray);
    cr_assert_eq (za_image_write_jpeg (good, gray, SIDE, SIDE, 1, 95), 0);
    uint8_t *bytes = za_test_read_file (good, &size);
    snprintf (path, sizeof path, "%s/class_1/truncated.jpg", dir);
    s_write_bytes (path, bytes, size / 2);
    free (bytes);
    unlink (good);
    //  A PNG whose image data has a flipped byte, in class 2.
    snprintf (good, sizeof good, "%s/class_2/00000.png", dir);
    snprintf (path, sizeof path, "%s/class_2/flipped.png", dir);
    cr_assert_eq (za_image_write_png (good, gray, SIDE, SIDE, 1), 0);
    bytes = za_test_read_file (good, &size);
    bytes [size - 20] ^= 0x55;          //  inside IDAT, before its CRC and IEND
    s_write_bytes (path, bytes, size);
    free (bytes);
    unlink (good);
    //  Not an image at all, in class 3.
    snprintf (path, sizeof path, "%s/class_3/notes.jpg", dir);
    s_write_bytes (path, "these are my notes\n", 19);

    za_images_config_t config = za_test_images_config (dir);
    za_dataset_t *dataset = za_images_load (&config);
    cr_assert_not_null (dataset, "%s", za_last_error ());
    cr_expect_eq (dataset->count, count + 3, "the bad files are listed");
    float *features = malloc (sizeof (float) * (count + 3) * SIDE * SIDE);
    int32_t *labels = malloc (sizeof (int32_t) * (count + 3));
    for (int epoch = 0; epoch < 2; epoch++) {
        cr_assert_eq (za_test_images_read_all (dataset, 8, 2, features, labels), count,
                      "epoch %d: the %lld good images", epoch, (long long) count);
        cr_expect_eq (za_images_bad (dataset), 3, "three bad, each counted once");
        int per_class [CLASSES] = {0}, expected [CLASSES] = {0};
        for (int64_t i = 0; i < count; i++)
            per_class [labels [i]]++, expected [fashion->labels [i]]++;
        for (int c = 0; c < CLASSES; c++)
            cr_expect_eq (per_class [c], expected [c], "class %d", c);
    }
    free (features), free (labels), free (dir);
    za_dataset_destroy (&dataset);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (images, empty_class_keeps_its_label_and_no_images_is_an_error)
{
    za_test_dir_create ("za_images");
    za_dataset_t *fashion = za_test_fashion ("train", 30);
    char *dir = za_test_images_folder (fashion, 30, "classes", ZA_TEST_PNG, 1);
    char path [600];
    snprintf (path, sizeof path, "%s/class_99_empty", dir);
    mkdir (path, 0755);
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_info_t info;
    cr_assert_eq (za_images_info (&config, &info), 0, "%s", za_last_error ());
    cr_expect_eq (info.n_classes, CLASSES + 1, "the empty folder is a class");
    //  Named classes: these folders, labels in this order.
    config.class_names = "class_3,class_1";
    cr_assert_eq (za_images_info (&config, &info), 0, "%s", za_last_error ());
    cr_expect_eq (info.n_classes, 2);
    za_error_set_quiet (1);
    config.class_names = "class_3,shoes";
    cr_expect_eq (za_images_info (&config, &info), -1);
    cr_expect (strstr (za_last_error (), "'shoes' has no folder") != NULL, "%s",
               za_last_error ());
    //  More names than classes can be: refused (the first 4096 were taken,
    //  the rest dropped unsaid).
    size_t most = (size_t) (ZA_IMAGES_MAX_CLASSES + 1) * 8;
    char *many = malloc (most);
    size_t at = 0;
    for (int c = 0; c <= ZA_IMAGES_MAX_CLASSES; c++)
        at += (size_t) snprintf (many + at, most - at, "%sc%d", c? ",": "", c);
    config.class_names = many;
    cr_expect_eq (za_images_info (&config, &info), -1);
    cr_expect (strstr (za_last_error (), "more than 4096 classes") != NULL, "%s",
               za_last_error ());
    free (many);
    config = za_test_images_config (path);           //  a folder with no class folders
    cr_expect_eq (za_images_info (&config, &info), -1);
    cr_expect (strstr (za_last_error (), "no class folders") != NULL, "%s", za_last_error ());
    char *none = za_test_path ("nothing");
    mkdir (none, 0755);
    snprintf (path, sizeof path, "%s/cats", none);
    mkdir (path, 0755);
    config = za_test_images_config (none);
    cr_expect_eq (za_images_info (&config, &info), -1);
    cr_expect (strstr (za_last_error (), "has no images") != NULL, "%s", za_last_error ());
    config = za_test_images_config ("/nonexistent/zactor/images");
    cr_expect_eq (za_images_info (&config, &info), -1);
    cr_expect (strstr (za_last_error (), "cannot read") != NULL, "%s", za_last_error ());
    za_error_set_quiet (0);
    free (dir), free (none);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  Keras's split: a seeded shuffle, training the first part; shards of a
//  subset are disjoint and cover it.
Test (images, validation_split_and_shards_partition_the_files)
{
    za_test_dir_create ("za_images");
    const int64_t count = 100;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "split", ZA_TEST_PNG, 1);
    za_images_config_t config = za_test_images_config (dir);
    config.validation_split = 0.25;
    config.seed = 7;
    config.subset = ZA_SUBSET_TRAINING;
    za_dataset_t *training = za_images_load (&config);
    config.subset = ZA_SUBSET_VALIDATION;
    za_dataset_t *validation = za_images_load (&config);
    cr_assert (training && validation, "%s", za_last_error ());
    cr_expect_eq (training->count, 75);
    cr_expect_eq (validation->count, 25);
    for (int64_t i = 0; i < training->count; i++)
        for (int64_t j = 0; j < validation->count; j++)
            cr_assert_str_neq (za_images_path (training, i), za_images_path (validation, j));
    //  Two shards of the training part: disjoint, and together all of it.
    config.subset = ZA_SUBSET_TRAINING;
    config.num_shards = 2;
    int64_t seen = 0;
    for (int shard = 0; shard < 2; shard++) {
        config.shard_index = shard;
        za_dataset_t *part = za_images_load (&config);
        cr_assert_not_null (part);
        for (int64_t i = 0; i < part->count; i++, seen++)
            cr_expect_str_eq (za_images_path (part, i),
                              za_images_path (training, shard + 2 * i));
        za_dataset_destroy (&part);
    }
    cr_expect_eq (seen, 75);
    za_dataset_destroy (&training);
    za_dataset_destroy (&validation);
    free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  The accuracy zactor-run prints, or -1.
static double
s_accuracy (const char *const *args)
{
    za_test_result_t result = za_test_run (args, 900);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    const char *line = result.out? strstr (result.out, "test accuracy "): NULL;
    double accuracy = -1;
    if (!line || sscanf (line, "test accuracy %lf", &accuracy) != 1)
        cr_expect_fail ("no accuracy in: %s %s", result.out, result.err);
    za_test_result_free (&result);
    return accuracy;
}

//  The acceptance's run: Fashion-MNIST written as JPEG (quality 95) at 56x56
//  RGB, read back at 28x28 gray, trains the seed CNN for 2 epochs to the IDX
//  run's test accuracy within 1 point.
Test (images, training_from_jpeg_folders_matches_the_idx_run, .timeout = 1800)
{
    za_test_dir_create ("za_images");
    za_dataset_t *train = za_test_fashion ("train", 0);
    za_dataset_t *test = za_test_fashion ("t10k", 0);
    char *train_dir = za_test_images_folder (train, train->count, "train", ZA_TEST_JPEG, 2);
    char *test_dir = za_test_images_folder (test, test->count, "test", ZA_TEST_JPEG, 2);
    char *idx_model = za_test_path ("idx_model"), *images_model = za_test_path ("img_model");
    const char *idx_args [] = {"--epochs", "2", "--model-dir", idx_model, "--threads", "2",
                               NULL};
    const char *image_args [] = {"--epochs", "2", "--model-dir", images_model, "--threads", "2",
                                 "--train-data", train_dir, "--eval-data", test_dir,
                                 "--image-size", "28", "--channels", "1", NULL};
    double idx = s_accuracy (idx_args);
    double images = s_accuracy (image_args);
    cr_expect (images > 0.85 && fabs (images - idx) <= 0.01,
               "from JPEG folders %.4f, from IDX %.4f", images, idx);
    printf ("test accuracy after 2 epochs: IDX %.4f, JPEG folders %.4f\n", idx, images);
    free (train_dir), free (test_dir), free (idx_model), free (images_model);
    za_dataset_destroy (&train);
    za_dataset_destroy (&test);
    za_test_dir_remove ();
}

//  Exit 2 with the reason before any training, and a validation split that
//  evaluates on its held-out part.
Test (images, command_line_says_what_is_wrong_and_splits)
{
    za_test_dir_create ("za_images");
    za_dataset_t *fashion = za_test_fashion ("train", 50);
    char *dir = za_test_images_folder (fashion, 50, "cli", ZA_TEST_PNG, 1);
    char *model = za_test_path ("model");
    const char *missing [] = {"--train-data", "/nonexistent/zactor/images", "--max-steps", "5",
                              "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (missing, 60);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "/nonexistent/zactor/images: cannot read: No such file"),
               "%s", result.err);
    za_test_result_free (&result);
    const char *no_eval [] = {"--train-data", dir, "--max-steps", "5", "--image-size", "28",
                              "--channels", "1", "--model-dir", model, NULL};
    result = za_test_run (no_eval, 60);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "say what to evaluate on"), "%s", result.err);
    za_test_result_free (&result);
    const char *tiny [] = {"--train-data", dir, "--validation-split", "0.2", "--max-steps",
                           "5", "--image-size", "4", "--channels", "1", "--model-dir", model,
                           NULL};
    result = za_test_run (tiny, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "the model cannot take 4x4x1 inputs"), "%s", result.err);
    cr_expect (strstr (result.err, "does not fit"), "says which layer: %s", result.err);
    za_test_result_free (&result);
    //  A split that holds out no example (1% of 50: trained on all, then
    //  "dataset is empty or malformed" after the training).
    const char *none [] = {"--train-data", dir, "--validation-split", "0.01", "--max-steps",
                           "5", "--image-size", "28", "--channels", "1", "--model-dir", model,
                           NULL};
    result = za_test_run (none, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "--validation-split 0.01 of 50 examples leaves the "
                                   "validation empty"), "%s", result.err);
    cr_expect (strstr (result.err, "step ") == NULL, "it trained: %s", result.err);
    za_test_result_free (&result);
    const char *split [] = {"--train-data", dir, "--validation-split", "0.2", "--max-steps",
                            "20", "--image-size", "28", "--channels", "1", "--model-dir", model,
                            NULL};
    result = za_test_run (split, 300);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.out, "on 10 examples"), "the held-out fifth: %s", result.out);
    za_test_result_free (&result);
    free (dir), free (model);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  --crop-to-aspect-ratio crops as Keras's smart_resize does: whole pixels,
//  the box's start rounded down. A Fashion-MNIST image with columns of
//  white around it (1 left and 2 right: 31 wide, 28 high) cropped to 28 x
//  28 is column 1 on (int (3 / 2)), the image itself, with either resize;
//  and with one column on the right, column 0 on.
Test (images, crop_to_aspect_ratio_takes_whole_pixels_as_keras)
{
    za_test_dir_create ("za_images_crop");
    za_dataset_t *fashion = za_test_fashion ("train", 1);
    uint8_t gray [SIDE * SIDE];
    za_test_images_pixels (fashion, 0, gray);
    za_image_decoder_t *decoder = za_image_decoder_new ();
    for (int left = 0; left < 2; left++) {
        int width = SIDE + 2 * left + 1;
        uint8_t *wide = malloc ((size_t) SIDE * width);
        memset (wide, 255, (size_t) SIDE * width);
        for (int y = 0; y < SIDE; y++)
            memcpy (wide + (size_t) y * width + left, gray + y * SIDE, SIDE);
        char *path = za_test_path (left? "wide-2.png": "wide-1.png");
        cr_assert_eq (za_image_write_png (path, wide, SIDE, width, 1), 0, "%s",
                      za_last_error ());
        for (int resize = 0; resize < 2; resize++) {
            za_image_spec_t spec = {.height = SIDE, .width = SIDE, .channels = 1,
                                    .resize = resize? ZA_RESIZE_BILINEAR: ZA_RESIZE_AREA,
                                    .crop_to_aspect_ratio = 1};
            uint8_t out [SIDE * SIDE];
            cr_assert_eq (za_image_load (decoder, path, &spec, out), 0, "%s",
                          za_image_error (decoder));
            cr_expect_eq (memcmp (out, gray, sizeof out), 0, "%d wide, %s: not the image",
                          width, za_resize_name (spec.resize));
        }
        free (path);
        free (wide);
    }
    za_image_decoder_destroy (&decoder);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  A pattern that matches images and another file (a LICENSE among them)
//  is a pattern of images, the other file left out as Keras leaves it; one
//  that matches no image is read as TFRecords (and says what it is not).
Test (images, a_pattern_of_images_leaves_other_files_out)
{
    za_test_dir_create ("za_images_pattern");
    const int64_t count = 40;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "png", ZA_TEST_PNG, 1);
    char pattern [4096], license [4096];
    snprintf (pattern, sizeof pattern, "%s/*/*", dir);
    snprintf (license, sizeof license, "%s/class_0/LICENSE.txt", dir);
    za_images_config_t config = za_test_images_config (pattern);
    za_dataset_info_t clean, mixed;
    cr_assert_eq (za_images_info (&config, &clean), 0, "%s", za_last_error ());
    FILE *file = fopen (license, "w");
    cr_assert_not_null (file);
    fputs ("Fashion-MNIST is MIT-licensed.\n", file);
    fclose (file);
    cr_assert_eq (za_images_info (&config, &mixed), 0, "%s", za_last_error ());
    cr_expect_eq (mixed.count, count);
    cr_expect_eq (mixed.n_classes, clean.n_classes);
    za_dataset_t *dataset = za_images_load (&config);
    cr_assert_not_null (dataset, "%s", za_last_error ());
    float *features = malloc (sizeof (float) * count * SIDE * SIDE);
    int32_t *labels = malloc (sizeof (int32_t) * count);
    cr_expect_eq (za_test_images_read_all (dataset, 8, 1, features, labels), count);
    za_dataset_destroy (&dataset);
    //  Only the license: no image, so TFRecords, and none of them.
    snprintf (pattern, sizeof pattern, "%s/*/*.txt", dir);
    config = za_test_images_config (pattern);
    za_error_set_quiet (1);
    cr_expect_neq (za_images_info (&config, &mixed), 0);
    za_error_set_quiet (0);
    free (features), free (labels), free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  A class folder with a comma in its name is refused where the classes
//  are listed, the folder named (class names travel as "a,b,c": predict
//  would read 'cat' and 'dog'); renamed, the same folder reads.
Test (images, a_class_folder_with_a_comma_is_named_and_refused)
{
    za_test_dir_create ("za_images_comma");
    const int64_t count = 20;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "png", ZA_TEST_PNG, 1);
    char from [4096], to [4096];
    snprintf (from, sizeof from, "%s/class_0", dir);
    snprintf (to, sizeof to, "%s/shirt,top", dir);
    cr_assert_eq (rename (from, to), 0);
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_info_t info;
    za_error_set_quiet (1);
    cr_expect_neq (za_images_info (&config, &info), 0);
    za_error_set_quiet (0);
    cr_expect (strstr (za_last_error (), "'shirt,top' has a comma"), "%s", za_last_error ());
    char pattern [4096];
    snprintf (pattern, sizeof pattern, "%s/*/*.png", dir);
    config = za_test_images_config (pattern);
    za_error_set_quiet (1);
    cr_expect_neq (za_images_info (&config, &info), 0, "the pattern's parents too");
    za_error_set_quiet (0);
    snprintf (from, sizeof from, "%s/shirt_top", dir);
    cr_assert_eq (rename (to, from), 0);
    config = za_test_images_config (dir);
    cr_expect_eq (za_images_info (&config, &info), 0, "%s", za_last_error ());
    cr_expect_eq (info.count, count);
    free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  Bytes between a JPEG's last scan and its end (EOI), and a JFIF version
//  libjpeg does not know, are libjpeg warnings that TensorFlow takes: the
//  image decodes as without them. The same bytes before the frame stay
//  damage (a warning before the pixels).
Test (images, harmless_jpeg_warnings_decode_as_tensorflow_takes_them)
{
    za_test_dir_create ("za_images_eoi");
    za_dataset_t *fashion = za_test_fashion ("train", 1);
    uint8_t gray [SIDE * SIDE];
    za_test_images_pixels (fashion, 0, gray);
    char *clean = za_test_path ("clean.jpg"), *tail = za_test_path ("tail.jpg");
    char *head = za_test_path ("head.jpg");
    cr_assert_eq (za_image_write_jpeg (clean, gray, SIDE, SIDE, 1, 95), 0, "%s",
                  za_last_error ());
    size_t size = 0;
    uint8_t *bytes = (uint8_t *) za_test_read_file (clean, &size);
    cr_assert (bytes && size > 4 && bytes [size - 2] == 0xff && bytes [size - 1] == 0xd9);
    uint8_t junk [214];
    for (size_t i = 0; i < sizeof junk; i++)
        junk [i] = (uint8_t) (i % 200 + 1);     //  no 0xFF: no marker among them
    FILE *file = fopen (tail, "wb");
    fwrite (bytes, 1, size - 2, file), fwrite (junk, 1, sizeof junk, file);
    fwrite (bytes + size - 2, 1, 2, file), fclose (file);
    file = fopen (head, "wb");
    fwrite (bytes, 1, 2, file), fwrite (junk, 1, sizeof junk, file);
    fwrite (bytes + 2, 1, size - 2, file), fclose (file);
    za_image_decoder_t *decoder = za_image_decoder_new ();
    za_image_spec_t spec = {.height = SIDE, .width = SIDE, .channels = 1};
    uint8_t want [SIDE * SIDE], got [SIDE * SIDE];
    cr_assert_eq (za_image_load (decoder, clean, &spec, want), 0, "%s",
                  za_image_error (decoder));
    cr_expect_eq (za_image_load (decoder, tail, &spec, got), 0, "%s", za_image_error (decoder));
    cr_expect_eq (memcmp (got, want, sizeof got), 0, "not the clean file's pixels");
    cr_expect_neq (za_image_load (decoder, head, &spec, got), 0, "garbage before the frame");
    //  A JFIF version libjpeg does not know (2.01: "unknown JFIF revision"),
    //  as TensorFlow takes it: the same pixels.
    cr_assert (size > 20 && !memcmp (bytes + 6, "JFIF", 5), "no JFIF marker first");
    bytes [11] = 2, bytes [12] = 1;
    cr_expect_eq (za_image_decode (decoder, bytes, size, &spec, got), 0, "%s",
                  za_image_error (decoder));
    cr_expect_eq (memcmp (got, want, sizeof got), 0, "not the clean file's pixels (JFIF 2.01)");
    //  And the decoder goes on exactly.
    cr_expect_eq (za_image_load (decoder, clean, &spec, got), 0);
    cr_expect_eq (memcmp (got, want, sizeof got), 0);
    za_image_decoder_destroy (&decoder);
    free (bytes), free (clean), free (tail), free (head);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  A long strip (20000 x 2, past the 16384 a side once refused) decodes:
//  the limit is of pixels, 2^28, as TensorFlow's is.
Test (images, a_long_strip_decodes)
{
    za_test_dir_create ("za_images_strip");
    const int width = 20000;
    uint8_t *strip = malloc ((size_t) 2 * width);
    for (int i = 0; i < 2 * width; i++)
        strip [i] = (uint8_t) (i % width * 255 / (width - 1));
    char *path = za_test_path ("strip.png");
    cr_assert_eq (za_image_write_png (path, strip, 2, width, 1), 0, "%s", za_last_error ());
    za_image_decoder_t *decoder = za_image_decoder_new ();
    za_image_spec_t spec = {.height = SIDE, .width = SIDE, .channels = 1};
    uint8_t out [SIDE * SIDE];
    cr_expect_eq (za_image_load (decoder, path, &spec, out), 0, "%s", za_image_error (decoder));
    cr_expect (out [0] < 16 && out [SIDE - 1] > 239, "a ramp: %d .. %d", out [0], out [SIDE - 1]);
    za_image_decoder_destroy (&decoder);
    free (path), free (strip);
    za_test_dir_remove ();
}

//  A CMYK JPEG (Photoshop's; ImageNet has 22) reads as RGB, as TensorFlow
//  reads it (its test: within 4 on average of the RGB file's pixels).
//  Fashion-MNIST's gray as Adobe's inverted CMYK (no ink but the black:
//  255, 255, 255, gray), written by TurboJPEG (a YCCK JPEG with Adobe's
//  marker), against the same pixels as a gray JPEG; then the decoder goes
//  on to a gray JPEG exactly.
Test (images, a_cmyk_jpeg_reads_as_rgb)
{
    za_test_dir_create ("za_images_cmyk");
    za_dataset_t *fashion = za_test_fashion ("train", 1);
    uint8_t gray [SIDE * SIDE], cmyk [SIDE * SIDE * 4];
    za_test_images_pixels (fashion, 0, gray);
    for (int i = 0; i < SIDE * SIDE; i++)
        cmyk [4 * i] = cmyk [4 * i + 1] = cmyk [4 * i + 2] = 255, cmyk [4 * i + 3] = gray [i];
    tjhandle jpeg = tjInitCompress ();
    unsigned char *bytes = NULL;
    unsigned long size = 0;
    cr_assert_eq (tjCompress2 (jpeg, cmyk, SIDE, 0, SIDE, TJPF_CMYK, &bytes, &size, TJSAMP_444,
                               95, 0), 0, "%s", tjGetErrorStr2 (jpeg));
    tjDestroy (jpeg);
    char *plain = za_test_path ("gray.jpg");
    cr_assert_eq (za_image_write_jpeg (plain, gray, SIDE, SIDE, 1, 95), 0);
    za_image_decoder_t *decoder = za_image_decoder_new ();
    for (int channels = 1; channels <= 3; channels += 2) {
        za_image_spec_t spec = {.height = SIDE, .width = SIDE, .channels = channels};
        uint8_t got [SIDE * SIDE * 3];
        cr_assert_eq (za_image_decode (decoder, bytes, size, &spec, got), 0, "%s",
                      za_image_error (decoder));
        double error = 0;
        for (int i = 0; i < SIDE * SIDE * channels; i++)
            error += abs ((int) got [i] - (int) gray [i / channels]);
        error /= SIDE * SIDE * channels;
        cr_expect_lt (error, 4, "%d channels: off by %.2f on average", channels, error);
    }
    za_image_spec_t spec = {.height = SIDE, .width = SIDE, .channels = 1};
    uint8_t want [SIDE * SIDE], got [SIDE * SIDE];
    za_image_decoder_t *fresh = za_image_decoder_new ();
    cr_assert_eq (za_image_load (fresh, plain, &spec, want), 0);
    cr_assert_eq (za_image_load (decoder, plain, &spec, got), 0);
    cr_expect_eq (memcmp (got, want, sizeof got), 0);
    za_image_decoder_destroy (&fresh);
    za_image_decoder_destroy (&decoder);
    tjFree (bytes);
    free (plain);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  A link in a class folder back to it (class_0/loop -> .) is a loop: its
//  images were listed 41 times (to the walk's depth). Said once per walk,
//  and each image is listed once.
Test (images, a_link_back_up_is_not_walked)
{
    za_test_dir_create ("za_images_loop");
    const int64_t count = 20;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "png", ZA_TEST_PNG, 1);
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_info_t before, after;
    cr_assert_eq (za_images_info (&config, &before), 0, "%s", za_last_error ());
    char link [4096];
    snprintf (link, sizeof link, "%s/class_0/loop", dir);
    cr_assert_eq (symlink (".", link), 0);
    cr_assert_eq (za_images_info (&config, &after), 0, "%s", za_last_error ());
    cr_expect_eq (after.count, before.count, "%lld images listed, not %lld",
                  (long long) after.count, (long long) before.count);
    free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}
