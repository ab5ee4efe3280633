/*  za_broker_client.c: a role process's side of the broker: register, then
    report the whole registration and the role's statistics every interval.
    The broker may go away and come back at any time: the DEALER reconnects,
    the next report re-registers us, and the role never waits on it.       */
#include "za/za_broker_client.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 100
#define SEND_HWM 16
#define LAST_REPORT_LINGER_MS 1000
//  The role loop quiet this many heartbeat periods (ivl x liveness) is hung:
//  we stop reporting, and the broker sees a silent task.
#define HUNG_PERIODS 3

typedef struct {
    const za_broker_client_config_t *config;
    zsock_t *pipe;
    zsock_t *dealer;
    za_wire_msg_t *in, *out;
    int index;
    int welcomed, viewed;
    char endpoint [300];
    int finished;                   //  DONE came: 1 + rc
    double last_sent, last_heard, started;
    int broker_silent, hung;
    uint64_t seq;
} s_client_t;

static void
s_send (s_client_t *self, za_op_t op, json_t *body)
{
    char *text = json_dumps (body, JSON_COMPACT);
    json_decref (body);
    if (!text)
        return;
    za_wire_msg_init (self->out, op);
    self->out->seq = ++self->seq;
    self->out->body = text;
    self->out->body_len = strlen (text);
    za_wire_send (self->dealer, NULL, self->out, NULL);      //  dropped when the queue is full
    free (text);
    self->last_sent = za_clock_mono ();
}

static json_t *
s_registration (s_client_t *self)
{
    const za_broker_client_config_t *config = self->config;
    return json_pack ("{s:s, s:i, s:s, s:i, s:i, s:s}", "role", config->role,
                      "index", self->welcomed? self->index: config->index,
                      "host", config->host, "pid", (int) getpid (),
                      "restarts", config->restarts, "endpoint", self->endpoint);
}

static void
s_report (s_client_t *self)
{
    json_t *body = s_registration (self);
    za_role_stats_t *stats = self->config->stats;
    int state = self->finished? (self->finished == 1? ZA_ROLE_DONE: ZA_ROLE_FAILED)
              : stats? atomic_load (&stats->state): ZA_ROLE_STARTING;
    //  Only the process's own end is an end: after training the chief may
    //  still evaluate, and a role may still fail.
    if (!self->finished && (state == ZA_ROLE_DONE || state == ZA_ROLE_FAILED))
        state = ZA_ROLE_RUNNING;
    json_object_set_new (body, "state", json_string (za_role_state_name ((za_role_state_t) state)));
    if (stats) {
        json_object_set_new (body, "global_step", json_integer (atomic_load (&stats->global_step)));
        json_object_set_new (body, "loss", json_real (atomic_load (&stats->loss)));
        json_object_set_new (body, "steps_per_sec", json_real (atomic_load (&stats->steps_per_sec)));
        json_object_set_new (body, "examples_per_sec",
                             json_real (atomic_load (&stats->examples_per_sec)));
        int64_t eval_step = atomic_load (&stats->eval_step);
        if (eval_step >= 0) {
            json_object_set_new (body, "eval_step", json_integer (eval_step));
            json_object_set_new (body, "eval_accuracy",
                                 json_real (atomic_load (&stats->eval_accuracy)));
        }
    }
    s_send (self, ZA_OP_REPORT, body);
}

//  1 when the role's loop has been quiet too long (it keeps `alive`).
static int
s_role_hung (s_client_t *self, double now)
{
    za_role_stats_t *stats = self->config->stats;
    double alive = stats? atomic_load (&stats->alive): 0;
    double quiet_max = HUNG_PERIODS * self->config->heartbeat_ivl_secs
                     * self->config->heartbeat_liveness;
    return alive > 0 && !self->finished && now - alive > quiet_max;
}

static void
s_on_reply (s_client_t *self)
{
    zmsg_t *msg = zmsg_recv (self->dealer);
    if (!msg)
        return;
    self->last_heard = za_clock_mono ();
    if (self->broker_silent) {
        za_info ("%s: the broker at %s is back", self->config->role, self->config->broker);
        self->broker_silent = 0;
    }
    json_t *body = NULL;
    if (za_wire_decode (msg, self->in) == 0 && self->in->body)
        body = json_loadb (self->in->body, self->in->body_len, 0, NULL);
    za_wire_msg_t *in = self->in;
    if (in->op == ZA_OP_WELCOME && !self->welcomed && json_is_object (body)) {
        json_t *index = json_object_get (body, "index");
        json_t *job = json_object_get (body, "job");
        const char *endpoint = json_string_value (json_object_get (body, "endpoint"));
        char *job_text = job? json_dumps (job, JSON_COMPACT): NULL;
        if (json_is_integer (index) && job_text) {
            self->welcomed = 1;
            self->index = (int) json_integer_value (index);
            char index_text [16];
            snprintf (index_text, sizeof index_text, "%d", self->index);
            zstr_sendx (self->pipe, "WELCOME", index_text, job_text, endpoint? endpoint: "",
                        NULL);
            s_report (self);
        }
        free (job_text);
    }
    else
    if (in->op == ZA_OP_VIEW && self->welcomed && !self->viewed && json_is_object (body)
        && json_is_true (json_object_get (body, "ready"))) {
        char *view = json_dumps (body, JSON_COMPACT);
        if (view) {
            self->viewed = 1;
            zstr_sendx (self->pipe, "VIEW", view, NULL);
            free (view);
        }
    }
    else
    if (in->op == ZA_OP_ERROR) {
        if (!self->welcomed) {
            char why [512];
            snprintf (why, sizeof why, "the broker at %s refused us: %s", self->config->broker,
                      in->error);
            zstr_sendx (self->pipe, "FAILED", why, NULL);
            self->finished = 3;         //  nothing more to do but wait for $TERM
        }
        else
            za_info ("%s %d: the broker says: %s (%s)", self->config->role, self->index,
                     in->error, in->code);
    }
    json_decref (body);
    zmsg_destroy (&msg);
}

static int
s_on_pipe (s_client_t *self)
{
    char *command = NULL, *arg = NULL;
    if (zstr_recvx (self->pipe, &command, &arg, NULL) < 1 || streq (command, "$TERM")) {
        zstr_free (&command);
        zstr_free (&arg);
        return -1;
    }
    if (streq (command, "ENDPOINT") && arg) {
        snprintf (self->endpoint, sizeof self->endpoint, "%s", arg);
        s_report (self);
    }
    else
    if (streq (command, "DONE")) {
        self->finished = arg && streq (arg, "0")? 1: 2;
        s_report (self);
    }
    zstr_free (&command);
    zstr_free (&arg);
    return 0;
}

void
za_broker_client_actor (zsock_t *pipe, void *args)
{
    const za_broker_client_config_t *config = (const za_broker_client_config_t *) args;
    s_client_t self_data, *self = &self_data;
    memset (self, 0, sizeof *self);
    self->config = config;
    self->pipe = pipe;
    self->in = (za_wire_msg_t *) malloc (sizeof *self->in);
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->dealer = zsock_new (ZMQ_DEALER);
    zsock_signal (pipe, 0);
    if (!self->in || !self->out || !self->dealer
        || zsock_connect (self->dealer, "%s", config->broker) < 0) {
        zstr_sendx (pipe, "FAILED", "cannot connect to the broker (is the address "
                    "tcp://HOST:PORT?)", NULL);
        self->finished = 3;
    }
    else {
        zsock_set_sndhwm (self->dealer, SEND_HWM);
        zsock_set_sndtimeo (self->dealer, 0);
        zsock_set_maxmsgsize (self->dealer, ZA_WIRE_MAX_HEADER_BYTES + 1024);
    }
    self->started = self->last_heard = za_clock_mono ();
    double silent_max = config->heartbeat_ivl_secs * config->heartbeat_liveness;
    zpoller_t *poller = zpoller_new (pipe, self->dealer, NULL);
    while (!zsys_interrupted) {
        void *which = zpoller_wait (poller, POLL_MS);
        if (which == pipe && s_on_pipe (self))
            break;
        if (which == self->dealer)
            s_on_reply (self);
        if (self->finished > 2)
            continue;
        double now = za_clock_mono ();
        if (!self->welcomed && now - self->started > config->timeout_secs) {
            char why [512];
            snprintf (why, sizeof why, "no broker answered at %s within %.0f s (is it "
                      "running, and the same zactor version?)", config->broker,
                      config->timeout_secs);
            zstr_sendx (pipe, "FAILED", why, NULL);
            self->finished = 3;
            continue;
        }
        if (now - self->last_sent < config->heartbeat_ivl_secs)
            continue;
        if (!self->welcomed) {
            s_send (self, ZA_OP_REGISTER, s_registration (self));
            continue;
        }
        int hung = s_role_hung (self, now);
        if (hung != self->hung) {
            self->hung = hung;
            za_info ("%s %d: %s", config->role, self->index, hung
                     ? "the role's loop is quiet (hung?): reports stop so the broker sees it"
                     : "the role's loop goes on again");
        }
        if (!hung)
            s_report (self);
        else
            self->last_sent = now;
        if (!self->broker_silent && now - self->last_heard > silent_max) {
            za_info ("%s %d: the broker at %s is silent; training goes on", config->role,
                     self->index, config->broker);
            self->broker_silent = 1;
        }
    }
    zpoller_destroy (&poller);
    if (self->dealer)
        zsock_set_linger (self->dealer, LAST_REPORT_LINGER_MS);
    zsock_destroy (&self->dealer);
    free (self->in);
    free (self->out);
}
