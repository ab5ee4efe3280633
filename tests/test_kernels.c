/*  test_kernels.c: every layer's backward against finite differences of its
    forward, over several shapes, strides and paddings; plus exact checks of
    forward values a person can compute by hand.                            */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_kernels.h"
#include "za/za_tensor.h"
#include "../kernels/za_cpu_dnnl.h"
#include "../kernels/za_elem.h"
#include "za_test.h"

#define FD_EPS 1e-2
#define REL_TOL 2e-2
#define ABS_TOL 2e-3

static void
s_expect_close (double analytic, double numeric, const char *what, size_t index)
{
    double diff = fabs (analytic - numeric);
    double scale = fmax (fabs (analytic), fabs (numeric));
    cr_expect (diff <= ABS_TOL || diff <= REL_TOL * scale,
               "%s[%zu]: analytic %.6f vs numeric %.6f", what, index, analytic, numeric);
}

// ---------------------------------------------------------------------------
//  conv2d: L = sum (out * R)

typedef struct {
    za_conv2d_dims_t d;
    za_act_t act;
    float *in, *kernel, *bias, *cols, *out, *r;
} s_conv_case_t;

static double
s_conv_loss (s_conv_case_t *c)
{
    const za_backend_t *be = za_backend_cpu ();
    be->conv2d_forward (&c->d, c->in, c->kernel, c->bias, c->act, c->cols, c->out);
    size_t n = (size_t) c->d.n * c->d.oh * c->d.ow * c->d.oc;
    double loss = 0;
    for (size_t i = 0; i < n; i++)
        loss += (double) c->out [i] * c->r [i];
    return loss;
}

static void
s_check_numeric (const char *what, float *x, const float *grad, size_t n,
                 double (*loss) (void *), void *arg, za_rng_t *rng)
{
    //  Up to 40 probes per tensor keep the suite fast yet cover every region.
    int probes = n < 40? (int) n: 40;
    for (int p = 0; p < probes; p++) {
        size_t i = n < 40? (size_t) p: za_rng_below (rng, (uint32_t) n);
        float saved = x [i];
        x [i] = saved + (float) FD_EPS;
        double up = loss (arg);
        x [i] = saved - (float) FD_EPS;
        double down = loss (arg);
        x [i] = saved;
        s_expect_close (grad [i], (up - down) / (2 * FD_EPS), what, i);
    }
}

static double
s_conv_loss_thunk (void *arg)
{
    return s_conv_loss ((s_conv_case_t *) arg);
}

//  first: no input gradient is asked (a first layer's backward), and the
//  gradients are checked to add into what dkernel and dbias held.
static void
s_conv_gradcheck_as (int first, int n, int h, int w, int c, int filters, int k, int stride,
                     za_padding_t padding, za_act_t act, uint64_t seed)
{
    const za_backend_t *be = za_backend_cpu ();
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    s_conv_case_t cc = {.act = act};
    cr_assert_eq (za_conv2d_dims (&cc.d, n, h, w, c, filters, k, stride, padding), 0);
    size_t in_n = (size_t) n * h * w * c, k_n = (size_t) k * k * c * filters;
    size_t out_n = (size_t) n * cc.d.oh * cc.d.ow * filters;
    size_t cols_n = za_conv2d_cols_floats (&cc.d);
    cc.in = za_test_random (in_n, &rng);
    cc.kernel = za_test_random (k_n, &rng);
    cc.bias = za_test_random ((size_t) filters, &rng);
    cc.cols = (float *) za_alloc (cols_n * sizeof (float));
    cc.out = (float *) za_alloc (out_n * sizeof (float));
    cc.r = za_test_random (out_n, &rng);
    float *dout = (float *) za_alloc (out_n * sizeof (float));
    float *dkernel = (float *) za_alloc (k_n * sizeof (float));
    float *dbias = (float *) za_alloc ((size_t) filters * sizeof (float));
    float *dcols = (float *) za_alloc (cols_n * sizeof (float));
    float *din = (float *) za_alloc (in_n * sizeof (float));
    s_conv_loss (&cc);
    memcpy (dout, cc.r, out_n * sizeof (float));
    be->conv2d_backward (&cc.d, cc.in, cc.cols, cc.kernel, cc.out, act, dout, dkernel, dbias,
                         dcols, first? NULL: din);
    s_check_numeric ("dkernel", cc.kernel, dkernel, k_n, s_conv_loss_thunk, &cc, &rng);
    s_check_numeric ("dbias", cc.bias, dbias, (size_t) filters, s_conv_loss_thunk, &cc, &rng);
    if (!first)
        s_check_numeric ("din", cc.in, din, in_n, s_conv_loss_thunk, &cc, &rng);
    else {
        //  Once more from the same forward: the gradients add up to twice.
        float *once = (float *) za_alloc ((k_n + (size_t) filters) * sizeof (float));
        memcpy (once, dkernel, k_n * sizeof (float));
        memcpy (once + k_n, dbias, (size_t) filters * sizeof (float));
        s_conv_loss (&cc);
        memcpy (dout, cc.r, out_n * sizeof (float));
        be->conv2d_backward (&cc.d, cc.in, cc.cols, cc.kernel, cc.out, act, dout, dkernel,
                             dbias, dcols, NULL);
        for (size_t i = 0; i < k_n + (size_t) filters; i++) {
            float twice = i < k_n? dkernel [i]: dbias [i - k_n];
            cr_expect (fabsf (twice - 2 * once [i]) <= 1e-5f * (1 + fabsf (twice)),
                       "gradient %zu: %g after two calls, %g after one", i, twice, once [i]);
        }
        za_free (once);
    }
    za_free (cc.in), za_free (cc.kernel), za_free (cc.bias), za_free (cc.cols);
    za_free (cc.out), za_free (cc.r), za_free (dout), za_free (dkernel), za_free (dbias);
    za_free (dcols), za_free (din);
}

static void
s_conv_gradcheck (int n, int h, int w, int c, int filters, int k, int stride,
                  za_padding_t padding, za_act_t act, uint64_t seed)
{
    s_conv_gradcheck_as (0, n, h, w, c, filters, k, stride, padding, act, seed);
}

Test (conv2d, gradient_valid_stride1)
{
    s_conv_gradcheck (2, 6, 5, 3, 4, 3, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 1);
}

Test (conv2d, gradient_same_stride1_relu)
{
    s_conv_gradcheck (2, 5, 5, 2, 3, 3, 1, ZA_PADDING_SAME, ZA_ACT_RELU, 2);
}

Test (conv2d, gradient_valid_stride2)
{
    s_conv_gradcheck (1, 7, 8, 2, 3, 3, 2, ZA_PADDING_VALID, ZA_ACT_NONE, 3);
}

Test (conv2d, gradient_same_stride2_even_kernel)
{
    s_conv_gradcheck (3, 6, 7, 1, 2, 2, 2, ZA_PADDING_SAME, ZA_ACT_NONE, 4);
}

Test (conv2d, gradient_same_kernel5_single_channel)
{
    s_conv_gradcheck (2, 9, 9, 1, 5, 5, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 5);
}

//  K = kh*kw*c <= 32 and filters a multiple of 8 take the direct (non-GEMM)
//  path of the CPU back end, as the first layer of the seed CNN does.
Test (conv2d, gradient_direct_path_first_layer)
{
    s_conv_gradcheck (2, 8, 7, 1, 32, 3, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 7);
}

Test (conv2d, gradient_direct_path_same_stride2_relu)
{
    s_conv_gradcheck (2, 6, 6, 3, 16, 3, 2, ZA_PADDING_SAME, ZA_ACT_RELU, 8);
}

Test (conv2d, gradient_direct_path_64_filters)
{
    s_conv_gradcheck (1, 5, 5, 2, 64, 2, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 9);
}

//  A first layer's backward (no input gradient asked) against the same
//  layer's with it (which takes the path every other layer takes): the
//  same kernel and bias gradients, ReLU masks included, where finite
//  differences would cross the ReLU's kinks.
static void
s_conv_first_as_full (int n, int h, int w, int filters, int stride, za_padding_t padding,
                      za_act_t act, uint64_t seed)
{
    const za_backend_t *be = za_backend_cpu ();
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    za_conv2d_dims_t d;
    cr_assert_eq (za_conv2d_dims (&d, n, h, w, 1, filters, 3, stride, padding), 0);
    size_t in_n = (size_t) n * h * w, k_n = (size_t) 9 * filters;
    size_t out_n = (size_t) n * d.oh * d.ow * filters, cols_n = za_conv2d_cols_floats (&d);
    float *in = za_test_random (in_n, &rng), *kernel = za_test_random (k_n, &rng);
    float *bias = za_test_random ((size_t) filters, &rng), *r = za_test_random (out_n, &rng);
    float *out = (float *) za_alloc (out_n * sizeof (float));
    float *cols = (float *) za_alloc (cols_n * sizeof (float));
    float *dcols = (float *) za_alloc (cols_n * sizeof (float));
    float *din = (float *) za_alloc (in_n * sizeof (float));
    float *dout = (float *) za_alloc (out_n * sizeof (float));
    float *dk [2], *db [2];
    for (int way = 0; way < 2; way++) {
        dk [way] = (float *) za_alloc (k_n * sizeof (float));
        db [way] = (float *) za_alloc ((size_t) filters * sizeof (float));
        be->conv2d_forward (&d, in, kernel, bias, act, cols, out);
        memcpy (dout, r, out_n * sizeof (float));
        be->conv2d_backward (&d, in, cols, kernel, out, act, dout, dk [way], db [way], dcols,
                             way? din: NULL);
    }
    cr_expect_gt (fabs (dk [0][0]) + fabs (db [0][0]), 0, "something was summed");
    for (size_t i = 0; i < k_n; i++)
        cr_expect (fabsf (dk [0][i] - dk [1][i]) <= 1e-4f * (1 + fabsf (dk [1][i])),
                   "%d filters: dkernel[%zu] %g, with din %g", filters, i, dk [0][i], dk [1][i]);
    for (int i = 0; i < filters; i++)
        cr_expect (fabsf (db [0][i] - db [1][i]) <= 1e-4f * (1 + fabsf (db [1][i])),
                   "%d filters: dbias[%d] %g, with din %g", filters, i, db [0][i], db [1][i]);
    za_free (in), za_free (kernel), za_free (bias), za_free (r), za_free (out), za_free (cols);
    za_free (dcols), za_free (din), za_free (dout);
    for (int way = 0; way < 2; way++)
        za_free (dk [way]), za_free (db [way]);
}

//  A first layer (no input gradient) of 3x3 on one channel: on an AVX-512
//  CPU the CPU back end's one-pass loops (za_cpu_direct.c), 16, 32, 48 and 64
//  filters, with and without padding and stride.
Test (conv2d, gradient_first_layer_3x3_one_channel)
{
    s_conv_gradcheck_as (1, 2, 8, 7, 1, 32, 3, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 10);
    s_conv_gradcheck_as (1, 2, 7, 6, 1, 16, 3, 2, ZA_PADDING_SAME, ZA_ACT_NONE, 11);
    s_conv_gradcheck_as (1, 3, 6, 9, 1, 48, 3, 1, ZA_PADDING_SAME, ZA_ACT_NONE, 12);
    s_conv_gradcheck_as (1, 1, 5, 5, 1, 64, 3, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 13);
    s_conv_first_as_full (4, 28, 28, 32, 1, ZA_PADDING_VALID, ZA_ACT_RELU, 14);
    s_conv_first_as_full (2, 9, 8, 48, 2, ZA_PADDING_SAME, ZA_ACT_RELU, 15);
    s_conv_first_as_full (1, 7, 6, 64, 1, ZA_PADDING_SAME, ZA_ACT_RELU, 16);
    s_conv_first_as_full (3, 6, 7, 16, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 17);
}

Test (conv2d, gradient_1x1)
{
    s_conv_gradcheck (2, 4, 4, 6, 5, 1, 1, ZA_PADDING_VALID, ZA_ACT_NONE, 6);
}

Test (conv2d, dims_follow_tensorflow)
{
    za_conv2d_dims_t d;
    cr_assert_eq (za_conv2d_dims (&d, 1, 28, 28, 1, 32, 3, 1, ZA_PADDING_VALID), 0);
    cr_expect (d.oh == 26 && d.ow == 26 && d.pad_top == 0);
    cr_assert_eq (za_conv2d_dims (&d, 1, 28, 28, 1, 32, 3, 2, ZA_PADDING_SAME), 0);
    cr_expect (d.oh == 14 && d.ow == 14);
    //  TF: total padding (14-1)*2+3-28 = 1, top 0, bottom 1.
    cr_expect (d.pad_top == 0 && d.pad_left == 0);
    cr_assert_eq (za_conv2d_dims (&d, 1, 5, 5, 1, 1, 3, 1, ZA_PADDING_SAME), 0);
    cr_expect (d.oh == 5 && d.pad_top == 1 && d.pad_left == 1);
    za_error_set_quiet (1);
    cr_expect_eq (za_conv2d_dims (&d, 1, 2, 2, 1, 1, 3, 1, ZA_PADDING_VALID), -1);
    //  Sizes past what BLAS's int arguments and int32 indexes hold are refused.
    cr_expect_eq (za_conv2d_dims (&d, 100000, 28, 28, 1, 32, 3, 1, ZA_PADDING_VALID), -1);
    cr_expect (strstr (za_last_error (), "too large") != NULL, "%s", za_last_error ());
    za_pool2d_dims_t p;
    cr_expect_eq (za_pool2d_dims (&p, 100000, 26, 26, 32, 2, 2), -1);
    cr_expect_null (za_alloc (SIZE_MAX - 10));
}

Test (conv2d, forward_by_hand)
{
    //  A 3x3 single-channel image, a 2x2 kernel of ones: each output is the sum
    //  of a 2x2 window, plus bias 0.5.
    const za_backend_t *be = za_backend_cpu ();
    float in [9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float kernel [4] = {1, 1, 1, 1}, bias [1] = {0.5f}, cols [16], out [4];
    za_conv2d_dims_t d;
    za_conv2d_dims (&d, 1, 3, 3, 1, 1, 2, 1, ZA_PADDING_VALID);
    be->conv2d_forward (&d, in, kernel, bias, ZA_ACT_NONE, cols, out);
    cr_expect_float_eq (out [0], 12.5f, 1e-6);
    cr_expect_float_eq (out [1], 16.5f, 1e-6);
    cr_expect_float_eq (out [2], 24.5f, 1e-6);
    cr_expect_float_eq (out [3], 28.5f, 1e-6);
}

//  The forward a back end computes (oneDNN where built in, im2col + BLAS
//  otherwise) against the definition, summed in double, on geometries of
//  every kind: SAME and VALID, strides 1 and 2 (VALID leaving a row unread),
//  an even kernel, 1x1, one channel, 32 channels.
Test (conv2d, forward_equals_the_definition_on_every_path)
{
    const za_backend_t *be = za_backend_cpu ();
    struct { int n, h, w, c, oc, k, stride; za_padding_t pad; za_act_t act; } cases [] = {
        {2, 7, 6, 3, 5, 3, 1, ZA_PADDING_SAME, ZA_ACT_RELU},
        {3, 9, 8, 3, 5, 3, 2, ZA_PADDING_SAME, ZA_ACT_NONE},
        {2, 10, 10, 2, 4, 3, 2, ZA_PADDING_VALID, ZA_ACT_RELU},
        {1, 8, 8, 2, 3, 4, 2, ZA_PADDING_SAME, ZA_ACT_RELU},
        {2, 6, 6, 16, 8, 1, 1, ZA_PADDING_VALID, ZA_ACT_NONE},
        {2, 28, 28, 1, 32, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU},
        {1, 13, 13, 32, 64, 3, 1, ZA_PADDING_VALID, ZA_ACT_RELU},
        {2, 9, 8, 1, 48, 3, 2, ZA_PADDING_SAME, ZA_ACT_RELU},
        {1, 7, 9, 1, 64, 3, 1, ZA_PADDING_SAME, ZA_ACT_NONE},
        {1, 6, 5, 1, 16, 3, 1, ZA_PADDING_VALID, ZA_ACT_NONE},
    };
    za_rng_t rng;
    za_rng_seed (&rng, 17);
    for (size_t t = 0; t < sizeof cases / sizeof cases [0]; t++) {
        za_conv2d_dims_t d;
        cr_assert_eq (za_conv2d_dims (&d, cases [t].n, cases [t].h, cases [t].w, cases [t].c,
                                      cases [t].oc, cases [t].k, cases [t].stride,
                                      cases [t].pad), 0);
        size_t n_in = (size_t) d.n * d.h * d.w * d.c, n_out = (size_t) d.n * d.oh * d.ow * d.oc;
        size_t n_cols = za_conv2d_cols_floats (&d);
        float *in = za_test_random (n_in, &rng), *k = za_test_random ((size_t) d.kh * d.kw * d.c * d.oc, &rng);
        float *bias = za_test_random ((size_t) d.oc, &rng);
        float *out = (float *) za_alloc (n_out * sizeof (float));
        float *cols = (float *) za_alloc (n_cols * sizeof (float));
        {
            be->conv2d_forward (&d, in, k, bias, cases [t].act, cols, out);
            for (size_t i = 0; i < n_out; i++) {
                int oc = (int) (i % d.oc), ox = (int) (i / d.oc % d.ow);
                int oy = (int) (i / d.oc / d.ow % d.oh), b = (int) (i / d.oc / d.ow / d.oh);
                double sum = bias [oc];
                for (int ky = 0; ky < d.kh; ky++)
                    for (int kx = 0; kx < d.kw; kx++) {
                        int y = oy * d.stride + ky - d.pad_top, x = ox * d.stride + kx - d.pad_left;
                        if (y < 0 || y >= d.h || x < 0 || x >= d.w)
                            continue;
                        for (int c = 0; c < d.c; c++)
                            sum += (double) in [(((size_t) b * d.h + y) * d.w + x) * d.c + c]
                                 * k [(((size_t) ky * d.kw + kx) * d.c + c) * d.oc + oc];
                    }
                if (cases [t].act == ZA_ACT_RELU && sum < 0)
                    sum = 0;
                cr_assert (fabs (out [i] - sum) <= 1e-5 * (1 + fabs (sum)),
                           "case %zu out[%zu] = %.7f, the definition %.7f", t, i, out [i], sum);
            }
        }
#ifdef ZA_HAVE_DNNL
        //  Built with oneDNN (and not switched off): it takes every one of these.
        const char *off = getenv ("ZA_DNNL");
        if (!off || strcmp (off, "0") != 0)
            cr_expect_eq (za_cpu_dnnl_conv2d_forward (&d, in, k, bias, cases [t].act, out,
                                                      ZA_PRECISION_FP32), 0,
                          "case %zu: oneDNN declined", t);
#endif
        za_free (in), za_free (k), za_free (bias), za_free (out), za_free (cols);
    }
}

// ---------------------------------------------------------------------------
//  dense

typedef struct {
    int n, in_dim, units;
    za_act_t act;
    float *in, *kernel, *bias, *out, *r;
} s_dense_case_t;

static double
s_dense_loss (void *arg)
{
    s_dense_case_t *c = (s_dense_case_t *) arg;
    za_backend_cpu ()->dense_forward (c->n, c->in_dim, c->units, c->in, c->kernel, c->bias,
                                      c->act, c->out);
    double loss = 0;
    for (int i = 0; i < c->n * c->units; i++)
        loss += (double) c->out [i] * c->r [i];
    return loss;
}

static void
s_dense_gradcheck (int n, int in_dim, int units, za_act_t act, uint64_t seed)
{
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    s_dense_case_t c = {n, in_dim, units, act, NULL, NULL, NULL, NULL, NULL};
    c.in = za_test_random ((size_t) n * in_dim, &rng);
    c.kernel = za_test_random ((size_t) in_dim * units, &rng);
    c.bias = za_test_random ((size_t) units, &rng);
    c.out = (float *) za_alloc ((size_t) n * units * sizeof (float));
    c.r = za_test_random ((size_t) n * units, &rng);
    float *dout = (float *) za_alloc ((size_t) n * units * sizeof (float));
    float *dkernel = (float *) za_alloc ((size_t) in_dim * units * sizeof (float));
    float *dbias = (float *) za_alloc ((size_t) units * sizeof (float));
    float *din = (float *) za_alloc ((size_t) n * in_dim * sizeof (float));
    s_dense_loss (&c);
    memcpy (dout, c.r, (size_t) n * units * sizeof (float));
    za_backend_cpu ()->dense_backward (n, in_dim, units, c.in, c.kernel, c.out, act, dout,
                                       dkernel, dbias, din);
    s_check_numeric ("dkernel", c.kernel, dkernel, (size_t) in_dim * units, s_dense_loss, &c, &rng);
    s_check_numeric ("dbias", c.bias, dbias, (size_t) units, s_dense_loss, &c, &rng);
    s_check_numeric ("din", c.in, din, (size_t) n * in_dim, s_dense_loss, &c, &rng);
    za_free (c.in), za_free (c.kernel), za_free (c.bias), za_free (c.out), za_free (c.r);
    za_free (dout), za_free (dkernel), za_free (dbias), za_free (din);
}

Test (dense, gradient_linear)
{
    s_dense_gradcheck (3, 7, 5, ZA_ACT_NONE, 11);
}

Test (dense, gradient_relu)
{
    s_dense_gradcheck (4, 10, 6, ZA_ACT_RELU, 12);
}

Test (dense, gradient_single_example_wide)
{
    s_dense_gradcheck (1, 33, 17, ZA_ACT_NONE, 13);
}

Test (dense, backward_accumulates)
{
    //  Parameter gradients are added with +=: two backward calls give twice.
    const za_backend_t *be = za_backend_cpu ();
    float in [2] = {1, 2}, kernel [2] = {0.5f, -1}, bias [1] = {0}, out [1];
    float dout [1] = {1}, dkernel [2] = {0}, dbias [1] = {0};
    be->dense_forward (1, 2, 1, in, kernel, bias, ZA_ACT_NONE, out);
    cr_expect_float_eq (out [0], -1.5f, 1e-6);
    be->dense_backward (1, 2, 1, in, kernel, out, ZA_ACT_NONE, dout, dkernel, dbias, NULL);
    dout [0] = 1;
    be->dense_backward (1, 2, 1, in, kernel, out, ZA_ACT_NONE, dout, dkernel, dbias, NULL);
    cr_expect_float_eq (dkernel [0], 2.0f, 1e-6);
    cr_expect_float_eq (dkernel [1], 4.0f, 1e-6);
    cr_expect_float_eq (dbias [0], 2.0f, 1e-6);
}

// ---------------------------------------------------------------------------
//  maxpool, relu, dropout

typedef struct {
    za_pool2d_dims_t d;
    float *in, *out, *r;
    int32_t *argmax;
} s_pool_case_t;

static double
s_pool_loss (void *arg)
{
    s_pool_case_t *c = (s_pool_case_t *) arg;
    za_backend_cpu ()->maxpool_forward (&c->d, c->in, c->out, c->argmax);
    size_t n = (size_t) c->d.n * c->d.oh * c->d.ow * c->d.c;
    double loss = 0;
    for (size_t i = 0; i < n; i++)
        loss += (double) c->out [i] * c->r [i];
    return loss;
}

static void
s_pool_gradcheck (int n, int h, int w, int c, int pool, int stride, uint64_t seed)
{
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    s_pool_case_t pc;
    cr_assert_eq (za_pool2d_dims (&pc.d, n, h, w, c, pool, stride), 0);
    size_t in_n = (size_t) n * h * w * c, out_n = (size_t) n * pc.d.oh * pc.d.ow * c;
    //  Distinct values spaced wider than the probe so no tie flips under it.
    pc.in = (float *) za_alloc (in_n * sizeof (float));
    for (size_t i = 0; i < in_n; i++)
        pc.in [i] = (float) i * 0.05f;
    for (size_t i = in_n - 1; i > 0; i--) {
        size_t j = za_rng_below (&rng, (uint32_t) (i + 1));
        float t = pc.in [i];
        pc.in [i] = pc.in [j], pc.in [j] = t;
    }
    pc.out = (float *) za_alloc (out_n * sizeof (float));
    pc.argmax = (int32_t *) za_alloc (out_n * sizeof (int32_t));
    pc.r = za_test_random (out_n, &rng);
    float *din = (float *) za_alloc (in_n * sizeof (float));
    s_pool_loss (&pc);
    za_backend_cpu ()->maxpool_backward (&pc.d, pc.r, pc.argmax, din);
    s_check_numeric ("din", pc.in, din, in_n, s_pool_loss, &pc, &rng);
    za_free (pc.in), za_free (pc.out), za_free (pc.argmax), za_free (pc.r), za_free (din);
}

Test (maxpool, gradient_2x2)
{
    s_pool_gradcheck (2, 6, 6, 3, 2, 2, 21);
}

Test (maxpool, gradient_odd_input_drops_edge)
{
    s_pool_gradcheck (1, 7, 5, 2, 2, 2, 22);
}

Test (maxpool, gradient_overlapping_3_stride_2)
{
    s_pool_gradcheck (2, 7, 7, 2, 3, 2, 23);
}

//  A first layer and its 2x2 max-pool as one (conv2d_pool_*, where the
//  back end takes them: 3x3 on one channel on AVX-512) against the two on
//  their own: the same pooled values and argmax to the bit (ties to the
//  first, as ReLU's zeros make them), the same kernel and bias gradients
//  up to the order of the sums; in fp32 and in bf16.
static void
s_conv_pool_case (const za_backend_t *be, int n, int h, int w, int filters,
                  za_padding_t padding, za_act_t act, uint64_t seed)
{
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    za_conv2d_dims_t d;
    za_pool2d_dims_t p;
    cr_assert_eq (za_conv2d_dims (&d, n, h, w, 1, filters, 3, 1, padding), 0);
    cr_assert_eq (za_pool2d_dims (&p, n, d.oh, d.ow, filters, 2, 2), 0);
    size_t in_n = (size_t) n * h * w, k_n = (size_t) 9 * filters;
    size_t out_n = (size_t) n * d.oh * d.ow * filters, pooled = (size_t) n * p.oh * p.ow * filters;
    float *in = za_test_random (in_n, &rng), *kernel = za_test_random (k_n, &rng);
    float *bias = za_test_random ((size_t) filters, &rng), *g = za_test_random (pooled, &rng);
    float *out = (float *) za_alloc (out_n * sizeof (float));
    float *dout = (float *) za_alloc (out_n * sizeof (float));
    float *cols = (float *) za_alloc (za_conv2d_cols_floats (&d) * sizeof (float));
    float *pool_out [2], *dk [2], *db [2];
    int32_t *argmax [2];
    for (int way = 0; way < 2; way++) {
        pool_out [way] = (float *) za_alloc (pooled * sizeof (float));
        argmax [way] = (int32_t *) za_alloc (pooled * sizeof (int32_t));
        dk [way] = (float *) za_alloc (k_n * sizeof (float));
        db [way] = (float *) za_alloc ((size_t) filters * sizeof (float));
    }
    //  The two on their own.
    be->conv2d_forward (&d, in, kernel, bias, act, cols, out);
    be->maxpool_forward (&p, out, pool_out [1], argmax [1]);
    be->maxpool_backward (&p, g, argmax [1], dout);
    be->conv2d_backward (&d, in, cols, kernel, out, act, dout, dk [1], db [1], NULL, NULL);
    //  As one.
    cr_assert_not_null (be->conv2d_pool_forward);
    if (be->conv2d_pool_forward (&d, &p, in, kernel, bias, act, pool_out [0], argmax [0])) {
        cr_expect (!za_cpu_has (ZA_ISA_AVX512), "declined on a CPU with AVX-512");
        goto done;
    }
    cr_expect_eq (memcmp (pool_out [0], pool_out [1], pooled * sizeof (float)), 0, "pooled");
    cr_expect_eq (memcmp (argmax [0], argmax [1], pooled * sizeof (int32_t)), 0, "argmax");
    cr_assert_eq (be->conv2d_pool_backward (&d, &p, in, pool_out [0], argmax [0], act, g, dk [0],
                                            db [0]), 0);
    for (size_t i = 0; i < k_n; i++)
        cr_expect (fabsf (dk [0][i] - dk [1][i]) <= 1e-4f * (1 + fabsf (dk [1][i])),
                   "%s, %d filters: dkernel[%zu] %g as one, %g on their own", be->name, filters,
                   i, dk [0][i], dk [1][i]);
    for (int i = 0; i < filters; i++)
        cr_expect (fabsf (db [0][i] - db [1][i]) <= 1e-4f * (1 + fabsf (db [1][i])),
                   "%s, %d filters: dbias[%d] %g as one, %g on their own", be->name, filters,
                   i, db [0][i], db [1][i]);
done:
    za_free (in), za_free (kernel), za_free (bias), za_free (g), za_free (out), za_free (dout);
    za_free (cols);
    for (int way = 0; way < 2; way++)
        za_free (pool_out [way]), za_free (argmax [way]), za_free (dk [way]), za_free (db [way]);
}

Test (maxpool, first_layer_and_pool_as_one)
{
    const za_backend_t *tables [2] = {za_backend_cpu (), za_backend_mixed (za_backend_cpu (),
                                                                          "mixed_bfloat16")};
    cr_assert_not_null (tables [0]);
    //  (bf16 where this CPU, as DNNL_MAX_CPU_ISA has it answer, computes it.)
    for (int t = 0; t < 2 && tables [t]; t++) {
        s_conv_pool_case (tables [t], 4, 28, 28, 32, ZA_PADDING_VALID, ZA_ACT_RELU, 20);
        s_conv_pool_case (tables [t], 2, 9, 8, 48, ZA_PADDING_SAME, ZA_ACT_RELU, 21);
        s_conv_pool_case (tables [t], 3, 8, 9, 16, ZA_PADDING_VALID, ZA_ACT_NONE, 22);
        s_conv_pool_case (tables [t], 1, 7, 7, 64, ZA_PADDING_SAME, ZA_ACT_RELU, 23);
    }
}

//  Ties as one and on their own: a kernel that passes the input through
//  (its centre tap 1) and windows whose top right and bottom left are equal
//  and the largest: the pool keeps the first in its order, (0,1).
Test (maxpool, first_layer_and_pool_as_one_keep_the_first_of_equals)
{
    const za_backend_t *be = za_backend_cpu ();
    za_conv2d_dims_t d;
    za_pool2d_dims_t p;
    cr_assert_eq (za_conv2d_dims (&d, 1, 6, 6, 1, 16, 3, 1, ZA_PADDING_VALID), 0);
    cr_assert_eq (za_pool2d_dims (&p, 1, 4, 4, 16, 2, 2), 0);
    float in [36] = {0}, kernel [9 * 16] = {0}, bias [16] = {0}, out [4 * 4 * 16];
    float pooled [2][2 * 2 * 16];
    int32_t argmax [2][2 * 2 * 16];
    for (int f = 0; f < 16; f++)
        kernel [4 * 16 + f] = 1.0f;
    const float window [4] = {0.1f, 0.5f, 0.5f, 0.2f};
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            in [(r + 1) * 6 + c + 1] = window [(r % 2) * 2 + c % 2];
    float *cols = (float *) za_alloc (za_conv2d_cols_floats (&d) * sizeof (float));
    be->conv2d_forward (&d, in, kernel, bias, ZA_ACT_RELU, cols, out);
    be->maxpool_forward (&p, out, pooled [1], argmax [1]);
    cr_expect_eq (argmax [1][0], 1 * 16, "the pool's own choice: (0,1)");
    if (be->conv2d_pool_forward (&d, &p, in, kernel, bias, ZA_ACT_RELU, pooled [0], argmax [0])
        == 0) {
        cr_expect_eq (memcmp (argmax [0], argmax [1], sizeof argmax [0]), 0);
        cr_expect_eq (memcmp (pooled [0], pooled [1], sizeof pooled [0]), 0);
    }
    za_free (cols);
}

Test (maxpool, forward_by_hand)
{
    const za_backend_t *be = za_backend_cpu ();
    float in [16] = {1, 5, 2, 0,  3, 4, 8, 1,  0, 0, 1, 1,  9, 0, 1, 2};
    float out [4];
    int32_t argmax [4];
    za_pool2d_dims_t d;
    za_pool2d_dims (&d, 1, 4, 4, 1, 2, 2);
    be->maxpool_forward (&d, in, out, argmax);
    cr_expect (out [0] == 5 && out [1] == 8 && out [2] == 9 && out [3] == 2);
    cr_expect (argmax [0] == 1 && argmax [1] == 6 && argmax [2] == 12 && argmax [3] == 15);
}

//  global average pool: L = sum (out * R)
typedef struct {
    int n, positions, channels;
    float *in, *out, *r;
} s_gap_case_t;

static double
s_gap_loss (void *arg)
{
    s_gap_case_t *c = (s_gap_case_t *) arg;
    za_backend_cpu ()->avgpool_global_forward (c->n, c->positions, c->channels, c->in,
                                                c->out);
    double loss = 0;
    for (size_t i = 0; i < (size_t) c->n * c->channels; i++)
        loss += (double) c->out [i] * c->r [i];
    return loss;
}

Test (avgpool_global, gradient_and_forward_by_hand)
{
    za_rng_t rng;
    za_rng_seed (&rng, 24);
    s_gap_case_t gc = {3, 7 * 5, 4, NULL, NULL, NULL};
    size_t in_n = (size_t) gc.n * gc.positions * gc.channels;
    gc.in = za_test_random (in_n, &rng);
    gc.out = (float *) za_alloc ((size_t) gc.n * gc.channels * sizeof (float));
    gc.r = za_test_random ((size_t) gc.n * gc.channels, &rng);
    float *din = (float *) za_alloc (in_n * sizeof (float));
    s_gap_loss (&gc);
    za_backend_cpu ()->avgpool_global_backward (gc.n, gc.positions, gc.channels, gc.r, din);
    s_check_numeric ("din", gc.in, din, in_n, s_gap_loss, &gc, &rng);
    za_free (gc.in), za_free (gc.out), za_free (gc.r), za_free (din);

    //  Two positions, two channels: the means are (1+3)/2 and (2+6)/2.
    float in [4] = {1, 2, 3, 6}, out [2], dout [2] = {1, -4}, dgrad [4];
    za_backend_cpu ()->avgpool_global_forward (1, 2, 2, in, out);
    cr_expect (out [0] == 2.0f && out [1] == 4.0f, "%f %f", out [0], out [1]);
    za_backend_cpu ()->avgpool_global_backward (1, 2, 2, dout, dgrad);
    cr_expect (dgrad [0] == 0.5f && dgrad [1] == -2.0f && dgrad [2] == 0.5f
               && dgrad [3] == -2.0f);
}

Test (relu, forward_backward)
{
    const za_backend_t *be = za_backend_cpu ();
    float in [4] = {-1, 0.5f, 0, 2}, out [4], dout [4] = {1, 2, 3, 4}, din [4];
    be->relu_forward (4, in, out);
    be->relu_backward (4, out, dout, din);
    cr_expect (out [0] == 0 && out [1] == 0.5f && out [2] == 0 && out [3] == 2);
    cr_expect (din [0] == 0 && din [1] == 2 && din [2] == 0 && din [3] == 4);
}

Test (dropout, keeps_expectation_and_masks_gradient)
{
    const za_backend_t *be = za_backend_cpu ();
    enum { N = 100000 };
    float *in = (float *) za_alloc (N * sizeof (float));
    float *mask = (float *) za_alloc (N * sizeof (float));
    float *out = (float *) za_alloc (N * sizeof (float));
    float *din = (float *) za_alloc (N * sizeof (float));
    for (int i = 0; i < N; i++)
        in [i] = 1.0f;
    be->dropout_forward (N, 0.4f, 7, in, mask, out);
    double sum = 0;
    int zeros = 0;
    for (int i = 0; i < N; i++) {
        sum += out [i];
        zeros += out [i] == 0;
        cr_assert (out [i] == 0 || fabsf (out [i] - 1.0f / 0.6f) < 1e-6);
    }
    cr_expect (fabs (sum / N - 1.0) < 0.01, "mean %f", sum / N);
    cr_expect (fabs (zeros / (double) N - 0.4) < 0.01, "dropped %d", zeros);
    be->dropout_backward (N, mask, in, din);
    for (int i = 0; i < N; i++)
        cr_assert_eq (din [i], out [i]);
    //  The mask depends on (seed, element) alone: the first half of the
    //  buffer drawn by itself is the same, another seed is another mask.
    float *half = (float *) za_alloc (N * sizeof (float));
    float *half_out = (float *) za_alloc (N * sizeof (float));
    be->dropout_forward (N / 2, 0.4f, 7, in, half, half_out);
    cr_expect (memcmp (half, mask, N / 2 * sizeof (float)) == 0);
    be->dropout_forward (N, 0.4f, 8, in, half, half_out);
    cr_expect (memcmp (half, mask, N * sizeof (float)) != 0);
    za_free (half), za_free (half_out);
    za_free (in), za_free (mask), za_free (out), za_free (din);
}

// ---------------------------------------------------------------------------
//  softmax cross-entropy

typedef struct {
    int n, classes;
    float *logits;
    int32_t *labels;
} s_xent_case_t;

static double
s_xent_loss (void *arg)
{
    s_xent_case_t *c = (s_xent_case_t *) arg;
    int correct;
    return za_backend_cpu ()->softmax_xent (c->n, c->classes, c->logits, c->labels, NULL,
                                            &correct, NULL) / c->n;
}

Test (softmax_xent, gradient)
{
    za_rng_t rng;
    za_rng_seed (&rng, 31);
    s_xent_case_t c = {5, 7, NULL, NULL};
    c.logits = za_test_random (35, &rng);
    for (int i = 0; i < 35; i++)
        c.logits [i] *= 3;
    int32_t labels [5] = {0, 6, 3, 3, 1};
    c.labels = labels;
    float dlogits [35];
    int correct;
    za_backend_cpu ()->softmax_xent (5, 7, c.logits, labels, dlogits, &correct, NULL);
    s_check_numeric ("dlogits", c.logits, dlogits, 35, s_xent_loss, &c, &rng);
    za_free (c.logits);
}

Test (softmax_xent, values_by_hand)
{
    //  Uniform logits over 4 classes: loss log 4 per row; row 2 is confident.
    float logits [8] = {0, 0, 0, 0,  0, 0, 20, 0};
    int32_t labels [2] = {1, 2};
    int correct, invalid;
    double loss = za_backend_cpu ()->softmax_xent (2, 4, logits, labels, NULL, &correct,
                                                   &invalid);
    cr_expect (fabs (loss - (log (4.0) + log (1 + 3 * exp (-20.0)))) < 1e-6, "loss %f", loss);
    cr_expect_eq (correct, 1);      //  row 1 ties argmax at class 0
    cr_expect_eq (invalid, 0);
}

Test (softmax_xent, bad_label_counted_not_crashing)
{
    float logits [4] = {1, 2, 3, 4}, dlogits [4];
    int32_t labels [2] = {7, -1};
    int correct, invalid;
    double loss = za_backend_cpu ()->softmax_xent (2, 2, logits, labels, dlogits, &correct,
                                                   &invalid);
    cr_expect_eq (invalid, 2);
    cr_expect_eq (correct, 0);
    cr_expect_eq (loss, 0.0);
    for (int i = 0; i < 4; i++)
        cr_expect_eq (dlogits [i], 0.0f);
}

// ---------------------------------------------------------------------------
//  The element forms (kernels/za_elem.h): the bodies of the CUDA back end's
//  kernels, one element per GPU thread. No GPU runs here, so they run on the
//  CPU, element by element, against the CPU back end's loops.

static void
s_check_conv_elements (int n, int h, int w, int c, int filters, int kernel, int stride,
                       za_padding_t padding)
{
    //  The im2col path is the one under test: oneDNN off in this process
    //  (each test is one) before its first convolution.
    setenv ("ZA_DNNL", "0", 1);
    const za_backend_t *be = za_backend_cpu ();
    za_conv2d_dims_t d;
    cr_assert_eq (za_conv2d_dims (&d, n, h, w, c, filters, kernel, stride, padding), 0);
    za_rng_t rng;
    za_rng_seed (&rng, 3);
    size_t in_count = (size_t) n * h * w * c, out_count = (size_t) n * d.oh * d.ow * filters;
    size_t cols_count = za_conv2d_cols_floats (&d);
    float *in = za_test_random (in_count, &rng);
    float *k = za_test_random ((size_t) kernel * kernel * c * filters, &rng);
    float *bias = za_test_random (filters, &rng);
    float *dout = za_test_random (out_count, &rng);
    float *cols = (float *) za_alloc (cols_count * sizeof (float));
    float *dcols = (float *) za_alloc (cols_count * sizeof (float));
    float *out = (float *) za_alloc (out_count * sizeof (float));
    float *dk = (float *) za_alloc ((size_t) kernel * kernel * c * filters * sizeof (float));
    float *db = (float *) za_alloc (filters * sizeof (float));
    float *din = (float *) za_alloc (in_count * sizeof (float));
    be->conv2d_forward (&d, in, k, bias, ZA_ACT_NONE, cols, out);
    //  im2col: each element is a copy, so exactly the same.
    for (size_t i = 0; i < cols_count; i++)
        cr_assert_eq (za_elem_im2col (&d, in, i), cols [i], "cols[%zu]", i);
    be->conv2d_backward (&d, in, cols, k, out, ZA_ACT_NONE, dout, dk, db, dcols, din);
    //  col2im: the same sums, added in another order.
    for (size_t i = 0; i < in_count; i++) {
        float e = za_elem_col2im (&d, dcols, i);
        cr_assert (fabsf (e - din [i]) <= 1e-5f * (1 + fabsf (din [i])), "din[%zu]: %g vs %g",
                   i, (double) e, (double) din [i]);
    }
    za_free (in), za_free (k), za_free (bias), za_free (dout), za_free (cols);
    za_free (dcols), za_free (out), za_free (dk), za_free (db), za_free (din);
}

Test (elements, im2col_and_col2im_equal_the_cpu)
{
    s_check_conv_elements (2, 7, 6, 3, 4, 3, 1, ZA_PADDING_VALID);
    s_check_conv_elements (2, 7, 6, 3, 4, 3, 1, ZA_PADDING_SAME);
    s_check_conv_elements (1, 9, 8, 2, 5, 3, 2, ZA_PADDING_SAME);
    s_check_conv_elements (1, 8, 8, 1, 3, 4, 2, ZA_PADDING_SAME);
    s_check_conv_elements (3, 6, 6, 2, 2, 5, 1, ZA_PADDING_SAME);
    s_check_conv_elements (2, 28, 28, 1, 8, 3, 1, ZA_PADDING_VALID);
}

//  The gathers' divisions: 32 bits below 2^32, 64 above, the same answers.
Test (elements, divmod_on_both_sides_of_32_bits)
{
    size_t cases [] = {0, 1, 575, 576, 1000003, UINT32_MAX - 1, UINT32_MAX,
                       (size_t) UINT32_MAX + 1, (size_t) UINT32_MAX + 577, (size_t) 7 << 40};
    unsigned divisors [] = {1, 3, 576, 4608, 65537};
    for (size_t a = 0; a < sizeof cases / sizeof cases [0]; a++)
        for (size_t b = 0; b < sizeof divisors / sizeof divisors [0]; b++) {
            unsigned r = 12345;
            size_t q = za_elem_divmod (cases [a], divisors [b], &r);
            cr_assert_eq (q, cases [a] / divisors [b], "%zu / %u", cases [a], divisors [b]);
            cr_assert_eq (r, cases [a] % divisors [b], "%zu %% %u", cases [a], divisors [b]);
        }
}

static void
s_check_pool_elements (int n, int h, int w, int c, int pool, int stride, int ties)
{
    const za_backend_t *be = za_backend_cpu ();
    za_pool2d_dims_t d;
    cr_assert_eq (za_pool2d_dims (&d, n, h, w, c, pool, stride), 0);
    za_rng_t rng;
    za_rng_seed (&rng, 4);
    size_t in_count = (size_t) n * h * w * c, out_count = (size_t) n * d.oh * d.ow * c;
    float *in = za_test_random (in_count, &rng);
    if (ties)       //  ReLU outputs: many equal zeros, the first must win
        for (size_t i = 0; i < in_count; i++)
            in [i] = in [i] > 0.5f? in [i]: 0.0f;
    float *dout = za_test_random (out_count, &rng);
    float *out = (float *) za_alloc (out_count * sizeof (float));
    int32_t *argmax = (int32_t *) za_alloc (out_count * sizeof (int32_t));
    //  Every input's gradient is written, the zeros too: none is left as
    //  the buffer had it.
    float *din = (float *) za_alloc (in_count * sizeof (float));
    for (size_t i = 0; i < in_count; i++)
        din [i] = NAN;
    be->maxpool_forward (&d, in, out, argmax);
    for (size_t i = 0; i < out_count; i++) {
        int32_t where = -1;
        cr_assert_eq (za_elem_maxpool (&d, in, i, &where), out [i], "out[%zu]", i);
        cr_assert_eq (where, argmax [i], "argmax[%zu]", i);
    }
    be->maxpool_backward (&d, dout, argmax, din);
    for (size_t i = 0; i < in_count; i++) {
        float e = za_elem_maxpool_backward (&d, dout, argmax, i);
        cr_assert (fabsf (e - din [i]) <= 1e-6f, "din[%zu]: %g vs %g", i, (double) e,
                   (double) din [i]);
    }
    za_free (in), za_free (dout), za_free (out), za_free (argmax), za_free (din);
}

Test (elements, maxpool_equals_the_cpu)
{
    s_check_pool_elements (2, 26, 26, 8, 2, 2, 0);
    s_check_pool_elements (2, 26, 26, 8, 2, 2, 1);
    s_check_pool_elements (1, 11, 9, 3, 2, 2, 1);
    s_check_pool_elements (2, 9, 11, 19, 2, 2, 1);      //  vector loops and their tails
    s_check_pool_elements (2, 9, 9, 2, 3, 2, 0);
    s_check_pool_elements (1, 7, 7, 1, 3, 1, 1);
}
