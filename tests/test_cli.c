/*  test_cli.c: zactor-run as a real process: help, argument errors and their exit
    status, a missing data set, and resuming after SIGKILL from intact checkpoints.  */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_util.h"
#include "za_test.h"

#define EXIT_USAGE 2
#define PROCESS_TIMEOUT_S 120.0
#define WAIT_POLL_US 1000
#define RESUME_MAX_STEPS 1500
#define RESUME_CKPT_STEPS 50
#define RESUME_MIN_CKPTS 2

static void
s_setup (void)
{
    za_test_dir_create ("za_cli_test");
    za_test_binary ();
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (cli, .init = s_setup, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  Help and argument errors

Test (cli, help_exits_0_and_names_the_flags)
{
    const char *args [] = {"--help", NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "stderr: %s", result.err);
    cr_assert (strstr (result.out, "--model-dir"), "help: %s", result.out);
    cr_assert (strstr (result.out, "--save-checkpoints-steps"), "help: %s", result.out);
    cr_assert (strstr (result.out, "Usage: zactor-run"), "help: %s", result.out);
    za_test_result_free (&result);

    const char *short_args [] = {"-h", NULL};
    result = za_test_run (short_args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0);
    cr_assert (strstr (result.out, "--keep-checkpoint-max"), "help: %s", result.out);
    za_test_result_free (&result);

    //  --role filters the help before or after --help alike (a ps reads no
    //  --augment).
    const char *orders [2][4] = {{"--role", "ps", "--help", NULL},
                                 {"--help", "--role", "ps", NULL}};
    char *outs [2];
    for (int o = 0; o < 2; o++) {
        result = za_test_run (orders [o], PROCESS_TIMEOUT_S);
        cr_expect_eq (result.exit_code, 0, "%s", result.err);
        cr_expect (!strstr (result.out, "--augment"), "%s: %s", orders [o][0], result.out);
        outs [o] = strdup (result.out);
        za_test_result_free (&result);
    }
    cr_expect_str_eq (outs [0], outs [1]);
    free (outs [0]), free (outs [1]);
}

Test (cli, bad_model_spec_exits_2_with_a_caret_under_the_token)
{
    char *model_dir = za_test_path ("run");
    const char *spec = "conv2d(32,3,relu) conv3d(8,3) dense(10)";
    const char *args [] = {"--model", spec, "--model-dir", model_dir, "--max-steps", "1",
                           "--no-eval", "--threads", "1", NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "exit %d, stderr: %s", result.exit_code,
                  result.err);
    cr_assert (strstr (result.err, "conv3d"), "stderr: %s", result.err);
    //  The caret sits under the bad token on the line before it.
    const char *caret = strchr (result.err, '^');
    cr_assert_not_null (caret, "no caret in: %s", result.err);
    const char *caret_line = caret;
    while (caret_line > result.err && caret_line [-1] != '\n')
        caret_line--;
    cr_assert_gt (caret_line, result.err);
    const char *spec_line = caret_line - 1;
    while (spec_line > result.err && spec_line [-1] != '\n')
        spec_line--;
    const char *token = strstr (spec_line, "conv3d");
    cr_assert (token && token < caret_line, "the line above the caret lacks the token: %s",
               result.err);
    cr_assert_eq (token - spec_line, caret - caret_line, "caret at column %d, token at %d",
                  (int) (caret - caret_line), (int) (token - spec_line));
    cr_assert_neq (access (model_dir, F_OK), 0, "a bad spec still created %s", model_dir);
    za_test_result_free (&result);
    free (model_dir);
}

Test (cli, bad_arguments_exit_2)
{
    const char *unknown [] = {"--no-such-flag", NULL};
    za_test_result_t result = za_test_run (unknown, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "unknown flag: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "no-such-flag"), "stderr: %s", result.err);
    za_test_result_free (&result);

    const char *zero_batch [] = {"--batch-size", "0", NULL};
    result = za_test_run (zero_batch, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "--batch-size 0: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "--batch-size"), "stderr: %s", result.err);
    za_test_result_free (&result);

    const char *optimizer [] = {"--optimizer", "rmsprop", NULL};
    result = za_test_run (optimizer, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "rmsprop: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "rmsprop"), "stderr: %s", result.err);
    cr_assert (strstr (result.err, "adam"), "no list of known optimizers: %s", result.err);
    za_test_result_free (&result);

    const char *both [] = {"--no-eval", "--train-and-evaluate", NULL};
    result = za_test_run (both, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "--no-eval --train-and-evaluate: exit %d",
                  result.exit_code);
    cr_assert (strstr (result.err, "give one of them"), "stderr: %s", result.err);
    za_test_result_free (&result);

    const char *stray [] = {"--no-eval", "extra", NULL};
    result = za_test_run (stray, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "stray argument: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "extra"), "stderr: %s", result.err);
    za_test_result_free (&result);
}

//  --device: a bad text, and CUDA where there is no GPU (or no CUDA build),
//  are one clear error and exit 2 before any data is read.
Test (cli, a_device_that_is_not_there_exits_2)
{
    const char *bad [] = {"--device", "gpu", "--no-eval", NULL};
    za_test_result_t result = za_test_run (bad, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "--device gpu: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "'gpu'") && strstr (result.err, "cuda:N"), "stderr: %s",
               result.err);
    za_test_result_free (&result);

    char *model_dir = za_test_path ("cuda");
    const char *cuda [] = {"--device", "cuda", "--max-steps", "2", "--no-eval",
                           "--model-dir", model_dir, NULL};
    result = za_test_run (cuda, PROCESS_TIMEOUT_S);
    if (result.exit_code == 0)
        cr_skip_test ("a GPU is here: --device cuda trained");
    cr_assert_eq (result.exit_code, EXIT_USAGE, "--device cuda: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "--device cpu"), "stderr: %s", result.err);
    cr_assert_eq (za_test_count (result.err, "error"), 1, "stderr: %s", result.err);
    cr_assert (access (model_dir, F_OK) != 0, "a model dir was made");
    za_test_result_free (&result);
    free (model_dir);
}

Test (cli, missing_data_set_exits_1_naming_the_file)
{
    char *empty = za_test_path ("empty");
    cr_assert_eq (mkdir (empty, 0755), 0);
    char *model_dir = za_test_path ("run");
    const char *args [] = {"--dataset-dir", empty, "--model-dir", model_dir, "--max-steps",
                           "1", NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 1, "exit %d, stderr: %s", result.exit_code, result.err);
    cr_assert (strstr (result.err, "train-images-idx3-ubyte"), "stderr: %s", result.err);
    cr_assert (strstr (result.err, empty), "stderr does not name the directory: %s",
               result.err);
    cr_assert_neq (access (model_dir, F_OK), 0);
    za_test_result_free (&result);
    //  --eval-data that is not there is named as --eval-data's (not as
    //  a --dataset-dir to give).
    const char *eval [] = {"--eval-data", empty, "--model-dir", model_dir, "--max-steps", "1",
                           NULL};
    result = za_test_run (eval, PROCESS_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 1, "exit %d, stderr: %s", result.exit_code, result.err);
    cr_expect (strstr (result.err, "cannot read the evaluation data in")
               && strstr (result.err, "--eval-data: a folder of Fashion-MNIST's t10k"), "%s",
               result.err);
    za_test_result_free (&result);
    free (model_dir);
    free (empty);
}


//  --------------------------------------------------------------------------
//  SIGKILL and resume

Test (cli, sigkill_then_resume_from_the_newest_intact_checkpoint)
{
    char *model_dir = za_test_path ("run");
    const char *args [] = {"--model", "dnn", "--hidden-units", "64", "--model-dir", model_dir,
                           "--save-checkpoints-steps", "50", "--max-steps", "1500",
                           "--no-eval", "--threads", "1", NULL};
    char *out_path = za_test_path ("first.out");
    char *err_path = za_test_path ("first.err");
    pid_t pid = za_test_spawn (args, out_path, err_path);

    //  Kill it as soon as it has written two checkpoints.
    double deadline = za_clock_mono () + PROCESS_TIMEOUT_S;
    int count = 0, status = 0, exited = 0;
    while (count < RESUME_MIN_CKPTS) {
        int64_t *steps = NULL;
        count = za_checkpoint_list (model_dir, &steps);
        free (steps);
        if (count >= RESUME_MIN_CKPTS)
            break;
        if (waitpid (pid, &status, WNOHANG) == pid) {
            exited = 1;
            break;
        }
        if (za_clock_mono () > deadline) {
            kill (pid, SIGKILL);
            waitpid (pid, &status, 0);
            cr_assert_fail ("no %d checkpoints after %.0f s", RESUME_MIN_CKPTS,
                            PROCESS_TIMEOUT_S);
        }
        usleep (WAIT_POLL_US);
    }
    cr_assert_not (exited, "zactor-run ended (status 0x%x) before it could be killed",
                   status);
    cr_assert_eq (kill (pid, SIGKILL), 0);
    cr_assert_eq (waitpid (pid, &status, 0), pid);
    cr_assert (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL,
               "zactor-run ended (status 0x%x) before the kill", status);

    int before_count;
    int64_t before_newest = za_test_expect_all_load (model_dir, &before_count);
    cr_assert_geq (before_count, RESUME_MIN_CKPTS);
    cr_assert_geq (before_newest, RESUME_MIN_CKPTS * RESUME_CKPT_STEPS);
    cr_assert_lt (before_newest, RESUME_MAX_STEPS, "it finished before the kill");
    cr_assert_eq (before_newest % RESUME_CKPT_STEPS, 0);
    cr_log_info ("killed with %d checkpoints, the newest at step %lld", before_count,
                 (long long) before_newest);

    //  The same command again continues from there to the end.
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "exit %d, stderr: %s", result.exit_code, result.err);
    char restored [64];
    snprintf (restored, sizeof restored, "restored step %lld ", (long long) before_newest);
    cr_assert (strstr (result.err, restored), "expected '%s' in: %s", restored, result.err);
    int after_count;
    int64_t after_newest = za_test_expect_all_load (model_dir, &after_count);
    cr_assert_eq (after_newest, RESUME_MAX_STEPS, "newest checkpoint %lld",
                  (long long) after_newest);
    cr_assert_geq (after_count, 1);
    za_test_result_free (&result);

    free (out_path);
    free (err_path);
    free (model_dir);
}

//  Each of these is refused with exit 2 and a message naming what is wrong,
//  before any training.
Test (cli, bad_values_exit_2_before_training)
{
    struct {
        const char *args [8];
        const char *says;
    } cases [] = {
        {{"--learning-rate", "0", NULL}, "--learning-rate"},
        {{"--learning-rate", "inf", NULL}, "--learning-rate"},
        {{"--threads", "65", NULL}, "--threads"},
        {{"--hidden-units", "64", NULL}, "--model dnn only"},
        {{"--model", "dnn", "--hidden-units", "64,x", NULL}, "--hidden-units"},
        {{"--model", "flatten dense(5)", NULL}, "dense(10)"},
        {{"--model", "maxpool(2,same) flatten dense(10)", NULL}, "no padding"},
        {{"--model-dir", "", NULL}, "--model-dir is empty"},
        {{"--role", "broker", "--bind", "tcp://127.0.0.1:99999", NULL},
         "the port in 1..65535"},
        {{"--role", "worker", "--broker", "tcp://127.0.0.1:-5", NULL},
         "the port in 1..65535"},
        {{"--local", "--role", "worker", NULL}, "--local starts every task itself"},
        {{"--class-names", "a,b", NULL}, "--class-names applies to images"},
        {{"--validation-split", "0.2", NULL}, "--validation-split applies to images"},
        {{"--trace", "/nonexistent/trace.json", NULL}, "cannot write in /nonexistent/"},
        {{"--trace", "", NULL}, "--trace is empty"},
        {{"--save-checkpoints-steps", "20", "--save-checkpoints-secs", "5", NULL},
         "give one of them"},
        {{"--no-eval", "--export-onnx", NULL}, "--no-eval and --export-onnx"},
        {{"--no-eval", "--eval-steps", "3", NULL}, "--no-eval and --eval-steps"},
        {{"--warm-start-vars", "conv2d", NULL}, "goes with --warm-start-from"},
        {{"--throttle-secs", "5", NULL}, "paces an evaluator"},
        {{"--elastic-batch", "scale-lr", "--lr-schedule",
          "piecewise_constant(boundaries=[5], values=[0.1, 0.01])", NULL},
         "which --lr-schedule piecewise_constant does not use"},
        {{"--lr-schedule", "cosine_decay(decay_steps=20, staircase=true)", NULL},
         "cosine_decay takes decay_steps, alpha"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        za_test_result_t result = za_test_run (cases [i].args, PROCESS_TIMEOUT_S);
        cr_expect_eq (result.exit_code, EXIT_USAGE, "case %zu (%s): exit %d", i,
                      cases [i].says, result.exit_code);
        cr_expect (strstr (result.err, cases [i].says) != NULL, "case %zu: stderr: %s", i,
                   result.err);
        cr_expect (strstr (result.err, "step ") == NULL, "case %zu trained", i);
        za_test_result_free (&result);
    }
}

//  --------------------------------------------------------------------------
//  Distributed roles: mistakes in the cluster exit 2 before any socket opens;
//  a peer that never answers makes a role exit 1 after --timeout-secs.


Test (cli, cluster_mistakes_exit_2)
{
    struct {
        const char *json;
        const char *role;
        const char *says;
    } cases [] = {
        {"{\"cluster\": {\"chief\": [\"127.0.0.1:1\", \"127.0.0.1:2\"], \"ps\": [\"127.0.0.1:3\"]}}",
         "chief", "chief"},
        {"{\"cluster\": {\"worker\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:3\"]}}",
         "worker", "chief"},
        {"{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:1\"]}}",
         "ps", "127.0.0.1:1"},
        {"{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:3\"]}}",
         "worker", "no worker job"},
        {"{\"cluster\": {\"chief\": [\"127.0.0.1:1\"],\n \"ps\": [\"127.0.0.1:3\"],}}",
         "chief", "line 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        char name [32];
        snprintf (name, sizeof name, "cluster%zu.json", i);
        char *path = za_test_write (name, cases [i].json);
        const char *args [] = {"--cluster", path, "--role", cases [i].role, "--timeout-secs",
                               "5", NULL};
        za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
        cr_expect_eq (result.exit_code, EXIT_USAGE, "case %zu: exit %d: %s", i,
                      result.exit_code, result.err);
        cr_expect (strstr (result.err, cases [i].says) != NULL, "case %zu: %s", i, result.err);
        //  Nothing was started: no role announced itself.
        cr_expect (strstr (result.err, "serving") == NULL && strstr (result.err, "of the cluster") == NULL,
                   "case %zu started a role", i);
        za_test_result_free (&result);
        free (path);
    }
    //  An evaluator with no cluster under a synchronous strategy cannot
    //  know from --epochs where the chief ends.
    const char *alone [] = {"--role", "evaluator", "--strategy", "allreduce", "--epochs", "2",
                            "--timeout-secs", "5", NULL};
    za_test_result_t result = za_test_run (alone, PROCESS_TIMEOUT_S);
    cr_expect_eq (result.exit_code, EXIT_USAGE, "%s", result.err);
    cr_expect (strstr (result.err, "--epochs does not say where training ends; give the "
                                   "cluster, or --max-steps"), "%s", result.err);
    za_test_result_free (&result);
    //  A role with no cluster at all: says where one comes from.
    unsetenv ("TF_CONFIG");
    const char *chief [] = {"--role", "chief", "--timeout-secs", "5", NULL};
    result = za_test_run (chief, PROCESS_TIMEOUT_S);
    cr_expect_eq (result.exit_code, EXIT_USAGE, "%s", result.err);
    cr_expect (strstr (result.err, "--role chief: no cluster: set TF_CONFIG"), "%s",
               result.err);
    za_test_result_free (&result);
    //  A broker address that is no address: said, and an exit, not a crash
    //  (its reports once went to a client never made: SIGSEGV).
    const char *brokers [] = {"garbage", ""};
    for (int b = 0; b < 2; b++) {
        const char *bad [] = {"--role", "worker", "--broker", brokers [b], "--timeout-secs",
                              "5", NULL};
        result = za_test_run (bad, PROCESS_TIMEOUT_S);
        cr_expect_eq (result.exit_code, 1, "--broker '%s': exit %d: %s", brokers [b],
                      result.exit_code, result.err);
        cr_expect (strstr (result.err, "cannot connect to the broker"), "%s", result.err);
        za_test_result_free (&result);
    }
}

Test (cli, unreachable_peers_exit_1_after_the_timeout)
{
    //  Nothing listens on the ps port: the chief gives up on it.
    char *path = za_test_write ("alone.json",
        "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:9\"]}}");
    char *model_dir = za_test_path ("run");
    const char *chief [] = {"--cluster", path, "--role", "chief", "--timeout-secs", "2",
                            "--model", "linear", "--model-dir", model_dir, NULL};
    double start = za_clock_mono ();
    za_test_result_t result = za_test_run (chief, PROCESS_TIMEOUT_S);
    double took = za_clock_mono () - start;
    cr_expect_eq (result.exit_code, 1, "chief: exit %d: %s", result.exit_code, result.err);
    cr_expect (strstr (result.err, "ps 0 at tcp://127.0.0.1:9 did not answer") != NULL, "%s",
               result.err);
    cr_expect (took < 30, "took %.1f s", took);
    za_test_result_free (&result);
    //  A ps that no chief ever initialises gives up too.
    const char *ps [] = {"--cluster", path, "--role", "ps", "--timeout-secs", "2", "--model",
                         "linear", NULL};
    result = za_test_run (ps, PROCESS_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 1, "ps: exit %d: %s", result.exit_code, result.err);
    cr_expect (strstr (result.err, "no chief initialised this ps") != NULL
               || strstr (result.err, "cannot bind") != NULL, "%s", result.err);
    za_test_result_free (&result);
    free (model_dir);
    free (path);
}

//  How many lines of text name needle.
static int
s_lines_naming (const char *text, const char *needle)
{
    int lines = 0;
    for (const char *line = text; line && *line; ) {
        const char *end = strchr (line, '\n');
        size_t length = end? (size_t) (end - line): strlen (line);
        char *copy = strndup (line, length);
        lines += strstr (copy, needle) != NULL;
        free (copy);
        line = end? end + 1: NULL;
    }
    return lines;
}

//  A cluster naming a host that does not resolve: libzmq would look it up in
//  silence for ever. Every role of every strategy (and a task given a broker
//  whose host does not resolve) says so in one line naming the host and ends
//  within --timeout-secs + 5 s: exit 1, or 2 for the task that cannot bind its
//  own address.
Test (cli, a_host_that_does_not_resolve_ends_every_role_within_the_timeout)
{
    const char *bad = "no-such-host.invalid";
    const char *strategies [] = {"ps-async", "ps-sync", "allreduce"};
    const char *roles [][2] = {{"chief", "0"}, {"worker", "0"}, {"worker", "1"}, {"ps", "0"},
                               {"evaluator", "0"}};
    enum { CASES = 3 * 5 + 1 };
    pid_t pids [CASES];
    char *outs [CASES], *errs [CASES], what [CASES][192];
    char *paths [3];
    double started = za_clock_mono ();
    int n = 0;
    for (int st = 0; st < 3; st++) {
        char text [512], name [32], ps_job [64] = "";
        int ps = strcmp (strategies [st], "allreduce") != 0;
        if (ps)
            snprintf (ps_job, sizeof ps_job, ", \"ps\": [\"127.0.0.1:%d\"]",
                      za_test_free_port ());
        snprintf (text, sizeof text, "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": "
                  "[\"127.0.0.1:%d\", \"%s:%d\"]%s, \"evaluator\": [\"127.0.0.1:%d\"]}}",
                  za_test_free_port (), za_test_free_port (), bad, za_test_free_port (), ps_job,
                  za_test_free_port ());
        snprintf (name, sizeof name, "bad-%d.json", st);
        paths [st] = za_test_write (name, text);
        for (int r = 0; r < 5; r++) {
            if (!ps && strcmp (roles [r][0], "ps") == 0)
                continue;
            char model_dir [64];
            snprintf (model_dir, sizeof model_dir, "run-%d-%d", st, r);
            char *dir = za_test_path (model_dir);
            snprintf (what [n], sizeof what [n], "%s %s %s", strategies [st], roles [r][0],
                      roles [r][1]);
            char out [32], err [32];
            snprintf (out, sizeof out, "out-%d", n);
            snprintf (err, sizeof err, "err-%d", n);
            outs [n] = za_test_path (out);
            errs [n] = za_test_path (err);
            const char *args [] = {"--cluster", paths [st], "--role", roles [r][0], "--index",
                                   roles [r][1], "--strategy", strategies [st],
                                   "--timeout-secs", "2", "--model", "linear", "--model-dir",
                                   dir, NULL};
            pids [n] = za_test_spawn (args, outs [n], errs [n]);
            n++;
            free (dir);
        }
    }
    char broker [128];
    snprintf (broker, sizeof broker, "tcp://%s:%d", bad, za_test_free_port ());
    snprintf (what [n], sizeof what [n], "a worker given the broker %s", broker);
    outs [n] = za_test_path ("out-broker");
    errs [n] = za_test_path ("err-broker");
    const char *with_broker [] = {"--broker", broker, "--role", "worker", "--timeout-secs", "2",
                                  NULL};
    pids [n] = za_test_spawn (with_broker, outs [n], errs [n]);
    n++;
    for (int i = 0; i < n; i++) {
        int status = za_test_wait (pids [i], PROCESS_TIMEOUT_S);
        double took = za_clock_mono () - started;
        char *err = za_test_read_file (errs [i], NULL);
        int code = WIFEXITED (status)? WEXITSTATUS (status): -1;
        cr_expect (code == 1 || code == 2, "%s: exit %d: %s", what [i], code, err);
        //  All started together: each ends within the timeout + 5 s of the start.
        cr_expect (took < 2 + 5, "%s: ended %.1f s after the start", what [i], took);
        cr_expect_eq (s_lines_naming (err, bad), 1, "%s: not one line naming %s: %s", what [i],
                      bad, err);
        cr_expect (strstr (err, "cannot send") == NULL, "%s: %s", what [i], err);
        free (err);
        free (outs [i]);
        free (errs [i]);
    }
    for (int st = 0; st < 3; st++)
        free (paths [st]);
}

Test (cli, tf_config_selects_the_role)
{
    //  TF_CONFIG alone (no --role): the task comes from it, here a worker
    //  whose ps never answers.
    setenv ("TF_CONFIG", "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": "
            "[\"127.0.0.1:2\"], \"ps\": [\"127.0.0.1:9\"]}, \"task\": {\"type\": \"worker\", "
            "\"index\": 0}, \"environment\": \"cloud\", \"rpc_layer\": \"grpc\"}", 1);
    const char *args [] = {"--timeout-secs", "2", "--model", "linear", NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    unsetenv ("TF_CONFIG");
    cr_expect_eq (result.exit_code, 1, "exit %d: %s", result.exit_code, result.err);
    cr_expect (strstr (result.err, "worker 0 of the cluster") != NULL, "%s", result.err);
    za_test_result_free (&result);
    //  TF_CONFIG's worker 1 and --role worker: worker 1 still (it was worker
    //  0, a second chief's rank under all-reduce); --index alone is refused
    //  (it was ignored).
    setenv ("TF_CONFIG", "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": "
            "[\"127.0.0.1:2\", \"127.0.0.1:3\"], \"ps\": [\"127.0.0.1:9\"]}, \"task\": "
            "{\"type\": \"worker\", \"index\": 1}}", 1);
    const char *role [] = {"--role", "worker", "--timeout-secs", "2", "--model", "linear", NULL};
    result = za_test_run (role, PROCESS_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 1, "exit %d: %s", result.exit_code, result.err);
    cr_expect (strstr (result.err, "worker 1 of the cluster") != NULL, "%s", result.err);
    za_test_result_free (&result);
    const char *index [] = {"--index", "0", "--timeout-secs", "2", "--model", "linear", NULL};
    result = za_test_run (index, PROCESS_TIMEOUT_S);
    unsetenv ("TF_CONFIG");
    cr_expect_eq (result.exit_code, 2, "exit %d: %s", result.exit_code, result.err);
    cr_expect (strstr (result.err, "--index 0 goes with --role") != NULL, "%s", result.err);
    za_test_result_free (&result);
}

//  The --local banner names a zactor-top a user can paste: the build's own,
//  by a path from here (it is not on $PATH), or by its bare name once $PATH
//  finds that very file (installed).
static char *
s_banner_top (const char *dir)
{
    char *model_dir = za_test_path (dir);
    const char *args [] = {"--local", "--model", "linear", "--workers", "1", "--evaluators",
                           "0", "--max-steps", "5", "--no-eval", "--model-dir", model_dir, NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    const char *watch = strstr (result.out, "watch:  ");
    char command [4096] = "";
    cr_assert (watch && sscanf (watch + 8, "%4095s --broker", command) == 1, "%s", result.out);
    za_test_result_free (&result);
    free (model_dir);
    return strdup (command);
}

Test (cli, the_local_banner_names_a_zactor_top_that_runs)
{
    const char *path = getenv ("PATH");
    char *saved = strdup (path? path: "/usr/bin:/bin");
    setenv ("PATH", "/usr/bin:/bin", 1);
    char *command = s_banner_top ("banner1");
    cr_expect (strstr (command, "/zactor-top") && access (command, X_OK) == 0,
               "'%s' is not a program from here", command);
    //  The build folder on $PATH: the bare name finds the same program.
    const char *top = za_test_program ("zactor-top");
    char with_build [8192];
    snprintf (with_build, sizeof with_build, "%.*s:/usr/bin:/bin",
              (int) (strrchr (top, '/') - top), top);
    setenv ("PATH", with_build, 1);
    free (command);
    command = s_banner_top ("banner2");
    cr_expect_str_eq (command, "zactor-top");
    setenv ("PATH", saved, 1);
    free (command);
    free (saved);
}

//  The progress ends on one 100% line, the step at most the total, with the
//  time the job took instead of an ETA.
Test (cli, the_progress_ends_once_at_100_percent)
{
    char *model_dir = za_test_path ("progress");
    const char *args [] = {"--local", "--workers", "0", "--evaluators", "0", "--no-eval",
                           "--max-steps", "30", "--model-dir", model_dir, NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    cr_expect_eq (za_test_count (result.out, "100% step 30/30"), 1, "%s", result.out);
    cr_expect (strstr (result.out, "took 0:"), "%s", result.out);
    cr_expect_null (strstr (result.out, "step 31/30"), "%s", result.out);
    cr_expect_null (strstr (result.out, "ETA ?"), "%s", result.out);
    za_test_result_free (&result);
    free (model_dir);
}

//  --print-settings' output is a job --job takes back, the refusals of
//  moot settings included (it gives every key, most at their defaults).
Test (cli, print_settings_reads_back_as_a_job)
{
    const char *args [] = {"--save-checkpoints-steps", "20", "--no-eval", "--print-settings",
                           NULL};
    za_test_result_t result = za_test_run (args, PROCESS_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    char *job = za_test_write ("settings.json", result.out);
    za_test_result_free (&result);
    const char *again [] = {"--job", job, "--print-settings", NULL};
    result = za_test_run (again, PROCESS_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.out, "\"save_checkpoints_steps\": 20"), "%s", result.out);
    za_test_result_free (&result);
    free (job);
}
