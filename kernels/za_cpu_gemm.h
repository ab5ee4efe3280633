/*  za_cpu_gemm.h: the CPU back end's matrix-product layers, for its table
    (za_cpu.c). Each has the signature of its za_backend_t entry.
    Internal to kernels/; not installed.                                     */
#ifndef ZA_CPU_GEMM_H_INCLUDED
#define ZA_CPU_GEMM_H_INCLUDED

#include "za/za_kernels.h"

void za_cpu_conv2d_forward (const za_conv2d_dims_t *d, const float *in,
                            const float *kernel, const float *bias, za_act_t act,
                            float *cols, float *out);
void za_cpu_conv2d_backward (const za_conv2d_dims_t *d, const float *in,
                             float *cols,
                             const float *kernel, const float *out, za_act_t act,
                             float *dout, float *dkernel, float *dbias, float *dcols,
                             float *din);
void za_cpu_dense_forward (int n, int in_dim, int units, const float *in,
                           const float *kernel, const float *bias, za_act_t act,
                           float *out);
void za_cpu_dense_backward (int n, int in_dim, int units, const float *in,
                            const float *kernel, const float *out, za_act_t act,
                            float *dout, float *dkernel, float *dbias, float *din);

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

//  The same in mixed precision (za_precision_t): the inputs of each product
//  in bf16 or float16, the results fp32.
#define ZA_CPU_GEMM_MIXED(suffix)                                                            \
void za_cpu_conv2d_forward_##suffix (const za_conv2d_dims_t *d, const float *in,             \
                                     const float *kernel, const float *bias, za_act_t act,   \
                                     float *cols, float *out);                               \
void za_cpu_conv2d_backward_##suffix (const za_conv2d_dims_t *d, const float *in,            \
                                      float *cols, const float *kernel, const float *out,    \
                                      za_act_t act, float *dout, float *dkernel,             \
                                      float *dbias, float *dcols, float *din);               \
void za_cpu_dense_forward_##suffix (int n, int in_dim, int units, const float *in,           \
                                    const float *kernel, const float *bias, za_act_t act,    \
                                    float *out);                                             \
void za_cpu_dense_backward_##suffix (int n, int in_dim, int units, const float *in,          \
                                     const float *kernel, const float *out, za_act_t act,    \
                                     float *dout, float *dkernel, float *dbias, float *din);
ZA_CPU_GEMM_MIXED (bf16)
ZA_CPU_GEMM_MIXED (fp16)

#endif
