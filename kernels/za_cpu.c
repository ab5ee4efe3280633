/*  za_cpu.c: the CPU back end. Convolutions are im2col + OpenBLAS sgemm over
    the whole batch (one GEMM per layer and pass), everything else plain loops.  */
#include "za/za_kernels.h"
#include "za_elem.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
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

int
za_pool2d_dims (za_pool2d_dims_t *d, int n, int h, int w, int c, int pool, int stride)
{
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0 || pool <= 0 || stride <= 0)
        return za_error ("maxpool: bad geometry");
    if (h < pool || w < pool)
        return za_error ("maxpool: window %d does not fit a %dx%d input", pool, h, w);
    d->n = n, d->h = h, d->w = w, d->c = c;
    d->pool = pool, d->stride = stride;
    d->oh = (h - pool) / stride + 1;
    d->ow = (w - pool) / stride + 1;
    //  argmax holds int32 input indexes.
    if ((double) n * h * w * c > INT32_MAX)
        return za_error ("maxpool: a batch of %d at %dx%dx%d is too large (over 2^31 "
                         "values); use smaller batches", n, h, w, c);
    return 0;
}

//  Row (n, oh, ow) of cols is the patch under the kernel, laid out (kh, kw, c)
//  to match the HWIO kernel, so a patch row is copied kw * c floats at a time
//  when it lies inside the image.
static void
s_im2col (const za_conv2d_dims_t *d, const float *in, float *cols)
{
    const int K = d->kh * d->kw * d->c;
    const int run = d->kw * d->c;
    float *row = cols;
    for (int n = 0; n < d->n; n++) {
        const float *image = in + (size_t) n * d->h * d->w * d->c;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++, row += K) {
                int iw0 = ow * d->stride - d->pad_left;
                int ih0 = oh * d->stride - d->pad_top;
                for (int kh = 0; kh < d->kh; kh++) {
                    int ih = ih0 + kh;
                    float *dst = row + kh * run;
                    if (ih < 0 || ih >= d->h) {
                        memset (dst, 0, sizeof (float) * run);
                        continue;
                    }
                    const float *src = image + ((size_t) ih * d->w) * d->c;
                    if (iw0 >= 0 && iw0 + d->kw <= d->w)
                        memcpy (dst, src + (size_t) iw0 * d->c, sizeof (float) * run);
                    else
                        for (int kw = 0; kw < d->kw; kw++) {
                            int iw = iw0 + kw;
                            if (iw < 0 || iw >= d->w)
                                memset (dst + kw * d->c, 0, sizeof (float) * d->c);
                            else
                                memcpy (dst + kw * d->c, src + (size_t) iw * d->c,
                                        sizeof (float) * d->c);
                        }
                }
            }
        }
    }
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
static void
s_act_bias_backward (size_t rows, int units, const float *out, za_act_t act,
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

static void
s_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                  const float *bias, za_act_t act, float *cols, float *out)
{
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    s_im2col (d, in, cols);
    if (s_small_k (K, d->oc)) {
        s_small_k_forward (P, K, d->oc, cols, kernel, bias, act, out);
        return;
    }
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, P, d->oc, K,
                 1.0f, cols, K, kernel, d->oc, 0.0f, out, d->oc);
    s_bias_act ((size_t) P, d->oc, bias, act, out);
}

static void
s_conv2d_backward (const za_conv2d_dims_t *d, const float *cols, const float *kernel,
                   const float *out, za_act_t act, float *dout, float *dkernel,
                   float *dbias, float *dcols, float *din)
{
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    s_act_bias_backward ((size_t) P, d->oc, out, act, dout, dbias);
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

static void
s_dense_forward (int n, int in_dim, int units, const float *in, const float *kernel,
                 const float *bias, za_act_t act, float *out)
{
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, units, in_dim,
                 1.0f, in, in_dim, kernel, units, 0.0f, out, units);
    s_bias_act ((size_t) n, units, bias, act, out);
}

static void
s_dense_backward (int n, int in_dim, int units, const float *in, const float *kernel,
                  const float *out, za_act_t act, float *dout, float *dkernel,
                  float *dbias, float *din)
{
    s_act_bias_backward ((size_t) n, units, out, act, dout, dbias);
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, units, n,
                 1.0f, in, in_dim, dout, units, 1.0f, dkernel, units);
    if (din)
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, in_dim, units,
                     1.0f, dout, units, kernel, units, 0.0f, din, in_dim);
}

//  Branch-free running max over the window, one channel vector at a time, so
//  the compiler vectorises it; argmax remembers the input index that won.
static void
s_maxpool_forward (const za_pool2d_dims_t *d, const float *in, float *out,
                   int32_t *argmax)
{
    const int C = d->c;
    for (int n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++) {
                size_t o = (((size_t) n * d->oh + oh) * d->ow + ow) * C;
                float *restrict best = out + o;
                int32_t *restrict where = argmax + o;
                int32_t first = (int32_t) ((((size_t) n * d->h + oh * d->stride) * d->w
                                            + ow * d->stride) * C);
                const float *restrict v0 = in + first;
                for (int c = 0; c < C; c++) {
                    best [c] = v0 [c];
                    where [c] = first + c;
                }
                for (int ph = 0; ph < d->pool; ph++)
                    for (int pw = 0; pw < d->pool; pw++) {
                        if (ph == 0 && pw == 0)
                            continue;
                        int32_t base = first + (int32_t) (((size_t) ph * d->w + pw) * C);
                        const float *restrict v = in + base;
                        for (int c = 0; c < C; c++) {
                            int gt = v [c] > best [c];
                            best [c] = gt? v [c]: best [c];
                            where [c] = gt? base + c: where [c];
                        }
                    }
            }
}

//  With windows that tile the input (stride == pool) every input element
//  belongs to at most one window: each is written once, no clearing pass.
static void
s_maxpool_backward (const za_pool2d_dims_t *d, const float *dout,
                    const int32_t *argmax, float *din)
{
    const int C = d->c;
    if (d->stride != d->pool) {
        memset (din, 0, sizeof (float) * (size_t) d->n * d->h * d->w * d->c);
        size_t count = (size_t) d->n * d->oh * d->ow * C;
        for (size_t i = 0; i < count; i++)
            din [argmax [i]] += dout [i];
        return;
    }
    const int covered_h = d->oh * d->pool, covered_w = d->ow * d->pool;
    for (int n = 0; n < d->n; n++)
        for (int ih = 0; ih < d->h; ih++) {
            float *restrict row = din + ((size_t) n * d->h + ih) * d->w * C;
            if (ih >= covered_h) {
                memset (row, 0, sizeof (float) * (size_t) d->w * C);
                continue;
            }
            int oh = ih / d->pool;
            for (int iw = 0; iw < d->w; iw++) {
                float *restrict dst = row + (size_t) iw * C;
                if (iw >= covered_w) {
                    memset (dst, 0, sizeof (float) * C);
                    continue;
                }
                size_t o = (((size_t) n * d->oh + oh) * d->ow + iw / d->pool) * C;
                const float *restrict g = dout + o;
                const int32_t *restrict where = argmax + o;
                int32_t self_index = (int32_t) (dst - din);
                for (int c = 0; c < C; c++)
                    dst [c] = where [c] == self_index + c? g [c]: 0.0f;
            }
        }
}

static void
s_relu_forward (size_t count, const float *in, float *out)
{
    for (size_t i = 0; i < count; i++)
        out [i] = in [i] > 0? in [i]: 0;
}

static void
s_relu_backward (size_t count, const float *out, const float *dout, float *din)
{
    for (size_t i = 0; i < count; i++)
        din [i] = out [i] > 0? dout [i]: 0;
}

static void
s_dropout_forward (size_t count, float rate, uint64_t seed, const float *in, float *mask,
                   float *out)
{
    for (size_t i = 0; i < count; i++) {
        mask [i] = za_elem_dropout_mask (seed, i, rate);
        out [i] = in [i] * mask [i];
    }
}

static void
s_dropout_backward (size_t count, const float *mask, const float *dout, float *din)
{
    for (size_t i = 0; i < count; i++)
        din [i] = dout [i] * mask [i];
}

static double
s_softmax_xent (int n, int classes, const float *logits, const int32_t *labels,
                float *dlogits, int *correct, int *invalid)
{
    double loss = 0;
    int right = 0, bad = 0;
    for (int r = 0; r < n; r++) {
        const float *z = logits + (size_t) r * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (z [k] > z [best])
                best = k;
        float zmax = z [best];
        double sum = 0;
        for (int k = 0; k < classes; k++)
            sum += exp ((double) (z [k] - zmax));
        int label = labels [r];
        int valid = label >= 0 && label < classes;
        if (!valid)
            bad++;
        else {
            loss += log (sum) - (double) (z [label] - zmax);
            right += best == label;
        }
        if (dlogits) {
            float *g = dlogits + (size_t) r * classes;
            if (!valid)
                memset (g, 0, sizeof (float) * classes);
            else {
                float inv = (float) (1.0 / sum) / (float) n;
                for (int k = 0; k < classes; k++)
                    g [k] = expf (z [k] - zmax) * inv;
                g [label] -= 1.0f / (float) n;
            }
        }
    }
    if (correct)
        *correct = right;
    if (invalid)
        *invalid = bad;
    return loss;
}

static void *
s_buffer_alloc (size_t bytes)
{
    return za_alloc (bytes);
}

static void
s_set_threads (int threads)
{
    if (threads > 0)
        openblas_set_num_threads (threads);
}

static int
s_bind (int device)
{
    return device == 0? 0: za_error ("cpu: no device %d (the CPU is device 0)", device);
}

static int
s_memcpy (void *dst, const void *src, size_t bytes)
{
    memcpy (dst, src, bytes);
    return 0;
}

static void
s_zero (void *p, size_t bytes)
{
    memset (p, 0, bytes);
}

static void
s_scale_add (size_t n, float alpha, float *y, float beta, const float *x)
{
    if (x)
        for (size_t i = 0; i < n; i++)
            y [i] = alpha * y [i] + beta * x [i];
    else
        for (size_t i = 0; i < n; i++)
            y [i] *= alpha;
}

static int
s_sync (void)
{
    return 0;
}

#define S_CPU_TABLE                                 \
    .conv2d_forward = s_conv2d_forward,             \
    .conv2d_backward = s_conv2d_backward,           \
    .dense_forward = s_dense_forward,               \
    .dense_backward = s_dense_backward,             \
    .maxpool_forward = s_maxpool_forward,           \
    .maxpool_backward = s_maxpool_backward,         \
    .relu_forward = s_relu_forward,                 \
    .relu_backward = s_relu_backward,               \
    .dropout_forward = s_dropout_forward,           \
    .dropout_backward = s_dropout_backward,         \
    .softmax_xent = s_softmax_xent,                 \
    .buffer_alloc = s_buffer_alloc,                 \
    .buffer_free = za_free,                         \
    .set_threads = s_set_threads,                   \
    .device_count = 1,                              \
    .bind = s_bind,                                 \
    .host_alloc = s_buffer_alloc,                   \
    .host_free = za_free,                           \
    .upload = s_memcpy,                             \
    .download = s_memcpy,                           \
    .copy = s_memcpy,                               \
    .zero = s_zero,                                 \
    .scale_add = s_scale_add,                       \
    .optim_apply = za_optim_apply,                  \
    .sync = s_sync

static const za_backend_t s_cpu = {
    .name = "cpu (OpenBLAS)",
    .host_memory = 1,
    S_CPU_TABLE
};

static const za_backend_t s_cpu_staged = {
    .name = "cpu-staged (OpenBLAS behind device copies)",
    .host_memory = 0,
    S_CPU_TABLE
};

const za_backend_t *
za_backend_cpu (void)
{
    return &s_cpu;
}

const za_backend_t *
za_backend_cpu_staged (void)
{
    return &s_cpu_staged;
}
