/*  za_cpu_conv.h: the CPU's 2-D convolution, the back end's entries (fp32,
    bf16, float16; za_cpu_conv.c's tables choose the way each pass goes,
    za_cpu_ways.h has the ways). Internal to kernels/; not installed.       */
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

#endif
