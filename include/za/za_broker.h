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

#include "za/za_broker_config.h"

//  The broker's last event ("done" or "stopped") ends its cause with the
//  images the trainers skipped and listed (their last reports' sums), for
//  --local's last lines: "every task finished; the trainers skipped B of N
//  images".
#define ZA_BROKER_SKIPPED_TEXT "the trainers skipped "

#ifdef __cplusplus
extern "C" {
#endif

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
