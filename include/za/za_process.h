/*  za_process.h: starting a program as a child process, its output in a log:
    the broker starts role processes with it, the launcher a broker.       */
#ifndef ZA_PROCESS_H_INCLUDED
#define ZA_PROCESS_H_INCLUDED

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The exit status of a role whose data is at fault (more of its images
//  failed to decode than --max-bad-images allows; sysexits.h's EX_DATAERR):
//  a supervisor does not start it again, for it would meet the same files.
#define ZA_EXIT_DATA 65

//  The exit status of a role process the broker replaced: it went silent
//  (hung, stopped, cut off), was declared lost, and another process runs its
//  task now; told so at its next report, it leaves at once rather than train
//  beside it (sysexits.h's EX_UNAVAILABLE).
#define ZA_EXIT_REPLACED 69

//  Starts exe with argv (argv [0] included, NULL-terminated), this process's
//  environment with the NAME=VALUE strings of env (NULL-terminated, may be
//  NULL) replacing or adding variables, stdin from /dev/null and stdout and
//  stderr appended to log; with own_group, in a new process group that it
//  leads. Returns the pid, or -1 with an error.
pid_t za_process_spawn (const char *exe, char *const *argv, const char *const *env,
                        const char *log, int own_group);

#ifdef __cplusplus
}
#endif
#endif
