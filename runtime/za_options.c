/*  za_options.c: one table of settings turned into a command line, --help
    and validation; za_options_job.c reads and writes them as jobs.         */
#include "za_options_private.h"
#include "za/za_util.h"

#include <czmq.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LIST_VALUE_MAX 9.2e18           //  as large as an int64 parses to exactly enough
#define HELP_COLUMN 25
#define HELP_WIDTH 92

void
za_option_key (const za_option_t *option, char *key, size_t size)
{
    snprintf (key, size, "%s", option->flag);
    for (char *c = key; *c; c++)
        if (*c == '-')
            *c = '_';
}

int
za_options_index_of (const za_options_t *self, const char *name)
{
    char flag [NAME_MAX_CHARS];
    snprintf (flag, sizeof flag, "%s", name);
    for (char *c = flag; *c; c++)
        if (*c == '_')
            *c = '-';
    for (int i = 0; i < self->count; i++)
        if (streq (self->options [i].flag, flag))
            return i;
    return -1;
}

const za_option_t *
za_options_find (const za_options_t *self, const char *name)
{
    int i = za_options_index_of (self, name);
    return i < 0? NULL: &self->options [i];
}

int
za_options_count (const za_options_t *self)
{
    return self->count;
}

const za_option_t *
za_options_at (const za_options_t *self, int index)
{
    return index >= 0 && index < self->count? &self->options [index]: NULL;
}

void *
za_options_field (const za_options_t *self, const za_option_t *option)
{
    char *base = option->flags & ZA_OPTION_PARAM? (char *) self->settings->params
                                                : (char *) self->settings;
    return base + option->offset;
}

//  The option's field set to nothing: 0, or NULL for a string.
static void
s_clear (const za_options_t *self, const za_option_t *option)
{
    void *field = za_options_field (self, option);
    switch (option->type) {
        case ZA_OPTION_FLAG: *(int *) field = 0; break;
        case ZA_OPTION_INT: *(int64_t *) field = 0; break;
        case ZA_OPTION_NUMBER: *(double *) field = 0; break;
        case ZA_OPTION_REAL: *(float *) field = 0; break;
        case ZA_OPTION_ENUM: *(int *) field = 0; break;
        case ZA_OPTION_RANGE: *(za_option_range_t *) field = (za_option_range_t) {0, 0}; break;
        default: *(const char **) field = NULL; break;
    }
}

int
za_options_hidden (const za_options_t *self, const za_option_t *option)
{
    return (option->flags & self->hide) != 0;
}

//  A copy of text that lives as long as the options.
static const char *
s_keep (za_options_t *self, const char *text)
{
    zlist_append (self->strings, (void *) text);
    return (const char *) zlist_tail (self->strings);
}

// ---------------------------------------------------------------------------
//  Values

static int
s_int_ok (const char *text, double min, double max, int64_t *value)
{
    char *end;
    errno = 0;
    long long v = strtoll (text, &end, 10);
    if (errno || end == text || *end || (double) v < min || (double) v > max)
        return -1;
    *value = v;
    return 0;
}

static int
s_parse_int (const char *what, const char *text, double min, double max, int64_t *value)
{
    if (s_int_ok (text, min, max, value))
        return za_error ("%s wants an integer in [%.0f, %.0f], got '%s'", what, min, max, text);
    return 0;
}

static int
s_parse_number (const char *what, const za_option_t *option, const char *text, double *value)
{
    char *end;
    double v = strtod (text, &end);
    int above = option->flags & ZA_OPTION_ABOVE_MIN;
    if (end == text || *end || !isfinite (v) || v < option->min || v > option->max
        || (above && v == option->min)) {
        if (option->max < HUGE_VAL)
            return za_error ("%s wants a number %s %g and <= %g, got '%s'", what,
                             above? ">": ">=", option->min, option->max, text);
        return za_error ("%s wants a number %s %g, got '%s'", what, above? ">": ">=",
                         option->min, text);
    }
    *value = v;
    return 0;
}

//  The choice `text` names (case aside), or NULL. A choice "alias=name"
//  is another name for `name`.
static const char *
s_choice (const char *choices, const char *text, char *buf, size_t size)
{
    const char *at = choices;
    while (at && *at) {
        size_t n = strcspn (at, "|");
        size_t name = strcspn (at, "=|");
        if (name == strlen (text) && strncasecmp (at, text, name) == 0 && n < size) {
            const char *value = name < n? at + name + 1: at;
            size_t length = name < n? n - name - 1: n;
            memcpy (buf, value, length);
            buf [length] = 0;
            return buf;
        }
        at += n + (at [n] == '|');
    }
    return NULL;
}

//  A float as the shortest text that reads back as the same float (0.1f:
//  "0.1", not 0.100000001), into text.
#define FLOAT_TEXT_CHARS 32
static const char *
s_float_text (float value, char text [FLOAT_TEXT_CHARS])
{
    for (int digits = 1; digits <= 9; digits++) {
        snprintf (text, FLOAT_TEXT_CHARS, "%.*g", digits, (double) value);
        if (strtof (text, NULL) == value)
            break;
    }
    return text;
}

//  The place of choice `name` among `choices`, aliases not counted; -1.
static int
s_enum_index (const char *choices, const char *name)
{
    int index = 0;
    for (const char *at = choices; at && *at; ) {
        size_t n = strcspn (at, "|");
        if (!memchr (at, '=', n)) {
            if (n == strlen (name) && strncmp (at, name, n) == 0)
                return index;
            index++;
        }
        at += n + (at [n] == '|');
    }
    return -1;
}

//  The name at `index` among `choices`, aliases not counted, into buf.
static const char *
s_enum_name (const char *choices, int index, char *buf, size_t size)
{
    snprintf (buf, size, "?");
    for (const char *at = choices; at && *at; ) {
        size_t n = strcspn (at, "|");
        if (!memchr (at, '=', n) && index-- == 0) {
            snprintf (buf, size, "%.*s", (int) n, at);
            break;
        }
        at += n + (at [n] == '|');
    }
    return buf;
}

//  Calls each (item, arg) with the items of a list text, until one fails.
//  The count, or -1.
static int
s_list_items (const char *text, int (*each) (const char *item, int index, void *arg),
              void *arg)
{
    char list [TEXT_MAX_CHARS];
    if (!text || strlen (text) >= sizeof list || !*text)
        return -1;
    snprintf (list, sizeof list, "%s", text);
    char *save = NULL;
    int count = 0;
    for (char *item = strtok_r (list, ",", &save); item; item = strtok_r (NULL, ",", &save))
        if (each (item, count++, arg))
            return -1;
    return count;
}

typedef struct {
    const char *what;
    const za_option_t *option;
    int64_t *values;
    int max;
} s_list_ask_t;

static int
s_list_item (const char *item, int index, void *arg)
{
    s_list_ask_t *ask = (s_list_ask_t *) arg;
    int64_t value = 0;
    if (ask->option? s_int_ok (item, ask->option->min, ask->option->max, &value)
                   : s_int_ok (item, -LIST_VALUE_MAX, LIST_VALUE_MAX, &value))
        return -1;
    if (ask->values && index < ask->max)
        ask->values [index] = value;
    return 0;
}

static int
s_parse_list (const char *what, const za_option_t *option, const char *text)
{
    s_list_ask_t ask = {.what = what, .option = option};
    if (s_list_items (text, s_list_item, &ask) < 0)
        return za_error ("%s wants a list of integers in [%.0f, %.0f] such as 256,128, got "
                         "'%s'", what, option->min, option->max, text? text: "");
    return 0;
}

int
za_options_list (const char *text, int64_t *values, int max)
{
    s_list_ask_t ask = {.values = values, .max = max};
    int count = s_list_items (text, s_list_item, &ask);
    return count < 0? za_error ("'%s' is not a list of integers such as 256,128",
                                text? text: ""): count;
}

//  Checks text for the option and writes it to its field. `what` names it.
static int
s_store (za_options_t *self, const za_option_t *option, const char *text, const char *what)
{
    void *field = za_options_field (self, option);
    char choice [NAME_MAX_CHARS];
    switch (option->type) {
        case ZA_OPTION_FLAG:
            if (!text || !*text || streq (text, "true") || streq (text, "1"))
                *(int *) field = 1;
            else
            if (streq (text, "false") || streq (text, "0"))
                *(int *) field = 0;
            else
                return za_error ("%s wants true or false, got '%s'", what, text);
            return 0;
        case ZA_OPTION_INT: {
            int64_t value = 0;
            if (s_parse_int (what, text, option->min, option->max, &value))
                return -1;
            *(int64_t *) field = value;
            return 0;
        }
        case ZA_OPTION_NUMBER: {
            double value = 0;
            if (s_parse_number (what, option, text, &value))
                return -1;
            *(double *) field = value;
            return 0;
        }
        case ZA_OPTION_REAL: {
            double value = 0;
            if (s_parse_number (what, option, text, &value))
                return -1;
            if (fabs (value) > FLT_MAX)
                return za_error ("%s: %s does not fit a float", what, text);
            *(float *) field = (float) value;
            return 0;
        }
        case ZA_OPTION_CHOICE:
        case ZA_OPTION_ENUM:
            if (!s_choice (option->choices, text, choice, sizeof choice)) {
                char known [TEXT_MAX_CHARS], name [NAME_MAX_CHARS];
                known [0] = 0;
                //  The names, not their aliases.
                for (int i = 0; strcmp (s_enum_name (option->choices, i, name, sizeof name), "?");
                     i++)
                    snprintf (known + strlen (known), sizeof known - strlen (known), "%s%s",
                              i? ",": "", name);
                return za_error ("%s: '%s' is not one of %s", what, text, known);
            }
            if (option->type == ZA_OPTION_ENUM)
                *(int *) field = s_enum_index (option->choices, choice);
            else
                *(const char **) field = s_keep (self, choice);
            return 0;
        case ZA_OPTION_LIST:
            if (s_parse_list (what, option, text))
                return -1;
            *(const char **) field = s_keep (self, text);
            return 0;
        case ZA_OPTION_RANGE: {
            //  "N", or "MIN:MAX" with MIN <= MAX.
            char low [NAME_MAX_CHARS];
            const char *colon = strchr (text, ':');
            za_option_range_t range;
            snprintf (low, sizeof low, "%.*s", colon? (int) (colon - text): (int) strlen (text),
                      text);
            if (s_int_ok (low, option->min, option->max, &range.min)
                || s_int_ok (colon? colon + 1: low, option->min, option->max, &range.max))
                return za_error ("%s wants N or MIN:MAX (integers in [%.0f, %.0f]), got '%s'",
                                 what, option->min, option->max, text);
            if (range.min > range.max)
                return za_error ("%s: %s: the least (%" PRId64 ") is above the most (%" PRId64
                                 ")", what, text, range.min, range.max);
            *(za_option_range_t *) field = range;
            return 0;
        }
        case ZA_OPTION_STRING:
            if (strlen (text) >= STRING_MAX_CHARS)
                return za_error ("%s: the value is longer than %d bytes", what,
                                 STRING_MAX_CHARS - 1);
            *(const char **) field = s_keep (self, text);
            return 0;
    }
    return za_error ("%s: unknown option type", what);
}

int
za_options_set (za_options_t *self, const char *name, const char *text,
                za_option_source_t source, const char *what)
{
    int i = za_options_index_of (self, name);
    if (i < 0 || za_options_hidden (self, &self->options [i]))
        return za_error ("%s: no such option", what);
    if (source < self->from [i])
        return 0;               //  a stronger source said otherwise
    if (s_store (self, &self->options [i], text, what))
        return -1;
    self->from [i] = source;
    return 0;
}

int
za_options_given (const za_options_t *self, const char *name, za_option_source_t than)
{
    int i = za_options_index_of (self, name);
    return i >= 0 && self->from [i] > than;
}

void
za_options_value_text (const za_options_t *self, const za_option_t *option, char *text,
                       size_t size)
{
    const void *field = za_options_field ((za_options_t *) self, option);
    switch (option->type) {
        case ZA_OPTION_FLAG:
            snprintf (text, size, "%s", *(const int *) field? "true": "false");
            break;
        case ZA_OPTION_INT:
            snprintf (text, size, "%" PRId64, *(const int64_t *) field);
            break;
        case ZA_OPTION_NUMBER:
            snprintf (text, size, "%.17g", *(const double *) field);
            break;
        case ZA_OPTION_REAL: {
            char shortest [FLOAT_TEXT_CHARS];
            snprintf (text, size, "%s", s_float_text (*(const float *) field, shortest));
            break;
        }
        case ZA_OPTION_ENUM:
            s_enum_name (option->choices, *(const int *) field, text, size);
            break;
        case ZA_OPTION_RANGE: {
            const za_option_range_t *range = (const za_option_range_t *) field;
            if (range->min == range->max)
                snprintf (text, size, "%" PRId64, range->max);
            else
                snprintf (text, size, "%" PRId64 ":%" PRId64, range->min, range->max);
            break;
        }
        default: {
            const char *value = *(const char *const *) field;
            snprintf (text, size, "%s", value? value: "");
            break;
        }
    }
}

const char *
za_options_default_text (const za_options_t *self, const za_option_t *option)
{
    int i = (int) (option - self->options);
    if (i < 0 || i >= self->count)
        return NULL;
    return self->program_default [i]? self->program_default [i]: option->fallback;
}

// ---------------------------------------------------------------------------
//  The table

za_options_t *
za_options_new (const char *program, const za_option_t *extra, za_settings_t *settings,
                unsigned hide)
{
    za_options_t *self = (za_options_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    self->program = program;
    self->settings = settings;
    self->hide = hide;
    self->strings = zlist_new ();
    zlist_autofree (self->strings);
    const za_option_t *tables [2] = {za_settings_options (), extra};
    for (int t = 0; t < 2; t++)
        for (const za_option_t *option = tables [t]; option && option->flag; option++) {
            if (self->count >= OPTIONS_MAX || za_options_index_of (self, option->flag) >= 0
                || ((option->flags & ZA_OPTION_PARAM) && !settings->params)) {
                za_error ("%s: option --%s is declared twice, has no params to write to, "
                          "or is one too many", program, option->flag);
                za_options_destroy (&self);
                return NULL;
            }
            self->options [self->count++] = *option;
        }
    for (int i = 0; i < self->count; i++) {
        const za_option_t *option = &self->options [i];
        char what [NAME_MAX_CHARS + 16];
        snprintf (what, sizeof what, "default of --%s", option->flag);
        //  Without a default a setting starts empty: never with what the
        //  settings held before (a string of options destroyed since). A
        //  program's own params keep what the program put there.
        if (!option->fallback && !(option->flags & ZA_OPTION_PARAM))
            s_clear (self, option);
        if (option->fallback && s_store (self, option, option->fallback, what)) {
            za_options_destroy (&self);
            return NULL;
        }
    }
    return self;
}

void
za_options_destroy (za_options_t **self_p)
{
    za_options_t *self = *self_p;
    if (!self)
        return;
    zlist_destroy (&self->strings);
    free (self);
    *self_p = NULL;
}

int
za_options_default (za_options_t *self, const char *name, const char *text)
{
    int i = za_options_index_of (self, name);
    char what [NAME_MAX_CHARS + 32];
    snprintf (what, sizeof what, "%s's default of --%s", self->program, name);
    if (i < 0)
        return za_error ("%s: no such option", what);
    if (za_options_set (self, name, text, ZA_FROM_PROGRAM, what))
        return -1;
    self->program_default [i] = s_keep (self, text);
    return 0;
}

// ---------------------------------------------------------------------------
//  The command line

int
za_options_parse_args (za_options_t *self, int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        const char *arg = argv [a];
        if (streq (arg, "-h") || streq (arg, "--help")) {
            //  A --role after it filters the help as one before it does.
            for (int b = a + 1; b < argc; b++) {
                const char *role = !strncmp (argv [b], "--role=", 7)? argv [b] + 7
                                 : streq (argv [b], "--role") && b + 1 < argc? argv [b + 1]
                                 : NULL;
                if (role && za_options_set (self, "role", role, ZA_FROM_FLAG, "--role"))
                    return -1;
            }
            return 1;
        }
        if (streq (arg, "--print-settings")) {
            self->print_asked = 1;
            continue;
        }
        if (strncmp (arg, "--", 2) != 0 || !arg [2])
            return za_error ("unexpected argument '%s'", arg);
        char name [NAME_MAX_CHARS];
        const char *equals = strchr (arg + 2, '=');
        size_t length = equals? (size_t) (equals - arg - 2): strlen (arg + 2);
        if (length >= sizeof name)
            return za_error ("unrecognized option '%s'", arg);
        memcpy (name, arg + 2, length);
        name [length] = 0;
        int i = -1;
        for (int o = 0; o < self->count && i < 0; o++)
            if (streq (self->options [o].flag, name))
                i = o;
        if (i < 0 || za_options_hidden (self, &self->options [i])) {
            if (i >= 0)
                return za_error ("--%s: %s has its own %s", name, self->program,
                                 self->options [i].flags & ZA_OPTION_STACK? "model_fn"
                                                                          : "input_fn");
            return za_error ("unrecognized option '--%s'", name);
        }
        const za_option_t *option = &self->options [i];
        const char *text = NULL;
        if (option->type == ZA_OPTION_FLAG) {
            if (equals)
                return za_error ("option '--%s' doesn't allow an argument", name);
        }
        else
        if (equals)
            text = equals + 1;
        else
        if (a + 1 < argc)
            text = argv [++a];
        else
            return za_error ("option '--%s' requires an argument", name);
        char what [NAME_MAX_CHARS + 2];
        snprintf (what, sizeof what, "--%s", name);
        if (za_options_set (self, name, text, ZA_FROM_FLAG, what))
            return -1;
    }
    return 0;
}

int
za_options_print_asked (const za_options_t *self)
{
    return self->print_asked;
}

// ---------------------------------------------------------------------------
//  Help

void
za_options_usage (const za_options_t *self, FILE *out, const char *about, unsigned readers)
{
    fprintf (out, "Usage: %s [OPTIONS]\n%s\n", self->program, about? about: "");
    const char *section = NULL;
    for (int i = 0; i < self->count; i++) {
        const za_option_t *option = &self->options [i];
        if (option->section)
            section = option->section;
        if (za_options_hidden (self, option) || (readers && !(option->readers & readers)))
            continue;
        if (section) {
            fprintf (out, "\n%s:\n", section);
            section = NULL;
        }
        char head [NAME_MAX_CHARS * 2];
        snprintf (head, sizeof head, "  --%s%s%s", option->flag,
                  option->value_name? " ": "", option->value_name? option->value_name: "");
        fprintf (out, "%s", head);
        int column = (int) strlen (head);
        if (column >= HELP_COLUMN - 1) {
            fputc ('\n', out);
            column = 0;
        }
        fprintf (out, "%*s", HELP_COLUMN - column, "");
        for (const char *c = option->help; *c; c++) {
            fputc (*c, out);
            if (*c == '\n')
                fprintf (out, "%*s", HELP_COLUMN, "");
        }
        const char *fallback = za_options_default_text (self, option);
        if (fallback && option->type != ZA_OPTION_FLAG) {
            //  On the help's last line, or on one of its own when that is full.
            const char *last = strrchr (option->help, '\n');
            size_t width = strlen (last? last + 1: option->help) + strlen (fallback) + 11;
            if (HELP_COLUMN + width > HELP_WIDTH)
                fprintf (out, "\n%*s(default %s)", HELP_COLUMN, "", *fallback? fallback: "\"\"");
            else
                fprintf (out, " (default %s)", *fallback? fallback: "\"\"");
        }
        fputc ('\n', out);
    }
    fprintf (out, "  --print-settings%*severy setting as this command line, its job and its\n"
             "%*sdefaults make it, as JSON; nothing runs\n", HELP_COLUMN - 18, "",
             HELP_COLUMN, "");
    fprintf (out, "  -h, --help%*sthis help; with --role ROLE, only what that role reads\n",
             HELP_COLUMN - 12, "");
}
