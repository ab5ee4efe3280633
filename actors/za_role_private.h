/*  za_role_private.h: what the ps and worker actors share and nobody else
    needs: the model's variable table, each part's wire shape, DONE reports. */
#ifndef ZA_ROLE_PRIVATE_H_INCLUDED
#define ZA_ROLE_PRIVATE_H_INCLUDED

#include "za/za_hooks.h"
#include "za/za_partition.h"
#include "za/za_replica.h"
#include "za/za_role.h"
#include "za/za_process.h"
#include "za/za_wire.h"

//  The model's variable table (planned for one example, then let go).
int za_role_model_vars (const za_role_config_t *config, za_vars_t *vars);

//  Worker batches a global step takes: ps-async 1 (a push), ps-sync the
//  replicas to aggregate (0: every worker), allreduce every worker.
int za_role_batches_per_step (const za_role_config_t *config);

//  The shape a part travels with: its variable's shape when whole, [size]
//  when the variable was split. Returns ndim.
int za_role_part_shape (const za_vars_t *vars, const za_part_t *part, int64_t *shape);

//  This task's name in logs ("chief 0", "worker 1"): config->who, or made
//  from is_chief and worker_index (the chief is worker index 0).
void za_role_who (const za_role_config_t *config, char *who, size_t size);

//  The learning rate `rate` becomes with `trainers` training: the same,
//  but in an elastic job under --elastic-batch scale-lr, times trainers
//  over those it started with (Horovod's recipe).
float za_role_elastic_rate (const za_role_config_t *config, float rate, int trainers);

//  The training input of this task's shard from global_step on (a restarted
//  task goes on with a new order of its shard): the program's input_fn, or
//  config->train. NULL with an error.
za_input_t *za_role_train_input (const za_role_config_t *config, const char *who,
                                 int64_t global_step);
//  The same as one of `trainers` readers, the one at `place` (an elastic
//  job's members now, za_membership.h), reading on after `examples_done`
//  examples of the synchronous strategies' stream (0: steps_done's count),
//  in global batches of global_batch examples shared among them (0: each
//  its batch_size).
za_input_t *za_role_train_input_among (const za_role_config_t *config, const char *who,
                                       int64_t global_step, int trainers, int place,
                                       int64_t examples_done, int global_batch);

//  The hooks of a training role's loop: the step counter for everyone, the
//  summary and checkpoint savers (save (arg, step)) for the chief.
typedef struct {
    char prefix [40];                           //  "chief 0: ", for the step counter
    za_hooks_t hooks;
    za_step_counter_t counter;
    za_summary_hook_t summary;
    za_saver_hook_t saver;                      //  saver.last_saved: the newest checkpoint
    za_stop_hook_t stop;                        //  the chief, --stop-if-no-improvement:
                                                //  stop.requested ends training
    za_run_context_t context;
    za_optim_config_t optim;                    //  what the summary says: the update's
                                                //  (elastic scale-lr: by the trainers now)
    int64_t max_steps;                          //  0: config's; else where the role
                                                //  stops (an all-reduce's source's)
    int diverged;                               //  a NaN or infinite loss stopped it
} za_role_hooks_t;

void za_role_hooks_init (za_role_hooks_t *self, const za_role_config_t *config,
                         const char *who, za_save_fn *save, void *arg);
//  After a step of `replica`: runs every hook; returns za_hooks_after_run's result.
int za_role_hooks_after_step (za_role_hooks_t *self, const za_role_config_t *config,
                              const za_replica_t *replica, int64_t global_step, double loss,
                              int batch, double elapsed);

//  One step's seconds, or their sums: the whole step, and in each phase.
typedef struct {
    double step;
    double phase [ZA_PHASES];
} za_role_step_times_t;

//  What a training loop publishes after each step (za_role_stats_t): rates
//  and the time per step and in each phase over the last one to two windows
//  of ZA_ROLE_RATE_WINDOW_SECS, and a moving average of the loss. Nothing
//  allocated, relaxed stores only. `spent` sums every step's times since
//  the role started (its loop's end-of-run breakdown).
#define ZA_ROLE_RATE_WINDOW_SECS 2.0
typedef struct {
    double loss_average;
    double since_time, window_time;
    int64_t since_step, window_step, since_own_steps, window_own_steps;
    za_role_step_times_t spent, since_spent, window_spent;
} za_role_rates_t;

//  Counts rates from here (a start, or going on after a pause).
void za_role_rates_restart (za_role_rates_t *self, int64_t global_step, int64_t own_steps,
                            double now);
//  A step is done: own_steps of this task (1 for the first), its loss,
//  batch and times. stats may be NULL.
void za_role_rates_publish (za_role_rates_t *self, za_role_stats_t *stats,
                            int64_t global_step, int64_t own_steps, double loss, int batch,
                            const za_role_step_times_t *times, double now);

//  Publishes how many of input's examples could not be decoded so far, and
//  how many it lists.
void za_role_bad_publish (za_role_stats_t *stats, const za_input_t *input);

//  A training role's next batch into *batch: 0, or -1 with an error when
//  its input failed on its data (said by the input) or ended (said here).
int za_role_next_batch (za_input_t *input, const char *who, za_batch_t *batch);

//  The status a training role ends with after its training returned
//  `failed` (0 or not): 0, ZA_EXIT_DATA when its input failed on its data
//  (a restart would meet the same files) or its model diverged (hooks'
//  diverged, or a checkpoint refused for values not finite: a restart
//  would most likely diverge again), else 1.
int za_role_end_status (int failed, const za_input_t *input, const za_role_hooks_t *hooks,
                        const za_replica_t *replica);

//  za_loss_check (za_hooks.h) of the loss of the step that makes
//  global_step `step`: 0, or -1 with its error (without the role's name:
//  the broker says it with the exit's cause) and hooks->diverged set.
int za_role_loss_check (za_role_hooks_t *hooks, double loss, int64_t step);

//  A role that could not start: FAILED to its watchers, DONE 1 on the pipe.
void za_role_failed_start (zsock_t *pipe, za_role_stats_t *stats);

//  A role's end for its watchers: its last global_step, and DONE or FAILED
//  (rc 0 or not); a success stays RUNNING when the caller evaluates after
//  (config->evaluates_after). stats may be NULL.
void za_role_publish_end (const za_role_config_t *config, int rc, int64_t global_step);

//  CRC32 of a value block, as DONE reports it.
uint32_t za_role_values_crc (const float *values, size_t floats);

//  Sends the DONE report on the pipe and waits for $TERM.
void za_role_report_done (zsock_t *pipe, int rc, int64_t step, uint32_t crc, int64_t floats);

#endif
