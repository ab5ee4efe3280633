/*  za_hooks.h: session hooks (tf.train.SessionRunHook) and the built-in ones
    that every training loop runs, the single process's and the chief's
    alike: the step counter (log lines or a progress bar), the summary saver
    (metrics.jsonl and TensorBoard scalars) and the checkpoint saver. They
    share one rule for "due" (za_every_t), so a setting such as
    save_summary_steps means the same steps wherever training runs.        */
#ifndef ZA_HOOKS_H_INCLUDED
#define ZA_HOOKS_H_INCLUDED

#include <stdint.h>

#include "za/za_optim_config.h"
#include "za/za_summary.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_HOOKS_MAX 12

//  What a hook sees around each step.
typedef struct {
    int64_t global_step;            //  after the step (after_run) or before it
    int64_t max_steps;              //  of this train call
    double loss;                    //  mean loss of this step's batch (after_run),
                                    //  or of the loss_steps steps up to this one
    int64_t loss_steps;             //  1: loss is this step's; n > 1: the mean over
                                    //  this step and the n - 1 before, read at this
                                    //  one (steps on a device that waited for
                                    //  nothing, za_replica_defer_loss); 0: not read
                                    //  after this step (loss: the last one read)
    int batch_size;
    double elapsed_secs;            //  since this train call began
    double loss_scale;              //  mixed_float16's loss scale after the step
                                    //  (0 in other precisions)
    int64_t skipped_steps;          //  and the steps it skipped so far
} za_run_context_t;

//  A session hook. Any callback may be NULL. before_run returns 1 when it
//  wants this step's loss in after_run (TensorFlow's SessionRunArgs: the
//  loss fetched), else 0: where steps on a device do not wait for their end
//  the loss is read only at the steps some hook wants it (loss_steps). 
//  after_run returns 0 to go on, > 0 to ask training to stop after this
//  step, < 0 when the hook failed (with an error recorded): training stops
//  with that error.
typedef struct {
    void *arg;
    void (*begin) (void *arg, int64_t global_step);
    int (*before_run) (void *arg, const za_run_context_t *context);
    int (*after_run) (void *arg, const za_run_context_t *context);
    void (*end) (void *arg, const za_run_context_t *context);
} za_hook_t;

//  Hooks run in the order they were added.
typedef struct {
    za_hook_t hooks [ZA_HOOKS_MAX];
    int count;
} za_hooks_t;

//  Adds a hook (copied). Returns 0, or -1 with an error past ZA_HOOKS_MAX.
int za_hooks_add (za_hooks_t *self, const za_hook_t *hook);
void za_hooks_begin (za_hooks_t *self, int64_t global_step);
//  Runs every before_run; returns 1 when any wants the step's loss, else 0.
int za_hooks_before_run (za_hooks_t *self, const za_run_context_t *context);
//  Runs every after_run; returns the first negative result, else 1 when any
//  hook asked to stop, else 0.
int za_hooks_after_run (za_hooks_t *self, const za_run_context_t *context);
void za_hooks_end (za_hooks_t *self, const za_run_context_t *context);

// ---------------------------------------------------------------------------
//  When something is due: every N steps, or else every S seconds.

typedef struct {
    int64_t steps;                  //  > 0: due when global_step reaches the next
                                    //  multiple of steps (it may jump past it when
                                    //  other workers push too)
    double secs;                    //  > 0 (and steps <= 0): due secs after the last
    int64_t last_step;              //  when it was last done (or started)
    double last_time;
} za_every_t;

//  Nothing is due before `step` and `now` (za_clock_mono).
void za_every_init (za_every_t *self, int64_t steps, double secs, int64_t step, double now);
//  1 when due at global_step `step` and time `now`; never when both
//  steps and secs are <= 0.
int za_every_due (const za_every_t *self, int64_t step, double now);
//  Counts from here for the next time.
void za_every_done (za_every_t *self, int64_t step, double now);

// ---------------------------------------------------------------------------
//  The step counter (TensorFlow's StepCounterHook): when due, a log line
//  "WHO step S/MAX  loss L  global_step/sec R  examples/sec E  ETA T"; with
//  `bar`, one progress line redrawn in place instead (for a terminal).
//  examples/sec counts this loop's own batches.

typedef struct {
    const char *who;                //  "" or a prefix such as "worker 2: "
    int bar;
    za_every_t every;               //  (private from here on)
    int64_t start_step;
    double start_time, last_draw;
    int64_t examples_since_log;
    int drew;
} za_step_counter_t;

//  A hook whose state is *state (which must outlive the training).
za_hook_t za_step_counter_hook (za_step_counter_t *state, int64_t every_steps, int bar);

// ---------------------------------------------------------------------------
//  The summary saver: when due (every save_summary_steps), one line
//  {"global_step", "loss", "steps_per_sec", "examples_per_sec", "wall_time"}
//  (and "learning_rate", the rate of the step's update, with an optimizer;
//  "loss_scale" and "skipped_steps" in mixed_float16)
//  appended to model_dir/metrics.jsonl and the same scalars ("loss",
//  "global_step/sec", "examples/sec", "learning_rate") to a TensorBoard event file in
//  model_dir (opened at the first line). loss is the mean of the steps since
//  the last line; examples/sec is global steps/sec x batch size. A line the
//  disk refuses (full) is dropped whole, said once until lines are written
//  again; training goes on.

typedef struct {
    const char *model_dir;
    const za_optim_config_t *optim; //  NULL, or whose learning rate a line shows
    za_every_t every;               //  (private from here on)
    double loss_sum;
    int64_t loss_count;
    za_summary_writer_t *writer;
    int failing;                    //  the last line could not be written (said)
} za_summary_hook_t;

//  A hook whose state is *state (which must outlive the training); every_steps
//  <= 0 writes nothing. Its end closes the event file.
za_hook_t za_summary_hook (za_summary_hook_t *state, const char *model_dir,
                           int64_t every_steps, const za_optim_config_t *optim);

// ---------------------------------------------------------------------------
//  The checkpoint saver: when due (every save_checkpoints_steps, or else
//  save_checkpoints_secs) and before max_steps, calls save (arg, step). The
//  final checkpoint is the training loop's own business (za_saver_hook's
//  last_saved tells whether that step was saved already).

//  Saves a checkpoint at `step`. Returns 0; -1 with an error;
//  ZA_SAVE_SKIPPED when a full or failing disk kept it from being written
//  (training goes on, the next save tries again; za_replica_save_through);
//  or another value > 0, a result of the caller's own (kept in the hook's
//  rc; training stops).
#define ZA_SAVE_SKIPPED 3
typedef int (za_save_fn) (void *arg, int64_t step);

typedef struct {
    za_save_fn *save;
    void *arg;
    za_every_t every;
    int64_t last_saved;             //  the step last saved (-1: none yet)
    int rc;                         //  the last result of save
} za_saver_hook_t;

//  A hook whose state is *state; `start_saved` is the step of the newest
//  checkpoint (-1 when there is none). Steps count from it: a loop that
//  starts past a multiple of every_steps that no checkpoint holds (a
//  restarted chief) saves at its first step.
za_hook_t za_saver_hook (za_saver_hook_t *state, int64_t every_steps, double every_secs,
                         int64_t start_saved, za_save_fn *save, void *arg);

// ---------------------------------------------------------------------------
//  Early stopping's listener on the chief (za_early_stop.h): at begin and
//  every quarter second after a step it looks for the evaluator's request
//  in model_dir; from then on after_run asks training to stop (> 0) and
//  `requested` stays 1 (a loop that sees it at begin takes no step).

typedef struct {
    const char *model_dir;
    double next_check;
    int requested;
} za_stop_hook_t;

za_hook_t za_stop_hook (za_stop_hook_t *state, const char *model_dir);

// ---------------------------------------------------------------------------
//  TensorFlow's NanTensorHook (fail_on_nan_loss, the Estimator's default): a
//  training loss that is NaN or infinite (Keras's TerminateOnNaN) means the
//  model diverged, and training stops before the step is saved (retention
//  would have deleted the checkpoints before it for diverged ones: the
//  newest kept may hold the update that diverged, those before it not).
//  Returns 0 for a finite loss, else -1 with an error that says so, at
//  `step` (the global step the update makes), and what to do. A role that
//  stopped so ends with ZA_EXIT_DATA: a restart from the last checkpoint
//  would most likely diverge again.
int za_loss_check (double loss, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
