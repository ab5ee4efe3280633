/*  test_freeze.c: frozen layers (Keras's trainable=False) on Fashion-MNIST:
    a seed CNN trained, then new model dirs warm-started from its conv base
    with the base frozen and a new head: in one process, under ps-async and
    all-reduce, the frozen values are the same bits after training, the
    checkpoint holds no slots for them, and the head alone reaches >= 0.85
    in one epoch. trainable=false in the stack text, --freeze and
    --trainable say the same.                                               */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_checkpoint.h"
#include "za/za_kernels.h"
#include "za/za_model.h"
#include "za/za_replica.h"
#include "za/za_util.h"
#include "za_test.h"

#define RUN_TIMEOUT_S 900

static char *s_base;                    //  the trained model every test starts from

static void
s_train (void)
{
    za_test_dir_create ("za_freeze");
    s_base = za_test_path ("base");
    const char *args [] = {"--epochs", "1", "--no-eval", "--model-dir", s_base, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
}

static void
s_done (void)
{
    free (s_base);
    za_test_dir_remove ();
}

static za_checkpoint_t *
s_newest (const char *dir)
{
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (dir, &found);
    cr_assert_not_null (ckpt, "no checkpoint in %s", dir);
    return ckpt;
}

//  The conv variables of `dir`'s newest checkpoint are the base's, bit for
//  bit, and have no slots; the head's changed and have them.
static void
s_expect_frozen_base (const char *dir, const char *who)
{
    za_checkpoint_t *base = s_newest (s_base), *trained = s_newest (dir);
    const char *convs [] = {"conv2d/kernel", "conv2d/bias", "conv2d_1/kernel",
                            "conv2d_1/bias", "conv2d_2/kernel", "conv2d_2/bias"};
    for (size_t c = 0; c < sizeof convs / sizeof convs [0]; c++) {
        const za_ckpt_tensor_t *a = za_checkpoint_find (base, convs [c]);
        const za_ckpt_tensor_t *b = za_checkpoint_find (trained, convs [c]);
        cr_assert (a && b, "%s: %s", who, convs [c]);
        size_t floats = 1;
        for (int d = 0; d < a->ndim; d++)
            floats *= (size_t) a->shape [d];
        cr_expect_eq (memcmp (a->data, b->data, floats * sizeof (float)), 0,
                      "%s: frozen %s changed", who, convs [c]);
        char slot [128];
        snprintf (slot, sizeof slot, "%s/m", convs [c]);
        cr_expect_null (za_checkpoint_find (trained, slot), "%s: frozen %s has a slot", who,
                        convs [c]);
    }
    const za_ckpt_tensor_t *a = za_checkpoint_find (base, "dense_1/kernel");
    const za_ckpt_tensor_t *b = za_checkpoint_find (trained, "dense_1/kernel");
    cr_assert (a && b);
    cr_expect_neq (memcmp (a->data, b->data, 64 * 10 * sizeof (float)), 0,
                   "%s: the head trains", who);
    cr_expect_not_null (za_checkpoint_find (trained, "dense_1/kernel/m"), "%s", who);
    za_checkpoint_destroy (&base);
    za_checkpoint_destroy (&trained);
}

Test (freeze, a_frozen_base_and_a_new_head_in_one_epoch, .init = s_train, .fini = s_done,
      .timeout = 1800)
{
    char *model = za_test_path ("head");
    //  The conv base from the trained model, a fresh head (not loaded).
    const char *args [] = {"--epochs", "1", "--warm-start-from", s_base, "--warm-start-vars",
                           "conv2d", "--freeze", "conv2d", "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "warm start: 6 variables"), "%s", result.err);
    double accuracy = za_test_accuracy (result.out);
    printf ("a new head on the frozen base, one epoch: %.4f\n", accuracy);
    cr_expect_geq (accuracy, 0.85);
    za_test_result_free (&result);
    s_expect_frozen_base (model, "one process");
    free (model);
}

//  --cache-frozen: the second epoch runs the head alone from the kept
//  output of the frozen base, and learns what training through it does.
Test (freeze, the_frozen_base_cached_learns_the_same, .init = s_train, .fini = s_done,
      .timeout = 1800)
{
    double accuracy [2];
    for (int cached = 0; cached < 2; cached++) {
        char *model = za_test_path (cached? "cached": "through");
        const char *args [] = {"--epochs", "2", "--warm-start-from", s_base,
                               "--warm-start-vars", "conv2d", "--freeze", "conv2d",
                               "--model-dir", model, cached? "--cache-frozen": NULL, NULL};
        za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
        cr_assert_eq (result.exit_code, 0, "%s", result.err);
        accuracy [cached] = za_test_accuracy (result.out);
        if (cached)
            cr_expect (strstr (result.err, "output kept for 60000 examples, taken from there "
                                           "60000 times"), "%s", result.err);
        za_test_result_free (&result);
        free (model);
    }
    printf ("two epochs of a new head: through the frozen base %.4f, from its cache %.4f\n",
            accuracy [0], accuracy [1]);
    cr_expect_leq (fabs (accuracy [1] - accuracy [0]), 0.003);
}

Test (freeze, every_strategy_keeps_the_frozen_bits, .init = s_train, .fini = s_done,
      .timeout = 1800)
{
    const char *strategies [] = {"ps-async", "allreduce"};
    for (int s = 0; s < 2; s++) {
        char name [32];
        snprintf (name, sizeof name, "local-%s", strategies [s]);
        char *model = za_test_path (name);
        const char *args [] = {"--local", "--strategy", strategies [s], "--workers", "1",
                               "--evaluators", "0", "--no-eval", "--max-steps", "100",
                               "--warm-start-from", s_base, "--trainable", "dense",
                               "--model-dir", model, NULL};
        za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
        cr_expect_eq (result.exit_code, 0, "%s: %s", strategies [s], result.err);
        za_test_result_free (&result);
        s_expect_frozen_base (model, strategies [s]);
        if (s == 0) {
            //  No push carried a frozen tensor: each push left the six out.
            char *log = za_test_join (model, "logs/chief-0.log");
            char *text = za_test_read_file (log, NULL);
            cr_assert_not_null (text, "%s", log);
            long steps = 0, left_out = 0;
            const char *done = strstr (text, "done at step ");
            const char *counted = strstr (text, "tensors of frozen variables left out");
            cr_assert (done && counted, "%s", text);
            sscanf (done, "done at step %*d after %ld own steps", &steps);
            while (counted > text && counted [-1] != ':')
                counted--;
            sscanf (counted, " %ld tensors", &left_out);
            cr_expect (steps > 0 && left_out == 6 * steps, "%ld pushes left out %ld frozen "
                       "tensors: %s", steps, left_out, text);
            free (text), free (log);
        }
        free (model);
    }
}

Test (freeze, trainable_false_in_the_stack_text)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu,trainable=false) maxpool(2) flatten "
                                  "dense(10)", &spec), 0, "%s", za_last_error ());
    cr_expect_eq (spec.layers [0].frozen, 1);
    cr_expect_eq (spec.layers [3].frozen, 0);
    za_error_set_quiet (1);
    cr_expect_neq (za_stack_parse ("conv2d(8,3) maxpool(2,trainable=false) flatten dense(10)",
                                   &spec), 0);
    cr_expect (strstr (za_last_error (), "maxpool has no variables to freeze"), "%s",
               za_last_error ());
    cr_expect_neq (za_stack_parse ("conv2d(8,3,trainable=maybe) flatten dense(10)", &spec), 0);
    cr_expect (strstr (za_last_error (), "bad trainable 'maybe'"), "%s", za_last_error ());
    za_error_set_quiet (0);
    //  Its variables are frozen in the table the model declares.
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu,trainable=false) maxpool(2) flatten "
                                  "dense(10)", &spec), 0);
    za_vars_t vars;
    memset (&vars, 0, sizeof vars);
    za_input_shape_t input = {28, 28, 1};
    void *state = za_stack_model_fn ()->create (&spec, input, 4, za_backend_cpu (), &vars);
    cr_assert_not_null (state);
    cr_expect (vars.vars [za_vars_find (&vars, "conv2d/kernel")].frozen);
    cr_expect (vars.vars [za_vars_find (&vars, "conv2d/bias")].frozen);
    cr_expect (!vars.vars [za_vars_find (&vars, "dense/kernel")].frozen);
    za_stack_model_fn ()->destroy (&state);
    //  VGG16's base, frozen: 13 convolutions in 5 blocks, then the head.
    cr_assert_eq (za_stack_parse ("vgg16(trainable=false) globalavgpool dense(4)", &spec), 0,
                  "%s", za_last_error ());
    cr_expect_eq (spec.count, 20);
    int convs = 0, frozen = 0;
    for (int i = 0; i < spec.count; i++) {
        convs += spec.layers [i].type == ZA_LAYER_CONV2D;
        frozen += spec.layers [i].frozen;
    }
    cr_expect_eq (convs, 13);
    cr_expect_eq (frozen, 13);
    cr_expect_eq (spec.layers [17].type, ZA_LAYER_MAXPOOL);
    cr_expect_eq (spec.layers [19].frozen, 0, "the head trains");
    input = (za_input_shape_t) {64, 64, 3};
    memset (&vars, 0, sizeof vars);
    state = za_stack_model_fn ()->create (&spec, input, 2, za_backend_cpu (), &vars);
    cr_assert_not_null (state, "%s", za_last_error ());
    cr_expect_geq (za_vars_find (&vars, "conv2d_12/kernel"), 0);
    cr_expect_eq (vars.total >= 14714688, 1, "VGG16's base has 14,714,688 weights");
    za_stack_model_fn ()->destroy (&state);
}

//  A frozen layer's kernel as a back end derives it (oneDNN's reordered
//  copy) is kept from batch to batch while nothing but the optimizer writes
//  the values (za_model_set_frozen_epoch), and made anew after any other
//  write: through za_replica_values, and by a restore. Each time, the
//  gradients are to the bit those of a replica that never kept anything.
static void
s_frozen_kept_case (za_policy_t precision, const char *name)
{
    za_dataset_t *fashion = za_test_fashion ("train", 32);
    za_batch_t batch = {fashion->features, fashion->labels, 32, 28 * 28, NULL, NULL};
    static za_stack_spec_t spec;
    //  The frozen convolution has a layer that trains below it: its kernel
    //  serves the forward and the input's gradient.
    cr_assert_eq (za_stack_parse ("conv2d(16,3,relu,padding=same) conv2d(16,3,relu,padding="
                                  "same,trainable=false) maxpool(2) flatten dense(10)", &spec),
                  0, "%s", za_last_error ());
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &spec, .input = {28, 28, 1},
        .threads = 2, .train = 1, .optim = &optim, .precision = precision,
    };
    za_replica_t *kept = za_replica_new (&config, 5);
    cr_assert_not_null (kept, "%s", za_last_error ());
    const za_vars_t *vars = za_replica_vars (kept);
    const za_var_t *frozen = &vars->vars [za_vars_find (vars, "conv2d_1/kernel")];
    cr_assert (frozen->frozen);
    size_t bytes = vars->total * sizeof (float);
    double loss;
    for (int64_t step = 1; step <= 3; step++) {
        cr_assert_eq (za_replica_compute_gradients (kept, &batch, step, &loss), 0, "%s",
                      za_last_error ());
        za_replica_apply (kept, step);
    }
    float *values = za_replica_values (kept);
    for (size_t i = 0; i < frozen->size; i++)
        values [frozen->offset + i] *= -1.5f;
    za_test_dir_create ("za_frozen_kept");
    char *dir = za_test_path ("model");
    for (int write = 0; write < 2; write++) {
        cr_assert_eq (za_replica_compute_gradients (kept, &batch, 4, &loss), 0);
        za_replica_t *fresh = za_replica_new (&config, 5);
        cr_assert_not_null (fresh);
        memcpy (za_replica_values (fresh), za_replica_values (kept), bytes);
        cr_assert_eq (za_replica_compute_gradients (fresh, &batch, 4, &loss), 0);
        cr_expect_eq (memcmp (za_replica_gradients (kept), za_replica_gradients (fresh), bytes),
                      0, "%s: after %s, the kept kernel is stale", name,
                      write? "a restore": "a write through za_replica_values");
        if (write == 0) {
            //  The fresh one's frozen kernel changed again, saved, restored
            //  into the one that keeps.
            float *other = za_replica_values (fresh);
            for (size_t i = 0; i < frozen->size; i++)
                other [frozen->offset + i] *= 0.5f;
            cr_assert_eq (za_replica_save (fresh, dir, 4, 1), 0, "%s", za_last_error ());
            int restored = 0;
            int64_t step = 0;
            cr_assert_eq (za_replica_restore_newest (kept, dir, 1, &restored, &step), 0, "%s",
                          za_last_error ());
            cr_assert (restored);
        }
        za_replica_destroy (&fresh);
    }
    free (dir);
    za_test_dir_remove ();
    za_replica_destroy (&kept);
    za_dataset_destroy (&fashion);
}

Test (freeze, a_kept_frozen_kernel_follows_every_write)
{
    s_frozen_kept_case (ZA_POLICY_FP32, "fp32");
    za_error_set_quiet (1);
    int bf16 = za_backend_policy (za_backend_cpu (), ZA_POLICY_BF16) != NULL;
    za_error_set_quiet (0);
    if (bf16)
        s_frozen_kept_case (ZA_POLICY_BF16, "mixed_bfloat16");
}

//  l2=F on a kernel (Keras's kernel_regularizer L2): the step's gradient of
//  that kernel gains exactly 2 F w, whatever the split of the batch over
//  threads and micro-batches, and in mixed_float16 too (there the model's
//  gradients come multiplied by the loss scale, the L2 term with them);
//  every other gradient is as without it.
static void
s_l2_case (za_policy_t precision, const char *name)
{
    za_dataset_t *fashion = za_test_fashion ("train", 37);
    const char *models [2] = {"conv2d(8,3,relu) maxpool(2) flatten dense(16,relu) dense(10)",
                              "conv2d(8,3,relu) maxpool(2) flatten dense(16,relu,l2=0.01) "
                              "dense(10)"};
    static za_stack_spec_t specs [2];
    float *grads [2];
    const float *values = NULL;
    za_replica_t *replicas [2];
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    for (int m = 0; m < 2; m++) {
        cr_assert_eq (za_stack_parse (models [m], &specs [m]), 0, "%s", za_last_error ());
        za_replica_config_t config = {
            .model_fn = za_stack_model_fn (), .params = &specs [m], .input = {28, 28, 1},
            .threads = 2, .train = 1, .optim = &optim, .precision = precision,
        };
        replicas [m] = za_replica_new (&config, 5);
        cr_assert_not_null (replicas [m], "%s", za_last_error ());
        za_batch_t batch = {fashion->features, fashion->labels, 37, 28 * 28, NULL, NULL};
        double loss;
        cr_assert_eq (za_replica_compute_gradients (replicas [m], &batch, 1, &loss), 0);
        grads [m] = za_replica_gradients (replicas [m]);
        values = za_replica_values (replicas [m]);
    }
    const za_vars_t *vars = za_replica_vars (replicas [1]);
    int regularised = za_vars_find (vars, "dense/kernel");
    for (int v = 0; v < vars->count; v++) {
        const za_var_t *var = &vars->vars [v];
        for (size_t i = 0; i < var->size; i++) {
            size_t at = var->offset + i;
            double want = grads [0][at] + (v == regularised? 2 * 0.01 * values [at]: 0);
            cr_assert_float_eq (grads [1][at], want, 1e-6, "%s: %s [%zu]: %g, not %g", name,
                                var->name, i, grads [1][at], want);
        }
    }
    for (int m = 0; m < 2; m++)
        za_replica_destroy (&replicas [m]);
    za_dataset_destroy (&fashion);
}

Test (freeze, l2_adds_two_f_w_to_the_kernel_gradient)
{
    s_l2_case (ZA_POLICY_FP32, "fp32");
    s_l2_case (ZA_POLICY_FP16, "mixed_float16");
    za_stack_spec_t bad;
    za_error_set_quiet (1);
    cr_expect_neq (za_stack_parse ("conv2d(8,3) maxpool(2,l2=0.1) flatten dense(10)", &bad), 0);
    cr_expect (strstr (za_last_error (), "maxpool has no kernel to regularise"), "%s",
               za_last_error ());
    za_error_set_quiet (0);
}

//  A checkpoint written with a frozen layer holds no optimizer slots for
//  it: resumed with the layer training (--freeze left out), its slots
//  start fresh and every other variable keeps the checkpoint's.
Test (freeze, unfrozen_on_resume_only_the_frozen_layers_slots_start_fresh)
{
    za_dataset_t *fashion = za_test_fashion ("train", 32);
    za_batch_t batch = {fashion->features, fashion->labels, 32, 28 * 28, NULL, NULL};
    static za_stack_spec_t specs [2];
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_replica_t *replicas [2];
    for (int r = 0; r < 2; r++) {
        cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(10)",
                                      &specs [r]), 0, "%s", za_last_error ());
        if (r == 0)
            snprintf (specs [r].freeze, sizeof specs [r].freeze, "conv2d/");
        za_replica_config_t config = {
            .model_fn = za_stack_model_fn (), .params = &specs [r], .input = {28, 28, 1},
            .threads = 1, .train = 1, .optim = &optim,
        };
        replicas [r] = za_replica_new (&config, 5);
        cr_assert_not_null (replicas [r], "%s", za_last_error ());
    }
    double loss;
    for (int64_t step = 1; step <= 2; step++) {
        cr_assert_eq (za_replica_compute_gradients (replicas [0], &batch, step, &loss), 0);
        za_replica_apply (replicas [0], step);
    }
    //  Saved as at step 5000 (a long training of the head alone).
    const char *dir = za_test_dir_create ("za_unfrozen");
    cr_assert_eq (za_replica_save (replicas [0], dir, 5000, 0), 0, "%s", za_last_error ());
    int restored = 0;
    int64_t step = 0;
    cr_assert_eq (za_replica_restore_newest (replicas [1], dir, 1, &restored, &step), 0, "%s",
                  za_last_error ());
    cr_expect (restored && step == 5000);
    const za_vars_t *vars = za_replica_vars (replicas [1]);
    for (int v = 0; v < vars->count; v++) {
        const za_var_t *var = &vars->vars [v];
        int was_frozen = !strncmp (var->name, "conv2d/", 7);
        for (int s = 0; s < 2; s++) {
            const float *kept = za_replica_slot (replicas [0], s) + var->offset;
            const float *got = za_replica_slot (replicas [1], s) + var->offset;
            int zeros = 1;
            for (size_t i = 0; i < var->size; i++)
                zeros &= got [i] == 0.0f;
            if (was_frozen)
                cr_expect (zeros, "%s slot %d: not fresh", var->name, s);
            else
                cr_expect (!zeros && !memcmp (kept, got, var->size * sizeof (float)),
                           "%s slot %d: not the checkpoint's", var->name, s);
        }
    }
    //  The fresh slots' first update is Adam's first (bias corrected from
    //  their own start, as PyTorch's per-parameter step): each element moves
    //  by at most the rate, most by about it. Counted from step 0 (5001
    //  updates: no correction) they moved 3.15 times the rate.
    const za_var_t *kernel = NULL;
    for (int v = 0; v < vars->count; v++)
        if (!strcmp (vars->vars [v].name, "conv2d/kernel"))
            kernel = &vars->vars [v];
    cr_assert_not_null (kernel);
    float *before = malloc (kernel->size * sizeof (float));
    memcpy (before, za_replica_values (replicas [1]) + kernel->offset,
            kernel->size * sizeof (float));
    cr_assert_eq (za_replica_compute_gradients (replicas [1], &batch, 5001, &loss), 0);
    za_replica_apply (replicas [1], 5001);
    const float *after = za_replica_values (replicas [1]) + kernel->offset;
    double most = 0;
    for (size_t i = 0; i < kernel->size; i++)
        most = fmax (most, fabs ((double) after [i] - before [i]));
    cr_expect (most <= optim.learning_rate * 1.001 && most >= optim.learning_rate * 0.9,
               "conv2d/kernel moved by up to %g at a rate of %g", most,
               (double) optim.learning_rate);
    free (before);
    //  Their start travels with the next checkpoint (preempted again, the
    //  correction goes on counting from it).
    cr_assert_eq (za_replica_save (replicas [1], dir, 5001, 0), 0, "%s", za_last_error ());
    char *path = za_checkpoint_path (dir, 5001);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    const char *from = za_checkpoint_meta (ckpt, "slots_from");
    cr_expect (from && strstr (from, "conv2d/kernel=5000") && !strstr (from, "dense"),
               "slots_from: %s", from? from: "(none)");
    za_checkpoint_destroy (&ckpt);
    free (path);
    za_test_dir_remove ();
    for (int r = 0; r < 2; r++)
        za_replica_destroy (&replicas [r]);
    za_dataset_destroy (&fashion);
}

//  A --freeze or --trainable that selects nothing (a typo once froze
//  every variable and the run "trained" at chance, exit 0), and a model
//  with every variable frozen (TensorFlow: "No variables to optimize"):
//  no replica that trains, the reason said. An evaluation replica may
//  hold a frozen model.
Test (freeze, a_freeze_that_selects_nothing_or_everything_is_refused)
{
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    const char *cases [][3] = {
        {"zzz", "", "--freeze 'zzz' selects none"},
        {"", "zzz", "--trainable 'zzz' selects none"},
        {".*", "", "every variable of the model is frozen"},
        {"conv2d", "conv2d", "every variable of the model is frozen"},
    };
    for (int c = 0; c < 4; c++)
        for (int train = 0; train < 2; train++) {
            static za_stack_spec_t spec;
            cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(10)",
                                          &spec), 0);
            snprintf (spec.freeze, sizeof spec.freeze, "%s", cases [c][0]);
            snprintf (spec.trainable, sizeof spec.trainable, "%s", cases [c][1]);
            za_replica_config_t config = {
                .model_fn = za_stack_model_fn (), .params = &spec, .input = {28, 28, 1},
                .threads = 1, .train = train, .optim = train? &optim: NULL,
            };
            za_error_set_quiet (1);
            za_replica_t *replica = za_replica_new (&config, 5);
            za_error_set_quiet (0);
            int refused = c < 2 || train;
            cr_expect_eq (replica == NULL, refused, "case %d, train %d", c, train);
            if (refused)
                cr_expect (strstr (za_last_error (), cases [c][2]), "case %d: %s", c,
                           za_last_error ());
            za_replica_destroy (&replica);
        }
}
