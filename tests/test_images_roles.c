/*  test_images_roles.c: a cluster trains from folders of real Fashion-MNIST
    PNGs, under ps-async (--local) and allreduce, every training process
    reading only its own shard of the files (ZA_IMAGES_TRACE says which each
    opened) and the evaluator its own folder.                               */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_images.h"
#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define TRAIN_COUNT 120
#define EVAL_COUNT 30
#define RUN_TIMEOUT_S 600

//  What one process read: the indices (in the folder's sorted order) of the
//  training files, and how many evaluation files.
#define ORDER_MAX 64

typedef struct {
    int train [TRAIN_COUNT];
    int train_count;
    int eval_count;
    int order [ORDER_MAX];              //  the first training files, as read
    int order_count;
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
        char *end = text? strrchr (text, '\n'): NULL;
        if (end)
            end [1] = 0;                //  a line being written is not read yet
        else
        if (text)
            text [0] = 0;
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
            if (reader->order_count < ORDER_MAX)
                reader->order [reader->order_count++] = (int) index;
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

//  A training folder and an evaluation folder of Fashion-MNIST PNGs, and
//  where the processes' traces go.
typedef struct {
    za_dataset_t *fashion, *rest;
    char *train, *eval, *trace_dir, *trace;
} s_folders_t;

static s_folders_t
s_folders (void)
{
    s_folders_t f;
    za_test_dir_create ("za_images_roles");
    f.fashion = za_test_fashion ("train", TRAIN_COUNT + EVAL_COUNT);
    f.train = za_test_images_folder (f.fashion, TRAIN_COUNT, "train", ZA_TEST_PNG, 1);
    //  The evaluation folder: the next EVAL_COUNT images.
    f.rest = za_dataset_from_arrays (
        f.fashion->features + (size_t) TRAIN_COUNT * 28 * 28, f.fashion->labels + TRAIN_COUNT,
        EVAL_COUNT, 28, 28, 1);
    f.eval = za_test_images_folder (f.rest, EVAL_COUNT, "eval", ZA_TEST_PNG, 1);
    f.trace_dir = za_test_path ("traces");
    mkdir (f.trace_dir, 0755);
    f.trace = za_test_join (f.trace_dir, "opened");
    return f;
}

static void
s_folders_free (s_folders_t *f)
{
    free (f->trace), free (f->trace_dir), free (f->eval), free (f->train);
    za_dataset_destroy (&f->rest);
    za_dataset_destroy (&f->fashion);
    za_test_dir_remove ();
}

//  The processes that read training files (each of one shard only, else
//  the test fails) and how many of them read all their shard's files.
static int
s_trainers (const char *trace_dir, const za_dataset_t *listing, const char *strategy,
            int *complete, int *evaluators)
{
    s_reader_t readers [8];
    int n = s_readers (trace_dir, listing, readers, 8);
    int trainers = 0, shards [2] = {0, 0};
    *complete = *evaluators = 0;
    for (int r = 0; r < n; r++) {
        if (readers [r].eval_count) {
            (*evaluators)++;
            cr_assert_eq (readers [r].train_count, 0, "the evaluator read training files");
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
        cr_assert_eq (shards [shard]++, 0, "%s: two processes read shard %d", strategy,
                      shard);
        *complete += readers [r].train_count == TRAIN_COUNT / 2;
    }
    return trainers;
}

static void
s_train_reads_own_shard (const char *strategy)
{
    s_folders_t f = s_folders ();
    za_images_config_t config = za_test_images_config (f.train);
    za_dataset_t *listing = za_images_load (&config);
    cr_assert_not_null (listing);

    //  Trains until both processes have read every file of their shard (a
    //  ps-async worker may start late: no step count would promise it).
    setenv ("ZA_IMAGES_TRACE", f.trace, 1);
    char *model = za_test_path ("model");
    char *out = za_test_path ("run.out"), *err = za_test_path ("run.err");
    const char *args [] = {"--local", "--strategy", strategy, "--workers", "1",
                           "--train-data", f.train, "--eval-data", f.eval, "--image-size",
                           "28", "--channels", "1", "--batch-size", "16", "--max-steps",
                           "1000000", "--model-dir", model, NULL};
    pid_t pid = za_test_spawn (args, out, err);
    unsetenv ("ZA_IMAGES_TRACE");
    double deadline = za_clock_mono () + RUN_TIMEOUT_S * ZA_TEST_SLOWDOWN;
    int complete = 0, evaluators = 0, trainers = 0;
    while (za_clock_mono () < deadline && complete < 2) {
        usleep (100 * 1000);
        trainers = s_trainers (f.trace_dir, listing, strategy, &complete, &evaluators);
    }
    kill (pid, SIGTERM);
    int status = za_test_wait (pid, RUN_TIMEOUT_S);
    char *run_err = za_test_read_file (err, NULL);
    cr_expect (WIFEXITED (status), "the run ends on SIGTERM: %s", run_err);
    trainers = s_trainers (f.trace_dir, listing, strategy, &complete, &evaluators);
    printf ("%s: %d processes trained, %d read all of their own shard, none another's\n",
            strategy, trainers, complete);
    cr_expect_eq (trainers, 2, "%s: the chief and the worker train: %s", strategy, run_err);
    cr_expect_eq (complete, 2, "%s: each read all of its own files", strategy);
    //  Under all-reduce the two shards' files come in orders of their own:
    //  at a place in their streams, the two read one class by chance (1 in
    //  10 here), where one seed made each read the sorted neighbour of the
    //  other's file, of its class 64 times in 64.
    s_reader_t readers [8];
    int n = s_readers (f.trace_dir, listing, readers, 8), first = -1, alike = 0, places = 0;
    for (int r = 0; r < n && !strcmp (strategy, "allreduce"); r++) {
        if (!readers [r].train_count)
            continue;
        if (first < 0) {
            first = r;
            continue;
        }
        for (int k = 0; k < readers [r].order_count && k < readers [first].order_count; k++) {
            places++;
            alike += listing->labels [readers [r].order [k]]
                  == listing->labels [readers [first].order [k]];
        }
    }
    cr_expect (strcmp (strategy, "allreduce") || (places >= 32 && alike < places / 2),
               "%s: the shards read one class at %d of %d places", strategy, alike, places);
    free (run_err), free (out), free (err);
    za_dataset_destroy (&listing);
    free (model);
    s_folders_free (&f);
}

Test (images_roles, ps_async_workers_read_only_their_shard, .timeout = 900)
{
    s_train_reads_own_shard ("ps-async");
}

Test (images_roles, allreduce_workers_read_only_their_shard, .timeout = 900)
{
    s_train_reads_own_shard ("allreduce");
}

//  The evaluator reads --eval-data, any source: a folder here.
Test (images_roles, the_evaluator_reads_its_own_folder, .timeout = 900)
{
    s_folders_t f = s_folders ();
    setenv ("ZA_IMAGES_TRACE", f.trace, 1);
    char *model = za_test_path ("model");
    const char *args [] = {"--local", "--workers", "0", "--train-data", f.train,
                           "--eval-data", f.eval, "--image-size", "28", "--channels", "1",
                           "--batch-size", "16", "--max-steps", "20", "--model-dir", model,
                           NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    unsetenv ("ZA_IMAGES_TRACE");
    cr_assert_eq (result.exit_code, 0, "%s\n%s", result.out, result.err);
    char on [64];
    snprintf (on, sizeof on, "on %d examples", EVAL_COUNT);
    cr_expect (strstr (result.out, on), "the evaluator's report (%s): %s", on, result.out);
    za_test_result_free (&result);
    za_images_config_t config = za_test_images_config (f.train);
    za_dataset_t *listing = za_images_load (&config);
    s_reader_t readers [8];
    int n = s_readers (f.trace_dir, listing, readers, 8), evaluators = 0;
    for (int r = 0; r < n; r++)
        if (readers [r].eval_count) {
            evaluators++;
            cr_expect_eq (readers [r].train_count, 0, "the evaluator read training files");
            cr_expect_geq (readers [r].eval_count, EVAL_COUNT);
        }
    cr_expect_eq (evaluators, 1, "one process, the evaluator, read the evaluation folder");
    za_dataset_destroy (&listing);
    free (model);
    s_folders_free (&f);
}

//  The chief's row has bad_images >= 1 (the corrupt file, counted once).
static int
s_bad_counted (json_t *state, void *arg)
{
    (void) arg;
    json_t *chief = za_test_row (state, "chief", 0);
    json_t *bad = chief? json_object_get (chief, "bad_images"): NULL;
    return json_is_integer (bad) && json_integer_value (bad) >= 1;
}

//  A corrupt image is counted where a person watches: the broker's state,
//  zactor-top; the others train on.
Test (images_roles, a_corrupt_image_is_counted_in_zactor_top, .timeout = 900)
{
    s_folders_t f = s_folders ();
    char *bad = za_test_join (f.train, "class_4/zz-corrupt.png");
    FILE *file = fopen (bad, "w");
    cr_assert_not_null (file);
    fputs ("\x89PNG but not really", file);
    fclose (file);
    char *model = za_test_path ("model");
    char *out = za_test_path ("local.out");
    const char *args [] = {"--local", "--workers", "0", "--evaluators", "0", "--no-eval",
                           "--train-data", f.train, "--image-size", "28", "--channels", "1",
                           "--batch-size", "16", "--max-steps", "100000000", "--model-dir",
                           model, NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    json_t *state = za_test_wait_for (broker, s_bad_counted, NULL,
                                      "the chief to report the corrupt image", RUN_TIMEOUT_S);
    json_t *chief = za_test_row (state, "chief", 0);
    cr_expect_eq (json_integer_value (json_object_get (chief, "bad_images")), 1,
                  "one corrupt file, counted once however many epochs");
    cr_expect_gt (json_integer_value (json_object_get (chief, "global_step")), 0);
    json_decref (state);
    FILE *top = za_test_popen_top (broker, "");
    char text [8192] = "";
    size_t got = fread (text, 1, sizeof text - 1, top);
    text [got] = 0;
    pclose (top);
    cr_expect (strstr (text, "BAD IMAGES"), "%s", text);
    //  The ps row shows - where a trainer's rate and loss would be.
    const char *ps = strstr (text, "\nps ");
    cr_expect (ps && strstr (ps, "       -        -       -"), "%s", text);
    kill (local, SIGINT);
    za_test_wait (local, RUN_TIMEOUT_S);
    free (out), free (model), free (bad);
    s_folders_free (&f);
}
