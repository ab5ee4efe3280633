/*  za_broker_client.c: the outside of the broker's control plane: requests
    built and replies decoded in one place. The role's client actor that
    uses them is za_broker_actor.c.                                         */
#include "za/za_broker_client.h"
#include "za/za_curve.h"
#include "za/za_preempt.h"
#include "za/za_json.h"
#include "za/za_util.h"

#include <jansson.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define POLL_MS 100
#define SEND_HWM 16
#define LAST_REPORT_LINGER_MS 1000
//  A control message fits in one header frame (docs/PROTOCOL.md 4).
#define CONTROL_MAX_BYTES (ZA_WIRE_MAX_HEADER_BYTES + 1024)

struct _za_broker_client_t {
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    zsock_t *dealer;
    za_wire_msg_t *in, *out;
    za_peer_t peer;
    uint64_t seq;
};

za_broker_client_t *
za_broker_client_new (const char *endpoint, za_heartbeat_t beat)
{
    za_broker_client_t *self = (za_broker_client_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    snprintf (self->endpoint, sizeof self->endpoint, "%s", endpoint? endpoint: "");
    self->in = (za_wire_msg_t *) malloc (sizeof *self->in);
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->dealer = zsock_new (ZMQ_DEALER);
    if (!self->in || !self->out || !self->dealer) {
        za_error ("out of memory");
        za_broker_client_destroy (&self);
        return NULL;
    }
    //  Reports are dropped, not queued, while the broker is away (the next
    //  one says it all again); a reply is one header frame.
    zsock_set_sndhwm (self->dealer, SEND_HWM);
    zsock_set_sndtimeo (self->dealer, 0);
    zsock_set_maxmsgsize (self->dealer, CONTROL_MAX_BYTES);
    //  ZMTP heartbeats find a broker host that vanished without closing the
    //  connection; the broker's replies judge a broker that is merely hung.
    za_heartbeat_zmtp (self->dealer, beat);
    za_curve_client (self->dealer);
    if (!endpoint || zsock_connect (self->dealer, "%s", endpoint) < 0) {
        za_error ("cannot connect to the broker at '%s' (an endpoint such as "
                  "tcp://HOST:PORT)", endpoint? endpoint: "");
        za_broker_client_destroy (&self);
        return NULL;
    }
    za_peer_init (&self->peer, beat, za_clock_mono ());
    return self;
}

void
za_broker_client_destroy (za_broker_client_t **self_p)
{
    za_broker_client_t *self = *self_p;
    if (!self)
        return;
    if (self->dealer)
        zsock_set_linger (self->dealer, LAST_REPORT_LINGER_MS);
    zsock_destroy (&self->dealer);
    free (self->in);
    free (self->out);
    free (self);
    *self_p = NULL;
}

zsock_t *
za_broker_client_sock (za_broker_client_t *self)
{
    return self->dealer;
}

za_peer_t *
za_broker_client_peer (za_broker_client_t *self)
{
    return &self->peer;
}

const char *
za_broker_client_endpoint (const za_broker_client_t *self)
{
    return self->endpoint;
}

// ---------------------------------------------------------------------------
//  Requests

//  Sends op with `body` (taken; NULL: none). 0, or -1 when not queued.
static int
s_send (za_broker_client_t *self, za_op_t op, json_t *body)
{
    char *text = body? json_dumps (body, JSON_COMPACT): NULL;
    json_decref (body);
    if (body && !text)
        return za_error ("broker client: cannot write the %s body", za_op_name (op));
    za_wire_msg_init (self->out, op);
    self->out->seq = ++self->seq;
    if (text) {
        self->out->body = text;
        self->out->body_len = strlen (text);
    }
    int rc = za_wire_send (self->dealer, NULL, self->out, NULL);
    free (text);
    return rc;
}

int
za_task_token_new (char token [ZA_TASK_TOKEN_SIZE])
{
    unsigned char bytes [(ZA_TASK_TOKEN_SIZE - 1) / 2];
    if (getrandom (bytes, sizeof bytes, 0) != (ssize_t) sizeof bytes)
        return za_error ("cannot draw a task token: %s", strerror (errno));
    for (size_t i = 0; i < sizeof bytes; i++)
        snprintf (token + 2 * i, 3, "%02x", bytes [i]);
    return 0;
}

int
za_task_token_valid (const char *text)
{
    if (!text || strlen (text) != ZA_TASK_TOKEN_SIZE - 1)
        return 0;
    return strspn (text, "0123456789abcdef") == ZA_TASK_TOKEN_SIZE - 1;
}

static json_t *
s_registration (const za_task_registration_t *task)
{
    json_t *body = json_pack ("{s:s, s:i, s:s, s:i, s:i, s:s}",
                              "role", za_task_type_name (task->type),
                              "index", task->index, "host", task->host? task->host: "",
                              "pid", task->pid, "restarts", task->restarts,
                              "endpoint", task->endpoint? task->endpoint: "");
    if (body && task->token && *task->token)
        json_object_set_new (body, "token", json_string (task->token));
    return body;
}

int
za_broker_client_register (za_broker_client_t *self, const za_task_registration_t *task)
{
    return s_send (self, ZA_OP_REGISTER, s_registration (task));
}

//  A trainer's recent step and its phases (docs/PROTOCOL.md 13).
static json_t *
s_times (za_role_stats_t *s, double step_ms)
{
    json_t *times = json_object ();
    json_object_set_new (times, "step_ms", json_real (step_ms));
    for (int phase = 0; phase < ZA_PHASES; phase++) {
        char key [32];
        snprintf (key, sizeof key, "%s_ms", za_phase_name (phase));
        json_object_set_new (times, key, json_real (atomic_load (&s->phase_ms [phase])));
    }
    json_object_set_new (times, "exchange_waits",
                         json_boolean (atomic_load (&s->exchange_waits)));
    return times;
}

int
za_broker_client_report (za_broker_client_t *self, const za_task_registration_t *task,
                         za_role_state_t state, const za_role_stats_t *stats,
                         int64_t membership)
{
    json_t *body = s_registration (task);
    if (!body)
        return za_error ("broker client: cannot write a report");
    json_object_set_new (body, "state", json_string (za_role_state_name (state)));
    //  Our clock: the broker answers with its own (the trace's times).
    json_object_set_new (body, "clock", json_pack ("{s:f, s:s}", "sent", za_clock_mono (),
                                                   "boot", za_boot_id ()));
    //  The members' change we hold: a restarted broker numbers on from it.
    if (membership > 0)
        json_object_set_new (body, "membership", json_integer (membership));
    //  SIGTERM came (za_preempt.h): the broker stops the whole job; to an
    //  elastic job's worker: it drops this one from the members, or stops
    //  the job where this one may not leave.
    if (za_preempt_requested ())
        json_object_set_new (body, "preempting", json_true ());
    else
    if (za_preempt_leave_requested ())
        json_object_set_new (body, "leaving", json_true ());
    if (stats) {
        za_role_stats_t *s = (za_role_stats_t *) stats;
        json_object_set_new (body, "global_step", json_integer (atomic_load (&s->global_step)));
        //  A diverged loss (NaN) goes as null: JSON has no NaN, and a
        //  report without its loss was refused (the task taken for silent).
        json_object_set_new (body, "loss", za_json_real (atomic_load (&s->loss)));
        json_object_set_new (body, "steps_per_sec", json_real (atomic_load (&s->steps_per_sec)));
        json_object_set_new (body, "examples_per_sec",
                             json_real (atomic_load (&s->examples_per_sec)));
        int64_t bad_images = atomic_load (&s->bad_images);
        if (bad_images > 0)
            json_object_set_new (body, "bad_images", json_integer (bad_images));
        int64_t images = atomic_load (&s->images);
        if (images > 0)
            json_object_set_new (body, "images", json_integer (images));
        int ring_rank = atomic_load (&s->ring_rank);
        if (ring_rank >= 0) {
            json_object_set_new (body, "ring_rank", json_integer (ring_rank));
            json_object_set_new (body, "wait_ms", json_real (atomic_load (&s->wait_ms)));
        }
        double step_ms = atomic_load (&s->step_ms);
        if (step_ms > 0)
            json_object_set_new (body, "times", s_times (s, step_ms));
        int64_t eval_step = atomic_load (&s->eval_step);
        if (eval_step >= 0) {
            json_object_set_new (body, "eval_step", json_integer (eval_step));
            json_object_set_new (body, "eval_accuracy",
                                 json_real (atomic_load (&s->eval_accuracy)));
        }
    }
    return s_send (self, ZA_OP_REPORT, body);
}

int
za_broker_client_watch (za_broker_client_t *self)
{
    return s_send (self, ZA_OP_WATCH, NULL);
}

int
za_broker_client_checkpoint (za_broker_client_t *self, int64_t global_step)
{
    return s_send (self, ZA_OP_CHECKPOINT,
                   json_pack ("{s:I}", "global_step", (json_int_t) global_step));
}

// ---------------------------------------------------------------------------
//  Replies

void
za_broker_reply_clear (za_broker_reply_t *reply)
{
    free (reply->job);
    free (reply->state);
    free (reply->state_text);
    memset (reply, 0, sizeof *reply);
}

//  Copies a JSON string member into buf; "" when absent. -1 when present but
//  not a string or too long.
static int
s_text (json_t *object, const char *key, char *buf, size_t size)
{
    json_t *value = json_object_get (object, key);
    buf [0] = 0;
    if (!value)
        return 0;
    const char *text = json_string_value (value);
    if (!text || strlen (text) >= size)
        return -1;
    memcpy (buf, text, strlen (text) + 1);
    return 0;
}

static double
s_number (json_t *object, const char *key, double otherwise)
{
    json_t *value = json_object_get (object, key);
    return json_is_number (value)? json_number_value (value): otherwise;
}

//  A count for display: an integer in [0, INT_MAX], else 0.
static int
s_count (json_t *object, const char *key)
{
    json_t *value = json_object_get (object, key);
    json_int_t n = json_is_integer (value)? json_integer_value (value): 0;
    return n >= 0 && n <= INT_MAX? (int) n: 0;
}

static int
s_decode_welcome (json_t *body, za_broker_reply_t *reply)
{
    json_t *index = json_object_get (body, "index");
    json_t *job = json_object_get (body, "job");
    if (!json_is_integer (index) || json_integer_value (index) < 0
        || json_integer_value (index) >= ZA_CLUSTER_MAX_TASKS || !json_is_object (job)
        || s_text (body, "endpoint", reply->endpoint, sizeof reply->endpoint)
        || (*reply->endpoint && !za_cluster_endpoint_valid (reply->endpoint)))
        return za_error ("broker client: a welcome without an index, a job object or a "
                         "valid endpoint");
    //  The token: from a broker of this version always; an older one sends none.
    json_t *token = json_object_get (body, "token");
    if (token && !za_task_token_valid (json_string_value (token)))
        return za_error ("broker client: a welcome with a token that is not 32 hex digits");
    snprintf (reply->token, sizeof reply->token, "%s", token? json_string_value (token): "");
    reply->index = (int) json_integer_value (index);
    reply->job = json_dumps (job, JSON_COMPACT);
    return reply->job? 0: za_error ("broker client: cannot copy the job");
}

//  0 for a worker index outside an elastic view's members; 1 otherwise.
static int
s_is_member (const za_broker_reply_t *reply, int index)
{
    if (!reply->membership)
        return 1;
    for (int m = 0; m < reply->member_count; m++)
        if (reply->members [m] == index)
            return 1;
    return 0;
}

static int
s_decode_view (json_t *body, za_broker_reply_t *reply)
{
    json_t *ps = json_object_get (body, "ps");
    json_t *workers = json_object_get (body, "num_workers");
    if (!json_is_array (ps) || json_array_size (ps) > ZA_CLUSTER_MAX_TASKS
        || !json_is_integer (workers))
        return za_error ("broker client: a view without a ps list or num_workers");
    reply->ready = json_is_true (json_object_get (body, "ready"));
    reply->preempting = json_is_true (json_object_get (body, "preempting"));
    //  The broker's clock: a clock that is not whole is left out.
    json_t *clock = json_object_get (body, "clock");
    reply->clock_sent = -1;
    if (json_is_object (clock) && json_is_number (json_object_get (clock, "sent"))
        && json_is_number (json_object_get (clock, "broker"))
        && !s_text (clock, "boot", reply->clock_boot, sizeof reply->clock_boot)) {
        reply->clock_sent = json_number_value (json_object_get (clock, "sent"));
        reply->clock_broker = json_number_value (json_object_get (clock, "broker"));
    }
    reply->num_workers = (int) json_integer_value (workers);
    reply->ps_count = (int) json_array_size (ps);
    for (int p = 0; p < reply->ps_count; p++) {
        const char *endpoint = json_string_value (json_array_get (ps, (size_t) p));
        if (!endpoint || strlen (endpoint) >= sizeof reply->ps [p]
            || (reply->ready && !*endpoint) || (*endpoint && !za_cluster_endpoint_valid (endpoint)))
            return za_error ("broker client: the view's ps %d is not an endpoint", p);
        memcpy (reply->ps [p], endpoint, strlen (endpoint) + 1);
    }
    //  An elastic job's members (za_membership.h): worker indexes, ascending.
    json_t *members = json_object_get (body, "members");
    json_t *number = json_object_get (body, "membership");
    if (members || number) {
        if (!json_is_array (members) || json_array_size (members) > ZA_MEMBERS_MAX
            || json_array_size (members) < 1 || !json_is_integer (number)
            || json_integer_value (number) < 1)
            return za_error ("broker client: the view's members are not a numbered list");
        reply->membership = json_integer_value (number);
        reply->member_count = (int) json_array_size (members);
        for (int m = 0; m < reply->member_count; m++) {
            json_t *index = json_array_get (members, (size_t) m);
            int value = json_is_integer (index)? (int) json_integer_value (index): -1;
            if (value < 0 || value >= reply->num_workers
                || (m > 0 && value <= reply->members [m - 1]))
                return za_error ("broker client: the view's member %d is not a worker index "
                                 "above the last", m);
            reply->members [m] = value;
        }
    }
    json_t *ring = json_object_get (body, "ring");
    if (!ring)
        return 0;
    if (!json_is_array (ring) || json_array_size (ring) != (size_t) reply->num_workers
        || json_array_size (ring) > ZA_CLUSTER_MAX_TASKS + 1)
        return za_error ("broker client: the view's ring is not a list of num_workers");
    reply->ring_count = (int) json_array_size (ring);
    for (int r = 0; r < reply->ring_count; r++) {
        const char *endpoint = json_string_value (json_array_get (ring, (size_t) r));
        //  Elastic: a slot nobody holds has none.
        int wanted = reply->ready && s_is_member (reply, r);
        if (!endpoint || strlen (endpoint) >= sizeof reply->ring [r]
            || (wanted && !*endpoint) || (*endpoint && !za_cluster_endpoint_valid (endpoint)))
            return za_error ("broker client: the view's ring member %d is not an endpoint", r);
        memcpy (reply->ring [r], endpoint, strlen (endpoint) + 1);
    }
    return 0;
}

static int
s_decode_task_row (json_t *row, za_broker_task_row_t *task)
{
    char role [16];
    memset (task, 0, sizeof *task);
    if (!json_is_object (row) || s_text (row, "role", role, sizeof role)
        || s_text (row, "host", task->host, sizeof task->host)
        || s_text (row, "state", task->state, sizeof task->state)
        || s_text (row, "endpoint", task->endpoint, sizeof task->endpoint))
        return -1;
    task->type = (za_task_type_t) -1;
    for (int k = ZA_TASK_CHIEF; k <= ZA_TASK_EVALUATOR; k++)
        if (streq (role, za_task_type_name ((za_task_type_t) k)))
            task->type = (za_task_type_t) k;
    if ((int) task->type < 0)
        return -1;
    task->index = (int) s_number (row, "index", 0);
    task->pid = (int) s_number (row, "pid", 0);
    task->global_step = (int64_t) s_number (row, "global_step", 0);
    task->steps_per_sec = s_number (row, "steps_per_sec", 0);
    task->examples_per_sec = s_number (row, "examples_per_sec", 0);
    task->loss = s_number (row, "loss", NAN);
    task->eval_step = (int64_t) s_number (row, "eval_step", -1);
    task->eval_accuracy = s_number (row, "eval_accuracy", 0);
    task->restarts = (int) s_number (row, "restarts", 0);
    task->heartbeat_age_secs = s_number (row, "heartbeat_age_secs", -1);
    task->ring_rank = (int) s_number (row, "ring_rank", -1);
    task->wait_ms = s_number (row, "wait_ms", 0);
    task->bad_images = (int64_t) s_number (row, "bad_images", 0);
    task->images = (int64_t) s_number (row, "images", 0);
    task->step_ms = s_number (row, "step_ms", 0);
    task->straggler = json_is_true (json_object_get (row, "straggler"));
    task->slowdown = s_number (row, "slowdown", 0);
    if (s_text (row, "slowest_phase", task->slowest_phase, sizeof task->slowest_phase))
        return -1;
    return 0;
}

static int
s_decode_event_row (json_t *row, za_broker_event_row_t *event)
{
    memset (event, 0, sizeof *event);
    if (!json_is_object (row) || s_text (row, "event", event->event, sizeof event->event)
        || s_text (row, "role", event->role, sizeof event->role))
        return -1;
    //  A cause may be longer than we show: cut at a character's start.
    const char *cause = json_string_value (json_object_get (row, "cause"));
    if (cause) {
        size_t n = strlen (cause);
        if (n >= sizeof event->cause) {
            n = sizeof event->cause - 1;
            while (n > 0 && ((unsigned char) cause [n] & 0xc0) == 0x80)
                n--;
        }
        memcpy (event->cause, cause, n);
        event->cause [n] = 0;
    }
    event->time = s_number (row, "time", 0);
    event->index = (int) s_number (row, "index", 0);
    event->pid = (int) s_number (row, "pid", 0);
    event->restarts = (int) s_number (row, "restarts", 0);
    return 0;
}

static int
s_decode_state (json_t *body, za_broker_reply_t *reply)
{
    json_t *job = json_object_get (body, "job");
    json_t *broker = json_object_get (body, "broker");
    json_t *roles = json_object_get (body, "roles");
    json_t *events = json_object_get (body, "events");
    if (!json_is_object (job) || !json_is_object (broker) || !json_is_array (roles)
        || json_array_size (roles) > ZA_BROKER_STATE_TASKS)
        return za_error ("broker client: a state without job, broker or roles");
    za_broker_state_t *state = (za_broker_state_t *) calloc (1, sizeof *state);
    if (!state)
        return za_error ("out of memory");
    reply->state = state;
    state->max_steps = (int64_t) s_number (job, "max_steps", 0);
    state->broker_pid = (int) s_number (broker, "pid", 0);
    state->broker_restarts = (int) s_number (broker, "restarts", 0);
    state->broker_uptime_secs = s_number (broker, "uptime_secs", 0);
    state->supervise = json_is_true (json_object_get (broker, "supervise"));
    state->curve = json_is_true (json_object_get (broker, "curve"));
    state->refused_peers = (int64_t) s_number (broker, "refused_peers", 0);
    state->global_step = (int64_t) s_number (body, "global_step", 0);
    state->done = json_is_true (json_object_get (body, "done"));
    //  The trainers now; an elastic job's range and changes (absent: none).
    json_t *membership = json_object_get (body, "membership");
    state->members = s_count (membership, "members");
    state->min_workers = s_count (membership, "min_workers");
    state->max_workers = s_count (membership, "max_workers");
    state->membership_changes = s_count (membership, "changes");
    if (s_text (job, "model_dir", state->model_dir, sizeof state->model_dir)
        || s_text (broker, "host", state->broker_host, sizeof state->broker_host)
        || s_text (broker, "endpoint", state->broker_endpoint, sizeof state->broker_endpoint))
        return za_error ("broker client: a state with a bad model_dir, host or endpoint");
    size_t i;
    json_t *row;
    json_array_foreach (roles, i, row)
        if (s_decode_task_row (row, &state->tasks [state->task_count++]))
            return za_error ("broker client: the state's task row %zu is malformed", i);
    size_t count = json_array_size (events);
    size_t first = count > ZA_BROKER_STATE_EVENTS? count - ZA_BROKER_STATE_EVENTS: 0;
    for (i = first; i < count; i++)
        if (s_decode_event_row (json_array_get (events, i),
                                &state->events [state->event_count++]))
            return za_error ("broker client: the state's event %zu is malformed", i);
    return 0;
}

int
za_broker_client_recv (za_broker_client_t *self, za_broker_reply_t *reply)
{
    za_broker_reply_clear (reply);
    zmsg_t *msg = zmsg_recv (self->dealer);
    if (!msg)
        return za_error ("broker client: nothing received");
    za_wire_msg_t *in = self->in;
    int rc = za_wire_decode (msg, in);
    json_t *body = NULL;
    if (rc == 0 && in->body) {
        json_error_t error;
        body = json_loadb (in->body, in->body_len, 0, &error);
        if (!json_is_object (body))
            rc = za_error ("broker client: a %s whose body is not a JSON object",
                           za_op_name (in->op));
    }
    if (rc == 0) {
        reply->op = in->op;
        reply->seq = in->seq;
        snprintf (reply->code, sizeof reply->code, "%s", in->code);
        snprintf (reply->error, sizeof reply->error, "%s", in->error);
        switch (in->op) {
            case ZA_OP_WELCOME: rc = body? s_decode_welcome (body, reply): -1; break;
            case ZA_OP_VIEW: rc = body? s_decode_view (body, reply): -1; break;
            case ZA_OP_STATE:
                rc = body? s_decode_state (body, reply): -1;
                if (rc == 0 && !(reply->state_text = strndup (in->body, in->body_len)))
                    rc = za_error ("out of memory");
                break;
            case ZA_OP_CHECKPOINT: {
                json_t *step = json_object_get (body, "global_step");
                if (!json_is_integer (step) || json_integer_value (step) < 0)
                    rc = za_error ("broker client: a checkpoint without a global_step >= 0");
                else
                    reply->global_step = json_integer_value (step);
                break;
            }
            case ZA_OP_ERROR:
            case ZA_OP_PONG:
                break;
            default:
                rc = za_error ("broker client: the broker sent %s", za_op_name (in->op));
                break;
        }
        if (rc && (in->op == ZA_OP_WELCOME || in->op == ZA_OP_VIEW || in->op == ZA_OP_STATE
                   || in->op == ZA_OP_CHECKPOINT)
            && !*za_last_error ())
            za_error ("broker client: a %s without a body", za_op_name (in->op));
    }
    json_decref (body);
    zmsg_destroy (&msg);
    //  Anything from the broker is a sign of life, even what we drop.
    za_peer_heard (&self->peer, za_clock_mono ());
    if (rc)
        za_broker_reply_clear (reply);
    return rc? -1: 0;
}

int
za_broker_client_state (za_broker_client_t *self, double timeout_secs,
                        za_broker_state_t **state_p, char **text_p)
{
    *state_p = NULL;
    if (text_p)
        *text_p = NULL;
    if (za_broker_client_watch (self))
        return -1;
    zpoller_t *poller = zpoller_new (self->dealer, NULL);
    double deadline = za_clock_mono () + timeout_secs;
    za_broker_reply_t reply;
    memset (&reply, 0, sizeof reply);
    int rc = -1;
    while (rc && !zsys_interrupted && za_clock_mono () < deadline) {
        if (!zpoller_wait (poller, POLL_MS))
            continue;
        if (za_broker_client_recv (self, &reply) == 0 && reply.op == ZA_OP_STATE) {
            *state_p = reply.state;
            reply.state = NULL;
            if (text_p) {
                *text_p = reply.state_text;
                reply.state_text = NULL;
            }
            rc = 0;
        }
        za_broker_reply_clear (&reply);
    }
    zpoller_destroy (&poller);
    if (rc)
        za_error ("no answer from the broker at %s within %g s", self->endpoint, timeout_secs);
    return rc;
}
