/*  test_checkpoint.c: za_checkpoint round trips, the safetensors layout byte by
    byte, retention and the index, listing, and every kind of corrupt file.     */
#define _GNU_SOURCE
#include "za/za_checkpoint.h"
#include "za/za_replica.h"
#include "za/za_model.h"
#include "za/za_util.h"
#include "za_test.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SAMPLE_TENSOR_COUNT 6
#define W1_VALUE(i) (0.25f * (float) (i) - 1.0f)

static void
s_setup (void)
{
    za_test_dir_create ("za_ckpt_test");
    za_error_clear ();
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (checkpoint, .init = s_setup, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  Helpers

static void
s_write_all (const char *path, const void *bytes, size_t size)
{
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file, "cannot create %s", path);
    if (size > 0)
        cr_assert_eq (fwrite (bytes, 1, size, file), size);
    cr_assert_eq (fclose (file), 0);
}

static bool
s_exists (const char *dir, const char *name)
{
    char *path = za_test_join (dir, name);
    struct stat st;
    bool exists = stat (path, &st) == 0;
    free (path);
    return exists;
}

static uint64_t
s_get_le64 (const uint8_t *bytes)
{
    uint64_t value = 0;
    for (int i = 0; i < 8; i++)
        value |= (uint64_t) bytes [i] << (8 * i);
    return value;
}

static void
s_put_le64 (uint8_t *bytes, uint64_t value)
{
    for (int i = 0; i < 8; i++)
        bytes [i] = (uint8_t) (value >> (8 * i));
}

//  Writes a hand-made safetensors file: header text padded to 8, then data.
static void
s_write_raw (const char *path, const char *header, const void *data, size_t data_size)
{
    size_t header_len = strlen (header);
    size_t padded = (header_len + 7) / 8 * 8;
    size_t size = 8 + padded + data_size;
    uint8_t *bytes = malloc (size);
    cr_assert_not_null (bytes);
    s_put_le64 (bytes, padded);
    memcpy (bytes + 8, header, header_len);
    memset (bytes + 8 + header_len, ' ', padded - header_len);
    if (data_size > 0)
        memcpy (bytes + 8 + padded, data, data_size);
    s_write_all (path, bytes, size);
    free (bytes);
}

static void
s_crc_hex (const void *data, size_t size, char *hex)
{
    uLong crc = crc32 (0L, Z_NULL, 0);
    crc = crc32 (crc, data, (uInt) size);
    snprintf (hex, 9, "%08lx", crc);
}

//  The sample model: F32 tensors of several shapes (a matrix, a vector, a 4-D
//  kernel, a scalar, an empty one) and the I64 scalar global_step.
typedef struct {
    float w1 [6];
    float b1 [3];
    float conv [18];
    float lr;
    int64_t global_step;
    za_ckpt_tensor_t tensors [SAMPLE_TENSOR_COUNT];
} s_sample_t;

static void
s_sample_init (s_sample_t *sample, int64_t step)
{
    memset (sample, 0, sizeof *sample);
    for (int i = 0; i < 6; i++)
        sample->w1 [i] = W1_VALUE (i);
    for (int i = 0; i < 3; i++)
        sample->b1 [i] = 10.0f + (float) i + (float) step;
    for (int i = 0; i < 18; i++)
        sample->conv [i] = -0.125f * (float) i;
    sample->lr = 0.01f;
    sample->global_step = step;
    sample->tensors [0] = (za_ckpt_tensor_t) { "layer1/w", ZA_DTYPE_F32, 2, { 2, 3 }, sample->w1 };
    sample->tensors [1] = (za_ckpt_tensor_t) { "layer1/b", ZA_DTYPE_F32, 1, { 3 }, sample->b1 };
    sample->tensors [2] = (za_ckpt_tensor_t) { "conv/k", ZA_DTYPE_F32, 4, { 2, 1, 3, 3 }, sample->conv };
    sample->tensors [3] = (za_ckpt_tensor_t) { "lr", ZA_DTYPE_F32, 0, { 0 }, &sample->lr };
    sample->tensors [4] = (za_ckpt_tensor_t) { "empty", ZA_DTYPE_F32, 2, { 0, 4 }, NULL };
    sample->tensors [5] = (za_ckpt_tensor_t) { "global_step", ZA_DTYPE_I64, 0, { 0 },
                                               &sample->global_step };
}

static const za_ckpt_meta_t s_sample_meta [] = {
    { "model", "mlp-2" },
    { "note", "caf\xc3\xa9 \"quoted\"" },
};

static void
s_write_sample (const char *dir, int64_t step, int keep_max)
{
    s_sample_t sample;
    s_sample_init (&sample, step);
    int rc = za_checkpoint_write_atomic (dir, step, sample.tensors, SAMPLE_TENSOR_COUNT,
                                         s_sample_meta, 2, keep_max);
    cr_assert_eq (rc, 0, "write step %lld failed: %s", (long long) step, za_last_error ());
}

static int64_t
s_loaded_global_step (const za_checkpoint_t *ckpt)
{
    const za_ckpt_tensor_t *tensor = za_checkpoint_find (ckpt, "global_step");
    cr_assert_not_null (tensor);
    int64_t value;
    memcpy (&value, tensor->data, sizeof value);    //  may be only 4-byte aligned
    return value;
}

//  Asserts that loading path fails with one error naming it and the defect.
static void
s_expect_load_fails (const char *path, const char *defect)
{
    za_error_clear ();
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    if (ckpt)
        za_checkpoint_destroy (&ckpt);
    cr_assert_null (ckpt, "loading %s should fail with '%s'", path, defect);
    const char *error = za_last_error ();
    cr_assert (strstr (error, path), "error does not name the file: %s", error);
    cr_assert (strstr (error, defect), "error does not say '%s': %s", defect, error);
}

static int
s_count_tmp_files (const char *dir)
{
    DIR *handle = opendir (dir);
    cr_assert_not_null (handle);
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir (handle))) {
        size_t len = strlen (entry->d_name);
        if (len >= 4 && strcmp (entry->d_name + len - 4, ".tmp") == 0)
            count++;
    }
    closedir (handle);
    return count;
}

static int
s_count_entries (const char *dir)
{
    DIR *handle = opendir (dir);
    cr_assert_not_null (handle);
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir (handle)))
        if (strcmp (entry->d_name, ".") && strcmp (entry->d_name, ".."))
            count++;
    closedir (handle);
    return count;
}


//  --------------------------------------------------------------------------
//  Round trip and format

Test (checkpoint, roundtrip_values_shapes_names_metadata)
{
    s_write_sample (za_test_dir (), 42, 0);
    char *path = za_checkpoint_path (za_test_dir (), 42);
    char *expected_path = za_test_path ("model.ckpt-42.safetensors");
    cr_assert_str_eq (path, expected_path);

    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "load failed: %s", za_last_error ());
    cr_assert_str_eq (za_checkpoint_filename (ckpt), path);
    cr_assert_eq (za_checkpoint_step (ckpt), 42);
    cr_assert_eq (za_checkpoint_tensor_count (ckpt), SAMPLE_TENSOR_COUNT);

    s_sample_t sample;
    s_sample_init (&sample, 42);
    for (int i = 0; i < SAMPLE_TENSOR_COUNT; i++) {
        const za_ckpt_tensor_t *want = &sample.tensors [i];
        const za_ckpt_tensor_t *got = za_checkpoint_tensor (ckpt, i);
        cr_assert_not_null (got);
        cr_assert_str_eq (got->name, want->name);
        cr_assert_eq (got->dtype, want->dtype, "tensor %s", want->name);
        cr_assert_eq (got->ndim, want->ndim, "tensor %s", want->name);
        size_t count = 1;
        for (int dim = 0; dim < want->ndim; dim++) {
            cr_assert_eq (got->shape [dim], want->shape [dim], "tensor %s dim %d",
                          want->name, dim);
            count *= (size_t) want->shape [dim];
        }
        size_t bytes = count * za_dtype_size (want->dtype);
        if (bytes > 0)
            cr_assert_eq (memcmp (got->data, want->data, bytes), 0, "tensor %s", want->name);
        cr_assert_eq (za_checkpoint_find (ckpt, want->name), got);
    }
    const za_ckpt_tensor_t *w1 = za_checkpoint_find (ckpt, "layer1/w");
    cr_assert_float_eq (((const float *) w1->data) [5], W1_VALUE (5), 1e-7);
    cr_assert_eq (s_loaded_global_step (ckpt), 42);
    cr_assert_null (za_checkpoint_find (ckpt, "no/such"));
    cr_assert_null (za_checkpoint_tensor (ckpt, -1));
    cr_assert_null (za_checkpoint_tensor (ckpt, SAMPLE_TENSOR_COUNT));

    cr_assert_str_eq (za_checkpoint_meta (ckpt, "format"), ZA_CKPT_FORMAT);
    cr_assert_str_eq (za_checkpoint_meta (ckpt, "global_step"), "42");
    cr_assert_str_eq (za_checkpoint_meta (ckpt, "model"), "mlp-2");
    cr_assert_str_eq (za_checkpoint_meta (ckpt, "note"), "caf\xc3\xa9 \"quoted\"");
    const char *crc = za_checkpoint_meta (ckpt, "crc32");
    cr_assert_not_null (crc);
    cr_assert_eq (strlen (crc), 8);
    cr_assert_eq (strspn (crc, "0123456789abcdef"), 8, "crc32 '%s' is not lowercase hex", crc);
    cr_assert_null (za_checkpoint_meta (ckpt, "absent"));

    za_checkpoint_destroy (&ckpt);
    cr_assert_null (ckpt);
    za_checkpoint_destroy (&ckpt);      //  safe twice
    cr_assert_eq (s_count_tmp_files (za_test_dir ()), 0);
    free (expected_path);
    free (path);
}

Test (checkpoint, file_is_valid_safetensors_byte_by_byte)
{
    s_write_sample (za_test_dir (), 7, 0);
    char *path = za_checkpoint_path (za_test_dir (), 7);
    size_t size;
    uint8_t *bytes = za_test_read_file (path, &size);
    cr_assert_geq (size, 8);

    //  Length prefix, header padded with spaces to a multiple of 8.
    uint64_t header_len = s_get_le64 (bytes);
    cr_assert_gt (header_len, 0);
    cr_assert_eq (header_len % 8, 0, "header length %llu is not a multiple of 8",
                  (unsigned long long) header_len);
    cr_assert_leq (8 + header_len, size);
    const char *header = (const char *) bytes + 8;
    cr_assert_eq (header [0], '{');
    size_t text_len = header_len;
    while (text_len > 0 && header [text_len - 1] == ' ')
        text_len--;
    cr_assert_eq (header [text_len - 1], '}');
    cr_assert_lt (header_len - text_len, 8, "more padding than needed");

    json_error_t error;
    json_t *root = json_loadb (header, header_len, 0, &error);
    cr_assert_not_null (root, "header JSON: %s", error.text);
    cr_assert (json_is_object (root));

    //  Metadata: all strings, with format, global_step and a correct crc32.
    json_t *metadata = json_object_get (root, "__metadata__");
    cr_assert (json_is_object (metadata));
    const char *key;
    json_t *value;
    json_object_foreach (metadata, key, value)
        cr_assert (json_is_string (value), "metadata '%s' is not a string", key);
    cr_assert_str_eq (json_string_value (json_object_get (metadata, "format")), ZA_CKPT_FORMAT);
    cr_assert_str_eq (json_string_value (json_object_get (metadata, "global_step")), "7");
    cr_assert_str_eq (json_string_value (json_object_get (metadata, "model")), "mlp-2");
    const uint8_t *data = bytes + 8 + header_len;
    size_t data_size = size - 8 - header_len;
    char crc_hex [9];
    s_crc_hex (data, data_size, crc_hex);
    cr_assert_str_eq (json_string_value (json_object_get (metadata, "crc32")), crc_hex);

    //  Tensors: in the given order, contiguous from 0, ending at the file's end,
    //  holding exactly the caller's bytes.
    s_sample_t sample;
    s_sample_init (&sample, 7);
    cr_assert_eq (json_object_size (root), SAMPLE_TENSOR_COUNT + 1);
    uint64_t offset = 0;
    for (int i = 0; i < SAMPLE_TENSOR_COUNT; i++) {
        const za_ckpt_tensor_t *want = &sample.tensors [i];
        json_t *entry = json_object_get (root, want->name);
        cr_assert (json_is_object (entry), "no entry for %s", want->name);
        cr_assert_str_eq (json_string_value (json_object_get (entry, "dtype")),
                          want->dtype == ZA_DTYPE_F32 ? "F32" : "I64");
        json_t *shape = json_object_get (entry, "shape");
        cr_assert (json_is_array (shape));
        cr_assert_eq (json_array_size (shape), (size_t) want->ndim);
        uint64_t count = 1;
        for (int dim = 0; dim < want->ndim; dim++) {
            cr_assert_eq (json_integer_value (json_array_get (shape, dim)), want->shape [dim]);
            count *= (uint64_t) want->shape [dim];
        }
        json_t *offsets = json_object_get (entry, "data_offsets");
        cr_assert_eq (json_array_size (offsets), 2);
        uint64_t begin = (uint64_t) json_integer_value (json_array_get (offsets, 0));
        uint64_t end = (uint64_t) json_integer_value (json_array_get (offsets, 1));
        cr_assert_eq (begin, offset, "%s begins at %llu, expected %llu", want->name,
                      (unsigned long long) begin, (unsigned long long) offset);
        cr_assert_eq (end - begin, count * za_dtype_size (want->dtype));
        if (end > begin)
            cr_assert_eq (memcmp (data + begin, want->data, end - begin), 0);
        offset = end;
    }
    cr_assert_eq (offset, data_size, "data ends at %llu, section has %zu bytes",
                  (unsigned long long) offset, data_size);
    //  Insertion order is file order.
    void *iter = json_object_iter (root);
    cr_assert_str_eq (json_object_iter_key (iter), "__metadata__");
    iter = json_object_iter_next (root, iter);
    cr_assert_str_eq (json_object_iter_key (iter), "layer1/w");

    json_decref (root);
    free (bytes);
    free (path);
}

Test (checkpoint, write_creates_missing_directories)
{
    char *nested = za_test_path ("runs/a/b/");
    s_write_sample (nested, 3, 0);
    char *path = za_checkpoint_path (nested, 3);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_step (ckpt), 3);
    za_checkpoint_destroy (&ckpt);
    free (path);
    free (nested);
}

Test (checkpoint, rewriting_a_step_replaces_it)
{
    s_write_sample (za_test_dir (), 5, 0);
    float value = 123.5f;
    za_ckpt_tensor_t tensor = { "only", ZA_DTYPE_F32, 1, { 1 }, &value };
    cr_assert_eq (za_checkpoint_write_atomic (za_test_dir (), 5, &tensor, 1, NULL, 0, 0), 0);
    int64_t expected [] = { 5 };
    za_test_expect_checkpoints (za_test_dir (), expected, 1);
    char *path = za_checkpoint_path (za_test_dir (), 5);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_tensor_count (ckpt), 1);
    cr_assert_float_eq (*(const float *) za_checkpoint_find (ckpt, "only")->data, 123.5f, 0);
    cr_assert_null (za_checkpoint_meta (ckpt, "model"));
    za_checkpoint_destroy (&ckpt);
    free (path);
}

Test (checkpoint, write_rejects_bad_arguments_and_leaves_nothing)
{
    za_error_set_quiet (1);
    const char *dir = za_test_dir ();
    float value = 1.0f;
    za_ckpt_tensor_t dup [2] = {
        { "x", ZA_DTYPE_F32, 1, { 1 }, &value },
        { "x", ZA_DTYPE_F32, 1, { 1 }, &value },
    };
    cr_assert_eq (za_checkpoint_write_atomic (dir, 1, dup, 2, NULL, 0, 0), -1);
    cr_assert (strstr (za_last_error (), "duplicate"), "%s", za_last_error ());

    za_ckpt_meta_t reserved = { "crc32", "00000000" };
    cr_assert_eq (za_checkpoint_write_atomic (dir, 1, dup, 1, &reserved, 1, 0), -1);
    cr_assert (strstr (za_last_error (), "reserved"), "%s", za_last_error ());

    cr_assert_eq (za_checkpoint_write_atomic (dir, -1, dup, 1, NULL, 0, 0), -1);
    cr_assert (strstr (za_last_error (), "negative"), "%s", za_last_error ());

    za_ckpt_tensor_t bad_name = { "__metadata__", ZA_DTYPE_F32, 1, { 1 }, &value };
    cr_assert_eq (za_checkpoint_write_atomic (dir, 1, &bad_name, 1, NULL, 0, 0), -1);

    za_ckpt_tensor_t bad_dtype = { "y", (za_dtype_t) 9, 1, { 1 }, &value };
    cr_assert_eq (za_checkpoint_write_atomic (dir, 1, &bad_dtype, 1, NULL, 0, 0), -1);
    cr_assert (strstr (za_last_error (), "dtype"), "%s", za_last_error ());

    za_ckpt_tensor_t bad_shape = { "z", ZA_DTYPE_F32, 2, { 2, -1 }, &value };
    cr_assert_eq (za_checkpoint_write_atomic (dir, 1, &bad_shape, 1, NULL, 0, 0), -1);

    za_ckpt_tensor_t no_data = { "n", ZA_DTYPE_F32, 1, { 4 }, NULL };
    cr_assert_eq (za_checkpoint_write_atomic (dir, 1, &no_data, 1, NULL, 0, 0), -1);

    cr_assert_eq (s_count_entries (dir), 0, "a failed write left files behind");

    //  model_dir below a regular file cannot be created.
    char *file = za_test_path ("plain");
    s_write_all (file, "x", 1);
    char *below = za_test_join (file, "run");
    cr_assert_eq (za_checkpoint_write_atomic (below, 1, dup, 1, NULL, 0, 0), -1);
    cr_assert (strstr (za_last_error (), file), "%s", za_last_error ());
    cr_assert_eq (s_count_entries (dir), 1);
    free (below);
    free (file);
}


//  --------------------------------------------------------------------------
//  Retention, index and listing

Test (checkpoint, retention_keeps_newest_three_and_index_names_them)
{
    for (int64_t step = 1; step <= 5; step++)
        s_write_sample (za_test_dir (), step, 3);
    int64_t expected [] = { 3, 4, 5 };
    za_test_expect_checkpoints (za_test_dir (), expected, 3);
    cr_assert (!s_exists (za_test_dir (), "model.ckpt-1.safetensors"));
    cr_assert (!s_exists (za_test_dir (), "model.ckpt-2.safetensors"));
    cr_assert_eq (s_count_tmp_files (za_test_dir ()), 0);

    char *index_path = za_test_path ("checkpoint");
    char *index = za_test_read_file (index_path, NULL);
    cr_assert_str_eq (index,
        "model_checkpoint_path: \"model.ckpt-5.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-3.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-4.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-5.safetensors\"\n");
    free (index);
    free (index_path);
}

Test (checkpoint, keep_max_zero_keeps_all)
{
    for (int64_t step = 1; step <= 5; step++)
        s_write_sample (za_test_dir (), step * 100, 0);
    int64_t expected [] = { 100, 200, 300, 400, 500 };
    za_test_expect_checkpoints (za_test_dir (), expected, 5);
}

Test (checkpoint, retention_never_deletes_the_file_just_written)
{
    s_write_sample (za_test_dir (), 10, 2);
    s_write_sample (za_test_dir (), 20, 2);
    s_write_sample (za_test_dir (), 5, 2);       //  older than both: 10 goes, 5 stays
    int64_t expected [] = { 5, 20 };
    za_test_expect_checkpoints (za_test_dir (), expected, 2);

    char *index_path = za_test_path ("checkpoint");
    char *index = za_test_read_file (index_path, NULL);
    cr_assert_str_eq (index,
        "model_checkpoint_path: \"model.ckpt-20.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-5.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-20.safetensors\"\n");
    free (index);
    free (index_path);
}

Test (checkpoint, list_is_ascending_and_ignores_stray_files)
{
    const char *valid [] = { "model.ckpt-10.safetensors", "model.ckpt-2.safetensors",
                             "model.ckpt-0.safetensors", "model.ckpt-9000000000.safetensors" };
    const char *stray [] = { "model.ckpt-9.safetensors.tmp", "notes.txt", "checkpoint",
                             "model.ckpt-.safetensors", "model.ckpt-07.safetensors",
                             "model.ckpt-1x.safetensors", "model.ckpt--1.safetensors",
                             "model.ckpt-3.safetensors.bak", "xmodel.ckpt-4.safetensors",
                             "model.ckpt-99999999999999999999.safetensors" };
    for (size_t i = 0; i < sizeof valid / sizeof valid [0]; i++) {
        char *path = za_test_path (valid [i]);
        s_write_all (path, "", 0);
        free (path);
    }
    for (size_t i = 0; i < sizeof stray / sizeof stray [0]; i++) {
        char *path = za_test_path (stray [i]);
        s_write_all (path, "junk", 4);
        free (path);
    }
    char *subdir = za_test_path ("model.ckpt-77.safetensors");
    cr_assert_eq (mkdir (subdir, 0755), 0);
    free (subdir);

    int64_t expected [] = { 0, 2, 10, 9000000000LL };
    za_test_expect_checkpoints (za_test_dir (), expected, 4);
}

Test (checkpoint, list_of_missing_or_empty_dir_is_empty)
{
    int64_t *steps = (int64_t *) 1;
    cr_assert_eq (za_checkpoint_list (za_test_dir (), &steps), 0);
    cr_assert_null (steps);
    char *missing = za_test_path ("does/not/exist");
    steps = (int64_t *) 1;
    cr_assert_eq (za_checkpoint_list (missing, &steps), 0);
    cr_assert_null (steps);
    free (missing);

    za_error_set_quiet (1);
    char *file = za_test_path ("plain");
    s_write_all (file, "x", 1);
    cr_assert_eq (za_checkpoint_list (file, &steps), -1);
    cr_assert (strstr (za_last_error (), file), "%s", za_last_error ());
    free (file);
}


//  --------------------------------------------------------------------------
//  Corrupt files

Test (checkpoint, truncated_file_is_refused_at_every_cut)
{
    za_error_set_quiet (1);
    s_write_sample (za_test_dir (), 9, 0);
    char *path = za_checkpoint_path (za_test_dir (), 9);
    size_t size;
    uint8_t *bytes = za_test_read_file (path, &size);
    size_t header_end = 8 + (size_t) s_get_le64 (bytes);
    size_t cuts [] = { 1, 4, 7, 8, 12, header_end / 2, header_end - 1, header_end,
                       header_end + 1, header_end + 4, size - 8, size - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts [0]; i++) {
        cr_assert_lt (cuts [i], size);
        s_write_all (path, bytes, cuts [i]);
        s_expect_load_fails (path, "truncated");
    }
    //  The untouched bytes still load.
    s_write_all (path, bytes, size);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    za_checkpoint_destroy (&ckpt);
    free (bytes);
    free (path);
}

Test (checkpoint, zero_length_file_is_refused)
{
    za_error_set_quiet (1);
    char *path = za_checkpoint_path (za_test_dir (), 1);
    s_write_all (path, "", 0);
    s_expect_load_fails (path, "truncated");
    cr_assert (strstr (za_last_error (), "0 bytes"), "%s", za_last_error ());
    free (path);
}

Test (checkpoint, missing_file_is_refused)
{
    za_error_set_quiet (1);
    char *path = za_checkpoint_path (za_test_dir (), 1);
    s_expect_load_fails (path, "cannot open");
    free (path);
}

Test (checkpoint, flipped_data_byte_fails_crc)
{
    za_error_set_quiet (1);
    s_write_sample (za_test_dir (), 9, 0);
    char *path = za_checkpoint_path (za_test_dir (), 9);
    size_t size;
    uint8_t *bytes = za_test_read_file (path, &size);
    size_t header_end = 8 + (size_t) s_get_le64 (bytes);
    size_t positions [] = { header_end, (header_end + size) / 2, size - 1 };
    for (size_t i = 0; i < sizeof positions / sizeof positions [0]; i++) {
        bytes [positions [i]] ^= 0x04;
        s_write_all (path, bytes, size);
        s_expect_load_fails (path, "CRC32 mismatch");
        bytes [positions [i]] ^= 0x04;
    }
    free (bytes);
    free (path);
}

Test (checkpoint, bad_header_length_is_refused)
{
    za_error_set_quiet (1);
    s_write_sample (za_test_dir (), 9, 0);
    char *path = za_checkpoint_path (za_test_dir (), 9);
    size_t size;
    uint8_t *bytes = za_test_read_file (path, &size);

    s_put_le64 (bytes, UINT64_MAX);
    s_write_all (path, bytes, size);
    s_expect_load_fails (path, "exceeds");

    s_put_le64 (bytes, (uint64_t) ZA_CKPT_MAX_HEADER_BYTES + 8);
    s_write_all (path, bytes, size);
    s_expect_load_fails (path, "exceeds");

    s_put_le64 (bytes, size);           //  within the limit, past the file's end
    s_write_all (path, bytes, size);
    s_expect_load_fails (path, "truncated");

    s_put_le64 (bytes, 0);
    s_write_all (path, bytes, size);
    s_expect_load_fails (path, "header length is 0");
    free (bytes);
    free (path);
}

Test (checkpoint, garbage_json_header_is_refused)
{
    za_error_set_quiet (1);
    char *path = za_checkpoint_path (za_test_dir (), 1);
    s_write_raw (path, "{\"__metadata__\": {\"format\": zactor}", NULL, 0);
    s_expect_load_fails (path, "header is not valid JSON (line 1 column");

    uint8_t noise [64];
    for (size_t i = 0; i < sizeof noise; i++)
        noise [i] = (uint8_t) (i * 37 + 11);
    s_put_le64 (noise, 48);
    s_write_all (path, noise, sizeof noise);
    s_expect_load_fails (path, "not valid JSON");

    s_write_raw (path, "[1, 2, 3]", NULL, 0);
    s_expect_load_fails (path, "not a JSON object");
    free (path);
}

//  A raw file with a correct crc32 for data, so the check under test is the
//  one that fails.
static void
s_write_raw_tensors (const char *path, const char *format, const char *tensors_json,
                     const void *data, size_t data_size)
{
    char crc_hex [9];
    s_crc_hex (data, data_size, crc_hex);
    char *header = NULL;
    cr_assert (asprintf (&header, "{\"__metadata__\":{\"format\":\"%s\",\"global_step\":\"1\","
                         "\"crc32\":\"%s\"}%s%s}", format, crc_hex,
                         *tensors_json ? "," : "", tensors_json) > 0);
    s_write_raw (path, header, data, data_size);
    free (header);
}

Test (checkpoint, offsets_not_matching_the_tensors_are_refused)
{
    za_error_set_quiet (1);
    char *path = za_checkpoint_path (za_test_dir (), 1);
    uint8_t data [32] = { 0 };

    //  The control: a correct hand-made file loads.
    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}",
                         data, 24);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    za_checkpoint_destroy (&ckpt);

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}",
                         data, 20);
    s_expect_load_fails (path, "'w': data_offsets [0, 20] hold 20 bytes, its shape and dtype need 24");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}",
                         data, 20);
    s_expect_load_fails (path, "contiguous");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}",
                         data, 12);
    s_expect_load_fails (path, "contiguous");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",
                         data, 12);
    s_expect_load_fails (path, "4 stray bytes");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}",
                         data, 8);
    s_expect_load_fails (path, "data_offsets");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}",
                         data, 4);
    s_expect_load_fails (path, "unsupported dtype 'F16'");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}",
                         data, 8);
    s_expect_load_fails (path, "shape");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                         "\"data_offsets\":[0,4]}", data, 4);
    s_expect_load_fails (path, "dimensions");

    s_write_raw_tensors (path, ZA_CKPT_FORMAT,
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                         "\"data_offsets\":[0,4]}", data, 4);
    s_expect_load_fails (path, "too large");
    free (path);
}

Test (checkpoint, bad_metadata_is_refused)
{
    za_error_set_quiet (1);
    char *path = za_checkpoint_path (za_test_dir (), 1);
    uint8_t data [8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    const char *tensor = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";

    s_write_raw_tensors (path, "zactor-ckpt-0", tensor, data, 8);
    s_expect_load_fails (path, "format is 'zactor-ckpt-0', expected 'zactor-ckpt-1'");

    s_write_raw (path, "{\"__metadata__\":{\"format\":\"zactor-ckpt-1\",\"global_step\":\"1\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    s_expect_load_fails (path, "no crc32");

    s_write_raw (path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    s_expect_load_fails (path, "__metadata__");

    s_write_raw (path, "{\"__metadata__\":{\"format\":\"zactor-ckpt-1\",\"global_step\":\"1\","
                       "\"crc32\":\"00000000\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    s_expect_load_fails (path, "CRC32 mismatch (stored 00000000, computed ");

    s_write_raw (path, "{\"__metadata__\":{\"format\":\"zactor-ckpt-1\",\"global_step\":\"1\","
                       "\"crc32\":\"xyz\"}}", NULL, 0);
    s_expect_load_fails (path, "crc32 'xyz'");

    s_write_raw (path, "{\"__metadata__\":{\"format\":\"zactor-ckpt-1\",\"global_step\":1,"
                       "\"crc32\":\"00000000\"}}", NULL, 0);
    s_expect_load_fails (path, "not a string");

    s_write_raw (path, "{\"__metadata__\":{\"format\":\"zactor-ckpt-1\",\"global_step\":\"-3\","
                       "\"crc32\":\"00000000\"}}", NULL, 0);
    s_expect_load_fails (path, "global_step '-3'");

    //  No tensors at all is a valid (empty) checkpoint.
    s_write_raw (path, "{\"__metadata__\":{\"format\":\"zactor-ckpt-1\",\"global_step\":\"1\","
                       "\"crc32\":\"00000000\"}}", NULL, 0);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_tensor_count (ckpt), 0);
    za_checkpoint_destroy (&ckpt);
    free (path);
}


//  --------------------------------------------------------------------------
//  Newest intact checkpoint

Test (checkpoint, load_newest_skips_a_corrupt_newest)
{
    za_error_set_quiet (1);
    for (int64_t step = 1; step <= 3; step++)
        s_write_sample (za_test_dir (), step, 0);
    char *newest = za_checkpoint_path (za_test_dir (), 3);
    size_t size;
    uint8_t *bytes = za_test_read_file (newest, &size);
    bytes [size - 2] ^= 0xff;
    s_write_all (newest, bytes, size);

    int found_any = -1;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (za_test_dir (), &found_any);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (found_any, 1);
    cr_assert_eq (za_checkpoint_step (ckpt), 2);
    cr_assert_eq (s_loaded_global_step (ckpt), 2);
    cr_assert (strstr (za_last_error (), newest), "the skipped file's error: %s",
               za_last_error ());
    za_checkpoint_destroy (&ckpt);

    //  Truncate 3 and garble 2: step 1 is the newest intact one.
    s_write_all (newest, bytes, size / 2);
    char *second = za_checkpoint_path (za_test_dir (), 2);
    s_write_raw (second, "{{{", NULL, 0);
    ckpt = za_checkpoint_load_newest (za_test_dir (), &found_any);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_step (ckpt), 1);
    za_checkpoint_destroy (&ckpt);
    free (second);
    free (bytes);
    free (newest);
}

Test (checkpoint, load_newest_with_all_corrupt_reports_it)
{
    za_error_set_quiet (1);
    char *path = za_checkpoint_path (za_test_dir (), 4);
    s_write_all (path, "short", 5);
    int found_any = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (za_test_dir (), &found_any);
    cr_assert_null (ckpt);
    cr_assert_eq (found_any, 1);
    cr_assert (strstr (za_last_error (), "none of the 1 checkpoints is intact"), "%s",
               za_last_error ());
    free (path);
}

Test (checkpoint, load_newest_refuses_a_file_named_for_another_step)
{
    za_error_set_quiet (1);
    s_write_sample (za_test_dir (), 1, 0);
    char *one = za_checkpoint_path (za_test_dir (), 1);
    char *seven = za_checkpoint_path (za_test_dir (), 7);
    size_t size;
    uint8_t *bytes = za_test_read_file (one, &size);
    s_write_all (seven, bytes, size);
    int found_any = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (za_test_dir (), &found_any);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_step (ckpt), 1);
    cr_assert (strstr (za_last_error (), seven), "%s", za_last_error ());
    za_checkpoint_destroy (&ckpt);
    free (bytes);
    free (seven);
    free (one);
}

Test (checkpoint, load_newest_on_empty_or_missing_dir_finds_none)
{
    za_error_set_quiet (1);
    int found_any = -1;
    cr_assert_null (za_checkpoint_load_newest (za_test_dir (), &found_any));
    cr_assert_eq (found_any, 0);
    cr_assert_str_eq (za_last_error (), "");

    char *missing = za_test_path ("nope");
    found_any = -1;
    cr_assert_null (za_checkpoint_load_newest (missing, &found_any));
    cr_assert_eq (found_any, 0);
    cr_assert_str_eq (za_last_error (), "");
    cr_assert_null (za_checkpoint_load_newest (missing, NULL));
    free (missing);
}

Test (checkpoint, leftover_tmp_file_is_ignored)
{
    za_error_set_quiet (1);
    s_write_sample (za_test_dir (), 1, 0);
    //  What a crash between create and rename leaves.
    char *tmp = za_test_path ("model.ckpt-2.safetensors.tmp");
    s_write_all (tmp, "\x10\0\0\0\0\0\0\0{\"__meta", 16);
    char *index_tmp = za_test_path ("checkpoint.tmp");
    s_write_all (index_tmp, "model_checkpoint_path: \"mod", 27);

    int64_t expected [] = { 1 };
    za_test_expect_checkpoints (za_test_dir (), expected, 1);
    int found_any = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (za_test_dir (), &found_any);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_step (ckpt), 1);
    cr_assert_str_eq (za_last_error (), "");
    za_checkpoint_destroy (&ckpt);

    //  The next write of that step replaces the leftover.
    s_write_sample (za_test_dir (), 2, 0);
    cr_assert (!s_exists (za_test_dir (), "model.ckpt-2.safetensors.tmp"));
    cr_assert (!s_exists (za_test_dir (), "checkpoint.tmp"));
    ckpt = za_checkpoint_load_newest (za_test_dir (), &found_any);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_eq (za_checkpoint_step (ckpt), 2);
    za_checkpoint_destroy (&ckpt);
    free (index_tmp);
    free (tmp);
}


//  --------------------------------------------------------------------------
//  Python's safetensors reads what we write (skipped where it is not installed)

Test (checkpoint, python_safetensors_reads_the_file)
{
    if (system ("/usr/bin/python3 -c 'import safetensors.numpy' >/dev/null 2>&1") != 0) {
        s_teardown ();                  //  a skipped test does not run .fini
        cr_skip_test ("python3 safetensors (with numpy) is not installed");
    }
    s_write_sample (za_test_dir (), 42, 0);
    char *path = za_checkpoint_path (za_test_dir (), 42);
    char *command = NULL;
    cr_assert (asprintf (&command,
        "/usr/bin/python3 -c '"
        "import sys\n"
        "from safetensors.numpy import load_file\n"
        "from safetensors import safe_open\n"
        "t = load_file(sys.argv[1])\n"
        "assert t[\"layer1/w\"].shape == (2, 3), t[\"layer1/w\"].shape\n"
        "assert t[\"layer1/w\"].dtype.name == \"float32\"\n"
        "assert abs(float(t[\"layer1/w\"][1, 2]) - %.9g) < 1e-6\n"
        "assert t[\"conv/k\"].shape == (2, 1, 3, 3)\n"
        "assert int(t[\"global_step\"]) == 42 and t[\"global_step\"].dtype.name == \"int64\"\n"
        "f = safe_open(sys.argv[1], framework=\"numpy\")\n"
        "assert f.metadata()[\"format\"] == \"zactor-ckpt-1\"\n"
        "' '%s'", (double) W1_VALUE (5), path) > 0);
    int rc = system (command);
    cr_assert_eq (rc, 0, "python safetensors could not read %s (status %d)", path, rc);
    free (command);
    free (path);
}

//  A model whose values hold a NaN or an infinity (diverged: an update that
//  overflowed, its loss still finite) is not written, and said so; the
//  checkpoints before it stay (retention would have deleted them for it).
Test (checkpoint, values_not_finite_are_not_written)
{
    static za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("flatten dense(10)", &spec), 0, "%s", za_last_error ());
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_MOMENTUM);
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &spec, .input = {28, 28, 1},
        .threads = 1, .train = 1, .optim = &optim,
    };
    za_replica_t *replica = za_replica_new (&config, 5);
    cr_assert_not_null (replica, "%s", za_last_error ());
    const char *dir = za_test_dir ();
    cr_assert_eq (za_replica_save_through (replica, dir, 1, 1, 0), 0, "%s", za_last_error ());
    float *values = za_replica_values (replica);
    const float bad [] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        float kept = values [7];
        values [7] = bad [b];
        za_error_set_quiet (1);
        cr_expect_eq (za_replica_save_through (replica, dir, 2 + b, 1, b == 2), -1);
        za_error_set_quiet (0);
        cr_expect (strstr (za_last_error (), "hold NaN or infinity: the model diverged"), "%s",
                   za_last_error ());
        cr_expect (za_replica_diverged (replica));
        cr_expect_eq (za_checkpoint_newest_step (dir), 1);
        values [7] = kept;
    }
    //  A slot that overflowed (momentum's accumulator): refused too.
    float *momentum = za_replica_slot (replica, 0);
    momentum [3] = INFINITY;
    cr_expect_eq (za_replica_save_through (replica, dir, 4, 1, 0), -1);
    cr_expect (za_replica_diverged (replica));
    momentum [3] = 0;
    cr_expect_eq (za_replica_save_through (replica, dir, 5, 1, 0), 0, "%s", za_last_error ());
    cr_expect_not (za_replica_diverged (replica));
    cr_expect_eq (za_checkpoint_newest_step (dir), 5);
    za_replica_destroy (&replica);
}
