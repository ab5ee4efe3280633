/*  test_broker.c: a cluster formed through the broker alone, as real
    processes on loopback; what the broker refuses; and `zactor-run --local`
    surviving kill -9 of a worker, the ps, the chief and the broker in one
    run, and SIGSTOP of a worker, seen through `zactor-top --once --json`. */
#include "za_test.h"

#include "za/za_checkpoint.h"
#include "za/za_process.h"
#include "za/za_util.h"
#include "za/za_wire.h"
#include "../broker/za_supervisor.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <czmq.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 240
#define PHASE_TIMEOUT_S 120

static void
s_setup (void)
{
    za_test_dir_create ("za_broker");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (broker, .init = s_setup, .fini = s_teardown, .timeout = 600 * ZA_TEST_SLOWDOWN);


static int
s_exit_code (int status)
{
    return WIFEXITED (status)? WEXITSTATUS (status): -1;
}

static int64_t
s_int (json_t *object, const char *key)
{
    return json_integer_value (json_object_get (object, key));
}

static const char *
s_text (json_t *object, const char *key)
{
    const char *text = json_string_value (json_object_get (object, key));
    return text? text: "";
}

Test (broker, a_cluster_forms_through_the_broker_alone)
{
    char *broker = za_test_free_endpoint ();
    char *model_dir = za_test_path ("run");
    char job [2048];
    snprintf (job, sizeof job,
              "{\"model\": \"cnn\", \"strategy\": \"ps-async\",\n"
              " \"train_spec\": {\"max_steps\": 240},\n"
              " \"run_config\": {\"model_dir\": \"%s\", \"save_checkpoints_steps\": 80,\n"
              "                \"log_step_count_steps\": 0, \"threads\": 1},\n"
              " \"eval_spec\": {\"start_delay_secs\": 0, \"throttle_secs\": 1},\n"
              " \"roles\": {\"chief\": 1, \"worker\": 1, \"ps\": 2, \"evaluator\": 1}}\n",
              model_dir);
    char *job_path = za_test_write ("job.json", job);
    const char *roles [] = {"ps", "ps", "worker", "chief", "evaluator"};
    pid_t pids [6];
    char *logs [6];
    logs [0] = za_test_path ("broker.log");
    const char *broker_args [] = {"--role", "broker", "--bind", broker, "--job", job_path, NULL};
    pids [0] = za_test_spawn (broker_args, logs [0], logs [0]);
    for (int r = 0; r < 5; r++) {
        char name [64];
        snprintf (name, sizeof name, "%s-%d.log", roles [r], r);
        logs [r + 1] = za_test_path (name);
        //  Nothing but the role and the broker's address; the first ps and the
        //  worker say their host by name, as gethostname's on a cluster's
        //  machines (libzmq binds no name: "cannot bind tcp://vm:49793").
        const char *args [] = {"--role", roles [r], "--broker", broker,
                               r == 0 || r == 2? "--host": NULL, "localhost", NULL};
        pids [r + 1] = za_test_spawn (args, logs [r + 1], logs [r + 1]);
    }
    for (int p = 0; p < 6; p++) {
        int status = za_test_wait (pids [p], RUN_TIMEOUT_S);
        char *log = (char *) za_test_read_file (logs [p], NULL);
        cr_expect_eq (s_exit_code (status), 0, "%s exited %d:\n%s", p? roles [p - 1]: "broker",
                      s_exit_code (status), log);
        //  The chief's checkpoints went on to the evaluator through the broker.
        if (p == 0)
            cr_expect (strstr (log, "the chief's checkpoints go on to the evaluators"), "%s",
                       log);
        free (log);
    }
    //  Asynchronous workers may overshoot max_steps by one push each.
    int count = 0;
    int64_t newest = za_test_expect_all_load (model_dir, &count);
    cr_expect (newest >= 240 && newest <= 241, "final step %ld", (long) newest);
    cr_expect_geq (count, 3);
    //  Every task registered, each got its own index, the evaluator saw the end.
    char *events_path = za_test_join (model_dir, "events.jsonl");
    char *events = (char *) za_test_read_file (events_path, NULL);
    int registered = 0;
    for (char *at = events; (at = strstr (at, "\"registered\"")); at++)
        registered++;
    cr_expect_eq (registered, 5, "%s", events);
    cr_expect (strstr (events, "\"role\":\"ps\",\"index\":1"), "%s", events);
    cr_expect (strstr (events, "every task finished"), "%s", events);
    char *eval_path = za_test_join (model_dir, "eval/metrics.jsonl");
    char *evals = (char *) za_test_read_file (eval_path, NULL);
    char final [64];
    snprintf (final, sizeof final, "\"global_step\": %ld", (long) newest);
    cr_expect (strstr (evals, final), "no evaluation of the final step %ld: %s", (long) newest,
               evals);
    free (evals);
    free (eval_path);
    free (events);
    free (events_path);
    for (int p = 0; p < 6; p++)
        free (logs [p]);
    free (job_path);
    free (model_dir);
    free (broker);
}

//  A broker that supervises nothing (tasks started by hand, or by Slurm):
//  a worker is killed during training (ps-async). Left dead, it is lost, the
//  chief trains on alone, and once the final checkpoint is there the broker
//  ends with the job (it waited for the lost worker for ever). With a
//  process started for its index (`restart`, as Kubernetes restarts a pod),
//  the new one is refused "busy" while the old lives, registers again until
//  the broker has declared the old one lost, and trains (it exited 1 at the
//  first refusal). With `stop`, the old worker is stopped (SIGSTOP: hung)
//  rather than killed, and continued once its successor trains: its next
//  report is refused "replaced" and it exits with ZA_EXIT_REPLACED (it
//  trained on beside its successor, the broker's refusal only logged). The
//  step counts are more than any machine trains while the test waits for
//  what it asks.
static void
s_killed_worker (const char *tag, int restart, int stop)
{
    //  (Stopped, the workers' tensors go as frames: through shared memory
    //  the successor's push once went unanswered after the old worker came
    //  back, in about twenty runs; not yet mended: docs/PROTOCOL.md,
    //  "replaced".)
    if (stop)
        setenv ("ZA_SHM_DISABLE", "1", 1);
    char *broker = za_test_free_endpoint ();
    char *model_dir = za_test_path (tag);
    char job [2048], name [64];
    snprintf (job, sizeof job,
              "{\"model\": \"linear\", \"strategy\": \"ps-async\",\n"
              " \"train_spec\": {\"max_steps\": %d},\n"
              " \"run_config\": {\"model_dir\": \"%s\", \"save_checkpoints_steps\": 1000,\n"
              "                \"log_step_count_steps\": 0, \"threads\": 1},\n"
              " \"heartbeat_ivl_ms\": 200, \"no_eval\": true, \"timeout_secs\": 10,\n"
              " \"roles\": {\"chief\": 1, \"worker\": 1, \"ps\": 1, \"evaluator\": 0}}\n",
              restart? 100000: 30000, model_dir);
    snprintf (name, sizeof name, "%s.json", tag);
    char *job_path = za_test_write (name, job);
    const char *roles [] = {"ps", "worker", "chief", "worker"};
    pid_t pids [5];
    char *logs [5];
    snprintf (name, sizeof name, "%s-broker.log", tag);
    logs [0] = za_test_path (name);
    const char *broker_args [] = {"--role", "broker", "--bind", broker, "--job", job_path, NULL};
    pids [0] = za_test_spawn (broker_args, logs [0], logs [0]);
    for (int r = 0; r < 4; r++) {
        snprintf (name, sizeof name, "%s-%s-%d.log", tag, roles [r], r);
        logs [r + 1] = za_test_path (name);
        if (r == 3)
            break;
        const char *args [] = {"--role", roles [r], "--broker", broker, NULL};
        pids [r + 1] = za_test_spawn (args, logs [r + 1], logs [r + 1]);
    }
    //  The worker trains (and its successor is refused while it lives), then
    //  dies.
    char *seen = za_test_wait_for_text (logs [2], "1 ps, batch", RUN_TIMEOUT_S);
    cr_assert (seen && strstr (seen, "1 ps, batch"), "%s: the worker did not start training",
               tag);
    free (seen);
    pids [4] = 0;
    if (restart) {
        const char *args [] = {"--role", "worker", "--index", "0", "--broker", broker, NULL};
        pids [4] = za_test_spawn (args, logs [4], logs [4]);
        seen = za_test_wait_for_text (logs [4], "registering again", RUN_TIMEOUT_S);
        cr_assert (seen && strstr (seen, "registering again until it is declared lost"),
                   "%s: the successor was not refused: %s", tag, seen);
        free (seen);
    }
    if (stop) {
        cr_assert_eq (kill (pids [2], SIGSTOP), 0);
        seen = za_test_wait_for_text (logs [4], "worker 0 (shard", RUN_TIMEOUT_S);
        //  (Continued before any assert: a failed one leaves no stopped child.)
        cr_assert_eq (kill (pids [2], SIGCONT), 0);
        cr_expect (seen && strstr (seen, "worker 0 (shard"), "%s: the successor did not "
                   "train: %s", tag, seen);
        free (seen);
        int status = za_test_wait (pids [2], RUN_TIMEOUT_S);
        char *log = (char *) za_test_read_file (logs [2], NULL);
        cr_expect_eq (s_exit_code (status), ZA_EXIT_REPLACED, "%s: the old worker exited %d:"
                      "\n%s", tag, s_exit_code (status), log);
        cr_expect (log && strstr (log, "this process was replaced"), "%s", log);
        free (log);
    }
    else {
        cr_assert_eq (kill (pids [2], SIGKILL), 0);
        za_test_wait (pids [2], RUN_TIMEOUT_S);
    }
    for (int p = 0; p < 5; p++) {
        if (p == 2 || !pids [p])
            continue;
        int status = za_test_wait (pids [p], RUN_TIMEOUT_S);
        char *log = (char *) za_test_read_file (logs [p], NULL);
        cr_expect_eq (s_exit_code (status), 0, "%s: %s exited %d:\n%s", tag,
                      p? roles [p - 1]: "broker", s_exit_code (status), log);
        if (p == 0 && !restart)
            cr_expect (strstr (log, "lost before the final checkpoint"), "%s", log);
        if (p == 4)
            cr_expect (strstr (log, "worker 0 (shard"), "%s", log);
        free (log);
    }
    cr_expect_geq (za_checkpoint_newest_step (model_dir), restart? 100000: 30000);
    for (int p = 0; p < 5; p++)
        free (logs [p]);
    free (job_path), free (model_dir), free (broker);
    unsetenv ("ZA_SHM_DISABLE");
}

Test (broker, a_lost_task_is_not_waited_for_after_the_final_checkpoint)
{
    s_killed_worker ("lost", 0, 0);
}

Test (broker, a_task_restarted_at_once_registers_when_the_old_is_lost)
{
    s_killed_worker ("again", 1, 0);
}

Test (broker, a_hung_task_that_comes_back_after_it_was_replaced_exits)
{
    s_killed_worker ("hung", 1, 1);
}

//  The restart backoff doubles over failures in a row, and a run longer
//  than ZA_BROKER_STABLE_SECS ends the row: the broker's tasks and the
//  launcher's broker (which counted its broker's failures for the whole
//  job, so one crash a day waited the longest backoff) keep the same rule.
Test (broker, a_long_run_ends_a_row_of_failures)
{
    za_broker_config_t config;
    za_broker_config_init (&config);
    int failures = 0;
    double delay [4];
    for (int i = 0; i < 4; i++)
        delay [i] = za_broker_backoff_next (&config, &failures, 1.0);
    cr_assert_float_eq (delay [0], config.backoff_secs, 1e-9);
    cr_assert_float_eq (delay [3], 8 * config.backoff_secs, 1e-9);
    cr_assert_eq (failures, 4);
    //  (Criterion's float asserts read their arguments twice.)
    double after_a_long_run = za_broker_backoff_next (&config, &failures,
                                                      ZA_BROKER_STABLE_SECS + 1);
    cr_assert_float_eq (after_a_long_run, config.backoff_secs, 1e-9);
    cr_assert_eq (failures, 1);
    double after_a_short_one = za_broker_backoff_next (&config, &failures,
                                                       ZA_BROKER_STABLE_SECS);
    cr_assert_float_eq (after_a_short_one, 2 * config.backoff_secs, 1e-9);
    double longest = 0;
    for (int i = 0; i < 20; i++)
        longest = za_broker_backoff_next (&config, &failures, 0);
    cr_assert_float_eq (longest, config.backoff_max_secs, 1e-9);
}

//  SIGTERM (a scheduler's preemption notice) to a ps that no chief has
//  initialised yet: nothing to keep, it leaves at once with the requeue
//  status (it waited out --timeout-secs, 60 s, past Kubernetes' 30 s grace).
Test (broker, a_ps_preempted_before_its_init_leaves_at_once)
{
    char *broker = za_test_free_endpoint ();
    char *model_dir = za_test_path ("early");
    char job [1024];
    snprintf (job, sizeof job, "{\"model\": \"linear\", \"strategy\": \"ps-async\", "
              "\"max_steps\": 100, \"model_dir\": \"%s\", \"no_eval\": true, "
              "\"timeout_secs\": 60, \"roles\": {\"chief\": 1, \"worker\": 0, "
              "\"ps\": 1, \"evaluator\": 0}}", model_dir);
    char *job_path = za_test_write ("early.json", job);
    char *logs [2] = {za_test_path ("early-broker.log"), za_test_path ("early-ps.log")};
    const char *broker_args [] = {"--role", "broker", "--bind", broker, "--job", job_path, NULL};
    pid_t pids [2];
    pids [0] = za_test_spawn (broker_args, logs [0], logs [0]);
    const char *ps_args [] = {"--role", "ps", "--broker", broker, NULL};
    pids [1] = za_test_spawn (ps_args, logs [1], logs [1]);
    char *seen = za_test_wait_for_text (logs [1], "serving", RUN_TIMEOUT_S);
    cr_assert (seen && strstr (seen, "serving"), "the ps did not start");
    free (seen);
    double sent = za_clock_mono ();
    cr_assert_eq (kill (pids [1], SIGTERM), 0);
    int status = za_test_wait (pids [1], 30);
    char *log = (char *) za_test_read_file (logs [1], NULL);
    cr_expect_eq (s_exit_code (status), 75, "%s", log);
    cr_expect (za_clock_mono () - sent < 30 && strstr (log, "preempted (SIGTERM) before a chief "
                                                       "initialised it"), "%s", log);
    free (log);
    kill (pids [0], SIGINT);
    za_test_wait (pids [0], RUN_TIMEOUT_S);
    free (logs [0]), free (logs [1]), free (job_path), free (model_dir), free (broker);
}

Test (broker, mistakes_get_one_clear_error)
{
    //  A job file with an unknown key, or impossible counts: exit 2 at once.
    char *job_path = za_test_write ("job.json", "{\"run_config\": {\"save_checkpoint_steps\": 10}}");
    const char *bad_key [] = {"--role", "broker", "--bind", "tcp://127.0.0.1:1", "--job",
                              job_path, NULL};
    za_test_result_t result = za_test_run (bad_key, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "run_config.save_checkpoint_steps: not a job key"), "%s",
               result.err);
    za_test_result_free (&result);
    free (job_path);
    job_path = za_test_write ("job.json", "{\"roles\": {\"chief\": 2}}");
    const char *bad_roles [] = {"--role", "broker", "--bind", "tcp://127.0.0.1:1", "--job",
                                job_path, NULL};
    result = za_test_run (bad_roles, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "roles.chief is 2: 1 to 1"), "%s", result.err);
    za_test_result_free (&result);
    free (job_path);

    //  A broker that serves one worker.
    char *broker = za_test_free_endpoint ();
    char *model_dir = za_test_path ("run");
    char job [1024];
    snprintf (job, sizeof job, "{\"max_steps\": 50, \"model_dir\": \"%s\", \"roles\": "
              "{\"chief\": 1, \"worker\": 1, \"ps\": 1, \"evaluator\": 0}}", model_dir);
    job_path = za_test_write ("job.json", job);
    char *log = za_test_path ("broker.log");
    const char *broker_args [] = {"--role", "broker", "--bind", broker, "--job", job_path, NULL};
    pid_t pid = za_test_spawn (broker_args, log, log);

    //  Garbage, a wrong protocol version and an unknown op: dropped or refused,
    //  and the broker still answers.
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    cr_assert_eq (zsock_connect (dealer, "%s", broker), 0);
    zstr_send (dealer, "this is not msgpack");
    static const unsigned char version_2 [] = {0x82, 0xa1, 'v', 0x02, 0xa2, 'o', 'p', 0xa5,
                                               'w', 'a', 't', 'c', 'h'};
    zframe_t *frame = zframe_new (version_2, sizeof version_2);
    zframe_send (&frame, dealer, 0);
    za_wire_msg_t *msg = (za_wire_msg_t *) malloc (sizeof *msg);
    za_wire_msg_init (msg, ZA_OP_PUSH);
    cr_assert_eq (za_wire_send (dealer, NULL, msg, NULL), 0);
    zsock_set_rcvtimeo (dealer, 10000);
    zmsg_t *reply = zmsg_recv (dealer);
    cr_assert_not_null (reply, "the broker did not answer an unknown op");
    cr_assert_eq (za_wire_decode (reply, msg), 0);
    cr_expect_eq (msg->op, ZA_OP_ERROR);
    cr_expect (strstr (msg->error, "does not serve push"), "%s", msg->error);
    zmsg_destroy (&reply);
    //  A register without a body, and one for a task the job does not have.
    za_wire_msg_init (msg, ZA_OP_REGISTER);
    cr_assert_eq (za_wire_send (dealer, NULL, msg, NULL), 0);
    reply = zmsg_recv (dealer);
    cr_assert_not_null (reply);
    cr_assert_eq (za_wire_decode (reply, msg), 0);
    cr_expect_eq (msg->op, ZA_OP_ERROR);
    cr_expect (strstr (msg->error, "without a JSON object body"), "%s", msg->error);
    zmsg_destroy (&reply);
    free (msg);
    zsock_destroy (&dealer);

    const char *too_far [] = {"--role", "worker", "--index", "5", "--broker", broker, NULL};
    result = za_test_run (too_far, 60);
    cr_expect_eq (result.exit_code, 1);
    cr_expect (strstr (result.err, "worker 5 does not exist: the job has 1"), "%s", result.err);
    za_test_result_free (&result);

    json_t *state = za_test_top (broker);
    cr_assert_not_null (state, "zactor-top got no state from the broker");
    cr_expect_eq (json_array_size (json_object_get (state, "roles")), 3);
    cr_expect_str_eq (s_text (za_test_row (state, "worker", 0), "state"), "empty");
    json_decref (state);
    kill (pid, SIGTERM);
    za_test_wait (pid, 30);
    char *text = (char *) za_test_read_file (log, NULL);
    cr_expect (strstr (text, "dropped a bad message"), "%s", text);
    cr_expect (strstr (text, "unsupported protocol version 2"), "%s", text);
    free (text);

    //  zactor-top with nobody there: exit 1 and say so.
    FILE *pipe = za_test_popen_top (broker, "--timeout 1 2>&1");
    char out [1024] = "";
    size_t n = fread (out, 1, sizeof out - 1, pipe);
    out [n] = 0;
    cr_expect_eq (s_exit_code (pclose (pipe)), 1);
    cr_expect (strstr (out, "no answer from the broker"), "%s", out);

    free (log);
    free (job_path);
    free (model_dir);
    free (broker);
}

//  role's row: restarted `restarts` times, running, and past `step`.
static int
s_role_back (json_t *state, void *arg)
{
    za_test_want_t *want = (za_test_want_t *) arg;
    json_t *row = streq (want->role, "broker")? json_object_get (state, "broker")
                                              : za_test_row (state, want->role, 0);
    if (!row)
        return 0;
    int64_t step = s_int (state, "global_step");
    int all_live = 1;
    size_t i;
    json_t *each;
    json_array_foreach (json_object_get (state, "roles"), i, each)
        all_live &= streq (s_text (each, "role"), "evaluator")
                 || streq (s_text (each, "state"), "running");
    return s_int (row, "restarts") >= want->restarts && all_live && step >= want->step;
}

//  The step the chief went on from after it gave a lost ps its values (the
//  chief's log says "... going on from step N (no rewind)"), or -1.
static int64_t
s_went_on_from (const char *model_dir)
{
    char *path = za_test_join (model_dir, "logs/chief-0.log");
    char *log = (char *) za_test_read_file (path, NULL);
    const char *line = strstr (log, "(no rewind)");
    int64_t step = -1;
    while (line && line > log && line [-1] != '\n')
        line--;
    const char *at = line? strstr (line, "going on from step "): NULL;
    if (at)
        step = atoll (at + strlen ("going on from step "));
    free (log);
    free (path);
    return step;
}

Test (broker, local_run_survives_kill_9_of_each_role, .timeout = 900 * ZA_TEST_SLOWDOWN)
{
    char *model_dir = za_test_path ("run");
    char *out = za_test_path ("local.out");
    //  A step count no machine reaches while the test asks: the test ends the
    //  job (Ctrl-C) when it has seen every restart, so it never races the end.
    const char *args [] = {"--local", "--model-dir", model_dir, "--max-steps", "100000000",
                           "--save-checkpoints-steps", "200", "--log-step-count-steps", "0",
                           "--start-delay-secs", "0", "--throttle-secs", "2", NULL};
    //  The model dir's events.jsonl holds an earlier job's (trained again
    //  in the same folder): a restarted broker reloads this job's alone.
    cr_assert_eq (za_mkdirs (model_dir), 0);
    char *events_path = za_test_join (model_dir, "events.jsonl");
    FILE *earlier = fopen (events_path, "w");
    cr_assert_not_null (earlier);
    fputs ("{\"time\":1.0,\"event\":\"started\",\"role\":\"broker\",\"index\":0}\n"
           "{\"time\":2.0,\"event\":\"done\",\"role\":\"chief\",\"index\":0}\n"
           "{\"time\":2.0,\"event\":\"done\",\"role\":\"worker\",\"index\":0}\n", earlier);
    fclose (earlier);
    free (events_path);
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);

    //  Training runs; then each role in turn is killed and comes back.
    const char *victims [] = {"worker", "ps", "chief", "broker"};
    za_test_want_t want = {"chief", 0, 0, 200};
    json_t *state = za_test_wait_for (broker, s_role_back, &want, "training to reach step 200",
                                      PHASE_TIMEOUT_S);
    for (int v = 0; v < 4; v++) {
        json_t *row = streq (victims [v], "broker")? json_object_get (state, "broker")
                                                   : za_test_row (state, victims [v], 0);
        pid_t pid = (pid_t) s_int (row, "pid");
        cr_assert_gt (pid, 1);
        int64_t step = s_int (state, "global_step");
        //  No kill rewinds the cluster (a lost ps gets the chief's values).
        int64_t resume = step;
        json_decref (state);
        cr_assert_eq (kill (pid, SIGKILL), 0, "kill -9 %s pid %d", victims [v], (int) pid);
        want = (za_test_want_t) {victims [v], 0, 1, resume + 100};
        char what [128];
        snprintf (what, sizeof what, "the %s (pid %d) to come back", victims [v], (int) pid);
        state = za_test_wait_for (broker, s_role_back, &want, what, PHASE_TIMEOUT_S);
        if (streq (victims [v], "broker")) {
            json_t *counts = json_object_get (state, "event_counts");
            cr_expect (json_object_get (counts, "restarted")
                       && !json_object_get (counts, "done"), "the earlier job's events: %s",
                       json_dumps (counts, 0));
        }
        //  The ps lost cost no steps: at most the pushes in flight (the state's
        //  step, from reports, is at most the true one).
        if (streq (victims [v], "ps"))
            cr_expect_geq (s_went_on_from (model_dir), step - 2 * 3,
                           "the ps was lost near step %ld", (long) step);
    }
    //  A stopped process is not a dead one: only missed heartbeats find it.
    json_t *worker_1 = za_test_row (state, "worker", 1);
    pid_t stopped = (pid_t) s_int (worker_1, "pid");
    int64_t step = s_int (state, "global_step");
    json_decref (state);
    cr_assert_eq (kill (stopped, SIGSTOP), 0);
    want = (za_test_want_t) {"worker", 1, 1, step + 100};
    state = za_test_wait_for (broker, za_test_task_back, &want,
                              "the stopped worker 1 to be replaced", PHASE_TIMEOUT_S);
    char *events = json_dumps (json_object_get (state, "events"), 0);
    cr_expect (strstr (events, "missed 3 heartbeats"), "%s", events);
    free (events);
    kill (stopped, SIGCONT);            //  it was killed; this is a no-op then

    //  After all five, zactor-top shows every restart.
    cr_expect_geq (s_int (za_test_row (state, "worker", 0), "restarts"), 1);
    cr_expect_geq (s_int (za_test_row (state, "ps", 0), "restarts"), 1);
    cr_expect_geq (s_int (za_test_row (state, "chief", 0), "restarts"), 1);
    cr_expect_geq (s_int (json_object_get (state, "broker"), "restarts"), 1);
    char *text = json_dumps (state, 0);
    cr_expect (strstr (text, "killed by signal 9"), "%s", text);
    free (text);
    json_decref (state);

    cr_assert_eq (kill (local, SIGINT), 0);
    int status = za_test_wait (local, RUN_TIMEOUT_S);
    char *log = (char *) za_test_read_file (out, NULL);
    cr_expect_eq (s_exit_code (status), 130, "%s", log);
    cr_expect (strstr (log, "every process of the job is stopped"), "%s", log);
    free (log);
    //  Whatever the kills interrupted, every checkpoint written is whole.
    int64_t newest = za_test_expect_all_load (model_dir, NULL);
    cr_expect_geq (newest, 200, "newest checkpoint %ld", (long) newest);
    free (out);
    free (model_dir);
}

static int
s_training (json_t *state, void *arg)
{
    (void) arg;
    size_t i;
    json_t *row;
    int running = 0;
    json_array_foreach (json_object_get (state, "roles"), i, row)
        running += streq (s_text (row, "state"), "running");
    return running >= 3 && s_int (state, "global_step") > 50;
}

//  Ctrl-C on --local stops every process of the job, and says so.
Test (broker, ctrl_c_stops_the_whole_local_job)
{
    char *model_dir = za_test_path ("run");
    char *out = za_test_path ("local.out");
    const char *args [] = {"--local", "--model-dir", model_dir, "--max-steps", "100000", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    json_t *state = za_test_wait_for (broker, s_training, NULL, "training to start",
                                      PHASE_TIMEOUT_S);
    pid_t pids [8];
    int count = 0;
    pids [count++] = (pid_t) s_int (json_object_get (state, "broker"), "pid");
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get (state, "roles"), i, row)
        if (count < 8)
            pids [count++] = (pid_t) s_int (row, "pid");
    json_decref (state);
    cr_assert_eq (kill (local, SIGINT), 0);
    int status = za_test_wait (local, 60);
    char *log = (char *) za_test_read_file (out, NULL);
    cr_expect_eq (s_exit_code (status), 130, "%s", log);
    cr_expect (strstr (log, "interrupted; every process of the job is stopped"), "%s", log);
    free (log);
    for (int p = 0; p < count; p++)
        cr_expect (pids [p] > 1 && kill (pids [p], 0) != 0, "pid %d outlived Ctrl-C",
                   (int) pids [p]);
    free (out);
    free (model_dir);
}

//  A step that computes longer than the broker's patience (here 0.6 s of
//  silence, a quiet loop taken for hung after 1.8 s; the step takes 5 s on
//  one AMD EPYC core) is not a hang: a big model on a slow core takes
//  seconds a step, and no role is killed for it, in either strategy.
Test (broker, a_step_longer_than_the_heartbeats_is_no_hang, .timeout = 900 * ZA_TEST_SLOWDOWN)
{
    const char *strategies [] = {"ps-async", "allreduce"};
    for (int s = 0; s < 2; s++) {
        char name [32];
        snprintf (name, sizeof name, "slow-%s", strategies [s]);
        char *model_dir = za_test_path (name);
        const char *args [] = {"--local", "--strategy", strategies [s], "--workers", "1",
                               "--evaluators", "0", "--no-eval", "--max-steps", "2",
                               "--threads", "1", "--batch-size", "256", "--heartbeat-ivl-ms",
                               "200", "--heartbeat-liveness", "3", "--model",
                               "conv2d(256,3,relu) conv2d(256,3,relu) globalavgpool dense(10)",
                               "--model-dir", model_dir, NULL};
        za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S * ZA_TEST_SLOWDOWN);
        cr_expect_eq (result.exit_code, 0, "%s: %s", strategies [s], result.err);
        char *metrics = za_test_join (model_dir, "logs/chief-0.log");
        char *log = za_test_read_file (metrics, NULL);
        cr_assert_not_null (log, "%s", metrics);
        char *events = za_test_join (model_dir, "events.jsonl");
        char *text = za_test_read_file (events, NULL);
        cr_assert_not_null (text, "%s", events);
        cr_expect_null (strstr (text, "\"killed\""), "%s: %s", strategies [s], text);
        cr_expect_null (strstr (log, "quiet (hung?)"), "%s: %s", strategies [s], log);
        free (text), free (events), free (log), free (metrics);
        za_test_result_free (&result);
        free (model_dir);
    }
}

//  A diverged model (SGD at a learning rate of 1e38: its loss NaN from the
//  second step) stops the training, as TensorFlow's NanTensorHook does: one
//  process with exit 65 and the step not saved; in a cluster of either
//  strategy every trainer so, none restarted, and the job fails (it trained
//  on to max_steps, saving NaN over the checkpoints before).
Test (broker, a_diverged_loss_stops_the_training)
{
    char *dir = za_test_path ("nan");
    const char *alone [] = {"--model", "linear", "--optimizer", "sgd", "--learning-rate",
                            "1e38", "--max-steps", "100000000", "--save-checkpoints-steps", "1",
                            "--no-eval", "--threads", "1", "--model-dir", dir, NULL};
    za_test_result_t result = za_test_run (alone, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 65, "%s", result.err);
    const char *at = strstr (result.err, "NaN loss during training at step ");
    int64_t step = at? strtoll (at + strlen ("NaN loss during training at step "), NULL, 10)
                     : -1;
    cr_expect (step > 0 && step < 1000, "%s", result.err);
    cr_expect_eq (za_checkpoint_newest_step (dir), step - 1, "%s", result.err);
    za_test_result_free (&result);
    free (dir);
    const char *strategies [] = {"ps-async", "allreduce"};
    for (int s = 0; s < 2; s++) {
        char name [32];
        snprintf (name, sizeof name, "nan-%s", strategies [s]);
        dir = za_test_path (name);
        const char *args [] = {"--local", "--strategy", strategies [s], "--model", "linear",
                               "--optimizer", "sgd", "--learning-rate", "1e38", "--max-steps",
                               "100000000", "--evaluators", "0", "--no-eval", "--threads", "1",
                               "--model-dir", dir, NULL};
        result = za_test_run (args, RUN_TIMEOUT_S);
        cr_expect_eq (result.exit_code, 1, "%s: %s", strategies [s], result.err);
        cr_expect (strstr (result.err, "loss during training at step")
                   && strstr (result.err, "(exit code 65); not restarted")
                   && strstr (result.err, "the job failed"), "%s: %s", strategies [s],
                   result.err);
        cr_expect_lt (za_checkpoint_newest_step (dir), 1000, "%s", strategies [s]);
        za_test_result_free (&result);
        free (dir);
    }
}

//  A role process is known by its own --role and --index: worker 12 is not
//  worker 1 (" --index 1" matched "--index 12", and a stale pid of worker
//  1's could have had worker 12 killed); one started without --index (it
//  took a free slot) is any worker.
Test (broker, a_role_process_is_known_by_its_whole_index)
{
    for (int indexed = 1; indexed >= 0; indexed--) {
        pid_t pid = fork ();
        cr_assert_geq (pid, 0);
        if (pid == 0) {
            //  (Each sleep a second: nothing outlives the kill by more.)
            execlp ("sh", "sh", "-c", "i=0; while [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); "
                    "done", "sh", "--broker", "x", "--role", "worker",
                    indexed? "--index": (char *) NULL, "12", (char *) NULL);
            _exit (127);
        }
        double deadline = za_clock_mono () + 30;
        while (!za_supervisor_is_role_process (pid, "worker", 12)
               && za_clock_mono () < deadline)
            zclock_sleep (10);
        cr_expect (za_supervisor_is_role_process (pid, "worker", 12));
        cr_expect_eq (za_supervisor_is_role_process (pid, "worker", 1), !indexed);
        cr_expect_not (za_supervisor_is_role_process (pid, "ps", 12));
        kill (pid, SIGKILL);
        waitpid (pid, NULL, 0);
    }
}
