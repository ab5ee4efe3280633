/*  za_worker_calls.c: a worker's requests to every ps: each built from the
    replica's blocks, sent (through shared memory to a ps on this host),
    its replies waited for under heartbeats and taken back into the replica.  */
#include "za_worker_private.h"

//  Adds the parts held by ps p, taken from `block`, to self->out; with
//  `suffix`, names them "<part>/<suffix>"; with `trained`, only the parts
//  of variables that train (a push: a frozen variable's gradient is none).
static void
s_add_parts (za_worker_t *self, int p, const void *block, za_dtype_t dtype, const char *suffix,
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
void
za_worker_build (za_worker_t *self, za_op_t op, int p)
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
void
za_worker_alive (za_worker_t *self, double now)
{
    if (self->stats)
        atomic_store_explicit (&self->stats->alive, now, memory_order_relaxed);
}

void
za_worker_set_state (za_worker_t *self, za_role_state_t state)
{
    za_role_stats_publish (self->stats, state, za_clock_mono ());
}

//  A pong that says not_ready comes from a ps that has nothing to answer
//  the request we wait for: it was restarted without state, or our request
//  went down with its old process (PROTOCOL.md 7.5). Makes the pong in
//  `reply` that ps's `error not_ready`.
static void
s_lost_state_reply (za_worker_t *self, za_wire_msg_t *reply)
{
    reply->op = ZA_OP_ERROR;
    reply->seq = self->seq;
    reply->tensor_count = 0;
    snprintf (reply->error, sizeof reply->error, "the ps has no state (restarted?)");
}

//  Pings every ps we still wait for whose ping is due, and says once that a
//  ps which answered before has gone silent.
static void
s_heartbeats (za_worker_t *self, za_op_t op, double now, double left)
{
    for (int p = 0; p < self->ps_count; p++) {
        za_peer_t *peer = &self->peers [p];
        if (self->reply_msgs [p])
            continue;
        if (peer->heard && za_peer_went_silent (peer, now))
            za_info ("%s: ps %d at %s missed %d heartbeats (silent %.1f s while we waited "
                     "for %s): stopped, hung or restarting; waiting up to --timeout-secs "
                     "(%.0f s more)", self->who, p, self->config->ps_endpoints [p],
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
int
za_worker_keeps_state (za_worker_t *self)
{
    const za_optim_config_t *optim = za_replica_optim (self->replica);
    return self->config->is_chief && self->config->strategy == ZA_STRATEGY_PS_SYNC
        && optim && za_optim_slot_count (optim->kind) > 0;
}

//  Floats of ps p's slots (all its parts, every slot).
static size_t
s_slot_floats (za_worker_t *self, int p)
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
s_keep_slots (za_worker_t *self, int p, zmsg_t **msg_p)
{
    const za_wire_msg_t *m = self->spare;
    int64_t step = m->step;
    int n = self->part_count [p];
    if (!za_worker_keeps_state (self) || step < 0
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
void
za_worker_forget_slots (za_worker_t *self)
{
    for (int p = 0; p < self->ps_count; p++)
        self->slot_steps [p][0] = self->slot_steps [p][1] = -1;
}

//  Which of ps p's two slot copies holds `step`'s (0, 1), or -1: neither.
int
za_worker_slot_copy_of (const za_worker_t *self, int p, int64_t step)
{
    return self->slot_steps [p][0] == step? 0: self->slot_steps [p][1] == step? 1: -1;
}

//  Copies every ps's slots of `step` into the replica, all or none. Returns
//  0, or -1 when a ps's are missing.
int
za_worker_restore_slots (za_worker_t *self, int64_t step)
{
    if (!za_worker_keeps_state (self))
        return 0;
    int which [ZA_ROLE_MAX_PS];
    for (int p = 0; p < self->ps_count; p++) {
        which [p] = za_worker_slot_copy_of (self, p, step);
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
int
za_worker_send_to (za_worker_t *self, int p)
{
    return self->links [p]
         ? za_shm_link_send (self->links [p], self->dealers [p], NULL, self->out, &self->lease)
         : za_wire_send (self->dealers [p], NULL, self->out, &self->lease);
}

//  A whole message in ps p's segment that cannot be used: says so and
//  refuses the segment (the ps then sends frames).
static void
s_refuse_segment (za_worker_t *self, int p)
{
    za_info ("%s: ps %d: %s; its segment is refused", self->who, p, za_last_error ());
    za_shm_link_refuse (self->links [p]);
}

//  A message from ps p while we wait for the answers to `op`, its tensors in
//  its frames (data NULL) or held in p's segment until za_shm_link_done (a
//  whole message; a reply stays held there: held_reply): a reply (counted
//  off *missing), slots, a sign of life, or the ps's word that it cannot
//  read our segment (the request goes again as frames). Takes *msg_p.
//  Returns 0, or -1 with an error.
static int
s_take_held (za_worker_t *self, za_op_t op, int p, zmsg_t **msg_p, int *missing,
             const void *const *data, const size_t *sizes, int count)
{
    zmsg_t *msg = *msg_p;
    *msg_p = NULL;
    if (self->links [p] && !self->said_shm [p] && za_shm_link_state (self->links [p]) == 3) {
        self->said_shm [p] = 1;
        za_info ("%s: ps %d is on this host: tensors through shared memory%s", self->who, p,
                 za_shm_link_rings (self->links [p])? ", headers too (its bell rung)": "");
    }
    double now = za_clock_mono ();
    double silence = za_peer_silence (&self->peers [p], now);
    if (za_peer_heard (&self->peers [p], now))
        za_info ("%s: ps %d at %s answers again after %.1f s of silence", self->who, p,
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
        za_worker_build (self, op, p);
        if (za_worker_send_to (self, p))
            return za_error ("%s: cannot send %s to ps %d", self->who, za_op_name (op), p);
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
s_take (za_worker_t *self, za_op_t op, int p, zmsg_t **msg_p, int *missing)
{
    return s_take_held (self, op, p, msg_p, missing, NULL, NULL, 0);
}

//  Lets ps p's last reply go (and the record it was read from).
static void
s_let_go (za_worker_t *self, int p)
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
//  Whole messages of a ps on this host (its bell rang, or they came while
//  we did not listen), taken while we wait for `op`'s answers. 0, or -1.
static int
s_take_linked (za_worker_t *self, za_op_t op, int *missing)
{
    za_shm_bell_quiet (self->bell);
    int rc = 0;
    for (int p = 0; p < self->ps_count && rc == 0; p++) {
        zmsg_t *msg = NULL;
        const void *const *data;
        const size_t *sizes;
        int got, count;
        while (rc == 0 && self->links [p] && !self->held_reply [p]
               && (got = za_shm_link_take (self->links [p], &msg, &data, &sizes, &count)) != 0) {
            if (got < 0)
                //  Not sent again (a push is not idempotent): the call
                //  times out, saying which ps did not answer.
                s_refuse_segment (self, p);
            else
                rc = s_take_held (self, op, p, &msg, missing, data, sizes, count);
            if (!self->held_reply [p])
                za_shm_link_done (self->links [p]);
        }
    }
    return rc;
}

//  A message on ps p's socket while we wait for `op`'s answers. 0, or -1.
static int
s_take_socket (za_worker_t *self, za_op_t op, int p, int *missing)
{
    zmsg_t *msg = zmsg_recv (self->dealers [p]);
    if (!msg)
        return 0;
    //  While p's reply is held in its segment, its link is not touched (a
    //  receive would let the record go): a message with its frames is taken
    //  as ever (slots are kept; anything else is a sign of life), one whose
    //  tensors are in a record is a sign of life only (its word waits for
    //  the next message).
    uint64_t seq;
    if (self->held_reply [p] && za_shm_link_names_record (msg, &seq)) {
        za_peer_heard (&self->peers [p], za_clock_mono ());
        zmsg_destroy (&msg);
        return 0;
    }
    if (self->links [p] && !self->held_reply [p] && za_shm_link_receive (self->links [p], msg)) {
        za_info ("%s: ps %d: %s", self->who, p, za_last_error ());
        zmsg_destroy (&msg);
        return 0;
    }
    return s_take (self, op, p, &msg, missing);
}

//  How long to poll: until the deadline, or the first ping due.
static double
s_wait_secs (za_worker_t *self, double now, double left)
{
    double wait = left;
    for (int p = 0; p < self->ps_count; p++)
        if (!self->reply_msgs [p] && za_peer_next_due (&self->peers [p], now) < wait)
            wait = za_peer_next_due (&self->peers [p], now);
    return wait;
}

int
za_worker_call_all_within (za_worker_t *self, za_op_t op, double timeout_secs)
{
    self->seq++;
    for (int p = 0; p < self->ps_count; p++) {
        s_let_go (self, p);
        za_worker_build (self, op, p);
        if (za_worker_send_to (self, p))
            return za_error ("%s: cannot send %s to ps %d", self->who, za_op_name (op), p);
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
        if (self->bell && ((rc = s_take_linked (self, op, &missing)) || missing == 0))
            break;
        now = za_clock_mono ();
        za_worker_alive (self, now);
        double left = deadline - now;
        if (left <= 0 || zsys_interrupted) {
            int p = 0;
            while (p < self->ps_count && self->reply_msgs [p])
                p++;
            rc = za_error ("%s: ps %d at %s did not answer %s within %.0f s", self->who, p,
                           self->config->ps_endpoints [p], za_op_name (op), timeout_secs);
            break;
        }
        s_heartbeats (self, op, now, left);
        if (zmq_poll (items, item_count, (long) (s_wait_secs (self, now, left) * 1000) + 1) <= 0)
            continue;
        if (items [0].revents & ZMQ_POLLIN) {
            char *command = zstr_recv (self->pipe);
            int term = !command || streq (command, "$TERM");
            zstr_free (&command);
            if (term) {
                self->terminated = 1;
                rc = za_error ("%s: stopped", self->who);
                break;
            }
        }
        for (int p = 0; p < self->ps_count && rc == 0; p++)
            if (items [1 + p].revents & ZMQ_POLLIN)
                rc = s_take_socket (self, op, p, &missing);
    }
    return rc;
}

int
za_worker_call_all (za_worker_t *self, za_op_t op)
{
    return za_worker_call_all_within (self, op, self->config->timeout_secs);
}

//  The first ps whose reply is an error with `code`, or -1.
int
za_worker_error_from (za_worker_t *self, const char *code)
{
    for (int p = 0; p < self->ps_count; p++)
        if (self->replies [p]->op == ZA_OP_ERROR && streq (self->replies [p]->code, code))
            return p;
    return -1;
}

//  1 if any reply is an error with `code`.
int
za_worker_any_error (za_worker_t *self, const char *code)
{
    return za_worker_error_from (self, code) >= 0;
}

//  Every reply must be `op`, or an error with code `also` (when not NULL);
//  any other error reply becomes our error.
int
za_worker_expect_or (za_worker_t *self, za_op_t op, const char *also)
{
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (r->op == ZA_OP_ERROR && also && streq (r->code, also))
            continue;
        if (r->op == ZA_OP_ERROR)
            return za_error ("%s: ps %d refused: %s (%s)", self->who, p, r->error, r->code);
        if (r->op != op)
            return za_error ("%s: ps %d answered %s, expected %s", self->who, p,
                             za_op_name (r->op), za_op_name (op));
    }
    return 0;
}

//  Every reply must be `op`; an error reply becomes our error.
int
za_worker_expect (za_worker_t *self, za_op_t op)
{
    return za_worker_expect_or (self, op, NULL);
}

//  As za_worker_expect, except that a not_ready from any ps gives WORKER_PS_LOST (no
//  error): that ps was restarted and lost its state.
int
za_worker_outcome (za_worker_t *self, za_op_t op)
{
    int lost = za_worker_any_error (self, "not_ready") || za_worker_any_error (self, "rewound");
    return lost? WORKER_PS_LOST: za_worker_expect (self, op);
}

//  Copies the tensors of each reply (the ps's parts, then optionally their
//  slots) into the estimator's blocks; with skip_errors, a ps that answered
//  an error is left out (its parts keep what the blocks held).
int
za_worker_take_parts_of (za_worker_t *self, int with_slots, int skip_errors)
{
    const za_optim_config_t *optim = za_replica_optim (self->replica);
    int slot_count = with_slots && optim? za_optim_slot_count (optim->kind): 0;
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (skip_errors && r->op == ZA_OP_ERROR)
            continue;
        int n = self->part_count [p];
        if (r->tensor_count < n * (1 + slot_count))
            return za_error ("%s: ps %d sent %d tensors, expected %d", self->who, p,
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
                                     self->who, p, t->name, t->bytes, part->name,
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

int
za_worker_take_parts (za_worker_t *self, int with_slots)
{
    return za_worker_take_parts_of (self, with_slots, 0);
}

//  Takes the values of every reply into the replica; notes (ps-sync, the
//  chief) their step when the ps agree on it.
int
za_worker_take_values (za_worker_t *self)
{
    self->state_step = -1;
    if (za_worker_take_parts (self, 0))
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
