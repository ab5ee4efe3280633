/*  test_predict.c: `zactor-run predict` on real Fashion-MNIST JPEGs: a model
    trained from class folders predicts its evaluation folder with no flag
    but --model-dir and --data (input.json), its predictions as accurate as
    the evaluation said, as JSONL and CSV, with an earlier --checkpoint; a
    corrupt image skipped, the others predicted; --logits beside the
    probabilities; what is wrong said.                                      */
#include <criterion/criterion.h>
#include <glob.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_util.h"
#include "za_test.h"
#include "za_test_images.h"

#define TRAIN_COUNT 400
#define EVAL_COUNT 100
#define RUN_TIMEOUT_S 600

//  The class folder an image is in: "class_N/FILE" gives "class_N".
static void
s_parent (const char *path, char *name, size_t size)
{
    const char *end = strrchr (path, '/'), *start = end;
    while (start > path && start [-1] != '/')
        start--;
    snprintf (name, size, "%.*s", (int) (end - start), start);
}

Test (predict, predicts_the_eval_folder_as_the_evaluation_scored_it, .timeout = 1200)
{
    za_test_dir_create ("za_predict");
    za_dataset_t *fashion = za_test_fashion ("train", TRAIN_COUNT + EVAL_COUNT);
    char *train = za_test_images_folder (fashion, TRAIN_COUNT, "train", ZA_TEST_JPEG, 1);
    za_dataset_t *rest = za_dataset_from_arrays (
        fashion->features + (size_t) TRAIN_COUNT * 28 * 28, fashion->labels + TRAIN_COUNT,
        EVAL_COUNT, 28, 28, 1);
    char *eval = za_test_images_folder (rest, EVAL_COUNT, "eval", ZA_TEST_JPEG, 1);
    char *model = za_test_path ("model");
    const char *args [] = {"--train-data", train, "--eval-data", eval, "--image-size", "28",
                           "--channels", "1", "--batch-size", "32", "--max-steps", "60",
                           "--save-checkpoints-steps", "30", "--model-dir", model, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    double accuracy = za_test_accuracy (result.out);
    za_test_result_free (&result);

    //  No flag but the model dir and the data: input.json has the rest.
    const char *predict [] = {"predict", "--model-dir", model, "--data", eval, NULL};
    result = za_test_run (predict, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "predicted 100 examples with the checkpoint of step 60"),
               "%s", result.err);
    //  The final evaluation's best (export/best) is a model of its own: its
    //  input.json beside it, it predicts what the model dir predicts (without,
    //  it read 28x28x1 with no class names and predicted numbers).
    char *best_dir = za_test_join (model, "export/best");
    const char *predict_best [] = {"predict", "--model-dir", best_dir, "--data", eval, NULL};
    za_test_result_t from_best = za_test_run (predict_best, RUN_TIMEOUT_S);
    cr_expect_eq (from_best.exit_code, 0, "%s", from_best.err);
    cr_expect (from_best.out && !strcmp (from_best.out, result.out),
               "export/best predicts otherwise: %.300s", from_best.out);
    za_test_result_free (&from_best);
    free (best_dir);
    int lines = 0, correct = 0;
    for (char *save = NULL, *text = strtok_r (result.out, "\n", &save); text;
         text = strtok_r (NULL, "\n", &save), lines++) {
        json_error_t error;
        json_t *row = json_loads (text, 0, &error);
        cr_assert_not_null (row, "line %d is not JSON: %s", lines + 1, text);
        const char *file = json_string_value (json_object_get (row, "file"));
        const char *class = json_string_value (json_object_get (row, "class"));
        json_t *probabilities = json_object_get (row, "probabilities");
        cr_assert (file && class && json_object_size (probabilities) == 10, "%s", text);
        cr_expect (strstr (file, eval) == file, "%s is not an evaluation image", file);
        double sum = 0, best = -1;
        const char *key, *argmax = NULL;
        json_t *value;
        json_object_foreach (probabilities, key, value) {
            sum += json_real_value (value);
            if (json_real_value (value) > best)
                best = json_real_value (value), argmax = key;
        }
        cr_expect (fabs (sum - 1) < 1e-4, "probabilities sum to %g: %s", sum, text);
        cr_expect_str_eq (class, argmax, "%s", text);
        char parent [64];
        s_parent (file, parent, sizeof parent);
        correct += !strcmp (parent, class);
        json_decref (row);
    }
    za_test_result_free (&result);
    cr_expect_eq (lines, EVAL_COUNT);
    printf ("predict: %d of %d right (%.4f), the evaluation said %.4f\n", correct, lines,
            (double) correct / lines, accuracy);
    cr_expect (fabs ((double) correct / EVAL_COUNT - accuracy) < 1e-3,
               "predictions %d/%d right, the evaluation said %.4f", correct, EVAL_COUNT,
               accuracy);

    //  CSV, with the checkpoint of step 30, into a file.
    char *csv = za_test_path ("predictions.csv");
    char *checkpoint = za_test_join (model, "model.ckpt-30.safetensors");
    const char *as_csv [] = {"predict", "--model-dir", model, "--data", eval, "--format",
                             "csv", "--checkpoint", checkpoint, "--output", csv, NULL};
    result = za_test_run (as_csv, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "checkpoint of step 30"), "%s", result.err);
    za_test_result_free (&result);
    char *text = za_test_read_file (csv, NULL);
    cr_assert_not_null (text);
    cr_expect (!strncmp (text, "file,class,p_class_0,p_class_1,", 31), "%.80s", text);
    cr_expect_eq (za_test_count (text, "\n"), EVAL_COUNT + 1);
    free (text);

    //  --logits: the model's output before the softmax too, as the
    //  Estimator's predictions hold it; its softmax is the probabilities.
    const char *with_logits [] = {"predict", "--model-dir", model, "--data", eval, "--logits",
                                  NULL};
    result = za_test_run (with_logits, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    int rows = 0;
    for (char *save = NULL, *line = strtok_r (result.out, "\n", &save); line;
         line = strtok_r (NULL, "\n", &save), rows++) {
        json_t *row = json_loads (line, 0, NULL);
        json_t *logits = json_object_get (row, "logits");
        cr_assert_eq (json_array_size (logits), 10, "%s", line);
        double total = 0, top = -INFINITY;
        for (size_t k = 0; k < 10; k++)
            top = fmax (top, json_real_value (json_array_get (logits, k)));
        for (size_t k = 0; k < 10; k++)
            total += exp (json_real_value (json_array_get (logits, k)) - top);
        for (size_t k = 0; k < 10; k++) {
            char name [32];
            snprintf (name, sizeof name, "class_%zu", k);
            double p = json_real_value (json_object_get (json_object_get (row, "probabilities"),
                                                         name));
            double softmax = exp (json_real_value (json_array_get (logits, k)) - top) / total;
            cr_expect (fabs (p - softmax) < 1e-6, "%s: p %g, softmax of the logits %g", name, p,
                       softmax);
        }
        json_decref (row);
    }
    cr_expect_eq (rows, EVAL_COUNT);
    za_test_result_free (&result);
    //  In CSV too, every number to 9 digits (a float's exactly): a row's
    //  probabilities are its logits' softmax well past 6 digits.
    const char *csv_logits [] = {"predict", "--model-dir", model, "--data", eval, "--logits",
                                 "--format", "csv", NULL};
    result = za_test_run (csv_logits, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    char *row = strchr (result.out, '\n');
    cr_assert_not_null (row);
    row = strchr (row + 1, ',');                //  past the file
    row = row? strchr (row + 1, ','): NULL;     //  past the class
    cr_assert_not_null (row, "%s", result.out);
    double numbers [20], top = -INFINITY, total = 0;
    for (int k = 0; k < 20; k++) {
        char *end;
        numbers [k] = k < 10? strtod (row + 1, &end): strtof (row + 1, &end);
        row = end;
    }
    for (int k = 0; k < 10; k++)
        top = fmax (top, numbers [10 + k]);
    for (int k = 0; k < 10; k++)
        total += exp (numbers [10 + k] - top);
    for (int k = 0; k < 10; k++) {
        double softmax = exp (numbers [10 + k] - top) / total;
        cr_expect (fabs (numbers [k] - softmax) <= 1e-7 * softmax, "p_class_%d %.10g, softmax "
                   "%.10g", k, numbers [k], softmax);
    }
    za_test_result_free (&result);

    //  What is wrong is said: no checkpoint, a model dir of another model.
    char *empty = za_test_path ("empty");
    const char *none [] = {"predict", "--model-dir", empty, "--data", eval, "--image-size",
                           "28", "--channels", "1", NULL};
    result = za_test_run (none, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "train first"), "%s", result.err);
    za_test_result_free (&result);
    const char *other [] = {"predict", "--model-dir", model, "--data", eval, "--model",
                            "linear", NULL};
    result = za_test_run (other, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "holds another model"), "%s", result.err);
    za_test_result_free (&result);
    const char *missing [] = {"predict", "--model-dir", model, "--data", "/nonexistent/za",
                              NULL};
    result = za_test_run (missing, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "/nonexistent/za: cannot read"), "%s", result.err);
    za_test_result_free (&result);

    //  A corrupt image among them: skipped, named; the others predicted.
    char *bad = za_test_join (eval, "class_3/zz-broken.jpg");
    FILE *file = fopen (bad, "w");
    fputs ("not a JPEG", file);
    fclose (file);
    result = za_test_run (predict, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect (strstr (result.err, "zz-broken.jpg"), "%s", result.err);
    cr_expect (strstr (result.err, "predicted 100 examples"), "%s", result.err);
    cr_expect (strstr (result.err, "1 could not be decoded"), "%s", result.err);
    cr_expect_eq (za_test_count (result.out, "\n"), EVAL_COUNT);
    za_test_result_free (&result);
    free (bad), free (empty), free (checkpoint), free (csv), free (model), free (eval);
    free (train);
    za_dataset_destroy (&rest);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}

//  The README's own job trains on the IDX files and writes no input.json:
//  predict takes their input (28 x 28 gray) and the model's outputs as the
//  classes, as serve does (it once refused: "conv2d/kernel has another
//  shape"), and predicts Fashion-MNIST PNGs as the evaluation scores them.
Test (predict, a_model_trained_on_the_idx_files_predicts_images, .timeout = 600)
{
    za_test_dir_create ("za_predict_idx");
    za_dataset_t *fashion = za_test_fashion ("t10k", 40);
    char *images = za_test_images_folder (fashion, 40, "images", ZA_TEST_PNG, 1);
    char *model = za_test_path ("model");
    const char *train [] = {"--max-steps", "60", "--threads", "1", "--no-eval", "--model-dir",
                            model, NULL};
    za_test_result_t result = za_test_run (train, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *predict [] = {"predict", "--model-dir", model, "--data", images, NULL};
    result = za_test_run (predict, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    int lines = 0, correct = 0;
    for (char *save = NULL, *text = strtok_r (result.out, "\n", &save); text;
         text = strtok_r (NULL, "\n", &save), lines++) {
        json_t *row = json_loads (text, 0, NULL);
        const char *file = json_string_value (json_object_get (row, "file"));
        const char *class = json_string_value (json_object_get (row, "class"));
        cr_assert (file && class && json_object_size (json_object_get (row, "probabilities"))
                   == 10, "%s", text);
        char parent [64], want [64];
        s_parent (file, parent, sizeof parent);
        snprintf (want, sizeof want, "class_%s", class);
        correct += !strcmp (parent, want);
        json_decref (row);
    }
    cr_expect_eq (lines, 40);
    //  60 steps: well above chance (10%).
    cr_expect_gt (correct, 16, "%d of 40 right", correct);
    za_test_result_free (&result);
    //  A file whose name is not UTF-8 (Latin-1's "café"): its line names it
    //  with the odd byte as \xe9 (the line was left out, and counted).
    glob_t found;
    char pattern [PATH_MAX], latin1 [PATH_MAX];
    snprintf (pattern, sizeof pattern, "%s/*/*.png", images);
    cr_assert_eq (glob (pattern, 0, NULL, &found), 0);
    snprintf (latin1, sizeof latin1, "%s", found.gl_pathv [0]);
    snprintf (strrchr (latin1, '/') + 1, 16, "caf\xe9.png");
    cr_assert_eq (rename (found.gl_pathv [0], latin1), 0);
    globfree (&found);
    result = za_test_run (predict, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    int named = 0;
    lines = 0;
    for (char *save = NULL, *text = strtok_r (result.out, "\n", &save); text;
         text = strtok_r (NULL, "\n", &save), lines++) {
        json_t *row = json_loads (text, 0, NULL);
        const char *file = json_string_value (json_object_get (row, "file"));
        named += file && strstr (file, "/caf\\xe9.png") != NULL;
        json_decref (row);
    }
    cr_expect_eq (lines, 40, "%s", result.err);
    cr_expect_eq (named, 1);
    za_test_result_free (&result);
    //  --output FILE is written whole or not at all: a run that fails (a
    //  checkpoint that is not there) leaves the file of the last run as it
    //  was (it was emptied first), and no file of its own.
    char *kept = za_test_write ("kept.jsonl", "the last run's\n");
    const char *missing [] = {"predict", "--model-dir", model, "--data", images, "--checkpoint",
                              "nope", "--output", kept, NULL};
    result = za_test_run (missing, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    za_test_result_free (&result);
    char *text = (char *) za_test_read_file (kept, NULL);
    cr_expect (text && !strcmp (text, "the last run's\n"), "%s", text? text: "(gone)");
    free (text);
    snprintf (pattern, sizeof pattern, "%s.*", kept);
    cr_expect_eq (glob (pattern, 0, NULL, &found), GLOB_NOMATCH);
    free (kept);
    //  What is not a plain file is written as it is (/dev/stdout, a pipe).
    const char *to_stdout [] = {"predict", "--model-dir", model, "--data", images, "--output",
                                "/dev/stdout", NULL};
    result = za_test_run (to_stdout, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    cr_expect_eq (za_test_count (result.out, "\"probabilities\""), 40, "%s", result.err);
    za_test_result_free (&result);
    //  Another model than the default one, and a preprocessing: the
    //  training's, as if given (predict once built the default cnn and said
    //  the checkpoint holds another; then it took no preprocessing).
    char *dnn = za_test_path ("dnn");
    const char *train_dnn [] = {"--model", "dnn", "--max-steps", "5", "--threads", "1",
                                "--no-eval", "--preprocess", "torch", "--model-dir", dnn, NULL};
    result = za_test_run (train_dnn, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *predict_dnn [] = {"predict", "--model-dir", dnn, "--data", images, NULL};
    result = za_test_run (predict_dnn, RUN_TIMEOUT_S);
    cr_expect_eq (result.exit_code, 0, "%s", result.err);
    int rows = 0;
    for (const char *at = result.out; (at = strstr (at, "\"probabilities\"")); at++)
        rows++;
    cr_expect_eq (rows, 40, "%s", result.out);
    const char *predict_torch [] = {"predict", "--model-dir", dnn, "--data", images,
                                    "--preprocess", "torch", NULL};
    za_test_result_t torch = za_test_run (predict_torch, RUN_TIMEOUT_S);
    cr_expect (torch.exit_code == 0 && result.out && !strcmp (result.out, torch.out),
               "predicted otherwise than with --preprocess torch: %.300s", result.out);
    za_test_result_free (&torch);
    za_test_result_free (&result);
    free (images), free (model), free (dnn);
    za_dataset_destroy (&fashion);
    za_test_dir_remove ();
}
