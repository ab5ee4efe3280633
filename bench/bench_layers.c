/*  bench_layers: times each back-end call of the seed CNN's training step at
    one batch size, so the slow layer is visible. Prints ms and GFLOP/s.
    Usage: bench_layers [BATCH] [THREADS] [PRECISION] (fp32, mixed_bfloat16,
    mixed_float16 or auto; fp32 by default).                               */
#include "za/za_kernels.h"

#include <stdio.h>
#include <stdlib.h>

#define REPEATS 50
#define BUFFERS_MAX 64

//  Every buffer taken, freed at the end.
static void *s_buffers [BUFFERS_MAX];
static int s_buffer_count;

static void *
s_take (size_t bytes)
{
    void *p = za_alloc (bytes);
    if (!p || s_buffer_count == BUFFERS_MAX) {
        fprintf (stderr, "bench_layers: out of memory\n");
        exit (1);
    }
    return s_buffers [s_buffer_count++] = p;
}

static float *
s_buf (size_t n)
{
    float *p = (float *) s_take (n * sizeof (float));
    for (size_t i = 0; i < n; i++)
        p [i] = (float) ((i * 2654435761u) % 1000) / 1000.0f - 0.3f;
    return p;
}

#define TIME(label, flops, stmt)                                                   \
    do {                                                                           \
        stmt;                                                                      \
        double t0 = za_clock_mono ();                                              \
        for (int r = 0; r < REPEATS; r++)                                          \
            stmt;                                                                  \
        double ms = (za_clock_mono () - t0) * 1000 / REPEATS;                      \
        total += ms;                                                               \
        printf ("%-22s %8.3f ms  %7.1f GFLOP/s\n", label, ms,                      \
                (flops) > 0? (flops) / ms / 1e6: 0.0);                             \
    } while (0)

int
main (int argc, char **argv)
{
    int n = argc > 1? atoi (argv [1]): 64;
    int threads = argc > 2? atoi (argv [2]): 2;
    const char *precision = argc > 3? argv [3]: "fp32";
    const za_backend_t *be = za_backend_mixed (za_backend_cpu (), precision);
    if (!be)
        return 1;               //  za_error said why
    be->set_threads (threads);
    printf ("batch %d, threads %d, %s (%s), OPENBLAS_CORETYPE=%s\n", n, threads, precision,
            be->name, getenv ("OPENBLAS_CORETYPE")? getenv ("OPENBLAS_CORETYPE"): "(unset)");
    double total = 0;
    //  conv1 28x28x1 -> 26x26x32, pool -> 13x13x32, conv2 -> 11x11x64, pool -> 5x5x64,
    //  conv3 -> 3x3x64, dense 576 -> 64 -> 10.
    za_conv2d_dims_t c1, c2, c3;
    za_conv2d_dims (&c1, n, 28, 28, 1, 32, 3, 1, ZA_PADDING_VALID);
    za_conv2d_dims (&c2, n, 13, 13, 32, 64, 3, 1, ZA_PADDING_VALID);
    za_conv2d_dims (&c3, n, 5, 5, 64, 64, 3, 1, ZA_PADDING_VALID);
    za_pool2d_dims_t p1, p2;
    za_pool2d_dims (&p1, n, 26, 26, 32, 2, 2);
    za_pool2d_dims (&p2, n, 11, 11, 64, 2, 2);
    float *x = s_buf ((size_t) n * 784);
    float *k1 = s_buf (9 * 32), *b1 = s_buf (32), *k2 = s_buf (9 * 32 * 64), *b2 = s_buf (64);
    float *k3 = s_buf (9 * 64 * 64), *b3 = s_buf (64), *k4 = s_buf (576 * 64), *b4 = s_buf (64);
    float *k5 = s_buf (640), *b5 = s_buf (10);
    float *cols1 = s_buf (za_conv2d_cols_floats (&c1)), *cols2 = s_buf (za_conv2d_cols_floats (&c2));
    float *cols3 = s_buf (za_conv2d_cols_floats (&c3)), *dcols = s_buf (za_conv2d_cols_floats (&c2));
    size_t a1 = (size_t) n * 26 * 26 * 32, a2 = (size_t) n * 13 * 13 * 32;
    size_t a3 = (size_t) n * 11 * 11 * 64, a4 = (size_t) n * 5 * 5 * 64, a5 = (size_t) n * 576;
    float *o1 = s_buf (a1), *o2 = s_buf (a2), *o3 = s_buf (a3), *o4 = s_buf (a4), *o5 = s_buf (a5);
    float *o6 = s_buf ((size_t) n * 64), *o7 = s_buf ((size_t) n * 10);
    float *g1 = s_buf (a1), *g2 = s_buf (a2), *g3 = s_buf (a3), *g4 = s_buf (a4), *g5 = s_buf (a5);
    float *g6 = s_buf ((size_t) n * 64), *g7 = s_buf ((size_t) n * 10);
    float *dk = s_buf (576 * 64), *db = s_buf (64);
    int32_t *am1 = (int32_t *) s_take (a2 * 4), *am2 = (int32_t *) s_take (a4 * 4);
    int32_t *labels = (int32_t *) s_take ((size_t) n * 4);
    double f1 = 2.0 * n * 676 * 32 * 9, f2 = 2.0 * n * 121 * 64 * 288;
    double f3 = 2.0 * n * 9 * 64 * 576, f4 = 2.0 * n * 576 * 64, f5 = 2.0 * n * 640;
    TIME ("conv1 fwd", f1, be->conv2d_forward (&c1, x, k1, b1, ZA_ACT_RELU, cols1, o1));
    TIME ("pool1 fwd", 0, be->maxpool_forward (&p1, o1, o2, am1));
    TIME ("conv2 fwd", f2, be->conv2d_forward (&c2, o2, k2, b2, ZA_ACT_RELU, cols2, o3));
    TIME ("pool2 fwd", 0, be->maxpool_forward (&p2, o3, o4, am2));
    TIME ("conv3 fwd", f3, be->conv2d_forward (&c3, o4, k3, b3, ZA_ACT_RELU, cols3, o5));
    TIME ("dense1 fwd", f4, be->dense_forward (n, 576, 64, o5, k4, b4, ZA_ACT_RELU, o6));
    TIME ("dense2 fwd", f5, be->dense_forward (n, 64, 10, o6, k5, b5, ZA_ACT_NONE, o7));
    int correct;
    TIME ("softmax_xent", 0, be->softmax_xent (n, 10, o7, labels, g7, &correct, NULL));
    TIME ("dense2 bwd", 2 * f5, be->dense_backward (n, 64, 10, o6, k5, o7, ZA_ACT_NONE, g7, dk, db, g6));
    TIME ("dense1 bwd", 2 * f4, be->dense_backward (n, 576, 64, o5, k4, o6, ZA_ACT_RELU, g6, dk, db, g5));
    TIME ("conv3 bwd", 2 * f3, be->conv2d_backward (&c3, o4, cols3, k3, o5, ZA_ACT_RELU, g5, dk, db, dcols, g4));
    TIME ("pool2 bwd", 0, be->maxpool_backward (&p2, g4, am2, g3));
    TIME ("conv2 bwd", 2 * f2, be->conv2d_backward (&c2, o2, cols2, k2, o3, ZA_ACT_RELU, g3, dk, db, dcols, g2));
    TIME ("pool1 bwd", 0, be->maxpool_backward (&p1, g2, am1, g1));
    TIME ("conv1 bwd", f1, be->conv2d_backward (&c1, x, cols1, k1, o1, ZA_ACT_RELU, g1, dk, db, dcols, NULL));
    printf ("%-22s %8.3f ms  -> %.0f images/s (kernels only)\n", "total", total, n / total * 1000);
    //  What a step runs in place of conv1 and pool1 where the back end
    //  takes them as one (not in the total above).
    if (be->conv2d_pool_forward
        && be->conv2d_pool_forward (&c1, &p1, x, k1, b1, ZA_ACT_RELU, o2, am1) == 0) {
        TIME ("conv1+pool1 fwd", f1, be->conv2d_pool_forward (&c1, &p1, x, k1, b1, ZA_ACT_RELU,
                                                              o2, am1));
        TIME ("conv1+pool1 bwd", f1, be->conv2d_pool_backward (&c1, &p1, x, o2, am1,
                                                               ZA_ACT_RELU, g2, dk, db));
    }
    while (s_buffer_count)
        za_free (s_buffers [--s_buffer_count]);
    return 0;
}
