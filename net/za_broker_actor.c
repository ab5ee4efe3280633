/*  za_broker_actor.c: the role's client actor (za_broker_client_actor):
    registers, then reports the whole registration and the role's
    statistics every interval. The broker may go away and come back at any
    time: the DEALER reconnects, the next report re-registers us, and the
    role never waits on it.                                                 */
#include "za/za_broker_client.h"
#include "za/za_preempt.h"
#include "za/za_process.h"
#include "za/za_trace.h"
#include "za/za_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 100
//  The role loop quiet this many heartbeat periods (ivl x liveness) is hung:
//  we stop reporting, and the broker sees a silent task.
#define HUNG_PERIODS 3
//  A step computing this long (or a quiet loop's limit, if longer) is hung.
#define COMPUTE_HUNG_SECS 600.0
#define UNSENT_SAY_SECS 10.0     //  a send that would not go is said at most this often
#define CLOCK_SAMPLES 16         //  round trips to the broker whose shortest is believed

typedef struct {
    const za_broker_client_config_t *config;
    zsock_t *pipe;
    za_broker_client_t *client;
    za_task_registration_t task;
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    char token [ZA_TASK_TOKEN_SIZE];    //  what the broker knows this task by
    int welcomed, viewed;
    int finished;                   //  DONE came: 1 + rc; 3: nothing more to do
    double last_sent, started;
    za_heartbeat_t beat;            //  the job's, once welcomed (before: our own)
    int hung;
    //  The broker's clock less ours, measured over each view's round trip:
    //  the last CLOCK_SAMPLES, of which the shortest trip is believed.
    double clock_rtt [CLOCK_SAMPLES], clock_offset [CLOCK_SAMPLES];
    int clock_samples;
    za_said_t unsent;              //  registers and reports the socket would not take
    char busy [512];                //  the broker's "busy" refusal, while we wait it out
} s_actor_t;

//  A register or report that could not go (the broker not reached, or away
//  long enough to fill the queue): said once, then every UNSENT_SAY_SECS.
static void
s_unsent (s_actor_t *self)
{
    za_info_every (&self->unsent, UNSENT_SAY_SECS, "%s: cannot reach the broker at %s: %s",
                   self->config->role, self->config->broker, za_last_error ());
}

static void
s_report (s_actor_t *self)
{
    za_role_stats_t *stats = self->config->stats;
    int state = self->finished? (self->finished == 1? ZA_ROLE_DONE: ZA_ROLE_FAILED)
              : stats? atomic_load (&stats->state): ZA_ROLE_STARTING;
    //  Only the process's own end is an end: after training the chief may
    //  still evaluate, and a role may still fail.
    if (!self->finished && (state == ZA_ROLE_DONE || state == ZA_ROLE_FAILED))
        state = ZA_ROLE_RUNNING;
    int64_t membership = self->config->membership
                       ? za_membership_number (self->config->membership): 0;
    if (za_broker_client_report (self->client, &self->task, (za_role_state_t) state, stats,
                                 membership))
        s_unsent (self);
    self->last_sent = za_clock_mono ();
}

//  1 when the role's loop has been quiet too long (it keeps `alive`), or
//  one step has computed for longer than any model on any core should.
static int
s_role_hung (s_actor_t *self, double now)
{
    za_role_stats_t *stats = self->config->stats;
    double alive = stats? atomic_load (&stats->alive): 0;
    double quiet_max = HUNG_PERIODS * self->beat.ivl_secs * self->beat.liveness;
    if (alive < 0)
        return !self->finished
            && now + alive > (quiet_max > COMPUTE_HUNG_SECS? quiet_max: COMPUTE_HUNG_SECS);
    return alive > 0 && !self->finished && now - alive > quiet_max;
}

static void
s_fail (s_actor_t *self, const char *why)
{
    zstr_sendx (self->pipe, "FAILED", why, NULL);
    self->finished = 3;             //  nothing more to do but wait for $TERM
}

//  The broker judges our reports by the job's heartbeat, which may not be
//  the one this process started with (a task the broker starts, or one
//  started by hand, gets the job only with its welcome): the role, once it
//  has applied the job, says it ("HEARTBEAT" on the pipe, "IVL_SECS
//  LIVENESS"). Reports keep its pace from then, and the broker's silence
//  is judged by it too.
static void
s_take_heartbeat (s_actor_t *self, const char *text)
{
    double ivl_secs = 0;
    int liveness = 0;
    if (!text || sscanf (text, "%lf %d", &ivl_secs, &liveness) != 2 || !(ivl_secs > 0)
        || liveness < 1)
        return;
    self->beat = (za_heartbeat_t) {ivl_secs, liveness};
    za_broker_client_peer (self->client)->beat = self->beat;
}

static void
s_publish_members (s_actor_t *self, const za_broker_reply_t *reply)
{
    za_membership_t *membership = self->config->membership;
    if (reply->membership <= za_membership_number (membership))
        return;
    za_members_t *members = (za_members_t *) calloc (1, sizeof *members);
    if (!members)
        return;
    members->number = reply->membership;
    members->count = reply->member_count;
    for (int m = 0; m < members->count; m++) {
        members->index [m] = reply->members [m];
        if (reply->members [m] < reply->ring_count)
            snprintf (members->endpoint [m], sizeof members->endpoint [m], "%s",
                      reply->ring [reply->members [m]]);
    }
    za_membership_set (membership, members);
    free (members);
}

//  A view's clock: the trace's times go on the broker's (za_trace_clock).
//  On the broker's machine (the same boot) its clock is ours; elsewhere the
//  offset is the broker's time less the middle of the round trip, of the
//  shortest trip lately (NTP's way). ZA_CLOCK_ESTIMATE=1 estimates on the
//  broker's machine too, to check the estimate (it should be near 0).
static void
s_take_clock (s_actor_t *self, const za_broker_reply_t *reply, double now)
{
    const char *estimate = getenv ("ZA_CLOCK_ESTIMATE");
    if (*reply->clock_boot && streq (reply->clock_boot, za_boot_id ())
        && !(estimate && streq (estimate, "1"))) {
        za_trace_clock (0, 0, ZA_TRACE_CLOCK_SAME_HOST);
        return;
    }
    double rtt = now - reply->clock_sent;
    if (rtt < 0)
        return;
    int at = self->clock_samples++ % CLOCK_SAMPLES;
    self->clock_rtt [at] = rtt;
    self->clock_offset [at] = reply->clock_broker - (reply->clock_sent + now) / 2;
    int best = 0, count = self->clock_samples < CLOCK_SAMPLES? self->clock_samples
                                                              : CLOCK_SAMPLES;
    for (int i = 1; i < count; i++)
        if (self->clock_rtt [i] < self->clock_rtt [best])
            best = i;
    za_trace_clock (self->clock_offset [best], self->clock_rtt [best],
                    ZA_TRACE_CLOCK_ESTIMATED);
}

static void
s_on_reply (s_actor_t *self)
{
    za_peer_t *peer = za_broker_client_peer (self->client);
    int was_silent = peer->silent;
    za_broker_reply_t reply;
    memset (&reply, 0, sizeof reply);
    int rc = za_broker_client_recv (self->client, &reply);
    if (was_silent && !peer->silent)
        za_info ("%s: the broker at %s is back", self->config->role, self->config->broker);
    if (rc) {
        za_info ("%s: dropped a message from the broker: %s", self->config->role,
                 za_last_error ());
        return;
    }
    if (reply.op == ZA_OP_VIEW && reply.clock_sent >= 0)
        s_take_clock (self, &reply, za_clock_mono ());
    //  The job stops for preemption: as if SIGTERM came here (where this
    //  process handles it).
    if (reply.op == ZA_OP_VIEW && reply.preempting && za_preempt_handled ()
        && !za_preempt_requested ()) {
        za_info ("%s: the broker says the job stops for preemption", self->config->role);
        za_preempt_request ();
    }
    //  An elastic job's members: the role reads them between steps.
    if (reply.op == ZA_OP_VIEW && reply.ready && reply.membership > 0
        && self->config->membership)
        s_publish_members (self, &reply);
    if (reply.op == ZA_OP_WELCOME && !self->welcomed) {
        self->welcomed = 1;
        self->task.index = reply.index;
        if (*reply.token)
            memcpy (self->token, reply.token, sizeof self->token);
        char index_text [16];
        snprintf (index_text, sizeof index_text, "%d", reply.index);
        zstr_sendx (self->pipe, "WELCOME", index_text, reply.job, reply.endpoint, NULL);
        s_report (self);
    }
    else
    if (reply.op == ZA_OP_VIEW && self->welcomed && !self->viewed && reply.ready) {
        self->viewed = 1;
        zmsg_t *view = zmsg_new ();
        zmsg_addstr (view, "VIEW");
        zmsg_addstrf (view, "%d", reply.ps_count);
        for (int p = 0; p < reply.ps_count; p++)
            zmsg_addstr (view, reply.ps [p]);
        zmsg_addstrf (view, "%d", reply.ring_count);
        for (int r = 0; r < reply.ring_count; r++)
            zmsg_addstr (view, reply.ring [r]);
        zmsg_send (&view, self->pipe);
    }
    else
    if (reply.op == ZA_OP_CHECKPOINT && self->welcomed) {
        char step [32];
        snprintf (step, sizeof step, "%" PRId64, reply.global_step);
        zstr_sendx (self->pipe, "CHECKPOINT", step, NULL);
    }
    else
    if (reply.op == ZA_OP_ERROR) {
        //  Our index still held by a process the broker has not yet heard
        //  go silent (this task killed and restarted at once, by hand or by
        //  Kubernetes): we go on registering until the broker declares it
        //  lost, for --timeout-secs at most.
        if (!self->welcomed && streq (reply.code, "busy")) {
            if (!*self->busy)
                za_info ("%s: the broker at %s says %s: registering again until it is "
                         "declared lost (within %.0f s)", self->config->role,
                         self->config->broker, reply.error, self->config->timeout_secs);
            snprintf (self->busy, sizeof self->busy, "%s", reply.error);
        }
        else
        if (self->welcomed && streq (reply.code, "replaced")) {
            //  Another process runs our task: nothing of ours may reach the
            //  job any more (a push, a checkpoint), so no orderly stop.
            fprintf (stderr, "zactor: error: %s %d: the broker at %s says %s: this process "
                     "was replaced, and exits (%d)\n", self->config->role, self->task.index,
                     self->config->broker, reply.error, ZA_EXIT_REPLACED);
            _exit (ZA_EXIT_REPLACED);
        }
        else
        if (!self->welcomed) {
            char why [512];
            snprintf (why, sizeof why, "the broker at %s refused us: %s", self->config->broker,
                      reply.error);
            s_fail (self, why);
        }
        else
            za_info ("%s %d: the broker says: %s (%s)", self->config->role, self->task.index,
                     reply.error, reply.code);
    }
    za_broker_reply_clear (&reply);
}

static int
s_on_pipe (s_actor_t *self)
{
    char *command = NULL, *arg = NULL;
    if (zstr_recvx (self->pipe, &command, &arg, NULL) < 1 || streq (command, "$TERM")) {
        zstr_free (&command);
        zstr_free (&arg);
        return -1;
    }
    //  No broker to tell (its address did not connect): only $TERM matters.
    if (!self->client) {
        zstr_free (&command);
        zstr_free (&arg);
        return 0;
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
    else
    if (streq (command, "HEARTBEAT"))
        s_take_heartbeat (self, arg);
    else
    if (streq (command, "CHECKPOINT") && arg && self->welcomed)
        za_broker_client_checkpoint (self->client, strtoll (arg, NULL, 10));
    zstr_free (&command);
    zstr_free (&arg);
    return 0;
}

//  What an interval brings: a register until welcomed, then a report (none
//  while the role's loop is hung), and news of a silent broker.
static void
s_on_interval (s_actor_t *self, double now)
{
    const za_broker_client_config_t *config = self->config;
    if (!self->welcomed) {
        if (now - self->started > config->timeout_secs) {
            char why [1024];
            if (*self->busy)
                snprintf (why, sizeof why, "the broker at %s refused us for %.0f s: %s",
                          config->broker, config->timeout_secs, self->busy);
            else
                snprintf (why, sizeof why, "no broker answered at %s within %.0f s (is it "
                          "running, the same zactor version, and given the same --certs DIR "
                          "as this task, or none as this one? A broker with --certs answers "
                          "only its cluster's certificate)", config->broker,
                          config->timeout_secs);
            s_fail (self, why);
            return;
        }
        if (za_broker_client_register (self->client, &self->task))
            s_unsent (self);
        self->last_sent = now;
        return;
    }
    int hung = s_role_hung (self, now);
    if (hung != self->hung) {
        self->hung = hung;
        za_info ("%s %d: %s", config->role, self->task.index, hung
                 ? "the role's loop is quiet (hung?): reports stop so the broker sees it"
                 : "the role's loop goes on again");
    }
    if (!hung)
        s_report (self);
    else
        self->last_sent = now;
    if (za_peer_went_silent (za_broker_client_peer (self->client), now))
        za_info ("%s %d: the broker at %s is silent; training goes on", config->role,
                 self->task.index, config->broker);
}

void
za_broker_client_actor (zsock_t *pipe, void *args)
{
    const za_broker_client_config_t *config = (const za_broker_client_config_t *) args;
    s_actor_t self_data, *self = &self_data;
    memset (self, 0, sizeof *self);
    self->config = config;
    self->pipe = pipe;
    self->task.type = ZA_TASK_CHIEF;
    for (int k = ZA_TASK_CHIEF; k <= ZA_TASK_EVALUATOR; k++)
        if (config->role && streq (config->role, za_task_type_name ((za_task_type_t) k)))
            self->task.type = (za_task_type_t) k;
    self->task.index = config->index;
    self->task.host = config->host;
    self->beat = config->heartbeat;
    self->task.pid = (int) getpid ();
    self->task.restarts = config->restarts;
    self->task.endpoint = self->endpoint;
    //  A task the broker started knows its token from the start.
    const char *token = getenv ("ZA_TASK_TOKEN");
    if (za_task_token_valid (token))
        memcpy (self->token, token, sizeof self->token);
    self->task.token = self->token;
    self->client = za_broker_client_new (config->broker, config->heartbeat);
    zsock_signal (pipe, 0);
    if (!self->client)
        s_fail (self, "cannot connect to the broker (is the address tcp://HOST:PORT?)");
    self->started = za_clock_mono ();
    zpoller_t *poller = zpoller_new (pipe, NULL);
    if (self->client)
        zpoller_add (poller, za_broker_client_sock (self->client));
    while (!zsys_interrupted) {
        void *which = zpoller_wait (poller, POLL_MS);
        if (which == pipe && s_on_pipe (self))
            break;
        if (self->client && which == za_broker_client_sock (self->client))
            s_on_reply (self);
        double now = za_clock_mono ();
        if (self->client && self->finished <= 2 && now - self->last_sent >= self->beat.ivl_secs)
            s_on_interval (self, now);
    }
    zpoller_destroy (&poller);
    za_broker_client_destroy (&self->client);
}
