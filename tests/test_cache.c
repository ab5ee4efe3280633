/*  test_cache.c: decoded images kept by --cache: in memory the second epoch
    decodes nothing; on disk the next run decodes nothing, but the one file
    that changed; a cache file that is not one is made anew; zactor-run
    --cache disk leaves its files in MODEL_DIR/cache.                        */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "za/za_cache.h"
#include "za/za_images.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define COUNT 100
#define PIXELS (ZA_TEST_IMAGES_SIDE * ZA_TEST_IMAGES_SIDE)

static float s_features [COUNT * PIXELS], s_again [COUNT * PIXELS];
static int32_t s_labels [COUNT];

//  The lines of this process's trace: the images it decoded.
static int
s_decoded (const char *trace)
{
    char path [4096];
    snprintf (path, sizeof path, "%s.%d", trace, (int) getpid ());
    char *text = za_test_read_file (path, NULL);
    int lines = text? za_test_count (text, "\n"): 0;
    free (text);
    return lines;
}

//  The lines of every trace file in dir.
static int
s_lines_in (const char *dir)
{
    DIR *d = opendir (dir);
    cr_assert_not_null (d);
    int lines = 0;
    for (struct dirent *e; (e = readdir (d)); ) {
        if (e->d_name [0] == '.')
            continue;
        char *path = za_test_join (dir, e->d_name);
        char *text = za_test_read_file (path, NULL);
        lines += text? za_test_count (text, "\n"): 0;
        free (text), free (path);
    }
    closedir (d);
    return lines;
}

//  The folder's data set, cached as asked, read once into out.
static int64_t
s_read (const char *dir, za_cache_kind_t kind, const char *cache, float *out)
{
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_t *dataset = za_images_load (&config);
    cr_assert_not_null (dataset, "%s", za_last_error ());
    cr_assert_eq (za_dataset_cache (dataset, kind, cache), 0, "%s", za_last_error ());
    cr_assert_eq (za_test_images_read_all (dataset, 16, 2, out, s_labels), COUNT);
    int64_t hits = za_dataset_cache_hits (dataset);
    za_dataset_destroy (&dataset);
    return hits;
}

Test (cache, memory_keeps_the_first_epochs_images)
{
    za_test_dir_create ("za_cache");
    za_dataset_t *fashion = za_test_fashion ("train", COUNT);
    char *dir = za_test_images_folder (fashion, COUNT, "png", ZA_TEST_PNG, 1);
    char *trace = za_test_path ("trace");
    setenv ("ZA_IMAGES_TRACE", trace, 1);
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_t *dataset = za_images_load (&config);
    cr_assert_eq (za_dataset_cache (dataset, ZA_CACHE_MEMORY, NULL), 0);
    cr_assert_eq (za_test_images_read_all (dataset, 16, 2, s_features, s_labels), COUNT);
    cr_expect_eq (za_dataset_cache_hits (dataset), 0);
    cr_assert_eq (za_test_images_read_all (dataset, 16, 2, s_again, s_labels), COUNT);
    cr_expect_eq (za_dataset_cache_hits (dataset), COUNT, "the second epoch from the cache");
    cr_expect_eq (s_decoded (trace), COUNT, "each image decoded once");
    cr_expect_eq (memcmp (s_features, s_again, sizeof s_features), 0);
    cr_expect (strstr (za_images_path (dataset, 0), "class_0/"), "paths through the cache");
    unsetenv ("ZA_IMAGES_TRACE");
    za_dataset_destroy (&dataset);
    free (trace), free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (cache, disk_is_reused_by_the_next_run_but_for_what_changed)
{
    za_test_dir_create ("za_cache");
    za_dataset_t *fashion = za_test_fashion ("train", COUNT + 1);
    char *dir = za_test_images_folder (fashion, COUNT, "png", ZA_TEST_PNG, 1);
    char *trace = za_test_path ("trace");
    char *cache = za_test_path ("model/cache/train.zacache");
    setenv ("ZA_IMAGES_TRACE", trace, 1);
    cr_expect_eq (s_read (dir, ZA_CACHE_DISK, cache, s_features), 0);
    cr_expect_eq (s_decoded (trace), COUNT);
    //  The next run: nothing decoded, the same pixels.
    cr_expect_eq (s_read (dir, ZA_CACHE_DISK, cache, s_again), COUNT);
    cr_expect_eq (s_decoded (trace), COUNT, "the second run decoded nothing");
    cr_expect_eq (memcmp (s_features, s_again, sizeof s_features), 0);

    //  One file changes (another image, a later time): only it is decoded.
    za_images_config_t config = za_test_images_config (dir);
    za_dataset_t *listing = za_images_load (&config);
    char *changed = strdup (za_images_path (listing, 0));
    za_dataset_destroy (&listing);
    uint8_t pixels [PIXELS];
    za_test_images_pixels (fashion, COUNT, pixels);
    cr_assert_eq (za_image_write_png (changed, pixels, 28, 28, 1), 0);
    struct timespec later [2] = {{0, UTIME_NOW}, {time (NULL) + 60, 0}};
    cr_assert_eq (utimensat (AT_FDCWD, changed, later, 0), 0);
    cr_expect_eq (s_read (dir, ZA_CACHE_DISK, cache, s_again), COUNT - 1);
    cr_expect_eq (s_decoded (trace), COUNT + 1, "only the changed file decoded");
    for (int k = 0; k < PIXELS; k++)
        cr_assert_float_eq (s_again [k], pixels [k] / 255.0f, 1e-6, "the new image's pixels");
    cr_expect_eq (memcmp (s_features + PIXELS, s_again + PIXELS,
                          sizeof (float) * (COUNT - 1) * PIXELS), 0);

    //  A file that is not a cache: made anew, the pixels right.
    FILE *file = fopen (cache, "r+");
    cr_assert_not_null (file);
    fputs ("garbage", file);
    fclose (file);
    cr_expect_eq (s_read (dir, ZA_CACHE_DISK, cache, s_features), 0);
    cr_expect_eq (memcmp (s_features, s_again, sizeof s_features), 0);
    unsetenv ("ZA_IMAGES_TRACE");
    free (changed), free (cache), free (trace), free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (cache, zactor_run_keeps_its_cache_in_the_model_dir)
{
    za_test_dir_create ("za_cache");
    za_dataset_t *fashion = za_test_fashion ("train", COUNT);
    char *dir = za_test_images_folder (fashion, COUNT, "png", ZA_TEST_PNG, 1);
    char *model = za_test_path ("model");
    const char *args [] = {"--train-data", dir, "--validation-split", "0.2", "--cache", "disk",
                           "--image-size", "28", "--channels", "1", "--max-steps", "20",
                           "--batch-size", "16", "--model-dir", model, NULL};
    char *traces = za_test_path ("traces");
    mkdir (traces, 0755);
    char *trace = za_test_join (traces, "opened");
    setenv ("ZA_IMAGES_TRACE", trace, 1);
    int decoded [2];
    for (int run = 0; run < 2; run++) {
        za_test_result_t result = za_test_run (args, 300);
        cr_expect_eq (result.exit_code, 0, "%s", result.err);
        cr_expect (strstr (result.out, "on 20 examples"), "%s", result.out);
        za_test_result_free (&result);
        decoded [run] = s_lines_in (traces);
    }
    unsetenv ("ZA_IMAGES_TRACE");
    cr_expect_eq (decoded [0], COUNT, "the first run decoded each image once: %d",
                  decoded [0]);
    cr_expect_eq (decoded [1], decoded [0], "the second run decoded none");
    free (trace), free (traces);
    char *cache_dir = za_test_join (model, "cache");
    DIR *d = opendir (cache_dir);
    cr_assert_not_null (d, "no %s", cache_dir);
    int files = 0;
    for (struct dirent *e; (e = readdir (d)); )
        files += strstr (e->d_name, ".zacache") != NULL;
    closedir (d);
    cr_expect_eq (files, 2, "the training and the evaluation subsets' caches");
    const char *bad [] = {"--train-data", dir, "--cache", "tape", NULL};
    za_test_result_t result = za_test_run (bad, 60);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "not one of none,memory,disk"), "%s", result.err);
    za_test_result_free (&result);
    free (cache_dir), free (model), free (dir);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}
