/*  za_registration.c: a register or report, checked field by field
    (docs/PROTOCOL.md 13): a message that is wrong anywhere is refused whole,
    with the field and what it needs.                                      */
#include "za_registration.h"
#include "za/za_role_stats.h"
#include "za/za_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

//  The fields a register and a report share: who the task is and where
//  it runs. 0, or -1 with why the first wrong field is refused.
static int
s_parse_identity (json_t *body, int report, const int *counts, za_registration_t *reg,
                  char *why, size_t size)
{
    char role [16];
    json_int_t value;
    reg->kind = s_string (body, "role", role, sizeof role)? -1: za_registration_kind_parse (role);
    if (reg->kind < 0) {
        snprintf (why, size, "role: chief, worker, ps or evaluator is needed");
        return -1;
    }
    int count = counts [reg->kind];
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
                  ZA_REGISTRATION_HOST_MAX - 1);
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
    return 0;
}

//  A trainer's "times": {step_ms, input_ms, compute_ms, exchange_ms,
//  apply_ms, exchange_waits}, every one, or no "times" (all 0). 0, or -1
//  with why it is refused.
static int
s_parse_times (json_t *body, za_step_times_t *times, char *why, size_t size)
{
    json_t *object = json_object_get (body, "times");
    if (!object)
        return 0;
    int bad = !json_is_object (object)
           || s_number (object, "step_ms", 0, HUGE_VAL, &times->step_ms);
    for (int phase = 0; phase < ZA_PHASES && !bad; phase++) {
        char key [32];
        snprintf (key, sizeof key, "%s_ms", za_phase_name (phase));
        bad = s_number (object, key, 0, HUGE_VAL, &times->phase_ms [phase]);
    }
    json_t *waits = json_object_get (object, "exchange_waits");
    if (bad || !json_is_boolean (waits)) {
        snprintf (why, size, "times: {step_ms, input_ms, compute_ms, exchange_ms, apply_ms "
                  "(finite numbers >= 0), exchange_waits (true or false)}, or no times");
        return -1;
    }
    times->exchange_waits = json_is_true (waits);
    return 0;
}

//  The fields only a report has: the task's state, progress and rates, the
//  pairs that come both or neither, and the counts it may leave out. 0, or
//  -1 with why the first wrong field is refused.
static int
s_parse_report (json_t *body, za_registration_t *reg, char *why, size_t size)
{
    json_int_t value;
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
    //  The loss: null when it is not finite (a diverged model's NaN).
    reg->loss = NAN;
    if (s_integer (body, "global_step", 0, INT64_MAX, &value)
        || (!json_is_null (json_object_get (body, "loss"))
            && s_number (body, "loss", -HUGE_VAL, HUGE_VAL, &reg->loss))
        || s_number (body, "steps_per_sec", 0, HUGE_VAL, &reg->steps_per_sec)
        || s_number (body, "examples_per_sec", 0, HUGE_VAL, &reg->examples_per_sec)) {
        snprintf (why, size, "global_step (an integer >= 0), loss (null when not finite), "
                  "steps_per_sec and examples_per_sec (finite numbers, the rates >= 0) are "
                  "needed");
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
    json_t *preempting = json_object_get (body, "preempting");
    json_t *leaving = json_object_get (body, "leaving");
    if ((preempting && !json_is_boolean (preempting)) || (leaving && !json_is_boolean (leaving))) {
        snprintf (why, size, "%s: true, false or nothing",
                  preempting && !json_is_boolean (preempting)? "preempting": "leaving");
        return -1;
    }
    reg->preempting = preempting && json_is_true (preempting);
    reg->leaving = leaving && json_is_true (leaving);
    if (s_parse_times (body, &reg->times, why, size))
        return -1;
    //  Its clock, for the trace's: the view answers with ours.
    json_t *clock = json_object_get (body, "clock");
    reg->clock_sent = -1;
    if (clock && (!json_is_object (clock)
                  || s_number (clock, "sent", 0, HUGE_VAL, &reg->clock_sent)
                  || s_string (clock, "boot", reg->clock_boot, sizeof reg->clock_boot))) {
        snprintf (why, size, "clock: {sent (a finite number >= 0), boot (a string of at most "
                  "%zu bytes)}, or no clock", sizeof reg->clock_boot - 1);
        return -1;
    }
    //  Counts a report may leave out (0).
    const char *keys [] = {"bad_images", "images", "membership"};
    int64_t *fields [] = {&reg->bad_images, &reg->images, &reg->membership};
    for (int k = 0; k < 3; k++) {
        value = 0;
        if (json_object_get (body, keys [k]) && s_integer (body, keys [k], 0, INT64_MAX, &value)) {
            snprintf (why, size, "%s: an integer >= 0, or nothing", keys [k]);
            return -1;
        }
        *fields [k] = value;
    }
    return 0;
}

int
za_registration_parse (json_t *body, int report, const int *counts, za_registration_t *reg,
                       char *why, size_t size)
{
    memset (reg, 0, sizeof *reg);
    if (s_parse_identity (body, report, counts, reg, why, size))
        return -1;
    if (!report)
        return 0;
    return s_parse_report (body, reg, why, size);
}

int
za_registration_kind_parse (const char *name)
{
    for (int kind = 0; kind < ZA_BROKER_ROLE_KINDS; kind++)
        if (name && streq (name, za_task_type_name ((za_task_type_t) kind)))
            return kind;
    return -1;
}
