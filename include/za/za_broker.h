/*  za_broker.h: the broker, which lets a cluster form with no address list.
    Its client, inside every role process, is za_broker_client.h.

    The broker is a ROUTER (za_broker_actor). A role started with only
    `--broker ADDR` runs a client actor (za_broker_client_actor) that
    registers (role, wanted index or -1, host, pid, restarts), gets an index
    and the job (the JSON job file) back, reports its endpoint (a ps) and its
    statistics every heartbeat interval, and gets the cluster view (every
    ps's endpoint) once the job's declared counts are met. Every report
    carries the whole registration, so a restarted broker rebuilds its
    registry from the reports alone, and roles keep training while it is
    gone. In supervise mode the broker starts the role processes itself and
    restarts any that exit with an error, are killed, or miss heartbeats,
    with exponential backoff up to max_restarts each. It keeps the recent
    events (start, register, restart and why, done) in memory and appends
    them to MODEL_DIR/events.jsonl, and answers `watch` with the whole
    state as JSON (zactor-top). docs/PROTOCOL.md section 13 is the protocol. */
#ifndef ZA_BROKER_H_INCLUDED
#define ZA_BROKER_H_INCLUDED

#include <czmq.h>
#include <sys/types.h>

#include "za/za_cluster.h"              //  za_task_type_t indexes the counts
#include "za/za_peer.h"
#include "za/za_role_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_BROKER_MAX_TASKS 64          //  per role kind
#define ZA_BROKER_ROLE_KINDS 4          //  chief, worker, ps, evaluator (za_task_type_t)
#define ZA_BROKER_EVENTS 64             //  recent events kept in memory
//  The largest frame the broker reads (docs/PROTOCOL.md 13): a larger one closes
//  the sender's connection unread (libzmq's ZMQ_MAXMSGSIZE).
#define ZA_BROKER_MAX_FRAME_BYTES (16u << 20)

typedef struct {
    const char *bind;               //  where the ROUTER binds: "tcp://*:5555"
    const char *connect;            //  how roles it starts reach it ("tcp://127.0.0.1:5555")
    const char *job_text;           //  the job file's JSON, checked by the caller
    int counts [ZA_BROKER_ROLE_KINDS];   //  declared tasks per za_task_type_t
    int ring;                       //  1: the all-reduce strategy: the chief and the
                                    //  workers report endpoints, and the view lists
                                    //  them ("ring") by worker index
    const char *model_dir;          //  for events.jsonl and "is training over?"
    int64_t max_steps;
    za_heartbeat_t heartbeat;       //  its tasks' reports: interval x liveness
    //  Supervision (supervise != 0): starts `exe --broker CONNECT --role R
    //  --index I` for every declared task, with stdout and stderr appended to
    //  LOG_DIR/R-I.log, and restarts it when it fails.
    int supervise;
    const char *exe;
    const char *log_dir;
    int max_restarts;               //  per task (10); one more failure fails the job
    double backoff_secs;            //  first restart delay (0.5), doubled each time
    double backoff_max_secs;        //  up to this (10)
    //  A restarted broker (restarts > 0) first waits for the running roles to
    //  re-register (a grace of 2 x ivl x liveness) before starting any.
    int restarts;
    const char *restart_cause;      //  why this broker was restarted, or NULL
    const char *metrics_bind;       //  NULL, or HOST:PORT where GET /metrics serves
                                    //  the state to Prometheus (za_metrics.h)
    const char *certs;              //  NULL, or --certs DIR for the tasks it starts
    int insecure;                   //  1: --insecure for the tasks it starts
} za_broker_config_t;

//  Defaults: za_heartbeat_default (), max_restarts ZA_BROKER_MAX_RESTARTS,
//  backoff 0.5 s .. 10 s.
#define ZA_BROKER_MAX_RESTARTS 10
void za_broker_config_init (za_broker_config_t *config);

//  Starts exe with argv (argv [0] included, NULL-terminated), this process's
//  environment with the NAME=VALUE strings of env (NULL-terminated, may be
//  NULL) replacing or adding variables, stdin from /dev/null and stdout and
//  stderr appended to log; with own_group, in a new process group that it
//  leads. Returns the pid, or -1 with an error.
pid_t za_broker_spawn (const char *exe, char *const *argv, const char *const *env,
                       const char *log, int own_group);

//  How long to wait before restarting after `failures` failures in a row:
//  backoff_secs, doubled each time, at most backoff_max_secs.
double za_broker_backoff (const za_broker_config_t *config, int failures);

//  The broker as a CZMQ actor (args: za_broker_config_t *, outliving it).
//  Sends "DONE" RC on the pipe when every declared task has finished (RC
//  "0"), or when the job failed (RC "1": a bind error, or a task beyond its
//  restarts, after stopping every task it started); then waits for $TERM.
//  On $TERM before that, it stops (SIGTERM) the tasks it started.
void za_broker_actor (zsock_t *pipe, void *args);


#ifdef __cplusplus
}
#endif
#endif
