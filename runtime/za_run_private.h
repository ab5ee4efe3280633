/*  za_run_private.h: what the runtime's files share and nobody else needs:
    settings turned into the configs of the layers below, the model and data
    of this process (a task), where the task is in its cluster, and the
    processes that run the broker and the whole cluster on this machine.    */
#ifndef ZA_RUN_PRIVATE_H_INCLUDED
#define ZA_RUN_PRIVATE_H_INCLUDED

#include "za/za_broker.h"
#include "za/za_broker_client.h"
#include "za/za_cluster.h"
#include "za/za_dataset.h"
#include "za/za_evaluator.h"
#include "za/za_role.h"
#include "za/za_run.h"

#define ZA_EXIT_USAGE 2
#define ZA_EXIT_INTERRUPTED 130
//  Batches an evaluation reads when nobody says.
#define ZA_EVAL_BATCH 500

// ---------------------------------------------------------------------------
//  za_settings.c: the one place each group of settings becomes a config

za_run_config_t za_settings_run_config (const za_settings_t *settings);
//  The optimizer of the job: --optimizer, and --learning-rate when given.
//  Returns 0, or -1 with an error (a rate that does not fit a float).
int za_settings_optim (const za_settings_t *settings, za_optim_config_t *optim);
double za_settings_heartbeat_ivl_secs (const za_settings_t *settings);

// ---------------------------------------------------------------------------
//  za_task.c: the model and the data of this process

typedef struct {
    const za_program_t *program;
    za_settings_t *settings;
    za_options_t *options;
    const za_model_fn_t *model_fn;
    const void *params;
    za_stack_spec_t spec;           //  the layer stack, when the program has no model_fn
    za_input_shape_t input;
    int64_t epoch_examples;         //  what --epochs counts
    za_dataset_t *train;            //  this task's shard, loaded when first asked for
    int train_shards, train_shard;
    za_dataset_t *eval;             //  the evaluation set, loaded when first asked for
    za_role_stats_t *stats;         //  NULL, or what the broker client reports
} za_task_t;

//  Checks the model and reads what the data holds (headers and labels, no
//  pixel; with need_eval, the evaluation set's too), then works out
//  max_steps: --epochs of global steps, each of `replicas` x batch_size
//  examples (the all-reduce's workers; 1 otherwise). Returns 0, or an exit
//  status after one message.
int za_task_prepare (za_task_t *task, const za_program_t *program, za_options_t *options,
                     za_settings_t *settings, int need_eval, int replicas);
void za_task_release (za_task_t *task);

//  The input_fn every role of this process uses (arg: the task): the
//  program's own, or this task's shard of the IDX files.
za_input_t *za_task_input (void *arg, const za_input_context_t *context);

//  Prints the newest evaluation (MODEL_DIR/eval[_NAME]/metrics.jsonl) as the
//  result; `evaluations` (-1: not said) how many there were. Returns 0, or
//  1 with an error when there is none.
int za_task_print_last_eval (const za_settings_t *settings, int64_t evaluations);

//  Training in this process (with --train-and-evaluate, the evaluator too).
int za_task_run_single (za_task_t *task);
//  The evaluator task (following model_dir, or --replay); `client` (the
//  broker client, or NULL) brings the chief's checkpoint announcements.
int za_task_run_evaluator (za_task_t *task, zactor_t *client);

// ---------------------------------------------------------------------------
//  za_place.c: where this task is, from TF_CONFIG or from a broker

typedef struct {
    za_task_type_t type;
    int index;
    int is_chief;
    int worker_index;               //  data shard: chief 0, worker i -> i + 1
    int num_workers;                //  the chief included
    int ps_count;
    char ps_endpoints [ZA_ROLE_MAX_PS][ZA_CLUSTER_ENDPOINT_MAX];
    char bind [ZA_CLUSTER_ENDPOINT_MAX];
    char right [ZA_CLUSTER_ENDPOINT_MAX];   //  allreduce: the next worker's endpoint
    int evaluators;                 //  in the cluster (the chief evaluates when none)
} za_place_t;

//  The strategy the settings name.
za_strategy_t za_settings_strategy (const za_settings_t *settings);
//  Batches that make one global step, in a cluster of num_workers (the
//  chief included): 1 with ps-async, --replicas-to-aggregate (else every
//  worker) with ps-sync, every worker with the all-reduce.
int za_settings_replicas (const za_settings_t *settings, int num_workers);

//  --role / --index / --cluster / TF_CONFIG: runs this task of a static
//  cluster. Returns the exit status.
int za_run_in_cluster (const za_program_t *program, za_options_t *options,
                       za_settings_t *settings);
//  --broker ADDR: registers, takes the job and the place the broker gives,
//  then runs the task while the client reports. Returns the exit status.
int za_run_with_broker (const za_program_t *program, za_options_t *options,
                        za_settings_t *settings);
//  Runs a training role (ps, worker, chief) at its place; the chief then
//  evaluates when the cluster has no evaluator. `client` (may be NULL) is
//  told the ps's endpoint. Returns the exit status.
int za_task_run_role (za_task_t *task, const za_place_t *place, zactor_t *client);

// ---------------------------------------------------------------------------
//  za_launcher.c: the broker process, and the whole cluster on this machine

//  --role broker --bind EP [--supervise]. Returns the exit status.
int za_run_broker (const za_program_t *program, za_options_t *options,
                   za_settings_t *settings);
//  --local. Returns the exit status.
int za_run_local (const za_program_t *program, za_options_t *options,
                  za_settings_t *settings);

//  This program's own path, for the processes a broker starts.
void za_run_self_exe (char *path, size_t size);
//  How a user runs `tool` (zactor-top) of the same build or install as the
//  program at `exe`: its bare name when $PATH finds that very file, else its
//  path (./build/zactor-top from the source folder).
void za_run_tool_command (const char *exe, const char *tool, char *command, size_t size);
//  A free port on `host` (the kernel picks it): "tcp://HOST:PORT" into
//  endpoint. Returns 0, or -1 with an error.
int za_run_free_endpoint (const char *host, char *endpoint, size_t size);

//  Whether this process may bind endpoint: loopback always; anything else
//  with --certs, or with --insecure (said loudly, once per endpoint).
//  Returns 0, or ZA_EXIT_USAGE after one error that says what to give.
int za_run_bind_allowed (const za_settings_t *s, const char *endpoint);

#endif
