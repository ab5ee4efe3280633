/*  za_early_stop.c: --best-metric's goal and --stop-if-no-improvement's
    rule, and the request the evaluator leaves for the chief (za_early_stop.h). */
#include "za/za_early_stop.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "za/za_util.h"

int
za_metric_goal_parse (const char *option, const char *text, za_metric_goal_t *goal)
{
    memset (goal, 0, sizeof *goal);
    if (!text || !*text)
        return za_error ("%s: a metric needs a name (accuracy, loss, auc, ...)", option);
    size_t len = strcspn (text, ",");
    if (len == 0 || len >= sizeof goal->name)
        return za_error ("%s '%s': a metric's name has 1 to %zu characters", option, text,
                         sizeof goal->name - 1);
    memcpy (goal->name, text, len);
    goal->name [len] = 0;
    size_t name_len = strlen (goal->name);
    goal->maximize = !(name_len >= 4 && !strcmp (goal->name + name_len - 4, "loss"));
    if (text [len] == ',') {
        const char *mode = text + len + 1;
        if (!strcmp (mode, "max"))
            goal->maximize = 1;
        else
        if (!strcmp (mode, "min"))
            goal->maximize = 0;
        else
            return za_error ("%s '%s': after the metric's name, max or min (higher or "
                             "lower is better)", option, text);
    }
    return 0;
}

int
za_metric_goal_better (const za_metric_goal_t *goal, double value, double best)
{
    if (!isfinite (value))
        return 0;
    if (isnan (best))
        return 1;
    return goal->maximize? value > best: value < best;
}

int
za_early_stop_parse (const char *text, za_early_stop_t *self)
{
    memset (self, 0, sizeof *self);
    self->best = NAN;
    self->best_step = -1;
    const char *comma = text? strchr (text, ','): NULL;
    if (!comma)
        return za_error ("--stop-if-no-improvement '%s': METRIC,STEPS (as accuracy,2000 or "
                         "loss,2000,min)", text? text: "");
    char *end = NULL;
    long long steps = strtoll (comma + 1, &end, 10);
    if (end == comma + 1 || (*end && *end != ',') || steps < 1)
        return za_error ("--stop-if-no-improvement '%s': STEPS is a whole number of global "
                         "steps, 1 or more", text);
    //  The name and the direction, without the steps between them.
    char goal [80];
    snprintf (goal, sizeof goal, "%.*s%s", (int) (comma - text), text, *end? end: "");
    if (za_metric_goal_parse ("--stop-if-no-improvement", goal, &self->goal))
        return -1;
    self->steps = steps;
    return 0;
}

int
za_early_stop_add (za_early_stop_t *self, int64_t step, double value)
{
    if (self->best_step < 0 || za_metric_goal_better (&self->goal, value, self->best)) {
        self->best = value;
        self->best_step = step;
    }
    return step - self->best_step >= self->steps;
}

static void
s_path (const char *model_dir, char *path, size_t size)
{
    snprintf (path, size, "%s/%s", model_dir, ZA_EARLY_STOP_FILE);
}

//  Writes the file whole under a name of this process's, then into place:
//  over what is there (replace), or only where nothing is (link; 1 when
//  there was a request already). 0, 1, or -1 with an error.
static int
s_write (const char *model_dir, json_t *json, int replace)
{
    char path [4200], tmp [4300];
    s_path (model_dir, path, sizeof path);
    snprintf (tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid ());
    int rc = json_dump_file (json, tmp, JSON_INDENT (2) | JSON_PRESERVE_ORDER)? -1: 0;
    if (rc == 0 && replace)
        rc = rename (tmp, path)? -1: 0;
    else
    if (rc == 0)
        rc = link (tmp, path) == 0? 0: errno == EEXIST? 1: -1;
    int err = errno;
    unlink (tmp);
    if (rc < 0)
        return za_error ("early stopping: cannot write '%s': %s", path, strerror (err));
    return rc;
}

int
za_early_stop_request (const char *model_dir, const za_early_stop_t *self, int64_t step)
{
    json_t *json = json_pack ("{s:I, s:s, s:s, s:I, s:I}", "requested_at_step",
                              (json_int_t) step, "metric", self->goal.name, "better",
                              self->goal.maximize? "higher": "lower", "best_step",
                              (json_int_t) self->best_step, "steps", (json_int_t) self->steps);
    if (json && isfinite (self->best))
        json_object_set_new (json, "best", json_real (self->best));
    int rc = json? s_write (model_dir, json, 0): za_error ("early stopping: out of memory");
    json_decref (json);
    return rc < 0? -1: 0;
}

int
za_early_stop_requested (const char *model_dir)
{
    char path [4200];
    s_path (model_dir, path, sizeof path);
    return access (path, F_OK) == 0;
}

int
za_early_stop_confirm (const char *model_dir, int64_t final_step)
{
    char path [4200];
    s_path (model_dir, path, sizeof path);
    json_t *json = json_load_file (path, 0, NULL);
    if (!json)
        json = json_object ();
    if (!json)
        return za_error ("early stopping: out of memory");
    json_object_set_new (json, "final_step", json_integer ((json_int_t) final_step));
    int rc = s_write (model_dir, json, 1);
    json_decref (json);
    return rc;
}

int
za_early_stop_final_step (const char *model_dir, int64_t *step)
{
    char path [4200];
    s_path (model_dir, path, sizeof path);
    if (access (path, F_OK) != 0)
        return -1;
    json_t *json = json_load_file (path, 0, NULL);
    json_t *final = json_object_get (json, "final_step");
    int rc = json_is_integer (final)? 0: -1;
    if (rc == 0)
        *step = (int64_t) json_integer_value (final);
    json_decref (json);
    return rc;
}

int
za_early_stop_end (const char *model_dir, int64_t final_step)
{
    return za_early_stop_requested (model_dir)? za_early_stop_confirm (model_dir, final_step)
                                              : 0;
}
