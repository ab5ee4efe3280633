/*  fuzz_broker.c: libFuzzer harness for the broker's control plane. A live
    broker actor (1 chief, 2 workers, 1 ps, 1 evaluator; not supervising)
    listens on inproc; each input becomes several messages from a fresh
    DEALER: raw header frames, or wire-valid register, report, watch and
    other requests whose JSON bodies are a template with fields replaced by
    fuzzed values of any type (strings of any bytes, huge numbers, nesting).
    After them a ping must be answered with its seq, and the state must list
    every task of the job: a broker that hangs, loses a task or crashes is a
    finding. Build with -DZA_FUZZ=ON (clang); run fuzz/run.sh.            */
#include "za/za_broker.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <czmq.h>
#include <jansson.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENDPOINT "inproc://fuzz-broker"
#define TASKS 5                         //  1 chief + 2 workers + 1 ps + 1 evaluator
#define MAX_MESSAGES 8
#define REPLY_MS 5000
#define PING_SEQ 0xfeedfaceULL

static za_broker_config_t s_config;
static zactor_t *s_broker;
static za_wire_msg_t *s_out, *s_in;

//  Reads bytes off the input, zeros past its end.
typedef struct {
    const uint8_t *data;
    size_t size, at;
} s_input_t;

static uint8_t
s_byte (s_input_t *in)
{
    return in->at < in->size? in->data [in->at++]: 0;
}

//  Up to `max` bytes, as the input says; their count into *n.
static const uint8_t *
s_bytes (s_input_t *in, size_t max, size_t *n)
{
    size_t want = s_byte (in);
    want = want * 256 + s_byte (in);
    if (want > max)
        want = max;
    if (want > in->size - in->at)
        want = in->size - in->at;
    *n = want;
    const uint8_t *at = in->data + in->at;
    in->at += want;
    return at;
}

//  A JSON value of the input's choosing (any type), or NULL for "leave the
//  key out".
static json_t *
s_value (s_input_t *in)
{
    size_t n;
    const uint8_t *bytes;
    switch (s_byte (in) % 9) {
        case 0: return NULL;
        case 1: return json_null ();
        case 2: return json_integer ((json_int_t) ((int8_t) s_byte (in)));
        case 3: {
            uint64_t v = 0;             //  unsigned: the bytes may overflow an int64
            for (int i = 0; i < 8; i++)
                v = v * 256 + s_byte (in);
            return json_integer ((json_int_t) v);
        }
        case 4: {
            double v;
            uint64_t raw = 0;
            for (int i = 0; i < 8; i++)
                raw = raw * 256 + s_byte (in);
            memcpy (&v, &raw, sizeof v);
            return json_real (v);           //  NULL for inf and nan: the key is left out
        }
        case 5: return json_boolean (s_byte (in) & 1);
        case 6:
            bytes = s_bytes (in, 600, &n);
            return json_stringn_nocheck ((const char *) bytes, n);
        case 7: {
            bytes = s_bytes (in, 600, &n);
            json_t *text = json_stringn ((const char *) bytes, n);
            return text? text: json_string ("\xc3\xa9");
        }
        default: return json_pack ("[i, {s:s}]", 1, "a", "b");
    }
}

//  A register or report body: a good template with some fields replaced.
static char *
s_body (s_input_t *in, int report)
{
    static const char *roles [] = {"chief", "worker", "ps", "evaluator"};
    json_t *body = json_pack ("{s:s, s:i, s:s, s:i, s:i, s:s}",
                              "role", roles [s_byte (in) % 4], "index", (int) s_byte (in) % 3 - 1,
                              "host", "127.0.0.1", "pid", 1000 + s_byte (in), "restarts", 0,
                              "endpoint", s_byte (in) & 1? "tcp://127.0.0.1:5000": "");
    if (report)
        json_object_update_new (body, json_pack ("{s:s, s:i, s:f, s:f, s:f}", "state",
                                                 "running", "global_step", s_byte (in),
                                                 "loss", 0.5, "steps_per_sec", 1.0,
                                                 "examples_per_sec", 64.0));
    static const char *keys [] = {"role", "index", "host", "pid", "restarts", "endpoint",
                                  "state", "global_step", "loss", "steps_per_sec",
                                  "examples_per_sec", "eval_step", "eval_accuracy", "other"};
    int changes = s_byte (in) % 4;
    for (int c = 0; c < changes; c++) {
        const char *key = keys [s_byte (in) % (sizeof keys / sizeof keys [0])];
        json_t *value = s_value (in);
        if (value)
            json_object_set_new (body, key, value);
        else
            json_object_del (body, key);
    }
    char *text = json_dumps (body, JSON_COMPACT | JSON_ENSURE_ASCII * (s_byte (in) & 1));
    json_decref (body);
    return text;
}

//  Sends one message the input describes.
static void
s_send_one (zsock_t *dealer, s_input_t *in)
{
    size_t n;
    uint8_t kind = s_byte (in) % 6;
    if (kind == 0) {
        //  Raw bytes as a header frame, perhaps with payload frames.
        const uint8_t *bytes = s_bytes (in, 70000, &n);
        zmsg_t *msg = zmsg_new ();
        zmsg_addmem (msg, bytes, n);
        for (int extra = s_byte (in) % 3; extra > 0; extra--)
            zmsg_addmem (msg, "x", 1);
        zmsg_send (&msg, dealer);
        return;
    }
    static const za_op_t ops [] = {ZA_OP_WATCH, ZA_OP_PING, ZA_OP_PUSH, ZA_OP_WELCOME};
    char *body = NULL;
    za_op_t op = kind == 1? ZA_OP_REGISTER: kind == 2? ZA_OP_REPORT: ops [s_byte (in) % 4];
    if (kind <= 2)
        body = s_body (in, kind == 2);
    else
    if (kind == 3) {
        const uint8_t *bytes = s_bytes (in, 2000, &n);
        body = malloc (n + 1);
        memcpy (body, bytes, n);
        body [n] = 0;
        for (size_t i = 0; i < n; i++)
            if (!body [i])
                body [i] = ' ';
        op = s_byte (in) & 1? ZA_OP_REGISTER: ZA_OP_REPORT;
    }
    za_wire_msg_init (s_out, op);
    s_out->seq = s_byte (in);
    if (body) {
        s_out->body = body;
        s_out->body_len = strlen (body);
    }
    za_wire_send (dealer, NULL, s_out, NULL);
    free (body);
}

//  Waits for the reply of op `want` with seq; NULL (after REPLY_MS) when none.
static zmsg_t *
s_await (zsock_t *dealer, za_op_t want, uint64_t seq)
{
    zpoller_t *poller = zpoller_new (dealer, NULL);
    double deadline = za_clock_mono () + REPLY_MS / 1000.0;
    zmsg_t *found = NULL;
    while (!found && za_clock_mono () < deadline) {
        if (!zpoller_wait (poller, 100))
            continue;
        zmsg_t *msg = zmsg_recv (dealer);
        if (msg && za_wire_decode (msg, s_in) == 0 && s_in->op == want && s_in->seq == seq)
            found = msg;
        else
            zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    return found;
}

//  replay.c's end of a run (libFuzzer itself never ends one this way).
void fuzz_cleanup (void);

void
fuzz_cleanup (void)
{
    zactor_destroy (&s_broker);
    free (s_out);
    free (s_in);
}

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
    (void) argc, (void) argv;
    za_error_set_quiet (1);
    static char dir [] = "/tmp/za_fuzz_broker_XXXXXX";
    if (!mkdtemp (dir))
        abort ();
    za_broker_config_init (&s_config);
    s_config.bind = ENDPOINT;
    s_config.job_text = "{\"model\": \"linear\", \"max_steps\": 100}";
    s_config.counts [ZA_TASK_CHIEF] = 1;
    s_config.counts [ZA_TASK_WORKER] = 2;
    s_config.counts [ZA_TASK_PS] = 1;
    s_config.counts [ZA_TASK_EVALUATOR] = 1;
    s_config.model_dir = dir;
    s_config.max_steps = 100;
    //  Long heartbeats: tasks the inputs register do not expire mid-run.
    s_config.heartbeat.ivl_secs = 3600;
    s_broker = zactor_new (za_broker_actor, &s_config);
    s_out = malloc (sizeof *s_out);
    s_in = malloc (sizeof *s_in);
    if (!s_broker || !s_out || !s_in)
        abort ();
    return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_input_t in = {data, size, 0};
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    zsock_set_maxmsgsize (dealer, ZA_WIRE_MAX_HEADER_BYTES + 1024);
    if (!dealer || zsock_connect (dealer, ENDPOINT))
        abort ();
    int messages = 1 + s_byte (&in) % MAX_MESSAGES;
    for (int m = 0; m < messages && in.at < in.size; m++)
        s_send_one (dealer, &in);
    //  The broker answers, and still knows every task of the job.
    za_wire_msg_init (s_out, ZA_OP_PING);
    s_out->seq = PING_SEQ;
    za_wire_send (dealer, NULL, s_out, NULL);
    zmsg_t *pong = s_await (dealer, ZA_OP_PONG, PING_SEQ);
    if (!pong) {
        fprintf (stderr, "fuzz_broker: no pong\n");
        abort ();
    }
    zmsg_destroy (&pong);
    za_wire_msg_init (s_out, ZA_OP_WATCH);
    s_out->seq = PING_SEQ + 1;
    za_wire_send (dealer, NULL, s_out, NULL);
    zmsg_t *state_msg = s_await (dealer, ZA_OP_STATE, PING_SEQ + 1);
    json_t *state = state_msg && s_in->body? json_loadb (s_in->body, s_in->body_len, 0, NULL)
                                          : NULL;
    size_t rows = json_array_size (json_object_get (state, "roles"));
    if (rows != TASKS) {
        fprintf (stderr, "fuzz_broker: the state lists %zu tasks of %d\n", rows, TASKS);
        abort ();
    }
    json_decref (state);
    zmsg_destroy (&state_msg);
    zsock_destroy (&dealer);
    return 0;
}
