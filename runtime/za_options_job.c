/*  za_options_job.c: the options as jobs: a job file or the broker's job
    applied, the job every task of a cluster runs, and --print-settings.    */
#include "za_options_private.h"
#include "za/za_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  A job value as the text its flag would take, into text. -1 with an error
//  when no flag takes it.
static int
s_job_text (const za_option_t *option, json_t *value, const char *what, char *text,
            size_t size)
{
    text [0] = 0;
    if (json_is_string (value))
        snprintf (text, size, "%s", json_string_value (value));
    else
    if (json_is_integer (value))
        snprintf (text, size, "%" JSON_INTEGER_FORMAT, json_integer_value (value));
    else
    if (json_is_real (value))
        snprintf (text, size, "%.17g", json_real_value (value));
    else
    if (json_is_boolean (value) && option->type == ZA_OPTION_FLAG)
        snprintf (text, size, "%s", json_is_true (value)? "true": "false");
    else
    if (json_is_array (value) && option->type == ZA_OPTION_LIST) {
        size_t i;
        json_t *item;
        json_array_foreach (value, i, item) {
            if (!json_is_integer (item))
                return za_error ("%s: wants a list of integers", what);
            size_t used = strlen (text);
            snprintf (text + used, size - used, "%s%" JSON_INTEGER_FORMAT, i? ",": "",
                      json_integer_value (item));
        }
    }
    else
        return za_error ("%s: %s", what, option->type == ZA_OPTION_FLAG
                         ? "wants true or false" : "wants a string, a number or a list of integers");
    if (strlen (text) >= size - 1)
        return za_error ("%s: the value is longer than %zu bytes", what, size - 2);
    return 0;
}

//  "roles": {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}.
static int
s_apply_roles (za_options_t *self, json_t *roles, const char *source, za_option_source_t from)
{
    static const char *const kinds [][2] = {
        {"chief", NULL}, {"worker", "workers"}, {"ps", "ps"}, {"evaluator", "evaluators"}
    };
    const char *kind;
    json_t *count;
    json_object_foreach (roles, kind, count) {
        char what [300];
        snprintf (what, sizeof what, "%s: roles.%s", source, kind);
        int found = -1;
        for (int k = 0; k < 4; k++)
            if (streq (kind, kinds [k][0]))
                found = k;
        //  The workers may be a range, "MIN:MAX" (an elastic job).
        int range = found == 1 && json_is_string (count);
        if (found < 0 || (!json_is_integer (count) && !range))
            return za_error ("%s: roles are chief, worker, ps and evaluator, each an integer "
                             "count (the workers may be \"MIN:MAX\")", what);
        json_int_t n = range? 0: json_integer_value (count);
        if (found == 0) {
            if (n != 1)
                return za_error ("%s is %" JSON_INTEGER_FORMAT ": 1 to 1", what, n);
            continue;
        }
        const za_option_t *option = za_options_find (self, kinds [found][1]);
        if (!range && (n < option->min || n > option->max))
            return za_error ("%s is %" JSON_INTEGER_FORMAT ": %.0f to %.0f", what, n,
                             option->min, option->max);
        char text [32];
        if (range)
            snprintf (text, sizeof text, "%.31s", json_string_value (count));
        else
            snprintf (text, sizeof text, "%" JSON_INTEGER_FORMAT, n);
        if (za_options_set (self, kinds [found][1], text, from, what))
            return -1;
    }
    return 0;
}

static int
s_apply_object (za_options_t *self, json_t *object, const char *section, const char *source,
                za_option_source_t from)
{
    const char *key;
    json_t *value;
    json_object_foreach (object, key, value) {
        char what [300];
        snprintf (what, sizeof what, "%s: %s%s%s", source, section? section: "",
                  section? ".": "", key);
        if (!section && streq (key, ROLES_KEY) && json_is_object (value)) {
            if (s_apply_roles (self, value, source, from))
                return -1;
            continue;
        }
        if (!section && json_is_object (value)) {
            if (s_apply_object (self, value, key, source, from))
                return -1;
            continue;
        }
        int i = za_options_index_of (self, key);
        if (i < 0 || za_options_hidden (self, &self->options [i]) || strchr (key, '-'))
            return za_error ("%s: not a job key (job keys are the flags of '%s --help' with "
                             "'_' for '-')", what, self->program);
        const za_option_t *option = &self->options [i];
        if (option->scope == ZA_SCOPE_COMMAND)
            return za_error ("%s: goes on the command line, not in a job", what);
        //  From the network: the job's settings only (no --bind, --certs,
        //  --insecure, --host of ours), and no text with control characters
        //  (a path or a name is used as given).
        if (self->from_wire && option->scope != ZA_SCOPE_JOB)
            return za_error ("%s: this process's own setting; a job from the network may "
                             "not set it", what);
        //  null: not set (--print-settings writes an unset text so).
        if (json_is_null (value))
            continue;
        const char *text_value = json_string_value (value);
        for (const char *c = text_value; self->from_wire && c && *c; c++)
            if ((unsigned char) *c < 0x20 || *c == 0x7f)
                return za_error ("%s: a control character in a text from the network", what);
        //  A text as it is (class names may be long); others as their flag's.
        char text [TEXT_MAX_CHARS];
        if (text_value && option->type == ZA_OPTION_STRING) {
            if (za_options_set (self, key, text_value, from, what))
                return -1;
        }
        else
        if (s_job_text (option, value, what, text, sizeof text)
            || za_options_set (self, key, text, from, what))
            return -1;
    }
    return 0;
}

int
za_options_apply_job (za_options_t *self, json_t *job, const char *source,
                      za_option_source_t from)
{
    if (!json_is_object (job))
        return za_error ("%s: the job is not a JSON object", source);
    return s_apply_object (self, job, NULL, source, from);
}

int
za_options_apply_wire_job (za_options_t *self, json_t *job, const char *source)
{
    self->from_wire = 1;
    int rc = za_options_apply_job (self, job, source, ZA_FROM_JOB);
    self->from_wire = 0;
    return rc;
}

int
za_options_apply_job_file (za_options_t *self, const char *path)
{
    json_error_t error;
    json_t *job = json_load_file (path, 0, &error);
    if (!job) {
        if (error.line > 0)
            return za_error ("%s: line %d column %d: %s", path, error.line, error.column,
                             error.text);
        return za_error ("%s: %s", path, error.text);
    }
    int rc = za_options_apply_job (self, job, path, ZA_FROM_JOB);
    json_decref (job);
    return rc;
}

static json_t *
s_job_value (const za_options_t *self, const za_option_t *option)
{
    const void *field = za_options_field ((za_options_t *) self, option);
    //  A number with no default, never set (0: the optimizer's learning
    //  rate, max_steps from --epochs, the whole evaluation set) is null,
    //  which a job reads back as unset.
    if (!option->fallback && self->from [option - self->options] == ZA_FROM_DEFAULT
        && ((option->type == ZA_OPTION_INT && *(const int64_t *) field == 0)
            || (option->type == ZA_OPTION_NUMBER && *(const double *) field == 0)
            || (option->type == ZA_OPTION_REAL && *(const float *) field == 0)))
        return json_null ();
    switch (option->type) {
        case ZA_OPTION_FLAG: return json_boolean (*(const int *) field);
        case ZA_OPTION_INT: return json_integer (*(const int64_t *) field);
        case ZA_OPTION_NUMBER: return json_real (*(const double *) field);
        case ZA_OPTION_RANGE: {
            const za_option_range_t *range = (const za_option_range_t *) field;
            char text [NAME_MAX_CHARS];
            za_options_value_text (self, option, text, sizeof text);
            return range->min == range->max? json_integer (range->max): json_string (text);
        }
        case ZA_OPTION_REAL:        //  as --help and --print-settings write them
        case ZA_OPTION_ENUM: {
            char text [NAME_MAX_CHARS];
            za_options_value_text (self, option, text, sizeof text);
            return option->type == ZA_OPTION_REAL? json_real (strtod (text, NULL))
                                                  : json_string (text);
        }
        case ZA_OPTION_LIST: {
            json_t *list = json_array ();
            int64_t values [TEXT_MAX_CHARS / 2];
            int count = za_options_list (*(const char *const *) field, values,
                                         TEXT_MAX_CHARS / 2);
            for (int i = 0; i < count; i++)
                json_array_append_new (list, json_integer (values [i]));
            return list;
        }
        default: {
            const char *text = *(const char *const *) field;
            return text? json_string (text): json_null ();
        }
    }
}

char *
za_options_job_text (const za_options_t *self, json_t *extra)
{
    json_t *job = json_object ();
    for (int i = 0; i < self->count; i++) {
        const za_option_t *option = &self->options [i];
        if (option->scope != ZA_SCOPE_JOB || self->from [i] == ZA_FROM_DEFAULT
            || streq (option->flag, "workers") || streq (option->flag, "ps")
            || streq (option->flag, "evaluators"))
            continue;
        char key [NAME_MAX_CHARS];
        za_option_key (option, key, sizeof key);
        json_t *value = s_job_value (self, option);
        if (!json_is_null (value))
            json_object_set_new (job, key, value);
        else
            json_decref (value);
    }
    const za_settings_t *s = self->settings;
    int workers = za_options_index_of (self, "workers");
    json_object_set_new (job, ROLES_KEY, json_pack ("{s:i, s:o, s:I, s:I}", "chief", 1,
                                                    "worker", s_job_value (self,
                                                                           &self->options [workers]),
                                                    "ps", (json_int_t) s->ps,
                                                    "evaluator", (json_int_t) s->evaluators));
    if (extra)
        json_object_update (job, extra);
    char *text = json_dumps (job, JSON_INDENT (2) | JSON_SORT_KEYS);
    json_decref (job);
    return text;
}

char *
za_options_settings_text (const za_options_t *self)
{
    json_t *settings = json_object ();
    for (int i = 0; i < self->count; i++) {
        const za_option_t *option = &self->options [i];
        if (za_options_hidden (self, option) || option->scope == ZA_SCOPE_COMMAND)
            continue;
        char key [NAME_MAX_CHARS];
        za_option_key (option, key, sizeof key);
        json_object_set_new (settings, key, s_job_value (self, option));
    }
    char *text = json_dumps (settings, JSON_INDENT (2));
    json_decref (settings);
    return text;
}

