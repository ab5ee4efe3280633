/*  za_cpu_gemm.h: the CPU back end's dense layers, for its table (za_cpu.c;
    each has the signature of its za_backend_t entry). Internal to kernels/;
    not installed.                                                          */
#ifndef ZA_CPU_GEMM_H_INCLUDED
#define ZA_CPU_GEMM_H_INCLUDED

#include "za/za_kernels.h"

void za_cpu_dense_forward (int n, int in_dim, int units, const float *in,
                           const float *kernel, const float *bias, za_act_t act,
                           float *out);
void za_cpu_dense_backward (int n, int in_dim, int units, const float *in,
                            const float *kernel, const float *out, za_act_t act,
                            float *dout, float *dkernel, float *dbias, float *din);

//  The same in mixed precision (za_precision_t): the inputs of each product
//  in bf16 or float16, the results fp32.
#define ZA_CPU_GEMM_MIXED(suffix)                                                            \
void za_cpu_dense_forward_##suffix (int n, int in_dim, int units, const float *in,           \
                                    const float *kernel, const float *bias, za_act_t act,    \
                                    float *out);                                             \
void za_cpu_dense_backward_##suffix (int n, int in_dim, int units, const float *in,          \
                                     const float *kernel, const float *out, za_act_t act,    \
                                     float *dout, float *dkernel, float *dbias, float *din);
ZA_CPU_GEMM_MIXED (bf16)
ZA_CPU_GEMM_MIXED (fp16)

#endif
