/*  za_cpu_direct.c: a 3x3 convolution of one channel (a first layer on gray
    images) on AVX-512, zactor's own loops: each way in one pass, fp32 and
    bf16 (AVX512-BF16's dot products where the CPU has them), and the same
    with the 2x2 max-pool after it as one. The convolution's ways table
    (za_cpu_conv.c) tries them first.                                       */
#include "za_cpu_conv.h"
#include "za_cpu_ways.h"
#include "za_elem.h"
#include "za/za_tensor.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
//  Which layers they take (DIRECT_LANES, DIRECT_OC_MAX) is za_cpu_ways.h's
//  za_cpu_direct_takes, which za_cpu_gemm.c asks too.
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
    float *x = za_cpu_buffer (2, (size_t) d->n * plane->h * plane->w);
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
    return za_cpu_direct_takes (d, precision) && p->pool == 2 && p->stride == 2 && p->n == d->n
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
    uint32_t *pairs = (uint32_t *) za_cpu_buffer (3, below? 2 * count: count);
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
    if (!za_cpu_direct_takes (d, precision) || s_direct_plane (&plane, d, in, precision))
        return -1;
    if (precision != ZA_PRECISION_FP32)
        kernel = za_cpu_rounded (1, kernel, (size_t) DIRECT_TAPS * d->oc, precision);
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
    if (din || !za_cpu_direct_takes (d, precision) || s_direct_plane (&plane, d, in, precision))
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
        kernel = za_cpu_rounded (1, kernel, (size_t) DIRECT_TAPS * d->oc, precision);
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
    int rc = s_conv_pool_forward_in (precision, d, p, in, kernel, bias, act, pool_out, argmax);\
    if (rc == 0 && za_cpu_conv_tracing ())                                                    \
        za_cpu_conv_trace (d, precision, 0, 0, "direct 3x3 loops and the max-pool as one");  \
    return rc;                                                                                \
}                                                                                             \
int                                                                                           \
za_cpu_conv2d_pool_backward##suffix (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,    \
                                     const float *in, const float *pool_out,                  \
                                     const int32_t *argmax, za_act_t act,                     \
                                     const float *pool_dout, float *dkernel, float *dbias)    \
{                                                                                             \
    int rc = s_conv_pool_backward_in (precision, d, p, in, pool_out, argmax, act, pool_dout,  \
                                      dkernel, dbias);                                        \
    if (rc == 0 && za_cpu_conv_tracing ())                                                    \
        za_cpu_conv_trace (d, precision, 1, 0, "direct 3x3 loops and the max-pool as one");  \
    return rc;                                                                                \
}

S_CONV_POOL (, ZA_PRECISION_FP32)
S_CONV_POOL (_bf16, ZA_PRECISION_BF16)

int
za_cpu_direct_forward (const za_cpu_conv_t *c)
{
    return s_direct_conv_forward (c->precision, c->d, c->in, c->kernel, c->bias, c->act, c->out);
}

int
za_cpu_direct_backward (const za_cpu_conv_t *c)
{
    return s_direct_conv_backward (c->precision, c->d, c->in, c->out_values, c->act, c->dout,
                                   c->dkernel, c->dbias, c->din);
}
