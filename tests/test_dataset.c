/*  test_dataset.c: the input pipeline against the real Fashion-MNIST files,
    hand-made good and broken IDX files, and in-memory arrays.                */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "za/za_idx.h"
#include "za/za_images.h"
#include "za/za_input.h"
#include "za/za_util.h"
#include "za_test.h"

#define TEST_MAX_EXAMPLES 4096
#define FOREVER_DESTROY_MAX_S 1.0
#define TMP_PATH_SLOTS 4


//  --------------------------------------------------------------------------
//  Hand-made IDX files in a temporary directory

//  A path in the temp dir that the caller does not free: the last four made
//  stay valid, so a test can name its few files inline.
static const char *
s_tmp_path (const char *name)
{
    static char *paths [TMP_PATH_SLOTS];
    static int next;
    char **slot = &paths [next++ % TMP_PATH_SLOTS];
    free (*slot);
    *slot = za_test_path (name);
    return *slot;
}

static void
s_put_be32 (uint8_t *p, uint32_t v)
{
    p [0] = (uint8_t) (v >> 24);
    p [1] = (uint8_t) (v >> 16);
    p [2] = (uint8_t) (v >> 8);
    p [3] = (uint8_t) v;
}

//  Writes raw bytes, gzipped (zlib's gzopen "wb") or plain.
static void
s_write_bytes (const char *path, const uint8_t *bytes, size_t size, int gzipped)
{
    if (gzipped) {
        gzFile gz = gzopen (path, "wb");
        cr_assert_not_null (gz);
        if (size > 0)
            cr_assert_eq (gzwrite (gz, bytes, (unsigned) size), (int) size);
        cr_assert_eq (gzclose (gz), Z_OK);
    }
    else {
        FILE *file = fopen (path, "wb");
        cr_assert_not_null (file);
        if (size > 0)
            cr_assert_eq (fwrite (bytes, 1, size, file), size);
        cr_assert_eq (fclose (file), 0);
    }
}

//  Writes an IDX file: magic, ndim dims, then `payload_size` payload bytes.
static void
s_write_idx (const char *path, uint32_t magic, const uint32_t *dims, int ndim,
             const uint8_t *payload, size_t payload_size, int gzipped)
{
    size_t size = 4 + 4 * (size_t) ndim + payload_size;
    uint8_t *bytes = malloc (size);
    cr_assert_not_null (bytes);
    s_put_be32 (bytes, magic);
    for (int d = 0; d < ndim; d++)
        s_put_be32 (bytes + 4 + 4 * d, dims [d]);
    if (payload_size > 0)
        memcpy (bytes + 4 + 4 * ndim, payload, payload_size);
    s_write_bytes (path, bytes, size, gzipped);
    free (bytes);
}

//  A small valid pair: n images of rows x cols with pixel value (i*7+k) % 256,
//  labels i % n_classes.
static void
s_write_pair (const char *images_path, const char *labels_path, uint32_t n,
              uint32_t rows, uint32_t cols, int n_classes, int gzipped)
{
    size_t pixels = (size_t) n * rows * cols;
    uint8_t *image_bytes = malloc (pixels);
    uint8_t *label_bytes = malloc (n);
    cr_assert (image_bytes && label_bytes);
    for (size_t k = 0; k < pixels; k++)
        image_bytes [k] = (uint8_t) ((k * 7 + 3) % 256);
    for (uint32_t i = 0; i < n; i++)
        label_bytes [i] = (uint8_t) (i % (uint32_t) n_classes);
    uint32_t image_dims [3] = { n, rows, cols };
    s_write_idx (images_path, 0x00000803, image_dims, 3, image_bytes, pixels, gzipped);
    s_write_idx (labels_path, 0x00000801, &n, 1, label_bytes, n, gzipped);
    free (image_bytes);
    free (label_bytes);
}

//  Checks that loading fails with an error that names `path` and contains `what`.
static void
s_expect_load_error (const char *images_path, const char *labels_path,
                     const char *path, const char *what)
{
    za_error_clear ();
    za_dataset_t *dataset = za_idx_load (images_path, labels_path);
    cr_assert_null (dataset);
    const char *error = za_last_error ();
    cr_assert (strstr (error, path), "error '%s' does not name '%s'", error, path);
    cr_assert (strstr (error, what), "error '%s' does not say '%s'", error, what);
}

static void
s_idx_setup (void)
{
    za_error_set_quiet (1);
    za_test_dir_create ("za_test_dataset");
}

static void
s_idx_teardown (void)
{
    za_test_dir_remove ();
}


//  --------------------------------------------------------------------------
//  The real Fashion-MNIST files

static void
s_check_fashion (za_dataset_t *dataset, int64_t count)
{
    cr_assert_not_null (dataset, "%s", za_last_error ());
    cr_assert_eq (dataset->count, count);
    cr_assert_eq (dataset->height, 28);
    cr_assert_eq (dataset->width, 28);
    cr_assert_eq (dataset->channels, 1);
    cr_assert_eq (dataset->feature_size, 784);
    cr_assert_eq (dataset->n_classes, 10);
    cr_assert_eq ((uintptr_t) dataset->features % ZA_ALIGN_BYTES, 0);

    float lo = 1.0f, hi = 0.0f;
    for (int64_t k = 0; k < count * 784; k++) {
        float v = dataset->features [k];
        if (v < lo)
            lo = v;
        if (v > hi)
            hi = v;
    }
    cr_assert_eq (lo, 0.0f);
    cr_assert_eq (hi, 1.0f);

    int64_t per_class [10] = { 0 };
    for (int64_t i = 0; i < count; i++) {
        cr_assert (dataset->labels [i] >= 0 && dataset->labels [i] < 10);
        per_class [dataset->labels [i]]++;
    }
    for (int c = 0; c < 10; c++)
        cr_assert_eq (per_class [c], count / 10, "class %d has %lld examples",
                      c, (long long) per_class [c]);
}

Test (fashion_mnist, train_split)
{
    za_dataset_t *dataset = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "train");
    s_check_fashion (dataset, 60000);
    //  The first training example is an ankle boot (class 9), the next two are
    //  T-shirts (class 0); its first image's pixels sum to 76247 / 255.
    cr_assert_eq (dataset->labels [0], 9);
    cr_assert_eq (dataset->labels [1], 0);
    cr_assert_eq (dataset->labels [2], 0);
    double sum = 0;
    for (int k = 0; k < 784; k++)
        sum += dataset->features [k];
    cr_assert_float_eq (sum, 76247.0 / 255.0, 1e-3);
    za_dataset_destroy (&dataset);
    cr_assert_null (dataset);
}

Test (fashion_mnist, test_split)
{
    za_dataset_t *dataset = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "t10k");
    s_check_fashion (dataset, 10000);
    cr_assert_eq (dataset->labels [0], 9);
    cr_assert_eq (dataset->labels [1], 2);
    za_dataset_destroy (&dataset);
}

Test (fashion_mnist, load_idx_matches_load_dir)
{
    za_dataset_t *a = za_idx_load (
        ZA_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz",
        ZA_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz");
    za_dataset_t *b = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "t10k");
    cr_assert (a && b);
    cr_assert_eq (a->count, b->count);
    cr_assert_eq (memcmp (a->features, b->features,
                          (size_t) (a->count * a->feature_size) * sizeof (float)), 0);
    cr_assert_eq (memcmp (a->labels, b->labels, (size_t) a->count * sizeof (int32_t)), 0);
    za_dataset_destroy (&a);
    za_dataset_destroy (&b);
}

//  IDX files are a row of the sources' table: asked for by their split
//  through the images API, they give what za_idx gives; a folder without
//  them is one error, and the next ask still reads the files.
Test (fashion_mnist, idx_is_a_source_row)
{
    za_error_set_quiet (1);
    za_images_config_t config = {.source = ZA_FASHION_MNIST_DIR, .idx_split = "t10k",
                                 .num_shards = 2, .shard_index = 1};
    za_dataset_info_t info;
    cr_assert_eq (za_images_info (&config, &info), 0, "%s", za_last_error ());
    cr_assert_eq (info.count, 10000);
    cr_assert (info.height == 28 && info.width == 28 && info.channels == 1);
    cr_assert_eq (info.n_classes, 10);
    cr_assert_null (za_images_class_names (&config));

    za_images_config_t missing = config;
    missing.source = "/nonexistent-za-idx";
    cr_assert_neq (za_images_info (&missing, &info), 0);
    cr_assert_null (za_images_load (&missing));
    cr_assert (strstr (za_last_error (), "/nonexistent-za-idx"), "%s", za_last_error ());

    za_dataset_t *row = za_images_load (&config);
    za_dataset_t *idx = za_idx_load_dir_shard (ZA_FASHION_MNIST_DIR, "t10k", 2, 1);
    cr_assert (row && idx, "%s", za_last_error ());
    cr_assert_eq (row->count, 5000);
    cr_assert_eq (row->count, idx->count);
    cr_assert_eq (row->n_classes, idx->n_classes);
    cr_assert_eq (memcmp (row->labels, idx->labels, (size_t) row->count * sizeof (int32_t)), 0);
    cr_assert_eq (za_dataset_listed (row), 0, "IDX files are held in memory");
    za_dataset_destroy (&row);
    za_dataset_destroy (&idx);
}

//  One shuffled epoch over half of the training set sees each example of the
//  shard exactly once: the label histogram matches the shard's.
Test (fashion_mnist, shuffled_shard_epoch)
{
    za_dataset_t *dataset = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "train");
    cr_assert_not_null (dataset);
    za_input_config_t config = za_input_config_default ();
    config.num_shards = 2;
    config.shard_index = 1;
    config.shuffle_buffer = 10000;
    config.seed = 42;
    config.batch_size = 128;
    za_input_t *input = za_input_new (dataset, &config);
    cr_assert_not_null (input);
    cr_assert_eq (za_input_shard_count (input), 30000);

    int64_t expected [10] = { 0 }, seen [10] = { 0 };
    for (int64_t i = 1; i < dataset->count; i += 2)
        expected [dataset->labels [i]]++;
    int64_t total = 0;
    int batches = 0;
    za_batch_t batch;
    while (za_input_next (input, &batch) > 0) {
        for (int b = 0; b < batch.size; b++) {
            cr_assert (batch.features [b * 784 + 400] >= 0.0f
                       && batch.features [b * 784 + 400] <= 1.0f);
            seen [batch.labels [b]]++;
        }
        total += batch.size;
        batches++;
    }
    cr_assert_eq (total, 30000);
    cr_assert_eq (batches, (30000 + 127) / 128);
    for (int c = 0; c < 10; c++)
        cr_assert_eq (seen [c], expected [c]);
    za_input_destroy (&input);
    za_dataset_destroy (&dataset);
}


//  --------------------------------------------------------------------------
//  Hand-made IDX files

TestSuite (idx, .init = s_idx_setup, .fini = s_idx_teardown);

static void
s_check_small_pair (za_dataset_t *dataset)
{
    cr_assert_not_null (dataset, "%s", za_last_error ());
    cr_assert_eq (dataset->count, 5);
    cr_assert_eq (dataset->height, 2);
    cr_assert_eq (dataset->width, 3);
    cr_assert_eq (dataset->channels, 1);
    cr_assert_eq (dataset->feature_size, 6);
    cr_assert_eq (dataset->n_classes, 4);
    for (int k = 0; k < 30; k++)
        cr_assert_float_eq (dataset->features [k], (float) ((k * 7 + 3) % 256) / 255.0f,
                            1e-7);
    for (int i = 0; i < 5; i++)
        cr_assert_eq (dataset->labels [i], i % 4);
}

Test (idx, plain_files)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    za_dataset_t *dataset = za_idx_load (images, labels);
    s_check_small_pair (dataset);
    za_dataset_destroy (&dataset);
    za_dataset_destroy (&dataset);      //  safe twice
    za_dataset_destroy (NULL);
}

Test (idx, gzipped_files)
{
    //  Detected by content: the names carry no .gz.
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 1);
    za_dataset_t *dataset = za_idx_load (images, labels);
    s_check_small_pair (dataset);
    za_dataset_destroy (&dataset);
}

Test (idx, every_pixel_value)
{
    const char *images = s_tmp_path ("img.gz");
    const char *labels = s_tmp_path ("lbl");
    uint8_t pixels [256];
    uint8_t label_bytes [1] = { 7 };
    for (int k = 0; k < 256; k++)
        pixels [k] = (uint8_t) k;
    uint32_t dims [3] = { 1, 16, 16 };
    uint32_t n = 1;
    s_write_idx (images, 0x803, dims, 3, pixels, 256, 1);
    s_write_idx (labels, 0x801, &n, 1, label_bytes, 1, 0);
    za_dataset_t *dataset = za_idx_load (images, labels);
    cr_assert_not_null (dataset);
    cr_assert_eq (dataset->n_classes, 8);
    for (int k = 0; k < 256; k++)
        cr_assert_eq (dataset->features [k], (float) k / 255.0f);
    za_dataset_destroy (&dataset);
}

Test (idx, missing_images)
{
    const char *images = s_tmp_path ("train-images-idx3-ubyte.gz");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (s_tmp_path ("other"), labels, 5, 2, 3, 4, 0);
    s_expect_load_error (images, labels, images, "No such file or directory");
    cr_assert (strstr (za_last_error (), "cannot open"));
}

Test (idx, missing_labels)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("nothing-here");
    s_write_pair (images, s_tmp_path ("lbl"), 5, 2, 3, 4, 1);
    s_expect_load_error (images, labels, labels, "No such file or directory");
}

Test (idx, directory_is_not_a_file)
{
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (s_tmp_path ("img"), labels, 5, 2, 3, 4, 0);
    za_error_clear ();
    cr_assert_null (za_idx_load (za_test_dir (), labels));
    cr_assert (strstr (za_last_error (), za_test_dir ()));
}

Test (idx, wrong_magic_images)
{
    const char *images = s_tmp_path ("img.gz");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    //  A label file where the image file should be.
    s_expect_load_error (labels, labels, labels,
                         "wrong magic 0x00000801 (expected 0x00000803");
    //  Not IDX at all (gzipped).
    uint32_t dims [3] = { 1, 1, 1 };
    uint8_t pixel = 0;
    s_write_idx (images, 0x1f8b0803, dims, 3, &pixel, 1, 1);
    s_expect_load_error (images, labels, images, "wrong magic 0x1f8b0803");
}

Test (idx, wrong_magic_labels)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 1);
    s_expect_load_error (images, images, images,
                         "wrong magic 0x00000803 (expected 0x00000801 for an IDX label");
}

Test (idx, unsupported_dtype)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    //  0x0D is float32 in the IDX format.
    uint32_t dims [3] = { 5, 2, 3 };
    uint8_t payload [120] = { 0 };
    s_write_idx (images, 0x00000d03, dims, 3, payload, sizeof payload, 0);
    s_expect_load_error (images, labels, images, "unsupported data type 0x0d");
}

Test (idx, truncated_images)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 10, 28, 28, 10, 0);
    uint32_t dims [3] = { 10, 28, 28 };
    uint8_t payload [1000] = { 0 };
    s_write_idx (images, 0x803, dims, 3, payload, sizeof payload, 0);
    s_expect_load_error (images, labels, images,
                         "truncated: header declares 10 images of 28x28 (7840 bytes) "
                         "but only 1000 bytes follow");
    s_write_idx (images, 0x803, dims, 3, payload, sizeof payload, 1);
    s_expect_load_error (images, labels, images, "but only 1000 bytes follow");
}

Test (idx, truncated_gzip_stream)
{
    //  A gzip file cut in the middle of its compressed stream.
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 50, 28, 28, 10, 1);
    FILE *file = fopen (images, "rb");
    cr_assert_not_null (file);
    uint8_t bytes [65536];
    size_t size = fread (bytes, 1, sizeof bytes, file);
    fclose (file);
    cr_assert (size > 200);
    s_write_bytes (images, bytes, size / 2, 0);
    za_error_clear ();
    cr_assert_null (za_idx_load (images, labels));
    cr_assert (strstr (za_last_error (), images), "%s", za_last_error ());
}

Test (idx, truncated_labels)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 10, 2, 2, 10, 1);
    uint32_t n = 10;
    uint8_t payload [3] = { 1, 2, 3 };
    s_write_idx (labels, 0x801, &n, 1, payload, sizeof payload, 1);
    s_expect_load_error (images, labels, labels,
                         "truncated: header declares 10 labels (10 bytes) "
                         "but only 3 bytes follow");
}

Test (idx, truncated_header)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    uint8_t bytes [10] = { 0, 0, 8, 3, 0, 0, 0, 5, 0, 0 };
    s_write_bytes (images, bytes, sizeof bytes, 0);
    s_expect_load_error (images, labels, images, "truncated");
    s_write_bytes (images, bytes, 2, 1);
    s_expect_load_error (images, labels, images, "truncated");
    s_write_bytes (images, bytes, 0, 0);
    s_expect_load_error (images, labels, images, "truncated");
}

Test (idx, zero_dimension)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    uint32_t dims [3] = { 5, 0, 3 };
    s_write_idx (images, 0x803, dims, 3, NULL, 0, 0);
    s_expect_load_error (images, labels, images, "dimension 1 is 0");
    uint32_t zero = 0;
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    s_write_idx (labels, 0x801, &zero, 1, NULL, 0, 0);
    s_expect_load_error (images, labels, labels, "dimension 0 is 0");
}

Test (idx, huge_header_small_file)
{
    //  Headers declaring absurd sizes fail without trying to allocate them.
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    uint8_t payload [64] = { 0 };
    uint32_t overflow [3] = { 0x7fffffff, 0x7fffffff, 0x7fffffff };
    s_write_idx (images, 0x803, overflow, 3, payload, sizeof payload, 0);
    s_expect_load_error (images, labels, images, "overflow");
    uint32_t large [3] = { 60000000, 28, 28 };      //  47 GB declared
    s_write_idx (images, 0x803, large, 3, payload, sizeof payload, 1);
    s_expect_load_error (images, labels, images, "but only 64 bytes follow");
    uint32_t negative [3] = { 0x80000000u, 1, 1 };
    s_write_idx (images, 0x803, negative, 3, payload, sizeof payload, 0);
    s_expect_load_error (images, labels, images, "dimension 0");
}

Test (idx, count_mismatch)
{
    const char *images = s_tmp_path ("img");
    const char *labels = s_tmp_path ("lbl");
    const char *other = s_tmp_path ("lbl7");
    s_write_pair (images, labels, 5, 2, 3, 4, 0);
    uint32_t n = 7;
    uint8_t payload [7] = { 0 };
    s_write_idx (other, 0x801, &n, 1, payload, sizeof payload, 1);
    za_error_clear ();
    cr_assert_null (za_idx_load (images, other));
    const char *error = za_last_error ();
    cr_assert (strstr (error, images) && strstr (error, other), "%s", error);
    cr_assert (strstr (error, "7 labels") && strstr (error, "5 images"), "%s", error);
}

Test (idx, load_dir_prefers_gz)
{
    //  Plain files of 3 examples, gzipped files of 4: the .gz ones win.
    s_write_pair (s_tmp_path ("train-images-idx3-ubyte"),
                  s_tmp_path ("train-labels-idx1-ubyte"), 3, 2, 2, 3, 0);
    za_dataset_t *dataset = za_idx_load_dir (za_test_dir (), "train");
    cr_assert_not_null (dataset);
    cr_assert_eq (dataset->count, 3);
    za_dataset_destroy (&dataset);

    s_write_pair (s_tmp_path ("train-images-idx3-ubyte.gz"),
                  s_tmp_path ("train-labels-idx1-ubyte.gz"), 4, 2, 2, 3, 1);
    dataset = za_idx_load_dir (za_test_dir (), "train");
    cr_assert_not_null (dataset);
    cr_assert_eq (dataset->count, 4);
    za_dataset_destroy (&dataset);
}

Test (idx, load_dir_errors)
{
    za_error_clear ();
    cr_assert_null (za_idx_load_dir (za_test_dir (), "t10k"));
    cr_assert (strstr (za_last_error (), "t10k-images-idx3-ubyte.gz"), "%s",
               za_last_error ());
    cr_assert (strstr (za_last_error (), za_test_dir ()));
    za_error_clear ();
    cr_assert_null (za_idx_load_dir (ZA_FASHION_MNIST_DIR, "validation"));
    cr_assert (strstr (za_last_error (), "validation"));
    cr_assert_null (za_idx_load_dir (NULL, "train"));
    cr_assert_null (za_idx_load (NULL, NULL));
}


//  --------------------------------------------------------------------------
//  One shard as bytes, and a split described from its headers

TestSuite (shard, .init = s_idx_setup, .fini = s_idx_teardown);

//  The batches of two iterators are the same, value for value.
static void
s_expect_same_stream (za_input_t *a, za_input_t *b, int batches)
{
    for (int n = 0; n < batches; n++) {
        za_batch_t x, y;
        cr_assert_eq (za_input_next (a, &x), 1);
        cr_assert_eq (za_input_next (b, &y), 1);
        cr_assert_eq (x.size, y.size);
        cr_assert_eq (memcmp (x.labels, y.labels, (size_t) x.size * sizeof (int32_t)), 0,
                      "batch %d: other labels", n);
        cr_assert_eq (memcmp (x.features, y.features,
                              (size_t) x.size * (size_t) x.feature_size * sizeof (float)), 0,
                      "batch %d: other features", n);
    }
}

Test (shard, a_worker_shard_streams_what_the_whole_set_streams)
{
    //  Worker 1 of 3 (the chief is 0): its shard alone, held as bytes, gives
    //  the very batches that sharding the whole float set gives.
    za_dataset_t *whole = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "train");
    za_dataset_t *shard = za_idx_load_dir_shard (ZA_FASHION_MNIST_DIR, "train", 3, 1);
    cr_assert (whole && shard, "%s", za_last_error ());
    cr_assert_eq (shard->count, 20000);
    cr_assert_null (shard->features);
    cr_assert_not_null (shard->pixels);
    cr_assert_eq (shard->n_classes, 10);
    cr_assert_eq (shard->feature_size, 784);
    for (int64_t i = 0; i < shard->count; i += 997)
        cr_assert_eq (shard->labels [i], whole->labels [1 + 3 * i]);
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 64;
    config.shuffle_buffer = 60000;
    config.seed = 1234;
    config.epochs = -1;
    za_input_config_t sharded = config;
    sharded.num_shards = 3;
    sharded.shard_index = 1;
    za_input_t *a = za_input_new (whole, &sharded);
    za_input_t *b = za_input_new (shard, &config);
    cr_assert (a && b);
    cr_assert_eq (za_input_shard_count (a), za_input_shard_count (b));
    s_expect_same_stream (a, b, 320);       //  past the end of an epoch (312.5 batches)
    za_input_destroy (&a);
    za_input_destroy (&b);
    za_dataset_destroy (&whole);
    za_dataset_destroy (&shard);
}

Test (shard, the_whole_split_as_bytes_equals_the_floats)
{
    za_dataset_t *floats = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "t10k");
    za_dataset_t *bytes = za_idx_load_dir_shard (ZA_FASHION_MNIST_DIR, "t10k", 1, 0);
    cr_assert (floats && bytes);
    cr_assert_eq (bytes->count, floats->count);
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 500;
    za_input_t *a = za_input_new (floats, &config);
    za_input_t *b = za_input_new (bytes, &config);
    s_expect_same_stream (a, b, 20);
    za_batch_t batch;
    cr_assert_eq (za_input_next (b, &batch), 0, "the set has 20 batches of 500");
    za_input_destroy (&a);
    za_input_destroy (&b);
    za_dataset_destroy (&floats);
    za_dataset_destroy (&bytes);
}

Test (shard, uneven_shards_and_small_files)
{
    //  7 examples in 3 shards: 3, 2, 2; each keeps its own labels and pixels.
    s_write_pair (s_tmp_path ("train-images-idx3-ubyte.gz"),
                  s_tmp_path ("train-labels-idx1-ubyte.gz"), 7, 2, 3, 5, 1);
    za_dataset_t *whole = za_idx_load_dir (za_test_dir (), "train");
    cr_assert_not_null (whole);
    int64_t expected [3] = {3, 2, 2};
    for (int k = 0; k < 3; k++) {
        za_dataset_t *shard = za_idx_load_dir_shard (za_test_dir (), "train", 3, k);
        cr_assert_not_null (shard, "%s", za_last_error ());
        cr_assert_eq (shard->count, expected [k]);
        cr_assert_eq (shard->n_classes, 5);
        for (int64_t i = 0; i < shard->count; i++) {
            cr_assert_eq (shard->labels [i], whole->labels [k + 3 * i]);
            for (int f = 0; f < 6; f++)
                cr_assert_eq ((float) shard->pixels [i * 6 + f] / 255.0f,
                              whole->features [(k + 3 * i) * 6 + f]);
        }
        za_dataset_destroy (&shard);
    }
    za_dataset_destroy (&whole);
}

Test (shard, errors_name_the_file)
{
    //  Truncated pixels, a shard that does not exist, no files.
    s_write_pair (s_tmp_path ("train-images-idx3-ubyte"),
                  s_tmp_path ("train-labels-idx1-ubyte"), 5, 2, 3, 4, 0);
    uint32_t dims [3] = { 5, 2, 3 };
    uint8_t payload [20] = { 0 };
    s_write_idx (s_tmp_path ("train-images-idx3-ubyte"), 0x803, dims, 3, payload,
                 sizeof payload, 0);
    za_error_clear ();
    cr_assert_null (za_idx_load_dir_shard (za_test_dir (), "train", 2, 1));
    cr_assert (strstr (za_last_error (), "truncated") && strstr (za_last_error (), "20 bytes"),
               "%s", za_last_error ());
    za_error_clear ();
    cr_assert_null (za_idx_load_dir_shard (za_test_dir (), "train", 2, 2));
    cr_assert (strstr (za_last_error (), "shard 2 of 2"), "%s", za_last_error ());
    za_error_clear ();
    cr_assert_null (za_idx_load_dir_shard (za_test_dir (), "t10k", 1, 0));
    cr_assert (strstr (za_last_error (), "t10k-"), "%s", za_last_error ());
}

Test (shard, info_reads_no_pixel)
{
    za_dataset_info_t info;
    cr_assert_eq (za_idx_info_dir (ZA_FASHION_MNIST_DIR, "train", &info), 0);
    cr_assert_eq (info.count, 60000);
    cr_assert_eq (info.height, 28);
    cr_assert_eq (info.width, 28);
    cr_assert_eq (info.channels, 1);
    cr_assert_eq (info.n_classes, 10);
    //  A file whose pixels are cut short still has a readable header.
    s_write_pair (s_tmp_path ("t10k-images-idx3-ubyte"),
                  s_tmp_path ("t10k-labels-idx1-ubyte"), 9, 4, 5, 3, 0);
    uint32_t dims [3] = { 9, 4, 5 };
    s_write_idx (s_tmp_path ("t10k-images-idx3-ubyte"), 0x803, dims, 3, NULL, 0, 0);
    cr_assert_eq (za_idx_info_dir (za_test_dir (), "t10k", &info), 0);
    cr_assert_eq (info.count, 9);
    cr_assert_eq (info.height, 4);
    cr_assert_eq (info.width, 5);
    cr_assert_eq (info.n_classes, 3);
    //  Labels that disagree with the images are an error.
    uint32_t seven = 7;
    uint8_t labels [7] = { 0 };
    s_write_idx (s_tmp_path ("t10k-labels-idx1-ubyte"), 0x801, &seven, 1, labels, 7, 0);
    za_error_clear ();
    cr_assert_eq (za_idx_info_dir (za_test_dir (), "t10k", &info), -1);
    cr_assert (strstr (za_last_error (), "7 labels"), "%s", za_last_error ());
}


//  --------------------------------------------------------------------------
//  Datasets from arrays

Test (arrays, copies_and_counts_classes)
{
    za_error_set_quiet (1);
    float features [12];
    int32_t labels [3] = { 2, 0, 5 };
    for (int k = 0; k < 12; k++)
        features [k] = (float) k * 0.5f;
    za_dataset_t *dataset = za_dataset_from_arrays (features, labels, 3, 2, 1, 2);
    cr_assert_not_null (dataset);
    features [0] = 99.0f;               //  the dataset has its own copy
    labels [0] = 99;
    cr_assert_eq (dataset->count, 3);
    cr_assert_eq (dataset->feature_size, 4);
    cr_assert_eq (dataset->n_classes, 6);
    cr_assert_eq (dataset->features [0], 0.0f);
    cr_assert_eq (dataset->features [11], 5.5f);
    cr_assert_eq (dataset->labels [0], 2);
    cr_assert_eq ((uintptr_t) dataset->features % ZA_ALIGN_BYTES, 0);
    za_dataset_destroy (&dataset);
}

Test (arrays, bad_arguments)
{
    za_error_set_quiet (1);
    float features [4] = { 0 };
    int32_t labels [2] = { 0, 1 };
    int32_t negative [2] = { 0, -1 };
    cr_assert_null (za_dataset_from_arrays (NULL, labels, 2, 1, 2, 1));
    cr_assert_null (za_dataset_from_arrays (features, NULL, 2, 1, 2, 1));
    cr_assert_null (za_dataset_from_arrays (features, labels, 0, 1, 2, 1));
    cr_assert_null (za_dataset_from_arrays (features, labels, -1, 1, 2, 1));
    cr_assert_null (za_dataset_from_arrays (features, labels, 2, 0, 2, 1));
    cr_assert_null (za_dataset_from_arrays (features, labels, 2, 1, -2, 1));
    za_error_clear ();
    cr_assert_null (za_dataset_from_arrays (features, negative, 2, 1, 2, 1));
    cr_assert (strstr (za_last_error (), "-1"), "%s", za_last_error ());
    cr_assert_null (za_dataset_from_arrays (features, labels, 2, 1 << 30, 1 << 30, 1 << 30));
}


//  --------------------------------------------------------------------------
//  The pipeline over in-memory data: example i has features {i, i + 0.5} and
//  label i % 10, so every batch row says which example it is.

static za_dataset_t *
s_indexed_dataset (int64_t count)
{
    float *features = malloc ((size_t) count * 2 * sizeof (float));
    int32_t *labels = malloc ((size_t) count * sizeof (int32_t));
    cr_assert (features && labels);
    for (int64_t i = 0; i < count; i++) {
        features [2 * i] = (float) i;
        features [2 * i + 1] = (float) i + 0.5f;
        labels [i] = (int32_t) (i % 10);
    }
    za_dataset_t *dataset = za_dataset_from_arrays (features, labels, count, 1, 2, 1);
    cr_assert_not_null (dataset);
    free (features);
    free (labels);
    return dataset;
}

//  Runs the whole stream; stores the example indices in `order` and the batch
//  sizes in `sizes` (either may be NULL). Returns the number of examples.
static int64_t
s_collect (const za_dataset_t *dataset, const za_input_config_t *config,
           int64_t *order, int *sizes, int *n_batches)
{
    za_input_t *input = za_input_new (dataset, config);
    cr_assert_not_null (input, "%s", za_last_error ());
    int64_t total = 0;
    int batches = 0;
    za_batch_t batch;
    while (za_input_next (input, &batch) > 0) {
        cr_assert (batch.size > 0 && batch.size <= config->batch_size);
        cr_assert_eq ((uintptr_t) batch.features % ZA_ALIGN_BYTES, 0);
        for (int b = 0; b < batch.size; b++) {
            int64_t index = (int64_t) batch.features [2 * b];
            cr_assert_eq (batch.features [2 * b + 1], (float) index + 0.5f);
            cr_assert_eq (batch.labels [b], index % 10);
            cr_assert (total < TEST_MAX_EXAMPLES);
            if (order)
                order [total] = index;
            total++;
        }
        if (sizes)
            sizes [batches] = batch.size;
        batches++;
    }
    //  The end is sticky.
    cr_assert_eq (za_input_next (input, &batch), 0);
    cr_assert_eq (za_input_next (input, &batch), 0);
    cr_assert_eq (batch.size, 0);
    za_input_destroy (&input);
    cr_assert_null (input);
    if (n_batches)
        *n_batches = batches;
    return total;
}

//  1 when order [0 .. n) holds each of `expected [0 .. n)` exactly once.
static int
s_is_permutation (const int64_t *order, const int64_t *expected, int64_t n)
{
    int seen [TEST_MAX_EXAMPLES] = { 0 };
    for (int64_t k = 0; k < n; k++)
        seen [expected [k]]++;
    for (int64_t k = 0; k < n; k++)
        if (order [k] < 0 || order [k] >= TEST_MAX_EXAMPLES || --seen [order [k]] < 0)
            return 0;
    return 1;
}

static za_input_config_t
s_config (int batch_size, int prefetch)
{
    za_input_config_t config = za_input_config_default ();
    config.batch_size = batch_size;
    config.prefetch = prefetch;
    return config;
}

Test (pipeline, config_defaults)
{
    za_input_config_t config = za_input_config_default ();
    cr_assert_eq (config.num_shards, 1);
    cr_assert_eq (config.shard_index, 0);
    cr_assert_eq (config.shuffle_buffer, 0);
    cr_assert_eq (config.seed, 0);
    cr_assert_eq (config.epochs, 1);
    cr_assert_eq (config.batch_size, 32);
    cr_assert_eq (config.drop_remainder, 0);
    cr_assert_eq (config.prefetch, 2);
    cr_assert_eq (config.replicas, 1);
    cr_assert_eq (config.replica, 0);
}

Test (pipeline, sequential_without_shuffle)
{
    za_dataset_t *dataset = s_indexed_dataset (100);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        za_input_config_t config = s_config (7, prefetch);
        int64_t order [TEST_MAX_EXAMPLES];
        cr_assert_eq (s_collect (dataset, &config, order, NULL, NULL), 100);
        for (int64_t k = 0; k < 100; k++)
            cr_assert_eq (order [k], k);
    }
    za_dataset_destroy (&dataset);
}

Test (pipeline, shard_keeps_every_nth)
{
    za_dataset_t *dataset = s_indexed_dataset (20);
    za_input_config_t config = s_config (4, 0);
    config.num_shards = 3;
    config.shard_index = 1;
    int64_t order [TEST_MAX_EXAMPLES];
    cr_assert_eq (s_collect (dataset, &config, order, NULL, NULL), 7);
    for (int k = 0; k < 7; k++)
        cr_assert_eq (order [k], 1 + 3 * k);

    za_input_t *input = za_input_new (dataset, &config);
    cr_assert_eq (za_input_shard_count (input), 7);
    za_input_destroy (&input);
    config.shard_index = 2;             //  2, 5, ..., 17
    input = za_input_new (dataset, &config);
    cr_assert_eq (za_input_shard_count (input), 6);
    za_input_destroy (&input);
    config.shard_index = 0;             //  0, 3, ..., 18
    input = za_input_new (dataset, &config);
    cr_assert_eq (za_input_shard_count (input), 7);
    za_input_destroy (&input);
    config.num_shards = 1;
    input = za_input_new (dataset, &config);
    cr_assert_eq (za_input_shard_count (input), 20);
    za_input_destroy (&input);
    za_dataset_destroy (&dataset);
}

Test (pipeline, shards_partition_the_dataset)
{
    za_dataset_t *dataset = s_indexed_dataset (101);
    int64_t all [TEST_MAX_EXAMPLES], expected [TEST_MAX_EXAMPLES];
    int64_t total = 0;
    for (int shard = 0; shard < 4; shard++) {
        za_input_config_t config = s_config (8, 1);
        config.num_shards = 4;
        config.shard_index = shard;
        config.shuffle_buffer = 10;
        config.seed = 5;
        total += s_collect (dataset, &config, all + total, NULL, NULL);
    }
    cr_assert_eq (total, 101);
    for (int64_t k = 0; k < 101; k++)
        expected [k] = k;
    cr_assert (s_is_permutation (all, expected, 101));
    za_dataset_destroy (&dataset);
}

Test (pipeline, full_shuffle_permutes_each_epoch)
{
    za_dataset_t *dataset = s_indexed_dataset (50);
    int64_t expected [50];
    for (int k = 0; k < 50; k++)
        expected [k] = k;
    //  A buffer the size of the data and one far larger behave the same way.
    int buffers [2] = { 50, 100000 };
    for (int b = 0; b < 2; b++) {
        za_input_config_t config = s_config (8, 0);
        config.shuffle_buffer = buffers [b];
        config.seed = 1234;
        config.epochs = 3;
        int64_t order [TEST_MAX_EXAMPLES];
        cr_assert_eq (s_collect (dataset, &config, order, NULL, NULL), 150);
        for (int epoch = 0; epoch < 3; epoch++)
            cr_assert (s_is_permutation (order + 50 * epoch, expected, 50),
                       "epoch %d is not a permutation", epoch);
        cr_assert (memcmp (order, expected, sizeof expected) != 0, "not shuffled");
        cr_assert (memcmp (order, order + 50, sizeof expected) != 0, "epochs 0, 1 equal");
        cr_assert (memcmp (order + 50, order + 100, sizeof expected) != 0,
                   "epochs 1, 2 equal");
    }
    za_dataset_destroy (&dataset);
}

Test (pipeline, small_shuffle_buffer_is_local)
{
    //  With a buffer of B, the example at output position p comes from the
    //  first p + B of the epoch, and every epoch is still a permutation.
    za_dataset_t *dataset = s_indexed_dataset (200);
    int64_t expected [200];
    for (int k = 0; k < 200; k++)
        expected [k] = k;
    za_input_config_t config = s_config (16, 0);
    config.shuffle_buffer = 5;
    config.seed = 77;
    config.epochs = 2;
    int64_t order [TEST_MAX_EXAMPLES];
    cr_assert_eq (s_collect (dataset, &config, order, NULL, NULL), 400);
    int displaced = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        cr_assert (s_is_permutation (order + 200 * epoch, expected, 200));
        for (int p = 0; p < 200; p++) {
            cr_assert (order [200 * epoch + p] < p + 5, "position %d holds %lld",
                       p, (long long) order [200 * epoch + p]);
            displaced += order [200 * epoch + p] != p;
        }
    }
    cr_assert (displaced > 100);
    za_dataset_destroy (&dataset);
}

Test (pipeline, seed_decides_order)
{
    za_dataset_t *dataset = s_indexed_dataset (64);
    int64_t a [TEST_MAX_EXAMPLES], b [TEST_MAX_EXAMPLES], c [TEST_MAX_EXAMPLES];
    za_input_config_t config = s_config (10, 0);
    config.shuffle_buffer = 64;
    config.epochs = 2;
    config.seed = 9;
    cr_assert_eq (s_collect (dataset, &config, a, NULL, NULL), 128);
    cr_assert_eq (s_collect (dataset, &config, b, NULL, NULL), 128);
    config.seed = 10;
    cr_assert_eq (s_collect (dataset, &config, c, NULL, NULL), 128);
    cr_assert_eq (memcmp (a, b, 128 * sizeof (int64_t)), 0);
    cr_assert_neq (memcmp (a, c, 64 * sizeof (int64_t)), 0);
    cr_assert_neq (memcmp (a + 64, c + 64, 64 * sizeof (int64_t)), 0);
    za_dataset_destroy (&dataset);
}

//  skip N (a resumed run's place): the stream from example N on, exactly as
//  one that read the first N, across the epoch boundary and with replicas
//  splitting the global batches; a negative skip is refused.
Test (pipeline, skip_reads_on_where_a_stream_was)
{
    za_dataset_t *dataset = s_indexed_dataset (64);
    int64_t whole [TEST_MAX_EXAMPLES], rest [TEST_MAX_EXAMPLES];
    za_input_config_t config = s_config (8, 2);
    config.shuffle_buffer = 20;
    config.epochs = 3;
    config.seed = 11;
    cr_assert_eq (s_collect (dataset, &config, whole, NULL, NULL), 192);
    int64_t skips [] = {0, 8, 56, 64, 72, 150};
    for (size_t k = 0; k < sizeof skips / sizeof skips [0]; k++) {
        config.skip = skips [k];
        cr_assert_eq (s_collect (dataset, &config, rest, NULL, NULL), 192 - skips [k]);
        cr_expect_eq (memcmp (rest, whole + skips [k], (size_t) (192 - skips [k])
                                                      * sizeof (int64_t)), 0,
                      "skip %ld", (long) skips [k]);
    }
    //  Replica 1 of 2, skipping 3 global batches of 2 x 8: its slices of the
    //  4th global batch on.
    config.skip = 0;
    config.replicas = 2;
    config.replica = 1;
    int64_t sliced [TEST_MAX_EXAMPLES];
    int64_t n = s_collect (dataset, &config, sliced, NULL, NULL);
    config.skip = 3 * 2 * 8;
    cr_assert_eq (s_collect (dataset, &config, rest, NULL, NULL), n - 3 * 8);
    cr_expect_eq (memcmp (rest, sliced + 3 * 8, (size_t) (n - 3 * 8) * sizeof (int64_t)), 0);
    config.skip = -1;
    za_error_set_quiet (1);
    za_input_t *input = za_input_new (dataset, &config);
    za_error_set_quiet (0);
    cr_expect_null (input);
    cr_expect (strstr (za_last_error (), "skip -1 is negative"), "%s", za_last_error ());
    za_dataset_destroy (&dataset);
}

Test (pipeline, batch_sizes_and_remainder)
{
    za_dataset_t *dataset = s_indexed_dataset (10);
    int sizes [64], n_batches;
    za_input_config_t config = s_config (4, 0);
    cr_assert_eq (s_collect (dataset, &config, NULL, sizes, &n_batches), 10);
    cr_assert_eq (n_batches, 3);
    cr_assert (sizes [0] == 4 && sizes [1] == 4 && sizes [2] == 2);

    config.drop_remainder = 1;
    cr_assert_eq (s_collect (dataset, &config, NULL, sizes, &n_batches), 8);
    cr_assert_eq (n_batches, 2);
    cr_assert (sizes [0] == 4 && sizes [1] == 4);

    //  An exact multiple leaves nothing to drop.
    config.batch_size = 5;
    cr_assert_eq (s_collect (dataset, &config, NULL, sizes, &n_batches), 10);
    cr_assert_eq (n_batches, 2);

    //  A batch larger than the data: one partial batch, or none when dropped.
    config.batch_size = 32;
    config.drop_remainder = 0;
    cr_assert_eq (s_collect (dataset, &config, NULL, sizes, &n_batches), 10);
    cr_assert (n_batches == 1 && sizes [0] == 10);
    config.drop_remainder = 1;
    config.prefetch = 2;
    cr_assert_eq (s_collect (dataset, &config, NULL, sizes, &n_batches), 0);
    cr_assert_eq (n_batches, 0);
    za_dataset_destroy (&dataset);
}

Test (pipeline, epochs_repeat_and_batches_span_them)
{
    za_dataset_t *dataset = s_indexed_dataset (10);
    int64_t order [TEST_MAX_EXAMPLES];
    int sizes [64], n_batches;
    za_input_config_t config = s_config (4, 0);
    config.epochs = 3;
    cr_assert_eq (s_collect (dataset, &config, order, sizes, &n_batches), 30);
    for (int k = 0; k < 30; k++)
        cr_assert_eq (order [k], k % 10);
    //  repeat before batch: batches cross epoch boundaries (4 x 7 + 2).
    cr_assert_eq (n_batches, 8);
    for (int b = 0; b < 7; b++)
        cr_assert_eq (sizes [b], 4);
    cr_assert_eq (sizes [7], 2);
    config.drop_remainder = 1;
    cr_assert_eq (s_collect (dataset, &config, order, sizes, &n_batches), 28);
    cr_assert_eq (n_batches, 7);
    za_dataset_destroy (&dataset);
}

Test (pipeline, prefetch_matches_caller_thread)
{
    za_dataset_t *dataset = s_indexed_dataset (333);
    int64_t reference [TEST_MAX_EXAMPLES], order [TEST_MAX_EXAMPLES];
    int reference_sizes [512], sizes [512], reference_batches, n_batches;
    za_input_config_t config = s_config (7, 0);
    config.num_shards = 2;
    config.shard_index = 1;
    config.shuffle_buffer = 40;
    config.seed = 2024;
    config.epochs = 4;
    int64_t total = s_collect (dataset, &config, reference, reference_sizes,
                               &reference_batches);
    cr_assert_eq (total, 166 * 4);
    int prefetches [3] = { 1, 3, 16 };
    for (int p = 0; p < 3; p++) {
        config.prefetch = prefetches [p];
        cr_assert_eq (s_collect (dataset, &config, order, sizes, &n_batches), total);
        cr_assert_eq (n_batches, reference_batches);
        cr_assert_eq (memcmp (order, reference, (size_t) total * sizeof (int64_t)), 0,
                      "prefetch %d differs", prefetches [p]);
        cr_assert_eq (memcmp (sizes, reference_sizes, (size_t) n_batches * sizeof (int)), 0);
    }
    za_dataset_destroy (&dataset);
}

Test (pipeline, held_batch_is_not_overwritten)
{
    //  While the caller holds a batch, the producer fills the other slots; the
    //  held one must keep its contents until the next call.
    za_dataset_t *dataset = s_indexed_dataset (400);
    za_input_config_t config = s_config (4, 3);
    config.epochs = -1;
    za_input_t *input = za_input_new (dataset, &config);
    cr_assert_not_null (input);
    za_batch_t batch;
    for (int round = 0; round < 20; round++) {
        cr_assert_eq (za_input_next (input, &batch), 1);
        float copy [8];
        memcpy (copy, batch.features, sizeof copy);
        usleep (5000);                  //  let the producer fill the ring
        cr_assert_eq (memcmp (copy, batch.features, sizeof copy), 0);
        cr_assert_eq (batch.features [0], (float) ((round * 4) % 400));
    }
    za_input_destroy (&input);
    za_dataset_destroy (&dataset);
}

Test (pipeline, forever_stream_destroys_promptly)
{
    za_dataset_t *dataset = s_indexed_dataset (1000);
    za_input_config_t config = s_config (16, 4);
    config.epochs = -1;
    config.shuffle_buffer = 100;
    za_input_t *input = za_input_new (dataset, &config);
    cr_assert_not_null (input);
    za_batch_t batch;
    cr_assert_eq (za_input_next (input, &batch), 1);
    cr_assert_eq (za_input_next (input, &batch), 1);
    usleep (10000);                     //  the producer is now blocked on a full ring
    double start = za_clock_mono ();
    za_input_destroy (&input);
    cr_assert_null (input);
    cr_assert (za_clock_mono () - start < FOREVER_DESTROY_MAX_S);

    //  Destroyed before any batch was taken, and right after creation.
    input = za_input_new (dataset, &config);
    cr_assert_not_null (input);
    start = za_clock_mono ();
    za_input_destroy (&input);
    cr_assert (za_clock_mono () - start < FOREVER_DESTROY_MAX_S);
    za_input_destroy (&input);          //  safe twice
    za_input_destroy (NULL);
    za_dataset_destroy (&dataset);
}

Test (pipeline, forever_stream_keeps_going)
{
    //  Many epochs of a small dataset in both modes, each epoch a permutation.
    za_dataset_t *dataset = s_indexed_dataset (13);
    int64_t expected [13];
    for (int k = 0; k < 13; k++)
        expected [k] = k;
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        za_input_config_t config = s_config (13, prefetch);
        config.epochs = -1;
        config.shuffle_buffer = 13;
        config.seed = 3;
        za_input_t *input = za_input_new (dataset, &config);
        cr_assert_not_null (input);
        za_batch_t batch;
        for (int epoch = 0; epoch < 500; epoch++) {
            cr_assert_eq (za_input_next (input, &batch), 1);
            cr_assert_eq (batch.size, 13);
            int64_t order [13];
            for (int b = 0; b < 13; b++)
                order [b] = (int64_t) batch.features [2 * b];
            cr_assert (s_is_permutation (order, expected, 13));
        }
        za_input_destroy (&input);
    }
    za_dataset_destroy (&dataset);
}

Test (pipeline, empty_shard_ends_at_once)
{
    //  Shard 2 of 3 over 2 examples holds nothing, even repeated forever.
    za_dataset_t *dataset = s_indexed_dataset (2);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        za_input_config_t config = s_config (4, prefetch);
        config.num_shards = 3;
        config.shard_index = 2;
        config.epochs = -1;
        config.shuffle_buffer = 8;
        za_input_t *input = za_input_new (dataset, &config);
        cr_assert_not_null (input);
        cr_assert_eq (za_input_shard_count (input), 0);
        za_batch_t batch;
        cr_assert_eq (za_input_next (input, &batch), 0);
        za_input_destroy (&input);
    }
    za_dataset_destroy (&dataset);
}

//  Split batches: replica r of R keeps slice r of each global batch of one
//  shuffled stream, so the R inputs' batches, side by side, are the global
//  batches of one input at R x the batch size; a short last global batch
//  gives the replicas what it has (and ends a replica it gives nothing).
Test (pipeline, split_batches_are_slices_of_the_global_batch)
{
    za_dataset_t *dataset = s_indexed_dataset (1000);
    za_input_config_t whole = s_config (96, 1);
    whole.shuffle_buffer = 1000;
    whole.seed = 11;
    whole.epochs = 1;
    int64_t global [1000], slices [3][1000];
    int global_sizes [20], sizes [3][20], global_batches, batches [3];
    cr_assert_eq (s_collect (dataset, &whole, global, global_sizes, &global_batches), 1000);
    cr_assert_eq (global_batches, 11);          //  10 x 96, then 40
    int64_t totals [3];
    for (int r = 0; r < 3; r++) {
        za_input_config_t config = whole;
        config.batch_size = 32;
        config.replicas = 3;
        config.replica = r;
        config.prefetch = r;                    //  with and without the thread
        totals [r] = s_collect (dataset, &config, slices [r], sizes [r], &batches [r]);
    }
    //  The last global batch of 40 gives 32, 8 and nothing.
    cr_assert_eq (totals [0], 10 * 32 + 32);
    cr_assert_eq (totals [1], 10 * 32 + 8);
    cr_assert_eq (totals [2], 10 * 32);
    cr_assert_eq (batches [0], 11);
    cr_assert_eq (sizes [1][10], 8);
    cr_assert_eq (batches [2], 10);
    for (int b = 0; b < global_batches; b++)
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 32 && b * 96 + r * 32 + k < 1000; k++)
                cr_assert_eq (slices [r][b * 32 + k], global [b * 96 + r * 32 + k],
                              "batch %d replica %d row %d", b, r, k);
    //  drop_remainder drops the short global batch on every replica.
    za_input_config_t config = whole;
    config.batch_size = 32;
    config.replicas = 3;
    config.replica = 0;
    config.drop_remainder = 1;
    cr_assert_eq (s_collect (dataset, &config, NULL, NULL, NULL), 10 * 32);
    za_dataset_destroy (&dataset);
}

//  A global batch that the replicas do not divide (an elastic job's global
//  rule: 128 examples among 3 trainers): replica r keeps [128 r / 3,
//  128 (r + 1) / 3), 42, 43 and 43 examples, side by side the global
//  batches of one input; skipped to a place, each reads on from there. A
//  share larger than batch_size is refused.
Test (pipeline, a_global_batch_is_shared_as_evenly_as_may_be)
{
    za_dataset_t *dataset = s_indexed_dataset (1000);
    za_input_config_t whole = s_config (128, 1);
    whole.shuffle_buffer = 1000;
    whole.seed = 5;
    whole.epochs = 1;
    int64_t global [1000], slices [3][1000];
    int global_sizes [20], sizes [3][20], global_batches, batches [3];
    cr_assert_eq (s_collect (dataset, &whole, global, global_sizes, &global_batches), 1000);
    int from [] = {0, 42, 85, 128};
    for (int r = 0; r < 3; r++) {
        za_input_config_t config = whole;
        config.batch_size = 43;
        config.replicas = 3;
        config.replica = r;
        config.global_batch = 128;
        s_collect (dataset, &config, slices [r], sizes [r], &batches [r]);
        cr_assert_eq (sizes [r][0], from [r + 1] - from [r], "replica %d", r);
    }
    for (int b = 0; b < 7; b++)
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < from [r + 1] - from [r]; k++)
                cr_assert_eq (slices [r][b * (from [r + 1] - from [r]) + k],
                              global [b * 128 + from [r] + k], "batch %d replica %d row %d",
                              b, r, k);
    //  From the place of 3 global batches on, the same examples.
    za_input_config_t config = whole;
    config.batch_size = 43;
    config.replicas = 3;
    config.replica = 1;
    config.global_batch = 128;
    config.skip = 3 * 128;
    int64_t after [1000];
    s_collect (dataset, &config, after, NULL, NULL);
    for (int k = 0; k < 43; k++)
        cr_assert_eq (after [k], global [3 * 128 + 42 + k], "row %d", k);
    //  43 does not hold a share of 130 / 3.
    za_error_set_quiet (1);
    config.global_batch = 130;
    za_input_t *input = za_input_new (dataset, &config);
    cr_expect_null (input);
    za_input_destroy (&input);
    za_error_set_quiet (0);
    za_dataset_destroy (&dataset);
}

Test (pipeline, bad_configs)
{
    za_error_set_quiet (1);
    za_dataset_t *dataset = s_indexed_dataset (10);
    za_input_config_t good = za_input_config_default ();
    struct {
        const char *what;
        za_input_config_t config;
    } cases [] = {
        { "batch_size", good }, { "batch_size", good }, { "shard_index", good },
        { "shard_index", good }, { "shard_index", good }, { "epochs", good },
        { "epochs", good }, { "shuffle_buffer", good }, { "prefetch", good },
        { "replica", good }, { "replica", good }, { "global batch", good },
    };
    cases [0].config.batch_size = 0;
    cases [1].config.batch_size = -3;
    cases [2].config.shard_index = 3;
    cases [2].config.num_shards = 3;
    cases [3].config.shard_index = -1;
    cases [4].config.num_shards = 0;
    cases [5].config.epochs = 0;
    cases [6].config.epochs = -2;
    cases [7].config.shuffle_buffer = -1;
    cases [8].config.prefetch = -1;
    cases [9].config.replicas = 2;
    cases [9].config.replica = 2;
    cases [10].config.replica = -1;
    cases [11].config.replicas = 1 << 20;
    cases [11].config.batch_size = 1 << 12;
    for (size_t k = 0; k < sizeof cases / sizeof cases [0]; k++) {
        za_error_clear ();
        cr_assert_null (za_input_new (dataset, &cases [k].config), "case %zu", k);
        cr_assert (strstr (za_last_error (), cases [k].what), "case %zu: '%s'",
                   k, za_last_error ());
    }
    //  Augmentation of more channels than their preprocessing is kept for:
    //  refused (it read past the per-channel constants).
    float wide [2 * 6] = {0};
    int32_t wide_labels [2] = {0, 1};
    za_dataset_t *six = za_dataset_from_arrays (wide, wide_labels, 2, 1, 1, 6);
    cr_assert_not_null (six);
    za_input_config_t augmented = good;
    cr_assert_eq (za_augment_parse ("brightness(0.2)", &augmented.augment), 0);
    za_error_clear ();
    cr_assert_null (za_input_new (six, &augmented));
    cr_assert (strstr (za_last_error (), "at most 4 channels"), "%s", za_last_error ());
    za_dataset_destroy (&six);
    za_error_clear ();
    cr_assert_null (za_input_new (NULL, &good));
    cr_assert_neq (za_last_error () [0], 0);
    cr_assert_null (za_input_new (dataset, NULL));
    za_batch_t batch;
    cr_assert_eq (za_input_next (NULL, &batch), 0);
    cr_assert_eq (za_input_shard_count (NULL), 0);
    za_dataset_destroy (&dataset);
}

//  Keras's preprocess_input modes, from bytes and from floats: an RGB pixel
//  of 0, 128, 255 and a gray one.
Test (preprocess, each_mode_maps_pixels_as_keras_does)
{
    za_dataset_t *rgb = za_dataset_new (1, 1, 1, 3, 1);
    cr_assert_not_null (rgb);
    rgb->pixels [0] = 0, rgb->pixels [1] = 128, rgb->pixels [2] = 255;
    rgb->labels [0] = 0;
    rgb->n_classes = 1;
    const float r = 0.0f, g = 128.0f / 255.0f, b = 1.0f;
    struct {
        za_preprocess_t mode;
        float want [3];
    } cases [] = {
        {ZA_PREPROCESS_NONE, {r, g, b}},
        {ZA_PREPROCESS_TF, {r * 2 - 1, g * 2 - 1, b * 2 - 1}},
        {ZA_PREPROCESS_TORCH, {(r - 0.485f) / 0.229f, (g - 0.456f) / 0.224f,
                               (b - 0.406f) / 0.225f}},
        //  BGR: blue first, each less ImageNet's mean of that channel.
        {ZA_PREPROCESS_CAFFE, {255.0f - 103.939f, 128.0f - 116.779f, 0.0f - 123.68f}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        za_input_config_t config = za_input_config_default ();
        config.batch_size = 1;
        config.preprocess = cases [c].mode;
        za_input_t *input = za_input_new (rgb, &config);
        za_batch_t batch;
        cr_assert_eq (za_input_next (input, &batch), 1);
        for (int k = 0; k < 3; k++)
            cr_expect_float_eq (batch.features [k], cases [c].want [k], 1e-4,
                                "mode %d channel %d: %g, not %g", (int) cases [c].mode, k,
                                batch.features [k], cases [c].want [k]);
        za_input_destroy (&input);
    }
    //  Floats in 0 .. 1 (a caller's arrays) take the same mapping.
    float values [3] = {r, g, b};
    int32_t label = 0;
    za_dataset_t *floats = za_dataset_from_arrays (values, &label, 1, 1, 1, 3);
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 1;
    config.preprocess = ZA_PREPROCESS_TORCH;
    za_input_t *input = za_input_new (floats, &config);
    za_batch_t batch;
    cr_assert_eq (za_input_next (input, &batch), 1);
    cr_expect_float_eq (batch.features [2], (b - 0.406f) / 0.225f, 1e-4);
    za_input_destroy (&input);
    cr_expect_eq (za_preprocess_parse ("caffe"), ZA_PREPROCESS_CAFFE);
    cr_expect_eq (za_preprocess_parse ("imagenet"), -1);
    za_dataset_destroy (&floats);
    za_dataset_destroy (&rgb);
}
