/*  za_worker_calls.c: a worker's requests to every ps: each built from the
    replica's blocks, sent (through shared memory to a ps on this host),
    its replies waited for under heartbeats and taken back into the replica.
    The call to one ps is a state table (s_transitions below, after
    docs/PROTOCOL.md 7); za_worker_call_all_within runs every ps's at once. */
#include "za_worker_private.h"
#include "za/za_preempt.h"

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
        //  Where each variable's slots started, when any started after 0
        //  (a layer unfrozen on resume): the ps count Adam's updates from there.
        const int64_t *slots_from = za_replica_slots_steps (self->replica);
        int64_t count = self->vars->count;
        for (int v = 0; v < self->vars->count; v++)
            if (slots_from [v] > 0) {
                za_wire_msg_add (self->out, "slots_from", ZA_DTYPE_I64, 1, &count, slots_from);
                break;
            }
        static const int64_t prefer = 1;
        if (self->prefer_offer)
            za_wire_msg_add (self->out, "prefer_offer", ZA_DTYPE_I64, 0, NULL, &prefer);
        self->out->has_optim = 1;
        self->out->optim = *optim;
    }
    else
    if (op == ZA_OP_STOP && za_preempt_requested ())
        //  Stopped for preemption: every task then exits with the requeue
        //  code, also one that never got SIGTERM itself (a static cluster).
        snprintf (self->out->code, sizeof self->out->code, "preempted");
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

// ---------------------------------------------------------------------------
//  ps-sync's slots, kept for the chief as they come in a call

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

// ---------------------------------------------------------------------------
//  A call to one ps, as a state table: its events, its actions, the table
//  (s_transitions), and what feeds it (p's messages, the clock).

//  What happens to the call to ps p: messages from p, decoded, and the
//  call's own steps and clock. E_ANY is the table's.
typedef enum {
    E_ANY = 0,              //  matches any message
    E_NEW_CALL,             //  a call begins: the last answer goes
    E_SEND,                 //  our request goes to p
    E_REPLY,                //  a message with our seq: the reply op, or an error
    E_SHM_UNREADABLE,       //  error shm_unreadable with our seq: p cannot read our segment
    E_PONG_NOT_READY,       //  pong not_ready: p has nothing to answer (an init is answered)
    E_SLOTS,                //  slots (ps-sync, to the chief): kept whatever we wait for
    E_STALE,                //  an older request's reply, a plain pong
    E_UNDECODABLE,          //  a message that does not decode
    E_WENT_SILENT,          //  p answered once, then missed interval x liveness
    E_PING_DUE,             //  an interval since we last sent p anything
    E_TIME_UP               //  the call's time is up (or we were interrupted)
} s_event_t;

//  The call, and what its actions are given for one event of ps p's.
typedef struct {
    za_op_t op;                 //  what every ps is asked
    double timeout_secs;        //  the call's limit
    int p;
    zmsg_t *msg;                //  what came from p (NULL: no message); an action that
                                //  keeps it takes it, else it is destroyed after
    int whole;                  //  msg came whole in p's segment, its tensors read there
    double now, left;           //  the clock's events: when, and the seconds still left
} s_call_t;

typedef int (s_action_fn) (za_worker_t *self, s_call_t *call);

//  The actions. Each returns 0, or -1 with an error, which ends the call.

//  A new call: p's last answer goes (and the record it was read from).
static int
s_let_go (za_worker_t *self, s_call_t *call)
{
    int p = call->p;
    zmsg_destroy (&self->reply_msgs [p]);
    if (self->held_reply [p] && self->links [p])
        za_shm_link_done (self->links [p]);
    self->held_reply [p] = 0;
    return 0;
}

//  Our request, built for p and sent.
static int
s_send (za_worker_t *self, s_call_t *call)
{
    za_worker_build (self, call->op, call->p);
    if (za_worker_send_to (self, call->p))
        return za_error ("%s: cannot send %s to ps %d", self->who, za_op_name (call->op),
                         call->p);
    return 0;
}

//  Our tensors came through a segment this ps cannot read (it restarted
//  without shared memory): the link knows now, and the request goes again
//  as frames.
static int
s_send_as_frames (za_worker_t *self, s_call_t *call)
{
    zmsg_destroy (&call->msg);
    return s_send (self, call);
}

//  A whole message that does not decode: p's segment is refused.
static int
s_drop_undecodable (za_worker_t *self, s_call_t *call)
{
    if (call->whole)
        s_refuse_segment (self, call->p);
    return 0;
}

static int
s_slots (za_worker_t *self, s_call_t *call)
{
    s_keep_slots (self, call->p, &call->msg);
    return 0;
}

//  What p sent while we wait (decoded in self->spare) goes where its answer
//  does, replies [p], in place: its tensors point into the message, or
//  into p's segment. (replies [p] is free until the answer comes.)
static void
s_set_in_reply (za_worker_t *self, int p)
{
    za_wire_msg_t *reply = self->spare;
    self->spare = self->replies [p];
    self->replies [p] = reply;
}

//  p's answer. A whole answer is read where it is: its record goes back to
//  the ps at the next call (s_let_go), and nothing more of p's segment is
//  taken till then.
static int
s_take_reply (za_worker_t *self, s_call_t *call)
{
    int p = call->p;
    s_set_in_reply (self, p);
    self->held_reply [p] = call->whole;
    self->reply_msgs [p] = call->msg;
    call->msg = NULL;
    return 0;
}

//  A pong that says not_ready comes from a ps that has nothing to answer
//  the request we wait for: it was restarted without state, or our request
//  went down with its old process (PROTOCOL.md 7.5). It is taken as that
//  ps's `error not_ready`.
static int
s_take_not_ready (za_worker_t *self, s_call_t *call)
{
    s_take_reply (self, call);
    za_wire_msg_t *reply = self->replies [call->p];
    reply->op = ZA_OP_ERROR;
    reply->seq = self->seq;
    reply->tensor_count = 0;
    snprintf (reply->error, sizeof reply->error, "the ps has no state (restarted?)");
    return 0;
}

//  An older request's reply, or a plain pong, while we wait: a sign of
//  life only, set where an answer goes as any message we wait on is.
static int
s_stale (za_worker_t *self, s_call_t *call)
{
    s_set_in_reply (self, call->p);
    return 0;
}

//  Said once per silence: we wait on, until the call's time is up.
static int
s_say_silent (za_worker_t *self, s_call_t *call)
{
    int p = call->p;
    za_peer_t *peer = &self->peers [p];
    za_info ("%s: ps %d at %s missed %d heartbeats (silent %.1f s while we waited "
             "for %s): stopped, hung or restarting; waiting up to --timeout-secs "
             "(%.0f s more)", self->who, p, self->config->ps_endpoints [p],
             peer->beat.liveness, za_peer_silence (peer, call->now), za_op_name (call->op),
             call->left);
    return 0;
}

static int
s_ping (za_worker_t *self, s_call_t *call)
{
    int p = call->p;
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
    return 0;
}

static int
s_did_not_answer (za_worker_t *self, s_call_t *call)
{
    int p = call->p;
    return za_error ("%s: ps %d at %s did not answer %s within %.0f s", self->who, p,
                     self->config->ps_endpoints [p], za_op_name (call->op),
                     call->timeout_secs);
}

//  Heard (any message is a heartbeat), and nothing more.
static int
s_sign_of_life (za_worker_t *self, s_call_t *call)
{
    (void) self;
    (void) call;
    return 0;
}

//  The call to one ps as a state table: the requester's side of
//  docs/PROTOCOL.md section 7 (7.1 a request and its reply matched by seq,
//  7.3 shm_unreadable, 7.4 heartbeats, 7.5's first step: a pong not_ready
//  stands for a reply that will never come) and section 9's ping and slots;
//  section 8 is the ps's side (za_ps.c). The first row that matches the
//  state and the event wins; an action that fails keeps the state (and
//  ends the call). A message no other row takes
//  (anything after p's answer) is a sign of life; a clock's event no row
//  takes is nothing. What the answers say (values, error not_ready,
//  rewound, done) is for the caller to judge, all the ps's together
//  (za_worker_outcome, s_pull_when_ready: 7.3's last column).
static const struct {
    za_call_state_t state;
    s_event_t event;
    s_action_fn *action;
    za_call_state_t next;
} s_transitions [] = {
    //  state           event               action              next
    {CALL_ANY,          E_NEW_CALL,         s_let_go,           CALL_IDLE},
    {CALL_IDLE,         E_SEND,             s_send,             CALL_WAITING},
    {CALL_ANY,          E_UNDECODABLE,      s_drop_undecodable, CALL_SAME},
    {CALL_ANY,          E_SLOTS,            s_slots,            CALL_SAME},
    {CALL_WAITING,      E_REPLY,            s_take_reply,       CALL_ANSWERED},
    {CALL_WAITING,      E_SHM_UNREADABLE,   s_send_as_frames,   CALL_WAITING},
    {CALL_WAITING,      E_PONG_NOT_READY,   s_take_not_ready,   CALL_ANSWERED},
    {CALL_WAITING,      E_STALE,            s_stale,            CALL_WAITING},
    {CALL_WAITING,      E_WENT_SILENT,      s_say_silent,       CALL_WAITING},
    {CALL_WAITING,      E_PING_DUE,         s_ping,             CALL_WAITING},
    {CALL_WAITING,      E_TIME_UP,          s_did_not_answer,   CALL_WAITING},
    {CALL_ANY,          E_ANY,              s_sign_of_life,     CALL_SAME},
};

//  Runs the row of (ps p's call state, event). What came from p and was not
//  taken is destroyed. Returns the action's 0, or -1 with an error.
static int
s_dispatch (za_worker_t *self, s_call_t *call, s_event_t event)
{
    za_call_state_t *state = &self->call_state [call->p];
    size_t rows = sizeof s_transitions / sizeof s_transitions [0];
    int rc = 0;
    for (size_t r = 0; r < rows; r++) {
        if ((s_transitions [r].state != CALL_ANY && s_transitions [r].state != *state)
            || (s_transitions [r].event != E_ANY && s_transitions [r].event != event))
            continue;
        if (!call->msg && s_transitions [r].event == E_ANY)
            break;              //  a clock's event this state does not take
        rc = s_transitions [r].action (self, call);
        if (rc == 0 && s_transitions [r].next != CALL_SAME)
            *state = s_transitions [r].next;
        break;
    }
    zmsg_destroy (&call->msg);
    return rc;
}

//  What a message decoded into self->spare is to the call: a ps's slots are
//  kept whatever we wait for; a message with our seq is the reply (unless
//  it says our segment is unreadable); a pong not_ready stands for a reply
//  that will never come (7.4), except to an init, which is answered in any
//  case; anything else is older.
static s_event_t
s_event_of (za_worker_t *self, za_op_t op)
{
    const za_wire_msg_t *m = self->spare;
    if (m->op == ZA_OP_SLOTS)
        return E_SLOTS;
    if (m->seq == self->seq)
        return m->op == ZA_OP_ERROR && streq (m->code, "shm_unreadable")? E_SHM_UNREADABLE
                                                                        : E_REPLY;
    if (m->op == ZA_OP_PONG && streq (m->code, "not_ready") && op != ZA_OP_INIT)
        return E_PONG_NOT_READY;
    return E_STALE;
}

//  A message from ps p (call->msg) while we wait for the answers, its
//  tensors in its frames (data NULL) or held in p's segment until
//  za_shm_link_done (a whole message): heard, decoded aside into
//  self->spare, and run as its event. Takes call->msg. 0, or -1.
static int
s_on_message (za_worker_t *self, s_call_t *call, const void *const *data,
              const size_t *sizes, int count)
{
    int p = call->p;
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
    call->whole = data != NULL;
    int bad = data? za_wire_decode_payloads (call->msg, data, sizes, count, self->spare)
                  : za_wire_decode (call->msg, self->spare);
    return s_dispatch (self, call, bad? E_UNDECODABLE: s_event_of (self, call->op));
}

//  Whole messages of a ps on this host (its bell rang, or they came while
//  we did not listen), taken while we wait for the answers. 0, or -1.
static int
s_take_linked (za_worker_t *self, s_call_t *call)
{
    za_shm_bell_quiet (self->bell);
    int rc = 0;
    for (int p = 0; p < self->ps_count && rc == 0; p++) {
        const void *const *data;
        const size_t *sizes;
        int got, count;
        call->p = p;
        while (rc == 0 && self->links [p] && !self->held_reply [p]
               && (got = za_shm_link_take (self->links [p], &call->msg, &data, &sizes,
                                           &count)) != 0) {
            if (got < 0)
                //  Not sent again (a push is not idempotent): the call
                //  times out, saying which ps did not answer.
                s_refuse_segment (self, p);
            else
                rc = s_on_message (self, call, data, sizes, count);
            if (!self->held_reply [p])
                za_shm_link_done (self->links [p]);
        }
    }
    return rc;
}

//  A message on ps p's socket while we wait for the answers. 0, or -1.
static int
s_take_socket (za_worker_t *self, s_call_t *call)
{
    int p = call->p;
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
    call->msg = msg;
    return s_on_message (self, call, NULL, NULL, 0);
}

//  The clock's events of every ps we wait for (a ps that answered is not
//  listened to): its silence, said once, and its ping when due.
static void
s_heartbeats (za_worker_t *self, s_call_t *call)
{
    for (int p = 0; p < self->ps_count; p++) {
        za_peer_t *peer = &self->peers [p];
        if (self->call_state [p] != CALL_WAITING)
            continue;
        call->p = p;
        if (peer->heard && za_peer_went_silent (peer, call->now))
            s_dispatch (self, call, E_WENT_SILENT);
        if (za_peer_ping_due (peer, call->now))
            s_dispatch (self, call, E_PING_DUE);
    }
}

//  The call's time is up: the first ps that has not answered says so. -1.
static int
s_time_up (za_worker_t *self, s_call_t *call)
{
    int rc = 0;
    for (int p = 0; p < self->ps_count && rc == 0; p++) {
        call->p = p;
        rc = s_dispatch (self, call, E_TIME_UP);
    }
    return rc;
}

//  How many ps we still wait for.
static int
s_waiting (za_worker_t *self)
{
    int waiting = 0;
    for (int p = 0; p < self->ps_count; p++)
        waiting += self->call_state [p] == CALL_WAITING;
    return waiting;
}

//  How long to poll: until the deadline, or the first ping due.
static double
s_wait_secs (za_worker_t *self, double now, double left)
{
    double wait = left;
    for (int p = 0; p < self->ps_count; p++)
        if (self->call_state [p] == CALL_WAITING
            && za_peer_next_due (&self->peers [p], now) < wait)
            wait = za_peer_next_due (&self->peers [p], now);
    return wait;
}

//  1 when the pipe says $TERM (or is gone): the call stops.
static int
s_terminated (za_worker_t *self)
{
    char *command = zstr_recv (self->pipe);
    int term = !command || streq (command, "$TERM");
    zstr_free (&command);
    return term;
}

//  Every ps's call at once: each sent its request, then one poll for all
//  until each has answered, each message and each tick of the clock an
//  event of its ps's call (the pipe's $TERM ends them all).
int
za_worker_call_all_within (za_worker_t *self, za_op_t op, double timeout_secs)
{
    s_call_t call = {.op = op, .timeout_secs = timeout_secs};
    int rc = 0;
    self->seq++;
    for (int p = 0; p < self->ps_count && rc == 0; p++) {
        call.p = p;
        s_dispatch (self, &call, E_NEW_CALL);
        rc = s_dispatch (self, &call, E_SEND);
    }
    if (rc)
        return rc;
    zmq_pollitem_t items [2 + ZA_ROLE_MAX_PS];
    items [0] = (zmq_pollitem_t) {zsock_resolve (self->pipe), 0, ZMQ_POLLIN, 0};
    for (int p = 0; p < self->ps_count; p++)
        items [1 + p] = (zmq_pollitem_t) {zsock_resolve (self->dealers [p]), 0, ZMQ_POLLIN, 0};
    int item_count = 1 + self->ps_count;
    if (self->bell)
        items [item_count++] = (zmq_pollitem_t) {NULL, za_shm_bell_fd (self->bell), ZMQ_POLLIN, 0};
    double now = za_clock_mono ();
    double deadline = now + timeout_secs;
    //  Between two requests we do not listen: each ps's silence counts from here.
    for (int p = 0; p < self->ps_count; p++)
        za_peer_expect (&self->peers [p], now);
    while (s_waiting (self) > 0 && rc == 0) {
        if (self->bell && ((rc = s_take_linked (self, &call)) || s_waiting (self) == 0))
            break;
        call.now = now = za_clock_mono ();
        za_worker_alive (self, now);
        call.left = deadline - now;
        if (zsys_interrupted) {
            rc = za_error ("%s: interrupted while waiting for the ps' answers to %s", self->who,
                           za_op_name (op));
            break;
        }
        if (call.left <= 0) {
            rc = s_time_up (self, &call);
            break;
        }
        s_heartbeats (self, &call);
        if (zmq_poll (items, item_count, (long) (s_wait_secs (self, now, call.left) * 1000) + 1)
            <= 0)
            continue;
        if ((items [0].revents & ZMQ_POLLIN) && s_terminated (self)) {
            self->terminated = 1;
            rc = za_error ("%s: stopped", self->who);
            break;
        }
        for (int p = 0; p < self->ps_count && rc == 0; p++)
            if (items [1 + p].revents & ZMQ_POLLIN) {
                call.p = p;
                rc = s_take_socket (self, &call);
            }
    }
    return rc;
}

int
za_worker_call_all (za_worker_t *self, za_op_t op)
{
    return za_worker_call_all_within (self, op, self->config->timeout_secs);
}

//  1 if r is an error with `code`; training stopped for preemption is over
//  as "done" is (the caller asks for "preempted" to tell them apart).
static int
s_is_error (const za_wire_msg_t *r, const char *code)
{
    return r->op == ZA_OP_ERROR
        && (streq (r->code, code) || (streq (code, "done") && streq (r->code, "preempted")));
}

//  The first ps whose reply is an error with `code`, or -1.
int
za_worker_error_from (za_worker_t *self, const char *code)
{
    for (int p = 0; p < self->ps_count; p++)
        if (s_is_error (self->replies [p], code))
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
        if (also && s_is_error (r, also))
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
