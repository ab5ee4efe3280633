/*  za_early_stop.h: the best checkpoint by a metric of the user's choice
    (--best-metric, BestExporter's compare_fn, Keras ModelCheckpoint's
    monitor and mode) and early stopping (--stop-if-no-improvement,
    tf.estimator's stop_if_no_increase_hook / stop_if_no_decrease_hook).

    The evaluator decides: after each evaluation it knows whether METRIC has
    improved within the last STEPS global steps. When it has not, it writes
    MODEL_DIR/stop_training.json, the request. The chief looks for the file
    every quarter second while it trains; seeing it, it ends training at its next
    step as at max_steps (the final checkpoint, the ps stopped, every
    all-reduce rank stopped at the same step) and writes the step it ended at
    into the file. The evaluators evaluate that checkpoint and exit 0. A
    restarted chief that finds the file ends at once: delete it to train on.
    Through the model dir, so it works with a broker or without one, as
    TensorFlow's multi-worker early stopping does.                        */
#ifndef ZA_EARLY_STOP_H_INCLUDED
#define ZA_EARLY_STOP_H_INCLUDED

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_EARLY_STOP_FILE "stop_training.json"
//  How often the chief looks for the request.
#define ZA_EARLY_STOP_CHECK_SECS 0.25

//  A metric and which way is better.
typedef struct {
    char name [48];                 //  "loss", "accuracy", "auc", "top_5_accuracy", ...
    int maximize;                   //  1: higher is better
} za_metric_goal_t;

//  "NAME" or "NAME,max" or "NAME,min": without a direction, names ending
//  in "loss" are better lower and every other higher. 0, or -1 with an
//  error that begins with `option`.
int za_metric_goal_parse (const char *option, const char *text, za_metric_goal_t *goal);

//  1 when value is better than best (any finite value beats a NaN best; a
//  value not finite beats nothing).
int za_metric_goal_better (const za_metric_goal_t *goal, double value, double best);

//  The rule and where it stands.
typedef struct {
    za_metric_goal_t goal;
    int64_t steps;                  //  stop when no better value came for this many steps
    double best;                    //  NaN: no evaluation yet
    int64_t best_step;
} za_early_stop_t;

//  "METRIC,STEPS" or "METRIC,STEPS,max|min". 0, or -1 with an error.
int za_early_stop_parse (const char *text, za_early_stop_t *self);

//  Adds the evaluation of `step` (in step order, as TensorFlow's hook
//  reads them). Returns 1 when step - best_step >= steps: time to stop.
int za_early_stop_add (za_early_stop_t *self, int64_t step, double value);

//  The evaluator: writes the request (step: the evaluation that decided),
//  unless there is one already (another evaluator's, or one answered): the
//  file is made whole and linked into place, never over another. 0, or -1
//  with an error.
int za_early_stop_request (const char *model_dir, const za_early_stop_t *self, int64_t step);

//  1 when model_dir holds a request (answered or not), else 0.
int za_early_stop_requested (const char *model_dir);

//  The chief, after its final checkpoint: the step training ended at.
int za_early_stop_confirm (const char *model_dir, int64_t final_step);

//  The chief at the end of training with early stopping on, stopped early
//  or at max_steps: a request in model_dir (one that came too late, too) is
//  answered with the step training ended at, so every evaluator ends. 0 (also
//  when there is none), or -1 with an error.
int za_early_stop_end (const char *model_dir, int64_t final_step);

//  0 with the step training ended at when the chief has answered a
//  request; -1 when there is none or it is unanswered.
int za_early_stop_final_step (const char *model_dir, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif
