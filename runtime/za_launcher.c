/*  za_launcher.c: the processes on the broker's side: the broker itself
    (--role broker [--supervise]) and --local, the launcher that runs a
    supervising broker of this very program on this machine, restarts it
    when it dies or hangs, draws one progress line from the broker's state
    and prints the result. It watches the broker through the broker client
    and judges it with the peer class, like every role.                    */
#include "za_launcher.h"
#include "za_trace_merge.h"
#include "za/za_broker.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_preempt.h"
#include "za/za_process.h"
#include "za/za_shm.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define LOCAL_TICK_MS 100
#define LOCAL_WATCH_SECS 1.0
#define LOCAL_LOG_SECS 10.0
#define LOCAL_BROKER_FIRST_SECS 30.0    //  a new broker has this long to first answer
#define LOCAL_BROKER_SILENT_SECS 10.0   //  at least this silence before a broker is hung
#define LOCAL_STOP_GRACE_SECS 10.0
#define LOCAL_MAX_GROUPS 1024
#define PROGRESS_BAR_CHARS 20
#define STOP_WITH_PARENT_ENV "ZA_STOP_WITH_PARENT"   //  the launcher's pid, for its broker

static void
s_self_exe (char *path, size_t size)
{
    ssize_t n = readlink ("/proc/self/exe", path, size - 1);
    path [n > 0? n: 0] = 0;
}

//  1 when `name` found on $PATH is the file `path`.
static int
s_on_path_as (const char *name, const char *path)
{
    const char *dirs = getenv ("PATH");
    char wanted [PATH_MAX], found [PATH_MAX], candidate [PATH_MAX];
    if (!dirs || !realpath (path, wanted))
        return 0;
    while (*dirs) {
        size_t length = strcspn (dirs, ":");
        snprintf (candidate, sizeof candidate, "%.*s/%s", (int) length, dirs, name);
        if (length && access (candidate, X_OK) == 0)
            //  The first one on $PATH is the one a shell runs.
            return realpath (candidate, found) && streq (found, wanted);
        dirs += length + (dirs [length] == ':');
    }
    return 0;
}

static void
s_tool_command (const char *exe, const char *tool, char *command, size_t size)
{
    //  The tool beside this program: by its name when $PATH finds that very
    //  file (installed), else by a path a user can paste from here.
    char beside [PATH_MAX], cwd [PATH_MAX];
    const char *slash = strrchr (exe, '/');
    snprintf (beside, sizeof beside, "%.*s/%s", slash? (int) (slash - exe): 1,
              slash? exe: ".", tool);
    if (access (beside, X_OK) != 0 || s_on_path_as (tool, beside)) {
        snprintf (command, size, "%s", tool);
        return;
    }
    size_t length = getcwd (cwd, sizeof cwd)? strlen (cwd): 0;
    if (length > 1 && strncmp (beside, cwd, length) == 0 && beside [length] == '/')
        snprintf (command, size, "./%s", beside + length + 1);
    else
        snprintf (command, size, "%s", beside);
}

//  The job every task of the cluster runs (caller frees): the options
//  given, the task counts, and max_steps as worked out.
static char *
s_job_text (za_options_t *options, const za_settings_t *s)
{
    json_t *extra = json_pack ("{s:I}", "max_steps", (json_int_t) s->max_steps);
    char *text = za_options_job_text (options, extra);
    json_decref (extra);
    return text;
}

// ---------------------------------------------------------------------------
//  The broker process

int
za_launcher_run_broker (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    if (!s->bind) {
        za_error ("--role broker needs --bind ENDPOINT (e.g. tcp://*:5555)");
        return ZA_EXIT_USAGE;
    }
    //  The broker of a --local launcher stops the job when the launcher is
    //  gone (killed, whatever the signal): no job trains on unwatched. Its
    //  roles must not inherit this: they outlive a broker that is restarted.
    const char *launcher = getenv (STOP_WITH_PARENT_ENV);
    if (launcher) {
        prctl (PR_SET_PDEATHSIG, SIGTERM);
        if (getppid () != (pid_t) atoi (launcher))
            raise (SIGTERM);            //  it died before we could ask
        unsetenv (STOP_WITH_PARENT_ENV);
    }
    za_task_t task;
    int rc = za_task_prepare (&task, program, options, s, 0, za_settings_replicas (s, (int) (1 + s->workers.min)));
    za_task_release (&task);
    if (rc)
        return rc;
    char *job_text = s_job_text (options, s);
    char exe [4096], connect [ZA_CLUSTER_ENDPOINT_MAX], log_dir [4096];
    s_self_exe (exe, sizeof exe);
    //  Roles it starts reach it on loopback when it binds every interface.
    snprintf (connect, sizeof connect, "%s", s->bind);
    char *star = strstr (connect, "://*:");
    if (star)
        snprintf (star, sizeof connect - (size_t) (star - connect), "://127.0.0.1:%s",
                  strstr (s->bind, "://*:") + 5);
    snprintf (log_dir, sizeof log_dir, "%s/logs", s->run.model_dir);
    if (s->supervise && za_mkdirs (log_dir)) {
        free (job_text);
        return 1;
    }
    za_broker_config_t config;
    za_broker_config_init (&config);
    config.bind = s->bind;
    config.connect = connect;
    config.job_text = job_text;
    config.counts [ZA_TASK_CHIEF] = 1;
    config.counts [ZA_TASK_WORKER] = (int) s->workers.max;
    config.min_workers = s->workers.min < s->workers.max? (int) s->workers.min: -1;
    config.elastic_timeout_secs = s->elastic_timeout;
    config.straggler_factor = s->straggler_factor;
    config.counts [ZA_TASK_PS] = (int) s->ps;
    config.counts [ZA_TASK_EVALUATOR] = (int) s->evaluators;
    config.ring = s->strategy == ZA_STRATEGY_ALLREDUCE;
    config.model_dir = s->run.model_dir;
    config.max_steps = s->max_steps;
    config.heartbeat = za_settings_heartbeat (s);
    config.supervise = s->supervise;
    config.exe = exe;
    config.log_dir = log_dir;
    config.max_restarts = (int) s->max_restarts;
    config.metrics_bind = s->metrics_bind;
    config.certs = s->certs;
    config.insecure = s->insecure;
    config.requeue_exit_code = (int) s->requeue_exit_code;
    //  SIGTERM (Slurm's, Kubernetes', the launcher's): the job stops for
    //  preemption, every task saving its part, and we exit with the code.
    za_preempt_set_handled (1);
    const char *restarts = getenv ("ZA_RESTARTS");
    config.restarts = restarts? atoi (restarts): 0;
    config.restart_cause = getenv ("ZA_RESTART_CAUSE");
    za_mkdirs (s->run.model_dir);
    char workers [64];
    za_settings_workers_text (s, workers, sizeof workers);
    za_info ("broker: on %s for 1 chief, %s workers, %" PRId64 " ps, %" PRId64
             " evaluator, until step %" PRId64 "%s", s->bind, workers, s->ps,
             s->evaluators, s->max_steps, s->supervise? ", supervising": "");
    zactor_t *broker = zactor_new (za_broker_actor, &config);
    char *done = NULL, *code = NULL;
    rc = 1;
    //  SIGTERM (preemption) cuts the wait short: the broker stops the job
    //  and says DONE, which we wait for.
    int got = -1;
    while (broker && (got = zstr_recvx (broker, &done, &code, NULL)) < 0 && !zsys_interrupted
           && za_preempt_requested ())
        ;
    if (got == 2 && streq (done, "DONE"))
        rc = atoi (code);
    zstr_free (&done);
    zstr_free (&code);
    zactor_destroy (&broker);
    free (job_text);
    //  --trace, a job of --broker tasks: the broker merges what the tasks
    //  wrote to MODEL_DIR/trace/ (a folder every host shares, or one the
    //  hosts' files were copied into), however the job ended. A --local
    //  launcher merges its own.
    if (!launcher && za_trace_merge (s) && rc == 0)
        rc = 1;
    return zsys_interrupted? ZA_EXIT_INTERRUPTED: rc;
}

// ---------------------------------------------------------------------------
//  --local

//  What the launcher keeps: the broker it runs, its restarts, the progress.
typedef struct {
    const za_settings_t *settings;
    char exe [4096];
    char bind [ZA_CLUSTER_ENDPOINT_MAX];
    char job_path [4200];
    char log [4300];
    char logs [4200];
    pid_t broker;
    pid_t groups [LOCAL_MAX_GROUPS];    //  every broker's process group, with its roles
    int group_count;
    int restarts, failures;
    double restart_at, broker_since;
    double broker_started;              //  its spawn (broker_since: also its kill, hung)
    char cause [256];
    za_broker_config_t backoff;         //  the broker restarts as it restarts tasks
    za_broker_client_t *client;
    int tty;
    char line [512];
    char shown [512];                   //  the last line a log got
    double started;                     //  the job's start, for its total time
    double started_wall;                //  the same, on the wall clock (events' time)
    za_broker_state_t *last;            //  the last state heard, or NULL
    double preempt_deadline;            //  SIGTERM passed on: the job ends by then
} s_local_t;

//  Starts a supervising broker of this program in a process group of its own
//  (with the roles it starts): Ctrl-C reaches us alone, and we can stop
//  every process of the job.
static int
s_spawn_broker (s_local_t *self)
{
    char max_restarts [32], restarts_env [32], cause_env [300];
    snprintf (max_restarts, sizeof max_restarts, "%" PRId64, self->settings->max_restarts);
    snprintf (restarts_env, sizeof restarts_env, "ZA_RESTARTS=%d", self->restarts);
    snprintf (cause_env, sizeof cause_env, "ZA_RESTART_CAUSE=%s", self->cause);
    const char *metrics = self->settings->metrics_bind;
    const char *certs = self->settings->certs;
    char *argv [] = {self->exe, "--role", "broker", "--bind", self->bind, "--job",
                     self->job_path, "--supervise", "--max-restarts", max_restarts,
                     NULL, NULL, NULL, NULL, NULL, NULL};
    int argc = 10;
    if (metrics) {
        argv [argc++] = "--metrics-bind";
        argv [argc++] = (char *) metrics;
    }
    if (certs) {
        argv [argc++] = "--certs";
        argv [argc++] = (char *) certs;
    }
    if (self->settings->insecure)
        argv [argc++] = "--insecure";
    char parent_env [64];
    snprintf (parent_env, sizeof parent_env, STOP_WITH_PARENT_ENV "=%d", (int) getpid ());
    const char *env [] = {restarts_env, cause_env, parent_env, NULL};
    self->broker = za_process_spawn (self->exe, argv, env, self->log, 1);
    if (self->broker < 0)
        return -1;
    if (self->group_count < LOCAL_MAX_GROUPS)
        self->groups [self->group_count++] = self->broker;
    self->broker_since = self->broker_started = za_clock_mono ();
    za_peer_t *peer = za_broker_client_peer (self->client);
    za_peer_init (peer, peer->beat, self->broker_since);
    return 0;
}

//  Stops every process of the job: each broker's process group (its roles
//  are in it), SIGTERM, then SIGKILL after a grace; reaps them all.
static void
s_stop_groups (s_local_t *self)
{
    for (int pass = 0; pass < 2; pass++) {
        int alive = 0;
        for (int g = 0; g < self->group_count; g++)
            if (killpg (self->groups [g], pass? SIGKILL: SIGTERM) == 0)
                alive++;
        double deadline = za_clock_mono () + LOCAL_STOP_GRACE_SECS;
        while (alive && za_clock_mono () < deadline) {
            while (waitpid (-1, NULL, WNOHANG) > 0)
                ;
            alive = 0;
            for (int g = 0; g < self->group_count; g++)
                alive += killpg (self->groups [g], 0) == 0;
            if (alive)
                zclock_sleep (50);
        }
        if (!alive)
            break;
    }
    while (waitpid (-1, NULL, WNOHANG) > 0)
        ;
}

//  "1:02:03" or "4:05".
static void
s_duration (double secs, char *text, size_t size)
{
    if (!(secs >= 0) || secs > 99 * 3600) {
        snprintf (text, size, "?");
        return;
    }
    int s = (int) (secs + 0.5);
    if (s >= 3600)
        snprintf (text, size, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf (text, size, "%d:%02d", s / 60, s % 60);
}

//  One line of progress from the broker's state.
//  At 100% (or `over`, training stopped early) the time the job took
//  (`elapsed`) stands where the ETA was.
static void
s_progress_line (const za_broker_state_t *state, char *line, size_t size, int bar,
                 double elapsed, int over)
{
    double loss = 0, steps_per_sec = 0, examples_per_sec = 0, eval_accuracy = -1;
    int64_t eval_step = -1;
    int restarts = state->broker_restarts;
    for (int t = 0; t < state->task_count; t++) {
        const za_broker_task_row_t *row = &state->tasks [t];
        restarts += row->restarts;
        if (row->type == ZA_TASK_CHIEF) {
            loss = row->loss;
            steps_per_sec = row->steps_per_sec;
        }
        if (row->type == ZA_TASK_CHIEF || row->type == ZA_TASK_WORKER)
            examples_per_sec += row->examples_per_sec;
        if (row->type == ZA_TASK_EVALUATOR && row->eval_step >= 0) {
            eval_step = row->eval_step;
            eval_accuracy = row->eval_accuracy;
        }
    }
    int64_t max_steps = state->max_steps, step = state->global_step;
    //  A last push may count past the end: the step shown is at most the total.
    if (max_steps > 0 && step > max_steps)
        step = max_steps;
    double fraction = max_steps > 0? (double) step / (double) max_steps: 0;
    int done = over || (max_steps > 0 && step >= max_steps);
    char eta [32], eval [64] = "eval -", meter [PROGRESS_BAR_CHARS + 4] = "";
    s_duration (done? elapsed: steps_per_sec > 0? (double) (max_steps - step) / steps_per_sec
                                                : -1, eta, sizeof eta);
    if (eval_step >= 0)
        snprintf (eval, sizeof eval, "eval %.4f@%" PRId64, eval_accuracy, eval_step);
    if (bar) {
        int filled = (int) (fraction * PROGRESS_BAR_CHARS);
        meter [0] = '[';
        for (int c = 0; c < PROGRESS_BAR_CHARS; c++)
            meter [1 + c] = c < filled? '#': '.';
        meter [PROGRESS_BAR_CHARS + 1] = ']';
        meter [PROGRESS_BAR_CHARS + 2] = ' ';
        meter [PROGRESS_BAR_CHARS + 3] = 0;
    }
    snprintf (line, size, "%s%3.0f%% step %" PRId64 "/%" PRId64 "  loss %.4f  %.0f ex/s  %s  "
              "%s %s  restarts %d%s", meter, 100 * fraction, step, max_steps, loss,
              examples_per_sec, eval, done? "took": "ETA", eta, restarts,
              over? "  (stopped early)": "");
}

//  Says where a preempted job stopped and how to go on.
static void
s_print_preempted (s_local_t *self)
{
    const za_settings_t *s = self->settings;
    int64_t newest = za_checkpoint_newest_step (s->run.model_dir);
    if (self->tty)
        printf ("\n");
    printf ("zactor: preempted at step %" PRId64 " of %" PRId64 ": every process of the job "
            "is stopped and the checkpoint is in %s; run the same command again to resume "
            "from it (exit %d)\n", newest > 0? newest: 0, s->max_steps,
            s->run.model_dir, (int) s->requeue_exit_code);
    fflush (stdout);
}

//  Reaps what ended. Returns 1 when the job is over (rc set), else 0; a
//  broker that died is started again after the backoff.
static int
s_reap (s_local_t *self, double now, int *rc)
{
    int status;
    pid_t pid;
    while ((pid = waitpid (-1, &status, WNOHANG)) > 0) {
        if (pid != self->broker)
            continue;               //  an orphaned role, reaped
        self->broker = -1;
        if (WIFEXITED (status) && (WEXITSTATUS (status) == 0
                                   || WEXITSTATUS (status) == self->settings->requeue_exit_code)) {
            *rc = WEXITSTATUS (status);     //  done, or stopped for preemption
            return 1;
        }
        char how [128];
        if (WIFEXITED (status))
            snprintf (how, sizeof how, "exit code %d", WEXITSTATUS (status));
        else
            snprintf (how, sizeof how, "killed by signal %d", WTERMSIG (status));
        size_t used = strlen (self->cause);
        snprintf (self->cause + used, sizeof self->cause - used, "%s%s", used? ", ": "", how);
        if (WIFEXITED (status) && WEXITSTATUS (status) == 1)
            return 1;               //  the broker gave up on the job
        if (self->restarts >= self->settings->max_restarts) {
            fprintf (stderr, "\nzactor: the broker failed (%s) after %d restarts\n",
                     self->cause, self->restarts);
            return 1;
        }
        self->restart_at = now + za_broker_backoff_next (&self->backoff, &self->failures,
                                                         now - self->broker_started);
    }
    return 0;
}

//  A dead broker is started again when its backoff is over; one silent too
//  long (hung) is killed, and reaped on a later turn.
static int
s_tend_broker (s_local_t *self, double now)
{
    if (self->broker < 0 && now >= self->restart_at && !self->preempt_deadline) {
        self->restarts++;
        if (self->tty)
            printf ("\n");
        printf ("zactor: the broker stopped (%s); restart %d\n", self->cause, self->restarts);
        fflush (stdout);
        int failed = s_spawn_broker (self);
        self->cause [0] = 0;
        if (failed) {
            fprintf (stderr, "zactor: cannot start the broker again\n");
            return -1;
        }
    }
    za_peer_t *peer = za_broker_client_peer (self->client);
    int hung = peer->heard? za_peer_expired (peer, now)
                          : now - self->broker_since > LOCAL_BROKER_FIRST_SECS;
    if (self->broker > 0 && hung) {
        snprintf (self->cause, sizeof self->cause, "silent for %.0f s",
                  za_peer_silence (peer, now));
        kill (self->broker, SIGKILL);
        za_peer_init (peer, peer->beat, now);
        self->broker_since = now;
    }
    return 0;
}

//  The broker's state, when a reply came: the progress line.
static void
s_on_state (s_local_t *self, double *last_log)
{
    za_broker_reply_t reply;
    memset (&reply, 0, sizeof reply);
    if (za_broker_client_recv (self->client, &reply) == 0 && reply.op == ZA_OP_STATE) {
        double now = za_clock_mono ();
        s_progress_line (reply.state, self->line, sizeof self->line, self->tty,
                         now - self->started, 0);
        //  The job's last line shows the last state whose trainers were
        //  training (one where they have ended says loss 0 and 0 ex/s).
        int training = 0;
        for (int t = 0; t < reply.state->task_count; t++) {
            const za_broker_task_row_t *row = &reply.state->tasks [t];
            training |= (row->type == ZA_TASK_CHIEF || row->type == ZA_TASK_WORKER)
                        && row->examples_per_sec > 0;
        }
        if (!self->last && (self->last = malloc (sizeof *self->last)))
            training = 1;           //  the first state: kept whatever it says
        if (self->last && training)
            memcpy (self->last, reply.state, sizeof *self->last);
        if (self->tty) {
            printf ("\r\033[K%s", self->line);
            fflush (stdout);
        }
        else
        if (now - *last_log >= LOCAL_LOG_SECS) {
            printf ("%s\n", self->line);
            fflush (stdout);
            *last_log = now;
            memcpy (self->shown, self->line, sizeof self->shown);
        }
    }
    za_broker_reply_clear (&reply);
}

//  Supervises the broker until the job ends. Returns the job's status.
static int
s_supervise (s_local_t *self)
{
    zpoller_t *poller = zpoller_new (za_broker_client_sock (self->client), NULL);
    double now = za_clock_mono (), last_log = now, last_watch = 0;
    self->started = now;
    self->started_wall = za_clock_wall ();
    int rc = 1;
    while (1) {
        if (zsys_interrupted) {
            rc = ZA_EXIT_INTERRUPTED;
            break;
        }
        //  Preempted: SIGTERM to every process of the job at once (as Slurm
        //  and Kubernetes send it); the broker ends the job with the
        //  requeue code once every task saved its part.
        if (za_preempt_requested () && !self->preempt_deadline) {
            for (int g = 0; g < self->group_count; g++)
                killpg (self->groups [g], SIGTERM);
            self->preempt_deadline = za_clock_mono () + ZA_PREEMPT_GRACE_SECS + 10;
        }
        if (self->preempt_deadline && za_clock_mono () > self->preempt_deadline) {
            rc = (int) self->settings->requeue_exit_code;
            break;
        }
        if (zpoller_wait (poller, LOCAL_TICK_MS))
            s_on_state (self, &last_log);
        now = za_clock_mono ();
        if (s_reap (self, now, &rc) || s_tend_broker (self, now))
            break;
        if (now - last_watch >= LOCAL_WATCH_SECS) {
            za_broker_client_watch (self->client);
            last_watch = now;
        }
    }
    zpoller_destroy (&poller);
    //  A job done ends on its 100% line, with the time it took, once; one
    //  stopped early at the step it ended at.
    int64_t stopped = -1;
    int early = self->settings->eval.stop_if_no_improvement
                && za_early_stop_final_step (self->settings->run.model_dir, &stopped) == 0;
    if (rc == 0 && self->last && self->last->max_steps > 0) {
        self->last->global_step = early? stopped: self->last->max_steps;
        s_progress_line (self->last, self->line, sizeof self->line, self->tty,
                         za_clock_mono () - self->started, early);
        if (self->tty)
            printf ("\r\033[K");
        memset (self->shown, 0, sizeof self->shown);
    }
    free (self->last);
    self->last = NULL;
    if (*self->line && (self->tty || strcmp (self->line, self->shown)))
        printf ("%s\n", self->line);
    return rc;
}

//  Calls fn with each event of this job (since it started) in
//  MODEL_DIR/events.jsonl, oldest first.
typedef void (s_event_fn) (json_t *event, const char *kind, int64_t *a, int64_t *b);

static void
s_events (const s_local_t *self, s_event_fn *fn, int64_t *a, int64_t *b)
{
    char path [4200];
    snprintf (path, sizeof path, "%.4095s/events.jsonl", self->settings->run.model_dir);
    FILE *file = fopen (path, "r");
    char *line = NULL;
    size_t size = 0;
    while (file && getline (&line, &size, file) > 0) {
        json_t *event = json_loads (line, 0, NULL);
        const char *kind = json_string_value (json_object_get (event, "event"));
        if (kind && json_number_value (json_object_get (event, "time")) >= self->started_wall)
            fn (event, kind, a, b);
        json_decref (event);
    }
    free (line);
    if (file)
        fclose (file);
}

//  Why the broker gave up on a task: one line each.
static void
s_print_gave_up (json_t *event, const char *kind, int64_t *a, int64_t *b)
{
    (void) a, (void) b;
    if (streq (kind, "gave_up"))
        fprintf (stderr, "zactor: %s %d: %s\n",
                 json_string_value (json_object_get (event, "role")),
                 (int) json_integer_value (json_object_get (event, "index")),
                 json_string_value (json_object_get (event, "cause")));
}

//  The images the trainers skipped (*bad) and listed (*images), from the
//  broker's last "done" event (the last of them, after a broker restart).
static void
s_broker_counts (json_t *event, const char *kind, int64_t *bad, int64_t *images)
{
    const char *cause = json_string_value (json_object_get (event, "cause"));
    const char *at = cause && streq (kind, "done")? strstr (cause, ZA_BROKER_SKIPPED_TEXT)
                                                  : NULL;
    if (at && sscanf (at + strlen (ZA_BROKER_SKIPPED_TEXT), "%" SCNd64 " of %" SCNd64,
                      bad, images) != 2)
        *bad = *images = 0;
}

//  What the job left: the final evaluation, the images skipped, the best
//  evaluation, where things are.
static int
s_report (const s_local_t *self)
{
    const za_settings_t *s = self->settings;
    const char *logs = self->logs;
    //  With --no-eval and no evaluator task, no evaluation is the plan.
    int evaluated = !(s->no_eval && s->evaluators == 0);
    int rc = evaluated? za_task_print_last_eval (s, -1): 0;
    int64_t bad = 0, images = 0;
    s_events (self, s_broker_counts, &bad, &images);
    za_task_print_skipped (s, bad, images, evaluated, logs);
    char best_dir [4200], best_path [4300];
    za_evaluator_best_dir (s->run.model_dir, s->eval.name, best_dir, sizeof best_dir);
    snprintf (best_path, sizeof best_path, "%s/best.json", best_dir);
    json_t *best = json_load_file (best_path, 0, NULL);
    //  best.json names its metric (an older one: accuracy).
    json_t *metric = json_object_get (best, "metric"), *value = json_object_get (best, "value");
    if (best)
        printf ("best evaluation: %s %.4f at step %" JSON_INTEGER_FORMAT ", kept in %s\n",
                metric? json_string_value (metric): "accuracy",
                json_number_value (value? value: json_object_get (best, "accuracy")),
                json_integer_value (json_object_get (best, "global_step")), best_dir);
    json_decref (best);
    printf ("checkpoints and TensorBoard events in %s, evaluations in %s/eval%s%s, events in "
            "%s/events.jsonl, logs in %s\n", s->run.model_dir, s->run.model_dir,
            s->eval.name && *s->eval.name? "_": "", s->eval.name? s->eval.name: "",
            s->run.model_dir, logs);
    return rc;
}

//  Writes the job for the broker to MODEL_DIR/job.json. 0, or -1.
static int
s_write_job (s_local_t *self, za_options_t *options)
{
    char *job = s_job_text (options, self->settings);
    FILE *file = job && za_mkdirs (self->logs) == 0? fopen (self->job_path, "w"): NULL;
    int written = file && fputs (job, file) >= 0;
    if (file && fclose (file))
        written = 0;
    free (job);
    return written? 0: za_error ("cannot write %s", self->job_path);
}

int
za_launcher_run_local (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    za_task_t task;
    //  The evaluation data is checked when a task will evaluate on it.
    int need_eval = s->evaluators > 0 || !s->no_eval || s->train_and_evaluate;
    int rc = za_task_prepare (&task, program, options, s, need_eval,
                              za_settings_replicas (s, (int) (1 + s->workers.min)));
    za_task_release (&task);
    if (rc)
        return rc;
    if (s->eval.stop_if_no_improvement && s->evaluators < 1) {
        za_error ("--stop-if-no-improvement needs an evaluator to watch the metric: add "
                  "--evaluators 1");
        return ZA_EXIT_USAGE;
    }
    if (s->wire_dtype && streq (s->wire_dtype, "bf16") && za_shm_enabled ())
        za_info ("--wire-dtype bf16: the tasks of one host pass tensors through shared "
                 "memory, where bf16 saves no time (it pays across links: "
                 "docs/precision.md)");
    s_local_t self_data, *self = &self_data;
    memset (self, 0, sizeof *self);
    self->settings = s;
    self->tty = isatty (STDOUT_FILENO);
    za_broker_config_init (&self->backoff);
    snprintf (self->logs, sizeof self->logs, "%.4095s/logs", s->run.model_dir);
    snprintf (self->job_path, sizeof self->job_path, "%.4095s/job.json", s->run.model_dir);
    snprintf (self->log, sizeof self->log, "%.4095s/logs/broker.log", s->run.model_dir);
    if (s_write_job (self, options) || za_cluster_free_endpoint ("127.0.0.1", self->bind,
                                                             sizeof self->bind))
        return 1;
    s_self_exe (self->exe, sizeof self->exe);
    za_trace_clear (s);
    //  The broker answers a watch at once; one that misses several is hung.
    za_heartbeat_t beat = za_settings_heartbeat (s);
    double silent_max = beat.ivl_secs * beat.liveness;
    if (silent_max < LOCAL_BROKER_SILENT_SECS)
        silent_max = LOCAL_BROKER_SILENT_SECS;
    za_heartbeat_t watch = {LOCAL_WATCH_SECS, (int) (silent_max / LOCAL_WATCH_SECS + 0.5)};
    self->client = za_broker_client_new (self->bind, watch);
    //  Orphans (roles whose broker died) come to us: we reap them.
    prctl (PR_SET_CHILD_SUBREAPER, 1);
    if (!self->client || s_spawn_broker (self)) {
        za_error ("cannot start the broker (%s)", self->exe);
        za_broker_client_destroy (&self->client);
        return 1;
    }
    char top [PATH_MAX];
    s_tool_command (self->exe, "zactor-top", top, sizeof top);
    char workers [64];
    za_settings_workers_text (s, workers, sizeof workers);
    printf ("zactor: 1 chief, %s workers, %" PRId64 " ps, %" PRId64 " evaluator on "
            "this machine, until step %" PRId64 "\n  watch:  %s --broker %s%s%s\n"
            "  logs:   %s\n", workers, s->ps, s->evaluators, s->max_steps, top, self->bind,
            s->certs? " --certs ": "", s->certs? s->certs: "", self->logs);
    if (s->metrics_bind)
        printf ("  metrics: http://%s/metrics\n", s->metrics_bind);
    fflush (stdout);
    za_preempt_set_handled (1);
    rc = s_supervise (self);
    za_broker_client_destroy (&self->client);
    //  Whatever is left (nothing, after a job that ended well) is stopped.
    s_stop_groups (self);
    //  --trace: the tasks' traces, however the job ended.
    if (za_trace_merge (s) && rc == 0)
        rc = 1;
    if (rc == ZA_EXIT_INTERRUPTED)
        fprintf (stderr, "zactor: interrupted; every process of the job is stopped\n");
    else
    if (rc == (int) s->requeue_exit_code && rc != 0)
        s_print_preempted (self);
    else
    if (rc == 0)
        rc = s_report (self);
    else {
        s_events (self, s_print_gave_up, NULL, NULL);
        fprintf (stderr, "zactor: the job failed: see %s/events.jsonl and %s\n",
                 s->run.model_dir, self->logs);
    }
    return rc;
}
