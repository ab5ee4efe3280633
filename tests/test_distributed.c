/*  test_distributed.c: asynchronous parameter-server training as real
    processes on loopback: zactor-run as chief, worker and two ps, from one
    cluster file. Checks every process exits 0, the loss fell, the final
    checkpoint holds what each ps holds, and that garbage, truncated and
    wrong-version messages sent to a ps mid-run are counted and dropped.   */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <czmq.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "za/za_checkpoint.h"
#include "za/za_evaluator.h"
#include "za/za_partition.h"
#include "za/za_util.h"
#include "za/za_wire.h"
#include "za_test.h"

#define TIMEOUT_S 240.0
//  The heartbeat test's --timeout-secs: the chief gives up on a stopped ps then.
#define HB_TIMEOUT_SECS "6"
#define MAX_STEPS 300
#define TASKS 4

//  A cluster file on loopback with free ports: one chief, `workers` workers,
//  `ps` ps and (when `evaluator`) an evaluator. *ps0_port (may be NULL) gets
//  ps 0's port. Caller frees the path.
static char *
s_cluster_file (int workers, int ps, int evaluator, int *ps0_port)
{
    char jobs [1024];
    int used = snprintf (jobs, sizeof jobs, "\"chief\": [\"127.0.0.1:%d\"]",
                         za_test_free_port ());
    const char *names [3] = {"worker", "ps", "evaluator"};
    int counts [3] = {workers, ps, evaluator};
    for (int j = 0; j < 3; j++) {
        if (counts [j] == 0)
            continue;
        used += snprintf (jobs + used, sizeof jobs - used, ", \"%s\": [", names [j]);
        for (int i = 0; i < counts [j]; i++) {
            int port = za_test_free_port ();
            if (j == 1 && i == 0 && ps0_port)
                *ps0_port = port;
            used += snprintf (jobs + used, sizeof jobs - used, "%s\"127.0.0.1:%d\"",
                              i? ", ": "", port);
        }
        used += snprintf (jobs + used, sizeof jobs - used, "]");
    }
    char *path = za_test_path ("cluster.json");
    FILE *f = fopen (path, "w");
    cr_assert_not_null (f);
    fprintf (f, "{\"cluster\": {%s}}\n", jobs);
    fclose (f);
    return path;
}

//  "ps N: done at step S, F floats, crc32 X" from a ps's stderr.
static void
s_ps_report (const char *err, int ps, long long *step, unsigned *crc, unsigned long long *dropped)
{
    char prefix [32];
    snprintf (prefix, sizeof prefix, "ps %d: done at step ", ps);
    const char *line = strstr (err, prefix);
    cr_assert_not_null (line, "ps %d printed no done line: %s", ps, err);
    unsigned long long floats;
    cr_assert_eq (sscanf (line + strlen (prefix), "%lld, %llu floats, crc32 %x, %llu", step,
                          &floats, crc, dropped), 4, "%s", line);
}


//  Sends bad messages to a ps: random bytes, a truncated header, a wrong
//  version, an unknown op, a push whose frame sizes lie. Returns how many.
static int
s_send_garbage (int port)
{
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    cr_assert_not_null (dealer);
    cr_assert_eq (zsock_connect (dealer, "tcp://127.0.0.1:%d", port), 0);
    int sent = 0;
    unsigned char noise [64];
    for (size_t i = 0; i < sizeof noise; i++)
        noise [i] = (unsigned char) (i * 37 + 11);
    zsock_send (dealer, "b", noise, sizeof noise), sent++;
    //  A valid pull, cut in half.
    za_wire_msg_t *msg = malloc (sizeof *msg);
    za_wire_msg_init (msg, ZA_OP_PULL);
    msg->seq = 1;
    zsock_t *pair_out = zsock_new_pair ("@inproc://garbage");
    zsock_t *pair_in = zsock_new_pair (">inproc://garbage");
    cr_assert_eq (za_wire_send (pair_out, NULL, msg, NULL), 0);
    zmsg_t *valid = zmsg_recv (pair_in);
    zframe_t *header = zmsg_first (valid);
    zsock_send (dealer, "b", zframe_data (header), zframe_size (header) / 2), sent++;
    zmsg_destroy (&valid);
    //  Hand-packed maps: version 99; unknown op.
    const unsigned char wrong_version [] = {0x82, 0xa1, 'v', 99, 0xa2, 'o', 'p', 0xa4, 'p',
                                            'u', 'l', 'l'};
    zsock_send (dealer, "b", wrong_version, sizeof wrong_version), sent++;
    const unsigned char unknown_op [] = {0x82, 0xa1, 'v', 1, 0xa2, 'o', 'p', 0xa4, 'e', 'v',
                                         'i', 'l'};
    zsock_send (dealer, "b", unknown_op, sizeof unknown_op), sent++;
    //  A push declaring 4 floats with a 3-byte frame.
    za_wire_msg_init (msg, ZA_OP_PUSH);
    float four [4] = {1, 2, 3, 4};
    int64_t shape [1] = {4};
    za_wire_msg_add (msg, "dense_1/bias", ZA_DTYPE_F32, 1, shape, four);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_eq (za_wire_send (pair_out, NULL, msg, &lease), 0);
    //  Over inproc the received frame is our own buffer: the lease is let go
    //  once that frame is replaced, below.
    valid = zmsg_recv (pair_in);
    zframe_t *frame = zmsg_last (valid);
    zframe_reset (frame, "abc", 3);
    zmsg_send (&valid, dealer), sent++;
    za_wire_lease_wait (&lease);
    zclock_sleep (200);         //  linger: let them leave before the socket closes
    zsock_destroy (&pair_out);
    zsock_destroy (&pair_in);
    zsock_destroy (&dealer);
    free (msg);
    return sent;
}

Test (distributed, chief_worker_two_ps_as_processes, .timeout = 300 * ZA_TEST_SLOWDOWN)
{
    za_test_dir_create ("za_distributed_test");
    int ps0_port = 0;
    char *cluster = s_cluster_file (1, 2, 0, &ps0_port);
    char *model_dir = za_test_path ("run");
    //  No launcher and no broker: the chief merges the tasks' traces at its
    //  end (the file was never written).
    char *trace = za_test_path ("trace.json");
    char max_steps [16];
    snprintf (max_steps, sizeof max_steps, "%d", MAX_STEPS);
    const char *roles [TASKS][2] = {{"ps", "0"}, {"ps", "1"}, {"chief", "0"}, {"worker", "0"}};
    pid_t pids [TASKS];
    char *errs [TASKS];
    for (int t = 0; t < TASKS; t++) {
        const char *args [] = {"--cluster", cluster, "--role", roles [t][0], "--index",
                               roles [t][1], "--model", "cnn", "--batch-size", "32",
                               "--max-steps", max_steps, "--save-checkpoints-steps", "100",
                               "--save-summary-steps", "20", "--log-step-count-steps", "100",
                               "--model-dir", model_dir, "--threads", "1", "--no-eval",
                               "--timeout-secs", "60", "--trace", trace, NULL};
        char name [32];
        snprintf (name, sizeof name, "task%d.err", t);
        errs [t] = za_test_path (name);
        char *out = za_test_path ("task.out");
        pids [t] = za_test_spawn (args, out, errs [t]);
        free (out);
    }
    //  Once the chief has written its first metrics line, garbage goes to ps 0.
    char *metrics = za_test_path ("run/metrics.jsonl");
    double waited = 0;
    while (access (metrics, F_OK) != 0 && waited < 60)
        usleep (20000), waited += 0.02;
    cr_assert_lt (waited, 60, "the chief wrote no metrics within 60 s");
    //  Training holds still (the chief and the worker stopped) while the garbage
    //  goes to ps 0, until ps 0 has said it dropped every piece: the job cannot
    //  end before (on a fast or loaded machine 280 steps could outrun it).
    cr_assert_eq (kill (pids [2], SIGSTOP), 0);
    cr_assert_eq (kill (pids [3], SIGSTOP), 0);
    int garbage = s_send_garbage (ps0_port);
    double deadline = za_clock_mono () + 60 * ZA_TEST_SLOWDOWN;
    char *said = za_test_read_file (errs [0], NULL);
    while (za_test_count (said, "dropped a bad message") < garbage
           && za_clock_mono () < deadline) {
        free (said);
        usleep (20000);
        said = za_test_read_file (errs [0], NULL);
    }
    cr_expect_eq (za_test_count (said, "dropped a bad message"), garbage, "%s", said);
    free (said);
    kill (pids [2], SIGCONT);
    kill (pids [3], SIGCONT);
    for (int t = 0; t < TASKS; t++) {
        int status = za_test_wait (pids [t], TIMEOUT_S);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s %s exited %d: %s",
                   roles [t][0], roles [t][1], WIFEXITED (status)? WEXITSTATUS (status): -1,
                   (char *) za_test_read_file (errs [t], NULL));
    }
    char *merged = za_test_read_file (trace, NULL);
    cr_expect (merged && strstr (merged, "\"traceEvents\"") && strstr (merged, "chief-0"),
               "%s: %.200s", trace, merged? merged: "(not written)");
    free (merged), free (trace);
    //  Each ps holds what the final checkpoint says it holds.
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (model_dir, &found);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_expect_geq (za_checkpoint_step (ckpt), MAX_STEPS);
    for (int p = 0; p < 2; p++) {
        char *err = za_test_read_file (errs [p], NULL);
        long long step;
        unsigned crc;
        unsigned long long dropped;
        s_ps_report (err, p, &step, &crc, &dropped);
        za_stack_spec_t cnn;
        cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &cnn), 0);
        za_input_shape_t shape = {28, 28, 1};
        cr_expect_eq (crc, za_test_ckpt_crc_of_ps (ckpt, &cnn, shape, 2, 1u << 20, p),
                      "ps %d holds %08x", p, crc);
        //  ps 0 counts the global step. Another ps counts its own updates: a
        //  worker's push may reach ps 0 before the final hold and ps 1 after it
        //  (then it is answered done, not applied), or the other way round,
        //  so it may be off by one push per worker.
        if (p == 0)
            cr_expect_eq (step, za_checkpoint_step (ckpt));
        else
            cr_expect (llabs (step - za_checkpoint_step (ckpt)) <= 2, "ps %d at step %lld, "
                       "the checkpoint at %lld", p, step, (long long) za_checkpoint_step (ckpt));
        if (p == 0) {
            cr_expect_eq (dropped, (unsigned long long) garbage, "ps 0 dropped %llu of %d",
                          dropped, garbage);
            cr_expect (strstr (err, "dropped a bad message") != NULL);
            cr_expect (strstr (err, "unsupported protocol version") != NULL, "%s", err);
        }
        else
            cr_expect_eq (dropped, 0ull);
        free (err);
    }
    za_checkpoint_destroy (&ckpt);
    //  Every checkpoint loads; the loss fell.
    int count = 0;
    za_test_expect_all_load (model_dir, &count);
    cr_expect_geq (count, 3);
    char *text = za_test_read_file (metrics, NULL);
    double first = -1, last = -1;
    for (char *line = text; line && *line;) {
        json_t *json = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        if (json) {
            double loss = json_number_value (json_object_get (json, "loss"));
            if (first < 0)
                first = loss;
            last = loss;
            json_decref (json);
        }
        char *next = strchr (line, '\n');
        line = next? next + 1: NULL;
    }
    cr_expect (first > 0 && last < first * 0.7, "loss %f -> %f", first, last);
    free (text);
    for (int t = 0; t < TASKS; t++)
        free (errs [t]);
    free (metrics);
    free (model_dir);
    free (cluster);
    za_test_dir_remove ();
}

//  train_and_evaluate, distributed: chief, worker, ps and an evaluator task as
//  processes; all four exit 0 and the evaluator has results for the final step.
//  As in TensorFlow, the cluster does not name the evaluator: the chief, which
//  would evaluate the end when no evaluator does, sees this one follow
//  model_dir and leaves it the final evaluation (one line for the end). The
//  evaluator starts first and the others once it follows model_dir: a chief
//  that ends before an evaluator has started evaluates the end itself (and
//  600 steps of this model take well under a second).
Test (distributed, with_an_evaluator_task, .timeout = 300 * ZA_TEST_SLOWDOWN)
{
    za_test_dir_create ("za_distributed_eval");
    char *cluster = s_cluster_file (1, 1, 0, NULL);
    char *model_dir = za_test_path ("run");
    const char *roles [4][2] = {{"evaluator", "0"}, {"ps", "0"}, {"chief", "0"}, {"worker", "0"}};
    pid_t pids [4];
    char *errs [4];
    cr_assert_eq (za_mkdirs (model_dir), 0);
    for (int t = 0; t < 4; t++) {
        if (t == 1) {               //  the evaluator follows model_dir before the rest start
            double deadline = za_clock_mono () + TIMEOUT_S;
            while (!za_evaluator_following (model_dir, NULL, NULL, 0)
                   && za_clock_mono () < deadline
                   && waitpid (pids [0], NULL, WNOHANG) == 0)
                zclock_sleep (10);
            if (!za_evaluator_following (model_dir, NULL, NULL, 0)) {
                kill (pids [0], SIGKILL);
                waitpid (pids [0], NULL, 0);
                cr_assert_fail ("the evaluator never followed %s", model_dir);
            }
        }
        const char *args [] = {"--cluster", cluster, "--role", roles [t][0], "--index",
                               roles [t][1], "--model", "dnn", "--batch-size", "32",
                               "--max-steps", "600", "--save-checkpoints-steps", "100",
                               "--model-dir", model_dir, "--threads", "1",
                               "--start-delay-secs", "0", "--throttle-secs", "0.5",
                               "--timeout-secs", "60", "--log-step-count-steps", "0", NULL};
        char name [32];
        snprintf (name, sizeof name, "task%d.err", t);
        errs [t] = za_test_path (name);
        char *out = za_test_path ("task.out");
        pids [t] = za_test_spawn (args, out, errs [t]);
        free (out);
    }
    for (int t = 0; t < 4; t++) {
        int status = za_test_wait (pids [t], TIMEOUT_S);
        char *err = za_test_read_file (errs [t], NULL);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s exited %d: %s",
                   roles [t][0], WIFEXITED (status)? WEXITSTATUS (status): -1, err);
        if (streq (roles [t][0], "chief"))
            cr_expect (strstr (err, "an evaluator (pid ") && strstr (err, "follows"),
                       "the chief did not see the evaluator: %s", err);
        free (err);
        free (errs [t]);
    }
    int64_t newest = za_test_expect_all_load (model_dir, NULL);
    cr_expect_geq (newest, 600);
    char *metrics = za_test_path ("run/eval/metrics.jsonl");
    char *text = za_test_read_file (metrics, NULL);
    char final_step [64];
    snprintf (final_step, sizeof final_step, "\"global_step\": %lld,", (long long) newest);
    int finals = 0;
    for (char *at = text; (at = strstr (at, final_step)); at++)
        finals++;
    cr_expect_eq (finals, 1, "the final step evaluated %d times: %s", finals, text);
    char *last = text;
    for (char *p = text; *p; p++)
        if (*p == '\n' && p [1])
            last = p + 1;
    json_t *json = json_loads (last, JSON_DISABLE_EOF_CHECK, NULL);
    cr_assert_not_null (json, "%s", text);
    cr_expect_eq (json_integer_value (json_object_get (json, "global_step")), newest);
    cr_expect_gt (json_number_value (json_object_get (json, "accuracy")), 0.6);
    json_decref (json);
    //  TensorBoard: the chief's and the evaluator's event files pass the
    //  independent reader (CRCs, protobuf decode) and hold the expected tags.
    char reader [4096], line [8192];
    snprintf (reader, sizeof reader, "%s/tests/read_events.py", ZA_SOURCE_DIR);
    const char *dirs [2] = {"run", "run/eval"};
    const char *tags [2] = {" global_step/sec ", " accuracy "};
    for (int d = 0; d < 2; d++) {
        char *dir = za_test_path (dirs [d]);
        snprintf (line, sizeof line, "/usr/bin/python3 '%s' \"$(ls '%s'/events.out.tfevents.* "
                  "| head -1)\" 2>&1", reader, dir);
        FILE *p = popen (line, "r");
        cr_assert_not_null (p);
        size_t n = fread (line, 1, sizeof line - 1, p);
        line [n] = 0;
        int status = pclose (p);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s: %s", dirs [d], line);
        cr_expect (strstr (line, tags [d]) != NULL, "%s: %s", dirs [d], line);
        cr_expect (strstr (line, " loss ") != NULL, "%s: %s", dirs [d], line);
        free (dir);
    }
    char final [64];
    snprintf (final, sizeof final, "%lld accuracy ", (long long) newest);
    cr_expect (strstr (line, final) != NULL, "no accuracy for the final step: %s", line);
    free (text);
    free (metrics);
    free (model_dir);
    free (cluster);
    za_test_dir_remove ();
}

//  Heartbeats: a ps that is stopped (SIGSTOP) mid-run is named within
//  interval x liveness; the chief waits on (a supervisor may be restarting
//  it) until --timeout-secs, then exits 1.
Test (distributed, a_stopped_ps_is_detected_by_heartbeats, .timeout = 120 * ZA_TEST_SLOWDOWN)
{
    za_test_dir_create ("za_distributed_hb");
    char *cluster = s_cluster_file (0, 1, 0, NULL);
    char *model_dir = za_test_path ("run");
    const char *roles [2] = {"ps", "chief"};
    pid_t pids [2];
    char *errs [2];
    for (int t = 0; t < 2; t++) {
        const char *args [] = {"--cluster", cluster, "--role", roles [t], "--model", "dnn",
                               "--max-steps", "10000000", "--save-summary-steps", "10",
                               "--model-dir", model_dir, "--threads", "1", "--no-eval",
                               "--timeout-secs", HB_TIMEOUT_SECS, "--heartbeat-ivl-ms", "200",
                               "--heartbeat-liveness", "3", "--log-step-count-steps", "0", NULL};
        errs [t] = za_test_path (t? "chief.err": "ps.err");
        char *out = za_test_path ("task.out");
        pids [t] = za_test_spawn (args, out, errs [t]);
        free (out);
    }
    char *metrics = za_test_path ("run/metrics.jsonl");
    double waited = 0;
    while (access (metrics, F_OK) != 0 && waited < 60)
        usleep (20000), waited += 0.02;
    cr_assert_lt (waited, 60, "no training within 60 s");
    kill (pids [0], SIGSTOP);
    double stopped = za_clock_mono ();
    int status = za_test_wait (pids [1], 60);
    double took = za_clock_mono () - stopped;
    kill (pids [0], SIGKILL);
    za_test_wait (pids [0], 10);
    char *err = za_test_read_file (errs [1], NULL);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 1, "chief exited %d: %s",
               WIFEXITED (status)? WEXITSTATUS (status): -1, err);
    cr_expect (strstr (err, "missed 3 heartbeats") != NULL, "%s", err);
    cr_expect (strstr (err, "stopped, hung or restarting") != NULL, "%s", err);
    cr_expect (strstr (err, "did not answer") != NULL, "%s", err);
    //  Named once, however long the silence.
    const char *named = strstr (err, "missed 3 heartbeats");
    cr_expect (named && !strstr (named + 1, "missed 3 heartbeats"), "%s", err);
    double timeout = atof (HB_TIMEOUT_SECS);
    cr_expect (took > timeout - 1.5 && took < timeout + 10, "gave up after %.1f s (the "
               "timeout is %.0f s)", took, timeout);
    free (err);
    for (int t = 0; t < 2; t++)
        free (errs [t]);
    free (metrics);
    free (model_dir);
    free (cluster);
    za_test_dir_remove ();
}

//  A restart test's run: the model, its length and checkpoint interval.
typedef struct {
    const char *model;
    const char *max_steps;
    const char *ckpt_steps;
} s_restart_run_t;

#define RESTART_MAX_STEPS 1500          //  the ps restart test's (s_cnn_run)
#define RESTART_CKPT_STEPS 50
static const s_restart_run_t s_dnn_run = {"dnn", "12000", "500"};
static const s_restart_run_t s_cnn_run = {"cnn", "1500", "50"};

//  The stderr files of a restart test's processes: task0.err .. task<n-1>.err.
static void
s_err_paths (char **errs, int n)
{
    for (int i = 0; i < n; i++) {
        char name [32];
        snprintf (name, sizeof name, "task%d.err", i);
        errs [i] = za_test_path (name);
    }
}

//  Starts one role of a restart test; its stderr goes to err_path.
static pid_t
s_start_role (const s_restart_run_t *run, const char *cluster, const char *role,
              const char *model_dir, const char *err_path)
{
    const char *args [] = {"--cluster", cluster, "--role", role, "--model", run->model,
                           "--batch-size", "32", "--max-steps", run->max_steps,
                           "--save-checkpoints-steps", run->ckpt_steps,
                           "--save-summary-steps", "50",
                           "--model-dir", model_dir, "--threads", "1", "--no-eval",
                           "--timeout-secs", "60", "--log-step-count-steps", "0", NULL};
    char *out = za_test_path ("task.out");
    pid_t pid = za_test_spawn (args, out, err_path);
    free (out);
    return pid;
}

//  Waits up to 60 s for the first checkpoint in the test's run/ dir.
static void
s_wait_first_checkpoint (void)
{
    char *index = za_test_path ("run/checkpoint");
    double waited = 0;
    while (access (index, F_OK) != 0 && waited < 60)
        usleep (20000), waited += 0.02;
    free (index);
    cr_assert_lt (waited, 60, "no checkpoint within 60 s");
}

//  Recovery without a supervisor (it is started again by hand here): a worker
//  killed with SIGKILL and started again rejoins; a chief killed and started
//  again goes on from the ps's step. The run reaches max_steps, every process
//  exits 0, every checkpoint loads.
Test (distributed, killed_worker_and_chief_come_back, .timeout = 300 * ZA_TEST_SLOWDOWN)
{
    za_test_dir_create ("za_distributed_restart");
    char *cluster = s_cluster_file (1, 1, 0, NULL);
    char *model_dir = za_test_path ("run");
    const char *roles [3] = {"ps", "worker", "chief"};
    char *errs [5];
    pid_t pids [3];
    s_err_paths (errs, 5);
    for (int t = 0; t < 3; t++)
        pids [t] = s_start_role (&s_dnn_run, cluster, roles [t], model_dir, errs [t]);
    s_wait_first_checkpoint ();
    //  The worker, then the chief: killed, and started again.
    cr_assert_eq (kill (pids [1], SIGKILL), 0);
    za_test_wait (pids [1], 10);
    pids [1] = s_start_role (&s_dnn_run, cluster, roles [1], model_dir, errs [3]);
    //  The new worker is in (it says its shard), then the chief goes.
    free (za_test_wait_for_text (errs [3], "shard", 60));
    //  Still running (not an unreaped zombie that finished).
    cr_assert_eq (waitpid (pids [2], NULL, WNOHANG), 0,
                  "the chief finished before it could be killed");
    cr_assert_eq (kill (pids [2], SIGKILL), 0);
    za_test_wait (pids [2], 10);
    pids [2] = s_start_role (&s_dnn_run, cluster, roles [2], model_dir, errs [4]);
    for (int t = 0; t < 3; t++) {
        int status = za_test_wait (pids [t], 240);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s exited %d", roles [t],
                   WIFEXITED (status)? WEXITSTATUS (status): -1);
    }
    char *chief_err = za_test_read_file (errs [4], NULL);
    cr_expect (strstr (chief_err, "going on from there") != NULL, "%s", chief_err);
    cr_expect (strstr (chief_err, "restored step") == NULL, "the ps were rewound: %s",
               chief_err);
    int count = 0;
    int64_t newest = za_test_expect_all_load (model_dir, &count);
    cr_expect_geq (newest, 12000);
    free (chief_err);
    for (int i = 0; i < 5; i++)
        free (errs [i]);
    free (model_dir);
    free (cluster);
    za_test_dir_remove ();
}

//  A static cluster (no broker) whose chief alone gets SIGTERM (its node
//  drained): it saves the step it reached, and its stop tells the ps, and
//  through them the worker, that the job stops for preemption: every task
//  exits 75, as the job does (the ps and the worker exited 0 there, saying
//  training was over). The same commands again go on from that checkpoint.
Test (distributed, a_preempted_chief_stops_every_task_for_a_requeue,
      .timeout = 300 * ZA_TEST_SLOWDOWN)
{
    za_test_dir_create ("za_distributed_preempt");
    char *cluster = s_cluster_file (1, 1, 0, NULL);
    char *model_dir = za_test_path ("run");
    const char *roles [3] = {"ps", "worker", "chief"};
    char *errs [6];
    pid_t pids [3];
    s_err_paths (errs, 6);
    for (int t = 0; t < 3; t++)
        pids [t] = s_start_role (&s_cnn_run, cluster, roles [t], model_dir, errs [t]);
    s_wait_first_checkpoint ();
    cr_assert_eq (waitpid (pids [2], NULL, WNOHANG), 0,
                  "the chief finished before it could be preempted");
    cr_assert_eq (kill (pids [2], SIGTERM), 0);
    for (int t = 0; t < 3; t++) {
        int status = za_test_wait (pids [t], 120);
        char *err = za_test_read_file (errs [t], NULL);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 75, "%s exited %d: %s",
                   roles [t], WIFEXITED (status)? WEXITSTATUS (status): -1, err);
        cr_expect (err && strstr (err, "preempted at step "), "%s: %s", roles [t], err);
        free (err);
    }
    int64_t stopped = za_test_expect_all_load (model_dir, NULL);
    cr_assert (stopped >= RESTART_CKPT_STEPS && stopped < RESTART_MAX_STEPS, "%lld",
               (long long) stopped);
    //  Again: the chief restores that step, and every task ends at max_steps.
    for (int t = 0; t < 3; t++)
        pids [t] = s_start_role (&s_cnn_run, cluster, roles [t], model_dir, errs [3 + t]);
    for (int t = 0; t < 3; t++) {
        int status = za_test_wait (pids [t], 240);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s exited %d", roles [t],
                   WIFEXITED (status)? WEXITSTATUS (status): -1);
    }
    char *chief_err = za_test_read_file (errs [5], NULL);
    char restored [64];
    snprintf (restored, sizeof restored, "restored step %lld ", (long long) stopped);
    cr_expect (chief_err && strstr (chief_err, restored), "no '%s': %s", restored, chief_err);
    cr_expect_geq (za_test_expect_all_load (model_dir, NULL), RESTART_MAX_STEPS);
    free (chief_err);
    for (int i = 0; i < 6; i++)
        free (errs [i]);
    free (model_dir);
    free (cluster);
    za_test_dir_remove ();
}

//  A ps killed (SIGKILL) mid-run and started again at the same endpoint, as
//  a supervisor would: it comes back without state, the chief gives it the
//  values it pulled a step ago (no rewind to the checkpoint) and training goes
//  on. Every process exits 0,
//  the run reaches max_steps, every checkpoint loads and the ps ends holding
//  exactly the final checkpoint.
Test (distributed, a_restarted_ps_gets_the_chiefs_values, .timeout = 180 * ZA_TEST_SLOWDOWN)
{
    za_test_dir_create ("za_distributed_ps_restart");
    char *cluster = s_cluster_file (1, 1, 0, NULL);
    char *model_dir = za_test_path ("run");
    const char *roles [3] = {"ps", "chief", "worker"};
    char *errs [4];                     //  the ps, the chief, the worker, the ps again
    s_err_paths (errs, 4);
    pid_t pids [3];
    for (int t = 0; t < 3; t++)
        pids [t] = s_start_role (&s_cnn_run, cluster, roles [t], model_dir, errs [t]);
    s_wait_first_checkpoint ();
    cr_assert_eq (kill (pids [0], SIGKILL), 0);
    int64_t *steps = NULL;
    int listed = za_checkpoint_list (model_dir, &steps);
    int64_t newest_at_kill = listed > 0? steps [listed - 1]: 0;
    free (steps);
    za_test_wait (pids [0], 10);
    cr_assert_eq (waitpid (pids [1], NULL, WNOHANG), 0,
                  "the chief finished before the ps could be killed");
    pids [0] = s_start_role (&s_cnn_run, cluster, roles [0], model_dir, errs [3]);
    const char *names [3] = {"the restarted ps", "the chief", "the worker"};
    for (int t = 0; t < 3; t++) {
        int status = za_test_wait (pids [t], 120);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s exited %d: %s",
                   names [t], WIFEXITED (status)? WEXITSTATUS (status): -1,
                   (char *) za_test_read_file (errs [t? t: 3], NULL));
    }
    //  The chief gave the ps the values it had pulled, not a checkpoint: training
    //  went on from at least the step of the checkpoint there was at the kill.
    char *chief_err = za_test_read_file (errs [1], NULL);
    cr_expect_null (strstr (chief_err, "reloading step "), "%s", chief_err);
    //  The chief's pulled values, a worker's newer offer, or the checkpoint's
    //  when it was the newest (a snapshot may be a push ahead of the last pull).
    const char *given = strstr (chief_err, "lost its state (restarted?): it gets ");
    cr_assert_not_null (given, "%s", chief_err);
    cr_expect (strstr (given, "(no rewind)"), "%s", chief_err);
    const char *from = strstr (given, "going on from step ");
    long long went_on = from? atoll (from + strlen ("going on from step ")): -1;
    cr_expect (went_on >= newest_at_kill && went_on < RESTART_MAX_STEPS,
               "went on from step %lld (a checkpoint of step %lld was there)", went_on,
               (long long) newest_at_kill);
    //  Every checkpoint loads; the newest is the final one, at max_steps (a
    //  worker's push may land between the chief's last step and its hold).
    int count = 0;
    int64_t newest = za_test_expect_all_load (model_dir, &count);
    cr_expect_geq (newest, RESTART_MAX_STEPS);
    cr_expect_leq (newest, RESTART_MAX_STEPS + 10);
    //  The restarted ps holds exactly the final checkpoint.
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (model_dir, &found);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    char *ps_err = za_test_read_file (errs [3], NULL);
    long long step;
    unsigned crc;
    unsigned long long dropped;
    s_ps_report (ps_err, 0, &step, &crc, &dropped);
    za_stack_spec_t cnn;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &cnn), 0);
    za_input_shape_t shape = {28, 28, 1};
    cr_expect_eq (crc, za_test_ckpt_crc_of_ps (ckpt, &cnn, shape, 1, 1u << 20, 0),
                  "the ps holds %08x", crc);
    cr_expect_eq (step, za_checkpoint_step (ckpt));
    cr_expect_eq (dropped, 0ull);
    za_checkpoint_destroy (&ckpt);
    free (ps_err);
    free (chief_err);
    for (int i = 0; i < 4; i++)
        free (errs [i]);
    free (model_dir);
    free (cluster);
    za_test_dir_remove ();
}
