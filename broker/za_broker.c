/*  za_broker.c: the broker actor: a ROUTER that answers registers, reports,
    watches and checkpoints (docs/PROTOCOL.md 13) over its registry of the
    job's tasks (za_registry.h: their states, supervision through
    za_supervisor.h), its events (za_events.h), and the state zactor-top
    and Prometheus show.                                                    */
#include "za/za_broker.h"
#include "za/za_preempt.h"
#include "za/za_curve.h"
#include "za/za_metrics.h"
#include "za/za_util.h"
#include "za/za_wire.h"
#include "za_events.h"
#include "za_registry.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 100
#define DRAIN_QUIET_MS 50               //  at the end: the last reports, until this quiet
#define DRAIN_MAX_MS 1000
#define PAUSE_SECS 1.0                  //  a loop turn this late means we were paused
#define HOST_MAX 256

typedef struct {
    const za_broker_config_t *config;
    zsock_t *pipe;
    zsock_t *router;
    json_t *job;
    za_registry_t *registry;
    za_events_t *events;
    double start;
    char host [HOST_MAX];
    uint64_t dropped;           //  messages that did not decode
    uint64_t refused;           //  requests answered with an error
    uint64_t json_failures;     //  replies, rows or events that could not be built
    za_wire_msg_t *in, *out;
    double last_turn;           //  when the loop last ran
    za_metrics_t *metrics;      //  NULL: no --metrics-bind
    double metrics_at;          //  when the metrics text was last made
    int64_t checkpoint_step;    //  the newest checkpoint the chief announced; -1: none
    uint64_t checkpoints_relayed;   //  checkpoint messages sent on to evaluators
} s_broker_t;

// ---------------------------------------------------------------------------
//  Messages

//  Counts a reply that could not be built, and says so (the first few
//  times): never a silent skip.
static void
s_json_failed (s_broker_t *self, const char *what)
{
    self->json_failures++;
    if (self->json_failures <= ZA_BROKER_LOGGED_MAX)
        za_info ("broker: could not build %s (%" PRIu64 " so far)", what, self->json_failures);
}

//  Sends op with body (taken; NULL: none) to identity, echoing the seq of the
//  request being answered.
static void
s_reply (s_broker_t *self, zframe_t *identity, za_op_t op, json_t *body)
{
    char *text = body? json_dumps (body, JSON_COMPACT): NULL;
    json_decref (body);
    za_wire_msg_init (self->out, op);
    self->out->seq = self->in->seq;
    if (!text) {
        s_json_failed (self, za_op_name (op));
        za_wire_msg_init (self->out, ZA_OP_ERROR);
        self->out->seq = self->in->seq;
        snprintf (self->out->code, sizeof self->out->code, "internal");
        snprintf (self->out->error, sizeof self->out->error, "the broker could not build "
                  "its %s", za_op_name (op));
    }
    else {
        self->out->body = text;
        self->out->body_len = strlen (text);
    }
    if (za_wire_send (self->router, identity, self->out, NULL))
        za_info ("broker: reply %s not sent: %s", za_op_name (op), za_last_error ());
    free (text);
}

static void
s_reply_error (s_broker_t *self, zframe_t *identity, const char *code, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static void
s_reply_error (s_broker_t *self, zframe_t *identity, const char *code, const char *fmt, ...)
{
    za_wire_msg_init (self->out, ZA_OP_ERROR);
    self->out->seq = self->in->seq;
    snprintf (self->out->code, sizeof self->out->code, "%s", code);
    va_list args;
    va_start (args, fmt);
    vsnprintf (self->out->error, sizeof self->out->error, fmt, args);
    va_end (args);
    self->refused++;
    if (self->refused <= ZA_BROKER_LOGGED_MAX)
        za_info ("broker: refused (%" PRIu64 " so far): %s", self->refused, self->out->error);
    za_wire_send (self->router, identity, self->out, NULL);
}

//  Parses a body; NULL (and a refusal sent) if it is not a JSON object.
static json_t *
s_body (s_broker_t *self, zframe_t *identity)
{
    json_error_t error;
    json_t *body = self->in->body
                 ? json_loadb (self->in->body, self->in->body_len, 0, &error): NULL;
    if (!body || !json_is_object (body)) {
        s_reply_error (self, identity, "bad_request", "%s without a JSON object body",
                       za_op_name (self->in->op));
        json_decref (body);
        return NULL;
    }
    return body;
}

// ---------------------------------------------------------------------------
//  Registers and reports

//  The body of a register or report, checked, and the task it names; NULL
//  (and a refusal sent) when either is wrong.
static za_entry_t *
s_claim (s_broker_t *self, zframe_t *identity, int report, za_registration_t *reg)
{
    json_t *body = s_body (self, identity);
    if (!body)
        return NULL;
    char why [300], code [ZA_REGISTRY_CODE_MAX];
    int bad = za_registration_parse (body, report, self->config->counts, reg, why, sizeof why);
    json_decref (body);
    if (bad) {
        s_reply_error (self, identity, "bad_request", "%s: %s", za_op_name (self->in->op), why);
        return NULL;
    }
    za_entry_t *task = za_registry_claim (self->registry, identity, reg, report, code, why,
                                          sizeof why);
    if (!task)
        s_reply_error (self, identity, code, "%s", why);
    return task;
}

static void
s_on_register (s_broker_t *self, zframe_t *identity)
{
    za_registration_t reg;
    za_entry_t *task = s_claim (self, identity, 0, &reg);
    if (!task)
        return;
    za_registry_register (self->registry, task, identity, &reg);
    json_t *job = json_deep_copy (self->job);
    s_reply (self, identity, ZA_OP_WELCOME,
             json_pack ("{s:i, s:s, s:o, s:s}", "index", task->index, "endpoint",
                        task->endpoint, "job", job, "token", task->token));
}

static void
s_on_report (s_broker_t *self, zframe_t *identity)
{
    za_registration_t reg;
    za_entry_t *task = s_claim (self, identity, 1, &reg);
    if (!task)
        return;
    za_registry_report (self->registry, task, identity, &reg);
    json_t *view = za_registry_view (self->registry);
    //  Our clock, for its trace's times: it measures the round trip.
    if (view && reg.clock_sent >= 0)
        json_object_set_new (view, "clock", json_pack ("{s:f, s:f, s:s}", "sent",
                                                       reg.clock_sent, "broker",
                                                       za_clock_mono (), "boot",
                                                       za_boot_id ()));
    s_reply (self, identity, ZA_OP_VIEW, view);
}

//  A checkpoint: the chief has written the one of global_step; every live
//  evaluator is told at once, so it need not wait for its next look at
//  model_dir. Only the chief's own connection may say so.
static void
s_on_checkpoint (s_broker_t *self, zframe_t *identity)
{
    const za_entry_t *chief = za_registry_entry (self->registry, ZA_TASK_CHIEF, 0);
    if (!chief || chief->state != ZA_ENTRY_LIVE || !chief->identity
        || !zframe_eq (chief->identity, identity)) {
        s_reply_error (self, identity, "bad_request", "checkpoint: only the live chief "
                       "announces checkpoints");
        return;
    }
    json_t *body = s_body (self, identity);
    if (!body)
        return;
    json_t *step = json_object_get (body, "global_step");
    if (!json_is_integer (step) || json_integer_value (step) < 0
        || json_object_size (body) != 1) {
        s_reply_error (self, identity, "bad_request", "checkpoint: the body must be "
                       "{\"global_step\": an integer >= 0} and nothing else");
        json_decref (body);
        return;
    }
    self->checkpoint_step = json_integer_value (step);
    for (int i = 0; i < self->config->counts [ZA_TASK_EVALUATOR]; i++) {
        const za_entry_t *evaluator = za_registry_entry (self->registry, ZA_TASK_EVALUATOR, i);
        if (evaluator->state == ZA_ENTRY_LIVE && evaluator->identity) {
            s_reply (self, evaluator->identity, ZA_OP_CHECKPOINT, json_incref (body));
            if (self->checkpoints_relayed++ == 0)
                za_info ("broker: the chief's checkpoints go on to the evaluators (step %"
                         PRId64 " first)", self->checkpoint_step);
        }
    }
    json_decref (body);
}

// ---------------------------------------------------------------------------
//  The state (zactor-top, Prometheus)

static json_t *
s_state (s_broker_t *self)
{
    const za_broker_config_t *config = self->config;
    int64_t step;
    json_t *roles = za_registry_rows (self->registry, &step, &self->json_failures);
    json_t *events = za_events_recent (self->events);
    json_t *state = json_pack ("{s:{s:I, s:s}, s:{s:i, s:s, s:i, s:f, s:s, s:b, s:I, s:I, s:I, "
                      "s:I, s:b, s:I}, s:I, s:b, s:o, s:o, s:O}",
                      "job", "max_steps", (json_int_t) config->max_steps,
                      "model_dir", config->model_dir? config->model_dir: "",
                      "broker", "pid", (int) getpid (), "host", self->host,
                      "restarts", config->restarts,
                      "uptime_secs", za_clock_mono () - self->start,
                      "endpoint", config->bind, "supervise", config->supervise,
                      "dropped", (json_int_t) self->dropped,
                      "refused", (json_int_t) self->refused,
                      "json_failures", (json_int_t) self->json_failures,
                      "checkpoints_relayed", (json_int_t) self->checkpoints_relayed,
                      "curve", za_curve_enabled (),
                      "refused_peers", (json_int_t) za_curve_refused (),
                      "global_step", (json_int_t) step,
                      "done", za_registry_done (self->registry),
                      "roles", roles, "events", events,
                      "event_counts", za_events_counts (self->events));
    if (state)
        json_object_set_new (state, "checkpoint_step", self->checkpoint_step >= 0
                             ? json_integer (self->checkpoint_step): json_null ());
    //  The trainers now, and (elastic) how often they changed.
    int members = 0;
    int64_t changes = za_registry_members (self->registry, &members);
    if (state)
        json_object_set_new (state, "membership",
                             json_pack ("{s:I, s:I, s:i, s:i, s:i}", "number",
                                        (json_int_t) changes, "changes",
                                        (json_int_t) (changes > 0? changes - 1: 0),
                                        "members", members, "min_workers",
                                        config->min_workers >= 0? config->min_workers
                                        : config->counts [ZA_TASK_WORKER],
                                        "max_workers", config->counts [ZA_TASK_WORKER]));
    return state;
}

//  Makes the metrics text from the state, at most twice a second.
#define METRICS_EVERY_SECS 0.5
static void
s_update_metrics (s_broker_t *self)
{
    double now = za_clock_mono ();
    if (!self->metrics || now - self->metrics_at < METRICS_EVERY_SECS)
        return;
    self->metrics_at = now;
    json_t *state = s_state (self);
    char *text = state? za_metrics_render (state): NULL;
    if (text)
        za_metrics_set (self->metrics, text);
    else
        s_json_failed (self, "the metrics");
    free (text);
    json_decref (state);
}

static void
s_on_message (s_broker_t *self)
{
    zmsg_t *msg = zmsg_recv (self->router);
    if (!msg)
        return;
    zframe_t *identity = zmsg_pop (msg);
    if (!identity || za_wire_decode (msg, self->in)) {
        self->dropped++;
        if (self->dropped <= ZA_BROKER_LOGGED_MAX)
            za_info ("broker: dropped a bad message (%" PRIu64 " so far): %s", self->dropped,
                     za_last_error ());
    }
    else
    switch (self->in->op) {
        case ZA_OP_REGISTER: s_on_register (self, identity); break;
        case ZA_OP_REPORT: s_on_report (self, identity); break;
        case ZA_OP_WATCH: s_reply (self, identity, ZA_OP_STATE, s_state (self)); break;
        case ZA_OP_CHECKPOINT: s_on_checkpoint (self, identity); break;
        case ZA_OP_PING:
            za_wire_msg_init (self->out, ZA_OP_PONG);
            self->out->seq = self->in->seq;
            za_wire_send (self->router, identity, self->out, NULL);
            break;
        default:
            s_reply_error (self, identity, "bad_request", "the broker does not serve %s",
                           za_op_name (self->in->op));
            break;
    }
    zframe_destroy (&identity);
    zmsg_destroy (&msg);
}

//  A broker that was itself stopped (SIGSTOP) or starved hears nobody for a
//  while: that is no sign the tasks went silent. Every task gets a fresh
//  heartbeat window, and their queued reports arrive next.
static void
s_check_pause (s_broker_t *self)
{
    double now = za_clock_mono ();
    double gap = now - self->last_turn;
    if (self->last_turn > 0 && gap > PAUSE_SECS) {
        za_info ("broker: paused for %.1f s (stopped or starved): every task gets a fresh "
                 "heartbeat window", gap);
        za_registry_postpone (self->registry, gap);
    }
    self->last_turn = now;
}

// ---------------------------------------------------------------------------

static void
s_broker_destroy (s_broker_t **self_p)
{
    s_broker_t *self = *self_p;
    if (!self)
        return;
    za_registry_destroy (&self->registry);
    za_events_destroy (&self->events);
    za_metrics_destroy (&self->metrics);
    zsock_destroy (&self->router);
    json_decref (self->job);
    free (self->in);
    free (self->out);
    free (self);
    *self_p = NULL;
}

static s_broker_t *
s_broker_new (const za_broker_config_t *config, zsock_t *pipe)
{
    s_broker_t *self = (s_broker_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->config = config;
    self->pipe = pipe;
    self->start = za_clock_mono ();
    self->checkpoint_step = -1;
    if (gethostname (self->host, sizeof self->host - 1))
        snprintf (self->host, sizeof self->host, "localhost");
    self->in = (za_wire_msg_t *) malloc (sizeof *self->in);
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    json_error_t error;
    self->job = config->job_text? json_loads (config->job_text, 0, &error): json_object ();
    if (!self->in || !self->out || !self->job) {
        za_error ("broker: the job is not JSON");
        goto fail;
    }
    self->events = za_events_new (config->model_dir, &self->json_failures);
    if (!self->events) {
        za_error ("broker: out of memory");
        goto fail;
    }
    self->registry = za_registry_new (config, self->events, self->host);
    if (!self->registry)
        goto fail;
    if (config->supervise && (!config->exe || !config->connect)) {
        za_error ("broker: supervising needs the program and the address to give roles");
        goto fail;
    }
    self->router = zsock_new (ZMQ_ROUTER);
    if (!self->router)
        goto fail;
    //  A control message is one header frame of at most 64 KiB. Frames up to
    //  ZA_BROKER_MAX_FRAME_BYTES are read and, when too large, dropped like
    //  any bad message (logged, counted, the connection kept); only a larger
    //  one makes libzmq close the connection before allocating it.
    zsock_set_maxmsgsize (self->router, ZA_BROKER_MAX_FRAME_BYTES);
    zsock_set_sndtimeo (self->router, 0);
    //  ZMTP heartbeats close the connections of peers that vanished without
    //  a word (a machine gone), so their pipes do not pile up.
    za_heartbeat_zmtp (self->router, config->heartbeat);
    if (za_curve_server (self->router))
        goto fail;
    if (zsock_bind (self->router, "%s", config->bind) < 0) {
        za_error ("broker: cannot bind %s: %s", config->bind, zmq_strerror (zmq_errno ()));
        goto fail;
    }
    if (config->metrics_bind && !(self->metrics = za_metrics_new (config->metrics_bind)))
        goto fail;
    return self;
fail:
    s_broker_destroy (&self);
    return NULL;
}

//  Takes what the router holds until it has been quiet for DRAIN_QUIET_MS
//  (at most DRAIN_MAX_MS in all).
static void
s_drain (s_broker_t *self, zpoller_t *poller)
{
    double until = za_clock_mono () + DRAIN_MAX_MS / 1000.0;
    while (za_clock_mono () < until && zpoller_wait (poller, DRAIN_QUIET_MS) == self->router)
        s_on_message (self);
}

void
za_broker_actor (zsock_t *pipe, void *args)
{
    const za_broker_config_t *config = (const za_broker_config_t *) args;
    s_broker_t *self = s_broker_new (config, pipe);
    zsock_signal (pipe, 0);
    if (!self) {
        zstr_sendx (pipe, "DONE", "1", NULL);
        return;
    }
    if (config->restarts > 0) {
        za_events_reload (self->events);
        za_events_add (self->events, "restarted", NULL, 0, 0, config->restarts,
                       "%s; restart %d, waiting %.0f s for the roles to re-register",
                       config->restart_cause? config->restart_cause: "", config->restarts,
                       2 * config->heartbeat.ivl_secs * config->heartbeat.liveness);
    }
    else
        za_events_add (self->events, "started", NULL, 0, 0, config->restarts, "on %s, %s",
                       config->bind, config->supervise? "supervising": "not supervising");
    zpoller_t *poller = zpoller_new (pipe, self->router, NULL);
    //  rc: 0 every task finished, 1 the job failed, 2 it stopped for
    //  preemption (our SIGTERM, or a task's requeue exit code).
    int rc = -1, terminated = 0;
    double preempt_deadline = 0;
    while (rc < 0 && !zsys_interrupted) {
        void *which = zpoller_wait (poller, POLL_MS);
        s_check_pause (self);
        if (which == pipe) {
            char *command = zstr_recv (pipe);
            terminated = !command || streq (command, "$TERM");
            zstr_free (&command);
            if (terminated)
                break;
        }
        else
        if (which == self->router)
            s_on_message (self);
        za_registry_supervise (self->registry);
        s_update_metrics (self);
        //  Preempted: every task we started writes its part and exits (the
        //  trainers agree on the step), within a grace.
        if ((za_preempt_requested () || za_registry_preempting (self->registry))
            && !preempt_deadline) {
            za_events_add (self->events, "preempting", NULL, 0, 0, config->restarts, "%s",
                           za_preempt_requested ()? "the broker got SIGTERM"
                                                  : "a task stopped for preemption");
            za_registry_preempt (self->registry);
            preempt_deadline = za_clock_mono () + ZA_PREEMPT_GRACE_SECS;
        }
        if (za_registry_failed (self->registry))
            rc = 1;
        else
        if (za_registry_done (self->registry)) {
            //  The tasks' last reports, sent as they exited, may come after
            //  their exits were reaped: they hold the final counts.
            s_drain (self, poller);
            rc = za_registry_preempting (self->registry)? 2: 0;
        }
        else
        if (preempt_deadline && za_clock_mono () > preempt_deadline)
            rc = 2;
    }
    if (rc != 0)
        za_registry_stop_all (self->registry);
    int64_t bad, images;
    za_registry_images (self->registry, &bad, &images);
    char counts [96] = "";
    if (images > 0)
        snprintf (counts, sizeof counts, "; " ZA_BROKER_SKIPPED_TEXT "%" PRId64 " of %" PRId64
                  " images", bad, images);
    za_events_add (self->events, rc == 0? "done": "stopped", NULL, 0, 0, config->restarts,
                   "%s%s", rc == 0? "every task finished"
                   : rc == 2? "preempted: run the job again to resume from its checkpoint"
                   : rc > 0? "the job failed": "interrupted", counts);
    zpoller_destroy (&poller);
    s_broker_destroy (&self);
    if (terminated)
        return;
    char code [16];
    snprintf (code, sizeof code, "%d", rc == 2? config->requeue_exit_code: rc == 0? 0: 1);
    zstr_sendx (pipe, "DONE", code, NULL);
    while (1) {
        char *command = zstr_recv (pipe);
        int term = !command || streq (command, "$TERM");
        zstr_free (&command);
        if (term)
            break;
    }
}
