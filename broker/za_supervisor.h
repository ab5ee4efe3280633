/*  za_supervisor.h: the role processes a supervising broker starts, knows
    as its own, reaps and stops. Only processes: which task is due to start
    or has failed is the registry's (za_registry.h) to say.               */
#ifndef ZA_SUPERVISOR_H_INCLUDED
#define ZA_SUPERVISOR_H_INCLUDED

#include <stddef.h>
#include <sys/types.h>

#include "za/za_broker_config.h"

//  Starts `exe --broker CONNECT --role ROLE --index INDEX` (with --certs or
//  --insecure as configured), ZA_RESTARTS and ZA_TASK_TOKEN (the token only
//  the child is told) in its environment, output appended to
//  LOG_DIR/ROLE-INDEX.log (its path into log). Returns the pid, or -1 with
//  an error.
pid_t za_supervisor_start (const za_broker_config_t *config, const char *role, int index,
                           int restarts, const char *token, char *log, size_t log_size);

//  1 if pid is the zactor role process of (role, index) on this host, as
//  the supervisor starts them (--broker ... --role R --index I; one started
//  without --index, which took a free slot, stands for any index): never
//  signal a process that merely reuses an old pid, or that a report named
//  falsely.
int za_supervisor_is_role_process (pid_t pid, const char *role, int index);

//  Our child pid, the task's process before a restart: killed if it is
//  still that role process, and reaped.
void za_supervisor_retire (pid_t pid, const char *role, int index);

//  Whether our child pid has ended (reaped now): 1 with how ("exit code 1",
//  "killed by signal 9 (SIGKILL)", "gone") and *code (its exit code; -1
//  when it did not exit); 0 while it runs.
int za_supervisor_reaped (pid_t pid, char *how, size_t size, int *code);

//  The last error a role wrote to its log ("zactor: error: WHAT": WHAT)
//  into text [size], or "" when its log's end holds none.
void za_supervisor_last_error (const char *log, char *text, size_t size);

#endif
