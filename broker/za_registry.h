/*  za_registry.h: the broker's registry: the tasks a job declares, what each
    said of itself in its registers and reports (checked field by field), and
    a task's life as one state table:
      EMPTY     declared, nobody has it yet (supervise: about to be started)
      STARTED   supervise: its process was started, it has not registered
      LIVE      registered, reporting every interval
      LOST      not supervised: it went silent; it may come back
      KILLED    supervise: we killed it (missed heartbeats); waiting to reap it
      BACKOFF   supervise: failed; started again at restart_at
      DONE      finished with exit 0 (or training was over when it failed)
      VACANT    elastic: a worker slot above the minimum that nobody holds
                (never started by us; a lost one is dropped to it)
    on the events of its rows (state, event) -> (action, next state); a
    failure's next state is its action's choice (backoff, lost, done, or the
    job fails). The job is done when every task is DONE; it fails when a task
    would be restarted more than max_restarts times. A task's liveness is a
    za_peer_t: any register or report is a heartbeat. The processes are
    za_supervisor.h's; the messages are the broker's (za_broker.c).         */
#ifndef ZA_REGISTRY_H_INCLUDED
#define ZA_REGISTRY_H_INCLUDED

#include <czmq.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "za/za_broker_config.h"
#include "za/za_broker_client.h"
#include "za/za_cluster.h"
#include "za/za_peer.h"
#include "za_events.h"
#include "za_registration.h"
#include "za_straggler.h"

#define ZA_REGISTRY_TEXT_MAX 256
#define ZA_REGISTRY_CODE_MAX 16         //  a refusal's code: "full", "busy", "done",
                                        //  "replaced"
#define ZA_REGISTRY_LOG_MAX 4096

typedef enum {
    ZA_ENTRY_EMPTY, ZA_ENTRY_STARTED, ZA_ENTRY_LIVE, ZA_ENTRY_LOST, ZA_ENTRY_KILLED,
    ZA_ENTRY_BACKOFF, ZA_ENTRY_DONE, ZA_ENTRY_VACANT
} za_entry_state_t;

//  One declared task.
typedef struct {
    int kind, index;
    za_entry_state_t state;
    pid_t pid;                  //  as registered, or as started
    int own;                    //  1: our child (we reap it)
    char host [ZA_REGISTRATION_HOST_MAX];
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    char token [ZA_TASK_TOKEN_SIZE];    //  what it claims itself by on another connection
    zframe_t *identity;
    za_peer_t peer;             //  its heartbeats: every register and report
    double since;               //  when it was started or registered
    int restarts;
    int failures;               //  in a row, for the backoff
    double restart_at;
    double lost_at;             //  elastic slot: when it went LOST
    int member;                 //  one of the job's members (za_registry_members)
    int leaving;                //  its process leaves the job (SIGTERM, an elastic slot's)
    pid_t left_pid;             //  the process that left it vacant (0: none)
    char cause [ZA_REGISTRY_TEXT_MAX];  //  why we killed it, until it is reaped
    //  Its last report.
    char role_state [16];
    int64_t step;
    double loss, steps_per_sec, examples_per_sec;
    int64_t eval_step;
    double eval_accuracy;
    int ring_rank;              //  -1: not in a ring
    double wait_ms;
    int64_t bad_images;         //  input examples it skipped
    int64_t images;             //  of the files and records its input lists
    za_step_times_t times;      //  a trainer's recent step (step_ms 0: not said)
    za_straggler_t straggler;   //  against the other trainers (za_straggler.h)
    char log [ZA_REGISTRY_LOG_MAX];     //  where its output goes, when we started it
} za_entry_t;

typedef struct za_registry_t za_registry_t;

//  The tasks of config (which outlives it), their events into `events`.
//  NULL with an error when a count is out of range.
za_registry_t *za_registry_new (const za_broker_config_t *config, za_events_t *events,
                                const char *host);
void za_registry_destroy (za_registry_t **self_p);

//  The task a register or report names (index -1: the first free one), or
//  NULL with the refusal's code ("full", "busy", "done", "replaced": a report
//  on a task another process runs now) and reason. A task in use is taken
//  only by itself: its connection, or its token.
za_entry_t *za_registry_claim (za_registry_t *self, zframe_t *identity,
                               const za_registration_t *reg, int report,
                               char code [ZA_REGISTRY_CODE_MAX], char *why, size_t size);
//  A register from `identity` for a claimed task: it is LIVE, with a token.
void za_registry_register (za_registry_t *self, za_entry_t *task, zframe_t *identity,
                           const za_registration_t *reg);
//  A report for a claimed task: a heartbeat, its statistics, its end.
void za_registry_report (za_registry_t *self, za_entry_t *task, zframe_t *identity,
                         const za_registration_t *reg);

//  Reaps our children, finds the silent, starts what is due.
void za_registry_supervise (za_registry_t *self);
//  Stops every task we can reach: SIGTERM, then SIGKILL after a grace.
void za_registry_stop_all (za_registry_t *self);
//  The job stops for preemption (the broker's own SIGTERM, or a task that
//  exited with the requeue code): every task we started and that runs is
//  sent SIGTERM, once, to write its part and exit; none is started again.
void za_registry_preempt (za_registry_t *self);
//  1 once the job stops for preemption.
int za_registry_preempting (const za_registry_t *self);
//  A broker paused for `gap` seconds: every task gets a fresh heartbeat window.
void za_registry_postpone (za_registry_t *self, double gap);

//  The images the trainers (chief, workers) skipped, and listed, by their
//  last reports: their shards' sums.
void za_registry_images (const za_registry_t *self, int64_t *bad, int64_t *images);

//  1 when every task is DONE; 1 when the job has failed.
int za_registry_done (const za_registry_t *self);
int za_registry_failed (const za_registry_t *self);
//  Task (kind, index), or NULL when the job has none.
const za_entry_t *za_registry_entry (const za_registry_t *self, int kind, int index);

//  The cluster view (docs/PROTOCOL.md 13): complete once every ps (and ring
//  member) has an endpoint and every task has registered at least once.
json_t *za_registry_view (const za_registry_t *self);
//  One row per task for the state; *step gets the highest global_step of
//  the training tasks. Rows that cannot be built are counted as failures.
json_t *za_registry_rows (const za_registry_t *self, int64_t *step, uint64_t *json_failures);

//  An elastic job's members now (za_membership.h: the chief and the workers
//  that train, by worker index) and how often they changed. A fixed job's
//  are its chief and workers, number 0.
int64_t za_registry_members (const za_registry_t *self, int *count);

//  The role kind's name ("chief").
const char *za_registry_kind_name (int kind);

#endif
