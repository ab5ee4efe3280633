/*  za_broker_config.h: what a broker is told (za_broker.h runs it): where it
    binds, the job and its declared tasks, heartbeats, supervision and its
    backoff, and the limits every part of the broker shares.               */
#ifndef ZA_BROKER_CONFIG_H_INCLUDED
#define ZA_BROKER_CONFIG_H_INCLUDED

#include <stdint.h>

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
    int max_restarts;               //  per task; one more failure fails the job
    double backoff_secs;            //  first restart delay, doubled each time
    double backoff_max_secs;        //  up to this
    //  A restarted broker (restarts > 0) first waits for the running roles to
    //  re-register (a grace of 2 x ivl x liveness) before starting any.
    int restarts;
    const char *restart_cause;      //  why this broker was restarted, or NULL
    const char *metrics_bind;       //  NULL, or HOST:PORT where GET /metrics serves
                                    //  the state to Prometheus (za_metrics.h)
    const char *certs;              //  NULL, or --certs DIR for the tasks it starts
    int insecure;                   //  1: --insecure for the tasks it starts
    //  Elastic (min_workers < counts [worker]): worker indexes from
    //  min_workers up are slots a worker may take while the job runs (one
    //  started with --broker) and leave; they are never started by the
    //  broker, and one silent longer than elastic_timeout_secs is dropped.
    int min_workers;                //  -1: every declared worker (a fixed job)
    double elastic_timeout_secs;
    double straggler_factor;        //  a trainer whose own step time stays above
                                    //  this times the others' median is named a
                                    //  straggler (za_straggler.h); 0: never
    int requeue_exit_code;          //  a task's exit status for "preempted"
                                    //  (za_preempt.h): the job stops, and the
                                    //  broker exits with it too
} za_broker_config_t;

//  Defaults: za_heartbeat_default (), max_restarts ZA_BROKER_MAX_RESTARTS,
//  backoff ZA_BROKER_BACKOFF_SECS .. ZA_BROKER_BACKOFF_MAX_SECS.
#define ZA_BROKER_MAX_RESTARTS 10
#define ZA_BROKER_BACKOFF_SECS 0.5
#define ZA_BROKER_BACKOFF_MAX_SECS 10
#define ZA_BROKER_ELASTIC_TIMEOUT_SECS 30
#define ZA_BROKER_STRAGGLER_FACTOR 2
void za_broker_config_init (za_broker_config_t *config);

//  How long to wait before restarting after `failures` failures in a row:
//  backoff_secs, doubled each time, at most backoff_max_secs.
double za_broker_backoff (const za_broker_config_t *config, int failures);
//  A run longer than this ends a row of failures (as Kubernetes'
//  CrashLoopBackOff starts again after a run of 10 minutes; 30 s here: a role
//  that trained that long got past its start).
#define ZA_BROKER_STABLE_SECS 30.0
//  The backoff before restarting what failed after running `ran` seconds,
//  *failures (the failures in a row before it) set to 0 first where it ran
//  longer than ZA_BROKER_STABLE_SECS, then counting this one.
double za_broker_backoff_next (const za_broker_config_t *config, int *failures, double ran);

#ifdef __cplusplus
}
#endif
#endif
