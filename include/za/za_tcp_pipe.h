/*  za_tcp_pipe.h: a one-way pipe of records over a plain tcp connection of
    its own (the ring's data path between hosts in a job without --certs),
    beside the ZeroMQ link that carries everything else.

    The receiving end listens on an ephemeral port of its own address and
    tells the sender the port and a random nonce over the ZeroMQ link; the
    sender connects and sends the nonce first; the receiver takes only a
    connection that does. Records are those of za_shm.h (a 64-byte header,
    then the payload); the reader checks a header's sizes before it reads
    the payload, and a connection that sends anything else is closed.   */
#ifndef ZA_TCP_PIPE_H_INCLUDED
#define ZA_TCP_PIPE_H_INCLUDED

#include <stddef.h>

#include "za/za_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _za_tcp_pipe_t za_tcp_pipe_t;

//  The receiving end: listens on `host` (an IPv4 address or name; "*" or
//  NULL: every address), port 0. Records of at most max_payload bytes.
//  Returns NULL with an error.
za_tcp_pipe_t *za_tcp_pipe_listen (const char *host, size_t max_payload);

//  Its port and nonce (32 hex digits and a NUL, into hex [33]).
int za_tcp_pipe_port (const za_tcp_pipe_t *self);
void za_tcp_pipe_nonce (const za_tcp_pipe_t *self, char *hex);

//  Takes the sender's connection: the first that sends the nonce, within
//  timeout_secs (others are closed). Returns 0, or -1 with an error.
int za_tcp_pipe_accept (za_tcp_pipe_t *self, double timeout_secs);

//  The sending end: connects to host:port and sends the nonce, within
//  timeout_secs. Returns NULL with an error.
za_tcp_pipe_t *za_tcp_pipe_connect (const char *host, int port, const char *nonce,
                                    double timeout_secs);

void za_tcp_pipe_destroy (za_tcp_pipe_t **self_p);

//  The connection's fd (to poll), or -1.
int za_tcp_pipe_fd (const za_tcp_pipe_t *self);

//  Sends a record without blocking: 0 when the pipe took it (what the
//  socket did not take yet stays the caller's bytes until it did:
//  za_tcp_pipe_busy), 1 when the pipe is still busy with the last one (try
//  again later), -1 with an error (the connection is gone).
int za_tcp_pipe_write (za_tcp_pipe_t *self, const za_shm_record_t *record);

//  Sends on what the socket did not take. Returns 0 (none left), 1 (some
//  left) or -1 with an error.
int za_tcp_pipe_flush (za_tcp_pipe_t *self);

//  1 while a record is partly sent.
int za_tcp_pipe_busy (const za_tcp_pipe_t *self);

//  Reads on without blocking: 1 with a whole record (its data valid until
//  the next call), 0 when none is whole yet, -1 with an error (the peer
//  closed, or sent what is no record: the connection is closed).
int za_tcp_pipe_read (za_tcp_pipe_t *self, za_shm_record_t *record);

#ifdef __cplusplus
}
#endif
#endif
