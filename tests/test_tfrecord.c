/*  test_tfrecord.c: TFRecord shards of tf.train.Example written by an
    independent writer (Python protobuf) from folders of real Fashion-MNIST
    JPEGs give the folder's examples in the folder's order; GZIP shards,
    1-based labels, a shard's own files, a flipped byte (the record skipped,
    the run going on); and file patterns with "**".                         */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "za/za_images.h"
#include "za/za_tfrecord.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define PIXELS (ZA_TEST_IMAGES_SIDE * ZA_TEST_IMAGES_SIDE)

//  Every example of source, in order (features, labels: malloc'd).
typedef struct {
    za_dataset_t *dataset;
    int64_t count;
    float *features;
    int32_t *labels;
} s_read_t;

static s_read_t
s_read (za_images_config_t config)
{
    s_read_t read = {.dataset = za_images_load (&config)};
    cr_assert_not_null (read.dataset, "%s: %s", config.source, za_last_error ());
    int64_t count = read.dataset->count;
    read.features = malloc (sizeof (float) * (size_t) (count + 1) * PIXELS);
    read.labels = malloc (sizeof (int32_t) * (size_t) (count + 1));
    read.count = za_test_images_read_all (read.dataset, 16, 2, read.features, read.labels);
    return read;
}

static void
s_read_free (s_read_t *read)
{
    za_dataset_destroy (&read->dataset);
    free (read->features), free (read->labels);
}

//  1 when b's examples are a's [from, from + b.count) but for skipped, in order.
static void
s_expect_same (const s_read_t *a, const s_read_t *b, int64_t from, int64_t skipped)
{
    for (int64_t i = 0, j = from; i < b->count; i++, j++) {
        if (j == skipped)
            j++;
        cr_assert_eq (b->labels [i], a->labels [j], "example %lld: label %d, expected %d",
                      (long long) i, b->labels [i], a->labels [j]);
        cr_assert_eq (memcmp (b->features + i * PIXELS, a->features + j * PIXELS,
                              sizeof (float) * PIXELS), 0, "example %lld's pixels differ",
                      (long long) i);
    }
}

Test (tfrecord, shards_give_the_folders_examples_in_its_order)
{
    za_test_dir_create ("za_tfrecord");
    const int64_t count = 120;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "jpegs", ZA_TEST_JPEG, 1);
    char *pattern = za_test_images_tfrecords (dir, "train", 3, 1, 0);
    s_read_t folder = s_read (za_test_images_config (dir));
    s_read_t records = s_read (za_test_images_config (pattern));
    cr_assert_eq (folder.count, count);
    cr_assert_eq (records.count, count, "three shards, the second GZIP");
    cr_expect_eq (records.dataset->n_classes, 10);
    s_expect_same (&folder, &records, 0, -1);
    cr_expect_eq (za_images_offset (records.dataset, 0), 0);
    cr_expect (strstr (za_images_path (records.dataset, 0), "train-00000-of-00003"));
    cr_expect (strstr (za_images_path (records.dataset, 50), "train-00001-of-00003"));
    cr_expect_gt (za_images_offset (records.dataset, 41), 0);

    //  With the classes given, what the shards hold is counted from the
    //  records' heads alone.
    za_images_config_t counted = za_test_images_config (pattern);
    counted.class_names = "0,1,2,3,4,5,6,7,8,9";
    za_dataset_info_t shards_info;
    cr_expect_eq (za_images_info (&counted, &shards_info), 0, "%s", za_last_error ());
    cr_expect_eq (shards_info.count, count);
    cr_expect_eq (shards_info.n_classes, 10);

    //  A shard of three files over two workers: worker 1 opens file 1 only.
    za_images_config_t config = za_test_images_config (pattern);
    config.num_shards = 2;
    config.shard_index = 1;
    s_read_t shard = s_read (config);
    cr_expect_eq (shard.count, count / 3);
    s_expect_same (&folder, &shard, count / 3, -1);
    for (int64_t i = 0; i < shard.count; i++)
        cr_assert (strstr (za_images_path (shard.dataset, i), "train-00001-of-00003"));
    s_read_free (&shard);
    //  A fourth file, empty (a writer's shard that got no record): over four
    //  workers, the fourth would have nothing to read (it failed, restarted
    //  for ever), so all shard by record, alike; over two, by file as ever.
    char *empty = malloc (strlen (pattern) + 32);
    sprintf (empty, "%.*s-zzzzz", (int) strlen (pattern) - 2, pattern);
    FILE *file = fopen (empty, "wb");
    cr_assert_not_null (file);
    fclose (file);
    for (int workers = 2; workers <= 4; workers += 2)
        for (int w = 0; w < workers; w++) {
            config.num_shards = workers;
            config.shard_index = w;
            shard = s_read (config);
            if (workers == 2)
                cr_expect_eq (shard.count, w? count / 3: 2 * count / 3, "2 workers: by file");
            else {
                cr_expect_eq (shard.count, count / 4, "4 workers: by record");
                for (int64_t i = 0; i < shard.count; i++) {
                    cr_assert_eq (shard.labels [i], folder.labels [4 * i + w]);
                    cr_assert_eq (memcmp (shard.features + i * PIXELS,
                                          folder.features + (4 * i + w) * PIXELS,
                                          sizeof (float) * PIXELS), 0);
                }
            }
            s_read_free (&shard);
        }
    unlink (empty);
    free (empty);

    //  Labels that start at 1 (build_image_data.py's): --label-base 1.
    char *based = za_test_images_tfrecords (dir, "based", 2, -1, 1);
    config = za_test_images_config (based);
    config.label_base = 1;
    s_read_t one = s_read (config);
    s_expect_same (&folder, &one, 0, -1);
    s_read_free (&one);
    config.label_base = 0;
    config.class_names = "0,1,2,3,4,5,6,7,8,9";
    za_error_set_quiet (1);
    cr_expect_null (za_images_load (&config), "label 10 is outside ten classes");
    cr_expect (strstr (za_last_error (), "--label-base 1"), "%s", za_last_error ());
    //  "tfrecord:" names TFRecord files whatever they are called.
    char *prefixed = malloc (strlen (based) + 16);
    sprintf (prefixed, "tfrecord:%s", based);
    config = za_test_images_config (prefixed);
    za_dataset_info_t info;
    cr_expect_eq (za_images_info (&config, &info), 0, "%s", za_last_error ());
    cr_expect_eq (info.n_classes, 11, "labels 1..10 without the base: 11 classes");
    za_error_set_quiet (0);
    free (prefixed), free (based);
    s_read_free (&folder), s_read_free (&records);
    free (pattern), free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  The offset of record `index` in the TFRecord bytes.
static size_t
s_record_offset (const uint8_t *bytes, int index)
{
    size_t at = 0;
    for (int i = 0; i < index; i++) {
        uint64_t length = 0;
        memcpy (&length, bytes + at, sizeof length);    //  little-endian here
        at += ZA_TFRECORD_HEAD_BYTES + (size_t) length + ZA_TFRECORD_CRC_BYTES;
    }
    return at;
}

static char *
s_write_changed (const uint8_t *bytes, size_t size, const char *name, size_t flip)
{
    uint8_t *copy = malloc (size);
    memcpy (copy, bytes, size);
    copy [flip] ^= 0x20;
    char *path = za_test_path (name);
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (copy, 1, size, file), size);
    fclose (file);
    free (copy);
    return path;
}

Test (tfrecord, a_flipped_byte_skips_the_record_and_the_run_goes_on)
{
    za_test_dir_create ("za_tfrecord");
    const int64_t count = 40;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "jpegs", ZA_TEST_JPEG, 1);
    free (za_test_images_tfrecords (dir, "one", 1, -1, 0));
    char *file = za_test_path ("one-00000-of-00001");
    size_t size;
    uint8_t *bytes = za_test_read_file (file, &size);
    s_read_t folder = s_read (za_test_images_config (dir));

    //  A byte of record 3's data: that record is skipped, the rest read.
    size_t third = s_record_offset (bytes, 3), fourth = s_record_offset (bytes, 4);
    char *flipped = s_write_changed (bytes, size, "data-flipped.tfrecord", third + 40);
    za_error_set_quiet (1);
    s_read_t skipped = s_read (za_test_images_config (flipped));
    cr_expect_eq (skipped.count, count - 1);
    s_expect_same (&folder, &skipped, 0, 3);
    cr_expect_eq (za_images_offset (skipped.dataset, 3), (int64_t) fourth);
    s_read_free (&skipped);

    //  TFRecordOptions ("ZLIB")'s file (a zlib stream of the records): read
    //  as the plain one (it was taken for a corrupt plain file and dropped
    //  whole); cut short, the records before the cut.
    uLongf packed = compressBound (size);
    uint8_t *zlib = malloc (packed);
    cr_assert_eq (compress2 (zlib, &packed, bytes, size, 6), Z_OK);
    char *zlib_path = za_test_path ("zlib.tfrecord");
    FILE *out = fopen (zlib_path, "wb");
    cr_assert (out && fwrite (zlib, 1, packed, out) == packed);
    fclose (out);
    s_read_t unpacked = s_read (za_test_images_config (zlib_path));
    cr_expect_eq (unpacked.count, count);
    s_expect_same (&folder, &unpacked, 0, -1);
    s_read_free (&unpacked);
    out = fopen (zlib_path, "wb");
    cr_assert (out && fwrite (zlib, 1, packed / 2, out) == packed / 2);
    fclose (out);
    s_read_t half = s_read (za_test_images_config (zlib_path));
    cr_expect (half.count > 0 && half.count < count, "%lld records of half a ZLIB file",
               (long long) half.count);
    s_expect_same (&folder, &half, 0, -1);
    s_read_free (&half);
    free (zlib), free (zlib_path);

    //  A byte of record 5's length: the file cannot be read past it.
    char *broken = s_write_changed (bytes, size, "length-flipped.tfrecord",
                                    s_record_offset (bytes, 5) + 1);
    s_read_t cut = s_read (za_test_images_config (broken));
    cr_expect_eq (cut.count, 5);
    s_expect_same (&folder, &cut, 0, -1);
    s_read_free (&cut);
    za_error_set_quiet (0);

    //  zactor-run says which file and offset, and trains on the others.
    char *model = za_test_path ("model");
    const char *args [] = {"--train-data", flipped, "--validation-split", "0.25",
                           "--max-steps", "10", "--batch-size", "8", "--image-size", "28",
                           "--channels", "1", "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (args, 300);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    char offset [64];
    snprintf (offset, sizeof offset, "record at offset %zu has a wrong data CRC", third);
    cr_expect (strstr (result.err, offset), "names the offset (%s): %s", offset, result.err);
    cr_expect (strstr (result.err, "data-flipped.tfrecord"), "names the file: %s", result.err);
    cr_expect (strstr (result.out, "on 9 examples"), "a quarter of the 39 others: %s",
               result.out);
    za_test_result_free (&result);

    //  Garbage is no TFRecord: exit 2 before training.
    char *garbage = za_test_write ("garbage.tfrecord", "not a record at all\n");
    const char *bad [] = {"--train-data", garbage, "--validation-split", "0.25",
                          "--max-steps", "10", "--model-dir", model, NULL};
    result = za_test_run (bad, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "no record with an image and a label")
               && strstr (result.err, "the first left out: ")
               && strstr (result.err, "wrong length CRC"), "says why: %s", result.err);
    za_test_result_free (&result);
    //  Records whose label is not where it is looked for: the first one's
    //  reason (it said no more than "no record").
    const char *unlabeled [] = {"--train-data", file, "--label-key", "image/nothing",
                                "--validation-split", "0.25", "--max-steps", "10",
                                "--model-dir", model, NULL};
    result = za_test_run (unlabeled, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "the first left out: ")
               && strstr (result.err, "record at offset 0 has no int64 label"), "says why: %s",
               result.err);
    za_test_result_free (&result);
    free (garbage), free (model), free (broken), free (flipped), free (bytes), free (file);
    s_read_free (&folder);
    free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  Trained on TFRecords whose labels start at 1, whose images are under
//  another key and that name no classes, a model predicts with no flag but
//  the data (input.json): on one image
//  (no label to count the classes by: the training's are kept, as numbers
//  from the base) and on the records themselves.
Test (tfrecord, predict_reads_them_as_training_did_with_no_flag)
{
    za_test_dir_create ("za_tfrecord_predict");
    const int64_t count = 40;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "jpegs", ZA_TEST_JPEG, 1);
    char *pattern = za_test_images_tfrecords_keyed (dir, "based", 1, -1, 1, "image/jpeg");
    char *model = za_test_path ("model");
    const char *train [] = {"--train-data", pattern, "--label-base", "1", "--image-key",
                            "image/jpeg", "--model", "linear", "--validation-split", "0.25",
                            "--max-steps", "5", "--batch-size", "8", "--image-size", "28",
                            "--channels", "1", "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (train, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    char image [4200];
    snprintf (image, sizeof image, "%s/class_%d/%05d.jpg", dir, fashion->labels [0], 0);
    const char *one [] = {"predict", "--model-dir", model, "--data", image, NULL};
    result = za_test_run (one, 120);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect_eq (za_test_count (result.out, "\"class_id\""), 1, "%s", result.out);
    cr_expect (strstr (result.out, "\"probabilities\":{\"1\":"), "%s", result.out);
    za_test_result_free (&result);
    const char *records [] = {"predict", "--model-dir", model, "--data", pattern, NULL};
    result = za_test_run (records, 120);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect_eq (za_test_count (result.out, "\"class_id\""), count, "%s", result.err);
    za_test_result_free (&result);
    free (model), free (pattern), free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (tfrecord, patterns_with_double_star_label_by_parent_folder)
{
    za_test_dir_create ("za_tfrecord");
    const int64_t count = 60;
    za_dataset_t *fashion = za_test_fashion ("train", count);
    char *dir = za_test_images_folder (fashion, count, "jpegs", ZA_TEST_JPEG, 1);
    s_read_t folder = s_read (za_test_images_config (dir));
    char pattern [600];
    snprintf (pattern, sizeof pattern, "%s/**/*.jpg", dir);
    s_read_t all = s_read (za_test_images_config (pattern));
    cr_expect_eq (all.count, count);
    cr_expect_eq (all.dataset->n_classes, 10);
    s_expect_same (&folder, &all, 0, -1);
    s_read_free (&all);
    //  Two "**" reach each file by two ways: it is listed once (it was two
    //  examples an epoch).
    snprintf (pattern, sizeof pattern, "%s/**/**/*.jpg", dir);
    all = s_read (za_test_images_config (pattern));
    cr_expect_eq (all.count, count);
    s_expect_same (&folder, &all, 0, -1);
    s_read_free (&all);

    //  Two classes: the parents' sorted names are labels 0 and 1.
    snprintf (pattern, sizeof pattern, "%s/class_[27]/*.jpg", dir);
    s_read_t two = s_read (za_test_images_config (pattern));
    cr_expect_eq (two.dataset->n_classes, 2);
    int64_t seen [2] = {0, 0};
    for (int64_t i = 0; i < two.count; i++) {
        cr_assert (two.labels [i] == 0 || two.labels [i] == 1);
        seen [two.labels [i]]++;
        const char *path = za_images_path (two.dataset, i);
        cr_expect (strstr (path, two.labels [i]? "class_7/": "class_2/"), "%s", path);
    }
    cr_expect (seen [0] > 0 && seen [1] > 0);
    s_read_free (&two);

    za_error_set_quiet (1);
    snprintf (pattern, sizeof pattern, "%s/**/*.gif", dir);
    za_images_config_t config = za_test_images_config (pattern);
    cr_expect_null (za_images_load (&config));
    cr_expect (strstr (za_last_error (), "no file matches"), "%s", za_last_error ());
    za_error_set_quiet (0);
    s_read_free (&folder);
    free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (tfrecord, a_key_without_a_feature_is_a_feature_of_no_kind)
{
    //  Example {features {feature {key: "k"}}}: the map entry has no value.
    const uint8_t bare [] = {0x0a, 0x05, 0x0a, 0x03, 0x0a, 0x01, 'k'};
    za_feature_t feature = {ZA_FEATURE_BYTES, bare, 1};
    cr_expect_eq (za_example_feature (bare, sizeof bare, "k", &feature), 1);
    cr_expect_eq (feature.kind, ZA_FEATURE_NONE);
    cr_expect_null (feature.list);
    cr_expect_eq (feature.size, 0);
    cr_expect_eq (za_example_feature (bare, sizeof bare, "x", &feature), 0);
    //  ... {key: "k" value {int64_list {}}}: an empty list of its kind.
    const uint8_t empty [] = {0x0a, 0x09, 0x0a, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x1a, 0x00};
    cr_expect_eq (za_example_feature (empty, sizeof empty, "k", &feature), 1);
    cr_expect_eq (feature.kind, ZA_FEATURE_INT64);
    cr_expect_eq (feature.size, 0);
    //  A value cut short: not an Example.
    const uint8_t cut [] = {0x0a, 0x09, 0x0a, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x1a, 0x05};
    cr_expect_eq (za_example_feature (cut, sizeof cut, "k", &feature), -1);
}
