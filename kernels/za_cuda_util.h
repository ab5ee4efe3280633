/*  za_cuda_util.h: what the CUDA back end's sources share: the calling
    thread's device, cuBLAS handles and first error, the checks that keep
    that error, and how a kernel is launched over its elements.
    Internal to kernels/; not installed.                                     */
#ifndef ZA_CUDA_UTIL_H_INCLUDED
#define ZA_CUDA_UTIL_H_INCLUDED

#include "za/za_kernels.h"

#include "za_elem.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define BLOCK_THREADS 256
#define GRID_BLOCKS_MAX 65535

//  What softmax_xent_add sums on a device for loss_take.
typedef struct {
    double loss;
    int correct;
    int invalid;
} za_cuda_loss_t;

//  The calling thread's device, its cuBLAS handles, the first error since
//  its last sync, and scratch for the loss's per-row results and the bias
//  gradient's partial sums.
typedef struct {
    int device;
    cublasHandle_t blas [ZA_DEVICE_MAX];
    char error [ZA_ERROR_MAX_CHARS];
    double *row_loss [ZA_DEVICE_MAX];       //  device
    int *row_flags [ZA_DEVICE_MAX];         //  device: 1 correct, 2 invalid label
    size_t row_loss_bytes [ZA_DEVICE_MAX], row_flags_bytes [ZA_DEVICE_MAX];
    void *partial [ZA_DEVICE_MAX];          //  device: the bias gradient's partial sums
    size_t partial_bytes [ZA_DEVICE_MAX];
    void *low [ZA_DEVICE_MAX][2];           //  device: a GEMM's two inputs in bf16 / fp16
    size_t low_bytes [ZA_DEVICE_MAX][2];
    void *cols [ZA_DEVICE_MAX][2];          //  device: im2col's columns and their gradient
    size_t cols_bytes [ZA_DEVICE_MAX][2];   //  where the layers keep none (conv2d_cols_own)
    za_cuda_loss_t *loss_sums [ZA_DEVICE_MAX];  //  device: softmax_xent_add's, until loss_take
    double *clip_sums [ZA_DEVICE_MAX];      //  device: clip_by_global_norm's partial sums
                                            //  of squares, then its scale
    double *host_loss;                      //  pinned
    int *host_flags;
    int host_rows;
    //  Counts the times za_cuda_room replaced a scratch buffer (above, or
    //  the cuDNN file's): a CUDA graph recorded before then is stale.
    unsigned scratch_generation;
    //  1 while the thread's calls are recorded as a CUDA graph (graph_begin
    //  to graph_end): a failure then is the recording's alone, kept as an
    //  error, and nothing may be planned or allocated.
    int recording;
} za_cuda_thread_t;

extern thread_local za_cuda_thread_t za_cuda_self;

//  1 where fp32 convolutions may multiply in TF32 (tensor cores, 10-bit
//  mantissas, fp32 sums) as PyTorch's and TensorFlow's do by default; 0
//  under NVIDIA_TF32_OVERRIDE=0, which cuDNN and cuBLAS also obey. Set when
//  the module opens.
extern int za_cuda_tf32;

//  Keeps the first failure until sync says it.
void za_cuda_fail (const char *what, const char *why);
//  1 when rc is cudaSuccess, else 0 after keeping the failure.
int za_cuda_ok (cudaError_t rc, const char *what);
void za_cuda_blas_ok (cublasStatus_t rc, const char *what);
//  Keeps a kernel launch's failure.
void za_cuda_launched (const char *what);
//  The calling thread's cuBLAS handle on its device, made on first use;
//  NULL where cuBLAS cannot make one (the failure kept for the sync).
cublasHandle_t za_cuda_blas (void);
//  Blocks of BLOCK_THREADS for count elements (at most GRID_BLOCKS_MAX).
unsigned za_cuda_blocks (size_t count);

//  *buffer (on the calling thread's device, *have bytes) with room for
//  `bytes`, grown where smaller; where cudaMalloc fails the old one stays
//  and it returns NULL, the failure kept under `what` (NULL: not kept, the
//  caller goes another way).
void *za_cuda_room (void **buffer, size_t *have, size_t bytes, const char *what);

//  Element i of a buffer of precision q's values: bf16 rounded as the CPU
//  rounds (za_elem_bf16), fp16 to the nearest even, fp32 as it is.
__device__ static inline void
za_cuda_store (za_precision_t q, void *to, size_t i, float v)
{
    if (q == ZA_PRECISION_BF16)
        ((uint16_t *) to) [i] = za_elem_bf16 (v);
    else
    if (q == ZA_PRECISION_FP16)
        ((__half *) to) [i] = __float2half_rn (v);
    else
        ((float *) to) [i] = v;
}

__device__ static inline float
za_cuda_load (za_precision_t q, const void *from, size_t i)
{
    if (q == ZA_PRECISION_BF16)
        return __uint_as_float ((uint32_t) ((const uint16_t *) from) [i] << 16);
    if (q == ZA_PRECISION_FP16)
        return __half2float (((const __half *) from) [i]);
    return ((const float *) from) [i];
}

//  A layer's epilogue for element i of rows of `units`: v plus its unit's
//  bias, then the ReLU where relu.
__device__ static inline float
za_cuda_bias_act (float v, const float *bias, size_t i, int units, int relu)
{
    v += bias [i % (size_t) units];
    return relu? (v > 0? v: 0.0f): v;
}

//  y [0 .. count) = x cast to q, and back.
__global__ void za_cuda_cast_down (za_precision_t q, size_t count, const float *x, void *y);
__global__ void za_cuda_cast_up (za_precision_t q, size_t count, const void *y, float *x);

//  Every kernel walks its elements with a grid-stride loop.
#define FOR_EACH(i, count) \
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < (count); \
         i += (size_t) gridDim.x * blockDim.x)

#define LAUNCH(kernel, count, ...)                                                  \
    do {                                                                            \
        kernel<<<za_cuda_blocks (count), BLOCK_THREADS>>> (__VA_ARGS__);            \
        za_cuda_launched (#kernel);                                                 \
    } while (0)

#endif
