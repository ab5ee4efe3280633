/*  za_worker.c: the worker actor, and the chief's duties on top of it. Each
    step: compute gradients on this worker's shard of the data, push them to
    every ps and take the fresh values from the replies (one round trip per
    ps per step). The chief initialises or restores the ps, checkpoints from
    a consistent snapshot (hold all, snapshot all, release all), writes
    metrics, and at max_steps saves the final snapshot and stops the ps.

    A ps restarted at the same endpoint comes back without state and says
    not_ready: the chief reloads the newest checkpoint into every ps (under
    ps-sync, the state of the current step, which it holds), a worker waits
    for that, and both go on from there (s_recover).                      */
#include "za_role_private.h"
#include "za/za_curve.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_peer.h"
#include "za/za_shm.h"
#include "za/za_shm_link.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NOT_READY_RETRY_MS 100
//  After a failure a ps may be gone: the bye does not wait longer than this.
#define BYE_AFTER_FAILURE_SECS 2.0

//  What a phase of training may end with besides 0 and -1: the ps say
//  training is over (done); or a ps answered not_ready, so it was restarted
//  and lost its state, and the caller recovers.
#define S_OVER 1
#define S_PS_LOST 2

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
    //  Where a step's time goes: the gradient computation, the push and its
    //  replies, and everything else (input, copying values in, logs).
    double compute_secs, transfer_secs, step_secs;
    double input_secs;                  //  waiting for the input's next batch
    uint64_t frozen_left_out;           //  frozen parts no push carried
    //  What config->stats gets (NULL: nothing).
    za_role_stats_t *stats;
    za_role_rates_t rates;
} s_worker_t;

static int s_save_checkpoint (void *arg, int64_t step);

static void
s_worker_destroy (s_worker_t **self_p)
{
    s_worker_t *self = *self_p;
    if (!self)
        return;
    //  Closing the sockets lets libzmq drop what it could not send; only then
    //  can the frames lent from our blocks all come back.
    for (int p = 0; p < self->ps_count; p++) {
        zsock_destroy (&self->dealers [p]);
        za_shm_link_destroy (&self->links [p]);     //  (with a record it held)
        zmsg_destroy (&self->reply_msgs [p]);
        za_free (self->slot_copies [p][0]);
        za_free (self->slot_copies [p][1]);
        free (self->replies [p]);
    }
    za_shm_bell_destroy (&self->bell);
    free (self->spare);
    za_wire_lease_wait (&self->lease);
    za_free (self->low_grads);
    za_input_destroy (&self->input);
    za_hooks_end (&self->hooks.hooks, &self->hooks.context);
    za_replica_destroy (&self->replica);
    free (self->out);
    free (self);
    *self_p = NULL;
}

static const char *
s_who (const s_worker_t *self)
{
    return self->who;
}

static s_worker_t *
s_worker_new (const za_role_config_t *config, zsock_t *pipe)
{
    s_worker_t *self = (s_worker_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->config = config;
    self->pipe = pipe;
    self->ps_count = config->ps_count;
    self->stats = config->stats;
    za_role_who (config, self->who, sizeof self->who);
    za_wire_lease_init (&self->lease);
    self->state_step = -1;
    for (int p = 0; p < ZA_ROLE_MAX_PS; p++)
        self->slot_steps [p][0] = self->slot_steps [p][1] = -1;
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->spare = (za_wire_msg_t *) malloc (sizeof *self->spare);
    if (!self->out || !self->spare || config->ps_count < 1 || config->ps_count > ZA_ROLE_MAX_PS) {
        za_error ("%s: needs 1 to %d ps (got %d)", s_who (self), ZA_ROLE_MAX_PS,
                  config->ps_count);
        goto fail;
    }
    //  The ps apply the updates: only the chief, who initialises them and
    //  checkpoints their snapshots, holds optimizer slots.
    za_replica_config_t replica = {
        .model_fn = config->model_fn, .params = config->params, .input = config->input,
        .threads = config->run.threads, .train = 1,
        .device = config->run.device, .replicas_per_device = config->run.replicas_per_device,
        .precision = config->run.precision,
        .optim = config->is_chief? &config->optim: NULL,
        .replica_index = config->worker_index, .warm_start = &config->run.warm_start,
    };
    self->replica = za_replica_new (&replica, config->run.seed);
    if (!self->replica)
        goto fail;
    self->vars = za_replica_vars (self->replica);
    if (za_partition_compute (self->vars, config->ps_count, config->partition_floats,
                              &self->placement))
        goto fail;
    if (config->wire_dtype == ZA_DTYPE_BF16
        && !(self->low_grads = (uint16_t *) za_alloc ((self->vars->total + 1)
                                                      * sizeof (uint16_t))))
        goto fail;
    double now = za_clock_mono ();
    for (int p = 0; p < self->ps_count; p++) {
        self->part_count [p] = za_partition_parts_of (&self->placement, p, self->parts [p],
                                                      ZA_PARTITION_MAX_PARTS);
        self->replies [p] = (za_wire_msg_t *) malloc (sizeof (za_wire_msg_t));
        self->dealers [p] = zsock_new (ZMQ_DEALER);
        if (!self->replies [p] || !self->dealers [p])
            goto fail;
        //  No ZMTP heartbeats here: they would drop the connection, and the
        //  request in flight, of a ps that is only paused; our pings judge it.
        //  Nothing ps p sends is larger than its largest part (or a header).
        uint64_t largest = 0;
        for (int i = 0; i < self->part_count [p]; i++)
            if (self->placement.parts [self->parts [p][i]].size > largest)
                largest = self->placement.parts [self->parts [p][i]].size;
        zsock_set_maxmsgsize (self->dealers [p], za_wire_max_frame (largest * sizeof (float)));
        za_curve_client (self->dealers [p]);
        //  A send that would block (a ps never reached, its queue full) gives
        //  up when the reply would have: it names the ps then.
        if (config->timeout_secs > 0)
            zsock_set_sndtimeo (self->dealers [p], (int) (config->timeout_secs * 1000));
        if (zsock_connect (self->dealers [p], "%s", config->ps_endpoints [p]) < 0) {
            za_error ("%s: cannot connect to ps %d at %s", s_who (self), p,
                      config->ps_endpoints [p]);
            goto fail;
        }
        //  A ps on this host, in another process: our pushes through a segment
        //  of twice a push (inproc frames are zero-copy already).
        if (za_curve_loopback (config->ps_endpoints [p]) && za_shm_enabled ()
            && strncmp (config->ps_endpoints [p], "inproc://", 9)) {
            size_t push = 0;
            for (int i = 0; i < self->part_count [p]; i++)
                push += self->placement.parts [self->parts [p][i]].size * sizeof (float) + 4096;
            self->links [p] = za_shm_link_new (1, 2 * push);
            if (!self->links [p])
                za_info ("%s: no shared memory for ps %d (%s): tensors go as frames",
                         s_who (self), p, za_last_error ());
            if (self->links [p] && !self->bell && !(self->bell = za_shm_bell_new ()))
                za_info ("%s: %s; headers go over ZeroMQ", s_who (self), za_last_error ());
            if (self->links [p])
                za_shm_link_set_bell (self->links [p], self->bell);
        }
        za_peer_init (&self->peers [p], config->heartbeat, now);
    }
    if (!config->train && !config->input_fn) {
        za_error ("%s: no training data", s_who (self));
        goto fail;
    }
    za_role_hooks_init (&self->hooks, config, self->who, s_save_checkpoint, self);
    return self;
fail:
    s_worker_destroy (&self);
    return NULL;
}

// ---------------------------------------------------------------------------
//  Requests to every ps

//  Adds the parts held by ps p, taken from `block`, to self->out; with
//  `suffix`, names them "<part>/<suffix>"; with `trained`, only the parts
//  of variables that train (a push: a frozen variable's gradient is none).
static void
s_add_parts (s_worker_t *self, int p, const void *block, za_dtype_t dtype, const char *suffix,
             int *name_at, int trained)
{
    for (int i = 0; i < self->part_count [p]; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [p][i]];
        const za_var_t *var = &self->vars->vars [part->var];
        if (trained && var->frozen) {
            self->frozen_left_out++;
            continue;
        }
        int64_t shape [ZA_MAX_DIMS];
        int ndim = za_role_part_shape (self->vars, part, shape);
        const char *name = part->name;
        if (suffix) {
            char *buf = self->names [(*name_at)++], formatted [ZA_WIRE_NAME_MAX];
            snprintf (formatted, sizeof formatted, "%s/%s", part->name, suffix);
            memcpy (buf, formatted, sizeof formatted);
            name = buf;
        }
        za_wire_msg_add (self->out, name, dtype, ndim, shape, (const char *) block
                         + (var->offset + part->offset) * za_dtype_size (dtype));
    }
}

//  Builds the request for ps p into self->out.
static void
s_build (s_worker_t *self, za_op_t op, int p)
{
    za_wire_msg_init (self->out, op);
    self->out->seq = self->seq;
    self->out->task = self->config->worker_index;
    if (op == ZA_OP_PUSH) {
        //  ps-sync: the step of the values these gradients were computed on.
        if (self->config->strategy == ZA_STRATEGY_PS_SYNC)
            self->out->step = self->global_step;
        //  mixed_float16's overflow: no gradient at all (the ps keeps values
        //  and slots as they are, as for a frozen variable; the step counts).
        if (self->skip_push)
            ;
        else
        if (self->low_grads)
            s_add_parts (self, p, self->low_grads, ZA_DTYPE_BF16, NULL, NULL, 1);
        else
            s_add_parts (self, p, za_replica_gradients (self->replica), ZA_DTYPE_F32, NULL,
                         NULL, 1);
    }
    else
    if (op == ZA_OP_INIT) {
        const za_optim_config_t *optim = za_replica_optim (self->replica);
        int name_at = 0;
        s_add_parts (self, p, za_replica_values (self->replica), ZA_DTYPE_F32, NULL, NULL, 0);
        int slot_count = za_optim_slot_count (optim->kind);
        for (int s = 0; s < slot_count; s++)
            s_add_parts (self, p, za_replica_slot (self->replica, s), ZA_DTYPE_F32,
                         za_optim_slot_name (optim->kind, s), &name_at, 0);
        self->out->step = self->init_step;
        if (p == 0)
            za_wire_msg_add (self->out, "global_step", ZA_DTYPE_I64, 0, NULL, &self->init_step);
        static const int64_t prefer = 1;
        if (self->prefer_offer)
            za_wire_msg_add (self->out, "prefer_offer", ZA_DTYPE_I64, 0, NULL, &prefer);
        self->out->has_optim = 1;
        self->out->optim = *optim;
    }
    else
    if (op == ZA_OP_OFFER) {
        self->out->step = self->values_step;
        s_add_parts (self, p, za_replica_values (self->replica), ZA_DTYPE_F32, NULL, NULL, 0);
    }
}

//  The loop turned: watchers see we are alive (relaxed stores only).
static void
s_alive (s_worker_t *self, double now)
{
    if (self->stats)
        atomic_store_explicit (&self->stats->alive, now, memory_order_relaxed);
}

static void
s_set_state (s_worker_t *self, za_role_state_t state)
{
    za_role_stats_publish (self->stats, state, za_clock_mono ());
}

//  A pong that says not_ready comes from a ps that has nothing to answer
//  the request we wait for: it was restarted without state, or our request
//  went down with its old process (PROTOCOL.md 7.5). Makes the pong in
//  `reply` that ps's `error not_ready`.
static void
s_lost_state_reply (s_worker_t *self, za_wire_msg_t *reply)
{
    reply->op = ZA_OP_ERROR;
    reply->seq = self->seq;
    reply->tensor_count = 0;
    snprintf (reply->error, sizeof reply->error, "the ps has no state (restarted?)");
}

//  Pings every ps we still wait for whose ping is due, and says once that a
//  ps which answered before has gone silent.
static void
s_heartbeats (s_worker_t *self, za_op_t op, double now, double left)
{
    for (int p = 0; p < self->ps_count; p++) {
        za_peer_t *peer = &self->peers [p];
        if (self->reply_msgs [p])
            continue;
        if (peer->heard && za_peer_went_silent (peer, now))
            za_info ("%s: ps %d at %s missed %d heartbeats (silent %.1f s while we waited "
                     "for %s): stopped, hung or restarting; waiting up to --timeout-secs "
                     "(%.0f s more)", s_who (self), p, self->config->ps_endpoints [p],
                     peer->beat.liveness, za_peer_silence (peer, now), za_op_name (op), left);
        if (za_peer_ping_due (peer, now)) {
            //  (p has no reply yet, held or not: its message is free.)
            za_wire_msg_t *ping = self->replies [p];
            za_wire_msg_init (ping, ZA_OP_PING);
            ping->seq = 0;          //  requests count from 1: a pong is never a reply
            ping->task = self->config->worker_index;
            //  Through the link: its word keeps telling the ps what we read.
            if (self->links [p])
                za_shm_link_send (self->links [p], self->dealers [p], NULL, ping, NULL);
            else
                za_wire_send (self->dealers [p], NULL, ping, NULL);
        }
    }
}

//  ps-sync: the chief holds the ps's optimizer slots too (each ps sends
//  them after every `values` to task 0), so that a restarted ps can be
//  given the state of the current step instead of a checkpoint's.
static int
s_keeps_state (s_worker_t *self)
{
    const za_optim_config_t *optim = za_replica_optim (self->replica);
    return self->config->is_chief && self->config->strategy == ZA_STRATEGY_PS_SYNC
        && optim && za_optim_slot_count (optim->kind) > 0;
}

//  Floats of ps p's slots (all its parts, every slot).
static size_t
s_slot_floats (s_worker_t *self, int p)
{
    size_t floats = 0;
    for (int i = 0; i < self->part_count [p]; i++)
        floats += self->placement.parts [self->parts [p][i]].size;
    return floats * za_optim_slot_count (za_replica_optim (self->replica)->kind);
}

//  Copies ps p's `slots` message (decoded in self->spare) as its latest, the
//  one before becoming the previous, and destroys *msg_p at once (the ps
//  waits for its frames before it updates its slots). One of another shape
//  is dropped.
static void
s_keep_slots (s_worker_t *self, int p, zmsg_t **msg_p)
{
    const za_wire_msg_t *m = self->spare;
    int64_t step = m->step;
    int n = self->part_count [p];
    if (!s_keeps_state (self) || step < 0
        || m->tensor_count != n * za_optim_slot_count (za_replica_optim (self->replica)->kind)) {
        zmsg_destroy (msg_p);
        return;
    }
    int k = step == self->slot_steps [p][0]? 0: 1;
    if (k == 1) {
        //  The latest becomes the previous; the previous's buffer takes this.
        float *older = self->slot_copies [p][1];
        self->slot_copies [p][1] = self->slot_copies [p][0];
        self->slot_steps [p][1] = self->slot_steps [p][0];
        self->slot_copies [p][0] = older;
    }
    self->slot_steps [p][0] = -1;
    if (!self->slot_copies [p][0]
        && !(self->slot_copies [p][0] = (float *) za_alloc (s_slot_floats (self, p)
                                                            * sizeof (float)))) {
        zmsg_destroy (msg_p);
        return;
    }
    float *to = self->slot_copies [p][0];
    for (int t = 0; t < m->tensor_count; t++) {
        const za_part_t *part = &self->placement.parts [self->parts [p][t % n]];
        if (m->tensors [t].bytes != part->size * sizeof (float)) {
            zmsg_destroy (msg_p);
            return;
        }
        memcpy (to, m->tensors [t].data, m->tensors [t].bytes);
        to += part->size;
    }
    self->slot_steps [p][0] = step;
    zmsg_destroy (msg_p);
}

//  Forgets the slots kept: an init gives every ps a state of its own.
static void
s_forget_slots (s_worker_t *self)
{
    for (int p = 0; p < self->ps_count; p++)
        self->slot_steps [p][0] = self->slot_steps [p][1] = -1;
}

//  Which of ps p's two slot copies holds `step`'s (0, 1), or -1: neither.
static int
s_slot_copy_of (const s_worker_t *self, int p, int64_t step)
{
    return self->slot_steps [p][0] == step? 0: self->slot_steps [p][1] == step? 1: -1;
}

//  Copies every ps's slots of `step` into the replica, all or none. Returns
//  0, or -1 when a ps's are missing.
static int
s_restore_slots (s_worker_t *self, int64_t step)
{
    if (!s_keeps_state (self))
        return 0;
    int which [ZA_ROLE_MAX_PS];
    for (int p = 0; p < self->ps_count; p++) {
        which [p] = s_slot_copy_of (self, p, step);
        if (which [p] < 0)
            return -1;
    }
    int slot_count = za_optim_slot_count (za_replica_optim (self->replica)->kind);
    for (int p = 0; p < self->ps_count; p++) {
        const float *from = self->slot_copies [p][which [p]];
        for (int s = 0; s < slot_count; s++)
            for (int i = 0; i < self->part_count [p]; i++) {
                const za_part_t *part = &self->placement.parts [self->parts [p][i]];
                memcpy (za_replica_slot (self->replica, s)
                        + self->vars->vars [part->var].offset + part->offset, from,
                        part->size * sizeof (float));
                from += part->size;
            }
    }
    return 0;
}

//  Sends self->out to ps p: through the link to a ps on this host, else as
//  frames lent from our blocks. Returns 0, or -1 with an error.
static int
s_send_to (s_worker_t *self, int p)
{
    return self->links [p]
         ? za_shm_link_send (self->links [p], self->dealers [p], NULL, self->out, &self->lease)
         : za_wire_send (self->dealers [p], NULL, self->out, &self->lease);
}

//  A whole message in ps p's segment that cannot be used: says so and
//  refuses the segment (the ps then sends frames).
static void
s_refuse_segment (s_worker_t *self, int p)
{
    za_info ("%s: ps %d: %s; its segment is refused", s_who (self), p, za_last_error ());
    za_shm_link_refuse (self->links [p]);
}

//  A message from ps p while we wait for the answers to `op`, its tensors in
//  its frames (data NULL) or held in p's segment until za_shm_link_done (a
//  whole message; a reply stays held there: held_reply): a reply (counted
//  off *missing), slots, a sign of life, or the ps's word that it cannot
//  read our segment (the request goes again as frames). Takes *msg_p.
//  Returns 0, or -1 with an error.
static int
s_take_held (s_worker_t *self, za_op_t op, int p, zmsg_t **msg_p, int *missing,
             const void *const *data, const size_t *sizes, int count)
{
    zmsg_t *msg = *msg_p;
    *msg_p = NULL;
    if (self->links [p] && !self->said_shm [p] && za_shm_link_state (self->links [p]) == 3) {
        self->said_shm [p] = 1;
        za_info ("%s: ps %d is on this host: tensors through shared memory%s", s_who (self), p,
                 za_shm_link_rings (self->links [p])? ", headers too (its bell rung)": "");
    }
    double now = za_clock_mono ();
    double silence = za_peer_silence (&self->peers [p], now);
    if (za_peer_heard (&self->peers [p], now))
        za_info ("%s: ps %d at %s answers again after %.1f s of silence", s_who (self), p,
                 self->config->ps_endpoints [p], silence);
    //  Decoded aside: a ps's slots are kept whatever we wait for; after
    //  p's reply anything more from p is only a sign of life (as is what
    //  fails to decode); a reply takes the place of p's (in place: its
    //  tensors point into msg, or into p's segment).
    if (data? za_wire_decode_payloads (msg, data, sizes, count, self->spare)
            : za_wire_decode (msg, self->spare)) {
        //  A whole message that does not decode: p's segment is refused.
        if (data)
            s_refuse_segment (self, p);
        zmsg_destroy (&msg);
        return 0;
    }
    if (self->spare->op == ZA_OP_SLOTS) {
        s_keep_slots (self, p, &msg);
        return 0;
    }
    //  Our tensors came through a segment this ps cannot read (it
    //  restarted without shared memory): the link knows now, and the
    //  request goes again as frames.
    if (self->spare->op == ZA_OP_ERROR && streq (self->spare->code, "shm_unreadable")
        && self->spare->seq == self->seq && !self->reply_msgs [p]) {
        zmsg_destroy (&msg);
        s_build (self, op, p);
        if (s_send_to (self, p))
            return za_error ("%s: cannot send %s to ps %d", s_who (self), za_op_name (op), p);
        return 0;
    }
    if (self->reply_msgs [p]) {
        zmsg_destroy (&msg);
        return 0;
    }
    za_wire_msg_t *reply = self->spare;
    self->spare = self->replies [p];
    self->replies [p] = reply;
    if (reply->seq != self->seq) {
        //  A stale reply or a pong: a sign of life, unless the pong says
        //  the ps has no state (an init is answered in any case).
        if (reply->op != ZA_OP_PONG || !streq (reply->code, "not_ready")
            || op == ZA_OP_INIT) {
            zmsg_destroy (&msg);
            return 0;
        }
        s_lost_state_reply (self, reply);
    }
    //  A whole reply is read where it is: its record goes back to the ps at
    //  the next call (s_let_go), and nothing more of p's is taken till then.
    self->held_reply [p] = data != NULL;
    self->reply_msgs [p] = msg;
    (*missing)--;
    return 0;
}

//  The same, its tensors in its frames.
static int
s_take (s_worker_t *self, za_op_t op, int p, zmsg_t **msg_p, int *missing)
{
    return s_take_held (self, op, p, msg_p, missing, NULL, NULL, 0);
}

//  Lets ps p's last reply go (and the record it was read from).
static void
s_let_go (s_worker_t *self, int p)
{
    zmsg_destroy (&self->reply_msgs [p]);
    if (self->held_reply [p] && self->links [p])
        za_shm_link_done (self->links [p]);
    self->held_reply [p] = 0;
}

//  Sends `op` to every ps and waits for every answer (with our seq) into
//  self->replies, at most timeout_secs; their tensors are valid until the
//  next call (a whole reply's are in the ps's segment till then). A ps
//  silent for a heartbeat interval x liveness is stopped, hung or being
//  restarted (a supervisor restarts a hung ps): we say so once and wait on.
//  Returns 0, or -1 with an error on the timeout or $TERM.
static int
s_call_all_within (s_worker_t *self, za_op_t op, double timeout_secs)
{
    self->seq++;
    for (int p = 0; p < self->ps_count; p++) {
        s_let_go (self, p);
        s_build (self, op, p);
        if (s_send_to (self, p))
            return za_error ("%s: cannot send %s to ps %d", s_who (self), za_op_name (op), p);
    }
    zmq_pollitem_t items [2 + ZA_ROLE_MAX_PS];
    items [0] = (zmq_pollitem_t) {zsock_resolve (self->pipe), 0, ZMQ_POLLIN, 0};
    for (int p = 0; p < self->ps_count; p++)
        items [1 + p] = (zmq_pollitem_t) {zsock_resolve (self->dealers [p]), 0, ZMQ_POLLIN, 0};
    int item_count = 1 + self->ps_count;
    if (self->bell)
        items [item_count++] = (zmq_pollitem_t) {NULL, za_shm_bell_fd (self->bell), ZMQ_POLLIN, 0};
    int missing = self->ps_count, rc = 0;
    double now = za_clock_mono ();
    double deadline = now + timeout_secs;
    //  Between two requests we do not listen: each ps's silence counts from here.
    for (int p = 0; p < self->ps_count; p++)
        za_peer_expect (&self->peers [p], now);
    while (missing > 0 && rc == 0) {
        //  Whole messages a ps on this host wrote (its bell rang, or they
        //  came while we did not listen), then its sockets.
        if (self->bell) {
            za_shm_bell_quiet (self->bell);
            for (int p = 0; p < self->ps_count && rc == 0; p++) {
                zmsg_t *msg = NULL;
                const void *const *data;
                const size_t *sizes;
                int got, count;
                while (rc == 0 && self->links [p] && !self->held_reply [p]
                       && (got = za_shm_link_take (self->links [p], &msg, &data, &sizes,
                                                   &count)) != 0) {
                    if (got < 0)
                        //  Not sent again (a push is not idempotent): the
                        //  call times out, saying which ps did not answer.
                        s_refuse_segment (self, p);
                    else
                        rc = s_take_held (self, op, p, &msg, &missing, data, sizes, count);
                    if (!self->held_reply [p])
                        za_shm_link_done (self->links [p]);
                }
            }
            if (rc || missing == 0)
                break;
        }
        now = za_clock_mono ();
        s_alive (self, now);
        double left = deadline - now;
        if (left <= 0 || zsys_interrupted) {
            int p = 0;
            while (p < self->ps_count && self->reply_msgs [p])
                p++;
            rc = za_error ("%s: ps %d at %s did not answer %s within %.0f s", s_who (self), p,
                           self->config->ps_endpoints [p], za_op_name (op), timeout_secs);
            break;
        }
        s_heartbeats (self, op, now, left);
        double wait = left;
        for (int p = 0; p < self->ps_count; p++)
            if (!self->reply_msgs [p] && za_peer_next_due (&self->peers [p], now) < wait)
                wait = za_peer_next_due (&self->peers [p], now);
        if (zmq_poll (items, item_count, (long) (wait * 1000) + 1) <= 0)
            continue;
        if (items [0].revents & ZMQ_POLLIN) {
            char *command = zstr_recv (self->pipe);
            int term = !command || streq (command, "$TERM");
            zstr_free (&command);
            if (term) {
                self->terminated = 1;
                rc = za_error ("%s: stopped", s_who (self));
                break;
            }
        }
        for (int p = 0; p < self->ps_count && rc == 0; p++) {
            if (!(items [1 + p].revents & ZMQ_POLLIN))
                continue;
            zmsg_t *msg = zmsg_recv (self->dealers [p]);
            if (!msg)
                continue;
            //  While p's reply is held in its segment, its link is not
            //  touched (a receive would let the record go): a message with
            //  its frames is taken as ever (slots are kept; anything else
            //  is a sign of life), one whose tensors are in a record is a
            //  sign of life only (its word waits for the next message).
            uint64_t seq;
            if (self->held_reply [p] && za_shm_link_names_record (msg, &seq)) {
                za_peer_heard (&self->peers [p], za_clock_mono ());
                zmsg_destroy (&msg);
                continue;
            }
            if (self->links [p] && !self->held_reply [p]
                && za_shm_link_receive (self->links [p], msg)) {
                za_info ("%s: ps %d: %s", s_who (self), p, za_last_error ());
                zmsg_destroy (&msg);
                continue;
            }
            rc = s_take (self, op, p, &msg, &missing);
        }
    }
    return rc;
}

static int
s_call_all (s_worker_t *self, za_op_t op)
{
    return s_call_all_within (self, op, self->config->timeout_secs);
}

//  The first ps whose reply is an error with `code`, or -1.
static int
s_error_from (s_worker_t *self, const char *code)
{
    for (int p = 0; p < self->ps_count; p++)
        if (self->replies [p]->op == ZA_OP_ERROR && streq (self->replies [p]->code, code))
            return p;
    return -1;
}

//  1 if any reply is an error with `code`.
static int
s_any_error (s_worker_t *self, const char *code)
{
    return s_error_from (self, code) >= 0;
}

//  Every reply must be `op`, or an error with code `also` (when not NULL);
//  any other error reply becomes our error.
static int
s_expect_or (s_worker_t *self, za_op_t op, const char *also)
{
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (r->op == ZA_OP_ERROR && also && streq (r->code, also))
            continue;
        if (r->op == ZA_OP_ERROR)
            return za_error ("%s: ps %d refused: %s (%s)", s_who (self), p, r->error, r->code);
        if (r->op != op)
            return za_error ("%s: ps %d answered %s, expected %s", s_who (self), p,
                             za_op_name (r->op), za_op_name (op));
    }
    return 0;
}

//  Every reply must be `op`; an error reply becomes our error.
static int
s_expect (s_worker_t *self, za_op_t op)
{
    return s_expect_or (self, op, NULL);
}

//  As s_expect, except that a not_ready from any ps gives S_PS_LOST (no
//  error): that ps was restarted and lost its state.
static int
s_outcome (s_worker_t *self, za_op_t op)
{
    return s_any_error (self, "not_ready") || s_any_error (self, "rewound")? S_PS_LOST
                                                                          : s_expect (self, op);
}

//  Copies the tensors of each reply (the ps's parts, then optionally their
//  slots) into the estimator's blocks; with skip_errors, a ps that answered
//  an error is left out (its parts keep what the blocks held).
static int
s_take_parts_of (s_worker_t *self, int with_slots, int skip_errors)
{
    const za_optim_config_t *optim = za_replica_optim (self->replica);
    int slot_count = with_slots && optim? za_optim_slot_count (optim->kind): 0;
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (skip_errors && r->op == ZA_OP_ERROR)
            continue;
        int n = self->part_count [p];
        if (r->tensor_count < n * (1 + slot_count))
            return za_error ("%s: ps %d sent %d tensors, expected %d", s_who (self), p,
                             r->tensor_count, n * (1 + slot_count));
        for (int s = -1; s < slot_count; s++) {
            float *block = s < 0? za_replica_values (self->replica)
                                : za_replica_slot (self->replica, s);
            for (int i = 0; i < n; i++) {
                const za_wire_tensor_t *t = &r->tensors [(s + 1) * n + i];
                const za_part_t *part = &self->placement.parts [self->parts [p][i]];
                //  Values may come as bf16 (--wire-dtype), slots are f32.
                int bf16 = s < 0 && t->dtype == ZA_DTYPE_BF16;
                if ((t->dtype != ZA_DTYPE_F32 && !bf16)
                    || t->bytes != part->size * za_dtype_size (t->dtype))
                    return za_error ("%s: ps %d sent '%s' of %zu bytes for '%s' (%zu floats)",
                                     s_who (self), p, t->name, t->bytes, part->name,
                                     part->size);
                float *to = block + self->vars->vars [part->var].offset + part->offset;
                if (bf16)
                    za_bf16_to_f32 (t->data, to, part->size);
                else
                    memcpy (to, t->data, t->bytes);
            }
        }
    }
    return 0;
}

static int
s_take_parts (s_worker_t *self, int with_slots)
{
    return s_take_parts_of (self, with_slots, 0);
}

//  Takes the values of every reply into the replica; notes (ps-sync, the
//  chief) their step when the ps agree on it.
static int
s_take_values (s_worker_t *self)
{
    self->state_step = -1;
    if (s_take_parts (self, 0))
        return -1;
    self->pulled_any = 1;
    self->values_step = self->replies [0]->step;
    int same = 1;
    for (int p = 1; p < self->ps_count; p++)
        same &= self->replies [p]->step == self->replies [0]->step;
    if (self->config->is_chief && self->config->strategy == ZA_STRATEGY_PS_SYNC && same)
        self->state_step = self->replies [0]->step;
    return 0;
}

// ---------------------------------------------------------------------------
//  The chief's duties

//  Initialises every ps with the replica's values and slots at `step`.
static int
s_init_all (s_worker_t *self, int64_t step)
{
    //  What the ps held before is gone: the state comes again with the pulls.
    self->state_step = -1;
    s_forget_slots (self);
    self->init_step = step;
    if (s_call_all (self, ZA_OP_INIT) || s_expect (self, ZA_OP_INIT_OK))
        return -1;
    return 0;
}

//  Ends the final checkpoint: stops every ps at the snapshot the replica
//  holds. A ps restarted since its snapshot answers not_ready: it gets the
//  snapshot back and is stopped in turn (the others, stopped already,
//  answer done to both).
static int
s_stop_all (s_worker_t *self, int64_t step)
{
    if (s_call_all (self, ZA_OP_STOP))
        return -1;
    int lost;
    while ((lost = s_error_from (self, "not_ready")) >= 0) {
        za_info ("chief: ps %d lost its state during the final stop (restarted?): giving it "
                 "the final snapshot (step %" PRId64 ")", lost, step);
        self->init_step = step;
        if (s_call_all (self, ZA_OP_INIT) || s_expect_or (self, ZA_OP_INIT_OK, "done")
            || s_call_all (self, ZA_OP_STOP))
            return -1;
    }
    return s_expect_or (self, ZA_OP_STOPPING, "done");
}

//  A consistent snapshot into the replica's blocks, then a checkpoint.
//  final: the ps are stopped instead of released, so nothing changes after.
//  Returns 0, -1 with an error, or S_PS_LOST when a ps lost its state on the
//  way: the caller recovers (a snapshot complete by then is saved first, so
//  that is what the recovery reloads).
static int
s_checkpoint (s_worker_t *self, int final)
{
    int rc = s_call_all (self, ZA_OP_HOLD)? -1: s_outcome (self, ZA_OP_HELD);
    if (rc)
        return rc;              //  the holds lapse, or the recovery releases them
    rc = s_call_all (self, ZA_OP_SNAPSHOT)? -1: s_outcome (self, ZA_OP_SNAPSHOT_DATA);
    if (rc == 0)
        rc = s_take_parts (self, 1);
    if (rc == 0)
        self->values_step = self->replies [0]->step;
    //  The replica now holds the snapshot's values (and slots): the state of
    //  ps-sync's recovery only if that is the step it held.
    if (rc || self->replies [0]->step != self->state_step)
        self->state_step = -1;
    if (rc == S_PS_LOST)
        return rc;
    int64_t step = self->replies [0]->step;
    int ended = final? s_stop_all (self, step)
              : s_call_all (self, ZA_OP_RELEASE)? -1: s_outcome (self, ZA_OP_RELEASED);
    if (rc || ended < 0)
        return -1;
    const za_run_config_t *run = &self->config->run;
    int saved = za_replica_save_through (self->replica, run->model_dir, step,
                                         run->keep_checkpoint_max, final);
    if (saved < 0)
        return -1;
    if (final)
        self->global_step = step;
    if (saved == ZA_SAVE_SKIPPED)
        return ended? ended: ZA_SAVE_SKIPPED;
    za_info ("chief: checkpoint at step %" PRId64 "%s", step, final? " (final)": "");
    za_role_announce_checkpoint (self->config, self->pipe, step);
    return ended;
}

//  The checkpoint saver's save (za_hooks.h): 0, -1, or S_PS_LOST.
static int
s_save_checkpoint (void *arg, int64_t step)
{
    (void) step;
    return s_checkpoint ((s_worker_t *) arg, 0);
}

//  A restarted chief without values of its own: waits (at most heartbeat
//  interval x liveness x 2, the time a worker blocked on the lost ps needs to
//  find it out and offer) until every ps either holds its state or holds a
//  worker's offer (its not_ready carries the offer's step). 0, or -1.
static int
s_wait_for_offers (s_worker_t *self)
{
    const za_role_config_t *config = self->config;
    double deadline = za_clock_mono ()
                    + 2 * config->heartbeat.ivl_secs * config->heartbeat.liveness;
    while (1) {
        if (s_call_all (self, ZA_OP_PULL))
            return -1;
        int waiting = 0;
        for (int p = 0; p < self->ps_count; p++) {
            const za_wire_msg_t *r = self->replies [p];
            waiting += r->op == ZA_OP_ERROR && streq (r->code, "not_ready") && r->step < 0;
        }
        if (!waiting)
            return 0;
        if (za_clock_mono () > deadline) {
            za_info ("chief: %d lost ps hold no worker's values after %.0f s: they get the "
                     "newest checkpoint's", waiting,
                     2 * config->heartbeat.ivl_secs * config->heartbeat.liveness);
            return 0;
        }
        s_alive (self, za_clock_mono ());
        zclock_sleep (NOT_READY_RETRY_MS);
    }
}

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
static int
s_reinit_lost (s_worker_t *self, int with_pulled)
{
    if (!with_pulled && self->config->rejoin && s_wait_for_offers (self))
        return -1;
    size_t bytes = self->vars->total * sizeof (float);
    float *pulled = with_pulled? (float *) malloc (bytes): NULL;
    if (with_pulled && !pulled)
        return za_error ("%s: out of memory keeping the pulled values", s_who (self));
    if (pulled)
        memcpy (pulled, za_replica_values (self->replica), bytes);
    int restored = 0;
    int64_t checkpoint_step = -1;
    int rc = s_call_all (self, ZA_OP_RELEASE)
          || za_replica_restore_newest (self->replica, self->config->run.model_dir,
                                        &restored, &checkpoint_step)? -1: 0;
    if (rc == 0 && !restored)
        za_replica_reset_slots (self->replica);
    //  Ours unless the checkpoint is newer (a snapshot may be a push ahead of
    //  what we pulled, and a restarted chief's values are only its first).
    int ours = pulled && (!restored || self->values_step > checkpoint_step);
    if (ours)
        memcpy (za_replica_values (self->replica), pulled, bytes);
    free (pulled);
    //  What the ps that kept their state hold: values and slots, held still.
    if (rc == 0)
        rc = s_call_all (self, ZA_OP_HOLD) || s_expect_or (self, ZA_OP_HELD, "not_ready")
          || s_call_all (self, ZA_OP_SNAPSHOT)
          || s_expect_or (self, ZA_OP_SNAPSHOT_DATA, "not_ready")
          || s_take_parts_of (self, 1, 1)? -1: 0;
    if (rc)
        return -1;
    int64_t step = ours? self->values_step: restored? checkpoint_step: 0;
    if (with_pulled && self->global_step > step)
        step = self->global_step;
    char lost [256] = "";
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (r->op == ZA_OP_SNAPSHOT_DATA && r->step > step)
            step = r->step;
        if (r->op == ZA_OP_ERROR && strlen (lost) + 16 < sizeof lost)
            snprintf (lost + strlen (lost), sizeof lost - strlen (lost), "%s%d",
                      *lost? ", ": "", p);
    }
    //  A lost ps takes a worker's offer of a later step than ours (INIT_OK
    //  says the step it went on from: ps 0's is the global step).
    self->prefer_offer = 1;
    rc = s_call_all (self, ZA_OP_RELEASE) || s_init_all (self, step)? -1: 0;
    self->prefer_offer = 0;
    if (rc)
        return -1;
    int offered = 0;
    for (int p = 0; p < self->ps_count; p++)
        if (self->replies [p]->step > step) {
            offered = 1;
            if (p == 0)
                step = self->replies [p]->step;
        }
    char slots [64] = "fresh slots";
    if (restored)
        snprintf (slots, sizeof slots, "the slots of checkpoint %" PRId64, checkpoint_step);
    za_info ("chief: ps %s lost its state (restarted?): it gets %s values and %s%s: going "
             "on from step %" PRId64 " (no rewind)", lost,
             offered? "a worker's newer": ours? "the chief's newest"
             : restored? "the checkpoint's": "the initial",
             slots, self->ps_count > 1? ", the other ps keep theirs": "", step);
    return 0;
}

//  Returns 0 when the ps hold a state to train from, S_OVER when they say
//  training is over already, -1 on an error.
static int
s_chief_init (s_worker_t *self)
{
    //  A restarted chief finds every ps holding the training state: it goes on
    //  from their step instead of rewinding them to its newest checkpoint.
    //  Its checkpoints keep the grid of save_checkpoints_steps, so the next
    //  one comes as soon as the step passes the next multiple.
    if (s_call_all (self, ZA_OP_PULL))
        return -1;
    if (s_any_error (self, "done")) {
        self->global_step = self->replies [0]->step;
        za_info ("chief: the ps say training is over (step %" PRId64 "): nothing to do",
                 self->global_step);
        return S_OVER;
    }
    int all_ready = 1;
    for (int p = 0; p < self->ps_count; p++)
        all_ready &= self->replies [p]->op == ZA_OP_VALUES;
    if (all_ready && s_take_values (self) == 0) {
        self->init_step = self->replies [0]->step;
        za_info ("chief: the ps are at step %" PRId64 ": going on from there",
                 self->init_step);
        //  The next checkpoint counts from the newest on disk, not from here.
        int64_t *steps = NULL;
        int count = za_checkpoint_list (self->config->run.model_dir, &steps);
        self->hooks.saver.last_saved = count > 0? steps [count - 1]: -1;
        free (steps);
        return 0;
    }
    //  ps-async, this chief was restarted and some ps too (or a ps lost while
    //  others kept their state): those keep it, a lost one gets a worker's
    //  offer or the checkpoint's shard.
    int any_ready = 0;
    for (int p = 0; p < self->ps_count; p++)
        any_ready |= self->replies [p]->op == ZA_OP_VALUES;
    if ((any_ready || self->config->rejoin) && self->config->strategy == ZA_STRATEGY_PS_ASYNC) {
        if (s_reinit_lost (self, 0))
            return -1;
        int64_t *steps = NULL;
        int count = za_checkpoint_list (self->config->run.model_dir, &steps);
        self->hooks.saver.last_saved = count > 0? steps [count - 1]: -1;
        free (steps);
        return 0;
    }
    //  Fresh ps, or some restarted: every ps gets the newest checkpoint (or the
    //  initial values), one consistent state.
    int restored;
    int64_t step = 0;
    if (za_replica_restore_newest (self->replica, self->config->run.model_dir, &restored,
                                   &step))
        return -1;
    if (restored)
        za_info ("chief: restored step %" PRId64 " from '%s'", step,
                 self->config->run.model_dir);
    if (s_init_all (self, step))
        return -1;
    self->hooks.saver.last_saved = restored? step: -1;
    za_info ("chief: %d ps initialised at step %" PRId64, self->ps_count, step);
    return 0;
}

// ---------------------------------------------------------------------------
//  The loop

//  Pulls the values, waiting while the chief has not initialised the ps.
//  The chief, who has, does not wait: a ps that says not_ready to it lost
//  its state. Returns 0, S_OVER when the ps say training is over, S_PS_LOST
//  (the chief), or -1 with an error.
static int
s_pull_when_ready (s_worker_t *self)
{
    double deadline = za_clock_mono () + self->config->timeout_secs;
    while (1) {
        if (s_call_all (self, ZA_OP_PULL))
            return -1;
        if (!s_any_error (self, "not_ready"))
            break;
        if (self->config->is_chief)
            return S_PS_LOST;
        double now = za_clock_mono ();
        if (now > deadline)
            return za_error ("%s: the ps were not initialised within %.0f s (is the chief "
                             "running?)", s_who (self), self->config->timeout_secs);
        s_alive (self, now);
        zclock_sleep (NOT_READY_RETRY_MS);
    }
    if (s_any_error (self, "done")) {
        //  We came after the end: the refusal still says where training ended.
        self->global_step = self->replies [0]->step;
        return S_OVER;
    }
    if (s_expect (self, ZA_OP_VALUES) || s_take_values (self))
        return -1;
    self->global_step = self->replies [0]->step;
    return 0;
}

//  Logs, summaries, checkpoints and published rates measure from here: the
//  start, or a reload that moved global_step back.
static void
s_restart_clocks (s_worker_t *self)
{
    za_role_rates_restart (&self->rates, self->global_step, self->own_steps, za_clock_mono ());
    za_hooks_begin (&self->hooks.hooks, self->global_step);
}

//  ps-async, a worker: offers each ps that lost its state the values of its
//  shard we pulled last, with their step, so that a restarted chief without
//  values of its own need not reload a checkpoint (PROTOCOL.md 7.5). Never
//  answered; what could not go is said and left.
static void
s_offer (s_worker_t *self)
{
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (r->op != ZA_OP_ERROR || !streq (r->code, "not_ready"))
            continue;
        s_build (self, ZA_OP_OFFER, p);
        if (s_send_to (self, p))
            za_info ("%s: cannot offer ps %d our values: %s", s_who (self), p,
                     za_last_error ());
        else
            za_info ("%s: offered ps %d our values of step %" PRId64, s_who (self), p,
                     self->values_step);
    }
    //  The frames point into the values the next pull overwrites.
    za_wire_lease_wait (&self->lease);
}

//  Why the chief (ps-sync) cannot give every ps the state of the step it is
//  at: into why, for the log that says it reloads a checkpoint instead.
static void
s_why_no_state (s_worker_t *self, char *why, size_t size)
{
    *why = 0;
    if (!self->config->is_chief || self->config->strategy != ZA_STRATEGY_PS_SYNC)
        return;
    int64_t step = self->global_step;
    if (self->state_step < 0 || self->state_step != step) {
        snprintf (why, size, " (the chief holds no whole state of step %" PRId64 ")", step);
        return;
    }
    if (!s_keeps_state (self))
        return;
    for (int p = 0; p < self->ps_count; p++) {
        if (s_slot_copy_of (self, p, step) >= 0)
            continue;
        const int64_t *steps = self->slot_steps [p];
        int64_t newest = steps [0] > steps [1]? steps [0]: steps [1];
        if (newest < 0)
            snprintf (why, size, " (ps %d sent no slots since its init)", p);
        else
            snprintf (why, size, " (ps %d's slots of step %" PRId64 " did not come; its newest "
                      "are of step %" PRId64 ")", p, step, newest);
        return;
    }
}

//  A ps lost its state: it answered not_ready, so it was restarted (by a
//  supervisor or by hand, at the same endpoint). The chief brings every ps
//  back to one consistent state: under ps-async without going back
//  (s_reinit_lost), under ps-sync from the state of its step it holds, else
//  from the newest checkpoint (it releases them all first: a held ps refuses
//  init). A worker offers the lost ps its values (ps-async) and waits for
//  that. Both then pull the values and go on from there. Returns as
//  s_pull_when_ready (S_PS_LOST: a ps was lost again).
static int
s_recover (s_worker_t *self)
{
    int lost = s_error_from (self, "not_ready");
    s_set_state (self, ZA_ROLE_RECOVERING);
    if (lost < 0)
        //  ps-sync: a push computed on values the ps no longer hold (the
        //  chief gave them an earlier state after we had taken the later).
        za_info ("%s: ps %d went back to an earlier step (a ps was restarted): pulling "
                 "its values", s_who (self), s_error_from (self, "rewound"));
    else
    if (self->config->is_chief && self->state_step >= 0
        && self->state_step == self->global_step
        && s_restore_slots (self, self->state_step) == 0) {
        //  ps-sync: the replica holds the values of the chief's step, and
        //  every ps's slots of it. Every ps gets that state (a step half
        //  applied, on the ps that kept theirs, is undone): nobody goes back
        //  further than the chief's step.
        int64_t step = self->state_step;
        if (s_call_all (self, ZA_OP_RELEASE))
            return -1;
        za_info ("chief: ps %d lost its state (restarted?): giving all %d ps the state of "
                 "step %" PRId64 " the chief holds (no rewind)", lost, self->ps_count, step);
        if (s_init_all (self, step))
            return -1;
    }
    else
    if (self->config->is_chief && self->config->strategy == ZA_STRATEGY_PS_ASYNC) {
        if (s_reinit_lost (self, self->pulled_any))
            return -1;
    }
    else
    if (self->config->is_chief) {
        int restored;
        int64_t step = 0;
        char why [160];
        s_why_no_state (self, why, sizeof why);
        if (s_call_all (self, ZA_OP_RELEASE)
            || za_replica_restore_newest (self->replica, self->config->run.model_dir,
                                          &restored, &step))
            return -1;
        //  Before the first checkpoint there is only what we pulled last.
        if (!restored)
            step = self->global_step;
        za_info ("chief: ps %d lost its state (restarted?): reloading step %" PRId64
                 " from %s into all %d ps%s", lost, step,
                 restored? self->config->run.model_dir: "the chief's newest values",
                 self->ps_count, why);
        if (s_init_all (self, step))
            return -1;
        self->hooks.saver.last_saved = restored? step: -1;
    }
    else {
        za_info ("%s: ps %d lost its state (restarted?): waiting for the chief to "
                 "reload it", s_who (self), lost);
        if (self->config->strategy == ZA_STRATEGY_PS_ASYNC && self->pulled_any)
            s_offer (self);
    }
    int pulled = s_pull_when_ready (self);
    if (pulled == 0) {
        za_info ("%s: going on from step %" PRId64, s_who (self), self->global_step);
        s_restart_clocks (self);
        s_set_state (self, ZA_ROLE_RUNNING);
    }
    return pulled;
}

//  The hooks after a step: 0, -1 with an error, or what the checkpoint
//  saver's save said (S_PS_LOST).
static int
s_after_step (s_worker_t *self, double loss, int batch, double now)
{
    int rc = za_role_hooks_after_step (&self->hooks, self->config, self->replica,
                                       self->global_step, loss, batch, now - self->start_time);
    if (rc < 0)
        return -1;
    return rc > 0 && self->config->is_chief? self->hooks.saver.rc: 0;
}

//  Trains until max_steps, or until the ps say training is over. Returns 0,
//  -1 with an error, or S_PS_LOST.
static int
s_run_steps (s_worker_t *self)
{
    const za_role_config_t *config = self->config;
    while (self->global_step < config->max_steps && !self->hooks.stop.requested
           && !zsys_interrupted) {
        double step_start = za_clock_mono ();
        s_alive (self, step_start);
        za_batch_t batch;
        if (za_role_next_batch (self->input, s_who (self), &batch))
            return -1;
        self->input_secs += za_clock_mono () - step_start;
        //  The last push's gradient frames must be let go before we overwrite.
        za_wire_lease_wait (&self->lease);
        double loss, t0 = za_clock_mono ();
        za_role_stats_computing (self->stats, t0);
        if (za_replica_compute_gradients (self->replica, &batch, self->global_step, &loss))
            return -1;
        s_alive (self, za_clock_mono ());
        //  mixed_float16: a gradient that overflowed goes out as none (the
        //  loss scale halves for the next).
        self->skip_push = !za_replica_loss_scale_check (self->replica);
        //  The whole gradient is here: clipped by its global norm before it is
        //  split among the ps (a ps sees only its part).
        if (config->optim.global_clipnorm > 0)
            za_replica_clip_gradients (self->replica, config->optim.global_clipnorm);
        //  --wire-dtype bf16: the push carries the gradient's cast (its frames
        //  came back at the lease wait above, as the block's did).
        if (self->low_grads)
            za_f32_to_bf16 (za_replica_gradients (self->replica), self->low_grads,
                            self->vars->total);
        double t1 = za_clock_mono ();
        if (s_call_all (self, ZA_OP_PUSH))
            return -1;
        double t2 = za_clock_mono ();
        if (s_any_error (self, "done")) {
            if (self->replies [0]->step > self->global_step)
                self->global_step = self->replies [0]->step;
            return 0;
        }
        int rc = s_outcome (self, ZA_OP_VALUES);
        if (rc == 0)
            rc = s_take_values (self);
        if (rc)
            return rc;
        self->global_step = self->replies [0]->step;
        self->own_steps++;
        double now = za_clock_mono ();
        self->compute_secs += t1 - t0;
        self->transfer_secs += t2 - t1;
        self->step_secs += now - step_start;
        za_role_rates_publish (&self->rates, self->stats, self->global_step, self->own_steps,
                               loss, batch.size, now);
        za_role_bad_publish (self->stats, self->input);
        //  The summaries' examples/sec count a global step's batches.
        if ((rc = s_after_step (self, loss, batch.size * za_role_batches_per_step (config),
                                now)))
            return rc;
    }
    return 0;
}

static int
s_train (s_worker_t *self)
{
    const za_role_config_t *config = self->config;
    s_set_state (self, ZA_ROLE_WAITING);
    int rc = config->is_chief? s_chief_init (self): 0;
    if (rc == 0)
        rc = s_pull_when_ready (self);
    if (rc == 0)
        rc = (self->input = za_role_train_input (config, self->who, self->global_step))? 0: -1;
    self->start_time = za_clock_mono ();
    self->start_step = self->global_step;
    s_restart_clocks (self);
    if (rc == 0)
        s_set_state (self, ZA_ROLE_RUNNING);
    while (rc == 0 || rc == S_PS_LOST) {
        if (rc == S_PS_LOST) {
            rc = s_recover (self);
            continue;
        }
        rc = s_run_steps (self);
        if (rc == 0 && config->is_chief)
            rc = s_checkpoint (self, 1);
        //  Stopped early: the evaluators learn where training ended.
        if (rc == 0 && config->run.early_stopping)
            rc = za_early_stop_end (config->run.model_dir, self->global_step);
        if (rc == 0)
            return 0;
    }
    return rc == S_OVER? 0: -1;
}

void
za_worker_actor (zsock_t *pipe, void *args)
{
    const za_role_config_t *config = (const za_role_config_t *) args;
    s_worker_t *self = s_worker_new (config, pipe);
    zsock_signal (pipe, 0);
    if (!self) {
        za_role_failed_start (pipe, config->stats);
        return;
    }
    za_info ("%s (shard %d of %d): %d ps, batch %d, up to step %" PRId64, s_who (self),
             config->worker_index, config->num_workers, config->ps_count, config->batch_size,
             config->max_steps);
    int failed = s_train (self);         //  before its input is looked at: s_train makes it
    int rc = za_role_end_status (failed, self->input);
    if (!self->terminated) {
        //  Leave: every ps counts our bye before it exits. After a failure a ps
        //  may be gone, so we do not wait long; one that lost its state has
        //  nothing to leave.
        double wait = config->timeout_secs;
        if (rc && wait > BYE_AFTER_FAILURE_SECS)
            wait = BYE_AFTER_FAILURE_SECS;
        if (s_call_all_within (self, ZA_OP_BYE, wait) == 0)
            s_expect_or (self, ZA_OP_BYE_OK, "not_ready");
    }
    za_role_publish_end (config, rc, self->global_step);
    double secs = za_clock_mono () - self->start_time;
    za_info ("%s: %s at step %" PRId64 " after %" PRId64 " own steps in %.1f s",
             s_who (self), rc? "failed": "done", self->global_step, self->own_steps, secs);
    if (self->own_steps > 0) {
        double n = (double) self->own_steps;
        double other = self->step_secs - self->compute_secs - self->transfer_secs;
        za_info ("%s: per step %.3f ms: compute %.3f ms, push+reply %.3f ms, other %.3f ms "
                 "(%.1f%%), of which waiting for input %.3f ms (%.2f%%)", s_who (self),
                 1e3 * self->step_secs / n, 1e3 * self->compute_secs / n,
                 1e3 * self->transfer_secs / n, 1e3 * other / n,
                 self->step_secs > 0? 100 * other / self->step_secs: 0,
                 1e3 * self->input_secs / n,
                 self->step_secs > 0? 100 * self->input_secs / self->step_secs: 0);
    }
    if (self->frozen_left_out)
        za_info ("%s: %" PRIu64 " tensors of frozen variables left out of the pushes",
                 s_who (self), self->frozen_left_out);
    uint32_t crc = za_role_values_crc (za_replica_values (self->replica), self->vars->total);
    int64_t step = self->global_step, floats = (int64_t) self->vars->total;
    int terminated = self->terminated;
    s_worker_destroy (&self);
    if (!terminated)
        za_role_report_done (pipe, rc, step, crc, floats);
}
