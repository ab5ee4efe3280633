/*  test_cli.c: zactor-run as a real process: help, argument errors and their exit
    status, a missing data set, and resuming after SIGKILL from intact checkpoints.  */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_util.h"

#define EXIT_USAGE 2
#define PROCESS_TIMEOUT_S 120.0
#define WAIT_POLL_US 1000
#define RESUME_MAX_STEPS 1500
#define RESUME_CKPT_STEPS 50
#define RESUME_MIN_CKPTS 2

extern char **environ;

static char s_dir [PATH_MAX];
static char s_binary [PATH_MAX];

static int
s_remove_entry (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st; (void) flag; (void) ftw;
    return remove (path);
}

static void
s_setup (void)
{
    strcpy (s_dir, "/tmp/za_cli_test_XXXXXX");
    cr_assert_not_null (mkdtemp (s_dir));
    const char *bin_dir = getenv ("ZA_BINARY_DIR");
    if (!bin_dir || !*bin_dir)
        bin_dir = ZA_BINARY_DIR;
    snprintf (s_binary, sizeof s_binary, "%s/zactor-run", bin_dir);
    cr_assert_eq (access (s_binary, X_OK), 0, "no zactor-run at %s", s_binary);
}

static void
s_teardown (void)
{
    nftw (s_dir, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite (cli, .init = s_setup, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  Helpers

//  A path under the test directory; caller frees.
static char *
s_path (const char *name)
{
    char *path = NULL;
    cr_assert (asprintf (&path, "%s/%s", s_dir, name) > 0);
    return path;
}

//  Starts zactor-run with args (NULL-terminated, without argv[0]), stdout and
//  stderr going to files.
static pid_t
s_spawn (const char *const *args, const char *out_path, const char *err_path)
{
    const char *argv [64];
    int argc = 0;
    argv [argc++] = s_binary;
    while (*args && argc < 63)
        argv [argc++] = *args++;
    argv [argc] = NULL;
    posix_spawn_file_actions_t actions;
    cr_assert_eq (posix_spawn_file_actions_init (&actions), 0);
    posix_spawn_file_actions_addopen (&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen (&actions, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC,
                                      0644);
    posix_spawn_file_actions_addopen (&actions, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC,
                                      0644);
    pid_t pid;
    int rc = posix_spawn (&pid, s_binary, &actions, NULL, (char *const *) argv, environ);
    posix_spawn_file_actions_destroy (&actions);
    cr_assert_eq (rc, 0, "posix_spawn %s: %s", s_binary, strerror (rc));
    return pid;
}

//  Waits at most timeout_s for pid; kills it and fails the test on a hang.
//  Returns the wait status.
static int
s_wait (pid_t pid, double timeout_s)
{
    double deadline = za_clock_mono () + timeout_s;
    while (true) {
        int status;
        pid_t got = waitpid (pid, &status, WNOHANG);
        if (got == pid)
            return status;
        cr_assert_eq (got, 0, "waitpid: %s", strerror (errno));
        if (za_clock_mono () > deadline) {
            kill (pid, SIGKILL);
            waitpid (pid, &status, 0);
            cr_assert_fail ("zactor-run (pid %d) still running after %.0f s", (int) pid,
                            timeout_s);
        }
        usleep (WAIT_POLL_US * 10);
    }
}

//  The whole content of a file (caller frees).
static char *
s_slurp (const char *path)
{
    FILE *file = fopen (path, "r");
    cr_assert_not_null (file, "cannot open %s", path);
    size_t size = 0, capacity = 4096;
    char *text = malloc (capacity);
    cr_assert_not_null (text);
    size_t got;
    while ((got = fread (text + size, 1, capacity - size - 1, file)) > 0) {
        size += got;
        if (capacity - size < 2) {
            capacity *= 2;
            text = realloc (text, capacity);
            cr_assert_not_null (text);
        }
    }
    text [size] = 0;
    fclose (file);
    return text;
}

typedef struct {
    int exit_code;                      //  -1 when killed by a signal
    char *out;
    char *err;
} s_result_t;

//  Runs zactor-run to completion (bounded) and collects its exit code and output.
static s_result_t
s_run (const char *const *args)
{
    char *out_path = s_path ("stdout.txt");
    char *err_path = s_path ("stderr.txt");
    pid_t pid = s_spawn (args, out_path, err_path);
    int status = s_wait (pid, PROCESS_TIMEOUT_S);
    s_result_t result = {
        .exit_code = WIFEXITED (status)? WEXITSTATUS (status): -1,
        .out = s_slurp (out_path),
        .err = s_slurp (err_path),
    };
    unlink (out_path);
    unlink (err_path);
    free (out_path);
    free (err_path);
    return result;
}

static void
s_result_free (s_result_t *result)
{
    free (result->out);
    free (result->err);
}

//  Every checkpoint file in dir loads and verifies. Returns the newest step
//  (-1 when there is none) and the count in *count_p.
static int64_t
s_expect_all_load (const char *dir, int *count_p)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (dir, &steps);
    cr_assert_geq (count, 0, "cannot list %s", dir);
    for (int i = 0; i < count; i++) {
        char *path = za_checkpoint_path (dir, steps [i]);
        za_checkpoint_t *ckpt = za_checkpoint_load (path);
        cr_assert_not_null (ckpt, "'%s' does not load: %s", path, za_last_error ());
        cr_assert_eq (za_checkpoint_step (ckpt), steps [i]);
        za_checkpoint_destroy (&ckpt);
        free (path);
    }
    int64_t newest = count > 0? steps [count - 1]: -1;
    free (steps);
    if (count_p)
        *count_p = count;
    return newest;
}


//  --------------------------------------------------------------------------
//  Help and argument errors

Test (cli, help_exits_0_and_names_the_flags)
{
    const char *args [] = {"--help", NULL};
    s_result_t result = s_run (args);
    cr_assert_eq (result.exit_code, 0, "stderr: %s", result.err);
    cr_assert (strstr (result.out, "--model-dir"), "help: %s", result.out);
    cr_assert (strstr (result.out, "--save-checkpoints-steps"), "help: %s", result.out);
    cr_assert (strstr (result.out, "Usage: zactor-run"), "help: %s", result.out);
    s_result_free (&result);

    const char *short_args [] = {"-h", NULL};
    result = s_run (short_args);
    cr_assert_eq (result.exit_code, 0);
    cr_assert (strstr (result.out, "--keep-checkpoint-max"), "help: %s", result.out);
    s_result_free (&result);
}

Test (cli, bad_model_spec_exits_2_with_a_caret_under_the_token)
{
    char *model_dir = s_path ("run");
    const char *spec = "conv2d(32,3,relu) conv3d(8,3) dense(10)";
    const char *args [] = {"--model", spec, "--model-dir", model_dir, "--max-steps", "1",
                           "--no-eval", "--threads", "1", NULL};
    s_result_t result = s_run (args);
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
    s_result_free (&result);
    free (model_dir);
}

Test (cli, bad_arguments_exit_2)
{
    const char *unknown [] = {"--no-such-flag", NULL};
    s_result_t result = s_run (unknown);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "unknown flag: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "no-such-flag"), "stderr: %s", result.err);
    s_result_free (&result);

    const char *zero_batch [] = {"--batch-size", "0", NULL};
    result = s_run (zero_batch);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "--batch-size 0: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "--batch-size"), "stderr: %s", result.err);
    s_result_free (&result);

    const char *optimizer [] = {"--optimizer", "rmsprop", NULL};
    result = s_run (optimizer);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "rmsprop: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "rmsprop"), "stderr: %s", result.err);
    cr_assert (strstr (result.err, "adam"), "no list of known optimizers: %s", result.err);
    s_result_free (&result);

    const char *stray [] = {"--no-eval", "extra", NULL};
    result = s_run (stray);
    cr_assert_eq (result.exit_code, EXIT_USAGE, "stray argument: exit %d", result.exit_code);
    cr_assert (strstr (result.err, "extra"), "stderr: %s", result.err);
    s_result_free (&result);
}

Test (cli, missing_data_set_exits_1_naming_the_file)
{
    char *empty = s_path ("empty");
    cr_assert_eq (mkdir (empty, 0755), 0);
    char *model_dir = s_path ("run");
    const char *args [] = {"--dataset-dir", empty, "--model-dir", model_dir, "--max-steps",
                           "1", NULL};
    s_result_t result = s_run (args);
    cr_assert_eq (result.exit_code, 1, "exit %d, stderr: %s", result.exit_code, result.err);
    cr_assert (strstr (result.err, "train-images-idx3-ubyte"), "stderr: %s", result.err);
    cr_assert (strstr (result.err, empty), "stderr does not name the directory: %s",
               result.err);
    cr_assert_neq (access (model_dir, F_OK), 0);
    s_result_free (&result);
    free (model_dir);
    free (empty);
}


//  --------------------------------------------------------------------------
//  SIGKILL and resume

Test (cli, sigkill_then_resume_from_the_newest_intact_checkpoint)
{
    char *model_dir = s_path ("run");
    const char *args [] = {"--model", "dnn", "--hidden-units", "64", "--model-dir", model_dir,
                           "--save-checkpoints-steps", "50", "--max-steps", "1500",
                           "--no-eval", "--threads", "1", NULL};
    char *out_path = s_path ("first.out");
    char *err_path = s_path ("first.err");
    pid_t pid = s_spawn (args, out_path, err_path);

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
    int64_t before_newest = s_expect_all_load (model_dir, &before_count);
    cr_assert_geq (before_count, RESUME_MIN_CKPTS);
    cr_assert_geq (before_newest, RESUME_MIN_CKPTS * RESUME_CKPT_STEPS);
    cr_assert_lt (before_newest, RESUME_MAX_STEPS, "it finished before the kill");
    cr_assert_eq (before_newest % RESUME_CKPT_STEPS, 0);
    cr_log_info ("killed with %d checkpoints, the newest at step %lld", before_count,
                 (long long) before_newest);

    //  The same command again continues from there to the end.
    s_result_t result = s_run (args);
    cr_assert_eq (result.exit_code, 0, "exit %d, stderr: %s", result.exit_code, result.err);
    char restored [64];
    snprintf (restored, sizeof restored, "restored step %lld ", (long long) before_newest);
    cr_assert (strstr (result.err, restored), "expected '%s' in: %s", restored, result.err);
    int after_count;
    int64_t after_newest = s_expect_all_load (model_dir, &after_count);
    cr_assert_eq (after_newest, RESUME_MAX_STEPS, "newest checkpoint %lld",
                  (long long) after_newest);
    cr_assert_geq (after_count, 1);
    s_result_free (&result);

    free (out_path);
    free (err_path);
    free (model_dir);
}
