/*  test_warm_start.c: a seed CNN trained on Fashion-MNIST, then new model
    dirs started from its weights (WarmStartSettings): its own checkpoint
    and safetensors files an independent writer (Python, numpy, the format
    by hand) made in PyTorch's layout, as F32 and BF16, load the same
    values; a warm-started model is as accurate after 20 steps as the one it
    came from; what is wrong is exit 2 with the reason, before training.    */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "za/za_checkpoint.h"
#include "za/za_kernels.h"
#include "za/za_model.h"
#include "za/za_replica.h"
#include "za/za_util.h"
#include "za/za_warm_start.h"
#include "za_test.h"

#define RUN_TIMEOUT_S 600

static char *s_trained;                 //  the model dir every test starts from
static double s_trained_accuracy;

//  Trains the seed CNN 300 steps into MODEL_DIR "trained".
static void
s_train (void)
{
    za_test_dir_create ("za_warm_start");
    s_trained = za_test_path ("trained");
    const char *args [] = {"--max-steps", "300", "--model-dir", s_trained, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    s_trained_accuracy = za_test_accuracy (result.out);
    za_test_result_free (&result);
}

static void
s_done (void)
{
    free (s_trained);
    za_test_dir_remove ();
}

//  The seed CNN's variables, and a block for them.
static float *
s_seed_vars (za_vars_t *vars)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0);
    memset (vars, 0, sizeof *vars);
    za_input_shape_t input = {28, 28, 1};
    void *state = za_stack_model_fn ()->create (&spec, input, 1, za_backend_cpu (), vars);
    cr_assert_not_null (state);
    za_stack_model_fn ()->destroy (&state);
    return calloc (vars->total, sizeof (float));
}

//  Writes TRAINED's newest checkpoint as OUT with tests/write_safetensors.py.
static char *
s_convert (const char *name, const char *layout, const char *dtype, const char *rename)
{
    char *checkpoint = za_checkpoint_path (s_trained, 300);
    char *out = za_test_path (name);
    const char *args [] = {ZA_SOURCE_DIR "/tests/write_safetensors.py", checkpoint, out,
                           layout, dtype, rename, NULL};
    za_test_result_t result = za_test_run_program ("/usr/bin/python3", args, 120);
    cr_assert_eq (result.exit_code, 0, "write_safetensors.py (python3-numpy): %s",
                  result.err);
    za_test_result_free (&result);
    free (checkpoint);
    return out;
}

Test (warm_start, every_layout_loads_the_same_values, .init = s_train, .fini = s_done,
      .timeout = 1200)
{
    za_vars_t vars;
    float *expected = s_seed_vars (&vars), *values = calloc (vars.total, sizeof (float));
    char *checkpoint = za_checkpoint_path (s_trained, 300);
    za_checkpoint_t *ckpt = za_checkpoint_load (checkpoint);
    cr_assert_not_null (ckpt);
    for (int v = 0; v < vars.count; v++) {
        const za_ckpt_tensor_t *tensor = za_checkpoint_find (ckpt, vars.vars [v].name);
        cr_assert_not_null (tensor, "%s", vars.vars [v].name);
        memcpy (expected + vars.vars [v].offset, tensor->data,
                vars.vars [v].size * sizeof (float));
    }
    za_checkpoint_destroy (&ckpt);
    //  The model dir (its newest checkpoint) and the file itself.
    za_warm_start_t ws = {.from = s_trained};
    cr_assert_eq (za_warm_start_load (&ws, &vars, values), vars.count, "%s", za_last_error ());
    cr_expect_eq (memcmp (values, expected, vars.total * sizeof (float)), 0);
    //  PyTorch's layout, float32: the same bits.
    char *torch = s_convert ("torch.safetensors", "torch", "F32", "");
    memset (values, 0, vars.total * sizeof (float));
    ws = (za_warm_start_t) {.from = torch, .layout = ZA_LAYOUT_TORCH};
    cr_assert_eq (za_warm_start_load (&ws, &vars, values), vars.count, "%s", za_last_error ());
    cr_expect_eq (memcmp (values, expected, vars.total * sizeof (float)), 0,
                  "OIHW and [out, in] turned back into HWIO and [in, out]");
    //  Read in zactor's layout, a torch file has the wrong shapes: said.
    ws.layout = ZA_LAYOUT_ZACTOR;
    za_error_set_quiet (1);
    cr_expect_eq (za_warm_start_load (&ws, &vars, values), -1);
    cr_expect (strstr (za_last_error (), "'conv2d/kernel' is [32, 1, 3, 3] there"), "%s",
               za_last_error ());
    za_error_set_quiet (0);
    //  BF16 (what a bf16 model saves): each value its bf16 rounding.
    char *bf16 = s_convert ("bf16.safetensors", "torch", "BF16", "");
    ws = (za_warm_start_t) {.from = bf16, .layout = ZA_LAYOUT_TORCH};
    cr_assert_eq (za_warm_start_load (&ws, &vars, values), vars.count, "%s", za_last_error ());
    for (size_t i = 0; i < vars.total; i++)
        cr_assert (fabsf (values [i] - expected [i]) <= fabsf (expected [i]) / 256 + 1e-30f,
                   "value %zu: %g from %g", i, values [i], expected [i]);
    //  Renamed tensors (PyTorch's names) mapped back; a regex selects.
    char *renamed = s_convert ("renamed.safetensors", "torch", "F16",
                               "conv2d/kernel=features.0.weight");
    memset (values, 0, vars.total * sizeof (float));
    ws = (za_warm_start_t) {.from = renamed, .layout = ZA_LAYOUT_TORCH, .vars = "conv2d/",
                            .rename = "conv2d/kernel=features.0.weight"};
    cr_assert_eq (za_warm_start_load (&ws, &vars, values), 2, "%s", za_last_error ());
    int conv = za_vars_find (&vars, "conv2d/kernel");
    cr_expect (fabsf (values [vars.vars [conv].offset] - expected [vars.vars [conv].offset])
               < 1e-2f, "F16 near its float");
    int dense = za_vars_find (&vars, "dense/kernel");
    cr_expect_eq (values [vars.vars [dense].offset], 0, "not selected: not loaded");
    free (renamed), free (bf16), free (torch), free (checkpoint), free (values);
    free (expected);
}

Test (warm_start, a_warm_started_model_starts_where_the_other_ended, .init = s_train,
      .fini = s_done, .timeout = 1200)
{
    char *warm = za_test_path ("warm"), *cold = za_test_path ("cold");
    const char *warm_args [] = {"--max-steps", "20", "--warm-start-from", s_trained,
                                "--model-dir", warm, NULL};
    za_test_result_t result = za_test_run (warm_args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "warm start: 10 variables from"), "%s", result.err);
    double warmed = za_test_accuracy (result.out);
    za_test_result_free (&result);
    const char *cold_args [] = {"--max-steps", "20", "--model-dir", cold, NULL};
    result = za_test_run (cold_args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    double from_scratch = za_test_accuracy (result.out);
    za_test_result_free (&result);
    printf ("after 20 steps: warm-started %.4f, from scratch %.4f (the trained model %.4f)\n",
            warmed, from_scratch, s_trained_accuracy);
    cr_expect_gt (warmed, s_trained_accuracy - 0.03);
    cr_expect_gt (warmed, from_scratch + 0.05);
    //  Again in the same dir: its checkpoint wins, as in TensorFlow.
    const char *again [] = {"--max-steps", "30", "--warm-start-from", s_trained,
                            "--model-dir", warm, NULL};
    result = za_test_run (again, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "holds a checkpoint: training goes on from it"), "%s",
               result.err);
    cr_expect_null (strstr (result.err, "warm start: "), "%s", result.err);
    za_test_result_free (&result);
    free (warm), free (cold);
}

Test (warm_start, what_is_wrong_is_exit_2_before_training, .init = s_train, .fini = s_done,
      .timeout = 1200)
{
    char *model = za_test_path ("wrong");
    struct {
        const char *flag, *value, *model, *says;
    } cases [] = {
        {"--warm-start-from", "/nonexistent/za/weights.safetensors", "cnn",
         "no such file or folder"},
        {"--warm-start-vars", "nothing_like_this", "cnn", "selects none of the model's"},
        {"--warm-start-rename", "dense_1/kernel=dense_9/kernel", "cnn",
         "closest name is 'dense_1/kernel'"},
        {"--warm-start-vars", "conv2d/", "conv2d(16,3,relu) maxpool(2) flatten dense(10)",
         "the model's 'conv2d/kernel' needs [3, 3, 1, 16]"},
        //  A rename that would never be used (TensorFlow: "not used ... Perhaps
        //  you misspelled them?"): no '=', a name the model lacks.
        {"--warm-start-rename", "conv2d_1/kernel", "cnn", "give NEW=OLD"},
        {"--warm-start-rename", "dense_9/kernel=conv2d/kernel", "cnn",
         "the model has no variable 'dense_9/kernel'"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        const char *from = c == 0? cases [c].value: s_trained;
        const char *args [] = {"--max-steps", "5", "--model", cases [c].model,
                               "--warm-start-from", from, cases [c].flag, cases [c].value,
                               "--model-dir", model, NULL};
        za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
        cr_expect_eq (result.exit_code, 2, "%s: %s", cases [c].flag, result.err);
        cr_expect (strstr (result.err, cases [c].says), "%s: %s", cases [c].says, result.err);
        cr_expect_null (strstr (result.out, "test accuracy"), "no training: %s", result.out);
        za_test_result_free (&result);
    }
    free (model);
}

//  A warm start gives a model its first values only: a look for the newest
//  checkpoint in a dir that has none yet for a recovery (a ps's, before the
//  first checkpoint: warm 0) keeps the values trained since, and needs the
//  file no more (the warm start's values were put back over them, and a
//  file gone since failed the recovery).
Test (warm_start, only_the_first_values_are_warm_started, .init = s_train, .fini = s_done,
      .timeout = 1200)
{
    static za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0);
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    za_warm_start_t ws = {.from = s_trained};
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &spec, .input = {28, 28, 1},
        .threads = 1, .train = 1, .optim = &optim, .warm_start = &ws,
    };
    za_replica_t *replica = za_replica_new (&config, 5);
    cr_assert_not_null (replica, "%s", za_last_error ());
    size_t bytes = za_replica_vars (replica)->total * sizeof (float);
    char *empty = za_test_path ("empty");
    int restored = 1;
    int64_t step = -1;
    cr_assert_eq (za_replica_restore_newest (replica, empty, 1, &restored, &step), 0, "%s",
                  za_last_error ());
    cr_expect_eq (restored, 0);
    float *warm = malloc (bytes);
    memcpy (warm, za_replica_values (replica), bytes);
    za_dataset_t *fashion = za_test_fashion ("train", 64);
    za_batch_t batch = {fashion->features, fashion->labels, 64, 28 * 28, NULL, NULL};
    double loss;
    for (int64_t s = 1; s <= 2; s++) {
        cr_assert_eq (za_replica_compute_gradients (replica, &batch, s, &loss), 0);
        za_replica_apply (replica, s);
    }
    float *trained = malloc (bytes);
    memcpy (trained, za_replica_values (replica), bytes);
    cr_assert_neq (memcmp (trained, warm, bytes), 0, "two steps changed nothing");
    //  The file there, and gone.
    for (int gone = 0; gone < 2; gone++) {
        char *moved = za_test_path ("trained-moved");
        if (gone)
            cr_assert_eq (rename (s_trained, moved), 0);
        cr_expect_eq (za_replica_restore_newest (replica, empty, 0, &restored, &step), 0,
                      "%s", za_last_error ());
        cr_expect_eq (memcmp (za_replica_values (replica), trained, bytes), 0,
                      "the values trained since were replaced (the file %s)",
                      gone? "gone": "there");
        if (gone)
            cr_assert_eq (rename (moved, s_trained), 0);
        free (moved);
    }
    za_dataset_destroy (&fashion);
    za_replica_destroy (&replica);
    free (trained), free (warm), free (empty);
}

//  From a model dir, the newest intact checkpoint, as training restores: a
//  newer one cut short (a copy interrupted) is said and passed over (the
//  warm start failed on it).
Test (warm_start, a_corrupt_newest_checkpoint_is_passed_over, .init = s_train, .fini = s_done,
      .timeout = 1200)
{
    za_vars_t vars;
    float *values = s_seed_vars (&vars);
    char *copy = za_test_path ("copy");
    cr_assert_eq (mkdir (copy, 0755), 0);
    char *from = za_checkpoint_path (s_trained, 300), *to = za_checkpoint_path (copy, 300);
    size_t size;
    uint8_t *bytes = za_test_read_file (from, &size);
    FILE *f = fopen (to, "wb");
    cr_assert (f && fwrite (bytes, 1, size, f) == size);
    fclose (f);
    char *cut = za_checkpoint_path (copy, 400);
    f = fopen (cut, "wb");
    cr_assert (f && fwrite (bytes, 1, size / 2, f) == size / 2);
    fclose (f);
    za_warm_start_t ws = {.from = copy};
    cr_expect_eq (za_warm_start_load (&ws, &vars, values), vars.count, "%s", za_last_error ());
    free (bytes), free (cut), free (to), free (from), free (copy), free (values);
}
