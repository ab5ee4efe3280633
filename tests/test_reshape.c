/*  test_reshape.c: a checkpoint resumes on any shape of cluster (issue 46's
    "resume anywhere"), with real processes. Three shapes write one (one
    process; ps-async with 2 ps and 2 trainers; all-reduce with 3 ranks),
    and each of three other shapes (one process; ps-async with 3 ps and 4
    trainers; all-reduce with 2 ranks) resumes from each: the global step
    goes on from the checkpoint's, the optimizer's slots are taken (none
    started afresh), and the new shape's final checkpoint holds them. An
    all-reduce job resumed with another global batch reads on from the
    example the checkpoint says, and counts --epochs from there.         */
#include "za_test.h"
#include "za_test_images.h"
#include "za/za_checkpoint.h"
#include "za/za_util.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 300
#define WRITTEN_STEPS 60
#define MORE_STEPS 40

static void
s_setup (void)
{
    za_test_dir_create ("za_reshape");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (reshape, .init = s_setup, .fini = s_teardown, .timeout = 1200 * ZA_TEST_SLOWDOWN);

//  A shape: its name, and the flags that make it (before --model-dir).
typedef struct {
    const char *name;
    const char *flags [12];
} s_shape_t;

static const s_shape_t s_writers [] = {
    {"one process", {NULL}},
    {"ps-async, 2 ps x 2 trainers", {"--local", "--strategy", "ps-async", "--ps", "2",
                                     "--workers", "1", "--evaluators", "0", NULL}},
    {"allreduce x 3", {"--local", "--strategy", "allreduce", "--workers", "2",
                       "--evaluators", "0", NULL}},
};

static const s_shape_t s_readers [] = {
    {"one process", {NULL}},
    {"ps-async, 3 ps x 4 trainers", {"--local", "--strategy", "ps-async", "--ps", "3",
                                     "--workers", "3", "--evaluators", "0", NULL}},
    {"allreduce x 2", {"--local", "--strategy", "allreduce", "--workers", "1",
                       "--evaluators", "0", NULL}},
};

//  Runs `shape` on dir to max_steps; returns the result (caller frees).
static za_test_result_t
s_run (const s_shape_t *shape, const char *dir, int64_t max_steps)
{
    char steps [32];
    snprintf (steps, sizeof steps, "%" PRId64, max_steps);
    const char *args [32];
    int n = 0;
    for (int f = 0; shape->flags [f]; f++)
        args [n++] = shape->flags [f];
    const char *rest [] = {"--model-dir", dir, "--max-steps", steps, "--threads", "1",
                           "--no-eval", "--seed", "5", NULL};
    for (int r = 0; rest [r]; r++)
        args [n++] = rest [r];
    args [n] = NULL;
    return za_test_run (args, RUN_TIMEOUT_S);
}

//  Copies dir's newest checkpoint file into `to` (made).
static void
s_copy_newest (const char *dir, const char *to, int64_t step)
{
    char from_path [PATH_MAX], to_path [PATH_MAX];
    snprintf (from_path, sizeof from_path, "%s/model.ckpt-%" PRId64 ".safetensors", dir, step);
    snprintf (to_path, sizeof to_path, "%s/model.ckpt-%" PRId64 ".safetensors", to, step);
    size_t size = 0;
    char *bytes = (char *) za_test_read_file (from_path, &size);
    cr_assert_not_null (bytes, "%s", from_path);
    cr_assert_eq (za_mkdirs (to), 0);
    FILE *file = fopen (to_path, "wb");
    cr_assert_not_null (file, "%s", to_path);
    cr_assert_eq (fwrite (bytes, 1, size, file), size);
    cr_assert_eq (fclose (file), 0);
    free (bytes);
}

//  Every trainable variable of the checkpoint has its Adam slots.
static void
s_expect_slots (const char *dir, int64_t step, const char *what)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/model.ckpt-%" PRId64 ".safetensors", dir, step);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s: %s", what, za_last_error ());
    const char *vars [] = {"conv2d/kernel", "conv2d_2/bias", "dense/kernel", "dense_1/bias"};
    for (size_t v = 0; v < sizeof vars / sizeof vars [0]; v++)
        for (int s = 0; s < 2; s++) {
            char name [96];
            snprintf (name, sizeof name, "%s/%s", vars [v], s? "v": "m");
            cr_expect_not_null (za_checkpoint_find (ckpt, name), "%s: no %s", what, name);
        }
    za_checkpoint_destroy (&ckpt);
}

Test (reshape, every_shape_resumes_every_other_shapes_checkpoint)
{
    size_t writers = sizeof s_writers / sizeof s_writers [0];
    size_t readers = sizeof s_readers / sizeof s_readers [0];
    for (size_t w = 0; w < writers; w++) {
        char name [32];
        snprintf (name, sizeof name, "written-%zu", w);
        char *written = za_test_path (name);
        za_test_result_t result = s_run (&s_writers [w], written, WRITTEN_STEPS);
        cr_assert_eq (result.exit_code, 0, "%s: %s%s", s_writers [w].name, result.out,
                      result.err);
        za_test_result_free (&result);
        int64_t step = za_checkpoint_newest_step (written);
        //  (ps-async may end a step past max_steps.)
        cr_assert (step >= WRITTEN_STEPS && step <= WRITTEN_STEPS + 1, "%s wrote step %"
                   PRId64, s_writers [w].name, step);
        s_expect_slots (written, step, s_writers [w].name);
        for (size_t r = 0; r < readers; r++) {
            char what [128];
            snprintf (what, sizeof what, "%s -> %s", s_writers [w].name, s_readers [r].name);
            snprintf (name, sizeof name, "resumed-%zu-%zu", w, r);
            char *resumed = za_test_path (name);
            s_copy_newest (written, resumed, step);
            result = s_run (&s_readers [r], resumed, step + MORE_STEPS);
            cr_expect_eq (result.exit_code, 0, "%s: %s%s", what, result.out, result.err);
            //  Where it says so: the one process's output, the chief's log.
            char restored [64], log_path [PATH_MAX];
            snprintf (restored, sizeof restored, "restored step %" PRId64 " ", step);
            snprintf (log_path, sizeof log_path, "%s/logs/chief-0.log", resumed);
            char *log = s_readers [r].flags [0]? (char *) za_test_read_file (log_path, NULL)
                                               : strdup (result.err);
            cr_expect (log && strstr (log, restored), "%s: it did not resume from step %"
                       PRId64 ": %s", what, step, log? log: "(no log)");
            cr_expect (log && !strstr (log, "start fresh"), "%s: slots started "
                       "afresh: %s", what, log);
            free (log);
            //  (ps-async ends up to a step per other trainer past max_steps:
            //  their pushes were in flight.)
            int64_t final = za_checkpoint_newest_step (resumed);
            int64_t slack = strstr (s_readers [r].name, "ps-async")? 3: 0;
            cr_expect (final >= step + MORE_STEPS && final <= step + MORE_STEPS + slack,
                       "%s: ended at %" PRId64 ", not %" PRId64, what, final,
                       step + MORE_STEPS);
            s_expect_slots (resumed, final, what);
            za_test_result_free (&result);
            free (resumed);
        }
        free (written);
    }
}

//  The examples of the training input the checkpoint of `step` says were read.
static int64_t
s_examples_done (const char *dir, int64_t step)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/model.ckpt-%" PRId64 ".safetensors", dir, step);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s: %s", path, za_last_error ());
    int64_t examples = za_checkpoint_examples_done (ckpt);
    za_checkpoint_destroy (&ckpt);
    return examples;
}

//  480 images, batches of 8: 3 ranks read 24 examples a step, 2 ranks 16.
//  Written by 3 ranks to step 30 (720 examples: an epoch and a half), then
//  resumed by 2 with --epochs 3 (1440 examples): 45 steps of 16 are left,
//  so it ends at step 75 (not 90, the epochs counted at 16 from step 0),
//  and reads on from example 720 (not 30 x 16 = 480).
Test (reshape, a_resumed_allreduce_reads_on_from_the_checkpoints_example)
{
    za_dataset_t *fashion = za_test_fashion ("train", 480);
    char *images = za_test_images_folder (fashion, 480, "images", ZA_TEST_PNG, 1);
    za_dataset_destroy (&fashion);
    char *dir = za_test_path ("epochs");
    const char *three [] = {"--local", "--strategy", "allreduce", "--workers", "2",
                            "--evaluators", "0", "--train-data", images, "--batch-size", "8",
                            "--model-dir", dir, "--max-steps", "30", "--threads", "1",
                            "--no-eval", "--seed", "5", NULL};
    za_test_result_t result = za_test_run (three, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s%s", result.out, result.err);
    za_test_result_free (&result);
    cr_assert_eq (za_checkpoint_newest_step (dir), 30);
    cr_expect_eq (s_examples_done (dir, 30), 720);
    //  A newer file that is not intact (step 30's bytes as step 40's: its
    //  step disagrees with its name) is passed over by the restore, and so by
    //  the count (it counted from step 40: the end at 85).
    char from [PATH_MAX], damaged [PATH_MAX];
    snprintf (from, sizeof from, "%s/model.ckpt-30.safetensors", dir);
    snprintf (damaged, sizeof damaged, "%s/model.ckpt-40.safetensors", dir);
    size_t size = 0;
    void *bytes = za_test_read_file (from, &size);
    FILE *file = fopen (damaged, "wb");
    cr_assert (bytes && file && fwrite (bytes, 1, size, file) == size);
    fclose (file);
    free (bytes);

    const char *two [] = {"--local", "--strategy", "allreduce", "--workers", "1",
                          "--evaluators", "0", "--train-data", images, "--batch-size", "8",
                          "--model-dir", dir, "--epochs", "3", "--threads", "1", "--no-eval",
                          "--seed", "5", NULL};
    result = za_test_run (two, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s%s", result.out, result.err);
    cr_expect (strstr (result.err, "read 720 examples") && strstr (result.err, "ends at step 75"),
               "%s", result.err);
    za_test_result_free (&result);
    unlink (damaged);
    cr_expect_eq (za_checkpoint_newest_step (dir), 75);
    cr_expect_eq (s_examples_done (dir, 75), 1440);
    char log_path [PATH_MAX];
    snprintf (log_path, sizeof log_path, "%s/logs/worker-0.log", dir);
    char *log = (char *) za_test_read_file (log_path, NULL);
    cr_expect (log && strstr (log, "going from step 30 to 75 (the input from example 720)"),
               "%s", log? log: log_path);
    free (log);
    //  One process, which does not count the examples, goes on from it: its
    //  checkpoint says no place (not the restored one's, stale by then).
    const char *one [] = {"--train-data", images, "--batch-size", "8", "--model-dir", dir,
                          "--max-steps", "80", "--threads", "1", "--no-eval", NULL};
    result = za_test_run (one, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s%s", result.out, result.err);
    za_test_result_free (&result);
    cr_expect_eq (za_checkpoint_newest_step (dir), 80);
    cr_expect_eq (s_examples_done (dir, 80), 0);
    free (dir);
    free (images);
}
