/*  test_conformance.c: what independent checks of docs/PROTOCOL.md found in
    the ps and the broker, each pinned by a test that failed before its fix:
    a ps checks shapes, a push's and a bye's task, counts byes per task and
    refuses an optimizer beyond float32; the broker checks every field of a
    register and a report (types, ranges, lengths, addresses), lets a live
    task be taken only by itself, echoes each request's seq, drops an
    oversized message as any bad one (the connection stays), never cuts a
    string into invalid UTF-8; a broker client acts on nothing it could not
    decode; a ps binds the address its cluster names, not every interface. */
#include "za_test.h"

#include "za/za_broker.h"
#include "za/za_broker_client.h"
#include "za/za_partition.h"
#include "za/za_role.h"
#include "za/za_util.h"
#include "za/za_wire.h"
#include "../broker/za_supervisor.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <jansson.h>
#include <msgpack.h>

#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define REPLY_MS 2000

static void
s_setup (void)
{
    za_test_dir_create ("za_conformance");
    za_error_set_quiet (1);
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (ps, .init = s_setup, .fini = s_teardown, .timeout = 60);
TestSuite (broker, .init = s_setup, .fini = s_teardown, .timeout = 60);
TestSuite (client, .init = s_setup, .fini = s_teardown, .timeout = 60);

//  A peer speaking the wire: its socket and a message in and out.
typedef struct {
    zsock_t *sock;
    za_wire_msg_t *out, *in;
    zmsg_t *reply;
    za_wire_lease_t lease;
} s_peer_t;

static void
s_peer_open (s_peer_t *peer, const char *endpoint)
{
    memset (peer, 0, sizeof *peer);
    peer->sock = zsock_new (ZMQ_DEALER);
    cr_assert_not_null (peer->sock);
    //  A peer that is gone fails the call, it does not hang the test.
    zsock_set_sndtimeo (peer->sock, REPLY_MS);
    cr_assert_eq (zsock_connect (peer->sock, "%s", endpoint), 0);
    peer->out = malloc (sizeof *peer->out);
    peer->in = malloc (sizeof *peer->in);
    za_wire_lease_init (&peer->lease);
}

static void
s_peer_close (s_peer_t *peer)
{
    zmsg_destroy (&peer->reply);
    zsock_destroy (&peer->sock);
    za_wire_lease_wait (&peer->lease);
    free (peer->out);
    free (peer->in);
}

//  Waits for a message into peer->in; returns its op, or -1 when none came.
static int
s_receive (s_peer_t *peer, int timeout_ms)
{
    zmsg_destroy (&peer->reply);
    zpoller_t *poller = zpoller_new (peer->sock, NULL);
    void *which = zpoller_wait (poller, timeout_ms);
    zpoller_destroy (&poller);
    if (!which)
        return -1;
    peer->reply = zmsg_recv (peer->sock);
    cr_assert_not_null (peer->reply);
    cr_assert_eq (za_wire_decode (peer->reply, peer->in), 0, "%s", za_last_error ());
    return (int) peer->in->op;
}

//  Sends peer->out; returns the reply's op, or -1 when it could not be sent
//  or none came.
static int
s_call (s_peer_t *peer)
{
    if (za_wire_send (peer->sock, NULL, peer->out, &peer->lease))
        return -1;
    return s_receive (peer, REPLY_MS);
}

// ---------------------------------------------------------------------------
//  The ps

typedef struct {
    za_stack_spec_t spec;
    za_role_config_t config;
    zactor_t *ps;
    s_peer_t peer;
    float kernel [12], bias [3];            //  dense/kernel 4x3, dense/bias 3
} s_ps_case_t;

//  A ps of `flatten dense(3)` for num_workers, the variables `freeze`
//  selects (NULL: none) frozen.
static void
s_ps_start_freezing (s_ps_case_t *c, int num_workers, const char *freeze)
{
    memset (c, 0, sizeof *c);
    cr_assert_eq (za_stack_parse ("flatten dense(3)", &c->spec), 0);
    if (freeze)
        snprintf (c->spec.freeze, sizeof c->spec.freeze, "%s", freeze);
    za_role_config_init (&c->config);
    c->config.model_fn = za_stack_model_fn ();
    c->config.params = &c->spec;
    c->config.input = (za_input_shape_t) {2, 2, 1};
    c->config.ps_count = 1;
    c->config.num_workers = num_workers;
    c->config.ps_index = 0;
    c->config.bind_endpoint = "inproc://conformance-ps";
    c->config.timeout_secs = 30;
    c->ps = zactor_new (za_ps_actor, &c->config);
    s_peer_open (&c->peer, "inproc://conformance-ps");
    for (int i = 0; i < 12; i++)
        c->kernel [i] = 1.0f;
    for (int i = 0; i < 3; i++)
        c->bias [i] = 1.0f;
}

static void
s_ps_start (s_ps_case_t *c, int num_workers)
{
    s_ps_start_freezing (c, num_workers, NULL);
}

static void
s_ps_stop (s_ps_case_t *c)
{
    s_peer_close (&c->peer);
    zactor_destroy (&c->ps);
}

//  The two tensors, with shapes that may be wrong.
static void
s_add (s_ps_case_t *c, const int64_t *kshape, int kdims, const int64_t *bshape, int bdims)
{
    cr_assert_eq (za_wire_msg_add (c->peer.out, "dense/kernel", ZA_DTYPE_F32, kdims, kshape,
                                   c->kernel), 0);
    cr_assert_eq (za_wire_msg_add (c->peer.out, "dense/bias", ZA_DTYPE_F32, bdims, bshape,
                                   c->bias), 0);
}

static const int64_t s_kernel [2] = {4, 3}, s_bias [1] = {3};

//  The msgpack float64 of value: 0xcb and its 8 bytes, big-endian.
static void
s_float64_bytes (double value, unsigned char *bytes)
{
    uint64_t bits;
    memcpy (&bits, &value, sizeof bits);
    bytes [0] = 0xcb;
    for (int i = 0; i < 8; i++)
        bytes [1 + i] = (unsigned char) (bits >> (56 - 8 * i));
}

//  Sends peer->out with the float64 `from` in its header made `to`: what a
//  peer written from PROTOCOL.md alone may send, and our encoder (which
//  holds the optimizer as float32) never would. Returns the reply's op.
static int
s_call_patched (s_peer_t *peer, double from, double to)
{
    //  A new endpoint each time: libzmq lets go of a bound one later.
    static int taps = 0;
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "inproc://conformance-tap-%d", taps++);
    zsock_t *tap = zsock_new (ZMQ_PAIR), *into = zsock_new (ZMQ_PAIR);
    cr_assert (tap && into);
    cr_assert_eq (zsock_bind (tap, "%s", endpoint), 0, "%s", endpoint);
    cr_assert_eq (zsock_connect (into, "%s", endpoint), 0, "%s", endpoint);
    cr_assert_eq (za_wire_send (into, NULL, peer->out, &peer->lease), 0, "%s", za_last_error ());
    zmsg_t *msg = zmsg_recv (tap);
    cr_assert_not_null (msg);
    zframe_t *header = zmsg_first (msg);
    unsigned char was [9], now [9];
    s_float64_bytes (from, was);
    s_float64_bytes (to, now);
    unsigned char *data = zframe_data (header);
    size_t size = zframe_size (header), at = 0;
    while (at + 9 <= size && memcmp (data + at, was, 9))
        at++;
    cr_assert (at + 9 <= size, "no float64 %g in the header", from);
    memcpy (data + at, now, 9);
    cr_assert_eq (zmsg_send (&msg, peer->sock), 0);
    zsock_destroy (&into);
    zsock_destroy (&tap);
    return s_receive (peer, REPLY_MS);
}

//  An init with SGD at lr, global step 0: values, then ps 0's global_step.
//  A value beyond float32 goes out as a float64 no za_optim_config_t holds.
static int
s_init (s_ps_case_t *c, double lr, double beta2, const int64_t *kshape, int64_t *zero)
{
    const float lr_stand_in = 0.25f, beta2_stand_in = 0.375f;
    int lr_big = fabs (lr) > FLT_MAX, beta2_big = fabs (beta2) > FLT_MAX;
    za_wire_msg_init (c->peer.out, ZA_OP_INIT);
    c->peer.out->seq = 1;
    c->peer.out->task = 0;
    c->peer.out->step = 0;
    c->peer.out->has_optim = 1;
    c->peer.out->optim.kind = ZA_OPT_SGD;
    c->peer.out->optim.learning_rate = lr_big? lr_stand_in: (float) lr;
    c->peer.out->optim.beta1 = 0.9f;
    c->peer.out->optim.beta2 = beta2_big? beta2_stand_in: (float) beta2;
    c->peer.out->optim.epsilon = 1e-7f;
    s_add (c, kshape, 2, s_bias, 1);
    za_wire_msg_add (c->peer.out, "global_step", ZA_DTYPE_I64, 0, NULL, zero);
    if (lr_big)
        return s_call_patched (&c->peer, lr_stand_in, lr);
    if (beta2_big)
        return s_call_patched (&c->peer, beta2_stand_in, beta2);
    return s_call (&c->peer);
}

//  The ps's values: a pull.
static float
s_pulled_kernel (s_ps_case_t *c)
{
    za_wire_msg_init (c->peer.out, ZA_OP_PULL);
    c->peer.out->seq = 9;
    c->peer.out->task = 0;
    cr_assert_eq (s_call (&c->peer), ZA_OP_VALUES);
    float value;
    memcpy (&value, c->peer.in->tensors [0].data, sizeof value);
    return value;
}

Test (ps, a_wrong_shape_of_the_right_size_is_a_bad_request)
{
    s_ps_case_t c;
    s_ps_start (&c, 1);
    int64_t zero = 0;
    //  dense/kernel declared [3,4] instead of [4,3]: 12 floats either way.
    const int64_t transposed [2] = {3, 4};
    cr_assert_eq (s_init (&c, 0.5, 0.999, transposed, &zero), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect (strstr (c.peer.in->error, "3x4"), "%s", c.peer.in->error);
    cr_assert_eq (s_init (&c, 0.5, 0.999, s_kernel, &zero), ZA_OP_INIT_OK, "%s",
                  c.peer.in->error);
    //  A push whose bias is [3,1]: refused, the values unchanged.
    za_wire_msg_init (c.peer.out, ZA_OP_PUSH);
    c.peer.out->seq = 2;
    c.peer.out->task = 0;
    const int64_t column [2] = {3, 1};
    s_add (&c, s_kernel, 2, column, 2);
    cr_assert_eq (s_call (&c.peer), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect_eq (s_pulled_kernel (&c), 1.0f);
    s_ps_stop (&c);
}

//  --wire-dtype bf16: a push must come in bf16 (an f32 one is refused by
//  name), and values come back in bf16; init stays f32.
Test (ps, a_bf16_job_takes_bf16_pushes_and_answers_in_bf16)
{
    s_ps_case_t c;
    memset (&c, 0, sizeof c);
    s_ps_start (&c, 1);
    zactor_destroy (&c.ps);
    s_peer_close (&c.peer);
    c.config.wire_dtype = ZA_DTYPE_BF16;
    c.config.bind_endpoint = "inproc://conformance-ps-bf16";
    c.ps = zactor_new (za_ps_actor, &c.config);
    s_peer_open (&c.peer, "inproc://conformance-ps-bf16");
    int64_t zero = 0;
    cr_assert_eq (s_init (&c, 0.5, 0.999, s_kernel, &zero), ZA_OP_INIT_OK, "%s",
                  c.peer.in->error);
    //  An f32 push: refused, named, nothing applied.
    za_wire_msg_init (c.peer.out, ZA_OP_PUSH);
    c.peer.out->seq = 2;
    c.peer.out->task = 0;
    s_add (&c, s_kernel, 2, s_bias, 1);
    cr_assert_eq (s_call (&c.peer), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect (strstr (c.peer.in->error, "is f32; this job's gradients travel as bf16"), "%s",
               c.peer.in->error);
    //  A bf16 push of 0.25 everywhere: SGD at lr 0.5 takes 1.0 to 0.875.
    uint16_t kernel [12], bias [3];
    for (int i = 0; i < 12; i++)
        kernel [i] = 0x3e80;                //  0.25
    for (int i = 0; i < 3; i++)
        bias [i] = 0x3e80;
    za_wire_msg_init (c.peer.out, ZA_OP_PUSH);
    c.peer.out->seq = 3;
    c.peer.out->task = 0;
    cr_assert_eq (za_wire_msg_add (c.peer.out, "dense/kernel", ZA_DTYPE_BF16, 2, s_kernel,
                                   kernel), 0);
    cr_assert_eq (za_wire_msg_add (c.peer.out, "dense/bias", ZA_DTYPE_BF16, 1, s_bias, bias), 0);
    cr_assert_eq (s_call (&c.peer), ZA_OP_VALUES, "%s", c.peer.in->error);
    const za_wire_tensor_t *t = &c.peer.in->tensors [0];
    cr_assert_eq (t->dtype, ZA_DTYPE_BF16);
    cr_assert_eq (t->bytes, 12 * sizeof (uint16_t));
    float value;
    za_bf16_to_f32 (t->data, &value, 1);
    cr_expect_eq (value, 0.875f);
    s_ps_stop (&c);
}

Test (ps, a_push_without_its_task_is_a_bad_request)
{
    s_ps_case_t c;
    s_ps_start (&c, 2);
    int64_t zero = 0;
    cr_assert_eq (s_init (&c, 0.5, 0.999, s_kernel, &zero), ZA_OP_INIT_OK);
    int tasks [] = {-1, 2, 7};          //  none, and two beyond the 2 workers
    for (int t = 0; t < 3; t++) {
        za_wire_msg_init (c.peer.out, ZA_OP_PUSH);
        c.peer.out->seq = 3 + t;
        c.peer.out->task = tasks [t];
        s_add (&c, s_kernel, 2, s_bias, 1);
        cr_assert_eq (s_call (&c.peer), ZA_OP_ERROR, "task %d", tasks [t]);
        cr_expect_str_eq (c.peer.in->code, "bad_request");
    }
    cr_expect_eq (s_pulled_kernel (&c), 1.0f, "a push without a task was applied");
    //  With its task it is applied: 1 - 0.5 * 1.
    za_wire_msg_init (c.peer.out, ZA_OP_PUSH);
    c.peer.out->seq = 10;
    c.peer.out->task = 1;
    s_add (&c, s_kernel, 2, s_bias, 1);
    cr_assert_eq (s_call (&c.peer), ZA_OP_VALUES);
    cr_expect_eq (s_pulled_kernel (&c), 0.5f);
    s_ps_stop (&c);
}

//  Says bye as `task`; returns the reply's op.
static int
s_bye (s_ps_case_t *c, int task)
{
    za_wire_msg_init (c->peer.out, ZA_OP_BYE);
    c->peer.out->seq = 20 + task;
    c->peer.out->task = task;
    return s_call (&c->peer);
}

Test (ps, a_bye_counts_once_per_task_of_the_cluster)
{
    s_ps_case_t c;
    s_ps_start (&c, 2);
    int64_t zero = 0;
    cr_assert_eq (s_init (&c, 0.5, 0.999, s_kernel, &zero), ZA_OP_INIT_OK);
    za_wire_msg_init (c.peer.out, ZA_OP_STOP);
    c.peer.out->seq = 30;
    c.peer.out->task = 0;
    cr_assert_eq (s_call (&c.peer), ZA_OP_STOPPING);
    //  Worker 1 twice, and a task that is not in the cluster: the ps stays.
    cr_expect_eq (s_bye (&c, 1), ZA_OP_BYE_OK);
    cr_expect_eq (s_bye (&c, 1), ZA_OP_BYE_OK);
    cr_expect_eq (s_bye (&c, 5), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect_eq (za_role_wait (c.ps, 1.0, NULL, NULL, NULL), -1,
                  "the ps left before the chief said bye");
    //  The chief's bye: now every task has left, and so does the ps.
    cr_expect_eq (s_bye (&c, 0), ZA_OP_BYE_OK);
    cr_expect_eq (za_role_wait (c.ps, 10, NULL, NULL, NULL), 0);
    s_ps_stop (&c);
}

//  A push of the tensors `names` (NULL-terminated, each dense/kernel or
//  dense/bias) with the case's kernel and bias as gradients; the reply's op.
static int
s_push_named (s_ps_case_t *c, uint64_t seq, const char *const *names)
{
    za_wire_msg_init (c->peer.out, ZA_OP_PUSH);
    c->peer.out->seq = seq;
    c->peer.out->task = 0;
    for (int i = 0; names [i]; i++) {
        int kernel = strcmp (names [i], "dense/kernel") == 0;
        cr_assert_eq (za_wire_msg_add (c->peer.out, names [i], ZA_DTYPE_F32, kernel? 2: 1,
                                       kernel? s_kernel: s_bias, kernel? c->kernel: c->bias), 0);
    }
    return s_call (&c->peer);
}

//  The ps's values after a pull: kernel [12], bias [3].
static void
s_pulled (s_ps_case_t *c, float *kernel, float *bias)
{
    za_wire_msg_init (c->peer.out, ZA_OP_PULL);
    c->peer.out->seq = 90;
    c->peer.out->task = 0;
    cr_assert_eq (s_call (&c->peer), ZA_OP_VALUES);
    cr_assert_eq (c->peer.in->tensor_count, 2);
    memcpy (kernel, c->peer.in->tensors [0].data, 12 * sizeof (float));
    memcpy (bias, c->peer.in->tensors [1].data, 3 * sizeof (float));
}

//  A push carries exactly the parts whose variables train, or none (a
//  skipped mixed_float16 step): one that leaves out a variable that trains,
//  or carries a frozen one's, is bad_request and changes nothing.
Test (ps, a_push_carries_exactly_the_parts_that_train)
{
    const char *kernel_only [] = {"dense/kernel", NULL}, *both [] = {"dense/kernel",
                                                                     "dense/bias", NULL};
    const char *none [] = {NULL};
    float kernel [12], bias [3];
    int64_t zero = 0;
    //  Nothing frozen: the bias is left out of a push, which is refused.
    s_ps_case_t c;
    s_ps_start (&c, 1);
    cr_assert_eq (s_init (&c, 0.5, 0.999, s_kernel, &zero), ZA_OP_INIT_OK);
    cr_assert_eq (s_push_named (&c, 2, kernel_only), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect (strstr (c.peer.in->error, "lacks 'dense/bias' (a variable that trains)"), "%s",
               c.peer.in->error);
    s_pulled (&c, kernel, bias);
    cr_expect (kernel [0] == 1.0f && bias [0] == 1.0f, "the refused push changed the values");
    cr_expect_eq (c.peer.in->step, 0, "the refused push counted a step");
    //  None at all: nothing is updated, the step counts.
    cr_assert_eq (s_push_named (&c, 3, none), ZA_OP_VALUES, "%s", c.peer.in->error);
    cr_expect_eq (c.peer.in->step, 1);
    s_pulled (&c, kernel, bias);
    cr_expect (kernel [0] == 1.0f && bias [0] == 1.0f);
    //  Every part: applied (SGD at lr 0.5: 1 - 0.5 x 1).
    cr_assert_eq (s_push_named (&c, 4, both), ZA_OP_VALUES, "%s", c.peer.in->error);
    s_pulled (&c, kernel, bias);
    cr_expect (kernel [0] == 0.5f && bias [0] == 0.5f);
    s_ps_stop (&c);
    //  The bias frozen (--freeze dense/bias): a push with it is refused,
    //  one without it (what a worker sends) is taken.
    s_ps_start_freezing (&c, 1, "dense/bias");
    cr_assert_eq (s_init (&c, 0.5, 0.999, s_kernel, &zero), ZA_OP_INIT_OK);
    cr_assert_eq (s_push_named (&c, 2, both), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect (strstr (c.peer.in->error, "('dense/bias') is a frozen variable's"), "%s",
               c.peer.in->error);
    s_pulled (&c, kernel, bias);
    cr_expect (kernel [0] == 1.0f && bias [0] == 1.0f, "the refused push changed the values");
    cr_assert_eq (s_push_named (&c, 3, kernel_only), ZA_OP_VALUES, "%s", c.peer.in->error);
    s_pulled (&c, kernel, bias);
    cr_expect (kernel [0] == 0.5f && bias [0] == 1.0f, "kernel %g, bias %g", kernel [0],
               bias [0]);
    s_ps_stop (&c);
}

//  w - lr x g in float32 rounded twice (the product, then the difference);
//  volatile so that the compiler cannot fuse them.
static float
s_two_roundings (float w, float lr, float g)
{
    volatile float product = lr * g;
    volatile float difference = w - product;
    return difference;
}

//  PROTOCOL.md's SGD: one fused multiply-add, w' = fmaf (-lr, g, w),
//  rounded once, bit for bit; gradients picked where two roundings differ.
Test (ps, sgd_is_one_fused_multiply_add_bit_for_bit)
{
    s_ps_case_t c;
    s_ps_start (&c, 1);
    const float lr = 0.1f;
    float w [12], g [12], b [3];
    for (int i = 0; i < 12; i++) {
        w [i] = c.kernel [i] = 1.0f + 0.0371f * (float) i;
        //  The first gradient from 0.3 up where one and two roundings differ.
        float grad = 0.3f;
        while (fmaf (-lr, grad, w [i]) == s_two_roundings (w [i], lr, grad))
            grad = nextafterf (grad, 1.0f);
        g [i] = grad;
    }
    int64_t zero = 0;
    cr_assert_eq (s_init (&c, lr, 0.999, s_kernel, &zero), ZA_OP_INIT_OK);
    memcpy (c.kernel, g, sizeof g);
    const char *both [] = {"dense/kernel", "dense/bias", NULL};
    cr_assert_eq (s_push_named (&c, 2, both), ZA_OP_VALUES, "%s", c.peer.in->error);
    float kernel [12];
    s_pulled (&c, kernel, b);
    for (int i = 0; i < 12; i++)
        cr_expect_eq (kernel [i], fmaf (-lr, g [i], w [i]),
                      "element %d: %a, fmaf gives %a, two roundings %a", i, kernel [i],
                      fmaf (-lr, g [i], w [i]), s_two_roundings (w [i], lr, g [i]));
    s_ps_stop (&c);
}

Test (ps, an_optimizer_value_beyond_float32_is_refused)
{
    s_ps_case_t c;
    s_ps_start (&c, 1);
    int64_t zero = 0;
    cr_assert_eq (s_init (&c, 1e39, 0.999, s_kernel, &zero), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "bad_request");
    cr_expect (strstr (c.peer.in->error, "lr"), "%s", c.peer.in->error);
    cr_assert_eq (s_init (&c, 0.5, -1e300, s_kernel, &zero), ZA_OP_ERROR);
    cr_expect (strstr (c.peer.in->error, "beta2"), "%s", c.peer.in->error);
    //  Still waiting for a good init: nothing was loaded.
    za_wire_msg_init (c.peer.out, ZA_OP_PULL);
    c.peer.out->seq = 40;
    c.peer.out->task = 0;
    cr_assert_eq (s_call (&c.peer), ZA_OP_ERROR);
    cr_expect_str_eq (c.peer.in->code, "not_ready");
    s_ps_stop (&c);
}

// ---------------------------------------------------------------------------
//  The broker

#define BROKER_ENDPOINT "inproc://conformance-broker"

typedef struct {
    za_broker_config_t config;
    char job [256];
    zactor_t *broker;
} s_broker_case_t;

//  The config of a broker (not supervising) for 1 chief, `workers`, 1 ps and
//  `evaluators`; not started.
static void
s_broker_configure (s_broker_case_t *c, int workers, int evaluators)
{
    memset (c, 0, sizeof *c);
    snprintf (c->job, sizeof c->job, "{\"model\": \"linear\", \"max_steps\": 100}");
    za_broker_config_init (&c->config);
    c->config.bind = BROKER_ENDPOINT;
    c->config.job_text = c->job;
    c->config.counts [ZA_TASK_CHIEF] = 1;
    c->config.counts [ZA_TASK_WORKER] = workers;
    c->config.counts [ZA_TASK_PS] = 1;
    c->config.counts [ZA_TASK_EVALUATOR] = evaluators;
    c->config.model_dir = za_test_dir ();
    c->config.max_steps = 100;
}

static void
s_broker_run (s_broker_case_t *c)
{
    c->broker = zactor_new (za_broker_actor, &c->config);
    cr_assert_not_null (c->broker);
}

//  A broker (not supervising) for 1 chief, 1 worker, 1 ps and `evaluators`.
static void
s_broker_start_with (s_broker_case_t *c, int evaluators)
{
    s_broker_configure (c, 1, evaluators);
    s_broker_run (c);
}

static void
s_broker_start (s_broker_case_t *c)
{
    s_broker_start_with (c, 0);
}

static void
s_broker_stop (s_broker_case_t *c)
{
    zactor_destroy (&c->broker);
}

//  Sends op with body (may be NULL) and seq; returns the reply's op.
static int
s_ask (s_peer_t *peer, za_op_t op, uint64_t seq, const char *body)
{
    za_wire_msg_init (peer->out, op);
    peer->out->seq = seq;
    if (body) {
        peer->out->body = body;
        peer->out->body_len = strlen (body);
    }
    return s_call (peer);
}

//  A registration body (text, caller frees).
static char *
s_registration (const char *role, int index, const char *host, int pid, const char *endpoint)
{
    json_t *body = json_pack ("{s:s, s:i, s:s, s:i, s:i, s:s}", "role", role, "index", index,
                              "host", host, "pid", pid, "restarts", 0, "endpoint", endpoint);
    char *text = json_dumps (body, JSON_COMPACT);
    json_decref (body);
    return text;
}

//  The broker's state, parsed (caller decrefs).
static json_t *
s_state (s_peer_t *peer)
{
    cr_assert_eq (s_ask (peer, ZA_OP_WATCH, 99, NULL), ZA_OP_STATE);
    json_t *state = json_loadb (peer->in->body, peer->in->body_len, 0, NULL);
    cr_assert_not_null (state);
    return state;
}

//  A string of n copies of `unit`, e.g. 400 x "é" (caller frees).
static char *
s_repeat (const char *unit, int n)
{
    size_t len = strlen (unit);
    char *text = malloc (len * (size_t) n + 1);
    for (int i = 0; i < n; i++)
        memcpy (text + len * (size_t) i, unit, len);
    text [len * (size_t) n] = 0;
    return text;
}

Test (broker, every_field_of_a_register_and_a_report_is_checked)
{
    s_broker_case_t c;
    s_broker_start (&c);
    s_peer_t peer;
    s_peer_open (&peer, BROKER_ENDPOINT);
    char *long_host = s_repeat ("h", 5000), *e_host = s_repeat ("\xc3\xa9", 400);
    char *e_endpoint_tail = s_repeat ("\xc3\xa9", 200), e_endpoint [1024];
    snprintf (e_endpoint, sizeof e_endpoint, "tcp://%s", e_endpoint_tail);
    char bodies [16][12000];
    int n = 0;
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"host\": \"h\", "
              "\"pid\": \"x\", \"restarts\": 0, \"endpoint\": \"\"}");
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"pid\": 7, "
              "\"restarts\": 0, \"endpoint\": \"\"}");
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"host\": \"h\", "
              "\"pid\": 7, \"restarts\": \"0\", \"endpoint\": \"\"}");
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"host\": \"%s\", "
              "\"pid\": 7, \"restarts\": 0, \"endpoint\": \"\"}", long_host);
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"host\": \"%s\", "
              "\"pid\": 7, \"restarts\": 0, \"endpoint\": \"\"}", e_host);
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"host\": "
              "\"a\\u0001b\", \"pid\": 7, \"restarts\": 0, \"endpoint\": \"\"}");
    snprintf (bodies [n++], 12000, "{\"role\": \"ps\", \"index\": 0, \"host\": \"h\", "
              "\"pid\": 7, \"restarts\": 0, \"endpoint\": \"%s\"}", e_endpoint);
    snprintf (bodies [n++], 12000, "{\"role\": \"ps\", \"index\": 0, \"host\": \"h\", "
              "\"pid\": 7, \"restarts\": 0, \"endpoint\": \"tcp://h:0\"}");
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": -2, \"host\": \"h\", "
              "\"pid\": 7, \"restarts\": 0, \"endpoint\": \"\"}");
    snprintf (bodies [n++], 12000, "{\"role\": \"worker\", \"index\": 0, \"host\": \"h\", "
              "\"pid\": 0, \"restarts\": 0, \"endpoint\": \"\"}");
    for (int b = 0; b < n; b++) {
        cr_assert_eq (s_ask (&peer, ZA_OP_REGISTER, 100 + b, bodies [b]), ZA_OP_ERROR,
                      "register %d was welcomed: %.200s", b, bodies [b]);
        cr_expect_str_eq (peer.in->code, "bad_request", "register %d: %s", b, peer.in->error);
    }
    //  A good register, then reports with a bad field.
    char *good = s_registration ("worker", 0, "127.0.0.1", 4242, "");
    cr_assert_eq (s_ask (&peer, ZA_OP_REGISTER, 200, good), ZA_OP_WELCOME);
    const char *fields [] = {
        "\"state\": \"running\", \"global_step\": \"x\", \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": \"nan\", \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1",
        "\"state\": 5, \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1",
        "\"state\": \"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\", "
        "\"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, \"examples_per_sec\": 1",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": -1, "
        "\"examples_per_sec\": 1",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"eval_step\": 5",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"ring_rank\": 1",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"ring_rank\": -1, \"wait_ms\": 1",
        //  The second half of a pair alone, of another type or out of range, or
        //  well formed: each is refused, not only the first half alone.
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"eval_accuracy\": \"high\"",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"eval_accuracy\": 0.5",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"wait_ms\": -5",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"wait_ms\": 5",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"eval_step\": 5, \"eval_accuracy\": 1.5",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"ring_rank\": 1, \"wait_ms\": \"soon\"",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"token\": \"not-a-token\"",
        //  A word that stops or shrinks the job: true or false, nothing else.
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"preempting\": \"yes\"",
        "\"state\": \"running\", \"global_step\": 1, \"loss\": 1, \"steps_per_sec\": 1, "
        "\"examples_per_sec\": 1, \"leaving\": 1",
    };
    for (size_t f = 0; f < sizeof fields / sizeof fields [0]; f++) {
        char report [1024];
        snprintf (report, sizeof report, "{\"role\": \"worker\", \"index\": 0, \"host\": "
                  "\"127.0.0.1\", \"pid\": 4242, \"restarts\": 0, \"endpoint\": \"\", %s}",
                  fields [f]);
        cr_assert_eq (s_ask (&peer, ZA_OP_REPORT, 300 + f, report), ZA_OP_ERROR,
                      "report %zu was taken: %s", f, report);
        cr_expect_str_eq (peer.in->code, "bad_request", "report %zu: %s", f, peer.in->error);
    }
    //  Nothing of it got in: every task is listed, the worker as registered.
    json_t *state = s_state (&peer);
    json_t *roles = json_object_get (state, "roles");
    cr_expect_eq (json_array_size (roles), 3);
    json_t *worker = za_test_row (state, "worker", 0);
    cr_expect_str_eq (json_string_value (json_object_get (worker, "host")), "127.0.0.1");
    cr_expect_eq (json_integer_value (json_object_get (worker, "global_step")), 0);
    cr_expect (json_is_null (json_object_get (worker, "eval_accuracy")));
    cr_expect (json_is_null (json_object_get (worker, "ring_rank"))
               || !json_object_get (worker, "ring_rank"));
    cr_expect_null (json_object_get (worker, "wait_ms"));
    cr_expect_geq (json_integer_value (json_object_get (json_object_get (state, "broker"),
                                                        "refused")),
                   n + (int) (sizeof fields / sizeof fields [0]));
    json_decref (state);
    free (good);
    free (long_host);
    free (e_host);
    free (e_endpoint_tail);
    s_peer_close (&peer);
    s_broker_stop (&c);
}

//  The token of a welcome (caller frees), checked to be 32 hex digits.
static char *
s_welcome_token (s_peer_t *peer)
{
    json_t *welcome = json_loadb (peer->in->body, peer->in->body_len, 0, NULL);
    const char *token = json_string_value (json_object_get (welcome, "token"));
    cr_assert (token && strlen (token) == 32 && strspn (token, "0123456789abcdef") == 32,
               "a welcome's token: %.*s", (int) peer->in->body_len, peer->in->body);
    char *copy = strdup (token);
    json_decref (welcome);
    return copy;
}

//  A registration naming a token (text, caller frees).
static char *
s_registration_with (const char *role, int pid, const char *endpoint, const char *token)
{
    json_t *body = json_pack ("{s:s, s:i, s:s, s:i, s:i, s:s, s:s}", "role", role, "index", 0,
                              "host", "127.0.0.1", "pid", pid, "restarts", 0,
                              "endpoint", endpoint, "token", token);
    char *text = json_dumps (body, JSON_COMPACT);
    json_decref (body);
    return text;
}

Test (broker, a_live_task_is_taken_only_by_itself)
{
    s_broker_case_t c;
    s_broker_start (&c);
    s_peer_t real, other;
    s_peer_open (&real, BROKER_ENDPOINT);
    s_peer_open (&other, BROKER_ENDPOINT);
    char *ps = s_registration ("ps", 0, "127.0.0.1", 5001, "tcp://127.0.0.1:5001");
    cr_assert_eq (s_ask (&real, ZA_OP_REGISTER, 1, ps), ZA_OP_WELCOME);
    char *token = s_welcome_token (&real);
    //  Another process naming ps 0: busy; without a pid: not even that.
    char *impostor = s_registration ("ps", 0, "127.0.0.1", 6002, "tcp://127.0.0.1:6002");
    cr_assert_eq (s_ask (&other, ZA_OP_REGISTER, 1, impostor), ZA_OP_ERROR);
    cr_expect_str_eq (other.in->code, "busy");
    //  Another connection naming the live ps's own pid and host (which `state`
    //  shows anyone), without its token or with another: busy too, and its
    //  endpoint is not taken.
    char *same_pid = s_registration ("ps", 0, "127.0.0.1", 5001, "tcp://127.0.0.1:6004");
    cr_assert_eq (s_ask (&other, ZA_OP_REGISTER, 3, same_pid), ZA_OP_ERROR);
    cr_expect_str_eq (other.in->code, "busy");
    char *wrong_token = s_registration_with ("ps", 5001, "tcp://127.0.0.1:6004",
                                             "0123456789abcdef0123456789abcdef");
    cr_assert_eq (s_ask (&other, ZA_OP_REGISTER, 4, wrong_token), ZA_OP_ERROR);
    cr_expect_str_eq (other.in->code, "busy");
    cr_assert_eq (s_ask (&other, ZA_OP_REGISTER, 2, "{\"role\": \"ps\", \"index\": 0, "
                         "\"host\": \"127.0.0.1\", \"restarts\": 0, \"endpoint\": "
                         "\"tcp://127.0.0.1:6003\"}"), ZA_OP_ERROR);
    cr_expect_str_eq (other.in->code, "bad_request");
    //  The view still sends every worker to the real ps, which may register again.
    json_t *state = s_state (&other);
    cr_expect_str_eq (json_string_value (json_object_get (za_test_row (state, "ps", 0),
                                                          "endpoint")), "tcp://127.0.0.1:5001");
    cr_expect_eq (json_integer_value (json_object_get (za_test_row (state, "ps", 0), "pid")),
                  5001);
    json_decref (state);
    cr_assert_eq (s_ask (&real, ZA_OP_REGISTER, 3, ps), ZA_OP_WELCOME);
    char *again = s_welcome_token (&real);
    cr_expect_str_eq (again, token, "the task's own connection keeps its token");
    //  The ps on a new connection (a reconnect) with its token: welcomed, same token.
    s_peer_t reconnect;
    s_peer_open (&reconnect, BROKER_ENDPOINT);
    char *own = s_registration_with ("ps", 5001, "tcp://127.0.0.1:5001", token);
    cr_assert_eq (s_ask (&reconnect, ZA_OP_REGISTER, 5, own), ZA_OP_WELCOME,
                  "the ps's reconnect with its token: %s", reconnect.in->error);
    char *kept = s_welcome_token (&reconnect);
    cr_expect_str_eq (kept, token);
    //  Its own connection naming another pid: taken, and said as an event.
    char *new_pid = s_registration_with ("ps", 5002, "tcp://127.0.0.1:5001", token);
    cr_assert_eq (s_ask (&reconnect, ZA_OP_REGISTER, 6, new_pid), ZA_OP_WELCOME);
    state = s_state (&reconnect);
    cr_expect_eq (json_integer_value (json_object_get (za_test_row (state, "ps", 0), "pid")),
                  5002);
    char *text = json_dumps (json_object_get (state, "events"), JSON_COMPACT);
    cr_expect (text && strstr (text, "pid_changed"), "no pid_changed event in %s", text);
    free (text);
    json_decref (state);
    free (new_pid);
    free (kept);
    free (own);
    s_peer_close (&reconnect);
    free (again);
    free (wrong_token);
    free (same_pid);
    free (token);
    free (ps);
    free (impostor);
    s_peer_close (&real);
    s_peer_close (&other);
    s_broker_stop (&c);
}

//  A worker that asks for any slot (index -1) takes a free one before one
//  whose worker is lost (silent) and may come back: that worker, back
//  within its timeout, takes its own again (it was given away first, and
//  the worker was refused "busy" for ever).
Test (broker, a_worker_without_an_index_leaves_a_lost_slot_to_its_own)
{
    s_broker_case_t c;
    s_broker_configure (&c, 2, 0);
    c.config.heartbeat.ivl_secs = 0.1;
    c.config.heartbeat.liveness = 3;
    s_broker_run (&c);
    s_peer_t first, joiner;
    s_peer_open (&first, BROKER_ENDPOINT);
    s_peer_open (&joiner, BROKER_ENDPOINT);
    char *zero = s_registration ("worker", 0, "127.0.0.1", 7001, "");
    cr_assert_eq (s_ask (&first, ZA_OP_REGISTER, 1, zero), ZA_OP_WELCOME);
    char *token = s_welcome_token (&first);
    //  Worker 0 goes silent: lost.
    double deadline = za_clock_mono () + 30;
    int lost = 0;
    while (!lost && za_clock_mono () < deadline) {
        json_t *state = s_state (&joiner);
        const char *now = json_string_value (json_object_get (za_test_row (state, "worker", 0),
                                                              "state"));
        lost = now && !strcmp (now, "lost");
        json_decref (state);
        if (!lost)
            zclock_sleep (50);
    }
    cr_assert (lost, "worker 0 was never taken for lost");
    char *any = s_registration ("worker", -1, "127.0.0.1", 7002, "");
    cr_assert_eq (s_ask (&joiner, ZA_OP_REGISTER, 2, any), ZA_OP_WELCOME, "%s",
                  joiner.in->error);
    json_t *welcome = json_loadb (joiner.in->body, joiner.in->body_len, 0, NULL);
    cr_expect_eq (json_integer_value (json_object_get (welcome, "index")), 1, "%.*s",
                  (int) joiner.in->body_len, joiner.in->body);
    json_decref (welcome);
    char *back = s_registration_with ("worker", 7001, "", token);
    cr_expect_eq (s_ask (&first, ZA_OP_REGISTER, 3, back), ZA_OP_WELCOME, "%s",
                  first.in->error);
    free (back), free (any), free (token), free (zero);
    s_peer_close (&first);
    s_peer_close (&joiner);
    s_broker_stop (&c);
}

//  The joined and left events of worker `index` in the broker's state.
static int
s_membership_events (s_peer_t *peer, int index, const char *which)
{
    json_t *state = s_state (peer), *event;
    size_t e;
    int count = 0;
    json_array_foreach (json_object_get (state, "events"), e, event)
        count += !strcmp (json_string_value (json_object_get (event, "event")), which)
              && json_integer_value (json_object_get (event, "index")) == index
              && !strcmp (json_string_value (json_object_get (event, "role")), "worker");
    json_decref (state);
    return count;
}

//  A report of worker 1 (elastic) in state `state`, leaving or not.
static int
s_report_state (s_peer_t *peer, int pid, const char *token, const char *state, int leaving)
{
    json_t *body = json_pack ("{s:s, s:i, s:s, s:i, s:i, s:s, s:s, s:s, s:I, s:f, s:f, s:f, "
                              "s:b}", "role", "worker", "index", 1, "host", "127.0.0.1", "pid",
                              pid, "restarts", 0, "endpoint", "", "token", token, "state",
                              state, "global_step", (json_int_t) 5, "loss", 0.5,
                              "steps_per_sec", 1.0, "examples_per_sec", 64.0, "leaving",
                              leaving);
    char *text = json_dumps (body, JSON_COMPACT);
    json_decref (body);
    int op = s_ask (peer, ZA_OP_REPORT, 7, text);
    free (text);
    return op;
}

//  An elastic slot that a worker left, taken by another: the newcomer
//  joins once it reports past starting, once (it counted as a member at
//  its register, the one before's "done" still on the slot: joined, left
//  at its "starting", joined again).
Test (broker, a_worker_that_takes_a_vacant_slot_joins_once)
{
    s_broker_case_t c;
    s_broker_configure (&c, 2, 0);
    c.config.min_workers = 1;
    s_broker_run (&c);
    s_peer_t fixed, first, second;
    s_peer_open (&fixed, BROKER_ENDPOINT);
    s_peer_open (&first, BROKER_ENDPOINT);
    s_peer_open (&second, BROKER_ENDPOINT);
    char *zero = s_registration ("worker", 0, "127.0.0.1", 8000, "");
    cr_assert_eq (s_ask (&fixed, ZA_OP_REGISTER, 1, zero), ZA_OP_WELCOME);
    char *one = s_registration ("worker", -1, "127.0.0.1", 8001, "");
    cr_assert_eq (s_ask (&first, ZA_OP_REGISTER, 1, one), ZA_OP_WELCOME);
    char *token = s_welcome_token (&first);
    cr_assert_eq (s_report_state (&first, 8001, token, "running", 0), ZA_OP_VIEW);
    cr_assert_eq (s_membership_events (&fixed, 1, "joined"), 1);
    cr_assert_eq (s_report_state (&first, 8001, token, "done", 1), ZA_OP_VIEW);
    cr_assert_eq (s_membership_events (&fixed, 1, "left"), 1);
    char *other = s_registration ("worker", -1, "127.0.0.1", 8002, "");
    cr_assert_eq (s_ask (&second, ZA_OP_REGISTER, 1, other), ZA_OP_WELCOME, "%s",
                  second.in->error);
    char *token2 = s_welcome_token (&second);
    cr_expect_eq (s_membership_events (&fixed, 1, "joined"), 1, "a member at its register");
    cr_assert_eq (s_report_state (&second, 8002, token2, "starting", 0), ZA_OP_VIEW);
    cr_assert_eq (s_report_state (&second, 8002, token2, "running", 0), ZA_OP_VIEW);
    cr_expect_eq (s_membership_events (&fixed, 1, "joined"), 2);
    cr_expect_eq (s_membership_events (&fixed, 1, "left"), 1);
    free (token2), free (other), free (token), free (one), free (zero);
    s_peer_close (&fixed);
    s_peer_close (&first);
    s_peer_close (&second);
    s_broker_stop (&c);
}

//  A broker that stops stops the role processes it did not start too (a
//  broker before it did, and they registered again): SIGTERM, then SIGKILL
//  after the grace, as its own (they were left running).
Test (broker, a_stopping_broker_ends_the_tasks_it_did_not_start)
{
    pid_t pid = fork ();
    cr_assert_geq (pid, 0);
    if (pid == 0) {
        //  (It ends by itself after 90 s, whatever becomes of the test.)
        execlp ("sh", "sh", "-c", "trap '' TERM; i=0; while [ $i -lt 90 ]; do sleep 1; "
                "i=$((i + 1)); done", "sh", "--broker", "x", "--role", "worker", "--index", "0",
                (char *) NULL);
        _exit (127);
    }
    s_broker_case_t c;
    s_broker_start (&c);
    s_peer_t peer;
    s_peer_open (&peer, BROKER_ENDPOINT);
    char *worker = s_registration ("worker", 0, "127.0.0.1", (int) pid, "");
    double deadline = za_clock_mono () + 30;
    while (!za_supervisor_is_role_process (pid, "worker", 0) && za_clock_mono () < deadline)
        zclock_sleep (10);
    cr_expect_eq (s_ask (&peer, ZA_OP_REGISTER, 1, worker), ZA_OP_WELCOME, "%s",
                  peer.in->error);
    s_peer_close (&peer);
    s_broker_stop (&c);
    int ended = 0;
    deadline = za_clock_mono () + 30;   //  (the grace is 5 s; the suite's timeout 60 s)
    while (!(ended = waitpid (pid, NULL, WNOHANG) == pid) && za_clock_mono () < deadline)
        zclock_sleep (50);
    cr_expect (ended, "the worker's process outlived its broker");
    if (!ended) {
        kill (pid, SIGKILL);
        waitpid (pid, NULL, 0);
    }
    free (worker);
}

Test (broker, every_reply_echoes_its_request_seq)
{
    s_broker_case_t c;
    s_broker_start (&c);
    s_peer_t peer;
    s_peer_open (&peer, BROKER_ENDPOINT);
    char *chief = s_registration ("chief", 0, "127.0.0.1", 77, "");
    cr_assert_eq (s_ask (&peer, ZA_OP_REGISTER, 77, chief), ZA_OP_WELCOME);
    cr_expect_eq (peer.in->seq, 77);
    cr_assert_eq (s_ask (&peer, ZA_OP_REGISTER, 78, "{\"role\": \"dog\"}"), ZA_OP_ERROR);
    cr_expect_eq (peer.in->seq, 78);
    cr_assert_eq (s_ask (&peer, ZA_OP_WATCH, 79, NULL), ZA_OP_STATE);
    cr_expect_eq (peer.in->seq, 79);
    cr_assert_eq (s_ask (&peer, ZA_OP_REPORT, 80, "{\"role\": \"chief\", \"index\": 0, "
                         "\"host\": \"127.0.0.1\", \"pid\": 77, \"restarts\": 0, \"endpoint\": "
                         "\"\", \"state\": \"running\", \"global_step\": 3, \"loss\": 0.5, "
                         "\"steps_per_sec\": 1, \"examples_per_sec\": 64}"), ZA_OP_VIEW);
    cr_expect_eq (peer.in->seq, 80);
    cr_assert_eq (s_ask (&peer, ZA_OP_PING, 81, NULL), ZA_OP_PONG);
    cr_expect_eq (peer.in->seq, 81);
    free (chief);
    s_peer_close (&peer);
    s_broker_stop (&c);
}

//  The chief's "checkpoint written" reaches every live evaluator at once;
//  nobody else may say it, and a body with more or less than the step is
//  refused and relayed to nobody.
Test (broker, a_checkpoint_goes_from_the_chief_to_every_evaluator)
{
    s_broker_case_t c;
    s_broker_start_with (&c, 2);
    s_peer_t chief, worker, evaluators [2];
    s_peer_open (&chief, BROKER_ENDPOINT);
    s_peer_open (&worker, BROKER_ENDPOINT);
    char *body = s_registration ("chief", 0, "127.0.0.1", 701, "");
    cr_assert_eq (s_ask (&chief, ZA_OP_REGISTER, 1, body), ZA_OP_WELCOME);
    free (body);
    body = s_registration ("worker", 0, "127.0.0.1", 702, "");
    cr_assert_eq (s_ask (&worker, ZA_OP_REGISTER, 1, body), ZA_OP_WELCOME);
    free (body);
    for (int e = 0; e < 2; e++) {
        s_peer_open (&evaluators [e], BROKER_ENDPOINT);
        body = s_registration ("evaluator", e, "127.0.0.1", 710 + e, "");
        cr_assert_eq (s_ask (&evaluators [e], ZA_OP_REGISTER, 1, body), ZA_OP_WELCOME);
        free (body);
    }
    //  A worker, or an evaluator, is not the chief.
    cr_assert_eq (s_ask (&worker, ZA_OP_CHECKPOINT, 2, "{\"global_step\": 10}"), ZA_OP_ERROR);
    cr_expect_str_eq (worker.in->code, "bad_request");
    cr_assert_eq (s_ask (&evaluators [1], ZA_OP_CHECKPOINT, 2, "{\"global_step\": 10}"),
                  ZA_OP_ERROR);
    //  The chief with a bad body.
    const char *bad [] = {
        "{\"global_step\": -1}", "{\"global_step\": \"10\"}", "{}", "[10]",
        "{\"global_step\": 10, \"path\": \"/etc/passwd\"}", "{\"global_step\": 1.5}",
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad [0]; b++) {
        cr_assert_eq (s_ask (&chief, ZA_OP_CHECKPOINT, 10 + b, bad [b]), ZA_OP_ERROR, "%s",
                      bad [b]);
        cr_expect_str_eq (chief.in->code, "bad_request", "%s: %s", bad [b], chief.in->error);
    }
    cr_assert_eq (s_ask (&chief, ZA_OP_CHECKPOINT, 20, NULL), ZA_OP_ERROR);
    //  None of that reached an evaluator.
    for (int e = 0; e < 2; e++)
        cr_expect_eq (s_receive (&evaluators [e], 200), -1, "evaluator %d was told", e);
    //  The chief's good one: no answer to it, the same body to each evaluator.
    za_wire_msg_init (chief.out, ZA_OP_CHECKPOINT);
    chief.out->seq = 30;
    chief.out->body = "{\"global_step\": 1200}";
    chief.out->body_len = strlen (chief.out->body);
    cr_assert_eq (za_wire_send (chief.sock, NULL, chief.out, &chief.lease), 0);
    for (int e = 0; e < 2; e++) {
        cr_assert_eq (s_receive (&evaluators [e], REPLY_MS), ZA_OP_CHECKPOINT);
        json_t *told = json_loadb (evaluators [e].in->body, evaluators [e].in->body_len, 0,
                                   NULL);
        cr_expect_eq (json_integer_value (json_object_get (told, "global_step")), 1200);
        json_decref (told);
    }
    cr_expect_eq (s_receive (&chief, 200), -1, "the chief got an answer");
    json_t *state = s_state (&worker);
    cr_expect_eq (json_integer_value (json_object_get (state, "checkpoint_step")), 1200);
    cr_expect_eq (json_integer_value (json_object_get (json_object_get (state, "broker"),
                                                       "checkpoints_relayed")), 2);
    json_decref (state);
    for (int e = 0; e < 2; e++)
        s_peer_close (&evaluators [e]);
    s_peer_close (&worker);
    s_peer_close (&chief);
    s_broker_stop (&c);
}

Test (broker, an_oversized_message_is_a_counted_drop_and_the_connection_stays)
{
    s_broker_case_t c;
    s_broker_start (&c);
    s_peer_t peer;
    s_peer_open (&peer, BROKER_ENDPOINT);
    //  A header frame of 100 KiB, then at once a ping on the same connection.
    size_t size = 100 * 1024;
    char *big = calloc (1, size);
    zframe_t *frame = zframe_new (big, size);
    cr_assert_eq (zframe_send (&frame, peer.sock, 0), 0);
    free (big);
    cr_assert_eq (s_ask (&peer, ZA_OP_PING, 5, NULL), ZA_OP_PONG,
                  "the ping after a large frame got no answer");
    json_t *state = s_state (&peer);
    json_t *broker = json_object_get (state, "broker");
    cr_expect_geq (json_integer_value (json_object_get (broker, "dropped")), 1,
                   "the large frame was not counted");
    json_decref (state);
    s_peer_close (&peer);
    s_broker_stop (&c);
}

// ---------------------------------------------------------------------------
//  The broker client

//  msgpack of {v: 1, op: "error", seq: 1, task: -5, code: "bad_request",
//  error: "x"}: a header the decoder refuses (task below -1).
static zframe_t *
s_bad_error_header (void)
{
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init (&buffer);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buffer, msgpack_sbuffer_write);
    const char *keys [] = {"v", "op", "seq", "task", "code", "error"};
    msgpack_pack_map (&pk, 6);
    for (int k = 0; k < 6; k++) {
        msgpack_pack_str (&pk, strlen (keys [k]));
        msgpack_pack_str_body (&pk, keys [k], strlen (keys [k]));
        switch (k) {
            case 0: msgpack_pack_int (&pk, 1); break;
            case 1: msgpack_pack_str (&pk, 5); msgpack_pack_str_body (&pk, "error", 5); break;
            case 2: msgpack_pack_int (&pk, 1); break;
            case 3: msgpack_pack_int (&pk, -5); break;
            case 4: msgpack_pack_str (&pk, 11); msgpack_pack_str_body (&pk, "bad_request", 11);
                    break;
            default: msgpack_pack_str (&pk, 1); msgpack_pack_str_body (&pk, "x", 1); break;
        }
    }
    zframe_t *frame = zframe_new (buffer.data, buffer.size);
    msgpack_sbuffer_destroy (&buffer);
    return frame;
}

Test (client, a_message_it_cannot_decode_changes_nothing)
{
    zsock_t *router = zsock_new (ZMQ_ROUTER);
    cr_assert_eq (zsock_bind (router, "inproc://conformance-fake-broker"), 0);
    static za_role_stats_t stats;
    za_role_stats_init (&stats);
    za_broker_client_config_t config = {
        .broker = "inproc://conformance-fake-broker", .role = "worker", .index = -1,
        .host = "127.0.0.1", .stats = &stats, .heartbeat.ivl_secs = 0.1,
        .heartbeat.liveness = 3, .timeout_secs = 10,
    };
    zactor_t *client = zactor_new (za_broker_client_actor, &config);
    //  Its first register: answered with an error it cannot decode, then a
    //  welcome. It must act on the welcome only.
    zmsg_t *request = zmsg_recv (router);
    cr_assert_not_null (request);
    zframe_t *identity = zmsg_pop (request);
    zmsg_destroy (&request);
    zmsg_t *bad = zmsg_new ();
    zmsg_append (bad, &(zframe_t *) {zframe_dup (identity)});
    zmsg_append (bad, &(zframe_t *) {s_bad_error_header ()});
    cr_assert_eq (zmsg_send (&bad, router), 0);
    za_wire_msg_t *out = malloc (sizeof *out);
    za_wire_msg_init (out, ZA_OP_WELCOME);
    out->seq = 2;
    const char *body = "{\"index\": 0, \"endpoint\": \"\", \"job\": {\"max_steps\": 10}}";
    out->body = body;
    out->body_len = strlen (body);
    cr_assert_eq (za_wire_send (router, identity, out, NULL), 0);
    char *what = NULL, *index = NULL;
    zsock_set_rcvtimeo (zactor_sock (client), 3000);
    cr_assert_geq (zstr_recvx (client, &what, &index, NULL), 1);
    cr_expect_str_eq (what, "WELCOME", "the client acted on what it could not decode: %s %s",
                      what, index? index: "");
    zstr_free (&what);
    zstr_free (&index);
    free (out);
    zframe_destroy (&identity);
    zactor_destroy (&client);
    zsock_destroy (&router);
}

// ---------------------------------------------------------------------------
//  A ps binds the address its cluster names

//  The local address, in /proc/net/tcp's hex, of the socket listening on
//  port; "" when none listens.
static void
s_listener (int port, char *address, size_t size)
{
    address [0] = 0;
    FILE *file = fopen ("/proc/net/tcp", "r");
    cr_assert_not_null (file);
    char line [512];
    char local [32], state [8];
    unsigned local_port;
    while (fgets (line, sizeof line, file))
        if (sscanf (line, " %*d: %31[0-9A-F]:%x %*s %7s", local, &local_port, state) == 3
            && (int) local_port == port && streq (state, "0A"))
            snprintf (address, size, "%s", local);
    fclose (file);
}

Test (ps, it_binds_the_address_its_cluster_names)
{
    char *endpoint = za_test_free_endpoint ();
    int port = atoi (strrchr (endpoint, ':') + 1);
    char config [256];
    snprintf (config, sizeof config, "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
              "[\"127.0.0.1:%d\"]}}", port);
    char *cluster = za_test_write ("cluster.json", config);
    char *out = za_test_path ("ps.out"), *err = za_test_path ("ps.err");
    const char *args [] = {"--cluster", cluster, "--role", "ps", "--model", "linear",
                           "--timeout-secs", "30", NULL};
    pid_t pid = za_test_spawn (args, out, err);
    char address [32] = "";
    for (int tries = 0; tries < 300 && !*address; tries++) {
        s_listener (port, address, sizeof address);
        if (!*address)
            usleep (20000);
    }
    kill (pid, SIGKILL);
    za_test_wait (pid, 10);
    cr_expect_str_eq (address, "0100007F", "the ps listens on %s (hex), not 127.0.0.1: %s",
                      address, (char *) za_test_read_file (err, NULL));
    free (out);
    free (err);
    free (cluster);
    free (endpoint);
}
