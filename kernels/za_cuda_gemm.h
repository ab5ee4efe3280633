/*  za_cuda_gemm.h: the CUDA back end's matrix-product layers, for its table
    (za_cuda.cu). Each has the signature of its za_backend_t entry.
    Internal to kernels/; not installed.                                     */
#ifndef ZA_CUDA_GEMM_H_INCLUDED
#define ZA_CUDA_GEMM_H_INCLUDED

#include "za/za_kernels.h"

//  In each precision (za_precision_t): the GEMMs' inputs cast to bf16 or
//  fp16 on the GPU, cuBLAS multiplying them on tensor cores with fp32 sums
//  and results; FP32 is cublasSgemm.
template <za_precision_t Q>
void za_cuda_conv2d_forward (const za_conv2d_dims_t *d, const float *in,
                             const float *kernel, const float *bias, za_act_t act,
                             float *cols, float *out);
template <za_precision_t Q>
void za_cuda_conv2d_backward (const za_conv2d_dims_t *d, const float *in,
                              float *cols,
                              const float *kernel, const float *out, za_act_t act,
                              float *dout, float *dkernel, float *dbias, float *dcols,
                              float *din);
template <za_precision_t Q>
void za_cuda_dense_forward (int n, int in_dim, int units, const float *in,
                            const float *kernel, const float *bias, za_act_t act,
                            float *out);
template <za_precision_t Q>
void za_cuda_dense_backward (int n, int in_dim, int units, const float *in,
                             const float *kernel, const float *out, za_act_t act,
                             float *dout, float *dkernel, float *dbias, float *din);

#endif
