/*  za_cpu.c: the CPU back end: its table, memory, and the layers that are
    loops (pooling, relu, dropout, softmax); the matrix products (conv2d and
    dense, OpenBLAS) are za_cpu_gemm.c.                                    */
#include "za/za_kernels.h"
#include "za_cpu_conv.h"
#include "za_cpu_group.h"
#include "za_cpu_gemm.h"
#include "za_cpu_dnnl.h"
#include "za_elem.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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
                if (d->pool == 2) {
                    //  The common window, its four values in registers and
                    //  each result stored once (conditional stores into
                    //  best and where made masked stores, slow on AMD).
                    const int32_t right = C, down = d->w * C;
                    const float *restrict v1 = v0 + right, *restrict v2 = v0 + down;
                    const float *restrict v3 = v2 + right;
                    for (int c = 0; c < C; c++) {
                        float b = v0 [c];
                        int32_t at = first + c;
                        at = v1 [c] > b? first + right + c: at;
                        b = v1 [c] > b? v1 [c]: b;
                        at = v2 [c] > b? first + down + c: at;
                        b = v2 [c] > b? v2 [c]: b;
                        at = v3 [c] > b? first + down + right + c: at;
                        b = v3 [c] > b? v3 [c]: b;
                        best [c] = b;
                        where [c] = at;
                    }
                    continue;
                }
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
    if (d->pool == 2) {
        //  The common window: each output's gradient and argmax read once,
        //  its four inputs written from them (0 where the max was not).
        const int32_t right = C, down = d->w * C;
        for (int n = 0; n < d->n; n++) {
            float *image = din + (size_t) n * d->h * d->w * C;
            for (int oh = 0; oh < d->oh; oh++) {
                float *restrict top = image + (size_t) 2 * oh * d->w * C;
                float *restrict bottom = top + down;
                for (int ow = 0; ow < d->ow; ow++) {
                    size_t o = (((size_t) n * d->oh + oh) * d->ow + ow) * C;
                    const float *restrict g = dout + o;
                    const int32_t *restrict where = argmax + o;
                    float *restrict d0 = top + (size_t) 2 * ow * C, *restrict d1 = d0 + C;
                    float *restrict d2 = bottom + (size_t) 2 * ow * C, *restrict d3 = d2 + C;
                    const int32_t first = (int32_t) (d0 - din);
                    //  g [c] read once, always: read under the condition it
                    //  became masked loads, slow on AMD.
                    for (int c = 0; c < C; c++) {
                        const int32_t at = where [c] - first - c;
                        const float v = g [c];
                        d0 [c] = at == 0? v: 0.0f;
                        d1 [c] = at == right? v: 0.0f;
                        d2 [c] = at == down? v: 0.0f;
                        d3 [c] = at == down + right? v: 0.0f;
                    }
                }
                if (covered_w < d->w) {
                    memset (top + (size_t) covered_w * C, 0,
                            sizeof (float) * (size_t) (d->w - covered_w) * C);
                    memset (bottom + (size_t) covered_w * C, 0,
                            sizeof (float) * (size_t) (d->w - covered_w) * C);
                }
            }
            if (covered_h < d->h)
                memset (image + (size_t) covered_h * d->w * C, 0,
                        sizeof (float) * (size_t) (d->h - covered_h) * d->w * C);
        }
        return;
    }
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
                for (int c = 0; c < C; c++) {
                    const float v = g [c];
                    dst [c] = where [c] == self_index + c? v: 0.0f;
                }
            }
        }
}

//  Channels are contiguous: each position adds a row of them into the sums,
//  in the order za_elem_avgpool_global adds them.
static void
s_avgpool_global_forward (int n, int positions, int channels, const float *in, float *out)
{
    for (int e = 0; e < n; e++) {
        float *restrict sum = out + (size_t) e * channels;
        const float *x = in + (size_t) e * positions * channels;
        memset (sum, 0, sizeof (float) * (size_t) channels);
        for (int p = 0; p < positions; p++)
            for (int c = 0; c < channels; c++)
                sum [c] += x [(size_t) p * channels + c];
        for (int c = 0; c < channels; c++)
            sum [c] /= (float) positions;
    }
}

static void
s_avgpool_global_backward (int n, int positions, int channels, const float *dout,
                           float *din)
{
    size_t count = (size_t) n * positions * channels;
    for (size_t i = 0; i < count; i++)
        din [i] = za_elem_avgpool_global_backward (positions, channels, dout, i);
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
    //  dout [i] read always (read under the condition it became masked
    //  loads, slow on AMD).
    for (size_t i = 0; i < count; i++) {
        const float g = dout [i];
        din [i] = out [i] > 0? g: 0;
    }
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

//  The calling thread's sums of softmax_xent_add, until loss_take.
static __thread double s_loss_sum;
static __thread int s_loss_correct, s_loss_invalid;

static void
s_softmax_xent_add (int n, int classes, const float *logits, const int32_t *labels,
                    float *dlogits)
{
    int correct, invalid;
    s_loss_sum += s_softmax_xent (n, classes, logits, labels, dlogits, &correct, &invalid);
    s_loss_correct += correct;
    s_loss_invalid += invalid;
}

static int
s_loss_take (double *loss_sum, int *correct, int *invalid)
{
    *loss_sum = s_loss_sum;
    *correct = s_loss_correct;
    *invalid = s_loss_invalid;
    s_loss_sum = 0;
    s_loss_correct = s_loss_invalid = 0;
    return 0;
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
    //  cpu-staged:all's devices are all this CPU.
    return device >= 0 && device < ZA_STAGED_DEVICES
         ? 0: za_error ("cpu: no device %d (the CPU is device 0; cpu-staged:all's are 0 to %d)",
                        device, ZA_STAGED_DEVICES - 1);
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
s_all_finite (size_t n, const float *x)
{
    //  One pass without a branch per element: an all-ones exponent is an
    //  infinity or a NaN.
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (za_elem_bits (x [i]) & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

static void
s_clip_by_global_norm (float *grads, const size_t *offset, const size_t *size, int count,
                       float clip)
{
    za_optim_clip_by_global_norm (grads, offset, size, count, clip);
}

static int
s_sync (void)
{
    return 0;
}

//  cpu-staged:all's collectives: its devices are all this CPU's memory.
//  ZA_STAGED_COLLECTIVE=fail fails both as an NCCL that does not start,
//  =sum the sum alone (the values' broadcast goes on).
static int
s_collective_fails (const char *which)
{
    const char *fail = getenv ("ZA_STAGED_COLLECTIVE");
    return fail && (strcmp (fail, "fail") == 0 || strcmp (fail, which) == 0)
         ? za_error ("cpu-staged: the collective %s does not start (ZA_STAGED_COLLECTIVE=%s)",
                     which, fail)
         : 0;
}

static int
s_devices_sum (float *const *bufs, const int *devices, int count, size_t floats)
{
    (void) devices;
    if (s_collective_fails ("sum"))
        return -1;
    for (int b = 1; b < count; b++)
        for (size_t i = 0; i < floats; i++)
            bufs [0][i] += bufs [b][i];
    return 0;
}

static int
s_devices_broadcast (float *const *bufs, const int *devices, int count, size_t floats)
{
    (void) devices;
    if (s_collective_fails ("broadcast"))
        return -1;
    for (int b = 1; b < count; b++)
        memcpy (bufs [b], bufs [0], floats * sizeof (float));
    return 0;
}

//  The matrix products of a precision: fp32's, or a mixed set.
#define S_GEMMS(conv_f, conv_b, dense_f, dense_b)         \
    .conv2d_forward = conv_f,                             \
    .conv2d_backward = conv_b,                            \
    .dense_forward = dense_f,                             \
    .dense_backward = dense_b
#define S_FP32 S_GEMMS (za_cpu_conv2d_forward, za_cpu_conv2d_backward, \
                        za_cpu_dense_forward, za_cpu_dense_backward), \
               .conv2d_pool_forward = za_cpu_conv2d_pool_forward, \
               .conv2d_pool_backward = za_cpu_conv2d_pool_backward
#define S_BF16 S_GEMMS (za_cpu_conv2d_forward_bf16, za_cpu_conv2d_backward_bf16, \
                        za_cpu_dense_forward_bf16, za_cpu_dense_backward_bf16), \
               .conv2d_pool_forward = za_cpu_conv2d_pool_forward_bf16, \
               .conv2d_pool_backward = za_cpu_conv2d_pool_backward_bf16
#define S_FP16 S_GEMMS (za_cpu_conv2d_forward_fp16, za_cpu_conv2d_backward_fp16, \
                        za_cpu_dense_forward_fp16, za_cpu_dense_backward_fp16)

//  The slots whose function is another's: host memory is the device's.
#define s_buffer_free za_free
#define s_host_alloc s_buffer_alloc
#define s_host_free za_free
#define s_upload s_memcpy
#define s_download s_memcpy
#define s_copy s_memcpy
#define s_optim_apply za_optim_apply
#define s_group_id za_cpu_group_id
#define s_group_open za_cpu_group_open
#define s_group_sum za_cpu_group_sum
#define s_group_poll za_cpu_group_poll
#define s_group_close za_cpu_group_close
#define S_SLOT(slot) .slot = s_##slot,
#define S_CPU_TABLE(devices) \
    ZA_BACKEND_LAYER_SLOTS (S_SLOT) .device_count = devices, ZA_BACKEND_MEMORY_SLOTS (S_SLOT)

static const za_backend_t *s_cpu_mixed (za_precision_t precision);
static int s_micro_batch_bf16 (void);
static const za_backend_t *s_staged_mixed (za_precision_t precision);
static int s_native (za_precision_t precision);

static const za_backend_t s_cpu [3] = {
    {.name = "cpu (OpenBLAS)", .host_memory = 1, S_CPU_TABLE (1) S_FP32,
     .precision = ZA_PRECISION_FP32, .mixed = s_cpu_mixed, .native = s_native},
    {.name = "cpu (oneDNN bf16)", .host_memory = 1, S_CPU_TABLE (1) S_BF16,
     .precision = ZA_PRECISION_BF16, .mixed = s_cpu_mixed, .native = s_native,
     .micro_batch = s_micro_batch_bf16},
    {.name = "cpu (float16 inputs, fp32 products)", .host_memory = 1,
     S_CPU_TABLE (1) S_FP16,
     .precision = ZA_PRECISION_FP16, .mixed = s_cpu_mixed, .native = s_native}
};

//  cpu-staged's fences: its work is done when a call returns, so a fence
//  marks nothing; each is a token of its own all the same (freed by its
//  wait), so that the input's fences are made, waited for and freed here as
//  on a GPU (counted: za_cpu_staged_fences).
static _Atomic int64_t s_fences_made, s_fences_waited;

static void *
s_staged_fence (void)
{
    void *token = malloc (1);
    if (!token) {
        za_error ("cpu-staged: out of memory for a fence");
        return NULL;
    }
    atomic_fetch_add (&s_fences_made, 1);
    return token;
}

static int
s_staged_fence_wait (void *fence)
{
    free (fence);
    atomic_fetch_add (&s_fences_waited, 1);
    return 0;
}

void
za_cpu_staged_fences (int64_t *made, int64_t *waited)
{
    *made = atomic_load (&s_fences_made);
    *waited = atomic_load (&s_fences_waited);
}

#define S_STAGED_FENCES .fence = s_staged_fence, .fence_wait = s_staged_fence_wait

static const za_backend_t s_cpu_staged [3] = {
    {.name = "cpu-staged (OpenBLAS behind device copies)", .host_memory = 0,
     S_CPU_TABLE (ZA_STAGED_DEVICES) S_FP32, .precision = ZA_PRECISION_FP32,
     .mixed = s_staged_mixed, .native = s_native, S_STAGED_FENCES},
    {.name = "cpu-staged (bf16)", .host_memory = 0,
     S_CPU_TABLE (ZA_STAGED_DEVICES) S_BF16,
     .precision = ZA_PRECISION_BF16, .mixed = s_staged_mixed, .native = s_native,
     S_STAGED_FENCES},
    {.name = "cpu-staged (float16)", .host_memory = 0,
     S_CPU_TABLE (ZA_STAGED_DEVICES) S_FP16,
     .precision = ZA_PRECISION_FP16, .mixed = s_staged_mixed, .native = s_native,
     S_STAGED_FENCES}
};

//  bf16 only where the CPU multiplies it (elsewhere it would be slower
//  than fp32 for nothing: refused, so that nobody believes otherwise);
//  float16 always, rounded (no CPU here multiplies it), as TensorFlow runs
//  mixed_float16 on a CPU.
//  Native: multiplied by oneDNN's bf16 kernels (so not with ZA_DNNL=0,
//  where bf16 is rounded into OpenBLAS: allowed when asked, for the tests,
//  but no `auto` choice).
static int
s_native (za_precision_t precision)
{
    return precision == ZA_PRECISION_FP32
        || (precision == ZA_PRECISION_BF16 && za_cpu_dnnl_bf16_native () && za_cpu_dnnl_on ());
}

//  On AMX, bf16 micro-batches of 32: oneDNN's calls then took 6-10% less
//  of a seed CNN step than at the default 16 (and with the backward on the
//  tiles, za_cpu_amx.c, 32 still beats 16 by 5-10%), and bigger ones stop
//  fitting the cache (docs/precision.md). In fp32 and without AMX, 32 is
//  no faster.
static int
s_micro_batch_bf16 (void)
{
    return za_cpu_dnnl_amx () && za_cpu_dnnl_on ()? 32: 0;
}

static int
s_cpu_can (za_precision_t precision)
{
    if (precision == ZA_PRECISION_BF16 && !za_cpu_dnnl_bf16_native ())
        return za_error ("--precision mixed_bfloat16: this CPU has no bf16 instructions "
                         "(AVX512-BF16 or AMX, as oneDNN sees it, in a build with oneDNN); "
                         "use --precision fp32, or auto (bf16 where the machine has it)");
    return 0;
}

static const za_backend_t *
s_cpu_mixed (za_precision_t precision)
{
    return s_cpu_can (precision)? NULL: &s_cpu [precision];
}

static const za_backend_t *
s_staged_mixed (za_precision_t precision)
{
    return s_cpu_can (precision)? NULL: &s_cpu_staged [precision];
}

const za_backend_t *
za_backend_cpu (void)
{
    return &s_cpu [ZA_PRECISION_FP32];
}

const za_backend_t *
za_backend_cpu_staged (void)
{
    return &s_cpu_staged [ZA_PRECISION_FP32];
}
