/*  za_task.h: the model and the data of this process (za_task.c), and the
    runs that use them (za_task_run.c): training in this process, a
    training role at its place in a cluster, the evaluator.                 */
#ifndef ZA_TASK_H_INCLUDED
#define ZA_TASK_H_INCLUDED

#include "za_settings.h"

#include "za/za_broker_client.h"
#include "za/za_cluster.h"
#include "za/za_idx.h"
#include "za/za_input.h"
#include "za/za_evaluator.h"
#include "za/za_program.h"

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
    za_bad_limit_t max_bad;         //  --max-bad-images, parsed
} za_task_t;

//  Where a task is in its cluster (za_place.c works it out, from TF_CONFIG
//  or from a broker).
typedef struct {
    za_task_type_t type;
    int index;
    int is_chief;
    int worker_index;               //  data shard: chief 0, worker i -> i + 1
    int num_workers;                //  the chief included
    int ps_count;
    char ps_endpoints [ZA_ROLE_MAX_PS][ZA_CLUSTER_ENDPOINT_MAX];
    char bind [ZA_CLUSTER_ENDPOINT_MAX];    //  where peers reach it (its host's name)
    char listen [ZA_CLUSTER_ENDPOINT_MAX];  //  where it binds, when not bind (an address:
                                            //  libzmq binds no host name)
    char right [ZA_CLUSTER_ENDPOINT_MAX];   //  allreduce: the next worker's endpoint
    int evaluators;                 //  in the cluster (the chief evaluates when none)
    za_membership_t *membership;    //  an elastic job's members (NULL: a fixed job):
                                    //  the broker client writes, the role reads
} za_place_t;

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

//  Prints how many images were skipped (could not be decoded) of how many:
//  `bad` of the training set's `images` (0: data in memory), and with
//  `evaluated` those of the newest evaluation (its metrics.jsonl line);
//  `named_in` says where the skipped are named. Nothing when no data was
//  decoded from files.
void za_task_print_skipped (const za_settings_t *settings, int64_t bad, int64_t images,
                            int evaluated, const char *named_in);

//  Says that the job stopped for preemption at step `reached` (saved there)
//  and how to resume; returns --requeue-exit-code.
int za_task_preempted (const za_settings_t *settings, int64_t reached);

//  Training in this process (with --train-and-evaluate, the evaluator too).
int za_task_run_single (za_task_t *task);
//  The evaluator task (following model_dir, or --replay); `client` (the
//  broker client, or NULL) brings the chief's checkpoint announcements.
int za_task_run_evaluator (za_task_t *task, zactor_t *client);
//  Runs a training role (ps, worker, chief) at its place; the chief then
//  evaluates when the cluster has no evaluator. `client` (may be NULL) is
//  told the ps's endpoint. Returns the exit status.
int za_task_run_role (za_task_t *task, const za_place_t *place, zactor_t *client);

#endif
