/*  test_optim.c: each optimizer's update against values worked out by hand
    (two steps each, so slots and Adam's bias correction are exercised).    */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_checkpoint.h"
#include "za/za_optim.h"
#include "za/za_util.h"
#include "za_test.h"

static void
s_step (za_optim_config_t *c, int64_t step, float *w, float g, float **slots)
{
    za_optim_apply (c, step, w, &g, slots, 1);
}

Test (optim, sgd)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_SGD);
    c.learning_rate = 0.1f;
    float w = 1.0f;
    s_step (&c, 1, &w, 0.5f, NULL);
    cr_expect_float_eq (w, 0.95f, 1e-7);
    s_step (&c, 2, &w, -2.0f, NULL);
    cr_expect_float_eq (w, 1.15f, 1e-6);
}

Test (optim, momentum)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_MOMENTUM);
    c.learning_rate = 0.1f;
    float w = 1.0f, a = 0;
    float *slots [1] = {&a};
    za_optim_init_slots (&c, slots, 1);
    s_step (&c, 1, &w, 1.0f, slots);     //  a = 1,   w = 1 - 0.1
    cr_expect_float_eq (w, 0.9f, 1e-6);
    s_step (&c, 2, &w, 1.0f, slots);     //  a = 1.9, w = 0.9 - 0.19
    cr_expect_float_eq (a, 1.9f, 1e-6);
    cr_expect_float_eq (w, 0.71f, 1e-6);
}

Test (optim, momentum_nesterov)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_MOMENTUM);
    c.learning_rate = 0.1f;
    c.nesterov = 1;
    float w = 1.0f, a = 0;
    float *slots [1] = {&a};
    s_step (&c, 1, &w, 1.0f, slots);     //  a = 1, w -= 0.1 * (1 + 0.9)
    cr_expect_float_eq (w, 0.81f, 1e-6);
}

Test (optim, adam)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_ADAM);
    c.learning_rate = 0.1f;
    float w = 1.0f, m = 0, v = 0;
    float *slots [2] = {&m, &v};
    za_optim_init_slots (&c, slots, 1);
    //  Step 1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25, w -= 0.1 * 0.5 / 0.5.
    s_step (&c, 1, &w, 0.5f, slots);
    cr_expect_float_eq (m, 0.05f, 1e-7);
    cr_expect_float_eq (v, 0.00025f, 1e-7);
    cr_expect_float_eq (w, 0.90000002f, 1e-6);
    //  Step 2 with g = -1: m = -0.055, v = 0.00124975, w = 0.936610368.
    s_step (&c, 2, &w, -1.0f, slots);
    cr_expect_float_eq (m, -0.055f, 1e-7);
    cr_expect_float_eq (v, 0.00124975f, 1e-7);
    cr_expect_float_eq (w, 0.93661037f, 2e-6);
}

//  Subnormal floats are zero in the update (FTZ and DAZ, as TensorFlow's
//  CPU threads): Adam's second moment of a gradient of 1e-20 would be
//  1e-43, which x86 computes ~30x slower. The caller's own MXCSR comes back.
Test (optim, subnormals_are_zero_in_the_update)
{
#if defined (__SSE__)
    za_optim_config_t c = za_optim_config_default (ZA_OPT_ADAM);
    float w [2] = {1.0f, 1.0f}, g [2] = {1e-20f, 0.5f}, m [2] = {0}, v [2] = {0};
    float *slots [2] = {m, v};
    volatile float tiny = 1e-39f;
    cr_assert (tiny * 1.0f != 0.0f, "this thread computes subnormals");
    za_optim_apply (&c, 1, w, g, slots, 2);
    cr_expect_eq (v [0], 0.0f, "v = %g: the subnormal was kept", (double) v [0]);
    cr_expect_gt (v [1], 0.0f);
    cr_expect (tiny * 1.0f != 0.0f, "the caller's MXCSR was left flushing");
    //  A subnormal value reads as zero: plain SGD with no gradient zeroes it.
    za_optim_config_t sgd = za_optim_config_default (ZA_OPT_SGD);
    float small [1] = {1e-39f}, none [1] = {0.0f};
    za_optim_apply (&sgd, 1, small, none, NULL, 1);
    cr_expect_eq (small [0], 0.0f);
#else
    cr_skip_test ("no SSE: the update keeps subnormals");
#endif
}

Test (optim, adagrad)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_ADAGRAD);
    c.learning_rate = 0.1f;
    float w = 1.0f, acc = 0;
    float *slots [1] = {&acc};
    za_optim_init_slots (&c, slots, 1);
    cr_expect_float_eq (acc, 0.1f, 1e-7);       //  TensorFlow's initial accumulator
    s_step (&c, 1, &w, 2.0f, slots);            //  acc = 4.1, w -= 0.2 / sqrt 4.1
    cr_expect_float_eq (acc, 4.1f, 1e-6);
    cr_expect_float_eq (w, 0.90122705f, 1e-6);
    s_step (&c, 2, &w, -1.0f, slots);           //  acc = 5.1
    cr_expect_float_eq (w, 0.94550779f, 1e-6);
}

Test (optim, whole_block_in_one_call)
{
    //  One call updates every element of the block independently.
    za_optim_config_t c = za_optim_config_default (ZA_OPT_SGD);
    c.learning_rate = 0.5f;
    float w [37], g [37];
    for (int i = 0; i < 37; i++)
        w [i] = (float) i, g [i] = (float) (i % 5);
    za_optim_apply (&c, 1, w, g, NULL, 37);
    for (int i = 0; i < 37; i++)
        cr_assert_float_eq (w [i], (float) i - 0.5f * (float) (i % 5), 1e-6);
}

Test (optim, names_and_slots)
{
    za_optimizer_t kind;
    cr_expect_eq (za_optim_parse ("Adam", &kind), 0);
    cr_expect_eq (kind, ZA_OPT_ADAM);
    cr_expect_eq (za_optim_slot_count (ZA_OPT_ADAM), 2);
    cr_expect_str_eq (za_optim_slot_name (ZA_OPT_ADAM, 1), "v");
    cr_expect_eq (za_optim_slot_count (ZA_OPT_SGD), 0);
    cr_expect_float_eq (za_optim_config_default (ZA_OPT_ADAM).learning_rate, 1e-3f, 1e-9);
    za_error_set_quiet (1);
    cr_expect_eq (za_optim_parse ("rmsprop", &kind), -1);
    cr_expect (strstr (za_last_error (), "rmsprop") != NULL);
    cr_expect (strstr (za_last_error (), "adagrad") != NULL);
}

Test (optim, apply_into_matches_in_place)
{
    //  Out of place gives the same bits, values and slots, as in place, and
    //  leaves the input block untouched; both agree with Adam's formula
    //  written out here. 37 floats: vector loops and their tails.
    enum { N = 37 };
    for (int kind = 0; kind < 4; kind++)
        for (int decay = 0; decay < 2; decay++) {
            za_optim_config_t c = za_optim_config_default ((za_optimizer_t) kind);
            c.weight_decay = decay? 0.01f: 0;
            float w1 [N], w2 [N], in [N], before [N], g [N], m [N] = {0}, v [N] = {0};
            float s1 [2][N], s2 [2][N];
            float *slots1 [2] = {s1 [0], s1 [1]}, *slots2 [2] = {s2 [0], s2 [1]};
            for (int i = 0; i < N; i++) {
                w1 [i] = (float) (i % 7) - 3.25f;
                g [i] = (float) ((i * 5) % 11) * 0.3f - 1.4f;
            }
            za_optim_init_slots (&c, slots1, N);
            za_optim_init_slots (&c, slots2, N);
            memcpy (in, w1, sizeof in);
            float expected [N];
            memcpy (expected, w1, sizeof expected);
            for (int step = 1; step <= 3; step++) {
                memcpy (before, in, sizeof before);
                za_optim_apply (&c, step, w1, g, slots1, N);
                za_optim_apply_into (&c, step, in, w2, g, slots2, N);
                cr_expect_eq (memcmp (in, before, sizeof in), 0, "the input block changed");
                memcpy (in, w2, sizeof in);
                if (kind != ZA_OPT_ADAM)
                    continue;
                double lr = c.learning_rate, b1 = c.beta1, b2 = c.beta2;
                for (int i = 0; i < N; i++) {
                    double w = expected [i] * (1 - lr * c.weight_decay);
                    m [i] = (float) (b1 * m [i] + (1 - b1) * g [i]);
                    v [i] = (float) (b2 * v [i] + (1 - b2) * g [i] * g [i]);
                    double mhat = m [i] / (1 - pow (b1, step));
                    double vhat = v [i] / (1 - pow (b2, step));
                    expected [i] = (float) (w - lr * mhat / (sqrt (vhat) + c.epsilon));
                }
            }
            cr_expect_eq (memcmp (w1, w2, sizeof w1), 0, "%s, decay %d: values differ",
                          za_optim_name (c.kind), decay);
            int slot_count = za_optim_slot_count (c.kind);
            for (int s = 0; s < slot_count; s++)
                cr_expect_eq (memcmp (s1 [s], s2 [s], sizeof s1 [s]), 0, "%s: slot %d differs",
                              za_optim_name (c.kind), s);
            for (int i = 0; kind == ZA_OPT_ADAM && i < N; i++)
                cr_expect_float_eq (w1 [i], expected [i], 1e-5f * (1 + fabsf (expected [i])),
                                    "adam, decay %d [%d]: %.9g, formula %.9g", decay, i,
                                    w1 [i], expected [i]);
        }
}

// ---------------------------------------------------------------------------
//  Learning-rate schedules, against TensorFlow's documented formulas, here
//  with numbers worked by hand: the rate of update `step` is the schedule at
//  global step s = step - 1. SGD with a gradient of 1 moves w by -lr, so
//  the rate an update used is what w lost.

static double
s_rate (const char *text, double lr, int warmup, int64_t step)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_SGD);
    c.learning_rate = (float) lr;
    c.schedule.warmup_steps = warmup;
    if (text)
        cr_assert_eq (za_schedule_parse (text, &c.schedule), 0, "%s", za_last_error ());
    char why [128];
    cr_assert_eq (za_optim_config_check (&c, why, sizeof why), 0, "%s", why);
    float w = 0, g = 1, *slots [1] = {NULL};
    za_optim_apply (&c, step, &w, &g, slots, 1);
    return -w;
}

Test (schedule, each_as_tensorflow_computes_it)
{
    //  exponential_decay: 0.1 * 0.5 ^ (s / 10); staircase: floor.
    const char *exp = "exponential_decay(decay_steps=10, decay_rate=0.5)";
    cr_expect_float_eq (s_rate (exp, 0.1, 0, 1), 0.1, 1e-7);
    cr_expect_float_eq (s_rate (exp, 0.1, 0, 11), 0.05, 1e-7);
    cr_expect_float_eq (s_rate (exp, 0.1, 0, 16), 0.1 * pow (0.5, 1.5), 1e-7);
    cr_expect_float_eq (s_rate ("exponential_decay(decay_steps=10, decay_rate=0.5, "
                                "staircase=true)", 0.1, 0, 16), 0.05, 1e-7);
    //  piecewise_constant: s <= 10: 1; s <= 20: 0.5; after: 0.1.
    const char *pieces = "piecewise_constant(boundaries=[10, 20], values=[1.0, 0.5, 0.1])";
    cr_expect_float_eq (s_rate (pieces, 0.1, 0, 11), 1.0, 1e-7);
    cr_expect_float_eq (s_rate (pieces, 0.1, 0, 12), 0.5, 1e-7);
    cr_expect_float_eq (s_rate (pieces, 0.1, 0, 21), 0.5, 1e-7);
    cr_expect_float_eq (s_rate (pieces, 0.1, 0, 22), 0.1, 1e-7);
    //  cosine_decay: half way 0.05; at and past decay_steps alpha's floor.
    cr_expect_float_eq (s_rate ("cosine_decay(decay_steps=100)", 0.1, 0, 51), 0.05, 1e-7);
    cr_expect_float_eq (s_rate ("cosine_decay(decay_steps=100)", 0.1, 0, 301), 0.0, 1e-7);
    cr_expect_float_eq (s_rate ("cosine_decay(decay_steps=100, alpha=0.1)", 0.1, 0, 101),
                        0.01, 1e-7);
    cr_expect_float_eq (s_rate ("cosine_decay(decay_steps=100)", 0.1, 0, 26),
                        0.1 * 0.5 * (1 + cos (3.14159265358979 / 4)), 1e-7);
    //  cosine_decay_restarts: periods 10, 20 (t_mul 2); the second peaks at
    //  m_mul = 0.5; half way through the first, 0.05.
    const char *sgdr = "cosine_decay_restarts(first_decay_steps=10, t_mul=2.0, m_mul=0.5)";
    cr_expect_float_eq (s_rate (sgdr, 0.1, 0, 6), 0.05, 1e-7);
    cr_expect_float_eq (s_rate (sgdr, 0.1, 0, 11), 0.05, 1e-7, "the restart, at half");
    cr_expect_float_eq (s_rate (sgdr, 0.1, 0, 21), 0.025, 1e-7, "half way through the second");
    //  Periods 1, 10, 100 (t_mul 10): the fourth starts at step 111, at the peak.
    const char *tenfold = "cosine_decay_restarts(first_decay_steps=1, t_mul=10)";
    cr_expect_float_eq (s_rate (tenfold, 0.1, 0, 112), 0.1, 1e-7, "the restart at step 111");
    cr_expect_float_eq (s_rate (tenfold, 0.1, 0, 12), 0.1, 1e-7, "the restart at step 11");
    cr_expect_float_eq (s_rate (tenfold, 0.1, 0, 62), 0.05, 1e-7, "half way through the third");
    //  polynomial_decay: (0.1 - 0.01) (1 - 50/100)^2 + 0.01 = 0.0325; past the
    //  end, the end rate; cycling, the period doubles.
    const char *poly = "polynomial_decay(decay_steps=100, end_learning_rate=0.01, power=2)";
    cr_expect_float_eq (s_rate (poly, 0.1, 0, 51), 0.0325, 1e-7);
    cr_expect_float_eq (s_rate (poly, 0.1, 0, 500), 0.01, 1e-7);
    cr_expect_float_eq (s_rate ("polynomial_decay(decay_steps=100, end_learning_rate=0.01, "
                                "power=2, cycle=true)", 0.1, 0, 151),
                        0.09 * 0.0625 + 0.01, 1e-7, "150 of a 200-step period");
    //  A linear warm-up over 10 steps to the schedule's rate at step 10.
    cr_expect_float_eq (s_rate (NULL, 0.1, 10, 1), 0.01, 1e-7);
    cr_expect_float_eq (s_rate (NULL, 0.1, 10, 5), 0.05, 1e-7);
    cr_expect_float_eq (s_rate (NULL, 0.1, 10, 11), 0.1, 1e-7);
    cr_expect_float_eq (s_rate ("cosine_decay(decay_steps=20)", 0.1, 10, 5),
                        0.05 * 0.5, 1e-7, "half of cosine's 0.05 at step 10");
}

Test (schedule, what_is_wrong_is_said)
{
    za_schedule_t s = {0};
    za_error_set_quiet (1);
    struct {
        const char *text, *says;
    } cases [] = {
        {"linear_decay(decay_steps=10)", "give constant"},
        {"cosine_decay(alpha=0.1)", "needs decay_steps > 0"},
        {"cosine_decay(decay_steps=ten)", "decay_steps=ten is not a number"},
        {"exponential_decay(decay_steps=10)", "needs decay_rate > 0"},
        {"piecewise_constant(boundaries=[10, 5], values=[1, 2, 3])", "boundaries must rise"},
        {"piecewise_constant(boundaries=[10], values=[1])", "1 boundaries need 2 values"},
        {"cosine_decay(decay_steps=10, gamma=2)", "no argument 'gamma'"},
        {"cosine_decay(decay_steps=2, decay_rate=0.5)", "no argument 'decay_rate' "
                                                        "(cosine_decay takes decay_steps, alpha)"},
        {"exponential_decay(decay_steps=1, decay_rate=0.5, cycle=true)", "no argument 'cycle'"},
        {"cosine_decay_restarts(decay_steps=10)", "takes first_decay_steps, t_mul"},
        {"constant(alpha=0.1)", "constant takes none"},
        {"cosine_decay(decay_steps=2, =3)", "no argument ''"},
        {"exponential_decay(decay_steps=10, decay_rate=0.5, staircase=maybe)",
         "true or false"},
        {"function", "a program's C function"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        cr_expect_eq (za_schedule_parse (cases [c].text, &s), -1, "%s", cases [c].text);
        cr_expect (strstr (za_last_error (), cases [c].says), "%s: %s", cases [c].text,
                   za_last_error ());
    }
    za_error_set_quiet (0);
}

//  A schedule's numbers (what the wire carries) give it back whole.
Test (schedule, numbers_round_trip)
{
    za_schedule_t s = {
        .kind = ZA_SCHEDULE_POLYNOMIAL, .decay_steps = 3, .decay_rate = 4, .staircase = 1,
        .alpha = 5, .t_mul = 6, .m_mul = 7, .end_learning_rate = 8, .power = 9, .cycle = 1,
        .boundary_count = ZA_SCHEDULE_PIECES_MAX, .warmup_steps = 11,
    };
    for (int i = 0; i < ZA_SCHEDULE_PIECES_MAX; i++)
        s.boundaries [i] = 100 + i, s.values [i] = 200 + i;
    s.values [ZA_SCHEDULE_PIECES_MAX] = 300;
    double numbers [ZA_SCHEDULE_NUMBERS + 1];
    numbers [ZA_SCHEDULE_NUMBERS] = -12345;
    za_schedule_numbers (&s, numbers);
    cr_expect_eq (numbers [ZA_SCHEDULE_NUMBERS], -12345, "no number past the count");
    cr_expect_eq (numbers [ZA_SCHEDULE_NUMBERS - 1], 11, "the warm-up is the last");
    za_schedule_t back;
    memset (&back, 0xff, sizeof back);
    za_schedule_from_numbers (&back, numbers);
    cr_expect_eq (back.kind, s.kind);
    cr_expect (back.staircase == 1 && back.cycle == 1 && back.boundary_count == 8);
    double again [ZA_SCHEDULE_NUMBERS];
    za_schedule_numbers (&back, again);
    cr_expect_eq (memcmp (again, numbers, sizeof again), 0, "every field back");
}

//  The (step, learning_rate) of each line of MODEL_DIR/metrics.jsonl, at
//  most max; how many.
static int
s_rates (const char *model_dir, long *steps, double *rates, int max)
{
    char *path = za_test_join (model_dir, "metrics.jsonl");
    char *text = za_test_read_file (path, NULL);
    cr_assert_not_null (text, "%s", path);
    int lines = 0;
    for (char *save = NULL, *line = strtok_r (text, "\n", &save); line && lines < max;
         line = strtok_r (NULL, "\n", &save), lines++) {
        const char *at = strstr (line, "\"learning_rate\": ");
        cr_assert (at && sscanf (line, "{\"global_step\": %ld", &steps [lines]) == 1
                   && sscanf (at, "\"learning_rate\": %lf", &rates [lines]) == 1, "%s",
                   line);
    }
    free (text);
    free (path);
    return lines;
}

//  The rate in effect is in metrics.jsonl (and TensorBoard): cosine over
//  300 steps, a line every 100.
Test (schedule, the_rate_is_a_metric, .timeout = 600)
{
    za_test_dir_create ("za_schedule");
    char *model = za_test_path ("model");
    const char *args [] = {"--max-steps", "300", "--save-summary-steps", "100", "--no-eval",
                           "--lr-schedule", "cosine_decay(decay_steps=300)", "--model-dir",
                           model, NULL};
    za_test_result_t result = za_test_run (args, 600);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    long steps [16];
    double rates [16];
    int lines = s_rates (model, steps, rates, 16);
    for (int l = 0; l < lines; l++) {
        double want = 0.001 * 0.5 * (1 + cos (3.14159265358979 * (double) (steps [l] - 1)
                                               / 300));
        cr_expect (fabs (rates [l] - want) <= 1e-6 * 0.001 + 1e-12, "step %ld: %g, not %g",
                   steps [l], rates [l], want);
    }
    cr_expect_eq (lines, 3);
    free (model);
    za_test_dir_remove ();
}

//  Decoupled weight decay (Keras's weight_decay: w -= lr wd w, then the
//  update): AdamW and SGDW one step, by hand. w = 1, g = 0.5, lr = 0.1,
//  wd = 0.01: w becomes 0.999 before the update.
Test (optim, adamw_and_sgdw_one_step_by_hand)
{
    za_optim_config_t adamw = za_optim_config_default (ZA_OPT_ADAM);
    adamw.learning_rate = 0.1f;
    adamw.weight_decay = 0.01f;
    float m = 0, v = 0, *slots [2] = {&m, &v};
    float w = 1, g = 0.5f;
    za_optim_apply (&adamw, 1, &w, &g, slots, 1);
    //  m = 0.05, v = 0.00025; m/(1-0.9) = 0.5, v/(1-0.999) = 0.25: the step is
    //  0.1 * 0.5 / (0.5 + 1e-7).
    cr_expect_float_eq (w, 0.999 - 0.1 * 0.5 / (0.5 + 1e-7), 1e-6, "AdamW: %.8f", w);
    za_optim_config_t sgdw = za_optim_config_default (ZA_OPT_SGD);
    sgdw.learning_rate = 0.1f;
    sgdw.weight_decay = 0.01f;
    w = 1;
    za_optim_apply (&sgdw, 1, &w, &g, NULL, 1);
    cr_expect_float_eq (w, 0.999 - 0.05, 1e-7, "SGDW: %.8f", w);
    //  Into another block (a ps's two value blocks): the same.
    float in = 1, out = 0;
    za_optim_apply_into (&sgdw, 1, &in, &out, &g, NULL, 1);
    cr_expect_float_eq (out, 0.949, 1e-7);
    cr_expect_float_eq (in, 1.0, 0, "the input block is left as it was");
    char why [128];
    sgdw.weight_decay = 1.5f;
    cr_expect_eq (za_optim_config_check (&sgdw, why, sizeof why), -1);
    cr_expect (strstr (why, "weight_decay"), "%s", why);
}

//  tf.clip_by_global_norm: t * clip / max (norm, clip) over every range, and
//  nothing outside them.
Test (optim, clip_by_global_norm)
{
    float grads [3] = {3, 7, 4};
    size_t offset [2] = {0, 2}, size [2] = {1, 1};
    cr_expect_float_eq (za_optim_clip_by_global_norm (grads, offset, size, 2, 10), 5.0, 1e-9);
    cr_expect (grads [0] == 3 && grads [2] == 4, "under the clip: as they are");
    cr_expect_float_eq (za_optim_clip_by_global_norm (grads, offset, size, 2, 1), 5.0, 1e-9);
    cr_expect_float_eq (grads [0], 0.6, 1e-7);
    cr_expect_float_eq (grads [2], 0.8, 1e-7);
    cr_expect_eq (grads [1], 7, "outside the ranges: untouched");
    //  zactor-run takes it, and trains.
    za_test_dir_create ("za_clip");
    char *model = za_test_path ("model");
    const char *args [] = {"--max-steps", "50", "--clip-norm", "0.5", "--no-eval",
                           "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (args, 300);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    free (model);
    za_test_dir_remove ();
}

//  The largest difference between two model dirs' newest values.
static double
s_max_difference (const char *a_dir, const char *b_dir)
{
    int found;
    za_checkpoint_t *a = za_checkpoint_load_newest (a_dir, &found);
    za_checkpoint_t *b = za_checkpoint_load_newest (b_dir, &found);
    cr_assert (a && b, "%s, %s", a_dir, b_dir);
    double most = 0;
    for (int t = 0; t < za_checkpoint_tensor_count (a); t++) {
        const za_ckpt_tensor_t *x = za_checkpoint_tensor (a, t);
        const za_ckpt_tensor_t *y = za_checkpoint_find (b, x->name);
        const char *slash = strchr (x->name, '/');
        if (x->dtype != ZA_DTYPE_F32 || !slash || strchr (slash + 1, '/'))
            continue;                   //  the step, and slots (VAR/SLOT)
        cr_assert_not_null (y, "%s", x->name);
        size_t n = 1;
        for (int d = 0; d < x->ndim; d++)
            n *= (size_t) x->shape [d];
        for (size_t i = 0; i < n; i++) {
            double diff = fabs ((double) ((const float *) x->data) [i]
                                - ((const float *) y->data) [i]);
            if (diff > most)
                most = diff;
        }
    }
    za_checkpoint_destroy (&a);
    za_checkpoint_destroy (&b);
    return most;
}

//  Clipping by the global norm across 2 ps equals clipping in one process:
//  the chief clips its whole gradient before it splits it (ps-sync, SGD, the
//  same batches); weight decay and the clip reach the update from the flags.
Test (optim, clipping_across_two_ps_equals_one_process, .timeout = 900)
{
    za_test_dir_create ("za_clip_ps");
    char *one = za_test_path ("one"), *two = za_test_path ("two");
    char *free_two = za_test_path ("two_unclipped"), *decayed = za_test_path ("decayed");
    const char *common [] = {"--max-steps", "30", "--optimizer", "sgd", "--learning-rate",
                             "0.05", "--no-eval"};
    const char *one_args [] = {common [0], common [1], common [2], common [3], common [4],
                               common [5], common [6], "--clip-norm", "0.01", "--model-dir",
                               one, NULL};
    const char *two_args [] = {common [0], common [1], common [2], common [3], common [4],
                               common [5], common [6], "--clip-norm", "0.01", "--local",
                               "--strategy", "ps-sync", "--ps", "2", "--workers", "0",
                               "--evaluators", "0", "--model-dir", two, NULL};
    const char *free_args [] = {common [0], common [1], common [2], common [3], common [4],
                                common [5], common [6], "--local", "--strategy", "ps-sync",
                                "--ps", "2", "--workers", "0", "--evaluators", "0",
                                "--model-dir", free_two, NULL};
    const char *decay_args [] = {common [0], common [1], common [2], common [3], common [4],
                                 common [5], common [6], "--clip-norm", "0.01",
                                 "--weight-decay", "0.1", "--model-dir", decayed, NULL};
    const char *const *runs [] = {one_args, two_args, free_args, decay_args};
    for (int r = 0; r < 4; r++) {
        za_test_result_t result = za_test_run (runs [r], 600);
        cr_assert_eq (result.exit_code, 0, "run %d: %s", r, result.err);
        za_test_result_free (&result);
    }
    double same = s_max_difference (one, two), clipped = s_max_difference (two, free_two);
    double decay = s_max_difference (one, decayed);
    printf ("clip across 2 ps vs one process: %g; clipped vs not: %g; decayed vs not: %g\n",
            same, clipped, decay);
    cr_expect_lt (same, 1e-6, "two ps clip as one process does");
    cr_expect_gt (clipped, 1e-3, "the clip changes the training");
    cr_expect_gt (decay, 1e-4, "the weight decay changes the training");
    free (one), free (two), free (free_two), free (decayed);
    za_test_dir_remove ();
}

//  A program's function as the schedule: called with the base rate and the
//  global step before the update; a warm-up still goes first.
static double
s_tenth_after_5 (void *arg, double learning_rate, int64_t step)
{
    (void) arg;
    return step < 5? learning_rate: learning_rate / 10;
}

Test (schedule, a_program_s_function)
{
    za_optim_config_t c = za_optim_config_default (ZA_OPT_SGD);
    c.learning_rate = 0.1f;
    c.schedule = (za_schedule_t) {.kind = ZA_SCHEDULE_FUNCTION, .fn = s_tenth_after_5};
    cr_expect_float_eq (za_optim_learning_rate (&c, 1), 0.1, 1e-7);
    cr_expect_float_eq (za_optim_learning_rate (&c, 5), 0.1, 1e-7, "the update from step 4");
    cr_expect_float_eq (za_optim_learning_rate (&c, 6), 0.01, 1e-7);
    char why [256];
    cr_expect_eq (za_optim_config_check (&c, why, sizeof why), 0, "%s", why);
    c.schedule.warmup_steps = 10;
    cr_expect_float_eq (za_optim_learning_rate (&c, 1), 0.001, 1e-8, "1/10 of the rate at 10");
    cr_expect_float_eq (za_optim_learning_rate (&c, 11), 0.01, 1e-8);
}

//  custom_model_fn's own schedule (--halve-every) in a --local cluster: the
//  chief's metrics give the function's rate; the ps took the init (it runs
//  the same program) and the job ends 0. With --lr-schedule too: exit 2.
//  The chief trains alone beside its ps: with a worker it wrote a summary
//  only where its own steps passed the interval, 3 of 6 on a loaded machine.
Test (schedule, a_program_s_function_in_a_cluster, .timeout = 600)
{
    za_test_dir_create ("za_schedule_fn");
    char *model = za_test_path ("model");
    const char *args [] = {"--local", "--workers", "0", "--evaluators", "0", "--no-eval",
                           "--halve-every", "100", "--max-steps", "300",
                           "--save-summary-steps", "50", "--model-dir", model, NULL};
    za_test_result_t result = za_test_run_program ("custom_model_fn", args, 600);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    long steps [16];
    double rates [16];
    int lines = s_rates (model, steps, rates, 16), halved = 0;
    for (int l = 0; l < lines; l++) {
        double want = 0.1 * pow (0.5, floor ((double) (steps [l] - 1) / 100));
        cr_expect (fabs (rates [l] - want) <= 1e-9, "step %ld: %g, not %g", steps [l],
                   rates [l], want);
        halved += rates [l] < 0.1;
    }
    cr_expect_geq (lines, 4);
    cr_expect_geq (halved, 2);
    const char *both [] = {"--halve-every", "100", "--lr-schedule",
                           "cosine_decay(decay_steps=300)", "--max-steps", "10", "--model-dir",
                           model, NULL};
    result = za_test_run_program ("custom_model_fn", both, 60);
    cr_expect_eq (result.exit_code, 2);
    cr_expect (strstr (result.err, "has its own learning-rate schedule"), "%s", result.err);
    za_test_result_free (&result);
    free (model);
    za_test_dir_remove ();
}
