/*  za_optim_config.c: an optimizer's settings: Keras's defaults per kind,
    the names, and the check a peer's settings pass before they are applied. */
#include "za/za_optim_config.h"
#include "za/za_util.h"

#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *s_names [] = {"sgd", "momentum", "adam", "adagrad"};

za_optim_config_t
za_optim_config_default (za_optimizer_t kind)
{
    za_optim_config_t config = {
        .kind = kind,
        .learning_rate = kind == ZA_OPT_ADAM? 1e-3f: 0.01f,
        .momentum = 0.9f,
        .nesterov = 0,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .epsilon = 1e-7f,
        .initial_accumulator = 0.1f,
    };
    return config;
}

void
za_optim_config_resolve (za_optim_config_t *config)
{
    za_optim_config_t resolved = za_optim_config_default (config->kind);
    if (config->learning_rate > 0)
        resolved.learning_rate = config->learning_rate;
    //  What the settings give beyond the kind's own numbers stays.
    resolved.weight_decay = config->weight_decay;
    resolved.global_clipnorm = config->global_clipnorm;
    resolved.schedule = config->schedule;
    *config = resolved;
}

int
za_optim_config_check (const za_optim_config_t *config, char *why, size_t size)
{
    if (!za_optim_known (config->kind)) {
        snprintf (why, size, "opt.kind names no optimizer (known: sgd, momentum, adam, "
                  "adagrad)");
        return -1;
    }
    const float values [] = {config->learning_rate, config->momentum, config->beta1,
                             config->beta2, config->epsilon, config->initial_accumulator,
                             config->weight_decay};
    static const char *const names [] = {"lr", "momentum", "beta1", "beta2", "epsilon",
                                         "acc0", "weight_decay"};
    for (size_t v = 0; v < sizeof values / sizeof values [0]; v++)
        if (!isfinite (values [v])) {
            snprintf (why, size, "opt.%s does not fit a float32", names [v]);
            return -1;
        }
    if (!(config->learning_rate > 0)) {
        snprintf (why, size, "opt.lr %g is not > 0", (double) config->learning_rate);
        return -1;
    }
    if (!(config->weight_decay >= 0 && config->weight_decay < 1)) {
        snprintf (why, size, "opt.weight_decay %g is not in [0, 1)",
                  (double) config->weight_decay);
        return -1;
    }
    const za_schedule_t *s = &config->schedule;
    double numbers [ZA_SCHEDULE_NUMBERS];
    za_schedule_numbers (s, numbers);
    for (int n = 0; n < ZA_SCHEDULE_NUMBERS; n++)
        if (!isfinite (numbers [n])) {
            snprintf (why, size, "opt.schedule holds a number that is not finite");
            return -1;
        }
    if ((unsigned) s->kind >= ZA_SCHEDULE_COUNT || s->boundary_count < 0
        || s->boundary_count > ZA_SCHEDULE_PIECES_MAX || s->warmup_steps < 0
        || (s->kind != ZA_SCHEDULE_CONSTANT && s->kind != ZA_SCHEDULE_PIECEWISE
            && s->kind != ZA_SCHEDULE_FUNCTION && !(s->decay_steps > 0))) {
        snprintf (why, size, "opt.schedule: an unknown kind, or decay steps not > 0");
        return -1;
    }
    return 0;
}

int
za_optim_known (za_optimizer_t kind)
{
    return (unsigned) kind < sizeof s_names / sizeof s_names [0];
}

za_optimizer_t
za_optim_kind_of (const char *name)
{
    for (int i = 0; za_optim_known ((za_optimizer_t) i); i++)
        if (strcasecmp (name, s_names [i]) == 0)
            return (za_optimizer_t) i;
    return ZA_OPT_UNKNOWN;
}

int
za_optim_parse (const char *name, za_optimizer_t *kind)
{
    *kind = za_optim_kind_of (name);
    if (!za_optim_known (*kind))
        return za_error ("unknown optimizer '%s' (known: sgd, momentum, adam, adagrad)", name);
    return 0;
}

const char *
za_optim_name (za_optimizer_t kind)
{
    return za_optim_known (kind)? s_names [kind]: "?";
}

// ---------------------------------------------------------------------------
//  Learning-rate schedules: their text and their numbers (the arithmetic is
//  kernels/za_elem.h's za_elem_learning_rate)

static const char *s_schedule_names [ZA_SCHEDULE_COUNT] = {
    "constant", "exponential_decay", "piecewise_constant", "cosine_decay",
    "cosine_decay_restarts", "polynomial_decay", "function",
};

const char *
za_schedule_name (za_schedule_kind_t kind)
{
    return (unsigned) kind < ZA_SCHEDULE_COUNT? s_schedule_names [kind]: NULL;
}

int
za_schedule_kind_of (const char *name)
{
    for (int k = 0; k < ZA_SCHEDULE_COUNT; k++)
        if (!strcmp (name, s_schedule_names [k]))
            return k;
    return -1;
}

//  "[a, b, c]" into values; their count, or -1.
static int
s_number_list (const char *text, double *values, int max)
{
    const char *p = text;
    while (*p == ' ')
        p++;
    if (*p++ != '[')
        return -1;
    int count = 0;
    while (1) {
        char *end;
        double value = strtod (p, &end);
        if (end == p || count == max)
            return -1;
        values [count++] = value;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ']')
            return *(p + 1) == 0? count: -1;
        if (*p++ != ',')
            return -1;
    }
}

//  One "name=value" argument of kind into s. 0, or -1 with an error.
static int
s_schedule_arg (za_schedule_t *s, const char *kind, char *arg, int *value_count)
{
    char *eq = strchr (arg, '=');
    if (!eq)
        return za_error ("--lr-schedule %s: '%s' is not NAME=VALUE", kind, arg);
    *eq = 0;
    const char *name = arg, *value = eq + 1;
    //  Each schedule's own arguments, by TensorFlow's names (another's would
    //  be without effect).
    static const char *const takes [ZA_SCHEDULE_COUNT] = {
        [ZA_SCHEDULE_EXPONENTIAL] = "decay_steps, decay_rate, staircase",
        [ZA_SCHEDULE_PIECEWISE] = "boundaries, values",
        [ZA_SCHEDULE_COSINE] = "decay_steps, alpha",
        [ZA_SCHEDULE_COSINE_RESTARTS] = "first_decay_steps, t_mul, m_mul, alpha",
        [ZA_SCHEDULE_POLYNOMIAL] = "decay_steps, end_learning_rate, power, cycle",
    };
    const char *list = takes [s->kind]? takes [s->kind]: "";
    size_t length = strlen (name);
    const char *at = length? strstr (list, name): NULL;
    while (at && ((at > list && at [-1] != ' ') || (at [length] && at [length] != ',')))
        at = strstr (at + 1, name);
    if (!at)
        return za_error ("--lr-schedule %s: no argument '%s' (%s takes %s)", kind, name, kind,
                         *list? list: "none");
    if (!strcmp (name, "boundaries") || !strcmp (name, "values")) {
        int is_b = name [0] == 'b';
        int count = s_number_list (value, is_b? s->boundaries: s->values,
                                   is_b? ZA_SCHEDULE_PIECES_MAX: ZA_SCHEDULE_PIECES_MAX + 1);
        if (count < 0)
            return za_error ("--lr-schedule %s: %s must be [n, n, ...] (at most %d)", kind,
                             name, ZA_SCHEDULE_PIECES_MAX + !is_b);
        *(is_b? &s->boundary_count: value_count) = count;
        return 0;
    }
    if (!strcmp (name, "staircase") || !strcmp (name, "cycle")) {
        int yes = !strcasecmp (value, "true") || !strcmp (value, "1");
        if (!yes && strcasecmp (value, "false") && strcmp (value, "0"))
            return za_error ("--lr-schedule %s: %s=%s: true or false", kind, name, value);
        *(name [0] == 's'? &s->staircase: &s->cycle) = yes;
        return 0;
    }
    static const struct {
        const char *name;
        size_t offset;
    } numbers [] = {
        {"decay_steps", offsetof (za_schedule_t, decay_steps)},
        {"first_decay_steps", offsetof (za_schedule_t, decay_steps)},
        {"decay_rate", offsetof (za_schedule_t, decay_rate)},
        {"alpha", offsetof (za_schedule_t, alpha)},
        {"t_mul", offsetof (za_schedule_t, t_mul)},
        {"m_mul", offsetof (za_schedule_t, m_mul)},
        {"end_learning_rate", offsetof (za_schedule_t, end_learning_rate)},
        {"power", offsetof (za_schedule_t, power)},
    };
    for (size_t n = 0; n < sizeof numbers / sizeof numbers [0]; n++)
        if (!strcmp (name, numbers [n].name)) {
            char *end;
            double number = strtod (value, &end);
            if (end == value || *end || !isfinite (number))
                return za_error ("--lr-schedule %s: %s=%s is not a number", kind, name,
                                 value);
            *(double *) ((char *) s + numbers [n].offset) = number;
            return 0;
        }
    return za_error ("--lr-schedule %s: '%s' is listed but not read (a slip in zactor: "
                     "please report it)", kind, name);
}

int
za_schedule_parse (const char *text, za_schedule_t *schedule)
{
    za_schedule_t s = {.t_mul = 2, .m_mul = 1, .end_learning_rate = 0.0001, .power = 1,
                       .warmup_steps = schedule->warmup_steps};
    char copy [512];
    if (snprintf (copy, sizeof copy, "%s", text) >= (int) sizeof copy)
        return za_error ("--lr-schedule: longer than %zu characters", sizeof copy - 1);
    char *open = strchr (copy, '('), *close = strrchr (copy, ')');
    if (open)
        *open = 0;
    int kind = za_schedule_kind_of (copy);
    if (kind == ZA_SCHEDULE_FUNCTION)
        return za_error ("--lr-schedule '%s': a function schedule is a program's C function "
                         "(za_program_t.learning_rate_fn), not a text", text);
    if (kind < 0 || (open && (!close || close [1])))
        return za_error ("--lr-schedule '%s': give constant, exponential_decay(...), "
                         "piecewise_constant(...), cosine_decay(...), "
                         "cosine_decay_restarts(...) or polynomial_decay(...)", text);
    s.kind = (za_schedule_kind_t) kind;
    int values = -1;
    if (open) {
        *close = 0;
        //  Arguments split at commas outside [ ].
        char *arg = open + 1;
        int depth = 0;
        for (char *p = arg; ; p++) {
            if (*p == '[')
                depth++;
            if (*p == ']')
                depth--;
            if ((*p == ',' && depth == 0) || !*p) {
                int last = !*p;
                *p = 0;
                while (*arg == ' ')
                    arg++;
                if (*arg && s_schedule_arg (&s, copy, arg, &values))
                    return -1;
                if (last)
                    break;
                arg = p + 1;
            }
        }
    }
    int needs_steps = kind != ZA_SCHEDULE_CONSTANT && kind != ZA_SCHEDULE_PIECEWISE;
    if (needs_steps && !(s.decay_steps > 0))
        return za_error ("--lr-schedule %s needs %s > 0", copy,
                         kind == ZA_SCHEDULE_COSINE_RESTARTS? "first_decay_steps": "decay_steps");
    if (kind == ZA_SCHEDULE_EXPONENTIAL && !(s.decay_rate > 0))
        return za_error ("--lr-schedule exponential_decay needs decay_rate > 0");
    if (kind == ZA_SCHEDULE_PIECEWISE) {
        if (s.boundary_count < 1)
            return za_error ("--lr-schedule piecewise_constant needs boundaries=[...]");
        for (int b = 1; b < s.boundary_count; b++)
            if (!(s.boundaries [b] > s.boundaries [b - 1]))
                return za_error ("--lr-schedule piecewise_constant: boundaries must rise");
    }
    if (kind == ZA_SCHEDULE_PIECEWISE && values != s.boundary_count + 1)
        return za_error ("--lr-schedule piecewise_constant: %d boundaries need %d values",
                         s.boundary_count, s.boundary_count + 1);
    *schedule = s;
    return 0;
}

void
za_schedule_numbers (const za_schedule_t *s, double *out)
{
    int n = 0;
    out [n++] = s->kind;
    out [n++] = s->decay_steps, out [n++] = s->decay_rate, out [n++] = s->staircase;
    out [n++] = s->alpha, out [n++] = s->t_mul, out [n++] = s->m_mul;
    out [n++] = s->end_learning_rate, out [n++] = s->power, out [n++] = s->cycle;
    out [n++] = s->boundary_count;
    for (int b = 0; b < ZA_SCHEDULE_PIECES_MAX; b++)
        out [n++] = s->boundaries [b];
    for (int v = 0; v <= ZA_SCHEDULE_PIECES_MAX; v++)
        out [n++] = s->values [v];
    out [n++] = s->warmup_steps;
    (void) n;                           //  ZA_SCHEDULE_NUMBERS, by the header's count
}

void
za_schedule_from_numbers (za_schedule_t *s, const double *in)
{
    int n = 0;
    s->kind = (unsigned) in [n] < ZA_SCHEDULE_COUNT && in [n] == (int) in [n]
            ? (za_schedule_kind_t) (int) in [n]: ZA_SCHEDULE_COUNT;
    n++;
    s->decay_steps = in [n++], s->decay_rate = in [n++], s->staircase = in [n++] != 0;
    s->alpha = in [n++], s->t_mul = in [n++], s->m_mul = in [n++];
    s->end_learning_rate = in [n++], s->power = in [n++], s->cycle = in [n++] != 0;
    double count = in [n++];
    s->boundary_count = count >= 0 && count <= ZA_SCHEDULE_PIECES_MAX? (int) count: -1;
    for (int b = 0; b < ZA_SCHEDULE_PIECES_MAX; b++)
        s->boundaries [b] = in [n++];
    for (int v = 0; v <= ZA_SCHEDULE_PIECES_MAX; v++)
        s->values [v] = in [n++];
    s->warmup_steps = in [n++];
}
