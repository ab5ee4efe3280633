/*  test_security.c: the cluster certificate (keygen, --certs), CURVE on
    the sockets of real processes, and the fail-closed bind.

    A ps process started with --certs is initialised by a client with the
    certificate; three intruders (no keys; another cluster's keys; a key
    pair of its own with the cluster's public server key) push gradients at
    it again and again: none gets an answer, the values the keyed client
    pulls after are the very bytes it put there (same CRC32), and the ps
    logs one refusal per intruder however often each tried. A --local job
    with --certs trains to the end while a worker and zactor-tops without
    the certificate get nothing; the broker counts them once each. The
    all-reduce ring trains under CURVE too.                                */
#include "za_test.h"

#include "za/za_curve.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <jansson.h>
#include <zlib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define REPLY_MS 10000
#define KERNEL_FLOATS (784 * 10)
#define UNITS 10

static void
s_setup (void)
{
    za_test_dir_create ("za_security");
    za_error_set_quiet (1);
}

static void
s_teardown (void)
{
    za_curve_stop ();
    za_test_dir_remove ();
}

TestSuite (security, .init = s_setup, .fini = s_teardown, .timeout = 300 * ZA_TEST_SLOWDOWN);

//  `zactor-run keygen NAME` in the temp dir; returns the directory's path.
static char *
s_keygen (const char *name)
{
    char *dir = za_test_path (name);
    const char *args [] = {"keygen", dir, NULL};
    za_test_result_t result = za_test_run (args, 30);
    cr_assert_eq (result.exit_code, 0, "keygen: %s", result.err);
    za_test_result_free (&result);
    return dir;
}

Test (security, keygen_writes_owner_only_files_and_never_overwrites)
{
    char *dir = s_keygen ("keys");
    struct stat st;
    cr_assert_eq (stat (dir, &st), 0);
    cr_expect_eq (st.st_mode & 0777, 0700, "the directory is %o", st.st_mode & 0777);
    char *public_path = za_test_join (dir, ZA_CURVE_PUBLIC_FILE);
    char *secret_path = za_test_join (dir, ZA_CURVE_SECRET_FILE);
    cr_assert_eq (stat (public_path, &st), 0);
    cr_expect_eq (st.st_mode & 0777, 0600);
    cr_assert_eq (stat (secret_path, &st), 0);
    cr_expect_eq (st.st_mode & 0777, 0600);
    char *secret = za_test_read_file (secret_path, NULL);
    cr_expect (strstr (secret, "secret-key"), "%s", secret);

    //  A second keygen would lock out everyone using the first: refused.
    const char *again [] = {"keygen", dir, NULL};
    za_test_result_t result = za_test_run (again, 30);
    cr_expect_eq (result.exit_code, 1);
    cr_expect (strstr (result.err, "already holds"), "%s", result.err);
    za_test_result_free (&result);
    char *after = za_test_read_file (secret_path, NULL);
    cr_expect_str_eq (after, secret, "the certificate was overwritten");

    //  --certs refuses a secret others may read, and a directory without one.
    chmod (secret_path, 0644);
    const char *loose [] = {"--certs", dir, "--max-steps", "1", NULL};
    result = za_test_run (loose, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "chmod 600"), "%s", result.err);
    za_test_result_free (&result);
    chmod (secret_path, 0600);
    //  Every *.key in the directory is let in: a directory, or a key, that
    //  others may write is refused (anyone could have added theirs).
    const char *open_dir [] = {"--certs", dir, "--max-steps", "1", NULL};
    const char *says [2] = {"can be written by others (mode 0777)",
                            "cluster.key can be written by others (mode 0666)"};
    for (int c = 0; c < 2; c++) {
        chmod (c? public_path: dir, c? 0666: 0777);
        result = za_test_run (open_dir, 30);
        cr_expect_eq (result.exit_code, 2, "%s", result.err);
        cr_expect (strstr (result.err, says [c]) && strstr (result.err, "chmod go-w"), "%s",
                   result.err);
        za_test_result_free (&result);
        chmod (c? public_path: dir, c? 0600: 0700);
    }
    char *empty = za_test_path ("empty");
    mkdir (empty, 0700);
    const char *none [] = {"--certs", empty, "--max-steps", "1", NULL};
    result = za_test_run (none, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "keygen"), "%s", result.err);
    za_test_result_free (&result);
    free (empty);
    free (after);
    free (secret);
    free (secret_path);
    free (public_path);
    free (dir);
}

Test (security, a_bind_beyond_loopback_needs_certs_or_insecure)
{
    int port = za_test_free_port ();
    char bind [64];
    snprintf (bind, sizeof bind, "tcp://*:%d", port);
    const char *broker [] = {"--role", "broker", "--bind", bind, NULL};
    za_test_result_t result = za_test_run (broker, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "--certs DIR") && strstr (result.err, "--insecure"), "%s",
               result.err);
    za_test_result_free (&result);
    //  A ps told to listen everywhere, the same.
    char cluster [200];
    snprintf (cluster, sizeof cluster, "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
              "[\"127.0.0.1:%d\"]}}", port);
    char *cluster_path = za_test_write ("cluster.json", cluster);
    char all [64];
    snprintf (all, sizeof all, "tcp://0.0.0.0:%d", port);
    const char *ps [] = {"--cluster", cluster_path, "--role", "ps", "--bind", all, NULL};
    result = za_test_run (ps, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "listens beyond this machine"), "%s", result.err);
    za_test_result_free (&result);

    //  The metrics are plain HTTP: beyond loopback even --certs does not
    //  cover them.
    char metrics [64];
    snprintf (metrics, sizeof metrics, "*:%d", port);
    char *keys = s_keygen ("keys");
    const char *local [] = {"--local", "--metrics-bind", metrics, "--certs", keys, NULL};
    result = za_test_run (local, 30);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "plain HTTP"), "%s", result.err);
    za_test_result_free (&result);
    free (keys);

    //  With --insecure it listens, and says so loudly.
    const char *insecure [] = {"--role", "broker", "--bind", bind, "--insecure", NULL};
    char *out = za_test_path ("broker.out");
    pid_t pid = za_test_spawn (insecure, out, out);
    char *text = za_test_wait_for_text (out, "broker: on", 10);
    kill (pid, SIGTERM);
    za_test_wait (pid, 30);
    cr_expect (strstr (text, "WARNING: --insecure") && strstr (text, "broker: on"), "%s", text);
    free (text);
    free (out);
    free (cluster_path);
}

// ---------------------------------------------------------------------------
//  A ps under CURVE

typedef struct {
    zsock_t *sock;
    za_wire_msg_t *out, *in;
    zmsg_t *reply;
    za_wire_lease_t lease;
} s_client_t;

static void
s_client_open (s_client_t *c, const char *endpoint, int curve)
{
    memset (c, 0, sizeof *c);
    c->sock = zsock_new (ZMQ_DEALER);
    zsock_set_sndtimeo (c->sock, 1000);
    if (curve)
        za_curve_client (c->sock);
    cr_assert_eq (zsock_connect (c->sock, "%s", endpoint), 0);
    c->out = malloc (sizeof *c->out);
    c->in = malloc (sizeof *c->in);
    za_wire_lease_init (&c->lease);
}

//  An intruder: its own key pair, and as server key either `server` (the
//  cluster's public key, which is no secret) or its own.
static void
s_intruder_open (s_client_t *c, const char *endpoint, zcert_t *cert, const byte *server)
{
    memset (c, 0, sizeof *c);
    c->sock = zsock_new (ZMQ_DEALER);
    zsock_set_sndtimeo (c->sock, 0);
    if (cert) {
        zcert_apply (cert, c->sock);
        zsock_set_curve_serverkey_bin (c->sock, server);
    }
    cr_assert_eq (zsock_connect (c->sock, "%s", endpoint), 0);
    c->out = malloc (sizeof *c->out);
    c->in = malloc (sizeof *c->in);
    za_wire_lease_init (&c->lease);
}

static void
s_client_close (s_client_t *c)
{
    zmsg_destroy (&c->reply);
    zsock_destroy (&c->sock);
    za_wire_lease_wait (&c->lease);
    free (c->out);
    free (c->in);
}

//  Sends c->out; the reply's op, or -1 when none came within wait_ms.
static int
s_call (s_client_t *c, int wait_ms)
{
    zmsg_destroy (&c->reply);
    if (za_wire_send (c->sock, NULL, c->out, &c->lease))
        return -1;
    zpoller_t *poller = zpoller_new (c->sock, NULL);
    void *which = zpoller_wait (poller, wait_ms);
    zpoller_destroy (&poller);
    if (!which)
        return -1;
    c->reply = zmsg_recv (c->sock);
    cr_assert_eq (za_wire_decode (c->reply, c->in), 0, "%s", za_last_error ());
    return (int) c->in->op;
}

static void
s_add_variables (s_client_t *c, const float *kernel, const float *bias)
{
    int64_t kshape [2] = {784, UNITS}, bshape [1] = {UNITS};
    cr_assert_eq (za_wire_msg_add (c->out, "dense/kernel", ZA_DTYPE_F32, 2, kshape, kernel), 0);
    cr_assert_eq (za_wire_msg_add (c->out, "dense/bias", ZA_DTYPE_F32, 1, bshape, bias), 0);
}

//  CRC32 of a pull's values, in order.
static uint32_t
s_pulled_crc (s_client_t *c)
{
    za_wire_msg_init (c->out, ZA_OP_PULL);
    c->out->seq = 99;
    c->out->task = 0;
    cr_assert_eq (s_call (c, REPLY_MS), ZA_OP_VALUES);
    uLong crc = crc32 (0L, Z_NULL, 0);
    for (int t = 0; t < c->in->tensor_count; t++)
        if (c->in->tensors [t].dtype == ZA_DTYPE_F32)
            crc = crc32 (crc, (const Bytef *) c->in->tensors [t].data,
                         (uInt) c->in->tensors [t].bytes);
    return (uint32_t) crc;
}

//  A ps process of a cluster with a chief and that ps, initialised by the
//  test as its chief would be, with known values.
typedef struct {
    pid_t pid;
    char *endpoint;
    char *err;                          //  its log
    char *cluster_path;
    s_client_t chief;
    float kernel [KERNEL_FLOATS], bias [UNITS];
} s_ps_process_t;

//  Starts it (with --certs keys when keys is not NULL, and the test's
//  chief with the same certificate) and sends the init.
static void
s_ps_process_start (s_ps_process_t *ps, const char *keys)
{
    memset (ps, 0, sizeof *ps);
    ps->endpoint = za_test_free_endpoint ();
    char cluster [200];
    snprintf (cluster, sizeof cluster, "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
              "[\"%s\"]}}", ps->endpoint + 6);
    ps->cluster_path = za_test_write ("cluster.json", cluster);
    ps->err = za_test_path ("ps.err");
    const char *args [] = {"--cluster", ps->cluster_path, "--role", "ps",
                           "--model", "flatten dense(10)", "--timeout-secs", "60",
                           keys? "--certs": NULL, keys, NULL};
    ps->pid = za_test_spawn (args, ps->err, ps->err);
    if (keys)
        cr_assert_eq (za_curve_use (keys), 0, "%s", za_last_error ());
    s_client_t *chief = &ps->chief;
    s_client_open (chief, ps->endpoint, keys != NULL);
    for (int i = 0; i < KERNEL_FLOATS; i++)
        ps->kernel [i] = (float) i / KERNEL_FLOATS;
    for (int i = 0; i < UNITS; i++)
        ps->bias [i] = 0.5f - 0.25f * (float) i;
    int64_t zero = 0;
    za_wire_msg_init (chief->out, ZA_OP_INIT);
    chief->out->seq = 1;
    chief->out->task = 0;
    chief->out->step = 0;
    chief->out->has_optim = 1;
    chief->out->optim.kind = ZA_OPT_SGD;
    chief->out->optim.learning_rate = 0.5;
    chief->out->optim.beta1 = 0.9;
    chief->out->optim.beta2 = 0.999;
    chief->out->optim.epsilon = 1e-7;
    s_add_variables (chief, ps->kernel, ps->bias);
    za_wire_msg_add (chief->out, "global_step", ZA_DTYPE_I64, 0, NULL, &zero);
    int op = s_call (chief, REPLY_MS);
    cr_assert_eq (op, ZA_OP_INIT_OK, "%d %s: %s", op, op == ZA_OP_ERROR? chief->in->error: "",
                  (char *) za_test_read_file (ps->err, NULL));
    uLong expected = crc32 (0L, Z_NULL, 0);
    expected = crc32 (expected, (const Bytef *) ps->kernel, sizeof ps->kernel);
    expected = crc32 (expected, (const Bytef *) ps->bias, sizeof ps->bias);
    cr_assert_eq (s_pulled_crc (chief), (uint32_t) expected);
}

static void
s_ps_process_stop (s_ps_process_t *ps)
{
    s_client_close (&ps->chief);
    kill (ps->pid, SIGKILL);
    za_test_wait (ps->pid, 30);
    free (ps->err);
    free (ps->cluster_path);
    free (ps->endpoint);
}

Test (security, a_ps_gives_nothing_to_whoever_lacks_the_keys_and_keeps_its_values)
{
    char *keys = s_keygen ("keys");
    char *other = s_keygen ("other");
    static s_ps_process_t ps;
    s_ps_process_start (&ps, keys);
    const char *endpoint = ps.endpoint, *err = ps.err;
    s_client_t *chief = &ps.chief;
    uint32_t before = s_pulled_crc (chief);

    //  Three intruders push a gradient of ones 15 times each.
    char other_secret [4200];
    snprintf (other_secret, sizeof other_secret, "%s/%s", other, ZA_CURVE_SECRET_FILE);
    char keys_public [4200];
    snprintf (keys_public, sizeof keys_public, "%s/%s", keys, ZA_CURVE_PUBLIC_FILE);
    zcert_t *other_cert = zcert_load (other_secret);
    zcert_t *cluster_public = zcert_load (keys_public);
    zcert_t *own = zcert_new ();
    cr_assert (other_cert && cluster_public && own);
    s_client_t intruders [3];
    s_intruder_open (&intruders [0], endpoint, NULL, NULL);
    s_intruder_open (&intruders [1], endpoint, other_cert, zcert_public_key (other_cert));
    s_intruder_open (&intruders [2], endpoint, own, zcert_public_key (cluster_public));
    static float ones [KERNEL_FLOATS];
    for (int i = 0; i < KERNEL_FLOATS; i++)
        ones [i] = 1.0f;
    for (int round = 0; round < 15; round++)
        for (int i = 0; i < 3; i++) {
            //  A fresh connection each time: a peer that keeps coming back.
            if (round % 5 == 0 && round) {
                zsock_disconnect (intruders [i].sock, "%s", endpoint);
                zsock_connect (intruders [i].sock, "%s", endpoint);
            }
            za_wire_msg_init (intruders [i].out, ZA_OP_PUSH);
            intruders [i].out->seq = (uint64_t) round + 1;
            intruders [i].out->task = 0;
            intruders [i].out->step = 0;
            s_add_variables (&intruders [i], ones, ones);
            cr_expect_eq (s_call (&intruders [i], 100), -1, "intruder %d got an answer", i);
        }
    for (int i = 0; i < 3; i++)
        s_client_close (&intruders [i]);

    //  Nothing changed, and each intruder was counted once.
    cr_expect_eq (s_pulled_crc (chief), before, "an intruder changed the ps's values");
    zclock_sleep (300);
    char *log = za_test_read_file (err, NULL);
    cr_expect_eq (za_test_count (log, "curve: refused"), 3, "%s", log);
    cr_expect (strstr (log, "without keys") && strstr (log, "another cluster's keys")
               && strstr (log, "not the cluster's"), "%s", log);
    cr_expect (strstr (log, "(3 peers refused so far)"), "%s", log);
    free (log);
    s_ps_process_stop (&ps);
    zcert_destroy (&own);
    zcert_destroy (&cluster_public);
    zcert_destroy (&other_cert);
    free (other);
    free (keys);
}

//  Open descriptors of process pid (its connections among them).
static int
s_fds (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/fd", (int) pid);
    DIR *dir = opendir (path);
    cr_assert_not_null (dir);
    int count = 0;
    while (readdir (dir))
        count++;
    closedir (dir);
    return count;
}

Test (security, a_ps_takes_no_frame_beyond_its_model_and_silent_peers_cost_nothing)
{
    static s_ps_process_t ps;
    s_ps_process_start (&ps, NULL);
    uint32_t before = s_pulled_crc (&ps.chief);

    //  A push whose kernel frame is 4 MiB, where the ps's largest part is
    //  784 x 10 floats: libzmq closes the connection before allocating it,
    //  so no answer comes (the ps would answer bad_request to what it read).
    s_client_t big;
    s_client_open (&big, ps.endpoint, 0);
    static float huge [1 << 20];
    int64_t shape [2] = {1 << 10, 1 << 10}, bshape [1] = {UNITS};
    za_wire_msg_init (big.out, ZA_OP_PUSH);
    big.out->seq = 1;
    big.out->task = 0;
    big.out->step = 0;
    cr_assert_eq (za_wire_msg_add (big.out, "dense/kernel", ZA_DTYPE_F32, 2, shape, huge), 0);
    cr_assert_eq (za_wire_msg_add (big.out, "dense/bias", ZA_DTYPE_F32, 1, bshape, huge), 0);
    cr_expect_eq (s_call (&big, 1000), -1, "the ps read a frame beyond its model");
    s_client_close (&big);
    //  The same push at the model's size is read (and refused: wrong step).
    s_client_open (&big, ps.endpoint, 0);
    za_wire_msg_init (big.out, ZA_OP_PUSH);
    big.out->seq = 2;
    big.out->task = 0;
    big.out->step = 0;
    s_add_variables (&big, huge, huge);
    cr_expect_neq (s_call (&big, REPLY_MS), -1, "a push of the model's size got no answer");
    s_client_close (&big);

    //  200 connections that never say a word: accepted, then closed by the
    //  ps within its handshake interval.
    int baseline = s_fds (ps.pid);
    int port = atoi (strrchr (ps.endpoint, ':') + 1);
    int silent [200];
    for (int i = 0; i < 200; i++) {
        silent [i] = socket (AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                                      .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
        cr_assert_eq (connect (silent [i], (struct sockaddr *) &address, sizeof address), 0);
    }
    zclock_sleep (500);
    int crowded = s_fds (ps.pid);
    cr_expect_geq (crowded, baseline + 150, "the ps holds %d descriptors, %d before", crowded,
                   baseline);
    double deadline = za_clock_mono () + (ZA_CURVE_HANDSHAKE_SECS + 5) * ZA_TEST_SLOWDOWN;
    while (s_fds (ps.pid) > baseline + 2 && za_clock_mono () < deadline)
        zclock_sleep (200);
    cr_expect_leq (s_fds (ps.pid), baseline + 2, "silent peers still hold %d descriptors",
                   s_fds (ps.pid) - baseline);
    for (int i = 0; i < 200; i++)
        close (silent [i]);
    //  And the ps serves its chief as before, its values untouched.
    cr_expect_eq (s_pulled_crc (&ps.chief), before);
    s_ps_process_stop (&ps);
}

// ---------------------------------------------------------------------------
//  Whole jobs under CURVE

//  `zactor-top --broker B --once --json [--certs DIR]`: its exit code, and
//  the state it printed (NULL when none; caller decrefs).
static int
s_top (const char *broker, const char *certs, json_t **state)
{
    const char *args [] = {"--broker", broker, "--once", "--json", "--timeout", "3",
                           certs? "--certs": NULL, certs, NULL};
    za_test_result_t result = za_test_run_program ("zactor-top", args, 60);
    int code = result.exit_code;
    *state = json_loads (result.out, 0, NULL);
    za_test_result_free (&result);
    return code;
}

Test (security, a_job_with_certs_trains_and_answers_nobody_else)
{
    char *keys = s_keygen ("keys");
    char *other = s_keygen ("other");
    char *model_dir = za_test_path ("model");
    char *out = za_test_path ("local.out");
    //  The job outlasts every question (a step count it never reaches on any
    //  machine), and the test ends it: it does not race the job's end.
    const char *args [] = {"--local", "--certs", keys, "--max-steps", "100000000",
                           "--model-dir", model_dir, "--evaluators", "0", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    json_t *state = NULL;
    //  The banner names a zactor-top that works: with the certificate.
    char *banner = za_test_read_file (out, NULL);
    cr_expect (strstr (banner, "--certs"), "%s", banner);
    free (banner);
    cr_expect_eq (s_top (broker, other, &state), 1, "a zactor-top with another cluster's "
                  "keys got an answer");
    cr_expect_null (state);
    json_decref (state);
    //  A worker without the certificate: never welcomed, so it gives up.
    const char *worker [] = {"--broker", broker, "--role", "worker", "--index", "0",
                             "--timeout-secs", "3", "--max-steps", "800", NULL};
    za_test_result_t result = za_test_run (worker, 120);
    cr_expect_neq (result.exit_code, 0, "a worker without the keys joined: %s", result.err);
    cr_expect (strstr (result.err, "A broker with --certs answers only its cluster's "
                                   "certificate"), "says why it may be: %s", result.err);
    za_test_result_free (&result);
    cr_expect_eq (s_top (broker, NULL, &state), 1, "a zactor-top without keys got an answer");
    json_decref (state);
    cr_assert_eq (s_top (broker, keys, &state), 0);
    json_t *about = json_object_get (state, "broker");
    cr_expect (json_is_true (json_object_get (about, "curve")));
    //  Another cluster's keys, and no keys (the worker and the first
    //  zactor-top alike: libzmq does not say who), each once.
    cr_expect_eq (json_integer_value (json_object_get (about, "refused_peers")), 2, "%s",
                  json_dumps (about, 0));
    json_decref (state);
    //  It trains, under CURVE: the keyed view sees the step grow.
    int64_t step = 0;
    double deadline = za_clock_mono () + 300 * ZA_TEST_SLOWDOWN;
    while (step < 20 && za_clock_mono () < deadline) {
        state = NULL;
        if (s_top (broker, keys, &state) == 0)
            step = json_integer_value (json_object_get (state, "global_step"));
        json_decref (state);
    }
    cr_expect_geq (step, 20, "the job with certs did not train");
    cr_assert_eq (kill (local, SIGINT), 0);
    int status = za_test_wait (local, 120);
    char *text = za_test_read_file (out, NULL);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 130, "%s", text);
    cr_expect (strstr (text, "every process of the job is stopped"), "%s", text);
    free (text);
    free (out);
    free (model_dir);
    free (other);
    free (keys);
}

Test (security, the_all_reduce_ring_trains_under_curve)
{
    char *keys = s_keygen ("keys");
    char *model_dir = za_test_path ("model");
    const char *args [] = {"--local", "--strategy", "allreduce", "--certs", keys,
                           "--max-steps", "150", "--model-dir", model_dir, "--evaluators", "0",
                           NULL};
    za_test_result_t result = za_test_run (args, 600);
    cr_expect_eq (result.exit_code, 0, "%s%s", result.out, result.err);
    char *log_path = za_test_join (model_dir, "logs/worker-0.log");
    char *log = za_test_read_file (log_path, NULL);
    cr_expect_eq (za_test_count (log, "curve: refused"), 0, "%s", log);
    free (log);
    free (log_path);
    za_test_result_free (&result);
    free (model_dir);
    free (keys);
}

Test (security, without_its_zap_handler_a_process_does_not_use_curve)
{
    //  Another handler holds ZAP's address: libzmq would let in anyone who
    //  knows the server's public key, so --certs must fail instead.
    char *keys = s_keygen ("keys");
    zsock_t *squatter = zsock_new_rep ("@inproc://zeromq.zap.01");
    cr_assert_not_null (squatter);
    int rc = za_curve_use (keys);
    cr_expect_eq (rc, -1);
    cr_expect (strstr (za_last_error (), "ZAP handler"), "%s", za_last_error ());
    cr_expect_eq (za_curve_enabled (), 0);
    zsock_destroy (&squatter);
    //  With the address free again (libzmq lets go of it a moment after the
    //  socket closes) it works.
    for (int tries = 0; (rc = za_curve_use (keys)) && tries < 50; tries++)
        zclock_sleep (20);
    cr_expect_eq (rc, 0, "%s", za_last_error ());
    cr_expect_eq (za_curve_enabled (), 1);
    free (keys);
}
