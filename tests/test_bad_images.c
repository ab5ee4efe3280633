/*  test_bad_images.c: one damaged image costs one image. Each kind of
    damage (a truncated JPEG, a corrupt Huffman or quantisation table, a
    progressive JPEG cut in its scans, a JPEG cut before its first scan, a
    PNG whose CRC is wrong or that ends before its IEND, a text file named
    .jpg) sits first among valid
    JPEG and PNG files, read from the folder and from TFRecord shards of it
    on 1 and on 3 loading threads: exactly that image is skipped, and every
    other is the pixels a decoder that never saw it makes.                   */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "za/za_image.h"
#include "za/za_images.h"
#include "za/za_input.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define SIDE ZA_TEST_IMAGES_SIDE
#define GOOD_EXAMPLES 20                //  each written as a JPEG and as a PNG
#define BATCH 8
#define PROGRESSIVE_SIDE 56             //  large enough for several scans' bytes

typedef enum {
    DAMAGE_TRUNCATED,                   //  a baseline JPEG cut in half
    DAMAGE_HUFFMAN,                     //  a DHT whose counts sum past 256
    DAMAGE_QUANTISATION,                //  a DQT naming table 7 at 16 bits
    DAMAGE_PROGRESSIVE_CUT,             //  a progressive JPEG cut in its scans
    DAMAGE_NO_SCAN,                     //  a JPEG cut just before its SOS marker
    DAMAGE_PNG_CRC,                     //  a PNG whose IDAT CRC has a flipped bit
    DAMAGE_PNG_NO_END,                  //  a PNG cut before its IEND chunk
    DAMAGE_TEXT                         //  a text file named .jpg
} s_damage_t;

//  The offset of the first JPEG marker 0xFF `code` in bytes, or fails.
static size_t
s_marker (const uint8_t *bytes, size_t size, uint8_t code)
{
    for (size_t i = 2; i + 1 < size; i++)
        if (bytes [i] == 0xff && bytes [i + 1] == code)
            return i;
    cr_assert_fail ("no marker 0xff%02x in the JPEG", code);
    return 0;
}

//  A progressive JPEG of Fashion-MNIST example 0 upscaled to RGB (TurboJPEG's
//  own writer: za_image_write_jpeg writes baseline ones). Caller frees.
static uint8_t *
s_progressive_jpeg (const za_dataset_t *fashion, size_t *size)
{
    uint8_t gray [SIDE * SIDE];
    za_test_images_pixels (fashion, 0, gray);
    const int side = PROGRESSIVE_SIDE, scale = PROGRESSIVE_SIDE / SIDE;
    uint8_t *rgb = malloc ((size_t) side * side * 3);
    for (int y = 0; y < side; y++)
        for (int x = 0; x < side; x++)
            for (int k = 0; k < 3; k++)
                rgb [(y * side + x) * 3 + k] = gray [(y / scale) * SIDE + x / scale];
    tjhandle jpeg = tjInitCompress ();
    unsigned char *data = NULL;
    unsigned long length = 0;
    cr_assert_eq (tjCompress2 (jpeg, rgb, side, 0, side, TJPF_RGB, &data, &length, TJSAMP_420,
                               90, TJFLAG_PROGRESSIVE), 0, "%s", tjGetErrorStr2 (jpeg));
    uint8_t *copy = malloc (length);
    memcpy (copy, data, length);
    *size = length;
    tjFree (data);
    tjDestroy (jpeg);
    free (rgb);
    return copy;
}

//  The damaged file's bytes (caller frees), its name in class_0 (first
//  there: "00000-" sorts before "00000."), and words of the error it gets.
static uint8_t *
s_damaged (s_damage_t kind, const za_dataset_t *fashion, size_t *size, const char **name,
           const char **words)
{
    uint8_t gray [SIDE * SIDE];
    za_test_images_pixels (fashion, 1, gray);
    int png = kind == DAMAGE_PNG_CRC || kind == DAMAGE_PNG_NO_END;
    char *whole = za_test_path (png? "whole.png": "whole.jpg");
    if (png)
        cr_assert_eq (za_image_write_png (whole, gray, SIDE, SIDE, 1), 0);
    else
        cr_assert_eq (za_image_write_jpeg (whole, gray, SIDE, SIDE, 1, 95), 0);
    uint8_t *bytes = za_test_read_file (whole, size);
    unlink (whole);
    free (whole);
    *name = "00000-damaged.jpg";
    switch (kind) {
        case DAMAGE_TRUNCATED:
            *size /= 2;
            *words = "Premature end of JPEG file";
            break;
        case DAMAGE_HUFFMAN: {
            //  After the DHT's length (2) and class/id (1): 16 counts.
            size_t at = s_marker (bytes, *size, 0xc4) + 5;
            memset (bytes + at, 0xff, 16);
            *words = "Bogus Huffman table definition";
            break;
        }
        case DAMAGE_QUANTISATION:
            bytes [s_marker (bytes, *size, 0xdb) + 4] = 0x17;
            *words = "Bogus DQT index 7";
            break;
        case DAMAGE_PROGRESSIVE_CUT: {
            free (bytes);
            bytes = s_progressive_jpeg (fashion, size);
            size_t scan = s_marker (bytes, *size, 0xda);
            cr_assert (scan < *size * 6 / 10, "the cut falls after the first scan's start");
            *size = *size * 6 / 10;
            *words = "Premature end of JPEG file";
            break;
        }
        case DAMAGE_NO_SCAN:
            *size = s_marker (bytes, *size, 0xda);
            *words = "missing SOS marker";
            break;
        case DAMAGE_PNG_CRC:
            //  The last chunk is IEND (12 bytes); IDAT's CRC comes before it.
            bytes [*size - 12 - 4] ^= 0x01;
            *name = "00000-damaged.png";
            *words = "invalid chunk checksum";
            break;
        case DAMAGE_PNG_NO_END:
            *size -= 12;
            *name = "00000-damaged.png";
            *words = "the file ends early";
            break;
        case DAMAGE_TEXT:
            free (bytes);
            bytes = (uint8_t *) strdup ("these are my notes, not a picture\n");
            *size = strlen ((char *) bytes);
            *words = "not a JPEG or PNG";
            break;
    }
    return bytes;
}

//  Reads `dataset` in order on `threads` loading threads: every example but
//  `damaged` comes, in the listing's order, with the pixels a fresh decoder
//  makes of its file in `folder`, and one image is counted skipped.
static void
s_expect_one_skipped (const za_dataset_t *dataset, const za_dataset_t *folder, int64_t damaged,
                      int threads, const char *what)
{
    za_input_config_t config = za_input_config_default ();
    config.batch_size = BATCH;
    config.threads = threads;
    za_input_t *input = za_input_new (dataset, &config);
    cr_assert_not_null (input, "%s", za_last_error ());
    za_image_spec_t spec = za_test_images_config ("").image;
    uint8_t expected [SIDE * SIDE];
    int64_t seen = 0, due = 0;
    za_batch_t batch;
    while (za_input_next (input, &batch) > 0)
        for (int k = 0; k < batch.size; k++, seen++, due++) {
            if (due == damaged)
                due++;
            int64_t i = batch.indices [k];
            cr_assert_eq (i, due, "%s, %d threads: example %lld where %lld was due", what,
                          threads, (long long) i, (long long) due);
            const char *path = za_images_path (folder, i);
            za_image_decoder_t *fresh = za_image_decoder_new ();
            cr_assert_eq (za_image_load (fresh, path, &spec, expected), 0, "%s",
                          za_image_error (fresh));
            za_image_decoder_destroy (&fresh);
            const float *features = batch.features + (size_t) k * SIDE * SIDE;
            for (int p = 0; p < SIDE * SIDE; p++)
                cr_assert_eq (features [p], (float) expected [p] / ZA_DATASET_PIXEL_MAX,
                              "%s, %d threads: %s, pixel %d", what, threads, path, p);
            cr_assert_eq (batch.labels [k], folder->labels [i], "%s: %s", what, path);
        }
    cr_expect_eq (seen, folder->count - 1, "%s, %d threads: %lld of the %lld valid images", what,
                  threads, (long long) seen, (long long) folder->count - 1);
    cr_expect_eq (za_input_bad (input), 1, "%s, %d threads: %lld skipped", what, threads,
                  (long long) za_input_bad (input));
    za_input_destroy (&input);
}

//  The damaged file first in class_0 among GOOD_EXAMPLES JPEGs and PNGs;
//  the folder and its TFRecord shards, each read on 1 and 3 threads.
static void
s_one_damaged (s_damage_t kind)
{
    za_test_dir_create ("za_bad_images");
    za_dataset_t *fashion = za_test_fashion ("train", GOOD_EXAMPLES);
    char *dir = za_test_images_folder (fashion, GOOD_EXAMPLES, "mixed", ZA_TEST_JPEG, 1);
    free (za_test_images_folder (fashion, GOOD_EXAMPLES, "mixed", ZA_TEST_PNG, 1));
    size_t size;
    const char *name, *words;
    uint8_t *bytes = s_damaged (kind, fashion, &size, &name, &words);
    char path [600];
    snprintf (path, sizeof path, "%s/class_0/%s", dir, name);
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (bytes, 1, size, file), size);
    fclose (file);
    free (bytes);
    //  It is damaged the way this kind means, by libjpeg-turbo's or libspng's words.
    za_image_spec_t spec = za_test_images_config ("").image;
    uint8_t pixels [SIDE * SIDE];
    za_image_decoder_t *decoder = za_image_decoder_new ();
    cr_assert_eq (za_image_load (decoder, path, &spec, pixels), -1, "%s decodes", name);
    cr_assert (strstr (za_image_error (decoder), words), "%s: '%s' lacks '%s'", name,
               za_image_error (decoder), words);
    za_image_decoder_destroy (&decoder);

    za_images_config_t config = za_test_images_config (dir);
    za_dataset_t *folder = za_images_load (&config);
    cr_assert_not_null (folder, "%s", za_last_error ());
    cr_assert_eq (folder->count, 2 * GOOD_EXAMPLES + 1);
    int64_t damaged = -1;
    for (int64_t i = 0; i < folder->count; i++)
        if (strcmp (za_images_path (folder, i), path) == 0)
            damaged = i;
    cr_assert_eq (damaged, 0, "the damaged file is read first of its thread");
    char *pattern = za_test_images_tfrecords (dir, "records", 2, -1, 0);
    char source [700];
    snprintf (source, sizeof source, "tfrecord:%s", pattern);
    for (int from = 0; from < 2; from++)
        for (int threads = 1; threads <= 3; threads += 2) {
            config.source = from? source: dir;
            za_dataset_t *dataset = za_images_load (&config);
            cr_assert_not_null (dataset, "%s", za_last_error ());
            s_expect_one_skipped (dataset, folder, damaged, threads,
                                  from? "TFRecord shards": "the folder");
            za_dataset_destroy (&dataset);
        }
    free (pattern), free (dir);
    za_dataset_destroy (&folder);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (bad_images, a_truncated_jpeg_costs_one_image)
{
    s_one_damaged (DAMAGE_TRUNCATED);
}

Test (bad_images, a_corrupt_huffman_table_costs_one_image)
{
    s_one_damaged (DAMAGE_HUFFMAN);
}

Test (bad_images, a_corrupt_quantisation_table_costs_one_image)
{
    s_one_damaged (DAMAGE_QUANTISATION);
}

Test (bad_images, a_progressive_jpeg_cut_in_its_scans_costs_one_image)
{
    s_one_damaged (DAMAGE_PROGRESSIVE_CUT);
}

Test (bad_images, a_jpeg_cut_before_its_scan_costs_one_image)
{
    s_one_damaged (DAMAGE_NO_SCAN);
}

Test (bad_images, a_png_with_a_bad_crc_costs_one_image)
{
    s_one_damaged (DAMAGE_PNG_CRC);
}

Test (bad_images, a_png_without_its_end_costs_one_image)
{
    s_one_damaged (DAMAGE_PNG_NO_END);
}

Test (bad_images, a_text_file_named_jpg_costs_one_image)
{
    s_one_damaged (DAMAGE_TEXT);
}

// ---------------------------------------------------------------------------
//  Never a silent fraction: the run says how many were skipped of how many,
//  and ends with an error when more than --max-bad-images are.

#define RUN_TIMEOUT_S 600

//  Writes `count` files that are not images (text named .jpg) into dir's
//  class folders.
static void
s_write_damaged (const char *dir, int count)
{
    for (int i = 0; i < count; i++) {
        char path [600];
        snprintf (path, sizeof path, "%s/class_%d/damaged-%03d.jpg", dir, i % 10, i);
        FILE *file = fopen (path, "w");
        cr_assert_not_null (file);
        fputs ("not a picture at all\n", file);
        fclose (file);
    }
}

//  1 when a file in dir holds text.
static int
s_some_file_holds (const char *dir, const char *text)
{
    DIR *d = opendir (dir);
    struct dirent *entry;
    int found = 0;
    while (d && !found && (entry = readdir (d)))
        if (entry->d_name [0] != '.') {
            char *path = za_test_join (dir, entry->d_name);
            char *content = za_test_read_file (path, NULL);
            found = content && strstr (content, text);
            free (content), free (path);
        }
    if (d)
        closedir (d);
    return found;
}

//  zactor-run with the flags of an image run (28x28 gray, a few steps) and
//  `extra` (NULL-terminated).
static za_test_result_t
s_run_images (const char *train, const char *eval, const char *model, const char *const *extra)
{
    const char *args [40] = {"--train-data", train, "--eval-data", eval, "--image-size", "28",
                             "--channels", "1", "--batch-size", "16", "--model-dir", model};
    int n = 12;
    for (int i = 0; extra && extra [i]; i++)
        args [n++] = extra [i];
    args [n] = NULL;
    return za_test_run (args, RUN_TIMEOUT_S);
}

//  The line, in one process and in a cluster: "1 of 601 images skipped in
//  training, 0 of 60 in evaluation", and the evaluation's counts in its
//  metrics.jsonl line. The cluster's count is the trainers' last reports',
//  which the broker waits for at the end. It runs the all-reduce, whose
//  trainers all take every step: 60 steps of 16 are some 5 passes over each
//  trainer's shard of 200, whatever the load (under ps-async a slow trainer
//  might take too few steps to reach the damaged file).
Test (bad_images, one_damaged_image_is_one_skipped_and_said_at_the_end, .timeout = 1200)
{
    za_test_dir_create ("za_bad_images");
    za_dataset_t *fashion = za_test_fashion ("train", 660);
    char *train = za_test_images_folder (fashion, 600, "train", ZA_TEST_PNG, 1);
    s_write_damaged (train, 1);
    za_dataset_t *rest = za_dataset_from_arrays (fashion->features + (size_t) 600 * SIDE * SIDE,
                                                 fashion->labels + 600, 60, SIDE, SIDE, 1);
    char *eval = za_test_images_folder (rest, 60, "eval", ZA_TEST_PNG, 1);
    for (int local = 0; local < 2; local++) {
        char *model = za_test_path (local? "local": "single");
        const char *extra [] = {"--max-steps", "60", "--local", "--strategy", "allreduce", NULL};
        if (!local)
            extra [2] = NULL;
        za_test_result_t result = s_run_images (train, eval, model, extra);
        cr_expect_eq (result.exit_code, 0, "%s", result.err);
        cr_expect (strstr (result.out, "1 of 601 images skipped in training, 0 of 60 in "
                                       "evaluation: they could not be decoded"),
                   "%s: %s", local? "--local": "one process", result.out);
        //  Named where the reader's output goes: here, or a role's log.
        const char *words = "damaged-000.jpg: not a JPEG or PNG";
        char *logs = za_test_join (model, "logs");
        cr_expect (local? s_some_file_holds (logs, words): strstr (result.err, words) != NULL,
                   "%s: the damaged file is not named", local? logs: "stderr");
        free (logs);
        za_test_result_free (&result);
        char *metrics = za_test_join (model, "eval/metrics.jsonl");
        char *text = za_test_read_file (metrics, NULL);
        cr_expect (strstr (text, "\"images\": 60, \"skipped_images\": 0"), "%s", text);
        free (text), free (metrics), free (model);
    }
    free (train), free (eval);
    za_dataset_destroy (&rest);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  Most of a folder damaged: exit 1, with the count and the setting, in one
//  process and in a cluster (whose broker gives up at once instead of
//  restarting the task: the data would be the same); the same for an
//  evaluation set. The setting allows more when asked.
Test (bad_images, a_folder_mostly_damaged_ends_the_run_with_the_count, .timeout = 1200)
{
    za_test_dir_create ("za_bad_images");
    za_dataset_t *fashion = za_test_fashion ("train", 40);
    char *good = za_test_images_folder (fashion, 40, "good", ZA_TEST_PNG, 1);
    char *most = za_test_images_folder (fashion, 40, "most", ZA_TEST_PNG, 1);
    s_write_damaged (most, 60);
    //  Training on it, then evaluating on it.
    for (int which = 0; which < 2; which++)
        for (int local = 0; local < 2; local++) {
            char name [32];
            snprintf (name, sizeof name, "model-%d-%d", which, local);
            char *model = za_test_path (name);
            const char *extra [] = {"--max-steps", "60", local? "--local": NULL, NULL};
            za_test_result_t result = s_run_images (which? good: most, which? most: good, model,
                                                    extra);
            const char *what = which? "an evaluation set": "a training set";
            cr_expect_eq (result.exit_code, 1, "%s%s: %s", what, local? ", --local": "",
                          result.err);
            cr_expect (strstr (result.err, "images could not be decoded so far, of ")
                       && strstr (result.err, "more than --max-bad-images 1% allows"),
                       "%s%s: %s", what, local? ", --local": "", result.err);
            if (local) {
                cr_expect (strstr (result.err, "not restarted: it would meet the same data"),
                           "%s: %s", what, result.err);
                char *events = za_test_join (model, "events.jsonl");
                char *text = za_test_read_file (events, NULL);
                //  Given up at once: the gave_up event's own line says 0 restarts.
                char *gave_up = strstr (text, "\"event\":\"gave_up\"");
                char *end = gave_up? strchr (gave_up, '\n'): NULL;
                if (end)
                    *end = 0;
                cr_expect (gave_up && strstr (gave_up, "\"restarts\":0"), "%s", text);
                free (text), free (events);
            }
            za_test_result_free (&result);
            free (model);
        }
    //  '100%': every damaged one skipped, and said.
    char *model = za_test_path ("any");
    const char *any [] = {"--max-bad-images", "100%", "--max-steps", "60", NULL};
    za_test_result_t result = s_run_images (most, good, model, any);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.out, "60 of 100 images skipped in training"), "%s", result.out);
    za_test_result_free (&result);
    free (model);
    //  '100%' where not one decodes: an error, not a training of no step
    //  (it said "trained to step 0", exit 0).
    char *none = za_test_path ("none");
    cr_assert_eq (mkdir (none, 0755), 0);
    for (int c = 0; c < 10; c++) {
        char *dir = za_test_join (none, "class_0");
        dir [strlen (dir) - 1] = (char) ('0' + c);
        cr_assert_eq (mkdir (dir, 0755), 0);
        free (dir);
    }
    s_write_damaged (none, 30);
    model = za_test_path ("none-model");
    const char *no_eval [] = {"--max-bad-images", "100%", "--max-steps", "60", "--no-eval",
                              NULL};
    result = s_run_images (none, good, model, no_eval);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "no example of this shard could be made")
               && !strstr (result.err, "trained to step"), "%s", result.err);
    za_test_result_free (&result);
    free (model), free (none), free (good), free (most);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  A count or a share; anything else is exit 2 with what to give.
Test (bad_images, max_bad_images_takes_a_count_or_a_share)
{
    za_bad_limit_t limit;
    cr_assert_eq (za_bad_limit_parse ("1%", &limit), 0);
    cr_expect_eq (za_bad_limit_most (&limit, 12001), 120);
    cr_expect_eq (za_bad_limit_most (&limit, 50), 0);
    cr_assert_eq (za_bad_limit_parse ("25", &limit), 0);
    cr_expect_eq (za_bad_limit_most (&limit, 12001), 25);
    cr_assert_eq (za_bad_limit_parse ("0", &limit), 0);
    cr_expect_eq (za_bad_limit_most (&limit, 12001), 0);
    cr_assert_eq (za_bad_limit_parse ("100%", &limit), 0);
    cr_expect_eq (za_bad_limit_most (&limit, 12001), INT64_MAX);
    za_error_set_quiet (1);
    cr_assert_eq (za_bad_limit_parse ("2.5%", &limit), 0);
    cr_expect_eq (za_bad_limit_most (&limit, 1000), 25);
    const char *bad [] = {"1.5", "-1", "150%", "5%%", "%", "", "lots", "1e3x", " 5", "0x10",
                          "1e2", "1e2%", "1e300", "99999999999999999", ".5%", "5 %", NULL};
    for (int i = 0; bad [i]; i++)
        cr_expect_eq (za_bad_limit_parse (bad [i], &limit), -1, "'%s' is taken", bad [i]);
    za_error_set_quiet (0);
    za_test_dir_create ("za_bad_images");
    char *model = za_test_path ("model");
    const char *args [] = {"--max-bad-images", "1.5", "--max-steps", "5", "--model-dir", model,
                           NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "--max-bad-images '1.5': give a count of images"), "%s",
               result.err);
    za_test_result_free (&result);
    free (model);
    za_test_dir_remove ();
}

//  A 25-byte progressive JPEG that declares 14888 x 10014 (fuzz_image's
//  find): libjpeg would keep 284 MiB of coefficients to decode it. It is
//  refused before that, saying why, and the next JPEG decodes.
Test (bad_images, a_tiny_progressive_jpeg_of_a_huge_image_is_refused_before_decoding)
{
    static const uint8_t huge [] = {
        0xff, 0xd8, 0xff, 0xc2, 0x00, 0x0b, 0x08, 0x27, 0x1e, 0x3a, 0x28, 0x01, 0x01,
        0x11, 0x40, 0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0xc8, 0xc9, 0xca, 0x97,
    };
    za_test_dir_create ("za_bad_images");
    za_dataset_t *fashion = za_test_fashion ("train", 1);
    size_t size;
    uint8_t *progressive = s_progressive_jpeg (fashion, &size);
    za_image_spec_t spec = za_test_images_config ("").image;
    uint8_t pixels [SIDE * SIDE], fresh_pixels [SIDE * SIDE];
    za_image_decoder_t *decoder = za_image_decoder_new (), *fresh = za_image_decoder_new ();
    cr_assert_eq (za_image_decode (decoder, huge, sizeof huge, &spec, pixels), -1);
    cr_expect (strstr (za_image_error (decoder), "progressive (or multi-scan) JPEG of "
                                                 "14888x10014: libjpeg would keep 284 MiB"),
               "%s", za_image_error (decoder));
    cr_assert_eq (za_image_decode (decoder, progressive, size, &spec, pixels), 0, "%s",
                  za_image_error (decoder));
    cr_assert_eq (za_image_decode (fresh, progressive, size, &spec, fresh_pixels), 0);
    cr_expect_eq (memcmp (pixels, fresh_pixels, sizeof pixels), 0);
    za_image_decoder_destroy (&decoder);
    za_image_decoder_destroy (&fresh);
    free (progressive);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}
