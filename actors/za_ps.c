/*  za_ps.c: the parameter server actor. It holds its shard of the variables
    (two value blocks, see below) and their optimizer slots, applies each push
    at once and answers with the fresh values, serves consistent snapshots
    (hold / snapshot / release) and leaves when the chief says training is done.

    Replies carry the values zero-copy: libzmq may still be reading a block
    after the reply is sent. So there are two blocks; an update reads the
    current one and writes the other, after waiting until libzmq has let go of
    it (its lease). Slots are updated in place, after any snapshot that sent
    them has been let go.

    A ps (re)started after training ended must not wait for an init that
    never comes: when model_dir holds a checkpoint at or past max_steps it
    loads its values and starts in STOPPING; while waiting for init it looks
    again once a second (the chief may save the final checkpoint only then).

    The state table is s_transitions below (docs/PROTOCOL.md section 8):
    one row per (state, event), its action and the next state; the first
    matching row wins. An action that refuses (a bad init, say) keeps the
    state. Besides the requests, two events come from our own loop: a final
    checkpoint appeared in model_dir (while waiting for init), and the
    holder of a hold went silent for heartbeat interval x liveness.

    A ping only follows a request. So a ping that opens a connection means
    its sender's request went to a process (or connection) that is gone and
    will never be answered: we say not_ready, and it recovers as from a
    restart. (A ps restarted and already reloaded by the chief is the case:
    a worker whose push died with the old process would wait forever.)
    An undecodable message is dropped, logged and counted; nothing changes.

    This file is the actor: its loop, its state table and the table's
    actions. The shard's values and slots are za_ps_shard.c's, a push's
    update and ps-sync's sums za_ps_sync.c's, the ways to a state (init,
    offer, final checkpoint) za_ps_init.c's, the connections and same-host
    links za_ps_peers.c's; za_ps_private.h is what they share.            */
#include "za_ps_private.h"
#include "za/za_curve.h"
#include "za/za_preempt.h"

#include <zlib.h>

#define POLL_MS 100
//  A linked worker's whole messages taken at a time (s_on_bell).
#define BELL_BATCH 16
#define MAX_LOGGED_DROPS 20
//  How often a ps waiting for init looks for a final checkpoint in model_dir.
#define FINAL_CHECK_SECS 1.0

//  self->peers' destructor: a connection's last time heard.
static void
s_free_item (void **item)
{
    free (*item);
    *item = NULL;
}

//  self->links' destructor.
static void
s_free_link (void **item)
{
    za_shm_link_destroy ((za_shm_link_t **) item);
}

static void
s_ps_destroy (za_ps_t **self_p)
{
    za_ps_t *self = *self_p;
    if (!self)
        return;
    //  libzmq may still hold frames that point into our blocks: closing the
    //  socket drops what it could not send, then they all come back.
    zsock_destroy (&self->router);
    za_wire_lease_wait (&self->lease [0]);
    za_wire_lease_wait (&self->lease [1]);
    za_wire_lease_wait (&self->slot_lease);
    zframe_destroy (&self->holder);
    zhashx_destroy (&self->peers);
    zhashx_destroy (&self->links);
    za_shm_bell_destroy (&self->bell);
    if (self->queued) {
        zmsg_t *msg;
        while ((msg = (zmsg_t *) zlist_pop (self->queued)))
            zmsg_destroy (&msg);
        zlist_destroy (&self->queued);
    }
    za_free (self->values [0]);
    za_free (self->values [1]);
    za_free (self->low [0]);
    za_free (self->low [1]);
    for (int s = 0; s < ZA_OPTIM_MAX_SLOTS; s++)
        za_free (self->slots [s]);
    za_free (self->scratch);
    za_free (self->offer);
    za_free (self->accum);
    if (self->waiting) {
        za_ps_waiter_t *waiter;
        while ((waiter = (za_ps_waiter_t *) zlist_pop (self->waiting))) {
            zframe_destroy (&waiter->routing_id);
            free (waiter);
        }
        zlist_destroy (&self->waiting);
    }
    free (self->in);
    free (self->out);
    free (self);
    *self_p = NULL;
}

//  Our parts (placed in our blocks) and the memory they take: two value
//  blocks, their bf16 casts with --wire-dtype bf16, a gradient's scratch,
//  ps-sync's sum. The largest part's floats (at least 1), or 0 with an error.
static size_t
s_blocks_new (za_ps_t *self)
{
    const za_role_config_t *config = self->config;
    self->part_count = za_partition_parts_of (&self->placement, config->ps_index,
                                              self->parts, ZA_PARTITION_MAX_PARTS);
    size_t largest = 1;
    for (int i = 0; i < self->part_count; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        self->part_at [i] = self->floats;
        self->floats += part->size;
        if (part->size > largest)
            largest = part->size;
    }
    size_t bytes = (self->floats? self->floats: 1) * sizeof (float);
    self->values [0] = (float *) za_alloc (bytes);
    self->values [1] = (float *) za_alloc (bytes);
    self->scratch = (float *) za_alloc (largest * sizeof (float));
    self->offer_step = -1;
    if (!self->values [0] || !self->values [1] || !self->scratch)
        return 0;
    if (config->wire_dtype == ZA_DTYPE_BF16) {
        size_t halves = (self->floats? self->floats: 1) * sizeof (uint16_t);
        self->low [0] = (uint16_t *) za_alloc (halves);
        self->low [1] = (uint16_t *) za_alloc (halves);
        if (!self->low [0] || !self->low [1])
            return 0;
    }
    if (config->strategy == ZA_STRATEGY_PS_SYNC) {
        self->aggregate = za_role_batches_per_step (config);
        self->accum = (float *) za_alloc (bytes);
        self->waiting = zlist_new ();
        if (!self->accum || !self->waiting || self->aggregate > config->num_workers) {
            za_error ("ps %d: cannot aggregate %d of %d workers' gradients", config->ps_index,
                      self->aggregate, config->num_workers);
            return 0;
        }
        memset (self->accum, 0, bytes);
    }
    return largest;
}

//  The router the workers reach us on, bound. 0, or -1 with an error.
static int
s_router_new (za_ps_t *self, size_t largest)
{
    const za_role_config_t *config = self->config;
    self->router = zsock_new (ZMQ_ROUTER);
    if (!self->router)
        return -1;
    //  No frame larger than our largest part (or a header) is ever ours.
    zsock_set_maxmsgsize (self->router, za_wire_max_frame (largest * sizeof (float)));
    zsock_set_router_mandatory (self->router, 1);
    if (za_curve_server (self->router))
        return -1;
    if (zsock_bind (self->router, "%s", config->bind_endpoint) < 0)
        return za_error ("ps %d: cannot bind %s: %s", config->ps_index, config->bind_endpoint,
                         zmq_strerror (zmq_errno ()));
    return 0;
}

static za_ps_t *
s_ps_new (const za_role_config_t *config, zsock_t *pipe)
{
    za_ps_t *self = (za_ps_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->config = config;
    self->pipe = pipe;
    self->in = (za_wire_msg_t *) malloc (sizeof *self->in);
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->queued = zlist_new ();
    self->peers = zhashx_new ();
    if (self->peers)
        zhashx_set_destructor (self->peers, s_free_item);
    self->links = zhashx_new ();
    if (self->links)
        zhashx_set_destructor (self->links, s_free_link);
    self->shm = za_shm_enabled ();
    //  Without a bell, linked workers' headers come over ZeroMQ (their
    //  tensors still through their segments).
    if (self->shm && !(self->bell = za_shm_bell_new ()))
        za_info ("ps %d: %s", config->ps_index, za_last_error ());
    za_wire_lease_init (&self->lease [0]);
    za_wire_lease_init (&self->lease [1]);
    za_wire_lease_init (&self->slot_lease);
    if (config->num_workers < 1 || config->num_workers > ZA_PS_MAX_WORKERS) {
        za_error ("ps %d: %d workers (1 to %d)", config->ps_index, config->num_workers,
                  ZA_PS_MAX_WORKERS);
        goto fail;
    }
    if (!self->in || !self->out || !self->queued || !self->peers || !self->links
        || za_role_model_vars (config, &self->vars)
        || za_partition_compute (&self->vars, config->ps_count, config->partition_floats,
                                 &self->placement))
        goto fail;
    size_t largest = s_blocks_new (self);
    if (!largest || s_router_new (self, largest))
        goto fail;
    self->last_heard = za_clock_mono ();
    self->final_tried = -1;
    return self;
fail:
    s_ps_destroy (&self);
    return NULL;
}

// ---------------------------------------------------------------------------
//  The actions of the state table. Each answers its request (when there is
//  one) and returns 0 to take the row's next state, or -1 to stay.

typedef int (s_action_fn) (za_ps_t *self, za_ps_request_t *request);

static int
s_refuse (za_ps_t *self, za_ps_request_t *request, const char *code, const char *message)
{
    za_ps_reply_error (self, request->routing_id, request->msg->seq, code, message);
    return -1;
}

//  A ping: pong. We have nothing to answer the request its sender waits for
//  when we wait for init, or when this connection never sent us one (see
//  the top of this file): it learns so here.
static int
s_pong (za_ps_t *self, za_ps_request_t *request)
{
    za_wire_msg_init (self->out, ZA_OP_PONG);
    self->out->seq = request->msg->seq;
    self->out->step = za_ps_global_step (self);
    if (self->state == PS_WAIT_INIT || !request->known)
        snprintf (self->out->code, sizeof self->out->code, "not_ready");
    za_ps_reply (self, request->routing_id, NULL);
    return 0;
}

//  bye: a task leaving. Counted once per task of the cluster, however often
//  it says so; one that names no task of the cluster is refused.
static int
s_bye (za_ps_t *self, za_ps_request_t *request)
{
    if (!za_ps_task_ok (self, request->msg))
        return s_refuse (self, request, "bad_request", "bye needs its task, a worker index "
                         "of this cluster");
    char peer [2 * 255 + 1];
    za_ps_peer_key (request->routing_id, peer, sizeof peer);
    zhashx_delete (self->peers, peer);
    zhashx_delete (self->links, peer);
    if (!self->gone [request->msg->task]) {
        self->gone [request->msg->task] = 1;
        self->byes++;
    }
    za_wire_msg_init (self->out, ZA_OP_BYE_OK);
    self->out->seq = request->msg->seq;
    za_ps_reply (self, request->routing_id, NULL);
    return 0;
}

static int
s_init_action (za_ps_t *self, za_ps_request_t *request)
{
    return za_ps_init (self, request->routing_id, request->msg);
}

static int
s_refuse_busy (za_ps_t *self, za_ps_request_t *request)
{
    return s_refuse (self, request, "busy", "held for a snapshot");
}

static int
s_refuse_done (za_ps_t *self, za_ps_request_t *request)
{
    za_ps_reply_over (self, request->routing_id, request->msg->seq);
    return -1;
}

static int
s_refuse_not_ready (za_ps_t *self, za_ps_request_t *request)
{
    //  The step of the best offer we hold (-1: none) tells a restarted chief
    //  that a worker's values are here (PROTOCOL.md 7.5).
    za_wire_msg_init (self->out, ZA_OP_ERROR);
    self->out->seq = request->msg->seq;
    self->out->step = self->offer_step;
    snprintf (self->out->code, sizeof self->out->code, "not_ready");
    snprintf (self->out->error, sizeof self->out->error, "waiting for the chief's init");
    za_ps_reply (self, request->routing_id, NULL);
    return -1;
}


//  An offer to a ps that has a state: of no use, and never answered.
static int
s_ignore (za_ps_t *self, za_ps_request_t *request)
{
    (void) self;
    (void) request;
    return 0;
}

static int
s_refuse_not_held (za_ps_t *self, za_ps_request_t *request)
{
    return s_refuse (self, request, "bad_request", "snapshot needs hold first");
}

static int
s_refuse_op (za_ps_t *self, za_ps_request_t *request)
{
    return s_refuse (self, request, "bad_request", "a ps does not serve this op");
}

static int
s_values (za_ps_t *self, za_ps_request_t *request)
{
    za_ps_reply_values (self, request->routing_id, request->msg->seq, request->msg->task);
    return 0;
}

static int
s_push (za_ps_t *self, za_ps_request_t *request)
{
    if (!za_ps_task_ok (self, request->msg))
        return s_refuse (self, request, "bad_request", "push needs its task, a worker index "
                         "of this cluster");
    za_ps_push_now (self, request->routing_id, request->msg);
    return 0;
}

//  A push while held: the whole message (routing id first) waits for release.
static int
s_queue (za_ps_t *self, za_ps_request_t *request)
{
    if (!za_ps_task_ok (self, request->msg))
        return s_refuse (self, request, "bad_request", "push needs its task, a worker index "
                         "of this cluster");
    zmsg_t *raw = *request->raw_p;
    zmsg_pushmem (raw, zframe_data (request->routing_id), zframe_size (request->routing_id));
    zlist_append (self->queued, raw);
    *request->raw_p = NULL;
    return 0;
}

static int
s_hold (za_ps_t *self, za_ps_request_t *request)
{
    zframe_destroy (&self->holder);
    self->holder = zframe_dup (request->routing_id);
    za_peer_init (&self->holder_peer, self->config->heartbeat, za_clock_mono ());
    za_wire_msg_init (self->out, ZA_OP_HELD);
    self->out->seq = request->msg->seq;
    self->out->step = za_ps_global_step (self);
    za_ps_reply (self, request->routing_id, NULL);
    return 0;
}

static int
s_snapshot_action (za_ps_t *self, za_ps_request_t *request)
{
    za_ps_snapshot (self, request->routing_id, request->msg->seq);
    return 0;
}

//  Leaves HELD: queued pushes are applied in arrival order, or refused when
//  stopping.
static void
s_end_hold (za_ps_t *self, int stop)
{
    zframe_destroy (&self->holder);
    if (stop) {
        self->stop_time = za_clock_mono ();
        za_ps_answer_waiting (self, 1);         //  their step will never be made
    }
    zmsg_t *queued;
    while ((queued = (zmsg_t *) zlist_pop (self->queued))) {
        zframe_t *id = zmsg_pop (queued);
        if (za_wire_decode (queued, self->in) == 0) {
            if (stop)
                za_ps_reply_over (self, id, self->in->seq);
            else
                za_ps_push_now (self, id, self->in);
        }
        zframe_destroy (&id);
        zmsg_destroy (&queued);
    }
}

//  release and stop: the answer first, then the queued pushes.
static int
s_release_or_stop (za_ps_t *self, za_ps_request_t *request, za_op_t reply)
{
    za_wire_msg_init (self->out, reply);
    self->out->seq = request->msg->seq;
    self->out->step = za_ps_global_step (self);
    za_ps_reply (self, request->routing_id, NULL);
    s_end_hold (self, reply == ZA_OP_STOPPING);
    return 0;
}

static int
s_release (za_ps_t *self, za_ps_request_t *request)
{
    return s_release_or_stop (self, request, ZA_OP_RELEASED);
}

static int
s_stop (za_ps_t *self, za_ps_request_t *request)
{
    self->preempted = streq (request->msg->code, "preempted");
    return s_release_or_stop (self, request, ZA_OP_STOPPING);
}

static int
s_lapse (za_ps_t *self, za_ps_request_t *request)
{
    (void) request;
    za_info ("ps %d: the holder went silent for %.1f s (%d heartbeats): hold released",
             self->config->ps_index, za_peer_silence (&self->holder_peer, za_clock_mono ()),
             self->holder_peer.beat.liveness);
    s_end_hold (self, 0);
    return 0;
}
//  The ps as a state table (docs/PROTOCOL.md section 8). The first row that
//  matches the state and the event wins.
static const struct {
    za_ps_state_t state;
    int event;
    s_action_fn *action;
    za_ps_state_t next;
} s_transitions [] = {
    //  state         event              action               next
    {PS_ANY,         ZA_OP_PING,        s_pong,              PS_SAME},
    {PS_ANY,         ZA_OP_BYE,         s_bye,               PS_SAME},
    {PS_WAIT_INIT,   ZA_OP_INIT,        s_init_action,       PS_READY},
    {PS_READY,       ZA_OP_INIT,        s_init_action,       PS_READY},
    {PS_HELD,        ZA_OP_INIT,        s_refuse_busy,       PS_HELD},
    {PS_WAIT_INIT,   PS_E_FINAL_FOUND,     za_ps_load_final,        PS_STOPPING},
    {PS_WAIT_INIT,   ZA_OP_OFFER,       za_ps_offer,      PS_WAIT_INIT},
    {PS_ANY,         ZA_OP_OFFER,       s_ignore,            PS_SAME},
    {PS_WAIT_INIT,   PS_E_ANY,             s_refuse_not_ready,  PS_WAIT_INIT},
    {PS_STOPPING,    PS_E_ANY,             s_refuse_done,       PS_STOPPING},
    {PS_READY,       ZA_OP_PULL,        s_values,            PS_READY},
    {PS_HELD,        ZA_OP_PULL,        s_values,            PS_HELD},
    {PS_READY,       ZA_OP_PUSH,        s_push,              PS_READY},
    {PS_HELD,        ZA_OP_PUSH,        s_queue,             PS_HELD},
    {PS_READY,       ZA_OP_HOLD,        s_hold,              PS_HELD},
    {PS_HELD,        ZA_OP_HOLD,        s_hold,              PS_HELD},
    {PS_READY,       ZA_OP_SNAPSHOT,    s_refuse_not_held,   PS_READY},
    {PS_HELD,        ZA_OP_SNAPSHOT,    s_snapshot_action,   PS_HELD},
    {PS_READY,       ZA_OP_RELEASE,     s_release,           PS_READY},
    {PS_HELD,        ZA_OP_RELEASE,     s_release,           PS_READY},
    {PS_HELD,        PS_E_HOLDER_SILENT,   s_lapse,             PS_READY},
    {PS_READY,       ZA_OP_STOP,        s_stop,              PS_STOPPING},
    {PS_HELD,        ZA_OP_STOP,        s_stop,              PS_STOPPING},
    {PS_ANY,         PS_E_ANY,             s_refuse_op,         PS_SAME},
};

//  Runs the row of (state, event). Loop events carry no request: a row
//  that would answer one is never taken for them.
static void
s_dispatch (za_ps_t *self, int event, za_ps_request_t *request)
{
    size_t rows = sizeof s_transitions / sizeof s_transitions [0];
    for (size_t r = 0; r < rows; r++) {
        if ((s_transitions [r].state != PS_ANY && s_transitions [r].state != self->state)
            || (s_transitions [r].event != PS_E_ANY && s_transitions [r].event != event))
            continue;
        if (!request->msg && s_transitions [r].event == PS_E_ANY)
            return;             //  a loop event this state does not take
        za_ps_state_t was = self->state;
        if (s_transitions [r].action (self, request) == 0 && s_transitions [r].next != PS_SAME)
            self->state = s_transitions [r].next;
        if (self->state != was && self->state == PS_STOPPING && !self->stop_time)
            self->stop_time = za_clock_mono ();
        return;
    }
}

//  Handles one decoded request. `raw` is the whole message (for queueing).
static void
s_handle (za_ps_t *self, zframe_t *routing_id, zmsg_t **raw_p)
{
    char peer [2 * 255 + 1];
    za_ps_peer_key (routing_id, peer, sizeof peer);
    za_ps_request_t request = {.routing_id = routing_id, .msg = self->in, .raw_p = raw_p,
                           .known = za_ps_peer_heard (self, peer, self->in->op != ZA_OP_BYE)};
    s_dispatch (self, (int) self->in->op, &request);
}

//  Looks in model_dir for a checkpoint at or past max_steps (training is
//  over) that was not tried before. When there is one, it is an event of
//  the state table: in WAIT_INIT we load it and answer done from then on.
static void
s_look_for_final (za_ps_t *self, double now)
{
    const za_role_config_t *config = self->config;
    self->final_checked = now;
    if (!config->run.model_dir || config->max_steps <= 0)
        return;
    int64_t newest = za_checkpoint_newest_step (config->run.model_dir);
    if (newest < config->max_steps || newest == self->final_tried)
        return;
    self->final_step = newest;
    za_ps_request_t none = {NULL, NULL, NULL, 0};
    s_dispatch (self, PS_E_FINAL_FOUND, &none);
}


//  What watchers see: relaxed stores, once per poll turn.
static void
s_publish (za_ps_t *self, double now)
{
    za_role_stats_t *stats = self->config->stats;
    if (!stats)
        return;
    za_role_stats_publish (stats, self->state == PS_WAIT_INIT? ZA_ROLE_WAITING
                                                              : ZA_ROLE_RUNNING, now);
    atomic_store_explicit (&stats->global_step, za_ps_global_step (self), memory_order_relaxed);
}

static uint32_t
s_crc (za_ps_t *self)
{
    uLong crc = crc32 (0L, Z_NULL, 0);
    if (self->floats)
        crc = crc32 (crc, (const Bytef *) self->values [self->current],
                     (uInt) (self->floats * sizeof (float)));
    return (uint32_t) crc;
}

//  One message from peer `routing_id` (key `peer`, its link or NULL): its
//  tensors in frames (got 0) or held in place in the link's record (got 1;
//  -1: they cannot be had); `whole` when it came whole through the link's
//  segment. Decoded, handled, and destroyed.
static void
s_on_message (za_ps_t *self, zframe_t *routing_id, const char *peer, za_shm_link_t *link,
              zmsg_t **msg_p, int got, const void *const *held, const size_t *sizes, int count,
              int whole, double now)
{
    zmsg_t *msg = *msg_p;
    if (routing_id && got >= 0
        && (got? za_wire_decode_payloads (msg, held, sizes, count, self->in)
               : za_wire_decode (msg, self->in)) == 0) {
        if (link && za_shm_link_task (link) != self->in->task)
            za_ps_link_task (self, peer, link, self->in->task);
        self->last_heard = now;
        if (self->holder && zframe_eq (self->holder, routing_id))
            za_peer_heard (&self->holder_peer, now);
        zmsg_t *raw = msg;
        s_handle (self, routing_id, &msg);
        //  A push kept for later (while HELD) outlives the record: it
        //  takes copies. (A bye may have taken the link.)
        link = (za_shm_link_t *) zhashx_lookup (self->links, peer);
        if (got && !msg && link && za_shm_link_copy_held (link, raw))
            za_info ("ps %d: %s", self->config->ps_index, za_last_error ());
        if (link)
            za_shm_link_done (link);
    }
    else {
        if (link && got == 1)
            za_shm_link_done (link);
        self->dropped++;
        if (self->dropped <= MAX_LOGGED_DROPS)
            za_info ("ps %d: dropped a bad message (%" PRIu64 " so far): %s",
                     self->config->ps_index, self->dropped, za_last_error ());
        //  Tensors in a segment we cannot read (no link here, or one
        //  that could not map it): the sender sends them again as frames.
        uint64_t seq;
        if (whole && link)
            za_ps_refuse_whole (self, link);
        else
        if (routing_id && msg && za_shm_link_names_record (msg, &seq))
            za_ps_reply_error (self, routing_id, seq, "shm_unreadable",
                               "this ps cannot read your shared memory: send frames");
    }
    zmsg_destroy (&msg);
    *msg_p = NULL;
}

//  The bell rang: every link's whole messages, in order, at most
//  BELL_BATCH of each link's before the sockets are looked at again (then
//  the bell rings itself, so that the loop comes back at once). A link
//  handled may go, or take others with it: each is looked up again.
static void
s_on_bell (za_ps_t *self, double now)
{
    za_shm_bell_quiet (self->bell);
    int more = 0;
    zlistx_t *keys = zhashx_keys (self->links);
    for (const char *peer = keys? (const char *) zlistx_first (keys): NULL; peer;
         peer = (const char *) zlistx_next (keys)) {
        for (int n = 0;; n++) {
            za_shm_link_t *link = (za_shm_link_t *) zhashx_lookup (self->links, peer);
            if (!link)
                break;
            if (n == BELL_BATCH) {
                more = 1;
                break;
            }
            zmsg_t *msg;
            const void *const *held = NULL;
            const size_t *sizes = NULL;
            int count = 0;
            int got = za_shm_link_take (link, &msg, &held, &sizes, &count);
            if (got == 0)
                break;
            //  (One that cannot be had is dropped there, and refused.)
            zframe_t *routing_id = zframe_dup (za_shm_link_route (link));
            s_on_message (self, routing_id, peer, link, &msg, got, held, sizes, count, 1, now);
            zframe_destroy (&routing_id);
            if (got < 0)
                break;
        }
    }
    zlistx_destroy (&keys);
    if (more)
        za_shm_bell_ring (za_shm_bell_offer_fd (self->bell));
}

//  A message on the router: its tensors read in place when its peer's link
//  holds them, then handled. -1 when none could be read (interrupted).
static int
s_on_router (za_ps_t *self, double now)
{
    zmsg_t *msg = zmsg_recv (self->router);
    if (!msg)
        return -1;
    zframe_t *routing_id = zmsg_pop (msg);
    char peer [2 * 255 + 1];
    za_shm_link_t *link = NULL;
    if (routing_id) {
        za_ps_peer_key (routing_id, peer, sizeof peer);
        link = za_ps_link_of (self, routing_id, peer, msg);
    }
    //  Tensors through shared memory are read where they are.
    const void *const *held = NULL;
    const size_t *sizes = NULL;
    int count = 0;
    int got = link? za_shm_link_receive_in_place (link, msg, &held, &sizes, &count): 0;
    s_on_message (self, routing_id, peer, link, &msg, got, held, sizes, count, 0, now);
    zframe_destroy (&routing_id);
    return 0;
}

//  An elastic job's scale-lr: the chief's learning rate times the trainers
//  now over those it started with (Horovod's recipe), from the next update.
static void
s_follow_rate (za_ps_t *self)
{
    const za_role_config_t *config = self->config;
    int members = config->membership? za_membership_count (config->membership): 0;
    if (members < 1 || !self->base_learning_rate)
        return;
    float rate = za_role_elastic_rate (config, self->base_learning_rate, members);
    if (rate != self->optim.learning_rate) {
        za_info ("ps %d: %d trainers: the learning rate is %g (scale-lr)", config->ps_index,
                 members, (double) rate);
        self->optim.learning_rate = rate;
    }
}

//  1 when every worker has said bye (in an elastic job: every member now).
static int
s_all_said_bye (za_ps_t *self)
{
    const za_role_config_t *config = self->config;
    if (!config->membership || za_membership_number (config->membership) == 0)
        return self->byes >= config->num_workers;
    za_members_t *members = (za_members_t *) calloc (1, sizeof *members);
    if (!members)
        return self->byes >= config->num_workers;
    za_membership_get (config->membership, members);
    int all = 1;
    for (int m = 0; m < members->count; m++)
        all &= members->index [m] < ZA_PS_MAX_WORKERS && self->gone [members->index [m]];
    free (members);
    return all;
}

//  What time brings, once per turn of the loop: a silent holder, a final
//  checkpoint to look for, the end. 0 to go on, 1 to leave (done), -1 to
//  give up (nobody came in time).
static int
s_on_time (za_ps_t *self, double now)
{
    const za_role_config_t *config = self->config;
    if (self->state == PS_HELD && za_peer_expired (&self->holder_peer, now)) {
        za_ps_request_t none = {NULL, NULL, NULL, 0};
        s_dispatch (self, PS_E_HOLDER_SILENT, &none);
    }
    if (self->state == PS_WAIT_INIT && now - self->final_checked >= FINAL_CHECK_SECS)
        s_look_for_final (self, now);
    if (self->state == PS_STOPPING && s_all_said_bye (self))
        return 1;
    //  Preempted before any chief gave it a state: there is nothing to keep
    //  (a scheduler's grace is shorter than --timeout-secs).
    if (self->state == PS_WAIT_INIT && za_preempt_requested ()) {
        za_info ("ps %d: preempted (SIGTERM) before a chief initialised it: leaving",
                 config->ps_index);
        return 1;
    }
    if (self->state == PS_READY) {      //  held, a step waits for the hold's end
        s_follow_rate (self);
        za_ps_sync_follow (self);
    }
    if (now - (self->state == PS_STOPPING? self->stop_time: self->last_heard)
        <= config->timeout_secs)
        return 0;
    if (self->state == PS_STOPPING) {
        za_info ("ps %d: %d of %d workers said bye; leaving after %.0f s", config->ps_index,
                 self->byes, config->num_workers, config->timeout_secs);
        return 1;
    }
    za_error ("ps %d: %s within %.0f s; giving up", config->ps_index,
              self->state == PS_WAIT_INIT? "no chief initialised this ps"
                                         : "no worker was heard from",
              config->timeout_secs);
    return -1;
}

void
za_ps_actor (zsock_t *pipe, void *args)
{
    const za_role_config_t *config = (const za_role_config_t *) args;
    za_ps_t *self = s_ps_new (config, pipe);
    zsock_signal (pipe, 0);
    if (!self) {
        za_role_stats_publish (config->stats, ZA_ROLE_FAILED, za_clock_mono ());
        za_role_report_done (pipe, 1, 0, 0, 0);
        return;
    }
    za_info ("ps %d: serving %d parts (%zu floats) on %s", config->ps_index, self->part_count,
             self->floats, config->bind_endpoint);
    s_look_for_final (self, za_clock_mono ());
    zmq_pollitem_t items [3] = {
        {zsock_resolve (pipe), 0, ZMQ_POLLIN, 0},
        {zsock_resolve (self->router), 0, ZMQ_POLLIN, 0},
        {NULL, self->bell? za_shm_bell_fd (self->bell): -1, ZMQ_POLLIN, 0},
    };
    int rc = 0;
    while (!zsys_interrupted) {
        //  (Interrupted, it leaves the last pass's revents: nothing is ready.)
        if (zmq_poll (items, self->bell? 3: 2, POLL_MS) < 0) {
            if (zmq_errno () != EINTR)
                break;
            continue;
        }
        double now = za_clock_mono ();
        if (items [0].revents & ZMQ_POLLIN) {
            char *command = zstr_recv (pipe);
            int term = command && streq (command, "$TERM");
            zstr_free (&command);
            if (term) {
                s_ps_destroy (&self);
                za_role_stats_publish (config->stats, ZA_ROLE_DONE, za_clock_mono ());
                return;
            }
        }
        if ((items [1].revents & ZMQ_POLLIN) && s_on_router (self, now))
            break;
        if (self->bell && (items [2].revents & ZMQ_POLLIN))
            s_on_bell (self, now);
        s_publish (self, now);
        int end = s_on_time (self, now);
        if (end) {
            rc = end < 0;
            break;
        }
    }
    uint32_t crc = s_crc (self);
    int64_t step = za_ps_global_step (self), floats = (int64_t) self->floats;
    //  Stopped by the chief's final checkpoint after a preemption request
    //  (ours, or the chief's: a static cluster has no broker to tell us).
    int preempted = rc == 0 && (za_preempt_requested () || self->preempted)
                 && step < config->max_steps;
    za_info ("ps %d: %s at step %" PRId64 ", %zu floats, crc32 %08x, %" PRIu64
             " bad messages dropped", config->ps_index, preempted? "preempted": "done", step,
             self->floats, crc, self->dropped);
    if (self->aggregate)
        za_info ("ps %d: ps-sync: %d gradients per step, %" PRIu64 " stale ones dropped",
                 config->ps_index, self->aggregate, self->stale);
    s_ps_destroy (&self);
    za_role_stats_publish (config->stats, rc? ZA_ROLE_FAILED: ZA_ROLE_DONE, za_clock_mono ());
    if (preempted)
        rc = ZA_EXIT_REQUEUE;
    za_role_report_done (pipe, rc, step, crc, floats);
}
