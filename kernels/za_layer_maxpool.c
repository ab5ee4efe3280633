/*  za_layer_maxpool.c: max pooling (Keras's MaxPooling2D, valid padding);
    forward keeps each output's argmax for backward.                       */
#include "za_layer.h"

#include <stdio.h>

int
za_stack_maxpool (za_stack_spec_t *spec, int pool, int stride)
{
    if (pool <= 0 || stride < 0)
        return za_error ("maxpool: pool must be positive (got %d)", pool);
    za_layer_spec_t *layer = za_stack_push (spec, ZA_LAYER_MAXPOOL);
    if (!layer)
        return -1;
    layer->pool = pool;
    layer->stride = stride > 0? stride: pool;
    return 0;
}

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    int ints [2];
    int count = za_layer_args_ints (args, 2, ints);
    if (count < 0)
        return -1;
    if (args->stride_at && count == 2)
        return za_layer_args_error (args, args->stride_at, "stride given twice in %s",
                                    args->name);
    if (count < 1)
        return za_layer_args_error (args, args->end_at, "%s needs POOL [, STRIDE], "
                                    "e.g. maxpool(2)", args->name);
    return za_stack_maxpool (stack, ints [0], count == 2? ints [1]: args->stride);
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    if (l->stride != l->pool)
        return snprintf (buf, size, "maxpool(%d,%d)", l->pool, l->stride);
    return snprintf (buf, size, "maxpool(%d)", l->pool);
}

static int
s_dims (za_pool2d_dims_t *d, const za_layer_spec_t *l, int n, za_shape_t in)
{
    return za_pool2d_dims (d, n, in.h, in.w, in.c, l->pool, l->stride);
}

static int
s_shape (const za_layer_spec_t *l, int n, za_shape_t in, za_shape_t *out)
{
    za_pool2d_dims_t d;
    if (s_dims (&d, l, n, in))
        return -1;
    *out = (za_shape_t) {d.oh, d.ow, in.c};
    return 0;
}

static int
s_plan (za_layer_t *l, za_layer_plan_t *plan)
{
    size_t outputs = l->out_size * (size_t) plan->batch_max;
    l->argmax = (int32_t *) plan->be->buffer_alloc (outputs * sizeof (int32_t));
    return l->argmax? 0: -1;
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    za_pool2d_dims_t d;
    s_dims (&d, &l->spec, call->n, l->in_shape);
    call->be->maxpool_forward (&d, call->in, l->out, l->argmax);
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    if (!call->din)
        return;
    za_pool2d_dims_t d;
    s_dims (&d, &l->spec, call->n, l->in_shape);
    call->be->maxpool_backward (&d, l->dout, l->argmax, call->din);
}

const za_layer_ops_t za_layer_maxpool = {
    .name = "maxpool",
    .alias = "maxpool2d",
    .takes = ZA_TAKES_STRIDE,
    .parse = s_parse,
    .format = s_format,
    .shape = s_shape,
    .plan = s_plan,
    .forward = s_forward,
    .backward = s_backward,
};
