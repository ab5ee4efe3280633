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
#include "za/za_membership.h"
#include "za/za_peer.h"
#include "za/za_role_stats.h"
#include "za/za_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_ROLE_MAX_PS 64
#define ZA_ROLE_TIMEOUT_SECS 60
#define ZA_ROLE_BATCH_SIZE 64
//  The all-reduce's least bucket (--bucket-kib 0: one bucket).
#define ZA_ROLE_BUCKET_FLOATS 0
//  A variable above this many KiB is split over the ps (--partition-kib):
//  2^20 floats.
#define ZA_ROLE_PARTITION_KIB 4096


//  How the workers combine their gradients.
typedef enum {
    ZA_STRATEGY_PS_ASYNC = 0,       //  each push applied at once by the ps
    ZA_STRATEGY_PS_SYNC,            //  the ps apply the mean of several pushes
    ZA_STRATEGY_ALLREDUCE           //  no ps: the workers' ring averages them
} za_strategy_t;

//  What an elastic job keeps when its members change (--elastic-batch).
typedef enum {
    ZA_ELASTIC_GLOBAL = 0,          //  the global batch (batch_size x the trainers it
                                    //  starts with) and the learning rate: the
                                    //  members share each global batch
    ZA_ELASTIC_PER_WORKER,          //  each worker's batch_size (torchrun's): the
                                    //  global batch grows and shrinks with them
    ZA_ELASTIC_SCALE_LR             //  each worker's batch_size, and the learning
                                    //  rate scaled by trainers now / at the start
                                    //  (Horovod's recipe, lr x hvd.size ())
} za_elastic_batch_t;
#define ZA_ELASTIC_BATCH_CHOICES "global|per-worker|scale-lr"

//  The seed of shard `index`'s own order (and augmentation draws): a
//  ps-async worker's, and a worker's shard of image files under every
//  strategy, so that no two shards draw alike.
#define ZA_ROLE_SHARD_SEED_STRIDE 7919
static inline uint64_t
za_role_shard_seed (uint64_t seed, int index)
{
    return seed + ZA_ROLE_SHARD_SEED_STRIDE * (uint64_t) index;
}

//  The strategies' names, in the enum's order (--strategy's choices).
#define ZA_STRATEGY_CHOICES "ps-async|ps-sync|allreduce"
//  "ps-async", "ps-sync" or "allreduce" ("unknown" outside the enum).
const char *za_strategy_name (za_strategy_t strategy);

typedef struct {
    //  The job: the same for every role.
    za_strategy_t strategy;
    const za_model_fn_t *model_fn;
    const void *params;
    za_input_shape_t input;
    za_optim_config_t optim;        //  the chief's: it initialises the ps with it (a
                                    //  ps applies what that init says; others ignore it,
                                    //  but for a ps's schedule.fn when the init's is
                                    //  ZA_SCHEDULE_FUNCTION); every all-reduce worker's
                                    //  (the chief checks it)
    za_run_config_t run;            //  model_dir (the chief writes it), checkpoint
                                    //  policy, seed, threads, logging
    int64_t max_steps;
    int batch_size;
    int shuffle_buffer;             //  0: none
    size_t partition_floats;        //  split variables above this over the ps (0: never;
                                    //  default ZA_ROLE_PARTITION_KIB's floats)
    int replicas_to_aggregate;      //  ps-sync: pushes per step (0: num_workers)
    size_t bucket_floats;           //  allreduce: the least floats of a bucket; 0: one
                                    //  bucket, reduced after backward
                                    //  (default ZA_ROLE_BUCKET_FLOATS)
    za_dtype_t wire_dtype;          //  gradients pushed, values returned, ring chunks:
                                    //  ZA_DTYPE_F32 or ZA_DTYPE_BF16 (--wire-dtype)
    double timeout_secs;            //  a peer never heard from this long is unreachable
    za_heartbeat_t heartbeat;       //  a worker waiting on a ps pings it every interval
                                    //  and logs it as stopped, hung or restarting after
                                    //  liveness silent intervals; it waits on until
                                    //  timeout_secs (a supervisor may restart it)
    //  The cluster, resolved to endpoints.
    int ps_count;
    const char *ps_endpoints [ZA_ROLE_MAX_PS];
    int num_workers;                //  the chief included (elastic: the most)
    int min_trainers;               //  elastic: the chief and the least workers (the
                                    //  trainers it starts with)
    za_elastic_batch_t elastic_batch;
    za_membership_t *membership;    //  NULL, or an elastic job's members now: the
                                    //  ring (allreduce) re-forms when they change,
                                    //  ps-sync aggregates one push per member, a ps
                                    //  waits for the members' goodbyes, and a worker
                                    //  reads its share of the data among them
    //  This task.
    int ps_index;                   //  ps: which one
    const char *bind_endpoint;      //  ps, all-reduce worker: where its ROUTER binds
    const char *ring_right;         //  all-reduce worker: the next one's endpoint
                                    //  (worker_index + 1 mod num_workers)
    int worker_index;               //  worker / chief: its data shard; the chief is 0
    int is_chief;
    int rejoin;                     //  this process was restarted: all-reduce, it
                                    //  joins a ring already running; ps-async, the
                                    //  chief waits for workers' offers to a lost ps
    char who [32];                  //  this task as its cluster names it ("worker 0");
                                    //  "": made from is_chief and worker_index
    const za_dataset_t *train;      //  worker / chief: the whole training set, of
                                    //  which it reads shard worker_index of num_workers;
    za_input_fn_t input_fn;         //  or (when set) what this gives in TRAIN mode
    void *input_arg;                //  for that shard (za_input_context_t)
    za_role_stats_t *stats;         //  NULL, or where the role publishes its progress
    int evaluates_after;            //  the caller evaluates once training is over: a
                                    //  successful end stays "running" in stats, and
                                    //  the caller publishes "done" after
    int announce_checkpoints;       //  the chief: after each checkpoint it writes,
                                    //  "CHECKPOINT" STEP on its pipe (the caller
                                    //  tells the evaluators: za_role_wait_relay)
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

//  A worker (or the chief) of the all-reduce strategy: no ps. Every worker
//  holds the whole model and its optimizer slots; each step it computes
//  gradients on its shard, the ring (za_ring.h) averages them over all the
//  workers and each applies the same mean, so the replicas stay identical
//  bit for bit. The chief (worker index 0) starts everyone from its state
//  (the newest checkpoint, or the seed's values) and writes checkpoints and
//  metrics. Publishes like za_worker_actor.
void za_mirrored_actor (zsock_t *pipe, void *args);

//  Waits for a role's DONE report (up to timeout_secs; <= 0 waits forever).
//  Returns its RC (0 success), or -1 if the actor ended without one.
//  step, crc and floats may be NULL.
int za_role_wait (zactor_t *actor, double timeout_secs, int64_t *step, uint32_t *crc,
                  int64_t *floats);
//  The same, forever, sending each "CHECKPOINT" STEP the role announces on
//  to `relay` (a broker client actor; NULL: dropped) as it comes.
int za_role_wait_relay (zactor_t *actor, zactor_t *relay);

//  The chief has written the checkpoint of step: says so on the role's pipe
//  when config->announce_checkpoints.
void za_role_announce_checkpoint (const za_role_config_t *config, zsock_t *pipe,
                                  int64_t step);

#ifdef __cplusplus
}
#endif
#endif
