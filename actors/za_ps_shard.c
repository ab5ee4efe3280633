/*  za_ps_shard.c: the parameter server's shard: its values (two blocks, see
    za_ps.c) and optimizer slots, the checks of what comes in, the update,
    and what goes out: values, slots, snapshots, errors.  */
#include "za_ps_private.h"
#include "za/za_trace.h"

const char *
za_ps_part_name (za_ps_t *self, int i)
{
    return self->placement.parts [self->parts [i]].name;
}

int64_t
za_ps_global_step (za_ps_t *self)
{
    return self->updates;
}

//  Replies to `routing_id` with self->out. A peer that is gone is not an
//  error worth more than a line.
void
za_ps_reply (za_ps_t *self, zframe_t *routing_id, za_wire_lease_t *lease)
{
    self->out->ps = self->config->ps_index;
    za_shm_link_t *link = NULL;
    if (zhashx_size (self->links)) {
        char peer [2 * 255 + 1];
        za_ps_peer_key (routing_id, peer, sizeof peer);
        link = (za_shm_link_t *) zhashx_lookup (self->links, peer);
    }
    if (link? za_shm_link_send (link, self->router, routing_id, self->out, lease)
            : za_wire_send (self->router, routing_id, self->out, lease))
        za_info ("ps %d: reply to a departed peer dropped", self->config->ps_index);
}

void
za_ps_reply_error (za_ps_t *self, zframe_t *routing_id, uint64_t seq, const char *code,
                   const char *message)
{
    za_wire_msg_init (self->out, ZA_OP_ERROR);
    self->out->seq = seq;
    self->out->step = za_ps_global_step (self);
    snprintf (self->out->code, sizeof self->out->code, "%s", code);
    snprintf (self->out->error, sizeof self->out->error, "%s", message);
    za_ps_reply (self, routing_id, NULL);
}

void
za_ps_reply_over (za_ps_t *self, zframe_t *routing_id, uint64_t seq)
{
    za_ps_reply_error (self, routing_id, seq, self->preempted? "preempted": "done",
                       self->preempted? "training stopped for preemption: the job's command "
                                        "run again goes on": "training is over");
}

//  A whole message of `link`'s that cannot be used (its record or its
//  header): the link stops reading that segment, and the sender hears
//  "shm_unreadable" for its seq, so that it sends the request again as
//  frames (the answer's word no longer says "ok").
void
za_ps_refuse_whole (za_ps_t *self, za_shm_link_t *link)
{
    za_shm_link_refuse (link);
    zframe_t *route = za_shm_link_route (link);
    if (route && za_shm_link_taken_seq (link))
        za_ps_reply_error (self, route, za_shm_link_taken_seq (link), "shm_unreadable",
                           "this ps cannot use the message in your shared memory: send frames");
}

//  Puts our parts (from block, of dtype F32 or BF16) into self->out as tensors.
static void
s_add_parts (za_ps_t *self, const void *block, za_dtype_t dtype)
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
s_reply_block (za_ps_t *self)
{
    int c = self->current;
    return self->low [c]? (const void *) self->low [c]: self->values [c];
}

//  Block 0, just loaded (an init, a checkpoint), cast for the replies.
void
za_ps_loaded (za_ps_t *self)
{
    self->current = 0;
    if (self->low [0])
        za_f32_to_bf16 (self->values [0], self->low [0], self->floats);
}

//  Puts our optimizer slots into self->out as "<part>/<slot>" tensors.
static void
s_add_slots (za_ps_t *self)
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
s_sends_slots (za_ps_t *self, int32_t task)
{
    return self->aggregate && task == 0 && za_optim_slot_count (self->optim.kind) > 0;
}

void
za_ps_reply_values (za_ps_t *self, zframe_t *routing_id, uint64_t seq, int32_t task)
{
    za_wire_msg_init (self->out, ZA_OP_VALUES);
    self->out->seq = seq;
    self->out->step = za_ps_global_step (self);
    s_add_parts (self, s_reply_block (self), self->config->wire_dtype);
    za_ps_reply (self, routing_id, &self->lease [self->current]);
    if (s_sends_slots (self, task)) {
        //  The slots change in place: they travel under the slot lease,
        //  which every update waits for (as a snapshot's do).
        za_wire_msg_init (self->out, ZA_OP_SLOTS);
        self->out->seq = seq;
        self->out->step = za_ps_global_step (self);
        s_add_slots (self);
        za_ps_reply (self, routing_id, &self->slot_lease);
    }
}

//  1 when tensor t is part `part`'s: of dtype `dtype` (F32, or a push's
//  the job's --wire-dtype) and its shape (its variable's, or [size] when the
//  variable is split). A wrong shape of the right byte count is as wrong
//  as a wrong count (docs/PROTOCOL.md 9).
int
za_ps_is_part (za_ps_t *self, const za_wire_tensor_t *t, const za_part_t *part,
               za_dtype_t dtype)
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
int
za_ps_check_parts (za_ps_t *self, const za_wire_msg_t *msg, int exact, char *why, size_t size)
{
    if (msg->tensor_count < self->part_count
        || (exact && msg->tensor_count != self->part_count)) {
        snprintf (why, size, "%d tensors for %d parts", msg->tensor_count, self->part_count);
        return -1;
    }
    for (int i = 0; i < self->part_count; i++) {
        const za_wire_tensor_t *t = &msg->tensors [i];
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        if (strcmp (t->name, part->name) != 0 || !za_ps_is_part (self, t, part, ZA_DTYPE_F32)) {
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
int
za_ps_match_push (za_ps_t *self, const za_wire_msg_t *msg, char *why, size_t size)
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
                snprintf (why, size, "tensor %d ('%s') is %s; this job's gradients travel as "
                          "%s (--wire-dtype %s)", t, part->name,
                          s_dtype_text (msg->tensors [t].dtype), s_dtype_text (wire),
                          wire == ZA_DTYPE_BF16? "bf16": "fp32");
                return -1;
            }
            if (!za_ps_is_part (self, &msg->tensors [t], part, wire)) {
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
int
za_ps_task_ok (za_ps_t *self, const za_wire_msg_t *msg)
{
    return msg->task >= 0 && msg->task < self->config->num_workers;
}

//  A received float tensor, aligned for the loops (frames of a few bytes
//  live inside libzmq's message and need not be 4-byte aligned); a bf16
//  one widened to fp32.
const float *
za_ps_floats_of (za_ps_t *self, const za_wire_tensor_t *t)
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
//  current: with the gradients of push `msg`, or (msg NULL) with accum. A
//  part without a gradient (frozen, or under ps-sync none summed) is copied
//  as it is: no decay, no momentum, its slots untouched.
//  With --wire-dtype bf16 it goes a block of S_BLOCK floats at a time, each
//  widened into scratch, applied and its values cast for the replies while
//  they are in cache (three passes over memory would cost what the halved
//  bytes save).
#define S_BLOCK 4096

void
za_ps_update (za_ps_t *self, const za_wire_msg_t *msg)
{
    double start = za_trace_on ()? za_clock_mono (): 0;
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
        const float *grads = !msg? self->accum + at
                           : t && t->dtype == ZA_DTYPE_F32? za_ps_floats_of (self, t): NULL;
        for (size_t b = 0; b < n; b += low? S_BLOCK: n) {
            size_t len = low && n - b > S_BLOCK? S_BLOCK: n - b;
            if (msg? !t: !self->summed [i])         //  frozen, or no gradient: as it is
                memcpy (out + at + b, in + at + b, len * sizeof (float));
            else {
                float *slots [ZA_OPTIM_MAX_SLOTS];
                for (int s = 0; s < slot_count; s++)
                    slots [s] = self->slots [s] + at + b;
                const float *g = grads? grads + b: self->scratch;
                if (!grads)
                    za_bf16_to_f32 ((const char *) t->data + b * sizeof (uint16_t),
                                    self->scratch, len);
                self->optim.slots_step = self->slots_from [self->placement.parts
                                                           [self->parts [i]].var];
                za_optim_apply_into (&self->optim, self->updates + 1, in + at + b, out + at + b,
                                     g, slots, len);
            }
            if (low)
                za_f32_to_bf16 (out + at + b, self->low [next] + at + b, len);
        }
    }
    self->current = next;
    self->updates++;
    if (start > 0)
        za_trace_event (ZA_TRACE_APPLY, "apply", start, za_clock_mono (), self->updates - 1);
}

void
za_ps_snapshot (za_ps_t *self, zframe_t *routing_id, uint64_t seq)
{
    za_wire_msg_init (self->out, ZA_OP_SNAPSHOT_DATA);
    self->out->seq = seq;
    self->out->step = za_ps_global_step (self);
    //  Nothing changes while HELD. Snapshots are checkpoints: fp32.
    s_add_parts (self, self->values [self->current], ZA_DTYPE_F32);
    s_add_slots (self);
    self->snapshot_step = za_ps_global_step (self);
    if (self->config->ps_index == 0)
        za_wire_msg_add (self->out, "global_step", ZA_DTYPE_I64, 0, NULL, &self->snapshot_step);
    //  The whole reply, value frames included, travels under the slot lease:
    //  every update waits for it before writing a value block or a slot.
    za_ps_reply (self, routing_id, &self->slot_lease);
}

//  Loads our parts' values from a checkpoint (names are the variables').
//  Returns 0, or -1 with an error when it does not hold this model.
int
za_ps_load_values (za_ps_t *self, const za_checkpoint_t *ckpt)
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
