/*  za_layer_dropout.c: inverted dropout (Keras's Dropout): in TRAIN each
    element is zeroed with probability RATE and the rest scaled by
    1 / (1 - RATE), the mask drawn from (step, layer); elsewhere a copy.   */
#include "za_layer.h"

#include <stdio.h>
#include <stdlib.h>

int
za_stack_dropout (za_stack_spec_t *spec, float rate)
{
    if (!(rate >= 0 && rate < 1))
        return za_error ("dropout: rate must be in [0, 1) (got %g)", (double) rate);
    za_layer_spec_t *layer = za_stack_push (spec, ZA_LAYER_DROPOUT);
    if (!layer)
        return -1;
    layer->rate = rate;
    return 0;
}

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    if (args->count == 0)
        return za_layer_args_error (args, args->end_at, "%s needs RATE, e.g. dropout(0.4)",
                                    args->name);
    if (args->count > 1)
        return za_layer_args_error (args, args->at [1], "unexpected argument '%s'",
                                    args->value [1]);
    char *end;
    float rate = strtof (args->value [0], &end);
    if (end == args->value [0] || *end || !(rate >= 0 && rate < 1))
        return za_layer_args_error (args, args->at [0],
                                    "dropout rate '%s' is not a number in [0, 1)",
                                    args->value [0]);
    return za_stack_dropout (stack, rate);
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    return snprintf (buf, size, "dropout(%g)", (double) l->rate);
}

static int
s_plan (za_layer_t *l, za_layer_plan_t *plan)
{
    size_t outputs = l->out_size * (size_t) plan->batch_max;
    l->mask = (float *) plan->be->buffer_alloc (outputs * sizeof (float));
    return l->mask? 0: -1;
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    size_t count = l->out_size * (size_t) call->n;
    if (call->train)
        call->be->dropout_forward (count, l->spec.rate, call->seed, call->in, l->mask, l->out);
    else
        call->be->copy (l->out, call->in, count * sizeof (float));
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    if (call->din)
        call->be->dropout_backward (l->out_size * (size_t) call->n, l->mask, l->dout,
                                    call->din);
}

const za_layer_ops_t za_layer_dropout = {
    .name = "dropout",
    .parse = s_parse,
    .format = s_format,
    .plan = s_plan,
    .forward = s_forward,
    .backward = s_backward,
};
