/*  za_eval_metrics.h: what an evaluation reports beyond loss and accuracy
    (tf.estimator's eval_metric_ops, Keras's metrics): precision, recall and
    F1 per class and macro-averaged, ROC-AUC and PR-AUC one class against
    the rest, top-k accuracy and the confusion matrix (--eval-metrics), and
    a model_fn's own metrics (za_metric_fn_t, Keras's Metric: update_state,
    result).

    Exact over the whole evaluation set, whatever its batching: counts for
    the confusion matrix and top-k; for the AUCs every example's softmax
    probabilities are kept (examples x classes floats) and ranked at the end,
    ties sharing their ranks, so no thresholds approximate the curve (as
    scikit-learn's roc_auc_score and average_precision_score compute them).
    Where a class's value is undefined (AUC of a class that never occurs,
    or occurs in every example) it is null in metrics.jsonl and left out of
    the macro mean, as it is when a logit is not finite (its softmax is NaN;
    such a label is in no top k); precision and recall of a class with
    nothing predicted or nothing true are 0, and the macro means run over
    the classes that occur or are predicted (scikit-learn's labels=None).
    Memory: counts per class, the confusion matrix's C x C (up to
    ZA_EVAL_CONFUSION_MAX classes) and, for the AUCs, C floats an example. */
#ifndef ZA_EVAL_METRICS_H_INCLUDED
#define ZA_EVAL_METRICS_H_INCLUDED

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "za/za_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_EVAL_TOP_K_MAX 4
//  The most scalars an evaluation reports besides loss and accuracy: the
//  built-in (5 + ZA_EVAL_TOP_K_MAX) and a model_fn's own.
#define ZA_EVAL_OWN_MAX 15
#define ZA_EVAL_SCALARS_MAX (5 + ZA_EVAL_TOP_K_MAX + ZA_EVAL_OWN_MAX)
//  The most classes a confusion matrix is kept for (its C x C counts).
#define ZA_EVAL_CONFUSION_MAX 1000

//  Which metrics (--eval-metrics).
typedef struct {
    int precision, recall, f1;      //  per class and macro
    int auc, pr_auc;                //  one-vs-rest, per class and macro
    int confusion_matrix;           //  rows the true class, columns the predicted
    int top_k [ZA_EVAL_TOP_K_MAX];  //  top_k(K): the label among the K largest logits
    int top_k_count;
} za_eval_metrics_spec_t;

//  "precision recall f1 auc pr_auc top_k(5) confusion_matrix", separated
//  by spaces or commas; "all" for every one of them (top_k(5)); NULL, ""
//  or "none": none. 0, or -1 with an error naming what is accepted.
int za_eval_metrics_parse (const char *text, za_eval_metrics_spec_t *spec);

//  A model_fn's own metric: za_metric_fn_t (za_model.h).

//  One reported value.
typedef struct {
    char name [48];
    double value;                   //  NaN: undefined
} za_eval_scalar_t;

typedef struct _za_eval_metrics_t za_eval_metrics_t;

//  1 when an evaluation with spec and the own metrics reports `name`:
//  loss, accuracy, precision, ..., top_K_accuracy, an own metric's.
int za_eval_metrics_reports (const za_eval_metrics_spec_t *spec, const za_metric_fn_t *own,
                             int own_count, const char *name);

//  A model_fn's own metrics are usable: at most ZA_EVAL_OWN_MAX, each with
//  a name (not one of zactor's, nor twice), update and result. 0, or -1
//  with an error.
int za_eval_metrics_check_own (const za_metric_fn_t *own, int own_count);

//  A new accumulation for one evaluation (own: the model_fn's metrics, may
//  be NULL). NULL when out of memory.
za_eval_metrics_t *za_eval_metrics_new (const za_eval_metrics_spec_t *spec,
                                        const za_metric_fn_t *own, int own_count);
void za_eval_metrics_destroy (za_eval_metrics_t **self_p);

//  1 when it has anything to compute.
int za_eval_metrics_any (const za_eval_metrics_spec_t *spec, int own_count);

//  Adds n examples. 0, or -1 with an error (a label outside 0 .. n_classes-1,
//  another class count than before, out of memory).
int za_eval_metrics_update (za_eval_metrics_t *self, const float *logits,
                            const int32_t *labels, int n, int n_classes);

//  The macro values and the own metrics, in a fixed order (precision,
//  recall, f1, auc, pr_auc, top_K_accuracy..., own), at most max. Returns
//  how many.
int za_eval_metrics_scalars (za_eval_metrics_t *self, za_eval_scalar_t *out, int max);

//  Everything as a JSON object: the scalars, "<metric>_per_class" arrays
//  (null where undefined) and "confusion_matrix" (rows true, columns
//  predicted). A new reference, or NULL when out of memory.
json_t *za_eval_metrics_json (za_eval_metrics_t *self);

//  The confusion matrix as a PNG (each row's share as a shade of blue, a
//  cell a few pixels square): *png (malloc'd) of *size bytes, *width x
//  *height. 0, or -1 with an error (not asked for, no example, libspng).
int za_eval_metrics_confusion_png (za_eval_metrics_t *self, uint8_t **png, size_t *size,
                                   int *width, int *height);

#ifdef __cplusplus
}
#endif
#endif
