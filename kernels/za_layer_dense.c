/*  za_layer_dense.c: the fully connected layer (Keras's Dense on a flat
    input): out = act (in . kernel + bias), kernel [in, units].            */
#include "za_layer.h"

#include <stdio.h>

int
za_stack_dense (za_stack_spec_t *spec, int units, za_act_t act)
{
    if (units <= 0)
        return za_error ("dense: units must be positive (got %d)", units);
    za_layer_spec_t *layer = za_stack_push (spec, ZA_LAYER_DENSE);
    if (!layer)
        return -1;
    layer->units = units, layer->act = act;
    return 0;
}

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    int units;
    int count = za_layer_args_ints (args, 1, &units);
    if (count < 0)
        return -1;
    if (count != 1)
        return za_layer_args_error (args, args->end_at, "%s needs UNITS, e.g. dense(64,relu)",
                                    args->name);
    return za_stack_dense (stack, units, args->act);
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    return snprintf (buf, size, "dense(%d%s)", l->units, l->act == ZA_ACT_RELU? ",relu": "");
}

//  A dense layer on a non-flat input flattens it first.
static int
s_shape (const za_layer_spec_t *l, int n, za_shape_t in, za_shape_t *out)
{
    (void) n, (void) in;
    *out = (za_shape_t) {1, 1, l->units};
    return 0;
}

static double
s_flops (const za_layer_spec_t *l, za_shape_t in, za_shape_t out)
{
    (void) l;
    return 2.0 * in.h * in.w * in.c * out.c;
}

static int
s_plan (za_layer_t *l, za_layer_plan_t *plan)
{
    int64_t kshape [2] = {(int64_t) l->in_size, l->spec.units};
    int64_t bshape [1] = {l->spec.units};
    l->kernel_var = za_layer_declare (plan, "dense", "kernel", 2, kshape);
    l->bias_var = za_layer_declare (plan, "dense", "bias", 1, bshape);
    return l->kernel_var < 0 || l->bias_var < 0? -1: 0;
}

static void
s_init_vars (const za_layer_t *l, const za_vars_t *vars, float *values, uint64_t seed)
{
    za_layer_init_glorot (l, vars, values, seed, (double) l->in_size, l->spec.units);
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    call->be->dense_forward (call->n, (int) l->in_size, l->spec.units, call->in,
                             call->kernel, call->bias, l->spec.act, l->out);
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    call->be->dense_backward (call->n, (int) l->in_size, l->spec.units, call->in,
                              call->kernel, l->out, l->spec.act, l->dout, call->dkernel,
                              call->dbias, call->din);
}

const za_layer_ops_t za_layer_dense = {
    .name = "dense",
    .takes = ZA_TAKES_ACTIVATION,
    .parse = s_parse,
    .format = s_format,
    .shape = s_shape,
    .flops = s_flops,
    .plan = s_plan,
    .init_vars = s_init_vars,
    .forward = s_forward,
    .backward = s_backward,
};
