/*  test_images_roles.c: a cluster trains from folders of real Fashion-MNIST
    PNGs, under ps-async (--local) and allreduce, every training process
    reading only its own shard of the files (ZA_IMAGES_TRACE says which each
    opened) and the evaluator its own folder.                               */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "za/za_images.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define TRAIN_COUNT 120
#define EVAL_COUNT 30
#define RUN_TIMEOUT_S 600

//  What one process read: the indices (in the folder's sorted order) of the
//  training files, and how many evaluation files.
typedef struct {
    int train [TRAIN_COUNT];
    int train_count;
    int eval_count;
} s_reader_t;

//  Reads every trace file: the processes that read something.
static int
s_readers (const char *dir, const za_dataset_t *listing, s_reader_t *readers, int max)
{
    DIR *d = opendir (dir);
    cr_assert_not_null (d);
    struct dirent *entry;
    int n = 0;
    while ((entry = readdir (d)) && n < max) {
        if (strncmp (entry->d_name, "opened.", 7))
            continue;
        char *path = za_test_join (dir, entry->d_name);
        char *text = za_test_read_file (path, NULL);
        s_reader_t *reader = &readers [n++];
        memset (reader, 0, sizeof *reader);
        for (char *save = NULL, *line = strtok_r (text, "\n", &save); line;
             line = strtok_r (NULL, "\n", &save)) {
            if (strstr (line, "/eval/")) {
                reader->eval_count++;
                continue;
            }
            int64_t index = -1;
            for (int64_t i = 0; i < listing->count && index < 0; i++)
                if (!strcmp (za_images_path (listing, i), line))
                    index = i;
            cr_assert_geq (index, 0, "%s read %s, no training file", entry->d_name, line);
            int seen = 0;
            for (int k = 0; k < reader->train_count; k++)
                seen |= reader->train [k] == index;
            if (!seen)
                reader->train [reader->train_count++] = (int) index;
        }
        free (text), free (path);
    }
    closedir (d);
    return n;
}

static void
s_train_reads_own_shard (const char *strategy)
{
    za_test_dir_create ("za_images_roles");
    za_dataset_t *fashion = za_test_fashion ("train", TRAIN_COUNT + EVAL_COUNT);
    char *train = za_test_images_folder (fashion, TRAIN_COUNT, "train", ZA_TEST_PNG, 1);
    //  The evaluation folder: the next EVAL_COUNT images.
    za_dataset_t *rest = za_dataset_from_arrays (
        fashion->features + (size_t) TRAIN_COUNT * 28 * 28, fashion->labels + TRAIN_COUNT,
        EVAL_COUNT, 28, 28, 1);
    char *eval = za_test_images_folder (rest, EVAL_COUNT, "eval", ZA_TEST_PNG, 1);
    char *trace_dir = za_test_path ("traces");
    mkdir (trace_dir, 0755);
    char *trace = za_test_join (trace_dir, "opened");
    setenv ("ZA_IMAGES_TRACE", trace, 1);
    char *model = za_test_path ("model");
    const char *args [] = {"--local", "--strategy", strategy, "--workers", "1",
                           "--train-data", train, "--eval-data", eval, "--image-size", "28",
                           "--channels", "1", "--batch-size", "16", "--max-steps", "60",
                           "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    unsetenv ("ZA_IMAGES_TRACE");
    cr_assert_eq (result.exit_code, 0, "%s\n%s", result.out, result.err);
    cr_expect (strstr (result.out, "accuracy"), "the evaluator reported: %s", result.out);
    za_test_result_free (&result);

    za_images_config_t config = za_test_images_config (train);
    za_dataset_t *listing = za_images_load (&config);
    cr_assert_not_null (listing);
    s_reader_t readers [8];
    int n = s_readers (trace_dir, listing, readers, 8);
    int trainers = 0, evaluators = 0, parity [2] = {0, 0};
    for (int r = 0; r < n; r++) {
        if (readers [r].eval_count) {
            evaluators++;
            cr_expect_eq (readers [r].train_count, 0, "the evaluator read training files");
        }
        if (!readers [r].train_count)
            continue;
        trainers++;
        //  Two shards: file i belongs to shard i mod 2.
        int shard = readers [r].train [0] % 2;
        for (int k = 0; k < readers [r].train_count; k++)
            cr_assert_eq (readers [r].train [k] % 2, shard,
                          "%s: a process read file %d of shard %d and file %d of shard %d",
                          strategy, readers [r].train [0], shard, readers [r].train [k],
                          readers [r].train [k] % 2);
        //  60 steps of 16 over 60 files: each worker read all of its own.
        cr_expect_eq (readers [r].train_count, TRAIN_COUNT / 2, "%s: read %d of its files",
                      strategy, readers [r].train_count);
        parity [shard]++;
        printf ("%s: a process read %d training files, all of shard %d\n", strategy,
                readers [r].train_count, shard);
    }
    cr_expect_eq (trainers, 2, "%s: the chief and the worker train", strategy);
    cr_expect (parity [0] == 1 && parity [1] == 1, "%s: one process per shard", strategy);
    cr_expect_geq (evaluators, 1, "the evaluator read its folder");
    za_dataset_destroy (&listing);
    free (model), free (trace), free (trace_dir), free (eval), free (train);
    za_dataset_destroy (&rest);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

Test (images_roles, ps_async_workers_read_only_their_shard, .timeout = 900)
{
    s_train_reads_own_shard ("ps-async");
}

Test (images_roles, allreduce_workers_read_only_their_shard, .timeout = 900)
{
    s_train_reads_own_shard ("allreduce");
}
