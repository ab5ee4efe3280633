/*  za_cpu_gemm.h: the CPU back end's dense layers, for its table (za_cpu.c;
    each has the signature of its za_backend_t entry), and what the files of
    its convolution share (a thread's buffers, rounded copies, the mask of
    an activation's gradient). Internal to kernels/; not installed.         */
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

//  This thread's buffer `slot` (0 to 3: 0 and 1 rounded inputs and
//  kernels, 2 and 3 the direct loops' plane and pairs), of n floats at
//  least, or NULL. Its own until the thread ends.
float *za_cpu_buffer (int slot, size_t n);

//  x rounded to the precision, in this thread's buffer `slot` (0 or 1);
//  x itself where no memory is left for the copy (then fp32 it is).
const float *za_cpu_rounded (int slot, const float *x, size_t n, za_precision_t precision);

//  Masks dout [rows, units] by the activation's derivative at out, then
//  dbias += its column sums.
void za_cpu_act_bias_backward (size_t rows, int units, const float *out, za_act_t act,
                               float *dout, float *dbias);

#endif
