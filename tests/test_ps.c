/*  test_ps.c: one ps actor driven at the protocol level through a DEALER:
    every request before init is refused, malformed inits and pushes are
    refused with bad_request and change nothing, a push applies the optimizer
    exactly, a hold queues pushes and lapses when its holder goes silent,
    stop answers done, and the ps leaves after every worker's bye. A ps
    waiting for init says not_ready in its pongs (a restarted ps has lost
    what workers think it has); one whose model_dir holds the final
    checkpoint starts with its values and answers done.                     */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "za/za_checkpoint.h"
#include "za/za_partition.h"
#include "za/za_role.h"
#include "za/za_shm_link.h"
#include "za/za_wire.h"
#include "za_test.h"

#define REPLY_MS 2000

typedef struct {
    za_stack_spec_t spec;
    za_role_config_t config;
    zactor_t *ps;
    zsock_t *client;
    za_shm_link_t *link;                //  NULL, or the client's same-host link
    za_shm_bell_t *bell;                //  and its bell (NULL: the ps's replies come
                                        //  over ZeroMQ)
    int whole_replies;                  //  replies that came through the ps's segment
    za_wire_msg_t *out, *in;
    zmsg_t *reply;
    za_wire_lease_t lease;
    uint64_t seq;
    float kernel [12], bias [3];        //  dense/kernel 4x3, dense/bias 3
    za_role_stats_t stats;
    char endpoint [64];                 //  the ps's, one per case (libzmq may hold an
                                        //  inproc name a little after its socket is closed)
} s_ps_case_t;

//  Starts the ps of c->config and a client for it.
static void
s_start (s_ps_case_t *c)
{
    c->ps = zactor_new (za_ps_actor, &c->config);
    c->client = zsock_new_dealer (c->endpoint);
    c->out = malloc (sizeof *c->out);
    c->in = malloc (sizeof *c->in);
    za_wire_lease_init (&c->lease);
}

//  A ps of one dense(3) layer for one worker; model_dir and max_steps: the
//  run it belongs to (NULL, 0: none); heartbeats every ivl_secs, liveness 3.
//  Not started.
static void
s_configure (s_ps_case_t *c, const char *model_dir, int64_t max_steps, double ivl_secs)
{
    memset (c, 0, sizeof *c);
    cr_assert_eq (za_stack_parse ("flatten dense(3)", &c->spec), 0);
    za_role_config_init (&c->config);
    c->config.model_fn = za_stack_model_fn ();
    c->config.params = &c->spec;
    c->config.input = (za_input_shape_t) {2, 2, 1};
    c->config.ps_count = 1;
    c->config.num_workers = 1;
    c->config.ps_index = 0;
    static int cases;
    snprintf (c->endpoint, sizeof c->endpoint, ">inproc://test-ps-%d", cases++);
    c->config.bind_endpoint = c->endpoint + 1;
    c->config.timeout_secs = 30;
    c->config.run.model_dir = model_dir;
    c->config.max_steps = max_steps;
    c->config.heartbeat.ivl_secs = ivl_secs;
    c->config.heartbeat.liveness = 3;
    za_role_stats_init (&c->stats);
    c->config.stats = &c->stats;
}

//  Started, as s_configure says.
static void
s_setup_beat (s_ps_case_t *c, const char *model_dir, int64_t max_steps, double ivl_secs)
{
    s_configure (c, model_dir, max_steps, ivl_secs);
    s_start (c);
}

static void
s_setup_run (s_ps_case_t *c, const char *model_dir, int64_t max_steps)
{
    s_setup_beat (c, model_dir, max_steps, 1.0);
}

static void
s_setup (s_ps_case_t *c)
{
    s_setup_run (c, NULL, 0);
}

static void
s_teardown (s_ps_case_t *c)
{
    zmsg_destroy (&c->reply);
    zsock_destroy (&c->client);
    za_shm_link_destroy (&c->link);
    za_shm_bell_destroy (&c->bell);
    zactor_destroy (&c->ps);
    za_wire_lease_wait (&c->lease);
    free (c->out);
    free (c->in);
}

//  Sends c->out; returns the reply's op, or -1 when none came in time.
static int
s_call (s_ps_case_t *c, int wait_ms)
{
    c->out->seq = ++c->seq;
    //  Over inproc our frames may be the ps's: let the last reply go first.
    zmsg_destroy (&c->reply);
    cr_assert_eq (c->link? za_shm_link_send (c->link, c->client, NULL, c->out, &c->lease)
                         : za_wire_send (c->client, NULL, c->out, &c->lease), 0);
    //  A client with a bell waits on it too: the ps's whole replies.
    zmq_pollitem_t items [2] = {
        {zsock_resolve (c->client), 0, ZMQ_POLLIN, 0},
        {NULL, c->bell? za_shm_bell_fd (c->bell): -1, ZMQ_POLLIN, 0},
    };
    if (c->bell)
        za_shm_bell_quiet (c->bell);
    while (c->bell) {
        int got = za_shm_link_take_copy (c->link, &c->reply);
        cr_assert_geq (got, 0, "%s", za_last_error ());
        if (got)
            break;
        if (zmq_poll (items, 2, wait_ms) <= 0)
            return -1;
        if (items [0].revents & ZMQ_POLLIN)
            break;
        za_shm_bell_quiet (c->bell);
    }
    if (c->reply)
        c->whole_replies++;
    else {
        zsock_set_rcvtimeo (c->client, wait_ms);
        c->reply = zmsg_recv (c->client);
        if (!c->reply)
            return -1;
        if (c->link)
            cr_assert_eq (za_shm_link_receive (c->link, c->reply), 0, "%s",
                          za_last_error ());
    }
    cr_assert_eq (za_wire_decode (c->reply, c->in), 0, "%s", za_last_error ());
    return (int) c->in->op;
}

static void
s_add_params (s_ps_case_t *c, const float *kernel, const float *bias)
{
    int64_t kshape [2] = {4, 3}, bshape [1] = {3};
    //  Placement puts the larger variable first.
    za_wire_msg_add (c->out, "dense/kernel", ZA_DTYPE_F32, 2, kshape, kernel);
    za_wire_msg_add (c->out, "dense/bias", ZA_DTYPE_F32, 1, bshape, bias);
}

static void
s_init_sgd (s_ps_case_t *c, float lr, int64_t *step)
{
    za_wire_msg_init (c->out, ZA_OP_INIT);
    c->out->step = 0;
    c->out->has_optim = 1;
    c->out->optim.kind = ZA_OPT_SGD;
    c->out->optim.learning_rate = lr;
    s_add_params (c, c->kernel, c->bias);
    za_wire_msg_add (c->out, "global_step", ZA_DTYPE_I64, 0, NULL, step);
}

//  Checks that c->in has two tensors and every float of them equals `expected`.
static void
s_expect_floats (s_ps_case_t *c, float expected)
{
    cr_assert_eq (c->in->tensor_count, 2);
    for (int t = 0; t < 2; t++) {
        size_t n = c->in->tensors [t].bytes / sizeof (float);
        for (size_t i = 0; i < n; i++) {
            float v;
            memcpy (&v, (const char *) c->in->tensors [t].data + i * sizeof v, sizeof v);
            cr_assert_float_eq (v, expected, 1e-6, "%s [%zu] = %f", c->in->tensors [t].name,
                                i, v);
        }
    }
}

//  Pulls and checks every value equals `expected`.
static void
s_expect_values (s_ps_case_t *c, float expected)
{
    za_wire_msg_init (c->out, ZA_OP_PULL);
    cr_assert_eq (s_call (c, REPLY_MS), ZA_OP_VALUES);
    s_expect_floats (c, expected);
}

//  Values and gradients of 1 everywhere.
static void
s_ones (s_ps_case_t *c, float *grads_k, float *grads_b)
{
    for (int i = 0; i < 12; i++)
        grads_k [i] = 1, c->kernel [i] = 1;
    for (int i = 0; i < 3; i++)
        grads_b [i] = 1, c->bias [i] = 1;
}

Test (ps, protocol_rules)
{
    s_ps_case_t c;
    s_setup (&c);
    float grads_k [12], grads_b [3];
    s_ones (&c, grads_k, grads_b);
    //  Before init: not_ready, in pongs too.
    za_wire_msg_init (c.out, ZA_OP_PULL);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "not_ready");
    za_wire_msg_init (c.out, ZA_OP_PING);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_PONG);
    cr_expect_str_eq (c.in->code, "not_ready");
    cr_expect_eq (atomic_load (&c.stats.state), ZA_ROLE_WAITING);
    cr_expect_gt (atomic_load (&c.stats.alive), 0.0);
    //  An init without global_step is refused; still not ready.
    za_wire_msg_init (c.out, ZA_OP_INIT);
    c.out->step = 0;
    c.out->has_optim = 1;
    c.out->optim.kind = ZA_OPT_SGD;
    c.out->optim.learning_rate = 0.5;
    s_add_params (&c, c.kernel, c.bias);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    za_wire_msg_init (c.out, ZA_OP_PULL);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "not_ready");
    //  A good init.
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    s_expect_values (&c, 1.0f);
    za_wire_msg_init (c.out, ZA_OP_PING);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_PONG);
    cr_expect_str_eq (c.in->code, "");
    //  A ping that opens a connection follows a request sent to a ps (or a
    //  connection) that is gone: not_ready, though this ps is ready.
    zsock_t *other = zsock_new_dealer (c.endpoint);
    za_wire_msg_init (c.out, ZA_OP_PING);
    c.out->seq = 0;
    cr_assert_eq (za_wire_send (other, NULL, c.out, NULL), 0);
    zsock_set_rcvtimeo (other, REPLY_MS);
    zmsg_t *pong = zmsg_recv (other);
    cr_assert_not_null (pong);
    cr_assert_eq (za_wire_decode (pong, c.in), 0);
    cr_expect_eq (c.in->op, ZA_OP_PONG);
    cr_expect_str_eq (c.in->code, "not_ready");
    zmsg_destroy (&pong);
    zsock_destroy (&other);
    //  A push with a wrong name, and one with an extra tensor: refused, no change.
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    int64_t kshape [2] = {4, 3}, bshape [1] = {3};
    za_wire_msg_add (c.out, "dense/kernel", ZA_DTYPE_F32, 2, kshape, grads_k);
    za_wire_msg_add (c.out, "dense/biass", ZA_DTYPE_F32, 1, bshape, grads_b);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    s_add_params (&c, grads_k, grads_b);
    za_wire_msg_add (c.out, "extra", ZA_DTYPE_F32, 1, bshape, grads_b);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    s_expect_values (&c, 1.0f);
    //  A good push: w = 1 - 0.5 * 1, global step 1, fresh values in the reply.
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    s_add_params (&c, grads_k, grads_b);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES);
    cr_expect_eq (c.in->step, 1);
    s_expect_values (&c, 0.5f);
    //  The ps publishes once per loop turn: the pull's turn is over by now.
    zclock_sleep (200);
    cr_expect_eq (atomic_load (&c.stats.state), ZA_ROLE_RUNNING);
    cr_expect_eq (atomic_load (&c.stats.global_step), 1);
    //  Held: a push gets no answer, pulls see the held values; the holder
    //  (this client) stays silent past the lapse, then the push is applied.
    za_wire_msg_init (c.out, ZA_OP_HOLD);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_HELD);
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    s_add_params (&c, grads_k, grads_b);
    double start = za_clock_mono ();
    cr_expect_eq (s_call (&c, 500), -1, "a push was applied while held");
    zsock_set_rcvtimeo (c.client, 6000);
    zmsg_t *late = zmsg_recv (c.client);
    double waited = za_clock_mono () - start;
    cr_assert_not_null (late, "the hold never lapsed");
    cr_assert_eq (za_wire_decode (late, c.in), 0);
    cr_expect_eq (c.in->op, ZA_OP_VALUES);
    cr_expect_eq (c.in->step, 2);
    cr_expect_geq (waited, 2.9, "lapsed after %.2f s", waited);
    zmsg_destroy (&late);
    s_expect_values (&c, 0.0f);
    //  Stop: pushes get done; after our bye the ps reports and exits 0.
    za_wire_msg_init (c.out, ZA_OP_STOP);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_STOPPING);
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    s_add_params (&c, grads_k, grads_b);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "done");
    za_wire_msg_init (c.out, ZA_OP_BYE);
    c.out->task = 0;
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_BYE_OK);
    zmsg_destroy (&c.reply);
    int64_t step = 0;
    cr_expect_eq (za_role_wait (c.ps, 10, &step, NULL, NULL), 0);
    cr_expect_eq (step, 2);
    cr_expect_eq (atomic_load (&c.stats.state), ZA_ROLE_DONE);
    s_teardown (&c);
}

//  A checkpoint of the test model (dense 4x3) at `step` in the test's dir.
static void
s_write_checkpoint (int64_t step, const float *kernel, const float *bias)
{
    za_ckpt_tensor_t tensors [] = {
        {.name = "global_step", .dtype = ZA_DTYPE_I64, .ndim = 0, .data = &step},
        {.name = "dense/kernel", .dtype = ZA_DTYPE_F32, .ndim = 2, .shape = {4, 3},
         .data = kernel},
        {.name = "dense/bias", .dtype = ZA_DTYPE_F32, .ndim = 1, .shape = {3}, .data = bias}};
    cr_assert_eq (za_checkpoint_write_atomic (za_test_dir (), step, tensors, 3, NULL, 0, 0), 0,
                  "%s", za_last_error ());
}

//  A ps started after the end (model_dir holds a checkpoint at max_steps)
//  must not wait for an init that never comes: it answers done at that step,
//  holds the checkpoint's values and leaves after the workers' byes.
Test (ps, a_ps_started_after_the_end_answers_done)
{
    za_test_dir_create ("za_ps_final");
    float kernel [12], bias [3];
    for (int i = 0; i < 12; i++)
        kernel [i] = 0.25f * (float) i;
    for (int i = 0; i < 3; i++)
        bias [i] = -1.0f - (float) i;
    int64_t step = 10;
    s_write_checkpoint (step, kernel, bias);
    s_ps_case_t c;
    s_setup_run (&c, za_test_dir (), step);
    za_wire_msg_init (c.out, ZA_OP_PULL);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "done");
    cr_expect_eq (c.in->step, step);
    za_wire_msg_init (c.out, ZA_OP_PING);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_PONG);
    cr_expect_str_eq (c.in->code, "");
    za_wire_msg_init (c.out, ZA_OP_BYE);
    c.out->task = 0;
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_BYE_OK);
    zmsg_destroy (&c.reply);
    //  It reports the checkpoint's step and values (kernel first: placement
    //  puts the larger variable first).
    int64_t done_step = 0;
    uint32_t crc = 0;
    cr_expect_eq (za_role_wait (c.ps, 10, &done_step, &crc, NULL), 0);
    cr_expect_eq (done_step, step);
    uLong expected = crc32 (0L, Z_NULL, 0);
    expected = crc32 (expected, (const Bytef *) kernel, sizeof kernel);
    expected = crc32 (expected, (const Bytef *) bias, sizeof bias);
    cr_expect_eq (crc, (uint32_t) expected, "crc %08x, expected %08x", crc,
                  (uint32_t) expected);
    s_teardown (&c);
    za_test_dir_remove ();
}

//  Not before the end: a checkpoint short of max_steps leaves the ps waiting
//  for the chief's init.
Test (ps, a_checkpoint_before_the_end_changes_nothing)
{
    za_test_dir_create ("za_ps_not_final");
    float kernel [12] = {0}, bias [3] = {0};
    int64_t step = 5;
    s_write_checkpoint (step, kernel, bias);
    s_ps_case_t c;
    s_setup_run (&c, za_test_dir (), 10);
    za_wire_msg_init (c.out, ZA_OP_PULL);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "not_ready");
    s_teardown (&c);
    za_test_dir_remove ();
}

Test (ps, the_hold_lapse_follows_the_heartbeat_settings)
{
    //  Heartbeats every 200 ms, liveness 3: a silent holder loses its hold
    //  after about 0.6 s (not the 3 s of the defaults); a holder that keeps
    //  pinging keeps it.
    s_ps_case_t c;
    s_setup_beat (&c, NULL, 0, 0.2);
    float grads_k [12], grads_b [3];
    for (int i = 0; i < 12; i++)
        grads_k [i] = 1.0f;
    for (int i = 0; i < 3; i++)
        grads_b [i] = 1.0f;
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    //  Held by a holder that pings every 100 ms for 1.5 s: still held.
    za_wire_msg_init (c.out, ZA_OP_HOLD);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_HELD);
    zsock_t *worker = zsock_new_dealer (c.endpoint);
    za_wire_msg_t *push = malloc (sizeof *push);
    za_wire_msg_init (push, ZA_OP_PUSH);
    push->seq = 1;
    push->task = 0;
    int64_t kshape [2] = {4, 3}, bshape [1] = {3};
    za_wire_msg_add (push, "dense/kernel", ZA_DTYPE_F32, 2, kshape, grads_k);
    za_wire_msg_add (push, "dense/bias", ZA_DTYPE_F32, 1, bshape, grads_b);
    za_wire_lease_t lease;
    za_wire_lease_init (&lease);
    cr_assert_eq (za_wire_send (worker, NULL, push, &lease), 0);
    zsock_set_rcvtimeo (worker, 100);
    double start = za_clock_mono ();
    while (za_clock_mono () - start < 1.5) {
        za_wire_msg_init (c.out, ZA_OP_PING);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_PONG);
        zmsg_t *early = zmsg_recv (worker);
        cr_assert_null (early, "the hold lapsed while its holder pinged");
    }
    //  The holder falls silent: the queued push is applied within ~0.6 s.
    start = za_clock_mono ();
    zsock_set_rcvtimeo (worker, 3000);
    zmsg_t *late = zmsg_recv (worker);
    double waited = za_clock_mono () - start;
    cr_assert_not_null (late, "the hold never lapsed");
    cr_assert_eq (za_wire_decode (late, c.in), 0);
    cr_expect_eq (c.in->op, ZA_OP_VALUES);
    cr_expect_eq (c.in->step, 1);
    cr_expect (waited > 0.45 && waited < 1.2, "lapsed after %.2f s (heartbeats 0.2 s x 3)",
               waited);
    zmsg_destroy (&late);
    zsock_destroy (&worker);
    za_wire_lease_wait (&lease);
    free (push);
    s_teardown (&c);
}

//  Sends a ps-sync push of task `task` for `step` (-1: none) with every
//  gradient `g` from sock; returns nothing (a reply may come later).
static void
s_sync_push (s_ps_case_t *c, zsock_t *sock, int task, int64_t step, float g)
{
    static float grads_k [12], grads_b [3];
    za_wire_lease_wait (&c->lease);
    for (int i = 0; i < 12; i++)
        grads_k [i] = g;
    for (int i = 0; i < 3; i++)
        grads_b [i] = g;
    za_wire_msg_init (c->out, ZA_OP_PUSH);
    c->out->seq = ++c->seq;
    c->out->task = task;
    c->out->step = step;
    s_add_params (c, grads_k, grads_b);
    cr_assert_eq (za_wire_send (sock, NULL, c->out, &c->lease), 0);
}

//  The next reply on sock within ms into c->in: its op, or -1.
static int
s_reply_on (s_ps_case_t *c, zsock_t *sock, int ms)
{
    zmsg_destroy (&c->reply);
    zsock_set_rcvtimeo (sock, ms);
    c->reply = zmsg_recv (sock);
    if (!c->reply)
        return -1;
    cr_assert_eq (za_wire_decode (c->reply, c->in), 0);
    return (int) c->in->op;
}

//  The values an init gives: 1 everywhere.
static void
s_values_of_one (s_ps_case_t *c)
{
    for (int i = 0; i < 12; i++)
        c->kernel [i] = 1;
    for (int i = 0; i < 3; i++)
        c->bias [i] = 1;
}

//  Starts a ps-sync ps of one dense(3) layer for `workers` workers,
//  aggregating `aggregate` pushes a step (0: all); the values to init it
//  with are all 1.
static void
s_start_sync (s_ps_case_t *c, int workers, int aggregate)
{
    s_configure (c, NULL, 0, 1);
    c->config.num_workers = workers;
    c->config.strategy = ZA_STRATEGY_PS_SYNC;
    c->config.replicas_to_aggregate = aggregate;
    s_start (c);
    s_values_of_one (c);
}

Test (ps, ps_sync_sends_the_chief_the_slots_of_each_step_after_its_values)
{
    s_ps_case_t c;
    s_start_sync (&c, 2, 0);
    float zeros [12] = {0};
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    c.out->optim.kind = ZA_OPT_MOMENTUM;
    c.out->optim.momentum = 0.5;
    //  The slots go after the values (and before global_step).
    c.out->tensor_count--;
    int64_t kshape [2] = {4, 3}, bshape [1] = {3};
    za_wire_msg_add (c.out, "dense/kernel/momentum", ZA_DTYPE_F32, 2, kshape, zeros);
    za_wire_msg_add (c.out, "dense/bias/momentum", ZA_DTYPE_F32, 1, bshape, zeros);
    za_wire_msg_add (c.out, "global_step", ZA_DTYPE_I64, 0, NULL, &zero);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    zsock_t *second = zsock_new_dealer (c.endpoint);
    s_sync_push (&c, c.client, 0, 0, 1.0f);
    s_sync_push (&c, second, 1, 0, 3.0f);
    //  Task 1 gets the values alone; task 0 the values, then the slots of
    //  that step: momentum 0.5 x 0 + mean (1, 3) = 2 everywhere.
    cr_assert_eq (s_reply_on (&c, second, REPLY_MS), ZA_OP_VALUES);
    cr_expect_eq (s_reply_on (&c, second, 200), -1);
    cr_assert_eq (s_reply_on (&c, c.client, REPLY_MS), ZA_OP_VALUES);
    uint64_t seq = c.in->seq;
    cr_assert_eq (s_reply_on (&c, c.client, REPLY_MS), ZA_OP_SLOTS);
    cr_expect_eq (c.in->seq, seq);
    cr_expect_eq (c.in->step, 1);
    s_expect_floats (&c, 2.0f);
    cr_expect_str_eq (c.in->tensors [0].name, "dense/kernel/momentum");
    cr_expect_str_eq (c.in->tensors [1].name, "dense/bias/momentum");
    //  A pull by task 0 brings them too; a ps told `slots` refuses it.
    za_wire_msg_init (c.out, ZA_OP_PULL);
    c.out->task = 0;
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES);
    cr_assert_eq (s_reply_on (&c, c.client, REPLY_MS), ZA_OP_SLOTS);
    za_wire_msg_init (c.out, ZA_OP_SLOTS);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    zsock_destroy (&second);
    s_teardown (&c);
}

Test (ps, ps_sync_applies_the_mean_of_a_step_once_and_drops_what_comes_late)
{
    s_ps_case_t c;
    s_start_sync (&c, 3, 2);                    //  two to aggregate, one backup
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK);
    zsock_t *second = zsock_new_dealer (c.endpoint);
    zsock_t *backup = zsock_new_dealer (c.endpoint);
    //  The first gradient of step 0 waits for the second.
    s_sync_push (&c, c.client, 0, 0, 1.0f);
    cr_expect_eq (s_reply_on (&c, c.client, 300), -1, "answered before the step was made");
    s_sync_push (&c, second, 1, 0, 3.0f);
    //  Both get the values of step 1: 1 - 0.5 x mean (1, 3) = 0.
    for (int w = 0; w < 2; w++) {
        cr_assert_eq (s_reply_on (&c, w? second: c.client, REPLY_MS), ZA_OP_VALUES);
        cr_expect_eq (c.in->step, 1);
    }
    //  SGD has no slots: task 0 gets nothing more.
    cr_expect_eq (s_reply_on (&c, c.client, 200), -1);
    s_expect_values (&c, 0.0f);
    //  The backup's gradient of step 0 is late: dropped, answered at once.
    s_sync_push (&c, backup, 2, 0, 100.0f);
    cr_assert_eq (s_reply_on (&c, backup, REPLY_MS), ZA_OP_VALUES);
    cr_expect_eq (c.in->step, 1);
    s_expect_values (&c, 0.0f);
    //  A push without its step, or twice in a step: refused. One from a
    //  step the ps does not hold (it was given an earlier state since): the
    //  pusher is told to pull again. Nothing of them is applied.
    s_sync_push (&c, backup, 2, -1, 1.0f);
    cr_assert_eq (s_reply_on (&c, backup, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    s_sync_push (&c, backup, 2, 5, 1.0f);
    cr_assert_eq (s_reply_on (&c, backup, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "rewound");
    s_sync_push (&c, c.client, 0, 1, 1.0f);
    s_sync_push (&c, c.client, 0, 1, 1.0f);
    cr_assert_eq (s_reply_on (&c, c.client, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    //  Training ends with task 0 still waiting: it is told so.
    za_wire_msg_init (c.out, ZA_OP_STOP);
    c.out->seq = ++c.seq;
    cr_assert_eq (za_wire_send (second, NULL, c.out, NULL), 0);
    cr_assert_eq (s_reply_on (&c, second, REPLY_MS), ZA_OP_STOPPING);
    cr_assert_eq (s_reply_on (&c, c.client, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "done");
    zsock_destroy (&second);
    zsock_destroy (&backup);
    s_teardown (&c);
}

//  A ps-sync worker restarted while its push waited for the step pushes
//  that step again from a new connection: it waits in its place, its first
//  push counted once, and gets the step's values (it was refused, "once per
//  task", exit 1, and restarted again until the step was made). The
//  connection before is told (were a process still there: two of a task).
Test (ps, ps_sync_takes_a_restarted_workers_push_of_the_same_step)
{
    s_ps_case_t c;
    s_start_sync (&c, 2, 0);
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    zsock_t *first = zsock_new_dealer (c.endpoint);
    s_sync_push (&c, first, 1, 0, 3.0f);
    cr_expect_eq (s_reply_on (&c, first, 200), -1, "answered before the step was made");
    zsock_t *again = zsock_new_dealer (c.endpoint);
    s_sync_push (&c, again, 1, 0, 5.0f);
    cr_assert_eq (s_reply_on (&c, first, REPLY_MS), ZA_OP_ERROR);
    cr_expect (strstr (c.in->error, "again from another connection"), "%s", c.in->error);
    zsock_destroy (&first);
    cr_expect_eq (s_reply_on (&c, again, 300), -1, "%s %s", c.in->code, c.in->error);
    s_sync_push (&c, c.client, 0, 0, 1.0f);
    //  1 - 0.5 x mean (1, 3): the first life's gradient, once.
    cr_assert_eq (s_reply_on (&c, again, REPLY_MS), ZA_OP_VALUES);
    cr_expect_eq (c.in->step, 1);
    s_expect_floats (&c, 0.0f);
    cr_assert_eq (s_reply_on (&c, c.client, REPLY_MS), ZA_OP_VALUES);
    //  The same connection pushing the step twice is still refused.
    s_sync_push (&c, again, 1, 1, 1.0f);
    s_sync_push (&c, again, 1, 1, 1.0f);
    cr_assert_eq (s_reply_on (&c, again, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    zsock_destroy (&again);
    s_teardown (&c);
}

//  Sends c->out, which is never answered: a ping sent after it is answered
//  first (one connection keeps its order), with the ping's own seq.
static void
s_send_unanswered (s_ps_case_t *c)
{
    c->out->seq = ++c->seq;
    zmsg_destroy (&c->reply);
    cr_assert_eq (za_wire_send (c->client, NULL, c->out, &c->lease), 0);
    za_wire_lease_wait (&c->lease);
    za_wire_msg_init (c->out, ZA_OP_PING);
    cr_assert_eq (s_call (c, REPLY_MS), ZA_OP_PONG, "an offer was answered");
    cr_assert_eq (c->in->seq, c->seq, "an offer was answered");
}

//  An offer of the given step whose every value is `value`.
static void
s_offer (s_ps_case_t *c, int64_t step, float value, float *kernel, float *bias)
{
    for (int i = 0; i < 12; i++)
        kernel [i] = value;
    for (int i = 0; i < 3; i++)
        bias [i] = value;
    za_wire_msg_init (c->out, ZA_OP_OFFER);
    c->out->step = step;
    c->out->task = 0;
    s_add_params (c, kernel, bias);
}

//  An SGD init of `step` whose every value is `value`; with prefer, it asks
//  the ps to prefer a newer offer (the init's last tensor, PROTOCOL.md 9).
static void
s_init_at (s_ps_case_t *c, int64_t *step, float value, int prefer)
{
    static const int64_t prefer_offer = 1;
    for (int i = 0; i < 12; i++)
        c->kernel [i] = value;
    for (int i = 0; i < 3; i++)
        c->bias [i] = value;
    s_init_sgd (c, 0.1f, step);
    c->out->step = *step;
    if (prefer)
        za_wire_msg_add (c->out, "prefer_offer", ZA_DTYPE_I64, 0, NULL, &prefer_offer);
}

//  ps-async's recovery (PROTOCOL.md 7.5): a ps without state keeps the
//  freshest values workers offer, says their step in its not_ready, and an
//  init that prefers an offer takes it when it is newer than the init's
//  step; an init that does not, or a ps with a state, ignores offers.
Test (ps, a_ps_without_state_keeps_the_newest_offer_for_an_init_that_prefers_it)
{
    s_ps_case_t c;
    s_setup (&c);
    float k1 [12], b1 [3], k2 [12], b2 [3], k3 [12], b3 [3];
    //  No offer yet: not_ready carries no step.
    za_wire_msg_init (c.out, ZA_OP_PULL);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "not_ready");
    cr_expect_eq (c.in->step, -1);
    //  Offers of step 40, then 70, then an older 50: 70 is kept.
    s_offer (&c, 40, 4.0f, k1, b1);
    s_send_unanswered (&c);
    s_offer (&c, 70, 7.0f, k2, b2);
    s_send_unanswered (&c);
    s_offer (&c, 50, 5.0f, k3, b3);
    s_send_unanswered (&c);
    za_wire_msg_init (c.out, ZA_OP_PULL);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "not_ready");
    cr_expect_eq (c.in->step, 70, "the not_ready says the best offer's step");
    //  A malformed offer (a part missing) changes nothing.
    za_wire_msg_init (c.out, ZA_OP_OFFER);
    c.out->step = 90;
    int64_t kshape [2] = {4, 3};
    za_wire_msg_add (c.out, "dense/kernel", ZA_DTYPE_F32, 2, kshape, k3);
    s_send_unanswered (&c);
    //  An init of step 60 preferring offers: the offer of 70 wins.
    int64_t step = 60;
    s_init_at (&c, &step, 1.0f, 1);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK);
    cr_expect_eq (c.in->step, 70, "ps 0 goes on from the offer's step");
    s_expect_values (&c, 7.0f);
    cr_expect_eq (c.in->step, 70);
    //  With a state, an offer is ignored (never answered) and changes nothing.
    s_offer (&c, 500, 9.0f, k1, b1);
    s_send_unanswered (&c);
    s_expect_values (&c, 7.0f);
    s_teardown (&c);
}

Test (ps, an_init_that_does_not_prefer_offers_keeps_its_values)
{
    s_ps_case_t c;
    s_setup (&c);
    float k [12], b [3];
    s_offer (&c, 90, 7.0f, k, b);
    s_send_unanswered (&c);
    //  Without prefer_offer: the init's values and step, though the offer is newer.
    int64_t step = 80;
    s_init_at (&c, &step, 1.0f, 0);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK);
    cr_expect_eq (c.in->step, 80);
    s_expect_values (&c, 1.0f);
    s_teardown (&c);
}

//  (A test of its own: a second ps in one process could find the first's
//  inproc endpoint not yet let go.)
Test (ps, an_init_newer_than_the_offer_keeps_its_values)
{
    s_ps_case_t c;
    float k [12], b [3];
    int64_t step = 80;
    //  Preferring offers, but the init is newer (80 > 70): the init's.
    s_setup (&c);
    s_offer (&c, 70, 7.0f, k, b);
    s_send_unanswered (&c);
    s_init_at (&c, &step, 1.0f, 1);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK);
    cr_expect_eq (c.in->step, 80);
    s_expect_values (&c, 1.0f);
    s_teardown (&c);
}

//  A push leaves out a frozen variable's parts (here the kernel's, --freeze
//  dense/kernel): they are not updated, on either value block, while the
//  others are.
//  c->in holds the values of `step`: the kernel's first float is `kernel`
//  and the bias's `bias`, within epsilon.
static void
s_expect_firsts (s_ps_case_t *c, int64_t step, float kernel, float bias, float epsilon)
{
    cr_expect_eq (c->in->step, step);
    cr_assert_eq (c->in->tensor_count, 2);
    for (int t = 0; t < 2; t++) {
        float v;
        memcpy (&v, c->in->tensors [t].data, sizeof v);
        float want = strcmp (c->in->tensors [t].name, "dense/kernel")? bias: kernel;
        cr_expect_float_eq (v, want, epsilon, "step %d: %s = %.9g", (int) step,
                            c->in->tensors [t].name, v);
    }
}

Test (ps, a_push_without_a_frozen_variable_leaves_it_as_it_is)
{
    s_ps_case_t c;
    s_configure (&c, NULL, 0, 1.0);
    snprintf (c.spec.freeze, sizeof c.spec.freeze, "dense/kernel");
    s_start (&c);
    float grads_b [3] = {1, 1, 1};
    s_values_of_one (&c);
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    int64_t bshape [1] = {3};
    for (int push = 1; push <= 3; push++) {
        za_wire_msg_init (c.out, ZA_OP_PUSH);
        c.out->task = 0;
        za_wire_msg_add (c.out, "dense/bias", ZA_DTYPE_F32, 1, bshape, grads_b);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES, "%s", c.in->error);
        s_expect_firsts (&c, push, 1.0f, 1.0f - 0.5f * (float) push, 1e-6f);
    }
    //  Out of order, the bias before the kernel: refused.
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    float grads_k [12] = {0};
    int64_t kshape [2] = {4, 3};
    za_wire_msg_add (c.out, "dense/bias", ZA_DTYPE_F32, 1, bshape, grads_b);
    za_wire_msg_add (c.out, "dense/kernel", ZA_DTYPE_F32, 2, kshape, grads_k);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    s_teardown (&c);
}

//  ps-sync moves only what a gradient came for: a frozen variable stays as
//  it is under weight decay, and a step whose every push is empty (mixed
//  float16's overflow) updates nothing (the mean of no gradient was applied
//  as a zero one: decay shrank the frozen kernel and every value).
Test (ps, ps_sync_updates_only_what_a_gradient_came_for)
{
    s_ps_case_t c;
    s_configure (&c, NULL, 0, 1);
    c.config.num_workers = 1;
    c.config.strategy = ZA_STRATEGY_PS_SYNC;
    snprintf (c.spec.freeze, sizeof c.spec.freeze, "dense/kernel");
    s_start (&c);
    s_values_of_one (&c);
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    c.out->optim.weight_decay = 0.1f;
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    float grads_b [3] = {1, 1, 1};
    int64_t bshape [1] = {3};
    for (int push = 1; push <= 2; push++) {
        za_wire_msg_init (c.out, ZA_OP_PUSH);
        c.out->task = 0;
        c.out->step = push - 1;
        if (push == 1)                  //  the second: empty, as an overflow's
            za_wire_msg_add (c.out, "dense/bias", ZA_DTYPE_F32, 1, bshape, grads_b);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES, "%s", c.in->error);
        //  The bias: 1 x (1 - 0.5 x 0.1) - 0.5 x 1, then as it is.
        s_expect_firsts (&c, push, 1.0f, 0.45f, 0.0f);
    }
    s_teardown (&c);
}

//  An SGD ps at lr 0.5 whose optimizer `tune` changes (a schedule, a
//  decay) is pushed gradients of 1 `pushes` times; its values after each
//  are expected [push]. own: the ps's own schedule (its program's), or NULL.
static void
s_pushes_of_ones_with (void (*tune) (za_optim_config_t *), const za_schedule_t *own,
                       int pushes, const float *expected)
{
    s_ps_case_t c;
    s_configure (&c, NULL, 0, 1.0);
    if (own)
        c.config.optim.schedule = *own;
    s_start (&c);
    float grads_k [12], grads_b [3];
    s_ones (&c, grads_k, grads_b);
    int64_t zero = 0;
    s_init_sgd (&c, 0.5f, &zero);
    tune (&c.out->optim);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    for (int push = 0; push < pushes; push++) {
        za_wire_msg_init (c.out, ZA_OP_PUSH);
        c.out->task = 0;
        s_add_params (&c, grads_k, grads_b);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES, "%s", c.in->error);
        s_expect_floats (&c, expected [push]);
    }
    s_teardown (&c);
}

static void
s_pushes_of_ones (void (*tune) (za_optim_config_t *), int pushes, const float *expected)
{
    s_pushes_of_ones_with (tune, NULL, pushes, expected);
}

static void
s_piecewise (za_optim_config_t *optim)
{
    cr_assert_eq (za_schedule_parse ("piecewise_constant(boundaries=[1], values=[0.5, 0.25])",
                                     &optim->schedule), 0);
}

//  A schedule travels in the init's optimizer; the ps takes each update's
//  rate from its own global step (so async workers agree): piecewise 0.5
//  for steps 0 and 1, 0.25 after.
Test (ps, the_learning_rate_follows_the_schedule_by_the_ps_step)
{
    const float expected [] = {0.5f, 0.0f, -0.25f};
    s_pushes_of_ones (s_piecewise, 3, expected);
}

static void
s_decay (za_optim_config_t *optim)
{
    optim->weight_decay = 0.1f;
}

//  Weight decay travels in the init too: w = 1 (1 - 0.5 x 0.1) - 0.5 x 1.
Test (ps, weight_decay_travels_in_the_init)
{
    const float expected [] = {0.45f};
    s_pushes_of_ones (s_decay, 1, expected);
}

//  An Adam init of step 1000 with fresh slots (zeros), `slots_from` (NULL:
//  none) saying where each variable's (dense/kernel, dense/bias) started.
static void
s_init_adam_at_1000 (s_ps_case_t *c, const int64_t *slots_from, int64_t count)
{
    static float zeros [12];
    static int64_t step = 1000;
    za_wire_msg_init (c->out, ZA_OP_INIT);
    c->out->step = step;
    c->out->has_optim = 1;
    c->out->optim = za_optim_config_default (ZA_OPT_ADAM);
    c->out->optim.learning_rate = 0.01f;
    s_add_params (c, c->kernel, c->bias);
    static char names [2][2][ZA_WIRE_NAME_MAX];
    int64_t kshape [2] = {4, 3}, bshape [1] = {3};
    for (int s = 0; s < 2; s++) {
        snprintf (names [s][0], ZA_WIRE_NAME_MAX, "dense/kernel/%s",
                  za_optim_slot_name (ZA_OPT_ADAM, s));
        snprintf (names [s][1], ZA_WIRE_NAME_MAX, "dense/bias/%s",
                  za_optim_slot_name (ZA_OPT_ADAM, s));
        za_wire_msg_add (c->out, names [s][0], ZA_DTYPE_F32, 2, kshape, zeros);
        za_wire_msg_add (c->out, names [s][1], ZA_DTYPE_F32, 1, bshape, zeros);
    }
    za_wire_msg_add (c->out, "global_step", ZA_DTYPE_I64, 0, NULL, &step);
    if (slots_from)
        za_wire_msg_add (c->out, "slots_from", ZA_DTYPE_I64, 1, &count, slots_from);
}

//  A layer unfrozen on resume (PROTOCOL.md's init, slots_from): the ps
//  bias-corrects its fresh Adam slots from where they started, as one
//  process does. The kernel's first update (from 1000) moves it by the
//  rate; the bias's, counted from step 0 (1001 updates), by 2.5 times it.
//  A slots_from of the wrong length, or past the step, is refused and loads
//  nothing; the good init after it is taken.
Test (ps, adam_counts_a_variable_s_updates_from_where_its_slots_started)
{
    s_ps_case_t c;
    s_setup (&c);
    float grads_k [12], grads_b [3];
    s_ones (&c, grads_k, grads_b);
    const int64_t short_one [1] = {1000}, past [2] = {1001, 0}, good [2] = {1000, 0};
    const int64_t *bad [2] = {short_one, past};
    for (int b = 0; b < 2; b++) {
        s_init_adam_at_1000 (&c, bad [b], b? 2: 1);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
        cr_expect_str_eq (c.in->code, "bad_request");
        cr_expect (strstr (c.in->error, "slots_from"), "%s", c.in->error);
        za_wire_msg_init (c.out, ZA_OP_PULL);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
        cr_expect_str_eq (c.in->code, "not_ready", "a refused init loaded something");
    }
    s_init_adam_at_1000 (&c, good, 2);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    s_add_params (&c, grads_k, grads_b);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES, "%s", c.in->error);
    for (int t = 0; t < c.in->tensor_count; t++) {
        float v;
        memcpy (&v, c.in->tensors [t].data, sizeof v);
        if (!strcmp (c.in->tensors [t].name, "dense/kernel"))
            cr_expect_float_eq (v, 1.0f - 0.01f, 1e-5, "dense/kernel moved to %f", v);
        else
            cr_expect (v < 1.0f - 0.02f, "dense/bias moved to %f", v);
    }
    s_teardown (&c);
}

//  A program's own schedule: 0.5 for the update from step 0, then 0.25
//  (arg: how many calls).
static double
s_halving (void *arg, double learning_rate, int64_t step)
{
    (*(int *) arg)++;
    return step == 0? learning_rate: learning_rate / 2;
}

static void
s_function (za_optim_config_t *optim)
{
    optim->schedule.kind = ZA_SCHEDULE_FUNCTION;
}

//  The init says the schedule is the chief's program's function (the wire
//  carries no function): the ps calls its own, the same program's (and a ps
//  without one refuses the init by name: the next test).
Test (ps, a_function_schedule_is_the_ps_own_program_s)
{
    int calls = 0;
    za_schedule_t own = {.kind = ZA_SCHEDULE_FUNCTION, .fn = s_halving, .fn_arg = &calls};
    const float expected [] = {0.5f, 0.25f, 0.0f};
    s_pushes_of_ones_with (s_function, &own, 3, expected);
    cr_expect_geq (calls, 3);
}

Test (ps, a_ps_without_a_function_refuses_an_init_that_says_function)
{
    s_ps_case_t c;
    int64_t zero = 0;
    s_setup (&c);
    s_init_sgd (&c, 0.5f, &zero);
    s_function (&c.out->optim);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "bad_request");
    cr_expect (strstr (c.in->error, "program's function"), "%s", c.in->error);
    s_teardown (&c);
}

//  A client on this host (a worker's link): its pushes and the ps's values
//  go through shared memory once both have said so, and are applied as
//  ever; a push held back while another client holds the ps outlives the
//  record it came in (the ps copies it) and is applied at the release.
static void
s_pushes_through_shared_memory (int bell)
{
    s_ps_case_t c;
    s_setup (&c);
    c.link = za_shm_link_new (1, 0);
    cr_assert_not_null (c.link);
    if (bell) {
        c.bell = za_shm_bell_new ();
        cr_assert_not_null (c.bell);
        za_shm_link_set_bell (c.link, c.bell);
    }
    int64_t step0 = 0;
    s_init_sgd (&c, 0.25f, &step0);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    float grads_k [12], grads_b [3];
    for (int i = 0; i < 12; i++)
        grads_k [i] = 1;
    for (int i = 0; i < 3; i++)
        grads_b [i] = 1;
    for (int k = 1; k <= 3; k++) {
        za_wire_msg_init (c.out, ZA_OP_PUSH);
        c.out->task = 0;
        s_add_params (&c, grads_k, grads_b);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_VALUES);
        s_expect_floats (&c, -0.25f * (float) k);
    }
    cr_expect_eq (za_shm_link_state (c.link), 3, "both ways through shared memory");
    //  Another client holds; our push waits, then the release applies it.
    zsock_t *holder = zsock_new_dealer (c.endpoint);
    za_wire_msg_t *msg = malloc (sizeof *msg);
    za_wire_msg_init (msg, ZA_OP_HOLD);
    msg->seq = 1;
    cr_assert_eq (za_wire_send (holder, NULL, msg, NULL), 0);
    zsock_set_rcvtimeo (holder, REPLY_MS);
    zmsg_t *answer = zmsg_recv (holder);
    cr_assert_not_null (answer);
    cr_assert_eq (za_wire_decode (answer, msg), 0);
    cr_assert_eq (msg->op, ZA_OP_HELD);
    zmsg_destroy (&answer);
    za_wire_msg_init (c.out, ZA_OP_PUSH);
    c.out->task = 0;
    s_add_params (&c, grads_k, grads_b);
    cr_expect_eq (s_call (&c, 300), -1, "a push was applied while held");
    za_wire_msg_init (msg, ZA_OP_RELEASE);
    msg->seq = 2;
    cr_assert_eq (za_wire_send (holder, NULL, msg, NULL), 0);
    answer = zmsg_recv (holder);
    cr_assert_not_null (answer);
    zmsg_destroy (&answer);
    zmsg_t *late = NULL;
    if (bell) {
        zmq_pollitem_t item = {NULL, za_shm_bell_fd (c.bell), ZMQ_POLLIN, 0};
        while (za_shm_link_take_copy (c.link, &late) == 0 && zmq_poll (&item, 1, REPLY_MS) > 0)
            za_shm_bell_quiet (c.bell);
        //  The first values made the ps's segment (as frames: we had not
        //  mapped it); the next two came whole, as the held push's.
        cr_expect_eq (c.whole_replies, 2, "values came whole through the ps's segment");
    }
    else {
        zsock_set_rcvtimeo (c.client, REPLY_MS);
        late = zmsg_recv (c.client);
        cr_assert_not_null (late, "the held push was never answered");
        cr_assert_eq (za_shm_link_receive (c.link, late), 0, "%s", za_last_error ());
    }
    cr_assert_not_null (late, "the held push was never answered");
    cr_assert_eq (za_wire_decode (late, c.in), 0, "%s", za_last_error ());
    cr_expect_eq (c.in->op, ZA_OP_VALUES);
    s_expect_floats (&c, -1.0f);
    zmsg_destroy (&late);
    free (msg);
    zsock_destroy (&holder);
    s_teardown (&c);
}

Test (ps, pushes_through_shared_memory_and_one_held_back_are_applied)
{
    s_pushes_through_shared_memory (0);
}

//  The same with a client that has a bell, as a worker: its requests and
//  the ps's answers go whole through the segments (nothing over ZeroMQ once
//  both rang), the held push outlives its record.
Test (ps, whole_messages_through_shared_memory_and_one_held_back_are_applied)
{
    s_pushes_through_shared_memory (1);
}

//  A ps that restarts where a client's tensors went through shared memory,
//  but without it (ZA_SHM_DISABLE=1): it cannot read the client's record and
//  says so ("shm_unreadable"), the link hears that the ps reads nothing of
//  ours, and the request sent again goes as frames. (The client has no
//  bell and its answers carry no tensors: it never maps the ps's segment,
//  so its own tensors go by "at", its headers over ZeroMQ.)
Test (ps, a_ps_that_cannot_read_the_segment_says_so_and_frames_follow)
{
    s_ps_case_t c;
    s_setup (&c);
    c.link = za_shm_link_new (1, 0);
    int64_t step0 = 0;
    for (int k = 0; k < 3; k++) {
        s_init_sgd (&c, 0.25f, &step0);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    }
    cr_assert_eq (za_shm_link_state (c.link) & 1, 1, "our tensors go through the segment");
    cr_assert_not (za_shm_link_rings (c.link));
    zmsg_destroy (&c.reply);
    zsock_destroy (&c.client);
    zactor_destroy (&c.ps);
    //  (At an endpoint of its own: libzmq may hold an inproc name a little
    //  after its socket is closed.)
    setenv ("ZA_SHM_DISABLE", "1", 1);
    c.config.bind_endpoint = "inproc://test-ps-again";
    c.ps = zactor_new (za_ps_actor, &c.config);
    unsetenv ("ZA_SHM_DISABLE");
    c.client = zsock_new_dealer (">inproc://test-ps-again");
    s_init_sgd (&c, 0.25f, &step0);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_ERROR);
    cr_expect_str_eq (c.in->code, "shm_unreadable");
    cr_expect_eq (za_shm_link_state (c.link) & 1, 0, "the link knows the ps reads nothing");
    s_init_sgd (&c, 0.25f, &step0);
    cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
    s_teardown (&c);
}

//  A whole message in a worker's segment that the ps cannot use (a record
//  whose parts do not add up, a header that does not decode): the ps stops
//  reading that segment and answers "shm_unreadable" with the record's seq,
//  its word no longer saying "ok"; the request sent again as frames is
//  answered. (The "worker" here is the test: a segment and a bell of its
//  own, offered over the client's socket.)
Test (ps, a_whole_message_the_ps_cannot_use_is_answered_shm_unreadable)
{
    for (int kind = 0; kind < 2; kind++) {
        s_ps_case_t c;
        s_setup (&c);
        za_shm_t *seg = za_shm_create (65536);
        za_shm_bell_t *bell = za_shm_bell_new ();
        cr_assert (seg && bell, "%s", za_last_error ());
        char offer [ZA_SHM_OFFER_MAX], word [ZA_WIRE_MAX_SHM_BYTES + 1];
        size_t len = za_shm_offer (seg, offer);
        snprintf (word, sizeof word, "%.*s,\"bell\":%d}", (int) len - 1, offer,
                  za_shm_bell_offer_fd (bell));
        za_wire_msg_init (c.out, ZA_OP_PING);
        c.out->shm = word;
        c.out->shm_len = strlen (word);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_PONG);
        c.out->shm = NULL;
        c.out->shm_len = 0;
        //  The ps mapped our segment ("ok") and offers its bell.
        int n = za_wire_peek_shm (c.reply, word, sizeof word, NULL);
        cr_assert_gt (n, 0);
        cr_assert (strstr (word, "\"ok\":"), "%s", word);
        const char *at = strstr (word, "\"bell\":");
        cr_assert_not_null (at, "%s", word);
        int ps_bell = za_shm_bell_open ((long) getpid (), atoi (at + 7));
        cr_assert_geq (ps_bell, 0, "%s", za_last_error ());
        //  A whole record (dtype "wl") of seq 77: a table that claims 5
        //  parts, or a header of one part that is not msgpack.
        uint64_t table [3] = {kind == 0? 5: 1, 16, 0};
        char junk [16] = "\x81\xa1v not msgpack";
        struct iovec parts [2] = {{table, 2 * sizeof (uint64_t)}, {junk, sizeof junk}};
        za_shm_record_t record = {.op = ZA_OP_PUSH, .dtype = 0x776c, .seq = 77};
        cr_assert_eq (za_shm_writev (seg, &record, parts, 2), 0);
        cr_assert_eq (za_shm_bell_ring (ps_bell), 0);
        zsock_set_rcvtimeo (c.client, REPLY_MS);
        zmsg_t *answer = zmsg_recv (c.client);
        cr_assert_not_null (answer, "kind %d: no answer to a whole message it cannot use", kind);
        word [0] = 0;
        cr_assert_geq (za_wire_peek_shm (answer, word, sizeof word, NULL), 0);
        cr_expect_null (strstr (word, "\"ok\""),
                        "kind %d: the ps still says ok to a segment it refused: %s", kind, word);
        cr_assert_eq (za_wire_decode (answer, c.in), 0, "%s", za_last_error ());
        cr_expect_eq (c.in->op, ZA_OP_ERROR, "kind %d", kind);
        cr_expect_str_eq (c.in->code, "shm_unreadable");
        cr_expect_eq (c.in->seq, 77);
        zmsg_destroy (&answer);
        //  Frames, as the answer says.
        int64_t step0 = 0;
        s_init_sgd (&c, 0.25f, &step0);
        cr_assert_eq (s_call (&c, REPLY_MS), ZA_OP_INIT_OK, "%s", c.in->error);
        close (ps_bell);
        za_shm_bell_destroy (&bell);
        za_shm_destroy (&seg);
        s_teardown (&c);
    }
}
