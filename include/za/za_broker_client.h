/*  za_broker_client.h: the only code that speaks the broker's control plane
    from the outside (docs/PROTOCOL.md section 13). A role process registers,
    takes its index and the job, reports every heartbeat interval and gets the
    cluster view; the --local launcher and zactor-top watch the cluster's
    state. Each holds a za_broker_client_t, a DEALER to the broker whose
    replies come back decoded into C structures: nobody else builds or parses
    a control-plane body. The broker's liveness is judged by a za_peer_t.

    A role runs the class inside za_broker_client_actor, so that reporting
    never waits on training and training never waits on the broker.       */
#ifndef ZA_BROKER_CLIENT_H_INCLUDED
#define ZA_BROKER_CLIENT_H_INCLUDED

#include <czmq.h>
#include <stdint.h>

#include "za/za_cluster.h"
#include "za/za_membership.h"
#include "za/za_peer.h"
#include "za/za_role_stats.h"
#include "za/za_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_BROKER_TEXT_MAX 256          //  host names, causes, states as the broker keeps them
#define ZA_BROKER_STATE_TASKS 256       //  rows of a state (4 role kinds x 64)
#define ZA_BROKER_STATE_EVENTS 64       //  recent events in a state
#define ZA_TASK_TOKEN_SIZE 33           //  a task's token: 32 hex digits and the NUL

//  A task's token (docs/PROTOCOL.md 13): the broker gives one in every welcome
//  (and a task it starts in ZA_TASK_TOKEN), the task names it in every register
//  and report, and another connection claims a task in use only with it.
//  Writes 32 random hex digits into token; 0, or -1 when the system gives no
//  randomness.
int za_task_token_new (char token [ZA_TASK_TOKEN_SIZE]);

//  1 when text is a token as za_task_token_new writes them.
int za_task_token_valid (const char *text);

typedef struct _za_broker_client_t za_broker_client_t;

//  A DEALER connected to the broker at `endpoint`, whose liveness is judged
//  every ivl_secs with `liveness` (za_peer.h). Returns NULL with an error
//  (an endpoint libzmq does not take).
za_broker_client_t *za_broker_client_new (const char *endpoint, za_heartbeat_t beat);
void za_broker_client_destroy (za_broker_client_t **self_p);

//  The socket, for a zpoller; and the broker's liveness (heard at every
//  reply that decodes).
zsock_t *za_broker_client_sock (za_broker_client_t *self);
za_peer_t *za_broker_client_peer (za_broker_client_t *self);
const char *za_broker_client_endpoint (const za_broker_client_t *self);

//  What a task tells the broker about itself, in every register and report.
typedef struct {
    za_task_type_t type;
    int index;                      //  wanted index, or -1 for any free one
    const char *host;               //  as others reach this machine
    int pid;
    int restarts;                   //  how often this task was restarted before
    const char *endpoint;           //  a ps: where it serves ("" until known)
    const char *token;              //  the broker's token for this task ("" until welcomed)
} za_task_registration_t;

//  Requests; each returns 0, or -1 when it could not be queued (the broker is
//  gone and the queue full: it is dropped, the next interval sends anew).
int za_broker_client_register (za_broker_client_t *self, const za_task_registration_t *task);
//  A report: the registration, the state, the statistics (NULL: none), and
//  in an elastic job the number of the members' change the task holds (0:
//  none yet), from which a restarted broker numbers on.
int za_broker_client_report (za_broker_client_t *self, const za_task_registration_t *task,
                             za_role_state_t state, const za_role_stats_t *stats,
                             int64_t membership);
int za_broker_client_watch (za_broker_client_t *self);
//  The chief has written the checkpoint of global_step: the broker tells
//  every live evaluator at once (it answers nothing).
int za_broker_client_checkpoint (za_broker_client_t *self, int64_t global_step);

//  One row of the broker's state: a task.
typedef struct {
    za_task_type_t type;
    int index;
    char host [ZA_BROKER_TEXT_MAX];
    int pid;
    char state [32];                //  a role state (za_role_state_name) or the
                                    //  broker's own: empty, started, lost, killed,
                                    //  backoff, done
    int64_t global_step;
    double steps_per_sec, examples_per_sec, loss;
    int64_t eval_step;              //  -1: no evaluation yet
    double eval_accuracy;
    int restarts;
    double heartbeat_age_secs;      //  -1: never heard
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    int ring_rank;                  //  the all-reduce ring's rank; -1: none
    double wait_ms;                 //  ring: time per step waiting for peers
    int64_t bad_images;             //  input examples skipped (undecodable)
    int64_t images;                 //  of the files and records its input lists
    double step_ms;                 //  a trainer's recent time per step (0: not said)
    int straggler;                  //  1: named a straggler by the broker
    double slowdown;                //  its own step time / the others' median (0: not judged)
    char slowest_phase [16];        //  the phase it is furthest above the others in
} za_broker_task_row_t;

//  One event: a start, registration, failure, restart, end.
typedef struct {
    double time;                    //  Unix seconds
    char event [32];
    char role [16];                 //  a task type, or "broker"
    int index;
    int pid;
    char cause [2 * ZA_BROKER_TEXT_MAX];
    int restarts;
} za_broker_event_row_t;

//  The whole state, as `watch` returns it.
typedef struct {
    int64_t max_steps;
    char model_dir [4096];
    int broker_pid;
    char broker_host [ZA_BROKER_TEXT_MAX];
    int broker_restarts;
    double broker_uptime_secs;
    char broker_endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    int supervise;
    int curve;                      //  the broker runs with --certs
    int64_t refused_peers;          //  peers its ZAP handler refused (za_curve.h)
    int64_t global_step;            //  the largest any trainer reported
    int done;                       //  every task finished
    int members;                    //  the trainers now (0: not said)
    int min_workers, max_workers;   //  the job's workers: elastic when min < max
    int64_t membership_changes;     //  an elastic job's changes of members so far
    int task_count;
    za_broker_task_row_t tasks [ZA_BROKER_STATE_TASKS];
    int event_count;
    za_broker_event_row_t events [ZA_BROKER_STATE_EVENTS];
} za_broker_state_t;

//  A reply from the broker, decoded.
typedef struct {
    za_op_t op;                     //  WELCOME, VIEW, STATE, CHECKPOINT, ERROR or PONG
    uint64_t seq;
    //  CHECKPOINT: the step of the checkpoint the chief has just written.
    int64_t global_step;
    //  WELCOME: the index given, the job (JSON text, owned), and the endpoint
    //  this ps index had before ("" when none: bind any port).
    int index;
    char *job;
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    char token [ZA_TASK_TOKEN_SIZE];    //  the task's token ("" from an older broker)
    //  VIEW: ready once every task registered and every ps has an endpoint
    //  (and, for the all-reduce ring, every chief and worker).
    int ready;
    int preempting;                 //  the job stops for preemption (za_preempt.h)
    int num_workers;                //  the chief included
    int ps_count;
    char ps [ZA_CLUSTER_MAX_TASKS][ZA_CLUSTER_ENDPOINT_MAX];
    int64_t membership;             //  elastic: the members' change number (0: a
    int member_count;               //  fixed job) and the members, worker indexes
    int members [ZA_MEMBERS_MAX];   //  ascending (za_membership.h)
    int ring_count;                 //  0, or num_workers: the ring's endpoints by
                                    //  worker index (the chief first; "" for an
                                    //  elastic slot that is no member)
    char ring [ZA_CLUSTER_MAX_TASKS + 1][ZA_CLUSTER_ENDPOINT_MAX];
    //  The broker's clock: our report's send time echoed (-1: none), the
    //  broker's clock as it answered, and its machine's boot (za_boot_id).
    double clock_sent, clock_broker;
    char clock_boot [64];
    //  STATE: owned; and its JSON text (owned), for whoever prints it whole.
    za_broker_state_t *state;
    char *state_text;
    //  ERROR
    char code [32];
    char error [256];
} za_broker_reply_t;

//  Receives one message and decodes it into *reply (cleared first). Returns
//  0, or -1 when it is dropped: nothing came, it did not decode, its body
//  does not say what its op must say (the reason is the last error). Never
//  acts on a message it could not decode.
int za_broker_client_recv (za_broker_client_t *self, za_broker_reply_t *reply);
//  Frees what a reply owns and zeroes it; safe twice.
void za_broker_reply_clear (za_broker_reply_t *reply);

//  watch, then waits up to timeout_secs for the state. Returns 0 with
//  *state_p (caller frees) and, when text_p is not NULL, the JSON text
//  (caller frees); or -1 with an error (no answer, or interrupted).
int za_broker_client_state (za_broker_client_t *self, double timeout_secs,
                            za_broker_state_t **state_p, char **text_p);

// ---------------------------------------------------------------------------
//  A role's client, as a CZMQ actor

typedef struct {
    const char *broker;             //  the broker's endpoint
    const char *role;               //  "chief", "worker", "ps" or "evaluator"
    int index;                      //  wanted index, or -1 for any free one
    const char *host;               //  this host's name, as others reach it
    int restarts;                   //  how often this task was restarted before
    za_role_stats_t *stats;         //  reported every interval; outlives the actor
    za_heartbeat_t heartbeat;       //  a report every interval; a role loop quiet
                                    //  HUNG_PERIODS x interval x liveness is hung:
                                    //  reports stop, so the broker sees it
    double timeout_secs;            //  no welcome within this: "FAILED"
    za_membership_t *membership;    //  NULL, or (an elastic job) where the members
                                    //  of every view go; outlives the actor
} za_broker_client_config_t;

//  A role's client as a CZMQ actor (args: za_broker_client_config_t *).
//  Registers, re-sending every interval until welcomed, then reports every
//  interval. On its pipe it sends:
//    "WELCOME" INDEX JOB ENDPOINT  the index given, the job file's JSON, and
//                                  (a ps) the endpoint this index had before
//                                  ("" when none: bind any port)
//    "VIEW" N PS0 PS1 ... M R0 R1 ...  the cluster view, once it is ready:
//                                  the number of ps and each one's endpoint,
//                                  then the ring's (0 without one)
//    "FAILED" WHY                  no welcome within timeout_secs, or refused
//    "CHECKPOINT" STEP             (an evaluator) the chief has written the
//                                  checkpoint of STEP
//  and it takes:
//    "HEARTBEAT" "IVL_SECS LIVENESS"  the job's heartbeat, once the role
//                                  has applied the job from its welcome:
//                                  reports go at its pace from now on
//    "ENDPOINT" EP                 where this ps (or ring member) serves
//                                  (reported from now on)
//    "CHECKPOINT" STEP             (the chief) the checkpoint of STEP is
//                                  written: the broker tells the evaluators
//    "DONE" RC                     the role ended: a last report, then the
//                                  actor waits for $TERM
void za_broker_client_actor (zsock_t *pipe, void *args);

#ifdef __cplusplus
}
#endif
#endif
