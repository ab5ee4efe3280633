/*  test_precision.c: mixed precision (--precision): the rounding to bf16 and
    float16 by hand; each matrix-product layer's forward and backward in
    bf16 and float16 against fp32 on the same rounded inputs (tight: bf16 and
    float16 products are exact in fp32, so only the order of the sums
    differs) and against fp32 on the exact inputs (within what the rounding
    costs, stated below); the refusal on a CPU without bf16 (oneDNN's
    DNNL_MAX_CPU_ISA makes this CPU answer as one without); the seed CNN in
    mixed_bfloat16 against fp32 (5 epochs, same seed); a checkpoint written
    in one precision and read in the other.

    Under ctest it runs three times: as built (oneDNN's bf16 kernels, and on
    AMX zactor's own backward on the tiles, za_cpu_amx.c), with ZA_AMX=0
    (test_precision_dnnl: oneDNN's backward there too) and with ZA_DNNL=0
    (test_precision_rounded: the rounded inputs through OpenBLAS).          */
#include <criterion/criterion.h>

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/za_cpu_amx.h"
#include "../kernels/za_cpu_dnnl.h"
#include "../kernels/za_elem.h"
#include "za/za_checkpoint.h"
#include "za/za_estimator.h"
#include "za/za_input.h"
#include "za/za_kernels.h"
#include "za/za_util.h"
#include "za_test.h"

//  Stated tolerances, as the largest difference over the largest value of
//  the fp32 result: against fp32 on the same rounded inputs (the sums'
//  order alone), and against fp32 on exact inputs (each input off by up to
//  2^-9 in bf16, 2^-12 in float16, relative).
#define SAME_INPUTS_TOL 1e-4
#define BF16_TOL 1e-2
#define FP16_TOL 1.5e-3

static float
s_bf16 (float x)
{
    return za_elem_round (x, ZA_PRECISION_BF16);
}

Test (precision, rounding_by_hand)
{
    //  bf16: 8 significant bits, ties to even.
    cr_expect_eq (za_elem_bf16 (1.0f), 0x3f80);
    cr_expect_eq (s_bf16 (1.0f + 0x1p-8f), 1.0f, "a tie goes to the even 1.0");
    cr_expect_eq (s_bf16 (1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f, "a tie goes to the even");
    cr_expect_eq (s_bf16 (1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f, "above a tie: up");
    cr_expect_eq (s_bf16 (-2.5f), -2.5f);
    cr_expect (signbit (s_bf16 (-0.0f)) && s_bf16 (-0.0f) == 0);
    cr_expect (isinf (s_bf16 (FLT_MAX)), "the largest float rounds up to infinity");
    cr_expect (isinf (s_bf16 (INFINITY)) && isnan (s_bf16 (NAN)));
    //  float16: 11 significant bits, largest 65504, subnormals down to 2^-24.
    cr_expect_eq (za_elem_round_fp16 (65504.0f), 65504.0f);
    cr_expect_eq (za_elem_round_fp16 (65519.0f), 65504.0f);
    cr_expect (isinf (za_elem_round_fp16 (65520.0f)), "65520 is past float16's range");
    cr_expect (isinf (za_elem_round_fp16 (-1e6f)) && za_elem_round_fp16 (-1e6f) < 0);
    cr_expect_eq (za_elem_round_fp16 (1.0f + 0x1p-11f), 1.0f, "a tie goes to the even 1.0");
    cr_expect_eq (za_elem_round_fp16 (1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
    cr_expect_eq (za_elem_round_fp16 (0.1f), 0.0999755859375f);
    cr_expect_eq (za_elem_round_fp16 (0x1p-24f), 0x1p-24f, "the smallest subnormal");
    cr_expect_eq (za_elem_round_fp16 (0x1p-25f), 0.0f, "half of it ties to 0");
    cr_expect_eq (za_elem_round_fp16 (3 * 0x1p-25f), 0x1p-23f, "a subnormal tie to even");
    cr_expect_eq (za_elem_round_fp16 (5 * 0x1p-26f), 0x1p-24f);
    cr_expect (isnan (za_elem_round_fp16 (NAN)));
    cr_expect_eq (za_elem_round (1.0f + 0x1p-20f, ZA_PRECISION_FP32), 1.0f + 0x1p-20f);
}

Test (precision, parse_and_names)
{
    za_precision_t p;
    int is_auto;
    cr_expect_eq (za_precision_parse ("mixed_bfloat16", &p, &is_auto), 0);
    cr_expect (p == ZA_PRECISION_BF16 && !is_auto);
    cr_expect_eq (za_precision_parse ("mixed_float16", &p, &is_auto), 0);
    cr_expect_eq (p, ZA_PRECISION_FP16);
    cr_expect_eq (za_precision_parse ("float32", &p, &is_auto), 0);
    cr_expect_eq (p, ZA_PRECISION_FP32);
    cr_expect_eq (za_precision_parse ("auto", &p, &is_auto), 0);
    cr_expect (is_auto);
    cr_expect_eq (za_precision_parse ("half", &p, &is_auto), -1);
    cr_expect (strstr (za_last_error (), "mixed_bfloat16"), "%s", za_last_error ());
    cr_expect_str_eq (za_precision_text (ZA_PRECISION_BF16), "mixed_bfloat16");
    //  The policy --precision holds: each name and alias of its choices.
    const struct { const char *text; za_policy_t policy; } policies [] = {
        {"fp32", ZA_POLICY_FP32}, {"float32", ZA_POLICY_FP32}, {"bf16", ZA_POLICY_BF16},
        {"mixed_bfloat16", ZA_POLICY_BF16}, {"fp16", ZA_POLICY_FP16},
        {"mixed_float16", ZA_POLICY_FP16}, {"auto", ZA_POLICY_AUTO}, {NULL, ZA_POLICY_FP32}};
    for (size_t i = 0; i < sizeof policies / sizeof policies [0]; i++) {
        za_policy_t policy = ZA_POLICY_AUTO;
        cr_expect_eq (za_policy_parse (policies [i].text, &policy), 0, "%s", policies [i].text);
        cr_expect_eq (policy, policies [i].policy, "%s", policies [i].text);
    }
    za_policy_t policy;
    cr_expect_eq (za_policy_parse ("mixed", &policy), -1);
    cr_expect_eq (za_policy_parse ("bf1", &policy), -1);
    const za_backend_t *cpu = za_backend_cpu ();
    cr_expect_eq (za_backend_policy (cpu, ZA_POLICY_FP32), cpu);
    cr_expect_eq (za_backend_policy (cpu, ZA_POLICY_FP16)->precision, ZA_PRECISION_FP16);
    const za_backend_t *fp16 = za_backend_mixed (cpu, "mixed_float16");
    cr_assert_not_null (fp16, "float16 rounds on any CPU: %s", za_last_error ());
    cr_expect_eq (fp16->precision, ZA_PRECISION_FP16);
    cr_expect_eq (za_backend_mixed (fp16, "fp32"), cpu, "and back");
    cr_expect_eq (za_backend_mixed (cpu, NULL), cpu);
    cr_expect_eq (za_backend_mixed (cpu, "auto")->precision,
                  cpu->native (ZA_PRECISION_BF16)? ZA_PRECISION_BF16: ZA_PRECISION_FP32);
}

//  The table for `precision`, or NULL when this CPU refuses it (bf16
//  without the instructions).
static const za_backend_t *
s_mixed (za_precision_t precision)
{
    return za_backend_cpu ()->mixed (precision);
}

// ---------------------------------------------------------------------------
//  The layers against fp32

static float *
s_copy (const float *x, size_t n)
{
    float *y = (float *) za_alloc (n * sizeof (float));
    memcpy (y, x, n * sizeof (float));
    return y;
}

static float *
s_rounded (const float *x, size_t n, za_precision_t precision)
{
    float *y = s_copy (x, n);
    for (size_t i = 0; i < n; i++)
        y [i] = za_elem_round (x [i], precision);
    return y;
}

//  max |a - b| / max |b| over n.
static double
s_error (const float *a, const float *b, size_t n)
{
    double diff = 0, top = 1e-30;
    for (size_t i = 0; i < n; i++) {
        diff = fmax (diff, fabs ((double) a [i] - b [i]));
        top = fmax (top, fabs ((double) b [i]));
    }
    return diff / top;
}

//  One layer's results: out, then the gradients of a random dout.
typedef struct {
    float *out, *dkernel, *dbias, *din;
} s_results_t;

static void
s_results_free (s_results_t *r)
{
    za_free (r->out), za_free (r->dkernel), za_free (r->dbias), za_free (r->din);
}

//  Compares `low` (the mixed table's) with `same` (fp32 on rounded inputs)
//  and `exact` (fp32 on exact inputs), naming each result.
static void
s_compare (const char *what, const s_results_t *low, const s_results_t *same,
           const s_results_t *exact, const size_t *sizes, double tol)
{
    const char *names [] = {"out", "dkernel", "dbias", "din"};
    float *const lows [] = {low->out, low->dkernel, low->dbias, low->din};
    float *const sames [] = {same->out, same->dkernel, same->dbias, same->din};
    float *const exacts [] = {exact->out, exact->dkernel, exact->dbias, exact->din};
    for (int i = 0; i < 4; i++) {
        double e_same = s_error (lows [i], sames [i], sizes [i]);
        double e_exact = s_error (lows [i], exacts [i], sizes [i]);
        if (getenv ("ZA_TEST_VERBOSE"))
            fprintf (stderr, "%s %s: %.2e %.2e\n", what, names [i], e_same, e_exact);
        cr_expect_leq (e_same, SAME_INPUTS_TOL, "%s %s: %.2e from fp32 on the rounded inputs",
                       what, names [i], e_same);
        cr_expect_leq (e_exact, tol, "%s %s: %.2e from fp32 on the exact inputs", what,
                       names [i], e_exact);
    }
    //  Rounded it was: the products' results differ from exact fp32's.
    cr_expect_gt (s_error (low->out, exact->out, sizes [0]), 1e-6,
                  "%s: out equals fp32's: nothing was rounded", what);
}

typedef struct {
    int n, h, w, c, filters, kernel, stride;
    za_padding_t padding;
    za_act_t act;
    int first;                      //  a first layer: no input gradient asked
} s_conv_case_t;

//  Forward, then backward with the ReLU's mask taken from `mask` (the
//  exact run's output; NULL: its own), so that an output near 0 that the
//  rounding moved across cannot mask one run's gradient and not another's.
static s_results_t
s_conv_run (const za_backend_t *be, const za_conv2d_dims_t *d, const float *in,
            const float *kernel, const float *bias, za_act_t act, const float *dout_given,
            const float *mask, int first)
{
    size_t n_in = (size_t) d->n * d->h * d->w * d->c, n_out = (size_t) d->n * d->oh * d->ow * d->oc;
    size_t n_k = (size_t) d->kh * d->kw * d->c * d->oc, n_cols = za_conv2d_cols_floats (d);
    s_results_t r = {
        (float *) za_alloc (n_out * sizeof (float)), (float *) za_alloc (n_k * sizeof (float)),
        (float *) za_alloc ((size_t) d->oc * sizeof (float)),
        (float *) za_alloc (n_in * sizeof (float))
    };
    float *cols = (float *) za_alloc (n_cols * sizeof (float));
    float *dcols = (float *) za_alloc (n_cols * sizeof (float));
    float *dout = s_copy (dout_given, n_out);
    //  The gradients add into what the buffers hold (a batch's earlier
    //  micro-batches, earlier layers): start them off zero.
    for (size_t i = 0; i < n_k; i++)
        r.dkernel [i] = 0.5f;
    for (int i = 0; i < d->oc; i++)
        r.dbias [i] = 0.5f;
    be->conv2d_forward (d, in, kernel, bias, act, cols, r.out);
    be->conv2d_backward (d, in, cols, kernel, mask? mask: r.out, act, dout, r.dkernel, r.dbias,
                         dcols, first? NULL: r.din);
    za_free (cols), za_free (dcols), za_free (dout);
    return r;
}

static void
s_conv_check (za_precision_t precision, const s_conv_case_t *k, uint64_t seed)
{
    const za_backend_t *low = s_mixed (precision), *fp32 = za_backend_cpu ();
    cr_assert_not_null (low);
    za_conv2d_dims_t d;
    cr_assert_eq (za_conv2d_dims (&d, k->n, k->h, k->w, k->c, k->filters, k->kernel, k->stride,
                                  k->padding), 0);
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    size_t n_in = (size_t) d.n * d.h * d.w * d.c, n_out = (size_t) d.n * d.oh * d.ow * d.oc;
    size_t n_k = (size_t) d.kh * d.kw * d.c * d.oc;
    float *in = za_test_random (n_in, &rng), *kernel = za_test_random (n_k, &rng);
    float *bias = za_test_random ((size_t) d.oc, &rng), *dout = za_test_random (n_out, &rng);
    float *r_in = s_rounded (in, n_in, precision), *r_kernel = s_rounded (kernel, n_k, precision);
    s_results_t exact = s_conv_run (fp32, &d, in, kernel, bias, k->act, dout, NULL, k->first);
    s_results_t mixed = s_conv_run (low, &d, in, kernel, bias, k->act, dout, exact.out,
                                    k->first);
    //  fp32 on the rounded inputs: the output's gradient rounded too, but the
    //  bias's gradient is summed from the exact one (as the mixed layer does).
    float *r_dout = s_rounded (dout, n_out, precision);
    s_results_t same = s_conv_run (fp32, &d, r_in, r_kernel, bias, k->act, r_dout, exact.out,
                                   k->first);
    memcpy (same.dbias, exact.dbias, (size_t) d.oc * sizeof (float));
    char what [96];
    snprintf (what, sizeof what, "%s conv %dx%dx%d k%d s%d %s -> %d%s",
              za_precision_text (precision), k->h, k->w, k->c, k->kernel, k->stride,
              k->padding == ZA_PADDING_SAME? "same": "valid", k->filters,
              k->first? " (first layer)": "");
    size_t sizes [] = {n_out, n_k, (size_t) d.oc, k->first? 0: n_in};
    s_compare (what, &mixed, &same, &exact, sizes,
               precision == ZA_PRECISION_BF16? BF16_TOL: FP16_TOL);
    s_results_free (&mixed), s_results_free (&same), s_results_free (&exact);
    za_free (in), za_free (kernel), za_free (bias), za_free (dout), za_free (r_in);
    za_free (r_kernel), za_free (r_dout);
}

static const s_conv_case_t s_conv_cases [] = {
    {4, 28, 28, 1, 32, 3, 1, ZA_PADDING_SAME, ZA_ACT_RELU, 0},  //  the seed CNN's first
    {4, 14, 14, 32, 64, 3, 1, ZA_PADDING_SAME, ZA_ACT_RELU, 0}, //  and second
    {3, 11, 9, 3, 8, 5, 2, ZA_PADDING_VALID, ZA_ACT_NONE, 0},
    {2, 8, 8, 16, 24, 1, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 0},
    {2, 9, 9, 8, 16, 4, 2, ZA_PADDING_SAME, ZA_ACT_RELU, 0},
    //  On AMX zactor's tiles (a stride of 1, channels and filters in 32s):
    //  rows of an odd count of outputs, a second block of examples only
    //  partly filled, two blocks of channels; the input's gradient straight
    //  into din (VALID) and through the frame (SAME).
    {20, 13, 13, 32, 64, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 0},   //  the seed CNN's second
    {3, 9, 7, 64, 32, 3, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 0},
    {17, 6, 5, 64, 32, 2, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 0},
    {2, 7, 6, 32, 32, 2, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 0},   //  even SAME: pad below only
    {5, 4, 3, 32, 64, 1, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 0},
    {3, 8, 8, 32, 32, 3, 1, ZA_PADDING_SAME, ZA_ACT_RELU, 1},   //  no input gradient
    //  Small planes: in bf16 on AVX512-BF16 alone (and on AMX with ZA_AMX=0
    //  or channels not in 32s) the kernel's gradient as a matmul over im2col
    //  (rounded as it is copied), the input's as a matmul and col2im.
    {4, 5, 5, 64, 64, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 0},   //  the seed CNN's third
    {2, 4, 4, 8, 16, 3, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 1},
    {3, 6, 6, 16, 8, 3, 2, ZA_PADDING_SAME, ZA_ACT_RELU, 0},
    //  First layers (no input gradient): on AVX-512 the CPU's one-pass loops.
    {4, 28, 28, 1, 32, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 1},
    {3, 13, 11, 1, 48, 3, 2, ZA_PADDING_SAME, ZA_ACT_RELU, 1},
    {2, 9, 9, 3, 16, 3, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 1},
    //  Rows of an odd count of outputs: in bf16 the loops take outputs two
    //  at a time (AVX512-BF16's dot products), the last of a row alone.
    {2, 10, 9, 1, 16, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 1},
    {3, 7, 7, 1, 32, 3, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 1},
};

static void
s_conv_all (za_precision_t precision)
{
    for (size_t i = 0; i < sizeof s_conv_cases / sizeof s_conv_cases [0]; i++)
        s_conv_check (precision, &s_conv_cases [i], 100 + i);
}

static s_results_t
s_dense_run (const za_backend_t *be, int n, int in_dim, int units, const float *in,
             const float *kernel, const float *bias, za_act_t act, const float *dout_given,
             const float *mask)
{
    s_results_t r = {
        (float *) za_alloc ((size_t) n * units * sizeof (float)),
        (float *) za_alloc ((size_t) in_dim * units * sizeof (float)),
        (float *) za_alloc ((size_t) units * sizeof (float)),
        (float *) za_alloc ((size_t) n * in_dim * sizeof (float))
    };
    float *dout = s_copy (dout_given, (size_t) n * units);
    be->dense_forward (n, in_dim, units, in, kernel, bias, act, r.out);
    be->dense_backward (n, in_dim, units, in, kernel, mask? mask: r.out, act, dout, r.dkernel,
                        r.dbias, r.din);
    za_free (dout);
    return r;
}

static void
s_dense_check (za_precision_t precision, int n, int in_dim, int units, za_act_t act,
               uint64_t seed)
{
    const za_backend_t *low = s_mixed (precision), *fp32 = za_backend_cpu ();
    cr_assert_not_null (low);
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    size_t n_in = (size_t) n * in_dim, n_k = (size_t) in_dim * units, n_out = (size_t) n * units;
    float *in = za_test_random (n_in, &rng), *kernel = za_test_random (n_k, &rng);
    float *bias = za_test_random ((size_t) units, &rng), *dout = za_test_random (n_out, &rng);
    float *r_in = s_rounded (in, n_in, precision), *r_kernel = s_rounded (kernel, n_k, precision);
    float *r_dout = s_rounded (dout, n_out, precision);
    s_results_t exact = s_dense_run (fp32, n, in_dim, units, in, kernel, bias, act, dout, NULL);
    s_results_t mixed = s_dense_run (low, n, in_dim, units, in, kernel, bias, act, dout,
                                     exact.out);
    s_results_t same = s_dense_run (fp32, n, in_dim, units, r_in, r_kernel, bias, act, r_dout,
                                    exact.out);
    memcpy (same.dbias, exact.dbias, (size_t) units * sizeof (float));
    char what [96];
    snprintf (what, sizeof what, "%s dense %d x %d -> %d", za_precision_text (precision), n,
              in_dim, units);
    size_t sizes [] = {n_out, n_k, (size_t) units, n_in};
    s_compare (what, &mixed, &same, &exact, sizes,
               precision == ZA_PRECISION_BF16? BF16_TOL: FP16_TOL);
    s_results_free (&mixed), s_results_free (&same), s_results_free (&exact);
    za_free (in), za_free (kernel), za_free (bias), za_free (dout), za_free (r_in);
    za_free (r_kernel), za_free (r_dout);
}

static void
s_dense_all (za_precision_t precision)
{
    s_dense_check (precision, 32, 3136, 128, ZA_ACT_RELU, 7);  //  the seed CNN's dense
    s_dense_check (precision, 32, 128, 10, ZA_ACT_NONE, 8);    //  and its logits
    s_dense_check (precision, 5, 37, 3, ZA_ACT_RELU, 9);
}

Test (precision, layers_bf16_against_fp32)
{
    if (!s_mixed (ZA_PRECISION_BF16))
        cr_skip_test ("this CPU has no bf16 instructions");
    s_conv_all (ZA_PRECISION_BF16);
    s_dense_all (ZA_PRECISION_BF16);
    //  Where oneDNN multiplies on AMX, the cases above went to zactor's
    //  tiles, unless ZA_AMX=0 says otherwise: not silently to oneDNN.
    const char *amx = getenv ("ZA_AMX");
    za_conv2d_dims_t d;
    cr_assert_eq (za_conv2d_dims (&d, 20, 13, 13, 32, 64, 3, 1, ZA_PADDING_VALID), 0);
    cr_assert_eq (za_cpu_amx_conv2d_scratch (&d) > 0,
                  za_cpu_dnnl_amx () && za_cpu_dnnl_on () && !(amx && strcmp (amx, "0") == 0),
                  "AMX's tiles taken or declined against what oneDNN says of this CPU");
}

//  A NaN in a first layer's output gradient whose payload is all in the low
//  half (rounding to bf16 by adding would carry it into an infinity) gives
//  NaN kernel gradients in bf16, as in fp32; the other filters' stay finite.
Test (precision, a_nan_gradient_stays_nan_in_bf16)
{
    const za_backend_t *low = s_mixed (ZA_PRECISION_BF16);
    if (!low)
        cr_skip_test ("this CPU has no bf16 instructions");
    za_conv2d_dims_t d;
    cr_assert_eq (za_conv2d_dims (&d, 1, 6, 6, 1, 16, 3, 1, ZA_PADDING_VALID), 0);
    enum { OUT = 4 * 4 * 16 };
    float in [36], kernel [9 * 16], bias [16] = {0}, out [OUT], dout [OUT];
    float dkernel [9 * 16] = {0}, dbias [16] = {0};
    float *cols = (float *) za_alloc (za_conv2d_cols_floats (&d) * sizeof (float));
    for (int i = 0; i < 36; i++)
        in [i] = 0.5f;
    for (int i = 0; i < 9 * 16; i++)
        kernel [i] = 0.125f * (float) (i % 5) - 0.25f;
    low->conv2d_forward (&d, in, kernel, bias, ZA_ACT_NONE, cols, out);
    for (int i = 0; i < OUT; i++)
        dout [i] = 0.25f;
    dout [0] = za_elem_from_bits (0x7f800001u);
    low->conv2d_backward (&d, in, cols, kernel, out, ZA_ACT_NONE, dout, dkernel, dbias, NULL,
                          NULL);
    for (int t = 0; t < 9; t++) {
        cr_expect (isnan (dkernel [t * 16]), "tap %d of filter 0: %g", t, dkernel [t * 16]);
        cr_expect (isfinite (dkernel [t * 16 + 1]), "tap %d of filter 1: %g", t,
                   dkernel [t * 16 + 1]);
    }
    cr_expect (isnan (dbias [0]) && isfinite (dbias [1]), "%g %g", dbias [0], dbias [1]);
    za_free (cols);
}

Test (precision, layers_fp16_against_fp32)
{
    s_conv_all (ZA_PRECISION_FP16);
    s_dense_all (ZA_PRECISION_FP16);
}

// ---------------------------------------------------------------------------
//  The refusal, and zactor-run

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

//  oneDNN reads DNNL_MAX_CPU_ISA once, at its first question: set before
//  anything in this process asks (Criterion runs each test in its own).
Test (precision, refused_without_bf16_instructions, .fini = s_teardown)
{
    setenv ("DNNL_MAX_CPU_ISA", "AVX512_CORE", 1);
    const za_backend_t *cpu = za_backend_cpu ();
    cr_expect_eq (cpu->native (ZA_PRECISION_BF16), 0);
    cr_expect_null (cpu->mixed (ZA_PRECISION_BF16));
    cr_expect (strstr (za_last_error (), "no bf16 instructions"), "%s", za_last_error ());
    cr_expect_eq (za_backend_mixed (cpu, "auto"), cpu, "auto stays fp32 there");
    cr_expect_not_null (cpu->mixed (ZA_PRECISION_FP16));
    cr_expect_eq (cpu->native (ZA_PRECISION_FP16), 0, "float16 is rounded on a CPU");

    //  zactor-run says it once, before reading any data, and exits 2.
    za_test_dir_create ("za_precision_test");
    char *dir = za_test_path ("run");
    const char *args [] = {"--model", "cnn", "--precision", "mixed_bfloat16", "--max-steps", "5",
                           "--model-dir", dir, NULL};
    za_test_result_t r = za_test_run (args, 60);
    cr_expect_eq (r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect_eq (za_test_count (r.err, "no bf16 instructions"), 1, "%s", r.err);
    za_test_result_free (&r);
    const char *bad [] = {"--model", "cnn", "--precision", "half", "--max-steps", "5",
                          "--model-dir", dir, NULL};
    r = za_test_run (bad, 60);
    cr_expect_eq (r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
    cr_expect (strstr (r.err, "--precision: 'half' is not one of fp32,mixed_bfloat16,"
                              "mixed_float16,auto"), "%s", r.err);
    za_test_result_free (&r);
    free (dir);
}

//  A checkpoint is fp32 whatever the precision: one written in mixed
//  precision evaluates in fp32 alike and resumes in either.
Test (precision, checkpoint_across_precisions, .fini = s_teardown)
{
    const char *low = s_mixed (ZA_PRECISION_BF16)? "mixed_bfloat16": "mixed_float16";
    za_test_dir_create ("za_precision_test");
    char *dir = za_test_path ("run");
    const char *train [] = {"--model", "cnn", "--precision", low, "--max-steps", "300",
                            "--batch-size", "64", "--threads", "2", "--seed", "3",
                            "--model-dir", dir, NULL};
    za_test_result_t r = za_test_run (train, 300);
    cr_assert_eq (r.exit_code, 0, "%s: exit %d: %s", low, r.exit_code, r.err);
    double mixed = za_test_accuracy (r.out);
    za_test_result_free (&r);
    int64_t *steps = NULL;
    cr_assert_eq (za_checkpoint_list (dir, &steps), 1);
    cr_assert_eq (steps [0], 300);
    free (steps);

    //  The same checkpoint, evaluated in fp32 (nothing left to train).
    const char *again [] = {"--model", "cnn", "--precision", "fp32", "--max-steps", "300",
                            "--batch-size", "64", "--threads", "2", "--seed", "3",
                            "--model-dir", dir, NULL};
    r = za_test_run (again, 300);
    cr_assert_eq (r.exit_code, 0, "fp32: exit %d: %s", r.exit_code, r.err);
    double fp32 = za_test_accuracy (r.out);
    za_test_result_free (&r);
    cr_expect_gt (mixed, 0.6, "300 steps in %s: %.4f", low, mixed);
    cr_expect_leq (fabs (mixed - fp32), 0.01, "%s %.4f, the same weights in fp32 %.4f", low,
                   mixed, fp32);

    //  And resumed in fp32, on from step 300.
    const char *more [] = {"--model", "cnn", "--precision", "fp32", "--max-steps", "350",
                           "--batch-size", "64", "--threads", "2", "--seed", "3",
                           "--model-dir", dir, NULL};
    r = za_test_run (more, 300);
    cr_assert_eq (r.exit_code, 0, "fp32 resumed: exit %d: %s", r.exit_code, r.err);
    cr_expect (strstr (r.out, "at step 350"), "%s", r.out);
    za_test_result_free (&r);
    free (dir);
}

//  What the input_fn streams: the examples shuffled, repeated.
static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    (void) context;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 32;
    config.shuffle_buffer = 512;
    config.seed = 5;
    config.epochs = -1;
    return za_input_new ((const za_dataset_t *) arg, &config);
}

//  The last line of model_dir/metrics.jsonl; decref it.
static json_t *
s_last_metrics (const char *model_dir)
{
    char *path = za_test_join (model_dir, "metrics.jsonl");
    char *text = za_test_read_file (path, NULL);
    char *last = text;
    for (char *p = text; *p; p++)
        if (*p == '\n' && p [1])
            last = p + 1;
    json_error_t error;
    json_t *line = json_loads (last, JSON_DISABLE_EOF_CHECK, &error);
    cr_assert_not_null (line, "%s: %s", path, error.text);
    free (text), free (path);
    return line;
}

//  A loss scale of 2^40 makes the output's gradient overflow float16 (the
//  logits' gradient, up to 1/32 of a batch of 32, times 2^40): the first
//  step changes nothing and halves the scale, and so on until the
//  gradients fit; then training goes on.
Test (precision, loss_scale_skips_an_overflowing_step, .fini = s_teardown)
{
    za_test_dir_create ("za_precision_test");
    char *dir = za_test_path ("run");
    za_dataset_t *train = za_test_fashion ("train", 512);
    za_stack_spec_t spec;
    int hidden [] = {64};
    cr_assert_eq (za_dnn_classifier_spec (&spec, hidden, 1, 10), 0, "%s", za_last_error ());
    za_run_config_t config = za_run_config_default ();
    config.model_dir = dir;
    config.threads = 1;
    config.progress = 0;
    config.log_step_count_steps = 0;
    config.save_summary_steps = 1;
    config.precision = ZA_POLICY_FP16;
    config.initial_loss_scale = 0x1p40f;
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_input_shape_t shape = {train->height, train->width, train->channels};
    za_estimator_t *est = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim, &config);
    cr_assert_not_null (est, "%s", za_last_error ());
    size_t total = za_estimator_vars (est)->total;
    float *before = s_copy (za_estimator_values (est), total);

    cr_assert_eq (za_estimator_train (est, s_input_fn, train, 1), 0, "%s", za_last_error ());
    cr_expect_eq (za_estimator_global_step (est), 1, "a skipped step is still a step");
    cr_expect_eq (memcmp (before, za_estimator_values (est), total * sizeof (float)), 0,
                  "an overflowing step changed the weights");
    json_t *line = s_last_metrics (dir);
    cr_expect_eq (json_integer_value (json_object_get (line, "skipped_steps")), 1);
    cr_expect_eq (json_number_value (json_object_get (line, "loss_scale")), 0x1p39, "%s",
                  json_dumps (line, 0));
    json_decref (line);

    //  Halved until the gradients fit, then trained.
    cr_assert_eq (za_estimator_train (est, s_input_fn, train, 60), 0, "%s", za_last_error ());
    line = s_last_metrics (dir);
    json_int_t skipped = json_integer_value (json_object_get (line, "skipped_steps"));
    double scale = json_number_value (json_object_get (line, "loss_scale"));
    cr_expect (skipped > 1 && skipped < 40, "%d steps skipped", (int) skipped);
    cr_expect_eq (scale, ldexp (1.0, 40 - (int) skipped), "scale %g after %d skips", scale,
                  (int) skipped);
    cr_expect_lt (json_number_value (json_object_get (line, "loss")), 2.0,
                  "the loss after the skips: %g", json_number_value (json_object_get (line, "loss")));
    cr_expect_neq (memcmp (before, za_estimator_values (est), total * sizeof (float)), 0);
    json_decref (line);
    cr_assert_eq (za_estimator_train (est, s_input_fn, train, 80), 0, "%s", za_last_error ());
    line = s_last_metrics (dir);
    cr_expect_eq (json_integer_value (json_object_get (line, "skipped_steps")), skipped,
                  "skips went on after the scale fit");
    json_decref (line);
    za_estimator_destroy (&est);
    //  The checkpoint keeps the scale: a new process that starts at 2^40
    //  again takes the checkpoint's, and its next step skips nothing.
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (dir, &found);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    const za_ckpt_tensor_t *kept = za_checkpoint_find (ckpt, "current_loss_scale");
    cr_assert (kept && kept->dtype == ZA_DTYPE_F32 && kept->ndim == 0);
    float kept_scale;
    memcpy (&kept_scale, kept->data, sizeof kept_scale);
    cr_expect_eq (kept_scale, (float) scale);
    cr_expect_not_null (za_checkpoint_find (ckpt, "good_steps"));
    za_checkpoint_destroy (&ckpt);
    est = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim, &config);
    cr_assert_not_null (est, "%s", za_last_error ());
    cr_assert_eq (za_estimator_train (est, s_input_fn, train, 81), 0, "%s", za_last_error ());
    line = s_last_metrics (dir);
    cr_expect_eq (json_integer_value (json_object_get (line, "skipped_steps")), 0,
                  "the restored process skipped a step: its scale was not restored");
    cr_expect_eq (json_number_value (json_object_get (line, "loss_scale")), scale);
    json_decref (line);
    za_estimator_destroy (&est);
    za_free (before);
    za_dataset_destroy (&train);
    free (dir);
}
