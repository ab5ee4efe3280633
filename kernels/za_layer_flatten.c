/*  za_layer_flatten.c: the reshape to one vector per example (Keras's
    Flatten). NHWC is already flat in memory: the layer shares its input's
    buffers, and copies only when it is the first layer.                   */
#include "za_layer.h"

#include <stdio.h>

int
za_stack_flatten (za_stack_spec_t *spec)
{
    return za_stack_push (spec, ZA_LAYER_FLATTEN)? 0: -1;
}

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    return za_layer_args_none (args) || za_stack_flatten (stack)? -1: 0;
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    (void) l;
    return snprintf (buf, size, "flatten");
}

static int
s_shape (const za_layer_spec_t *l, int n, za_shape_t in, za_shape_t *out)
{
    (void) l, (void) n;
    *out = (za_shape_t) {1, 1, in.h * in.w * in.c};
    return 0;
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    if (!l->index)
        call->be->copy (l->out, call->in, l->out_size * (size_t) call->n * sizeof (float));
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    (void) l, (void) call;
}

const za_layer_ops_t za_layer_flatten = {
    .name = "flatten",
    .parse = s_parse,
    .format = s_format,
    .shape = s_shape,
    .forward = s_forward,
    .backward = s_backward,
    .reshapes = 1,
};
