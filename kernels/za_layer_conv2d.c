/*  za_layer_conv2d.c: the 2-D convolution (Keras's Conv2D, NHWC, HWIO kernel),
    im2col and a GEMM in the back end; its cols are kept for backward.       */
#include "za_layer.h"

#include <stdio.h>

int
za_stack_conv2d (za_stack_spec_t *spec, int filters, int kernel, int stride,
                 za_padding_t padding, za_act_t act)
{
    if (filters <= 0 || kernel <= 0 || stride <= 0)
        return za_error ("conv2d: filters, kernel and stride must be positive "
                         "(got %d, %d, %d)", filters, kernel, stride);
    za_layer_spec_t *layer = za_stack_push (spec, ZA_LAYER_CONV2D);
    if (!layer)
        return -1;
    layer->units = filters, layer->kernel = kernel, layer->stride = stride;
    layer->padding = padding, layer->act = act;
    return 0;
}

static int
s_parse (const za_layer_args_t *args, za_stack_spec_t *stack)
{
    int ints [3];
    int count = za_layer_args_ints (args, 3, ints);
    if (count < 0)
        return -1;
    if (args->stride_at && count == 3)
        return za_layer_args_error (args, args->stride_at, "stride given twice in %s",
                                    args->name);
    if (count < 2)
        return za_layer_args_error (args, args->end_at, "%s needs FILTERS and KERNEL, "
                                    "e.g. conv2d(32,3,relu)", args->name);
    int stride = count == 3? ints [2]: args->stride? args->stride: 1;
    return za_stack_conv2d (stack, ints [0], ints [1], stride, args->padding, args->act);
}

static int
s_format (const za_layer_spec_t *l, char *buf, size_t size)
{
    char stride [32] = "", padding [32] = "";
    if (l->stride != 1)
        snprintf (stride, sizeof stride, ",stride=%d", l->stride);
    if (l->padding == ZA_PADDING_SAME)
        snprintf (padding, sizeof padding, ",padding=same");
    return snprintf (buf, size, "conv2d(%d,%d%s%s%s)", l->units, l->kernel, stride,
                     padding, l->act == ZA_ACT_RELU? ",relu": "");
}

static int
s_dims (za_conv2d_dims_t *d, const za_layer_spec_t *l, int n, za_shape_t in)
{
    return za_conv2d_dims (d, n, in.h, in.w, in.c, l->units, l->kernel, l->stride,
                           l->padding);
}

static int
s_shape (const za_layer_spec_t *l, int n, za_shape_t in, za_shape_t *out)
{
    za_conv2d_dims_t d;
    if (s_dims (&d, l, n, in))
        return -1;
    *out = (za_shape_t) {d.oh, d.ow, d.oc};
    return 0;
}

static double
s_flops (const za_layer_spec_t *l, za_shape_t in, za_shape_t out)
{
    return 2.0 * out.h * out.w * out.c * l->kernel * l->kernel * in.c;
}

static int
s_plan (za_layer_t *l, za_layer_plan_t *plan)
{
    int64_t kshape [4] = {l->spec.kernel, l->spec.kernel, l->in_shape.c, l->spec.units};
    int64_t bshape [1] = {l->spec.units};
    l->kernel_var = za_layer_declare (plan, "conv2d", "kernel", 4, kshape);
    l->bias_var = za_layer_declare (plan, "conv2d", "bias", 1, bshape);
    za_conv2d_dims_t d;
    if (l->kernel_var < 0 || l->bias_var < 0
        || s_dims (&d, &l->spec, plan->batch_max, l->in_shape))
        return -1;
    if (plan->be->conv2d_cols_own)
        return 0;
    size_t cols = za_conv2d_cols_floats (&d);
    l->cols = (float *) plan->be->buffer_alloc (cols * sizeof (float));
    if (!l->cols)
        return -1;
    //  The first layer's input gradient is never wanted: no scratch for it.
    if (l->index > 0 && cols > plan->scratch_floats)
        plan->scratch_floats = cols;
    return 0;
}

static void
s_init_vars (const za_layer_t *l, const za_vars_t *vars, float *values, uint64_t seed)
{
    double area = (double) l->spec.kernel * l->spec.kernel;
    za_layer_init_glorot (l, vars, values, seed, area * l->in_shape.c,
                          area * l->spec.units);
}

static void
s_forward (const za_layer_t *l, const za_layer_call_t *call)
{
    za_conv2d_dims_t d;
    s_dims (&d, &l->spec, call->n, l->in_shape);
    call->be->conv2d_forward (&d, call->in, call->kernel, call->bias, l->spec.act, l->cols,
                              l->out);
}

static void
s_backward (const za_layer_t *l, const za_layer_call_t *call)
{
    za_conv2d_dims_t d;
    s_dims (&d, &l->spec, call->n, l->in_shape);
    call->be->conv2d_backward (&d, call->in, l->cols, call->kernel, l->out, l->spec.act, l->dout,
                               call->dkernel, call->dbias, call->scratch, call->din);
}

//  The pair's geometries for a batch of n: this layer's, and the pool's
//  over its output. 0 or -1.
static int
s_pair_dims (za_conv2d_dims_t *d, za_pool2d_dims_t *p, const za_layer_t *l,
             const za_layer_t *pool, int n)
{
    return s_dims (d, &l->spec, n, l->in_shape)
        || za_pool2d_dims (p, n, l->out_shape.h, l->out_shape.w, l->out_shape.c,
                           pool->spec.pool, pool->spec.stride)? -1: 0;
}

int
za_layer_conv2d_pool_forward (const za_layer_t *l, const za_layer_t *pool,
                              const za_layer_call_t *call)
{
    za_conv2d_dims_t d;
    za_pool2d_dims_t p;
    if (!call->be->conv2d_pool_forward || s_pair_dims (&d, &p, l, pool, call->n))
        return -1;
    return call->be->conv2d_pool_forward (&d, &p, call->in, call->kernel, call->bias,
                                          l->spec.act, pool->out, pool->argmax);
}

int
za_layer_conv2d_pool_backward (const za_layer_t *l, const za_layer_t *pool,
                               const za_layer_call_t *call)
{
    za_conv2d_dims_t d;
    za_pool2d_dims_t p;
    if (call->din || !call->be->conv2d_pool_backward || s_pair_dims (&d, &p, l, pool, call->n))
        return -1;
    return call->be->conv2d_pool_backward (&d, &p, call->in, pool->out, pool->argmax,
                                           l->spec.act, pool->dout, call->dkernel,
                                           call->dbias);
}

const za_layer_ops_t za_layer_conv2d = {
    .name = "conv2d",
    .takes = ZA_TAKES_STRIDE | ZA_TAKES_PADDING | ZA_TAKES_ACTIVATION,
    .parse = s_parse,
    .format = s_format,
    .shape = s_shape,
    .flops = s_flops,
    .plan = s_plan,
    .init_vars = s_init_vars,
    .forward = s_forward,
    .backward = s_backward,
};
