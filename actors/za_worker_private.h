/*  za_worker_private.h: what the files of the worker share: its state
    (za_worker_t) and the functions one file of it offers the others.
    za_worker.c is the actor and its training loop; za_worker_calls.c its
    requests to every ps (a call to one ps as a state table);
    za_worker_chief.c the chief's duties.                                  */
#ifndef ZA_WORKER_PRIVATE_H_INCLUDED
#define ZA_WORKER_PRIVATE_H_INCLUDED

#include "za_role_private.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_peer.h"
#include "za/za_shm.h"
#include "za/za_shm_link.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

//  A ps that is not ready yet is asked again after this long.
#define NOT_READY_RETRY_MS 100

//  What a phase of training may end with besides 0 and -1: the ps say
//  training is over (done); or a ps answered not_ready, so it was restarted
//  and lost its state, and the caller recovers.
#define WORKER_OVER 1
#define WORKER_PS_LOST 2

//  Where the call to one ps stands (za_worker_calls.c's state table, after
//  docs/PROTOCOL.md 7); CALL_ANY and CALL_SAME are the table's.
typedef enum {
    CALL_IDLE,                  //  nothing asked (at the start, or our request did not go)
    CALL_WAITING,               //  our request went; its answer has not come
    CALL_ANSWERED,              //  its answer is in replies [p] until the next call
    CALL_ANY,
    CALL_SAME
} za_call_state_t;

typedef struct {
    const za_role_config_t *config;
    zsock_t *pipe;
    char who [32];                              //  "chief 0", "worker 2"
    int ps_count;
    zsock_t *dealers [ZA_ROLE_MAX_PS];
    za_shm_link_t *links [ZA_ROLE_MAX_PS];      //  a ps on this host: messages through
                                                //  shared memory (NULL: all as frames)
    int said_shm [ZA_ROLE_MAX_PS];              //  the log said so once
    za_shm_bell_t *bell;                        //  rung by a linked ps's whole replies
    int held_reply [ZA_ROLE_MAX_PS];            //  ps p's reply is read where it is, in
                                                //  its segment, until the next call
                                                //  (set only with reply_msgs [p])
    za_replica_t *replica;                      //  gradients; slots for the chief only
    const za_vars_t *vars;
    za_partition_t placement;
    int parts [ZA_ROLE_MAX_PS][ZA_PARTITION_MAX_PARTS];
    int part_count [ZA_ROLE_MAX_PS];
    za_input_t *input;
    uint64_t seq;
    za_wire_msg_t *out;
    za_wire_msg_t *replies [ZA_ROLE_MAX_PS];
    zmsg_t *reply_msgs [ZA_ROLE_MAX_PS];
    za_call_state_t call_state [ZA_ROLE_MAX_PS];
    za_wire_lease_t lease;                      //  pushed gradients, init values
    //  Heartbeats: any message from a ps counts as one. A ps that answered
    //  once and then stays silent for ivl x liveness is stopped or hung.
    za_peer_t peers [ZA_ROLE_MAX_PS];
    int64_t global_step;
    int64_t own_steps;
    int terminated;                             //  $TERM came on the pipe
    char names [ZA_PARTITION_MAX_PARTS * ZA_OPTIM_MAX_SLOTS][ZA_WIRE_NAME_MAX];
    int64_t init_step;
    int prefer_offer;               //  an init asks a lost ps to prefer a worker's newer values
    int pulled_any;                 //  1 once values were pulled into the replica
    int64_t values_step;            //  the step of the values the replica holds
    //  ps-sync, the chief: the step of the values the replica holds when every
    //  ps agreed on it (-1: none), and copies of each ps's latest two `slots`
    //  messages (PROTOCOL.md 9) since the last init, with their steps (-1:
    //  none). Copies: the ps lends the frames, and waits for them back (or the
    //  record they came whole in goes back).
    int64_t state_step;
    float *slot_copies [ZA_ROLE_MAX_PS][2];
    int64_t slot_steps [ZA_ROLE_MAX_PS][2];
    int skip_push;                              //  mixed_float16: this step overflowed
    uint16_t *low_grads;                        //  --wire-dtype bf16: the push's cast,
                                                //  lent under `lease` as the block is
    za_wire_msg_t *spare;                       //  a received message is decoded here
    //  The step counter; for the chief the summary and checkpoint savers.
    za_role_hooks_t hooks;
    double start_time;
    int64_t start_step;
    int64_t members_seen;               //  elastic: the members' change its input follows
    int left;                           //  elastic: it left the job (SIGTERM)
    int ps_preempted;                   //  the ps said training stopped for preemption
    //  Where a step's time goes: the gradient computation, the push and its
    //  replies, and everything else (input, copying values in, logs).
    uint64_t frozen_left_out;           //  frozen parts no push carried
    //  What config->stats gets (NULL: nothing).
    za_role_stats_t *stats;
    za_role_rates_t rates;
} za_worker_t;

// ---------------------------------------------------------------------------
//  za_worker_calls.c: requests to every ps, and their replies taken

//  Builds the request for ps p into self->out.
void za_worker_build (za_worker_t *self, za_op_t op, int p);

//  The loop turned: watchers see we are alive (relaxed stores only).
void za_worker_alive (za_worker_t *self, double now);

//  Our role's state for watchers (za_role_stats.h).
void za_worker_set_state (za_worker_t *self, za_role_state_t state);

//  Sends self->out to ps p: through the link to a ps on this host, else as
//  frames lent from our blocks. Returns 0, or -1 with an error.
int za_worker_send_to (za_worker_t *self, int p);

//  Sends `op` to every ps and waits for every answer (with our seq) into
//  self->replies, at most timeout_secs; their tensors are valid until the
//  next call (a whole reply's are in the ps's segment till then). A ps
//  silent for a heartbeat interval x liveness is stopped, hung or being
//  restarted (a supervisor restarts a hung ps): we say so once and wait on.
//  Each ps's call follows the state table of za_worker_calls.c.
//  Returns 0, or -1 with an error on the timeout or $TERM.
int za_worker_call_all_within (za_worker_t *self, za_op_t op, double timeout_secs);

//  The same within the job's --timeout-secs.
int za_worker_call_all (za_worker_t *self, za_op_t op);

//  The first ps whose reply is an error with `code`, or -1.
int za_worker_error_from (za_worker_t *self, const char *code);

//  1 if any reply is an error with `code`.
int za_worker_any_error (za_worker_t *self, const char *code);

//  Every reply must be `op`, or an error with code `also` (when not NULL);
//  any other error reply becomes our error.
int za_worker_expect_or (za_worker_t *self, za_op_t op, const char *also);

//  Every reply must be `op`; an error reply becomes our error.
int za_worker_expect (za_worker_t *self, za_op_t op);

//  As za_worker_expect, except that a not_ready from any ps gives
//  WORKER_PS_LOST (no error): that ps was restarted and lost its state.
int za_worker_outcome (za_worker_t *self, za_op_t op);

//  Copies the tensors of each reply (the ps's parts, then optionally their
//  slots) into the estimator's blocks; with skip_errors, a ps that answered
//  an error is left out (its parts keep what the blocks held).
int za_worker_take_parts_of (za_worker_t *self, int with_slots, int skip_errors);

//  The same, every ps's reply taken (an error is ours).
int za_worker_take_parts (za_worker_t *self, int with_slots);

//  Takes the values of every reply into the replica; notes (ps-sync, the
//  chief) their step when the ps agree on it.
int za_worker_take_values (za_worker_t *self);

//  ps-sync: the chief holds the ps's optimizer slots too (each ps sends
//  them after every `values` to task 0), so that a restarted ps can be
//  given the state of the current step instead of a checkpoint's. The
//  calls keep each `slots` message that comes; the chief's duties use them.
int za_worker_keeps_state (za_worker_t *self);

// ---------------------------------------------------------------------------
//  za_worker_chief.c: the chief's duties: the ps initialised, checkpointed,
//  stopped; a lost ps given a state; ps-sync's kept slots given back

//  Initialises every ps with the replica's values and slots at `step`.
int za_worker_init_all (za_worker_t *self, int64_t step);

//  A consistent snapshot into the replica's blocks, then a checkpoint.
//  final: the ps are stopped instead of released, so nothing changes after.
//  Returns 0, -1 with an error, or WORKER_PS_LOST when a ps lost its state
//  on the way: the caller recovers (a snapshot complete by then is saved
//  first, so that is what the recovery reloads).
int za_worker_checkpoint (za_worker_t *self, int final);

//  The checkpoint saver's save (za_hooks.h): 0, -1, or WORKER_PS_LOST.
int za_worker_save_checkpoint (void *arg, int64_t step);

//  ps-async: some ps lost their state (restarted), the others kept theirs.
//  Nothing goes back to a checkpoint: a lost ps gets the freshest values of
//  its shard the chief holds (pulled at most a step ago: with_pulled) and its
//  optimizer slots from the newest checkpoint (fresh ones before the first);
//  a ps that kept its state keeps its values and slots (its snapshot, taken
//  while it holds still); global_step goes on from the newest step the chief
//  or a live ps knows. A chief that has pulled nothing (it has just started)
//  gives a lost ps its shard of the newest checkpoint. Every ps is then
//  initialised with that one state, and a lost ps prefers a worker's offer
//  of a later step (PROTOCOL.md 7.5). Returns 0, or -1 with an error.
int za_worker_reinit_lost (za_worker_t *self, int with_pulled);

//  The chief's start: every ps initialised (or found holding a state).
//  Returns 0 when the ps hold a state to train from, WORKER_OVER when they
//  say training is over already, -1 on an error.
int za_worker_chief_init (za_worker_t *self);

//  Forgets the slots kept: an init gives every ps a state of its own.
void za_worker_forget_slots (za_worker_t *self);

//  Which of ps p's two slot copies holds `step`'s (0, 1), or -1: neither.
int za_worker_slot_copy_of (const za_worker_t *self, int p, int64_t step);

//  Copies every ps's slots of `step` into the replica, all or none. Returns
//  0, or -1 when a ps's are missing.
int za_worker_restore_slots (za_worker_t *self, int64_t step);

//  Why the chief (ps-sync) cannot give every ps the state of the step it is
//  at: into why, for the log that says it reloads a checkpoint instead.
void za_worker_why_no_state (za_worker_t *self, char *why, size_t size);

#endif
