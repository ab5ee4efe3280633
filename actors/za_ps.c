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
    An undecodable message is dropped, logged and counted; nothing changes.  */
#include "za_role_private.h"
#include "za/za_curve.h"
#include "za/za_checkpoint.h"
#include "za/za_peer.h"
#include "za/za_shm.h"
#include "za/za_shm_link.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define POLL_MS 100
//  A linked worker's whole messages taken at a time (s_on_bell).
#define BELL_BATCH 16
#define MAX_LOGGED_DROPS 20
//  Workers (the chief included) a ps serves at most.
#define ZA_PS_MAX_WORKERS 256
//  Connections the ps keeps in mind (a few per task are enough); beyond
//  that the silent ones are forgotten, so a peer that connects, speaks once
//  and goes costs nothing lasting.
#define PS_MAX_PEERS 1024
//  Peers on this host whose tensors come through shared memory, at most.
#define PS_MAX_LINKS 64
//  How often a ps waiting for init looks for a final checkpoint in model_dir.
#define FINAL_CHECK_SECS 1.0

typedef enum { S_WAIT_INIT, S_READY, S_HELD, S_STOPPING, S_ANY, S_SAME } s_state_t;


//  Events: every op (za_op_t), and two of our own loop's.
enum {
    E_ANY = 0,                  //  matches any event
    E_FINAL_FOUND = 100,        //  model_dir holds a checkpoint at or past max_steps
    E_HOLDER_SILENT             //  the holder of a hold missed interval x liveness
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
    s_state_t state;
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
    zframe_t *holder;                       //  who sent hold, while HELD
    za_peer_t holder_peer;                  //  its liveness: a silent one lapses the hold
    double final_checked;                   //  when model_dir was last looked at
    int64_t final_tried;                    //  a final checkpoint that would not load
    int64_t final_step;                     //  the one found, for s_load_final
    za_wire_msg_t *in, *out;
    char slot_names [ZA_PARTITION_MAX_PARTS * ZA_OPTIM_MAX_SLOTS][ZA_WIRE_NAME_MAX];
    //  ps-sync: the gradients of this step summed until `aggregate` of them
    //  are in, their pushers waiting for the values of the next step.
    int aggregate;                          //  replicas to aggregate (0: async)
    float *accum;
    int aggregated;
    uint8_t contributed [ZA_PS_MAX_WORKERS];
    zlist_t *waiting;                       //  s_waiter_t *
    uint64_t stale;                         //  pushes of an older step, dropped
} s_ps_t;

//  A pusher waiting for the step its gradient is part of.
typedef struct {
    zframe_t *routing_id;
    uint64_t seq;
    int32_t task;
} s_waiter_t;

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
s_ps_destroy (s_ps_t **self_p)
{
    s_ps_t *self = *self_p;
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
        s_waiter_t *waiter;
        while ((waiter = (s_waiter_t *) zlist_pop (self->waiting))) {
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

static s_ps_t *
s_ps_new (const za_role_config_t *config, zsock_t *pipe)
{
    s_ps_t *self = (s_ps_t *) calloc (1, sizeof *self);
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
    self->part_count = za_partition_parts_of (&self->placement, config->ps_index,
                                              self->parts, ZA_PARTITION_MAX_PARTS);
    size_t largest = 0;
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
    self->scratch = (float *) za_alloc ((largest? largest: 1) * sizeof (float));
    self->offer_step = -1;
    if (!self->values [0] || !self->values [1] || !self->scratch)
        goto fail;
    if (config->wire_dtype == ZA_DTYPE_BF16) {
        size_t halves = (self->floats? self->floats: 1) * sizeof (uint16_t);
        self->low [0] = (uint16_t *) za_alloc (halves);
        self->low [1] = (uint16_t *) za_alloc (halves);
        if (!self->low [0] || !self->low [1])
            goto fail;
    }
    if (config->strategy == ZA_STRATEGY_PS_SYNC) {
        self->aggregate = za_role_batches_per_step (config);
        self->accum = (float *) za_alloc (bytes);
        self->waiting = zlist_new ();
        if (!self->accum || !self->waiting || self->aggregate > config->num_workers) {
            za_error ("ps %d: cannot aggregate %d of %d workers' gradients", config->ps_index,
                      self->aggregate, config->num_workers);
            goto fail;
        }
        memset (self->accum, 0, bytes);
    }
    self->router = zsock_new (ZMQ_ROUTER);
    if (!self->router)
        goto fail;
    //  No frame larger than our largest part (or a header) is ever ours.
    zsock_set_maxmsgsize (self->router, za_wire_max_frame (largest * sizeof (float)));
    zsock_set_router_mandatory (self->router, 1);
    if (za_curve_server (self->router))
        goto fail;
    if (zsock_bind (self->router, "%s", config->bind_endpoint) < 0) {
        za_error ("ps %d: cannot bind %s: %s", config->ps_index, config->bind_endpoint,
                  zmq_strerror (zmq_errno ()));
        goto fail;
    }
    self->last_heard = za_clock_mono ();
    self->final_tried = -1;
    return self;
fail:
    s_ps_destroy (&self);
    return NULL;
}

static const char *
s_part_name (s_ps_t *self, int i)
{
    return self->placement.parts [self->parts [i]].name;
}

static int64_t
s_global_step (s_ps_t *self)
{
    return self->updates;
}

//  Replies to `routing_id` with self->out. A peer that is gone is not an
//  error worth more than a line.
static void s_peer_key (zframe_t *routing_id, char *key, size_t size);

static void
s_reply (s_ps_t *self, zframe_t *routing_id, za_wire_lease_t *lease)
{
    self->out->ps = self->config->ps_index;
    za_shm_link_t *link = NULL;
    if (zhashx_size (self->links)) {
        char peer [2 * 255 + 1];
        s_peer_key (routing_id, peer, sizeof peer);
        link = (za_shm_link_t *) zhashx_lookup (self->links, peer);
    }
    if (link? za_shm_link_send (link, self->router, routing_id, self->out, lease)
            : za_wire_send (self->router, routing_id, self->out, lease))
        za_info ("ps %d: reply to a departed peer dropped", self->config->ps_index);
}

static void
s_reply_error (s_ps_t *self, zframe_t *routing_id, uint64_t seq, const char *code,
               const char *message)
{
    za_wire_msg_init (self->out, ZA_OP_ERROR);
    self->out->seq = seq;
    self->out->step = s_global_step (self);
    snprintf (self->out->code, sizeof self->out->code, "%s", code);
    snprintf (self->out->error, sizeof self->out->error, "%s", message);
    s_reply (self, routing_id, NULL);
}

//  Puts our parts (from block, of dtype F32 or BF16) into self->out as tensors.
static void
s_add_parts (s_ps_t *self, const void *block, za_dtype_t dtype)
{
    for (int i = 0; i < self->part_count; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        int64_t shape [ZA_MAX_DIMS];
        int ndim = za_role_part_shape (&self->vars, part, shape);
        za_wire_msg_add (self->out, part->name, dtype, ndim, shape,
                         (const char *) block + self->part_at [i] * za_dtype_size (dtype));
    }
}

//  The value block we answer pushes and pulls with: current, or its bf16 cast.
static const void *
s_reply_block (s_ps_t *self)
{
    int c = self->current;
    return self->low [c]? (const void *) self->low [c]: self->values [c];
}

//  Block 0, just loaded (an init, a checkpoint), cast for the replies.
static void
s_loaded (s_ps_t *self)
{
    self->current = 0;
    if (self->low [0])
        za_f32_to_bf16 (self->values [0], self->low [0], self->floats);
}

//  Puts our optimizer slots into self->out as "<part>/<slot>" tensors.
static void
s_add_slots (s_ps_t *self)
{
    int slot_count = za_optim_slot_count (self->optim.kind);
    for (int s = 0; s < slot_count; s++)
        for (int i = 0; i < self->part_count; i++) {
            const za_part_t *part = &self->placement.parts [self->parts [i]];
            char *name = self->slot_names [s * self->part_count + i];
            char formatted [ZA_WIRE_NAME_MAX];
            snprintf (formatted, sizeof formatted, "%s/%s", part->name,
                      za_optim_slot_name (self->optim.kind, s));
            memcpy (name, formatted, sizeof formatted);
            int64_t shape [ZA_MAX_DIMS];
            int ndim = za_role_part_shape (&self->vars, part, shape);
            za_wire_msg_add (self->out, name, ZA_DTYPE_F32, ndim, shape,
                             self->slots [s] + self->part_at [i]);
        }
}

//  ps-sync: the chief (task 0) is sent our slots after the values, so it
//  holds the whole state of every step and can give it back to a ps that
//  was restarted (PROTOCOL.md 7.5) instead of rewinding all to a checkpoint.
//  They come as a message of their own: the chief computes its next step
//  on the values while they travel.
static int
s_sends_slots (s_ps_t *self, int32_t task)
{
    return self->aggregate && task == 0 && za_optim_slot_count (self->optim.kind) > 0;
}

static void
s_reply_values (s_ps_t *self, zframe_t *routing_id, uint64_t seq, int32_t task)
{
    za_wire_msg_init (self->out, ZA_OP_VALUES);
    self->out->seq = seq;
    self->out->step = s_global_step (self);
    s_add_parts (self, s_reply_block (self), self->config->wire_dtype);
    s_reply (self, routing_id, &self->lease [self->current]);
    if (s_sends_slots (self, task)) {
        //  The slots change in place: they travel under the slot lease,
        //  which every update waits for (as a snapshot's do).
        za_wire_msg_init (self->out, ZA_OP_SLOTS);
        self->out->seq = seq;
        self->out->step = s_global_step (self);
        s_add_slots (self);
        s_reply (self, routing_id, &self->slot_lease);
    }
}

//  1 when tensor t is part `part`'s: of dtype `dtype` (F32, or a push's
//  the job's --wire-dtype) and its shape (its variable's, or [size] when the
//  variable is split). A wrong shape of the right byte count is as wrong
//  as a wrong count (docs/PROTOCOL.md 9).
static int
s_is_part (s_ps_t *self, const za_wire_tensor_t *t, const za_part_t *part, za_dtype_t dtype)
{
    int64_t shape [ZA_MAX_DIMS];
    int ndim = za_role_part_shape (&self->vars, part, shape);
    int same = t->dtype == dtype && t->ndim == ndim
            && t->bytes == part->size * za_dtype_size (dtype);
    for (int d = 0; same && d < ndim; d++)
        same = t->shape [d] == shape [d];
    return same;
}

static const char *
s_dtype_text (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32? "f32": dtype == ZA_DTYPE_BF16? "bf16": "i64";
}

//  "4x3", for messages.
static void
s_shape_text (int ndim, const int64_t *shape, char *text, size_t size)
{
    text [0] = 0;
    for (int d = 0; d < ndim; d++)
        snprintf (text + strlen (text), size - strlen (text), "%s%" PRId64, d? "x": "",
                  shape [d]);
    if (ndim == 0)
        snprintf (text, size, "scalar");
}

//  Checks that the message's first part_count tensors are our parts, in
//  order, of the right shapes. Returns 0, or -1 with a message in `why`.
static int
s_check_parts (s_ps_t *self, const za_wire_msg_t *msg, int exact, char *why, size_t size)
{
    if (msg->tensor_count < self->part_count
        || (exact && msg->tensor_count != self->part_count)) {
        snprintf (why, size, "%d tensors for %d parts", msg->tensor_count, self->part_count);
        return -1;
    }
    for (int i = 0; i < self->part_count; i++) {
        const za_wire_tensor_t *t = &msg->tensors [i];
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        if (strcmp (t->name, part->name) != 0 || !s_is_part (self, t, part, ZA_DTYPE_F32)) {
            int64_t shape [ZA_MAX_DIMS];
            int ndim = za_role_part_shape (&self->vars, part, shape);
            char got [64], want [64];
            s_shape_text (t->ndim, t->shape, got, sizeof got);
            s_shape_text (ndim, shape, want, sizeof want);
            snprintf (why, size, "tensor %d is '%s' (%s %s); ps %d holds '%s' (f32 %s) there",
                      i, t->name, s_dtype_text (t->dtype), got, self->config->ps_index,
                      part->name, want);
            return -1;
        }
    }
    return 0;
}

//  A push's tensors: exactly the parts whose variables train, in our order
//  (a frozen variable's parts are left out: they are not updated), or none
//  at all (mixed_float16's overflowed step: nothing is updated, the step
//  counts). Which variables train is the job's (its model, --freeze), as
//  our parts and their shapes are. Fills self->pushed. 0, or -1 with why.
static int
s_match_push (s_ps_t *self, const za_wire_msg_t *msg, char *why, size_t size)
{
    int t = 0;
    for (int i = 0; i < self->part_count; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        int frozen = self->vars.vars [part->var].frozen;
        self->pushed [i] = -1;
        int named = t < msg->tensor_count && strcmp (msg->tensors [t].name, part->name) == 0;
        if (named && frozen) {
            snprintf (why, size, "tensor %d ('%s') is a frozen variable's: a push leaves it "
                      "out", t, part->name);
            return -1;
        }
        if (!named && !frozen && msg->tensor_count > 0) {
            snprintf (why, size, "the push lacks '%s' (a variable that trains) at tensor %d: "
                      "a push carries every part of ps %d whose variable trains, in order, or "
                      "none", part->name, t, self->config->ps_index);
            return -1;
        }
        if (named) {
            za_dtype_t wire = self->config->wire_dtype;
            if (msg->tensors [t].dtype != wire) {
                snprintf (why, size, "tensor %d ('%s') is %s; this job's gradients travel as %s "
                          "(--wire-dtype %s)", t, part->name,
                          s_dtype_text (msg->tensors [t].dtype), s_dtype_text (wire),
                          wire == ZA_DTYPE_BF16? "bf16": "fp32");
                return -1;
            }
            if (!s_is_part (self, &msg->tensors [t], part, wire)) {
                snprintf (why, size, "tensor %d ('%s') is not the shape of ps %d's part", t,
                          part->name, self->config->ps_index);
                return -1;
            }
            self->pushed [i] = t++;
        }
    }
    if (t < msg->tensor_count) {
        snprintf (why, size, "tensor %d is '%s': not one of ps %d's parts, in their order", t,
                  msg->tensors [t].name, self->config->ps_index);
        return -1;
    }
    return 0;
}

//  A request's task: the requester's worker index, 0 .. num_workers - 1.
static int
s_task_ok (s_ps_t *self, const za_wire_msg_t *msg)
{
    return msg->task >= 0 && msg->task < self->config->num_workers;
}

//  A received float tensor, aligned for the loops (frames of a few bytes
//  live inside libzmq's message and need not be 4-byte aligned); a bf16
//  one widened to fp32.
static const float *
s_floats_of (s_ps_t *self, const za_wire_tensor_t *t)
{
    if (t->dtype == ZA_DTYPE_BF16) {
        za_bf16_to_f32 (t->data, self->scratch, t->bytes / sizeof (uint16_t));
        return self->scratch;
    }
    if (((uintptr_t) t->data & (sizeof (float) - 1)) == 0)
        return (const float *) t->data;
    memcpy (self->scratch, t->data, t->bytes);
    return self->scratch;
}

//  One optimizer update of our values into the other block, which becomes
//  current: with the gradients of push `msg`, or (msg NULL) with accum.
//  With --wire-dtype bf16 it goes a block of S_BLOCK floats at a time, each
//  widened into scratch, applied and its values cast for the replies while
//  they are in cache (three passes over memory would cost what the halved
//  bytes save).
#define S_BLOCK 4096

static void
s_update (s_ps_t *self, const za_wire_msg_t *msg)
{
    int next = 1 - self->current;
    za_wire_lease_wait (&self->lease [next]);
    za_wire_lease_wait (&self->slot_lease);
    const float *in = self->values [self->current];
    float *out = self->values [next];
    int low = self->low [next] != NULL;
    int slot_count = za_optim_slot_count (self->optim.kind);
    for (int i = 0; i < self->part_count; i++) {
        size_t at = self->part_at [i];
        size_t n = self->placement.parts [self->parts [i]].size;
        const za_wire_tensor_t *t = msg && self->pushed [i] >= 0
                                  ? &msg->tensors [self->pushed [i]]: NULL;
        const float *grads = msg? (t && t->dtype == ZA_DTYPE_F32? s_floats_of (self, t): NULL)
                                : self->accum + at;
        for (size_t b = 0; b < n; b += low? S_BLOCK: n) {
            size_t len = low && n - b > S_BLOCK? S_BLOCK: n - b;
            if (msg && !t)
                memcpy (out + at + b, in + at + b, len * sizeof (float));  //  frozen: as it is
            else {
                float *slots [ZA_OPTIM_MAX_SLOTS];
                for (int s = 0; s < slot_count; s++)
                    slots [s] = self->slots [s] + at + b;
                const float *g = grads? grads + b: self->scratch;
                if (!grads)
                    za_bf16_to_f32 ((const char *) t->data + b * sizeof (uint16_t),
                                    self->scratch, len);
                za_optim_apply_into (&self->optim, self->updates + 1, in + at + b, out + at + b,
                                     g, slots, len);
            }
            if (low)
                za_f32_to_bf16 (out + at + b, self->low [next] + at + b, len);
        }
    }
    self->current = next;
    self->updates++;
}

// ---------------------------------------------------------------------------
//  ps-sync: the mean of `aggregate` pushes of one step, applied once

//  Answers every waiting pusher: the values now (or, with `done`, that
//  training is over), and forgets them.
static void
s_answer_waiting (s_ps_t *self, int done)
{
    s_waiter_t *waiter;
    while (self->waiting && (waiter = (s_waiter_t *) zlist_pop (self->waiting))) {
        if (done)
            s_reply_error (self, waiter->routing_id, waiter->seq, "done", "training is over");
        else
            s_reply_values (self, waiter->routing_id, waiter->seq, waiter->task);
        zframe_destroy (&waiter->routing_id);
        free (waiter);
    }
}

//  Starts the next step's sum.
static void
s_sync_reset (s_ps_t *self)
{
    if (!self->accum)
        return;
    memset (self->accum, 0, (self->floats? self->floats: 1) * sizeof (float));
    memset (self->contributed, 0, sizeof self->contributed);
    self->aggregated = 0;
}

//  A checked push under ps-sync.
static void
s_sync_push (s_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    char why [256];
    if (msg->step > self->updates) {
        //  Computed on values of a step this ps no longer holds: the chief
        //  gave every ps an earlier state (a ps was restarted) after the
        //  pusher had taken the later one. Dropped; the pusher pulls.
        snprintf (why, sizeof why, "the ps went back to step %" PRId64 " (a ps was "
                  "restarted); the push was computed at step %" PRId64 ": pull the values "
                  "again", self->updates, msg->step);
        s_reply_error (self, routing_id, msg->seq, "rewound", why);
        return;
    }
    if (msg->step < 0 || self->contributed [msg->task]) {
        snprintf (why, sizeof why, "a ps-sync push needs the step of the values it was "
                  "computed on, once per task (task %d, step %" PRId64 ")", msg->task,
                  msg->step);
        s_reply_error (self, routing_id, msg->seq, "bad_request", why);
        return;
    }
    if (msg->step < self->updates) {
        //  Computed on older values (a backup worker, or a slow one): dropped,
        //  counted, and answered with the values it should have used.
        if (self->stale++ % 100 == 0)
            za_info ("ps %d: a gradient of step %" PRId64 " from task %d came at step %" PRId64
                     ": dropped (%" PRIu64 " so far)", self->config->ps_index, msg->step,
                     msg->task, self->updates, self->stale);
        s_reply_values (self, routing_id, msg->seq, msg->task);
        return;
    }
    for (int i = 0; i < self->part_count; i++) {
        if (self->pushed [i] < 0)
            continue;                       //  a frozen variable's: zero
        const float *grads = s_floats_of (self, &msg->tensors [self->pushed [i]]);
        float *sum = self->accum + self->part_at [i];
        size_t n = self->placement.parts [self->parts [i]].size;
        for (size_t j = 0; j < n; j++)
            sum [j] += grads [j];
    }
    self->contributed [msg->task] = 1;
    s_waiter_t *waiter = (s_waiter_t *) malloc (sizeof *waiter);
    if (waiter) {
        waiter->routing_id = zframe_dup (routing_id);
        waiter->seq = msg->seq;
        waiter->task = msg->task;
        zlist_append (self->waiting, waiter);
    }
    if (++self->aggregated < self->aggregate)
        return;
    for (size_t j = 0; j < self->floats; j++)
        self->accum [j] /= (float) self->aggregate;
    s_update (self, NULL);
    s_sync_reset (self);
    s_answer_waiting (self, 0);
}

//  A push, checked, then applied as the strategy says: at once (ps-async),
//  or summed into its step (ps-sync).
static void
s_push_now (s_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    char why [256];
    if (s_match_push (self, msg, why, sizeof why))
        s_reply_error (self, routing_id, msg->seq, "bad_request", why);
    else
    if (self->aggregate)
        s_sync_push (self, routing_id, msg);
    else {
        s_update (self, msg);
        s_reply_values (self, routing_id, msg->seq, msg->task);
    }
}

//  init: our parts, then each part's slots "<part>/<slot>", then (ps 0)
//  "global_step". Everything is checked before anything changes.
static int
s_init (s_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    char why [256] = "init without an optimizer";
    if (!msg->has_optim || za_optim_config_check (&msg->optim, why, sizeof why)) {
        s_reply_error (self, routing_id, msg->seq, "bad_request", why);
        return -1;
    }
    za_optim_config_t optim = msg->optim;
    //  The chief's schedule is its program's function: ours (the same
    //  program), or the init is refused.
    if (optim.schedule.kind == ZA_SCHEDULE_FUNCTION) {
        const za_schedule_t *own = &self->config->optim.schedule;
        if (own->kind != ZA_SCHEDULE_FUNCTION || !own->fn) {
            s_reply_error (self, routing_id, msg->seq, "bad_request",
                           "init: the chief's learning rate is its program's function, and this "
                           "ps runs a program without one");
            return -1;
        }
        optim.schedule.fn = own->fn;
        optim.schedule.fn_arg = own->fn_arg;
    }
    if (s_check_parts (self, msg, 0, why, sizeof why)) {
        s_reply_error (self, routing_id, msg->seq, "bad_request", why);
        return -1;
    }
    int slot_count = za_optim_slot_count (optim.kind);
    int is_ps0 = self->config->ps_index == 0;
    int expected = self->part_count * (1 + slot_count) + is_ps0;
    //  A last i64 scalar "prefer_offer" (1): a worker's offer of a later step
    //  than the init's wins over the init's values (PROTOCOL.md 7.5).
    int prefer_offer = 0;
    if (msg->tensor_count == expected + 1) {
        const za_wire_tensor_t *t = &msg->tensors [expected];
        int64_t flag = 0;
        if (t->dtype == ZA_DTYPE_I64 && t->ndim == 0 && t->bytes == sizeof flag)
            memcpy (&flag, t->data, sizeof flag);
        if (strcmp (t->name, "prefer_offer") || flag != 1) {
            s_reply_error (self, routing_id, msg->seq, "bad_request",
                           "init: an extra tensor must be the i64 scalar prefer_offer = 1");
            return -1;
        }
        prefer_offer = 1;
    }
    else
    if (msg->tensor_count != expected) {
        snprintf (why, sizeof why, "init carries %d tensors, ps %d expects %d",
                  msg->tensor_count, self->config->ps_index, expected);
        s_reply_error (self, routing_id, msg->seq, "bad_request", why);
        return -1;
    }
    for (int s = 0; s < slot_count; s++)
        for (int i = 0; i < self->part_count; i++) {
            const za_wire_tensor_t *t = &msg->tensors [self->part_count * (1 + s) + i];
            char name [ZA_WIRE_NAME_MAX];
            snprintf (name, sizeof name, "%s/%s", s_part_name (self, i),
                      za_optim_slot_name (optim.kind, s));
            if (strcmp (t->name, name)
                || !s_is_part (self, t, &self->placement.parts [self->parts [i]],
                               ZA_DTYPE_F32)) {
                snprintf (why, sizeof why, "init: slot tensor '%s' where '%s' belongs",
                          t->name, name);
                s_reply_error (self, routing_id, msg->seq, "bad_request", why);
                return -1;
            }
        }
    if (msg->step < 0) {
        s_reply_error (self, routing_id, msg->seq, "bad_request", "init without a step");
        return -1;
    }
    if (is_ps0) {
        //  ps 0 also gets global_step, which must agree with step.
        const za_wire_tensor_t *t = &msg->tensors [expected - 1];
        int64_t step = -1;
        if (t->dtype == ZA_DTYPE_I64 && t->ndim == 0 && t->bytes == sizeof step)
            memcpy (&step, t->data, sizeof step);
        if (strcmp (t->name, "global_step") || step != msg->step) {
            s_reply_error (self, routing_id, msg->seq, "bad_request",
                           "init: ps 0 needs an i64 scalar global_step equal to step");
            return -1;
        }
    }
    //  Checked: load it.
    za_wire_lease_wait (&self->lease [0]);
    za_wire_lease_wait (&self->lease [1]);
    za_wire_lease_wait (&self->slot_lease);
    self->optim = optim;
    for (int s = 0; s < ZA_OPTIM_MAX_SLOTS; s++)
        if (s < slot_count && !self->slots [s])
            self->slots [s] = (float *) za_alloc ((self->floats? self->floats: 1) * sizeof (float));
    for (int i = 0; i < self->part_count; i++) {
        memcpy (self->values [0] + self->part_at [i], msg->tensors [i].data,
                msg->tensors [i].bytes);
        for (int s = 0; s < slot_count; s++) {
            const za_wire_tensor_t *t = &msg->tensors [self->part_count * (1 + s) + i];
            memcpy (self->slots [s] + self->part_at [i], t->data, t->bytes);
        }
    }
    self->updates = msg->step;
    int offered = prefer_offer && self->offer && self->offer_step > msg->step;
    if (offered) {
        memcpy (self->values [0], self->offer, self->floats * sizeof (float));
        self->updates = self->offer_step;
    }
    s_loaded (self);
    za_free (self->offer);
    self->offer = NULL;
    self->offer_step = -1;
    //  A step being summed is gone with the old state: its pushers go on
    //  from the new values.
    s_sync_reset (self);
    za_info ("ps %d: initialised at step %" PRId64 "%s (%d parts, %zu floats, %s)",
             self->config->ps_index, self->updates,
             offered? " with the values a worker offered": "", self->part_count,
             self->floats, za_optim_name (optim.kind));
    za_wire_msg_init (self->out, ZA_OP_INIT_OK);
    self->out->seq = msg->seq;
    self->out->step = s_global_step (self);
    s_reply (self, routing_id, NULL);
    s_answer_waiting (self, 0);
    return 0;
}

static void
s_snapshot (s_ps_t *self, zframe_t *routing_id, uint64_t seq)
{
    za_wire_msg_init (self->out, ZA_OP_SNAPSHOT_DATA);
    self->out->seq = seq;
    self->out->step = s_global_step (self);
    //  Nothing changes while HELD. Snapshots are checkpoints: fp32.
    s_add_parts (self, self->values [self->current], ZA_DTYPE_F32);
    s_add_slots (self);
    self->snapshot_step = s_global_step (self);
    if (self->config->ps_index == 0)
        za_wire_msg_add (self->out, "global_step", ZA_DTYPE_I64, 0, NULL, &self->snapshot_step);
    //  The whole reply, value frames included, travels under the slot lease:
    //  every update waits for it before writing a value block or a slot.
    s_reply (self, routing_id, &self->slot_lease);
}

//  Connections silent longer than a task may be (timeout_secs) are
//  forgotten: a task that comes back after that is a new one anyway.
static void
s_forget_silent (s_ps_t *self, double now)
{
    zlist_t *silent = zlist_new ();
    for (double *last = (double *) zhashx_first (self->peers); last && silent;
         last = (double *) zhashx_next (self->peers))
        if (now - *last > self->config->timeout_secs)
            zlist_append (silent, (void *) zhashx_cursor (self->peers));
    for (const char *key = silent? (const char *) zlist_first (silent): NULL; key;
         key = (const char *) zlist_next (silent)) {
        zhashx_delete (self->links, key);       //  before its key goes with the peer
        zhashx_delete (self->peers, key);
    }
    zlist_destroy (&silent);
}

//  Remembers that connection `peer` spoke now (unless `remember` is 0, or
//  PS_MAX_PEERS that are not silent are known). Returns 1 when it had spoken
//  before.
static int
s_peer_heard (s_ps_t *self, const char *peer, int remember)
{
    double now = za_clock_mono ();
    double *last = (double *) zhashx_lookup (self->peers, peer);
    if (last) {
        *last = now;
        return 1;
    }
    if (remember && zhashx_size (self->peers) >= PS_MAX_PEERS)
        s_forget_silent (self, now);
    if (remember && zhashx_size (self->peers) < PS_MAX_PEERS
        && (last = (double *) malloc (sizeof *last))) {
        *last = now;
        zhashx_insert (self->peers, peer, last);
    }
    return 0;
}

//  The peer's routing id as a key for self->peers.
static void
s_peer_key (zframe_t *routing_id, char *key, size_t size)
{
    static const char digits [] = "0123456789abcdef";
    const byte *id = zframe_data (routing_id);
    size_t n = zframe_size (routing_id);
    if (n > (size - 1) / 2)
        n = (size - 1) / 2;
    for (size_t i = 0; i < n; i++) {
        key [2 * i] = digits [id [i] >> 4];
        key [2 * i + 1] = digits [id [i] & 15];
    }
    key [2 * n] = 0;
}

//  The link of connection `peer`: known, or made when msg carries a word
//  (a peer on this host offers its segment) and fewer than PS_MAX_LINKS
//  are known. NULL: its tensors come as frames.
static za_shm_link_t *
s_link_of (s_ps_t *self, zframe_t *routing_id, const char *peer, zmsg_t *msg)
{
    za_shm_link_t *link = (za_shm_link_t *) zhashx_lookup (self->links, peer);
    char word [ZA_WIRE_MAX_SHM_BYTES + 1];
    if (link || !self->shm || zhashx_size (self->links) >= PS_MAX_LINKS
        || za_wire_peek_shm (msg, word, sizeof word, NULL) <= 0)
        return link;
    link = za_shm_link_new (0, 0);
    if (link) {
        za_shm_link_set_bell (link, self->bell);
        za_shm_link_set_route (link, routing_id);
    }
    if (link && zhashx_insert (self->links, peer, link))
        za_shm_link_destroy (&link);
    return link;
}

//  A link's peer said which task it is: a link of that task on another
//  connection is of an earlier life of it (restarted), and goes.
static void
s_link_task (s_ps_t *self, const char *peer, za_shm_link_t *link, int task)
{
    za_shm_link_set_task (link, task);
    zlist_t *gone = zlist_new ();
    for (za_shm_link_t *other = (za_shm_link_t *) zhashx_first (self->links); other && gone;
         other = (za_shm_link_t *) zhashx_next (self->links))
        if (other != link && task >= 0 && za_shm_link_task (other) == task)
            zlist_append (gone, (void *) zhashx_cursor (self->links));
    for (const char *key = gone? (const char *) zlist_first (gone): NULL; key;
         key = (const char *) zlist_next (gone))
        if (strcmp (key, peer))
            zhashx_delete (self->links, key);
    zlist_destroy (&gone);
}

// ---------------------------------------------------------------------------
//  The actions of the state table. Each answers its request (when there is
//  one) and returns 0 to take the row's next state, or -1 to stay.

//  What an action works on: a request (routing id, decoded message, the raw
//  message for queueing) or one of our loop's events (all NULL).
typedef struct {
    zframe_t *routing_id;
    const za_wire_msg_t *msg;
    zmsg_t **raw_p;
    int known;                  //  its connection has sent us requests before
} s_request_t;

typedef int (s_action_fn) (s_ps_t *self, s_request_t *request);

static int
s_refuse (s_ps_t *self, s_request_t *request, const char *code, const char *message)
{
    s_reply_error (self, request->routing_id, request->msg->seq, code, message);
    return -1;
}

//  A ping: pong. We have nothing to answer the request its sender waits for
//  when we wait for init, or when this connection never sent us one (see
//  the top of this file): it learns so here.
static int
s_pong (s_ps_t *self, s_request_t *request)
{
    za_wire_msg_init (self->out, ZA_OP_PONG);
    self->out->seq = request->msg->seq;
    self->out->step = s_global_step (self);
    if (self->state == S_WAIT_INIT || !request->known)
        snprintf (self->out->code, sizeof self->out->code, "not_ready");
    s_reply (self, request->routing_id, NULL);
    return 0;
}

//  bye: a task leaving. Counted once per task of the cluster, however often
//  it says so; one that names no task of the cluster is refused.
static int
s_bye (s_ps_t *self, s_request_t *request)
{
    if (!s_task_ok (self, request->msg))
        return s_refuse (self, request, "bad_request", "bye needs its task, a worker index "
                         "of this cluster");
    char peer [2 * 255 + 1];
    s_peer_key (request->routing_id, peer, sizeof peer);
    zhashx_delete (self->peers, peer);
    zhashx_delete (self->links, peer);
    if (!self->gone [request->msg->task]) {
        self->gone [request->msg->task] = 1;
        self->byes++;
    }
    za_wire_msg_init (self->out, ZA_OP_BYE_OK);
    self->out->seq = request->msg->seq;
    s_reply (self, request->routing_id, NULL);
    return 0;
}

static int
s_init_action (s_ps_t *self, s_request_t *request)
{
    return s_init (self, request->routing_id, request->msg);
}

static int
s_refuse_busy (s_ps_t *self, s_request_t *request)
{
    return s_refuse (self, request, "busy", "held for a snapshot");
}

static int
s_refuse_done (s_ps_t *self, s_request_t *request)
{
    return s_refuse (self, request, "done", "training is over");
}

static int
s_refuse_not_ready (s_ps_t *self, s_request_t *request)
{
    //  The step of the best offer we hold (-1: none) tells a restarted chief
    //  that a worker's values are here (PROTOCOL.md 7.5).
    za_wire_msg_init (self->out, ZA_OP_ERROR);
    self->out->seq = request->msg->seq;
    self->out->step = self->offer_step;
    snprintf (self->out->code, sizeof self->out->code, "not_ready");
    snprintf (self->out->error, sizeof self->out->error, "waiting for the chief's init");
    s_reply (self, request->routing_id, NULL);
    return -1;
}

//  A worker's values of our shard while we have no state: the freshest
//  (by step) is kept for the chief's init. Never answered.
static int
s_offer_action (s_ps_t *self, s_request_t *request)
{
    const za_wire_msg_t *msg = request->msg;
    char why [256];
    if (s_check_parts (self, msg, 1, why, sizeof why) || msg->step < 0) {
        self->dropped++;
        za_info ("ps %d: an offer dropped: %s", self->config->ps_index,
                 msg->step < 0? "no step": why);
        return -1;
    }
    if (msg->step <= self->offer_step)
        return 0;
    if (!self->offer)
        self->offer = (float *) za_alloc ((self->floats? self->floats: 1) * sizeof (float));
    if (!self->offer)
        return -1;
    for (int i = 0; i < self->part_count; i++)
        memcpy (self->offer + self->part_at [i], msg->tensors [i].data, msg->tensors [i].bytes);
    self->offer_step = msg->step;
    za_info ("ps %d: worker %d offers its values of step %" PRId64, self->config->ps_index,
             msg->task, msg->step);
    return 0;
}

//  An offer to a ps that has a state: of no use, and never answered.
static int
s_ignore (s_ps_t *self, s_request_t *request)
{
    (void) self;
    (void) request;
    return 0;
}

static int
s_refuse_not_held (s_ps_t *self, s_request_t *request)
{
    return s_refuse (self, request, "bad_request", "snapshot needs hold first");
}

static int
s_refuse_op (s_ps_t *self, s_request_t *request)
{
    return s_refuse (self, request, "bad_request", "a ps does not serve this op");
}

static int
s_values (s_ps_t *self, s_request_t *request)
{
    s_reply_values (self, request->routing_id, request->msg->seq, request->msg->task);
    return 0;
}

static int
s_push (s_ps_t *self, s_request_t *request)
{
    if (!s_task_ok (self, request->msg))
        return s_refuse (self, request, "bad_request", "push needs its task, a worker index "
                         "of this cluster");
    s_push_now (self, request->routing_id, request->msg);
    return 0;
}

//  A push while held: the whole message (routing id first) waits for release.
static int
s_queue (s_ps_t *self, s_request_t *request)
{
    if (!s_task_ok (self, request->msg))
        return s_refuse (self, request, "bad_request", "push needs its task, a worker index "
                         "of this cluster");
    zmsg_t *raw = *request->raw_p;
    zmsg_pushmem (raw, zframe_data (request->routing_id), zframe_size (request->routing_id));
    zlist_append (self->queued, raw);
    *request->raw_p = NULL;
    return 0;
}

static int
s_hold (s_ps_t *self, s_request_t *request)
{
    zframe_destroy (&self->holder);
    self->holder = zframe_dup (request->routing_id);
    za_peer_init (&self->holder_peer, self->config->heartbeat, za_clock_mono ());
    za_wire_msg_init (self->out, ZA_OP_HELD);
    self->out->seq = request->msg->seq;
    self->out->step = s_global_step (self);
    s_reply (self, request->routing_id, NULL);
    return 0;
}

static int
s_snapshot_action (s_ps_t *self, s_request_t *request)
{
    s_snapshot (self, request->routing_id, request->msg->seq);
    return 0;
}

//  Leaves HELD: queued pushes are applied in arrival order, or refused when
//  stopping.
static void
s_end_hold (s_ps_t *self, int stop)
{
    zframe_destroy (&self->holder);
    if (stop) {
        self->stop_time = za_clock_mono ();
        s_answer_waiting (self, 1);         //  their step will never be made
    }
    zmsg_t *queued;
    while ((queued = (zmsg_t *) zlist_pop (self->queued))) {
        zframe_t *id = zmsg_pop (queued);
        if (za_wire_decode (queued, self->in) == 0) {
            if (stop)
                s_reply_error (self, id, self->in->seq, "done", "training is over");
            else
                s_push_now (self, id, self->in);
        }
        zframe_destroy (&id);
        zmsg_destroy (&queued);
    }
}

//  release and stop: the answer first, then the queued pushes.
static int
s_release_or_stop (s_ps_t *self, s_request_t *request, za_op_t reply)
{
    za_wire_msg_init (self->out, reply);
    self->out->seq = request->msg->seq;
    self->out->step = s_global_step (self);
    s_reply (self, request->routing_id, NULL);
    s_end_hold (self, reply == ZA_OP_STOPPING);
    return 0;
}

static int
s_release (s_ps_t *self, s_request_t *request)
{
    return s_release_or_stop (self, request, ZA_OP_RELEASED);
}

static int
s_stop (s_ps_t *self, s_request_t *request)
{
    return s_release_or_stop (self, request, ZA_OP_STOPPING);
}

static int
s_lapse (s_ps_t *self, s_request_t *request)
{
    (void) request;
    za_info ("ps %d: the holder went silent for %.1f s (%d heartbeats): hold released",
             self->config->ps_index, za_peer_silence (&self->holder_peer, za_clock_mono ()),
             self->holder_peer.beat.liveness);
    s_end_hold (self, 0);
    return 0;
}

static int s_load_final (s_ps_t *self, s_request_t *request);

//  The ps as a state table (docs/PROTOCOL.md section 8). The first row that
//  matches the state and the event wins.
static const struct {
    s_state_t state;
    int event;
    s_action_fn *action;
    s_state_t next;
} s_transitions [] = {
    //  state         event              action               next
    {S_ANY,         ZA_OP_PING,        s_pong,              S_SAME},
    {S_ANY,         ZA_OP_BYE,         s_bye,               S_SAME},
    {S_WAIT_INIT,   ZA_OP_INIT,        s_init_action,       S_READY},
    {S_READY,       ZA_OP_INIT,        s_init_action,       S_READY},
    {S_HELD,        ZA_OP_INIT,        s_refuse_busy,       S_HELD},
    {S_WAIT_INIT,   E_FINAL_FOUND,     s_load_final,        S_STOPPING},
    {S_WAIT_INIT,   ZA_OP_OFFER,       s_offer_action,      S_WAIT_INIT},
    {S_ANY,         ZA_OP_OFFER,       s_ignore,            S_SAME},
    {S_WAIT_INIT,   E_ANY,             s_refuse_not_ready,  S_WAIT_INIT},
    {S_STOPPING,    E_ANY,             s_refuse_done,       S_STOPPING},
    {S_READY,       ZA_OP_PULL,        s_values,            S_READY},
    {S_HELD,        ZA_OP_PULL,        s_values,            S_HELD},
    {S_READY,       ZA_OP_PUSH,        s_push,              S_READY},
    {S_HELD,        ZA_OP_PUSH,        s_queue,             S_HELD},
    {S_READY,       ZA_OP_HOLD,        s_hold,              S_HELD},
    {S_HELD,        ZA_OP_HOLD,        s_hold,              S_HELD},
    {S_READY,       ZA_OP_SNAPSHOT,    s_refuse_not_held,   S_READY},
    {S_HELD,        ZA_OP_SNAPSHOT,    s_snapshot_action,   S_HELD},
    {S_READY,       ZA_OP_RELEASE,     s_release,           S_READY},
    {S_HELD,        ZA_OP_RELEASE,     s_release,           S_READY},
    {S_HELD,        E_HOLDER_SILENT,   s_lapse,             S_READY},
    {S_READY,       ZA_OP_STOP,        s_stop,              S_STOPPING},
    {S_HELD,        ZA_OP_STOP,        s_stop,              S_STOPPING},
    {S_ANY,         E_ANY,             s_refuse_op,         S_SAME},
};

//  Runs the row of (state, event). Loop events carry no request: a row
//  that would answer one is never taken for them.
static void
s_dispatch (s_ps_t *self, int event, s_request_t *request)
{
    size_t rows = sizeof s_transitions / sizeof s_transitions [0];
    for (size_t r = 0; r < rows; r++) {
        if ((s_transitions [r].state != S_ANY && s_transitions [r].state != self->state)
            || (s_transitions [r].event != E_ANY && s_transitions [r].event != event))
            continue;
        if (!request->msg && s_transitions [r].event == E_ANY)
            return;             //  a loop event this state does not take
        s_state_t was = self->state;
        if (s_transitions [r].action (self, request) == 0 && s_transitions [r].next != S_SAME)
            self->state = s_transitions [r].next;
        if (self->state != was && self->state == S_STOPPING && !self->stop_time)
            self->stop_time = za_clock_mono ();
        return;
    }
}

//  Handles one decoded request. `raw` is the whole message (for queueing).
static void
s_handle (s_ps_t *self, zframe_t *routing_id, zmsg_t **raw_p)
{
    char peer [2 * 255 + 1];
    s_peer_key (routing_id, peer, sizeof peer);
    s_request_t request = {.routing_id = routing_id, .msg = self->in, .raw_p = raw_p,
                           .known = s_peer_heard (self, peer, self->in->op != ZA_OP_BYE)};
    s_dispatch (self, (int) self->in->op, &request);
}

//  Loads our parts' values from a checkpoint (names are the variables').
//  Returns 0, or -1 with an error when it does not hold this model.
static int
s_load_values (s_ps_t *self, const za_checkpoint_t *ckpt)
{
    for (int i = 0; i < self->part_count; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        const za_var_t *var = &self->vars.vars [part->var];
        const za_ckpt_tensor_t *t = za_checkpoint_find (ckpt, var->name);
        uint64_t bytes = 0;
        if (!t || t->dtype != ZA_DTYPE_F32
            || za_tensor_bytes (t->dtype, t->ndim, t->shape, &bytes)
            || bytes != var->size * sizeof (float))
            return za_error ("ps %d: '%s' holds no %zu floats of '%s'",
                             self->config->ps_index, za_checkpoint_filename (ckpt),
                             var->size, var->name);
        memcpy (self->values [0] + self->part_at [i], (const float *) t->data + part->offset,
                part->size * sizeof (float));
    }
    return 0;
}

//  Looks in model_dir for a checkpoint at or past max_steps (training is
//  over) that was not tried before. When there is one, it is an event of
//  the state table: in WAIT_INIT we load it and answer done from then on.
static void
s_look_for_final (s_ps_t *self, double now)
{
    const za_role_config_t *config = self->config;
    self->final_checked = now;
    if (!config->run.model_dir || config->max_steps <= 0)
        return;
    int64_t *steps = NULL;
    int count = za_checkpoint_list (config->run.model_dir, &steps);
    int64_t newest = count > 0? steps [count - 1]: -1;
    free (steps);
    if (newest < config->max_steps || newest == self->final_tried)
        return;
    self->final_step = newest;
    s_request_t none = {NULL, NULL, NULL, 0};
    s_dispatch (self, E_FINAL_FOUND, &none);
}

//  The final checkpoint found: our parts' values from it, at its step.
static int
s_load_final (s_ps_t *self, s_request_t *request)
{
    (void) request;
    const za_role_config_t *config = self->config;
    char *path = za_checkpoint_path (config->run.model_dir, self->final_step);
    za_checkpoint_t *ckpt = path? za_checkpoint_load (path): NULL;
    free (path);
    if (!ckpt || s_load_values (self, ckpt)) {
        za_info ("ps %d: cannot use the final checkpoint (step %" PRId64 "): %s; waiting "
                 "for the chief's init", config->ps_index, self->final_step, za_last_error ());
        self->final_tried = self->final_step;
        za_checkpoint_destroy (&ckpt);
        return -1;
    }
    s_loaded (self);
    self->updates = za_checkpoint_step (ckpt);
    za_info ("ps %d: '%s' holds the final checkpoint (step %" PRId64 " >= max_steps %" PRId64
             "): training is over; answering done", config->ps_index, config->run.model_dir,
             self->updates, config->max_steps);
    za_checkpoint_destroy (&ckpt);
    return 0;
}

//  What watchers see: relaxed stores, once per poll turn.
static void
s_publish (s_ps_t *self, double now)
{
    za_role_stats_t *stats = self->config->stats;
    if (!stats)
        return;
    za_role_stats_publish (stats, self->state == S_WAIT_INIT? ZA_ROLE_WAITING
                                                              : ZA_ROLE_RUNNING, now);
    atomic_store_explicit (&stats->global_step, s_global_step (self), memory_order_relaxed);
}

static uint32_t
s_crc (s_ps_t *self)
{
    uLong crc = crc32 (0L, Z_NULL, 0);
    if (self->floats)
        crc = crc32 (crc, (const Bytef *) self->values [self->current],
                     (uInt) (self->floats * sizeof (float)));
    return (uint32_t) crc;
}

//  A whole message of `link`'s that cannot be used (its record or its
//  header): the link stops reading that segment, and the sender hears
//  "shm_unreadable" for its seq, so that it sends the request again as
//  frames (the answer's word no longer says "ok").
static void
s_refuse_whole (s_ps_t *self, za_shm_link_t *link)
{
    za_shm_link_refuse (link);
    zframe_t *route = za_shm_link_route (link);
    if (route && za_shm_link_taken_seq (link))
        s_reply_error (self, route, za_shm_link_taken_seq (link), "shm_unreadable",
                       "this ps cannot use the message in your shared memory: send frames");
}

//  One message from peer `routing_id` (key `peer`, its link or NULL): its
//  tensors in frames (got 0) or held in place in the link's record (got 1;
//  -1: they cannot be had); `whole` when it came whole through the link's
//  segment. Decoded, handled, and destroyed.
static void
s_on_message (s_ps_t *self, zframe_t *routing_id, const char *peer, za_shm_link_t *link,
              zmsg_t **msg_p, int got, const void *const *held, const size_t *sizes, int count,
              int whole, double now)
{
    zmsg_t *msg = *msg_p;
    if (routing_id && got >= 0
        && (got? za_wire_decode_payloads (msg, held, sizes, count, self->in)
               : za_wire_decode (msg, self->in)) == 0) {
        if (link && za_shm_link_task (link) != self->in->task)
            s_link_task (self, peer, link, self->in->task);
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
            s_refuse_whole (self, link);
        else
        if (routing_id && msg && za_shm_link_names_record (msg, &seq))
            s_reply_error (self, routing_id, seq, "shm_unreadable",
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
s_on_bell (s_ps_t *self, double now)
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

void
za_ps_actor (zsock_t *pipe, void *args)
{
    const za_role_config_t *config = (const za_role_config_t *) args;
    s_ps_t *self = s_ps_new (config, pipe);
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
    int rc = 0, running = 1;
    while (running && !zsys_interrupted) {
        //  (Interrupted, it leaves the last pass's revents: nothing is ready.)
        if (zmq_poll (items, self->bell? 3: 2, POLL_MS) < 0) {
            if (zmq_errno () != EINTR)
                break;
            continue;
        }
        double now = za_clock_mono ();
        if (items [0].revents & ZMQ_POLLIN) {
            char *command = zstr_recv (pipe);
            running = !(command && streq (command, "$TERM"));
            zstr_free (&command);
            if (!running) {
                s_ps_destroy (&self);
                za_role_stats_publish (config->stats, ZA_ROLE_DONE, za_clock_mono ());
                return;
            }
        }
        if (items [1].revents & ZMQ_POLLIN) {
            zmsg_t *msg = zmsg_recv (self->router);
            if (!msg)
                break;
            zframe_t *routing_id = zmsg_pop (msg);
            char peer [2 * 255 + 1];
            za_shm_link_t *link = NULL;
            if (routing_id) {
                s_peer_key (routing_id, peer, sizeof peer);
                link = s_link_of (self, routing_id, peer, msg);
            }
            //  Tensors through shared memory are read where they are.
            const void *const *held = NULL;
            const size_t *sizes = NULL;
            int count = 0;
            int got = link? za_shm_link_receive_in_place (link, msg, &held, &sizes, &count): 0;
            s_on_message (self, routing_id, peer, link, &msg, got, held, sizes, count, 0, now);
            zframe_destroy (&routing_id);
        }
        if (self->bell && (items [2].revents & ZMQ_POLLIN))
            s_on_bell (self, now);
        s_publish (self, now);
        if (self->state == S_HELD && za_peer_expired (&self->holder_peer, now)) {
            s_request_t none = {NULL, NULL, NULL, 0};
            s_dispatch (self, E_HOLDER_SILENT, &none);
        }
        if (self->state == S_WAIT_INIT && now - self->final_checked >= FINAL_CHECK_SECS)
            s_look_for_final (self, now);
        if (self->state == S_STOPPING && self->byes >= config->num_workers) {
            running = 0;
            break;
        }
        if (now - (self->state == S_STOPPING? self->stop_time: self->last_heard)
            > config->timeout_secs) {
            if (self->state == S_STOPPING) {
                za_info ("ps %d: %d of %d workers said bye; leaving after %.0f s",
                         config->ps_index, self->byes, config->num_workers,
                         config->timeout_secs);
                break;
            }
            za_error ("ps %d: %s within %.0f s; giving up", config->ps_index,
                      self->state == S_WAIT_INIT? "no chief initialised this ps"
                                                : "no worker was heard from",
                      config->timeout_secs);
            rc = 1;
            break;
        }
    }
    uint32_t crc = s_crc (self);
    za_info ("ps %d: done at step %" PRId64 ", %zu floats, crc32 %08x, %" PRIu64
             " bad messages dropped", config->ps_index, s_global_step (self), self->floats,
             crc, self->dropped);
    if (self->aggregate)
        za_info ("ps %d: ps-sync: %d gradients per step, %" PRIu64 " stale ones dropped",
                 config->ps_index, self->aggregate, self->stale);
    int64_t step = s_global_step (self), floats = (int64_t) self->floats;
    s_ps_destroy (&self);
    za_role_stats_publish (config->stats, rc? ZA_ROLE_FAILED: ZA_ROLE_DONE, za_clock_mono ());
    za_role_report_done (pipe, rc, step, crc, floats);
}
