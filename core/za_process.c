/*  za_process.c: a program started as a child process with posix_spawn. */
#include "za/za_process.h"
#include "za/za_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

pid_t
za_process_spawn (const char *exe, char *const *argv, const char *const *env, const char *log,
                  int own_group)
{
    int count = 0, extra = 0;
    while (environ [count])
        count++;
    while (env && env [extra])
        extra++;
    char **envp = (char **) calloc ((size_t) (count + extra + 1), sizeof (char *));
    if (!envp)
        return za_error ("cannot start %s: out of memory", exe);
    int at = 0;
    for (int i = 0; i < count; i++) {
        //  A variable given replaces the inherited one of that name.
        int replaced = 0;
        for (int e = 0; e < extra && !replaced; e++) {
            size_t name = strcspn (env [e], "=");
            replaced = strncmp (environ [i], env [e], name + 1) == 0;
        }
        if (!replaced)
            envp [at++] = environ [i];
    }
    for (int e = 0; e < extra; e++)
        envp [at++] = (char *) env [e];
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init (&actions);
    posix_spawn_file_actions_addopen (&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen (&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2 (&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init (&attr);
    if (own_group) {
        posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup (&attr, 0);
    }
    pid_t pid;
    int rc = posix_spawn (&pid, exe, &actions, &attr, argv, envp);
    posix_spawnattr_destroy (&attr);
    posix_spawn_file_actions_destroy (&actions);
    free (envp);
    if (rc != 0)
        return za_error ("cannot start %s: %s", exe, strerror (rc));
    return pid;
}
