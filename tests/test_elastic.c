/*  test_elastic.c: an elastic job (--workers MIN:MAX) grows and shrinks
    while it trains, with real processes. --local starts the chief and one
    worker of `--workers 1:2`; a second worker joins with --role worker
    --broker, trains beside them, and is killed for good (SIGKILL): the
    broker drops it after --elastic-timeout and the others go on; or it
    gets SIGTERM (a node's preemption notice) and leaves, exit 0, the job
    going on without it (torchrun's scale-down; all-reduce's scale-lr case
    and ps-async), with no preemption of the job. Under
    ps-async, ps-sync and allreduce: the first processes keep their pids
    (no restart), the chief's global step never goes back, events.jsonl
    says who joined and who left, the job ends at max_steps with exit 0,
    and its test accuracy is within 0.5 points of a job of a fixed size
    that trained the same steps (ps-async's both with the rate decayed to
    nothing by the end, which takes the noise of async updates out). Under allreduce each re-formation of the
    ring takes at most 5 s (printed). Under ps-sync the joiner finds the
    broker through TF_CONFIG's zactor extension; one that is wrong is
    refused. A broker killed and restarted after two changes of members
    admits a worker that joins then.                                      */
#include "za_test.h"
#include "za/za_checkpoint.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 600
#define PHASE_TIMEOUT_S 180
#define REFORM_MAX_SECS 5.0
#define ACCURACY_POINTS 0.5

static void
s_setup (void)
{
    za_test_dir_create ("za_elastic");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (elastic, .init = s_setup, .fini = s_teardown, .timeout = 1200 * ZA_TEST_SLOWDOWN);

//  What a phase waits for: this many members, the chief (or the joiner,
//  worker 1, when `joiner`) past `step`. Every state seen is checked: the
//  chief's step never goes back.
typedef struct {
    int members;
    int64_t step;
    int joiner;
    int64_t chief_step;                 //  the last one seen
    int went_back;
    int64_t reached;                    //  the chief's step when it came
} s_phase_t;

static int
s_members (json_t *state)
{
    return (int) json_integer_value (json_object_get (json_object_get (state, "membership"),
                                                      "members"));
}

static int
s_reached (json_t *state, void *arg)
{
    s_phase_t *phase = (s_phase_t *) arg;
    json_t *chief = za_test_row (state, "chief", 0);
    int64_t step = chief? json_integer_value (json_object_get (chief, "global_step")): 0;
    if (step < phase->chief_step)
        phase->went_back = 1;
    if (step > phase->chief_step)
        phase->chief_step = step;
    phase->reached = step;
    if (phase->joiner) {
        json_t *row = za_test_row (state, "worker", 1);
        const char *text = row? json_string_value (json_object_get (row, "state")): NULL;
        if (!text || strcmp (text, "running") != 0)
            return 0;
        step = json_integer_value (json_object_get (row, "global_step"));
    }
    return s_members (state) == phase->members && step >= phase->step;
}

//  The pid of role/index in a state (0: none).
static pid_t
s_pid (json_t *state, const char *role, int index)
{
    json_t *row = za_test_row (state, role, index);
    return row? (pid_t) json_integer_value (json_object_get (row, "pid")): 0;
}

//  The largest "in X s" of the chief's "re-formed ... in X s" lines; their
//  count in *count.
static double
s_reform_secs (const char *log, int *count)
{
    double most = 0;
    *count = 0;
    const char *at = log;
    while (at && (at = strstr (at, "the ring is re-formed at step "))) {
        const char *in = strstr (at, " members, in ");
        const char *end = strchr (at, '\n');
        if (in && (!end || in < end)) {
            double secs = strtod (in + strlen (" members, in "), NULL);
            most = secs > most? secs: most;
            (*count)++;
        }
        at = end;
    }
    return most;
}

//  ps-async is not deterministic: the order of the workers' updates
//  differs run to run. At a constant learning rate two identical fixed-size
//  jobs of 6000 steps ended 0.8958 to 0.9034 (six runs; a grown job against
//  one of them missed 0.5 points in 2 of 8 CI runs); with the rate decayed
//  to nothing by the last step (cosine_decay, as a real job would end),
//  0.9034 to 0.9055 (five runs). The accuracies compared are those of jobs
//  that end so; the synchronous strategies repeat themselves at any rate.
static const char *
s_schedule (const char *strategy, const char *steps, char *text, size_t size)
{
    if (strcmp (strategy, "ps-async"))
        return NULL;
    snprintf (text, size, "cosine_decay(decay_steps=%s)", steps);
    return text;
}

//  The test accuracy of a job of one fixed size (the chief and one worker)
//  that trains `steps` under `strategy`.
static double
s_fixed_accuracy (const char *tag, const char *strategy, const char *ps, const char *steps)
{
    char name [64], schedule [64];
    snprintf (name, sizeof name, "%s-fixed", tag);
    char *dir = za_test_path (name);
    const char *rate = s_schedule (strategy, steps, schedule, sizeof schedule);
    const char *args [] = {"--local", "--strategy", strategy, "--workers", "1", "--ps", ps,
                           "--model-dir", dir, "--max-steps", steps, "--threads", "1",
                           "--evaluators", "0", rate? "--lr-schedule": NULL, rate, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s: %s%s", tag, result.out, result.err);
    double accuracy = za_test_accuracy (result.out);
    za_test_result_free (&result);
    free (dir);
    return accuracy;
}

//  `tf_config`: the joiner finds the broker through TF_CONFIG's zactor
//  extension instead of --broker. `rule`: an --elastic-batch other than
//  the default (global), whose learning rates the chief's log shows
//  instead of an accuracy to compare. `leaves`: the joiner gets SIGTERM
//  (a node's preemption notice) and leaves the job, exit 0, instead of
//  being lost to SIGKILL.
static void
s_elastic_case (const char *tag, const char *strategy, const char *ps, int64_t steps,
                int tf_config, const char *rule, int leaves)
{
    char *dir = za_test_path (tag);
    char name [64], steps_text [32], schedule [64];
    snprintf (name, sizeof name, "%s.out", tag);
    char *out = za_test_path (name);
    snprintf (steps_text, sizeof steps_text, "%" PRId64, steps);
    const char *rate = s_schedule (strategy, steps_text, schedule, sizeof schedule);
    const char *args [] = {"--local", "--strategy", strategy, "--workers", "1:2",
                           "--elastic-timeout", "2", "--ps", ps, "--model-dir", dir,
                           "--max-steps", steps_text, "--threads", "1", "--evaluators", "0",
                           "--save-summary-steps", rule? "10": "100",
                           "--elastic-batch", rule? rule: "global",
                           rate? "--lr-schedule": NULL, rate, NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    //  Two trainers at work.
    s_phase_t phase = {.members = 2, .step = steps / 20};
    json_t *state = za_test_wait_for (broker, s_reached, &phase, "two trainers at work",
                                      PHASE_TIMEOUT_S);
    pid_t chief = s_pid (state, "chief", 0), worker = s_pid (state, "worker", 0);
    pid_t ps0 = atoi (ps) > 0? s_pid (state, "ps", 0): 0;
    json_decref (state);
    cr_assert (chief > 1 && worker > 1, "%s: no chief or worker pid", tag);
    //  A third joins while it runs, and trains a while.
    snprintf (name, sizeof name, "%s-joiner.out", tag);
    char *joiner_out = za_test_path (name);
    snprintf (name, sizeof name, "%s-joiner.err", tag);
    char *joiner_err = za_test_path (name);
    const char *join [] = {"--role", "worker", "--broker", broker, "--threads", "1", NULL};
    const char *join_tf [] = {"--threads", "1", NULL};
    char env [512];
    snprintf (env, sizeof env, "{\"cluster\": {\"chief\": [\"localhost:1\"], \"worker\": "
              "[\"localhost:2\", \"localhost:3\"]}, \"task\": {\"type\": \"worker\", "
              "\"index\": 1}, \"zactor\": {\"broker\": \"%s\"}}", broker);
    if (tf_config)
        setenv ("TF_CONFIG", env, 1);
    pid_t joiner = za_test_spawn (tf_config? join_tf: join, joiner_out, joiner_err);
    unsetenv ("TF_CONFIG");
    phase.members = 3;
    phase.step = 0;
    json_decref (za_test_wait_for (broker, s_reached, &phase, "the third trainer admitted",
                                   PHASE_TIMEOUT_S));
    int64_t joined = phase.reached;
    phase.step = joined + steps / 20;
    phase.joiner = 1;
    json_decref (za_test_wait_for (broker, s_reached, &phase, "three trainers at work",
                                   PHASE_TIMEOUT_S));
    phase.joiner = 0;
    cr_assert_lt (phase.reached, steps, "%s: the job ended before the third trainer worked "
                  "long enough to leave", tag);
    //  ... and is lost for good (dropped), or leaves on SIGTERM: the others
    //  go on.
    cr_assert_eq (kill (joiner, leaves? SIGTERM: SIGKILL), 0);
    int joiner_status = za_test_wait (joiner, 60);
    if (leaves) {
        char *said = (char *) za_test_read_file (joiner_err, NULL);
        cr_expect (WIFEXITED (joiner_status) && WEXITSTATUS (joiner_status) == 0,
                   "%s: the leaver's status %d: %s", tag, joiner_status, said);
        cr_expect (said && strstr (said, "left the job"), "%s: %s", tag, said);
        free (said);
    }
    phase.members = 2;
    phase.step = 0;
    json_decref (za_test_wait_for (broker, s_reached, &phase, "the third trainer dropped",
                                   PHASE_TIMEOUT_S));
    phase.step = phase.reached + steps / 50;
    state = za_test_wait_for (broker, s_reached, &phase, "two trainers at work again",
                              PHASE_TIMEOUT_S);
    cr_expect_eq (s_pid (state, "chief", 0), chief, "%s: the chief was restarted", tag);
    cr_expect_eq (s_pid (state, "worker", 0), worker, "%s: worker 0 was restarted", tag);
    //  The leaver's slot is free for a worker that joins (as a torchrun node
    //  rejoins); it was done for good, and the job could not grow back.
    if (leaves) {
        const char *slot = json_string_value (json_object_get (za_test_row (state, "worker", 1),
                                                               "task_state"));
        cr_expect (slot && !strcmp (slot, "vacant"), "%s: the leaver's slot is %s", tag,
                   slot? slot: "(none)");
    }
    if (ps0)
        cr_expect_eq (s_pid (state, "ps", 0), ps0, "%s: the ps was restarted", tag);
    json_decref (state);
    int status = za_test_wait (local, RUN_TIMEOUT_S);
    char *text = (char *) za_test_read_file (out, NULL);
    cr_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s: %s", tag, text);
    cr_expect (!phase.went_back, "%s: the chief's global step went back", tag);
    cr_expect_eq (za_checkpoint_newest_step (dir) >= steps, 1, "%s: the newest checkpoint is "
                  "%" PRId64 ", not %" PRId64, tag, za_checkpoint_newest_step (dir), steps);
    double accuracy = za_test_accuracy (text);
    free (text);
    //  Every change in the events, and no restart.
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/events.jsonl", dir);
    char *events = (char *) za_test_read_file (path, NULL);
    cr_assert_not_null (events);
    cr_expect_eq (za_test_count (events, "\"event\":\"joined\""), 1, "%s: %s", tag, events);
    cr_expect_eq (za_test_count (events, "\"event\":\"left\""), 1, "%s: %s", tag, events);
    cr_expect_eq (za_test_count (events, "\"event\":\"restarted\""), 0, "%s: %s", tag, events);
    cr_expect_eq (za_test_count (events, "\"event\":\"leaving\""), leaves, "%s: %s", tag,
                  events);
    cr_expect_eq (za_test_count (events, "\"event\":\"preempting\""), 0, "%s: %s", tag,
                  events);
    free (events);
    //  All-reduce: the ring re-formed on each change, each within the bound.
    if (strcmp (strategy, "allreduce") == 0) {
        snprintf (path, sizeof path, "%s/logs/chief-0.log", dir);
        char *log = (char *) za_test_read_file (path, NULL);
        int count;
        double most = s_reform_secs (log, &count);
        cr_expect_geq (count, 2, "%s: the ring was re-formed %d times: %s", tag, count, log);
        char *joiner_log = (char *) za_test_read_file (joiner_err, NULL);
        cr_expect_leq (most, REFORM_MAX_SECS, "%s: a re-formation took %.2f s: %s\njoiner: %s",
                       tag, most, log, joiner_log);
        free (joiner_log);
        printf ("elastic %s: %d re-formations of the ring, the longest %.2f s\n", tag, count,
                most);
        free (log);
    }
    if (rule) {
        //  Horovod's recipe: the rate x trainers now / at the start (2).
        snprintf (path, sizeof path, "%s/logs/chief-0.log", dir);
        char *log = (char *) za_test_read_file (path, NULL);
        cr_expect (log && strstr (log, "3 trainers: the learning rate is 0.0015 (scale-lr)")
                   && strstr (log, "2 trainers: the learning rate is 0.001 (scale-lr)"),
                   "%s: %s", tag, log);
        free (log);
        //  The summaries (a line every 10 steps) say the rate the updates used.
        snprintf (path, sizeof path, "%s/metrics.jsonl", dir);
        char *lines = (char *) za_test_read_file (path, NULL);
        cr_expect (lines && strstr (lines, "\"learning_rate\": 0.0015,")
                   && strstr (lines, "\"learning_rate\": 0.001,"), "%s: %s", tag, lines);
        free (lines);
        free (joiner_out), free (joiner_err), free (out), free (dir);
        return;
    }
    double fixed = s_fixed_accuracy (tag, strategy, ps, steps_text);
    printf ("elastic %s: test accuracy %.4f grown and shrunk, %.4f at a fixed size (%" PRId64
            " steps)\n", tag, accuracy, fixed, steps);
    //  ps-async (s_schedule): a grown job that ends higher is no fault; one
    //  that ends more than the allowance lower is. The synchronous
    //  strategies repeat themselves: both ways.
    double lost = (fixed - accuracy) * 100;
    if (strcmp (strategy, "ps-async"))
        lost = fabs (lost);
    cr_expect_leq (lost, ACCURACY_POINTS, "%s: accuracy %.4f, a fixed-size job's %.4f", tag,
                   accuracy, fixed);
    free (joiner_out), free (joiner_err), free (out), free (dir);
}

Test (elastic, allreduce_grows_and_shrinks_without_a_restart)
{
    s_elastic_case ("allreduce", "allreduce", "0", 1500, 0, NULL, 0);
}

//  --elastic-batch scale-lr (horovod): the learning rate follows the
//  trainers. The third leaves on SIGTERM (torchrun's scale-down).
Test (elastic, allreduce_scale_lr_follows_the_trainers)
{
    s_elastic_case ("scale", "allreduce", "0", 1500, 0, "horovod", 1);
}

//  TF_CONFIG's zactor extension that names no endpoint, or no task type:
//  exit 2 with one error, nothing started.
Test (elastic, a_tf_config_broker_that_is_wrong_is_refused)
{
    const char *cases [][2] = {
        {"{\"cluster\": {\"chief\": [\"a:1\"]}, \"task\": {\"type\": \"chief\", "
         "\"index\": 0}, \"zactor\": {\"broker\": \"nowhere\"}}", "\"zactor\" wants"},
        {"{\"cluster\": {\"chief\": [\"a:1\"]}, \"zactor\": {\"broker\": "
         "\"tcp://127.0.0.1:5555\"}}", "\"task\" wants a \"type\""},
    };
    const char *args [] = {"--max-steps", "1", NULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        setenv ("TF_CONFIG", cases [i][0], 1);
        za_test_result_t result = za_test_run (args, 60);
        unsetenv ("TF_CONFIG");
        cr_expect_eq (result.exit_code, 2, "case %zu: %s", i, result.err);
        cr_expect (strstr (result.err, cases [i][1]) != NULL, "case %zu: %s", i, result.err);
        cr_expect (strstr (result.err, "step ") == NULL, "case %zu trained", i);
        za_test_result_free (&result);
    }
}

Test (elastic, ps_sync_grows_and_shrinks_without_a_restart)
{
    s_elastic_case ("sync", "ps-sync", "1", 3000, 1, NULL, 0);
}

//  The third leaves on SIGTERM.
Test (elastic, ps_async_grows_and_shrinks_without_a_restart)
{
    s_elastic_case ("async", "ps-async", "1", 6000, 0, NULL, 1);
}

//  The broker's view of the restart: restarted at least once, with `members`
//  again (it numbers them after the trainers re-registered).
static int
s_broker_back (json_t *state, void *arg)
{
    json_t *broker = json_object_get (state, "broker");
    return json_integer_value (json_object_get (broker, "restarts")) >= 1
        && s_members (state) == *(int *) arg;
}

//  A worker joins the job at `broker`: its pid.
static pid_t
s_join (const char *broker, int round)
{
    char name [32];
    snprintf (name, sizeof name, "joiner-%d.out", round);
    char *out = za_test_path (name);
    snprintf (name, sizeof name, "joiner-%d.err", round);
    char *err = za_test_path (name);
    const char *join [] = {"--role", "worker", "--broker", broker, "--threads", "1", NULL};
    pid_t pid = za_test_spawn (join, out, err);
    free (out);
    free (err);
    return pid;
}

//  A broker killed (kill -9) and started again by --local after the
//  members changed twice: the trainers hold the number of the second
//  change, and their reports say it; the new broker numbers on from there
//  once they re-registered, so a worker that joins then is admitted and
//  trains (its change was numbered again from 1, which the trainers took
//  for an old one: the joiner waited for a ring that never formed).
Test (elastic, a_restarted_broker_admits_a_worker_that_joins)
{
    char *dir = za_test_path ("restarted");
    char *out = za_test_path ("restarted.out");
    const char *args [] = {"--local", "--strategy", "allreduce", "--workers", "1:2",
                           "--elastic-timeout", "2", "--ps", "0", "--model-dir", dir,
                           "--max-steps", "100000000", "--threads", "1", "--evaluators", "0",
                           "--log-step-count-steps", "0", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    s_phase_t phase = {.members = 2, .step = 20};
    json_decref (za_test_wait_for (broker, s_reached, &phase, "two trainers at work",
                                   PHASE_TIMEOUT_S));
    pid_t joiners [2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        joiners [round] = s_join (broker, round);
        phase = (s_phase_t) {.members = 3, .step = 0};
        json_decref (za_test_wait_for (broker, s_reached, &phase, "the third trainer admitted",
                                       PHASE_TIMEOUT_S));
        phase.step = phase.reached + 20;
        phase.joiner = 1;
        json_t *state = za_test_wait_for (broker, s_reached, &phase, "three trainers at work",
                                          PHASE_TIMEOUT_S);
        pid_t broker_pid = (pid_t) json_integer_value (json_object_get (
                                       json_object_get (state, "broker"), "pid"));
        json_decref (state);
        if (round == 1)
            break;
        //  It leaves (SIGTERM): the members' second change.
        cr_assert_eq (kill (joiners [0], SIGTERM), 0);
        int status = za_test_wait (joiners [0], 60);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "the leaver: %d", status);
        phase = (s_phase_t) {.members = 2, .step = 0};
        json_decref (za_test_wait_for (broker, s_reached, &phase, "the third trainer gone",
                                       PHASE_TIMEOUT_S));
        cr_assert_gt (broker_pid, 1);
        cr_assert_eq (kill (broker_pid, SIGKILL), 0);
        int members = 2;
        json_decref (za_test_wait_for (broker, s_broker_back, &members,
                                       "the broker back, with the two trainers",
                                       PHASE_TIMEOUT_S));
    }
    cr_assert_eq (kill (local, SIGINT), 0);
    int status = za_test_wait (local, RUN_TIMEOUT_S);
    char *text = (char *) za_test_read_file (out, NULL);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 130, "%s", text);
    free (text);
    //  The joiner's job is gone: it ends (killed if it waits on).
    kill (joiners [1], SIGKILL);
    za_test_wait (joiners [1], 60);
    //  Each change once: the re-registered trainers joined nothing.
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/events.jsonl", dir);
    char *events = (char *) za_test_read_file (path, NULL);
    cr_assert_not_null (events);
    cr_expect_eq (za_test_count (events, "\"event\":\"joined\""), 2, "%s", events);
    cr_expect_eq (za_test_count (events, "\"event\":\"left\""), 1, "%s", events);
    free (events);
    //  While the new broker let them re-register, its views said no members
    //  (the trainers kept theirs), not a list of none they would drop whole.
    snprintf (path, sizeof path, "%s/logs/chief-0.log", dir);
    char *log = (char *) za_test_read_file (path, NULL);
    cr_expect (log && !strstr (log, "dropped a message from the broker"), "%s", log);
    free (log);
    free (out);
    free (dir);
}
