/*  test_predictor.c: libzactor's predictor (za_predictor.h) on a seed CNN
    trained on Fashion-MNIST: it gives `zactor-run predict --logits`'s
    answers for the 10,000 test images; many threads calling at once get
    exactly what one thread gets; the example program runs; a model dir
    with no checkpoint, a corrupt checkpoint, a program's model_fn and a
    wrong input shape each get one error, and a good model loads after.     */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_checkpoint.h"
#include "za/za_idx.h"
#include "za/za_predictor.h"
#include "za/za_util.h"
#include "za_test.h"

#define RUN_TIMEOUT_S 600
#define THREADS 8
#define PER_THREAD 256

static char *s_model;                   //  the trained model dir
static za_dataset_t *s_test;
static float *s_pixels;                 //  the test set's pixels, 0 .. 255

static void
s_train (void)
{
    za_test_dir_create ("za_predictor");
    s_model = za_test_path ("trained");
    const char *args [] = {"--max-steps", "300", "--model-dir", s_model, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    s_test = za_test_fashion ("t10k", 0);
    size_t total = (size_t) s_test->count * (size_t) s_test->feature_size;
    s_pixels = malloc (total * sizeof (float));
    for (size_t k = 0; k < total; k++)
        s_pixels [k] = s_test->pixels? s_test->pixels [k]
                                     : roundf (s_test->features [k] * 255.0f);
}

static void
s_done (void)
{
    free (s_pixels);
    za_dataset_destroy (&s_test);
    free (s_model);
    za_test_dir_remove ();
}

TestSuite (predictor, .init = s_train, .fini = s_done, .timeout = 1200);

Test (predictor, gives_zactor_run_predicts_answers)
{
    char *predictions = za_test_path ("predictions.jsonl");
    const char *args [] = {"predict", "--model-dir", s_model, "--logits", "--output",
                           predictions, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);

    za_predictor_t *model = za_predictor_new (s_model, NULL);
    cr_assert_not_null (model, "%s", za_last_error ());
    cr_expect_eq (za_predictor_classes (model), 10);
    cr_expect_eq (za_predictor_step (model), 300);
    za_input_shape_t in = za_predictor_input (model);
    cr_expect (in.height == 28 && in.width == 28 && in.channels == 1);
    int n = (int) s_test->count;
    float *logits = malloc ((size_t) n * 10 * sizeof (float));
    float *probabilities = malloc ((size_t) n * 10 * sizeof (float));
    cr_assert_eq (za_predictor_run (model, s_pixels, n, logits, probabilities), 0, "%s",
                  za_last_error ());
    //  Line by line against predict's JSONL.
    FILE *file = fopen (predictions, "r");
    cr_assert_not_null (file);
    char line [4096];
    int lines = 0, same = 0;
    double worst = 0, worst_p = 0;
    while (fgets (line, sizeof line, file)) {
        json_error_t error;
        json_t *json = json_loads (line, 0, &error);
        cr_assert_not_null (json, "%s", error.text);
        int i = atoi (json_string_value (json_object_get (json, "file")));
        json_t *want = json_object_get (json, "logits");
        int best = 0;
        double top = 0, total = 0;
        for (int k = 0; k < 10; k++) {
            double value = json_real_value (json_array_get (want, (size_t) k));
            worst = fmax (worst, fabs (value - logits [i * 10 + k]));
            best = probabilities [i * 10 + k] > probabilities [i * 10 + best]? k: best;
            top = k == 0 || value > top? value: top;
        }
        for (int k = 0; k < 10; k++)
            total += exp (json_real_value (json_array_get (want, (size_t) k)) - top);
        for (int k = 0; k < 10; k++) {
            double p = exp (json_real_value (json_array_get (want, (size_t) k)) - top) / total;
            worst_p = fmax (worst_p, fabs (p - probabilities [i * 10 + k]));
        }
        same += best == (int) json_integer_value (json_object_get (json, "class_id"));
        lines++;
        json_decref (json);
    }
    fclose (file);
    printf ("predictor: %d images; largest logit difference from zactor-run predict %.3g, "
            "probability %.3g; the same class for %d\n", lines, worst, worst_p, same);
    cr_expect_eq (lines, n);
    cr_expect_eq (same, n);
    cr_expect_leq (worst, 1e-4);
    cr_expect_leq (worst_p, 1e-5);
    free (logits), free (probabilities), free (predictions);
    za_predictor_destroy (&model);
}

typedef struct {
    za_predictor_t *model;
    int first;
    float *logits;
    int rc;
} s_caller_t;

static void *
s_call (void *arg)
{
    s_caller_t *c = (s_caller_t *) arg;
    //  Four calls of uneven sizes each, so that the callers interleave; in
    //  whole batches of 16, so that each image meets the batch it met alone
    //  (a BLAS may round a row otherwise in another batch size).
    int sizes [] = {16, 96, 48, PER_THREAD - 160};
    int at = 0;
    for (int k = 0; k < 4 && c->rc == 0; k++) {
        c->rc = za_predictor_run (c->model, s_pixels + (size_t) (c->first + at) * 784,
                                  sizes [k], c->logits + (size_t) at * 10, NULL);
        at += sizes [k];
    }
    return NULL;
}

Test (predictor, concurrent_callers_get_what_one_caller_gets)
{
    //  A pool of 3 states for 8 threads: some wait. Batches of 16: a call
    //  goes in parts.
    za_predictor_config_t config = za_predictor_config_default ();
    config.states = 3;
    config.batch_max = 16;
    za_predictor_t *model = za_predictor_new (s_model, &config);
    cr_assert_not_null (model, "%s", za_last_error ());
    int n = THREADS * PER_THREAD;
    float *alone = malloc ((size_t) n * 10 * sizeof (float));
    cr_assert_eq (za_predictor_run (model, s_pixels, n, alone, NULL), 0);
    s_caller_t callers [THREADS];
    pthread_t threads [THREADS];
    for (int t = 0; t < THREADS; t++) {
        callers [t] = (s_caller_t) {.model = model, .first = t * PER_THREAD,
                                    .logits = calloc (PER_THREAD * 10, sizeof (float))};
        cr_assert_eq (pthread_create (&threads [t], NULL, s_call, &callers [t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join (threads [t], NULL);
        cr_expect_eq (callers [t].rc, 0);
        cr_expect_eq (memcmp (callers [t].logits, alone + (size_t) t * PER_THREAD * 10,
                              PER_THREAD * 10 * sizeof (float)), 0,
                      "thread %d's logits are not one caller's", t);
        free (callers [t].logits);
    }
    free (alone);
    za_predictor_destroy (&model);
}

Test (predictor, the_example_program_predicts)
{
    const char *args [] = {s_model, "500", NULL};
    za_test_result_t result = za_test_run_program ("predict", args, 120);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    double accuracy = 0;
    const char *line = strstr (result.out, "predict: ");
    cr_assert_not_null (line, "%s", result.out);
    int right = 0, count = 0;
    cr_assert_eq (sscanf (line, "predict: %d of %d right (%lf)", &right, &count, &accuracy), 3);
    cr_expect_eq (count, 500);
    cr_expect_geq (accuracy, 0.6, "%s", result.out);
    za_test_result_free (&result);
}

Test (predictor, bad_models_get_one_error_and_a_good_one_loads_after)
{
    za_error_set_quiet (1);
    //  No checkpoint.
    char *empty = za_test_path ("empty");
    cr_assert_eq (za_mkdirs (empty), 0);
    cr_expect_null (za_predictor_new (empty, NULL));
    cr_expect (strstr (za_last_error (), "no checkpoint"), "%s", za_last_error ());
    //  A corrupt checkpoint: its bytes flipped in the middle.
    int64_t step = za_checkpoint_newest_step (s_model);
    char *path = za_checkpoint_path (s_model, step);
    size_t size;
    uint8_t *bytes = za_test_read_file (path, &size);
    char *corrupt = za_test_path ("corrupt.safetensors");
    bytes [size / 2] ^= 0xff;
    FILE *file = fopen (corrupt, "wb");
    fwrite (bytes, 1, size, file);
    fclose (file);
    cr_expect_null (za_predictor_new (corrupt, NULL));
    cr_expect (strstr (za_last_error (), "CRC32"), "%s", za_last_error ());
    //  The right checkpoint for another input shape.
    za_predictor_config_t config = za_predictor_config_default ();
    config.input = (za_input_shape_t) {32, 32, 1};
    cr_expect_null (za_predictor_new (s_model, &config));
    cr_expect (strstr (za_last_error (), "input"), "%s", za_last_error ());
    za_error_set_quiet (0);
    //  And the good one after them: the same answers as ever.
    za_predictor_t *model = za_predictor_new (path, NULL);
    cr_assert_not_null (model, "%s", za_last_error ());
    float probabilities [2 * 10];
    cr_expect_eq (za_predictor_run (model, s_pixels, 2, NULL, probabilities), 0);
    double total = 0;
    for (int k = 0; k < 10; k++)
        total += probabilities [k];
    cr_expect (fabs (total - 1) < 1e-5, "probabilities sum to %g", total);
    za_predictor_destroy (&model);
    free (bytes), free (corrupt), free (path), free (empty);
}
