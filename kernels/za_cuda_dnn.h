/*  za_cuda_dnn.h: convolutions through cuDNN for the CUDA back end's tables
    (za_cuda_gemm.cu), with im2col and cuBLAS as the fallback where cuDNN is
    not built in, is turned off or declines a geometry.
    Internal to kernels/; not installed.                                     */
#ifndef ZA_CUDA_DNN_H_INCLUDED
#define ZA_CUDA_DNN_H_INCLUDED

#include "za/za_kernels.h"

//  In precision q: fp32 (TF32 where za_cuda_tf32 allows), or bf16 / fp16
//  tensors cast from zactor's fp32 ones and sums in fp32, the results cast
//  back (a convolution's output and input gradient pass through q, as
//  PyTorch's autocast convolutions' do).
//
//  Each returns 0 when cuDNN did the work, -1 when it declined it (not
//  built in, ZA_CUDNN=0, a geometry it cannot take, no algorithm within the
//  workspace limit, no room for its scratch, or a call that failed: said
//  once on stderr) and the caller computes it another way; a declined call
//  has written nothing the caller reads. The first failure of a pass turns
//  cuDNN off for that geometry.
#ifdef ZA_HAVE_CUDNN
//  out[n, oh, ow, oc] = in (*) kernel + bias[oc], through the ReLU where
//  relu (in bf16 / fp16 in the same pass as the cast back).
int za_cuda_dnn_conv_forward (za_precision_t q, const za_conv2d_dims_t *d, const float *in,
                              const float *kernel, const float *bias, int relu, float *out);
//  A layer's backward starts: dout masked where the ReLU's output was 0
//  (where relu) and, in bf16 / fp16, cast for the two passes below in the
//  same pass, which read that cast while they get the same dout, unchanged
//  since (any other call of this file forgets it). -1 (nothing done) in
//  fp32 or where cuDNN takes neither pass: the caller masks dout itself.
int za_cuda_dnn_conv_backward_begin (za_precision_t q, const za_conv2d_dims_t *d,
                                     const float *out, int relu, float *dout);
//  dkernel += the kernel's gradient from in and dout.
int za_cuda_dnn_conv_backward_filter (za_precision_t q, const za_conv2d_dims_t *d,
                                      const float *in, const float *dout, float *dkernel);
//  din = the input's gradient from kernel and dout.
int za_cuda_dnn_conv_backward_data (za_precision_t q, const za_conv2d_dims_t *d,
                                    const float *kernel, const float *dout, float *din);
//  0 when every forward of this geometry in q went through im2col (its
//  columns are there for a fallback to read), else 1.
int za_cuda_dnn_conv_taken (za_precision_t q, const za_conv2d_dims_t *d);
//  What a table's name says of cuDNN, e.g. "cuDNN 9.19 convolutions in
//  TF32"; NULL when it is off.
const char *za_cuda_dnn_describe (za_precision_t q);
#else
static inline int
za_cuda_dnn_conv_forward (za_precision_t, const za_conv2d_dims_t *, const float *,
                          const float *, const float *, int, float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_backward_begin (za_precision_t, const za_conv2d_dims_t *, const float *, int,
                                 float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_backward_filter (za_precision_t, const za_conv2d_dims_t *, const float *,
                                  const float *, float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_backward_data (za_precision_t, const za_conv2d_dims_t *, const float *,
                                const float *, float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_taken (za_precision_t, const za_conv2d_dims_t *)
{
    return 0;
}
static inline const char *
za_cuda_dnn_describe (za_precision_t)
{
    return NULL;
}
#endif

#endif
