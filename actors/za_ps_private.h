/*  za_ps_private.h: what the files of the parameter server share: its state
    (za_ps_t), the requests its state table acts on, and the functions one
    file of it offers the others. za_ps.c is the actor, its loop and its
    state table; za_ps_shard.c the values and slots; za_ps_sync.c a push's
    update and ps-sync's sums; za_ps_init.c its ways to a state; and
    za_ps_peers.c its connections and same-host links.                     */
#ifndef ZA_PS_PRIVATE_H_INCLUDED
#define ZA_PS_PRIVATE_H_INCLUDED

#include "za_role_private.h"
#include "za/za_checkpoint.h"
#include "za/za_peer.h"
#include "za/za_shm.h"
#include "za/za_shm_link.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

//  Workers (the chief included) a ps serves at most.
#define ZA_PS_MAX_WORKERS 256
//  Connections the ps keeps in mind (a few per task are enough); beyond
//  that the silent ones are forgotten, so a peer that connects, speaks once
//  and goes costs nothing lasting.
#define PS_MAX_PEERS 1024
//  Peers on this host whose tensors come through shared memory, at most.
#define PS_MAX_LINKS 64

//  A ps's states (docs/PROTOCOL.md 8); PS_ANY and PS_SAME are the table's.
typedef enum { PS_WAIT_INIT, PS_READY, PS_HELD, PS_STOPPING, PS_ANY, PS_SAME } za_ps_state_t;

//  Events: every op (za_op_t), and two of our own loop's.
enum {
    PS_E_ANY = 0,               //  matches any event
    PS_E_FINAL_FOUND = 100,     //  model_dir holds a checkpoint at or past max_steps
    PS_E_HOLDER_SILENT          //  the holder of a hold missed interval x liveness
};

typedef struct {
    const za_role_config_t *config;
    zsock_t *pipe;
    zsock_t *router;
    za_vars_t vars;
    za_partition_t placement;
    int parts [ZA_PARTITION_MAX_PARTS];     //  placement indexes of our parts
    size_t part_at [ZA_PARTITION_MAX_PARTS];//  each part's offset in our blocks
    int pushed [ZA_PARTITION_MAX_PARTS];    //  the push at hand: each part's tensor,
                                            //  or -1 (a frozen variable's: left out)
    int part_count;
    size_t floats;                          //  in our blocks
    float *values [2];
    int current;
    za_wire_lease_t lease [2];
    //  --wire-dtype bf16: each value block's cast, for replies (under its
    //  block's lease), made wherever the block is written.
    uint16_t *low [2];
    float *slots [ZA_OPTIM_MAX_SLOTS];
    za_wire_lease_t slot_lease;
    float *scratch;                         //  an unaligned gradient, copied
    //  While without state (WAIT_INIT): the freshest values of our shard a
    //  worker offered, and their step (-1: none); an init may prefer them.
    float *offer;
    int64_t offer_step;
    za_optim_config_t optim;
    int64_t slots_from [ZA_MAX_VARS];       //  where each variable's slots started (init's)
    float base_learning_rate;               //  the chief's; elastic scale-lr scales it
    za_ps_state_t state;
    int64_t updates;                        //  pushes applied since step 0
    int64_t snapshot_step;                  //  sent as global_step in snapshots
    zlist_t *queued;                        //  pushes held back while HELD
    zhashx_t *peers;                        //  routing ids (hex) of the peers heard from
    zhashx_t *links;                        //  routing id (hex) -> za_shm_link_t *: a peer
                                            //  on this host (za_shm_link.h)
    int shm;                                //  links allowed (za_shm_enabled)
    za_shm_bell_t *bell;                    //  rung by a linked worker's whole messages
    int byes;                               //  tasks that said bye, each once
    uint8_t gone [ZA_PS_MAX_WORKERS];       //  which
    uint64_t dropped;
    double last_heard;
    double stop_time;
    int preempted;                          //  the chief stopped us for preemption
    zframe_t *holder;                       //  who sent hold, while HELD
    za_peer_t holder_peer;                  //  its liveness: a silent one lapses the hold
    double final_checked;                   //  when model_dir was last looked at
    int64_t final_tried;                    //  a final checkpoint that would not load
    int64_t final_step;                     //  the one found, for za_ps_load_final
    za_wire_msg_t *in, *out;
    char slot_names [ZA_PARTITION_MAX_PARTS * ZA_OPTIM_MAX_SLOTS][ZA_WIRE_NAME_MAX];
    //  ps-sync: the gradients of this step summed until `aggregate` of them
    //  are in, their pushers waiting for the values of the next step.
    int aggregate;                          //  replicas to aggregate (0: async)
    float *accum;
    int aggregated;
    uint8_t contributed [ZA_PS_MAX_WORKERS];
    uint8_t summed [ZA_PARTITION_MAX_PARTS];//  a gradient of each part came: one that
                                            //  none did (frozen, or every push empty:
                                            //  mixed_float16's overflow) stays as it is
    zlist_t *waiting;                       //  za_ps_waiter_t *
    uint64_t stale;                         //  pushes of an older step, dropped
} za_ps_t;

//  A pusher waiting for the step its gradient is part of.
typedef struct {
    zframe_t *routing_id;
    uint64_t seq;
    int32_t task;
} za_ps_waiter_t;


//  What an action works on: a request (routing id, decoded message, the raw
//  message for queueing) or one of our loop's events (all NULL).
typedef struct {
    zframe_t *routing_id;
    const za_wire_msg_t *msg;
    zmsg_t **raw_p;
    int known;                  //  its connection has sent us requests before
} za_ps_request_t;

// ---------------------------------------------------------------------------
//  za_ps_shard.c: our shard's values and slots, checked, updated and sent

//  The name of our i-th part ("dense/kernel", or a split one's).
const char *za_ps_part_name (za_ps_t *self, int i);

//  Our update count, which ps 0 reports as the global step.
int64_t za_ps_global_step (za_ps_t *self);

//  Sends self->out to `routing_id` (through its same-host link, when it has
//  one), its tensors under `lease` (NULL: none point into our blocks). A
//  peer that is gone is one line in the log.
void za_ps_reply (za_ps_t *self, zframe_t *routing_id, za_wire_lease_t *lease);

//  Replies `error {code, message}` to request `seq`.
void za_ps_reply_error (za_ps_t *self, zframe_t *routing_id, uint64_t seq, const char *code,
                        const char *message);
//  The error that says training is over: "done", or "preempted" when the
//  chief stopped us so (the task then exits with the requeue code too).
void za_ps_reply_over (za_ps_t *self, zframe_t *routing_id, uint64_t seq);

//  A whole message of `link`'s that cannot be used (its record or its
//  header): the link stops reading that segment, and the sender hears
//  "shm_unreadable" for its seq, so that it sends the request again as
//  frames (the answer's word no longer says "ok").
void za_ps_refuse_whole (za_ps_t *self, za_shm_link_t *link);

//  Block 0, just loaded (an init, a checkpoint), cast for the replies.
void za_ps_loaded (za_ps_t *self);

//  Replies `values` with the current block (in the job's wire dtype); under
//  ps-sync the chief (task 0) is sent our slots after them.
void za_ps_reply_values (za_ps_t *self, zframe_t *routing_id, uint64_t seq, int32_t task);

//  1 when tensor t is part `part`'s: of dtype `dtype` (F32, or a push's
//  the job's --wire-dtype) and its shape (its variable's, or [size] when the
//  variable is split). A wrong shape of the right byte count is as wrong
//  as a wrong count (docs/PROTOCOL.md 9).
int za_ps_is_part (za_ps_t *self, const za_wire_tensor_t *t, const za_part_t *part,
                   za_dtype_t dtype);

//  Checks that the message's first part_count tensors are our parts, in
//  order, of the right shapes. Returns 0, or -1 with a message in `why`.
int za_ps_check_parts (za_ps_t *self, const za_wire_msg_t *msg, int exact, char *why,
                       size_t size);

//  A push's tensors: exactly the parts whose variables train, in our order
//  (a frozen variable's parts are left out: they are not updated), or none
//  at all (mixed_float16's overflowed step: nothing is updated, the step
//  counts). Which variables train is the job's (its model, --freeze), as
//  our parts and their shapes are. Fills self->pushed. 0, or -1 with why.
int za_ps_match_push (za_ps_t *self, const za_wire_msg_t *msg, char *why, size_t size);

//  A request's task: the requester's worker index, 0 .. num_workers - 1.
int za_ps_task_ok (za_ps_t *self, const za_wire_msg_t *msg);

//  A received float tensor, aligned for the loops (frames of a few bytes
//  live inside libzmq's message and need not be 4-byte aligned); a bf16
//  one widened to fp32.
const float *za_ps_floats_of (za_ps_t *self, const za_wire_tensor_t *t);

//  One optimizer update of our values into the other block, which becomes
//  current: with push msg's gradients (matched by za_ps_match_push), or
//  (msg NULL) with ps-sync's sum.
void za_ps_update (za_ps_t *self, const za_wire_msg_t *msg);

//  Replies `snapshot_data`: our values and slots (and on ps 0 the step),
//  fp32, under the slot lease (while HELD nothing changes).
void za_ps_snapshot (za_ps_t *self, zframe_t *routing_id, uint64_t seq);

//  Loads our parts' values from a checkpoint (names are the variables').
//  Returns 0, or -1 with an error when it does not hold this model.
int za_ps_load_values (za_ps_t *self, const za_checkpoint_t *ckpt);

// ---------------------------------------------------------------------------
//  za_ps_sync.c: a push applied as the strategy says; ps-sync's sum of a step

//  Answers every waiting pusher: the values now (or, with `done`, that
//  training is over), and forgets them.
void za_ps_answer_waiting (za_ps_t *self, int done);

//  Starts the next step's sum.
//  ps-sync: the step applies once `aggregate` pushes are in; in an elastic
//  job `aggregate` follows the members (asked at every push and every turn,
//  so a step whose pusher was dropped completes with the rest).
void za_ps_sync_follow (za_ps_t *self);
void za_ps_sync_reset (za_ps_t *self);

//  A push, checked, then applied as the strategy says: at once (ps-async),
//  or summed into its step (ps-sync).
void za_ps_push_now (za_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg);

// ---------------------------------------------------------------------------
//  za_ps_init.c: how a ps gets its state: the chief's init, a worker's
//  offer, the final checkpoint

//  init: our parts, then each part's slots "<part>/<slot>", then (ps 0)
//  "global_step". Everything is checked before anything changes.
int za_ps_init (za_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg);

//  A worker's values of our shard while we have no state: the freshest
//  (by step) is kept for the chief's init. Never answered.
int za_ps_offer (za_ps_t *self, za_ps_request_t *request);

//  The final checkpoint found: our parts' values from it, at its step.
int za_ps_load_final (za_ps_t *self, za_ps_request_t *request);

// ---------------------------------------------------------------------------
//  za_ps_peers.c: the connections a ps knows, and its peers' same-host links

//  Remembers that connection `peer` spoke now (unless `remember` is 0, or
//  PS_MAX_PEERS that are not silent are known). Returns 1 when it had spoken
//  before.
int za_ps_peer_heard (za_ps_t *self, const char *peer, int remember);

//  The peer's routing id as a key for self->peers.
void za_ps_peer_key (zframe_t *routing_id, char *key, size_t size);

//  The link of connection `peer`: known, or made when msg carries a word
//  (a peer on this host offers its segment) and fewer than PS_MAX_LINKS
//  are known. NULL: its tensors come as frames.
za_shm_link_t *za_ps_link_of (za_ps_t *self, zframe_t *routing_id, const char *peer,
                              zmsg_t *msg);

//  A link's peer said which task it is: a link of that task on another
//  connection is of an earlier life of it (restarted), and goes.
void za_ps_link_task (za_ps_t *self, const char *peer, za_shm_link_t *link, int task);

#endif
