/*  za_ring_msg.c: one ring link's messages: chunks sent to the right
    neighbour (over ZeroMQ, or its path of its own once on), waited for from
    the left, the last ones drained; and the generations the ring agrees on. */
#include "za_ring_private.h"

#include <errno.h>
#include <unistd.h>

//  Dropped messages are logged the first time and then every this many.
#define RING_DROP_LOG_EVERY 100
//  Same host: a wait for the next record spins this long before it sleeps
//  (a futex the writer wakes), and a sleep lasts at most this long before
//  the ZeroMQ side (resync, the caller's interrupt) and the clock are read.
#define RING_SHM_SPIN_USECS 50
#define RING_SHM_SLEEP_USECS 2000
//  ... or this long while records of our own wait for room on the right.
#define RING_PENDING_SLEEP_USECS 50
//  ... or this long while a segment comes in and a tcp connection of ours
//  waits for room (the futex cannot hear the socket).
#define RING_MIXED_SLEEP_USECS 200

//  A message's step: the generation above the round (RING_ROUND_BITS).
static int64_t
s_step (const za_ring_t *self, int64_t round)
{
    return (self->gen << RING_ROUND_BITS) | (round & ((INT64_C (1) << RING_ROUND_BITS) - 1));
}

//  Sends a resync message to the right: a request (gen 0) or the root's
//  notice of generation gen. It has no number on the link: its seq is the
//  members' change the ring's shape is of (za_ring_reshape's tag).
static int
s_send_resync (za_ring_t *self, int64_t gen)
{
    za_wire_msg_init (self->out, ZA_OP_RESYNC);
    self->out->step = gen;
    self->out->seq = (uint64_t) self->tag;
    self->out->task = self->config.rank;
    if (za_wire_send (self->right, NULL, self->out, NULL))
        return za_error ("ring: rank %d cannot send to %s: %s", self->config.rank,
                         self->right_endpoint, za_last_error ());
    return 0;
}

//  Sends data [0..n) of dtype (F32 or BF16) to the right neighbour as
//  message number self->sent.
int
za_ring_send (za_ring_t *self, za_op_t op, int64_t round, const void *data,
              za_dtype_t dtype, size_t n)
{
    za_ring_direct_answered (self);
    int rc;
    if (self->out_state == DIRECT_ON) {
        za_shm_record_t record = {.op = op, .dtype = dtype, .task = self->config.rank,
                                  .seq = self->sent, .step = s_step (self, round), .data = data,
                                  .bytes = n * za_dtype_size (dtype)};
        rc = za_ring_direct_send (self, &record);
        if (rc && self->out_tcp)
            za_ring_tcp_lost (self, za_last_error ());    //  this one goes over ZeroMQ, below
    }
    if (self->out_state != DIRECT_ON) {
        za_wire_msg_init (self->out, op);
        self->out->seq = self->sent;
        self->out->step = s_step (self, round);
        self->out->task = self->config.rank;
        int64_t shape [1] = {(int64_t) n};
        rc = za_wire_msg_add (self->out, "chunk", dtype, 1, shape, data)
          || za_wire_send (self->right, NULL, self->out, &self->lease);
    }
    if (rc)
        return za_error ("ring: rank %d cannot send to %s: %s", self->config.rank,
                         self->right_endpoint, za_last_error ());
    self->sent++;
    return 0;
}

//  Why the message decoded in self->in is not the one expected next; NULL
//  when it is.
static const char *
s_unexpected (za_ring_t *self, za_op_t op, int64_t round, za_dtype_t dtype, size_t n)
{
    const za_wire_msg_t *in = self->in;
    int left = za_ring_left (self);
    if (in->op != op)
        return "another op";
    if (in->task != left)
        return "not from the left neighbour";
    if (in->step != s_step (self, round))
        return "another round or generation";
    if (in->seq != self->received)
        return "out of turn";
    if (in->tensor_count != 1 || in->tensors [0].dtype != dtype
        || in->tensors [0].bytes != n * za_dtype_size (dtype))
        return in->tensor_count == 1 && in->tensors [0].dtype != dtype
             ? "a chunk of another dtype (every rank must run the same --wire-dtype)"
             : "not the chunk expected";
    return NULL;
}

//  Counts a dropped message, and says so now and then.
static void
s_drop (za_ring_t *self, const char *why)
{
    if (self->dropped++ % RING_DROP_LOG_EVERY == 0)
        za_info ("ring: rank %d dropped a message (%s); %" PRIu64 " dropped so far",
                 self->config.rank, why, self->dropped);
}

//  A resync message from the left (already decoded into self->in) while a
//  call waits: 1 when it ends the call (a new generation from the root, or
//  at the root a request), 0 when the wait goes on (a request passed on, or
//  old news).
static int
s_on_resync (za_ring_t *self)
{
    int64_t gen = self->in->step;
    if (gen > 0) {
        if (self->config.rank == 0 || gen == self->gen)
            return 0;                   //  the root's own notice, or one adopted already
        //  A notice of older members than this ring's, come late by another
        //  connection than the new one's: old news (as in za_ring_resync).
        if ((int64_t) self->in->seq < self->tag)
            return 0;
        self->pending_gen = gen;
        self->pending_tag = (int64_t) self->in->seq;
        return 1;
    }
    if (self->config.rank == 0)
        return 1;                       //  a member (re)joined: a new generation
    if (!self->asked) {
        self->asked = 1;
        s_send_resync (self, 0);
    }
    return 0;
}

//  Lets go of the message in self->in (a frame or a record).
void
za_ring_release (za_ring_t *self)
{
    zmsg_destroy (&self->in_msg);
    if (self->in_is_record == RECORD_OF_SHM && self->in_shm)
        za_shm_release (self->in_shm);
    self->in_is_record = 0;
}

//  Takes the next frame from the left socket if one is there: 1 with it in
//  self->in (or *why set when it did not decode), 0 when none is there or
//  it was the link's own ("shm").
static int
s_take_frame (za_ring_t *self, const char **why)
{
    zmsg_t *msg = (zsock_events (self->left) & ZMQ_POLLIN)? zmsg_recv (self->left): NULL;
    zframe_t *identity = msg? zmsg_pop (msg): NULL;
    int got = 0;
    if (msg) {
        *why = NULL;
        if (za_wire_decode (msg, self->in)) {
            *why = za_last_error ();
            zmsg_destroy (&msg);
            got = 1;
        }
        else
        if (self->in->op == ZA_OP_LINK) {
            za_ring_on_link (self, identity);
            zmsg_destroy (&msg);
        }
        else {
            self->in_msg = msg;
            got = 1;
        }
    }
    zframe_destroy (&identity);
    return got;
}

//  Waits at most timeout_ms for the left socket, the left neighbour's tcp
//  connection, or room on ours while records wait. Returns 0, or -1 when
//  the caller's interrupt has a message (or the context is ending).
static int
s_poll (za_ring_t *self, int timeout_ms)
{
    zmq_pollitem_t items [4] = {{zsock_resolve (self->left), 0, ZMQ_POLLIN, 0}};
    int count = 1, interrupt = -1;
    if (self->config.interrupt) {
        interrupt = count;
        items [count++] = (zmq_pollitem_t) {zsock_resolve (self->config.interrupt), 0,
                                             ZMQ_POLLIN, 0};
    }
    if (self->in_tcp_on)
        items [count++] = (zmq_pollitem_t) {NULL, za_tcp_pipe_fd (self->in_tcp), ZMQ_POLLIN, 0};
    if (self->out_tcp && za_ring_out_waiting (self))
        items [count++] = (zmq_pollitem_t) {NULL, za_tcp_pipe_fd (self->out_tcp), ZMQ_POLLOUT,
                                             0};
    int rc = zmq_poll (items, count, timeout_ms);
    if (rc < 0)
        return errno == EINTR? 0: -1;
    return interrupt >= 0 && (items [interrupt].revents & ZMQ_POLLIN)? -1: 0;
}

//  Waits (until `start` + timeout_secs) for the next message from the left
//  and decodes it into self->in (a frame, or a record of the segment once
//  the link is on). Returns 1 with it there (*why says why not when it is
//  not a message: za_ring_release it all the same), 0 when the time is up, -1
//  when interrupted (SIGINT, the caller's interrupt socket), -2 when
//  config.cancelled said so.
static int
s_next (za_ring_t *self, double start, const char **why)
{
    if (self->in_held) {
        self->in_held = 0;
        *why = NULL;
        return 1;
    }
    za_ring_release (self);
    while (!zsys_interrupted) {
        if ((self->in_on || self->in_tcp_on) && za_ring_take_record (self, why))
            return 1;
        if (s_take_frame (self, why))
            return 1;
        if (za_ring_out_waiting (self) && za_ring_direct_flush (self))
            za_info ("%s", za_last_error ());
        double remaining = self->config.timeout_secs - (za_clock_mono () - start);
        if (remaining <= 0)
            return 0;
        if (self->config.cancelled && self->config.cancelled (self->config.cancel_arg))
            return -2;
        //  While our own records wait for room, look again soon.
        int usecs = remaining > 1000? 1000000000: (int) (remaining * 1e6) + 1;
        if (self->config.cancelled && usecs > RING_CANCEL_LOOK_USECS)
            usecs = RING_CANCEL_LOOK_USECS;
        //  (Room on a tcp connection wakes the poll; a segment's does not.)
        if (za_ring_out_waiting (self) && !self->out_tcp && usecs > RING_PENDING_SLEEP_USECS)
            usecs = RING_PENDING_SLEEP_USECS;
        if (self->in_on) {
            if (usecs > RING_SHM_SLEEP_USECS)
                usecs = RING_SHM_SLEEP_USECS;
            if (self->out_tcp && za_ring_out_waiting (self) && usecs > RING_MIXED_SLEEP_USECS)
                usecs = RING_MIXED_SLEEP_USECS;     //  a segment in, a connection out
            if (za_shm_wait (self->in_shm, RING_SHM_SPIN_USECS, usecs))
                continue;
            usecs = 0;          //  only a look at the sockets
        }
        //  Less than a millisecond (records waiting for room): a look at the
        //  sockets, then a short sleep.
        if (s_poll (self, usecs < 1000? 0: usecs / 1000) < 0)
            return -1;          //  the caller's interrupt
        if (usecs < 1000 && usecs > 0)
            usleep ((useconds_t) usecs);
    }
    return -1;
}

//  1 when the message in self->in is a resync from the left neighbour.
static int
s_is_resync (const za_ring_t *self)
{
    return self->in->op == ZA_OP_RESYNC && self->in->task == za_ring_left (self);
}

//  Handles the resync message in self->in and lets it go: 1 when it ends
//  the call (s_on_resync).
static int
s_resync_taken (za_ring_t *self)
{
    int ends = s_on_resync (self);
    za_ring_release (self);
    return ends;
}

//  Waits for the next message from the left: a chunk of n floats of `op`
//  and `round`. Returns 0 with it in self->in (the chunk is tensors [0];
//  the caller calls za_ring_release), ZA_RING_RESYNC when the ring must be synced
//  again first, or -1 with an error.
int
za_ring_receive (za_ring_t *self, za_op_t op, int64_t round, za_dtype_t dtype, size_t n)
{
    double start = za_clock_mono ();
    const char *why;
    int got, rc = -1;
    while ((got = s_next (self, start, &why)) == 1) {
        if (!why && s_is_resync (self)) {
            if (s_resync_taken (self)) {
                rc = ZA_RING_RESYNC;
                break;
            }
            continue;
        }
        if (!why && !(why = s_unexpected (self, op, round, dtype, n))) {
            self->received++;
            if ((self->in_on || self->in_tcp_on) && !self->in_is_record) {
                //  The left neighbour sends over ZeroMQ again (it restarted
                //  without our path): stop looking at the old one.
                self->in_on = self->in_tcp_on = 0;
                za_shm_destroy (&self->in_shm);
                za_tcp_pipe_destroy (&self->in_tcp);
            }
            rc = 0;
            break;
        }
        s_drop (self, why);
        za_ring_release (self);
    }
    self->wait_secs += za_clock_mono () - start;
    if (got == -2) {
        za_error ("ring: rank %d: the members changed while waiting for rank %d",
                  self->config.rank, za_ring_left (self));
        return ZA_RING_CANCELLED;
    }
    if (got < 0)
        return za_error ("ring: rank %d interrupted while waiting for rank %d",
                         self->config.rank, za_ring_left (self));
    if (got == 0)
        return za_error ("ring: rank %d heard nothing from rank %d for %.1f s (round %" PRId64
                         ")", self->config.rank, za_ring_left (self), self->config.timeout_secs,
                         round);
    return rc;
}

//  Takes the next frame from the left if one is there, without waiting: a
//  resync is handled, one that does not decode dropped, anything else held
//  for the next call (self->in_held). Returns 0 when none was there,
//  ZA_RING_RESYNC when a resync ends the caller's call, else S_LOOK_TOOK.
#define S_LOOK_TOOK 4
static int
s_look_frame (za_ring_t *self)
{
    const char *why;
    za_ring_release (self);
    if (!s_take_frame (self, &why))
        return 0;
    if (!why && s_is_resync (self)) {
        if (s_resync_taken (self))
            return ZA_RING_RESYNC;
    }
    else
    if (why) {
        s_drop (self, why);
        za_ring_release (self);
    }
    else
        self->in_held = 1;
    return S_LOOK_TOOK;
}

//  1 while chunks lent from the caller's block (or our buffers) are still
//  in libzmq's hands or wait for room in the segment.
int
za_ring_busy (za_ring_t *self)
{
    return za_ring_out_waiting (self) || za_wire_lease_busy (&self->lease);
}

//  Waits until libzmq has let go of every chunk lent from the caller's
//  block and every record waiting went into the segment (the caller may
//  change the block once we return), at most timeout_secs: a right
//  neighbour that is gone keeps them. Returns 0, ZA_RING_RESYNC,
//  ZA_RING_CANCELLED, or -1 with an error.
int
za_ring_drain (za_ring_t *self)
{
    double start = za_clock_mono ();
    while (za_ring_busy (self)) {
        if (za_ring_direct_flush (self))
            return za_error ("ring: rank %d: %s", self->config.rank, za_last_error ());
        if (!za_ring_busy (self))
            break;
        if (self->config.cancelled && self->config.cancelled (self->config.cancel_arg)) {
            za_error ("ring: rank %d: the members changed while %s took nothing",
                      self->config.rank, self->right_endpoint);
            return ZA_RING_CANCELLED;
        }
        if (za_clock_mono () - start > self->config.timeout_secs || zsys_interrupted)
            return za_error ("ring: rank %d: %s took nothing for %.1f s", self->config.rank,
                             self->right_endpoint, self->config.timeout_secs);
        //  Records no reader takes (the right neighbour died): a new
        //  generation may be on its way round, which ends the wait. Anything
        //  else that comes is kept for the next call.
        if (za_ring_out_waiting (self) && !self->in_held
            && s_look_frame (self) == ZA_RING_RESYNC)
            return ZA_RING_RESYNC;
        if (self->out_tcp && za_ring_out_waiting (self) && !self->in_held)
            s_poll (self, 1);           //  room on the connection wakes it
        else
            usleep (20);
    }
    return 0;
}

int
za_ring_watch (za_ring_t *self)
{
    if (zsys_interrupted)
        return za_error ("ring: rank %d interrupted", self->config.rank);
    if (self->config.cancelled && self->config.cancelled (self->config.cancel_arg)) {
        za_error ("ring: rank %d: the members changed", self->config.rank);
        return ZA_RING_CANCELLED;
    }
    if (self->config.interrupt
        && (zsock_events (self->config.interrupt) & ZMQ_POLLIN))
        return za_error ("ring: rank %d interrupted", self->config.rank);
    const char *why;
    while (!self->in_held) {
        za_ring_release (self);
        //  A record of the link's own path (never a resync: those go over
        //  ZeroMQ) is a rank past the thing waited for.
        if ((self->in_on || self->in_tcp_on) && za_ring_take_record (self, &why)) {
            if (why) {
                s_drop (self, why);
                za_ring_release (self);
                continue;
            }
            self->in_held = 1;
            break;
        }
        int looked = s_look_frame (self);
        if (looked == 0 || looked == ZA_RING_RESYNC)
            return looked;
    }
    return ZA_RING_HELD;
}

// ---------------------------------------------------------------------------
//  Generations

int
za_ring_ask_resync (za_ring_t *self)
{
    if (self->config.size == 1 || self->config.rank == 0 || self->asked)
        return 0;
    self->asked = 1;
    return s_send_resync (self, 0);
}

//  A new generation is this one: every link counts from 0 again.
static void
s_adopt (za_ring_t *self, int64_t gen)
{
    self->gen = gen;
    self->pending_gen = 0;
    self->asked = 0;
    self->sent = self->received = 0;
    za_ring_direct_offer (self);
}

int
za_ring_resync (za_ring_t *self)
{
    int rank = self->config.rank, size = self->config.size;
    if (rank == 0) {
        //  A generation no earlier root can have used: a restarted root starts
        //  from the clock, not from 1.
        int64_t gen = self->gen > 0? self->gen + 1
                    : ((int64_t) (za_clock_wall () * 1000) & RING_GEN_MASK);
        s_adopt (self, (gen & RING_GEN_MASK)? gen & RING_GEN_MASK: 1);
        return size == 1? 0: s_send_resync (self, self->gen);
    }
    //  Wait for the root's notice (unless one ended the last call), passing on
    //  requests once; anything else is of an earlier generation. A notice of
    //  a ring of older members than ours is old news; one of newer members
    //  ends the call, kept: re-formed for them, we take it then.
    double start = za_clock_mono ();
    const char *why;
    int got = 1;
    while (1) {
        if (self->pending_gen && self->pending_tag > self->tag) {
            za_error ("ring: rank %d: the root's ring is of newer members (change %" PRId64
                      ", ours %" PRId64 ")", rank, self->pending_tag, self->tag);
            return ZA_RING_CANCELLED;
        }
        if (self->pending_gen && self->pending_tag < self->tag)
            self->pending_gen = 0;
        if (self->pending_gen || (got = s_next (self, start, &why)) != 1)
            break;
        if (!why && s_is_resync (self))
            s_on_resync (self);
        else
            s_drop (self, why? why: "of an earlier generation");
        za_ring_release (self);
    }
    if (!self->pending_gen && got == -2) {
        za_error ("ring: rank %d: the members changed while waiting for the root", rank);
        return ZA_RING_CANCELLED;
    }
    if (!self->pending_gen)
        return got == 0? za_error ("ring: rank %d: no word from the root through rank %d for "
                                   "%.1f s", rank, rank - 1, self->config.timeout_secs)
                       : za_error ("ring: rank %d interrupted while waiting for the root", rank);
    int64_t gen = self->pending_gen;
    s_adopt (self, gen);
    //  Everyone but the root hears of it; the notice stops before the root.
    return rank == size - 1? 0: s_send_resync (self, gen);
}

int64_t
za_ring_generation (const za_ring_t *self)
{
    return self->gen;
}

int64_t
za_ring_pending_tag (const za_ring_t *self)
{
    return self->pending_gen? self->pending_tag: 0;
}
