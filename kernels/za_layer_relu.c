/*  za_layer_relu.c: the rectifier as a layer of its own (Keras's ReLU). */
#include "za_layer.h"

#include <stdio.h>

int
za_stack_relu (za_stack_spec_t *spec)
{
    return za_stack_push (spec, ZA_LAYER_RELU)? 0: -1;
}

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    return za_layer_args_none (args) || za_stack_relu (stack)? -1: 0;
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    (void) l;
    return snprintf (buf, size, "relu");
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    call->be->relu_forward (l->out_size * (size_t) call->n, call->in, l->out);
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    if (call->din)
        call->be->relu_backward (l->out_size * (size_t) call->n, l->out, l->dout, call->din);
}

const za_layer_ops_t za_layer_relu = {
    .name = "relu",
    .parse = s_parse,
    .format = s_format,
    .forward = s_forward,
    .backward = s_backward,
};
