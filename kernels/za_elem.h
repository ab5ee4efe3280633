/*  za_elem.h: the arithmetic of one element, shared by the CPU back end
    (C, called in loops) and the CUDA back end (C++, one GPU thread each), so
    that both compute the same numbers and the CPU's tests check the formulas
    the GPU runs. Internal to kernels/; not installed.                        */
#ifndef ZA_ELEM_H_INCLUDED
#define ZA_ELEM_H_INCLUDED

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "za/za_kernels.h"
#include "za/za_optim.h"

#ifdef __CUDACC__
#   define ZA_HD static __host__ __device__ __forceinline__
#else
#   define ZA_HD static inline
#endif

//  Dropout draws one number per element from (seed, index) alone, so any
//  split of the work (threads, GPU blocks) draws the same mask.
ZA_HD uint64_t
za_elem_hash (uint64_t seed, uint64_t index)
{
    uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

//  The mask of element `index`: 0 with probability `rate`, else 1 / (1 - rate).
ZA_HD float
za_elem_dropout_mask (uint64_t seed, uint64_t index, float rate)
{
    float u = (float) (za_elem_hash (seed, index) >> 40) * (1.0f / 16777216.0f);
    return u < rate? 0.0f: (rate < 1.0f? 1.0f / (1.0f - rate): 0.0f);
}

//  i = q * d + r: returns q, *r the rest. A GPU divides 64-bit integers in
//  software, several times slower than 32-bit ones, and the gathers below
//  divide three times an element: indexes below 2^32 (all but the largest
//  im2col buffers) divide in 32 bits, with the same results.
ZA_HD size_t
za_elem_divmod (size_t i, unsigned d, unsigned *r)
{
    if (i <= UINT32_MAX) {
        uint32_t q = (uint32_t) i / d;
        *r = (uint32_t) i - q * d;
        return q;
    }
    size_t q = i / d;
    *r = (unsigned) (i - q * d);
    return q;
}

//  im2col's element i of the cols matrix [P, kh * kw * c]: the input value
//  under the kernel, or 0 in the padding.
ZA_HD float
za_elem_im2col (const za_conv2d_dims_t *d, const float *in, size_t i)
{
    unsigned k, c, kw, ow, oh;
    size_t p = za_elem_divmod (i, (unsigned) (d->kh * d->kw * d->c), &k);
    unsigned kh = (unsigned) za_elem_divmod (za_elem_divmod (k, (unsigned) d->c, &c),
                                             (unsigned) d->kw, &kw);
    size_t n = za_elem_divmod (za_elem_divmod (p, (unsigned) d->ow, &ow), (unsigned) d->oh, &oh);
    int ih = (int) (oh * d->stride + kh) - d->pad_top;
    int iw = (int) (ow * d->stride + kw) - d->pad_left;
    if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w)
        return 0.0f;
    return in [((n * d->h + ih) * d->w + iw) * d->c + c];
}

//  The output row (or column) whose kernel tap `k` lands on input row `in`,
//  or -1 when none does.
ZA_HD int
za_elem_tapped_from (int in, int pad, int k, int stride, int out_count)
{
    int at = in + pad - k;
    if (at < 0 || at % stride || at / stride >= out_count)
        return -1;
    return at / stride;
}

//  Element i [n, h, w, c] of an NHWC tensor of these sizes: n, *h, *w, *c.
ZA_HD size_t
za_elem_nhwc (size_t i, int h, int w, int c, unsigned *ih, unsigned *iw, unsigned *ic)
{
    return za_elem_divmod (za_elem_divmod (za_elem_divmod (i, (unsigned) c, ic),
                                           (unsigned) w, iw), (unsigned) h, ih);
}

//  col2im's element i of the input gradient [n, h, w, c]: the sum of the
//  cols gradients of every kernel tap that read it (a gather, not a scatter).
ZA_HD float
za_elem_col2im (const za_conv2d_dims_t *d, const float *dcols, size_t i)
{
    int K = d->kh * d->kw * d->c;
    unsigned c, iw, ih;
    size_t n = za_elem_nhwc (i, d->h, d->w, d->c, &ih, &iw, &c);
    float sum = 0.0f;
    for (int kh = 0; kh < d->kh; kh++) {
        int oh = za_elem_tapped_from ((int) ih, d->pad_top, kh, d->stride, d->oh);
        for (int kw = 0; kw < d->kw && oh >= 0; kw++) {
            int ow = za_elem_tapped_from ((int) iw, d->pad_left, kw, d->stride, d->ow);
            if (ow < 0)
                continue;
            size_t p = (n * d->oh + oh) * d->ow + ow;
            sum += dcols [p * K + (kh * d->kw + kw) * d->c + c];
        }
    }
    return sum;
}

//  Max-pool output element i [n, oh, ow, c]: the window's max, *where its
//  input index (the first of equal values, as the CPU loop keeps).
ZA_HD float
za_elem_maxpool (const za_pool2d_dims_t *d, const float *in, size_t i, int32_t *where)
{
    unsigned c, ow, oh;
    size_t n = za_elem_nhwc (i, d->oh, d->ow, d->c, &oh, &ow, &c);
    int32_t first = (int32_t) (((n * d->h + (size_t) oh * d->stride) * d->w
                                + (size_t) ow * d->stride) * d->c + c);
    float best = in [first];
    int32_t at = first;
    for (int ph = 0; ph < d->pool; ph++)
        for (int pw = 0; pw < d->pool; pw++) {
            int32_t j = first + (int32_t) (((size_t) ph * d->w + pw) * d->c);
            if (in [j] > best) {
                best = in [j];
                at = j;
            }
        }
    *where = at;
    return best;
}

//  Max-pool backward, input element i: the gradients of the windows whose
//  max it was (a gather over the windows that cover it).
ZA_HD float
za_elem_maxpool_backward (const za_pool2d_dims_t *d, const float *dout,
                          const int32_t *argmax, size_t i)
{
    unsigned c, iw_, ih_;
    size_t n = za_elem_nhwc (i, d->h, d->w, d->c, &ih_, &iw_, &c);
    int ih = (int) ih_, iw = (int) iw_;
    int oh_lo = ih >= d->pool? (ih - d->pool) / d->stride + 1: 0;
    int ow_lo = iw >= d->pool? (iw - d->pool) / d->stride + 1: 0;
    int oh_hi = ih / d->stride < d->oh - 1? ih / d->stride: d->oh - 1;
    int ow_hi = iw / d->stride < d->ow - 1? iw / d->stride: d->ow - 1;
    float sum = 0.0f;
    for (int oh = oh_lo; oh <= oh_hi; oh++)
        for (int ow = ow_lo; ow <= ow_hi; ow++) {
            size_t o = ((n * d->oh + oh) * d->ow + ow) * d->c + c;
            if (argmax [o] == (int32_t) i)
                sum += dout [o];
        }
    return sum;
}

//  Global average pool's output element i = (n, c): its channel summed over
//  the positions in order, then divided (the CPU's loop adds in that order).
ZA_HD float
za_elem_avgpool_global (int positions, int channels, const float *in, size_t i)
{
    size_t n = i / (size_t) channels, c = i % (size_t) channels;
    const float *x = in + n * (size_t) positions * channels + c;
    float sum = 0.0f;
    for (int p = 0; p < positions; p++)
        sum += x [(size_t) p * channels];
    return sum / (float) positions;
}

//  Its input gradient at element i = (n, p, c).
ZA_HD float
za_elem_avgpool_global_backward (int positions, int channels, const float *dout, size_t i)
{
    size_t n = i / ((size_t) positions * channels), c = i % (size_t) channels;
    return dout [n * channels + c] / (float) positions;
}

//  One parameter's update (za_optim.h has the formulas): each takes the
//  value w and gradient g, updates its slots in place and returns the new
//  value. m_scale and v_scale are Adam's bias corrections for this step.
//  SGD is one fused multiply-add, rounded once, whatever the build's
//  optimisation (-ffp-contract fuses only from -O2): docs/PROTOCOL.md gives
//  it to clients that must reproduce a ps bit for bit.
ZA_HD float
za_elem_sgd (float lr, float w, float g)
{
    return fmaf (-lr, g, w);
}

ZA_HD float
za_elem_momentum (float lr, float mu, int nesterov, float w, float g, float *a)
{
    float acc = mu * *a + g;
    *a = acc;
    return nesterov? w - lr * (g + mu * acc): w - lr * acc;
}

ZA_HD float
za_elem_adam (float lr, float b1, float b2, float eps, float m_scale, float v_scale,
              float w, float g, float *m, float *v)
{
    float mt = b1 * *m + (1 - b1) * g;
    float vt = b2 * *v + (1 - b2) * g * g;
    *m = mt;
    *v = vt;
    return w - lr * (mt * m_scale) / (sqrtf (vt * v_scale) + eps);
}

ZA_HD float
za_elem_adagrad (float lr, float eps, float w, float g, float *a)
{
    float acc = *a + g * g;
    *a = acc;
    return w - lr * g / (sqrtf (acc) + eps);
}

//  Adam's bias corrections 1 / (1 - beta^step), on the host once per update.
static inline float
za_elem_bias_correction (float beta, int64_t step)
{
    return (float) (1.0 / (1.0 - pow ((double) beta, (double) step)));
}

#define ZA_ELEM_PI 3.14159265358979323846

//  A schedule's rate at global step s (before the update), TensorFlow's
//  formulas (za_optim_config.h), without the warm-up.
static inline double
za_elem_scheduled (const za_optim_config_t *c, double s)
{
    const za_schedule_t *k = &c->schedule;
    double lr = c->learning_rate, d = k->decay_steps;
    switch (k->kind) {
        case ZA_SCHEDULE_EXPONENTIAL: {
            double p = s / d;
            return lr * pow (k->decay_rate, k->staircase? floor (p): p);
        }
        case ZA_SCHEDULE_PIECEWISE: {
            int i = 0;
            while (i < k->boundary_count && s > k->boundaries [i])
                i++;
            return k->values [i];
        }
        case ZA_SCHEDULE_COSINE: {
            double t = s < d? s: d;
            return lr * ((1 - k->alpha) * 0.5 * (1 + cos (ZA_ELEM_PI * t / d)) + k->alpha);
        }
        case ZA_SCHEDULE_COSINE_RESTARTS: {
            double fraction = s / d, restarts;
            if (k->t_mul == 1) {
                restarts = floor (fraction);
                fraction -= restarts;
            }
            else {
                restarts = floor (log (1 - fraction * (1 - k->t_mul)) / log (k->t_mul));
                //  At a restart's very step the logarithms' rounding can land a
                //  period short (log (1000) / log (10) is 2.9999999999999996;
                //  TensorFlow's float32 gives 3): the periods' sums say.
                if ((1 - pow (k->t_mul, restarts + 1)) / (1 - k->t_mul) <= fraction)
                    restarts++;
                else
                if (restarts > 0 && (1 - pow (k->t_mul, restarts)) / (1 - k->t_mul) > fraction)
                    restarts--;
                double sum = (1 - pow (k->t_mul, restarts)) / (1 - k->t_mul);
                fraction = (fraction - sum) / pow (k->t_mul, restarts);
            }
            double cosine = 0.5 * pow (k->m_mul, restarts) * (1 + cos (ZA_ELEM_PI * fraction));
            return lr * ((1 - k->alpha) * cosine + k->alpha);
        }
#ifndef __CUDA_ARCH__
        //  The host's function (a GPU's updates take the rate from the host).
        case ZA_SCHEDULE_FUNCTION:
            return k->fn? k->fn (k->fn_arg, lr, (int64_t) s): NAN;
#endif
        case ZA_SCHEDULE_POLYNOMIAL: {
            double t = s;
            if (k->cycle)
                d *= s > 0? ceil (s / d): 1;
            else
            if (t > d)
                t = d;
            return (lr - k->end_learning_rate) * pow (1 - t / d, k->power)
                 + k->end_learning_rate;
        }
        default:
            return lr;
    }
}

//  The learning rate of update `step` (1 for the first): the schedule at
//  the global step before it, after a linear warm-up.
static inline float
za_elem_learning_rate (const za_optim_config_t *c, int64_t step)
{
    double s = step > 0? (double) (step - 1): 0, warmup = c->schedule.warmup_steps;
    if (warmup > 0 && s < warmup)
        return (float) (za_elem_scheduled (c, warmup) * (s + 1) / warmup);
    return (float) za_elem_scheduled (c, s);
}

//  Mixed precision: a float's bits, and back.
ZA_HD uint32_t
za_elem_bits (float x)
{
    uint32_t u;
    memcpy (&u, &x, sizeof u);
    return u;
}

ZA_HD float
za_elem_from_bits (uint32_t u)
{
    float x;
    memcpy (&x, &u, sizeof x);
    return x;
}

//  x rounded to bfloat16 (round to nearest, ties to even; NaN stays NaN,
//  overflow goes to infinity), as its 16 bits: za_f32_to_bf16's rounding
//  (za_tensor.h), here for the GPU's kernels and the rounded CPU path.
ZA_HD uint16_t
za_elem_bf16 (float x)
{
    uint32_t u = za_elem_bits (x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t) ((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t) (u >> 16);
}

//  x rounded to IEEE float16 (ties to even, subnormals, overflow to
//  infinity), returned as the float of the same value.
ZA_HD float
za_elem_round_fp16 (float x)
{
    uint32_t u = za_elem_bits (x);
    uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return x;
    if (a >= 0x477ff000u)                   //  65520 and up: past 65504
        return za_elem_from_bits (sign | 0x7f800000u);
    if (a < 0x38800000u) {                  //  below 2^-14: multiples of 2^-24
        float r = (za_elem_from_bits (a) + 0.5f) - 0.5f;
        return za_elem_from_bits (sign | za_elem_bits (r));
    }
    a += 0xfffu + ((a >> 13) & 1u);
    return za_elem_from_bits (sign | (a & ~0x1fffu));
}

//  x as the matrix products of `precision` read it.
ZA_HD float
za_elem_round (float x, za_precision_t precision)
{
    return precision == ZA_PRECISION_BF16? za_elem_from_bits ((uint32_t) za_elem_bf16 (x) << 16)
         : precision == ZA_PRECISION_FP16? za_elem_round_fp16 (x): x;
}

#endif
