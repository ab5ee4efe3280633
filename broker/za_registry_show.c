/*  za_registry_show.c: what the broker shows of its registry: the job's
    counts, the cluster view a report is answered with, a row per task.    */
#include "za_registry_private.h"
#include "za/za_json.h"

#include <stdio.h>

const char *za_registry_state_names [] = {
    "empty", "started", "live", "lost", "killed", "backoff", "done", "vacant"
};

void
za_registry_images (const za_registry_t *self, int64_t *bad, int64_t *images)
{
    *bad = *images = 0;
    FOR_EACH_TASK (self, task)
        if (task->kind == ZA_TASK_CHIEF || task->kind == ZA_TASK_WORKER) {
            *bad += task->bad_images;
            *images += task->images;
        }
}

int
za_registry_done (const za_registry_t *self)
{
    int done = 1;
    FOR_EACH_TASK (self, task)
        done &= task->state == ZA_ENTRY_DONE || task->state == ZA_ENTRY_VACANT;
    return done;
}

int
za_registry_failed (const za_registry_t *self)
{
    return self->failed;
}

const za_entry_t *
za_registry_entry (const za_registry_t *self, int kind, int index)
{
    if (kind < 0 || kind >= ZA_BROKER_ROLE_KINDS || index < 0
        || index >= self->config->counts [kind])
        return NULL;
    return &self->tasks [kind][index];
}

json_t *
za_registry_view (const za_registry_t *self)
{
    const za_broker_config_t *config = self->config;
    int ready = 1;
    FOR_EACH_TASK (self, task)
        if ((task->state == ZA_ENTRY_EMPTY || task->state == ZA_ENTRY_STARTED)
            && !za_registry_elastic_slot (self, task))
            ready = 0;
    json_t *ps = json_array ();
    for (int i = 0; i < config->counts [ZA_TASK_PS]; i++) {
        const za_entry_t *task = &self->tasks [ZA_TASK_PS][i];
        if (!*task->endpoint)
            ready = 0;
        json_array_append_new (ps, json_string (task->endpoint));
    }
    //  With the all-reduce, the ring by worker index: the chief, then the workers.
    json_t *ring = config->ring? json_array (): NULL;
    for (int kind = ZA_TASK_CHIEF; ring && kind <= ZA_TASK_WORKER; kind++)
        for (int i = 0; i < config->counts [kind]; i++) {
            const za_entry_t *task = &self->tasks [kind][i];
            if (!*task->endpoint && !za_registry_elastic_slot (self, task))
                ready = 0;
            json_array_append_new (ring, json_string (za_registry_is_member (self, task)
                                                      ? task->endpoint: ""));
        }
    json_t *view = json_pack ("{s:b, s:o, s:i}", "ready", ready, "ps", ps, "num_workers",
                              config->counts [ZA_TASK_CHIEF] + config->counts [ZA_TASK_WORKER]);
    //  An elastic job's ring and members go with their change's number:
    //  none while a restarted broker lets the tasks re-register (they keep
    //  those they hold; a view of no members they would drop whole).
    int numbered = !za_registry_elastic (self) || self->membership > 0;
    if (view && ring && numbered)
        json_object_set_new (view, "ring", ring);
    else
        json_decref (ring);
    //  Every task that reports hears that the job stops for preemption
    //  (those we did not start get no SIGTERM from us).
    if (view && self->preempting)
        json_object_set_new (view, "preempting", json_true ());
    //  An elastic job's members by worker index, and their change's number.
    if (view && za_registry_elastic (self) && numbered) {
        json_t *members = json_array ();
        for (int kind = ZA_TASK_CHIEF; kind <= ZA_TASK_WORKER; kind++)
            for (int i = 0; i < config->counts [kind]; i++)
                if (self->tasks [kind][i].member)
                    json_array_append_new (members, json_integer (kind == ZA_TASK_CHIEF? 0
                                                                  : i + 1));
        json_object_set_new (view, "members", members);
        json_object_set_new (view, "membership", json_integer (self->membership));
    }
    return view;
}

//  A trainer's step times and its judgement: step_ms, phase_ms {input,
//  compute, exchange, apply}, straggler, and (once judged) slowdown
//  against the others' median and its slowest phase.
static void
s_row_times (json_t *row, const za_entry_t *task)
{
    json_object_set_new (row, "step_ms", json_real (task->times.step_ms));
    json_t *phases = json_object ();
    for (int phase = 0; phase < ZA_PHASES; phase++)
        json_object_set_new (phases, za_phase_name (phase),
                             json_real (task->times.phase_ms [phase]));
    json_object_set_new (row, "phase_ms", phases);
    const za_straggler_t *judged = &task->straggler;
    json_object_set_new (row, "straggler", json_boolean (judged->straggler));
    if (judged->slowdown > 0) {
        json_object_set_new (row, "slowdown", json_real (judged->slowdown));
        json_object_set_new (row, "slowest_phase", json_string (za_phase_name (judged->phase)));
    }
}

//  A task's row of the state.
static json_t *
s_row (const za_entry_t *task, double now)
{
    int heard = task->state == ZA_ENTRY_LIVE || task->state == ZA_ENTRY_DONE;
    const char *state = task->state == ZA_ENTRY_LIVE && *task->role_state? task->role_state
                      : za_registry_state_names [task->state];
    json_t *row = json_pack ("{s:s, s:i, s:s, s:i, s:s, s:I, s:f, s:f, s:o, s:i}",
                             "role", za_registry_kind_name (task->kind), "index", task->index,
                             "host", task->host, "pid", (int) task->pid,
                             "state", state, "global_step", (json_int_t) task->step,
                             "steps_per_sec", task->steps_per_sec,
                             "examples_per_sec", task->examples_per_sec,
                             "loss", za_json_real (task->loss),
                             "restarts", task->restarts);
    //  `state` is the one word a person reads (the role's own while it is
    //  live, else ours); the two vocabularies apart, for programs:
    json_object_set_new (row, "task_state", json_string (za_registry_state_names [task->state]));
    json_object_set_new (row, "role_state", heard && *task->role_state
                         ? json_string (task->role_state): json_null ());
    json_object_set_new (row, "eval_step", task->eval_step >= 0
                         ? json_integer (task->eval_step): json_null ());
    json_object_set_new (row, "eval_accuracy", task->eval_step >= 0
                         ? json_real (task->eval_accuracy): json_null ());
    json_object_set_new (row, "heartbeat_age_secs", heard && task->peer.heard
                         ? json_real (za_peer_silence (&task->peer, now)): json_null ());
    if (!row)
        return NULL;
    if (*task->endpoint)
        json_object_set_new (row, "endpoint", json_string (task->endpoint));
    json_object_set_new (row, "bad_images", json_integer (task->bad_images));
    if (task->images > 0)
        json_object_set_new (row, "images", json_integer (task->images));
    if (task->ring_rank >= 0) {
        json_object_set_new (row, "ring_rank", json_integer (task->ring_rank));
        json_object_set_new (row, "wait_ms", json_real (task->wait_ms));
    }
    if (za_registry_timed_trainer (task))
        s_row_times (row, task);
    return row;
}

json_t *
za_registry_rows (const za_registry_t *self, int64_t *step, uint64_t *json_failures)
{
    double now = za_clock_mono ();
    json_t *rows = json_array ();
    *step = 0;
    FOR_EACH_TASK (self, task) {
        if (task->step > *step && task->kind != ZA_TASK_EVALUATOR)
            *step = task->step;
        json_t *row = s_row (task, now);
        if (!row) {
            (*json_failures)++;
            if (*json_failures <= ZA_BROKER_LOGGED_MAX)
                za_info ("broker: could not build a row of the state (%llu so far)",
                         (unsigned long long) *json_failures);
            continue;
        }
        json_array_append_new (rows, row);
    }
    return rows;
}
