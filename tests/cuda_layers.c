/*  cuda_layers.c: every layer's forward and backward on the CUDA back end
    against the CPU back end, on the same random inputs, and the optimizers.
    Exits 77 (CTest: skipped) where there is no GPU or no CUDA build; 0 when
    every output is within its tolerance, 1 otherwise. Not a Criterion suite:
    loading CUDA in every forked test would cost seconds.

    Tolerances: GEMM outputs 1e-4 relative (cuBLAS sums in another order);
    copies and masks exact. The fp32 convolutions (cuDNN where built in,
    else im2col and cuBLAS) as PyTorch's by default multiply in TF32 (10-bit
    mantissas): each output within 1e-2 of (its magnitude + the outputs'
    RMS), 1e-4 in strict fp32 (NVIDIA_TF32_OVERRIDE=0); cuDNN's Winograd and
    FFT algorithms err more near 0 than a plain sum, hence the RMS. The
    mixed-precision tables (bf16, fp16 inputs to the tensor cores, fp32
    sums) against the CPU's fp32 on the same rounded inputs: through cuBLAS
    alike (bf16 and fp16 products are exact in fp32, so only the order of
    the sums differs); through cuDNN a convolution's output and gradients
    come back in bf16 / fp16 too (as PyTorch's autocast), within 1e-2 of
    |x| + RMS. ZA_CUDNN=0 runs the convolutions through im2col and cuBLAS
    alone.                                                                  */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_kernels.h"
#include "../kernels/za_elem.h"

static const za_backend_t *s_cpu, *s_gpu;
static int s_failures;
static double s_conv_tolerance;         //  fp32 convolutions: TF32 or strict
static int s_cudnn;                     //  the convolutions may go through cuDNN

static float *
s_random (size_t n, uint64_t seed)
{
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    float *x = (float *) za_alloc (n * sizeof (float));
    for (size_t i = 0; i < n; i++)
        x [i] = 2.0f * za_rng_uniform (&rng) - 1.0f;
    return x;
}

//  x rounded as the precision's products read it (a copy).
static float *
s_round (const float *x, size_t n, za_precision_t p)
{
    float *y = (float *) za_alloc (n * sizeof (float));
    for (size_t i = 0; i < n; i++)
        y [i] = za_elem_round (x [i], p);
    return y;
}

static const char *
s_tag (za_precision_t p)
{
    return p == ZA_PRECISION_BF16? "bf16 ": p == ZA_PRECISION_FP16? "fp16 ": "";
}

//  A device copy of a host buffer.
static void *
s_up (const void *host, size_t bytes)
{
    void *dev = s_gpu->buffer_alloc (bytes);
    if (!dev || s_gpu->upload (dev, host, bytes)) {
        fprintf (stderr, "cuda_layers: %s\n", za_last_error ());
        exit (1);
    }
    return dev;
}

//  Compares a device buffer with the CPU's result: each difference over
//  (1 + |cpu|), or with by_rms over (|cpu| + the CPU's outputs' RMS).
static void
s_compare_as (const char *what, const float *cpu, const float *dev, size_t n,
              double tolerance, int by_rms)
{
    float *back = (float *) za_alloc (n * sizeof (float));
    if (s_gpu->sync () || s_gpu->download (back, dev, n * sizeof (float))) {
        fprintf (stderr, "cuda_layers: %s: %s\n", what, za_last_error ());
        exit (1);
    }
    double squares = 0;
    for (size_t i = 0; i < n && by_rms; i++)
        squares += (double) cpu [i] * cpu [i];
    double least = by_rms? sqrt (squares / (double) (n? n: 1)): 1;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs ((double) cpu [i] - back [i]) / (least + fabs ((double) cpu [i]));
        if (d > worst || d != d)
            worst = d, at = i;
    }
    int ok = worst <= tolerance;
    printf ("%-40s %10zu floats  max rel diff %.2e%s  %s\n", what, n, worst,
            by_rms? " (of |x| + rms)": "", ok? "ok": "FAIL");
    if (!ok) {
        printf ("    at %zu: cpu %g gpu %g\n", at, (double) cpu [at], (double) back [at]);
        s_failures++;
    }
    za_free (back);
}

static void
s_compare (const char *what, const float *cpu, const float *dev, size_t n, double tolerance)
{
    s_compare_as (what, cpu, dev, n, tolerance, 0);
}

//  A convolution's output or gradient: fp32's by its own tolerance.
static void
s_compare_conv (za_precision_t p, const char *what, const float *cpu, const float *dev,
                size_t n)
{
    if (p == ZA_PRECISION_FP32)
        s_compare_as (what, cpu, dev, n, s_conv_tolerance, 1);
    else
    if (s_cudnn)
        s_compare_as (what, cpu, dev, n, 1e-2, 1);
    else
        s_compare (what, cpu, dev, n, 1e-4);
}

//  In precision p the GPU's mixed table against the CPU's fp32 on rounded
//  inputs; the bias's gradient from the unrounded output gradient (as the
//  mixed layers sum it), and both backward passes masked by the CPU's
//  output (an output near 0 could otherwise flip one side's ReLU).
//  With own_cols the layer keeps no columns (conv2d_cols_own): the back
//  end makes them in its scratch where cuDNN declines the geometry.
static void
s_conv_as (za_precision_t p, int n, int h, int w, int c, int filters, int kernel, int stride,
           za_padding_t padding, za_act_t act, int own_cols)
{
    const za_backend_t *gpu = s_gpu->mixed (p);
    za_conv2d_dims_t d;
    za_conv2d_dims (&d, n, h, w, c, filters, kernel, stride, padding);
    size_t in_n = (size_t) n * h * w * c, out_n = (size_t) n * d.oh * d.ow * filters;
    size_t k_n = (size_t) kernel * kernel * c * filters, cols_n = za_conv2d_cols_floats (&d);
    float *in = s_random (in_n, 1), *k = s_random (k_n, 2), *b = s_random (filters, 3);
    float *dout = s_random (out_n, 4);
    float *cols = za_alloc (cols_n * 4), *out = za_alloc (out_n * 4), *dk = za_alloc (k_n * 4);
    float *db = za_alloc (filters * 4), *dcols = za_alloc (cols_n * 4), *din = za_alloc (in_n * 4);
    float *g_in = s_up (in, in_n * 4), *g_k = s_up (k, k_n * 4), *g_b = s_up (b, filters * 4);
    float *g_dout = s_up (dout, out_n * 4), *g_cols = s_up (cols, cols_n * 4);
    float *g_out = s_up (out, out_n * 4), *g_dk = s_up (dk, k_n * 4), *g_db = s_up (db, filters * 4);
    float *g_dcols = s_up (dcols, cols_n * 4), *g_din = s_up (din, in_n * 4);
    float *r_in = s_round (in, in_n, p), *r_k = s_round (k, k_n, p);
    float *r_dout = s_round (dout, out_n, p);
    s_cpu->conv2d_forward (&d, r_in, r_k, b, act, cols, out);
    gpu->conv2d_forward (&d, g_in, g_k, g_b, act, own_cols? NULL: g_cols, g_out);
    char what [80];
    snprintf (what, sizeof what, "%sconv2d %dx%dx%d k%d s%d %s%s%s out", s_tag (p), h, w, c,
              kernel, stride, padding == ZA_PADDING_SAME? "same": "valid",
              act == ZA_ACT_RELU? " relu": "", own_cols? " (own cols)": "");
    s_compare_conv (p, what, out, g_out, out_n);
    if (s_gpu->upload (g_out, out, out_n * 4))
        exit (1);
    s_cpu->conv2d_backward (&d, r_in, cols, r_k, out, act, r_dout, dk, db, dcols, din);
    if (p != ZA_PRECISION_FP32) {
        float *scratch = za_alloc (k_n * 4);
        memset (db, 0, filters * 4);
        s_cpu->conv2d_backward (&d, r_in, cols, r_k, out, act, dout, scratch, db, dcols, NULL);
        za_free (scratch);
    }
    gpu->conv2d_backward (&d, g_in, own_cols? NULL: g_cols, g_k, g_out, act, g_dout, g_dk, g_db,
                          own_cols? NULL: g_dcols, g_din);
    what [strlen (what) - 3] = 0;
    char part [96];
    snprintf (part, sizeof part, "%s dkernel", what);
    s_compare_conv (p, part, dk, g_dk, k_n);
    snprintf (part, sizeof part, "%s dbias", what);
    s_compare (part, db, g_db, filters, 1e-4);
    snprintf (part, sizeof part, "%s din", what);
    s_compare_conv (p, part, din, g_din, in_n);
    float *host [] = {in, k, b, dout, cols, out, dk, db, dcols, din};
    float *dev [] = {g_in, g_k, g_b, g_dout, g_cols, g_out, g_dk, g_db, g_dcols, g_din};
    for (int i = 0; i < 10; i++) {
        za_free (host [i]);
        s_gpu->buffer_free (dev [i]);
    }
    za_free (r_in), za_free (r_k), za_free (r_dout);
}

static void
s_conv (za_precision_t p, int n, int h, int w, int c, int filters, int kernel, int stride,
        za_padding_t padding, za_act_t act)
{
    s_conv_as (p, n, h, w, c, filters, kernel, stride, padding, act, 0);
    if (s_gpu->mixed (p)->conv2d_cols_own)
        s_conv_as (p, n, h, w, c, filters, kernel, stride, padding, act, 1);
}

static void
s_dense (za_precision_t p, int n, int in_dim, int units, za_act_t act)
{
    const za_backend_t *gpu = s_gpu->mixed (p);
    size_t k_n = (size_t) in_dim * units;
    float *in = s_random ((size_t) n * in_dim, 5), *k = s_random (k_n, 6), *b = s_random (units, 7);
    float *dout = s_random ((size_t) n * units, 8), *out = za_alloc ((size_t) n * units * 4);
    float *dk = za_alloc (k_n * 4), *db = za_alloc (units * 4), *din = za_alloc ((size_t) n * in_dim * 4);
    float *g_in = s_up (in, (size_t) n * in_dim * 4), *g_k = s_up (k, k_n * 4);
    float *g_b = s_up (b, units * 4), *g_dout = s_up (dout, (size_t) n * units * 4);
    float *g_out = s_up (out, (size_t) n * units * 4), *g_dk = s_up (dk, k_n * 4);
    float *g_db = s_up (db, units * 4), *g_din = s_up (din, (size_t) n * in_dim * 4);
    size_t out_n = (size_t) n * units;
    float *r_in = s_round (in, (size_t) n * in_dim, p), *r_k = s_round (k, k_n, p);
    float *r_dout = s_round (dout, out_n, p);
    char what [64];
    s_cpu->dense_forward (n, in_dim, units, r_in, r_k, b, act, out);
    gpu->dense_forward (n, in_dim, units, g_in, g_k, g_b, act, g_out);
    snprintf (what, sizeof what, "%sdense %dx%d out", s_tag (p), in_dim, units);
    s_compare (what, out, g_out, out_n, 1e-4);
    if (s_gpu->upload (g_out, out, out_n * 4))
        exit (1);
    s_cpu->dense_backward (n, in_dim, units, r_in, r_k, out, act, r_dout, dk, db, din);
    if (p != ZA_PRECISION_FP32) {
        float *scratch = za_alloc (k_n * 4);
        memset (db, 0, units * 4);
        s_cpu->dense_backward (n, in_dim, units, r_in, r_k, out, act, dout, scratch, db, NULL);
        za_free (scratch);
    }
    gpu->dense_backward (n, in_dim, units, g_in, g_k, g_out, act, g_dout, g_dk, g_db, g_din);
    snprintf (what, sizeof what, "%sdense %dx%d dkernel", s_tag (p), in_dim, units);
    s_compare (what, dk, g_dk, k_n, 1e-4);
    snprintf (what, sizeof what, "%sdense %dx%d dbias", s_tag (p), in_dim, units);
    s_compare (what, db, g_db, units, 1e-4);
    snprintf (what, sizeof what, "%sdense %dx%d din", s_tag (p), in_dim, units);
    s_compare (what, din, g_din, (size_t) n * in_dim, 1e-4);
    za_free (r_in), za_free (r_k), za_free (r_dout);
    float *host [] = {in, k, b, dout, out, dk, db, din};
    float *dev [] = {g_in, g_k, g_b, g_dout, g_out, g_dk, g_db, g_din};
    for (int i = 0; i < 8; i++) {
        za_free (host [i]);
        s_gpu->buffer_free (dev [i]);
    }
}

static void
s_pool_and_elementwise (void)
{
    za_pool2d_dims_t d;
    za_pool2d_dims (&d, 8, 26, 26, 32, 2, 2);
    size_t in_n = (size_t) 8 * 26 * 26 * 32, out_n = (size_t) 8 * 13 * 13 * 32;
    float *in = s_random (in_n, 9), *dout = s_random (out_n, 10);
    float *out = za_alloc (out_n * 4), *din = za_alloc (in_n * 4), *mask = za_alloc (in_n * 4);
    int32_t *argmax = za_alloc (out_n * 4);
    float *g_in = s_up (in, in_n * 4), *g_dout = s_up (dout, out_n * 4);
    float *g_out = s_up (out, out_n * 4), *g_din = s_up (din, in_n * 4);
    float *g_mask = s_up (mask, in_n * 4);
    int32_t *g_argmax = s_up (argmax, out_n * 4);
    s_cpu->maxpool_forward (&d, in, out, argmax);
    s_gpu->maxpool_forward (&d, g_in, g_out, g_argmax);
    s_compare ("maxpool 2x2 out", out, g_out, out_n, 0);
    s_cpu->maxpool_backward (&d, dout, argmax, din);
    s_gpu->maxpool_backward (&d, g_dout, g_argmax, g_din);
    s_compare ("maxpool 2x2 din", din, g_din, in_n, 0);
    //  Global average pool of the same input as 8 examples of 26*26 positions.
    s_cpu->avgpool_global_forward (8, 26 * 26, 32, in, out);
    s_gpu->avgpool_global_forward (8, 26 * 26, 32, g_in, g_out);
    s_compare ("globalavgpool out", out, g_out, (size_t) 8 * 32, 1e-6);
    s_cpu->avgpool_global_backward (8, 26 * 26, 32, dout, din);
    s_gpu->avgpool_global_backward (8, 26 * 26, 32, g_dout, g_din);
    s_compare ("globalavgpool din", din, g_din, in_n, 0);
    s_cpu->relu_forward (in_n, in, din);
    s_gpu->relu_forward (in_n, g_in, g_din);
    s_compare ("relu out", din, g_din, in_n, 0);
    s_cpu->dropout_forward (in_n, 0.3f, 77, in, mask, din);
    s_gpu->dropout_forward (in_n, 0.3f, 77, g_in, g_mask, g_din);
    s_compare ("dropout mask (same draws)", mask, g_mask, in_n, 0);
    s_compare ("dropout out", din, g_din, in_n, 0);
    float *host [] = {in, dout, out, din, mask, (float *) argmax};
    void *dev [] = {g_in, g_dout, g_out, g_din, g_mask, g_argmax};
    for (int i = 0; i < 6; i++) {
        za_free (host [i]);
        s_gpu->buffer_free (dev [i]);
    }
}

static void
s_softmax (void)
{
    enum { N = 1000, CLASSES = 10 };
    float *z = s_random (N * CLASSES, 11), *dz = za_alloc (N * CLASSES * 4);
    int32_t labels [N];
    for (int r = 0; r < N; r++)
        labels [r] = r % 97 == 0? 12: r % CLASSES;       //  a few invalid labels
    float *g_z = s_up (z, sizeof (float) * N * CLASSES), *g_dz = s_up (dz, N * CLASSES * 4);
    int32_t *g_labels = s_up (labels, sizeof labels);
    int right_c, right_g, bad_c, bad_g;
    double loss_c = s_cpu->softmax_xent (N, CLASSES, z, labels, dz, &right_c, &bad_c);
    double loss_g = s_gpu->softmax_xent (N, CLASSES, g_z, g_labels, g_dz, &right_g, &bad_g);
    s_compare ("softmax_xent dlogits", dz, g_dz, N * CLASSES, 1e-6);
    int ok = fabs (loss_c - loss_g) <= 1e-9 * fabs (loss_c) && right_c == right_g && bad_c == bad_g;
    printf ("%-40s loss %.9f vs %.9f, correct %d vs %d, invalid %d vs %d  %s\n", "softmax_xent",
            loss_c, loss_g, right_c, right_g, bad_c, bad_g, ok? "ok": "FAIL");
    s_failures += !ok;
    //  The same summed on the GPU, twice (a step's two micro-batches), read
    //  once after the sync, then cleared: a third read says zeros.
    s_gpu->softmax_xent_add (N, CLASSES, g_z, g_labels, g_dz);
    s_gpu->softmax_xent_add (N, CLASSES, g_z, g_labels, NULL);
    double sum_g, zero_g;
    int rc = s_gpu->sync ();
    rc |= s_gpu->loss_take (&sum_g, &right_g, &bad_g);
    s_compare ("softmax_xent_add dlogits", dz, g_dz, N * CLASSES, 1e-6);
    int right_0, bad_0;
    rc |= s_gpu->loss_take (&zero_g, &right_0, &bad_0);
    ok = rc == 0 && fabs (2 * loss_c - sum_g) <= 1e-9 * fabs (loss_c)
      && right_g == 2 * right_c && bad_g == 2 * bad_c && zero_g == 0 && right_0 == 0 && bad_0 == 0;
    printf ("%-40s loss %.9f vs %.9f, correct %d vs %d, invalid %d vs %d  %s\n",
            "softmax_xent_add x2", 2 * loss_c, sum_g, 2 * right_c, right_g, 2 * bad_c, bad_g,
            ok? "ok": "FAIL");
    s_failures += !ok;
    za_free (z), za_free (dz);
    s_gpu->buffer_free (g_z), s_gpu->buffer_free (g_dz), s_gpu->buffer_free (g_labels);
}

//  all_finite: 1 on finite numbers, 0 with one infinity or NaN among them.
static void
s_finite (void)
{
    size_t n = 100003;
    float *x = s_random (n, 11);
    float *g = s_up (x, n * 4);
    int clean = s_gpu->all_finite (n, g);
    x [n - 2] = INFINITY;
    s_gpu->upload (g, x, n * 4);
    int inf = s_gpu->all_finite (n, g);
    x [n - 2] = NAN;
    s_gpu->upload (g, x, n * 4);
    int nan = s_gpu->all_finite (n, g);
    int ok = clean == 1 && inf == 0 && nan == 0 && clean == s_cpu->all_finite (n - 3, x);
    printf ("%-40s %10zu floats  finite %d, inf %d, nan %d  %s\n", "all_finite", n, clean, inf,
            nan, ok? "ok": "FAIL");
    s_failures += !ok;
    za_free (x);
    s_gpu->buffer_free (g);
}

static void
s_optimizers (void)
{
    enum { N = 100003 };
    za_optimizer_t kinds [] = {ZA_OPT_SGD, ZA_OPT_MOMENTUM, ZA_OPT_ADAM, ZA_OPT_ADAGRAD};
    for (int k = 0; k < 4; k++) {
        za_optim_config_t c = za_optim_config_default (kinds [k]);
        float *w = s_random (N, 12), *g = s_random (N, 13);
        float *s0 = za_alloc (N * 4), *s1 = za_alloc (N * 4);
        float *slots [2] = {s0, s1};
        za_optim_init_slots (&c, slots, N);
        float *g_w = s_up (w, N * 4), *g_g = s_up (g, N * 4);
        float *g_slots [2] = {s_up (s0, N * 4), s_up (s1, N * 4)};
        for (int64_t step = 1; step <= 3; step++) {
            za_optim_apply (&c, step, w, g, slots, N);
            s_gpu->optim_apply (&c, step, g_w, g_g, g_slots, N);
        }
        char what [64];
        snprintf (what, sizeof what, "%s, 3 updates: values", za_optim_name (c.kind));
        s_compare (what, w, g_w, N, 1e-6);
        if (za_optim_slot_count (c.kind) > 0) {
            snprintf (what, sizeof what, "%s, 3 updates: slot 0", za_optim_name (c.kind));
            s_compare (what, s0, g_slots [0], N, 1e-6);
        }
        za_free (w), za_free (g), za_free (s0), za_free (s1);
        s_gpu->buffer_free (g_w), s_gpu->buffer_free (g_g);
        s_gpu->buffer_free (g_slots [0]), s_gpu->buffer_free (g_slots [1]);
    }
}

//  clip_by_global_norm over two runs with a gap between them: above the
//  clip, every run scaled as the CPU scales it, the gap untouched; under
//  it, nothing changes.
static void
s_clip (void)
{
    enum { N = 300007 };
    size_t offset [] = {0, 1000}, size [] = {900, N - 1000};
    for (int above = 1; above >= 0; above--) {
        float *g = s_random (N, 14);
        float *g_g = s_up (g, N * 4);
        float clip = above? 10.0f: 1e6f;
        za_optim_clip_by_global_norm (g, offset, size, 2, clip);
        s_gpu->clip_by_global_norm (g_g, offset, size, 2, clip);
        s_compare (above? "clip_by_global_norm, above the clip"
                        : "clip_by_global_norm, under the clip", g, g_g, N, 1e-6);
        za_free (g);
        s_gpu->buffer_free (g_g);
    }
}

int
main (void)
{
    za_device_t device;
    int first, count;
    za_device_parse ("cuda", &device);
    s_cpu = za_backend_cpu ();
    s_gpu = za_device_backend (&device, &first, &count);
    if (!s_gpu) {
        printf ("cuda_layers: skipped: %s\n", za_last_error ());
        return 77;
    }
    if (s_gpu->bind (0))
        return 1;
    const char *tf32 = getenv ("NVIDIA_TF32_OVERRIDE");
    int strict = tf32 && strcmp (tf32, "0") == 0;
    s_conv_tolerance = strict? 1e-4: 1e-2;
    const char *cudnn = getenv ("ZA_CUDNN");
    s_cudnn = !(cudnn && strcmp (cudnn, "0") == 0);
    printf ("cuda_layers: %s, %d device(s); fp32 convolutions %s\n", s_gpu->name, count,
            strict? "in strict fp32 (tolerance 1e-4)": "may use TF32 (tolerance 1e-2)");
    for (int p = ZA_PRECISION_FP32; p <= ZA_PRECISION_FP16; p++) {
        za_precision_t q = (za_precision_t) p;
        s_conv (q, 16, 28, 28, 1, 32, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU);
        s_conv (q, 16, 13, 13, 32, 64, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU);
        //  VGG16's: SAME and the same padding on every side (cuDNN takes it).
        s_conv (q, 4, 14, 14, 64, 64, 3, 1, ZA_PADDING_SAME, ZA_ACT_RELU);
        //  One more column of padding on the right (TensorFlow's SAME): cuDNN
        //  pads both sides alike, so im2col takes this one.
        s_conv (q, 4, 9, 8, 3, 5, 3, 2, ZA_PADDING_SAME, ZA_ACT_NONE);
        s_conv (q, 4, 8, 8, 2, 3, 4, 2, ZA_PADDING_SAME, ZA_ACT_RELU);
        s_dense (q, 64, 576, 64, ZA_ACT_RELU);
        s_dense (q, 64, 64, 10, ZA_ACT_NONE);
    }
    printf ("cuda_layers: bf16 %s, fp16 %s on this GPU\n",
            s_gpu->native (ZA_PRECISION_BF16)? "native": "converted by cuBLAS",
            s_gpu->native (ZA_PRECISION_FP16)? "native": "converted by cuBLAS");
    s_pool_and_elementwise ();
    s_softmax ();
    s_optimizers ();
    s_finite ();
    s_clip ();
    printf ("cuda_layers: %s\n", s_failures? "FAILED": "every layer within tolerance");
    return s_failures? 1: 0;
}
