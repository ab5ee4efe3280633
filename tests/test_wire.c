/*  test_wire.c: the wire codec over real ROUTER/DEALER sockets (inproc and tcp),
    zero-copy leases, every kind of malformed message, and a seeded fuzz run.  */
#include "za/za_broker.h"
#include "za/za_broker_client.h"
#include "za/za_util.h"
#include "za/za_wire.h"
#include "za_test.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RECV_TIMEOUT_MS 5000
#define QUIET_TIMEOUT_MS 200            //  "nothing arrives" waits this long
#define MANY_TENSORS 200
#define FUZZ_ROUNDS 20000
#define FUZZ_SEED 0x5eed0001u
#define FUZZ_MAX_HEADER_BYTES 96
#define FUZZ_MAX_FRAMES 3

static void
s_setup (void)
{
    za_error_set_quiet (1);
    za_error_clear ();
}

TestSuite (wire, .init = s_setup, .timeout = 120);


//  --------------------------------------------------------------------------
//  Sockets

typedef struct {
    zsock_t *router;
    zsock_t *dealer;
} s_pair_t;

static void
s_socket_options (zsock_t *sock)
{
    zsock_set_maxmsgsize (sock, ZA_WIRE_MAX_FRAME_BYTES);
    zsock_set_rcvtimeo (sock, RECV_TIMEOUT_MS);
    zsock_set_sndtimeo (sock, RECV_TIMEOUT_MS);
}

//  A ROUTER bound on inproc:// or tcp://127.0.0.1:* and a DEALER connected to it.
static s_pair_t
s_pair_new (const char *transport)
{
    s_pair_t pair;
    pair.router = zsock_new (ZMQ_ROUTER);
    pair.dealer = zsock_new (ZMQ_DEALER);
    cr_assert (pair.router && pair.dealer);
    s_socket_options (pair.router);
    s_socket_options (pair.dealer);
    if (streq (transport, "inproc"))
        cr_assert_eq (zsock_bind (pair.router, "inproc://test-wire"), 0);
    else
        cr_assert_gt (zsock_bind (pair.router, "tcp://127.0.0.1:*"), 0);
    const char *endpoint = zsock_endpoint (pair.router);
    cr_assert_not_null (endpoint);
    cr_assert_eq (zsock_connect (pair.dealer, "%s", endpoint), 0);
    return pair;
}

static void
s_pair_destroy (s_pair_t *pair)
{
    zsock_destroy (&pair->dealer);
    zsock_destroy (&pair->router);
}

static zmsg_t *
s_recv (zsock_t *sock)
{
    zmsg_t *msg = zmsg_recv (sock);
    cr_assert_not_null (msg, "nothing received within %d ms", RECV_TIMEOUT_MS);
    return msg;
}

//  Nothing arrives on sock for a while.
static void
s_expect_nothing (zsock_t *sock)
{
    zsock_set_rcvtimeo (sock, QUIET_TIMEOUT_MS);
    zmsg_t *msg = zmsg_recv (sock);
    cr_assert_null (msg, "a message arrived that should not have been sent");
    zsock_set_rcvtimeo (sock, RECV_TIMEOUT_MS);
}

//  A za_wire_msg_t is ~48 KB: keep them off the stack.
static za_wire_msg_t *
s_msg_new (za_op_t op)
{
    za_wire_msg_t *msg = malloc (sizeof *msg);
    cr_assert_not_null (msg);
    za_wire_msg_init (msg, op);
    return msg;
}


//  --------------------------------------------------------------------------
//  Sample messages

//  Tensor payloads: f32 and i64 matrices and vectors, scalars, empty ones.
typedef struct {
    float *f32;                         //  F32_POOL values
    int64_t *i64;                       //  I64_POOL values
} s_pool_t;

#define F32_POOL 4096
#define I64_POOL 1024

static s_pool_t
s_pool_new (void)
{
    s_pool_t pool = { malloc (F32_POOL * sizeof (float)),
                      malloc (I64_POOL * sizeof (int64_t)) };
    cr_assert (pool.f32 && pool.i64);
    for (int i = 0; i < F32_POOL; i++)
        pool.f32 [i] = 0.5f * (float) i - 100.25f;
    for (int i = 0; i < I64_POOL; i++)
        pool.i64 [i] = (int64_t) i * 1000003 - ((int64_t) 1 << 40);
    return pool;
}

static void
s_pool_destroy (s_pool_t *pool)
{
    free (pool->f32);
    free (pool->i64);
}

//  Adds `count` tensors of every kind to msg, data taken from pool.
static void
s_add_tensors (za_wire_msg_t *msg, const s_pool_t *pool, int count)
{
    size_t f32_used = 0, i64_used = 0;
    for (int i = 0; i < count; i++) {
        char name [ZA_WIRE_NAME_MAX];
        int64_t shape [ZA_WIRE_MAX_DIMS] = { 0 };
        int kind = i % 6;
        snprintf (name, sizeof name, "layer%03d/%s", i,
                  kind == 0 ? "kernel" : kind == 1 ? "bias" : kind == 2 ? "count"
                  : kind == 3 ? "scale" : kind == 4 ? "empty" : "steps");
        int rc;
        switch (kind) {
            case 0:                     //  f32 matrix
                shape [0] = 1 + i % 5, shape [1] = 3;
                rc = za_wire_msg_add (msg, name, ZA_DTYPE_F32, 2, shape, pool->f32 + f32_used);
                f32_used += (size_t) (shape [0] * shape [1]);
                break;
            case 1:                     //  f32 vector
                shape [0] = 7;
                rc = za_wire_msg_add (msg, name, ZA_DTYPE_F32, 1, shape, pool->f32 + f32_used);
                f32_used += 7;
                break;
            case 2:                     //  i64 vector
                shape [0] = 1 + i % 4;
                rc = za_wire_msg_add (msg, name, ZA_DTYPE_I64, 1, shape, pool->i64 + i64_used);
                i64_used += (size_t) shape [0];
                break;
            case 3:                     //  f32 scalar, shape []
                rc = za_wire_msg_add (msg, name, ZA_DTYPE_F32, 0, NULL, pool->f32 + f32_used);
                f32_used += 1;
                break;
            case 4:                     //  empty, shape [0] (no data at all)
                rc = za_wire_msg_add (msg, name, i % 2 ? ZA_DTYPE_I64 : ZA_DTYPE_F32, 1, shape,
                                      NULL);
                break;
            default:                    //  i64 scalar, and a 4-D f32 with a zero dim
                if (i % 12 == 5)
                    rc = za_wire_msg_add (msg, name, ZA_DTYPE_I64, 0, NULL,
                                          pool->i64 + i64_used++);
                else {
                    int64_t four [4] = { 2, 0, 3, 3 };
                    rc = za_wire_msg_add (msg, name, ZA_DTYPE_F32, 4, four, pool->f32);
                }
                break;
        }
        cr_assert_eq (rc, 0, "adding %s: %s", name, za_last_error ());
        cr_assert (f32_used <= F32_POOL && i64_used <= I64_POOL);
    }
    cr_assert_eq (msg->tensor_count, count);
}

//  Every header field set to something unusual.
static void
s_fill_header (za_wire_msg_t *msg)
{
    msg->seq = UINT64_MAX - 7;
    msg->step = INT64_MAX - 3;
    msg->task = 5;
    msg->ps = 2;
    snprintf (msg->code, sizeof msg->code, "bad_request");
    snprintf (msg->error, sizeof msg->error, "ps 2: unknown tensor 'x' \xc3\xa9");
    msg->has_optim = 1;
    msg->optim.kind = ZA_OPT_ADAM;
    msg->optim.learning_rate = 1e-3;
    msg->optim.momentum = 0.875;
    msg->optim.beta1 = 0.9;
    msg->optim.beta2 = 0.999;
    msg->optim.epsilon = 1e-7;
    msg->optim.initial_accumulator = 0.1;
    msg->optim.nesterov = 1;
}

//  got is what sent becomes after a trip over the wire.
static void
s_expect_same (const za_wire_msg_t *sent, const za_wire_msg_t *got)
{
    cr_assert_eq (got->op, sent->op);
    cr_assert_eq (got->seq, sent->seq);
    cr_assert_eq (got->step, sent->step);
    cr_assert_eq (got->task, sent->task);
    cr_assert_eq (got->ps, sent->ps);
    cr_assert_str_eq (got->code, sent->code);
    cr_assert_str_eq (got->error, sent->error);
    cr_assert_eq (got->has_optim, sent->has_optim);
    if (sent->has_optim) {
        cr_assert_eq (got->optim.kind, sent->optim.kind);
        cr_assert_eq (got->optim.learning_rate, sent->optim.learning_rate);
        cr_assert_eq (got->optim.momentum, sent->optim.momentum);
        cr_assert_eq (got->optim.beta1, sent->optim.beta1);
        cr_assert_eq (got->optim.beta2, sent->optim.beta2);
        cr_assert_eq (got->optim.epsilon, sent->optim.epsilon);
        cr_assert_eq (got->optim.initial_accumulator, sent->optim.initial_accumulator);
        cr_assert_eq (got->optim.nesterov, sent->optim.nesterov);
    }
    cr_assert_eq (got->tensor_count, sent->tensor_count);
    for (int i = 0; i < sent->tensor_count; i++) {
        const za_wire_tensor_t *a = &sent->tensors [i], *b = &got->tensors [i];
        cr_assert_str_eq (b->name, a->name);
        cr_assert_eq (b->dtype, a->dtype, "tensor %s", a->name);
        cr_assert_eq (b->ndim, a->ndim, "tensor %s", a->name);
        for (int dim = 0; dim < a->ndim; dim++)
            cr_assert_eq (b->shape [dim], a->shape [dim], "tensor %s dim %d", a->name, dim);
        cr_assert_eq (b->bytes, a->bytes, "tensor %s", a->name);
        if (a->bytes > 0)
            cr_assert_eq (memcmp (b->data, a->data, a->bytes), 0, "tensor %s bytes", a->name);
    }
}


//  --------------------------------------------------------------------------
//  Round trips over real sockets

//  DEALER -> ROUTER a request, ROUTER -> DEALER a reply, both decoded and
//  compared field by field and byte by byte.
static void
s_round_trip (const char *transport, int tensor_count, bool full_header)
{
    s_pair_t pair = s_pair_new (transport);
    s_pool_t pool = s_pool_new ();
    za_wire_msg_t *request = s_msg_new (ZA_OP_PUSH);
    request->seq = 41;
    request->task = 3;
    if (full_header)
        s_fill_header (request);
    s_add_tensors (request, &pool, tensor_count);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, request, tensor_count ? &lease : NULL), 0,
                  "%s", za_last_error ());

    zmsg_t *received = s_recv (pair.router);
    zframe_t *routing_id = zmsg_pop (received);
    cr_assert_not_null (routing_id);
    za_wire_msg_t *got = s_msg_new (ZA_OP_PING);
    cr_assert_eq (za_wire_decode (received, got), 0, "%s", za_last_error ());
    s_expect_same (request, got);
    if (streq (transport, "inproc")) {
        //  inproc hands the very buffer over: the peer reads the sender's memory.
        for (int i = 0; i < tensor_count; i++)
            if (request->tensors [i].bytes > 0)
                cr_assert_eq (got->tensors [i].data, request->tensors [i].data);
    }
    zmsg_destroy (&received);
    za_wire_lease_wait (&lease);
    cr_assert_not (za_wire_lease_busy (&lease));

    //  The reply: a VALUES with the same tensors, sent back through the ROUTER.
    za_wire_msg_t *reply = s_msg_new (ZA_OP_VALUES);
    reply->seq = request->seq;
    reply->step = 1234;
    reply->ps = 0;
    s_add_tensors (reply, &pool, tensor_count);
    size_t id_size = zframe_size (routing_id);
    cr_assert_eq (za_wire_send (pair.router, routing_id, reply, &lease), 0, "%s",
                  za_last_error ());
    cr_assert_eq (zframe_size (routing_id), id_size, "the routing id was not kept");
    zframe_destroy (&routing_id);
    received = s_recv (pair.dealer);
    cr_assert_eq (za_wire_decode (received, got), 0, "%s", za_last_error ());
    s_expect_same (reply, got);
    zmsg_destroy (&received);
    za_wire_lease_wait (&lease);

    free (got);
    free (reply);
    free (request);
    s_pool_destroy (&pool);
    s_pair_destroy (&pair);
}

Test (wire, op_names_round_trip)
{
    const char *names [] = { "init", "init_ok", "pull", "push", "values", "hold", "held",
                             "snapshot", "snapshot_data", "release", "released", "stop",
                             "stopping", "bye", "bye_ok", "error", "ping", "pong",
                             "register", "welcome", "report", "view", "watch", "state",
                             "ring", "broadcast", "resync", "checkpoint", "slots", "offer", "link" };
    for (int i = 0; i < (int) (sizeof names / sizeof names [0]); i++) {
        za_op_t op = (za_op_t) (ZA_OP_INIT + i);
        cr_assert_str_eq (za_op_name (op), names [i]);
        za_op_t parsed;
        cr_assert_eq (za_op_parse (names [i], &parsed), 0);
        cr_assert_eq (parsed, op);
    }
    cr_assert_null (za_op_name ((za_op_t) 0));
    cr_assert_null (za_op_name ((za_op_t) (ZA_OP_LINK + 1)));
    za_op_t op;
    cr_assert_eq (za_op_parse ("PUSH", &op), -1);
    cr_assert_eq (za_op_parse ("", &op), -1);
    cr_assert_str_eq (za_last_error (), "", "za_op_parse must not record an error");
}

Test (wire, msg_init_marks_fields_absent)
{
    za_wire_msg_t *msg = s_msg_new (ZA_OP_PULL);
    cr_assert_eq (msg->op, ZA_OP_PULL);
    cr_assert_eq (msg->seq, 0);
    cr_assert_eq (msg->step, -1);
    cr_assert_eq (msg->task, -1);
    cr_assert_eq (msg->ps, -1);
    cr_assert_eq (msg->tensor_count, 0);
    cr_assert_eq (msg->has_optim, 0);
    cr_assert_str_eq (msg->code, "");
    free (msg);
}

Test (wire, msg_add_rejects_bad_tensors)
{
    za_wire_msg_t *msg = s_msg_new (ZA_OP_PUSH);
    float value = 1.0f;
    int64_t shape [ZA_WIRE_MAX_DIMS + 1] = { 2, 3 };
    char long_name [ZA_WIRE_NAME_MAX + 1];
    memset (long_name, 'n', ZA_WIRE_NAME_MAX);
    long_name [ZA_WIRE_NAME_MAX] = 0;          //  96 bytes: one too many

    cr_assert_eq (za_wire_msg_add (msg, "", ZA_DTYPE_F32, 0, NULL, &value), -1);
    cr_assert_eq (za_wire_msg_add (msg, long_name, ZA_DTYPE_F32, 0, NULL, &value), -1);
    cr_assert_eq (za_wire_msg_add (msg, "x", (za_dtype_t) 7, 0, NULL, &value), -1);
    cr_assert (strstr (za_last_error (), "dtype"), "%s", za_last_error ());
    cr_assert_eq (za_wire_msg_add (msg, "x", ZA_DTYPE_F32, ZA_WIRE_MAX_DIMS + 1, shape, &value),
                  -1);
    cr_assert_eq (za_wire_msg_add (msg, "x", ZA_DTYPE_F32, 2, NULL, &value), -1);
    int64_t negative [2] = { 2, -1 };
    cr_assert_eq (za_wire_msg_add (msg, "x", ZA_DTYPE_F32, 2, negative, &value), -1);
    int64_t huge [2] = { (int64_t) 1 << 28, 2 };            //  2 GiB of f32
    cr_assert_eq (za_wire_msg_add (msg, "x", ZA_DTYPE_F32, 2, huge, &value), -1);
    cr_assert (strstr (za_last_error (), "frame limit"), "%s", za_last_error ());
    cr_assert_eq (za_wire_msg_add (msg, "x", ZA_DTYPE_F32, 2, shape, NULL), -1);
    cr_assert (strstr (za_last_error (), "no data"), "%s", za_last_error ());
    cr_assert_eq (msg->tensor_count, 0, "a failed add changed the message");

    long_name [ZA_WIRE_NAME_MAX - 1] = 0;      //  95 bytes: the longest allowed
    cr_assert_eq (za_wire_msg_add (msg, long_name, ZA_DTYPE_F32, 0, NULL, &value), 0);
    cr_assert_eq (za_wire_msg_add (msg, long_name, ZA_DTYPE_F32, 0, NULL, &value), -1);
    cr_assert (strstr (za_last_error (), "already"), "%s", za_last_error ());
    cr_assert_eq (msg->tensors [0].bytes, 4);

    for (int i = 1; i < ZA_WIRE_MAX_TENSORS; i++) {
        char name [16];
        snprintf (name, sizeof name, "t%d", i);
        cr_assert_eq (za_wire_msg_add (msg, name, ZA_DTYPE_F32, 0, NULL, &value), 0);
    }
    cr_assert_eq (za_wire_msg_add (msg, "one_too_many", ZA_DTYPE_F32, 0, NULL, &value), -1);
    cr_assert (strstr (za_last_error (), "already holds 256"), "%s", za_last_error ());
    cr_assert_eq (msg->tensor_count, ZA_WIRE_MAX_TENSORS);
    free (msg);
}

Test (wire, round_trip_no_tensors_inproc)
{
    s_round_trip ("inproc", 0, false);
}

Test (wire, round_trip_full_header_no_tensors_tcp)
{
    s_round_trip ("tcp", 0, true);
}

Test (wire, round_trip_one_tensor_inproc)
{
    s_round_trip ("inproc", 1, false);
}

Test (wire, round_trip_one_tensor_tcp)
{
    s_round_trip ("tcp", 1, true);
}

Test (wire, round_trip_many_tensors_inproc)
{
    s_round_trip ("inproc", MANY_TENSORS, true);
}

Test (wire, round_trip_many_tensors_tcp)
{
    s_round_trip ("tcp", MANY_TENSORS, false);
}

Test (wire, round_trip_max_tensors_tcp)
{
    s_round_trip ("tcp", ZA_WIRE_MAX_TENSORS, true);
}

//  A large tensor over tcp: the zero-copy path of libzmq's encoder (frames
//  bigger than its 8 KiB batch are written straight from our buffer).
Test (wire, round_trip_large_tensor_tcp)
{
    s_pair_t pair = s_pair_new ("tcp");
    size_t count = (size_t) 1 << 22;                          //  16 MiB of f32
    float *values = malloc (count * sizeof (float));
    cr_assert_not_null (values);
    for (size_t i = 0; i < count; i++)
        values [i] = (float) i * 0.25f;
    za_wire_msg_t *msg = s_msg_new (ZA_OP_VALUES);
    int64_t shape [2] = { 1024, (int64_t) count / 1024 };
    cr_assert_eq (za_wire_msg_add (msg, "big/kernel", ZA_DTYPE_F32, 2, shape, values), 0);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), 0, "%s", za_last_error ());
    zmsg_t *received = s_recv (pair.router);
    zframe_t *routing_id = zmsg_pop (received);
    za_wire_msg_t *got = s_msg_new (ZA_OP_PING);
    cr_assert_eq (za_wire_decode (received, got), 0, "%s", za_last_error ());
    s_expect_same (msg, got);
    //  The peer has every byte, so libzmq has let go of the buffer.
    za_wire_lease_wait (&lease);
    zmsg_destroy (&received);
    zframe_destroy (&routing_id);
    free (got);
    free (msg);
    free (values);
    s_pair_destroy (&pair);
}


//  --------------------------------------------------------------------------
//  Leases

//  On inproc the receiver gets the sender's buffer itself: the lease stays
//  busy until the receiver destroys the message.
Test (wire, lease_inproc_busy_until_receiver_destroys)
{
    s_pair_t pair = s_pair_new ("inproc");
    s_pool_t pool = s_pool_new ();
    za_wire_msg_t *msg = s_msg_new (ZA_OP_PUSH);
    s_add_tensors (msg, &pool, 12);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_not (za_wire_lease_busy (&lease));
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), 0, "%s", za_last_error ());
    cr_assert (za_wire_lease_busy (&lease), "the frames are still in the pipe");
    cr_assert_eq (atomic_load (&lease.pending), 12);

    zmsg_t *received = s_recv (pair.router);
    cr_assert (za_wire_lease_busy (&lease), "the receiver still holds the frames");
    zmsg_destroy (&received);
    cr_assert_not (za_wire_lease_busy (&lease));
    za_wire_lease_wait (&lease);                //  returns at once

    free (msg);
    s_pool_destroy (&pool);
    s_pair_destroy (&pair);
}

//  Over tcp the lease drains once the bytes are written; the receiver only
//  has to take them.
Test (wire, lease_tcp_drains_after_peer_receives)
{
    s_pair_t pair = s_pair_new ("tcp");
    s_pool_t pool = s_pool_new ();
    za_wire_msg_t *msg = s_msg_new (ZA_OP_PUSH);
    s_add_tensors (msg, &pool, 30);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    for (int round = 0; round < 5; round++) {
        msg->seq = (uint64_t) round;
        cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), 0, "%s",
                      za_last_error ());
    }
    for (int round = 0; round < 5; round++) {
        zmsg_t *received = s_recv (pair.router);
        zmsg_destroy (&received);
    }
    za_wire_lease_wait (&lease);
    cr_assert_eq (atomic_load (&lease.pending), 0);
    free (msg);
    s_pool_destroy (&pool);
    s_pair_destroy (&pair);
}

//  A ROUTER drops a message to a routing id it does not know: libzmq closes
//  the frames at once, so the lease drains without any peer.
Test (wire, lease_drains_when_router_drops)
{
    s_pair_t pair = s_pair_new ("inproc");
    s_pool_t pool = s_pool_new ();
    za_wire_msg_t *msg = s_msg_new (ZA_OP_VALUES);
    s_add_tensors (msg, &pool, 6);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    zframe_t *nobody = zframe_new ("nobody", 6);
    cr_assert_eq (za_wire_send (pair.router, nobody, msg, &lease), 0, "%s", za_last_error ());
    cr_assert_not (za_wire_lease_busy (&lease));
    s_expect_nothing (pair.dealer);
    zframe_destroy (&nobody);
    free (msg);
    s_pool_destroy (&pool);
    s_pair_destroy (&pair);
}

//  With ZMQ_ROUTER_MANDATORY the routing id frame itself fails (EHOSTUNREACH):
//  -1, nothing queued, the lease never busy.
Test (wire, send_to_unknown_peer_with_router_mandatory_fails_cleanly)
{
    s_pair_t pair = s_pair_new ("inproc");
    zsock_set_router_mandatory (pair.router, 1);
    s_pool_t pool = s_pool_new ();
    za_wire_msg_t *msg = s_msg_new (ZA_OP_VALUES);
    s_add_tensors (msg, &pool, 6);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    zframe_t *nobody = zframe_new ("nobody", 6);
    cr_assert_eq (za_wire_send (pair.router, nobody, msg, &lease), -1);
    cr_assert (strstr (za_last_error (), "cannot send values"), "%s", za_last_error ());
    cr_assert_not (za_wire_lease_busy (&lease));

    //  The socket is not left mid-message: a real reply still goes through.
    za_wire_msg_t *ping = s_msg_new (ZA_OP_PING);
    ping->seq = 5;
    cr_assert_eq (za_wire_send (pair.dealer, NULL, ping, NULL), 0, "%s", za_last_error ());
    zmsg_t *received = s_recv (pair.router);
    zframe_t *routing_id = zmsg_pop (received);
    zmsg_destroy (&received);
    cr_assert_eq (za_wire_send (pair.router, routing_id, msg, &lease), 0, "%s",
                  za_last_error ());
    received = s_recv (pair.dealer);
    za_wire_msg_t *got = s_msg_new (ZA_OP_PING);
    cr_assert_eq (za_wire_decode (received, got), 0, "%s", za_last_error ());
    s_expect_same (msg, got);
    zmsg_destroy (&received);
    za_wire_lease_wait (&lease);

    zframe_destroy (&routing_id);
    zframe_destroy (&nobody);
    free (got);
    free (ping);
    free (msg);
    s_pool_destroy (&pool);
    s_pair_destroy (&pair);
}

Test (wire, send_refuses_bad_messages_and_sends_nothing)
{
    s_pair_t pair = s_pair_new ("inproc");
    float values [6] = { 1, 2, 3, 4, 5, 6 };
    int64_t shape [2] = { 2, 3 };
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);

    za_wire_msg_t *msg = s_msg_new ((za_op_t) 0);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, NULL), -1);
    cr_assert (strstr (za_last_error (), "unknown op"), "%s", za_last_error ());

    za_wire_msg_init (msg, ZA_OP_PUSH);
    cr_assert_eq (za_wire_msg_add (msg, "w", ZA_DTYPE_F32, 2, shape, values), 0);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, NULL), -1);
    cr_assert (strstr (za_last_error (), "lease"), "%s", za_last_error ());

    msg->tensors [0].bytes = 20;               //  edited by hand, wrong
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), -1);
    cr_assert (strstr (za_last_error (), "20 bytes"), "%s", za_last_error ());
    msg->tensors [0].bytes = 24;

    msg->step = -7;
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), -1);
    msg->step = -1;

    msg->has_optim = 1;                         //  no optimizer kind
    msg->optim.kind = ZA_OPT_UNKNOWN;
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), -1);
    cr_assert_not (za_wire_lease_busy (&lease));
    s_expect_nothing (pair.router);
    free (msg);
    s_pair_destroy (&pair);
}

//  A DEALER with no peer and sndtimeo 0 cannot send: -1, and nothing of the
//  message stays with libzmq.
Test (wire, send_failure_releases_everything)
{
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    cr_assert_not_null (dealer);
    zsock_set_sndtimeo (dealer, 0);
    float values [3] = { 1, 2, 3 };
    int64_t shape [1] = { 3 };
    za_wire_msg_t *msg = s_msg_new (ZA_OP_PUSH);
    cr_assert_eq (za_wire_msg_add (msg, "b", ZA_DTYPE_F32, 1, shape, values), 0);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_eq (za_wire_send (dealer, NULL, msg, &lease), -1);
    cr_assert (strstr (za_last_error (), "cannot send push"), "%s", za_last_error ());
    cr_assert_not (za_wire_lease_busy (&lease));
    free (msg);
    zsock_destroy (&dealer);
}


//  --------------------------------------------------------------------------
//  Hand-made headers

typedef struct {
    msgpack_sbuffer buffer;
    msgpack_packer packer;
} s_header_t;

static void
s_header_init (s_header_t *header)
{
    msgpack_sbuffer_init (&header->buffer);
    msgpack_packer_init (&header->packer, &header->buffer, msgpack_sbuffer_write);
}

static void
s_header_destroy (s_header_t *header)
{
    msgpack_sbuffer_destroy (&header->buffer);
}

static void
s_str (s_header_t *header, const char *text)
{
    size_t len = strlen (text);
    msgpack_pack_str (&header->packer, len);
    msgpack_pack_str_body (&header->packer, text, len);
}

//  Opens a header map of `entries` entries and writes the first three: v,
//  op and seq.
static void
s_begin (s_header_t *header, int entries, int64_t version, const char *op)
{
    msgpack_pack_map (&header->packer, (size_t) entries);
    s_str (header, "v");
    msgpack_pack_int64 (&header->packer, version);
    s_str (header, "op");
    s_str (header, op);
    s_str (header, "seq");
    msgpack_pack_uint64 (&header->packer, 9);
}

//  Writes the key "tensors" and opens its array.
static void
s_tensors (s_header_t *header, int count)
{
    s_str (header, "tensors");
    msgpack_pack_array (&header->packer, (size_t) count);
}

static void
s_tensor (s_header_t *header, const char *name, const char *dtype, int ndim,
          const int64_t *shape, int64_t frame)
{
    msgpack_pack_map (&header->packer, 4);
    s_str (header, "name");
    s_str (header, name);
    s_str (header, "dtype");
    s_str (header, dtype);
    s_str (header, "shape");
    msgpack_pack_array (&header->packer, (size_t) ndim);
    for (int dim = 0; dim < ndim; dim++)
        msgpack_pack_int64 (&header->packer, shape [dim]);
    s_str (header, "frame");
    msgpack_pack_int64 (&header->packer, frame);
}

//  A message of this header and payload frames of these sizes.
static zmsg_t *
s_message (const void *header, size_t size, int frame_count, const size_t *frame_sizes)
{
    zmsg_t *msg = zmsg_new ();
    cr_assert_eq (zmsg_addmem (msg, header, size), 0);
    for (int i = 0; i < frame_count; i++) {
        zframe_t *frame = zframe_new (NULL, frame_sizes [i]);
        if (frame_sizes [i] > 0)
            memset (zframe_data (frame), 0x40 + i, frame_sizes [i]);
        cr_assert_eq (zmsg_append (msg, &frame), 0);
    }
    return msg;
}

static za_wire_msg_t s_out;

//  Decodes; returns what za_wire_decode returned. Checks that msg itself is
//  left as it was (same frames, same header bytes).
static int
s_decode_bytes (const void *header, size_t size, int frame_count, const size_t *frame_sizes)
{
    zmsg_t *msg = s_message (header, size, frame_count, frame_sizes);
    za_error_clear ();
    int rc = za_wire_decode (msg, &s_out);
    cr_assert (rc == 0 || rc == -1);
    cr_assert_eq (zmsg_size (msg), (size_t) frame_count + 1);
    zframe_t *first = zmsg_first (msg);
    cr_assert_eq (zframe_size (first), size);
    cr_assert (size == 0 || memcmp (zframe_data (first), header, size) == 0);
    if (rc == 0) {
        cr_assert_str_eq (za_last_error (), "");
        cr_assert_eq (s_out.tensor_count, frame_count);
    }
    else {
        cr_assert_neq (za_last_error () [0], 0, "-1 without an error message");
        cr_assert_eq (s_out.tensor_count, 0);
    }
    zmsg_destroy (&msg);
    return rc;
}

static void
s_expect_reject (const void *header, size_t size, int frame_count, const size_t *frame_sizes,
                 const char *needle)
{
    int rc = s_decode_bytes (header, size, frame_count, frame_sizes);
    cr_assert_eq (rc, -1, "accepted a message that should fail with '%s'", needle);
    const char *error = za_last_error ();
    cr_assert (strncmp (error, "wire: ", 6) == 0, "error '%s' lacks the prefix", error);
    cr_assert (strstr (error, needle), "error '%s' does not mention '%s'", error, needle);
    cr_assert_null (strchr (error, '\n'), "error '%s' is more than one line", error);
}

static void
s_expect_accept (const void *header, size_t size, int frame_count, const size_t *frame_sizes)
{
    int rc = s_decode_bytes (header, size, frame_count, frame_sizes);
    cr_assert_eq (rc, 0, "rejected a valid message: %s", za_last_error ());
}

#define REJECT(header, frames, sizes, needle) \
    s_expect_reject ((header).buffer.data, (header).buffer.size, frames, sizes, needle)
#define ACCEPT(header, frames, sizes) \
    s_expect_accept ((header).buffer.data, (header).buffer.size, frames, sizes)

static const int64_t s_shape_4x3 [2] = { 4, 3 };
static const size_t s_size_48 [1] = { 48 };

//  A push of one tensor 'dense/kernel' 4x3 f32 in frame 0: the baseline that
//  the defect tests change in one place.
static void
s_valid_push (s_header_t *header)
{
    s_header_init (header);
    s_begin (header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (header, 1);
    s_tensor (header, "dense/kernel", "f32", 2, s_shape_4x3, 0);
}

Test (wire, decode_accepts_hand_made_push)
{
    s_header_t header;
    s_valid_push (&header);
    ACCEPT (header, 1, s_size_48);
    cr_assert_eq (s_out.op, ZA_OP_PUSH);
    cr_assert_eq (s_out.seq, 9);
    cr_assert_eq (s_out.step, -1);
    cr_assert_eq (s_out.task, -1);
    cr_assert_eq (s_out.tensor_count, 1);
    cr_assert_str_eq (s_out.tensors [0].name, "dense/kernel");
    cr_assert_eq (s_out.tensors [0].bytes, 48);
    s_header_destroy (&header);
}

Test (wire, decode_rejects_empty_message_and_header)
{
    zmsg_t *msg = zmsg_new ();
    cr_assert_eq (za_wire_decode (msg, &s_out), -1);
    cr_assert (strstr (za_last_error (), "no header"), "%s", za_last_error ());
    zmsg_destroy (&msg);
    s_expect_reject ("", 0, 0, NULL, "header frame is empty");
}

Test (wire, decode_rejects_truncated_header_at_every_byte)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 8, ZA_WIRE_VERSION, "init");
    s_str (&header, "step");
    msgpack_pack_int64 (&header.packer, 123456789012);
    s_str (&header, "error");
    s_str (&header, "a message long enough to need str8 encoding, more than 31 bytes");
    s_str (&header, "opt");
    msgpack_pack_map (&header.packer, 1);
    s_str (&header, "lr");
    msgpack_pack_double (&header.packer, 0.01);
    s_str (&header, "ps");
    msgpack_pack_int (&header.packer, 70000);
    s_tensors (&header, 2);
    s_tensor (&header, "dense/kernel", "f32", 2, s_shape_4x3, 0);
    s_tensor (&header, "global_step", "i64", 0, NULL, 1);
    size_t size = header.buffer.size;
    for (size_t cut = 1; cut < size; cut++)
        s_expect_reject (header.buffer.data, cut, 0, NULL, "truncated");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_header_over_64k)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "ping");
    s_str (&header, "padding");
    size_t pad = ZA_WIRE_MAX_HEADER_BYTES;
    char *text = malloc (pad);
    memset (text, 'p', pad);
    msgpack_pack_str (&header.packer, pad);
    msgpack_pack_str_body (&header.packer, text, pad);
    free (text);
    REJECT (header, 0, NULL, "more than the limit of 65536");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_wrong_version)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 3, 2, "push");
    REJECT (header, 0, NULL, "unsupported protocol version 2 (this build speaks 1)");
    s_header_destroy (&header);
    s_header_init (&header);
    s_begin (&header, 3, -1, "frobnicate");
    REJECT (header, 0, NULL, "unsupported protocol version -1");
    s_header_destroy (&header);
    //  No "v" at all.
    s_header_init (&header);
    msgpack_pack_map (&header.packer, 1);
    s_str (&header, "op");
    s_str (&header, "ping");
    REJECT (header, 0, NULL, "no 'v'");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_unknown_op)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 3, ZA_WIRE_VERSION, "frobnicate");
    REJECT (header, 0, NULL, "unknown op 'frobnicate'");
    s_header_destroy (&header);
    //  A control character is not printed as is.
    s_header_init (&header);
    s_begin (&header, 3, ZA_WIRE_VERSION, "pu\x1b[2Jsh");
    REJECT (header, 0, NULL, "unknown op 'pu?[2Jsh'");
    s_header_destroy (&header);
    //  No op.
    s_header_init (&header);
    msgpack_pack_map (&header.packer, 1);
    s_str (&header, "v");
    msgpack_pack_int (&header.packer, 1);
    REJECT (header, 0, NULL, "no 'op'");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_non_map_top_level)
{
    s_header_t header;
    s_header_init (&header);
    msgpack_pack_array (&header.packer, 2);
    msgpack_pack_int (&header.packer, 1);
    s_str (&header, "push");
    REJECT (header, 0, NULL, "is a msgpack array, not a map");
    s_header_destroy (&header);
    const uint8_t number [] = { 0x2a };
    s_expect_reject (number, sizeof number, 0, NULL, "is a msgpack int, not a map");
    const uint8_t text [] = { 0xa3, 'a', 'b', 'c' };
    s_expect_reject (text, sizeof text, 0, NULL, "is a msgpack str, not a map");
}

Test (wire, decode_rejects_string_longer_than_buffer)
{
    //  {"v": 1, "op": str32 declaring 1000 bytes, with 4 present}
    const uint8_t bytes [] = { 0x82, 0xa1, 'v', 0x01, 0xa2, 'o', 'p',
                               0xdb, 0x00, 0x00, 0x03, 0xe8, 'p', 'u', 's', 'h' };
    s_expect_reject (bytes, sizeof bytes, 0, NULL, "declares 1000 bytes, only 4 left");
    //  The same with bin and ext.
    const uint8_t bin [] = { 0x81, 0xa1, 'x', 0xc6, 0x7f, 0xff, 0xff, 0xff, 0x00 };
    s_expect_reject (bin, sizeof bin, 0, NULL, "bin at offset 3 declares 2147483647 bytes");
    const uint8_t ext [] = { 0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01 };
    s_expect_reject (ext, sizeof ext, 0, NULL, "declares 4294967296 bytes");
}

//  Under ASan a gigabyte allocation would be reported: the pre-pass must stop
//  this before msgpack-c sees it.
Test (wire, decode_rejects_huge_count_without_allocating)
{
    const uint8_t array [] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    s_expect_reject (array, sizeof array, 0, NULL, "declares 4294967295 elements");
    const uint8_t map [] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    s_expect_reject (map, sizeof map, 0, NULL, "declares 4294967295 entries");
    //  Nested: {"x": array32 of 2^32-1}
    const uint8_t nested [] = { 0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff };
    s_expect_reject (nested, sizeof nested, 0, NULL, "4294967295 elements");
    //  A map16 of 65535 entries with a few bytes.
    const uint8_t map16 [] = { 0xde, 0xff, 0xff, 0xa1, 'v', 0x01 };
    s_expect_reject (map16, sizeof map16, 0, NULL, "65535 entries");
}

Test (wire, decode_rejects_deep_nesting)
{
    //  {v, op, seq, "deep": [[[[[[[[[]]]]]]]]]}: depth 10.
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "ping");
    s_str (&header, "deep");
    for (int level = 0; level < 9; level++)
        msgpack_pack_array (&header.packer, level < 8 ? 1 : 0);
    REJECT (header, 0, NULL, "nests deeper than 4 levels");
    s_header_destroy (&header);
    //  Depth 5 is refused too, depth 4 (an unknown key's nested value) is fine.
    for (int depth = 4; depth <= 5; depth++) {
        s_header_init (&header);
        s_begin (&header, 4, ZA_WIRE_VERSION, "ping");
        s_str (&header, "future");
        for (int level = 2; level <= depth; level++)
            msgpack_pack_array (&header.packer, level < depth ? 1 : 0);
        if (depth == 4)
            ACCEPT (header, 0, NULL);
        else
            REJECT (header, 0, NULL, "nests deeper");
        s_header_destroy (&header);
    }
}

Test (wire, decode_rejects_wrong_key_types)
{
    s_header_t header;
    s_header_init (&header);
    msgpack_pack_map (&header.packer, 2);
    s_str (&header, "v");
    msgpack_pack_int (&header.packer, 1);
    s_str (&header, "op");
    msgpack_pack_int (&header.packer, 4);
    REJECT (header, 0, NULL, "'op' must be a str, got int");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "pull");
    s_str (&header, "step");
    s_str (&header, "12");
    REJECT (header, 0, NULL, "'step' must be an int, got str");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "pull");
    s_str (&header, "task");
    msgpack_pack_int64 (&header.packer, (int64_t) INT32_MAX + 1);
    REJECT (header, 0, NULL, "'task' is 2147483648, more than 2147483647");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_str (&header, "tensors");
    msgpack_pack_map (&header.packer, 0);
    REJECT (header, 0, NULL, "'tensors' must be an array, got map");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "error");
    s_str (&header, "code");
    msgpack_pack_bin (&header.packer, 3);
    msgpack_pack_bin_body (&header.packer, "abc", 3);
    REJECT (header, 0, NULL, "'code' must be a str, got bin");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "error");
    s_str (&header, "code");
    s_str (&header, "a_code_that_is_much_too_long_to_fit");
    REJECT (header, 0, NULL, "'code' is 35 bytes, longer than 31");
    s_header_destroy (&header);

    //  "opt" must have every key, each of its type.
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "init");
    s_str (&header, "opt");
    msgpack_pack_map (&header.packer, 2);
    s_str (&header, "kind");
    s_str (&header, "sgd");
    s_str (&header, "lr");
    s_str (&header, "fast");
    REJECT (header, 0, NULL, "'opt.lr' must be a number, got str");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "init");
    s_str (&header, "opt");
    msgpack_pack_map (&header.packer, 2);
    s_str (&header, "kind");
    s_str (&header, "sgd");
    s_str (&header, "lr");
    msgpack_pack_double (&header.packer, 0.5);
    REJECT (header, 0, NULL, "'opt' has no 'momentum'");
    s_header_destroy (&header);
}

//  The control plane's JSON body travels inside the header, over tcp, whole.
Test (wire, body_round_trip_and_limits)
{
    s_pair_t pair = s_pair_new ("tcp");
    za_wire_msg_t *msg = s_msg_new (ZA_OP_REGISTER);
    const char *json = "{\"role\": \"worker\", \"index\": -1, \"pid\": 4242}";
    msg->body = json;
    msg->body_len = strlen (json);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, NULL), 0, "%s", za_last_error ());
    zmsg_t *got = s_recv (pair.router);
    zframe_t *id = zmsg_pop (got);
    cr_assert_eq (za_wire_decode (got, &s_out), 0, "%s", za_last_error ());
    cr_assert_eq (s_out.op, ZA_OP_REGISTER);
    cr_assert_eq (s_out.body_len, strlen (json));
    cr_assert_eq (memcmp (s_out.body, json, s_out.body_len), 0);
    zframe_destroy (&id);
    zmsg_destroy (&got);

    //  A message without a body decodes with body NULL.
    za_wire_msg_init (msg, ZA_OP_WATCH);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, NULL), 0);
    got = s_recv (pair.router);
    id = zmsg_pop (got);
    cr_assert_eq (za_wire_decode (got, &s_out), 0);
    cr_assert_null (s_out.body);
    zframe_destroy (&id);
    zmsg_destroy (&got);

    //  Too long, or with a NUL inside: refused before anything is sent.
    size_t big = ZA_WIRE_MAX_BODY_BYTES + 1;
    char *text = (char *) malloc (big);
    memset (text, 'x', big);
    msg->body = text;
    msg->body_len = big;
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, NULL), -1);
    cr_assert (strstr (za_last_error (), "body"), "%s", za_last_error ());
    text [3] = 0;
    msg->body_len = 10;
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, NULL), -1);
    cr_assert (strstr (za_last_error (), "NUL"), "%s", za_last_error ());
    free (text);
    free (msg);
    s_pair_destroy (&pair);

    //  Received: a body of the wrong type, or with a NUL, is one clear error.
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "report");
    s_str (&header, "body");
    msgpack_pack_int (&header.packer, 7);
    REJECT (header, 0, NULL, "'body' must be a str, got int");
    s_header_destroy (&header);
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "report");
    s_str (&header, "body");
    msgpack_pack_str (&header.packer, 3);
    msgpack_pack_str_body (&header.packer, "a\0b", 3);
    REJECT (header, 0, NULL, "'body' contains a NUL byte");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_duplicate_keys_and_trailing_bytes)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "ping");
    s_str (&header, "op");
    s_str (&header, "pong");
    REJECT (header, 0, NULL, "'op' twice");
    s_header_destroy (&header);

    s_valid_push (&header);
    msgpack_pack_nil (&header.packer);
    REJECT (header, 1, s_size_48, "1 bytes after its end");
    s_header_destroy (&header);
}

Test (wire, decode_ignores_unknown_keys)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 6, ZA_WIRE_VERSION, "push");
    s_str (&header, "future");
    msgpack_pack_map (&header.packer, 1);
    s_str (&header, "a");
    msgpack_pack_float (&header.packer, 1.5f);
    msgpack_pack_int (&header.packer, 7);        //  a non-str key
    msgpack_pack_nil (&header.packer);
    s_tensors (&header, 1);
    msgpack_pack_map (&header.packer, 5);
    s_str (&header, "name");
    s_str (&header, "w");
    s_str (&header, "layout");                  //  unknown tensor key
    s_str (&header, "nchw");
    s_str (&header, "dtype");
    s_str (&header, "i64");
    s_str (&header, "shape");
    msgpack_pack_array (&header.packer, 1);
    msgpack_pack_int (&header.packer, 2);
    s_str (&header, "frame");
    msgpack_pack_int (&header.packer, 0);
    const size_t sizes [1] = { 16 };
    ACCEPT (header, 1, sizes);
    cr_assert_eq (s_out.tensors [0].dtype, ZA_DTYPE_I64);
    s_header_destroy (&header);
}

Test (wire, decode_rejects_frame_index_out_of_range)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "dense/kernel", "f32", 2, s_shape_4x3, 5);
    REJECT (header, 1, s_size_48, "frame 5 is out of range (the message has 1 payload frames)");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "dense/kernel", "f32", 2, s_shape_4x3, -1);
    REJECT (header, 1, s_size_48, "frame -1 is out of range");
    s_header_destroy (&header);

    //  A header naming a frame that was never sent.
    s_valid_push (&header);
    REJECT (header, 0, NULL, "frame 0 is out of range (the message has 0 payload frames)");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_frame_referenced_twice)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 2);
    s_tensor (&header, "a", "f32", 2, s_shape_4x3, 0);
    s_tensor (&header, "b", "f32", 2, s_shape_4x3, 0);
    const size_t sizes [2] = { 48, 48 };
    REJECT (header, 2, sizes, "tensor 'b': frame 0 is already used by tensor 'a'");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_unreferenced_frame)
{
    s_header_t header;
    s_valid_push (&header);
    const size_t sizes [2] = { 48, 8 };
    REJECT (header, 2, sizes, "frame 1 is not referenced");
    s_header_destroy (&header);
    //  Frames but no "tensors" key at all.
    s_header_init (&header);
    s_begin (&header, 3, ZA_WIRE_VERSION, "pull");
    REJECT (header, 1, s_size_48, "frame 0 is not referenced");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_too_many_frames)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 3, ZA_WIRE_VERSION, "pull");
    size_t sizes [ZA_WIRE_MAX_TENSORS + 1] = { 0 };
    REJECT (header, ZA_WIRE_MAX_TENSORS + 1, sizes, "257 payload frames, more than the limit");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_frame_size_mismatch)
{
    s_header_t header;
    s_valid_push (&header);
    const size_t sizes [1] = { 40 };
    REJECT (header, 1, sizes,
            "wire: tensor 'dense/kernel' declares 4x3 f32 (48 bytes) but frame 0 has 40 bytes");
    s_header_destroy (&header);
    //  An i64 scalar needs 8 bytes.
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "values");
    s_tensors (&header, 1);
    s_tensor (&header, "global_step", "i64", 0, NULL, 0);
    const size_t four [1] = { 4 };
    REJECT (header, 1, four, "declares scalar i64 (8 bytes) but frame 0 has 4 bytes");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_bad_dtype)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "dense/kernel", "f16", 2, s_shape_4x3, 0);
    REJECT (header, 1, s_size_48, "unknown dtype 'f16'");
    s_header_destroy (&header);
}

//  bf16 (--wire-dtype): 2 bytes an element, so a 4x3 tensor is a frame of
//  24 bytes; 48 (f32's) is a mismatch.
Test (wire, decode_takes_bf16_of_its_own_size)
{
    static const size_t size_24 [1] = { 24 };
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "dense/kernel", "bf16", 2, s_shape_4x3, 0);
    ACCEPT (header, 1, size_24);
    cr_assert_eq (s_out.tensors [0].dtype, ZA_DTYPE_BF16);
    cr_assert_eq (s_out.tensors [0].bytes, 24);
    REJECT (header, 1, s_size_48, "48");
    s_header_destroy (&header);
}

//  The casts to and from bf16: round to nearest even, NaN kept, exact back.
Test (wire, bf16_casts_round_to_nearest_even)
{
    //  FLT_MAX is past bf16's largest (it rounds up to infinity); a subnormal
    //  stays one (no flush to zero).
    const float in [] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, FLT_MAX, 0x1p-130f,
                         INFINITY, NAN};
    const uint16_t want [] = {0x3f80, 0x3f80, 0x3f82, 0xc020, 0x7f80, 0x0008, 0x7f80};
    uint16_t out [8];
    za_f32_to_bf16 (in, out, 8);
    for (int i = 0; i < 7; i++)
        cr_expect_eq (out [i], want [i], "%g: 0x%04x, not 0x%04x", (double) in [i], out [i],
                      want [i]);
    cr_expect ((out [7] & 0x7f80) == 0x7f80 && (out [7] & 0x7f), "NaN: 0x%04x", out [7]);
    float back [8];
    unsigned char odd [17];
    memcpy (odd + 1, out, sizeof out);         //  an unaligned frame
    za_bf16_to_f32 (odd + 1, back, 8);
    cr_expect_eq (back [2], 1.0f + 0x1p-6f);
    cr_expect_eq (back [3], -2.5f);
    cr_expect (isinf (back [4]) && isnan (back [7]));
}

//  The cast's vector loops (AVX512-BF16 where the CPU has it, AVX2) give
//  the bits of the formula, for every kind of float: the ring's ranks must
//  round alike whatever CPU each runs on. Normal values with a subnormal,
//  a NaN or an infinity now and then, at every length and alignment near a
//  block's, then random bits (all kinds mixed in one block).
static uint16_t
s_bf16_by_hand (float x)
{
    uint32_t u;
    memcpy (&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t) ((u >> 16) | 0x40u);
    return (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void
s_casts_agree (void)
{
    //  The edge of each rule: ties (to even, either way), rounding up into
    //  infinity, -0, infinities, NaNs whose payload is in the low half
    //  only, quiet or not, and subnormal ties.
    static const uint32_t edges [] = {
        0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0x7f7f8000, 0xff7f8000, 0x80000000,
        0x00000000, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fc00000,
        0x00008000, 0x00018000, 0x807fffff, 0x00000001, 0x80008000, 0x3f7fffff};
    const int edge_count = (int) (sizeof edges / sizeof edges [0]);
    enum { N = 4096 };
    float *in = (float *) malloc ((N + 1) * sizeof (float));
    uint16_t *out = (uint16_t *) malloc ((N + 2) * sizeof (uint16_t));
    cr_assert (in && out);
    uint32_t state = 12345;
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i <= N; i++) {
            state = state * 1664525u + 1013904223u;
            uint32_t bits = state ^ (state >> 13);
            float x = (float) (int32_t) bits * 0x1p-40f;
            int kind = (int) (bits % 97);
            if (pass == 0 && kind == 0)
                x = 0x1p-133f * (float) (1 + bits % 127);      //  a subnormal
            else if (pass == 0 && kind == 1)
                x = (bits & 1)? INFINITY: -NAN;
            else if (pass == 1)
                memcpy (&x, &bits, sizeof x);
            else if (pass == 2 && i % 3)                       //  edges in every block
                memcpy (&x, &edges [(i / 3) % edge_count], sizeof x);
            in [i] = x;
        }
        //  Every value written, and none past n (out starts all ones).
        for (size_t n = 0; n <= 70; n++)
            for (size_t at = 0; at < 2; at++) {
                memset (out, 0xff, (N + 2) * sizeof (uint16_t));
                za_f32_to_bf16 (in + at, out + at, n);
                for (size_t i = 0; i < n; i++)
                    cr_assert_eq (out [at + i], s_bf16_by_hand (in [at + i]),
                                  "pass %d, n %zu, at %zu, value %zu (%a): 0x%04x", pass, n, at,
                                  i, (double) in [at + i], out [at + i]);
                cr_assert_eq (out [at + n], 0xffff, "pass %d, n %zu: written past n", pass, n);
            }
        memset (out, 0xff, (N + 2) * sizeof (uint16_t));
        za_f32_to_bf16 (in + 1, out + 1, N);
        for (size_t i = 1; i <= N; i++)
            cr_assert_eq (out [i], s_bf16_by_hand (in [i]), "pass %d, value %zu", pass, i);
        cr_assert_eq (out [N + 1], 0xffff, "pass %d: written past N", pass);
    }
    //  Rounding in place is the cast and back.
    float round [3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0x1p-130f * 3};
    za_bf16_round (round, 3);
    cr_expect_eq (round [0], 1.0f);
    cr_expect_eq (round [1], 1.0f + 0x1p-6f);
    cr_expect_eq (round [2], 0x1p-130f * 3, "a subnormal bf16 has it exactly");
    free (in);
    free (out);
}

Test (wire, bf16_casts_vector_loops_agree)
{
    s_casts_agree ();
}

//  The same on the AVX2 loop: DNNL_MAX_CPU_ISA below AVX512_CORE_BF16 keeps
//  the casts off AVX512-BF16 (read once, at the first cast of a process).
Test (wire, bf16_casts_avx2_loop_agrees)
{
    unsetenv ("ONEDNN_MAX_CPU_ISA");
    setenv ("DNNL_MAX_CPU_ISA", "AVX512_CORE", 1);
    s_casts_agree ();
}

Test (wire, decode_rejects_bad_shapes)
{
    s_header_t header;
    const int64_t nine [9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "w", "f32", 9, nine, 0);
    const size_t four [1] = { 4 };
    REJECT (header, 1, four, "shape has 9 dims, more than 8");
    s_header_destroy (&header);

    const int64_t negative [2] = { 4, -3 };
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "w", "f32", 2, negative, 0);
    REJECT (header, 1, s_size_48, "dim 1 is -3, negative");
    s_header_destroy (&header);

    const int64_t overflow [3] = { (int64_t) 1 << 40, (int64_t) 1 << 40, 2 };
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "w", "f32", 3, overflow, 0);
    REJECT (header, 1, s_size_48, "shape 1099511627776x1099511627776x2 f32 overflows");
    s_header_destroy (&header);

    //  Product fits but times 8 bytes does not.
    const int64_t times_size [2] = { (int64_t) 1 << 31, (int64_t) 1 << 31 };
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "w", "i64", 2, times_size, 0);
    REJECT (header, 1, s_size_48, "overflows");
    s_header_destroy (&header);

    const int64_t big [2] = { (int64_t) 1 << 20, 512 };    //  2 GiB of f32
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "w", "f32", 2, big, 0);
    REJECT (header, 1, s_size_48, "more than the frame limit");
    s_header_destroy (&header);

    //  A dim that is not an int.
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    msgpack_pack_map (&header.packer, 4);
    s_str (&header, "name");
    s_str (&header, "w");
    s_str (&header, "dtype");
    s_str (&header, "f32");
    s_str (&header, "shape");
    msgpack_pack_array (&header.packer, 1);
    msgpack_pack_double (&header.packer, 12.0);
    s_str (&header, "frame");
    msgpack_pack_int (&header.packer, 0);
    REJECT (header, 1, s_size_48, "dim 0 must be an int, got float");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_bad_names)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, "", "f32", 2, s_shape_4x3, 0);
    REJECT (header, 1, s_size_48, "tensor 0's name is empty");
    s_header_destroy (&header);

    char name [ZA_WIRE_NAME_MAX + 1];
    memset (name, 'k', ZA_WIRE_NAME_MAX);
    name [ZA_WIRE_NAME_MAX] = 0;                //  96 bytes
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, name, "f32", 2, s_shape_4x3, 0);
    REJECT (header, 1, s_size_48, "tensor 0's name is 96 bytes, longer than 95");
    s_header_destroy (&header);

    name [ZA_WIRE_NAME_MAX - 1] = 0;            //  95 bytes: fine
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    s_tensor (&header, name, "f32", 2, s_shape_4x3, 0);
    ACCEPT (header, 1, s_size_48);
    cr_assert_str_eq (s_out.tensors [0].name, name);
    s_header_destroy (&header);

    //  A NUL inside, and the same name twice.
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    msgpack_pack_map (&header.packer, 4);
    s_str (&header, "name");
    msgpack_pack_str (&header.packer, 3);
    msgpack_pack_str_body (&header.packer, "a\0b", 3);
    s_str (&header, "dtype");
    s_str (&header, "f32");
    s_str (&header, "shape");
    msgpack_pack_array (&header.packer, 0);
    s_str (&header, "frame");
    msgpack_pack_int (&header.packer, 0);
    const size_t four [1] = { 4 };
    REJECT (header, 1, four, "contains a NUL byte");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 2);
    s_tensor (&header, "w", "f32", 2, s_shape_4x3, 0);
    s_tensor (&header, "w", "f32", 2, s_shape_4x3, 1);
    const size_t sizes [2] = { 48, 48 };
    REJECT (header, 2, sizes, "name 'w' is already used by tensor 0");
    s_header_destroy (&header);
}

Test (wire, decode_rejects_missing_tensor_keys)
{
    s_header_t header;
    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    msgpack_pack_map (&header.packer, 2);
    s_str (&header, "name");
    s_str (&header, "w");
    s_str (&header, "dtype");
    s_str (&header, "f32");
    REJECT (header, 1, s_size_48, "tensor 0 has no 'shape'");
    s_header_destroy (&header);

    s_header_init (&header);
    s_begin (&header, 4, ZA_WIRE_VERSION, "push");
    s_tensors (&header, 1);
    msgpack_pack_array (&header.packer, 0);
    REJECT (header, 1, s_size_48, "tensor 0 must be a map, got array");
    s_header_destroy (&header);
}


//  --------------------------------------------------------------------------
//  Fuzz

//  A real header from the encoder: every field and three tensors.
static void
s_real_header (uint8_t **bytes_p, size_t *size_p, size_t *frame_sizes)
{
    s_pair_t pair = s_pair_new ("inproc");
    za_wire_msg_t *msg = s_msg_new (ZA_OP_INIT);
    s_fill_header (msg);
    static float values [12];
    static int64_t step = 77;
    int64_t shape [2] = { 4, 3 };
    cr_assert_eq (za_wire_msg_add (msg, "dense/kernel", ZA_DTYPE_F32, 2, shape, values), 0);
    cr_assert_eq (za_wire_msg_add (msg, "dense/kernel/m", ZA_DTYPE_F32, 1, shape, values), 0);
    cr_assert_eq (za_wire_msg_add (msg, "global_step", ZA_DTYPE_I64, 0, NULL, &step), 0);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_eq (za_wire_send (pair.dealer, NULL, msg, &lease), 0, "%s", za_last_error ());
    zmsg_t *received = s_recv (pair.router);
    zframe_t *routing_id = zmsg_pop (received);
    zframe_destroy (&routing_id);
    zframe_t *header = zmsg_first (received);
    *size_p = zframe_size (header);
    *bytes_p = malloc (*size_p);
    memcpy (*bytes_p, zframe_data (header), *size_p);
    for (int i = 0; i < 3; i++)
        frame_sizes [i] = zframe_size (zmsg_next (received));
    zmsg_destroy (&received);
    za_wire_lease_wait (&lease);
    free (msg);
    s_pair_destroy (&pair);
}

Test (wire, fuzz_random_headers)
{
    za_rng_t rng;
    za_rng_seed (&rng, FUZZ_SEED);
    uint8_t bytes [FUZZ_MAX_HEADER_BYTES];
    size_t sizes [FUZZ_MAX_FRAMES];
    int accepted = 0;
    for (int round = 0; round < FUZZ_ROUNDS; round++) {
        size_t size = 1 + za_rng_below (&rng, FUZZ_MAX_HEADER_BYTES);
        for (size_t i = 0; i < size; i++)
            bytes [i] = (uint8_t) za_rng_below (&rng, 256);
        if (round % 2)                          //  half of them start as a map
            bytes [0] = (uint8_t) (0x80 | za_rng_below (&rng, 16));
        int frames = (int) za_rng_below (&rng, FUZZ_MAX_FRAMES + 1);
        for (int i = 0; i < frames; i++)
            sizes [i] = za_rng_below (&rng, 64);
        accepted += s_decode_bytes (bytes, size, frames, sizes) == 0;
    }
    cr_log_info ("fuzz_random_headers: %d of %d accepted", accepted, FUZZ_ROUNDS);
}

Test (wire, fuzz_mutations_of_a_valid_header)
{
    uint8_t *valid;
    size_t size;
    size_t sizes [3];
    s_real_header (&valid, &size, sizes);
    s_expect_accept (valid, size, 3, sizes);
    cr_assert_eq (s_out.op, ZA_OP_INIT);
    cr_assert_eq (s_out.has_optim, 1);

    za_rng_t rng;
    za_rng_seed (&rng, FUZZ_SEED + 1);
    uint8_t *mutated = malloc (size);
    int accepted = 0;
    for (int round = 0; round < FUZZ_ROUNDS; round++) {
        memcpy (mutated, valid, size);
        size_t at = za_rng_below (&rng, (uint32_t) size);
        mutated [at] = (uint8_t) (mutated [at] ^ (1 + za_rng_below (&rng, 255)));
        if (s_decode_bytes (mutated, size, 3, sizes) == 0) {
            accepted++;
            for (int i = 0; i < s_out.tensor_count; i++)
                cr_assert_eq (s_out.tensors [i].bytes, sizes [i]);
        }
    }
    cr_log_info ("fuzz_mutations: %d of %d still decode", accepted, FUZZ_ROUNDS);
    free (mutated);
    free (valid);
}


//  --------------------------------------------------------------------------
//  Fuzz: the broker's control-plane bodies (docs/PROTOCOL.md 13)

#define CONTROL_FUZZ_ROUNDS 4000
#define CONTROL_BROKER "inproc://wire-fuzz-broker"
#define CONTROL_REPLY_MS 2000

//  A copy of body with a few bytes changed (never to a NUL: the encoder
//  refuses those, and the decoder is fuzzed with them above).
static char *
s_mutate (const char *body, za_rng_t *rng)
{
    size_t size = strlen (body);
    char *text = strdup (body);
    int flips = 1 + (int) za_rng_below (rng, 4);
    for (int f = 0; f < flips; f++) {
        size_t at = za_rng_below (rng, (uint32_t) size);
        char c = (char) (text [at] ^ (1 + za_rng_below (rng, 255)));
        text [at] = c? c: '0';
    }
    return text;
}

//  Sends op with body; the reply (NULL: none in time), decoded into s_out.
static zmsg_t *
s_control_call (zsock_t *dealer, za_wire_msg_t *msg, za_op_t op, uint64_t seq,
                const char *body)
{
    za_wire_msg_init (msg, op);
    msg->seq = seq;
    msg->body = body;
    msg->body_len = strlen (body);
    cr_assert_eq (za_wire_send (dealer, NULL, msg, NULL), 0, "%s", za_last_error ());
    zpoller_t *poller = zpoller_new (dealer, NULL);
    zmsg_t *reply = zpoller_wait (poller, CONTROL_REPLY_MS)? zmsg_recv (dealer): NULL;
    zpoller_destroy (&poller);
    if (reply)
        cr_assert_eq (za_wire_decode (reply, &s_out), 0, "%s", za_last_error ());
    return reply;
}

Test (wire, fuzz_control_plane_bodies_at_a_live_broker)
{
    //  Mutated registers and reports at a broker of 1 chief, 2 workers, 1 ps:
    //  each gets exactly one answer with its seq; afterwards the broker still
    //  answers a ping and its state lists every task.
    char dir [] = "/tmp/za_wire_fuzz_XXXXXX";
    cr_assert_not_null (mkdtemp (dir));
    za_broker_config_t config;
    za_broker_config_init (&config);
    config.bind = CONTROL_BROKER;
    config.job_text = "{\"model\": \"linear\", \"max_steps\": 100}";
    config.counts [ZA_TASK_CHIEF] = 1;
    config.counts [ZA_TASK_WORKER] = 2;
    config.counts [ZA_TASK_PS] = 1;
    config.model_dir = dir;
    config.max_steps = 100;
    config.heartbeat.ivl_secs = 3600;
    za_error_set_quiet (1);
    zactor_t *broker = zactor_new (za_broker_actor, &config);
    zsock_t *dealer = zsock_new_dealer (CONTROL_BROKER);
    za_wire_msg_t *msg = malloc (sizeof *msg);
    const char *valid [2] = {
        "{\"role\": \"worker\", \"index\": -1, \"host\": \"127.0.0.1\", \"pid\": 4321, "
        "\"restarts\": 0, \"endpoint\": \"\"}",
        "{\"role\": \"ps\", \"index\": 0, \"host\": \"127.0.0.1\", \"pid\": 4322, \"restarts\": "
        "1, \"endpoint\": \"tcp://127.0.0.1:5000\", \"state\": \"running\", \"global_step\": 7, "
        "\"loss\": 0.5, \"steps_per_sec\": 2.5, \"examples_per_sec\": 160, \"eval_step\": 5, "
        "\"eval_accuracy\": 0.8}"
    };
    za_rng_t rng;
    za_rng_seed (&rng, FUZZ_SEED + 2);
    int answered [2] = {0, 0}, refused = 0;
    for (int round = 0; round < CONTROL_FUZZ_ROUNDS; round++) {
        int kind = round % 2;
        char *body = s_mutate (valid [kind], &rng);
        zmsg_t *reply = s_control_call (dealer, msg, kind? ZA_OP_REPORT: ZA_OP_REGISTER,
                                        (uint64_t) round + 1, body);
        cr_assert_not_null (reply, "round %d: no answer to %s", round, body);
        cr_assert_eq (s_out.seq, (uint64_t) round + 1, "round %d: the reply's seq", round);
        answered [kind]++;
        refused += s_out.op == ZA_OP_ERROR;
        zmsg_destroy (&reply);
        free (body);
    }
    zmsg_t *reply = s_control_call (dealer, msg, ZA_OP_PING, 999999, "{}");
    cr_assert_not_null (reply);
    cr_expect_eq (s_out.op, ZA_OP_PONG);
    zmsg_destroy (&reply);
    //  A loss that is not finite goes as null (JSON has no NaN): taken, and
    //  shown as null (a report refused leaves its task silent, then killed).
    const char *diverged =
        "{\"role\": \"ps\", \"index\": 0, \"host\": \"127.0.0.1\", \"pid\": 4322, "
        "\"restarts\": 1, \"endpoint\": \"tcp://127.0.0.1:5000\", \"state\": \"running\", "
        "\"global_step\": 8, \"loss\": null, \"steps_per_sec\": 2.5, "
        "\"examples_per_sec\": 160}";
    reply = s_control_call (dealer, msg, ZA_OP_REPORT, 999998, diverged);
    cr_assert_not_null (reply);
    cr_expect_neq (s_out.op, ZA_OP_ERROR, "%.*s", (int) s_out.body_len, s_out.body);
    zmsg_destroy (&reply);
    reply = s_control_call (dealer, msg, ZA_OP_WATCH, 1000000, "{}");
    cr_assert_not_null (reply);
    cr_assert_eq (s_out.op, ZA_OP_STATE);
    json_t *state = json_loadb (s_out.body, s_out.body_len, 0, NULL);
    cr_assert_not_null (state);
    cr_expect_eq (json_array_size (json_object_get (state, "roles")), 4);
    json_t *row, *ps = NULL;
    size_t r;
    json_array_foreach (json_object_get (state, "roles"), r, row)
        if (!strcmp (json_string_value (json_object_get (row, "role")), "ps"))
            ps = row;
    cr_expect (ps && json_is_null (json_object_get (ps, "loss")), "%.*s", (int) s_out.body_len,
               s_out.body);
    json_decref (state);
    zmsg_destroy (&reply);
    cr_log_info ("fuzz_control_plane: %d registers, %d reports, %d refused", answered [0],
                 answered [1], refused);
    free (msg);
    zsock_destroy (&dealer);
    zactor_destroy (&broker);
}

Test (wire, fuzz_control_plane_replies_at_the_client)
{
    //  Mutated welcome, view and state bodies at a broker client: each is
    //  decoded into what it says, or dropped; what decodes keeps its promises.
    zsock_t *router = zsock_new (ZMQ_ROUTER);
    cr_assert_eq (zsock_bind (router, "inproc://wire-fuzz-client"), 0);
    za_broker_client_t *client = za_broker_client_new ("inproc://wire-fuzz-client", za_heartbeat_default ());
    cr_assert_not_null (client);
    cr_assert_eq (za_broker_client_watch (client), 0);
    zmsg_t *hello = zmsg_recv (router);
    zframe_t *identity = zmsg_pop (hello);
    zmsg_destroy (&hello);
    static const struct {
        za_op_t op;
        const char *body;
    } valid [3] = {
        {ZA_OP_WELCOME, "{\"index\": 1, \"endpoint\": \"tcp://127.0.0.1:5000\", \"job\": "
                        "{\"max_steps\": 100, \"roles\": {\"worker\": 2}}}"},
        {ZA_OP_VIEW, "{\"ready\": true, \"ps\": [\"tcp://127.0.0.1:5000\", "
                     "\"tcp://127.0.0.1:5001\"], \"num_workers\": 3, \"ring\": "
                     "[\"tcp://127.0.0.1:6000\", \"\", \"tcp://127.0.0.1:6002\"], "
                     "\"members\": [0, 2], \"membership\": 4}"},
        {ZA_OP_STATE, "{\"job\": {\"max_steps\": 100, \"model_dir\": \"runs/a\"}, \"broker\": "
                      "{\"pid\": 9, \"host\": \"h\", \"restarts\": 0, \"uptime_secs\": 1.5, "
                      "\"endpoint\": \"tcp://*:5555\", \"supervise\": true}, \"global_step\": 7, "
                      "\"done\": false, \"roles\": [{\"role\": \"chief\", \"index\": 0, "
                      "\"host\": \"h\", \"pid\": 10, \"state\": \"running\", \"global_step\": 7, "
                      "\"steps_per_sec\": 1, \"examples_per_sec\": 64, \"loss\": 0.5, "
                      "\"eval_step\": null, \"eval_accuracy\": null, \"restarts\": 0, "
                      "\"heartbeat_age_secs\": 0.1}], \"events\": [{\"time\": 1.0, \"event\": "
                      "\"started\", \"role\": \"broker\", \"index\": 0, \"pid\": 9, \"cause\": "
                      "\"\", \"restarts\": 0}]}"},
    };
    za_wire_msg_t *msg = malloc (sizeof *msg);
    za_broker_reply_t reply;
    memset (&reply, 0, sizeof reply);
    za_rng_t rng;
    za_rng_seed (&rng, FUZZ_SEED + 3);
    int decoded = 0;
    zpoller_t *poller = zpoller_new (za_broker_client_sock (client), NULL);
    for (int round = 0; round < CONTROL_FUZZ_ROUNDS; round++) {
        int kind = round % 3;
        char *body = round < 3? strdup (valid [kind].body): s_mutate (valid [kind].body, &rng);
        za_wire_msg_init (msg, valid [kind].op);
        msg->seq = (uint64_t) round;
        msg->body = body;
        msg->body_len = strlen (body);
        cr_assert_eq (za_wire_send (router, identity, msg, NULL), 0);
        cr_assert_not_null (zpoller_wait (poller, CONTROL_REPLY_MS));
        if (za_broker_client_recv (client, &reply) == 0) {
            decoded++;
            cr_assert_eq (reply.op, valid [kind].op);
            if (reply.op == ZA_OP_WELCOME)
                cr_assert (reply.index >= 0 && reply.job && *reply.job == '{');
            if (reply.op == ZA_OP_VIEW) {
                for (int p = 0; p < reply.ps_count && reply.ready; p++)
                    cr_assert (*reply.ps [p], "round %d: an empty endpoint in a ready view",
                               round);
                //  Members: ascending worker indexes; each in a ready ring has
                //  an endpoint.
                for (int m = 0; m < reply.member_count; m++) {
                    cr_assert (reply.members [m] >= 0 && reply.members [m] < reply.num_workers
                               && (m == 0 || reply.members [m] > reply.members [m - 1]),
                               "round %d: member %d", round, m);
                    cr_assert (!reply.ready || reply.members [m] >= reply.ring_count
                               || *reply.ring [reply.members [m]],
                               "round %d: a member without an endpoint", round);
                }
                cr_assert (reply.member_count == 0 || reply.membership >= 1);
            }
            if (reply.op == ZA_OP_STATE)
                cr_assert (reply.state && reply.state->task_count <= ZA_BROKER_STATE_TASKS);
        }
        else
            cr_assert_eq (round < 3, 0, "a valid %s was dropped: %s",
                          za_op_name (valid [kind].op), za_last_error ());
        za_broker_reply_clear (&reply);
        free (body);
    }
    cr_log_info ("fuzz_control_plane_replies: %d of %d decoded", decoded, CONTROL_FUZZ_ROUNDS);
    zpoller_destroy (&poller);
    free (msg);
    zframe_destroy (&identity);
    za_broker_client_destroy (&client);
    zsock_destroy (&router);
}

// ---------------------------------------------------------------------------
//  docs/PROTOCOL.md and the codec name the same things

//  The part of doc from the line that starts with `from` to the next line
//  that starts with `to` (or the end): a copy, freed by the caller.
static char *
s_doc_part (const char *doc, const char *from, const char *to)
{
    const char *start = strstr (doc, from);
    cr_assert_not_null (start, "PROTOCOL.md has no '%s'", from);
    const char *end = to? strstr (start + strlen (from), to): NULL;
    size_t length = end? (size_t) (end - start): strlen (start);
    char *part = malloc (length + 1);
    memcpy (part, start, length);
    part [length] = 0;
    return part;
}

//  1 when the part's first table (after its heading) has a row whose first
//  cell is `name`, in backticks.
static int
s_table_has (const char *part, const char *name)
{
    char cell [128];
    snprintf (cell, sizeof cell, "\n| `%s` |", name);
    const char *table = strstr (part, "\n|");
    const char *end = table? strstr (table, "\n\n"): NULL;
    const char *found = table? strstr (table, cell): NULL;
    return found && (!end || found < end);
}

//  The second cell of the row s_table_has finds, copied into text ("" when
//  there is no such row).
static const char *
s_table_type (const char *part, const char *name, char *text, size_t size)
{
    text [0] = 0;
    if (!s_table_has (part, name))
        return text;
    char cell [128];
    snprintf (cell, sizeof cell, "\n| `%s` | ", name);
    const char *start = strstr (strstr (part, "\n|"), cell) + strlen (cell);
    const char *end = strstr (start, " |");
    size_t length = end? (size_t) (end - start): 0;
    snprintf (text, size, "%.*s", (int) length, start);
    return text;
}

//  The number of rows of the part's first table (its header and rule aside).
static int
s_table_rows (const char *part)
{
    const char *table = strstr (part, "\n|");
    const char *end = table? strstr (table, "\n\n"): NULL;
    int rows = 0;
    for (const char *at = table; at && (!end || at < end); at = strstr (at + 1, "\n|"))
        rows++;
    return rows - 2;
}

//  Every header key, opt key and tensor key the codec knows is a row of its
//  table in PROTOCOL.md whose type cell is the codec's type and limits for
//  it (za_wire_type, from the rows the codec walks), and the tables have no
//  other rows; every op the
//  codec knows is described there (a ps op's heading, a row of the broker's
//  table, the ring's op row), and every op described is one the codec knows.
Test (wire, protocol_md_names_what_the_codec_knows)
{
    size_t size;
    char *doc = za_test_read_file (ZA_SOURCE_DIR "/docs/PROTOCOL.md", &size);
    cr_assert_not_null (doc);
    struct {
        za_wire_names_t list;
        const char *from, *to;
    } tables [] = {
        {ZA_WIRE_HEADER_KEYS, "## 2. The header", "### The `opt` map"},
        {ZA_WIRE_OPT_KEYS, "### The `opt` map", "## 3."},
        {ZA_WIRE_TENSOR_KEYS, "## 3. Tensors and payload frames", "Dtypes ("},
    };
    for (size_t t = 0; t < sizeof tables / sizeof tables [0]; t++) {
        char *part = s_doc_part (doc, tables [t].from, tables [t].to);
        int count = 0;
        for (const char *name; (name = za_wire_name (tables [t].list, count)); count++) {
            cr_expect (s_table_has (part, name), "'%s' has no row for the codec's key '%s'",
                       tables [t].from, name);
            //  The type cell is what the codec's row for the key says.
            char documented [256], codec [256];
            s_table_type (part, name, documented, sizeof documented);
            cr_expect_not_null (za_wire_type (tables [t].list, count, codec, sizeof codec));
            cr_expect_str_eq (documented, codec, "'%s': `%s` is \"%s\" there, \"%s\" in the "
                              "codec", tables [t].from, name, documented, codec);
        }
        char text [64];
        cr_expect_null (za_wire_type (tables [t].list, count, text, sizeof text));
        cr_expect_eq (s_table_rows (part), count, "'%s': %d rows for the codec's %d keys",
                      tables [t].from, s_table_rows (part), count);
        free (part);
    }
    //  The ops: section 9's headings, section 13's table, section 14's op row.
    char *ps = s_doc_part (doc, "## 9. Operations", "## 10.");
    char *broker = s_doc_part (doc, "## 13. The broker", "## 14.");
    char *ring = s_doc_part (doc, "## 14. The all-reduce ring", "## 15.");
    char *ring_ops = s_doc_part (ring, "| `op` |", "\n");
    int described = 0;
    for (int i = 0; za_wire_name (ZA_WIRE_OPS, i); i++) {
        const char *name = za_wire_name (ZA_WIRE_OPS, i);
        char heading [64], listed [64], quoted [64];
        snprintf (heading, sizeof heading, "\n### %s ", name);
        snprintf (listed, sizeof listed, ", %s", name);
        snprintf (quoted, sizeof quoted, "`%s`", name);
        int in_ps = strstr (ps, heading) != NULL;
        //  "### init_ok, held, ..., error": the replies' heading.
        const char *replies = strstr (ps, "\n### init_ok");
        const char *replies_end = replies? strchr (replies + 1, '\n'): NULL;
        const char *at = replies? strstr (replies, listed): NULL;
        in_ps |= at && at < replies_end;
        in_ps |= replies && strncmp (replies + 5, name, strlen (name)) == 0
                 && replies [5 + strlen (name)] == ',';
        int in_broker = s_table_has (broker, name);
        int in_ring = strstr (ring_ops, quoted) != NULL;
        cr_expect (in_ps || in_broker || in_ring, "PROTOCOL.md describes no op '%s'", name);
        described += in_ps || in_broker || in_ring;
    }
    //  And the other way: each heading of section 9 and each op of the
    //  broker's table is one the codec knows.
    for (const char *h = strstr (ps, "\n### "); h; h = strstr (h + 1, "\n### ")) {
        char name [64];
        if (sscanf (h + 5, "%63[a-z_]", name) == 1) {
            za_op_t op;
            cr_expect_eq (za_op_parse (name, &op), 0, "section 9 describes '%s', which the "
                          "codec does not know", name);
        }
    }
    const char *table = strstr (broker, "\n| op |");
    const char *end = table? strstr (table, "\n\n"): NULL;
    for (const char *row = table? strstr (table, "\n| `"): NULL; row && (!end || row < end);
         row = strstr (row + 1, "\n| `")) {
        char name [64];
        za_op_t op;
        if (sscanf (row, "\n| `%63[a-z_]`", name) == 1)
            cr_expect_eq (za_op_parse (name, &op), 0, "section 13 describes '%s', which the "
                          "codec does not know", name);
    }
    cr_expect_gt (described, 20);
    free (ring_ops), free (ring), free (broker), free (ps), free (doc);
}
