/*  za_supervisor.c: starting role processes (posix_spawn, the log, the
    environment), knowing them by their command line, reaping them.        */
#define _GNU_SOURCE                     //  sigabbrev_np
#include "za_supervisor.h"
#include "za/za_broker_client.h"
#include "za/za_process.h"
#include "za/za_util.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define REAP_TRIES 100
#define LOG_TAIL_BYTES 16384            //  where a role's last error is looked for
#define REAP_WAIT_MS 10

pid_t
za_supervisor_start (const za_broker_config_t *config, const char *role, int index,
                     int restarts, const char *token, char *log, size_t log_size)
{
    char index_text [16], restarts_env [32], token_env [32 + ZA_TASK_TOKEN_SIZE];
    snprintf (index_text, sizeof index_text, "%d", index);
    snprintf (restarts_env, sizeof restarts_env, "ZA_RESTARTS=%d", restarts);
    snprintf (token_env, sizeof token_env, "ZA_TASK_TOKEN=%s", token);
    snprintf (log, log_size, "%s/%s-%d.log", config->log_dir? config->log_dir: ".", role,
              index);
    char *argv [] = {(char *) config->exe, "--broker", (char *) config->connect, "--role",
                     (char *) role, "--index", index_text, NULL, NULL, NULL};
    int argc = 7;
    if (config->certs) {
        argv [argc++] = "--certs";
        argv [argc++] = (char *) config->certs;
    }
    else
    if (config->insecure)
        argv [argc++] = "--insecure";
    const char *env [] = {restarts_env, token_env, NULL};
    return za_process_spawn (config->exe, argv, env, log, 0);
}

int
za_supervisor_is_role_process (pid_t pid, const char *role, int index)
{
    if (pid <= 0)
        return 0;
    char path [64], args [4096], role_arg [64], index_arg [32];
    snprintf (path, sizeof path, "/proc/%d/cmdline", (int) pid);
    FILE *file = fopen (path, "r");
    if (!file)
        return 0;
    size_t n = fread (args, 1, sizeof args - 1, file);
    fclose (file);
    for (size_t i = 0; i < n; i++)
        if (args [i] == 0)
            args [i] = ' ';
    args [n] = 0;
    snprintf (role_arg, sizeof role_arg, " --role %s ", role);
    snprintf (index_arg, sizeof index_arg, " --index %d ", index);  //  not --index 12
    //  A worker started without --index (it took a free slot) is any of them.
    return strstr (args, " --broker ") && strstr (args, role_arg)
        && (strstr (args, index_arg) || !strstr (args, " --index "));
}

void
za_supervisor_retire (pid_t pid, const char *role, int index)
{
    if (za_supervisor_is_role_process (pid, role, index))
        kill (pid, SIGKILL);
    for (int tries = 0; tries < REAP_TRIES && waitpid (pid, NULL, WNOHANG) == 0; tries++)
        zclock_sleep (REAP_WAIT_MS);
}

//  "exit code 1", "killed by signal 9 (SIGKILL)".
static void
s_describe_status (int status, char *text, size_t size)
{
    if (WIFEXITED (status))
        snprintf (text, size, "exit code %d", WEXITSTATUS (status));
    else
    if (WIFSIGNALED (status))
        snprintf (text, size, "killed by signal %d (SIG%s)", WTERMSIG (status),
                  sigabbrev_np (WTERMSIG (status))? sigabbrev_np (WTERMSIG (status)): "?");
    else
        snprintf (text, size, "status %d", status);
}

int
za_supervisor_reaped (pid_t pid, char *how, size_t size, int *code)
{
    int status = 0;
    pid_t got = waitpid (pid, &status, WNOHANG);
    if (got != pid && !(got < 0 && errno == ECHILD))
        return 0;
    if (got < 0)
        snprintf (how, size, "gone");
    else
        s_describe_status (status, how, size);
    *code = got == pid && WIFEXITED (status)? WEXITSTATUS (status): -1;
    return 1;
}

void
za_supervisor_last_error (const char *log, char *text, size_t size)
{
    static const char prefix [] = "zactor: error: ";
    char tail [LOG_TAIL_BYTES + 1];
    size_t got = 0;
    *text = 0;
    FILE *file = log && *log? fopen (log, "rb"): NULL;
    if (!file)
        return;
    if (fseek (file, 0, SEEK_END) == 0) {
        long end = ftell (file);
        if (end > LOG_TAIL_BYTES)
            fseek (file, end - LOG_TAIL_BYTES, SEEK_SET);
        else
            rewind (file);
        got = fread (tail, 1, LOG_TAIL_BYTES, file);
    }
    fclose (file);
    tail [got] = 0;
    const char *found = NULL;
    for (const char *at = tail; (at = strstr (at, prefix)); at++)
        if (at == tail || at [-1] == '\n')
            found = at + strlen (prefix);
    if (found)
        snprintf (text, size, "%.*s", (int) strcspn (found, "\n"), found);
}
