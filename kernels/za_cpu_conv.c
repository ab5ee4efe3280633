/*  za_cpu_conv.c: which way a CPU convolution goes. One table a direction
    and precision lists the ways in the order they are tried; the first that
    takes the layer (its geometry, precision, this CPU) does the whole pass.
    ZA_CONV_TRACE=1 says, once per layer and pass, which way took it.       */
#include "za_cpu_conv.h"
#include "za_cpu_amx.h"
#include "za_cpu_dnnl.h"
#include "za_cpu_ways.h"
#include "za/za_model.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#define AMX_ROW_BYTES 64                //  a tile's row: its copies start on one

// ---------------------------------------------------------------------------
//  The ways of this file: oneDNN's primitives, AMX's tiles, and the fp32
//  table on rounded inputs

static int
s_dnnl_forward (const za_cpu_conv_t *c)
{
    return za_cpu_dnnl_conv2d_forward (c->d, c->in, c->kernel, c->bias, c->act, c->out,
                                       c->precision);
}

static int
s_dnnl_backward (const za_cpu_conv_t *c)
{
    return za_cpu_dnnl_conv2d_backward (c->d, c->in, c->kernel, c->act, c->dout, c->dkernel,
                                        c->din, c->precision);
}

//  bf16 on AMX: zactor's own tiles (za_cpu_amx.c says why), small planes
//  too (the seed CNN's third layer: 0.15 to 0.08 ms a step against the
//  matmuls after it). Their copies take the direct loops' buffer (theirs
//  fill it anew at every call).
static int
s_amx_backward (const za_cpu_conv_t *c)
{
    size_t bytes = c->precision == ZA_PRECISION_BF16 && c->dkernel
                 ? za_cpu_amx_conv2d_scratch (c->d): 0;
    float *scratch = bytes? za_cpu_buffer (2, (bytes + AMX_ROW_BYTES) / sizeof (float)): NULL;
    if (!scratch)
        return -1;
    uintptr_t at = ((uintptr_t) scratch + AMX_ROW_BYTES - 1) & ~(uintptr_t) (AMX_ROW_BYTES - 1);
    za_cpu_amx_conv2d_backward (c->d, c->in, c->kernel, c->dout, c->dkernel, c->din,
                                (void *) at);
    return 0;
}

//  The inputs rounded to the precision, then fp32's ways (the same numbers
//  up to the order of the sums).
static int
s_rounded_forward (const za_cpu_conv_t *c)
{
    const za_conv2d_dims_t *d = c->d;
    size_t inputs = (size_t) d->n * d->h * d->w * d->c;
    size_t weights = (size_t) d->kh * d->kw * d->c * d->oc;
    //  The rounded kernel is in this thread's buffer, which every layer
    //  shares: nothing a back end derives from it may be kept (a kept
    //  reorder goes by the kernel's address).
    uint64_t epoch = za_model_values_epoch ();
    za_model_set_values_epoch (0);
    za_cpu_conv2d_forward (d, za_cpu_rounded (0, c->in, inputs, c->precision),
                           za_cpu_rounded (1, c->kernel, weights, c->precision), c->bias,
                           c->act, c->cols, c->out);
    za_model_set_values_epoch (epoch);
    return 0;
}

// ---------------------------------------------------------------------------
//  The tables

typedef struct {
    const char *name;
    za_cpu_conv_fn *run;
    int masked;             //  1: it takes dout masked by the activation and
                            //  dbias summed (done once, before the first such)
} s_way_t;

static const s_way_t s_forward_fp32 [] = {
    {"direct 3x3 loops (AVX-512)",      za_cpu_direct_forward,          0},
    {"oneDNN",                          s_dnnl_forward,                 0},
    {"im2col + short-patch loops",      za_cpu_small_k_forward,         0},
    {"im2col + OpenBLAS sgemm",         za_cpu_im2col_forward,          0},
};

static const s_way_t s_backward_fp32 [] = {
    {"direct 3x3 loops (AVX-512)",      za_cpu_direct_backward,         0},
    {"oneDNN",                          s_dnnl_backward,                1},
    {"im2col + OpenBLAS sgemm",         za_cpu_im2col_backward,         1},
};

static const s_way_t s_forward_mixed [] = {
    {"direct 3x3 loops (AVX-512, bf16)", za_cpu_direct_forward,         0},
    {"oneDNN",                          s_dnnl_forward,                 0},
    {"rounded inputs, then fp32's ways", s_rounded_forward,             0},
};

static const s_way_t s_backward_mixed [] = {
    {"direct 3x3 loops (AVX-512, bf16)", za_cpu_direct_backward,        0},
    {"AMX tiles",                       s_amx_backward,                 1},
    {"small-plane bf16 matmuls (oneDNN)", za_cpu_small_plane_backward,  1},
    {"oneDNN",                          s_dnnl_backward,                1},
    {"rounded im2col + OpenBLAS sgemm", za_cpu_rounded_im2col_backward, 1},
};

#define S_COUNT(table) (sizeof (table) / sizeof (table) [0])

//  Tries the ways in order until one takes the pass.
static void
s_walk (const s_way_t *ways, size_t count, const za_cpu_conv_t *c, int backward)
{
    int masked = 0;
    for (size_t i = 0; i < count; i++) {
        if (ways [i].masked && !masked) {
            const za_conv2d_dims_t *d = c->d;
            za_cpu_act_bias_backward ((size_t) d->n * d->oh * d->ow, d->oc, c->out_values,
                                      c->act, c->dout, c->dbias);
            masked = 1;
        }
        if (ways [i].run (c) == 0) {
            if (za_cpu_conv_tracing ())
                za_cpu_conv_trace (c->d, c->precision, backward, c->din != NULL, ways [i].name);
            return;
        }
    }
}

// ---------------------------------------------------------------------------
//  The back end's entries

static void
s_forward (za_precision_t precision, const za_conv2d_dims_t *d, const float *in,
           const float *kernel, const float *bias, za_act_t act, float *cols, float *out)
{
    za_cpu_conv_t call = {.precision = precision, .d = d, .in = in, .kernel = kernel,
                          .bias = bias, .act = act, .cols = cols, .out = out};
    if (precision == ZA_PRECISION_FP32)
        s_walk (s_forward_fp32, S_COUNT (s_forward_fp32), &call, 0);
    else
        s_walk (s_forward_mixed, S_COUNT (s_forward_mixed), &call, 0);
}

static void
s_backward (za_precision_t precision, const za_conv2d_dims_t *d, const float *in, float *cols,
            const float *kernel, const float *out, za_act_t act, float *dout, float *dkernel,
            float *dbias, float *dcols, float *din)
{
    za_cpu_conv_t call = {.precision = precision, .d = d, .in = in, .kernel = kernel,
                          .out_values = out, .act = act, .cols = cols, .dout = dout,
                          .dkernel = dkernel, .dbias = dbias, .dcols = dcols, .din = din};
    if (precision == ZA_PRECISION_FP32)
        s_walk (s_backward_fp32, S_COUNT (s_backward_fp32), &call, 1);
    else
        s_walk (s_backward_mixed, S_COUNT (s_backward_mixed), &call, 1);
}

void
za_cpu_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                       const float *bias, za_act_t act, float *cols, float *out)
{
    s_forward (ZA_PRECISION_FP32, d, in, kernel, bias, act, cols, out);
}

void
za_cpu_conv2d_backward (const za_conv2d_dims_t *d, const float *in, float *cols,
                        const float *kernel, const float *out, za_act_t act, float *dout,
                        float *dkernel, float *dbias, float *dcols, float *din)
{
    s_backward (ZA_PRECISION_FP32, d, in, cols, kernel, out, act, dout, dkernel, dbias, dcols,
                din);
}

#define S_MIXED(suffix, precision)                                                            \
void                                                                                          \
za_cpu_conv2d_forward_##suffix (const za_conv2d_dims_t *d, const float *in,                   \
                                const float *kernel, const float *bias, za_act_t act,         \
                                float *cols, float *out)                                      \
{                                                                                             \
    s_forward (precision, d, in, kernel, bias, act, cols, out);                               \
}                                                                                             \
void                                                                                          \
za_cpu_conv2d_backward_##suffix (const za_conv2d_dims_t *d, const float *in, float *cols,     \
                                 const float *kernel, const float *out, za_act_t act,         \
                                 float *dout, float *dkernel, float *dbias, float *dcols,     \
                                 float *din)                                                  \
{                                                                                             \
    s_backward (precision, d, in, cols, kernel, out, act, dout, dkernel, dbias, dcols, din);  \
}

S_MIXED (bf16, ZA_PRECISION_BF16)
S_MIXED (fp16, ZA_PRECISION_FP16)
