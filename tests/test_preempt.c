/*  test_preempt.c: preemption as Slurm and Kubernetes signal it (SIGTERM),
    with real processes. One process, and --local under every strategy:
    SIGTERM writes the checkpoint of the step the trainers stopped at, the
    job exits with the requeue code (75) with every process gone, and the
    same command run again resumes from that checkpoint; under all-reduce
    and ps-sync the resumed run's checkpoint is, byte for byte, that of a
    run never stopped. SIGTERM to one
    worker alone stops the whole job the same way (its report tells the
    broker). --requeue-exit-code sets the code. A static cluster's worker
    that waits for the chief stops at once on SIGTERM (75) or Ctrl-C (130). */
#include "za_test.h"
#include "za/za_checkpoint.h"
#include "za/za_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 240
#define PHASE_TIMEOUT_S 120
#define MAX_PIDS 8

static void
s_setup (void)
{
    za_test_dir_create ("za_preempt");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (preempt, .init = s_setup, .fini = s_teardown, .timeout = 900 * ZA_TEST_SLOWDOWN);

static int
s_exit_code (int status)
{
    return WIFEXITED (status)? WEXITSTATUS (status): -1;
}

//  The step of "preempted at step S" in text, or -1.
static int64_t
s_preempted_step (const char *text)
{
    const char *at = text? strstr (text, "preempted at step "): NULL;
    return at? strtoll (at + strlen ("preempted at step "), NULL, 10): -1;
}

//  One process: SIGTERM at a step well past the start; the checkpoint of
//  the step reached, exit 75; the same command again resumes there.
Test (preempt, one_process_saves_the_step_it_reached_and_resumes_there)
{
    char *dir = za_test_path ("single");
    char *out = za_test_path ("single.out"), *err = za_test_path ("single.err");
    const char *args [] = {"--model-dir", dir, "--max-steps", "100000", "--threads", "1",
                           "--no-eval", "--save-checkpoints-secs", "100000", NULL};
    pid_t pid = za_test_spawn (args, out, err);
    //  (zactor-run logs on stderr.)
    free (za_test_wait_for_text (err, "step 200/", PHASE_TIMEOUT_S));
    cr_assert_eq (kill (pid, SIGTERM), 0);
    int status = za_test_wait (pid, RUN_TIMEOUT_S);
    char *log = (char *) za_test_read_file (err, NULL);
    cr_expect_eq (s_exit_code (status), 75, "%s", log);
    int64_t stopped = s_preempted_step (log);
    cr_assert_geq (stopped, 200, "%s", log);
    cr_expect (strstr (log, "run the same command again"), "%s", log);
    free (log);
    //  Nothing was lost: the checkpoint is of the step reached, and whole.
    cr_expect_eq (za_test_expect_all_load (dir, NULL), stopped);
    char more [32];
    snprintf (more, sizeof more, "%" PRId64, stopped + 30);
    const char *again [] = {"--model-dir", dir, "--max-steps", more, "--threads", "1",
                            "--no-eval", NULL};
    za_test_result_t result = za_test_run (again, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s%s", result.out, result.err);
    char restored [64];
    snprintf (restored, sizeof restored, "restored step %" PRId64 " ", stopped);
    cr_expect (strstr (result.err, restored), "%s", result.err);
    cr_expect_eq (za_checkpoint_newest_step (dir), stopped + 30);
    za_test_result_free (&result);
    free (out), free (err), free (dir);
}

//  The pids of the broker and every role in a state (at most MAX_PIDS).
static int
s_pids (json_t *state, pid_t *pids)
{
    int count = 0;
    json_t *broker = json_object_get (state, "broker");
    pids [count++] = (pid_t) json_integer_value (json_object_get (broker, "pid"));
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get (state, "roles"), i, row)
        if (count < MAX_PIDS)
            pids [count++] = (pid_t) json_integer_value (json_object_get (row, "pid"));
    return count;
}

//  Every role running, the job past step 100.
static int
s_training (json_t *state, void *arg)
{
    int want = *(int *) arg;
    size_t i;
    json_t *row;
    int running = 0;
    json_array_foreach (json_object_get (state, "roles"), i, row) {
        const char *text = json_string_value (json_object_get (row, "state"));
        running += text && strcmp (text, "running") == 0;
    }
    return running >= want
        && json_integer_value (json_object_get (state, "global_step")) > 100;
}

//  --local under `strategy` (ps: how many) until training runs, then SIGTERM
//  to `whom` ("launcher", or a role's name: that task alone). Expects exit
//  75, every process gone, the checkpoint of the step the job says it
//  stopped at, and every trainer's log stopped there; then the same command
//  to 30 more steps resumes from it, and under the synchronous strategies
//  (`whole`) ends with the bytes of a run never stopped. `tag` names the
//  model dir.
static void
s_local_case (const char *tag, const char *strategy, const char *ps, const char *whom,
              int whole)
{
    char *dir = za_test_path (tag);
    char name [64];
    snprintf (name, sizeof name, "%s.out", tag);
    char *out = za_test_path (name);
    const char *args [] = {"--local", "--strategy", strategy, "--workers", "1", "--ps", ps,
                           "--model-dir", dir, "--max-steps", "100000", "--threads", "1",
                           "--no-eval", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    //  chief, worker, evaluator, and the ps.
    int roles = 3 + atoi (ps);
    json_t *state = za_test_wait_for (broker, s_training, &roles, "training to run",
                                      PHASE_TIMEOUT_S);
    pid_t pids [MAX_PIDS];
    int count = s_pids (state, pids);
    pid_t target = local;
    if (strcmp (whom, "launcher") != 0) {
        json_t *row = za_test_row (state, whom, 0);
        cr_assert_not_null (row, "%s: no %s", tag, whom);
        target = (pid_t) json_integer_value (json_object_get (row, "pid"));
    }
    json_decref (state);
    cr_assert_gt (target, 1);
    cr_assert_eq (kill (target, SIGTERM), 0);
    int status = za_test_wait (local, RUN_TIMEOUT_S);
    char *log = (char *) za_test_read_file (out, NULL);
    cr_expect_eq (s_exit_code (status), 75, "%s (%s): %s", tag, whom, log);
    int64_t stopped = s_preempted_step (log);
    cr_assert_gt (stopped, 100, "%s: %s", tag, log);
    free (log);
    for (int p = 0; p < count; p++)
        cr_expect (pids [p] > 1 && kill (pids [p], 0) != 0, "%s: pid %d outlived the "
                   "preemption", tag, (int) pids [p]);
    cr_expect_eq (za_test_expect_all_load (dir, NULL), stopped, "%s", tag);
    //  Every trainer stopped at that step (all-reduce ranks and ps-sync
    //  workers step together; ps-async's workers at the ps's step).
    char logs [PATH_MAX], line [96];
    snprintf (line, sizeof line, "preempted at step %" PRId64 " ", stopped);
    const char *trainers [] = {"chief-0", "worker-0"};
    for (int t = 0; t < 2; t++) {
        snprintf (logs, sizeof logs, "%s/logs/%s.log", dir, trainers [t]);
        char *text = (char *) za_test_read_file (logs, NULL);
        cr_expect (text && strstr (text, line), "%s: %s has no '%s': %s", tag, trainers [t],
                   line, text? text + (strlen (text) > 1500? strlen (text) - 1500: 0): "");
        free (text);
    }
    snprintf (logs, sizeof logs, "%s/events.jsonl", dir);
    char *events = (char *) za_test_read_file (logs, NULL);
    cr_expect (events && strstr (events, "\"event\":\"preempted\""), "%s: %s", tag, events);
    free (events);
    //  Run again: from the checkpoint, to 30 more steps.
    char more [32];
    snprintf (more, sizeof more, "%" PRId64, stopped + 30);
    const char *again [] = {"--local", "--strategy", strategy, "--workers", "1", "--ps", ps,
                            "--model-dir", dir, "--max-steps", more, "--threads", "1",
                            "--no-eval", NULL};
    za_test_result_t result = za_test_run (again, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s: %s%s", tag, result.out, result.err);
    //  (ps-async may end a step past max_steps: the other trainer's push
    //  was in flight.)
    int64_t newest = za_checkpoint_newest_step (dir), slack = strcmp (strategy, "ps-async") == 0;
    cr_expect (newest >= stopped + 30 && newest <= stopped + 30 + slack, "%s: newest checkpoint "
               "%" PRId64 ", not %" PRId64, tag, newest, stopped + 30);
    snprintf (logs, sizeof logs, "%s/logs/chief-0.log", dir);
    char *text = (char *) za_test_read_file (logs, NULL);
    snprintf (line, sizeof line, "restored step %" PRId64 " ", stopped);
    cr_expect (text && strstr (text, line), "%s: the chief did not resume from %" PRId64,
               tag, stopped);
    free (text);
    za_test_result_free (&result);
    //  The synchronous strategies: stopped and resumed, the same bytes as a
    //  run never stopped (the input reads on from the stopped step's place).
    if (whole && strcmp (strategy, "ps-async") != 0) {
        snprintf (name, sizeof name, "%s-whole", tag);
        char *straight_dir = za_test_path (name);
        const char *straight [] = {"--local", "--strategy", strategy, "--workers", "1", "--ps",
                                   ps, "--model-dir", straight_dir, "--max-steps", more,
                                   "--threads", "1", "--no-eval", NULL};
        result = za_test_run (straight, RUN_TIMEOUT_S);
        cr_expect_eq (result.exit_code, 0, "%s: %s%s", tag, result.out, result.err);
        za_test_result_free (&result);
        char a [PATH_MAX], b [PATH_MAX];
        snprintf (a, sizeof a, "%s/model.ckpt-%s.safetensors", dir, more);
        snprintf (b, sizeof b, "%s/model.ckpt-%s.safetensors", straight_dir, more);
        size_t size_a = 0, size_b = 0;
        char *bytes_a = (char *) za_test_read_file (a, &size_a);
        char *bytes_b = (char *) za_test_read_file (b, &size_b);
        int same = bytes_a && bytes_b && size_a == size_b
                && memcmp (bytes_a, bytes_b, size_a) == 0;
        cr_expect (same, "%s: stopped at %" PRId64 " and resumed, step %s is not the uninterrupted "
                   "run's, byte for byte", tag, stopped, more);
        free (bytes_a), free (bytes_b), free (straight_dir);
    }
    free (out), free (dir);
}

Test (preempt, sigterm_to_local_under_allreduce)
{
    s_local_case ("allreduce", "allreduce", "0", "launcher", 1);
}

Test (preempt, sigterm_to_local_under_ps_async)
{
    s_local_case ("async", "ps-async", "1", "launcher", 1);
}

Test (preempt, sigterm_to_local_under_ps_sync)
{
    s_local_case ("sync", "ps-sync", "1", "launcher", 1);
}

//  One task alone gets SIGTERM (its node drained): its report tells the
//  broker, which stops every task the same way. (That a resumed run ends
//  with an uninterrupted one's bytes, the launcher's cases show.)
Test (preempt, sigterm_to_one_worker_stops_the_whole_job)
{
    s_local_case ("one_sync", "ps-sync", "1", "worker", 0);
    s_local_case ("one_ring", "allreduce", "0", "worker", 0);
}

//  --requeue-exit-code picks the code; one the program uses otherwise is
//  refused.
Test (preempt, the_requeue_exit_code_is_a_setting)
{
    char *dir = za_test_path ("code");
    char *out = za_test_path ("code.out"), *err = za_test_path ("code.err");
    const char *args [] = {"--model-dir", dir, "--max-steps", "100000", "--threads", "1",
                           "--no-eval", "--requeue-exit-code", "99", NULL};
    pid_t pid = za_test_spawn (args, out, err);
    free (za_test_wait_for_text (err, "step 100/", PHASE_TIMEOUT_S));
    cr_assert_eq (kill (pid, SIGTERM), 0);
    cr_expect_eq (s_exit_code (za_test_wait (pid, RUN_TIMEOUT_S)), 99);
    const char *bad [] = {"--model-dir", dir, "--requeue-exit-code", "1", NULL};
    za_test_result_t result = za_test_run (bad, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 2, "%s%s", result.out, result.err);
    cr_expect (strstr (result.err, "requeue-exit-code"), "%s", result.err);
    za_test_result_free (&result);
    free (out), free (err), free (dir);
}

//  One process: Ctrl-C (SIGINT) ends the training at the step under way,
//  exit 130, with that step's checkpoint and no final evaluation (the loop
//  once went on to max_steps and exited 0). With --train-and-evaluate its
//  evaluator stops too, no error said (it said "the evaluator failed" and
//  "no evaluation", exit 1).
Test (preempt, ctrl_c_stops_one_process_at_once)
{
    for (int with_evaluator = 0; with_evaluator < 2; with_evaluator++) {
        char *dir = za_test_path (with_evaluator? "interrupted-te": "interrupted");
        char *out = za_test_path ("int.out"), *err = za_test_path ("int.err");
        const char *args [] = {"--model-dir", dir, "--max-steps", "100000", "--threads", "1",
                               with_evaluator? "--train-and-evaluate": NULL, NULL};
        pid_t pid = za_test_spawn (args, out, err);
        free (za_test_wait_for_text (err, "step 100/", PHASE_TIMEOUT_S));
        cr_assert_eq (kill (pid, SIGINT), 0);
        cr_expect_eq (s_exit_code (za_test_wait (pid, RUN_TIMEOUT_S)), 130);
        char *log = (char *) za_test_read_file (err, NULL);
        const char *at = log? strstr (log, "interrupted at step "): NULL;
        int64_t step = at? strtoll (at + strlen ("interrupted at step "), NULL, 10): -1;
        cr_expect (step >= 100 && step < 100000, "%s", log? log: "(no log)");
        cr_expect_eq (za_checkpoint_newest_step (dir), step);
        cr_expect (log && !strstr (log, "final evaluation") && !strstr (log, "error"), "%s",
                   log);
        free (log), free (out), free (err), free (dir);
    }
}

//  An evaluator following a job gets SIGTERM: it stops, exit 75, and says
//  where it goes on from (it once named the job's checkpoint, in a model
//  dir it may not have).
Test (preempt, an_evaluator_stops_and_says_where_it_goes_on)
{
    char *dir = za_test_path ("followed");
    const char *train [] = {"--model-dir", dir, "--max-steps", "20", "--threads", "1",
                            "--no-eval", NULL};
    za_test_result_t result = za_test_run (train, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    char *out = za_test_path ("eval.out"), *err = za_test_path ("eval.err");
    const char *args [] = {"--role", "evaluator", "--model-dir", dir, "--max-steps", "1000",
                           "--start-delay-secs", "0", "--threads", "1", NULL};
    pid_t pid = za_test_spawn (args, out, err);
    free (za_test_wait_for_text (err, "evaluator: step 20:", PHASE_TIMEOUT_S));
    cr_assert_eq (kill (pid, SIGTERM), 0);
    cr_expect_eq (s_exit_code (za_test_wait (pid, RUN_TIMEOUT_S)), 75);
    char *log = (char *) za_test_read_file (err, NULL);
    cr_expect (log && strstr (log, "the evaluator stops after 1 evaluations")
               && strstr (log, "/eval/metrics.jsonl"), "%s", log? log: "(no log)");
    free (log), free (out), free (err), free (dir);
}

//  A static cluster's worker waiting for the chief to initialise the ps (the
//  chief not yet scheduled, say) has nothing to save: SIGTERM ends it at
//  once with the requeue code, Ctrl-C with 130 (it waited on to
//  --timeout-secs, and Ctrl-C then said the ps did not answer).
Test (preempt, a_worker_waiting_for_the_chief_stops_at_once)
{
    int port = za_test_free_port ();
    char text [256];
    snprintf (text, sizeof text, "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": "
              "[\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\"]}}", za_test_free_port (),
              za_test_free_port (), port);
    char *cluster = za_test_write ("cluster.json", text);
    char *dir = za_test_path ("waiting");
    char *out = za_test_path ("waiting.out"), *ps_err = za_test_path ("ps.err");
    const char *ps_args [] = {"--cluster", cluster, "--role", "ps", "--model", "dnn",
                              "--model-dir", dir, "--timeout-secs", "600", NULL};
    pid_t ps = za_test_spawn (ps_args, out, ps_err);
    const int signals [] = {SIGTERM, SIGINT};
    const int codes [] = {75, 130};
    for (int i = 0; i < 2; i++) {
        char name [32];
        snprintf (name, sizeof name, "worker-%d.err", i);
        char *err = za_test_path (name);
        const char *args [] = {"--cluster", cluster, "--role", "worker", "--model", "dnn",
                               "--model-dir", dir, "--timeout-secs", "600", NULL};
        pid_t worker = za_test_spawn (args, out, err);
        //  It asked the ps and heard they wait for the chief.
        free (za_test_wait_for_text (err, "waits for the chief to initialise it",
                                     PHASE_TIMEOUT_S));
        cr_assert_eq (kill (worker, signals [i]), 0);
        int code = s_exit_code (za_test_wait (worker, 30));
        char *log = (char *) za_test_read_file (err, NULL);
        cr_expect_eq (code, codes [i], "%s", log);
        cr_expect (log && strstr (log, i? "interrupted while waiting for the"
                                        : "preempted (SIGTERM) while waiting for the chief"),
                   "%s", log);
        free (log);
        free (err);
    }
    cr_assert_eq (kill (ps, SIGTERM), 0);
    cr_expect_eq (s_exit_code (za_test_wait (ps, 30)), 75);
    free (cluster), free (dir), free (out), free (ps_err);
}
