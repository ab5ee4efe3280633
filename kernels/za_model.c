/*  za_model.c: what every model_fn shares: the variable table and the word
    that a layer's gradients are final. The layer stack is za_stack*.c and
    its layer types za_layer_*.c; premade stacks are za_premade.c.         */
#include "za/za_model.h"
#include "za/za_trace.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAR_ALIGN_FLOATS 16

// ---------------------------------------------------------------------------
//  Variables

int
za_vars_add (za_vars_t *vars, const char *name, int ndim, const int64_t *shape)
{
    if (vars->count >= ZA_MAX_VARS)
        return za_error ("too many variables (at most %d)", ZA_MAX_VARS);
    if (strlen (name) >= ZA_VAR_NAME_MAX)
        return za_error ("variable name '%s' is too long", name);
    if (za_vars_find (vars, name) >= 0)
        return za_error ("variable '%s' declared twice", name);
    if (ndim <= 0 || ndim > ZA_MAX_DIMS)
        return za_error ("variable '%s': %d dimensions (1 to %d)", name, ndim, ZA_MAX_DIMS);
    za_var_t *var = &vars->vars [vars->count];
    memset (var, 0, sizeof *var);
    snprintf (var->name, sizeof var->name, "%s", name);
    var->ndim = ndim;
    var->size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape [d] <= 0)
            return za_error ("variable '%s': dimension %d is %lld", name, d,
                             (long long) shape [d]);
        var->shape [d] = shape [d];
        var->size *= (size_t) shape [d];
    }
    var->offset = (vars->total + VAR_ALIGN_FLOATS - 1) / VAR_ALIGN_FLOATS * VAR_ALIGN_FLOATS;
    vars->total = var->offset + var->size;
    return vars->count++;
}

int
za_vars_find (const za_vars_t *vars, const char *name)
{
    for (int i = 0; i < vars->count; i++)
        if (strcmp (vars->vars [i].name, name) == 0)
            return i;
    return -1;
}

// ---------------------------------------------------------------------------
//  Gradients final before the model_fn returns

static __thread za_grads_final_fn *s_final_fn;
static __thread void *s_final_arg;

void
za_model_on_grads_final (za_grads_final_fn *fn, void *arg)
{
    s_final_fn = fn;
    s_final_arg = arg;
}

static __thread double s_forward_done;

void
za_model_forward_done (void)
{
    if (za_trace_on ())
        s_forward_done = za_clock_mono ();
}

double
za_model_take_forward_done (void)
{
    double at = s_forward_done;
    s_forward_done = 0;
    return at;
}

static __thread float s_loss_scale = 1.0f;
static __thread int s_loss_scale_asked;

float
za_model_loss_scale (void)
{
    s_loss_scale_asked = 1;
    return s_loss_scale;
}

void
za_model_set_loss_scale (float scale)
{
    s_loss_scale = scale;
    s_loss_scale_asked = 0;
}

int
za_model_loss_scale_asked (void)
{
    return s_loss_scale_asked;
}

static __thread int s_loss_deferred, s_loss_deferred_taken;

int
za_model_loss_deferred (void)
{
    s_loss_deferred_taken = s_loss_deferred;
    return s_loss_deferred;
}

void
za_model_set_loss_deferred (int deferred)
{
    s_loss_deferred = deferred;
    s_loss_deferred_taken = 0;
}

int
za_model_loss_deferred_taken (void)
{
    return s_loss_deferred_taken;
}

static __thread uint64_t s_values_epoch;

void
za_model_set_values_epoch (uint64_t epoch)
{
    s_values_epoch = epoch;
}

uint64_t
za_model_values_epoch (void)
{
    return s_values_epoch;
}

static __thread uint64_t s_frozen_epoch;

void
za_model_set_frozen_epoch (uint64_t epoch)
{
    s_frozen_epoch = epoch;
}

uint64_t
za_model_frozen_epoch (void)
{
    return s_frozen_epoch;
}

void
za_model_grads_final (size_t offset)
{
    if (s_final_fn)
        s_final_fn (s_final_arg, offset);
}
