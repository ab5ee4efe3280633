/*  za_ring.c: the ring all-reduce and broadcast over ZeroMQ (za_ring.h).

    Rank r, N ranks, the block cut into N segments. Reduce-scatter: at hop
    h (0..N-2) r sends segment (r - h) mod N and receives (r - h - 1) mod N,
    which it adds to its own; after hop N-2 it holds the whole sum of segment
    (r + 1) mod N and divides it by N. All-gather: at hop N-1+g r sends
    segment (r + 1 - g) mod N and receives (r - g) mod N, which it copies.
    What r receives at one hop is what it sends at the next, so each chunk
    is passed on the moment it is done: one schedule, 2(N-1) hops.      */
#include "za/za_ring.h"
#include "za/za_curve.h"
#include "za/za_shm.h"
#include "za/za_tcp_pipe.h"
#include "za/za_cluster.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <czmq.h>
#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Messages may queue on a link: a round's worth, and then some.
#define RING_MIN_HWM 1000
//  Dropped messages are logged the first time and then every this many.
#define RING_DROP_LOG_EVERY 100
//  A tensor of at most this many bytes goes round whole (s_allreduce_whole):
//  size - 1 hops instead of 2 (size - 1), where latency, not bytes, is the cost.
//  Its one frame must pass the left socket's ZMQ_MAXMSGSIZE, which is at least
//  a header's most (za_wire_max_frame) whatever the chunk size.
#define RING_WHOLE_BYTES 65536
_Static_assert (RING_WHOLE_BYTES <= ZA_WIRE_MAX_HEADER_BYTES,
                "a whole tensor's frame must pass any ring's ZMQ_MAXMSGSIZE");
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

//  A tcp connection of the link's own that does not connect in this long
//  (a firewall that drops the port) leaves the link on ZeroMQ.
#define RING_TCP_CONNECT_SECS 3.0

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
    int asked;                      //  a request went right since the last adoption
    double wait_secs;
    char right_endpoint [256];
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

static void s_direct_offer (za_ring_t *self);

//  The PORT of tcp://HOST:PORT, or 0; *loopback set when HOST is a loopback
//  address or localhost.
static int
s_tcp_port (const char *endpoint, int *loopback)
{
    char host [ZA_CLUSTER_ENDPOINT_MAX];
    int port;
    *loopback = 0;
    if (za_cluster_endpoint_split (endpoint, host, sizeof host, &port))
        return 0;
    *loopback = streq (host, "localhost") || streq (host, "[::1]")
             || strncmp (host, "127.", 4) == 0;
    return port;
}

//  1 unless this rank keeps every chunk on ZeroMQ (no_shm, ZA_SHM_DISABLE).
static int
s_direct_allowed (const za_ring_config_t *config)
{
    return !config->no_shm && za_shm_enabled ();
}

za_ring_t *
za_ring_new (const za_ring_config_t *config)
{
    if (config->size < 1 || config->size > ZA_RING_MAX_RANKS || config->rank < 0
        || config->rank >= config->size) {
        za_error ("ring: rank %d of %d is out of range (1 to %d ranks)", config->rank,
                  config->size, ZA_RING_MAX_RANKS);
        return NULL;
    }
    za_ring_t *self = (za_ring_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("ring: out of memory");
        return NULL;
    }
    self->config = *config;
    self->chunk_floats = config->chunk_floats? config->chunk_floats
                                             : ZA_RING_DEFAULT_CHUNK_FLOATS;
    za_wire_lease_init (&self->lease);
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->in = (za_wire_msg_t *) malloc (sizeof *self->in);
    self->answer = (za_wire_msg_t *) malloc (sizeof *self->answer);
    if (!self->out || !self->in || !self->answer) {
        za_error ("ring: out of memory");
        goto fail;
    }
    if (config->size == 1)
        return self;                //  nobody to talk to
    self->left = zsock_new (ZMQ_ROUTER);
    self->right = zsock_new (ZMQ_DEALER);
    if (!self->left || !self->right) {
        za_error ("ring: cannot make sockets");
        goto fail;
    }
    //  A chunk is at most chunk_floats; anything larger is no ring message.
    zsock_set_maxmsgsize (self->left, za_wire_max_frame (self->chunk_floats * sizeof (float)));
    zsock_set_rcvhwm (self->left, RING_MIN_HWM);
    zsock_set_sndhwm (self->right, RING_MIN_HWM);
    zsock_set_linger (self->right, 0);
    //  A send that would block for ever (a neighbour never reached) fails
    //  when a receive would have, naming the neighbour.
    if (config->timeout_secs > 0)
        zsock_set_sndtimeo (self->right, (int) (config->timeout_secs * 1000));
    //  CURVE (with --certs) on tcp and ipc alike: an abstract ipc name is
    //  open to every process of the host.
    za_curve_client (self->right);
    if (za_curve_server (self->left))
        goto fail;
    if (zsock_bind (self->left, "%s", config->bind) < 0) {
        za_error ("ring: rank %d cannot bind %s: %s", config->rank, config->bind,
                  zmq_strerror (zmq_errno ()));
        goto fail;
    }
    int loopback, port = s_tcp_port (config->bind, &loopback);
    if (port && zsock_bind (self->left, "ipc://@zactor-ring-%d", port) < 0)
        za_info ("ring: rank %d cannot bind ipc://@zactor-ring-%d (%s): a neighbour on this "
                 "host must use tcp (tcp_only)", config->rank, port, zmq_strerror (zmq_errno ()));
    port = s_tcp_port (config->right, &loopback);
    if (port && loopback && !config->tcp_only) {
        snprintf (self->right_endpoint, sizeof self->right_endpoint, "ipc://@zactor-ring-%d",
                  port);
        self->shm_link = s_direct_allowed (config);
    }
    else {
        snprintf (self->right_endpoint, sizeof self->right_endpoint, "%s", config->right);
        //  CURVE protects ZeroMQ's bytes only: a job with --certs keeps them there.
        self->tcp_link = port > 0 && s_direct_allowed (config) && !za_curve_enabled ();
    }
    if (zsock_connect (self->right, "%s", self->right_endpoint) < 0) {
        za_error ("ring: rank %d cannot connect to %s: %s", config->rank, self->right_endpoint,
                  zmq_strerror (zmq_errno ()));
        goto fail;
    }
    s_direct_offer (self);             //  again at each generation
    return self;
fail:
    za_ring_destroy (&self);
    return NULL;
}

void
za_ring_destroy (za_ring_t **self_p)
{
    za_ring_t *self = *self_p;
    if (!self)
        return;
    zmsg_destroy (&self->in_msg);
    za_shm_destroy (&self->in_shm);
    za_shm_destroy (&self->out_shm);
    za_tcp_pipe_destroy (&self->in_tcp);
    za_tcp_pipe_destroy (&self->out_tcp);
    free (self->pending);
    //  linger 0: what the right neighbour never took is dropped, and the
    //  chunks lent from the caller's block all come back.
    zsock_destroy (&self->right);
    zsock_destroy (&self->left);
    za_wire_lease_wait (&self->lease);
    free (self->low);
    free (self->whole);
    free (self->out);
    free (self->in);
    free (self->answer);
    free (self);
    *self_p = NULL;
}

const char *
za_ring_right_endpoint (const za_ring_t *self)
{
    return self->right_endpoint;
}

int
za_ring_direct_links (const za_ring_t *self)
{
    return (self->out_state == DIRECT_ON) + (self->in_on || self->in_tcp_on);
}

uint64_t
za_ring_dropped (const za_ring_t *self)
{
    return self->dropped;
}

double
za_ring_wait_secs (const za_ring_t *self)
{
    return self->wait_secs;
}

// ---------------------------------------------------------------------------
//  One link's messages

//  A message's step: the generation above the round, so that nothing of an
//  earlier generation passes for this one.
#define RING_ROUND_BITS 40
#define RING_GEN_MASK ((INT64_C (1) << (62 - RING_ROUND_BITS)) - 1)

static int64_t
s_step (const za_ring_t *self, int64_t round)
{
    return (self->gen << RING_ROUND_BITS) | (round & ((INT64_C (1) << RING_ROUND_BITS) - 1));
}

//  Sends a resync message to the right: a request (gen 0) or the root's
//  notice of generation gen. It has no number on the link.
static int
s_send_resync (za_ring_t *self, int64_t gen)
{
    za_wire_msg_init (self->out, ZA_OP_RESYNC);
    self->out->step = gen;
    self->out->task = self->config.rank;
    if (za_wire_send (self->right, NULL, self->out, NULL))
        return za_error ("ring: rank %d cannot send to %s: %s", self->config.rank,
                         self->right_endpoint, za_last_error ());
    return 0;
}

// ---------------------------------------------------------------------------
//  The same-host link (za_shm.h; PROTOCOL.md 14): the sender offers a new
//  segment at each generation ("shm" "offer", over ZeroMQ), the receiver maps
//  it and answers "attached" (or nothing: the link stays on ZeroMQ), and the
//  sender's "on" is its last chunk-free word on ZeroMQ before the records:
//  from then on the receiver reads chunks from the segment only.

//  Sends an "shm" message of `code` with `body` right, or to `to` (a routing
//  id) through the left socket.
static int
s_send_link (za_ring_t *self, zframe_t *to, const char *code, const char *body, size_t len)
{
    za_wire_msg_init (self->out, ZA_OP_LINK);
    snprintf (self->out->code, sizeof self->out->code, "%s", code);
    self->out->task = self->config.rank;
    self->out->body = body;
    self->out->body_len = len;
    return za_wire_send (to? self->left: self->right, to, self->out, NULL);
}

//  The body of an "attached" or "on" message, {"nonce":"HEX"}, in body
//  (64 bytes); returns its length.
static size_t
s_nonce_body (const char *nonce, char *body)
{
    return (size_t) snprintf (body, 64, "{\"nonce\":\"%s\"}", nonce);
}

static int
s_body_has_nonce (const za_wire_msg_t *msg, const char *nonce)
{
    char want [64];
    size_t len = s_nonce_body (nonce, want);
    return msg->body && msg->body_len == len && memcmp (msg->body, want, len) == 0;
}

//  A new generation: a new segment offered to the right (the old one, and
//  any record of the last generation still waiting, are dropped).
static void
s_direct_offer (za_ring_t *self)
{
    if (self->tcp_link) {
        //  A tcp link asks the right neighbour where to connect.
        za_tcp_pipe_destroy (&self->out_tcp);
        self->pending_count = 0;
        //  Numbered: only the answer to the latest ask is acted on (an
        //  earlier one's listener is closed by the time it would be used).
        char body [32];
        int len = snprintf (body, sizeof body, "{\"ask\":%d}", ++self->tcp_asks);
        self->out_state = s_send_link (self, NULL, "tcp_ask", body, (size_t) len) == 0
                        ? DIRECT_ASKED: DIRECT_OFF;
        return;
    }
    if (!self->shm_link)
        return;
    //  A segment offered and never written to serves again (za_ring_new's,
    //  when the first generation follows at once); else a new one, with
    //  room for two of the largest chunk, whatever the chunk size.
    if (self->out_state != DIRECT_ASKED || !za_shm_unused (self->out_shm)) {
        za_shm_destroy (&self->out_shm);
        self->pending_count = 0;
        size_t bytes = 2 * (self->chunk_floats * sizeof (float) + 128);
        self->out_shm = za_shm_create (bytes > ZA_SHM_DEFAULT_BYTES? bytes
                                                                  : ZA_SHM_DEFAULT_BYTES);
    }
    self->out_state = DIRECT_OFF;
    char offer [ZA_SHM_OFFER_MAX];
    size_t len = self->out_shm? za_shm_offer (self->out_shm, offer): 0;
    if (!len || s_send_link (self, NULL, "offer", offer, len)) {
        za_info ("ring: rank %d: no shared memory to the right (%s); the link stays on "
                 "ZeroMQ", self->config.rank, za_last_error ());
        za_shm_destroy (&self->out_shm);
        return;
    }
    za_shm_nonce (self->out_shm, self->out_nonce);
    self->out_state = DIRECT_ASKED;
}

//  The link to the right turns on (what it goes through, for the log).
static void
s_direct_on (za_ring_t *self, const char *how)
{
    self->out_state = DIRECT_ON;
    if (!self->said_direct++)
        za_info ("ring: rank %d sends to rank %d %s", self->config.rank,
                 (self->config.rank + 1) % self->config.size, how);
}

//  The right neighbour's answer to our tcp_ask (in self->answer): where it
//  listens, and the nonce to say first. Connected, the link turns on.
static void
s_tcp_connect (za_ring_t *self)
{
    json_error_t error;
    json_t *root = self->answer->body
                 ? json_loadb (self->answer->body, self->answer->body_len, 0, &error): NULL;
    json_int_t port = 0;
    const char *nonce = NULL;
    char host [ZA_CLUSTER_ENDPOINT_MAX];
    int right_port;
    json_int_t ask = 0;
    if (root && json_unpack (root, "{s:I,s:s,s:I}", "port", &port, "nonce", &nonce, "ask", &ask)
        == 0 && ask == self->tcp_asks && port > 0 && port < 65536
        && za_cluster_endpoint_split (self->config.right, host, sizeof host, &right_port) == 0) {
        //  [::1] and names: the pipe speaks IPv4 (names resolved).
        double tried = za_clock_mono ();
        self->out_tcp = za_tcp_pipe_connect (host, (int) port, nonce, RING_TCP_CONNECT_SECS);
        if (self->out_tcp) {
            char body [64];
            if (s_send_link (self, NULL, "tcp_on", body, s_nonce_body (nonce, body)) == 0)
                s_direct_on (self, "over a tcp connection of its own");
            else
                za_tcp_pipe_destroy (&self->out_tcp);
        }
        else {
            za_info ("ring: rank %d: %s; the link stays on ZeroMQ", self->config.rank,
                     za_last_error ());
            //  A port that drops what comes (a firewall) costs the whole wait:
            //  not again in this ring's life. Refused at once (the neighbour
            //  restarting): asked again at the next generation.
            if (za_clock_mono () - tried >= RING_TCP_CONNECT_SECS)
                self->tcp_link = 0;
        }
    }
    int stale = ask != self->tcp_asks;
    json_decref (root);
    if (self->out_state != DIRECT_ON && !stale)
        self->out_state = DIRECT_OFF;
}

//  The right neighbour's answer to our offer, if it came: the link turns on.
static void
s_direct_answered (za_ring_t *self)
{
    while (self->out_state == DIRECT_ASKED && (zsock_events (self->right) & ZMQ_POLLIN)) {
        zmsg_t *msg = zmsg_recv (self->right);
        const za_wire_msg_t *answer = self->answer;
        if (msg && za_wire_decode (msg, self->answer) == 0 && answer->op == ZA_OP_LINK) {
            if (self->tcp_link && streq (answer->code, "tcp_port"))
                s_tcp_connect (self);
            else
            if (streq (answer->code, "attached") && s_body_has_nonce (answer, self->out_nonce)) {
                char body [64];
                if (s_send_link (self, NULL, "on", body, s_nonce_body (self->out_nonce, body)) == 0)
                    s_direct_on (self, "through shared memory");
            }
        }
        zmsg_destroy (&msg);
    }
}

//  Writes what waits for room into the segment, in order, while it fits.
//  Returns 0, or -1 with an error.
static int
s_out_write (za_ring_t *self, const za_shm_record_t *record)
{
    if (self->out_tcp)
        return za_tcp_pipe_write (self->out_tcp, record);
    if (self->out_shm)
        return za_shm_write (self->out_shm, record);
    return za_error ("no path of the link's own");
}

//  The right neighbour's tcp connection broke (it died), or a call failed
//  with a chunk of the caller's partly sent: what waited for it goes
//  nowhere, and the link is back on ZeroMQ until the next generation.
static void
s_tcp_lost (za_ring_t *self, const char *why)
{
    za_info ("ring: rank %d: %s; the link to rank %d is back on ZeroMQ", self->config.rank,
             why, (self->config.rank + 1) % self->config.size);
    za_tcp_pipe_destroy (&self->out_tcp);
    self->out_state = DIRECT_OFF;
    self->pending_count = 0;
}

//  1 while chunks of ours wait: records for room, or one partly sent.
static int
s_out_waiting (const za_ring_t *self)
{
    return self->pending_count || (self->out_tcp && za_tcp_pipe_busy (self->out_tcp));
}

static int
s_direct_flush (za_ring_t *self)
{
    if (self->out_tcp && za_tcp_pipe_busy (self->out_tcp)) {
        int rc = za_tcp_pipe_flush (self->out_tcp);
        if (rc < 0)
            s_tcp_lost (self, za_last_error ());
        if (rc)
            return 0;
    }
    while (self->pending_count) {
        int rc = s_out_write (self, &self->pending [self->pending_first]);
        if (rc < 0 && self->out_tcp) {
            s_tcp_lost (self, za_last_error ());
            return 0;
        }
        if (rc)
            return rc < 0? -1: 0;
        self->pending_first = (self->pending_first + 1) % self->pending_size;
        self->pending_count--;
    }
    return 0;
}

//  Sends a record through the segment, or queues it behind those waiting
//  (its bytes stay the caller's, as a lent frame's do, until it is written).
static int
s_direct_send (za_ring_t *self, const za_shm_record_t *record)
{
    if (s_direct_flush (self) || self->out_state != DIRECT_ON)
        return -1;                  //  (the connection broke: ZeroMQ takes it)
    if (!self->pending_count) {
        int rc = s_out_write (self, record);
        if (rc <= 0)
            return rc;
    }
    if (self->pending_count == self->pending_size) {
        size_t size = self->pending_size? 2 * self->pending_size: 64;
        za_shm_record_t *grown = (za_shm_record_t *) malloc (size * sizeof *grown);
        if (!grown)
            return za_error ("out of memory");
        for (size_t i = 0; i < self->pending_count; i++)
            grown [i] = self->pending [(self->pending_first + i) % self->pending_size];
        free (self->pending);
        self->pending = grown;
        self->pending_size = size;
        self->pending_first = 0;
    }
    self->pending [(self->pending_first + self->pending_count++) % self->pending_size] = *record;
    return 0;
}

//  Sends data [0..n) of dtype (F32 or BF16) to the right neighbour as
//  message number self->sent.
static int
s_send (za_ring_t *self, za_op_t op, int64_t round, const void *data, za_dtype_t dtype,
        size_t n)
{
    s_direct_answered (self);
    int rc;
    if (self->out_state == DIRECT_ON) {
        za_shm_record_t record = {.op = op, .dtype = dtype, .task = self->config.rank,
                                  .seq = self->sent, .step = s_step (self, round), .data = data,
                                  .bytes = n * za_dtype_size (dtype)};
        rc = s_direct_send (self, &record);
        if (rc && self->out_tcp)
            s_tcp_lost (self, za_last_error ());    //  this one goes over ZeroMQ, below
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

static int
s_left (const za_ring_t *self)
{
    return (self->config.rank + self->config.size - 1) % self->config.size;
}

//  Why the message decoded in self->in is not the one expected next; NULL
//  when it is.
static const char *
s_unexpected (za_ring_t *self, za_op_t op, int64_t round, za_dtype_t dtype, size_t n)
{
    const za_wire_msg_t *in = self->in;
    int left = s_left (self);
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
        self->pending_gen = gen;
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
static void
s_release (za_ring_t *self)
{
    zmsg_destroy (&self->in_msg);
    if (self->in_is_record == RECORD_OF_SHM && self->in_shm)
        za_shm_release (self->in_shm);
    self->in_is_record = 0;
}

//  An "shm" message from the left, decoded into self->in, with the routing
//  id it came from: an offer is attached to and answered; "on" turns the
//  segment on.
static void
s_on_link (za_ring_t *self, zframe_t *from)
{
    const za_wire_msg_t *in = self->in;
    if (in->task != s_left (self))
        return;
    if (streq (in->code, "offer")) {
        //  A new segment of the left neighbour's (it restarted, or a new
        //  generation began): the old one is of no more use. One that
        //  cannot be mapped, or a rank that keeps its chunks on ZeroMQ,
        //  leaves the link there.
        za_shm_destroy (&self->in_shm);
        self->in_on = 0;
        if (!s_direct_allowed (&self->config))
            return;
        za_shm_t *shm = za_shm_attach (in->body, in->body_len);
        char nonce [33], body [64];
        if (!shm) {
            za_info ("ring: rank %d: rank %d's shared memory cannot be used (%s); the link "
                     "stays on ZeroMQ", self->config.rank, s_left (self), za_last_error ());
            return;
        }
        za_shm_nonce (shm, nonce);
        if (s_send_link (self, from, "attached", body, s_nonce_body (nonce, body)) == 0)
            self->in_shm = shm;
        else
            za_shm_destroy (&shm);
    }
    else
    if (streq (in->code, "tcp_ask")) {
        //  The left neighbour (another host) asks where to connect: a port
        //  of our own address, and a nonce to say first (unless this rank
        //  keeps every chunk on ZeroMQ: then it answers nothing).
        za_tcp_pipe_destroy (&self->in_tcp);
        self->in_tcp_on = 0;
        if (!s_direct_allowed (&self->config) || za_curve_enabled ())
            return;
        char host [ZA_CLUSTER_ENDPOINT_MAX], nonce [33], body [128];
        int port;
        size_t most = self->chunk_floats * sizeof (float);
        if (za_cluster_endpoint_split (self->config.bind, host, sizeof host, &port) == 0)
            self->in_tcp = za_tcp_pipe_listen (host, most > RING_WHOLE_BYTES? most
                                                                             : RING_WHOLE_BYTES);
        if (!self->in_tcp) {
            za_info ("ring: rank %d: no tcp connection of its own from rank %d (%s); the link "
                     "stays on ZeroMQ", self->config.rank, s_left (self), za_last_error ());
            return;
        }
        za_tcp_pipe_nonce (self->in_tcp, nonce);
        json_error_t error;
        json_t *asked = in->body? json_loadb (in->body, in->body_len, 0, &error): NULL;
        json_int_t ask = asked? json_integer_value (json_object_get (asked, "ask")): 0;
        json_decref (asked);
        int len = snprintf (body, sizeof body,
                            "{\"port\":%d,\"nonce\":\"%s\",\"ask\":%" JSON_INTEGER_FORMAT "}",
                            za_tcp_pipe_port (self->in_tcp), nonce, ask);
        if (s_send_link (self, from, "tcp_port", body, (size_t) len))
            za_tcp_pipe_destroy (&self->in_tcp);
    }
    else
    if (streq (in->code, "tcp_on") && self->in_tcp && !self->in_tcp_on) {
        char nonce [33];
        za_tcp_pipe_nonce (self->in_tcp, nonce);
        //  It connected before it said so: the accept is at once.
        if (s_body_has_nonce (in, nonce)
            && za_tcp_pipe_accept (self->in_tcp, self->config.timeout_secs > 0
                                                 ? self->config.timeout_secs: 10) == 0)
            self->in_tcp_on = 1;
        else {
            za_info ("ring: rank %d: rank %d's tcp connection: %s", self->config.rank,
                     s_left (self), za_last_error ());
            za_tcp_pipe_destroy (&self->in_tcp);
        }
    }
    else
    if (streq (in->code, "on") && self->in_shm) {
        char nonce [33];
        za_shm_nonce (self->in_shm, nonce);
        if (s_body_has_nonce (in, nonce))
            self->in_on = 1;
    }
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
            s_on_link (self, identity);
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

//  A record (of `from`) as the message in self->in.
static void
s_record_in (za_ring_t *self, const za_shm_record_t *record, int from, const char **why)
{
    za_wire_msg_t *in = self->in;
    za_wire_msg_init (in, (za_op_t) record->op);
    in->seq = record->seq;
    in->step = record->step;
    in->task = record->task;
    in->tensor_count = 1;
    in->tensors [0].dtype = (za_dtype_t) record->dtype;
    in->tensors [0].ndim = 1;
    in->tensors [0].data = record->data;
    in->tensors [0].bytes = record->bytes;
    self->in_is_record = from;
    *why = record->op == ZA_OP_RING || record->op == ZA_OP_BROADCAST? NULL
         : "a record that is no chunk";
}

//  The next record of the left neighbour's path of its own (its segment or
//  its tcp connection), if one is whole: 1 with it in self->in (or *why set
//  when it is not a chunk), 0 when none is. A path that fails is dropped:
//  what follows on it cannot be trusted, and the round times out as when
//  the left neighbour is silent (or its chunks come over ZeroMQ again).
static int
s_take_record (za_ring_t *self, const char **why)
{
    za_shm_record_t record;
    int from = self->in_on? RECORD_OF_SHM: RECORD_OF_TCP;
    int got = from == RECORD_OF_SHM? za_shm_read (self->in_shm, &record)
                                   : za_tcp_pipe_read (self->in_tcp, &record);
    if (got < 0) {
        za_info ("ring: rank %d: rank %d's %s: %s", self->config.rank, s_left (self),
                 from == RECORD_OF_SHM? "segment": "tcp connection", za_last_error ());
        self->in_on = self->in_tcp_on = 0;
        za_tcp_pipe_destroy (&self->in_tcp);
        return 0;
    }
    if (got == 0)
        return 0;
    s_record_in (self, &record, from, why);
    return 1;
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
    if (self->out_tcp && s_out_waiting (self))
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
//  not a message: s_release it all the same), 0 when the time is up, -1
//  when interrupted (SIGINT, the caller's interrupt socket).
static int
s_next (za_ring_t *self, double start, const char **why)
{
    if (self->in_held) {
        self->in_held = 0;
        *why = NULL;
        return 1;
    }
    s_release (self);
    while (!zsys_interrupted) {
        if ((self->in_on || self->in_tcp_on) && s_take_record (self, why))
            return 1;
        if (s_take_frame (self, why))
            return 1;
        if (s_out_waiting (self) && s_direct_flush (self))
            za_info ("%s", za_last_error ());
        double remaining = self->config.timeout_secs - (za_clock_mono () - start);
        if (remaining <= 0)
            return 0;
        //  While our own records wait for room, look again soon.
        int usecs = remaining > 1000? 1000000000: (int) (remaining * 1e6) + 1;
        //  (Room on a tcp connection wakes the poll; a segment's does not.)
        if (s_out_waiting (self) && !self->out_tcp && usecs > RING_PENDING_SLEEP_USECS)
            usecs = RING_PENDING_SLEEP_USECS;
        if (self->in_on) {
            if (usecs > RING_SHM_SLEEP_USECS)
                usecs = RING_SHM_SLEEP_USECS;
            if (self->out_tcp && s_out_waiting (self) && usecs > RING_MIXED_SLEEP_USECS)
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
    return self->in->op == ZA_OP_RESYNC && self->in->task == s_left (self);
}

//  Handles the resync message in self->in and lets it go: 1 when it ends
//  the call (s_on_resync).
static int
s_resync_taken (za_ring_t *self)
{
    int ends = s_on_resync (self);
    s_release (self);
    return ends;
}

//  Waits for the next message from the left: a chunk of n floats of `op`
//  and `round`. Returns 0 with it in self->in (the chunk is tensors [0];
//  the caller s_releases it), ZA_RING_RESYNC when the ring must be synced
//  again first, or -1 with an error.
static int
s_receive (za_ring_t *self, za_op_t op, int64_t round, za_dtype_t dtype, size_t n)
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
        s_release (self);
    }
    self->wait_secs += za_clock_mono () - start;
    if (got < 0)
        return za_error ("ring: rank %d interrupted while waiting for rank %d",
                         self->config.rank, s_left (self));
    if (got == 0)
        return za_error ("ring: rank %d heard nothing from rank %d for %.1f s (round %" PRId64
                         ")", self->config.rank, s_left (self), self->config.timeout_secs,
                         round);
    return rc;
}

//  1 while chunks lent from the caller's block (or our buffers) are still
//  in libzmq's hands or wait for room in the segment.
static int
s_busy (za_ring_t *self)
{
    return s_out_waiting (self) || za_wire_lease_busy (&self->lease);
}

//  Waits until libzmq has let go of every chunk lent from the caller's
//  block and every record waiting went into the segment (the caller may
//  change the block once we return), at most timeout_secs: a right
//  neighbour that is gone keeps them. Returns 0, or -1 with an error.
static int
s_drain (za_ring_t *self)
{
    double start = za_clock_mono ();
    while (s_busy (self)) {
        if (s_direct_flush (self))
            return za_error ("ring: rank %d: %s", self->config.rank, za_last_error ());
        if (!s_busy (self))
            break;
        if (za_clock_mono () - start > self->config.timeout_secs || zsys_interrupted)
            return za_error ("ring: rank %d: %s took nothing for %.1f s", self->config.rank,
                             self->right_endpoint, self->config.timeout_secs);
        //  Records no reader takes (the right neighbour died): a new
        //  generation may be on its way round, which ends the wait. Anything
        //  else that comes is kept for the next call.
        const char *why;
        if (s_out_waiting (self) && !self->in_held) {
            s_release (self);
            if (s_take_frame (self, &why)) {
                if (!why && s_is_resync (self)) {
                    if (s_resync_taken (self))
                        return ZA_RING_RESYNC;
                }
                else
                if (why) {
                    s_drop (self, why);
                    s_release (self);
                }
                else
                    self->in_held = 1;
            }
        }
        if (self->out_tcp && s_out_waiting (self) && !self->in_held)
            s_poll (self, 1);           //  room on the connection wakes it
        else
            usleep (20);
    }
    return 0;
}

// ---------------------------------------------------------------------------
//  The collectives

//  Segment s of n floats over `size` ranks: [*begin, *begin + *count).
static void
s_segment (size_t n, int size, int s, size_t *begin, size_t *count)
{
    size_t each = (n + (size_t) size - 1) / (size_t) size;
    size_t from = each * (size_t) s;
    *begin = from < n? from: n;
    *count = from < n? (n - from < each? n - from: each): 0;
}

static int
s_mod (int a, int n)
{
    return ((a % n) + n) % n;
}

//  Sends data [0..len) of an all-reduce: as it is, or in bf16 from the
//  staging half `half` at `at`, where it stays until the call's end (each
//  position goes once a phase). Half 0, the reduce phase: data's cast goes
//  there now. Half 1, the gather: the bf16 is there already (the mean this
//  rank rounded, what the gather received) and goes as it is.
static int
s_send_chunk (za_ring_t *self, int64_t round, const float *data, size_t len, size_t n,
              int half, size_t at)
{
    if (self->config.wire_dtype != ZA_DTYPE_BF16)
        return s_send (self, ZA_OP_RING, round, data, ZA_DTYPE_F32, len);
    uint16_t *low = self->low + (size_t) half * n + at;
    if (half == 0)
        za_f32_to_bf16 (data, low, len);
    return s_send (self, ZA_OP_RING, round, low, ZA_DTYPE_BF16, len);
}

//  A small tensor: every rank's whole tensor goes round the ring (each rank
//  sends its own, then passes on what comes from the left, size - 1
//  messages in all), and every rank sums the size tensors in rank order:
//  the same bits everywhere (for 2 ranks the same sum as the segments' way,
//  a + b being b + a). In bf16 each tensor counts as its cast, the rank's
//  own too, and the mean is rounded as the segments' owners round theirs.
//  Returns 0, ZA_RING_RESYNC, or -1 with an error.
static int
s_allreduce_whole (za_ring_t *self, float *data, size_t n, int64_t round, za_dtype_t dtype)
{
    int rank = self->config.rank, size = self->config.size;
    size_t need = (size_t) size * n;
    if (need > self->whole_floats || (dtype == ZA_DTYPE_BF16 && need > self->low_halves)) {
        //  The last call's messages must be back before their buffers go.
        int drained = s_busy (self)? s_drain (self): 0;
        if (drained)
            return drained;
        float *whole = (float *) malloc (need * sizeof (float));
        uint16_t *low = dtype == ZA_DTYPE_BF16? (uint16_t *) malloc (need * sizeof (uint16_t))
                                               : NULL;
        if (!whole || (dtype == ZA_DTYPE_BF16 && !low)) {
            free (whole);
            free (low);
            return za_error ("ring: rank %d: out of memory for %zu floats", rank, need);
        }
        free (self->whole);
        self->whole = whole;
        self->whole_floats = need;
        if (low) {
            free (self->low);
            self->low = low;
            self->low_halves = need;
        }
    }
    //  Our own, sent from our copy (the caller's block gets the mean while
    //  libzmq may still hold the message).
    float *own = self->whole + (size_t) rank * n;
    if (dtype == ZA_DTYPE_BF16) {
        uint16_t *low = self->low + (size_t) rank * n;
        za_f32_to_bf16 (data, low, n);
        za_bf16_to_f32 (low, own, n);
        if (s_send (self, ZA_OP_RING, round, low, ZA_DTYPE_BF16, n))
            return -1;
    }
    else {
        memcpy (own, data, n * sizeof (float));
        if (s_send (self, ZA_OP_RING, round, own, ZA_DTYPE_F32, n))
            return -1;
    }
    for (int hop = 0; hop < size - 1; hop++) {
        int origin = s_mod (rank - hop - 1, size);
        int got = s_receive (self, ZA_OP_RING, round, dtype, n);
        if (got)
            return got;
        //  Received frames are not always aligned: read them bytewise.
        const unsigned char *from = (const unsigned char *) self->in->tensors [0].data;
        float *to = self->whole + (size_t) origin * n;
        if (dtype == ZA_DTYPE_BF16) {
            uint16_t *low = self->low + (size_t) origin * n;
            memcpy (low, from, n * sizeof (uint16_t));
            za_bf16_to_f32 (low, to, n);
        }
        else
            memcpy (to, from, n * sizeof (float));
        s_release (self);
        //  Passed on, but to the rank it came from.
        if (hop < size - 2
            && (dtype == ZA_DTYPE_BF16
                ? s_send (self, ZA_OP_RING, round, self->low + (size_t) origin * n,
                          ZA_DTYPE_BF16, n)
                : s_send (self, ZA_OP_RING, round, to, ZA_DTYPE_F32, n)))
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        float sum = self->whole [i];
        for (int r = 1; r < size; r++)
            sum += self->whole [(size_t) r * n + i];
        data [i] = sum / (float) size;
    }
    if (dtype == ZA_DTYPE_BF16)
        za_bf16_round (data, n);
    return s_drain (self);
}

static int
s_allreduce_mean (za_ring_t *self, float *data, size_t n, int64_t round)
{
    int rank = self->config.rank, size = self->config.size;
    if (size == 1)
        return 0;
    if (n > 0 && n * sizeof (float) <= RING_WHOLE_BYTES)
        return s_allreduce_whole (self, data, n, round,
                                  self->config.wire_dtype == ZA_DTYPE_BF16? ZA_DTYPE_BF16
                                                                          : ZA_DTYPE_F32);
    za_dtype_t dtype = self->config.wire_dtype == ZA_DTYPE_BF16? ZA_DTYPE_BF16: ZA_DTYPE_F32;
    if (dtype == ZA_DTYPE_BF16 && 2 * n > self->low_halves) {
        //  The last call's chunks must be back (one that failed may not have drained).
        int drained = s_busy (self)? s_drain (self): 0;
        if (drained)
            return drained;
        uint16_t *grown = (uint16_t *) malloc (2 * n * sizeof (uint16_t));
        if (!grown)
            return za_error ("ring: rank %d: out of memory for %zu bf16 values", rank, 2 * n);
        free (self->low);
        self->low = grown;
        self->low_halves = 2 * n;
    }
    size_t chunk = self->chunk_floats, begin, count;
    //  Hop 0: this rank's own segment, every chunk of it.
    s_segment (n, size, rank, &begin, &count);
    for (size_t at = 0; at < count; at += chunk)
        if (s_send_chunk (self, round, data + begin + at,
                          count - at < chunk? count - at: chunk, n, 0, begin + at))
            return -1;
    int hops = 2 * (size - 1);
    for (int hop = 0; hop < hops; hop++) {
        int reduce = hop < size - 1;
        int segment = reduce? s_mod (rank - hop - 1, size): s_mod (rank - (hop - size + 1), size);
        s_segment (n, size, segment, &begin, &count);
        for (size_t at = 0; at < count; at += chunk) {
            size_t len = count - at < chunk? count - at: chunk;
            int got = s_receive (self, ZA_OP_RING, round, dtype, len);
            if (got)
                return got;
            //  Received frames are not always aligned: read them bytewise.
            const unsigned char *from = (const unsigned char *) self->in->tensors [0].data;
            float *to = data + begin + at;
            if (reduce) {
                if (dtype == ZA_DTYPE_BF16)
                    for (size_t i = 0; i < len; i++)
                        to [i] += za_bf16_load (from + i * sizeof (uint16_t));
                else
                    for (size_t i = 0; i < len; i++) {
                        float v;
                        memcpy (&v, from + i * sizeof v, sizeof v);
                        to [i] += v;
                    }
                //  The last reduce hop completes this segment's sum: the mean,
                //  computed here once, is what every rank gets (in bf16, this
                //  rank rounds its own copy as the others will read it).
                if (hop == size - 2) {
                    for (size_t i = 0; i < len; i++)
                        to [i] /= (float) size;
                    if (dtype == ZA_DTYPE_BF16) {
                        uint16_t *low = self->low + n + begin + at;
                        za_f32_to_bf16 (to, low, len);
                        za_bf16_to_f32 (low, to, len);
                    }
                }
            }
            else
            if (dtype == ZA_DTYPE_BF16) {
                //  Kept as it came for the next rank (if any), and widened for us.
                const void *low = from;
                if (hop < hops - 1)
                    low = memcpy (self->low + n + begin + at, from, len * sizeof (uint16_t));
                za_bf16_to_f32 (low, to, len);
            }
            else
                memcpy (to, from, len * sizeof (float));
            s_release (self);
            if (hop < hops - 1
                && s_send_chunk (self, round, to, len, n, hop >= size - 2, begin + at))
                return -1;
        }
    }
    return s_drain (self);
}

static int
s_broadcast (za_ring_t *self, float *data, size_t n, int root, int64_t round)
{
    int rank = self->config.rank, size = self->config.size;
    if (size == 1)
        return 0;
    if (root < 0 || root >= size)
        return za_error ("ring: broadcast from rank %d of %d", root, size);
    size_t chunk = self->chunk_floats;
    int last = rank == s_mod (root - 1, size);      //  nobody to pass it on to
    for (size_t at = 0; at < n; at += chunk) {
        size_t len = n - at < chunk? n - at: chunk;
        if (rank != root) {
            int got = s_receive (self, ZA_OP_BROADCAST, round, ZA_DTYPE_F32, len);
            if (got)
                return got;
            memcpy (data + at, self->in->tensors [0].data, len * sizeof (float));
            s_release (self);
        }
        if (!last && s_send (self, ZA_OP_BROADCAST, round, data + at, ZA_DTYPE_F32, len))
            return -1;
    }
    return s_drain (self);
}

//  A call that did not end well leaves no record pointing into the
//  caller's block (who may free it): they were of this call only.
static int
s_ended (za_ring_t *self, int rc)
{
    if (rc) {
        self->pending_count = 0;
        if (self->out_tcp && za_tcp_pipe_busy (self->out_tcp))
            s_tcp_lost (self, "a call ended with a chunk partly sent");
    }
    return rc;
}

int
za_ring_allreduce_mean (za_ring_t *self, float *data, size_t n, int64_t round)
{
    return s_ended (self, s_allreduce_mean (self, data, n, round));
}

int
za_ring_broadcast (za_ring_t *self, float *data, size_t n, int root, int64_t round)
{
    return s_ended (self, s_broadcast (self, data, n, root, round));
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
    s_direct_offer (self);
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
    //  requests once; anything else is of an earlier generation.
    double start = za_clock_mono ();
    const char *why;
    int got = 1;
    while (!self->pending_gen && (got = s_next (self, start, &why)) == 1) {
        if (!why && s_is_resync (self))
            s_on_resync (self);
        else
            s_drop (self, why? why: "of an earlier generation");
        s_release (self);
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
