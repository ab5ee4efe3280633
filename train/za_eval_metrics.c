/*  za_eval_metrics.c: precision, recall, F1, ROC-AUC, PR-AUC, top-k and the
    confusion matrix over a whole evaluation (za_eval_metrics.h).          */
#include "za/za_eval_metrics.h"

#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_util.h"

#define NAME_MAX_LEN 32
#define TOP_K_LIMIT 1000

struct _za_eval_metrics_t {
    za_eval_metrics_spec_t spec;
    int n_classes;                  //  0 until the first update
    int64_t examples;
    int64_t *counts;                //  [3][n_classes]: true positives, predicted, actual
    int64_t *confusion;             //  [n_classes][n_classes] (confusion_matrix only)
    int64_t top_k_hits [ZA_EVAL_TOP_K_MAX];
    float *probs;                   //  [examples][n_classes] (AUCs only)
    int32_t *labels;                //  [examples] (AUCs only)
    int64_t capacity;               //  examples probs and labels hold
    const za_metric_fn_t *own;
    int own_count;
    void **own_states;
    double *per_class [5];          //  precision, recall, f1, auc, pr_auc (NaN: undefined)
    int finished;
};

enum { M_PRECISION, M_RECALL, M_F1, M_AUC, M_PR_AUC };
static const char *s_metric_names [] = {"precision", "recall", "f1", "auc", "pr_auc"};

static int
s_wanted (const za_eval_metrics_spec_t *spec, int metric)
{
    switch (metric) {
        case M_PRECISION: return spec->precision;
        case M_RECALL: return spec->recall;
        case M_F1: return spec->f1;
        case M_AUC: return spec->auc;
        default: return spec->pr_auc;
    }
}

int
za_eval_metrics_parse (const char *text, za_eval_metrics_spec_t *spec)
{
    memset (spec, 0, sizeof *spec);
    if (!text || !*text || !strcmp (text, "none"))
        return 0;
    const char *at = text;
    char name [NAME_MAX_LEN];
    int got, has_arg;
    double arg;
    while ((got = za_next_word (&at, " ,", name, sizeof name, &has_arg, &arg))) {
        if (got < 0 || (has_arg && arg != floor (arg)))
            return za_error ("--eval-metrics '%s': %s( needs a whole number and a ')'", text,
                             name);
        long k = !has_arg? 5: arg >= 1 && arg <= TOP_K_LIMIT? (long) arg: 0;
        if (has_arg && strcmp (name, "top_k"))
            return za_error ("--eval-metrics '%s': %s takes no argument", text, name);
        //  Keras's metrics=['accuracy'] (and its other names): always reported.
        if (!strcmp (name, "accuracy") || !strcmp (name, "acc")
            || !strcmp (name, "sparse_categorical_accuracy"))
            continue;
        int *flag = !strcmp (name, "precision")? &spec->precision
                  : !strcmp (name, "recall")? &spec->recall
                  : !strcmp (name, "f1")? &spec->f1
                  : !strcmp (name, "auc")? &spec->auc
                  : !strcmp (name, "pr_auc")? &spec->pr_auc
                  : !strcmp (name, "confusion_matrix")? &spec->confusion_matrix: NULL;
        if (flag)
            *flag = 1;
        else
        if (!strcmp (name, "all"))
            spec->precision = spec->recall = spec->f1 = spec->auc = spec->pr_auc
                = spec->confusion_matrix = 1;
        if (!strcmp (name, "top_k") || !strcmp (name, "all")) {
            if (k < 1 || k > TOP_K_LIMIT)
                return za_error ("--eval-metrics '%s': top_k(K) takes K from 1 to %d", text,
                                 TOP_K_LIMIT);
            int seen = 0;
            for (int i = 0; i < spec->top_k_count; i++)
                seen |= spec->top_k [i] == (int) k;
            if (!seen && spec->top_k_count == ZA_EVAL_TOP_K_MAX)
                return za_error ("--eval-metrics '%s': at most %d top_k", text,
                                 ZA_EVAL_TOP_K_MAX);
            if (!seen)
                spec->top_k [spec->top_k_count++] = (int) k;
        }
        else
        if (!flag)
            return za_error ("--eval-metrics '%s': unknown metric '%s' (use precision, "
                             "recall, f1, auc, pr_auc, top_k(K), confusion_matrix, all or "
                             "none; accuracy and loss are always reported)", text, name);
    }
    return 0;
}

int
za_eval_metrics_any (const za_eval_metrics_spec_t *spec, int own_count)
{
    return spec->precision || spec->recall || spec->f1 || spec->auc || spec->pr_auc
        || spec->confusion_matrix || spec->top_k_count > 0 || own_count > 0;
}

int
za_eval_metrics_reports (const za_eval_metrics_spec_t *spec, const za_metric_fn_t *own,
                         int own_count, const char *name)
{
    if (!strcmp (name, "loss") || !strcmp (name, "accuracy"))
        return 1;
    for (int m = 0; m < 5; m++)
        if (s_wanted (spec, m) && !strcmp (name, s_metric_names [m]))
            return 1;
    for (int t = 0; t < spec->top_k_count; t++) {
        char top [NAME_MAX_LEN];
        snprintf (top, sizeof top, "top_%d_accuracy", spec->top_k [t]);
        if (!strcmp (name, top))
            return 1;
    }
    for (int i = 0; own && i < own_count; i++)
        if (!strcmp (name, own [i].name))
            return 1;
    return 0;
}

int
za_eval_metrics_check_own (const za_metric_fn_t *own, int own_count)
{
    static const char *taken [] = {"loss", "accuracy", "precision", "recall", "f1", "auc",
                                   "pr_auc", "global_step", "checkpoint", "examples",
                                   "seconds", "wall_time", "checkpoint_age_secs",
                                   "confusion_matrix"};
    if (own_count < 0 || (own_count > 0 && !own) || own_count > ZA_EVAL_OWN_MAX)
        return za_error ("model_fn metrics: 0 to %d of them (got %d)", ZA_EVAL_OWN_MAX,
                         own_count);
    for (int i = 0; i < own_count; i++) {
        const char *name = own [i].name;
        if (!name || !*name || strlen (name) >= sizeof ((za_eval_scalar_t *) 0)->name
            || !own [i].update || !own [i].result)
            return za_error ("model_fn metric %d: needs a name (1 to %zu characters), "
                             "update and result", i,
                             sizeof ((za_eval_scalar_t *) 0)->name - 1);
        int clash = !strncmp (name, "top_", 4) || strstr (name, "_per_class") != NULL;
        for (size_t t = 0; t < sizeof taken / sizeof taken [0]; t++)
            clash |= !strcmp (name, taken [t]);
        for (int j = 0; j < i; j++)
            clash |= !strcmp (name, own [j].name);
        if (clash)
            return za_error ("model_fn metric '%s': the name is taken (by zactor's own, or "
                             "another of the model_fn's)", name);
    }
    return 0;
}

za_eval_metrics_t *
za_eval_metrics_new (const za_eval_metrics_spec_t *spec, const za_metric_fn_t *own,
                     int own_count)
{
    za_eval_metrics_t *self = (za_eval_metrics_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->spec = *spec;
    self->own = own;
    self->own_count = own? own_count: 0;
    if (self->own_count > 0) {
        self->own_states = (void **) calloc ((size_t) self->own_count, sizeof (void *));
        if (!self->own_states) {
            za_eval_metrics_destroy (&self);
            return NULL;
        }
        for (int i = 0; i < self->own_count; i++)
            if (!(self->own_states [i] = calloc (1, own [i].state_size + 1))) {
                za_eval_metrics_destroy (&self);
                return NULL;
            }
    }
    return self;
}

void
za_eval_metrics_destroy (za_eval_metrics_t **self_p)
{
    za_eval_metrics_t *self = *self_p;
    if (!self)
        return;
    free (self->counts);
    free (self->confusion);
    free (self->probs);
    free (self->labels);
    for (int i = 0; self->own_states && i < self->own_count; i++)
        free (self->own_states [i]);
    free (self->own_states);
    for (int m = 0; m < 5; m++)
        free (self->per_class [m]);
    free (self);
    *self_p = NULL;
}

static int
s_keeps_scores (const za_eval_metrics_t *self)
{
    return self->spec.auc || self->spec.pr_auc;
}

int
za_eval_metrics_update (za_eval_metrics_t *self, const float *logits, const int32_t *labels,
                        int n, int n_classes)
{
    if (n <= 0)
        return 0;
    if (self->n_classes == 0) {
        if (n_classes < 1)
            return za_error ("evaluation metrics: the model gives %d classes", n_classes);
        if (self->spec.confusion_matrix && n_classes > ZA_EVAL_CONFUSION_MAX)
            return za_error ("evaluation metrics: a confusion matrix of %d classes (at most "
                             "%d: leave confusion_matrix out)", n_classes,
                             ZA_EVAL_CONFUSION_MAX);
        self->counts = (int64_t *) calloc (3 * (size_t) n_classes, sizeof (int64_t));
        if (self->spec.confusion_matrix)
            self->confusion = (int64_t *) calloc ((size_t) n_classes * (size_t) n_classes,
                                                  sizeof (int64_t));
        if (!self->counts || (self->spec.confusion_matrix && !self->confusion))
            return za_error ("evaluation metrics: out of memory for %d classes", n_classes);
        self->n_classes = n_classes;
    }
    if (n_classes != self->n_classes)
        return za_error ("evaluation metrics: %d classes, then %d", self->n_classes, n_classes);
    for (int i = 0; i < n; i++)
        if (labels [i] < 0 || labels [i] >= n_classes)
            return za_error ("evaluation metrics: label %d of a model with %d classes",
                             (int) labels [i], n_classes);
    if (s_keeps_scores (self) && self->examples + n > self->capacity) {
        int64_t capacity = self->capacity? self->capacity: 1024;
        while (capacity < self->examples + n)
            capacity *= 2;
        float *probs = (float *) realloc (self->probs, (size_t) capacity * (size_t) n_classes
                                                       * sizeof (float));
        if (probs)
            self->probs = probs;
        int32_t *kept = (int32_t *) realloc (self->labels, (size_t) capacity * sizeof (int32_t));
        if (kept)
            self->labels = kept;
        if (!probs || !kept)
            return za_error ("evaluation metrics: out of memory for %lld examples' scores",
                             (long long) capacity);
        self->capacity = capacity;
    }
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t) i * n_classes;
        int label = labels [i], best = 0;
        for (int k = 1; k < n_classes; k++)
            if (z [k] > z [best])
                best = k;
        self->counts [best] += best == label;
        self->counts [n_classes + best]++;
        self->counts [2 * n_classes + label]++;
        if (self->confusion)
            self->confusion [(size_t) label * n_classes + best]++;
        //  TensorFlow's in_top_k: classes tied with the label's logit count
        //  for it, so the label is in the top k when fewer than k beat it;
        //  a label's logit that is not finite is in none.
        int above = 0;
        for (int k = 0; k < n_classes; k++)
            above += z [k] > z [label];
        for (int t = 0; t < self->spec.top_k_count; t++)
            self->top_k_hits [t] += isfinite (z [label]) && above < self->spec.top_k [t];
        if (s_keeps_scores (self)) {
            za_softmax (z, n_classes, self->probs + (size_t) (self->examples + i) * n_classes);
            self->labels [self->examples + i] = label;
        }
    }
    for (int i = 0; i < self->own_count; i++)
        self->own [i].update (self->own_states [i], logits, labels, n, n_classes);
    self->examples += n;
    self->finished = 0;
    return 0;
}

// ---------------------------------------------------------------------------
//  Results

typedef struct {
    float score;
    int positive;
} s_scored_t;

static int
s_by_score (const void *a, const void *b)
{
    float x = ((const s_scored_t *) a)->score, y = ((const s_scored_t *) b)->score;
    return (x > y) - (x < y);
}

//  ROC-AUC and average precision of class c against the rest; NaN when the
//  class never occurs or occurs in every example, or a score is NaN (a
//  logit not finite). scored: examples entries.
static void
s_auc_of (za_eval_metrics_t *self, int c, s_scored_t *scored, double *auc, double *ap)
{
    int64_t n = self->examples, positives = 0;
    int unordered = 0;
    for (int64_t i = 0; i < n; i++) {
        scored [i].score = self->probs [(size_t) i * self->n_classes + c];
        scored [i].positive = self->labels [i] == c;
        positives += scored [i].positive;
        unordered |= isnan (scored [i].score);
    }
    *auc = *ap = NAN;
    if (positives == 0 || unordered)
        return;
    qsort (scored, (size_t) n, sizeof *scored, s_by_score);
    //  ROC-AUC (Mann-Whitney): the positives' ranks, ties at their mean rank.
    //  Average precision: from the highest score down, a group of tied
    //  scores is one threshold: sum of (recall step) x (precision there).
    double rank_sum = 0, ap_sum = 0;
    int64_t true_above = 0, all_above = 0;
    for (int64_t hi = n; hi > 0; ) {
        int64_t lo = hi - 1;
        while (lo > 0 && scored [lo - 1].score == scored [hi - 1].score)
            lo--;
        int64_t group_pos = 0;
        for (int64_t i = lo; i < hi; i++)
            group_pos += scored [i].positive;
        rank_sum += (double) group_pos * ((double) (lo + 1) + (double) hi) / 2;
        true_above += group_pos;
        all_above += hi - lo;
        ap_sum += (double) group_pos / (double) positives
                  * ((double) true_above / (double) all_above);
        hi = lo;
    }
    *ap = ap_sum;
    int64_t negatives = n - positives;
    if (negatives > 0)
        *auc = (rank_sum - (double) positives * ((double) positives + 1) / 2)
               / ((double) positives * (double) negatives);
}

static int
s_finish (za_eval_metrics_t *self)
{
    if (self->finished)
        return 0;
    int C = self->n_classes;
    if (C == 0)
        return za_error ("evaluation metrics: no example");
    for (int m = 0; m < 5; m++) {
        free (self->per_class [m]);
        if (!(self->per_class [m] = (double *) malloc ((size_t) C * sizeof (double))))
            return za_error ("evaluation metrics: out of memory");
    }
    for (int c = 0; c < C; c++) {
        int64_t tp = self->counts [c], predicted = self->counts [C + c];
        int64_t actual = self->counts [2 * C + c];
        double p = predicted? (double) tp / (double) predicted: 0;
        double r = actual? (double) tp / (double) actual: 0;
        self->per_class [M_PRECISION][c] = p;
        self->per_class [M_RECALL][c] = r;
        self->per_class [M_F1][c] = p + r > 0? 2 * p * r / (p + r): 0;
        self->per_class [M_AUC][c] = self->per_class [M_PR_AUC][c] = NAN;
    }
    if (s_keeps_scores (self)) {
        s_scored_t *scored = (s_scored_t *) malloc ((size_t) self->examples * sizeof *scored);
        if (!scored)
            return za_error ("evaluation metrics: out of memory ranking %lld examples",
                             (long long) self->examples);
        for (int c = 0; c < C; c++)
            s_auc_of (self, c, scored, &self->per_class [M_AUC][c],
                      &self->per_class [M_PR_AUC][c]);
        free (scored);
    }
    self->finished = 1;
    return 0;
}

//  The macro mean of a metric: precision, recall and F1 over the classes
//  that occur or are predicted; the AUCs over the classes where defined.
static double
s_macro (const za_eval_metrics_t *self, int metric)
{
    int C = self->n_classes, count = 0;
    double sum = 0;
    for (int c = 0; c < C; c++) {
        double value = self->per_class [metric][c];
        if (metric == M_AUC || metric == M_PR_AUC) {
            if (isnan (value))
                continue;
        }
        else
        if (self->counts [C + c] + self->counts [2 * C + c] == 0)
            continue;
        sum += value;
        count++;
    }
    return count? sum / count: NAN;
}

int
za_eval_metrics_scalars (za_eval_metrics_t *self, za_eval_scalar_t *out, int max)
{
    if (s_finish (self))
        return 0;
    int count = 0;
    for (int m = 0; m < 5 && count < max; m++)
        if (s_wanted (&self->spec, m)) {
            snprintf (out [count].name, sizeof out [count].name, "%s", s_metric_names [m]);
            out [count++].value = s_macro (self, m);
        }
    for (int t = 0; t < self->spec.top_k_count && count < max; t++) {
        snprintf (out [count].name, sizeof out [count].name, "top_%d_accuracy",
                  self->spec.top_k [t]);
        out [count++].value = (double) self->top_k_hits [t] / (double) self->examples;
    }
    for (int i = 0; i < self->own_count && count < max; i++) {
        snprintf (out [count].name, sizeof out [count].name, "%s", self->own [i].name);
        out [count++].value = self->own [i].result (self->own_states [i]);
    }
    return count;
}

static json_t *
s_number (double value)
{
    return isfinite (value)? json_real (value): json_null ();
}

json_t *
za_eval_metrics_json (za_eval_metrics_t *self)
{
    za_eval_scalar_t scalars [ZA_EVAL_SCALARS_MAX];
    int count = za_eval_metrics_scalars (self, scalars, ZA_EVAL_SCALARS_MAX);
    json_t *json = json_object ();
    if (!json || !self->finished)
        return json;
    for (int i = 0; i < count; i++)
        json_object_set_new (json, scalars [i].name, s_number (scalars [i].value));
    int C = self->n_classes;
    for (int m = 0; m < 5; m++) {
        if (!s_wanted (&self->spec, m))
            continue;
        json_t *array = json_array ();
        for (int c = 0; c < C; c++)
            json_array_append_new (array, s_number (self->per_class [m][c]));
        char key [64];
        snprintf (key, sizeof key, "%s_per_class", s_metric_names [m]);
        json_object_set_new (json, key, array);
    }
    if (self->confusion) {
        json_t *rows = json_array ();
        for (int r = 0; r < C; r++) {
            json_t *row = json_array ();
            for (int c = 0; c < C; c++)
                json_array_append_new (row, json_integer (self->confusion [(size_t) r * C + c]));
            json_array_append_new (rows, row);
        }
        json_object_set_new (json, "confusion_matrix", rows);
    }
    return json;
}

int
za_eval_metrics_confusion_png (za_eval_metrics_t *self, uint8_t **png, size_t *size,
                               int *width, int *height)
{
    *png = NULL;
    *size = 0;
    int C = self->n_classes;
    if (!self->confusion || C == 0)
        return za_error ("evaluation metrics: no confusion matrix");
    int cell = 256 / C < 1? 1: 256 / C > 32? 32: 256 / C;
    int side = C * cell;
    uint8_t *pixels = (uint8_t *) malloc ((size_t) side * (size_t) side * 3);
    if (!pixels)
        return za_error ("evaluation metrics: out of memory for the confusion image");
    for (int r = 0; r < C; r++) {
        int64_t total = 0;
        for (int c = 0; c < C; c++)
            total += self->confusion [(size_t) r * C + c];
        for (int c = 0; c < C; c++) {
            double share = total? (double) self->confusion [(size_t) r * C + c] / (double) total: 0;
            uint8_t rgb [3] = {(uint8_t) (247 - 239 * share), (uint8_t) (251 - 203 * share),
                               (uint8_t) (255 - 148 * share)};
            for (int y = r * cell; y < (r + 1) * cell; y++)
                for (int x = c * cell; x < (c + 1) * cell; x++)
                    memcpy (pixels + ((size_t) y * side + x) * 3, rgb, 3);
        }
    }
    spng_ctx *ctx = spng_ctx_new (SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {.width = (uint32_t) side, .height = (uint32_t) side,
                             .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    int error = !ctx? SPNG_EMEM
              : spng_set_option (ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!error)
        error = spng_set_ihdr (ctx, &ihdr);
    if (!error)
        error = spng_encode_image (ctx, pixels, (size_t) side * side * 3, SPNG_FMT_PNG,
                                   SPNG_ENCODE_FINALIZE);
    if (!error)
        *png = (uint8_t *) spng_get_png_buffer (ctx, size, &error);
    spng_ctx_free (ctx);
    free (pixels);
    if (error || !*png)
        return za_error ("evaluation metrics: cannot encode the confusion image: %s",
                         spng_strerror (error));
    *width = *height = side;
    return 0;
}
