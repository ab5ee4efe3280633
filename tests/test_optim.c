/*  test_optim.c: each optimizer's update against values worked out by hand
    (two steps each, so slots and Adam's bias correction are exercised).    */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "za/za_optim.h"
#include "za/za_util.h"

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
    //  Out of place gives the same values and slots as in place, and leaves
    //  the input block untouched.
    for (int kind = 0; kind < 4; kind++) {
        za_optim_config_t c = za_optim_config_default ((za_optimizer_t) kind);
        float w1 [5] = {1, -2, 3, 0.5f, 0}, w2 [5], in [5], g [5] = {0.1f, -1, 2, 0, 3};
        float s1 [2][5], s2 [2][5];
        float *slots1 [2] = {s1 [0], s1 [1]}, *slots2 [2] = {s2 [0], s2 [1]};
        za_optim_init_slots (&c, slots1, 5);
        za_optim_init_slots (&c, slots2, 5);
        memcpy (in, w1, sizeof in);
        for (int step = 1; step <= 3; step++) {
            za_optim_apply (&c, step, w1, g, slots1, 5);
            za_optim_apply_into (&c, step, in, w2, g, slots2, 5);
            memcpy (in, w2, sizeof in);
        }
        for (int i = 0; i < 5; i++)
            cr_expect_float_eq (w1 [i], w2 [i], 1e-7, "%s [%d]", za_optim_name (c.kind), i);
        int slot_count = za_optim_slot_count (c.kind);
        for (int s = 0; s < slot_count; s++)
            for (int i = 0; i < 5; i++)
                cr_expect_float_eq (s1 [s][i], s2 [s][i], 1e-7);
    }
}
