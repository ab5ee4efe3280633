/*  za_cuda_gemm.cu: the CUDA back end's matrix-product layers, beside
    za_cpu_gemm.c: conv2d (in fp32 through cuDNN where it takes the geometry,
    za_cuda_dnn.cu; else an im2col kernel and one cuBLAS GEMM over the whole
    batch) and dense, with the bias and activation as kernels. In mixed
    precision each GEMM's inputs are cast (the CPU's rounding, za_elem.h)
    and cuBLAS multiplies them on tensor cores, summing in fp32.           */
#include "za_cuda_dnn.h"
#include "za_cuda_gemm.h"
#include "za_cuda_util.h"
#include "za_elem.h"


__global__ void
k_im2col (za_conv2d_dims_t d, const float *in, float *cols, size_t count)
{
    FOR_EACH (i, count)
        cols [i] = za_elem_im2col (&d, in, i);
}

__global__ void
k_col2im (za_conv2d_dims_t d, const float *dcols, float *din, size_t count)
{
    FOR_EACH (i, count)
        din [i] = za_elem_col2im (&d, dcols, i);
}

//  out[r, u] += bias[u], then the activation.
__global__ void
k_bias_act (size_t count, int units, const float *bias, int relu, float *out)
{
    FOR_EACH (i, count)
        out [i] = za_cuda_bias_act (out [i], bias, i, units, relu);
}

//  dout masked where the ReLU's output was 0.
__global__ void
k_relu_mask (size_t count, const float *out, float *dout)
{
    FOR_EACH (i, count)
        if (!(out [i] > 0))
            dout [i] = 0.0f;
}

//  dbias[u] += sum over rows of dout[r, u], in two passes that add in a fixed
//  order (the same sums every run). Pass one: block (x, y) sums its chunk of
//  rows for 32 columns, a warp reading 32 neighbouring columns of a row at
//  once, 8 rows apart per lane; the lanes are added in order.
#define SUM_COLUMNS 32
#define SUM_LANES 8
#define SUM_BLOCKS 1024

__global__ void
k_column_partials (size_t rows, int units, size_t chunk, const float *dout, float *partial)
{
    __shared__ float lanes [SUM_LANES][SUM_COLUMNS];
    int u = blockIdx.x * SUM_COLUMNS + threadIdx.x;
    size_t lo = (size_t) blockIdx.y * chunk;
    size_t hi = lo + chunk < rows? lo + chunk: rows;
    float sum = 0.0f;
    if (u < units)
        for (size_t r = lo + threadIdx.y; r < hi; r += SUM_LANES)
            sum += dout [r * units + u];
    lanes [threadIdx.y][threadIdx.x] = sum;
    __syncthreads ();
    if (threadIdx.y == 0 && u < units) {
        float total = 0.0f;
        for (int lane = 0; lane < SUM_LANES; lane++)
            total += lanes [lane][threadIdx.x];
        partial [(size_t) blockIdx.y * units + u] = total;
    }
}

//  Pass two: dbias[u] += column u's partial sums, chunk by chunk.
__global__ void
k_column_total (int parts, int units, const float *partial, float *dbias)
{
    FOR_EACH (u, (size_t) units) {
        float sum = 0.0f;
        for (int p = 0; p < parts; p++)
            sum += partial [(size_t) p * units + u];
        dbias [u] += sum;
    }
}

//  This thread's scratch for floats partial sums on its device, or NULL
//  with the failure kept.
static float *
s_partials (size_t floats)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int dev = self->device;
    return (float *) za_cuda_room (&self->partial [dev], &self->partial_bytes [dev],
                                   floats * sizeof (float), "cudaMalloc");
}

//  `given` (a layer's), else this thread's columns scratch `slot` with room
//  for floats on its device, or NULL with the failure kept.
static float *
s_cols (float *given, int slot, size_t floats)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int dev = self->device;
    return given? given
         : (float *) za_cuda_room (&self->cols [dev][slot], &self->cols_bytes [dev][slot],
                                   floats * sizeof (float), "cudaMalloc (im2col columns)");
}

static void
s_column_sums (size_t rows, int units, const float *dout, float *dbias)
{
    unsigned across = (unsigned) ((units + SUM_COLUMNS - 1) / SUM_COLUMNS);
    size_t down = (rows + 63) / 64;
    size_t most = across < SUM_BLOCKS? SUM_BLOCKS / across: 1;
    if (down > most)
        down = most;
    if (down < 1)
        down = 1;
    size_t chunk = (rows + down - 1) / down;
    float *partial = s_partials (down * (size_t) units);
    if (!partial)
        return;
    k_column_partials<<<dim3 (across, (unsigned) down), dim3 (SUM_COLUMNS, SUM_LANES)>>> (
        rows, units, chunk, dout, partial);
    za_cuda_launched ("k_column_partials");
    LAUNCH (k_column_total, (size_t) units, (int) down, units, partial, dbias);
}

// ---------------------------------------------------------------------------
//  The layers

//  x (count floats) in precision Q (bf16 with the CPU's rounding, fp16
//  ties to even), in this thread's scratch `slot` on its device, or NULL.
template <za_precision_t Q>
static const void *
s_low (int slot, const float *x, size_t count)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int dev = self->device;
    void *y = za_cuda_room (&self->low [dev][slot], &self->low_bytes [dev][slot], count * 2,
                            "cudaMalloc");
    if (y)
        LAUNCH (za_cuda_cast_down, count, Q, count, x, y);
    return y;
}

//  Row-major out[m, n] = a[m, k] @ b[k, n] (+ out when accumulate): cuBLAS is
//  column-major, so it computes out^T = b^T a^T. ta / tb: a or b transposed
//  (a is then stored [k, m], b [n, k]). A convolution's fp32 GEMMs may
//  multiply in TF32 (za_cuda_tf32), as cuDNN's; dense's do not (PyTorch's
//  defaults: cudnn.allow_tf32 on, cuda.matmul.allow_tf32 off).
enum { S_DENSE = 0, S_CONV = 1 };

template <za_precision_t Q>
static void
s_gemm (int ta, int tb, int m, int n, int k, const float *a, const float *b, float beta,
        float *out, int conv)
{
    const float one = 1.0f;
    cublasOperation_t op_a = ta? CUBLAS_OP_T: CUBLAS_OP_N, op_b = tb? CUBLAS_OP_T: CUBLAS_OP_N;
    if (Q == ZA_PRECISION_FP32 && conv && za_cuda_tf32) {
        za_cuda_blas_ok (cublasGemmEx (za_cuda_blas (), op_b, op_a, n, m, k, &one, b,
                                       CUDA_R_32F, tb? k: n, a, CUDA_R_32F, ta? m: k, &beta,
                                       out, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32,
                                       CUBLAS_GEMM_DEFAULT), "cublasGemmEx (TF32)");
        return;
    }
    if (Q == ZA_PRECISION_FP32) {
        za_cuda_blas_ok (cublasSgemm (za_cuda_blas (), op_b, op_a, n, m, k, &one, b, tb? k: n,
                                      a, ta? m: k, &beta, out, n), "cublasSgemm");
        return;
    }
    const void *la = s_low<Q> (0, a, (size_t) m * k), *lb = s_low<Q> (1, b, (size_t) k * n);
    if (!la || !lb)
        return;
    cudaDataType_t type = Q == ZA_PRECISION_BF16? CUDA_R_16BF: CUDA_R_16F;
    za_cuda_blas_ok (cublasGemmEx (za_cuda_blas (), op_b, op_a, n, m, k, &one, lb, type,
                                   tb? k: n, la, type, ta? m: k, &beta, out, CUDA_R_32F, n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmEx");
}

static void
s_bias_act (size_t rows, int units, const float *bias, za_act_t act, float *out)
{
    size_t count = rows * units;
    LAUNCH (k_bias_act, count, count, units, bias, act == ZA_ACT_RELU, out);
}

static void
s_act_bias_backward (size_t rows, int units, const float *out, za_act_t act, float *dout,
                     float *dbias)
{
    size_t count = rows * units;
    if (act == ZA_ACT_RELU)
        LAUNCH (k_relu_mask, count, count, out, dout);
    s_column_sums (rows, units, dout, dbias);
}

template <za_precision_t Q>
void
za_cuda_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                        const float *bias, za_act_t act, float *cols, float *out)
{
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    size_t count = (size_t) P * K;
    if (za_cuda_dnn_conv_forward (Q, d, in, kernel, bias, act == ZA_ACT_RELU, out) == 0)
        return;
    if ((cols = s_cols (cols, 0, count))) {
        LAUNCH (k_im2col, count, *d, in, cols, count);
        s_gemm<Q> (0, 0, P, d->oc, K, cols, kernel, 0.0f, out, S_CONV);
    }
    s_bias_act ((size_t) P, d->oc, bias, act, out);
}

template <za_precision_t Q>
void
za_cuda_conv2d_backward (const za_conv2d_dims_t *d, const float *in, float *cols,
                         const float *kernel, const float *out, za_act_t act, float *dout,
                         float *dkernel, float *dbias, float *dcols, float *din)
{
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    if (za_cuda_dnn_conv_backward_begin (Q, d, out, act == ZA_ACT_RELU, dout) == 0)
        s_column_sums ((size_t) P, d->oc, dout, dbias);
    else
        s_act_bias_backward ((size_t) P, d->oc, out, act, dout, dbias);
    size_t count = (size_t) P * K;
    if (za_cuda_dnn_conv_backward_filter (Q, d, in, dout, dkernel)) {
        //  A forward through cuDNN, or into this thread's scratch (that
        //  later layers reuse), left no columns.
        int again = !cols || za_cuda_dnn_conv_taken (Q, d);
        if ((cols = s_cols (cols, 0, count))) {
            if (again)
                LAUNCH (k_im2col, count, *d, in, cols, count);
            s_gemm<Q> (1, 0, K, d->oc, P, cols, dout, 1.0f, dkernel, S_CONV);
        }
    }
    if (din && za_cuda_dnn_conv_backward_data (Q, d, kernel, dout, din)
        && (dcols = s_cols (dcols, 1, count))) {
        s_gemm<Q> (0, 1, P, K, d->oc, dout, kernel, 0.0f, dcols, S_CONV);
        size_t inputs = (size_t) d->n * d->h * d->w * d->c;
        LAUNCH (k_col2im, inputs, *d, dcols, din, inputs);
    }
}

template <za_precision_t Q>
void
za_cuda_dense_forward (int n, int in_dim, int units, const float *in, const float *kernel,
                       const float *bias, za_act_t act, float *out)
{
    s_gemm<Q> (0, 0, n, units, in_dim, in, kernel, 0.0f, out, S_DENSE);
    s_bias_act ((size_t) n, units, bias, act, out);
}

template <za_precision_t Q>
void
za_cuda_dense_backward (int n, int in_dim, int units, const float *in, const float *kernel,
                        const float *out, za_act_t act, float *dout, float *dkernel,
                        float *dbias, float *din)
{
    s_act_bias_backward ((size_t) n, units, out, act, dout, dbias);
    s_gemm<Q> (1, 0, in_dim, units, n, in, dout, 1.0f, dkernel, S_DENSE);
    if (din)
        s_gemm<Q> (0, 1, n, in_dim, units, dout, kernel, 0.0f, din, S_DENSE);
}

#define S_INSTANTIATE(P)                                                                      \
    template void za_cuda_conv2d_forward<P> (const za_conv2d_dims_t *, const float *,        \
                                             const float *, const float *, za_act_t, float *, \
                                             float *);                                        \
    template void za_cuda_conv2d_backward<P> (const za_conv2d_dims_t *, const float *,       \
                                              float *, const float *, const float *,          \
                                              za_act_t, float *, float *, float *, float *,   \
                                              float *);                                       \
    template void za_cuda_dense_forward<P> (int, int, int, const float *, const float *,     \
                                            const float *, za_act_t, float *);                \
    template void za_cuda_dense_backward<P> (int, int, int, const float *, const float *,    \
                                             const float *, za_act_t, float *, float *,       \
                                             float *, float *);
S_INSTANTIATE (ZA_PRECISION_FP32)
S_INSTANTIATE (ZA_PRECISION_BF16)
S_INSTANTIATE (ZA_PRECISION_FP16)
