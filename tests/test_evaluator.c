/*  test_evaluator.c: the evaluator's schedule with small start delays and
    throttles and a trainer the test controls (it writes the checkpoints at
    chosen steps and times): nothing before start_delay_secs, no two
    evaluations closer than throttle_secs, the final checkpoint exactly once
    and then exit 0; retention and corrupt files do not hurt it; replay.   */
#define _GNU_SOURCE                     //  memmem
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_evaluator.h"
#include "za/za_idx.h"
#include "za/za_role.h"
#include "za_test.h"

#define TIMEOUT_S 60.0

typedef struct {
    za_stack_spec_t spec;
    za_dataset_t *data;
    za_estimator_t *trainer;        //  writes the checkpoints
    za_evaluator_config_t config;
    za_role_stats_t stats;
} s_case_t;

static void
s_case_setup (s_case_t *c, int keep)
{
    za_test_dir_create ("za_evaluator_test");
    c->data = za_test_fashion ("t10k", 500);
    cr_assert_eq (za_stack_parse ("flatten dense(10)", &c->spec), 0);
    za_run_config_t run = za_run_config_default ();
    run.model_dir = za_test_dir ();
    run.keep_checkpoint_max = keep;
    run.threads = 1;
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    za_input_shape_t shape = {28, 28, 1};
    c->trainer = za_estimator_new (za_stack_model_fn (), &c->spec, shape, &optim, &run);
    cr_assert_not_null (c->trainer);
    za_evaluator_config_init (&c->config);
    c->config.model_fn = za_stack_model_fn ();
    c->config.params = &c->spec;
    c->config.input = shape;
    c->config.model_dir = za_test_dir ();
    c->config.data = c->data;
    c->config.threads = 1;
    c->config.poll_secs = 0.02;
    c->config.idle_timeout_secs = 20;
    za_role_stats_init (&c->stats);
    c->config.stats = &c->stats;
}

static void
s_case_teardown (s_case_t *c)
{
    za_estimator_destroy (&c->trainer);
    za_dataset_destroy (&c->data);
    za_test_dir_remove ();
}

static void
s_save (s_case_t *c, int64_t step)
{
    za_estimator_set_global_step (c->trainer, step);
    cr_assert_eq (za_estimator_save (c->trainer), 0, "%s", za_last_error ());
}

//  Evaluations recorded in <dir>/metrics.jsonl: steps and start times (wall).
static int
s_evaluations (const char *subdir, int64_t *steps, double *starts, int max)
{
    char *name = za_test_join (subdir, "metrics.jsonl");
    char *path = za_test_path (name);
    free (name);
    if (access (path, F_OK) != 0) {
        free (path);
        return 0;
    }
    char *text = za_test_read_file (path, NULL);
    int count = 0;
    for (char *line = text; line && *line && count < max;) {
        json_t *json = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        if (json) {
            steps [count] = json_integer_value (json_object_get (json, "global_step"));
            starts [count] = json_number_value (json_object_get (json, "wall_time"))
                           - json_number_value (json_object_get (json, "seconds"));
            count++;
            json_decref (json);
        }
        char *next = strchr (line, '\n');
        line = next? next + 1: NULL;
    }
    free (text);
    free (path);
    return count;
}

Test (evaluator, start_delay_throttle_and_the_final_checkpoint)
{
    s_case_t c;
    s_case_setup (&c, 0);
    c.config.spec.start_delay_secs = 1.0;
    c.config.spec.throttle_secs = 1.5;
    c.config.max_steps = 100;
    double t0 = za_clock_wall ();
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    //  Within its start delay it waits, and says so.
    zclock_sleep (300);
    cr_expect_eq (atomic_load (&c.stats.state), ZA_ROLE_WAITING);
    cr_expect_gt (atomic_load (&c.stats.alive), 0.0);
    cr_expect_eq (atomic_load (&c.stats.eval_step), -1);
    //  A checkpoint every 0.25 s, steps 10..100: ten in 2.5 s.
    for (int64_t step = 10; step <= 100; step += 10) {
        s_save (&c, step);
        zclock_sleep (250);
    }
    int64_t evaluations = 0;
    int rc = za_role_wait (evaluator, TIMEOUT_S, NULL, NULL, &evaluations);
    zactor_destroy (&evaluator);
    cr_expect_eq (rc, 0, "evaluator ended with %d", rc);
    int64_t steps [32];
    double starts [32];
    int count = s_evaluations ("eval", steps, starts, 32);
    cr_expect_eq (count, evaluations);
    cr_assert_geq (count, 2, "%d evaluations", count);
    cr_expect_lt (count, 10, "every checkpoint was evaluated: throttle ignored");
    cr_expect_geq (starts [0] - t0, 1.0 - 0.02, "first evaluation %.3f s after start",
                   starts [0] - t0);
    //  The throttle counts from each evaluation's start, before its checkpoint
    //  loads; what the file records starts after (wall_time - seconds), so a
    //  gap may look shorter by the difference of two loads: a few ms, tens on a
    //  loaded machine (1.479 s seen beside a build). A throttle not kept would
    //  show gaps of a checkpoint's 0.25 s. (The final one goes at once.)
    for (int i = 1; i < count; i++) {
        if (steps [i] == 100)
            continue;
        cr_expect_geq (starts [i] - starts [i - 1], 1.5 - 0.1, "evaluations %d and %d are "
                       "%.3f s apart", i - 1, i, starts [i] - starts [i - 1]);
    }
    for (int i = 1; i < count; i++)
        cr_expect_gt (steps [i], steps [i - 1]);
    //  The final checkpoint, exactly once, last.
    int finals = 0;
    for (int i = 0; i < count; i++)
        finals += steps [i] == 100;
    cr_expect_eq (finals, 1);
    cr_expect_eq (steps [count - 1], 100);
    //  It published the newest evaluation.
    cr_expect_eq (atomic_load (&c.stats.state), ZA_ROLE_DONE);
    cr_expect_eq (atomic_load (&c.stats.eval_step), 100);
    double accuracy = atomic_load (&c.stats.eval_accuracy);
    cr_expect (accuracy > 0 && accuracy <= 1, "accuracy %f", accuracy);
    s_case_teardown (&c);
}

Test (evaluator, no_new_checkpoint_means_no_evaluation)
{
    s_case_t c;
    s_case_setup (&c, 0);
    c.config.spec.start_delay_secs = 0;
    c.config.spec.throttle_secs = 0.2;
    c.config.max_steps = 50;
    s_save (&c, 10);
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    zclock_sleep (1200);            //  six throttle periods, one checkpoint
    int64_t steps [8];
    double starts [8];
    cr_expect_eq (s_evaluations ("eval", steps, starts, 8), 1);
    s_save (&c, 50);
    int64_t evaluations = 0;
    cr_expect_eq (za_role_wait (evaluator, TIMEOUT_S, NULL, NULL, &evaluations), 0);
    zactor_destroy (&evaluator);
    cr_expect_eq (evaluations, 2);
    s_case_teardown (&c);
}

Test (evaluator, retention_and_corrupt_checkpoints_are_skipped)
{
    s_case_t c;
    s_case_setup (&c, 1);           //  retention keeps one: the others vanish
    c.config.spec.start_delay_secs = 0;
    c.config.spec.throttle_secs = 0;
    c.config.max_steps = 60;
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    for (int64_t step = 1; step <= 40; step++)
        s_save (&c, step);          //  faster than the evaluator can follow
    //  A corrupt newest checkpoint (garbage under a checkpoint's name).
    char *bad = za_checkpoint_path (za_test_dir (), 50);
    FILE *f = fopen (bad, "w");
    cr_assert_not_null (f);
    fputs ("this is not a safetensors file", f);
    fclose (f);
    zclock_sleep (300);
    unlink (bad);
    free (bad);
    s_save (&c, 60);
    int64_t evaluations = 0;
    cr_expect_eq (za_role_wait (evaluator, TIMEOUT_S, NULL, NULL, &evaluations), 0);
    zactor_destroy (&evaluator);
    int64_t steps [64];
    double starts [64];
    int count = s_evaluations ("eval", steps, starts, 64);
    cr_expect_geq (count, 1);
    for (int i = 0; i < count; i++)
        cr_expect_neq (steps [i], 50, "the corrupt checkpoint was evaluated");
    cr_expect_eq (steps [count - 1], 60);
    s_case_teardown (&c);
}

//  The evaluation's input, once retention (keep_checkpoint_max) has deleted
//  the checkpoint being evaluated, as a trainer that saves often does.
static za_input_t *
s_input_after_retention (void *arg, const za_input_context_t *context)
{
    s_case_t *c = (s_case_t *) arg;
    char *path = za_checkpoint_path (za_test_dir (), za_estimator_global_step (c->trainer));
    cr_assert_eq (unlink (path), 0);
    free (path);
    za_input_config_t input = za_input_config_default ();
    input.batch_size = context->batch_size;
    return za_input_new (c->data, &input);
}

//  The best checkpoint is exported also when retention deleted it while it
//  was evaluated (it was "deleted before it could be exported": with
//  checkpoints every few seconds and five kept, the best was often lost).
Test (evaluator, the_best_is_kept_though_retention_deleted_it)
{
    s_case_t c;
    s_case_setup (&c, 0);
    c.config.spec.start_delay_secs = 0;
    c.config.max_steps = 100;
    c.config.input_fn = s_input_after_retention;
    c.config.input_arg = &c;
    s_save (&c, 100);
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    cr_expect_eq (za_role_wait (evaluator, TIMEOUT_S, NULL, NULL, NULL), 0);
    zactor_destroy (&evaluator);
    char *path = za_checkpoint_path (za_test_dir (), 100);
    cr_expect_neq (access (path, F_OK), 0, "retention did not delete it");
    char *kept = za_test_path ("export/best/model.ckpt-100.safetensors");
    za_checkpoint_t *ckpt = za_checkpoint_load (kept);
    cr_expect_not_null (ckpt, "%s: %s", kept, za_last_error ());
    za_checkpoint_destroy (&ckpt);
    char *json = za_test_path ("export/best/best.json");
    json_t *best = json_load_file (json, 0, NULL);
    cr_expect_eq (json_integer_value (json_object_get (best, "global_step")), 100);
    json_decref (best);
    free (json), free (kept), free (path);
    s_case_teardown (&c);
}

Test (evaluator, replay_evaluates_every_checkpoint_in_order)
{
    s_case_t c;
    s_case_setup (&c, 0);
    for (int64_t step = 30; step >= 10; step -= 10)
        s_save (&c, step);          //  written out of order on purpose
    c.config.spec.replay = 1;
    c.config.spec.name = "replay";
    int evaluations = 0;
    cr_assert_eq (za_evaluator_run (&c.config, NULL, &evaluations), 0, "%s", za_last_error ());
    cr_expect_eq (evaluations, 3);
    int64_t steps [8];
    double starts [8];
    cr_assert_eq (s_evaluations ("eval_replay", steps, starts, 8), 3);
    cr_expect (steps [0] == 10 && steps [1] == 20 && steps [2] == 30);
    //  The best one is exported under the evaluation's name: a replay never
    //  overwrites the training's export/best.
    char *best = za_test_path ("export/best_replay/best.json");
    char *training = za_test_path ("export/best");
    cr_expect_eq (access (best, F_OK), 0);
    cr_expect_neq (access (training, F_OK), 0);
    free (best);
    free (training);
    s_case_teardown (&c);
}

Test (evaluator, a_restarted_evaluator_skips_what_it_did)
{
    s_case_t c;
    s_case_setup (&c, 0);
    c.config.spec.start_delay_secs = 0;
    c.config.spec.throttle_secs = 0;
    c.config.max_steps = 20;
    s_save (&c, 20);
    int evaluations = 0;
    cr_assert_eq (za_evaluator_run (&c.config, NULL, &evaluations), 0);
    cr_expect_eq (evaluations, 1);
    cr_assert_eq (za_evaluator_run (&c.config, NULL, &evaluations), 0);
    cr_expect_eq (evaluations, 0, "evaluated the final checkpoint again");
    s_case_teardown (&c);
}


typedef struct {
    za_dataset_t *train;
} s_train_input_t;

static za_input_t *
s_train_input_fn (void *arg, const za_input_context_t *context)
{
    za_mode_t mode = context->mode;
    (void) mode;
    s_train_input_t *in = (s_train_input_t *) arg;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 32;
    config.epochs = -1;
    config.shuffle_buffer = 1000;
    return za_input_new (in->train, &config);
}

Test (evaluator, train_and_evaluate_in_one_call)
{
    s_case_t c;
    s_case_setup (&c, 0);
    //  The trainer's own estimator, with checkpoints every 50 steps.
    za_estimator_destroy (&c.trainer);
    za_run_config_t run = za_run_config_default ();
    run.model_dir = za_test_dir ();
    run.save_checkpoints_steps = 50;
    run.keep_checkpoint_max = 0;
    run.threads = 1;
    run.progress = 0;
    run.log_step_count_steps = 0;
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_input_shape_t shape = {28, 28, 1};
    c.trainer = za_estimator_new (za_stack_model_fn (), &c.spec, shape, &optim, &run);
    s_train_input_t input = {za_test_fashion ("train", 2000)};
    c.config.spec.start_delay_secs = 0;
    c.config.spec.throttle_secs = 0;
    int evaluations = 0;
    cr_assert_eq (za_train_and_evaluate (c.trainer, s_train_input_fn, &input, 200, &c.config,
                                         &evaluations), 0, "%s", za_last_error ());
    cr_expect_geq (evaluations, 1);
    int64_t steps [16];
    double starts [16];
    int count = s_evaluations ("eval", steps, starts, 16);
    cr_expect_eq (count, evaluations);
    cr_expect_eq (steps [count - 1], 200, "the final checkpoint was not evaluated last");
    za_dataset_destroy (&input.train);
    s_case_teardown (&c);
}

//  Waits up to secs for the evaluator to publish an evaluation of step.
static int
s_evaluated (s_case_t *c, int64_t step, double secs)
{
    double deadline = za_clock_mono () + secs;
    while (atomic_load (&c->stats.eval_step) < step && za_clock_mono () < deadline)
        zclock_sleep (10);
    return atomic_load (&c->stats.eval_step) >= step;
}

//  A case whose evaluator starts at once, never throttles, ends at step 20,
//  and looks at model_dir only every 30 s (unless something tells it).
static void
s_case_setup_prompt (s_case_t *c)
{
    s_case_setup (c, 0);
    c->config.spec.start_delay_secs = 0;
    c->config.spec.throttle_secs = 0;
    c->config.max_steps = 20;
    c->config.poll_secs = 30;
    c->config.idle_timeout_secs = 0;
}

//  Waits for the evaluator's end; expects it evaluated `expected` times.
static void
s_expect_end (zactor_t **evaluator, int64_t expected)
{
    int64_t evaluations = 0;
    cr_expect_eq (za_role_wait (*evaluator, 10.0, NULL, NULL, &evaluations), 0);
    cr_expect_eq (evaluations, expected);
    zactor_destroy (evaluator);
}

//  The chief's word through the broker (here a PAIR the test holds) wakes
//  the evaluator at once: with no inotify and a look at model_dir every
//  30 s, nothing else could.
Test (evaluator, a_checkpoint_message_wakes_it_at_once)
{
    s_case_t c;
    s_case_setup_prompt (&c);
    c.config.watch_dir = 0;
    zsock_t *chief = zsock_new_pair ("@inproc://evaluator-trigger");
    zsock_t *trigger = zsock_new_pair (">inproc://evaluator-trigger");
    cr_assert (chief && trigger);
    c.config.trigger = trigger;
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    zclock_sleep (300);             //  it has looked once, and sleeps
    s_save (&c, 10);
    cr_expect_not (s_evaluated (&c, 10, 1.0), "found without being told: it polls");
    zstr_sendx (chief, "CHECKPOINT", "10", NULL);
    cr_expect (s_evaluated (&c, 10, 10.0), "the message did not wake it");
    //  Other messages on the trigger (the broker client's VIEW) are read and
    //  change nothing.
    zstr_sendx (chief, "VIEW", "1", "tcp://127.0.0.1:1", "0", NULL);
    s_save (&c, 20);
    zstr_sendx (chief, "CHECKPOINT", "20", NULL);
    s_expect_end (&evaluator, 2);
    zsock_destroy (&trigger);
    zsock_destroy (&chief);
    s_case_teardown (&c);
}

//  A chief on this host without a broker: the kernel's note of the file
//  renamed into model_dir wakes the evaluator (no trigger, a 30 s look).
Test (evaluator, inotify_wakes_it_at_once)
{
    s_case_t c;
    s_case_setup_prompt (&c);
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    zclock_sleep (300);
    s_save (&c, 10);
    cr_expect (s_evaluated (&c, 10, 10.0), "inotify did not wake it");
    s_save (&c, 20);
    s_expect_end (&evaluator, 2);
    s_case_teardown (&c);
}

//  While it follows model_dir, a chief can tell (and so does not evaluate
//  the end itself); once it has ended, not.
Test (evaluator, a_chief_can_tell_an_evaluator_follows)
{
    s_case_t c;
    s_case_setup_prompt (&c);
    char who [256];
    cr_expect_not (za_evaluator_following (za_test_dir (), NULL, who, sizeof who));
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    double deadline = za_clock_mono () + 10;
    while (!za_evaluator_following (za_test_dir (), NULL, who, sizeof who)
           && za_clock_mono () < deadline)
        zclock_sleep (10);
    char pid [64];
    snprintf (pid, sizeof pid, "pid %d on ", (int) getpid ());
    cr_expect (strstr (who, pid) == who, "who: '%s'", who);
    cr_expect (za_evaluator_following (za_test_dir (), NULL, NULL, 0));
    cr_expect_not (za_evaluator_following (za_test_dir (), "holdout", NULL, 0),
                   "an evaluation of another name is not this one");
    s_save (&c, 20);
    s_expect_end (&evaluator, 1);
    cr_expect_not (za_evaluator_following (za_test_dir (), NULL, who, sizeof who));
    s_case_teardown (&c);
}

//  The accuracy and step of an evaluation's kept best (best.json), or -1.
static double
s_best_kept (const char *model_dir, const char *name, int64_t *step)
{
    char dir [4096], file [4200];
    za_evaluator_best_dir (model_dir, name, dir, sizeof dir);
    snprintf (file, sizeof file, "%s/best.json", dir);
    json_t *best = json_load_file (file, 0, NULL);
    *step = best? json_integer_value (json_object_get (best, "global_step")): -1;
    double accuracy = best? json_number_value (json_object_get (best, "accuracy")): -1;
    json_decref (best);
    return accuracy;
}

//  Without an evaluator task, the final evaluation (one process's, or the
//  chief's under --local --evaluators 0) goes where --eval-name says, and
//  is kept as the best (--best-metric; with model.onnx under --export-onnx)
//  unless the one kept is better; the launcher reads it from there.
Test (evaluator, a_final_evaluation_goes_by_its_name_and_keeps_the_best)
{
    za_test_dir_create ("za_final_eval");
    char *dir = za_test_path ("one"), *local = za_test_path ("local");
    const char *first [] = {"--model", "linear", "--max-steps", "20", "--eval-name", "holdout",
                            "--export-onnx", "--threads", "1", "--model-dir", dir, NULL};
    za_test_result_t result = za_test_run (first, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    char *metrics = za_test_join (dir, "eval_holdout/metrics.jsonl");
    cr_expect (strstr (result.out, metrics), "%s", result.out);
    cr_expect (access (metrics, F_OK) == 0, "%s", metrics);
    char *unnamed = za_test_join (dir, "eval");
    cr_expect (access (unnamed, F_OK) != 0, "nothing in %s", unnamed);
    za_test_result_free (&result);
    int64_t step;
    double at_20 = s_best_kept (dir, "holdout", &step);
    cr_expect (at_20 > 0.3 && step == 20, "accuracy %g at step %lld", at_20, (long long) step);
    char *onnx = za_test_join (dir, "export/best_holdout/model.onnx");
    cr_expect (access (onnx, F_OK) == 0, "%s", onnx);
    //  And its TensorBoard events, beside metrics.jsonl (once none).
    char *events_dir = za_test_join (dir, "eval_holdout");
    DIR *d = opendir (events_dir);
    struct dirent *entry;
    int events = 0;
    while (d && (entry = readdir (d)))
        if (!strncmp (entry->d_name, "events.out.tfevents.", 20)) {
            char *path = za_test_join (events_dir, entry->d_name);
            size_t size = 0;
            char *bytes = (char *) za_test_read_file (path, &size);
            events += bytes && memmem (bytes, size, "accuracy", 8) != NULL;
            free (bytes), free (path);
        }
    if (d)
        closedir (d);
    cr_expect_eq (events, 1, "no events file with the accuracy in %s", events_dir);
    free (events_dir);
    //  Trained on: the later evaluation replaces it only where it is better.
    const char *more [] = {"--model", "linear", "--max-steps", "40", "--eval-name", "holdout",
                           "--threads", "1", "--model-dir", dir, NULL};
    result = za_test_run (more, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    json_t *last = NULL;
    FILE *f = fopen (metrics, "r");
    char line [4096];
    while (f && fgets (line, sizeof line, f)) {
        json_decref (last);
        last = json_loads (line, 0, NULL);
    }
    if (f)
        fclose (f);
    double at_40 = json_number_value (json_object_get (last, "accuracy"));
    json_decref (last);
    double kept = s_best_kept (dir, "holdout", &step);
    cr_expect (at_40 > at_20? step == 40 && kept == at_40: step == 20 && kept == at_20,
               "20: %g, 40: %g; kept %g of step %lld", at_20, at_40, kept, (long long) step);
    //  The whole job on this machine with no evaluator: the chief's.
    const char *job [] = {"--local", "--model", "linear", "--evaluators", "0", "--max-steps",
                          "20", "--eval-name", "holdout", "--model-dir", local, NULL};
    result = za_test_run (job, 300);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    char *local_metrics = za_test_join (local, "eval_holdout/metrics.jsonl");
    cr_expect (strstr (result.out, local_metrics), "%s", result.out);
    cr_expect_gt (s_best_kept (local, "holdout", &step), 0.3);
    za_test_result_free (&result);
    free (local_metrics), free (onnx), free (unnamed), free (metrics), free (local), free (dir);
    za_test_dir_remove ();
}

//  A restarted evaluator walks its metrics.jsonl again: early stopping's
//  rule by the rule's own metric, and the best copy must beat what
//  best.json says is kept. Here loss improved at step 200, so step 300
//  (within the rule's 150 steps of it) asks for no stop, where a walk by
//  --best-metric's accuracy (0.01 at step 100, then 0.99: not better under
//  the rule's "lower") would; and accuracy 0.99 at step 200 was never
//  kept, so step 300 is.
Test (evaluator, a_restarted_evaluator_walks_each_metric_by_its_own_name)
{
    s_case_t c;
    s_case_setup_prompt (&c);
    c.config.max_steps = 1000;
    c.config.spec.stop_if_no_improvement = "loss,150";
    char *eval = za_test_path ("eval");
    cr_assert_eq (za_mkdirs (eval), 0);
    free (za_test_write ("eval/metrics.jsonl",
                         "{\"global_step\": 100, \"loss\": 9.0, \"accuracy\": 0.01}\n"
                         "{\"global_step\": 200, \"loss\": 8.0, \"accuracy\": 0.99}\n"));
    s_save (&c, 300);
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    //  The rule is asked after step 300's evaluation, not after the final one.
    cr_expect (s_evaluated (&c, 300, 10.0), "step 300 was not evaluated");
    int64_t step;
    cr_expect_gt (s_best_kept (za_test_dir (), NULL, &step), 0);
    cr_expect_eq (step, 300, "the best kept is of step %lld", (long long) step);
    s_save (&c, 1000);
    s_expect_end (&evaluator, 2);
    cr_expect_eq (za_early_stop_requested (za_test_dir ()), 0, "a stop was asked for");
    free (eval);
    s_case_teardown (&c);
}

//  The final checkpoint is evaluated as soon as it is there, whatever the
//  start delay and the throttle (TensorFlow's local train_and_evaluate
//  evaluates it as training ends): once waited 120 s, or 600.
Test (evaluator, the_final_checkpoint_waits_for_no_delay)
{
    s_case_t c;
    s_case_setup (&c, 0);
    c.config.spec.start_delay_secs = 600;
    c.config.spec.throttle_secs = 600;
    c.config.max_steps = 100;
    s_save (&c, 100);
    double t0 = za_clock_wall ();
    zactor_t *evaluator = zactor_new (za_evaluator_actor, &c.config);
    int64_t evaluations = 0;
    int rc = za_role_wait (evaluator, TIMEOUT_S, NULL, NULL, &evaluations);
    zactor_destroy (&evaluator);
    cr_expect_eq (rc, 0, "evaluator ended with %d", rc);
    int64_t steps [4];
    double starts [4];
    cr_assert_eq (s_evaluations ("eval", steps, starts, 4), 1);
    cr_expect_eq (steps [0], 100);
    cr_expect_lt (starts [0] - t0, 300, "evaluated %.0f s after the start", starts [0] - t0);
    s_case_teardown (&c);
}

//  An evaluator given another model than the checkpoints' ends with an
//  error (it once replayed none of them with exit 0, and, following, skipped
//  the final checkpoint and waited for ever).
Test (evaluator, another_model_than_the_checkpoints_is_an_error)
{
    const char *dir = za_test_dir_create ("za_evaluator_model");
    const char *train [] = {"--max-steps", "20", "--no-eval", "--threads", "1", "--model-dir",
                            dir, NULL};
    za_test_result_t result = za_test_run (train, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *replay [] = {"--role", "evaluator", "--replay", "--model-dir", dir, "--model",
                             "dnn", NULL};
    const char *follow [] = {"--role", "evaluator", "--model-dir", dir, "--model", "dnn",
                             "--start-delay-secs", "0", "--max-steps", "20", NULL};
    const char *const *cases [] = {replay, follow};
    for (int k = 0; k < 2; k++) {
        result = za_test_run (cases [k], 300);
        cr_expect_eq (result.exit_code, 1, "%s: %s", k? "following": "replay", result.err);
        cr_expect (strstr (result.err, "cannot evaluate the checkpoints of"), "%s",
                   result.err);
        za_test_result_free (&result);
    }
    za_test_dir_remove ();
}

//  A final checkpoint that cannot be read ends the evaluator with one error
//  and the data's exit code (it waited for a newer one that never comes);
//  the same evaluator on the checkpoint written whole again evaluates it.
Test (evaluator, a_corrupt_final_checkpoint_is_an_error_not_a_wait)
{
    const char *dir = za_test_dir_create ("za_evaluator_final");
    const char *train [] = {"--model", "linear", "--max-steps", "30", "--save-checkpoints-steps",
                            "10", "--no-eval", "--threads", "1", "--model-dir", dir, NULL};
    za_test_result_t result = za_test_run (train, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    char *path = za_checkpoint_path (dir, 30);
    size_t size;
    uint8_t *whole = za_test_read_file (path, &size);
    cr_assert (whole && size > 100);
    whole [size - 5] ^= 0x55;               //  a byte of the last tensor's data
    FILE *f = fopen (path, "wb");
    cr_assert_not_null (f);
    cr_assert_eq (fwrite (whole, 1, size, f), size);
    fclose (f);
    const char *follow [] = {"--role", "evaluator", "--model", "linear", "--max-steps", "30",
                             "--start-delay-secs", "0", "--throttle-secs", "0", "--threads",
                             "1", "--model-dir", dir, NULL};
    result = za_test_run (follow, 120);
    cr_expect_eq (result.exit_code, 65, "%s", result.err);
    cr_expect (strstr (result.err, "the final checkpoint (step 30) cannot be evaluated"), "%s",
               result.err);
    za_test_result_free (&result);
    whole [size - 5] ^= 0x55;
    f = fopen (path, "wb");
    cr_assert_not_null (f);
    cr_assert_eq (fwrite (whole, 1, size, f), size);
    fclose (f);
    result = za_test_run (follow, 120);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "evaluated the final checkpoint"), "%s", result.err);
    za_test_result_free (&result);
    free (whole), free (path);
    za_test_dir_remove ();
}

//  A replay on other data (--eval-data on the command line) names its
//  results: without --eval-name it would have written over the training's
//  eval/metrics.jsonl and export/best (a best measured on other data).
Test (evaluator, a_replay_on_other_data_must_be_named)
{
    const char *dir = za_test_dir_create ("za_evaluator_replay_name");
    const char *train [] = {"--model", "linear", "--max-steps", "10", "--no-eval", "--threads",
                            "1", "--model-dir", dir, NULL};
    za_test_result_t result = za_test_run (train, 300);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *fashion = ZA_FASHION_MNIST_DIR;         //  its t10k-* files
    const char *unnamed [] = {"--role", "evaluator", "--replay", "--model", "linear",
                              "--eval-data", fashion, "--model-dir", dir, NULL};
    result = za_test_run (unnamed, 120);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "give --eval-name NAME too"), "%s", result.err);
    za_test_result_free (&result);
    char *eval = za_test_join (dir, "eval");
    cr_expect_neq (access (eval, F_OK), 0, "the refused replay wrote %s", eval);
    free (eval);
    const char *named [] = {"--role", "evaluator", "--replay", "--model", "linear",
                            "--eval-data", fashion, "--eval-name", "other", "--model-dir", dir,
                            NULL};
    result = za_test_run (named, 120);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    char *other = za_test_join (dir, "eval_other/metrics.jsonl");
    cr_expect_eq (access (other, F_OK), 0, "no %s", other);
    free (other);
    za_test_dir_remove ();
}

//  --train-and-evaluate whose evaluator fails mid-training (its results
//  cannot be written: metrics.jsonl turned into a folder) stops the training
//  after the step it is at, saved, with the evaluator's error (training went
//  on to max_steps and said the failure only then).
Test (evaluator, a_failed_evaluator_stops_train_and_evaluate)
{
    const char *dir = za_test_dir_create ("za_evaluator_failed");
    char *out = za_test_path ("te.out"), *err = za_test_path ("te.err");
    const char *args [] = {"--model", "linear", "--max-steps", "100000",
                           "--save-checkpoints-steps", "50", "--train-and-evaluate",
                           "--start-delay-secs", "0", "--throttle-secs", "0", "--threads", "1",
                           "--model-dir", dir, NULL};
    pid_t pid = za_test_spawn (args, out, err);
    char *metrics = za_test_join (dir, "eval/metrics.jsonl");
    free (za_test_wait_for_text (metrics, "global_step", 120));
    char *moved = za_test_join (dir, "eval/metrics.moved");
    cr_assert_eq (rename (metrics, moved), 0);
    cr_assert_eq (mkdir (metrics, 0755), 0);
    int status = za_test_wait (pid, 300);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 1, "status %d", status);
    char *log = (char *) za_test_read_file (err, NULL);
    const char *at = log? strstr (log, "training stopped at step "): NULL;
    int64_t step = at? strtoll (at + strlen ("training stopped at step "), NULL, 10): -1;
    cr_expect (at && strstr (log, "metrics.jsonl"), "%s", log? log: "(no log)");
    cr_expect (step > 0 && step < 100000, "%s", log? log: "(no log)");
    cr_expect_eq (za_checkpoint_newest_step (dir), step);
    free (log), free (moved), free (metrics), free (out), free (err);
    za_test_dir_remove ();
}
