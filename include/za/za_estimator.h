/*  za_estimator.h: TensorFlow's Estimator in C. train / evaluate / predict
    over a model_fn and an input_fn, with a RunConfig (model_dir, checkpoint
    policy, retention, logging cadence, seed, threads) and session hooks.
    Training restarts from the newest intact checkpoint in model_dir.      */
#ifndef ZA_ESTIMATOR_H_INCLUDED
#define ZA_ESTIMATOR_H_INCLUDED

#include <stdint.h>

#include "za/za_dataset.h"
#include "za/za_model.h"
#include "za/za_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

//  RunConfig. Defaults follow TensorFlow's RunConfig.
typedef struct {
    const char *model_dir;          //  required for train / evaluate / predict
    int64_t save_checkpoints_steps; //  > 0: every N steps (then secs is ignored)
    double save_checkpoints_secs;   //  > 0: every N seconds; default 600
    int keep_checkpoint_max;        //  5; <= 0 keeps all
    int64_t log_step_count_steps;   //  100: a log line with step/sec, ex/sec
    int64_t save_summary_steps;     //  100: a metrics.jsonl line in model_dir
    uint64_t seed;                  //  initialisation and dropout
    int threads;                    //  worker threads a batch is split over (each
                                    //  runs single-threaded OpenBLAS); 0: all
                                    //  online cores; at most 64
    int progress;                   //  -1: a progress bar when stderr is a
                                    //  terminal; 0: log lines only; 1: bar
} za_run_config_t;

za_run_config_t za_run_config_default (void);

//  What a hook sees around each step.
typedef struct {
    int64_t global_step;            //  after the step (after_run) or before it
    int64_t max_steps;              //  of this train call
    double loss;                    //  mean loss of this step's batch (after_run)
    int batch_size;
    double elapsed_secs;            //  since this train call began
} za_run_context_t;

//  A session hook (tf.train.SessionRunHook). Any callback may be NULL.
//  after_run returns non-zero to ask training to stop after this step.
typedef struct {
    void *arg;
    void (*begin) (void *arg, int64_t global_step);
    void (*before_run) (void *arg, const za_run_context_t *context);
    int (*after_run) (void *arg, const za_run_context_t *context);
    void (*end) (void *arg, const za_run_context_t *context);
} za_hook_t;

//  The built-in hook, TensorFlow's StepCounterHook: every `every_steps` steps
//  a log line "step S/MAX  loss L  global_step/sec R  examples/sec E  ETA T";
//  with `bar`, one progress line redrawn in place instead (for a terminal).
//  train installs one ahead of the caller's hooks from RunConfig
//  (log_step_count_steps, progress); add another for other settings.
typedef struct {
    int64_t every_steps;
    int bar;
    int64_t start_step, log_step;   //  (private from here on)
    double start_time, log_time, last_draw;
    int64_t examples_since_log;
    int drew;
} za_step_counter_t;

//  Returns a hook whose state is *state (which must outlive the training).
za_hook_t za_step_counter_hook (za_step_counter_t *state, int64_t every_steps, int bar);

//  An input_fn: builds the batch iterator for `mode`. The estimator destroys
//  the iterator when done. Return NULL (with an error) on failure.
typedef za_input_t *(*za_input_fn_t) (void *arg, za_mode_t mode);

typedef struct {
    int64_t global_step;            //  of the checkpoint evaluated
    double loss;                    //  mean over the examples
    double accuracy;
    int64_t examples;
    double seconds;
} za_eval_result_t;

//  Called for each predicted example; return non-zero to stop.
typedef int (*za_predict_fn_t) (void *arg, int64_t index, const float *logits,
                                int n_classes, int class_id);

typedef struct _za_estimator_t za_estimator_t;

//  Creates an estimator for model_fn (with its params, e.g. a
//  za_stack_spec_t * for the layer stack, which must outlive the estimator)
//  on inputs of shape `input`. Variables are initialised from config->seed;
//  nothing is read from model_dir until train / evaluate / predict.
//  Returns NULL with an error on a bad model or config.
za_estimator_t *za_estimator_new (const za_model_fn_t *model_fn, const void *params,
                                  za_input_shape_t input, const za_optim_config_t *optim,
                                  const za_run_config_t *config);
void za_estimator_destroy (za_estimator_t **self_p);

//  Adds a hook (copied) to every later train call. At most 8.
int za_estimator_add_hook (za_estimator_t *self, const za_hook_t *hook);

//  Trains until global_step reaches max_steps or the input ends. Starts from
//  the newest intact checkpoint in model_dir (a corrupt one is reported and
//  the one before it used); a checkpoint of another model is an error.
//  Saves checkpoints on the RunConfig policy and always at the last step.
//  Returns 0, or -1 with an error.
int za_estimator_train (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                        int64_t max_steps);

//  Evaluates the newest checkpoint in model_dir on `steps` batches (<= 0:
//  until the input ends), appends a line to model_dir/eval/metrics.jsonl and
//  fills *result. Returns 0, or -1 with an error (no checkpoint, bad input).
int za_estimator_evaluate (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                           int64_t steps, za_eval_result_t *result);

//  Evaluates the checkpoint file at `path` (verified, never a half-written
//  one) like za_estimator_evaluate, appending the line (with its file name)
//  to model_dir/<subdir>/metrics.jsonl. Returns 0, or -1 with an error (a
//  missing, corrupt or other-model checkpoint changes nothing).
int za_estimator_evaluate_checkpoint (za_estimator_t *self, const char *path,
                                      za_input_fn_t input_fn, void *arg, int64_t steps,
                                      const char *subdir, za_eval_result_t *result);

//  Runs PREDICT over the input with the newest checkpoint, calling fn per
//  example. Returns the number of examples predicted, or -1 with an error.
int64_t za_estimator_predict (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                              za_predict_fn_t fn, void *fn_arg);

int64_t za_estimator_global_step (const za_estimator_t *self);
//  The variable table and the current values (host memory).
const za_vars_t *za_estimator_vars (const za_estimator_t *self);
const float *za_estimator_values (const za_estimator_t *self);

// ---------------------------------------------------------------------------
//  For the distributed roles (a worker computes gradients here and the ps
//  applies them): the Estimator's threads, micro-batches and checkpoints
//  without its training loop.

//  Computes the gradient of the batch's mean loss at the current values into
//  the gradient block (za_estimator_gradients) without applying it.
//  *loss_mean gets the batch's mean loss. Returns 0 or -1 with an error.
int za_estimator_compute_gradients (za_estimator_t *self, const za_batch_t *batch,
                                    double *loss_mean);
//  The variable block for writing (values received from the ps), the
//  gradient block (same layout) and the optimizer's slot blocks (NULL past
//  the optimizer's slot count).
float *za_estimator_values_mut (za_estimator_t *self);
const float *za_estimator_gradients (const za_estimator_t *self);
float *za_estimator_slot (za_estimator_t *self, int slot);
const za_optim_config_t *za_estimator_optim (const za_estimator_t *self);
void za_estimator_set_global_step (za_estimator_t *self, int64_t step);
//  Writes a checkpoint of the current values, slots and global step to
//  model_dir (atomic, with retention). Returns 0 or -1 with an error.
int za_estimator_save (za_estimator_t *self);
//  Loads the newest intact checkpoint of model_dir into values, slots and
//  global step; *restored says whether there was one. -1 with an error when
//  they are all corrupt or belong to another model.
int za_estimator_restore (za_estimator_t *self, int *restored);
//  Appends one JSON line to model_dir[/subdir]/metrics.jsonl.
int za_estimator_append_metrics (za_estimator_t *self, const char *subdir,
                                 const char *json_line);

#ifdef __cplusplus
}
#endif
#endif
