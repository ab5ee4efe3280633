/*  test_trace.c: --trace on real jobs: a --local cluster under ps-async,
    ps-sync and allreduce, a supervising broker's job, and one process, each
    write one file that parses as Chrome trace-event JSON: every event has
    ph, ts, pid and tid, every duration is >= 0, every task of the job is a
    process in it, and each step's phases lie inside that step on its task.
    Every task's times are on the broker's clock (the same host's, or
    estimated within half a round trip); a trace kept small turns over and
    keeps its newest steps.                                                 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_util.h"
#include "za_test.h"

#define RUN_TIMEOUT_S 600
#define PIDS_MAX 16
#define EPSILON_US 0.01

//  The step events of one process, by step.
typedef struct {
    char name [64];
    char label [160];                   //  how its times were put on the broker's clock
    int steps, phases, inside, evaluations, applies, checkpoints, buckets, forwards, backwards;
    json_int_t first_step, last_step;   //  of its step events
} s_task_t;

static s_task_t *
s_task_of (s_task_t *tasks, json_int_t pid)
{
    cr_assert (pid >= 1 && pid < PIDS_MAX, "pid %lld", (long long) pid);
    return &tasks [pid];
}

//  Checks the file and returns each process's counts in tasks [pid].
static void
s_check_trace (const char *path, s_task_t *tasks)
{
    memset (tasks, 0, PIDS_MAX * sizeof *tasks);
    json_error_t error;
    json_t *root = json_load_file (path, 0, &error);
    cr_assert_not_null (root, "%s is not JSON: %s (line %d)", path, error.text, error.line);
    json_t *events = json_object_get (root, "traceEvents");
    cr_assert (json_is_array (events) && json_array_size (events) > 0, "no traceEvents");
    size_t i;
    json_t *event;
    json_array_foreach (events, i, event) {
        const char *ph = json_string_value (json_object_get (event, "ph"));
        cr_assert (ph && json_is_integer (json_object_get (event, "pid"))
                   && json_is_integer (json_object_get (event, "tid")),
                   "event %zu lacks ph, pid or tid", i);
        s_task_t *task = s_task_of (tasks, json_integer_value (json_object_get (event, "pid")));
        const char *name = json_string_value (json_object_get (event, "name"));
        json_t *args = json_object_get (event, "args");
        if (!strcmp (ph, "M")) {
            if (!strcmp (name, "process_name"))
                snprintf (task->name, sizeof task->name, "%s",
                          json_string_value (json_object_get (args, "name")));
            if (!strcmp (name, "process_labels"))
                snprintf (task->label, sizeof task->label, "%s",
                          json_string_value (json_object_get (args, "labels")));
            continue;
        }
        cr_assert_str_eq (ph, "X", "event %zu", i);
        cr_assert (json_is_number (json_object_get (event, "ts")), "event %zu has no ts", i);
        cr_assert_geq (json_number_value (json_object_get (event, "dur")), 0, "event %zu", i);
        if (!strcmp (name, "step")) {
            json_int_t step = json_integer_value (json_object_get (args, "step"));
            task->first_step = task->steps && task->first_step < step? task->first_step: step;
            task->last_step = task->steps && task->last_step > step? task->last_step: step;
            task->steps++;
        }
        task->evaluations += !strcmp (name, "evaluation");
        task->checkpoints += !strcmp (name, "checkpoint");
        task->applies += !strcmp (name, "apply");
        task->buckets += !strcmp (name, "bucket");
        task->forwards += !strcmp (name, "forward");
        task->backwards += !strcmp (name, "backward");
    }
    //  Each phase of a trainer's step inside that step.
    json_array_foreach (events, i, event) {
        const char *name = json_string_value (json_object_get (event, "name"));
        json_int_t pid = json_integer_value (json_object_get (event, "pid"));
        json_int_t tid = json_integer_value (json_object_get (event, "tid"));
        //  rows 2 (input), 3 (compute), 4 (exchange), 5 (apply), 8 (bucket)
        //  of a trainer
        if (strcmp (json_string_value (json_object_get (event, "ph")), "X")
            || ((tid < 2 || tid > 5) && tid != 8) || !s_task_of (tasks, pid)->steps)
            continue;
        json_int_t step = json_integer_value (json_object_get (json_object_get (event, "args"),
                                                               "step"));
        double ts = json_number_value (json_object_get (event, "ts"));
        double end = ts + json_number_value (json_object_get (event, "dur"));
        int inside = 0;
        size_t j;
        json_t *other;
        json_array_foreach (events, j, other) {
            if (json_integer_value (json_object_get (other, "pid")) != pid
                || json_integer_value (json_object_get (other, "tid")) != 1
                || json_integer_value (json_object_get (json_object_get (other, "args"), "step"))
                   != step)
                continue;
            double from = json_number_value (json_object_get (other, "ts"));
            double to = from + json_number_value (json_object_get (other, "dur"));
            inside = ts >= from - EPSILON_US && end <= to + EPSILON_US;
            break;
        }
        s_task_t *task = s_task_of (tasks, pid);
        task->phases++;
        task->inside += inside;
        cr_expect (inside, "%s's %s of step %lld is not inside its step", task->name, name,
                   (long long) step);
    }
    json_decref (root);
}

//  Runs zactor-run with args, which end well and say where their trace
//  went, and checks that trace (s_check_trace).
static void
s_run_traced (const char *const *args, const char *trace, s_task_t *tasks)
{
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "trace: "), "%s", result.err);
    za_test_result_free (&result);
    s_check_trace (trace, tasks);
}

static s_task_t *
s_find (s_task_t *tasks, const char *name)
{
    for (int pid = 1; pid < PIDS_MAX; pid++)
        if (!strcmp (tasks [pid].name, name))
            return &tasks [pid];
    return NULL;
}

//  The offset and round trip a label "clock: +X us to the broker's,
//  estimated over a Y us round trip" says; 0 when it says otherwise.
static int
s_estimate (const char *label, double *offset, double *rtt)
{
    return sscanf (label, "clock: %lf us to the broker's, estimated over a %lf us round trip",
                   offset, rtt) == 2;
}

//  A --local job under strategy; estimate: its tasks estimate their
//  clock's offset (ZA_CLOCK_ESTIMATE=1) as tasks on other hosts than the
//  broker's do.
static void
s_local (const char *strategy, int with_ps, int estimate)
{
    if (estimate)
        setenv ("ZA_CLOCK_ESTIMATE", "1", 1);
    const char *dir = za_test_dir_create ("za_trace");
    char *trace = za_test_join (dir, "trace.json"), *model = za_test_join (dir, "run");
    //  All-reduce: the gradients in buckets, each going round beside backward.
    //  ps-async: nobody waits for a trainer that starts late; enough steps
    //  that each gets some.
    const char *args [] = {"--local", "--strategy", strategy, "--max-steps",
                           strcmp (strategy, "ps-async")? "120": "600",
                           "--save-checkpoints-steps", "60", "--model-dir", model, "--trace",
                           trace, "--bucket-kib", with_ps? "0": "16", NULL};
    s_task_t tasks [PIDS_MAX];
    s_run_traced (args, trace, tasks);
    const char *trainers [] = {"chief-0", "worker-0", "worker-1"};
    for (int k = 0; k < 3; k++) {
        s_task_t *task = s_find (tasks, trainers [k]);
        cr_assert_not_null (task, "%s: no %s in the trace", strategy, trainers [k]);
        cr_expect_gt (task->steps, 0, "%s: %s has no step", strategy, trainers [k]);
        cr_expect_gt (task->phases, 3 * task->steps - 1, "%s: %s's steps have no phases",
                      strategy, trainers [k]);
        cr_expect (task->forwards >= task->steps && task->backwards == task->forwards,
                   "%s: %s: %d forwards, %d backwards in %d steps", strategy, trainers [k],
                   task->forwards, task->backwards, task->steps);
        if (!with_ps)
            cr_expect_gt (task->buckets, task->steps, "%s: %s: %d buckets in %d steps",
                          strategy, trainers [k], task->buckets, task->steps);
        printf ("trace %s: %s: %d steps, %d phases (%d buckets), %d inside them; %s\n",
                strategy, trainers [k], task->steps, task->phases, task->buckets,
                task->inside, task->label);
    }
    //  Every task's times on the broker's clock: on its machine, the same
    //  clock; estimated, within half the round trip of it (the true offset
    //  here is 0).
    const char *all [] = {"chief-0", "worker-0", "worker-1", "evaluator-0", "ps-0"};
    for (int k = 0; k < (with_ps? 5: 4); k++) {
        s_task_t *task = s_find (tasks, all [k]);
        cr_assert_not_null (task, "%s: no %s in the trace", strategy, all [k]);
        double offset = 0, rtt = 0;
        if (!estimate)
            cr_expect_str_eq (task->label, "clock: the broker's host", "%s: %s", strategy,
                              all [k]);
        else {
            cr_expect (s_estimate (task->label, &offset, &rtt), "%s: %s: %s", strategy, all [k],
                       task->label);
            cr_expect (rtt > 0 && offset >= -rtt / 2 - 0.2 && offset <= rtt / 2 + 0.2,
                       "%s: %s: %s", strategy, all [k], task->label);
        }
    }
    cr_expect_gt (s_find (tasks, "chief-0")->checkpoints, 0, "%s: no checkpoint", strategy);
    s_task_t *evaluator = s_find (tasks, "evaluator-0");
    cr_assert_not_null (evaluator, "%s: no evaluator in the trace", strategy);
    cr_expect_gt (evaluator->evaluations, 0, "%s: the evaluator evaluated nothing", strategy);
    s_task_t *ps = s_find (tasks, "ps-0");
    if (with_ps) {
        cr_assert_not_null (ps, "%s: no ps in the trace", strategy);
        cr_expect_gt (ps->applies, 0, "%s: the ps applied nothing", strategy);
    }
    else
        cr_expect_null (ps, "%s: a ps in an all-reduce job's trace", strategy);
    free (trace), free (model);
    za_test_dir_remove ();
}

Test (trace, a_ps_async_cluster_writes_one_trace, .timeout = 600)
{
    s_local ("ps-async", 1, 1);
}

Test (trace, a_ps_sync_cluster_writes_one_trace, .timeout = 600)
{
    s_local ("ps-sync", 1, 0);
}

Test (trace, an_allreduce_cluster_writes_one_trace, .timeout = 600)
{
    s_local ("allreduce", 0, 0);
}

Test (trace, one_process_writes_its_trace, .timeout = 300)
{
    const char *dir = za_test_dir_create ("za_trace_one");
    char *trace = za_test_join (dir, "trace.json"), *model = za_test_join (dir, "run");
    const char *args [] = {"--max-steps", "50", "--model-dir", model, "--trace", trace, NULL};
    s_task_t tasks [PIDS_MAX];
    s_run_traced (args, trace, tasks);
    s_task_t *trainer = s_find (tasks, "trainer-0");
    cr_assert_not_null (trainer);
    cr_expect_eq (trainer->steps, 50);
    //  Input, compute and apply of each step, and within compute the
    //  forward and backward of each of the first thread's micro-batches.
    cr_expect (trainer->forwards >= 50 && trainer->backwards == trainer->forwards,
               "%d forwards, %d backwards", trainer->forwards, trainer->backwards);
    cr_expect_eq (trainer->phases, 150 + trainer->forwards + trainer->backwards);
    cr_expect_eq (trainer->inside, trainer->phases);
    //  A second run in the same model dir traces itself alone.
    const char *again [] = {"--max-steps", "60", "--model-dir", model, "--trace", trace, NULL};
    s_run_traced (again, trace, tasks);
    cr_expect_eq (s_find (tasks, "trainer-0")->steps, 10);
    //  A trace kept to 16 KiB turns its file over at 8 (at a step's start):
    //  the merged trace holds the newest steps, without a gap, to the last,
    //  each with its phases.
    const char *small [] = {"--max-steps", "260", "--model-dir", model, "--trace", trace,
                            "--trace-max-mb", "0.015625", NULL};
    s_run_traced (small, trace, tasks);
    char *older = za_test_join (model, "trace/trainer-0.jsonl.1");
    size_t size = 0;
    free (za_test_read_file (older, &size));
    cr_expect (size >= 8192 && size < 10240, "%s: %zu bytes", older, size);
    trainer = s_find (tasks, "trainer-0");
    cr_expect (trainer->steps > 10 && trainer->steps < 200, "%d steps", trainer->steps);
    cr_expect_eq (trainer->last_step - trainer->first_step + 1, trainer->steps);
    cr_expect_eq (trainer->last_step, 259);
    cr_expect_eq (trainer->inside, trainer->phases);
    free (older);
    free (trace), free (model);
    za_test_dir_remove ();
}

Test (trace, a_broker_job_merges_its_tasks_traces, .timeout = 600)
{
    //  No launcher: the broker (supervising here; its tasks could as well
    //  be started by hand with --broker) merges MODEL_DIR/trace/ at the end.
    const char *dir = za_test_dir_create ("za_trace_broker");
    char *trace = za_test_join (dir, "trace.json"), *model = za_test_join (dir, "run");
    char *bind = za_test_free_endpoint ();
    //  Kept to 4 KiB a task: the ps, which traces no step, turns its file
    //  over at 2 KiB exactly (it kept 2.5 KiB there, 1.25 times the bound).
    const char *args [] = {"--role", "broker", "--bind", bind, "--supervise", "--model-dir",
                           model, "--max-steps", "60", "--workers", "1", "--ps", "1",
                           "--evaluators", "0", "--trace", trace, "--trace-max-mb",
                           "0.00390625", NULL};
    s_task_t tasks [PIDS_MAX];
    s_run_traced (args, trace, tasks);
    const char *all [] = {"chief-0", "worker-0", "ps-0"};
    for (int k = 0; k < 3; k++) {
        s_task_t *task = s_find (tasks, all [k]);
        cr_assert_not_null (task, "no %s in the trace", all [k]);
        cr_expect_str_eq (task->label, "clock: the broker's host", "%s", all [k]);
    }
    cr_expect_gt (s_find (tasks, "chief-0")->steps, 0);
    cr_expect_eq (s_find (tasks, "chief-0")->inside, s_find (tasks, "chief-0")->phases);
    cr_expect_gt (s_find (tasks, "ps-0")->applies, 0);
    char *older = za_test_join (model, "trace/ps-0.jsonl.1");
    size_t size = 0;
    free (za_test_read_file (older, &size));
    cr_expect (size >= 2048 && size < 2048 + 256, "%s: %zu bytes", older, size);
    free (older);
    free (bind), free (trace), free (model);
    za_test_dir_remove ();
}
