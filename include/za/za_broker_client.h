/*  za_broker_client.h: a role process's side of the broker (za_broker.h):
    register, take the index and the job, report every heartbeat interval,
    and get the cluster view. docs/PROTOCOL.md section 13 is the protocol.  */
#ifndef ZA_BROKER_CLIENT_H_INCLUDED
#define ZA_BROKER_CLIENT_H_INCLUDED

#include <czmq.h>

#include "za/za_role_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *broker;             //  the broker's endpoint
    const char *role;               //  "chief", "worker", "ps" or "evaluator"
    int index;                      //  wanted index, or -1 for any free one
    const char *host;               //  this host's name, as others reach it
    int restarts;                   //  how often this task was restarted before
    za_role_stats_t *stats;         //  reported every interval; outlives the actor
    double heartbeat_ivl_secs;      //  1
    int heartbeat_liveness;         //  3: a role loop quiet this long is hung:
                                    //  reports stop, so the broker sees it
    double timeout_secs;            //  no welcome within this: "FAILED"
} za_broker_client_config_t;

//  A role's client as a CZMQ actor (args: za_broker_client_config_t *).
//  Registers, re-sending every interval until welcomed, then reports every
//  interval. On its pipe it sends:
//    "WELCOME" INDEX JOB ENDPOINT  the index given, the job file's JSON, and
//                                  (a ps) the endpoint this index had before
//                                  ("" when none: bind any port)
//    "VIEW" JSON                   the cluster view, once: {"ps": [endpoints],
//                                  "num_workers": N}
//    "FAILED" WHY                  no welcome within timeout_secs, or refused
//  and it takes:
//    "ENDPOINT" EP                 where this ps serves (reported from now on)
//    "DONE" RC                     the role ended: a last report, then the
//                                  actor waits for $TERM
void za_broker_client_actor (zsock_t *pipe, void *args);

#ifdef __cplusplus
}
#endif
#endif
