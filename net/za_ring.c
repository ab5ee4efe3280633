/*  za_ring.c: the ring all-reduce and broadcast over ZeroMQ (za_ring.h):
    the ring made (its sockets to the neighbours) and freed, and what it
    tells. Its other parts are named in za_ring_private.h.              */
#include "za_ring_private.h"
#include "za/za_curve.h"
#include "za/za_cluster.h"

//  Messages may queue on a link: a round's worth, and then some.
#define RING_MIN_HWM 1000

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

//  The ROUTER where the left neighbour sends, bound at config.bind (and its
//  ipc alias). Returns 0, or -1 with an error.
static int
s_open_left (za_ring_t *self)
{
    const za_ring_config_t *config = &self->config;
    self->left = zsock_new (ZMQ_ROUTER);
    if (!self->left)
        return za_error ("ring: cannot make sockets");
    //  A chunk is at most chunk_floats; anything larger is no ring message.
    zsock_set_maxmsgsize (self->left, za_wire_max_frame (self->chunk_floats * sizeof (float)));
    zsock_set_rcvhwm (self->left, RING_MIN_HWM);
    //  CURVE (with --certs) on tcp and ipc alike: an abstract ipc name is
    //  open to every process of the host.
    if (za_curve_server (self->left))
        return -1;
    if (zsock_bind (self->left, "%s", config->bind) < 0)
        return za_error ("ring: rank %d cannot bind %s: %s", config->rank, config->bind,
                         zmq_strerror (zmq_errno ()));
    int loopback, port = s_tcp_port (config->bind, &loopback);
    if (port && zsock_bind (self->left, "ipc://@zactor-ring-%d", port) < 0)
        za_info ("ring: rank %d cannot bind ipc://@zactor-ring-%d (%s): a neighbour on this "
                 "host must use tcp (tcp_only)", config->rank, port, zmq_strerror (zmq_errno ()));
    return 0;
}

//  The DEALER to the right neighbour's ROUTER (over ipc when it is on this
//  host), and whether the link may get a path of its own. Returns 0, or -1
//  with an error.
static int
s_open_right (za_ring_t *self)
{
    const za_ring_config_t *config = &self->config;
    self->right = zsock_new (ZMQ_DEALER);
    if (!self->right)
        return za_error ("ring: cannot make sockets");
    zsock_set_sndhwm (self->right, RING_MIN_HWM);
    zsock_set_linger (self->right, 0);
    //  A send that would block for ever (a neighbour never reached) fails
    //  when a receive would have, naming the neighbour.
    if (config->timeout_secs > 0)
        zsock_set_sndtimeo (self->right, (int) (config->timeout_secs * 1000));
    za_curve_client (self->right);
    int loopback, port = s_tcp_port (config->right, &loopback);
    self->shm_link = self->tcp_link = 0;
    if (port && loopback && !config->tcp_only) {
        snprintf (self->right_endpoint, sizeof self->right_endpoint, "ipc://@zactor-ring-%d",
                  port);
        self->shm_link = za_ring_direct_allowed (config);
    }
    else {
        snprintf (self->right_endpoint, sizeof self->right_endpoint, "%s", config->right);
        //  CURVE protects ZeroMQ's bytes only: a job with --certs keeps them there.
        self->tcp_link = port > 0 && za_ring_direct_allowed (config) && !za_curve_enabled ();
    }
    if (zsock_connect (self->right, "%s", self->right_endpoint) < 0)
        return za_error ("ring: rank %d cannot connect to %s: %s", config->rank,
                         self->right_endpoint, zmq_strerror (zmq_errno ()));
    return 0;
}

//  Keeps config->right in the ring's own copy (the caller's may go).
static void
s_keep_right (za_ring_t *self, const char *right)
{
    snprintf (self->right_config, sizeof self->right_config, "%s", right? right: "");
    self->config.right = self->right_config;
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
    s_keep_right (self, config->right);
    if (config->size == 1)
        return self;                //  nobody to talk to
    if (s_open_left (self) || s_open_right (self))
        goto fail;
    za_ring_direct_offer (self);             //  again at each generation
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

int
za_ring_reshape (za_ring_t *self, int rank, int size, const char *right, int64_t tag)
{
    if (size < 1 || size > ZA_RING_MAX_RANKS || rank < 0 || rank >= size)
        return za_error ("ring: rank %d of %d is out of range (1 to %d ranks)", rank, size,
                         ZA_RING_MAX_RANKS);
    //  The link to the right: what was queued or lent goes nowhere. The one
    //  from the left stays as it is: a left neighbour that re-formed first
    //  may be writing into it already (another one offers its own).
    za_ring_release (self);
    self->in_held = 0;
    za_shm_destroy (&self->out_shm);
    za_tcp_pipe_destroy (&self->out_tcp);
    self->out_state = DIRECT_OFF;
    self->pending_first = self->pending_count = 0;
    self->said_direct = 0;
    zsock_destroy (&self->right);
    za_wire_lease_wait (&self->lease);
    self->config.rank = rank;
    self->config.size = size;
    s_keep_right (self, right);
    //  A root's notice that came already stands: za_ring_resync takes it if
    //  it is of these members.
    self->tag = tag;
    self->asked = 0;
    self->sent = self->received = 0;
    self->right_endpoint [0] = 0;
    if (size == 1)
        return 0;
    if (!self->left && s_open_left (self))
        return -1;
    return s_open_right (self);
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
