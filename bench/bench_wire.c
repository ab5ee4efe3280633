/*  bench_wire: push+reply throughput of a zactor ps against raw ZeroMQ, over
    tcp loopback, for the same message sizes.

    zactor: a za_ps_actor in this process (SGD, lr 1e-9, so the apply costs
    little); this program is the chief: a DEALER sends `init`, then times round
    trips of `push` (one gradient tensor per part of the ps, zero-copy through
    za_wire_send), each answered by `values` (received, decoded, checked).
    raw: a ROUTER that sends every frame it receives straight back (the
    zmq_msg_t is forwarded, never copied), and a DEALER that sends the same
    frames as the push (a header frame of the push's header size, then the
    payload frames, zero-copy with zmq_msg_init_data) and receives the echo.

    Sizes: the seed CNN on 1 ps (10 tensors, 93,322 floats), one 4 KiB tensor
    and one 16 MiB tensor (a one-variable model). After a warm-up the sides
    alternate, ROUNDS rounds each of the same number of round trips (chosen so a
    raw round takes about SECONDS); medians are reported. MB/s counts the
    payload bytes of both directions (headers, under 1 KB, left out).

    For the reading, each size also gets a "#" line: a third side, raw_touch,
    the same echo but reading and rewriting every payload float once before
    sending it back (the least work a ps does with a push: its thread, not the
    I/O thread, touches the bytes); and zactor's own costs measured alone in
    one thread: the codec (build + za_wire_send + zmsg_recv + za_wire_decode
    of one push over inproc; a round trip has two such messages) and the ps's
    SGD apply over its floats.

    ZA_WIRE_DTYPE=bf16 in the environment: the job's --wire-dtype bf16 (the
    push carries the gradients' cast, made in the timed round trip as a
    worker makes it; the values come back in bf16 and are widened). Either
    way the values received are copied out into a block, as a worker takes
    them into its replica (and ps-lite's ZPull into the caller's array).

    The ps is on this host: the client's tensors and the ps's go through
    shared memory (za_shm_link.h) unless ZA_SHM_DISABLE=1.

    bench_wire [ROUNDS] [SECONDS] [SIZES]  (defaults 7, 0.4, "4k,cnn,16m"; also 4m)
      -> wire size=B zactor_mb_s=F raw_mb_s=F ratio=F zactor_rt_s=F raw_rt_s=F  */
#include "za/za_curve.h"
#include "za/za_model.h"
#include "za/za_optim.h"
#include "za/za_partition.h"
#include "za/za_role.h"
#include "za/za_shm.h"
#include "za/za_shm_link.h"
#include "za/za_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ROUNDS 101
#define WARMUP_SECS 0.4
#define PARTITION_NEVER ((size_t) 1 << 40)
//  A peer that does not answer within this fails the run instead of hanging it.
#define RECV_TIMEOUT_MS 30000

// ---------------------------------------------------------------------------
//  A model of one variable "w" of n floats: the synthetic sizes. The ps only
//  asks a model for its variable table (create, then destroy).

typedef struct {
    int64_t floats;
} s_one_params_t;

static void *
s_one_create (const void *params, za_input_shape_t input, int batch_max,
              const za_backend_t *backend, za_vars_t *vars)
{
    (void) input, (void) batch_max, (void) backend;
    const s_one_params_t *one = (const s_one_params_t *) params;
    if (za_vars_add (vars, "w", 1, &one->floats) < 0)
        return NULL;
    static int state;
    return &state;
}

static void
s_one_destroy (void **state_p)
{
    *state_p = NULL;
}

static const za_model_fn_t s_one_model = {
    .name = "one_tensor",
    .create = s_one_create,
    .destroy = s_one_destroy,
};

// ---------------------------------------------------------------------------
//  The raw echo: a ROUTER that sends back whatever it receives. With args
//  non-NULL (raw_touch) it first rewrites each payload float in place, x -=
//  1e-9 x, as an SGD apply reads and writes (frames libzmq left unaligned,
//  all under 8 KiB, are skipped).

static void
s_touch (zmq_msg_t *frame)
{
    float *x = (float *) zmq_msg_data (frame);
    size_t n = zmq_msg_size (frame) / sizeof (float);
    if (((uintptr_t) x & (sizeof (float) - 1)) == 0)
        for (size_t i = 0; i < n; i++)
            x [i] -= 1e-9f * x [i];
}

static void
s_echo_actor (zsock_t *pipe, void *args)
{
    int touch = args != NULL;
    zsock_t *router = zsock_new (ZMQ_ROUTER);
    zsock_set_maxmsgsize (router, ZA_WIRE_MAX_FRAME_BYTES);
    za_curve_server (router);
    int bound = router && zsock_bind (router, "tcp://127.0.0.1:*") >= 0;
    zsock_signal (pipe, 0);
    char *endpoint = bound? zsock_last_endpoint (router): NULL;     //  ours to free
    zstr_send (pipe, endpoint? endpoint: "");
    zstr_free (&endpoint);
    void *r = bound? zsock_resolve (router): NULL;
    zmq_pollitem_t items [2] = {
        {zsock_resolve (pipe), 0, ZMQ_POLLIN, 0},
        {r, 0, ZMQ_POLLIN, 0},
    };
    while (bound && !zsys_interrupted) {
        if (zmq_poll (items, 2, -1) < 0)
            break;
        if (items [0].revents & ZMQ_POLLIN) {
            char *command = zstr_recv (pipe);
            int term = !command || streq (command, "$TERM");
            zstr_free (&command);
            if (term)
                break;
        }
        if (items [1].revents & ZMQ_POLLIN) {
            //  Routing id, header, payloads: each frame goes back as received.
            int more = 1;
            for (int index = 0; more; index++) {
                zmq_msg_t frame;
                zmq_msg_init (&frame);
                if (zmq_msg_recv (&frame, r, 0) < 0) {
                    zmq_msg_close (&frame);
                    goto done;
                }
                more = zmq_msg_more (&frame);
                if (touch && index >= 2)
                    s_touch (&frame);
                if (zmq_msg_send (&frame, r, more? ZMQ_SNDMORE: 0) < 0)
                    zmq_msg_close (&frame);
            }
        }
    }
done:
    zsock_destroy (&router);
}

// ---------------------------------------------------------------------------
//  One size: a ps, the echo, a DEALER to each.

typedef struct {
    const char *label;
    za_role_config_t config;
    za_vars_t vars;
    za_partition_t placement;
    int parts [ZA_PARTITION_MAX_PARTS];
    int part_count;
    size_t payload;                     //  bytes of one push (= one reply)
    float *grads;                       //  pushed
    uint16_t *low;                      //  ZA_WIRE_DTYPE=bf16: their cast
    float *widened;                     //  the values, copied out (widened from bf16)
                                        //  as a worker copies them into its replica
    float *zeros;                       //  the init values
    zactor_t *ps;
    zactor_t *echo, *touch;
    zsock_t *to_ps;
    za_shm_link_t *link;                //  the ps on this host: tensors through shared
                                        //  memory, as a worker's (NULL: ZA_SHM_DISABLE=1)
    za_shm_bell_t *bell;                //  and its whole replies ring this
    zsock_t *to_echo, *to_touch;
    za_wire_msg_t *out, *in;
    za_wire_lease_t lease;
    uint64_t seq;
    size_t header_bytes;                //  the push's header frame
    char *header;                       //  raw side: that many bytes
    char endpoint [64];
} s_bench_t;

static int
s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (fd >= 0 && bind (fd, (struct sockaddr *) &addr, sizeof addr) == 0
        && getsockname (fd, (struct sockaddr *) &addr, &len) == 0)
        port = ntohs (addr.sin_port);
    if (fd >= 0)
        close (fd);
    return port;
}

//  Starts self->out as a request `op` with the next seq.
static void
s_begin (s_bench_t *self, za_op_t op)
{
    za_wire_msg_init (self->out, op);
    self->out->seq = ++self->seq;
    self->out->task = 0;
}

//  Adds one tensor per part of the ps, from `block` of dtype (as a worker does).
static void
s_add_parts (s_bench_t *self, const void *block, za_dtype_t dtype)
{
    for (int i = 0; i < self->part_count; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        const za_var_t *var = &self->vars.vars [part->var];
        int64_t shape [ZA_MAX_DIMS];
        int ndim = var->ndim;
        if (part->size == var->size)
            memcpy (shape, var->shape, sizeof shape);
        else
            ndim = 1, shape [0] = (int64_t) part->size;
        za_wire_msg_add (self->out, part->name, dtype, ndim, shape, (const char *) block
                         + (var->offset + part->offset) * za_dtype_size (dtype));
    }
}

//  The push: the gradients of the ps's parts.
static void
s_build_push (s_bench_t *self)
{
    s_begin (self, ZA_OP_PUSH);
    if (self->low) {
        za_f32_to_bf16 (self->grads, self->low, self->vars.total);
        s_add_parts (self, self->low, ZA_DTYPE_BF16);
    }
    else
        s_add_parts (self, self->grads, ZA_DTYPE_F32);
}

//  Decodes the reply (its tensors in its frames, or held in the link's
//  record, read there until the next call, as a worker reads its reply)
//  and checks it is `expect` to our seq. Destroys *reply_p. Returns 0, or
//  -1.
static int
s_check_reply (s_bench_t *self, za_op_t expect, zmsg_t **reply_p, const void *const *data,
               const size_t *sizes, int count)
{
    int rc = 0;
    if (data? za_wire_decode_payloads (*reply_p, data, sizes, count, self->in)
            : za_wire_decode (*reply_p, self->in))
        rc = -1;
    else
    if (self->in->op != expect || self->in->seq != self->out->seq)
        rc = za_error ("ps answered %s (%s %s) seq %llu to seq %llu, expected %s",
                       za_op_name (self->in->op), self->in->code, self->in->error,
                       (unsigned long long) self->in->seq,
                       (unsigned long long) self->out->seq, za_op_name (expect));
    else
    if (expect == ZA_OP_VALUES && self->in->tensor_count != self->part_count)
        rc = za_error ("values carries %d tensors, expected %d", self->in->tensor_count,
                       self->part_count);
    //  The values go where a worker's replica would take them.
    if (rc == 0 && expect == ZA_OP_VALUES)
        for (int i = 0, at = 0; i < self->in->tensor_count; i++) {
            const za_wire_tensor_t *t = &self->in->tensors [i];
            size_t floats = t->bytes / za_dtype_size (t->dtype);
            if (self->low)
                za_bf16_to_f32 ((const uint16_t *) t->data, self->widened + at, floats);
            else
                memcpy (self->widened + at, t->data, t->bytes);
            at += (int) floats;
        }
    if (data && rc)
        za_shm_link_done (self->link);
    zmsg_destroy (reply_p);
    return rc;
}

//  Sends self->out to the ps and waits for the reply `expect`.
static int
s_call (s_bench_t *self, za_op_t expect)
{
    //  The last reply, read in place, goes back to the ps first.
    if (self->link)
        za_shm_link_done (self->link);
    if (self->link? za_shm_link_send (self->link, self->to_ps, NULL, self->out, &self->lease)
                  : za_wire_send (self->to_ps, NULL, self->out, &self->lease))
        return -1;
    //  As a worker waits: a whole reply through the ps's segment (the bell
    //  rings), or one over ZeroMQ.
    zmsg_t *reply = NULL;
    int rc = 0;
    while (!reply && rc == 0) {
        if (self->bell) {
            za_shm_bell_quiet (self->bell);
            //  Read in place, as a worker reads its reply.
            const void *const *data;
            const size_t *sizes;
            int count;
            int got = za_shm_link_take (self->link, &reply, &data, &sizes, &count);
            if (got < 0)
                return -1;
            if (got == 1)
                return s_check_reply (self, expect, &reply, data, sizes, count);
        }
        zmq_pollitem_t items [2] = {
            {zsock_resolve (self->to_ps), 0, ZMQ_POLLIN, 0},
            {NULL, self->bell? za_shm_bell_fd (self->bell): -1, ZMQ_POLLIN, 0},
        };
        int n = zmq_poll (items, self->bell? 2: 1, RECV_TIMEOUT_MS);
        if (n == 0)
            rc = za_error ("no reply from the ps");
        if (n > 0 && (items [0].revents & ZMQ_POLLIN)) {
            reply = zmsg_recv (self->to_ps);
            if (!reply)
                rc = za_error ("no reply from the ps");
            else
            if (self->link && za_shm_link_receive (self->link, reply))
                rc = -1;
        }
    }
    if (rc)
        zmsg_destroy (&reply);
    return rc? rc: s_check_reply (self, expect, &reply, NULL, NULL, 0);
}

static int
s_zactor_rt (s_bench_t *self)
{
    //  A worker waits here before it overwrites its gradients.
    za_wire_lease_wait (&self->lease);
    s_build_push (self);
    return s_call (self, ZA_OP_VALUES);
}

static void
s_nop_free (void *data, void *hint)
{
    (void) data, (void) hint;
}

static int
s_raw_call (s_bench_t *self, zsock_t *sock)
{
    void *s = zsock_resolve (sock);
    zmq_msg_t frame;
    zmq_msg_init_data (&frame, self->header, self->header_bytes, s_nop_free, NULL);
    if (zmq_msg_send (&frame, s, ZMQ_SNDMORE) < 0)
        return za_error ("raw: send failed: %s", zmq_strerror (zmq_errno ()));
    for (int i = 0; i < self->part_count; i++) {
        const za_part_t *part = &self->placement.parts [self->parts [i]];
        float *data = self->grads + self->vars.vars [part->var].offset + part->offset;
        zmq_msg_init_data (&frame, data, part->size * sizeof (float), s_nop_free, NULL);
        if (zmq_msg_send (&frame, s, i + 1 < self->part_count? ZMQ_SNDMORE: 0) < 0)
            return za_error ("raw: send failed: %s", zmq_strerror (zmq_errno ()));
    }
    int more = 1, frames = 0;
    while (more) {
        zmq_msg_init (&frame);
        if (zmq_msg_recv (&frame, s, 0) < 0) {
            zmq_msg_close (&frame);
            return za_error ("raw: receive failed: %s", zmq_strerror (zmq_errno ()));
        }
        more = zmq_msg_more (&frame);
        zmq_msg_close (&frame);
        frames++;
    }
    return frames == 1 + self->part_count? 0: za_error ("raw: %d frames came back", frames);
}

static int
s_raw_rt (s_bench_t *self)
{
    return s_raw_call (self, self->to_echo);
}

static int
s_touch_rt (s_bench_t *self)
{
    return s_raw_call (self, self->to_touch);
}

typedef int (s_rt_fn_t) (s_bench_t *self);

//  Runs n round trips (or, with n 0, for `secs`); returns round trips/sec.
static double
s_time (s_bench_t *self, s_rt_fn_t *fn, int64_t n, double secs)
{
    double start = za_clock_mono (), now = start;
    int64_t done = 0;
    while (n > 0? done < n: now - start < secs) {
        if (fn (self))
            return -1;
        done++;
        if (n == 0)
            now = za_clock_mono ();
    }
    now = za_clock_mono ();
    return done / (now - start);
}

//  Builds, sends, receives and decodes `reps` pushes over inproc in this
//  thread: zactor's codec cost per message, in us (-1 on a failure). Sets
//  *header_bytes to the size of the push's header frame.
static double
s_codec_usecs (s_bench_t *self, int reps, size_t *header_bytes)
{
    zsock_t *a = zsock_new_pair ("@inproc://bench-wire-codec");
    zsock_t *b = zsock_new_pair (">inproc://bench-wire-codec");
    uint64_t seq = self->seq;
    double usecs = -1, start = za_clock_mono ();
    int k = 0;
    while (a && b && k < reps) {
        s_build_push (self);
        if (za_wire_send (a, NULL, self->out, &self->lease))
            break;
        zmsg_t *msg = zmsg_recv (b);
        int bad = !msg || za_wire_decode (msg, self->in);
        if (!bad)
            *header_bytes = zframe_size (zmsg_first (msg));
        zmsg_destroy (&msg);
        if (bad)
            break;
        k++;
    }
    if (k == reps)
        usecs = 1e6 * (za_clock_mono () - start) / reps;
    //  inproc hands over the very buffers: destroyed above, so this is quick.
    za_wire_lease_wait (&self->lease);
    self->seq = seq;
    zsock_destroy (&a);
    zsock_destroy (&b);
    return usecs;
}

//  Starts an echo actor and connects a DEALER to it.
static int
s_echo_start (zactor_t **echo_p, zsock_t **dealer_p, void *args)
{
    *echo_p = zactor_new (s_echo_actor, args);
    char *endpoint = *echo_p? zstr_recv (*echo_p): NULL;
    *dealer_p = zsock_new (ZMQ_DEALER);
    int ok = endpoint && *endpoint && *dealer_p;
    if (ok) {
        zsock_set_maxmsgsize (*dealer_p, ZA_WIRE_MAX_FRAME_BYTES);
        zsock_set_rcvtimeo (*dealer_p, RECV_TIMEOUT_MS);
        za_curve_client (*dealer_p);
        ok = zsock_connect (*dealer_p, "%s", endpoint) >= 0;
    }
    zstr_free (&endpoint);
    return ok? 0: -1;
}

static void
s_bench_destroy (s_bench_t *self)
{
    za_wire_lease_wait (&self->lease);
    zsock_destroy (&self->to_ps);
    za_shm_link_destroy (&self->link);
    za_shm_bell_destroy (&self->bell);
    zsock_destroy (&self->to_echo);
    zsock_destroy (&self->to_touch);
    zactor_destroy (&self->ps);
    zactor_destroy (&self->echo);
    zactor_destroy (&self->touch);
    za_free (self->grads);
    za_free (self->zeros);
    za_free (self->low);
    za_free (self->widened);
    free (self->header);
    free (self->in);
    free (self->out);
}

static int
s_bench_start (s_bench_t *self, const za_model_fn_t *model_fn, const void *params,
               za_input_shape_t input)
{
    za_role_config_t *config = &self->config;
    za_role_config_init (config);
    config->model_fn = model_fn;
    config->params = params;
    config->input = input;
    config->optim = za_optim_config_default (ZA_OPT_SGD);
    config->optim.learning_rate = 1e-9f;
    config->partition_floats = PARTITION_NEVER;
    config->timeout_secs = 600;
    config->ps_count = 1;
    config->ps_index = 0;
    config->num_workers = 1;
    config->is_chief = 1;
    za_wire_lease_init (&self->lease);
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->in = (za_wire_msg_t *) malloc (sizeof *self->in);
    if (!self->out || !self->in)
        return za_error ("out of memory");
    void *state = model_fn->create (params, input, 1, za_backend_cpu (), &self->vars);
    if (!state)
        return -1;
    model_fn->destroy (&state);
    if (za_partition_compute (&self->vars, 1, config->partition_floats, &self->placement))
        return -1;
    self->part_count = za_partition_parts_of (&self->placement, 0, self->parts,
                                              ZA_PARTITION_MAX_PARTS);
    for (int i = 0; i < self->part_count; i++)
        self->payload += self->placement.parts [self->parts [i]].size * sizeof (float);
    size_t block = (self->vars.total? self->vars.total: 1) * sizeof (float);
    self->grads = (float *) za_alloc (block);
    self->zeros = (float *) za_alloc (block);
    if (!self->grads || !self->zeros)
        return -1;
    for (size_t i = 0; i < self->vars.total; i++)
        self->grads [i] = 1e-3f;
    const char *dtype = getenv ("ZA_WIRE_DTYPE");
    if (dtype && streq (dtype, "bf16"))
        config->wire_dtype = ZA_DTYPE_BF16;
    if (config->wire_dtype == ZA_DTYPE_BF16)
        self->low = (uint16_t *) za_alloc (block / 2);
    self->widened = (float *) za_alloc (block);
    if ((config->wire_dtype == ZA_DTYPE_BF16 && !self->low) || !self->widened)
        return -1;
    s_codec_usecs (self, 1, &self->header_bytes);
    self->header = (char *) calloc (1, self->header_bytes? self->header_bytes: 1);
    if (!self->header_bytes || !self->header)
        return za_error ("cannot measure the push header");
    memset (self->header, 0x5a, self->header_bytes);

    //  The ps, on a port that was free a moment ago.
    int port = s_free_port ();
    if (port < 0)
        return za_error ("no free port");
    snprintf (self->endpoint, sizeof self->endpoint, "tcp://127.0.0.1:%d", port);
    config->bind_endpoint = self->endpoint;
    self->ps = zactor_new (za_ps_actor, config);
    self->to_ps = zsock_new (ZMQ_DEALER);
    if (!self->ps || !self->to_ps)
        return za_error ("cannot start the ps");
    zsock_set_maxmsgsize (self->to_ps, ZA_WIRE_MAX_FRAME_BYTES);
    zsock_set_rcvtimeo (self->to_ps, RECV_TIMEOUT_MS);
    za_curve_client (self->to_ps);
    if (zsock_connect (self->to_ps, "%s", self->endpoint) < 0)
        return za_error ("cannot connect to %s", self->endpoint);
    if (za_shm_enabled () && !(self->link = za_shm_link_new (1, 2 * self->payload + 65536)))
        return -1;
    if (self->link && !(self->bell = za_shm_bell_new ()))
        return -1;
    if (self->link)
        za_shm_link_set_bell (self->link, self->bell);

    //  init: the values (zeros), no slots for SGD, global_step 0 on ps 0.
    static const int64_t step0 = 0;
    s_begin (self, ZA_OP_INIT);
    self->out->step = 0;
    s_add_parts (self, self->zeros, ZA_DTYPE_F32);
    za_wire_msg_add (self->out, "global_step", ZA_DTYPE_I64, 0, NULL, &step0);
    self->out->has_optim = 1;
    self->out->optim = config->optim;
    if (s_call (self, ZA_OP_INIT_OK))
        return za_error ("init failed: %s", za_last_error ());

    //  The echoes, plain and touching.
    static int touch_flag = 1;
    if (s_echo_start (&self->echo, &self->to_echo, NULL)
        || s_echo_start (&self->touch, &self->to_touch, &touch_flag))
        return za_error ("cannot start the echo");
    return 0;
}

//  stop, then bye: the ps leaves; its DONE report must say 0.
static int
s_bench_stop (s_bench_t *self)
{
    za_wire_lease_wait (&self->lease);
    s_begin (self, ZA_OP_STOP);
    if (s_call (self, ZA_OP_STOPPING))
        return -1;
    s_begin (self, ZA_OP_BYE);
    if (s_call (self, ZA_OP_BYE_OK))
        return -1;
    int64_t step = -1;
    int rc = za_role_wait (self->ps, 30, &step, NULL, NULL);
    if (rc != 0)
        return za_error ("the ps ended with %d", rc);
    return 0;
}

static int
s_cmp_double (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y? -1: x > y;
}

static double
s_median (double *v, int n)
{
    qsort (v, (size_t) n, sizeof *v, s_cmp_double);
    return n % 2? v [n / 2]: (v [n / 2 - 1] + v [n / 2]) / 2;
}

//  The ps's own work per push, measured alone: the SGD apply over its floats.
static double
s_apply_usecs (s_bench_t *self)
{
    size_t n = self->vars.total;
    float *in = (float *) za_alloc (n * sizeof (float));
    float *out = (float *) za_alloc (n * sizeof (float));
    double usecs = -1;
    if (in && out) {
        int reps = n > (1u << 20)? 20: 2000;
        double start = za_clock_mono ();
        for (int r = 0; r < reps; r++)
            za_optim_apply_into (&self->config.optim, r + 1, r % 2? out: in, r % 2? in: out,
                                 self->grads, NULL, n);
        usecs = 1e6 * (za_clock_mono () - start) / reps;
    }
    za_free (in);
    za_free (out);
    return usecs;
}

static int
s_run_size (const char *label, const za_model_fn_t *model_fn, const void *params,
            za_input_shape_t input, int rounds, double secs)
{
    s_bench_t self;
    memset (&self, 0, sizeof self);
    self.label = label;
    int rc = s_bench_start (&self, model_fn, params, input);
    double z [MAX_ROUNDS], r [MAX_ROUNDS], t [MAX_ROUNDS];
    int64_t n = 0;
    if (rc == 0) {
        //  Warm up all three, then size the rounds on the raw rate.
        rc = s_time (&self, s_zactor_rt, 0, WARMUP_SECS) < 0
          || s_time (&self, s_touch_rt, 0, WARMUP_SECS) < 0? -1: 0;
        double raw = rc? -1: s_time (&self, s_raw_rt, 0, WARMUP_SECS);
        rc = raw < 0? -1: rc;
        n = (int64_t) (raw * secs);
        if (n < 10)
            n = 10;
    }
    for (int k = 0; rc == 0 && k < rounds; k++) {
        z [k] = s_time (&self, s_zactor_rt, n, 0);
        r [k] = s_time (&self, s_raw_rt, n, 0);
        t [k] = s_time (&self, s_touch_rt, n, 0);
        if (z [k] < 0 || r [k] < 0 || t [k] < 0)
            rc = -1;
    }
    if (rc == 0) {
        double zm = s_median (z, rounds), rm = s_median (r, rounds), tm = s_median (t, rounds);
        double mb = 2.0 * (double) self.payload / 1e6;
        size_t header;
        double codec = s_codec_usecs (&self, self.payload > (1u << 20)? 50: 2000, &header);
        double apply = s_apply_usecs (&self);
        printf ("# %s: %d tensors, %zu payload bytes each way, push header %zu bytes; "
                "%d rounds x %lld round trips per side\n", label, self.part_count,
                self.payload, self.header_bytes, rounds, (long long) n);
        //  s_median sorted them: [0] is the slowest round, [rounds - 1] the fastest.
        printf ("#   round trip (median, fastest..slowest round): zactor %.1f us (%.1f..%.1f), "
                "raw %.1f us (%.1f..%.1f), raw_touch %.1f us (%.1f..%.1f); zactor/raw_touch "
                "%.3f\n", 1e6 / zm, 1e6 / z [rounds - 1], 1e6 / z [0], 1e6 / rm,
                1e6 / r [rounds - 1], 1e6 / r [0], 1e6 / tm, 1e6 / t [rounds - 1], 1e6 / t [0],
                zm / tm);
        printf ("#   alone in one thread: zactor codec %.1f us per message (2 messages per "
                "round trip), ps SGD apply %.1f us\n", codec, apply);
        printf ("wire size=%zu zactor_mb_s=%.1f raw_mb_s=%.1f ratio=%.3f zactor_rt_s=%.1f "
                "raw_rt_s=%.1f\n", self.payload, zm * mb, rm * mb, zm / rm, zm, rm);
        fflush (stdout);
    }
    if (self.ps && rc == 0)
        rc = s_bench_stop (&self);
    s_bench_destroy (&self);
    if (rc)
        fprintf (stderr, "bench_wire: %s: %s\n", label, za_last_error ());
    return rc;
}

int
main (int argc, char **argv)
{
    int rounds = argc > 1? atoi (argv [1]): 7;
    double secs = argc > 2? atof (argv [2]): 0.4;
    const char *sizes = argc > 3? argv [3]: "4k,cnn,16m";
    if (rounds < 3 || rounds > MAX_ROUNDS || secs <= 0) {
        fprintf (stderr, "usage: bench_wire [ROUNDS 3..%d] [SECONDS per round] "
                 "[SIZES: any of 4k,cnn,4m,16m]\n", MAX_ROUNDS);
        return 2;
    }
    //  The ps logs a few lines per size: keep stdout for the results.
    char cpu [512] = "unknown";
    FILE *info = fopen ("/proc/cpuinfo", "r");
    char line [512];
    while (info && fgets (line, sizeof line, info))
        if (strncmp (line, "model name", 10) == 0) {
            const char *colon = strchr (line, ':');
            snprintf (cpu, sizeof cpu, "%s", colon? colon + 2: line);
            cpu [strcspn (cpu, "\n")] = 0;
            break;
        }
    if (info)
        fclose (info);
    //  ZA_BENCH_CERTS=DIR: every socket of the run (the ps's, the echoes')
    //  under CURVE with that certificate (bench/curve.sh).
    const char *certs = getenv ("ZA_BENCH_CERTS");
    if (certs && !*certs)
        certs = NULL;
    if (certs && za_curve_use (certs))
        return 1;
    int major, minor, patch;
    zmq_version (&major, &minor, &patch);
    printf ("# host: %ld cores, %s; libzmq %d.%d.%d, CZMQ %d.%d.%d; tcp://127.0.0.1, "
            "the ps and the echo in this process (1 ZeroMQ I/O thread)%s\n",
            sysconf (_SC_NPROCESSORS_ONLN), cpu, major, minor, patch, CZMQ_VERSION_MAJOR,
            CZMQ_VERSION_MINOR, CZMQ_VERSION_PATCH, certs? "; CURVE on every socket": "");

    za_stack_spec_t cnn;
    if (za_stack_parse (ZA_SEED_CNN, &cnn))
        return 1;
    za_input_shape_t mnist = {28, 28, 1}, none = {1, 1, 1};
    s_one_params_t small = {.floats = 1024}, medium = {.floats = 1 << 20},
                   large = {.floats = 4 << 20};
    int rc = 0;
    if (strstr (sizes, "4k"))
        rc |= s_run_size ("one 4 KiB tensor", &s_one_model, &small, none, rounds, secs);
    if (strstr (sizes, "cnn"))
        rc |= s_run_size ("seed CNN, 1 ps", za_stack_model_fn (), &cnn, mnist, rounds, secs);
    if (strstr (sizes, "4m"))
        rc |= s_run_size ("one 4 MiB tensor", &s_one_model, &medium, none, rounds, secs);
    if (strstr (sizes, "16m"))
        rc |= s_run_size ("one 16 MiB tensor", &s_one_model, &large, none, rounds, secs);
    return rc? 1: 0;
}
