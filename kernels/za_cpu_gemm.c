/*  za_cpu_gemm.c: the CPU's layers that are matrix products: conv2d (im2col
    and one OpenBLAS sgemm over the whole batch, or direct loops for short
    patches) and dense, with the bias and activation folded in; and the same
    in mixed precision: bf16 through oneDNN where the CPU has it, else (and
    for float16, which CPUs here do not multiply) the inputs rounded to the
    precision and multiplied in fp32, the same numbers up to the order of
    the sums.                                                               */
#include "za_cpu_gemm.h"
#include "za_cpu_amx.h"
#include "za_cpu_dnnl.h"
#include "za_elem.h"
#include "za/za_model.h"
#include "za/za_tensor.h"

#include <cblas.h>
#include <immintrin.h>
#include <pthread.h>
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

// ---------------------------------------------------------------------------
//  A thread's buffers

//  A thread's buffers for rounded copies of a layer's input and kernel,
//  and for the direct loops' plane and its pairs.
typedef struct {
    float *buffer [4];
    size_t floats [4];
} s_rounding_t;

static pthread_key_t s_rounding_key;
static pthread_once_t s_rounding_once = PTHREAD_ONCE_INIT;

static void
s_rounding_free (void *arg)
{
    s_rounding_t *self = (s_rounding_t *) arg;
    for (int slot = 0; slot < 4; slot++)
        free (self->buffer [slot]);
    free (self);
}

static void
s_rounding_key_new (void)
{
    pthread_key_create (&s_rounding_key, s_rounding_free);
}

//  This thread's buffer `slot` (0 to 3), of n floats at least, or NULL.
static float *
s_buffer (int slot, size_t n)
{
    pthread_once (&s_rounding_once, s_rounding_key_new);
    s_rounding_t *self = (s_rounding_t *) pthread_getspecific (s_rounding_key);
    if (!self) {
        if (!(self = (s_rounding_t *) calloc (1, sizeof *self)))
            return NULL;
        pthread_setspecific (s_rounding_key, self);
    }
    if (n > self->floats [slot]) {
        float *grown = (float *) malloc (n * sizeof (float));
        if (!grown)
            return NULL;
        free (self->buffer [slot]);
        self->buffer [slot] = grown;
        self->floats [slot] = n;
    }
    return self->buffer [slot];
}

//  x rounded to the precision, in this thread's buffer `slot` (0 or 1);
//  x itself where no memory is left for the copy (then fp32 it is).
static const float *
s_rounded (int slot, const float *x, size_t n, za_precision_t precision)
{
    float *y = s_buffer (slot, n);
    if (!y)
        return x;
    for (size_t i = 0; i < n; i++)
        y [i] = za_elem_round (x [i], precision);
    return y;
}

// ---------------------------------------------------------------------------
//  A 3x3 convolution of one channel on AVX-512: one pass each way

//  A first layer on grayscale images (3x3 on one channel, up to 64 filters)
//  gives oneDNN's kernels nine products per output: they run the seed
//  CNN's first layer at a quarter of the rate they reach on its second. On
//  an AVX-512 CPU these loops read the input in place (zero-padded first
//  where the padding asks), 16 output channels to a register, 32 at a time
//  with their nine kernel rows (or gradient sums) held in registers. The
//  forward writes each output once (bias and ReLU in registers, two pixels
//  at a time). The backward, where no input gradient is wanted (a first
//  layer), masks the output's gradient, sums the bias's, rounds it (bf16)
//  and sums the kernel's gradient in the same pass: none of the masked copy
//  and bf16 copy of the gradient that the oneDNN path writes. In bf16 the
//  input and the kernel are rounded first, the gradient in registers: the
//  products oneDNN's bf16 kernels form, summed in fp32; where the CPU has
//  AVX512-BF16, two at a time (below, "pairs"; backward at a stride of 1).
#define DIRECT_LANES 16
#define DIRECT_OC_MAX 64
#define DIRECT_TAPS 9
#define DIRECT_CHUNK 2                  //  vectors of channels a pass keeps in registers
#define S_AVX512 __attribute__ ((target ("avx512f")))
//  Calls fn (V, c0, ...) over d's output channels, DIRECT_CHUNK registers of
//  them at a time (V a constant in each call: the sums stay in registers).
#define S_BY_CHUNKS(d, fn, ...)                                                \
    for (int c0 = 0; c0 < (d)->oc; c0 += DIRECT_CHUNK * DIRECT_LANES)          \
        if ((d)->oc - c0 >= DIRECT_CHUNK * DIRECT_LANES)                       \
            fn (2, c0, __VA_ARGS__);                                           \
        else                                                                   \
            fn (1, c0, __VA_ARGS__)

typedef float v16f __attribute__ ((vector_size (64), aligned (4)));
typedef unsigned v16u __attribute__ ((vector_size (64), aligned (4)));

static int
s_direct (const za_conv2d_dims_t *d, za_precision_t precision)
{
    return (precision == ZA_PRECISION_FP32 || precision == ZA_PRECISION_BF16)
        && d->kh == 3 && d->kw == 3 && d->c == 1 && d->oc % DIRECT_LANES == 0
        && d->oc <= DIRECT_OC_MAX && za_cpu_has (ZA_ISA_AVX512);
}

//  The input as the loops read it: n images of h x w (one channel) in
//  which every tap of every output lies.
typedef struct {
    const float *x;
    int h, w;
} s_plane_t;

//  x rounded to bf16 lane by lane, as za_elem_round (a NaN stays a NaN).
static inline S_AVX512 v16f
s_round_bf16 (v16f x)
{
    const v16u u = (v16u) x;
    const v16u rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const v16u quiet = (u & 0xffff0000u) | 0x00400000u;
    const v16u nan = (v16u) ((u & 0x7fffffffu) > 0x7f800000u);
    return (v16f) ((rounded & ~nan) | (quiet & nan));
}

//  n floats rounded to bf16 (as za_elem_round), 16 at a time.
static S_AVX512 void
s_round_bf16_into (const float *from, float *to, size_t n)
{
    size_t i = 0;
    for (; i + DIRECT_LANES <= n; i += DIRECT_LANES)
        *(v16f *) (to + i) = s_round_bf16 (*(const v16f *) (from + i));
    for (; i < n; i++)
        to [i] = za_elem_round (from [i], ZA_PRECISION_BF16);
}

//  The input as the direct loops read it: `in` itself where every tap lies
//  inside it and nothing is rounded; else a copy in this thread's buffer 2
//  of the rows and columns the taps reach, zero where the padding is,
//  rounded to the precision. 0, or -1 when no memory is left for the copy
//  (then the caller goes the other way, forward and backward alike).
static int
s_direct_plane (s_plane_t *plane, const za_conv2d_dims_t *d, const float *in,
                za_precision_t precision)
{
    const int h = (d->oh - 1) * d->stride + d->kh, w = (d->ow - 1) * d->stride + d->kw;
    const int inside = d->pad_top == 0 && d->pad_left == 0 && h <= d->h && w <= d->w;
    plane->h = inside? d->h: h;
    plane->w = inside? d->w: w;
    if (inside && precision == ZA_PRECISION_FP32) {
        plane->x = in;
        return 0;
    }
    float *x = s_buffer (2, (size_t) d->n * plane->h * plane->w);
    if (!x)
        return -1;
    plane->x = x;
    if (inside && precision == ZA_PRECISION_BF16) {
        s_round_bf16_into (in, x, (size_t) d->n * d->h * d->w);
        return 0;
    }
    for (int n = 0; n < d->n; n++)
        for (int r = 0; r < plane->h; r++) {
            const int ih = r - d->pad_top;
            const int inside_row = ih < 0? 0: ih < d->h? ih: d->h - 1;
            const float *from = in + ((size_t) n * d->h + inside_row) * d->w;
            for (int col = 0; col < plane->w; col++) {
                const int iw = col - d->pad_left;
                *x++ = ih >= 0 && ih < d->h && iw >= 0 && iw < d->w
                     ? za_elem_round (from [iw], precision): 0.0f;
            }
        }
    return 0;
}

//  Where output pixel (n, oh, ow)'s taps start.
static inline const float *
s_plane_pixel (const s_plane_t *plane, const za_conv2d_dims_t *d, int n, int oh, int ow)
{
    return plane->x + ((size_t) n * plane->h + (size_t) oh * d->stride) * plane->w
                    + (size_t) ow * d->stride;
}

//  Output (n, oh, ow)'s channel c0 in the NHWC output (or its gradient).
static inline size_t
s_out_at (const za_conv2d_dims_t *d, int n, int oh, int ow, int c0)
{
    return (((size_t) n * d->oh + oh) * d->ow + ow) * d->oc + c0;
}

//  Channels [c0, c0 + V * 16) of nine rows of OC ([9][OC]: a kernel or its
//  gradient) and of one ([OC]: a bias or its gradient), into registers.
static inline __attribute__ ((always_inline)) S_AVX512 void
s_direct_load (const int V, int c0, int OC, const float *rows, const float *one,
               v16f to_rows [DIRECT_TAPS][DIRECT_CHUNK], v16f to_one [DIRECT_CHUNK])
{
    for (int v = 0; v < V; v++) {
        to_one [v] = *(const v16f *) (one + c0 + v * DIRECT_LANES);
        for (int t = 0; t < DIRECT_TAPS; t++)
            to_rows [t][v] = *(const v16f *) (rows + (size_t) t * OC + c0 + v * DIRECT_LANES);
    }
}

//  The gradients' registers back: the inverse of s_direct_load.
static inline __attribute__ ((always_inline)) S_AVX512 void
s_direct_store (const int V, int c0, int OC, v16f rows [DIRECT_TAPS][DIRECT_CHUNK],
                const v16f one [DIRECT_CHUNK], float *to_rows, float *to_one)
{
    for (int v = 0; v < V; v++) {
        *(v16f *) (to_one + c0 + v * DIRECT_LANES) = one [v];
        for (int t = 0; t < DIRECT_TAPS; t++)
            *(v16f *) (to_rows + (size_t) t * OC + c0 + v * DIRECT_LANES) = rows [t][v];
    }
}

//  An output's gradient g (V registers at dout), masked by the ReLU where
//  out (there) is not above 0, summed into the bias's (b), then rounded
//  in bf16 for the products.
static inline __attribute__ ((always_inline)) S_AVX512 void
s_direct_gradient (const int V, const float *restrict dout, const float *restrict out,
                   za_act_t act, int bf16, v16f b [DIRECT_CHUNK], v16f g [DIRECT_CHUNK])
{
    const v16f zero = {0};
    for (int v = 0; v < V; v++) {
        g [v] = *(const v16f *) (dout + v * DIRECT_LANES);
        if (act == ZA_ACT_RELU)
            g [v] = (v16f) ((v16u) g [v]
                            & (v16u) (*(const v16f *) (out + v * DIRECT_LANES) > zero));
        b [v] += g [v];
        if (bf16)
            g [v] = s_round_bf16 (g [v]);
    }
}

//  The kernel's gradient rows += each tap of the pixel at x times g.
static inline __attribute__ ((always_inline)) S_AVX512 void
s_direct_taps (const int V, const float *restrict x, int row, const v16f g [DIRECT_CHUNK],
               v16f acc [DIRECT_TAPS][DIRECT_CHUNK])
{
    for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) {
            const float t = x [kh * row + kw];
            for (int v = 0; v < V; v++)
                acc [kh * 3 + kw][v] += t * g [v];
        }
}

//  Output channels [c0, c0 + V * 16) of every pixel.
static inline __attribute__ ((always_inline)) S_AVX512 void
s_direct_forward_v (const int V, int c0, const za_conv2d_dims_t *d, const s_plane_t *plane,
                    const float *restrict kernel, const float *restrict bias, za_act_t act,
                    float *restrict out)
{
    const int OC = d->oc, row = plane->w;
    const v16f zero = {0};
    v16f w [DIRECT_TAPS][DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_direct_load (V, c0, OC, kernel, bias, w, b);
    for (int n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow += 2) {
                //  An odd row's last pixel is its own pair (computed and stored twice).
                const int ow1 = ow + 1 < d->ow? ow + 1: ow;
                const float *restrict x0 = s_plane_pixel (plane, d, n, oh, ow);
                const float *restrict x1 = s_plane_pixel (plane, d, n, oh, ow1);
                v16f a0 [DIRECT_CHUNK], a1 [DIRECT_CHUNK];
                for (int v = 0; v < V; v++)
                    a0 [v] = a1 [v] = b [v];
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++) {
                        const float t0 = x0 [kh * row + kw], t1 = x1 [kh * row + kw];
                        for (int v = 0; v < V; v++) {
                            a0 [v] += t0 * w [kh * 3 + kw][v];
                            a1 [v] += t1 * w [kh * 3 + kw][v];
                        }
                    }
                float *restrict o = out + s_out_at (d, n, oh, ow, c0);
                for (int v = 0; v < V; v++) {
                    if (act == ZA_ACT_RELU) {
                        a0 [v] = (v16f) ((v16u) a0 [v] & (v16u) (a0 [v] > zero));
                        a1 [v] = (v16f) ((v16u) a1 [v] & (v16u) (a1 [v] > zero));
                    }
                    *(v16f *) (o + v * DIRECT_LANES) = a0 [v];
                    *(v16f *) (o + (size_t) (ow1 - ow) * OC + v * DIRECT_LANES) = a1 [v];
                }
            }
}

static S_AVX512 void
s_direct_forward (const za_conv2d_dims_t *d, const s_plane_t *plane, const float *kernel,
                  const float *bias, za_act_t act, float *out)
{
    S_BY_CHUNKS (d, s_direct_forward_v, d, plane, kernel, bias, act, out);
}

//  The gradients of output channels [c0, c0 + V * 16).
static inline __attribute__ ((always_inline)) S_AVX512 void
s_direct_backward_v (const int V, int c0, const za_conv2d_dims_t *d, const s_plane_t *plane,
                     const float *restrict out, za_act_t act, const float *restrict dout,
                     int bf16, float *restrict dkernel, float *restrict dbias)
{
    const int OC = d->oc, row = plane->w;
    v16f acc [DIRECT_TAPS][DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_direct_load (V, c0, OC, dkernel, dbias, acc, b);
    for (int n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++) {
                const size_t at = s_out_at (d, n, oh, ow, c0);
                v16f g [DIRECT_CHUNK];
                s_direct_gradient (V, dout + at, out + at, act, bf16, b, g);
                s_direct_taps (V, s_plane_pixel (plane, d, n, oh, ow), row, g, acc);
            }
    s_direct_store (V, c0, OC, acc, b, dkernel, dbias);
}

//  dkernel +=, dbias +=; dout is read, not masked in place.
static S_AVX512 void
s_direct_backward (const za_conv2d_dims_t *d, const s_plane_t *plane, const float *out,
                   za_act_t act, const float *dout, int bf16, float *dkernel, float *dbias)
{
    S_BY_CHUNKS (d, s_direct_backward_v, d, plane, out, act, dout, bf16, dkernel, dbias);
}

//  The first layer and the 2x2 max-pool after it, as one: the convolution's
//  output (the largest tensor of the seed CNN) is neither written nor read
//  again. Forward: the four outputs under each window in registers, the
//  pool's max and argmax from them (maxpool_forward's choice: the first
//  of equals). Backward: from the pool's output gradient, each window's
//  four positions take it where argmax says (masked by the ReLU where the
//  max was not above 0), into the kernel's and the bias's gradients.
typedef int v16i __attribute__ ((vector_size (64), aligned (4)));

static int
s_conv_pool (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p, za_precision_t precision)
{
    return s_direct (d, precision) && p->pool == 2 && p->stride == 2 && p->n == d->n
        && p->h == d->oh && p->w == d->ow && p->c == d->oc;
}

//  Lane indexes 0 to 15.
static inline S_AVX512 v16i
s_lanes (void)
{
    return (v16i) {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
}

//  Pooled output (n, ph, pw)'s channel c0 (its max, argmax, gradient).
static inline size_t
s_pool_at (const za_pool2d_dims_t *p, int n, int ph, int pw, int c0)
{
    return (((size_t) n * p->oh + ph) * p->ow + pw) * p->c + c0;
}

//  Window (n, ph, pw)'s gradient g (s_direct_gradient: masked where the
//  pool's output, the max, is not above 0, summed into b, rounded in bf16)
//  and each lane's argmax.
static inline __attribute__ ((always_inline)) S_AVX512 void
s_window_gradient (const int V, int c0, const za_pool2d_dims_t *p, int n, int ph, int pw,
                   const float *restrict pool_out, const int32_t *restrict argmax,
                   za_act_t act, const float *restrict pool_dout, int bf16,
                   v16f b [DIRECT_CHUNK], v16f g [DIRECT_CHUNK], v16i where [DIRECT_CHUNK])
{
    const size_t o = s_pool_at (p, n, ph, pw, c0);
    s_direct_gradient (V, pool_dout + o, pool_out + o, act, bf16, b, g);
    for (int v = 0; v < V; v++)
        where [v] = *(const v16i *) (argmax + o + v * DIRECT_LANES);
}

//  Window (n, ph, pw)'s four outputs (a: their sums before the ReLU) to
//  the pool's max and argmax, in the pool's order (the first of equals).
static inline __attribute__ ((always_inline)) S_AVX512 void
s_window_pool (const int V, int c0, const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
               int n, int ph, int pw, za_act_t act, v16f a [4][DIRECT_CHUNK],
               float *restrict pool_out, int32_t *restrict argmax)
{
    const v16f zero = {0};
    const v16i lanes = s_lanes ();
    v16f best [DIRECT_CHUNK];
    v16i at [DIRECT_CHUNK];
    for (int q = 0; q < 4; q++) {
        const int oh = 2 * ph + (q >> 1), ow = 2 * pw + (q & 1);
        const int32_t first = (int32_t) s_out_at (d, n, oh, ow, c0);
        for (int v = 0; v < V; v++) {
            v16f y = a [q][v];
            if (act == ZA_ACT_RELU)
                y = (v16f) ((v16u) y & (v16u) (y > zero));
            const v16i here = lanes + (first + v * DIRECT_LANES);
            if (q == 0) {
                best [v] = y;
                at [v] = here;
                continue;
            }
            const v16i above = (v16i) (y > best [v]);
            best [v] = (v16f) (((v16i) y & above) | ((v16i) best [v] & ~above));
            at [v] = (here & above) | (at [v] & ~above);
        }
    }
    const size_t o = s_pool_at (p, n, ph, pw, c0);
    for (int v = 0; v < V; v++) {
        *(v16f *) (pool_out + o + v * DIRECT_LANES) = best [v];
        *(v16i *) (argmax + o + v * DIRECT_LANES) = at [v];
    }
}

static inline __attribute__ ((always_inline)) S_AVX512 void
s_conv_pool_forward_v (const int V, int c0, const za_conv2d_dims_t *d,
                       const za_pool2d_dims_t *p, const s_plane_t *plane,
                       const float *restrict kernel, const float *restrict bias, za_act_t act,
                       float *restrict pool_out, int32_t *restrict argmax)
{
    const int OC = d->oc, row = plane->w;
    //  From a window's first output's taps to its other three's.
    const int right = d->stride, down = d->stride * row;
    v16f w [DIRECT_TAPS][DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_direct_load (V, c0, OC, kernel, bias, w, b);
    for (int n = 0; n < p->n; n++)
        for (int ph = 0; ph < p->oh; ph++)
            for (int pw = 0; pw < p->ow; pw++) {
                //  The window's four outputs side by side (eight independent
                //  sums), then the max in the pool's order.
                const float *restrict x = s_plane_pixel (plane, d, n, 2 * ph, 2 * pw);
                v16f a [4][DIRECT_CHUNK];
                for (int q = 0; q < 4; q++)
                    for (int v = 0; v < V; v++)
                        a [q][v] = b [v];
                for (int kh = 0; kh < 3; kh++) {
                    const float *restrict top = x + kh * row, *restrict bottom = top + down;
                    for (int kw = 0; kw < 3; kw++) {
                        const float t [4] = {top [kw], top [kw + right], bottom [kw],
                                             bottom [kw + right]};
                        for (int q = 0; q < 4; q++)
                            for (int v = 0; v < V; v++)
                                a [q][v] += t [q] * w [kh * 3 + kw][v];
                    }
                }
                s_window_pool (V, c0, d, p, n, ph, pw, act, a, pool_out, argmax);
            }
}

static inline __attribute__ ((always_inline)) S_AVX512 void
s_conv_pool_backward_v (const int V, int c0, const za_conv2d_dims_t *d,
                        const za_pool2d_dims_t *p, const s_plane_t *plane,
                        const float *restrict pool_out, const int32_t *restrict argmax,
                        za_act_t act, const float *restrict pool_dout, int bf16,
                        float *restrict dkernel, float *restrict dbias)
{
    const int OC = d->oc, row = plane->w;
    const v16i lanes = s_lanes ();
    v16f acc [DIRECT_TAPS][DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_direct_load (V, c0, OC, dkernel, dbias, acc, b);
    for (int n = 0; n < p->n; n++)
        for (int ph = 0; ph < p->oh; ph++)
            for (int pw = 0; pw < p->ow; pw++) {
                v16f g [DIRECT_CHUNK];
                v16i where [DIRECT_CHUNK];
                s_window_gradient (V, c0, p, n, ph, pw, pool_out, argmax, act, pool_dout, bf16,
                                   b, g, where);
                for (int q = 0; q < 4; q++) {
                    const int oh = 2 * ph + (q >> 1), ow = 2 * pw + (q & 1);
                    const float *restrict x = s_plane_pixel (plane, d, n, oh, ow);
                    const int32_t first = (int32_t) s_out_at (d, n, oh, ow, c0);
                    v16f gq [DIRECT_CHUNK];
                    for (int v = 0; v < V; v++)
                        gq [v] = (v16f) ((v16i) g [v]
                                         & (where [v] == lanes + (first + v * DIRECT_LANES)));
                    s_direct_taps (V, x, row, gq, acc);
                }
            }
    s_direct_store (V, c0, OC, acc, b, dkernel, dbias);
}

//  In bf16 on a CPU with AVX512-BF16, the backward as bf16 dot products
//  (vdpbf16ps: two products a lane, where the loop above makes one FMA
//  each): the window's outputs go by pairs, side by side in a row, and so
//  do their taps, which for a stride of 1 are neighbours in the plane's
//  row. pairs [i] holds plane values i and i + 1 as two bf16 (the plane is
//  rounded already: the top halves of its floats). Each lane's gradient is
//  nonzero at one output of four (argmax's), as above; the products are
//  the same, summed two at a time.
#define S_AVX512_BF16 __attribute__ ((target ("avx512f,avx512bf16")))

//  Whether the loops go by pairs: in bf16 where the CPU has AVX512-BF16;
//  backward (two neighbouring outputs' taps side by side) at a stride of 1
//  alone, forward (one output's own taps) at any.
static int
s_conv_pool_pairs (const za_conv2d_dims_t *d, za_precision_t precision, int backward)
{
    return precision == ZA_PRECISION_BF16 && (d->stride == 1 || !backward)
        && za_cpu_has (ZA_ISA_AVX512_BF16);
}

//  The plane's neighbours as bf16 pairs, into this thread's buffer 3, or
//  NULL: pairs [i] holds values i and i + 1 (in a row), and with `below`,
//  pairs [count + i] values i and i + row (in a column).
static const uint32_t *
s_plane_pairs (const s_plane_t *plane, int n, int below)
{
    const size_t count = (size_t) n * plane->h * plane->w, row = (size_t) plane->w;
    uint32_t *pairs = (uint32_t *) s_buffer (3, below? 2 * count: count);
    if (!pairs)
        return NULL;
    const uint32_t *x = (const uint32_t *) plane->x;
    for (size_t i = 0; i + 1 < count; i++)
        pairs [i] = (x [i] >> 16) | (x [i + 1] & 0xffff0000u);
    pairs [count - 1] = x [count - 1] >> 16;
    if (below) {
        for (size_t i = 0; i + row < count; i++)
            pairs [count + i] = (x [i] >> 16) | (x [i + row] & 0xffff0000u);
        for (size_t i = count > row? count - row: 0; i < count; i++)
            pairs [count + i] = x [i] >> 16;
    }
    return pairs;
}

//  The kernel's taps as the pairs the forward takes (channels [c0, c0 +
//  V * 16)): each row's first two taps, then the third column's first two;
//  the last tap alone; and the bias.
static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_kernel_pairs (const int V, int c0, int OC, const float *kernel, const float *bias,
                v16u wp [4][DIRECT_CHUNK], v16f last [DIRECT_CHUNK], v16f b [DIRECT_CHUNK])
{
    static const int tap [4][2] = {{0, 1}, {3, 4}, {6, 7}, {2, 5}};
    for (int v = 0; v < V; v++) {
        const size_t c = (size_t) c0 + v * DIRECT_LANES;
        for (int k = 0; k < 4; k++) {
            const v16u first = *(const v16u *) (kernel + (size_t) tap [k][0] * OC + c);
            const v16u second = *(const v16u *) (kernel + (size_t) tap [k][1] * OC + c);
            wp [k][v] = (first >> 16) | (second & 0xffff0000u);
        }
        last [v] = *(const v16f *) (kernel + (size_t) 8 * OC + c);
        b [v] = *(const v16f *) (bias + c);
    }
}

//  One output's sums (a, holding the bias) += its nine taps times the
//  kernel, in bf16 pairs: four dot products and one FMA where the fp32
//  loop makes nine FMAs. at: the output's first tap's index in the plane.
static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_output_pairs (const int V, const uint32_t *restrict pairs, size_t count, size_t at,
                const float *restrict x, int row, const v16u wp [4][DIRECT_CHUNK],
                const v16f last [DIRECT_CHUNK], v16f a [DIRECT_CHUNK])
{
    for (int kh = 0; kh < 3; kh++) {
        const __m512bh t = (__m512bh) _mm512_set1_epi32 ((int) pairs [at + (size_t) kh * row]);
        for (int v = 0; v < V; v++)
            a [v] = (v16f) _mm512_dpbf16_ps ((__m512) a [v], (__m512bh) wp [kh][v], t);
    }
    const __m512bh t = (__m512bh) _mm512_set1_epi32 ((int) pairs [count + at + 2]);
    const float alone = x [at + (size_t) 2 * row + 2];
    for (int v = 0; v < V; v++) {
        a [v] = (v16f) _mm512_dpbf16_ps ((__m512) a [v], (__m512bh) wp [3][v], t);
        a [v] += alone * last [v];
    }
}

//  The kernel's gradient rows += each tap pair at x (two neighbouring
//  outputs' taps) times the pair of their gradients: s_direct_taps for two
//  outputs, a dot product each.
static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_taps_pairs (const int V, const uint32_t *restrict x, int row, const v16u pair [DIRECT_CHUNK],
              v16f acc [DIRECT_TAPS][DIRECT_CHUNK])
{
    for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) {
            const __m512bh taps = (__m512bh) _mm512_set1_epi32 ((int) x [kh * row + kw]);
            for (int v = 0; v < V; v++)
                acc [kh * 3 + kw][v] = (v16f) _mm512_dpbf16_ps (
                    (__m512) acc [kh * 3 + kw][v], (__m512bh) pair [v], taps);
        }
}

//  The pool's forward in bf16 pairs: each window output's sums by
//  s_output_pairs, then as s_conv_pool_forward_v.
static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_conv_pool_forward_pairs_v (const int V, int c0, const za_conv2d_dims_t *d,
                             const za_pool2d_dims_t *p, const s_plane_t *plane,
                             const uint32_t *restrict pairs, const float *restrict kernel,
                             const float *restrict bias, za_act_t act,
                             float *restrict pool_out, int32_t *restrict argmax)
{
    const int OC = d->oc, row = plane->w;
    const size_t count = (size_t) d->n * plane->h * plane->w;
    v16u wp [4][DIRECT_CHUNK];
    v16f last [DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_kernel_pairs (V, c0, OC, kernel, bias, wp, last, b);
    for (int n = 0; n < p->n; n++)
        for (int ph = 0; ph < p->oh; ph++)
            for (int pw = 0; pw < p->ow; pw++) {
                v16f a [4][DIRECT_CHUNK];
                for (int q = 0; q < 4; q++) {
                    const size_t at = (size_t) (s_plane_pixel (plane, d, n, 2 * ph + (q >> 1),
                                                               2 * pw + (q & 1)) - plane->x);
                    for (int v = 0; v < V; v++)
                        a [q][v] = b [v];
                    s_output_pairs (V, pairs, count, at, plane->x, row, wp, last, a [q]);
                }
                s_window_pool (V, c0, d, p, n, ph, pw, act, a, pool_out, argmax);
            }
}

static S_AVX512_BF16 void
s_conv_pool_forward_pairs (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
                           const s_plane_t *plane, const uint32_t *pairs, const float *kernel,
                           const float *bias, za_act_t act, float *pool_out, int32_t *argmax)
{
    S_BY_CHUNKS (d, s_conv_pool_forward_pairs_v, d, p, plane, pairs, kernel, bias, act,
                 pool_out, argmax);
}

//  The convolution alone in bf16 pairs (its outputs' sums as the pool's
//  forward makes them, to the bit).
static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_direct_forward_pairs_v (const int V, int c0, const za_conv2d_dims_t *d,
                          const s_plane_t *plane, const uint32_t *restrict pairs,
                          const float *restrict kernel, const float *restrict bias,
                          za_act_t act, float *restrict out)
{
    const int OC = d->oc, row = plane->w;
    const size_t count = (size_t) d->n * plane->h * plane->w;
    const v16f zero = {0};
    v16u wp [4][DIRECT_CHUNK];
    v16f last [DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_kernel_pairs (V, c0, OC, kernel, bias, wp, last, b);
    for (int n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++) {
                const size_t at = (size_t) (s_plane_pixel (plane, d, n, oh, ow) - plane->x);
                v16f a [DIRECT_CHUNK];
                for (int v = 0; v < V; v++)
                    a [v] = b [v];
                s_output_pairs (V, pairs, count, at, plane->x, row, wp, last, a);
                float *restrict o = out + s_out_at (d, n, oh, ow, c0);
                for (int v = 0; v < V; v++) {
                    if (act == ZA_ACT_RELU)
                        a [v] = (v16f) ((v16u) a [v] & (v16u) (a [v] > zero));
                    *(v16f *) (o + v * DIRECT_LANES) = a [v];
                }
            }
}

static S_AVX512_BF16 void
s_direct_forward_pairs (const za_conv2d_dims_t *d, const s_plane_t *plane,
                        const uint32_t *pairs, const float *kernel, const float *bias,
                        za_act_t act, float *out)
{
    S_BY_CHUNKS (d, s_direct_forward_pairs_v, d, plane, pairs, kernel, bias, act, out);
}

static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_conv_pool_backward_pairs_v (const int V, int c0, const za_conv2d_dims_t *d,
                              const za_pool2d_dims_t *p, const s_plane_t *plane,
                              const uint32_t *restrict pairs, const float *restrict pool_out,
                              const int32_t *restrict argmax, za_act_t act,
                              const float *restrict pool_dout, float *restrict dkernel,
                              float *restrict dbias)
{
    const int OC = d->oc, row = plane->w;
    const v16i lanes = s_lanes ();
    v16f acc [DIRECT_TAPS][DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_direct_load (V, c0, OC, dkernel, dbias, acc, b);
    for (int n = 0; n < p->n; n++)
        for (int ph = 0; ph < p->oh; ph++)
            for (int pw = 0; pw < p->ow; pw++) {
                v16f g [DIRECT_CHUNK];
                v16i where [DIRECT_CHUNK];
                s_window_gradient (V, c0, p, n, ph, pw, pool_out, argmax, act, pool_dout, 1,
                                   b, g, where);
                //  Row 2 ph's two outputs, then row 2 ph + 1's.
                for (int half = 0; half < 2; half++) {
                    const int oh = 2 * ph + half, ow = 2 * pw;
                    const int32_t first = (int32_t) s_out_at (d, n, oh, ow, c0);
                    v16u pair [DIRECT_CHUNK];
                    for (int v = 0; v < V; v++) {
                        const v16i at = lanes + (first + v * DIRECT_LANES);
                        const v16u left = (v16u) g [v] & (v16u) (where [v] == at);
                        const v16u right = (v16u) g [v] & (v16u) (where [v] == at + OC);
                        pair [v] = (left >> 16) | right;
                    }
                    s_taps_pairs (V, pairs + (s_plane_pixel (plane, d, n, oh, ow) - plane->x),
                                  row, pair, acc);
                }
            }
    s_direct_store (V, c0, OC, acc, b, dkernel, dbias);
}

//  The convolution's backward alone in bf16 pairs: two neighbouring
//  outputs of a row a dot product (an odd row's last by the FMA loop's step).
static inline __attribute__ ((always_inline)) S_AVX512_BF16 void
s_direct_backward_pairs_v (const int V, int c0, const za_conv2d_dims_t *d,
                           const s_plane_t *plane, const uint32_t *restrict pairs,
                           const float *restrict out, za_act_t act,
                           const float *restrict dout, float *restrict dkernel,
                           float *restrict dbias)
{
    const int OC = d->oc, row = plane->w;
    v16f acc [DIRECT_TAPS][DIRECT_CHUNK], b [DIRECT_CHUNK];
    s_direct_load (V, c0, OC, dkernel, dbias, acc, b);
    for (int n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow += 2) {
                const size_t at = s_out_at (d, n, oh, ow, c0);
                v16f g [DIRECT_CHUNK], g1 [DIRECT_CHUNK];
                s_direct_gradient (V, dout + at, out + at, act, 1, b, g);
                if (ow + 1 == d->ow) {
                    s_direct_taps (V, s_plane_pixel (plane, d, n, oh, ow), row, g, acc);
                    continue;
                }
                s_direct_gradient (V, dout + at + OC, out + at + OC, act, 1, b, g1);
                v16u pair [DIRECT_CHUNK];
                for (int v = 0; v < V; v++)
                    pair [v] = ((v16u) g [v] >> 16) | (v16u) g1 [v];
                s_taps_pairs (V, pairs + (s_plane_pixel (plane, d, n, oh, ow) - plane->x), row,
                              pair, acc);
            }
    s_direct_store (V, c0, OC, acc, b, dkernel, dbias);
}

static S_AVX512_BF16 void
s_direct_backward_pairs (const za_conv2d_dims_t *d, const s_plane_t *plane,
                         const uint32_t *pairs, const float *out, za_act_t act,
                         const float *dout, float *dkernel, float *dbias)
{
    S_BY_CHUNKS (d, s_direct_backward_pairs_v, d, plane, pairs, out, act, dout, dkernel, dbias);
}

static S_AVX512_BF16 void
s_conv_pool_backward_pairs (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
                            const s_plane_t *plane, const uint32_t *pairs,
                            const float *pool_out, const int32_t *argmax, za_act_t act,
                            const float *pool_dout, float *dkernel, float *dbias)
{
    S_BY_CHUNKS (d, s_conv_pool_backward_pairs_v, d, p, plane, pairs, pool_out, argmax, act,
                 pool_dout, dkernel, dbias);
}

static S_AVX512 void
s_conv_pool_forward (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
                     const s_plane_t *plane, const float *kernel, const float *bias,
                     za_act_t act, float *pool_out, int32_t *argmax)
{
    S_BY_CHUNKS (d, s_conv_pool_forward_v, d, p, plane, kernel, bias, act, pool_out, argmax);
}

static S_AVX512 void
s_conv_pool_backward (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
                      const s_plane_t *plane, const float *pool_out, const int32_t *argmax,
                      za_act_t act, const float *pool_dout, int bf16, float *dkernel,
                      float *dbias)
{
    S_BY_CHUNKS (d, s_conv_pool_backward_v, d, p, plane, pool_out, argmax, act, pool_dout,
                 bf16, dkernel, dbias);
}

//  The direct loops for this layer in `precision`, where they apply: 0, or
//  -1 with nothing written (the caller goes the other way). The kernel is
//  rounded here in bf16; the input, with the plane.
static int
s_direct_conv_forward (za_precision_t precision, const za_conv2d_dims_t *d, const float *in,
                       const float *kernel, const float *bias, za_act_t act, float *out)
{
    s_plane_t plane;
    if (!s_direct (d, precision) || s_direct_plane (&plane, d, in, precision))
        return -1;
    if (precision != ZA_PRECISION_FP32)
        kernel = s_rounded (1, kernel, (size_t) DIRECT_TAPS * d->oc, precision);
    const uint32_t *pairs = s_conv_pool_pairs (d, precision, 0)? s_plane_pairs (&plane, d->n, 1)
                                                             : NULL;
    if (pairs)
        s_direct_forward_pairs (d, &plane, pairs, kernel, bias, act, out);
    else
        s_direct_forward (d, &plane, kernel, bias, act, out);
    return 0;
}

//  The same backward, for a layer whose input's gradient is not asked.
static int
s_direct_conv_backward (za_precision_t precision, const za_conv2d_dims_t *d, const float *in,
                        const float *out, za_act_t act, const float *dout, float *dkernel,
                        float *dbias, const float *din)
{
    s_plane_t plane;
    if (din || !s_direct (d, precision) || s_direct_plane (&plane, d, in, precision))
        return -1;
    const uint32_t *pairs = s_conv_pool_pairs (d, precision, 1)? s_plane_pairs (&plane, d->n, 0)
                                                             : NULL;
    if (pairs)
        s_direct_backward_pairs (d, &plane, pairs, out, act, dout, dkernel, dbias);
    else
        s_direct_backward (d, &plane, out, act, dout, precision == ZA_PRECISION_BF16, dkernel,
                           dbias);
    return 0;
}

void
za_cpu_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                       const float *bias, za_act_t act, float *cols, float *out)
{
    const int P = d->n * d->oh * d->ow;
    const int K = d->kh * d->kw * d->c;
    if (s_direct_conv_forward (ZA_PRECISION_FP32, d, in, kernel, bias, act, out) == 0)
        return;
    //  oneDNN where it is built in and takes the geometry: no im2col matrix
    //  (its backward reads the input itself).
    if (za_cpu_dnnl_conv2d_forward (d, in, kernel, bias, act, out, ZA_PRECISION_FP32) == 0)
        return;
    s_im2col (d, in, cols);
    if (s_small_k (K, d->oc)) {
        s_small_k_forward (P, K, d->oc, cols, kernel, bias, act, out);
        return;
    }
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, P, d->oc, K,
                 1.0f, cols, K, kernel, d->oc, 0.0f, out, d->oc);
    s_bias_act ((size_t) P, d->oc, bias, act, out);
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

void
za_cpu_conv2d_backward (const za_conv2d_dims_t *d, const float *in, float *cols,
                        const float *kernel, const float *out, za_act_t act, float *dout,
                        float *dkernel, float *dbias, float *dcols, float *din)
{
    if (s_direct_conv_backward (ZA_PRECISION_FP32, d, in, out, act, dout, dkernel, dbias,
                                din) == 0)
        return;
    s_act_bias_backward ((size_t) d->n * d->oh * d->ow, d->oc, out, act, dout, dbias);
    if (za_cpu_dnnl_conv2d_backward (d, in, kernel, act, dout, dkernel, din,
                                     ZA_PRECISION_FP32) == 0)
        return;
    //  With oneDNN on, or the direct loops, the forward may have left no
    //  im2col matrix.
    s_conv2d_backward_gemm (d, in, cols, za_cpu_dnnl_on () || s_direct (d, ZA_PRECISION_FP32),
                            kernel, dout, dkernel, dcols, din);
}

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
    s_act_bias_backward ((size_t) n, units, out, act, dout, dbias);
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, units, n,
                 1.0f, in, in_dim, dout, units, 1.0f, dkernel, units);
    if (din)
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, in_dim, units,
                     1.0f, dout, units, kernel, units, 0.0f, din, in_dim);
}

// ---------------------------------------------------------------------------
//  Mixed precision

//  Output planes of at most this many pixels take the kernel's gradient and
//  the input's in bf16 as matmuls (s_conv2d_backward_mixed).
#define SMALL_PLANE_MAX 16

static void
s_round_in_place (float *x, size_t n, za_precision_t precision)
{
    for (size_t i = 0; i < n; i++)
        x [i] = za_elem_round (x [i], precision);
}

static void
s_conv2d_forward_mixed (za_precision_t precision, const za_conv2d_dims_t *d, const float *in,
                        const float *kernel, const float *bias, za_act_t act, float *cols,
                        float *out)
{
    size_t inputs = (size_t) d->n * d->h * d->w * d->c;
    size_t weights = (size_t) d->kh * d->kw * d->c * d->oc;
    if (s_direct_conv_forward (precision, d, in, kernel, bias, act, out) == 0)
        return;
    if (za_cpu_dnnl_conv2d_forward (d, in, kernel, bias, act, out, precision) == 0)
        return;
    //  The rounded kernel is in this thread's buffer, which every layer
    //  shares: nothing a back end derives from it may be kept (a kept
    //  reorder goes by the kernel's address).
    uint64_t epoch = za_model_values_epoch ();
    za_model_set_values_epoch (0);
    za_cpu_conv2d_forward (d, s_rounded (0, in, inputs, precision),
                           s_rounded (1, kernel, weights, precision), bias, act, cols, out);
    za_model_set_values_epoch (epoch);
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

static void
s_conv2d_backward_mixed (za_precision_t precision, const za_conv2d_dims_t *d, const float *in,
                         float *cols, const float *kernel, const float *out, za_act_t act,
                         float *dout, float *dkernel, float *dbias, float *dcols, float *din)
{
    size_t outputs = (size_t) d->n * d->oh * d->ow * d->oc;
    if (s_direct_conv_backward (precision, d, in, out, act, dout, dkernel, dbias, din) == 0)
        return;
    s_act_bias_backward ((size_t) d->n * d->oh * d->ow, d->oc, out, act, dout, dbias);
    size_t inputs = (size_t) d->n * d->h * d->w * d->c;
    size_t weights = (size_t) d->kh * d->kw * d->c * d->oc;
    //  On AMX zactor's own tiles (za_cpu_amx.c says why), small planes too
    //  (the seed CNN's third layer: 0.15 to 0.08 ms a step against the
    //  matmuls below). Their copies take the direct loops' buffer (theirs
    //  fill it anew at every call).
    size_t bytes = precision == ZA_PRECISION_BF16 && dkernel? za_cpu_amx_conv2d_scratch (d): 0;
    float *scratch = bytes? s_buffer (2, bytes / sizeof (float) + 16): NULL;
    if (scratch) {
        //  At a cache line's start: a tile's rows are 64 bytes.
        za_cpu_amx_conv2d_backward (d, in, kernel, dout, dkernel, din,
                                    (void *) (((uintptr_t) scratch + 63) & ~(uintptr_t) 63));
        return;
    }
    //  Elsewhere (AVX512-BF16 alone), on a small plane (3x3 outputs) oneDNN's
    //  bf16 kernels take the kernel's gradient at a third of the peak; as
    //  one matmul over the im2col matrix it runs at twice their rate
    //  (docs/precision.md), and the input's gradient as a matmul and col2im
    //  at about 2.5x. The input's comes first: a failure there leaves
    //  dkernel as it was.
    if (precision == ZA_PRECISION_BF16 && d->oh * d->ow <= SMALL_PLANE_MAX && za_cpu_dnnl_on ()
        && (!din || s_din_matmul (d, kernel, dout, dcols, din) == 0)) {
        s_im2col_bf16 (d, in, (uint16_t *) cols);
        if (za_cpu_dnnl_matmul_mixed (d->kh * d->kw * d->c, d->n * d->oh * d->ow, d->oc, NULL,
                                      (const uint16_t *) cols, 1, dout, NULL, 0, 1,
                                      dkernel) == 0)
            return;
        if (din) {
            //  The input's gradient is done: the kernel's alone, rounded.
            s_round_in_place (dout, outputs, precision);
            s_conv2d_backward_gemm (d, s_rounded (0, in, inputs, precision), cols, 1, NULL,
                                    dout, dkernel, dcols, NULL);
            return;
        }
    }
    if (za_cpu_dnnl_conv2d_backward (d, in, kernel, act, dout, dkernel, din, precision) == 0)
        return;
    s_round_in_place (dout, outputs, precision);
    //  The forward may have gone through oneDNN: im2col again, rounded.
    s_conv2d_backward_gemm (d, s_rounded (0, in, inputs, precision), cols, 1,
                            s_rounded (1, kernel, weights, precision), dout, dkernel, dcols,
                            din);
}

static void
s_dense_forward_mixed (za_precision_t precision, int n, int in_dim, int units, const float *in,
                       const float *kernel, const float *bias, za_act_t act, float *out)
{
    if (za_cpu_dnnl_matmul (n, in_dim, units, in, 0, kernel, 0, 0, out, precision) == 0) {
        s_bias_act ((size_t) n, units, bias, act, out);
        return;
    }
    za_cpu_dense_forward (n, in_dim, units, s_rounded (0, in, (size_t) n * in_dim, precision),
                          s_rounded (1, kernel, (size_t) in_dim * units, precision), bias,
                          act, out);
}

static void
s_dense_backward_mixed (za_precision_t precision, int n, int in_dim, int units,
                        const float *in, const float *kernel, const float *out, za_act_t act,
                        float *dout, float *dkernel, float *dbias, float *din)
{
    s_act_bias_backward ((size_t) n, units, out, act, dout, dbias);
    //  Each product where oneDNN declines it: from rounded inputs (rounding
    //  dout twice changes nothing).
    if (za_cpu_dnnl_matmul (in_dim, n, units, in, 1, dout, 0, 1, dkernel, precision)) {
        s_round_in_place (dout, (size_t) n * units, precision);
        const float *rin = s_rounded (0, in, (size_t) n * in_dim, precision);
        cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, units, n,
                     1.0f, rin, in_dim, dout, units, 1.0f, dkernel, units);
    }
    if (din && za_cpu_dnnl_matmul (n, units, in_dim, dout, 0, kernel, 1, 0, din, precision)) {
        s_round_in_place (dout, (size_t) n * units, precision);
        const float *rk = s_rounded (1, kernel, (size_t) in_dim * units, precision);
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, in_dim, units,
                     1.0f, dout, units, rk, units, 0.0f, din, in_dim);
    }
}

//  The mixed tables' entries, one set per precision.
#define S_MIXED(suffix, precision)                                                            \
void                                                                                          \
za_cpu_conv2d_forward_##suffix (const za_conv2d_dims_t *d, const float *in,                   \
                                const float *kernel, const float *bias, za_act_t act,         \
                                float *cols, float *out)                                      \
{                                                                                             \
    s_conv2d_forward_mixed (precision, d, in, kernel, bias, act, cols, out);                  \
}                                                                                             \
void                                                                                          \
za_cpu_conv2d_backward_##suffix (const za_conv2d_dims_t *d, const float *in, float *cols,     \
                                 const float *kernel, const float *out, za_act_t act,         \
                                 float *dout, float *dkernel, float *dbias, float *dcols,     \
                                 float *din)                                                  \
{                                                                                             \
    s_conv2d_backward_mixed (precision, d, in, cols, kernel, out, act, dout, dkernel, dbias,  \
                             dcols, din);                                                     \
}                                                                                             \
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

// ---------------------------------------------------------------------------
//  The first layer and its max-pool as one, fp32 and bf16

static int
s_conv_pool_forward_in (za_precision_t precision, const za_conv2d_dims_t *d,
                        const za_pool2d_dims_t *p, const float *in, const float *kernel,
                        const float *bias, za_act_t act, float *pool_out, int32_t *argmax)
{
    s_plane_t plane;
    if (!s_conv_pool (d, p, precision) || s_direct_plane (&plane, d, in, precision))
        return -1;
    if (precision != ZA_PRECISION_FP32)
        kernel = s_rounded (1, kernel, (size_t) DIRECT_TAPS * d->oc, precision);
    const uint32_t *pairs = s_conv_pool_pairs (d, precision, 0)? s_plane_pairs (&plane, d->n, 1)
                                                             : NULL;
    if (pairs)
        s_conv_pool_forward_pairs (d, p, &plane, pairs, kernel, bias, act, pool_out, argmax);
    else
        s_conv_pool_forward (d, p, &plane, kernel, bias, act, pool_out, argmax);
    return 0;
}

static int
s_conv_pool_backward_in (za_precision_t precision, const za_conv2d_dims_t *d,
                         const za_pool2d_dims_t *p, const float *in, const float *pool_out,
                         const int32_t *argmax, za_act_t act, const float *pool_dout,
                         float *dkernel, float *dbias)
{
    s_plane_t plane;
    if (!s_conv_pool (d, p, precision) || s_direct_plane (&plane, d, in, precision))
        return -1;
    const uint32_t *pairs = s_conv_pool_pairs (d, precision, 1)? s_plane_pairs (&plane, d->n, 0)
                                                             : NULL;
    if (pairs)
        s_conv_pool_backward_pairs (d, p, &plane, pairs, pool_out, argmax, act, pool_dout,
                                    dkernel, dbias);
    else
        s_conv_pool_backward (d, p, &plane, pool_out, argmax, act, pool_dout,
                              precision == ZA_PRECISION_BF16, dkernel, dbias);
    return 0;
}

#define S_CONV_POOL(suffix, precision)                                                        \
int                                                                                           \
za_cpu_conv2d_pool_forward##suffix (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,     \
                                    const float *in, const float *kernel, const float *bias,  \
                                    za_act_t act, float *pool_out, int32_t *argmax)           \
{                                                                                             \
    return s_conv_pool_forward_in (precision, d, p, in, kernel, bias, act, pool_out, argmax); \
}                                                                                             \
int                                                                                           \
za_cpu_conv2d_pool_backward##suffix (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,    \
                                     const float *in, const float *pool_out,                  \
                                     const int32_t *argmax, za_act_t act,                     \
                                     const float *pool_dout, float *dkernel, float *dbias)    \
{                                                                                             \
    return s_conv_pool_backward_in (precision, d, p, in, pool_out, argmax, act, pool_dout,    \
                                    dkernel, dbias);                                          \
}

S_CONV_POOL (, ZA_PRECISION_FP32)
S_CONV_POOL (_bf16, ZA_PRECISION_BF16)
