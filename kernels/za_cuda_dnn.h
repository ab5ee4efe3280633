/*  za_cuda_dnn.h: convolutions through cuDNN for the CUDA back end's fp32
    table (za_cuda_gemm.cu), with im2col and cuBLAS as the fallback where
    cuDNN is not built in, is turned off or declines a geometry.
    Internal to kernels/; not installed.                                     */
#ifndef ZA_CUDA_DNN_H_INCLUDED
#define ZA_CUDA_DNN_H_INCLUDED

#include "za/za_kernels.h"

//  Each returns 0 when cuDNN did the work, -1 when it declined it (not
//  built in, ZA_CUDNN=0, a geometry it cannot take, no algorithm within the
//  workspace limit, or a call that failed: said once on stderr) and the
//  caller computes it another way; a declined call has written nothing the
//  caller reads. The first failure of a geometry turns cuDNN off for it.
#ifdef ZA_HAVE_CUDNN
//  out[n, oh, ow, oc] = in (*) kernel, no bias, no activation.
int za_cuda_dnn_conv_forward (const za_conv2d_dims_t *d, const float *in,
                              const float *kernel, float *out);
//  dkernel += the kernel's gradient from in and dout.
int za_cuda_dnn_conv_backward_filter (const za_conv2d_dims_t *d, const float *in,
                                      const float *dout, float *dkernel);
//  din = the input's gradient from kernel and dout.
int za_cuda_dnn_conv_backward_data (const za_conv2d_dims_t *d, const float *kernel,
                                    const float *dout, float *din);
//  1 when this thread's last forward of this geometry went through cuDNN
//  (so it left no im2col columns for a fallback to read), else 0.
int za_cuda_dnn_conv_taken (const za_conv2d_dims_t *d);
//  What the fp32 table's name says of cuDNN: "cuDNN 9.19, TF32" or NULL.
const char *za_cuda_dnn_describe (void);
#else
static inline int
za_cuda_dnn_conv_forward (const za_conv2d_dims_t *, const float *, const float *, float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_backward_filter (const za_conv2d_dims_t *, const float *, const float *,
                                  float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_backward_data (const za_conv2d_dims_t *, const float *, const float *,
                                float *)
{
    return -1;
}
static inline int
za_cuda_dnn_conv_taken (const za_conv2d_dims_t *)
{
    return 0;
}
static inline const char *
za_cuda_dnn_describe (void)
{
    return NULL;
}
#endif

#endif
