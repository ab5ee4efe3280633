/*  za_layer.c: the table of layer types (one row per ZA_LAYER_TYPES entry)
    and the helpers every type's source shares: arguments, pushing onto a
    stack, declaring variables, Glorot initialisation.                     */
#include "za_layer.h"
#include "za_elem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------
//  The table

static const za_layer_ops_t *s_types [ZA_LAYER_TYPE_COUNT] = {
#define ZA_LAYER_ROW(TYPE, name) [ZA_LAYER_##TYPE] = &za_layer_##name,
    ZA_LAYER_TYPES (ZA_LAYER_ROW)
#undef ZA_LAYER_ROW
};

const za_layer_ops_t *
za_layer_ops (za_layer_type_t type)
{
    return s_types [type];
}

const za_layer_ops_t *
za_layer_ops_find (const char *name)
{
    for (int t = 0; t < ZA_LAYER_TYPE_COUNT; t++)
        if (strcmp (name, s_types [t]->name) == 0
            || (s_types [t]->alias && strcmp (name, s_types [t]->alias) == 0))
            return s_types [t];
    return NULL;
}

const char *
za_layer_names (void)
{
    static char names [256];
    if (!names [0]) {
        size_t used = 0;
        for (int t = 0; t < ZA_LAYER_TYPE_COUNT && used < sizeof names; t++)
            used += (size_t) snprintf (names + used, sizeof names - used, "%s%s",
                                       t? ", ": "", s_types [t]->name);
    }
    return names;
}

// ---------------------------------------------------------------------------
//  Arguments

int
za_layer_args_error (const za_layer_args_t *args, const char *at, const char *fmt,
                     const char *what)
{
    int column = (int) (at - args->text);
    char caret [ZA_SPEC_TEXT_MAX + 2];
    int width = column < ZA_SPEC_TEXT_MAX? column: ZA_SPEC_TEXT_MAX;
    memset (caret, ' ', (size_t) width);
    caret [width] = '^';
    caret [width + 1] = 0;
    char message [256];
    snprintf (message, sizeof message, fmt, what);
    return za_error ("model spec: %s at column %d\n  %s\n  %s", message, column + 1,
                     args->text, caret);
}

int
za_layer_parse_int (const char *s, int *value)
{
    char *end;
    long v = strtol (s, &end, 10);
    if (end == s || *end || v <= 0 || v > ZA_LAYER_INT_MAX)
        return -1;
    *value = (int) v;
    return 0;
}

int
za_layer_args_ints (const za_layer_args_t *args, int max, int *ints)
{
    for (int i = 0; i < args->count; i++)
        if (i >= max || za_layer_parse_int (args->value [i], &ints [i]))
            return za_layer_args_error (args, args->at [i], "unexpected argument '%s'",
                                        args->value [i]);
    return args->count;
}

int
za_layer_args_none (const za_layer_args_t *args)
{
    if (args->count)
        return za_layer_args_error (args, args->at [0], "%s takes no arguments",
                                    args->name);
    return 0;
}

// ---------------------------------------------------------------------------
//  Building

za_layer_spec_t *
za_stack_push (za_stack_spec_t *spec, za_layer_type_t type)
{
    if (spec->count >= ZA_MAX_LAYERS) {
        za_error ("model spec: more than %d layers", ZA_MAX_LAYERS);
        return NULL;
    }
    za_layer_spec_t *layer = &spec->layers [spec->count++];
    memset (layer, 0, sizeof *layer);
    layer->type = type;
    return layer;
}

int
za_layer_declare (za_layer_plan_t *plan, const char *base, const char *what, int ndim,
                  const int64_t *shape)
{
    char name [ZA_VAR_NAME_MAX];
    if (plan->seen)
        snprintf (name, sizeof name, "%s_%d/%s", base, plan->seen, what);
    else
        snprintf (name, sizeof name, "%s/%s", base, what);
    int var = za_vars_add (plan->vars, name, ndim, shape);
    if (var >= 0) {
        plan->copies [var] = plan->vars->vars [var];
        if (var + 1 > *plan->copy_count)
            *plan->copy_count = var + 1;
    }
    return var;
}

void
za_layer_init_glorot (const za_layer_t *layer, const za_vars_t *vars, float *values,
                      uint64_t seed, double fan_in, double fan_out)
{
    const za_var_t *kernel = &vars->vars [layer->kernel_var];
    float limit = (float) sqrt (6.0 / (fan_in + fan_out));
    za_rng_t rng;
    za_rng_seed (&rng, seed * 1000003ULL + (uint64_t) layer->kernel_var);
    float *w = values + kernel->offset;
    for (size_t k = 0; k < kernel->size; k++)
        w [k] = (2.0f * za_rng_uniform (&rng) - 1.0f) * limit;
    const za_var_t *bias = &vars->vars [layer->bias_var];
    memset (values + bias->offset, 0, bias->size * sizeof (float));
}
