/*  za_cpu_conv.h: the CPU's 2-D convolution: the back end's entries (fp32,
    bf16, float16) and the ways each pass may go, tried in the order of
    za_cpu_conv.c's tables. Internal to kernels/; not installed.            */
#ifndef ZA_CPU_CONV_H_INCLUDED
#define ZA_CPU_CONV_H_INCLUDED

#include "za/za_kernels.h"

//  The back end's entries (their za_backend_t slots' signatures).
void za_cpu_conv2d_forward (const za_conv2d_dims_t *d, const float *in,
                            const float *kernel, const float *bias, za_act_t act,
                            float *cols, float *out);
void za_cpu_conv2d_backward (const za_conv2d_dims_t *d, const float *in, float *cols,
                             const float *kernel, const float *out, za_act_t act,
                             float *dout, float *dkernel, float *dbias, float *dcols,
                             float *din);
//  The same in mixed precision (za_precision_t): the inputs of each product
//  in bf16 or float16, the results fp32.
#define ZA_CPU_CONV_MIXED(suffix)                                                            \
void za_cpu_conv2d_forward_##suffix (const za_conv2d_dims_t *d, const float *in,             \
                                     const float *kernel, const float *bias, za_act_t act,   \
                                     float *cols, float *out);                               \
void za_cpu_conv2d_backward_##suffix (const za_conv2d_dims_t *d, const float *in,            \
                                      float *cols, const float *kernel, const float *out,    \
                                      za_act_t act, float *dout, float *dkernel,             \
                                      float *dbias, float *dcols, float *din);
ZA_CPU_CONV_MIXED (bf16)
ZA_CPU_CONV_MIXED (fp16)

//  A 3x3 convolution of one channel and the 2x2 max-pool after it, as one
//  (AVX-512; -1 where not taken): the za_backend_t entries, fp32 and bf16.
#define ZA_CPU_CONV_POOL(suffix)                                                             \
int za_cpu_conv2d_pool_forward##suffix (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p, \
                                        const float *in, const float *kernel,                \
                                        const float *bias, za_act_t act, float *pool_out,    \
                                        int32_t *argmax);                                    \
int za_cpu_conv2d_pool_backward##suffix (const za_conv2d_dims_t *d,                          \
                                         const za_pool2d_dims_t *p, const float *in,         \
                                         const float *pool_out, const int32_t *argmax,       \
                                         za_act_t act, const float *pool_dout,               \
                                         float *dkernel, float *dbias);
ZA_CPU_CONV_POOL ()
ZA_CPU_CONV_POOL (_bf16)

//  One pass of one convolution, as a way takes it: the entry's arguments
//  and the precision of its products. Forward: in, kernel, bias, act, cols
//  (the im2col matrix, the way's to fill), out. Backward: also dout, dkernel
//  (+=), dbias (+=), dcols (scratch), din (NULL: not asked).
typedef struct {
    za_precision_t precision;
    const za_conv2d_dims_t *d;
    const float *in, *kernel, *bias, *out_values;   //  out_values: the forward's out
    za_act_t act;
    float *cols, *out;
    float *dout, *dkernel, *dbias, *dcols, *din;
} za_cpu_conv_t;

//  A way: 0 when it did the whole pass, -1 when it does not take this
//  geometry, precision or CPU (nothing written).
typedef int (za_cpu_conv_fn) (const za_cpu_conv_t *call);

//  The ways of other files, in the tables' order (za_cpu_conv.c has the
//  oneDNN and AMX ones):
//  za_cpu_direct.c: a 3x3 kernel on one channel, AVX-512 (fp32 and bf16;
//  backward where no input gradient is asked).
za_cpu_conv_fn za_cpu_direct_forward;
za_cpu_conv_fn za_cpu_direct_backward;
//  1 when those loops take d in precision.
int za_cpu_direct_takes (const za_conv2d_dims_t *d, za_precision_t precision);
//  za_cpu_gemm.c, over the im2col matrix: patches of at most 32 values
//  (the small-K loops); any patch (one OpenBLAS sgemm); a bf16 backward on
//  planes of at most 16 outputs (oneDNN's matmuls); any mixed backward
//  (rounded inputs, fp32 products). Backward ways take dout masked.
za_cpu_conv_fn za_cpu_small_k_forward;
za_cpu_conv_fn za_cpu_im2col_forward;
za_cpu_conv_fn za_cpu_im2col_backward;
za_cpu_conv_fn za_cpu_small_plane_backward;
za_cpu_conv_fn za_cpu_rounded_im2col_backward;

//  ZA_CONV_TRACE=1: 1 when asked to say which way takes each layer's pass
//  (read once); and the saying, once per layer and pass: "conv2d
//  16x13x13x32 -> 64, 3x3, stride 1, bf16, backward: oneDNN".
int za_cpu_conv_tracing (void);
void za_cpu_conv_trace (const za_conv2d_dims_t *d, za_precision_t precision, int backward,
                        int input_gradient, const char *way);

#endif
