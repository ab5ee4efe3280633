/*  za_role.h: what a training role (ps, worker, chief) is given, whatever
    started it (zactor-run over tcp://, a test over inproc://): the job's
    settings, shared by every role, and this task's place in the cluster.

    Each role is a CZMQ actor, `zactor_new (za_ps_actor, &config)`. When its
    work ends it sends "DONE" RC STEP CRC FLOATS on the pipe (RC "0" on
    success; STEP the global step it ended at; CRC the CRC32 of its final
    variable values, hex, and FLOATS how many, for checks), then waits for
    $TERM. The config must outlive the actor.                              */
#ifndef ZA_ROLE_H_INCLUDED
#define ZA_ROLE_H_INCLUDED

#include <czmq.h>
#include <stdatomic.h>

#include "za/za_estimator.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_ROLE_MAX_PS 64
#define ZA_ROLE_TIMEOUT_SECS 60.0

//  What a role is doing, for the broker and zactor-top.
typedef enum {
    ZA_ROLE_STARTING = 0,       //  loading data, waiting for the cluster view
    ZA_ROLE_WAITING,            //  waiting for the ps to be initialised (or restored)
    ZA_ROLE_RUNNING,            //  training, serving, evaluating
    ZA_ROLE_RECOVERING,         //  a ps lost its state: reloading / re-pulling
    ZA_ROLE_DONE,               //  finished; exiting 0
    ZA_ROLE_FAILED              //  finished with an error; exiting 1
} za_role_state_t;

//  "starting", "waiting", "running", "recovering", "done", "failed".
const char *za_role_state_name (za_role_state_t state);

//  Statistics a role shares with whoever watches it (zactor-run's broker
//  client): written by the role's thread, read by another, all relaxed
//  atomics, so watching never slows training. Zero-initialise; eval_step
//  and eval_accuracy are -1 until an evaluation exists.
typedef struct {
    _Atomic int64_t global_step;
    _Atomic double loss;                //  recent mean training loss
    _Atomic double steps_per_sec;       //  global steps per second, recently
    _Atomic double examples_per_sec;    //  this task's examples per second
    _Atomic int64_t eval_step;          //  the newest evaluation's global step
    _Atomic double eval_accuracy;
    _Atomic double alive;               //  za_clock_mono () at the role loop's last turn
                                        //  (0: the role does not keep it)
    _Atomic int state;                  //  za_role_state_t
} za_role_stats_t;

//  Zeroes stats and sets eval_step and eval_accuracy to -1.
void za_role_stats_init (za_role_stats_t *stats);

typedef struct {
    //  The job: the same for every role.
    const za_model_fn_t *model_fn;
    const void *params;
    za_input_shape_t input;
    za_optim_config_t optim;
    za_run_config_t run;            //  model_dir (the chief writes it), checkpoint
                                    //  policy, seed, threads, logging
    int64_t max_steps;
    int batch_size;
    int shuffle_buffer;             //  0: none
    size_t partition_floats;        //  split variables above this over the ps (0: never)
    double timeout_secs;            //  a peer never heard from this long is unreachable
    double heartbeat_ivl_secs;      //  a worker waiting on a ps pings it this often (1 s)
    int heartbeat_liveness;         //  and logs it as stopped, hung or restarting after
                                    //  this many silent intervals (3); it waits on
                                    //  until timeout_secs (a supervisor may restart it)
    //  The cluster, resolved to endpoints.
    int ps_count;
    const char *ps_endpoints [ZA_ROLE_MAX_PS];
    int num_workers;                //  the chief included
    //  This task.
    int ps_index;                   //  ps: which one
    const char *bind_endpoint;      //  ps: where its ROUTER binds
    int worker_index;               //  worker / chief: its data shard; the chief is 0
    int is_chief;
    const za_dataset_t *train;      //  worker / chief: the training set
    za_role_stats_t *stats;         //  NULL, or where the role publishes its progress
} za_role_config_t;

//  Defaults: timeout ZA_ROLE_TIMEOUT_SECS, heartbeats every 1 s with liveness
//  3, partition at 1 Mi floats, batch 64.
void za_role_config_init (za_role_config_t *config);

//  A parameter server: holds its shard of the variables and their optimizer
//  slots, applies pushes at once, answers pulls; ps 0 holds global_step.
//  Started when run.model_dir already holds a checkpoint at or past
//  max_steps, it serves that checkpoint's values as over (answers done).
//  Publishes global_step, state and alive to stats (when set).
void za_ps_actor (zsock_t *pipe, void *args);

//  A worker (or the chief, when is_chief): pulls, computes gradients on its
//  shard of the data, pushes to every ps, until global_step >= max_steps.
//  The chief also initialises (or restores) the ps, writes checkpoints from
//  a consistent snapshot and metrics, and tells the ps when training ends.
//  A ps that was restarted and lost its state (not_ready): the chief reloads
//  the newest checkpoint into every ps, a worker waits for that and pulls;
//  both go on (docs/PROTOCOL.md 7.5). Publishes global_step, loss, rates,
//  state and alive to stats (when set) after every step, allocating nothing.
void za_worker_actor (zsock_t *pipe, void *args);

//  Waits for a role's DONE report (up to timeout_secs; <= 0 waits forever).
//  Returns its RC (0 success), or -1 if the actor ended without one.
//  step, crc and floats may be NULL.
int za_role_wait (zactor_t *actor, double timeout_secs, int64_t *step, uint32_t *crc,
                  int64_t *floats);

#ifdef __cplusplus
}
#endif
#endif
