/*  test_model.c: the layer-stack text format (canonical forms, errors that
    point at the bad token), the variable table, premade models, and a whole
    stack's gradient against finite differences of its loss.               */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_model.h"

Test (parse, seed_cnn_round_trips)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0, "%s", za_last_error ());
    cr_expect_eq (spec.count, 8);
    cr_expect_str_eq (spec.text, ZA_SEED_CNN);
    cr_expect_eq (spec.layers [0].type, ZA_LAYER_CONV2D);
    cr_expect_eq (spec.layers [0].units, 32);
    cr_expect_eq (spec.layers [0].kernel, 3);
    cr_expect_eq (spec.layers [0].act, ZA_ACT_RELU);
    cr_expect_eq (spec.layers [1].type, ZA_LAYER_MAXPOOL);
    cr_expect_eq (spec.layers [1].stride, 2);
    cr_expect_eq (spec.layers [7].units, 10);
    cr_expect_eq (spec.layers [7].act, ZA_ACT_NONE);
}

Test (parse, options_spaces_and_canonical_text)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("  Conv2D( 16, 5, stride=2, padding=same, activation=relu )"
                                  "\tmaxpool(3,1) dropout(0.25) flatten dense(10)", &spec), 0,
                  "%s", za_last_error ());
    cr_expect_str_eq (spec.text, "conv2d(16,5,stride=2,padding=same,relu) maxpool(3,1) "
                      "dropout(0.25) flatten dense(10)");
    cr_expect_eq (spec.layers [0].stride, 2);
    cr_expect_eq (spec.layers [0].padding, ZA_PADDING_SAME);
    cr_expect_float_eq (spec.layers [2].rate, 0.25f, 1e-7);
    //  Positional stride and padding words mean the same.
    za_stack_spec_t again;
    cr_assert_eq (za_stack_parse ("conv2d(16,5,2,same,relu) maxpool(3,1) dropout(0.25) "
                                  "flatten dense(10)", &again), 0);
    cr_expect_str_eq (again.text, spec.text);
}

//  Parses `text`, expects failure, and checks the message and the caret column.
static void
s_expect_parse_error (const char *text, const char *words, int column)
{
    za_stack_spec_t spec;
    za_error_set_quiet (1);
    cr_assert_eq (za_stack_parse (text, &spec), -1, "'%s' parsed", text);
    const char *error = za_last_error ();
    cr_expect (strstr (error, words) != NULL, "'%s' lacks '%s'", error, words);
    if (column > 0) {
        char where [32];
        snprintf (where, sizeof where, "column %d", column);
        cr_expect (strstr (error, where) != NULL, "'%s' lacks '%s'", error, where);
        //  The caret sits under that column on the last line.
        const char *caret = strrchr (error, '^');
        const char *line = caret;
        while (line > error && line [-1] != '\n')
            line--;
        cr_expect_eq ((int) (caret - line), column - 1 + 2, "caret at %d", (int) (caret - line));
    }
}

Test (parse, errors_point_at_token)
{
    s_expect_parse_error ("conv2d(32,3,relu) conv3d(8,3) dense(10)", "unknown layer 'conv3d'", 19);
    s_expect_parse_error ("conv2d(32,x,relu) dense(10)", "unexpected argument 'x'", 11);
    s_expect_parse_error ("conv2d(32,3,activation=tanh) dense(10)", "unknown activation", 13);
    s_expect_parse_error ("conv2d(32,3,color=red) dense(10)", "unknown option 'color'", 13);
    s_expect_parse_error ("conv2d(32) dense(10)", "needs FILTERS and KERNEL", 0);
    s_expect_parse_error ("dense(10", "expected ',' or ')'", 9);
    s_expect_parse_error ("flatten(3) dense(10)", "takes no arguments", 9);
    s_expect_parse_error ("dropout(1.5) dense(10)", "dropout rate", 9);
    s_expect_parse_error ("dense(64,relu) @ dense(10)", "unexpected '@'", 16);
    s_expect_parse_error ("dense(0)", "unexpected argument '0'", 7);
    s_expect_parse_error ("conv2d(32,3,relu) flatten", "last layer must be dense", 0);
    s_expect_parse_error ("dense(1)", "at least 2 units", 0);
    s_expect_parse_error ("", "no layers", 0);
    //  Options a layer does not take are refused, not ignored.
    s_expect_parse_error ("maxpool(2,same) flatten dense(10)", "maxpool takes no padding", 11);
    s_expect_parse_error ("flatten dense(10,stride=2)", "dense takes no stride", 18);
    s_expect_parse_error ("dropout(0.5,relu) dense(10)", "dropout takes no activation", 13);
    s_expect_parse_error ("conv2d(8,3,2,stride=3) flatten dense(10)", "stride given twice", 14);
}

Test (vars, offsets_aligned_and_names_unique)
{
    za_vars_t vars = {0};
    int64_t a [2] = {3, 5}, b [1] = {7};
    cr_assert_eq (za_vars_add (&vars, "a", 2, a), 0);
    cr_assert_eq (za_vars_add (&vars, "b", 1, b), 1);
    cr_expect_eq (vars.vars [0].offset, 0u);
    cr_expect_eq (vars.vars [1].offset, 16u);       //  15 floats, padded to 16
    cr_expect_eq (vars.total, 23u);
    cr_expect_eq (za_vars_find (&vars, "b"), 1);
    za_error_set_quiet (1);
    cr_expect_eq (za_vars_add (&vars, "a", 1, b), -1);
    int64_t bad [1] = {0};
    cr_expect_eq (za_vars_add (&vars, "c", 1, bad), -1);
}

Test (stack, seed_cnn_variables_like_keras)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0);
    za_vars_t vars = {0};
    za_input_shape_t input = {28, 28, 1};
    void *state = za_stack_model_fn ()->create (&spec, input, 4, za_backend_cpu (), &vars);
    cr_assert_not_null (state);
    cr_expect_eq (vars.count, 10);
    const char *names [] = {"conv2d/kernel", "conv2d/bias", "conv2d_1/kernel",
                            "conv2d_1/bias", "conv2d_2/kernel", "conv2d_2/bias",
                            "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
    for (int i = 0; i < 10; i++)
        cr_expect_str_eq (vars.vars [i].name, names [i]);
    //  conv2d_1/kernel is HWIO 3x3x32x64; dense/kernel is 576x64 (3*3*64 in).
    cr_expect (vars.vars [2].shape [0] == 3 && vars.vars [2].shape [2] == 32
               && vars.vars [2].shape [3] == 64);
    cr_expect (vars.vars [6].shape [0] == 576 && vars.vars [6].shape [1] == 64);
    size_t params = 0;
    for (int i = 0; i < vars.count; i++) {
        params += vars.vars [i].size;
        cr_expect_eq (vars.vars [i].offset % 16, 0u);
    }
    cr_expect_eq (params, 93322u);     //  Keras's model.summary () for this CNN
    double flops = za_stack_forward_flops (&spec, input);
    cr_expect (fabs (flops - 5588480.0) < 1, "flops %f", flops);
    za_stack_model_fn ()->destroy (&state);
    cr_expect_null (state);
}

Test (stack, premade_classifiers)
{
    za_stack_spec_t spec;
    int hidden [2] = {128, 64};
    cr_assert_eq (za_dnn_classifier_spec (&spec, hidden, 2, 3), 0);
    cr_expect_str_eq (spec.text, "flatten dense(128,relu) dense(64,relu) dense(3)");
    cr_assert_eq (za_linear_classifier_spec (&spec, 2), 0);
    cr_expect_str_eq (spec.text, "flatten dense(2)");
    za_error_set_quiet (1);
    cr_expect_eq (za_dnn_classifier_spec (&spec, hidden, 1, 1), -1);
}

Test (stack, batch_too_large_for_int_sizes_is_refused)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0);
    za_vars_t vars = {0};
    za_input_shape_t input = {28, 28, 1};
    za_error_set_quiet (1);
    cr_expect_null (za_stack_model_fn ()->create (&spec, input, 100000, za_backend_cpu (),
                                                  &vars));
    cr_expect (strstr (za_last_error (), "too large") != NULL, "%s", za_last_error ());
}

Test (stack, does_not_fit_input)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(4,5) conv2d(4,5) flatten dense(2)", &spec), 0);
    za_vars_t vars = {0};
    za_input_shape_t tiny = {6, 6, 1};
    za_error_set_quiet (1);
    cr_expect_null (za_stack_model_fn ()->create (&spec, tiny, 2, za_backend_cpu (), &vars));
    cr_expect (strstr (za_last_error (), "layer 2") != NULL, "%s", za_last_error ());
}

//  The mean loss of the whole stack on a fixed batch, as a function of the
//  variable values.
typedef struct {
    void *state;
    const float *features;
    const int32_t *labels;
    int n;
    float *values;
} s_model_case_t;

static double
s_model_loss (s_model_case_t *c)
{
    za_spec_t spec;
    cr_assert_eq (za_stack_model_fn ()->model_fn (c->state, c->features, c->labels, c->n,
                                                  ZA_MODE_EVAL, c->values, NULL, 0, &spec), 0);
    return spec.loss_sum / c->n;
}

//  A layer stack of `text` on the CPU for batches of up to n, with a block
//  of values (zeros until the caller initialises them) and of gradients.
typedef struct {
    za_stack_spec_t spec;
    const za_model_fn_t *fn;
    za_vars_t vars;
    void *state;
    float *values, *grads;
} s_stack_t;

static void
s_stack_new (s_stack_t *s, const char *text, za_input_shape_t input, int n)
{
    memset (s, 0, sizeof *s);
    cr_assert_eq (za_stack_parse (text, &s->spec), 0, "%s", za_last_error ());
    s->fn = za_stack_model_fn ();
    s->state = s->fn->create (&s->spec, input, n, za_backend_cpu (), &s->vars);
    cr_assert_not_null (s->state, "%s", za_last_error ());
    s->values = (float *) za_alloc (s->vars.total * sizeof (float));
    s->grads = (float *) za_alloc (s->vars.total * sizeof (float));
}

static void
s_stack_free (s_stack_t *s)
{
    s->fn->destroy (&s->state);
    za_free (s->values), za_free (s->grads);
}

static void
s_stack_gradcheck (const char *text, za_input_shape_t input, int n, uint64_t seed)
{
    s_stack_t stack;
    s_stack_new (&stack, text, input, n);
    const za_model_fn_t *fn = stack.fn;
    const za_vars_t *vars = &stack.vars;
    void *state = stack.state;
    float *values = stack.values, *grads = stack.grads;
    fn->init_vars (state, vars, values, seed);
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    //  Biases start at zero; nudge them so relu kinks are not all at one place.
    for (size_t i = 0; i < vars->total; i++)
        values [i] += 0.05f * (2 * za_rng_uniform (&rng) - 1);
    size_t in_size = (size_t) input.height * input.width * input.channels;
    float *features = (float *) za_alloc ((size_t) n * in_size * sizeof (float));
    int32_t labels [16];
    for (size_t i = 0; i < (size_t) n * in_size; i++)
        features [i] = za_rng_uniform (&rng);
    int classes = stack.spec.layers [stack.spec.count - 1].units;
    for (int i = 0; i < n; i++)
        labels [i] = (int32_t) za_rng_below (&rng, (uint32_t) classes);
    za_spec_t out;
    cr_assert_eq (fn->model_fn (state, features, labels, n, ZA_MODE_TRAIN, values, grads, 0,
                                &out), 0);
    s_model_case_t c = {state, features, labels, n, values};
    //  Small enough that no relu or max-pool choice flips under the probe.
    const double eps = 3e-3;
    for (int v = 0; v < vars->count; v++) {
        const za_var_t *var = &vars->vars [v];
        for (int p = 0; p < 6; p++) {
            size_t i = var->offset + za_rng_below (&rng, (uint32_t) var->size);
            float saved = values [i];
            values [i] = saved + (float) eps;
            double up = s_model_loss (&c);
            values [i] = saved - (float) eps;
            double down = s_model_loss (&c);
            values [i] = saved;
            double numeric = (up - down) / (2 * eps);
            double diff = fabs (numeric - grads [i]);
            cr_expect (diff < 2e-3 || diff < 5e-2 * fabs (numeric),
                       "%s[%zu]: analytic %.6f numeric %.6f", var->name, i - var->offset,
                       grads [i], numeric);
        }
    }
    s_stack_free (&stack);
    za_free (features);
}

Test (stack, whole_model_gradient_cnn)
{
    za_input_shape_t input = {8, 8, 2};
    s_stack_gradcheck ("conv2d(4,3,relu) maxpool(2) conv2d(3,2,padding=same) flatten "
                       "dense(5,relu) dense(3)", input, 3, 41);
}

Test (stack, whole_model_gradient_dnn_with_relu_layer)
{
    za_input_shape_t input = {3, 4, 1};
    s_stack_gradcheck ("flatten dense(6) relu dense(4)", input, 5, 42);
}

//  A layer type added as its own source and one ZA_LAYER_TYPES row.
Test (stack, whole_model_gradient_global_average_pool)
{
    za_input_shape_t input = {6, 5, 2};
    s_stack_gradcheck ("conv2d(4,3,relu,padding=same) globalavgpool dense(3)", input, 4, 43);
}

Test (stack, global_average_pool_parses_and_shapes)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) GlobalAveragePooling2D dense(4)", &spec), 0,
                  "%s", za_last_error ());
    cr_expect_eq (spec.layers [1].type, ZA_LAYER_GLOBALAVGPOOL);
    cr_expect_str_eq (spec.text, "conv2d(8,3,relu) globalavgpool dense(4)");
    za_vars_t vars = {0};
    void *state = za_stack_model_fn ()->create (&spec, (za_input_shape_t) {10, 10, 1}, 2,
                                                za_backend_cpu (), &vars);
    cr_assert_not_null (state);
    //  dense/kernel reads the 8 channel means, whatever the image size.
    int dense = za_vars_find (&vars, "dense/kernel");
    cr_assert_geq (dense, 0);
    cr_expect (vars.vars [dense].shape [0] == 8 && vars.vars [dense].shape [1] == 4);
    za_stack_model_fn ()->destroy (&state);
    s_expect_parse_error ("conv2d(8,3) globalavgpool(2) dense(4)", "takes no arguments", 27);
}

Test (stack, add_appends_layers_like_keras_model_add)
{
    za_stack_spec_t spec;
    za_stack_init (&spec);
    cr_assert_eq (za_stack_add (&spec, "conv2d(8,3,relu) maxpool(2)"), 0);
    cr_assert_eq (za_stack_add (&spec, "globalavgpool"), 0);
    cr_assert_eq (za_stack_dense (&spec, 10, ZA_ACT_NONE), 0);
    cr_assert_eq (za_stack_finish (&spec), 0);
    cr_expect_str_eq (spec.text, "conv2d(8,3,relu) maxpool(2) globalavgpool dense(10)");
    za_error_set_quiet (1);
    cr_expect_eq (za_stack_add (&spec, "dense(10) pool(2)"), -1);
    cr_expect (strstr (za_last_error (), "unknown layer 'pool'") != NULL, "%s",
               za_last_error ());
    cr_expect (strstr (za_last_error (), "globalavgpool") != NULL, "the known list: %s",
               za_last_error ());
}

Test (stack, dropout_is_identity_in_eval_and_masks_in_train)
{
    s_stack_t stack;
    s_stack_new (&stack, "flatten dropout(0.5) dense(2)", (za_input_shape_t) {1, 1, 64}, 1);
    const za_model_fn_t *fn = stack.fn;
    void *state = stack.state;
    float *values = stack.values, *grads = stack.grads;
    //  Kernel of ones on column 0: logit 0 = sum of the (dropped-out) inputs.
    const za_var_t *kernel = &stack.vars.vars [za_vars_find (&stack.vars, "dense/kernel")];
    for (int i = 0; i < 64; i++)
        values [kernel->offset + (size_t) i * 2] = 1.0f;
    float features [64];
    for (int i = 0; i < 64; i++)
        features [i] = 1.0f;
    int32_t label = 0;
    za_spec_t out;
    cr_assert_eq (fn->model_fn (state, features, &label, 1, ZA_MODE_EVAL, values, NULL, 0, &out), 0);
    cr_expect_float_eq (out.logits [0], 64.0f, 1e-4);
    cr_assert_eq (fn->model_fn (state, features, &label, 1, ZA_MODE_TRAIN, values, grads, 3, &out), 0);
    //  Each input is 0 or 2: the sum is even and (almost surely) not 64.
    float logit = out.logits [0];
    cr_expect (fmodf (logit, 2.0f) == 0.0f && logit != 64.0f, "logit %f", logit);
    s_stack_free (&stack);
}

//  The profile (bench_train's ZA_BENCH_PROFILE) names each row a step used
//  and adds its time only while on; row ZA_MAX_LAYERS is the loss.
Test (stack, profile_counts_each_layer_while_on)
{
    s_stack_t stack;
    s_stack_new (&stack, "conv2d(8,3,relu) maxpool(2) flatten dense(10)",
                 (za_input_shape_t) {12, 12, 1}, 4);
    const za_model_fn_t *fn = stack.fn;
    void *state = stack.state;
    float *values = stack.values, *grads = stack.grads;
    fn->init_vars (state, &stack.vars, values, 1);
    float features [4 * 144];
    for (int i = 0; i < 4 * 144; i++)
        features [i] = (float) (i % 13) / 13.0f;
    int32_t labels [4] = {1, 2, 3, 4};
    za_spec_t out;
    double forward, backward;
    const char *name;
    za_stack_profile_start ();
    for (int step = 0; step < 3; step++)
        cr_assert_eq (fn->model_fn (state, features, labels, 4, ZA_MODE_TRAIN, values, grads,
                                    step, &out), 0);
    za_stack_profile_stop ();
    //  The first convolution either goes as one with its pool (row 0 holds
    //  both, row 1 stays unnamed) or on its own.
    cr_assert_eq (za_stack_profile_get (0, &forward, &backward, &name), 0);
    cr_assert_not_null (name);
    cr_expect (strncmp (name, "conv2d", 6) == 0, "row 0: %s", name);
    cr_expect (forward > 0 && backward > 0, "row 0: %g %g", forward, backward);
    cr_assert_eq (za_stack_profile_get (3, &forward, &backward, &name), 0);
    cr_assert_not_null (name);
    cr_expect_str_eq (name, "dense");
    cr_expect (forward > 0 && backward > 0, "dense: %g %g", forward, backward);
    cr_assert_eq (za_stack_profile_get (4, &forward, &backward, &name), 0);
    cr_expect_null (name, "no fifth layer");
    cr_assert_eq (za_stack_profile_get (ZA_MAX_LAYERS, &forward, &backward, &name), 0);
    cr_assert_not_null (name);
    cr_expect_str_eq (name, "loss");
    cr_expect (forward > 0, "loss: %g", forward);
    //  Off: another step adds nothing.
    double before;
    za_stack_profile_get (0, &before, &backward, &name);
    cr_assert_eq (fn->model_fn (state, features, labels, 4, ZA_MODE_TRAIN, values, grads, 3,
                                &out), 0);
    za_stack_profile_get (0, &forward, &backward, &name);
    cr_expect_eq (forward, before);
    cr_expect_eq (za_stack_profile_get (ZA_MAX_LAYERS + 1, &forward, &backward, &name), -1);
    cr_expect_eq (za_stack_profile_get (-1, &forward, &backward, &name), -1);
    s_stack_free (&stack);
}

//  The mean-loss gradient of a TRAIN call, into grads (cleared first).
static void
s_grads (void *state, const float *features, const int32_t *labels, int n,
         const float *values, float *grads, size_t total)
{
    memset (grads, 0, total * sizeof (float));
    za_spec_t out;
    cr_assert_eq (za_stack_model_fn ()->model_fn (state, features, labels, n, ZA_MODE_TRAIN,
                                                  values, grads, 0, &out), 0, "%s",
                  za_last_error ());
}

//  A back end may keep what it derives from a kernel (oneDNN's reordered
//  copy) while the values epoch holds (za_model_set_values_epoch): two
//  convolutions of one geometry still each compute with their own kernel,
//  and values changed in place under a new epoch are read anew. The
//  gradients are, to the bit, those of calls that keep nothing (epoch 0).
static void
s_epoch_case (const char *precision)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu,padding=same) conv2d(8,3,relu,padding=same)"
                                  " conv2d(8,3,relu,padding=same) flatten dense(3)", &spec), 0);
    const za_backend_t *be = za_backend_mixed (za_backend_cpu (), precision);
    if (!be)
        return;                         //  bf16 on a CPU that does not compute it
    enum { N = 4 };
    za_input_shape_t input = {8, 8, 1};
    za_vars_t vars = {0};
    void *state = za_stack_model_fn ()->create (&spec, input, N, be, &vars);
    cr_assert_not_null (state, "%s", za_last_error ());
    size_t total = vars.total, bytes = total * sizeof (float);
    float *values = (float *) za_alloc (bytes), *first = (float *) za_alloc (bytes);
    float *grads = (float *) za_alloc (bytes), *want [2];
    want [0] = (float *) za_alloc (bytes), want [1] = (float *) za_alloc (bytes);
    za_stack_model_fn ()->init_vars (state, &vars, values, 7);
    memcpy (first, values, bytes);
    za_rng_t rng;
    za_rng_seed (&rng, 7);
    float features [N * 64];
    int32_t labels [N] = {0, 1, 2, 1};
    for (int i = 0; i < N * 64; i++)
        features [i] = za_rng_uniform (&rng);
    //  The references, nothing kept: at the first values, then changed in place.
    za_model_set_values_epoch (0);
    s_grads (state, features, labels, N, values, want [0], total);
    for (size_t i = 0; i < total; i++)
        values [i] = 1.25f * values [i] + 0.01f;
    s_grads (state, features, labels, N, values, want [1], total);
    memcpy (values, first, bytes);

    za_model_set_values_epoch (5);
    for (int call = 0; call < 2; call++) {
        s_grads (state, features, labels, N, values, grads, total);
        cr_expect_eq (memcmp (grads, want [0], bytes), 0, "%s, epoch 5, call %d", precision,
                      call);
    }
    for (size_t i = 0; i < total; i++)
        values [i] = 1.25f * values [i] + 0.01f;
    za_model_set_values_epoch (6);
    s_grads (state, features, labels, N, values, grads, total);
    cr_expect_eq (memcmp (grads, want [1], bytes), 0, "%s, epoch 6: the changed values",
                  precision);
    za_model_set_values_epoch (0);
    za_stack_model_fn ()->destroy (&state);
    za_free (values), za_free (first), za_free (grads), za_free (want [0]), za_free (want [1]);
}

Test (stack, kept_kernels_follow_the_values_epoch)
{
    cr_assert_not_null (za_backend_mixed (za_backend_cpu (), "fp32"));
    s_epoch_case ("fp32");
    s_epoch_case ("mixed_bfloat16");
    //  float16 rounds the kernel into a buffer every layer shares, then
    //  goes through the fp32 convolution: nothing kept by that address.
    s_epoch_case ("mixed_float16");
}

Test (stack, whole_model_gradient_first_layer_and_pool_as_one)
{
    //  3x3 on one channel, then 2x2 max-pool: one pass each way on AVX-512.
    za_input_shape_t input = {8, 8, 1};
    s_stack_gradcheck ("conv2d(16,3) maxpool(2) flatten dense(3,relu) dense(2)", input, 3, 44);
}

static int
s_declines (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p, const float *in,
            const float *pool_out, const int32_t *argmax, za_act_t act, const float *pool_dout,
            float *dkernel, float *dbias)
{
    (void) d, (void) p, (void) in, (void) pool_out, (void) argmax, (void) act;
    (void) pool_dout, (void) dkernel, (void) dbias;
    return -1;
}

//  The stack's gradients are the same whether its first layer and max-pool
//  go as one, each on its own (a back end without the pair), or as one
//  forward and then, the back end declining the pair's backward, each on
//  its own backward (the convolution's output made again).
Test (stack, first_layer_and_pool_as_one_or_not_give_one_gradient)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(32,3,relu) maxpool(2) conv2d(16,3,relu) flatten "
                                  "dense(10)", &spec), 0);
    za_backend_t apart = *za_backend_cpu (), declines = apart;
    apart.conv2d_pool_forward = NULL;
    apart.conv2d_pool_backward = NULL;
    declines.conv2d_pool_backward = s_declines;
    const za_backend_t *tables [3] = {za_backend_cpu (), &apart, &declines};
    enum { N = 5 };
    za_input_shape_t input = {12, 12, 1};
    za_rng_t rng;
    za_rng_seed (&rng, 45);
    float features [N * 144];
    int32_t labels [N] = {1, 7, 3, 0, 9};
    for (int i = 0; i < N * 144; i++)
        features [i] = za_rng_uniform (&rng);
    float *grads [3], *values = NULL;
    size_t total = 0;
    for (int t = 0; t < 3; t++) {
        za_vars_t vars = {0};
        void *state = za_stack_model_fn ()->create (&spec, input, N, tables [t], &vars);
        cr_assert_not_null (state, "%s", za_last_error ());
        total = vars.total;
        if (!values) {
            values = (float *) za_alloc (total * sizeof (float));
            za_stack_model_fn ()->init_vars (state, &vars, values, 45);
        }
        grads [t] = (float *) za_alloc (total * sizeof (float));
        s_grads (state, features, labels, N, values, grads [t], total);
        za_stack_model_fn ()->destroy (&state);
    }
    double top = 0;
    for (size_t i = 0; i < total; i++)
        top = fmax (top, fabs (grads [1][i]));
    cr_assert_gt (top, 0);
    for (int t = 0; t < 3; t += 2)
        for (size_t i = 0; i < total; i++)
            cr_expect (fabs (grads [t][i] - grads [1][i]) <= 1e-5 * top,
                       "table %d, gradient %zu: %g, apart %g", t, i, grads [t][i],
                       grads [1][i]);
    for (int t = 0; t < 3; t++)
        za_free (grads [t]);
    za_free (values);
}

//  A device may replay a stack's step (a CUDA graph) only where its work is
//  the same at every step: not with a dropout (its mask follows the step),
//  nor a frozen layer (a back end keeps what it derives from one).
Test (stack, replayable_without_dropout_or_frozen_layers)
{
    const char *texts [] = {ZA_SEED_CNN,
                            "conv2d(8,3,relu) maxpool(2) flatten dropout(0.5) dense(10)",
                            "conv2d(8,3,relu,trainable=false) maxpool(2) flatten dense(10)"};
    const int expected [] = {1, 0, 0};
    const za_model_fn_t *fn = za_stack_model_fn ();
    cr_assert_not_null (fn->replayable);
    for (int i = 0; i < 3; i++) {
        za_stack_spec_t spec;
        cr_assert_eq (za_stack_parse (texts [i], &spec), 0, "%s", za_last_error ());
        za_vars_t vars = {0};
        za_input_shape_t input = {28, 28, 1};
        void *state = fn->create (&spec, input, 4, za_backend_cpu (), &vars);
        cr_assert_not_null (state, "%s: %s", texts [i], za_last_error ());
        cr_expect_eq (fn->replayable (state), expected [i], "%s", texts [i]);
        fn->destroy (&state);
    }
}
