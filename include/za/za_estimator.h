/*  za_estimator.h: TensorFlow's Estimator in C. train / evaluate / predict
    over a model_fn and an input_fn, with a RunConfig (model_dir, checkpoint
    policy, retention, logging cadence, seed, threads) and session hooks.
    Training restarts from the newest intact checkpoint in model_dir.      */
#ifndef ZA_ESTIMATOR_H_INCLUDED
#define ZA_ESTIMATOR_H_INCLUDED

#include <stdint.h>

#include "za/za_input.h"
#include "za/za_hooks.h"
#include "za/za_model.h"
#include "za/za_optim.h"
#include "za/za_replica.h"

#ifdef __cplusplus
extern "C" {
#endif

//  RunConfig. Defaults follow TensorFlow's RunConfig.
//  RunConfig's defaults (TensorFlow's), written once: the option table's
//  defaults are made from these.
#define ZA_RUN_SAVE_CHECKPOINTS_SECS 600
#define ZA_RUN_KEEP_CHECKPOINT_MAX 5
#define ZA_RUN_LOG_STEP_COUNT_STEPS 100
#define ZA_RUN_SAVE_SUMMARY_STEPS 100
#define ZA_RUN_SEED 42

//  The longest evaluation folder name, "eval_<name>" (za_eval_subdir).
#define ZA_EVAL_SUBDIR_MAX 300

typedef struct {
    const char *model_dir;          //  required for train / evaluate / predict
    int64_t save_checkpoints_steps; //  > 0: every N steps (then secs is ignored)
    double save_checkpoints_secs;   //  > 0: every N seconds; default 600
    int64_t keep_checkpoint_max;    //  5; <= 0 keeps all
    int64_t log_step_count_steps;   //  100: a log line with step/sec, ex/sec
    int64_t save_summary_steps;     //  100: a metrics.jsonl line in model_dir
    uint64_t seed;                  //  initialisation and dropout
    int64_t threads;                //  worker threads a batch is split over (each
                                    //  runs single-threaded OpenBLAS); 0: all
                                    //  online cores; at most 64
    za_device_t device;             //  where it computes (zero: the CPU)
    za_policy_t precision;          //  --precision (za_replica.h); zero: fp32
    float initial_loss_scale;       //  mixed_float16 (za_replica.h); 0: 32768
    int64_t replicas_per_device;    //  on a GPU: replicas on each (0 means 1)
    int progress;                   //  -1: a progress bar when stderr is a
                                    //  terminal; 0: log lines only; 1: bar
    za_warm_start_t warm_start;     //  WarmStartSettings: from NULL, none
    const char *eval_metrics;       //  --eval-metrics (za_eval_metrics.h): what an
                                    //  evaluation reports beyond loss and accuracy
    int early_stopping;             //  1: the chief (or one process) ends training
                                    //  when an evaluator asks (za_early_stop.h)
} za_run_config_t;

za_run_config_t za_run_config_default (void);

//  A replica's config as a RunConfig sets it (threads, device, replicas per
//  device, precision, initial loss scale, warm start: run must outlive the
//  replica), for model_fn's model of `input`. The caller adds what its role
//  decides: train, optim, replica_index. The one place the estimator, a
//  worker and an all-reduce worker make theirs.
za_replica_config_t za_run_config_replica (const za_run_config_t *run,
                                           const za_model_fn_t *model_fn, const void *params,
                                           za_input_shape_t input);

//  What an input_fn is asked for (TensorFlow's InputContext, and a little
//  more): the mode, this task's shard of the training data, and the seed
//  and batch size the run wants. An input_fn that ignores it still works in
//  one process; in a cluster, a worker must read its own shard.
typedef struct {
    za_mode_t mode;
    int num_shards;                 //  TRAIN: how many tasks read the training
                                    //  data (num_input_pipelines); 1 in one process
    int shard_index;                //  TRAIN: this task's (input_pipeline_id)
    uint64_t seed;                  //  shuffle seed: RunConfig's (ps-async: with
                                    //  this task's index mixed in)
    int64_t global_step;            //  TRAIN: the step training starts from
    int64_t steps_done;             //  TRAIN: the batches (global batches with
                                    //  split_batches) the stream of `seed` already
                                    //  gave before this run: start after them, so
                                    //  that a resumed run reads on where the stopped
                                    //  one was (za_input_config_t.skip). 0: from the
                                    //  start
    int batch_size;                 //  what the run asks for; 0: the input_fn decides
    const char *data_dir;           //  where the run's data is; NULL: the input_fn knows
    int split_batches;              //  TRAIN, synchronous strategies: 1 asks for
                                    //  TensorFlow's auto-shard by data: read the whole
                                    //  data in the order of `seed` (the same on every
                                    //  task) in global batches of batch_size x
                                    //  num_shards and keep slice shard_index of each
                                    //  (za_input_config_t.replicas), so the replicas'
                                    //  step is one process's step at the global batch.
                                    //  An input_fn may shard as above instead.
    int64_t examples_done;          //  TRAIN, split_batches: when > 0, the examples of
                                    //  the stream already read, instead of steps_done
                                    //  x batch_size x num_shards (an elastic job's
                                    //  global batch changed size on the way)
    int global_batch;               //  TRAIN, split_batches: 0, batch_size x
                                    //  num_shards; else each global batch has this
                                    //  many examples, shared as evenly as may be
                                    //  (za_input_config_t.global_batch); batch_size
                                    //  is then the largest share
} za_input_context_t;

//  An input_fn: builds the batch iterator for context->mode. The estimator
//  destroys the iterator when done. Return NULL (with an error) on failure.
typedef za_input_t *(*za_input_fn_t) (void *arg, const za_input_context_t *context);

typedef struct {
    int64_t global_step;            //  of the checkpoint evaluated
    double loss;                    //  mean over the examples
    double accuracy;
    int64_t examples;
    double seconds;
    double checkpoint_age_secs;     //  how long after its checkpoint was written
                                    //  the evaluation started (-1: not known)
    //  --eval-metrics' macro values and the model_fn's own, by name
    za_eval_scalar_t scalars [ZA_EVAL_SCALARS_MAX];
    int scalar_count;
    uint8_t *confusion_png;         //  confusion_matrix: the image (za_eval_result_free)
    size_t confusion_png_size;
    int confusion_width, confusion_height;
    //  Set whether or not the evaluation succeeded: the files and records
    //  the evaluation set lists (0: data held in memory), those of them that
    //  could not be decoded, and 1 when more failed than the input's
    //  max_bad allows (the evaluation failed on its data).
    int64_t images, bad_images;
    int input_failed;
    //  za_estimator_evaluate_checkpoint: 1 when the checkpoint is intact but
    //  not of this model (another model, other shapes): every one would be.
    int model_differs;
    //  za_estimator_evaluate_checkpoint: 1 when the checkpoint could not be
    //  loaded (gone, corrupt): another one may be.
    int unreadable;
} za_eval_result_t;

//  Frees what a result holds (the confusion image).
void za_eval_result_free (za_eval_result_t *result);

//  The value of `name` in a result: "loss", "accuracy" or one of its
//  scalars ("auc", "top_5_accuracy", ...). 0, or -1 when it has none.
int za_eval_result_value (const za_eval_result_t *result, const char *name, double *value);

typedef struct _za_estimator_t za_estimator_t;

//  Creates an estimator for model_fn (with its params, e.g. a
//  za_stack_spec_t * for the layer stack, which must outlive the estimator)
//  on inputs of shape `input`. Variables are initialised from config->seed;
//  nothing is read from model_dir until train / evaluate / predict. optim
//  NULL makes an estimator for evaluate and predict only (no gradient or
//  slot blocks; train refuses). Returns NULL with an error on a bad model
//  or config.
za_estimator_t *za_estimator_new (const za_model_fn_t *model_fn, const void *params,
                                  za_input_shape_t input, const za_optim_config_t *optim,
                                  const za_run_config_t *config);
void za_estimator_destroy (za_estimator_t **self_p);

//  Adds a hook (copied) to every later train call. At most 8. The built-in
//  hooks (step counter, summary saver, checkpoint saver, za_hooks.h) run
//  first, then these in the order added.
int za_estimator_add_hook (za_estimator_t *self, const za_hook_t *hook);
//  Removes the hook added last (one that was for one train call).
void za_estimator_pop_hook (za_estimator_t *self);

//  Trains until global_step reaches max_steps or the input ends. Starts from
//  the newest intact checkpoint in model_dir (a corrupt one is reported and
//  the one before it used); a checkpoint of another model is an error.
//  Saves checkpoints on the RunConfig policy and always at the last step.
//  A NaN or infinite loss stops it, that step not saved (TensorFlow's
//  NanTensorHook: za_estimator_diverged). Returns 0, or -1 with an error.
int za_estimator_train (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                        int64_t max_steps);

//  1 when the last train stopped because the loss was NaN or infinite
//  (za_loss_check, za_hooks.h): its error says so; the step is not saved.
int za_estimator_diverged (const za_estimator_t *self);

//  Evaluates the newest checkpoint in model_dir on `steps` batches (<= 0:
//  until the input ends), appends a line to model_dir/eval/metrics.jsonl and
//  fills *result. Returns 0, or -1 with an error (no checkpoint, bad input).
int za_estimator_evaluate (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                           int64_t steps, za_eval_result_t *result);
//  The same into model_dir/eval_<eval_name> (Estimator.evaluate's name=;
//  NULL or "": model_dir/eval).
int za_estimator_evaluate_named (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                                 int64_t steps, const char *eval_name,
                                 za_eval_result_t *result);
//  An evaluation's folder in model_dir: "eval", or "eval_<eval_name>"
//  (at most ZA_EVAL_SUBDIR_MAX bytes with its NUL).
void za_eval_subdir (const char *eval_name, char *subdir, size_t size);

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
//  The same with the checkpoint at checkpoint_path (Estimator.predict's
//  checkpoint_path; NULL: the newest in model_dir).
int64_t za_estimator_predict_from (za_estimator_t *self, const char *checkpoint_path,
                                   za_input_fn_t input_fn, void *arg, za_predict_fn_t fn,
                                   void *fn_arg);

int64_t za_estimator_global_step (const za_estimator_t *self);
//  The variable table and the current values (host memory).
const za_vars_t *za_estimator_vars (const za_estimator_t *self);
const float *za_estimator_values (const za_estimator_t *self);

//  Sets the global step the next save writes (a value block filled by hand).
void za_estimator_set_global_step (za_estimator_t *self, int64_t step);
//  Writes a checkpoint of the current values, slots and global step to
//  model_dir (atomic, with retention). Returns 0 or -1 with an error.
int za_estimator_save (za_estimator_t *self);

#ifdef __cplusplus
}
#endif
#endif
