/*  za_ring_direct.c: a ring link's path of its own, off ZeroMQ: shared
    memory to a neighbour on this host (za_shm.h), or a tcp connection of
    the link's own to one on another host (za_tcp_pipe.h), set up and used. */
#include "za_ring_private.h"
#include "za/za_curve.h"
#include "za/za_cluster.h"

#include <jansson.h>

//  A tcp connection of the link's own that does not connect in this long
//  (a firewall that drops the port) leaves the link on ZeroMQ.
#define RING_TCP_CONNECT_SECS 3.0

//  The same-host link (za_shm.h; PROTOCOL.md 14): the sender offers a new
//  segment at each generation ("shm" "offer", over ZeroMQ), the receiver maps
//  it and answers "attached" (or nothing: the link stays on ZeroMQ), and the
//  sender's "on" is its last chunk-free word on ZeroMQ before the records:
//  from then on the receiver reads chunks from the segment only.

//  1 unless this rank keeps every chunk on ZeroMQ (no_shm, ZA_SHM_DISABLE).
int
za_ring_direct_allowed (const za_ring_config_t *config)
{
    return !config->no_shm && za_shm_enabled ();
}

int
za_ring_left (const za_ring_t *self)
{
    return (self->config.rank + self->config.size - 1) % self->config.size;
}

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
void
za_ring_direct_offer (za_ring_t *self)
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
void
za_ring_direct_answered (za_ring_t *self)
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
void
za_ring_tcp_lost (za_ring_t *self, const char *why)
{
    za_info ("ring: rank %d: %s; the link to rank %d is back on ZeroMQ", self->config.rank,
             why, (self->config.rank + 1) % self->config.size);
    za_tcp_pipe_destroy (&self->out_tcp);
    self->out_state = DIRECT_OFF;
    self->pending_count = 0;
}

//  1 while chunks of ours wait: records for room, or one partly sent.
int
za_ring_out_waiting (const za_ring_t *self)
{
    return self->pending_count || (self->out_tcp && za_tcp_pipe_busy (self->out_tcp));
}

int
za_ring_direct_flush (za_ring_t *self)
{
    if (self->out_tcp && za_tcp_pipe_busy (self->out_tcp)) {
        int rc = za_tcp_pipe_flush (self->out_tcp);
        if (rc < 0)
            za_ring_tcp_lost (self, za_last_error ());
        if (rc)
            return 0;
    }
    while (self->pending_count) {
        int rc = s_out_write (self, &self->pending [self->pending_first]);
        if (rc < 0 && self->out_tcp) {
            za_ring_tcp_lost (self, za_last_error ());
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
int
za_ring_direct_send (za_ring_t *self, const za_shm_record_t *record)
{
    if (za_ring_direct_flush (self) || self->out_state != DIRECT_ON)
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

//  Whatever came from an earlier left neighbour, segment and tcp connection
//  both: a new left (the ring re-formed) may be on another host than the
//  last one, and za_ring_take_record reads the segment while in_on holds.
static void
s_drop_in (za_ring_t *self)
{
    za_shm_destroy (&self->in_shm);
    self->in_on = 0;
    za_tcp_pipe_destroy (&self->in_tcp);
    self->in_tcp_on = 0;
}

//  A new segment of the left neighbour's (it restarted, or a new
//  generation began): what came before is of no more use. One that cannot
//  be mapped, or a rank that keeps its chunks on ZeroMQ, leaves the link
//  there.
static void
s_on_offer (za_ring_t *self, zframe_t *from)
{
    const za_wire_msg_t *in = self->in;
    s_drop_in (self);
    if (!za_ring_direct_allowed (&self->config))
        return;
    za_shm_t *shm = za_shm_attach (in->body, in->body_len);
    char nonce [33], body [64];
    if (!shm) {
        za_info ("ring: rank %d: rank %d's shared memory cannot be used (%s); the link "
                 "stays on ZeroMQ", self->config.rank, za_ring_left (self), za_last_error ());
        return;
    }
    za_shm_nonce (shm, nonce);
    if (s_send_link (self, from, "attached", body, s_nonce_body (nonce, body)) == 0)
        self->in_shm = shm;
    else
        za_shm_destroy (&shm);
}

//  The left neighbour (another host) asks where to connect: a port of our
//  own address, and a nonce to say first (unless this rank keeps every
//  chunk on ZeroMQ: then it answers nothing).
static void
s_on_tcp_ask (za_ring_t *self, zframe_t *from)
{
    const za_wire_msg_t *in = self->in;
    s_drop_in (self);
    if (!za_ring_direct_allowed (&self->config) || za_curve_enabled ())
        return;
    char host [ZA_CLUSTER_ENDPOINT_MAX], nonce [33], body [128];
    int port;
    size_t most = self->chunk_floats * sizeof (float);
    if (za_cluster_endpoint_split (self->config.bind, host, sizeof host, &port) == 0)
        self->in_tcp = za_tcp_pipe_listen (host, most > RING_WHOLE_BYTES? most
                                                                         : RING_WHOLE_BYTES);
    if (!self->in_tcp) {
        za_info ("ring: rank %d: no tcp connection of its own from rank %d (%s); the link "
                 "stays on ZeroMQ", self->config.rank, za_ring_left (self), za_last_error ());
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

//  The left neighbour says its tcp connection is ours: accepted when it
//  names our nonce.
static void
s_on_tcp_on (za_ring_t *self)
{
    char nonce [33];
    za_tcp_pipe_nonce (self->in_tcp, nonce);
    //  It connected before it said so: the accept is at once.
    if (s_body_has_nonce (self->in, nonce)
        && za_tcp_pipe_accept (self->in_tcp, self->config.timeout_secs > 0
                                             ? self->config.timeout_secs: 10) == 0)
        self->in_tcp_on = 1;
    else {
        za_info ("ring: rank %d: rank %d's tcp connection: %s", self->config.rank,
                 za_ring_left (self), za_last_error ());
        za_tcp_pipe_destroy (&self->in_tcp);
    }
}

//  An "shm" message from the left, decoded into self->in, with the routing
//  id it came from: an offer is attached to and answered; "on" turns the
//  segment on.
void
za_ring_on_link (za_ring_t *self, zframe_t *from)
{
    const za_wire_msg_t *in = self->in;
    if (in->task != za_ring_left (self))
        return;
    if (streq (in->code, "offer"))
        s_on_offer (self, from);
    else
    if (streq (in->code, "tcp_ask"))
        s_on_tcp_ask (self, from);
    else
    if (streq (in->code, "tcp_on") && self->in_tcp && !self->in_tcp_on)
        s_on_tcp_on (self);
    else
    if (streq (in->code, "on") && self->in_shm) {
        char nonce [33];
        za_shm_nonce (self->in_shm, nonce);
        if (s_body_has_nonce (in, nonce))
            self->in_on = 1;
    }
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
int
za_ring_take_record (za_ring_t *self, const char **why)
{
    za_shm_record_t record;
    int from = self->in_on? RECORD_OF_SHM: RECORD_OF_TCP;
    int got = from == RECORD_OF_SHM? za_shm_read (self->in_shm, &record)
                                   : za_tcp_pipe_read (self->in_tcp, &record);
    if (got < 0) {
        za_info ("ring: rank %d: rank %d's %s: %s", self->config.rank, za_ring_left (self),
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
