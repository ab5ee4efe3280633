/*  za_cpu_gemm.c: the CPU's layers that are matrix products over OpenBLAS:
    a convolution's ways through its im2col matrix (the short patches' own
    loops, one sgemm over the whole batch, bf16 matmuls on small planes,
    rounded inputs in fp32 products), which za_cpu_conv.c's table tries in
    order, and dense, with the bias and activation folded in, in fp32 and
    mixed precision (bf16 through oneDNN where the CPU has it, else the
    inputs rounded and multiplied in fp32). Also the mask of an
    activation's gradient, which dense and the convolution's table share. */
#include "za_cpu_gemm.h"
#include "za_cpu_ways.h"
#include "za_cpu_dnnl.h"
#include "za_elem.h"
#include "za/za_model.h"
#include "za/za_tensor.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
int
za_conv2d_dims (za_conv2d_dims_t *d, int n, int h, int w, int c, int filters,
                int kernel, int stride, za_padding_t padding)
{
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0 || filters <= 0 || kernel <= 0
        || stride <= 0)
        return za_error ("conv2d: bad geometry (n %d, %dx%dx%d, filters %d, "
                         "kernel %d, stride %d)", n, h, w, c, filters, kernel, stride);
    memset (d, 0, sizeof *d);
    d->n = n, d->h = h, d->w = w, d->c = c;
    d->kh = d->kw = kernel;
    d->stride = stride;
    d->oc = filters;
    if (padding == ZA_PADDING_SAME) {
        d->oh = (h + stride - 1) / stride;
        d->ow = (w + stride - 1) / stride;
        int pad_h = (d->oh - 1) * stride + kernel - h;
        int pad_w = (d->ow - 1) * stride + kernel - w;
        d->pad_top = pad_h > 0? pad_h / 2: 0;
        d->pad_left = pad_w > 0? pad_w / 2: 0;
    }
    else {
        d->oh = h >= kernel? (h - kernel) / stride + 1: 0;
        d->ow = w >= kernel? (w - kernel) / stride + 1: 0;
    }
    if (d->oh <= 0 || d->ow <= 0)
        return za_error ("conv2d: kernel %d does not fit a %dx%d input with "
                         "VALID padding", kernel, h, w);
    //  BLAS takes int sizes: input, output and im2col counts must fit.
    double rows = (double) n * d->oh * d->ow;
    if ((double) n * h * w * c > INT32_MAX || rows * filters > INT32_MAX
        || rows * kernel * kernel * c > INT32_MAX)
        return za_error ("conv2d: a batch of %d at %dx%dx%d is too large (over 2^31 "
                         "values in one buffer); use smaller batches", n, h, w, c);
    return 0;
}

size_t
za_conv2d_cols_floats (const za_conv2d_dims_t *d)
{
    return (size_t) d->n * d->oh * d->ow * d->kh * d->kw * d->c;
}

//  Copies n floats of a patch row to element `at` of cols: as they are, or
//  rounded to bf16 (cols then holds uint16_t); from NULL: zeros.
static inline void
s_patch_run (void *cols, size_t at, const float *from, int n, int bf16)
{
    size_t size = bf16? sizeof (uint16_t): sizeof (float);
    void *to = (char *) cols + at * size;
    if (!from)
        memset (to, 0, n * size);
    else
    if (bf16)
        za_f32_to_bf16 (from, (uint16_t *) to, (size_t) n);
    else
        memcpy (to, from, n * size);
}

//  Row (n, oh, ow) of cols is the patch under the kernel, laid out (kh, kw, c)
//  to match the HWIO kernel, so a patch row is copied kw * c values at a time
//  when it lies inside the image; in fp32, or rounded to bf16 with `bf16`.
static void
s_im2col_as (const za_conv2d_dims_t *d, const float *in, void *cols, int bf16)
{
    const int K = d->kh * d->kw * d->c;
    const int run = d->kw * d->c;
    size_t row = 0;
    for (int n = 0; n < d->n; n++) {
        const float *image = in + (size_t) n * d->h * d->w * d->c;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++, row += K) {
                int iw0 = ow * d->stride - d->pad_left;
                int ih0 = oh * d->stride - d->pad_top;
                for (int kh = 0; kh < d->kh; kh++) {
                    int ih = ih0 + kh;
                    size_t at = row + (size_t) kh * run;
                    if (ih < 0 || ih >= d->h) {
                        s_patch_run (cols, at, NULL, run, bf16);
                        continue;
                    }
                    const float *src = image + ((size_t) ih * d->w) * d->c;
                    if (iw0 >= 0 && iw0 + d->kw <= d->w)
                        s_patch_run (cols, at, src + (size_t) iw0 * d->c, run, bf16);
                    else
                        for (int kw = 0; kw < d->kw; kw++) {
                            int iw = iw0 + kw;
                            int inside = iw >= 0 && iw < d->w;
                            s_patch_run (cols, at + (size_t) kw * d->c,
                                         inside? src + (size_t) iw * d->c: NULL, d->c, bf16);
                        }
                }
            }
        }
    }
}

static void
s_im2col (const za_conv2d_dims_t *d, const float *in, float *cols)
{
    s_im2col_as (d, in, cols, 0);
}

static void
s_im2col_bf16 (const za_conv2d_dims_t *d, const float *in, uint16_t *cols)
{
    s_im2col_as (d, in, cols, 1);
}

//  The adjoint of s_im2col: din = 0, then each patch row is added back.
static void
s_col2im (const za_conv2d_dims_t *d, const float *dcols, float *din)
{
    const int K = d->kh * d->kw * d->c;
    memset (din, 0, sizeof (float) * (size_t) d->n * d->h * d->w * d->c);
    const float *row = dcols;
    for (int n = 0; n < d->n; n++) {
        float *image = din + (size_t) n * d->h * d->w * d->c;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++, row += K) {
                int iw0 = ow * d->stride - d->pad_left;
                int ih0 = oh * d->stride - d->pad_top;
                for (int kh = 0; kh < d->kh; kh++) {
                    int ih = ih0 + kh;
                    if (ih < 0 || ih >= d->h)
                        continue;
                    const float *src = row + kh * d->kw * d->c;
                    for (int kw = 0; kw < d->kw; kw++) {
                        int iw = iw0 + kw;
                        if (iw < 0 || iw >= d->w)
                            continue;
                        float *dst = image + ((size_t) ih * d->w + iw) * d->c;
                        const float *s = src + kw * d->c;
                        for (int c = 0; c < d->c; c++)
                            dst [c] += s [c];
                    }
                }
            }
        }
    }
}

//  out[rows, units] += bias, then the activation.
static void
s_bias_act (size_t rows, int units, const float *bias, za_act_t act, float *out)
{
    for (size_t r = 0; r < rows; r++) {
        float *o = out + r * units;
        if (act == ZA_ACT_RELU)
            for (int u = 0; u < units; u++) {
                float v = o [u] + bias [u];
                o [u] = v > 0? v: 0;
            }
        else
            for (int u = 0; u < units; u++)
                o [u] += bias [u];
    }
}

//  Masks dout by the activation's derivative, then dbias += column sums.
void
za_cpu_act_bias_backward (size_t rows, int units, const float *out, za_act_t act,
                     float *dout, float *dbias)
{
    for (size_t r = 0; r < rows; r++) {
        float *g = dout + r * units;
        if (act == ZA_ACT_RELU) {
            const float *o = out + r * units;
            for (int u = 0; u < units; u++)
                g [u] = o [u] > 0? g [u]: 0;
        }
        for (int u = 0; u < units; u++)
            dbias [u] += g [u];
    }
}

//  Convolutions whose patch is short (the first layer: K = 3*3*1) make a
//  GEMM with K = 9 that is bound by writing its output three times (zero,
//  multiply, bias). These direct loops write it once; LANES output channels
//  at a time live in one vector register.
#define SMALL_K_MAX 32
#define LANES 8
#define TILE_PIXELS 128

//  Eight floats in one AVX register (GCC/Clang vector extension); aligned (4)
//  lets it load from any float address.
typedef float v8f __attribute__ ((vector_size (32), aligned (4)));
typedef int v8i __attribute__ ((vector_size (32), aligned (4)));
#define SMALL_K_MAX_VECS 8          //  output channels up to 64

static int
s_small_k (int K, int oc)
{
    return K <= SMALL_K_MAX && oc % LANES == 0 && oc / LANES <= SMALL_K_MAX_VECS;
}

//  V (the output channels / 8) is a constant in each instantiation, so the
//  accumulators stay in registers.
static inline __attribute__ ((always_inline)) void
s_small_k_forward_v (const int V, int P, int K, const float *restrict cols,
                     const float *restrict kernel, const float *restrict bias, za_act_t act,
                     float *restrict out)
{
    const int OC = V * LANES;
    const v8f zero = {0};
    for (int p = 0; p < P; p++) {
        const float *restrict x = cols + (size_t) p * K;
        v8f acc [SMALL_K_MAX_VECS];
        for (int v = 0; v < V; v++)
            acc [v] = *(const v8f *) (bias + v * LANES);
        for (int k = 0; k < K; k++) {
            const float *restrict w = kernel + (size_t) k * OC;
            for (int v = 0; v < V; v++)
                acc [v] += x [k] * *(const v8f *) (w + v * LANES);
        }
        float *restrict o = out + (size_t) p * OC;
        for (int v = 0; v < V; v++) {
            v8f a = acc [v];
            if (act == ZA_ACT_RELU)
                a = (v8f) ((v8i) a & (a > zero));
            *(v8f *) (o + v * LANES) = a;
        }
    }
}

static void
s_small_k_forward (int P, int K, int OC, const float *cols, const float *kernel,
                   const float *bias, za_act_t act, float *out)
{
    switch (OC / LANES) {
#define CASE(V) case V: s_small_k_forward_v (V, P, K, cols, kernel, bias, act, out); break;
        CASE (1) CASE (2) CASE (3) CASE (4) CASE (5) CASE (6) CASE (7) CASE (8)
#undef CASE
    }
}

//  dkernel[k, oc] += sum_p cols[p, k] * dout[p, oc], a tile of pixels at a
//  time so the tile's gradients stay in cache across the K passes.
static inline __attribute__ ((always_inline)) void
s_small_k_dkernel_v (const int V, int P, int K, const float *restrict cols,
                     const float *restrict dout, float *restrict dkernel)
{
    const int OC = V * LANES;
    for (int p0 = 0; p0 < P; p0 += TILE_PIXELS) {
        int p1 = p0 + TILE_PIXELS < P? p0 + TILE_PIXELS: P;
        for (int k = 0; k < K; k++) {
            v8f acc [SMALL_K_MAX_VECS];
            for (int v = 0; v < V; v++)
                acc [v] = (v8f) {0};
            for (int p = p0; p < p1; p++) {
                const float xk = cols [(size_t) p * K + k];
                const float *restrict g = dout + (size_t) p * OC;
                for (int v = 0; v < V; v++)
                    acc [v] += xk * *(const v8f *) (g + v * LANES);
            }
            float *restrict dk = dkernel + (size_t) k * OC;
            for (int v = 0; v < V; v++)
                *(v8f *) (dk + v * LANES) += acc [v];
        }
    }
}

static void
s_small_k_dkernel (int P, int K, int OC, const float *cols, const float *dout,
                   float *dkernel)
{
    switch (OC / LANES) {
#define CASE(V) case V: s_small_k_dkernel_v (V, P, K, cols, dout, dkernel); break;
        CASE (1) CASE (2) CASE (3) CASE (4) CASE (5) CASE (6) CASE (7) CASE (8)
#undef CASE
    }
}

// ---------------------------------------------------------------------------
//  The convolution's ways over im2col (za_cpu_conv.c's table says when)

int
za_cpu_small_k_forward (const za_cpu_conv_t *c)
{
    const za_conv2d_dims_t *d = c->d;
    const int K = d->kh * d->kw * d->c;
    if (!s_small_k (K, d->oc))
        return -1;
    s_im2col (d, c->in, c->cols);
    s_small_k_forward (d->n * d->oh * d->ow, K, d->oc, c->cols, c->kernel, c->bias, c->act,
                       c->out);
    return 0;
}

int
za_cpu_im2col_forward (const za_cpu_conv_t *c)
{
    const za_conv2d_dims_t *d = c->d;
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    s_im2col (d, c->in, c->cols);
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, P, d->oc, K,
                 1.0f, c->cols, K, c->kernel, d->oc, 0.0f, c->out, d->oc);
    s_bias_act ((size_t) P, d->oc, c->bias, c->act, c->out);
    return 0;
}

//  The backward's matrix products, dout masked already: dkernel +=, din =
//  (when not NULL). cols holds the forward's im2col matrix unless fill.
static void
s_conv2d_backward_gemm (const za_conv2d_dims_t *d, const float *in, float *cols, int fill,
                        const float *kernel, const float *dout, float *dkernel, float *dcols,
                        float *din)
{
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    if (fill)
        s_im2col (d, in, cols);
    if (s_small_k (K, d->oc))
        s_small_k_dkernel (P, K, d->oc, cols, dout, dkernel);
    else
        cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, K, d->oc, P,
                     1.0f, cols, K, dout, d->oc, 1.0f, dkernel, d->oc);
    if (din) {
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, P, K, d->oc,
                     1.0f, dout, d->oc, kernel, d->oc, 0.0f, dcols, K);
        s_col2im (d, dcols, din);
    }
}

int
za_cpu_im2col_backward (const za_cpu_conv_t *c)
{
    //  With oneDNN on, or the direct loops, the forward may have left no
    //  im2col matrix.
    s_conv2d_backward_gemm (c->d, c->in, c->cols,
                            za_cpu_dnnl_on () || za_cpu_direct_takes (c->d, ZA_PRECISION_FP32),
                            c->kernel, c->dout, c->dkernel, c->dcols, c->din);
    return 0;
}

static void
s_round_in_place (float *x, size_t n, za_precision_t precision)
{
    for (size_t i = 0; i < n; i++)
        x [i] = za_elem_round (x [i], precision);
}

//  The input's gradient in bf16 as one matmul, dcols = dout @ kernel^T, and
//  col2im. 0, or -1 (din untouched) where oneDNN declines.
static int
s_din_matmul (const za_conv2d_dims_t *d, const float *kernel, const float *dout, float *dcols,
              float *din)
{
    if (za_cpu_dnnl_matmul (d->n * d->oh * d->ow, d->oc, d->kh * d->kw * d->c, dout, 0, kernel,
                            1, 0, dcols, ZA_PRECISION_BF16))
        return -1;
    s_col2im (d, dcols, din);
    return 0;
}

//  Output planes of at most this many pixels take the kernel's gradient and
//  the input's in bf16 as matmuls (za_cpu_small_plane_backward).
#define SMALL_PLANE_MAX 16

int
za_cpu_small_plane_backward (const za_cpu_conv_t *c)
{
    //  Elsewhere (AVX512-BF16 alone), on a small plane (3x3 outputs) oneDNN's
    //  bf16 kernels take the kernel's gradient at a third of the peak; as
    //  one matmul over the im2col matrix it runs at twice their rate
    //  (docs/precision.md), and the input's gradient as a matmul and col2im
    //  at about 2.5x. The input's comes first: a failure there leaves
    //  dkernel as it was.
    const za_conv2d_dims_t *d = c->d;
    if (c->precision != ZA_PRECISION_BF16 || d->oh * d->ow > SMALL_PLANE_MAX
        || !za_cpu_dnnl_on () || (c->din && s_din_matmul (d, c->kernel, c->dout, c->dcols,
                                                          c->din)))
        return -1;
    s_im2col_bf16 (d, c->in, (uint16_t *) c->cols);
    if (za_cpu_dnnl_matmul_mixed (d->kh * d->kw * d->c, d->n * d->oh * d->ow, d->oc, NULL,
                                  (const uint16_t *) c->cols, 1, c->dout, NULL, 0, 1,
                                  c->dkernel) == 0)
        return 0;
    if (!c->din)
        return -1;
    //  The input's gradient is done: the kernel's alone, rounded.
    s_round_in_place (c->dout, (size_t) d->n * d->oh * d->ow * d->oc, c->precision);
    s_conv2d_backward_gemm (d, za_cpu_rounded (0, c->in, (size_t) d->n * d->h * d->w * d->c,
                                               c->precision),
                            c->cols, 1, NULL, c->dout, c->dkernel, c->dcols, NULL);
    return 0;
}

int
za_cpu_rounded_im2col_backward (const za_cpu_conv_t *c)
{
    const za_conv2d_dims_t *d = c->d;
    size_t inputs = (size_t) d->n * d->h * d->w * d->c;
    size_t weights = (size_t) d->kh * d->kw * d->c * d->oc;
    s_round_in_place (c->dout, (size_t) d->n * d->oh * d->ow * d->oc, c->precision);
    //  The forward may have gone through oneDNN: im2col again, rounded.
    s_conv2d_backward_gemm (d, za_cpu_rounded (0, c->in, inputs, c->precision), c->cols, 1,
                            za_cpu_rounded (1, c->kernel, weights, c->precision), c->dout,
                            c->dkernel, c->dcols, c->din);
    return 0;
}

// ---------------------------------------------------------------------------
//  Dense

void
za_cpu_dense_forward (int n, int in_dim, int units, const float *in, const float *kernel,
                      const float *bias, za_act_t act, float *out)
{
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, units, in_dim,
                 1.0f, in, in_dim, kernel, units, 0.0f, out, units);
    s_bias_act ((size_t) n, units, bias, act, out);
}

void
za_cpu_dense_backward (int n, int in_dim, int units, const float *in, const float *kernel,
                       const float *out, za_act_t act, float *dout, float *dkernel,
                       float *dbias, float *din)
{
    za_cpu_act_bias_backward ((size_t) n, units, out, act, dout, dbias);
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, units, n,
                 1.0f, in, in_dim, dout, units, 1.0f, dkernel, units);
    if (din)
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, in_dim, units,
                     1.0f, dout, units, kernel, units, 0.0f, din, in_dim);
}

// ---------------------------------------------------------------------------
//  Dense in mixed precision

static void
s_dense_forward_mixed (za_precision_t precision, int n, int in_dim, int units, const float *in,
                       const float *kernel, const float *bias, za_act_t act, float *out)
{
    if (za_cpu_dnnl_matmul (n, in_dim, units, in, 0, kernel, 0, 0, out, precision) == 0) {
        s_bias_act ((size_t) n, units, bias, act, out);
        return;
    }
    za_cpu_dense_forward (n, in_dim, units, za_cpu_rounded (0, in, (size_t) n * in_dim, precision),
                          za_cpu_rounded (1, kernel, (size_t) in_dim * units, precision), bias,
                          act, out);
}

static void
s_dense_backward_mixed (za_precision_t precision, int n, int in_dim, int units,
                        const float *in, const float *kernel, const float *out, za_act_t act,
                        float *dout, float *dkernel, float *dbias, float *din)
{
    za_cpu_act_bias_backward ((size_t) n, units, out, act, dout, dbias);
    //  Each product where oneDNN declines it: from rounded inputs (rounding
    //  dout twice changes nothing).
    if (za_cpu_dnnl_matmul (in_dim, n, units, in, 1, dout, 0, 1, dkernel, precision)) {
        s_round_in_place (dout, (size_t) n * units, precision);
        const float *rin = za_cpu_rounded (0, in, (size_t) n * in_dim, precision);
        cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, units, n,
                     1.0f, rin, in_dim, dout, units, 1.0f, dkernel, units);
    }
    if (din && za_cpu_dnnl_matmul (n, units, in_dim, dout, 0, kernel, 1, 0, din, precision)) {
        s_round_in_place (dout, (size_t) n * units, precision);
        const float *rk = za_cpu_rounded (1, kernel, (size_t) in_dim * units, precision);
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, in_dim, units,
                     1.0f, dout, units, rk, units, 0.0f, din, in_dim);
    }
}

//  The mixed tables' dense entries, one set per precision.
#define S_MIXED(suffix, precision)                                                            \
void                                                                                          \
za_cpu_dense_forward_##suffix (int n, int in_dim, int units, const float *in,                 \
                               const float *kernel, const float *bias, za_act_t act,          \
                               float *out)                                                    \
{                                                                                             \
    s_dense_forward_mixed (precision, n, in_dim, units, in, kernel, bias, act, out);           \
}                                                                                             \
void                                                                                          \
za_cpu_dense_backward_##suffix (int n, int in_dim, int units, const float *in,                \
                                const float *kernel, const float *out, za_act_t act,          \
                                float *dout, float *dkernel, float *dbias, float *din)        \
{                                                                                             \
    s_dense_backward_mixed (precision, n, in_dim, units, in, kernel, out, act, dout, dkernel,  \
                            dbias, din);                                                      \
}

S_MIXED (bf16, ZA_PRECISION_BF16)
S_MIXED (fp16, ZA_PRECISION_FP16)
