/*  za_ring_private.h: what the files of the ring share: its state
    (za_ring_t) and the functions one file of it offers the others.
    za_ring.c makes and frees the ring; za_ring_msg.c is one link's
    messages (chunks sent right, waited for from the left) and the
    generations; za_ring_direct.c a link's path of its own (shared memory,
    or a tcp connection); za_ring_collective.c the all-reduce and broadcast. */
#ifndef ZA_RING_PRIVATE_H_INCLUDED
#define ZA_RING_PRIVATE_H_INCLUDED

#include "za/za_ring.h"
#include "za/za_shm.h"
#include "za/za_tcp_pipe.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <czmq.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

//  A tensor of at most this many bytes goes round whole (s_allreduce_whole):
//  size - 1 hops instead of 2 (size - 1), where latency, not bytes, is the cost.
//  Its one frame must pass the left socket's ZMQ_MAXMSGSIZE, which is at least
//  a header's most (za_wire_max_frame) whatever the chunk size.
#define RING_WHOLE_BYTES 65536
//  With config.cancelled, a wait asks it at least this often.
#define RING_CANCEL_LOOK_USECS 100000
_Static_assert (RING_WHOLE_BYTES <= ZA_WIRE_MAX_HEADER_BYTES,
                "a whole tensor's frame must pass any ring's ZMQ_MAXMSGSIZE");

//  A message's step: the generation above the round, so that nothing of an
//  earlier generation passes for this one.
#define RING_ROUND_BITS 40
#define RING_GEN_MASK ((INT64_C (1) << (62 - RING_ROUND_BITS)) - 1)

//  Where the record in self->in came from.
#define RECORD_OF_SHM 1
#define RECORD_OF_TCP 2

//  The same-host link to the right (sending) and from the left (receiving).
typedef enum { DIRECT_OFF, DIRECT_ASKED, DIRECT_ON } ring_direct_state_t;

struct _za_ring_t {
    za_ring_config_t config;
    size_t chunk_floats;
    zsock_t *left;                  //  ROUTER: the left neighbour sends here
    zsock_t *right;                 //  DEALER to the right neighbour's ROUTER
    za_wire_msg_t *out, *in;
    za_wire_msg_t *answer;          //  the right neighbour's answers (self->in may hold
                                    //  a message kept for the next call)
    za_wire_lease_t lease;          //  chunks lent to libzmq from the caller's block
    uint16_t *low;                  //  wire_dtype bf16: the chunks' casts, lent as well:
    size_t low_halves;              //  [0, n) the reduce phase's, [n, 2n) the gather's
    float *whole;                   //  s_allreduce_whole: every rank's tensor [size][n]
    size_t whole_floats;
    uint64_t sent, received;        //  messages on each link in this generation (their seq)
    uint64_t dropped;
    //  Generations: the ring's members agree on one state (the root's) at the
    //  start of each; a member that (re)joins asks the root for a new one.
    int64_t gen;                    //  the generation adopted (0: none yet)
    int64_t pending_gen;            //  a root's notice that ended the last call
    int64_t pending_tag;            //  ... the members' change its root's ring is of
    int64_t tag;                    //  the members' change this ring's shape is of
                                    //  (za_ring_reshape; 0: a fixed ring)
    int asked;                      //  a request went right since the last adoption
    double wait_secs;
    char right_endpoint [256];
    char right_config [256];        //  config.right's own copy (za_ring_reshape)
    //  Same host (za_shm.h): our segment to the right, offered at each
    //  generation and used once the right neighbour says it attached;
    //  records that found no room yet wait in `pending`, in order.
    int shm_link;                   //  the right neighbour is on this host
    int tcp_link;                   //  ... or reached over tcp in a job without CURVE:
                                    //  a tcp connection of the link's own (za_tcp_pipe.h)
    za_tcp_pipe_t *out_tcp;         //  ours, once the right neighbour said where
    int tcp_asks;                   //  asks sent: the answer names the one it answers
    za_tcp_pipe_t *in_tcp;          //  the left neighbour's, listening then connected
    int in_tcp_on;
    za_shm_t *out_shm;
    ring_direct_state_t out_state;
    char out_nonce [33];
    int said_direct;                   //  the log said so once
    za_shm_record_t *pending;
    size_t pending_first, pending_count, pending_size;
    //  ... and the left neighbour's segment, read once it says "on".
    za_shm_t *in_shm;
    int in_on;
    //  The message in self->in: a frame (in_msg) or a record of in_shm;
    //  in_held: taken while draining, for the next wait to have first.
    zmsg_t *in_msg;
    int in_is_record;               //  0, RECORD_OF_SHM or RECORD_OF_TCP
    int in_held;
};

// ---------------------------------------------------------------------------
//  za_ring_msg.c: one link's messages

//  Sends data [0..n) of dtype (F32 or BF16) to the right neighbour as
//  message number self->sent.
int za_ring_send (za_ring_t *self, za_op_t op, int64_t round, const void *data,
                  za_dtype_t dtype, size_t n);

//  Waits for the next message from the left: a chunk of n floats of `op`
//  and `round`. Returns 0 with it in self->in (the chunk is tensors [0];
//  the caller calls za_ring_release), ZA_RING_RESYNC when the ring must be
//  synced again first, or -1 with an error.
int za_ring_receive (za_ring_t *self, za_op_t op, int64_t round, za_dtype_t dtype, size_t n);

//  Lets go of the message in self->in (a frame or a record).
void za_ring_release (za_ring_t *self);

//  1 while chunks lent from the caller's block (or our buffers) are still
//  in libzmq's hands or wait for room in the segment.
int za_ring_busy (za_ring_t *self);

//  Waits until libzmq has let go of every chunk lent from the caller's
//  block and every record waiting went into the segment, at most
//  timeout_secs. Returns 0, ZA_RING_RESYNC, or -1 with an error.
int za_ring_drain (za_ring_t *self);

// ---------------------------------------------------------------------------
//  za_ring_direct.c: a link's path of its own (za_shm.h, za_tcp_pipe.h)

//  1 unless this rank keeps every chunk on ZeroMQ (no_shm, ZA_SHM_DISABLE).
int za_ring_direct_allowed (const za_ring_config_t *config);

//  The left neighbour's rank (here, below za_ring_msg.c, which asks it too).
int za_ring_left (const za_ring_t *self);

//  A new generation: a new segment offered to the right (the old one, and
//  any record of the last generation still waiting, are dropped), or over
//  tcp an ask where to connect.
void za_ring_direct_offer (za_ring_t *self);

//  The right neighbour's answer to our offer, if it came: the link turns on.
void za_ring_direct_answered (za_ring_t *self);

//  The right neighbour's tcp connection broke (it died), or a call failed
//  with a chunk of the caller's partly sent: what waited for it goes
//  nowhere, and the link is back on ZeroMQ until the next generation.
void za_ring_tcp_lost (za_ring_t *self, const char *why);

//  1 while chunks of ours wait: records for room, or one partly sent.
int za_ring_out_waiting (const za_ring_t *self);

//  Writes what waits (a chunk partly sent, then the records queued) while
//  there is room. Returns 0, or -1 with an error.
int za_ring_direct_flush (za_ring_t *self);

//  Sends a record through the segment, or queues it behind those waiting
//  (its bytes stay the caller's, as a lent frame's do, until it is written).
int za_ring_direct_send (za_ring_t *self, const za_shm_record_t *record);

//  A "link" message from the left, decoded into self->in, with the routing
//  id it came from: an offer is attached to and answered; "on" turns the
//  segment on (and the same for a tcp connection).
void za_ring_on_link (za_ring_t *self, zframe_t *from);

//  The next record of the left neighbour's path of its own, if one is
//  whole: 1 with it in self->in (or *why set when it is not a chunk), 0
//  when none is.
int za_ring_take_record (za_ring_t *self, const char **why);

#endif
