/*  za_ring.h: N processes (ranks 0..N-1) in a ring, for the
    synchronous all-reduce strategy (TensorFlow's MultiWorkerMirrored with
    its RING collective). Each rank binds a ROUTER where its left neighbour
    (rank - 1) sends, and connects a DEALER to its right neighbour's.

    All-reduce is reduce-scatter then all-gather: the block is cut into N
    segments and each segment into chunks; a chunk is added and passed on as
    soon as it arrives, so the links stay busy. The rank that completes a
    segment's sum divides it by N before it goes around again: every rank
    ends with the same bits, and the order of the additions is fixed by the
    ranks, so the same inputs give the same mean on every run.

    Every chunk (docs/PROTOCOL.md section 14) has op "ring" or "broadcast",
    seq its number on this link, step the caller's round, task the sender's
    rank, one tensor (f32, or bf16 with --wire-dtype). It goes over ZeroMQ,
    or once a link has a path of its own, through shared memory (a
    neighbour on this host, za_shm.h) or a tcp connection of the link's own
    (another host, a job without CURVE, za_tcp_pipe.h); ZeroMQ keeps the
    rest. Anything else - garbage, another round, another sender, a number
    out of turn, a wrong size - is dropped and counted, never used; a round
    whose next message does not come within timeout_secs fails with an
    error naming the left neighbour.                                     */
#ifndef ZA_RING_H_INCLUDED
#define ZA_RING_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_RING_MAX_RANKS 128
//  Chunk size when the config says 0: a quarter MiB of floats keeps the
//  pipeline full at the seed CNN's 365 KiB and costs few messages at 16 MiB.
#define ZA_RING_DEFAULT_CHUNK_FLOATS 65536

typedef struct {
    int rank, size;                 //  0 <= rank < size <= ZA_RING_MAX_RANKS
    const char *bind;               //  where this rank's ROUTER binds
    const char *right;              //  the right neighbour's endpoint (rank + 1 mod size)
    size_t chunk_floats;            //  0: ZA_RING_DEFAULT_CHUNK_FLOATS
    double timeout_secs;            //  a round waits at most this long for each message
    void *interrupt;                //  NULL, or a socket (an actor's pipe) whose message
                                    //  ends a wait: the call fails, the message stays
    int tcp_only;                   //  1: a loopback right neighbour over tcp too;
                                    //  0: over ipc (see za_ring_new)
    int no_shm;                     //  1: every chunk over ZeroMQ: a neighbour on this
                                    //  host over ipc, not shared memory, and one on
                                    //  another over ZeroMQ's tcp, not a connection of
                                    //  the ring's own (also ZA_SHM_DISABLE=1)
    za_dtype_t wire_dtype;          //  the all-reduce's chunks: ZA_DTYPE_F32 (0, the
                                    //  default) or ZA_DTYPE_BF16 (half the bytes; the
                                    //  sums stay fp32, and each segment's mean is
                                    //  rounded to bf16 by its owner too, so every
                                    //  rank ends with the same numbers). Broadcasts
                                    //  copy bits: always f32
    int (*cancelled) (void *arg);   //  NULL, or asked at least every 100 ms while a
    void *cancel_arg;               //  call waits: nonzero ends the call with
                                    //  ZA_RING_CANCELLED (an elastic job's members
                                    //  changed: the ring is re-formed, za_ring_reshape)
} za_ring_config_t;

typedef struct _za_ring_t za_ring_t;

//  Binds and connects. A rank that binds tcp://HOST:PORT also binds
//  ipc://@zactor-ring-PORT (Linux's abstract namespace: no file, nothing to
//  clean up), and a right neighbour at a loopback address (127.x, localhost,
//  [::1]: the same host and network namespace) is reached over that instead
//  unless tcp_only, and its chunks then move through shared memory once the
//  link is on; a neighbour over tcp gets a tcp connection of the link's own
//  in a job without CURVE (za_ring_direct_links). Returns NULL with an error
//  (a rank out of range, an endpoint that cannot be bound or connected).
za_ring_t *za_ring_new (const za_ring_config_t *config);
void za_ring_destroy (za_ring_t **self_p);

//  Where this rank's ZeroMQ link goes: the right neighbour's endpoint, or
//  its ipc alias (its chunks may go through the link's own path instead).
const char *za_ring_right_endpoint (const za_ring_t *self);

//  Replaces data [0..n) on every rank by the mean of all ranks' data, the
//  same bits everywhere. Every rank calls it with the same n and round
//  (0 .. 2^40 - 1). Returns 0, ZA_RING_RESYNC, ZA_RING_CANCELLED, or -1 with
//  an error (the left
//  neighbour silent for timeout_secs, a message on `interrupt`, SIGINT).
//  data may be changed when it is not 0.
int za_ring_allreduce_mean (za_ring_t *self, float *data, size_t n, int64_t round);
//  The same in f32 whatever the ring's wire dtype, for counts and flags that
//  bf16's 8 bits would round (a members' change 259 over two ranks came back
//  260): n at most 16384.
int za_ring_allreduce_mean_f32 (za_ring_t *self, float *data, size_t n, int64_t round);

//  Copies root's data [0..n) to every other rank. Returns 0,
//  ZA_RING_RESYNC, or -1 with an error, as above.
int za_ring_broadcast (za_ring_t *self, float *data, size_t n, int root, int64_t round);

//  What a collective returns (besides 0 and -1) when the ring must be synced
//  again before anything else: the root started a new generation, or (at
//  the root) a member (re)joined and asked for one. The caller calls
//  za_ring_resync, then broadcasts the root's state, then goes on.
#define ZA_RING_RESYNC 1

//  What a collective or za_ring_resync returns when config.cancelled said so
//  while it waited: the call's data is undefined, the ring's neighbours may
//  be gone; re-form it (za_ring_reshape, za_ring_resync).
#define ZA_RING_CANCELLED 2

//  A look, without waiting, while this rank waits for something else that
//  every rank takes part in (a group's sum on the devices, za_kernels.h):
//  takes what came from the left (a message for a later call is kept for
//  it). Returns 0 when nothing came, ZA_RING_HELD when a message waits for
//  the next call (a rank is past the thing waited for), ZA_RING_RESYNC or
//  ZA_RING_CANCELLED as a collective would (the thing waited for will not
//  come: a rank (re)joined, the members changed), or -1 with an error
//  (interrupted).
int za_ring_watch (za_ring_t *self);
#define ZA_RING_HELD 3

//  The ring's members changed (an elastic job, za_membership.h): this rank
//  is `rank` of `size` now, sending to `right`, a ring of the members'
//  change `tag` (> 0; the root's notices carry it). Keeps the bound socket
//  (its endpoint stays where the others reach it), connects afresh to the
//  right, drops the links' own paths and anything still queued; the next
//  za_ring_resync starts a generation of the new shape: at a non-root rank
//  it takes only the notice of a root of the same tag (a root of older
//  members' is old news; one of newer members' ends it with
//  ZA_RING_CANCELLED, the notice kept for after the next reshape). Returns
//  0, or -1 with an error (out of range, an endpoint that cannot be bound
//  or connected).
int za_ring_reshape (za_ring_t *self, int rank, int size, const char *right, int64_t tag);

//  The tag of a root's notice that ended the last call and waits to be
//  taken (ZA_RING_RESYNC, or za_ring_resync's ZA_RING_CANCELLED), 0 when
//  none: the members' change a rank must know before it re-forms.
int64_t za_ring_pending_tag (const za_ring_t *self);

//  A member that (re)joins a ring already running (a restarted process)
//  asks the root for a new generation (the request goes round to rank 0).
//  Returns 0, or -1 with an error.
int za_ring_ask_resync (za_ring_t *self);

//  Starts a generation: at the root (rank 0) a new one, told to the others;
//  elsewhere, waits (up to timeout_secs) for the root's notice and passes it
//  on. Then every link counts its messages from 0, and nothing of an earlier
//  generation is taken. Call it once before the first collective, and after
//  each ZA_RING_RESYNC. Returns 0, ZA_RING_CANCELLED, or -1 with an error.
int za_ring_resync (za_ring_t *self);

//  The generation adopted (0 before the first za_ring_resync).
int64_t za_ring_generation (const za_ring_t *self);

//  This rank's links whose chunks bypass ZeroMQ now: 0, 1 (to the right or
//  from the left) or 2 (both). A link to a neighbour on this host turns to
//  shared memory (za_shm.h), one to another host in a job without CURVE to
//  a tcp connection of its own (za_tcp_pipe.h), a few messages after each
//  generation starts (unless no_shm or ZA_SHM_DISABLE=1); one that cannot
//  stays on ZeroMQ.
int za_ring_direct_links (const za_ring_t *self);

//  Messages dropped since the ring was made (garbage, out of turn, wrong).
uint64_t za_ring_dropped (const za_ring_t *self);

//  Seconds this ring spent waiting for its left neighbour (in all calls).
double za_ring_wait_secs (const za_ring_t *self);

#ifdef __cplusplus
}
#endif
#endif
