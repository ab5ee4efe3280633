/*  test_early_stop.c: --best-metric and --stop-if-no-improvement. The rule
    against TensorFlow's stop_if_no_increase_hook on a worked sequence; the
    request and its answer in the model dir; early stopping ending one
    process and --local clusters of every strategy with exit 0, a final
    checkpoint at the step every task ended at, evaluated; the best
    checkpoint by loss and by AUC; and the errors, exit 2.

    The trigger is made certain: "loss,400,max" asks for a loss that rises,
    which training does not give, so the rule fires at the first evaluation
    400 steps after the first (nothing here waits on a guessed time).      */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_early_stop.h"
#include "za/za_util.h"
#include "za_test.h"

static void
s_setup (void)
{
    za_test_dir_create ("za_early_stop");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (early_stop, .init = s_setup, .fini = s_teardown);

#define MODEL "flatten dense(32,relu) dense(10)"

Test (early_stop, goals_and_their_direction)
{
    za_metric_goal_t goal;
    const struct {
        const char *text;
        const char *name;
        int maximize;
    } cases [] = {
        {"accuracy", "accuracy", 1}, {"loss", "loss", 0}, {"val_loss", "val_loss", 0},
        {"auc", "auc", 1}, {"auc,min", "auc", 0}, {"loss,max", "loss", 1},
        {"top_5_accuracy", "top_5_accuracy", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        cr_assert_eq (za_metric_goal_parse ("--best-metric", cases [i].text, &goal), 0, "%s",
                      cases [i].text);
        cr_expect_str_eq (goal.name, cases [i].name);
        cr_expect_eq (goal.maximize, cases [i].maximize, "%s", cases [i].text);
    }
    cr_expect (za_metric_goal_better (&goal, 0.9, NAN));
    cr_expect_not (za_metric_goal_better (&goal, NAN, 0.5));
    cr_expect_eq (za_metric_goal_parse ("--best-metric", "auc,up", &goal), -1);
    cr_expect (strstr (za_last_error (), "max or min"), "%s", za_last_error ());
    cr_expect_eq (za_metric_goal_parse ("--best-metric", "", &goal), -1);
    za_early_stop_t stop;
    const char *bad [] = {"accuracy", "accuracy,", "accuracy,0", "accuracy,x", "accuracy,5,up",
                          ",5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        cr_expect_eq (za_early_stop_parse (bad [i], &stop), -1, "%s", bad [i]);
    cr_assert_eq (za_early_stop_parse ("loss,300", &stop), 0);
    cr_expect (!stop.goal.maximize && stop.steps == 300);
    cr_assert_eq (za_early_stop_parse ("auc,300,min", &stop), 0);
    cr_expect (!stop.goal.maximize && stop.steps == 300 && !strcmp (stop.goal.name, "auc"));
}

//  TensorFlow's rule (stop_if_no_increase_hook): walking the evaluations in
//  step order, keep the best and its step; stop once step - best_step >=
//  max_steps_without_increase. 0.6 at 200 is the best (0.6 at 300 is not
//  better, only equal): at 400, 400 - 200 >= 200.
Test (early_stop, the_rule_as_tensorflow_walks_it)
{
    za_early_stop_t stop;
    cr_assert_eq (za_early_stop_parse ("accuracy,200", &stop), 0);
    const int64_t steps [] = {100, 200, 300, 400};
    const double values [] = {0.5, 0.6, 0.6, 0.59};
    const int expect [] = {0, 0, 0, 1};
    for (int i = 0; i < 4; i++)
        cr_expect_eq (za_early_stop_add (&stop, steps [i], values [i]), expect [i], "step %lld",
                      (long long) steps [i]);
    cr_expect_eq (stop.best_step, 200);
    //  Lower is better for a loss: a new low resets the count.
    cr_assert_eq (za_early_stop_parse ("loss,200", &stop), 0);
    cr_expect_eq (za_early_stop_add (&stop, 100, 0.5), 0);
    cr_expect_eq (za_early_stop_add (&stop, 250, 0.51), 0);
    cr_expect_eq (za_early_stop_add (&stop, 290, 0.4), 0);
    cr_expect_eq (za_early_stop_add (&stop, 480, 0.45), 0);
    cr_expect_eq (za_early_stop_add (&stop, 490, 0.41), 1);
}

Test (early_stop, the_request_and_its_answer)
{
    const char *dir = za_test_dir ();
    int64_t step = 0;
    cr_expect_eq (za_early_stop_requested (dir), 0);
    cr_expect_eq (za_early_stop_final_step (dir, &step), -1);
    za_early_stop_t stop;
    cr_assert_eq (za_early_stop_parse ("accuracy,100", &stop), 0);
    za_early_stop_add (&stop, 100, 0.8);
    cr_assert_eq (za_early_stop_add (&stop, 200, 0.7), 1);
    cr_assert_eq (za_early_stop_request (dir, &stop, 200), 0);
    cr_expect_eq (za_early_stop_requested (dir), 1);
    cr_expect_eq (za_early_stop_final_step (dir, &step), -1, "not answered yet");
    cr_assert_eq (za_early_stop_confirm (dir, 230), 0);
    cr_assert_eq (za_early_stop_final_step (dir, &step), 0);
    cr_expect_eq (step, 230);
    //  A second evaluator's request never replaces the answered one.
    cr_assert_eq (za_early_stop_request (dir, &stop, 300), 0);
    cr_assert_eq (za_early_stop_final_step (dir, &step), 0, "the answer was lost");
    cr_expect_eq (step, 230);
    char *path = za_test_path (ZA_EARLY_STOP_FILE);
    json_t *json = json_load_file (path, 0, NULL);
    cr_assert_not_null (json);
    //  A file torn or written by hand: still a request, with no answer, until
    //  the chief's answer replaces it whole.
    char *torn_dir = za_test_path ("torn");
    cr_assert_eq (za_mkdirs (torn_dir), 0);
    char *torn = za_test_write ("torn/" ZA_EARLY_STOP_FILE, "{\"final_step\": 12");
    cr_expect_eq (za_early_stop_requested (torn_dir), 1);
    cr_expect_eq (za_early_stop_final_step (torn_dir, &step), -1);
    cr_assert_eq (za_early_stop_confirm (torn_dir, 40), 0);
    cr_assert_eq (za_early_stop_final_step (torn_dir, &step), 0);
    cr_expect_eq (step, 40);
    free (torn);
    free (torn_dir);
    cr_expect_str_eq (json_string_value (json_object_get (json, "metric")), "accuracy");
    cr_expect_eq (json_integer_value (json_object_get (json, "requested_at_step")), 200);
    cr_expect_eq (json_integer_value (json_object_get (json, "best_step")), 100);
    json_decref (json);
    free (path);
}

// ---------------------------------------------------------------------------
//  Whole runs

static json_t *
s_load (const char *name)
{
    char *path = za_test_path (name);
    json_t *json = json_load_file (path, 0, NULL);
    cr_assert_not_null (json, "no %s", path);
    free (path);
    return json;
}

//  The eval lines: the last one's step; the least loss over them in *least.
static int64_t
s_evaluated (double *least, int *count)
{
    char *path = za_test_path ("eval/metrics.jsonl");
    char *text = za_test_read_file (path, NULL);
    cr_assert_not_null (text, "no %s", path);
    int64_t last = -1;
    *least = INFINITY;
    *count = 0;
    for (char *line = strtok (text, "\n"); line; line = strtok (NULL, "\n")) {
        json_t *json = json_loads (line, 0, NULL);
        cr_assert_not_null (json, "%s", line);
        last = json_integer_value (json_object_get (json, "global_step"));
        *least = fmin (*least, json_number_value (json_object_get (json, "loss")));
        (*count)++;
        json_decref (json);
    }
    free (text);
    free (path);
    return last;
}

//  After a run stopped early: the answer names a step short of max_steps,
//  the final checkpoint is that step's, and the evaluator evaluated it.
static int64_t
s_expect_stopped_early (int64_t max_steps)
{
    int64_t final_step = -1;
    cr_assert_eq (za_early_stop_final_step (za_test_dir (), &final_step), 0,
                  "the chief never answered the request");
    cr_expect (final_step > 0 && final_step < max_steps, "ended at %lld",
               (long long) final_step);
    int count = 0;
    int64_t newest = za_test_expect_all_load (za_test_dir (), &count);
    cr_expect_eq (newest, final_step, "the newest checkpoint is of step %lld",
                  (long long) newest);
    double least;
    int evaluations;
    cr_expect_eq (s_evaluated (&least, &evaluations), final_step);
    cr_expect_geq (evaluations, 2);
    json_t *request = s_load (ZA_EARLY_STOP_FILE);
    cr_expect_str_eq (json_string_value (json_object_get (request, "metric")), "loss");
    cr_expect_lt (json_integer_value (json_object_get (request, "requested_at_step")),
                  final_step + 1);
    json_decref (request);
    return final_step;
}

Test (early_stop, one_process_train_and_evaluate, .timeout = 300)
{
    const char *args [] = {"--max-steps", "1000000", "--model-dir", za_test_dir (), "--model",
                           MODEL, "--save-checkpoints-steps", "200", "--train-and-evaluate",
                           "--start-delay-secs", "0", "--throttle-secs", "0",
                           "--stop-if-no-improvement", "loss,400,max", "--best-metric", "loss",
                           NULL};
    za_test_result_t run = za_test_run (args, 240);
    cr_assert_eq (run.exit_code, 0, "%s", run.err);
    cr_expect (strstr (run.err, "asking the chief to stop"), "%s", run.err);
    s_expect_stopped_early (1000000);
    //  The best by loss: the least loss of every evaluation.
    double least;
    int evaluations;
    s_evaluated (&least, &evaluations);
    json_t *best = s_load ("export/best/best.json");
    cr_expect_str_eq (json_string_value (json_object_get (best, "metric")), "loss");
    cr_expect (fabs (json_number_value (json_object_get (best, "value")) - least) < 1e-6,
               "best %f, least %f", json_number_value (json_object_get (best, "value")), least);
    json_decref (best);
    za_test_result_free (&run);
    //  Started again on that model dir: it ends before a step, where it was.
    int64_t final_step = -1;
    cr_assert_eq (za_early_stop_final_step (za_test_dir (), &final_step), 0);
    run = za_test_run (args, 240);
    cr_assert_eq (run.exit_code, 0, "%s", run.err);
    cr_expect (strstr (run.err, "delete the file to train on"), "%s", run.err);
    int64_t again = -1;
    cr_assert_eq (za_early_stop_final_step (za_test_dir (), &again), 0);
    cr_expect_eq (again, final_step);
    cr_expect_eq (za_test_expect_all_load (za_test_dir (), NULL), final_step);
    za_test_result_free (&run);
}

Test (early_stop, local_clusters_of_every_strategy_end_cleanly, .timeout = 600)
{
    const char *strategies [] = {"ps-async", "ps-sync", "allreduce"};
    for (int s = 0; s < 3; s++) {
        za_test_dir_remove ();
        za_test_dir_create ("za_early_stop");
        const char *args [] = {"--local", "--strategy", strategies [s], "--workers", "1",
                               "--max-steps", "1000000", "--model-dir", za_test_dir (),
                               "--model", MODEL, "--save-checkpoints-steps", "200",
                               "--start-delay-secs", "0", "--throttle-secs", "0",
                               "--stop-if-no-improvement", "loss,400,max", NULL};
        za_test_result_t run = za_test_run (args, 280);
        cr_assert_eq (run.exit_code, 0, "%s: %s", strategies [s], run.err);
        cr_expect (strstr (run.out, "(stopped early)"), "%s: %s", strategies [s], run.out);
        int64_t final_step = s_expect_stopped_early (1000000);
        //  The chief's log says it was done at that step; in the ring, every
        //  rank's (a ps worker may report the step its last push saw).
        char done [64];
        snprintf (done, sizeof done, "done at step %lld", (long long) final_step);
        const char *logs [] = {"logs/chief-0.log", "logs/worker-0.log"};
        for (int l = 0; l < (s == 2? 2: 1); l++) {
            char *path = za_test_path (logs [l]);
            char *text = za_test_read_file (path, NULL);
            cr_expect (text && strstr (text, done), "%s: %s lacks '%s'", strategies [s], path,
                       done);
            free (text);
            free (path);
        }
        za_test_result_free (&run);
    }
}

Test (early_stop, errors_exit_2)
{
    const struct {
        const char *flag, *value, *extra, *says;
    } cases [] = {
        {"--stop-if-no-improvement", "accuracy,100", NULL, "add --train-and-evaluate"},
        {"--stop-if-no-improvement", "auc,100", "--train-and-evaluate",
         "the evaluations report no 'auc'"},
        {"--stop-if-no-improvement", "accuracy", "--train-and-evaluate", "METRIC,STEPS"},
        {"--best-metric", "f1", NULL, "the evaluations report no 'f1'"},
        {"--best-metric", "loss,lower", NULL, "max or min"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        const char *args [] = {"--max-steps", "10", "--model-dir", za_test_dir (), "--model",
                               MODEL, cases [i].flag, cases [i].value, cases [i].extra, NULL};
        za_test_result_t run = za_test_run (args, 60);
        cr_expect_eq (run.exit_code, 2, "%s %s: %d", cases [i].flag, cases [i].value,
                      run.exit_code);
        cr_expect (strstr (run.err, cases [i].says), "%s %s: %s", cases [i].flag,
                   cases [i].value, run.err);
        za_test_result_free (&run);
    }
    const char *local [] = {"--local", "--evaluators", "0", "--max-steps", "10", "--model-dir",
                            za_test_dir (), "--stop-if-no-improvement", "accuracy,100", NULL};
    za_test_result_t run = za_test_run (local, 60);
    cr_expect_eq (run.exit_code, 2);
    cr_expect (strstr (run.err, "--evaluators 1"), "%s", run.err);
    za_test_result_free (&run);
    //  With --eval-metrics auc, the best checkpoint by AUC.
    const char *auc [] = {"--max-steps", "300", "--model-dir", za_test_dir (), "--model", MODEL,
                          "--save-checkpoints-steps", "100", "--train-and-evaluate",
                          "--start-delay-secs", "0", "--throttle-secs", "0", "--eval-metrics",
                          "auc", "--best-metric", "auc", NULL};
    run = za_test_run (auc, 120);
    cr_assert_eq (run.exit_code, 0, "%s", run.err);
    json_t *best = s_load ("export/best/best.json");
    cr_expect_str_eq (json_string_value (json_object_get (best, "metric")), "auc");
    cr_expect_gt (json_number_value (json_object_get (best, "value")), 0.9);
    json_decref (best);
    za_test_result_free (&run);
}
