/*  za_broker.c: the broker actor: registry, cluster view, heartbeats,
    supervision with backoff, events, and the state zactor-top shows.

    A task (role kind, index) goes through these states:
      EMPTY     declared, nobody has it yet (supervise: about to be started)
      STARTED   supervise: its process was started, it has not registered
      LIVE      registered, reporting every interval
      LOST      not supervised: it went silent; it may come back
      KILLED    supervise: we killed it (missed heartbeats); waiting to reap it
      BACKOFF   supervise: failed; started again at restart_at
      DONE      finished with exit 0 (or training was over when it failed)
    on the events of s_transitions below, one table of (state, event) ->
    (action, next state); a failure's next state is its action's choice
    (backoff, lost, done, or the job fails). The job is done when every task
    is DONE; it fails when a task would be restarted more than max_restarts
    times. A task's liveness is a za_peer_t: any register or report is a
    heartbeat.                                                               */
#define _GNU_SOURCE                     //  sigabbrev_np
#include "za/za_broker.h"
#include "za/za_broker_client.h"
#include "za/za_curve.h"
#include "za/za_checkpoint.h"
#include "za/za_metrics.h"
#include "za/za_cluster.h"
#include "za/za_peer.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define POLL_MS 100
#define REGISTER_GRACE_SECS 60.0        //  a started process has this long to register
#define STABLE_SECS 30.0                //  running this long resets the backoff
#define STOP_GRACE_SECS 5.0             //  SIGTERM, then SIGKILL after this
#define MAX_LOGGED_DROPS 20
#define PAUSE_SECS 1.0                  //  a loop turn this late means we were paused
#define TEXT_MAX 256

typedef enum {
    T_EMPTY, T_STARTED, T_LIVE, T_LOST, T_KILLED, T_BACKOFF, T_DONE
} s_task_state_t;

static const char *s_task_state_names [] = {
    "empty", "started", "live", "lost", "killed", "backoff", "done"
};

typedef struct {
    int kind, index;
    s_task_state_t state;
    pid_t pid;                  //  as registered, or as started
    int own;                    //  1: our child (we reap it)
    char host [TEXT_MAX];
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    char token [ZA_TASK_TOKEN_SIZE];    //  what it claims itself by on another connection
    zframe_t *identity;
    za_peer_t peer;             //  its heartbeats: every register and report
    double since;               //  when it was started or registered
    int restarts;
    int failures;               //  in a row, for the backoff
    double restart_at;
    char cause [TEXT_MAX];      //  why we killed it, until it is reaped
    //  Its last report.
    char role_state [16];
    int64_t step;
    double loss, steps_per_sec, examples_per_sec;
    int64_t eval_step;
    double eval_accuracy;
    int ring_rank;              //  -1: not in a ring
    double wait_ms;
} s_task_t;

//  A register or report, every field checked (s_parse_registration).
typedef struct {
    int kind;
    int index;                  //  -1: any free one (a register)
    char host [TEXT_MAX];
    pid_t pid;
    int restarts;
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    char token [ZA_TASK_TOKEN_SIZE];    //  "" when it named none
    //  A report's statistics.
    char state [16];
    int64_t global_step;
    double loss, steps_per_sec, examples_per_sec;
    int64_t eval_step;          //  -1: none
    double eval_accuracy;
    int ring_rank;              //  -1: none
    double wait_ms;
} s_registration_t;

typedef struct {
    double time;
    char *text;                 //  one JSON object, owned
} s_event_t;

typedef struct {
    const za_broker_config_t *config;
    zsock_t *pipe;
    zsock_t *router;
    json_t *job;
    s_task_t tasks [ZA_BROKER_ROLE_KINDS][ZA_BROKER_MAX_TASKS];
    s_event_t events [ZA_BROKER_EVENTS];
    int event_count;            //  ever; the ring holds the last ZA_BROKER_EVENTS
    double start;
    char host [TEXT_MAX];
    uint64_t dropped;           //  messages that did not decode
    uint64_t refused;           //  requests answered with an error
    uint64_t json_failures;     //  replies or rows that could not be built
    za_wire_msg_t *in, *out;
    int failed;
    double last_turn;           //  when the loop last ran
    json_t *event_counts;       //  {"event": times}, over the job (reloaded on a restart)
    za_metrics_t *metrics;      //  NULL: no --metrics-bind
    double metrics_at;          //  when the metrics text was last made
    int64_t checkpoint_step;    //  the newest checkpoint the chief announced; -1: none
    uint64_t checkpoints_relayed;   //  checkpoint messages sent on to evaluators
} s_broker_t;

void
za_broker_config_init (za_broker_config_t *config)
{
    memset (config, 0, sizeof *config);
    config->heartbeat = za_heartbeat_default ();
    config->max_restarts = ZA_BROKER_MAX_RESTARTS;
    config->backoff_secs = 0.5;
    config->backoff_max_secs = 10.0;
}

double
za_broker_backoff (const za_broker_config_t *config, int failures)
{
    double delay = config->backoff_secs;
    for (int i = 0; i < failures && delay < config->backoff_max_secs; i++)
        delay *= 2;
    return delay < config->backoff_max_secs? delay: config->backoff_max_secs;
}

static double
s_silent_max (s_broker_t *self)
{
    return self->config->heartbeat.ivl_secs * self->config->heartbeat.liveness;
}

static const char *
s_kind_name (int kind)
{
    return za_task_type_name ((za_task_type_t) kind);
}

static int
s_kind_parse (const char *name)
{
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        if (name && streq (name, s_kind_name (kind)))
            return kind;
    return -1;
}

static void s_json_failed (s_broker_t *self, const char *what);

// ---------------------------------------------------------------------------
//  Events: kept in a ring, appended to MODEL_DIR/events.jsonl, logged.

//  Counts an event of its kind (zactor_events_total).
static void
s_count_event (s_broker_t *self, const char *event)
{
    if (!self->event_counts || !event)
        return;
    json_t *count = json_object_get (self->event_counts, event);
    json_object_set_new (self->event_counts, event,
                         json_integer (count? json_integer_value (count) + 1: 1));
}

static void
s_event (s_broker_t *self, const s_task_t *task, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static void
s_event (s_broker_t *self, const s_task_t *task, const char *event, const char *fmt, ...)
{
    char cause [4 * TEXT_MAX] = "";
    if (fmt) {
        va_list args;
        va_start (args, fmt);
        vsnprintf (cause, sizeof cause, fmt, args);
        va_end (args);
    }
    double now = za_clock_wall ();
    json_t *json = json_pack ("{s:f, s:s, s:s, s:i, s:i, s:s, s:i}", "time", now,
                              "event", event,
                              "role", task? s_kind_name (task->kind): "broker",
                              "index", task? task->index: 0,
                              "pid", task? (int) task->pid: (int) getpid (), "cause", cause,
                              "restarts", task? task->restarts: self->config->restarts);
    char *text = json? json_dumps (json, JSON_COMPACT): NULL;
    json_decref (json);
    if (!text) {
        s_json_failed (self, "an event");
        return;
    }
    s_event_t *slot = &self->events [self->event_count++ % ZA_BROKER_EVENTS];
    slot->time = now;
    free (slot->text);
    slot->text = strdup (text);
    s_count_event (self, event);
    if (self->config->model_dir) {
        char path [4096];
        snprintf (path, sizeof path, "%s/events.jsonl", self->config->model_dir);
        FILE *file = fopen (path, "a");
        if (file) {
            fprintf (file, "%s\n", text);
            fclose (file);
        }
    }
    free (text);
    if (task)
        za_info ("broker: %s %d (pid %d): %s%s%s", s_kind_name (task->kind), task->index,
                 (int) task->pid, event, *cause? ": ": "", cause);
    else
        za_info ("broker: %s%s%s", event, *cause? ": ": "", cause);
}

//  A restarted broker shows the events of the one before it.
static void
s_events_reload (s_broker_t *self)
{
    if (!self->config->model_dir)
        return;
    char path [4096];
    snprintf (path, sizeof path, "%s/events.jsonl", self->config->model_dir);
    FILE *file = fopen (path, "r");
    if (!file)
        return;
    char *line = NULL;
    size_t capacity = 0;
    while (getline (&line, &capacity, file) > 0) {
        json_t *json = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        if (json && json_is_object (json)) {
            s_event_t *slot = &self->events [self->event_count++ % ZA_BROKER_EVENTS];
            slot->time = json_number_value (json_object_get (json, "time"));
            line [strcspn (line, "\n")] = 0;
            free (slot->text);
            slot->text = strdup (line);
            s_count_event (self, json_string_value (json_object_get (json, "event")));
        }
        json_decref (json);
    }
    free (line);
    fclose (file);
}

// ---------------------------------------------------------------------------
//  Processes

//  "exit code 1", "killed by signal 9 (SIGKILL)".
static void
s_describe_status (int status, char *text, size_t size)
{
    if (WIFEXITED (status))
        snprintf (text, size, "exit code %d", WEXITSTATUS (status));
    else
    if (WIFSIGNALED (status))
        snprintf (text, size, "killed by signal %d (SIG%s)", WTERMSIG (status),
                  sigabbrev_np (WTERMSIG (status))? sigabbrev_np (WTERMSIG (status)): "?");
    else
        snprintf (text, size, "status %d", status);
}

//  1 if pid is the zactor role process of this task on this host, as the
//  supervisor starts them (--broker ... --role R --index I): never signal a
//  process that merely reuses an old pid, or that a report named falsely.
static int
s_is_role_process (const s_task_t *task)
{
    if (task->pid <= 0)
        return 0;
    char path [64], args [4096], role [64], index [32];
    snprintf (path, sizeof path, "/proc/%d/cmdline", (int) task->pid);
    FILE *file = fopen (path, "r");
    if (!file)
        return 0;
    size_t n = fread (args, 1, sizeof args - 1, file);
    fclose (file);
    for (size_t i = 0; i < n; i++)
        if (args [i] == 0)
            args [i] = ' ';
    args [n] = 0;
    snprintf (role, sizeof role, " --role %s ", s_kind_name (task->kind));
    snprintf (index, sizeof index, " --index %d", task->index);
    return strstr (args, " --broker ") && strstr (args, role) && strstr (args, index);
}

static int
s_is_local (s_broker_t *self, const s_task_t *task)
{
    return task->own || streq (task->host, self->host) || streq (task->host, "127.0.0.1")
        || streq (task->host, "localhost");
}

static int
s_spawn (s_broker_t *self, s_task_t *task)
{
    const za_broker_config_t *config = self->config;
    char index [16], restarts [32], log [4096];
    snprintf (index, sizeof index, "%d", task->index);
    snprintf (restarts, sizeof restarts, "ZA_RESTARTS=%d", task->restarts);
    //  The child claims its task with this token, which only it is told.
    char token [32 + ZA_TASK_TOKEN_SIZE];
    if (za_task_token_new (task->token))
        return -1;
    snprintf (token, sizeof token, "ZA_TASK_TOKEN=%s", task->token);
    snprintf (log, sizeof log, "%s/%s-%d.log", config->log_dir? config->log_dir: ".",
              s_kind_name (task->kind), task->index);
    if (task->own && task->pid > 0) {
        //  The process before: make sure it is gone, and reap it.
        if (s_is_role_process (task))
            kill (task->pid, SIGKILL);
        for (int tries = 0; tries < 100 && waitpid (task->pid, NULL, WNOHANG) == 0; tries++)
            zclock_sleep (10);
        task->own = 0;
    }
    char *argv [] = {(char *) config->exe, "--broker", (char *) config->connect, "--role",
                     (char *) s_kind_name (task->kind), "--index", index, NULL, NULL, NULL};
    int argc = 7;
    if (config->certs) {
        argv [argc++] = "--certs";
        argv [argc++] = (char *) config->certs;
    }
    else
    if (config->insecure)
        argv [argc++] = "--insecure";
    const char *env [] = {restarts, token, NULL};
    pid_t pid = za_broker_spawn (config->exe, argv, env, log, 0);
    if (pid < 0)
        return -1;
    task->pid = pid;
    task->own = 1;
    task->state = T_STARTED;
    task->since = za_clock_mono ();
    task->cause [0] = 0;
    zframe_destroy (&task->identity);
    s_event (self, task, task->restarts? "restarted": "started", "log %s", log);
    return 0;
}

pid_t
za_broker_spawn (const char *exe, char *const *argv, const char *const *env, const char *log,
                 int own_group)
{
    int count = 0, extra = 0;
    while (environ [count])
        count++;
    while (env && env [extra])
        extra++;
    char **envp = (char **) calloc ((size_t) (count + extra + 1), sizeof (char *));
    if (!envp)
        return za_error ("cannot start %s: out of memory", exe);
    int at = 0;
    for (int i = 0; i < count; i++) {
        //  A variable given replaces the inherited one of that name.
        int replaced = 0;
        for (int e = 0; e < extra && !replaced; e++) {
            size_t name = strcspn (env [e], "=");
            replaced = strncmp (environ [i], env [e], name + 1) == 0;
        }
        if (!replaced)
            envp [at++] = environ [i];
    }
    for (int e = 0; e < extra; e++)
        envp [at++] = (char *) env [e];
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init (&actions);
    posix_spawn_file_actions_addopen (&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen (&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2 (&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init (&attr);
    if (own_group) {
        posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup (&attr, 0);
    }
    pid_t pid;
    int rc = posix_spawn (&pid, exe, &actions, &attr, argv, envp);
    posix_spawnattr_destroy (&attr);
    posix_spawn_file_actions_destroy (&actions);
    free (envp);
    if (rc != 0)
        return za_error ("cannot start %s: %s", exe, strerror (rc));
    return pid;
}

//  The training is over for a chief, worker or ps when the final checkpoint
//  exists: one that fails then is not started again.
static int
s_training_over (s_broker_t *self, const s_task_t *task)
{
    if (task->kind == ZA_TASK_EVALUATOR || !self->config->model_dir)
        return 0;
    int64_t *steps = NULL;
    int count = za_checkpoint_list (self->config->model_dir, &steps);
    int over = count > 0 && steps [count - 1] >= self->config->max_steps;
    free (steps);
    return over;
}

// ---------------------------------------------------------------------------
//  A task's life, as a state table

typedef enum {
    E_START_DUE,                //  supervise: its start (or restart) is due
    E_REGISTERED,               //  a register or report named it (a heartbeat)
    E_REPORTED_DONE,            //  its report says it finished
    E_REPORTED_FAILED,          //  its report says it failed
    E_EXITED_OK,                //  our child exited 0
    E_EXITED_FAILED,            //  our child failed (exit code, signal, gone)
    E_SILENT,                   //  it missed interval x liveness of heartbeats
    E_NOT_REGISTERED            //  started, and no register came in time
} s_task_event_t;

//  What came with an event.
typedef struct {
    const char *cause;          //  how it failed, for the events
    zframe_t *identity;         //  E_REGISTERED: who sent it
    const s_registration_t *reg;    //  E_REGISTERED: what it says of itself
} s_happening_t;

typedef int (s_action_fn) (s_broker_t *self, s_task_t *task, const s_happening_t *what);

//  The job fails, or the task waits out its backoff: the next state is
//  chosen here (BACKOFF, LOST, DONE when training is over).
static int
s_fail (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    const za_broker_config_t *config = self->config;
    zframe_destroy (&task->identity);
    if (s_training_over (self, task)) {
        task->state = T_DONE;
        s_event (self, task, "done", "%s after the final checkpoint: not restarted",
                 what->cause);
        return 0;
    }
    if (!config->supervise) {
        task->state = T_LOST;
        s_event (self, task, "lost", "%s", what->cause);
        return 0;
    }
    if (task->restarts >= config->max_restarts) {
        s_event (self, task, "gave_up", "%s, after %d restarts (--max-restarts %d)",
                 what->cause, task->restarts, config->max_restarts);
        self->failed = 1;
        return 0;
    }
    if (za_clock_mono () - task->since > STABLE_SECS)
        task->failures = 0;
    double delay = za_broker_backoff (config, task->failures);
    task->failures++;
    task->restarts++;
    task->state = T_BACKOFF;
    task->restart_at = za_clock_mono () + delay;
    s_event (self, task, "failed", "%s; restart %d in %.1f s", what->cause, task->restarts,
             delay);
    return 0;
}

//  Starts the task's process (STARTED); DONE instead when a restarted broker
//  finds training over before it began; a failure's choice when it cannot.
static int
s_start (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    (void) what;
    if (task->state == T_EMPTY && self->config->restarts > 0 && s_training_over (self, task)) {
        task->state = T_DONE;
        s_event (self, task, "done", "training was over before this broker began");
        return 0;
    }
    if (s_spawn (self, task) == 0)
        return 0;
    za_info ("%s", za_last_error ());
    s_happening_t failure = {.cause = "could not be started"};
    return s_fail (self, task, &failure);
}

//  1 when tasks of `kind` serve at an endpoint of their own: the ps, and
//  with the all-reduce the chief and the workers (the ring).
static int
s_serves (const s_broker_t *self, za_task_type_t kind)
{
    return kind == ZA_TASK_PS
        || (self->config->ring && (kind == ZA_TASK_CHIEF || kind == ZA_TASK_WORKER));
}

//  Takes the registration fields every register and report carries.
static int
s_take (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    const s_registration_t *reg = what->reg;
    int was = task->state;
    int same_connection = task->identity && zframe_eq (task->identity, what->identity);
    if (task->pid != reg->pid) {
        if (was == T_LIVE && same_connection)
            s_event (self, task, "pid_changed", "its connection now names pid %d (was %d)",
                     (int) reg->pid, (int) task->pid);
        task->own = 0;
        task->pid = reg->pid;
    }
    //  The token it names is its own (s_task_of let it in); one that names
    //  none and is new to the task gets a fresh one, sent in the welcome.
    if (*reg->token)
        memcpy (task->token, reg->token, sizeof task->token);
    else
    if (!same_connection || !*task->token)
        za_task_token_new (task->token);
    memcpy (task->host, reg->host, sizeof task->host);
    if (*reg->endpoint && s_serves (self, task->kind))
        memcpy (task->endpoint, reg->endpoint, sizeof task->endpoint);
    if (reg->restarts > task->restarts)
        task->restarts = reg->restarts;
    zframe_destroy (&task->identity);
    task->identity = zframe_dup (what->identity);
    double now = za_clock_mono ();
    za_peer_heard (&task->peer, now);
    if (was != T_LIVE) {
        task->since = now;
        s_event (self, task, "registered", "on %s%s", task->host,
                 was == T_LOST? ", back after going silent"
                 : was == T_EMPTY && self->config->restarts > 0? ", again after a broker restart"
                 : "");
    }
    return 0;
}

static int
s_finished (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    s_event (self, task, "done", "%s", what->cause);
    return 0;
}

//  A report of failure counts from a process we did not start; ours are
//  judged by their exit.
static int
s_reported_failure (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    if (task->own)
        return -1;
    return s_fail (self, task, what);
}

//  Missed heartbeats: a process of ours on this machine is killed (and reaped
//  on a later turn, with this as the cause); any other has failed.
static int
s_silent (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    if (self->config->supervise && s_is_local (self, task) && s_is_role_process (task)) {
        kill (task->pid, SIGKILL);
        if (task->own) {
            snprintf (task->cause, sizeof task->cause, "%s", what->cause);
            task->state = T_KILLED;
            s_event (self, task, "killed", "%s", what->cause);
            return 0;
        }
    }
    return s_fail (self, task, what);
}

static int
s_kill_unregistered (s_broker_t *self, s_task_t *task, const s_happening_t *what)
{
    (void) self;
    if (!s_is_role_process (task))
        return -1;
    snprintf (task->cause, sizeof task->cause, "%s", what->cause);
    kill (task->pid, SIGKILL);
    return 0;
}

#define T_ANY (-1)
#define T_SAME (-2)
#define T_CHOSEN (-3)           //  the action chose the next state

//  A task's life (docs/PROTOCOL.md 13). The first row that matches the
//  state and the event wins; an event no row takes changes nothing.
static const struct {
    int state;
    s_task_event_t event;
    s_action_fn *action;
    int next;
} s_transitions [] = {
    //  state       event                action                next
    {T_EMPTY,     E_START_DUE,         s_start,              T_CHOSEN},
    {T_BACKOFF,   E_START_DUE,         s_start,              T_CHOSEN},
    {T_DONE,      E_REGISTERED,        NULL,                 T_SAME},
    {T_ANY,       E_REGISTERED,        s_take,               T_LIVE},
    {T_ANY,       E_REPORTED_DONE,     s_finished,           T_DONE},
    {T_LIVE,      E_REPORTED_FAILED,   s_reported_failure,   T_CHOSEN},
    {T_STARTED,   E_EXITED_OK,         s_finished,           T_DONE},
    {T_LIVE,      E_EXITED_OK,         s_finished,           T_DONE},
    {T_KILLED,    E_EXITED_OK,         s_finished,           T_DONE},
    {T_LOST,      E_EXITED_OK,         s_finished,           T_DONE},
    {T_STARTED,   E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {T_LIVE,      E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {T_KILLED,    E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {T_LOST,      E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {T_LIVE,      E_SILENT,            s_silent,             T_CHOSEN},
    {T_STARTED,   E_NOT_REGISTERED,    s_kill_unregistered,  T_KILLED},
};

//  Runs the row of (task's state, event). A failing action keeps the state.
static void
s_happen (s_broker_t *self, s_task_t *task, s_task_event_t event, const s_happening_t *what)
{
    size_t rows = sizeof s_transitions / sizeof s_transitions [0];
    for (size_t r = 0; r < rows; r++) {
        if ((s_transitions [r].state != T_ANY && s_transitions [r].state != (int) task->state)
            || s_transitions [r].event != event)
            continue;
        int rc = s_transitions [r].action? s_transitions [r].action (self, task, what): 0;
        if (rc == 0 && s_transitions [r].next >= 0)
            task->state = (s_task_state_t) s_transitions [r].next;
        return;
    }
}

//  Reaps our children, finds the silent, starts what is due.
static void
s_supervise (s_broker_t *self)
{
    const za_broker_config_t *config = self->config;
    double now = za_clock_mono ();
    int grace = config->restarts > 0 && now - self->start < 2 * s_silent_max (self);
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        for (int i = 0; i < config->counts [kind]; i++) {
            s_task_t *task = &self->tasks [kind][i];
            if (task->own && task->pid > 0) {
                int status = 0;
                pid_t got = waitpid (task->pid, &status, WNOHANG);
                if (got == task->pid || (got < 0 && errno == ECHILD)) {
                    task->own = 0;
                    char how [TEXT_MAX], cause [TEXT_MAX * 2];
                    if (got < 0)
                        snprintf (how, sizeof how, "gone");
                    else
                        s_describe_status (status, how, sizeof how);
                    int ok = got == task->pid && WIFEXITED (status) && WEXITSTATUS (status) == 0;
                    snprintf (cause, sizeof cause, "%s%s%s", ok? "": task->cause,
                              !ok && *task->cause? ", then ": "", how);
                    s_happening_t exited = {.cause = cause};
                    s_happen (self, task, ok? E_EXITED_OK: E_EXITED_FAILED, &exited);
                    continue;
                }
            }
            if (task->state == T_LIVE && za_peer_expired (&task->peer, now)) {
                char cause [TEXT_MAX];
                snprintf (cause, sizeof cause, "missed %d heartbeats (silent %.1f s)",
                          config->heartbeat.liveness, za_peer_silence (&task->peer, now));
                s_happening_t silent = {.cause = cause};
                s_happen (self, task, E_SILENT, &silent);
                continue;
            }
            if (!config->supervise)
                continue;
            if (task->state == T_STARTED && now - task->since > REGISTER_GRACE_SECS) {
                char cause [TEXT_MAX];
                snprintf (cause, sizeof cause, "did not register within %.0f s",
                          REGISTER_GRACE_SECS);
                s_happening_t late = {.cause = cause};
                s_happen (self, task, E_NOT_REGISTERED, &late);
            }
            if ((task->state == T_EMPTY && !grace)
                || (task->state == T_BACKOFF && now >= task->restart_at))
                s_happen (self, task, E_START_DUE, &(s_happening_t) {.cause = NULL});
        }
}

//  Stops every task we can reach: SIGTERM, then SIGKILL after a grace.
static void
s_stop_all (s_broker_t *self)
{
    const za_broker_config_t *config = self->config;
    for (int pass = 0; pass < 2; pass++) {
        int left = 0;
        double deadline = za_clock_mono () + STOP_GRACE_SECS;
        for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
            for (int i = 0; i < config->counts [kind]; i++) {
                s_task_t *task = &self->tasks [kind][i];
                if (task->state != T_DONE && task->pid > 0 && s_is_local (self, task)
                    && s_is_role_process (task)) {
                    kill (task->pid, pass? SIGKILL: SIGTERM);
                    left++;
                }
            }
        while (left && za_clock_mono () < deadline) {
            left = 0;
            for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
                for (int i = 0; i < config->counts [kind]; i++) {
                    s_task_t *task = &self->tasks [kind][i];
                    if (task->own && task->pid > 0) {
                        if (waitpid (task->pid, NULL, WNOHANG) == 0)
                            left++;
                        else
                            task->own = 0;
                    }
                }
            if (left)
                zclock_sleep (50);
        }
        if (!left)
            break;
    }
}

// ---------------------------------------------------------------------------
//  Messages

//  Counts a reply or row that could not be built, and says so (the first
//  few times): never a silent skip.
static void
s_json_failed (s_broker_t *self, const char *what)
{
    self->json_failures++;
    if (self->json_failures <= MAX_LOGGED_DROPS)
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
    if (self->refused <= MAX_LOGGED_DROPS)
        za_info ("broker: refused (%" PRIu64 " so far): %s", self->refused, self->out->error);
    za_wire_send (self->router, identity, self->out, NULL);
}

//  The view: complete once every ps has an endpoint and every task has been
//  registered at least once (the job's declared counts are met).
static json_t *
s_view (s_broker_t *self)
{
    const za_broker_config_t *config = self->config;
    int ready = 1;
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        for (int i = 0; i < config->counts [kind]; i++) {
            const s_task_t *task = &self->tasks [kind][i];
            if (task->state == T_EMPTY || task->state == T_STARTED)
                ready = 0;
        }
    json_t *ps = json_array ();
    for (int i = 0; i < config->counts [ZA_TASK_PS]; i++) {
        const s_task_t *task = &self->tasks [ZA_TASK_PS][i];
        if (!*task->endpoint)
            ready = 0;
        json_array_append_new (ps, json_string (task->endpoint));
    }
    //  With the all-reduce, the ring by worker index: the chief, then the workers.
    json_t *ring = config->ring? json_array (): NULL;
    for (int kind = ZA_TASK_CHIEF; ring && kind <= ZA_TASK_WORKER; kind++)
        for (int i = 0; i < config->counts [kind]; i++) {
            const s_task_t *task = &self->tasks [kind][i];
            if (!*task->endpoint)
                ready = 0;
            json_array_append_new (ring, json_string (task->endpoint));
        }
    json_t *view = json_pack ("{s:b, s:o, s:i}", "ready", ready, "ps", ps, "num_workers",
                              config->counts [ZA_TASK_CHIEF] + config->counts [ZA_TASK_WORKER]);
    if (view && ring)
        json_object_set_new (view, "ring", ring);
    else
        json_decref (ring);
    return view;
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
//  Registrations and reports, checked field by field (docs/PROTOCOL.md 13)

//  An integer member in [min, max] into *value; -1 when absent or not one.
static int
s_integer (json_t *body, const char *key, json_int_t min, json_int_t max, json_int_t *value)
{
    json_t *member = json_object_get (body, key);
    if (!json_is_integer (member) || json_integer_value (member) < min
        || json_integer_value (member) > max)
        return -1;
    *value = json_integer_value (member);
    return 0;
}

//  A finite number member in [min, max] into *value; -1 when absent or not one.
static int
s_number (json_t *body, const char *key, double min, double max, double *value)
{
    json_t *member = json_object_get (body, key);
    double v = json_number_value (member);
    if (!json_is_number (member) || !isfinite (v) || v < min || v > max)
        return -1;
    *value = v;
    return 0;
}

//  A string member of 0..size-1 bytes into buf; -1 when absent, not one, or
//  too long (it is refused, never cut: a cut may split a character).
static int
s_string (json_t *body, const char *key, char *buf, size_t size)
{
    const char *text = json_string_value (json_object_get (body, key));
    if (!text || strlen (text) >= size)
        return -1;
    memcpy (buf, text, strlen (text) + 1);
    return 0;
}

//  1 when body holds both members of a pair, 0 when neither, -1 when one alone.
static int
s_has_pair (json_t *body, const char *first, const char *second)
{
    int count = (json_object_get (body, first) != NULL) + (json_object_get (body, second) != NULL);
    return count == 2? 1: count == 0? 0: -1;
}

//  Checks every field of a register (report 0) or report (1) into *reg.
//  Returns 0, or -1 with what is wrong in `why`.
static int
s_parse_registration (s_broker_t *self, json_t *body, int report, s_registration_t *reg,
                      char *why, size_t size)
{
    memset (reg, 0, sizeof *reg);
    char role [16];
    json_int_t value;
    reg->kind = s_string (body, "role", role, sizeof role)? -1: s_kind_parse (role);
    if (reg->kind < 0) {
        snprintf (why, size, "role: chief, worker, ps or evaluator is needed");
        return -1;
    }
    int count = self->config->counts [reg->kind];
    if (s_integer (body, "index", report? 0: -1, count - 1, &value)) {
        json_t *index = json_object_get (body, "index");
        if (json_is_integer (index) && json_integer_value (index) >= count)
            snprintf (why, size, "%s %" JSON_INTEGER_FORMAT " does not exist: the job has %d",
                      role, json_integer_value (index), count);
        else
            snprintf (why, size, "index: %s 0 .. %d%s is needed", role, count - 1,
                      report? "": ", or -1 for any free one");
        return -1;
    }
    reg->index = (int) value;
    if (s_string (body, "host", reg->host, sizeof reg->host) || !za_cluster_host_valid (reg->host)) {
        snprintf (why, size, "host: a host name or address of 1 to %d bytes is needed",
                  TEXT_MAX - 1);
        return -1;
    }
    if (s_integer (body, "pid", 1, INT32_MAX, &value)) {
        snprintf (why, size, "pid: a process id > 0 is needed");
        return -1;
    }
    reg->pid = (pid_t) value;
    if (s_integer (body, "restarts", 0, INT32_MAX, &value)) {
        snprintf (why, size, "restarts: a count >= 0 is needed");
        return -1;
    }
    reg->restarts = (int) value;
    if (s_string (body, "endpoint", reg->endpoint, sizeof reg->endpoint)
        || (*reg->endpoint && !za_cluster_endpoint_valid (reg->endpoint))) {
        snprintf (why, size, "endpoint: \"\" or tcp://HOST:PORT is needed");
        return -1;
    }
    if (json_object_get (body, "token")
        && (s_string (body, "token", reg->token, sizeof reg->token)
            || !za_task_token_valid (reg->token))) {
        snprintf (why, size, "token: the 32 hex digits of a welcome, or no token");
        return -1;
    }
    if (!report)
        return 0;
    reg->eval_step = -1;
    int state_known = 0;
    if (s_string (body, "state", reg->state, sizeof reg->state) == 0)
        for (int st = ZA_ROLE_STARTING; st <= ZA_ROLE_FAILED; st++)
            state_known |= streq (reg->state, za_role_state_name ((za_role_state_t) st));
    if (!state_known) {
        snprintf (why, size, "state: one of starting, waiting, running, recovering, done, "
                  "failed is needed");
        return -1;
    }
    if (s_integer (body, "global_step", 0, INT64_MAX, &value)
        || s_number (body, "loss", -HUGE_VAL, HUGE_VAL, &reg->loss)
        || s_number (body, "steps_per_sec", 0, HUGE_VAL, &reg->steps_per_sec)
        || s_number (body, "examples_per_sec", 0, HUGE_VAL, &reg->examples_per_sec)) {
        snprintf (why, size, "global_step (an integer >= 0), loss, steps_per_sec and "
                  "examples_per_sec (finite numbers, the rates >= 0) are needed");
        return -1;
    }
    reg->global_step = value;
    //  Pairs come both or neither; either half alone, or of another type, is
    //  refused (a pair is judged by both its fields, not by its first).
    int has_eval = s_has_pair (body, "eval_step", "eval_accuracy");
    if (has_eval < 0
        || (has_eval && (s_integer (body, "eval_step", 0, INT64_MAX, &value)
                         || s_number (body, "eval_accuracy", 0, 1, &reg->eval_accuracy)))) {
        snprintf (why, size, "eval_step (an integer >= 0) and eval_accuracy (0 .. 1) come "
                  "both or neither");
        return -1;
    }
    if (has_eval)
        reg->eval_step = value;
    reg->ring_rank = -1;
    int has_ring = s_has_pair (body, "ring_rank", "wait_ms");
    if (has_ring < 0
        || (has_ring && (s_integer (body, "ring_rank", 0, 2 * ZA_CLUSTER_MAX_TASKS, &value)
                         || s_number (body, "wait_ms", 0, HUGE_VAL, &reg->wait_ms)))) {
        snprintf (why, size, "ring_rank (an integer 0 .. %d) and wait_ms (a finite number "
                  ">= 0) come both or neither", 2 * ZA_CLUSTER_MAX_TASKS);
        return -1;
    }
    if (has_ring)
        reg->ring_rank = (int) value;
    return 0;
}

//  The task a register or report names, or NULL (and a refusal sent).
static s_task_t *
s_task_of (s_broker_t *self, zframe_t *identity, const s_registration_t *reg)
{
    int index = reg->index;
    const char *role = s_kind_name (reg->kind);
    int count = self->config->counts [reg->kind];
    if (index < 0) {
        for (int i = 0; i < count && index < 0; i++) {
            s_task_t *task = &self->tasks [reg->kind][i];
            if (task->state == T_EMPTY || task->state == T_LOST || task->state == T_BACKOFF)
                index = i;
        }
        if (index < 0) {
            s_reply_error (self, identity, "full", "the job has %d %s task%s and none is "
                           "free", count, role, count == 1? "": "s");
            return NULL;
        }
    }
    //  A task in use is taken only by itself: its connection, or the token it
    //  was given (in its welcome, or by us when we started it). Its pid proves
    //  nothing: `state` shows every pid to whoever asks.
    s_task_t *task = &self->tasks [reg->kind][index];
    int in_use = (task->own && (task->state == T_STARTED || task->state == T_LIVE
                                || task->state == T_KILLED))
              || (task->state == T_LIVE && !za_peer_expired (&task->peer, za_clock_mono ()));
    int itself = (task->identity && zframe_eq (task->identity, identity))
              || (*reg->token && *task->token && streq (reg->token, task->token));
    if (in_use && !itself) {
        s_reply_error (self, identity, "busy", "%s %d is taken by pid %d on %s", role, index,
                       (int) task->pid, task->host);
        return NULL;
    }
    return task;
}

//  The body of a register or report, checked; NULL (and a refusal sent).
static json_t *
s_registration (s_broker_t *self, zframe_t *identity, int report, s_registration_t *reg)
{
    json_t *body = s_body (self, identity);
    char why [300];
    if (body && s_parse_registration (self, body, report, reg, why, sizeof why)) {
        s_reply_error (self, identity, "bad_request", "%s: %s", za_op_name (self->in->op), why);
        json_decref (body);
        body = NULL;
    }
    return body;
}

static void
s_on_register (s_broker_t *self, zframe_t *identity)
{
    s_registration_t reg;
    json_t *body = s_registration (self, identity, 0, &reg);
    s_task_t *task = body? s_task_of (self, identity, &reg): NULL;
    if (task && task->state == T_DONE) {
        s_reply_error (self, identity, "done", "%s %d has finished", s_kind_name (task->kind),
                       task->index);
        task = NULL;
    }
    if (task) {
        s_happening_t registered = {.identity = identity, .reg = &reg};
        s_happen (self, task, E_REGISTERED, &registered);
        json_t *job = json_deep_copy (self->job);
        s_reply (self, identity, ZA_OP_WELCOME,
                 json_pack ("{s:i, s:s, s:o, s:s}", "index", task->index, "endpoint",
                            task->endpoint, "job", job, "token", task->token));
    }
    json_decref (body);
}

static void
s_on_report (s_broker_t *self, zframe_t *identity)
{
    s_registration_t reg;
    json_t *body = s_registration (self, identity, 1, &reg);
    s_task_t *task = body? s_task_of (self, identity, &reg): NULL;
    json_decref (body);
    if (!task)
        return;
    int ended = streq (reg.state, "done") || streq (reg.state, "failed");
    if (reg.pid == task->pid && (task->state == T_BACKOFF || task->state == T_KILLED
                                 || task->state == T_DONE)) {
        //  A report sent before the process ended, read after: old news.
        s_reply (self, identity, ZA_OP_VIEW, s_view (self));
        return;
    }
    if (!ended) {
        s_happening_t registered = {.identity = identity, .reg = &reg};
        s_happen (self, task, E_REGISTERED, &registered);
    }
    memcpy (task->role_state, reg.state, sizeof task->role_state);
    task->step = reg.global_step;
    task->loss = reg.loss;
    task->steps_per_sec = reg.steps_per_sec;
    task->examples_per_sec = reg.examples_per_sec;
    task->eval_step = reg.eval_step;
    task->eval_accuracy = reg.eval_accuracy;
    task->ring_rank = reg.ring_rank;
    task->wait_ms = reg.wait_ms;
    if (ended && task->pid == reg.pid && task->state != T_DONE) {
        int done = streq (reg.state, "done");
        s_happening_t end = {.cause = done? "finished": "it reported a failure"};
        s_happen (self, task, done? E_REPORTED_DONE: E_REPORTED_FAILED, &end);
    }
    s_reply (self, identity, ZA_OP_VIEW, s_view (self));
}

//  A checkpoint: the chief has written the one of global_step; every live
//  evaluator is told at once, so it need not wait for its next look at
//  model_dir. Only the chief's own connection may say so.
static void
s_on_checkpoint (s_broker_t *self, zframe_t *identity)
{
    const s_task_t *chief = self->config->counts [ZA_TASK_CHIEF] > 0
                          ? &self->tasks [ZA_TASK_CHIEF][0]: NULL;
    if (!chief || chief->state != T_LIVE || !chief->identity
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
    const za_broker_config_t *config = self->config;
    for (int i = 0; i < config->counts [ZA_TASK_EVALUATOR]; i++) {
        s_task_t *evaluator = &self->tasks [ZA_TASK_EVALUATOR][i];
        if (evaluator->state == T_LIVE && evaluator->identity) {
            s_reply (self, evaluator->identity, ZA_OP_CHECKPOINT, json_incref (body));
            if (self->checkpoints_relayed++ == 0)
                za_info ("broker: the chief's checkpoints go on to the evaluators (step %"
                         PRId64 " first)", self->checkpoint_step);
        }
    }
    json_decref (body);
}

static json_t *
s_state (s_broker_t *self)
{
    const za_broker_config_t *config = self->config;
    double now = za_clock_mono ();
    json_t *roles = json_array ();
    int64_t step = 0;
    int done = 1;
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        for (int i = 0; i < config->counts [kind]; i++) {
            const s_task_t *task = &self->tasks [kind][i];
            int heard = task->state == T_LIVE || task->state == T_DONE;
            if (task->step > step && kind != ZA_TASK_EVALUATOR)
                step = task->step;
            done &= task->state == T_DONE;
            const char *state = task->state == T_LIVE && *task->role_state? task->role_state
                              : s_task_state_names [task->state];
            json_t *row = json_pack ("{s:s, s:i, s:s, s:i, s:s, s:I, s:f, s:f, s:f, s:i}",
                                     "role", s_kind_name (kind), "index", i,
                                     "host", *task->host? task->host: "", "pid", (int) task->pid,
                                     "state", state, "global_step", (json_int_t) task->step,
                                     "steps_per_sec", task->steps_per_sec,
                                     "examples_per_sec", task->examples_per_sec,
                                     "loss", task->loss, "restarts", task->restarts);
            //  `state` is the one word a person reads (the role's own while it is
            //  live, else ours); the two vocabularies apart, for programs:
            json_object_set_new (row, "task_state", json_string (s_task_state_names [task->state]));
            json_object_set_new (row, "role_state", heard && *task->role_state
                                 ? json_string (task->role_state): json_null ());
            json_object_set_new (row, "eval_step", task->eval_step >= 0
                                 ? json_integer (task->eval_step): json_null ());
            json_object_set_new (row, "eval_accuracy", task->eval_step >= 0
                                 ? json_real (task->eval_accuracy): json_null ());
            json_object_set_new (row, "heartbeat_age_secs", heard && task->peer.heard
                                 ? json_real (za_peer_silence (&task->peer, now)): json_null ());
            if (!row) {
                s_json_failed (self, "a row of the state");
                continue;
            }
            if (*task->endpoint)
                json_object_set_new (row, "endpoint", json_string (task->endpoint));
            if (task->ring_rank >= 0) {
                json_object_set_new (row, "ring_rank", json_integer (task->ring_rank));
                json_object_set_new (row, "wait_ms", json_real (task->wait_ms));
            }
            json_array_append_new (roles, row);
        }
    json_t *events = json_array ();
    int first = self->event_count > ZA_BROKER_EVENTS? self->event_count - ZA_BROKER_EVENTS: 0;
    for (int e = first; e < self->event_count; e++) {
        const char *text = self->events [e % ZA_BROKER_EVENTS].text;
        json_t *event = text? json_loads (text, 0, NULL): NULL;
        if (event)
            json_array_append_new (events, event);
        else
            s_json_failed (self, "an event of the state");
    }
    json_t *state = json_pack ("{s:{s:I, s:s}, s:{s:i, s:s, s:i, s:f, s:s, s:b, s:I, s:I, s:I, "
                      "s:I, s:b, s:I}, s:I, s:b, s:o, s:o, s:O}",
                      "job", "max_steps", (json_int_t) config->max_steps,
                      "model_dir", config->model_dir? config->model_dir: "",
                      "broker", "pid", (int) getpid (), "host", self->host,
                      "restarts", config->restarts, "uptime_secs", now - self->start,
                      "endpoint", config->bind, "supervise", config->supervise,
                      "dropped", (json_int_t) self->dropped,
                      "refused", (json_int_t) self->refused,
                      "json_failures", (json_int_t) self->json_failures,
                      "checkpoints_relayed", (json_int_t) self->checkpoints_relayed,
                      "curve", za_curve_enabled (),
                      "refused_peers", (json_int_t) za_curve_refused (),
                      "global_step", (json_int_t) step, "done", done,
                      "roles", roles, "events", events, "event_counts", self->event_counts);
    if (state)
        json_object_set_new (state, "checkpoint_step", self->checkpoint_step >= 0
                             ? json_integer (self->checkpoint_step): json_null ());
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
        if (self->dropped <= MAX_LOGGED_DROPS)
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
        for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
            for (int i = 0; i < self->config->counts [kind]; i++)
                za_peer_postpone (&self->tasks [kind][i].peer, gap);
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
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        for (int i = 0; i < ZA_BROKER_MAX_TASKS; i++)
            zframe_destroy (&self->tasks [kind][i].identity);
    for (int e = 0; e < ZA_BROKER_EVENTS; e++)
        free (self->events [e].text);
    json_decref (self->event_counts);
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
    self->event_counts = json_object ();
    if (!self->in || !self->out || !self->job || !self->event_counts) {
        za_error ("broker: the job is not JSON");
        goto fail;
    }
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++) {
        if (config->counts [kind] < 0 || config->counts [kind] > ZA_BROKER_MAX_TASKS) {
            za_error ("broker: %d %s tasks (0 to %d)", config->counts [kind],
                      s_kind_name (kind), ZA_BROKER_MAX_TASKS);
            goto fail;
        }
        for (int i = 0; i < config->counts [kind]; i++) {
            s_task_t *task = &self->tasks [kind][i];
            task->kind = kind;
            task->index = i;
            task->eval_step = -1;
            task->ring_rank = -1;
            za_peer_init (&task->peer, config->heartbeat, za_clock_mono ());
        }
    }
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
    int ivl_ms = (int) (config->heartbeat.ivl_secs * 1000);
    if (ivl_ms > 0) {
        zsock_set_heartbeat_ivl (self->router, ivl_ms);
        zsock_set_heartbeat_timeout (self->router, ivl_ms * config->heartbeat.liveness);
    }
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
        s_events_reload (self);
        s_event (self, NULL, "restarted", "%s; restart %d, waiting %.0f s for the roles to "
                 "re-register", config->restart_cause? config->restart_cause: "",
                 config->restarts, 2 * s_silent_max (self));
    }
    else
        s_event (self, NULL, "started", "on %s, %s", config->bind,
                 config->supervise? "supervising": "not supervising");
    zpoller_t *poller = zpoller_new (pipe, self->router, NULL);
    int rc = -1, terminated = 0;
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
        s_supervise (self);
        s_update_metrics (self);
        if (self->failed)
            rc = 1;
        else {
            int done = 1;
            for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
                for (int i = 0; i < config->counts [kind]; i++)
                    done &= self->tasks [kind][i].state == T_DONE;
            if (done)
                rc = 0;
        }
    }
    if (rc != 0)
        s_stop_all (self);
    s_event (self, NULL, rc == 0? "done": "stopped",
             rc == 0? "every task finished": rc > 0? "the job failed": "interrupted");
    zpoller_destroy (&poller);
    s_broker_destroy (&self);
    if (terminated)
        return;
    zstr_sendx (pipe, "DONE", rc == 0? "0": "1", NULL);
    while (1) {
        char *command = zstr_recv (pipe);
        int term = !command || streq (command, "$TERM");
        zstr_free (&command);
        if (term)
            break;
    }
}
