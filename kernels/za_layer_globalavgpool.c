/*  za_layer_globalavgpool.c: global average pooling (Keras's
    GlobalAveragePooling2D): each channel's mean over the image, the head of
    VGG- and ResNet-style bases.                                            */
#include "za_layer.h"

#include <stdio.h>

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    return za_layer_args_none (args) || !za_stack_push (stack, ZA_LAYER_GLOBALAVGPOOL)? -1: 0;
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    (void) l;
    return snprintf (buf, size, "globalavgpool");
}

static int
s_shape (const za_layer_spec_t *l, int n, za_shape_t in, za_shape_t *out)
{
    (void) l, (void) n;
    *out = (za_shape_t) {1, 1, in.c};
    return 0;
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    call->be->avgpool_global_forward (call->n, l->in_shape.h * l->in_shape.w,
                                      l->in_shape.c, call->in, l->out);
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    if (call->din)
        call->be->avgpool_global_backward (call->n, l->in_shape.h * l->in_shape.w,
                                           l->in_shape.c, l->dout, call->din);
}

const za_layer_ops_t za_layer_globalavgpool = {
    .name = "globalavgpool",
    .alias = "globalaveragepooling2d",
    .parse = s_parse,
    .format = s_format,
    .shape = s_shape,
    .forward = s_forward,
    .backward = s_backward,
};
