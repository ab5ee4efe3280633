/*  za_shm_link.h: one ZeroMQ connection's same-host data path (a worker
    and its ps): its tensors through a shared-memory segment (za_shm.h)
    when both ends can, the header over ZeroMQ; or, with bells (below),
    whole messages through the segment and nothing over ZeroMQ.

    Each end may have a segment of its own to send through. Every message
    an end sends carries its word (the header's "shm", PROTOCOL.md 3): its
    segment's offer, "ok" with the nonce of the peer's segment it has mapped,
    and "at" where this message's tensors are when they went through the
    segment. An end sends through its segment only once the peer said "ok"
    to it, so a peer that cannot map it (another host, user or pid
    namespace) never misses a tensor; a peer that restarted maps the segment
    from the next word it gets, and a record is found by its position, so
    nothing depends on what an earlier life of either end read. A message
    whose tensors do not fit the segment goes as frames, as ever.
    An end with a bell (za_shm.h: a pipe it polls with its sockets) offers
    it in its word; the peer then writes whole messages (the header too,
    its tensors aligned) into its segment and rings the bell, and ZeroMQ
    carries none of them: no I/O thread, no socket, between a worker and a
    ps of one host. The reader takes them in order; a bell whose owner is
    gone sends the message as frames, and a reader that maps a segment
    anew reads nothing written before.                                   */
#ifndef ZA_SHM_LINK_H_INCLUDED
#define ZA_SHM_LINK_H_INCLUDED

#include <czmq.h>

#include "za/za_shm.h"
#include "za/za_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _za_shm_link_t za_shm_link_t;

//  A link. offers 1: this end makes its segment now (`bytes` of records, 0:
//  ZA_SHM_DEFAULT_BYTES) and offers it in every message (a worker, to a ps
//  on this host); 0: it makes one (at least twice the first message's
//  tensors) only when it has mapped the peer's, which shows the peer is on
//  this host (a ps). Returns NULL with an error.
za_shm_link_t *za_shm_link_new (int offers, size_t bytes);
void za_shm_link_destroy (za_shm_link_t **self_p);

//  Sends msg as za_wire_send does (the lease as there), with this end's
//  word: whole through the segment (nothing on sock) when the peer reads
//  it, has a bell and it fits; else its tensors through the segment when
//  the peer reads it and they fit (then nothing is lent), the header on
//  sock; else as frames. msg is left as it was given. Returns 0, or -1
//  with an error.
int za_shm_link_send (za_shm_link_t *self, zsock_t *sock, zframe_t *routing_id,
                      za_wire_msg_t *msg, za_wire_lease_t *lease);

//  Reads the word of a message just received (its routing id popped, not
//  yet decoded): maps the peer's segment when it offers a new one, and when
//  the tensors came through it, appends them to msg as frames (copied; the
//  record goes back at once), so that za_wire_decode reads msg as ever.
//  (Any receive or take first lets go of a record held in place.)
//  Returns 0 (msg is whole, or had no word), or -1 with an error: the
//  tensors cannot be had, drop the message.
int za_shm_link_receive (za_shm_link_t *self, zmsg_t *msg);

//  The same, but the tensors that came through the segment stay there:
//  returns 1 with them in *data, *sizes and *count (for
//  za_wire_decode_payloads; valid until za_shm_link_done or the next
//  receive), 0 when msg is whole as it came (or had no word), -1 with an
//  error (drop the message).
int za_shm_link_receive_in_place (za_shm_link_t *self, zmsg_t *msg, const void *const **data,
                                  const size_t **sizes, int *count);

//  Appends copies of the tensors held in place to msg (the header alone),
//  which then outlives the record. Returns 0, or -1 with an error.
int za_shm_link_copy_held (za_shm_link_t *self, zmsg_t *msg);

//  Gives the record held in place back to its writer.
void za_shm_link_done (za_shm_link_t *self);

//  1 when a received message (routing id popped) says its tensors are in a
//  segment (its word has "at"), with its seq in *seq: a receiver that
//  cannot read them answers "shm_unreadable" and the sender sends again as
//  frames. 0 otherwise.
int za_shm_link_names_record (zmsg_t *msg, uint64_t *seq);

//  The next whole message the peer wrote into its segment (one that rang
//  our bell: za_shm_link_set_bell), read in order: returns 1 with *msg_p
//  its header alone (a new zmsg, ours to destroy) and its tensors in place
//  in *data, *sizes, *count (for za_wire_decode_payloads; until
//  za_shm_link_done or the next receive); 0 when none is waiting; -1 with
//  an error (the segment is refused: the peer sends frames from then on).
int za_shm_link_take (za_shm_link_t *self, zmsg_t **msg_p, const void *const **data,
                      const size_t **sizes, int *count);

//  The seq of the record za_shm_link_take last read (whole or refused; 0:
//  none), for an answer to a whole message that cannot be used.
uint64_t za_shm_link_taken_seq (const za_shm_link_t *self);

//  Stops reading the peer's segment (a whole message in it could not be
//  used): no "ok" from now on, so the peer sends frames.
void za_shm_link_refuse (za_shm_link_t *self);

//  The same, the tensors copied into *msg_p as frames (za_wire_decode reads
//  it as ever; the record goes back at once).
int za_shm_link_take_copy (za_shm_link_t *self, zmsg_t **msg_p);

//  This end's bell (the caller's, polled with its sockets): offered in
//  every word, so that the peer sends whole messages (header and tensors)
//  through its segment and rings it, and ZeroMQ carries none of them.
void za_shm_link_set_bell (za_shm_link_t *self, za_shm_bell_t *bell);

//  1 when this end has the peer's bell (it sends whole messages).
int za_shm_link_rings (const za_shm_link_t *self);

//  The peer's routing id, kept for the caller (a copy; NULL: none).
void za_shm_link_set_route (za_shm_link_t *self, zframe_t *route);
zframe_t *za_shm_link_route (const za_shm_link_t *self);

//  What goes through shared memory now: 1 what this end sends, 2 what it
//  receives (or both, 3; 0 none).
int za_shm_link_state (const za_shm_link_t *self);

//  The task the link's peer said it is (kept by the caller; -1 unknown).
int za_shm_link_task (const za_shm_link_t *self);
void za_shm_link_set_task (za_shm_link_t *self, int task);

#ifdef __cplusplus
}
#endif
#endif
