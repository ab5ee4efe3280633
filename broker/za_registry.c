/*  za_registry.c: the tasks of a job, their registrations, and a task's life
    as a state table (za_registry.h lists the states).                      */
#include "za_registry_private.h"
#include "za_supervisor.h"
#include "za/za_checkpoint.h"
#include "za/za_process.h"
#include "za/za_role_stats.h"
#include "za/za_util.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define REGISTER_GRACE_SECS 60.0        //  a started process has this long to register
#define STOP_GRACE_SECS 5.0             //  SIGTERM, then SIGKILL after this
#define STOP_POLL_MS 50
#define CAUSE_MAX (4 * ZA_REGISTRY_TEXT_MAX)

const char *
za_registry_kind_name (int kind)
{
    return za_task_type_name ((za_task_type_t) kind);
}

static void
s_event (za_registry_t *self, const za_entry_t *task, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static void
s_event (za_registry_t *self, const za_entry_t *task, const char *event, const char *fmt, ...)
{
    char cause [4 * ZA_REGISTRY_TEXT_MAX];
    va_list args;
    va_start (args, fmt);
    vsnprintf (cause, sizeof cause, fmt, args);
    va_end (args);
    za_events_add (self->events, event, za_registry_kind_name (task->kind), task->index,
                   task->pid, task->restarts, "%s", cause);
}

// ---------------------------------------------------------------------------
//  Processes, through the supervisor

static double
s_silent_max (const za_registry_t *self)
{
    return self->config->heartbeat.ivl_secs * self->config->heartbeat.liveness;
}

int
za_registry_elastic (const za_registry_t *self)
{
    const za_broker_config_t *config = self->config;
    return config->min_workers >= 0 && config->min_workers < config->counts [ZA_TASK_WORKER];
}

int
za_registry_elastic_slot (const za_registry_t *self, const za_entry_t *task)
{
    return za_registry_elastic (self) && task->kind == ZA_TASK_WORKER
        && task->index >= self->config->min_workers;
}

static int
s_is_role_process (const za_entry_t *task)
{
    return za_supervisor_is_role_process (task->pid, za_registry_kind_name (task->kind),
                                          task->index);
}

static int
s_is_local (const za_registry_t *self, const za_entry_t *task)
{
    return task->own || streq (task->host, self->host) || streq (task->host, "127.0.0.1")
        || streq (task->host, "localhost");
}

static int
s_spawn (za_registry_t *self, za_entry_t *task)
{
    const char *role = za_registry_kind_name (task->kind);
    //  The child claims its task with this token, which only it is told.
    if (za_task_token_new (task->token))
        return -1;
    if (task->own && task->pid > 0) {
        //  The process before: make sure it is gone, and reap it.
        za_supervisor_retire (task->pid, role, task->index);
        task->own = 0;
    }
    char *log = task->log;
    pid_t pid = za_supervisor_start (self->config, role, task->index, task->restarts,
                                     task->token, log, sizeof task->log);
    if (pid < 0)
        return -1;
    task->pid = pid;
    task->own = 1;
    task->leaving = 0;
    task->state = ZA_ENTRY_STARTED;
    task->since = za_clock_mono ();
    task->cause [0] = 0;
    zframe_destroy (&task->identity);
    s_event (self, task, task->restarts? "restarted": "started", "log %s", log);
    return 0;
}

//  The training is over for a chief, worker or ps when the final checkpoint
//  exists: one that fails then is not started again.
static int
s_training_over (const za_registry_t *self, const za_entry_t *task)
{
    if (task->kind == ZA_TASK_EVALUATOR || !self->config->model_dir)
        return 0;
    return za_checkpoint_newest_step (self->config->model_dir) >= self->config->max_steps;
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
    E_EXITED_PREEMPTED,         //  our child exited with the requeue code
    E_SILENT,                   //  it missed interval x liveness of heartbeats
    E_NOT_REGISTERED            //  started, and no register came in time
} s_task_event_t;

//  What came with an event.
typedef struct {
    const char *cause;          //  how it failed, for the events
    int final;                  //  a failure no restart mends (its data: ZA_EXIT_DATA)
    zframe_t *identity;         //  E_REGISTERED: who sent it
    const za_registration_t *reg;   //  E_REGISTERED: what it says of itself
} s_happening_t;

typedef int (s_action_fn) (za_registry_t *self, za_entry_t *task, const s_happening_t *what);

//  The job fails, or the task waits out its backoff: the next state is
//  chosen here (BACKOFF, LOST, DONE when training is over).
static int
s_fail (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    const za_broker_config_t *config = self->config;
    zframe_destroy (&task->identity);
    if (self->preempting) {
        task->state = ZA_ENTRY_DONE;
        s_event (self, task, "stopped", "%s while the job stops for preemption: not restarted",
                 what->cause);
        return 0;
    }
    if (s_training_over (self, task)) {
        task->state = ZA_ENTRY_DONE;
        s_event (self, task, "done", "%s after the final checkpoint: not restarted",
                 what->cause);
        return 0;
    }
    if (za_registry_elastic_slot (self, task)) {
        task->state = ZA_ENTRY_LOST;
        task->lost_at = za_clock_mono ();
        s_event (self, task, "lost", "%s; dropped from the job unless it is back within %g s "
                 "(--elastic-timeout)", what->cause, config->elastic_timeout_secs);
        return 0;
    }
    if (!config->supervise) {
        task->state = ZA_ENTRY_LOST;
        s_event (self, task, "lost", "%s", what->cause);
        return 0;
    }
    if (what->final) {
        s_event (self, task, "gave_up", "%s; not restarted: it would meet the same data",
                 what->cause);
        self->failed = 1;
        return 0;
    }
    if (task->restarts >= config->max_restarts) {
        s_event (self, task, "gave_up", "%s, after %d restarts (--max-restarts %d)",
                 what->cause, task->restarts, config->max_restarts);
        self->failed = 1;
        return 0;
    }
    double delay = za_broker_backoff_next (config, &task->failures,
                                           za_clock_mono () - task->since);
    task->restarts++;
    task->state = ZA_ENTRY_BACKOFF;
    task->restart_at = za_clock_mono () + delay;
    s_event (self, task, "failed", "%s; restart %d in %.1f s", what->cause, task->restarts,
             delay);
    return 0;
}

//  Starts the task's process (STARTED); DONE instead when a restarted broker
//  finds training over before it began; a failure's choice when it cannot.
static int
s_start (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    (void) what;
    if (task->state == ZA_ENTRY_EMPTY && self->config->restarts > 0
        && s_training_over (self, task)) {
        task->state = ZA_ENTRY_DONE;
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
s_serves (const za_registry_t *self, za_task_type_t kind)
{
    return kind == ZA_TASK_PS
        || (self->config->ring && (kind == ZA_TASK_CHIEF || kind == ZA_TASK_WORKER));
}

//  Takes the registration fields every register and report carries.
static int
s_take (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    const za_registration_t *reg = what->reg;
    int was = task->state;
    int same_connection = task->identity && zframe_eq (task->identity, what->identity);
    if (task->pid != reg->pid) {
        if (was == ZA_ENTRY_LIVE && same_connection)
            s_event (self, task, "pid_changed", "its connection now names pid %d (was %d)",
                     (int) reg->pid, (int) task->pid);
        task->own = 0;
        task->pid = reg->pid;
        task->leaving = 0;
    }
    //  The token it names is its own (za_registry_claim let it in); one that
    //  names none and is new to the task gets a fresh one, sent in the welcome.
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
    if (was != ZA_ENTRY_LIVE) {
        task->since = now;
        s_event (self, task, "registered", "on %s%s", task->host,
                 was == ZA_ENTRY_LOST? ", back after going silent"
                 : was == ZA_ENTRY_EMPTY && self->config->restarts > 0
                 ? ", again after a broker restart": "");
    }
    return 0;
}

//  An elastic slot that nobody holds: a worker that joins may take it.
static void
s_vacate (za_entry_t *task)
{
    task->state = ZA_ENTRY_VACANT;
    task->leaving = 0;
    task->endpoint [0] = 0;
    task->role_state [0] = 0;           //  the next worker's is its own, once it reports
    za_straggler_reset (&task->straggler);
    zframe_destroy (&task->identity);
}

static int
s_finished (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    //  An elastic slot's worker that left the job (SIGTERM) frees it for a
    //  worker that joins, as a torchrun node rejoins: the job may grow back.
    if (task->leaving && za_registry_elastic_slot (self, task) && !s_training_over (self, task)) {
        task->left_pid = task->pid;     //  its reports still on the way are old news
        s_vacate (task);
        s_event (self, task, "vacant", "%s; it left the job: a worker that joins takes its "
                 "place", what->cause);
        return 0;
    }
    task->state = ZA_ENTRY_DONE;
    s_event (self, task, "done", "%s", what->cause);
    return 0;
}

//  A report of failure counts from a process we did not start; ours are
//  judged by their exit.
static int
s_reported_failure (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    if (task->own)
        return -1;
    return s_fail (self, task, what);
}

//  Missed heartbeats: a process of ours on this machine is killed (and reaped
//  on a later turn, with this as the cause); any other has failed.
static int
s_silent (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    if (self->config->supervise && s_is_local (self, task) && s_is_role_process (task)) {
        kill (task->pid, SIGKILL);
        if (task->own) {
            snprintf (task->cause, sizeof task->cause, "%s", what->cause);
            task->state = ZA_ENTRY_KILLED;
            s_event (self, task, "killed", "%s", what->cause);
            return 0;
        }
    }
    return s_fail (self, task, what);
}

static int
s_kill_unregistered (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    (void) self;
    if (!s_is_role_process (task))
        return -1;
    snprintf (task->cause, sizeof task->cause, "%s", what->cause);
    kill (task->pid, SIGKILL);
    return 0;
}

//  A task that stopped for preemption: done, and the job stops.
static int
s_preempted (za_registry_t *self, za_entry_t *task, const s_happening_t *what)
{
    zframe_destroy (&task->identity);
    self->preempting = 1;
    s_event (self, task, "preempted", "%s: its part is saved; the job stops, to be run again",
             what->cause);
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
    //  state               event                action                next
    {T_ANY,               E_EXITED_PREEMPTED,  s_preempted,          ZA_ENTRY_DONE},
    {ZA_ENTRY_EMPTY,      E_START_DUE,         s_start,              T_CHOSEN},
    {ZA_ENTRY_BACKOFF,    E_START_DUE,         s_start,              T_CHOSEN},
    {ZA_ENTRY_DONE,       E_REGISTERED,        NULL,                 T_SAME},
    {T_ANY,               E_REGISTERED,        s_take,               ZA_ENTRY_LIVE},
    {T_ANY,               E_REPORTED_DONE,     s_finished,           T_CHOSEN},
    {ZA_ENTRY_LIVE,       E_REPORTED_FAILED,   s_reported_failure,   T_CHOSEN},
    {ZA_ENTRY_STARTED,    E_EXITED_OK,         s_finished,           T_CHOSEN},
    {ZA_ENTRY_LIVE,       E_EXITED_OK,         s_finished,           T_CHOSEN},
    {ZA_ENTRY_KILLED,     E_EXITED_OK,         s_finished,           T_CHOSEN},
    {ZA_ENTRY_LOST,       E_EXITED_OK,         s_finished,           T_CHOSEN},
    {ZA_ENTRY_STARTED,    E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {ZA_ENTRY_LIVE,       E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {ZA_ENTRY_KILLED,     E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {ZA_ENTRY_LOST,       E_EXITED_FAILED,     s_fail,               T_CHOSEN},
    {ZA_ENTRY_LIVE,       E_SILENT,            s_silent,             T_CHOSEN},
    {ZA_ENTRY_STARTED,    E_NOT_REGISTERED,    s_kill_unregistered,  ZA_ENTRY_KILLED},
};

//  Runs the row of (task's state, event). A failing action keeps the state.
static void
s_happen (za_registry_t *self, za_entry_t *task, s_task_event_t event,
          const s_happening_t *what)
{
    size_t rows = sizeof s_transitions / sizeof s_transitions [0];
    for (size_t r = 0; r < rows; r++) {
        if ((s_transitions [r].state != T_ANY && s_transitions [r].state != (int) task->state)
            || s_transitions [r].event != event)
            continue;
        int rc = s_transitions [r].action? s_transitions [r].action (self, task, what): 0;
        if (rc == 0 && s_transitions [r].next >= 0)
            task->state = (za_entry_state_t) s_transitions [r].next;
        return;
    }
}

//  One task's turn of supervision: reaped, silent, late, due.
static void
s_supervise_task (za_registry_t *self, za_entry_t *task, double now, int grace)
{
    const za_broker_config_t *config = self->config;
    char how [ZA_REGISTRY_TEXT_MAX], cause [CAUSE_MAX];
    int code;
    if (task->own && task->pid > 0 && za_supervisor_reaped (task->pid, how, sizeof how, &code)) {
        task->own = 0;
        int ok = code == 0, data = code == ZA_EXIT_DATA;
        if (code == config->requeue_exit_code) {
            s_happen (self, task, E_EXITED_PREEMPTED, &(s_happening_t) {.cause = how});
            return;
        }
        char error [CAUSE_MAX * 5 / 8] = "";
        if (data)                       //  what was wrong with it, in its own words
            za_supervisor_last_error (task->log, error, sizeof error);
        if (*error)
            snprintf (cause, sizeof cause, "%s (%s)", error, how);
        else
            snprintf (cause, sizeof cause, "%s%s%s", ok? "": task->cause,
                      !ok && *task->cause? ", then ": "", how);
        s_happen (self, task, ok? E_EXITED_OK: E_EXITED_FAILED,
                  &(s_happening_t) {.cause = cause, .final = data});
        return;
    }
    if (task->state == ZA_ENTRY_LIVE && za_peer_expired (&task->peer, now)) {
        snprintf (cause, sizeof cause, "missed %d heartbeats (silent %.1f s)",
                  config->heartbeat.liveness, za_peer_silence (&task->peer, now));
        s_happen (self, task, E_SILENT, &(s_happening_t) {.cause = cause});
        return;
    }
    if (task->state == ZA_ENTRY_LOST && za_registry_elastic_slot (self, task)
        && now - task->lost_at > config->elastic_timeout_secs) {
        s_vacate (task);
        return;
    }
    //  Lost where nothing restarts it, and the final checkpoint came since:
    //  nothing is left for it to do (the broker waited for it for ever).
    if (task->state == ZA_ENTRY_LOST && s_training_over (self, task)) {
        task->state = ZA_ENTRY_DONE;
        s_event (self, task, "done", "lost before the final checkpoint, which came since: "
                 "not waited for");
        return;
    }
    //  While the job stops for preemption, a task that does not run is not
    //  started (again) nor waited for.
    if (self->preempting && (task->state == ZA_ENTRY_EMPTY || task->state == ZA_ENTRY_BACKOFF
                             || task->state == ZA_ENTRY_LOST)) {
        task->state = ZA_ENTRY_DONE;
        return;
    }
    if (!config->supervise)
        return;
    if (task->state == ZA_ENTRY_STARTED && now - task->since > REGISTER_GRACE_SECS) {
        snprintf (cause, sizeof cause, "did not register within %.0f s", REGISTER_GRACE_SECS);
        s_happen (self, task, E_NOT_REGISTERED, &(s_happening_t) {.cause = cause});
    }
    if ((task->state == ZA_ENTRY_EMPTY && !grace)
        || (task->state == ZA_ENTRY_BACKOFF && now >= task->restart_at))
        s_happen (self, task, E_START_DUE, &(s_happening_t) {.cause = NULL});
}

//  1 when the task trains in the job now: a chief or a worker that is not
//  an elastic slot, or one that a worker holds (with the all-reduce, one
//  whose ring endpoint is known), until it is dropped or leaves.
int
za_registry_is_member (const za_registry_t *self, const za_entry_t *task)
{
    if (task->kind != ZA_TASK_CHIEF && task->kind != ZA_TASK_WORKER)
        return 0;
    if (!za_registry_elastic_slot (self, task))
        return 1;
    //  It trains once its role is past starting (its data loaded, its ring
    //  bound): the others need not wait for that.
    return task->state != ZA_ENTRY_VACANT && task->state != ZA_ENTRY_EMPTY && !task->leaving
        && *task->role_state && !streq (task->role_state, "starting")
        && (!self->config->ring || *task->endpoint);
}

//  1 while a restarted broker lets the running tasks re-register (twice the
//  silence after which a task is lost), before it acts on what it lacks.
static int
s_regathering (const za_registry_t *self, double now)
{
    return self->config->restarts > 0 && now - self->start < 2 * s_silent_max (self);
}

//  An elastic job's members, counted again: each change is numbered, and
//  each task that joins or leaves is an event. A restarted broker numbers
//  them once the trainers re-registered (the members they hold stand
//  meanwhile), on from the newest change they hold: a number they held
//  already would be old news to them, its members never heard of.
static void
s_update_members (za_registry_t *self)
{
    if (!za_registry_elastic (self))
        return;
    int renumbered = 0;
    if (self->config->restarts > 0) {
        if (s_regathering (self, za_clock_mono ()))
            return;
        renumbered = self->membership < self->membership_held;
        if (renumbered)
            self->membership = self->membership_held;
    }
    int changed = renumbered, count = 0;
    FOR_EACH_TASK (self, task) {
        int member = za_registry_is_member (self, task);
        count += member;
        changed |= member != task->member;
    }
    if (!changed && self->membership > 0)
        return;
    self->membership++;
    self->member_count = count;
    const za_broker_config_t *config = self->config;
    FOR_EACH_TASK (self, task) {
        int member = za_registry_is_member (self, task);
        if (member != task->member && self->membership > 1 && !renumbered)
            s_event (self, task, member? "joined": "left", "%d trainers now (the chief and "
                     "%d to %d workers), members change %" PRId64, count,
                     config->min_workers, config->counts [ZA_TASK_WORKER], self->membership);
        task->member = member;
    }
}

int64_t
za_registry_members (const za_registry_t *self, int *count)
{
    if (!za_registry_elastic (self)) {
        *count = self->config->counts [ZA_TASK_CHIEF] + self->config->counts [ZA_TASK_WORKER];
        return 0;
    }
    *count = self->member_count;
    return self->membership;
}

void
za_registry_supervise (za_registry_t *self)
{
    double now = za_clock_mono ();
    //  A restarted broker first lets the running roles re-register.
    int grace = s_regathering (self, now);
    FOR_EACH_TASK (self, task)
        s_supervise_task (self, task, now, grace);
    s_update_members (self);
}

void
za_registry_stop_all (za_registry_t *self)
{
    for (int pass = 0; pass < 2; pass++) {
        int left = 0;
        double deadline = za_clock_mono () + STOP_GRACE_SECS;
        FOR_EACH_TASK (self, task)
            if (task->state != ZA_ENTRY_DONE && task->pid > 0 && s_is_local (self, task)
                && s_is_role_process (task)) {
                kill (task->pid, pass? SIGKILL: SIGTERM);
                left++;
            }
        //  Until every one signalled has ended: ours reaped, and those a
        //  broker before us started (they registered again) gone.
        while (left && za_clock_mono () < deadline) {
            left = 0;
            FOR_EACH_TASK (self, task)
                if (task->own && task->pid > 0) {
                    if (waitpid (task->pid, NULL, WNOHANG) == 0)
                        left++;
                    else
                        task->own = 0;
                }
                else
                if (task->state != ZA_ENTRY_DONE && task->pid > 0 && s_is_local (self, task)
                    && kill (task->pid, 0) == 0 && s_is_role_process (task))
                    left++;
            if (left)
                zclock_sleep (STOP_POLL_MS);
        }
        if (!left)
            break;
    }
}

void
za_registry_preempt (za_registry_t *self)
{
    self->preempting = 1;
    if (self->preempt_told)
        return;
    self->preempt_told = 1;
    FOR_EACH_TASK (self, task)
        if (task->state != ZA_ENTRY_DONE && task->own && task->pid > 0
            && s_is_role_process (task))
            kill (task->pid, SIGTERM);
}

int
za_registry_preempting (const za_registry_t *self)
{
    return self->preempting;
}

void
za_registry_postpone (za_registry_t *self, double gap)
{
    FOR_EACH_TASK (self, task)
        za_peer_postpone (&task->peer, gap);
}

// ---------------------------------------------------------------------------
//  Registers and reports

za_entry_t *
za_registry_claim (za_registry_t *self, zframe_t *identity, const za_registration_t *reg,
                   int report, char code [ZA_REGISTRY_CODE_MAX], char *why, size_t size)
{
    int index = reg->index;
    const char *role = za_registry_kind_name (reg->kind);
    int count = self->config->counts [reg->kind];
    if (index < 0) {
        //  A free slot first; one whose task is lost or restarting (which
        //  may come back within its timeout) only when none is.
        for (int pass = 0; pass < 2 && index < 0; pass++)
            for (int i = 0; i < count && index < 0; i++) {
                za_entry_state_t state = self->tasks [reg->kind][i].state;
                if (pass == 0? state == ZA_ENTRY_EMPTY || state == ZA_ENTRY_VACANT
                             : state == ZA_ENTRY_LOST || state == ZA_ENTRY_BACKOFF)
                    index = i;
            }
        if (index < 0) {
            snprintf (code, ZA_REGISTRY_CODE_MAX, "full");
            snprintf (why, size, "the job has %d %s task%s and none is free", count, role,
                      count == 1? "": "s");
            return NULL;
        }
    }
    //  A task in use is taken only by itself: its connection, or the token it
    //  was given (in its welcome, or by us when we started it). Its pid proves
    //  nothing: `state` shows every pid to whoever asks.
    za_entry_t *task = &self->tasks [reg->kind][index];
    int in_use = (task->own && (task->state == ZA_ENTRY_STARTED || task->state == ZA_ENTRY_LIVE
                                || task->state == ZA_ENTRY_KILLED))
              || (task->state == ZA_ENTRY_LIVE
                  && !za_peer_expired (&task->peer, za_clock_mono ()));
    int itself = (task->identity && zframe_eq (task->identity, identity))
              || (*reg->token && *task->token && streq (reg->token, task->token));
    //  A report (only a welcomed process sends one) on a task another process
    //  runs now comes from a former one: declared lost (hung, stopped, cut
    //  off) and replaced since. Told so, it exits rather than train beside it.
    if (in_use && !itself) {
        snprintf (code, ZA_REGISTRY_CODE_MAX, report? "replaced": "busy");
        snprintf (why, size, "%s %d %s by pid %d on %s%s", role, index,
                  report? "was declared lost and is run": "is taken", (int) task->pid,
                  task->host, report? " now": "");
        return NULL;
    }
    if (!report && task->state == ZA_ENTRY_DONE) {
        snprintf (code, ZA_REGISTRY_CODE_MAX, "done");
        snprintf (why, size, "%s %d has finished", role, task->index);
        return NULL;
    }
    return task;
}

void
za_registry_register (za_registry_t *self, za_entry_t *task, zframe_t *identity,
                      const za_registration_t *reg)
{
    s_happen (self, task, E_REGISTERED, &(s_happening_t) {.identity = identity, .reg = reg});
    s_update_members (self);
}

//  A trainer's report against the other trainers' latest: named a
//  straggler, or no longer one, as an event (docs/monitoring.md).
static void
s_judge_straggler (za_registry_t *self, za_entry_t *task)
{
    if (!za_registry_timed_trainer (task)) {
        za_straggler_reset (&task->straggler);
        return;
    }
    za_step_times_t others [ZA_BROKER_MAX_TASKS + 1];
    int count = 0;
    FOR_EACH_TASK (self, other)
        if (other != task && za_registry_timed_trainer (other) && count < ZA_BROKER_MAX_TASKS + 1)
            others [count++] = other->times;
    za_straggler_t *judged = &task->straggler;
    int change = za_straggler_judge (judged, &task->times, others, count,
                                     self->config->straggler_factor);
    if (change > 0)
        s_event (self, task, "straggler", "its steps take %.1f ms of its own, %.1fx the other "
                 "trainers' median %.1f ms (--straggler-factor %g); slowest phase: %s, "
                 "%+.1f ms a step", judged->own_ms, judged->slowdown, judged->median_ms,
                 self->config->straggler_factor, za_phase_name (judged->phase),
                 judged->phase_excess_ms);
    else
    if (change < 0)
        s_event (self, task, "caught_up", "its steps take %.1f ms of its own again, %.1fx "
                 "the other trainers' median %.1f ms", judged->own_ms, judged->slowdown,
                 judged->median_ms);
}

void
za_registry_report (za_registry_t *self, za_entry_t *task, zframe_t *identity,
                    const za_registration_t *reg)
{
    int ended = streq (reg->state, "done") || streq (reg->state, "failed");
    //  A report sent before the process ended, read after: old news for
    //  its state, but its counts of images are still its last (its final
    //  report has the images of its last steps).
    if ((reg->pid == task->pid && (task->state == ZA_ENTRY_BACKOFF
                                   || task->state == ZA_ENTRY_KILLED
                                   || task->state == ZA_ENTRY_DONE))
        || (task->state == ZA_ENTRY_VACANT && reg->pid == task->left_pid)) {
        task->bad_images = reg->bad_images;
        task->images = reg->images;
        return;
    }
    if (reg->membership > self->membership_held)
        self->membership_held = reg->membership;
    if (!ended)
        za_registry_register (self, task, identity, reg);
    memcpy (task->role_state, reg->state, sizeof task->role_state);
    task->step = reg->global_step;
    task->loss = reg->loss;
    task->steps_per_sec = reg->steps_per_sec;
    task->examples_per_sec = reg->examples_per_sec;
    task->eval_step = reg->eval_step;
    task->eval_accuracy = reg->eval_accuracy;
    task->ring_rank = reg->ring_rank;
    task->wait_ms = reg->wait_ms;
    task->bad_images = reg->bad_images;
    task->images = reg->images;
    task->times = reg->times;
    s_judge_straggler (self, task);
    if (reg->preempting && !self->preempting) {
        self->preempting = 1;
        s_event (self, task, "preempting", "it got SIGTERM: the job stops for preemption");
    }
    //  An elastic job's worker that got SIGTERM: one in an elastic slot
    //  leaves (the others re-form without it); one the job needs (MIN)
    //  stops the job for preemption, as any task.
    if (reg->leaving && !task->leaving && !self->preempting) {
        if (za_registry_elastic_slot (self, task)) {
            task->leaving = 1;
            s_event (self, task, "leaving", "it got SIGTERM: it leaves the job, the others "
                     "go on");
            s_update_members (self);
        }
        else {
            self->preempting = 1;
            s_event (self, task, "preempting", "it got SIGTERM and is one of the %d workers "
                     "the job keeps (--workers %d:%d): the job stops for preemption",
                     self->config->min_workers, self->config->min_workers,
                     self->config->counts [ZA_TASK_WORKER]);
        }
    }
    if (ended && task->pid == reg->pid && task->state != ZA_ENTRY_DONE) {
        int done = streq (reg->state, "done");
        s_happening_t end = {.cause = done? "finished": "it reported a failure"};
        s_happen (self, task, done? E_REPORTED_DONE: E_REPORTED_FAILED, &end);
    }
}

// ---------------------------------------------------------------------------

za_registry_t *
za_registry_new (const za_broker_config_t *config, za_events_t *events, const char *host)
{
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        if (config->counts [kind] < 0 || config->counts [kind] > ZA_BROKER_MAX_TASKS) {
            za_error ("broker: %d %s tasks (0 to %d)", config->counts [kind],
                      za_registry_kind_name (kind), ZA_BROKER_MAX_TASKS);
            return NULL;
        }
    za_registry_t *self = (za_registry_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("broker: out of memory");
        return NULL;
    }
    self->config = config;
    self->events = events;
    self->start = za_clock_mono ();
    snprintf (self->host, sizeof self->host, "%s", host);
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        for (int i = 0; i < config->counts [kind]; i++) {
            za_entry_t *task = &self->tasks [kind][i];
            task->kind = kind;
            task->index = i;
            task->eval_step = -1;
            task->ring_rank = -1;
            za_peer_init (&task->peer, config->heartbeat, self->start);
            if (za_registry_elastic_slot (self, task))
                task->state = ZA_ENTRY_VACANT;
        }
    s_update_members (self);
    return self;
}

void
za_registry_destroy (za_registry_t **self_p)
{
    za_registry_t *self = *self_p;
    if (!self)
        return;
    FOR_EACH_TASK (self, task)
        zframe_destroy (&task->identity);
    free (self);
    *self_p = NULL;
}
