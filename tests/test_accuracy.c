/*  test_accuracy.c: test-set accuracy of zactor-run on the real Fashion-MNIST: 1 and 5
    epochs of the seed CNN and 5 of the DNN always, the CNN's 5 in mixed_bfloat16
    against fp32 where the CPU has bf16; 12 CNN epochs, and --wire-dtype bf16
    against fp32 in each strategy's cluster, when ZA_LONG=1.                        */
#include <criterion/criterion.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_checkpoint.h"
#include "za/za_kernels.h"
#include "za/za_util.h"
#include "za_test.h"

#define T10K_EXAMPLES 10000
#define SHORT_TIMEOUT_S 600.0
#define LONG_TIMEOUT_S 1750.0

//  Fails at once without zactor-run. The temp dir is made by the tests that run
//  (a skipped test gets no .fini).
static void
s_setup (void)
{
    za_test_binary ();
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (accuracy, .init = s_setup, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  Helpers

static int
s_long_enabled (void)
{
    const char *flag = getenv ("ZA_LONG");
    return flag && strcmp (flag, "1") == 0;
}

//  Trains and evaluates with `args` plus --model-dir; checks that all of
//  t10k was evaluated at `steps` and returns the test accuracy.
static double
s_train_and_evaluate (const char *name, const char *const *args, int64_t steps,
                      double timeout_s)
{
    //  Calls within one test share the directory: a later call resumes.
    if (!*za_test_dir ())
        za_test_dir_create ("za_accuracy_test");
    char *model_dir = za_test_path ("run");
    const char *all [64];
    int count = 0;
    while (*args && count < 60)
        all [count++] = *args++;
    all [count++] = "--model-dir";
    all [count++] = model_dir;
    all [count] = NULL;
    double start = za_clock_mono ();
    za_test_result_t result = za_test_run (all, timeout_s);
    double seconds = za_clock_mono () - start;
    cr_assert_eq (result.exit_code, 0, "%s: exit %d, stderr: %s", name, result.exit_code,
                  result.err);

    //  What zactor-run prints, and what it logged in eval/metrics.jsonl.
    const char *line = strstr (result.out, "test accuracy ");
    cr_assert_not_null (line, "%s: no accuracy line in: %s", name, result.out);
    double printed = 0;
    long long examples = 0, at_step = 0;
    cr_assert_eq (sscanf (line, "test accuracy %lf loss %*f on %lld examples at step %lld",
                          &printed, &examples, &at_step), 3, "%s: %s", name, line);
    cr_assert_eq (examples, T10K_EXAMPLES);
    cr_assert_eq (at_step, steps, "%s: evaluated step %lld, expected %lld", name, at_step,
                  (long long) steps);

    char *eval_path = za_test_path ("run/eval/metrics.jsonl");
    char *eval_text = za_test_read_file (eval_path, NULL);
    //  The newest evaluation is the last line.
    char *last = eval_text;
    for (char *p = eval_text; *p; p++)
        if (*p == '\n' && p [1])
            last = p + 1;
    json_error_t error;
    json_t *eval = json_loads (last, JSON_DISABLE_EOF_CHECK, &error);
    cr_assert_not_null (eval, "%s: %s", eval_path, error.text);
    double accuracy = json_number_value (json_object_get (eval, "accuracy"));
    cr_assert_eq (json_integer_value (json_object_get (eval, "examples")), T10K_EXAMPLES);
    cr_assert_eq (json_integer_value (json_object_get (eval, "global_step")), steps);
    cr_assert_float_eq (accuracy, printed, 1e-4);

    int64_t *ckpt_steps = NULL;
    int ckpts = za_checkpoint_list (model_dir, &ckpt_steps);
    cr_assert_gt (ckpts, 0);
    cr_assert_eq (ckpt_steps [ckpts - 1], steps, "%s: final checkpoint at %lld", name,
                  (long long) ckpt_steps [ckpts - 1]);
    free (ckpt_steps);

    fprintf (stderr, "test_accuracy: %s: t10k accuracy %.4f at step %lld (%.0f s)\n", name,
             accuracy, (long long) steps, seconds);
    json_decref (eval);
    free (eval_text);
    free (eval_path);
    za_test_result_free (&result);
    free (model_dir);
    return accuracy;
}


//  --------------------------------------------------------------------------
//  Always

Test (accuracy, short_cnn)
{
    const char *args [] = {"--model", "cnn", "--optimizer", "adam", "--learning-rate",
                           "0.001", "--batch-size", "64", "--epochs", "1", "--seed",
                           "42", "--threads", "2", NULL};
    double accuracy = s_train_and_evaluate ("short_cnn", args, 938, SHORT_TIMEOUT_S);
    cr_assert_geq (accuracy, 0.84, "seed CNN, 1 epoch: t10k accuracy %.4f", accuracy);
}


//  --------------------------------------------------------------------------
//  Full trainings (5 epochs = 4688 steps of 64; 12 epochs only with ZA_LONG=1)

//  The acceptance figures. About 45 s and 5 s on 2 cores, so CI runs
//  them; --threads 2 fixes the split of each batch, so the result is
//  repeatable.
Test (accuracy, cnn_5_epochs, .timeout = 1800)
{
    const char *args [] = {"--model", "cnn", "--optimizer", "adam", "--learning-rate",
                           "0.001", "--batch-size", "64", "--epochs", "5", "--seed", "42",
                           "--threads", "2", "--log-step-count-steps", "1000", NULL};
    double accuracy = s_train_and_evaluate ("cnn_5_epochs", args, 4688, LONG_TIMEOUT_S);
    cr_assert_geq (accuracy, 0.895, "seed CNN, 5 epochs: t10k accuracy %.4f", accuracy);
}

//  mixed_bfloat16 ends within 0.3 points of fp32: the mean of four seeds'
//  test accuracies, each seed in both precisions with the same split. One
//  seed's pair differs by up to 0.4 points either way (the rounding sends
//  training down another path, as another seed would: seed 42 gave +0.41,
//  seeds 1-3 -0.01, +0.12, -0.21 on an AMX Xeon), so one pair alone cannot
//  tell a bias from that noise. About 4 x (17 s + 7 s) on 2 cores. Each run
//  in a model dir of its own.
Test (accuracy, cnn_5_epochs_mixed_bfloat16, .timeout = 3600)
{
    if (!za_backend_cpu ()->native (ZA_PRECISION_BF16))
        cr_skip_test ("this CPU has no bf16 instructions");
    const char *seeds [] = {"42", "1", "2", "3"};
    const int count = (int) (sizeof seeds / sizeof seeds [0]);
    double sum [2] = {0, 0};
    const char *precisions [2] = {"fp32", "mixed_bfloat16"};
    for (int s = 0; s < count; s++)
        for (int i = 0; i < 2; i++) {
            const char *args [] = {"--model", "cnn", "--optimizer", "adam", "--learning-rate",
                                   "0.001", "--batch-size", "64", "--epochs", "5", "--seed",
                                   seeds [s], "--threads", "2", "--log-step-count-steps", "0",
                                   "--precision", precisions [i], NULL};
            char name [64];
            snprintf (name, sizeof name, "%s seed %s", precisions [i], seeds [s]);
            sum [i] += s_train_and_evaluate (name, args, 4688, LONG_TIMEOUT_S);
            za_test_dir_remove ();
        }
    cr_assert_leq (fabs (sum [1] - sum [0]) / count, 0.003,
                   "seed CNN, 5 epochs, mean of %d seeds: mixed_bfloat16 %.4f, fp32 %.4f", count,
                   sum [1] / count, sum [0] / count);
}

//  "Within 12 epochs": evaluated after every epoch, as train_and_evaluate
//  would, the best of epochs 1..12 must reach 0.91. Each epoch is one
//  zactor-run that resumes the last one's checkpoint (and reads on).
Test (accuracy, long_cnn_12_epochs, .timeout = 3600)
{
    if (!s_long_enabled ())
        cr_skip_test ("12 epochs of the seed CNN: set ZA_LONG=1 to run");
    double best = 0;
    int best_epoch = 0;
    for (int epoch = 1; epoch <= 12; epoch++) {
        char epochs [16], name [32];
        snprintf (epochs, sizeof epochs, "%d", epoch);
        snprintf (name, sizeof name, "cnn_epoch_%d", epoch);
        const char *args [] = {"--model", "cnn", "--optimizer", "adam", "--learning-rate",
                               "0.001", "--batch-size", "64", "--epochs", epochs, "--seed",
                               "42", "--threads", "2", "--log-step-count-steps", "0", NULL};
        double accuracy = s_train_and_evaluate (name, args, (epoch * 60000 + 63) / 64,
                                                LONG_TIMEOUT_S);
        if (accuracy > best)
            best = accuracy, best_epoch = epoch;
    }
    fprintf (stderr, "test_accuracy: best %.4f at epoch %d\n", best, best_epoch);
    cr_assert_geq (best, 0.91, "seed CNN: best t10k accuracy within 12 epochs %.4f", best);
}

//  --wire-dtype bf16 against fp32 in a --local cluster of the seed CNN, 2
//  epochs, seeds 1-8: the mean of the eight test accuracies within 0.3 points
//  of fp32's. ps-sync and all-reduce run 2 workers beside the chief. ps-async
//  runs the chief alone with its ps: with several trainers the pushes
//  interleave as they come, so a run does not repeat (one seed's fp32 runs
//  spread over 3 points, far above the 0.3 asked), while one trainer's pushes
//  come in one order and a seed gives the same accuracy every run. A seed's
//  bf16 and fp32 differ by up to 0.4 points either way (the rounding sends
//  training down another path, as another seed would), hence eight seeds.
//  About 20 s a run on 2 cores, 48 runs: ZA_LONG=1 only.
static double
s_cluster_accuracy (const char *strategy, const char *dtype, int seed)
{
    char name [64], seed_text [16];
    snprintf (name, sizeof name, "run-%s-%s-%d", strategy, dtype, seed);
    snprintf (seed_text, sizeof seed_text, "%d", seed);
    if (!*za_test_dir ())
        za_test_dir_create ("za_accuracy_test");
    char *model_dir = za_test_path (name);
    const char *workers = strcmp (strategy, "ps-async")? "2": "0";
    const char *args [] = {"--local", "--workers", workers, "--strategy", strategy,
                           "--wire-dtype", dtype, "--epochs", "2", "--seed", seed_text,
                           "--threads", "1", "--log-step-count-steps", "0", "--model-dir",
                           model_dir, NULL};
    za_test_result_t result = za_test_run (args, LONG_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s: exit %d, stderr: %s", name, result.exit_code,
                  result.err);
    const char *line = strstr (result.out, "test accuracy ");
    double accuracy = 0;
    cr_assert (line && sscanf (line, "test accuracy %lf", &accuracy) == 1, "%s: %s", name,
               result.out);
    fprintf (stderr, "test_accuracy: %s: t10k accuracy %.4f\n", name, accuracy);
    za_test_result_free (&result);
    free (model_dir);
    return accuracy;
}

Test (accuracy, wire_bf16_clusters_end_where_fp32_ends, .timeout = 5400)
{
    if (!s_long_enabled ())
        cr_skip_test ("48 cluster trainings: set ZA_LONG=1 to run");
    const char *strategies [] = {"ps-sync", "allreduce", "ps-async"};
    enum { SEEDS = 8 };
    for (int k = 0; k < 3; k++) {
        double mean [2] = {0, 0};
        for (int seed = 1; seed <= SEEDS; seed++) {
            mean [0] += s_cluster_accuracy (strategies [k], "fp32", seed) / SEEDS;
            mean [1] += s_cluster_accuracy (strategies [k], "bf16", seed) / SEEDS;
        }
        fprintf (stderr, "test_accuracy: %s, seeds 1-%d: bf16 %.4f, fp32 %.4f\n",
                 strategies [k], SEEDS, mean [1], mean [0]);
        cr_expect_leq (fabs (mean [1] - mean [0]) * 100, 0.3,
                       "%s, 2 epochs, seeds 1-%d: bf16 %.4f, fp32 %.4f", strategies [k],
                       SEEDS, mean [1], mean [0]);
    }
}

Test (accuracy, dnn_5_epochs, .timeout = 1800)
{
    const char *args [] = {"--model", "dnn", "--hidden-units", "128", "--optimizer", "adam",
                           "--learning-rate", "0.001", "--batch-size", "64", "--epochs", "5",
                           "--seed", "42", "--threads", "2", "--log-step-count-steps", "1000",
                           NULL};
    double accuracy = s_train_and_evaluate ("dnn_5_epochs", args, 4688, LONG_TIMEOUT_S);
    cr_assert_geq (accuracy, 0.87, "DNN 128, 5 epochs: t10k accuracy %.4f", accuracy);
}
