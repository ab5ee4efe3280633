/*  za_evaluator.h: the evaluator task of train_and_evaluate. It follows the
    checkpoints in model_dir (never live ps state): waits start_delay_secs,
    then evaluates the newest checkpoint it has not evaluated, at most once
    per throttle_secs (those in between are skipped), always evaluates the
    final one, and ends once it has evaluated a checkpoint with global_step
    >= max_steps. Replay mode evaluates every checkpoint in step order.
    It hears of a new checkpoint at once: from the chief through the broker
    (the trigger), or from the kernel (inotify on model_dir, for a chief on
    this host); looking at model_dir is the fallback, every poll_secs when
    neither can arrive, every second when one can.                          */
#ifndef ZA_EVALUATOR_H_INCLUDED
#define ZA_EVALUATOR_H_INCLUDED

#include <czmq.h>

#include "za/za_estimator.h"
#include "za/za_role.h"

#ifdef __cplusplus
extern "C" {
#endif

//  EvalSpec: what an evaluation is and when it runs, as the settings hold it
//  (--eval-name, --eval-steps, --start-delay-secs, --throttle-secs, --replay,
//  --eval-metrics, --best-metric, --stop-if-no-improvement).
typedef struct {
    const char *name;               //  results in model_dir/eval_<name>
                                    //  ("" or NULL: model_dir/eval)
    int64_t steps;                  //  batches per evaluation; <= 0: the whole set
    double start_delay_secs;        //  120
    double throttle_secs;           //  600
    int replay;                     //  evaluate every checkpoint once, in step order
    const char *eval_metrics;       //  NULL or an --eval-metrics text (za_eval_metrics.h)
    const char *best_metric;        //  what export_best compares (za_early_stop.h);
                                    //  NULL: accuracy
    const char *stop_if_no_improvement; //  NULL, or early stopping's rule: the
                                    //  evaluator asks the chief to stop (za_early_stop.h)
    int export_onnx;                //  1: the best export is also written as
                                    //  model.onnx (za_export.h), input.json beside it
} za_eval_spec_t;

typedef struct {
    const za_model_fn_t *model_fn;
    const void *params;
    za_input_shape_t input;
    const char *model_dir;
    za_eval_spec_t spec;
    const za_dataset_t *data;       //  what to evaluate on, in batches of batch_size;
    za_input_fn_t input_fn;         //  or (when set) what this gives in EVAL mode,
    void *input_arg;                //  asked for batches of batch_size
    int batch_size;                 //  500
    int64_t max_steps;              //  the training's: the end (<= 0: never ends)
    int export_best;                //  1: keep the best checkpoint in export/best
    int threads;                    //  0: all cores
    za_device_t device;             //  where it evaluates (zero: the CPU)
    za_policy_t precision;          //  --precision (za_replica.h); zero: fp32
    double poll_secs;               //  how often model_dir is looked at when
                                    //  nothing tells us of a new checkpoint (0.2)
    void *trigger;                  //  NULL, or a zsock_t / zactor_t whose
                                    //  "CHECKPOINT" STEP messages (the chief's,
                                    //  through the broker) wake us at once
    int watch_dir;                  //  1: inotify tells of files renamed into
                                    //  model_dir (a chief on this host); 0: not
    double idle_timeout_secs;       //  > 0: give up (exit 1) when no new
                                    //  checkpoint came for this long; 0: wait
    za_role_stats_t *stats;         //  NULL, or where progress is published (the
                                    //  newest evaluation's step and accuracy)
} za_evaluator_config_t;

//  EvalSpec's defaults (TensorFlow's), written once.
#define ZA_EVAL_START_DELAY_SECS 120
#define ZA_EVAL_THROTTLE_SECS 600

void za_evaluator_config_init (za_evaluator_config_t *config);

//  Runs the evaluator until its end (see above). `pipe` (may be NULL) is
//  watched for $TERM between evaluations. Each evaluation appends to
//  <eval dir>/metrics.jsonl: global_step, checkpoint, loss, accuracy,
//  examples, seconds. A checkpoint that is corrupt, of another model, or
//  deleted by retention before it was opened is reported and skipped. A
//  restarted evaluator skips what its metrics.jsonl says it evaluated.
//  Returns 0 at the end, ZA_EVALUATOR_IDLE on an idle timeout,
//  ZA_EVALUATOR_STOPPED on $TERM, ZA_EVALUATOR_BAD_DATA when more of the
//  evaluation set's images failed to decode than its input allows, -1 on
//  another error; *evaluations (may be NULL) counts the evaluations done.
#define ZA_EVALUATOR_IDLE 1
#define ZA_EVALUATOR_STOPPED 2
#define ZA_EVALUATOR_BAD_DATA 3
int za_evaluator_run (const za_evaluator_config_t *config, zsock_t *pipe, int *evaluations);

//  1 when an evaluator named eval_name (NULL or "": the default one) is
//  following model_dir now (za_evaluator_run holds a lock on
//  MODEL_DIR/eval[_NAME]/.evaluator while it follows, whatever host it runs
//  on, as long as the file system keeps flock locks: local ones and NFS
//  do), with *who (size bytes) saying "pid PID on HOST". A chief with no
//  evaluator in its cluster spec asks this before evaluating the final
//  checkpoint itself: an evaluator started apart already does.
int za_evaluator_following (const char *model_dir, const char *eval_name, char *who,
                            size_t size);
//  A chief's or one process's final evaluation (no evaluator's): the
//  checkpoint at `path`, evaluated into `result`, kept in the evaluation's
//  best folder (za_evaluator_best_dir) when it is better by
//  spec->best_metric than what best.json there says is kept (or nothing
//  is), with model.onnx beside it under spec->export_onnx; lines said start
//  with `who`. 0, or -1 with an error.
int za_evaluator_keep_best (const char *who, const char *model_dir,
                            const za_eval_spec_t *spec, za_input_shape_t input,
                            const char *path, const za_eval_result_t *result);
//  One evaluation's loss, accuracy, metrics and confusion image written as
//  TensorBoard events in MODEL_DIR/eval[_NAME] (a final evaluation's, where
//  no evaluator writes them). 0, or -1 with an error.
int za_evaluator_summarize (const char *model_dir, const char *eval_name,
                            const za_eval_result_t *result);
//  Where an evaluation named `name` (NULL or "": the training's own) keeps
//  its best checkpoint: MODEL_DIR/export/best, or MODEL_DIR/export/best_NAME,
//  so a replay on other data never overwrites the training's best.
void za_evaluator_best_dir (const char *model_dir, const char *name, char *dir, size_t size);

//  The same as a CZMQ actor (args: za_evaluator_config_t *, outliving it):
//  sends "DONE" RC STEP 0 EVALUATIONS on the pipe at the end, as the roles
//  do (za_role_wait reads it), then waits for $TERM.
void za_evaluator_actor (zsock_t *pipe, void *args);

//  tf.estimator.train_and_evaluate, the local case: trains `estimator` to
//  max_steps while an evaluator (eval, with its model_dir and max_steps set
//  from the estimator's) follows the checkpoints in another thread; returns
//  once the evaluator has evaluated the final checkpoint. An evaluator that
//  fails stops the training after the step it is at (saved); a preemption
//  or Ctrl-C stops the evaluator. *evaluations (may be NULL) counts them.
//  Returns 0, or -1 with an error from either side.
int za_train_and_evaluate (za_estimator_t *estimator, za_input_fn_t input_fn, void *arg,
                           int64_t max_steps, za_evaluator_config_t *eval, int *evaluations);

#ifdef __cplusplus
}
#endif
#endif
