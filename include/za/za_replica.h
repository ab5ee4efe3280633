/*  za_replica.h: one copy of a model and what it takes to run batches through
    it: a model state per thread (each planned for micro-batches, so that
    activations stay in cache), the value block, the gradient blocks and, when
    it applies updates itself, the optimizer's slots. How a batch is split
    over threads and micro-batches lives here alone. The Estimator, the
    worker and chief, and the evaluator each hold one: a worker whose ps
    applies the updates has no slots, an evaluator no gradients either.

    Checkpoints of a replica hold every variable, each slot
    ("<variable>/<slot>") and global_step, with metadata naming the model.  */
#ifndef ZA_REPLICA_H_INCLUDED
#define ZA_REPLICA_H_INCLUDED

#include <stdint.h>

#include "za/za_checkpoint.h"
#include "za/za_eval_metrics.h"
#include "za/za_input.h"
#include "za/za_model.h"
#include "za/za_warm_start.h"
#include "za/za_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Threads one replica may split a batch over.
#define ZA_REPLICA_MAX_THREADS 64

typedef struct {
    const za_model_fn_t *model_fn;
    const void *params;             //  the model_fn's (must outlive the replica)
    za_input_shape_t input;
    int threads;                    //  0: all online cores; at most 64. Each runs
                                    //  single-threaded OpenBLAS under it
    int train;                      //  1: gradient blocks (compute_gradients)
    const za_optim_config_t *optim; //  NULL: no optimizer, no slots
    int replica_index;              //  this replica's place among synchronous
                                    //  replicas of as many threads each: replica r
                                    //  numbers its threads from r x threads in the
                                    //  dropout masks' seeds, so N replicas draw the
                                    //  masks one process of N x threads threads draws
    za_device_t device;             //  where it computes (zero: the CPU)
    za_policy_t precision;          //  --precision (zero: fp32; za_backend_policy);
                                    //  the weights, slots and checkpoints are fp32
                                    //  in every one
    float initial_loss_scale;       //  mixed_float16: the loss scale to start
                                    //  from (0: 32768, Keras's 2^15)
    int replicas_per_device;        //  on a device: model copies per device, each
                                    //  with a slice of the batch (MirroredStrategy;
                                    //  0 means 1). `threads` is the CPU's alone
    const za_warm_start_t *warm_start;  //  NULL, or where a model dir with no
                                    //  checkpoint starts from (outlives the replica)
    int graphs;                     //  1: a training step on a GPU in fp32 is
                                    //  replayed as a CUDA graph where it can be (the
                                    //  Estimator's: measured there). ZA_CUDA_GRAPHS=0
                                    //  turns it off, =1 on for every replica and
                                    //  precision
} za_replica_config_t;

typedef struct _za_replica_t za_replica_t;

//  Builds the model states, the value block (initialised from `seed`), the
//  gradient and slot blocks the config asks for. Returns NULL with an error
//  (a model_fn without create / init_vars / model_fn / destroy, a bad input
//  shape, a learning rate <= 0, out of memory, a device that is not there
//  or a model_fn that cannot run on it).
//
//  On a device with memory of its own (a GPU) the blocks live there and
//  the host blocks below are their mirrors, copied only when asked for:
//  values, gradients and slots stay on the device from step to step, and
//  each step copies the batch up (and nothing else) unless a caller reads
//  or writes a block through the functions below.
za_replica_t *za_replica_new (const za_replica_config_t *config, uint64_t seed);
void za_replica_destroy (za_replica_t **self_p);

//  The variable table; the value block for reading and writing; the
//  gradient block (same layout; NULL without train: a strategy may combine
//  it across replicas between compute_gradients and apply); slot `slot` (NULL past
//  the optimizer's slot count, or without one); the optimizer (NULL without).
//  On a device each call brings the host block up to date (a copy down when
//  the device's is newer) and counts it as written: the next step copies it
//  up. Call again after each compute_gradients or apply; a pointer kept
//  from before holds the old numbers.
const za_vars_t *za_replica_vars (const za_replica_t *self);
float *za_replica_values (za_replica_t *self);
float *za_replica_gradients (za_replica_t *self);
float *za_replica_slot (za_replica_t *self, int slot);
const za_optim_config_t *za_replica_optim (const za_replica_t *self);
//  The optimizer's learning rate from now on (an elastic job's scale-lr:
//  the base rate times the trainers now over those at the start).
void za_replica_set_learning_rate (za_replica_t *self, float learning_rate);
//  The text that names the model in checkpoints (describe, else the name).
const char *za_replica_model_text (const za_replica_t *self);

//  Streams the gradient of each compute_gradients as it becomes final:
//  fn (arg, offset) says that the gradient block from `offset` to its end
//  holds its final values (the batch's mean), while backward may still be
//  writing below. Called from the compute threads, one call at a time,
//  offsets decreasing, the last one with 0 at the latest just before
//  compute_gradients returns 0 (after an error, maybe never). How early
//  depends on the model_fn (za_model_grads_final). NULL: none (the default).
void za_replica_on_gradients (za_replica_t *self, za_grads_final_fn *fn, void *arg);

//  On a device: `input`'s prefetch thread copies its batches up, cut as
//  this replica's threads cut them, while the batches before are computed
//  (za_input_to_device); the replica then reads them there instead of
//  copying each at the start of its step. Nothing on the CPU, for an input
//  without a prefetch thread, or with ZA_FEED=0. The input keeps no pointer
//  to the replica (only its back end's table and devices); a batch copied
//  for other devices or threads is copied again by the step.
//  za_replica_fed: the batches it took so. 0, or -1 with an error.
int za_replica_feed (za_replica_t *self, za_input_t *input);

//  On a device: its back end, and the batch's gradient where it is
//  (compute_gradients leaves it there, and the update reads it there, so a
//  caller may sum it with other processes' on the device: the back end's
//  group_sum), with the calling thread bound to that device. NULL on the
//  CPU.
const struct za_backend_t *za_replica_backend (const za_replica_t *self);
float *za_replica_device_gradients (za_replica_t *self);
//  The calling thread bound to the replica's first device (nothing on the
//  CPU). 0, or -1 with an error.
int za_replica_bind (za_replica_t *self);
int64_t za_replica_fed (const za_replica_t *self);
//  Steps of its threads replayed as recorded (a CUDA graph: config.graphs,
//  ZA_CUDA_GRAPHS, docs/gpus.md); 0 elsewhere.
int64_t za_replica_replayed (const za_replica_t *self);

//  Puts every slot back to its starting value.
void za_replica_reset_slots (za_replica_t *self);

//  On a device with one thread (a GPU, cpu-staged), `on` 1 lets a training
//  step end without waiting for its work: the steps queue on the device
//  while the host makes the next, and their losses add up there.
//  compute_gradients then says NaN for *loss_mean; za_replica_take_loss
//  waits for the work and says the mean loss of the examples since the
//  last take. A step's failure on the device shows at the take (or at the
//  next step that waits). Returns 1 when the steps defer from now, 0 where
//  they cannot (host memory, several threads, a listener of the gradient),
//  or `on` was 0 (the losses not taken yet are kept for the next take).
//  The device's sums are the calling thread's: one replica per thread
//  defers (the Estimator's).
int za_replica_defer_loss (za_replica_t *self, int on);
//  *loss_mean: the mean loss of the examples of the steps since the last
//  take (NaN after none), *steps: their count; the steps' work is done.
//  0, or -1 with the first error of that work (the sums start again).
int za_replica_take_loss (za_replica_t *self, double *loss_mean, int64_t *steps);

//  The gradient of the batch's mean loss at the current values, into the
//  gradient block, whatever the split over threads and micro-batches. `step`
//  seeds dropout. *loss_mean gets the batch's mean loss. Returns 0, or -1
//  with an error (a batch of another example size, a model_fn failure).
int za_replica_compute_gradients (za_replica_t *self, const za_batch_t *batch, int64_t step,
                                  double *loss_mean);

//  Records (za_trace.h) the forward and backward of the last
//  compute_gradients's micro-batches on its first thread, on the compute
//  row as parts of `step`, where the model_fn said where forward ends
//  (za_model_forward_done). A loop calls it with its step's own events.
void za_replica_trace_compute (const za_replica_t *self, int64_t step);

//  One optimizer update of the values with the gradient block; `step`
//  counts updates including this one (1 for the first). In mixed_float16 a
//  block with an infinity or a NaN is no update at all (za_replica_loss_scale_check).
void za_replica_apply (za_replica_t *self, int64_t step);

//  mixed_float16's dynamic loss scale, as Keras's LossScaleOptimizer: the
//  loss is multiplied by the scale before backward and the summed gradient
//  divided by it after. This check of the host gradient block says 1 when it
//  is finite (after 2000 such steps in a row the scale doubles) and 0 when
//  it holds an infinity or a NaN: the scale halves (not below 1), the step
//  counts as skipped and the block is zeroed (a ps worker then pushes no
//  gradient). 1 in other precisions. za_replica_apply checks the block it
//  applies alike. The scale doubles no further than 2^24. Checkpoints keep
//  it with its count of good steps (Keras's current_loss_scale and
//  good_steps), so training restored from one goes on with the scale it had.
int za_replica_loss_scale_check (za_replica_t *self);
//  The scale now (0 outside mixed_float16) and, in *skipped (may be NULL),
//  the steps skipped so far.
float za_replica_loss_scale (const za_replica_t *self, int64_t *skipped);
//  The scale and its good steps, to hand on (an all-reduce generation's
//  start: every rank takes its source's) and to take (nothing outside
//  mixed_float16; a scale not finite and >= 1 is not taken).
void za_replica_loss_scale_state (const za_replica_t *self, float *scale, int64_t *good_steps);
void za_replica_set_loss_scale (za_replica_t *self, float scale, int64_t good_steps);

//  Scales the gradient block (the variables that train) to a global norm of
//  at most clip (> 0; tf.clip_by_global_norm) where its newest copy is: on
//  a device without waiting. 0, or -1 with an error (the device not bound).
int za_replica_clip_gradients (za_replica_t *self, float clip);

//  The batch's summed loss and its correctly classified examples (EVAL);
//  every example's logits and label also go into metrics (NULL: none).
int za_replica_evaluate_batch (za_replica_t *self, const za_batch_t *batch, double *loss_sum,
                               int *correct, za_eval_metrics_t *metrics);

//  Called for each predicted example; return non-zero to stop.
typedef int (*za_predict_fn_t) (void *arg, int64_t index, const float *logits,
                                int n_classes, int class_id);

//  Predicts every example of the batch in order, each named by its index
//  in its data set (batch->indices), or, when the batch has none, numbered
//  from *index (which is advanced either way). Returns 0, 1 when fn asked to stop, or -1
//  with an error.
int za_replica_predict_batch (za_replica_t *self, const za_batch_t *batch, za_predict_fn_t fn,
                              void *arg, int64_t *index);

//  Writes the values, the slots and `step` as model_dir's checkpoint of
//  `step` (atomic, keeping keep_max; <= 0 keeps all); values that hold a NaN
//  or an infinity are refused (za_replica_diverged). Returns 0 or -1.
int za_replica_save (za_replica_t *self, const char *model_dir, int64_t step, int keep_max);

#define ZA_SAVE_RETRY_SECS 2

//  za_replica_save as training needs it on a full or failing disk (ENOSPC,
//  EIO, ...; za_checkpoint_disk_errno): nothing half-written is left and the
//  newest intact checkpoint and the index stay as they were; that is said
//  once, until a save succeeds again (also said). A periodic save (final 0)
//  then returns ZA_SAVE_SKIPPED (za_hooks.h) and training goes on to the next; the final
//  save, on a full disk (ENOSPC, EDQUOT), tries again every ZA_SAVE_RETRY_SECS
//  until it is written or the process is interrupted (-1); on a failing one
//  (EIO, EROFS, EFBIG) it fails. Returns 0 when written, -1 on another error.
int za_replica_save_through (za_replica_t *self, const char *model_dir, int64_t step,
                             int keep_max, int final);

//  1 when the last save refused the values for holding a NaN or an
//  infinity (a diverged model is not written: its error says so).
int za_replica_diverged (const za_replica_t *self);

//  Where each variable's optimizer slots started (ZA_MAX_VARS steps, by the
//  variables' order; za_optim_config_t.slots_step): set from a restored
//  checkpoint, and from the replica whose values and slots another takes
//  (an all-reduce's source), so that every rank updates alike; the ps
//  strategies' chief gives them to the ps with its init.
const int64_t *za_replica_slots_steps (const za_replica_t *self);
void za_replica_set_slots_steps (za_replica_t *self, const int64_t *steps);

//  Where the training input is (the examples of the global stream read so
//  far): saved with the checkpoints after it is set (as "examples_done";
//  a restore unsets it, so that a strategy that does not count them saves
//  no stale place), and what the restored checkpoint said, so that a job
//  resumed with another global batch (other trainers, an elastic job's
//  members) reads on from there, not from its step x the new batch. 0: not
//  known (a checkpoint of a strategy that does not count them, or older).
void za_replica_set_examples_done (za_replica_t *self, int64_t examples);
int64_t za_replica_examples_restored (const za_replica_t *self);

//  Loads the values (and the slots, when the checkpoint has them; else they
//  start fresh) from a checkpoint; *step gets its global step. Everything is
//  checked before anything is copied: a checkpoint of another model, or
//  with another shape, changes nothing and is -1 with an error.
int za_replica_restore (za_replica_t *self, const za_checkpoint_t *ckpt, int64_t *step);

//  Restores the newest intact checkpoint of model_dir, if there is one
//  (*restored says so). When there is none, warm 1 (a model's first
//  values) warm-starts (config.warm_start), warm 0 (a recovery before the
//  first checkpoint) keeps the values as they are: the warm start's would
//  undo what was trained since. -1 with an error when they are all corrupt
//  or of another model.
int za_replica_restore_newest (za_replica_t *self, const char *model_dir, int warm,
                               int *restored, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif
