/*  test_eval_metrics.c: --eval-metrics. Hand-made cases whose precision,
    recall, F1, AUC (ties, a class that never occurs), top-k (ties at the
    boundary) and confusion matrix are worked out in the comments; the AUCs
    of many tied scores against a second, independent implementation (every
    positive-negative pair counted, every threshold walked); the same
    metrics whatever the batching; a model_fn's own metric; and zactor-run
    on Fashion-MNIST writing them to metrics.jsonl and the confusion matrix
    as an image to TensorBoard.                                             */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_estimator.h"
#include "za/za_eval_metrics.h"
#include "za/za_image.h"
#include "za/za_tfrecord.h"
#include "za_test.h"

static void
s_setup (void)
{
    za_test_dir_create ("za_eval_metrics");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (eval_metrics, .init = s_setup, .fini = s_teardown);

static double
s_get (json_t *json, const char *key)
{
    json_t *value = json_object_get (json, key);
    cr_assert (json_is_number (value), "no number '%s'", key);
    return json_number_value (value);
}

static double
s_at (json_t *json, const char *key, int index)
{
    json_t *value = json_array_get (json_object_get (json, key), (size_t) index);
    cr_assert_not_null (value, "no %s[%d]", key, index);
    return json_is_null (value)? NAN: json_number_value (value);
}

#define NEAR(a, b) (fabs ((a) - (b)) < 1e-6)

// ---------------------------------------------------------------------------
//  The text

Test (eval_metrics, parse_names_and_errors)
{
    za_eval_metrics_spec_t spec;
    cr_assert_eq (za_eval_metrics_parse ("precision, recall top_k(3) top_k(1)", &spec), 0);
    cr_expect (spec.precision && spec.recall && !spec.f1 && !spec.auc);
    cr_expect_eq (spec.top_k_count, 2);
    cr_expect_eq (spec.top_k [0], 3);
    cr_expect_eq (spec.top_k [1], 1);
    cr_assert_eq (za_eval_metrics_parse ("all", &spec), 0);
    cr_expect (spec.precision && spec.recall && spec.f1 && spec.auc && spec.pr_auc
               && spec.confusion_matrix);
    cr_expect (spec.top_k_count == 1 && spec.top_k [0] == 5);
    cr_assert_eq (za_eval_metrics_parse (NULL, &spec), 0);
    cr_expect_not (za_eval_metrics_any (&spec, 0));
    cr_expect (za_eval_metrics_any (&spec, 1));
    cr_assert_eq (za_eval_metrics_parse ("none", &spec), 0);
    //  Keras's metrics=['accuracy']: taken, and nothing more to compute.
    cr_assert_eq (za_eval_metrics_parse ("accuracy", &spec), 0, "%s", za_last_error ());
    cr_expect_not (za_eval_metrics_any (&spec, 0));
    cr_assert_eq (za_eval_metrics_parse ("acc, auc sparse_categorical_accuracy", &spec), 0);
    cr_expect (spec.auc && !spec.precision);
    const char *bad [][2] = {
        {"precison", "unknown metric 'precison'"},
        {"top_k(0)", "K from 1"},
        {"top_k(x)", "needs a whole number"},
        {"auc(2)", "takes no argument"},
        {"accuracy(2)", "takes no argument"},
        {"top_k(1) top_k(2) top_k(3) top_k(4) top_k(5)", "at most 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        cr_expect_eq (za_eval_metrics_parse (bad [i][0], &spec), -1, "%s", bad [i][0]);
        cr_expect (strstr (za_last_error (), bad [i][1]), "'%s': %s", bad [i][0],
                   za_last_error ());
    }
}

// ---------------------------------------------------------------------------
//  Hand-made cases

//  Four classes, class 3 never occurs and is never predicted. Logits (the
//  argmax first; of tied ones, the first):
//    label 0: (3 1 0 0) -> 0   (2 0 1 0) -> 0   (1 2 0 0) -> 1
//    label 1: (1 3 0 0) -> 1   (2 2 0 0) -> 0
//    label 2: (0 0 4 0) -> 2   (1 0 2 0) -> 2   (2 2 1 0) -> 0
//  confusion  [[2 1 0 0] [1 1 0 0] [1 0 2 0] [0 0 0 0]]
//  precision  0: 2/4  1: 1/2  2: 2/2    recall 0: 2/3  1: 1/2  2: 2/3
//  macro over classes 0-2: precision 2/3, recall (2/3 + 1/2 + 2/3) / 3 = 11/18
//  top_k: the label is in when fewer than k logits beat its own (ties count
//  as in, TensorFlow's in_top_k): label 1's (2 2 0 0) is in the top 1;
//  label 0's (1 2 0 0) only in the top 2; label 2's (2 2 1 0) in neither.
//  top_1 6/8, top_2 7/8.
static const float s_logits [8][4] = {
    {3, 1, 0, 0}, {2, 0, 1, 0}, {1, 2, 0, 0}, {1, 3, 0, 0}, {2, 2, 0, 0},
    {0, 0, 4, 0}, {1, 0, 2, 0}, {2, 2, 1, 0},
};
static const int32_t s_labels [8] = {0, 0, 0, 1, 1, 2, 2, 2};

Test (eval_metrics, hand_made_counts_and_a_class_that_never_occurs)
{
    za_eval_metrics_spec_t spec;
    cr_assert_eq (za_eval_metrics_parse ("all top_k(1) top_k(2)", &spec), 0);
    za_eval_metrics_t *metrics = za_eval_metrics_new (&spec, NULL, 0);
    cr_assert_not_null (metrics);
    cr_assert_eq (za_eval_metrics_update (metrics, &s_logits [0][0], s_labels, 8, 4), 0);
    json_t *json = za_eval_metrics_json (metrics);
    const int confusion [4][4] = {{2, 1, 0, 0}, {1, 1, 0, 0}, {1, 0, 2, 0}, {0, 0, 0, 0}};
    json_t *rows = json_object_get (json, "confusion_matrix");
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            cr_expect_eq (json_integer_value (json_array_get (json_array_get (rows, r), c)),
                          confusion [r][c], "[%d][%d]", r, c);
    const double precision [] = {0.5, 0.5, 1, 0}, recall [] = {2 / 3.0, 0.5, 2 / 3.0, 0};
    for (int c = 0; c < 4; c++) {
        cr_expect (NEAR (s_at (json, "precision_per_class", c), precision [c]), "p %d", c);
        cr_expect (NEAR (s_at (json, "recall_per_class", c), recall [c]), "r %d", c);
        double p = precision [c], r = recall [c], f1 = p + r > 0? 2 * p * r / (p + r): 0;
        cr_expect (NEAR (s_at (json, "f1_per_class", c), f1), "f1 %d", c);
    }
    cr_expect (NEAR (s_get (json, "precision"), 2 / 3.0), "%f", s_get (json, "precision"));
    cr_expect (NEAR (s_get (json, "recall"), 11 / 18.0), "%f", s_get (json, "recall"));
    cr_expect (NEAR (s_get (json, "top_1_accuracy"), 6 / 8.0));
    cr_expect (NEAR (s_get (json, "top_2_accuracy"), 7 / 8.0));
    //  Class 3 never occurs: no AUC; the macro means are over classes 0-2.
    cr_expect (isnan (s_at (json, "auc_per_class", 3)));
    cr_expect (isnan (s_at (json, "pr_auc_per_class", 3)));
    double mean = 0;
    for (int c = 0; c < 3; c++)
        mean += s_at (json, "auc_per_class", c) / 3;
    cr_expect (NEAR (s_get (json, "auc"), mean));
    //  The scalars the evaluator writes, in their order.
    za_eval_scalar_t scalars [ZA_EVAL_SCALARS_MAX];
    int count = za_eval_metrics_scalars (metrics, scalars, ZA_EVAL_SCALARS_MAX);
    const char *names [] = {"precision", "recall", "f1", "auc", "pr_auc", "top_5_accuracy",
                            "top_1_accuracy", "top_2_accuracy"};
    cr_assert_eq (count, 8);
    for (int i = 0; i < count; i++)
        cr_expect_str_eq (scalars [i].name, names [i]);
    json_decref (json);
    //  A label the model has no class for, another class count: errors.
    int32_t wrong = 4;
    cr_expect_eq (za_eval_metrics_update (metrics, &s_logits [0][0], &wrong, 1, 4), -1);
    cr_expect (strstr (za_last_error (), "label 4"), "%s", za_last_error ());
    cr_expect_eq (za_eval_metrics_update (metrics, &s_logits [0][0], s_labels, 1, 3), -1);
    za_eval_metrics_destroy (&metrics);
    cr_assert_null (metrics);
}

//  Two classes: the softmax of (0, z) ranks the examples by z. Scores of
//  class 1 (z), positives P at 3, 2, 2, 0 and negatives N at 2, 1, 0, 0:
//  pairs P > N: 3 beats 4; each 2 beats 3 and ties 1; 0 beats none and ties
//  2. AUC = (4 + 2 x (3 + 0.5) + 2 x 0.5) / 16 = 12 / 16 = 0.75.
//  Average precision from the top: 3 (1 of 1, recall 1/4), {2, 2, 2} (3 of
//  4, recall 3/4), 1 (3 of 5), {0, 0, 0} (4 of 8, recall 1):
//  1/4 x 1 + 2/4 x 3/4 + 1/4 x 1/2 = 0.25 + 0.375 + 0.125 = 0.75.
Test (eval_metrics, auc_with_ties_by_hand)
{
    const float z [] = {3, 2, 2, 0, 2, 1, 0, 0};
    const int32_t labels [] = {1, 1, 1, 1, 0, 0, 0, 0};
    float logits [16];
    for (int i = 0; i < 8; i++) {
        logits [2 * i] = 0;
        logits [2 * i + 1] = z [i];
    }
    za_eval_metrics_spec_t spec;
    cr_assert_eq (za_eval_metrics_parse ("auc pr_auc", &spec), 0);
    za_eval_metrics_t *metrics = za_eval_metrics_new (&spec, NULL, 0);
    cr_assert_eq (za_eval_metrics_update (metrics, logits, labels, 8, 2), 0);
    json_t *json = za_eval_metrics_json (metrics);
    cr_expect (NEAR (s_at (json, "auc_per_class", 1), 0.75), "%f",
               s_at (json, "auc_per_class", 1));
    cr_expect (NEAR (s_at (json, "pr_auc_per_class", 1), 0.75), "%f",
               s_at (json, "pr_auc_per_class", 1));
    //  Class 0 is the mirror: the same ROC-AUC.
    cr_expect (NEAR (s_at (json, "auc_per_class", 0), 0.75));
    json_decref (json);
    za_eval_metrics_destroy (&metrics);
}

//  A logit that is not finite (an overflow): its label is in no top k, and
//  the AUCs of the classes it makes NaN are undefined (null), not a crash.
Test (eval_metrics, a_logit_not_finite)
{
    const float logits [] = {INFINITY, 0, NAN, 1, 2, 0, 0, 3};
    const int32_t labels [] = {0, 1, 0, 1};
    za_eval_metrics_spec_t spec;
    cr_assert_eq (za_eval_metrics_parse ("auc top_k(1)", &spec), 0);
    za_eval_metrics_t *metrics = za_eval_metrics_new (&spec, NULL, 0);
    cr_assert_eq (za_eval_metrics_update (metrics, logits, labels, 4, 2), 0);
    json_t *json = za_eval_metrics_json (metrics);
    //  (inf, 0) label 0: its logit is no number to rank, a miss (and its
    //  softmax NaN); (NaN, 1) label 1: nothing beats 1, in; (2, 0) label 0
    //  and (0, 3) label 1: in. 3 of 4; no class has an AUC.
    cr_expect (isnan (s_at (json, "auc_per_class", 0)));
    cr_expect (isnan (s_at (json, "auc_per_class", 1)));
    cr_expect (json_is_null (json_object_get (json, "auc")));
    cr_expect (NEAR (s_get (json, "top_1_accuracy"), 3 / 4.0), "%f",
               s_get (json, "top_1_accuracy"));
    json_decref (json);
    za_eval_metrics_destroy (&metrics);
}

// ---------------------------------------------------------------------------
//  Against an independent implementation, and batching

//  ROC-AUC as the share of positive-negative pairs ordered right (ties a
//  half), average precision by walking each distinct threshold: nothing
//  shared with the ranking the module does.
static void
s_pairs (const float *scores, const int *positive, int n, double *auc, double *ap)
{
    double right = 0, pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (positive [i] && !positive [j]) {
                pairs++;
                right += scores [i] > scores [j]? 1: scores [i] == scores [j]? 0.5: 0;
            }
    *auc = right / pairs;
    int positives = 0;
    for (int i = 0; i < n; i++)
        positives += positive [i];
    double last_recall = 0, sum = 0, threshold = INFINITY;
    while (1) {
        double next = -INFINITY;
        for (int i = 0; i < n; i++)
            if (scores [i] < threshold && scores [i] > next)
                next = scores [i];
        if (next == -INFINITY)
            break;
        threshold = next;
        int tp = 0, all = 0;
        for (int i = 0; i < n; i++)
            if (scores [i] >= threshold) {
                all++;
                tp += positive [i];
            }
        double recall = (double) tp / positives;
        sum += (recall - last_recall) * tp / all;
        last_recall = recall;
    }
    *ap = sum;
}

#define MANY 600
#define CLASSES 5

Test (eval_metrics, aucs_agree_with_pair_counting_and_batching_changes_nothing)
{
    //  Logits on a coarse grid: many examples tie.
    za_rng_t rng;
    za_rng_seed (&rng, 7);
    float *logits = (float *) malloc (MANY * CLASSES * sizeof (float));
    int32_t *labels = (int32_t *) malloc (MANY * sizeof (int32_t));
    for (int i = 0; i < MANY; i++) {
        labels [i] = (int32_t) (za_rng_next (&rng) % CLASSES);
        for (int k = 0; k < CLASSES; k++)
            logits [i * CLASSES + k] = (float) (za_rng_next (&rng) % 4)
                                       + (k == labels [i]? 1.0f: 0.0f);
    }
    za_eval_metrics_spec_t spec;
    cr_assert_eq (za_eval_metrics_parse ("all", &spec), 0);
    za_eval_metrics_t *whole = za_eval_metrics_new (&spec, NULL, 0);
    za_eval_metrics_t *ones = za_eval_metrics_new (&spec, NULL, 0);
    cr_assert_eq (za_eval_metrics_update (whole, logits, labels, MANY, CLASSES), 0);
    for (int i = 0; i < MANY; i++)
        cr_assert_eq (za_eval_metrics_update (ones, logits + i * CLASSES, labels + i, 1,
                                              CLASSES), 0);
    json_t *a = za_eval_metrics_json (whole), *b = za_eval_metrics_json (ones);
    char *text_a = json_dumps (a, JSON_SORT_KEYS), *text_b = json_dumps (b, JSON_SORT_KEYS);
    cr_expect_str_eq (text_a, text_b);
    //  Each class's AUCs from the softmax probabilities, counted in pairs.
    float *scores = (float *) malloc (MANY * sizeof (float));
    int *positive = (int *) malloc (MANY * sizeof (int));
    for (int c = 0; c < CLASSES; c++) {
        for (int i = 0; i < MANY; i++) {
            double sum = 0, best = logits [i * CLASSES];
            for (int k = 1; k < CLASSES; k++)
                best = fmax (best, logits [i * CLASSES + k]);
            for (int k = 0; k < CLASSES; k++)
                sum += exp (logits [i * CLASSES + k] - best);
            scores [i] = (float) (exp (logits [i * CLASSES + c] - best) / sum);
            positive [i] = labels [i] == c;
        }
        double auc, ap;
        s_pairs (scores, positive, MANY, &auc, &ap);
        cr_expect (NEAR (s_at (a, "auc_per_class", c), auc), "class %d: auc %f, pairs %f", c,
                   s_at (a, "auc_per_class", c), auc);
        cr_expect (NEAR (s_at (a, "pr_auc_per_class", c), ap), "class %d: ap %f, walk %f", c,
                   s_at (a, "pr_auc_per_class", c), ap);
        cr_expect (auc > 0.6 && auc < 1, "class %d: %f", c, auc);
    }
    free (text_a);
    free (text_b);
    json_decref (a);
    json_decref (b);
    free (scores);
    free (positive);
    free (logits);
    free (labels);
    za_eval_metrics_destroy (&whole);
    za_eval_metrics_destroy (&ones);
}

// ---------------------------------------------------------------------------
//  Through the estimator: batch 1 and batch 1000, a model_fn's own metric

typedef struct {
    int64_t examples;
    double max_logit_sum;
} s_own_t;

static void
s_own_update (void *state, const float *logits, const int32_t *labels, int n, int n_classes)
{
    (void) labels;
    s_own_t *own = (s_own_t *) state;
    for (int i = 0; i < n; i++) {
        float best = logits [(size_t) i * n_classes];
        for (int k = 1; k < n_classes; k++)
            best = fmaxf (best, logits [(size_t) i * n_classes + k]);
        own->max_logit_sum += best;
    }
    own->examples += n;
}

static double
s_own_examples (const void *state)
{
    return (double) ((const s_own_t *) state)->examples;
}

typedef struct {
    const za_dataset_t *train, *eval;
    int eval_batch;
} s_inputs_t;

static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    s_inputs_t *inputs = (s_inputs_t *) arg;
    za_input_config_t config = za_input_config_default ();
    if (context->mode == ZA_MODE_TRAIN) {
        config.batch_size = 64;
        config.shuffle_buffer = 1000;
        config.epochs = -1;
        return za_input_new (inputs->train, &config);
    }
    config.batch_size = inputs->eval_batch;
    return za_input_new (inputs->eval, &config);
}

static json_t *
s_last_line (const char *subdir)
{
    char name [64];
    snprintf (name, sizeof name, "%s/metrics.jsonl", subdir);
    char *path = za_test_path (name);
    char *text = za_test_read_file (path, NULL);
    cr_assert_not_null (text, "%s", path);
    char *last = text;
    for (char *at = text; *at; at++)
        if (at [0] == '\n' && at [1])
            last = at + 1;
    json_t *json = json_loads (last, JSON_DISABLE_EOF_CHECK, NULL);
    cr_assert_not_null (json);
    free (text);
    free (path);
    return json;
}

Test (eval_metrics, estimator_batch_1_and_1000_and_an_own_metric)
{
    za_dataset_t *train = za_test_fashion ("train", 3000);
    za_dataset_t *test = za_test_fashion ("t10k", 2000);
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("flatten dense(32,relu) dense(10)", &spec), 0);
    static const za_metric_fn_t own [] = {{"own_examples", sizeof (s_own_t), s_own_update,
                                           s_own_examples}};
    za_model_fn_t model_fn = *za_stack_model_fn ();
    //  One named as one of zactor's is refused.
    static const za_metric_fn_t clash [] = {{"auc", sizeof (s_own_t), s_own_update,
                                             s_own_examples}};
    cr_expect_eq (za_eval_metrics_check_own (clash, 1), -1);
    cr_expect (strstr (za_last_error (), "'auc': the name is taken"), "%s", za_last_error ());
    cr_expect_eq (za_eval_metrics_check_own (NULL, 0), 0);
    model_fn.metrics = own;
    model_fn.metric_count = 1;
    za_run_config_t run = za_run_config_default ();
    run.model_dir = za_test_dir ();
    run.threads = 2;
    run.progress = 0;
    run.log_step_count_steps = 0;
    run.eval_metrics = "precision recall f1 auc pr_auc top_k(3) confusion_matrix";
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_estimator_t *estimator = za_estimator_new (&model_fn, &spec, (za_input_shape_t) {28, 28, 1},
                                                  &optim, &run);
    cr_assert_not_null (estimator, "%s", za_last_error ());
    s_inputs_t inputs = {train, test, 1000};
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 100), 0, "%s",
                  za_last_error ());
    za_eval_result_t result;
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result), 0, "%s",
                  za_last_error ());
    double value = 0;
    cr_expect_eq (za_eval_result_value (&result, "own_examples", &value), 0);
    cr_expect_eq (value, 2000);
    cr_expect_eq (za_eval_result_value (&result, "top_3_accuracy", &value), 0);
    cr_expect_geq (value, result.accuracy);
    cr_expect_eq (za_eval_result_value (&result, "nothing", &value), -1);
    cr_expect_not_null (result.confusion_png);
    za_eval_result_free (&result);
    json_t *big = s_last_line ("eval");
    inputs.eval_batch = 1;
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result), 0, "%s",
                  za_last_error ());
    za_eval_result_free (&result);
    json_t *one = s_last_line ("eval");
    //  The logits of a batch of 1 and of 1000 may differ in their last bits
    //  (the products block differently): the metrics agree to rounding; the
    //  confusion matrix and the counts exactly.
    const char *keys [] = {"accuracy", "precision", "recall", "f1", "auc", "pr_auc",
                           "top_3_accuracy", "own_examples"};
    for (size_t i = 0; i < sizeof keys / sizeof keys [0]; i++)
        cr_expect (fabs (s_get (big, keys [i]) - s_get (one, keys [i])) < 1e-5, "%s: %f %f",
                   keys [i], s_get (big, keys [i]), s_get (one, keys [i]));
    cr_expect (json_equal (json_object_get (big, "confusion_matrix"),
                           json_object_get (one, "confusion_matrix")));
    int64_t total = 0;
    json_t *rows = json_object_get (big, "confusion_matrix");
    for (size_t r = 0; r < json_array_size (rows); r++)
        for (size_t c = 0; c < json_array_size (json_array_get (rows, r)); c++)
            total += json_integer_value (json_array_get (json_array_get (rows, r), c));
    cr_expect_eq (total, 2000);
    json_decref (big);
    json_decref (one);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
    za_dataset_destroy (&test);
}

// ---------------------------------------------------------------------------
//  zactor-run: metrics.jsonl and TensorBoard

//  The first image summary in the eval dir's event files (the final
//  evaluation's, then a replay's): its PNG decoded.
static int
s_event_image (const char *dir, uint8_t **rgb, int *width, int *height)
{
    char command [4300];
    snprintf (command, sizeof command, "ls %s/events.out.tfevents.* 2>/dev/null", dir);
    FILE *ls = popen (command, "r");
    char path [4096] = "";
    int found = -1;
    while (found && ls && fgets (path, sizeof path, ls)) {
        path [strcspn (path, "\n")] = 0;
        za_tfrecord_reader_t *reader = za_tfrecord_reader_new (path);
        const uint8_t *data;
        size_t size;
        uint64_t offset;
        while (found && reader
               && za_tfrecord_next (reader, &data, &size, &offset) == ZA_TFRECORD_OK) {
            //  The PNG signature, then its IHDR's width and height.
            for (size_t i = 0; i + 24 < size; i++)
                if (!memcmp (data + i, "\x89PNG\r\n\x1a\n", 8)) {
                    *width = (int) (data [i + 16] << 24 | data [i + 17] << 16
                                    | data [i + 18] << 8 | data [i + 19]);
                    *height = (int) (data [i + 20] << 24 | data [i + 21] << 16
                                     | data [i + 22] << 8 | data [i + 23]);
                    za_image_spec_t spec = {*height, *width, 3, ZA_RESIZE_AREA, 0};
                    *rgb = (uint8_t *) malloc ((size_t) *width * *height * 3);
                    za_image_decoder_t *decoder = za_image_decoder_new ();
                    found = za_image_decode (decoder, data + i, size - i, &spec, *rgb);
                    za_image_decoder_destroy (&decoder);
                    break;
                }
        }
        za_tfrecord_reader_destroy (&reader);
    }
    if (ls)
        pclose (ls);
    return found;
}

Test (eval_metrics, zactor_run_writes_them_and_the_confusion_image, .timeout = 300)
{
    const char *model = "flatten dense(32,relu) dense(10)";
    const char *train [] = {"--max-steps", "150", "--model-dir", za_test_dir (), "--model", model,
                            "--threads", "2", "--eval-metrics", "f1", NULL};
    za_test_result_t trained = za_test_run (train, 240);
    cr_assert_eq (trained.exit_code, 0, "%s", trained.err);
    //  The final evaluation's metrics under its accuracy.
    cr_expect (strstr (trained.out, "\n  f1 0."), "%s", trained.out);
    za_test_result_free (&trained);
    //  The evaluator replays the checkpoint with every metric.
    const char *replay [] = {"--role", "evaluator", "--replay", "--model-dir", za_test_dir (),
                             "--model", model, "--eval-metrics", "all", NULL};
    za_test_result_t replayed = za_test_run (replay, 240);
    cr_assert_eq (replayed.exit_code, 0, "%s", replayed.err);
    za_test_result_free (&replayed);
    json_t *line = s_last_line ("eval");
    //  t10k holds 1000 of each class: macro recall is the accuracy.
    cr_expect (fabs (s_get (line, "recall") - s_get (line, "accuracy")) < 1e-6, "%f %f",
               s_get (line, "recall"), s_get (line, "accuracy"));
    cr_expect_geq (s_get (line, "top_5_accuracy"), s_get (line, "accuracy"));
    cr_expect (s_get (line, "auc") > 0.9 && s_get (line, "auc") <= 1);
    json_t *rows = json_object_get (line, "confusion_matrix");
    cr_assert_eq (json_array_size (rows), 10);
    int64_t diagonal = 0;
    for (int r = 0; r < 10; r++) {
        int64_t sum = 0;
        for (int c = 0; c < 10; c++)
            sum += json_integer_value (json_array_get (json_array_get (rows, r), c));
        diagonal += json_integer_value (json_array_get (json_array_get (rows, r), r));
        cr_expect_eq (sum, 1000, "row %d", r);
    }
    cr_expect (fabs ((double) diagonal / 10000 - s_get (line, "accuracy")) < 1e-6);
    //  TensorBoard: the image, 10 cells of 25 pixels; a cell darker for more
    //  of its row (trouser's right answers against trouser taken for a bag).
    char *eval_dir = za_test_path ("eval");
    uint8_t *rgb = NULL;
    int width = 0, height = 0;
    cr_assert_eq (s_event_image (eval_dir, &rgb, &width, &height), 0, "no image in %s",
                  eval_dir);
    cr_expect_eq (width, 250);
    cr_expect_eq (height, 250);
    int64_t right = json_integer_value (json_array_get (json_array_get (rows, 1), 1));
    int64_t wrong = json_integer_value (json_array_get (json_array_get (rows, 1), 8));
    cr_assert_gt (right, wrong);
    const uint8_t *at_right = rgb + ((size_t) (25 + 12) * 250 + 25 + 12) * 3;
    const uint8_t *at_wrong = rgb + ((size_t) (25 + 12) * 250 + 8 * 25 + 12) * 3;
    cr_expect_lt (at_right [0], at_wrong [0]);
    free (rgb);
    free (eval_dir);
    json_decref (line);
    //  A bad list: one error, exit 2.
    const char *bad [] = {"--max-steps", "10", "--model-dir", za_test_dir (), "--eval-metrics",
                          "accuracy_at_k", NULL};
    za_test_result_t refused = za_test_run (bad, 60);
    cr_expect_eq (refused.exit_code, 2);
    cr_expect (strstr (refused.err, "unknown metric 'accuracy_at_k'"), "%s", refused.err);
    za_test_result_free (&refused);
}
