/*  za_replica_private.h: what the files of the replica share: its state
    (za_replica_t), where each block's newest copy is, and the functions one
    file of it offers the others. za_replica.c is the replica's life, its
    plan of states per thread and its blocks on the host and a device;
    za_replica_batch.c one batch over the threads and micro-batches (train,
    evaluate, predict); za_replica_apply.c the optimizer's update, clipping
    and mixed_float16's loss scale; za_replica_ckpt.c checkpoints and a warm
    start.                                                                  */
#ifndef ZA_REPLICA_PRIVATE_H_INCLUDED
#define ZA_REPLICA_PRIVATE_H_INCLUDED

#include "za/za_replica.h"
#include "za/za_parallel.h"
#include "za/za_util.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

//  Values from which the gradients' sum and the optimizer's update are
//  split over the threads (below, one thread takes less than waking the
//  others).
#define APPLY_SPLIT_MIN 16384
//  Micro-batches whose forward and backward the trace shows (the rest of a
//  larger batch's are left out).
#define ZA_REPLICA_TRACED_MAX 64
//  Recorded steps (CUDA graphs) kept per thread: one per input buffer
//  (the input's device slots, prefetch + 1 of them, or the thread's upload
//  buffer), and one for an epoch's short last batch.
#define ZA_REPLICA_GRAPHS 8

//  A thread's step on a device, recorded once and replayed (a CUDA graph):
//  the buffers and examples it was recorded for, what the model_fn said.
typedef struct {
    const float *features;
    const int32_t *labels;
    const float *values;
    float *grads;
    int count;
    int seen;                       //  run once without recording (its buffers made)
    void *graph;                    //  the back end's, once recorded
    int n_classes;
    int deferred;                   //  its loss waits on the device (loss_take)
} za_replica_graph_t;

struct _za_replica_t {
    const za_model_fn_t *model_fn;
    const void *params;
    za_input_shape_t input;
    const za_backend_t *be;
    int has_optim;
    za_optim_config_t optim;
    int train;
    const za_warm_start_t *warm_start;
    //  The block's runs of variables that train, [from, to): set once the
    //  variables are declared; one run [0, total) when nothing is frozen
    //  (a frozen variable's floats are never updated, clipped or summed).
    size_t run_from [ZA_MAX_VARS], run_to [ZA_MAX_VARS];
    int run_count;
    int frozen_count;
    //  The global step each variable's slots started from (0: the start;
    //  a resume's step for those the checkpoint had none of), and the
    //  optimizer's pieces: the runs cut where it changes, each with its own
    //  (za_optim_config_t.slots_step). One piece per run when all are 0.
    int64_t slots_step [ZA_MAX_VARS];
    size_t piece_from [ZA_MAX_VARS], piece_to [ZA_MAX_VARS];
    int64_t piece_slots_step [ZA_MAX_VARS];
    int piece_count;

    //  Data parallelism inside the process: each batch is split over `threads`
    //  threads, each with its own model state and gradient buffer (thread 0's
    //  is `grads`); OpenBLAS runs single-threaded under them.
    int threads;
    int first_thread;               //  thread 0's number in the dropout seeds
    za_parallel_t *pool;
    void *states [ZA_REPLICA_MAX_THREADS];
    float *thread_grads [ZA_REPLICA_MAX_THREADS];
    int per_thread;                 //  examples each state is planned for
    int micro;                      //  on the CPU: a micro-batch's examples at most
    size_t feature_size;
    za_vars_t vars;
    float *values;                  //  [vars.total]
    //  za_model_set_frozen_epoch's for its batches while it holds; 0: a new
    //  one at the next batch (whatever may have written the values sets 0).
    uint64_t frozen_epoch;
    float *grads;                   //  = thread_grads [0], or NULL
    float *slots [ZA_OPTIM_MAX_SLOTS];
    int disk_failing;               //  a save failed on the disk: said, until one succeeds
    int diverged;                   //  the last save found values not finite
    //  On a device with memory of its own (be->host_memory 0) the blocks
    //  above are host mirrors of these; thread t runs on device
    //  device_of [t], its gradient in dev_grads [t]; device_values [d] is the
    //  values' copy on the d-th device used (0 holds the slots and applies).
    int device_count;
    int device_of [ZA_REPLICA_MAX_THREADS];
    float *device_values [ZA_DEVICE_MAX];
    float *dev_grads [ZA_REPLICA_MAX_THREADS];
    float *dev_slots [ZA_OPTIM_MAX_SLOTS];
    float *dev_peer;                //  on device 0: a gradient from another device
    float *dev_features [ZA_REPLICA_MAX_THREADS];
    int32_t *dev_labels [ZA_REPLICA_MAX_THREADS];
    int64_t fed;                    //  batches whose examples the input had copied up
    float *host_logits [ZA_REPLICA_MAX_THREADS];
    size_t host_logits_floats [ZA_REPLICA_MAX_THREADS];
    //  Which copy is newer (replica_at_t): values, gradient, slots.
    int values_at, grads_at, slots_at;
    int copies_stale;               //  device_values [1..] older than [0]
    //  The back end's collectives over the devices (NCCL) failed once:
    //  said, and copies through device 0 from then on.
    int collectives_off;
    //  Who hears of the gradient as it becomes final (za_replica_on_gradients).
    za_grads_final_fn *final_fn;
    void *final_arg;
    pthread_mutex_t final_mutex;
    //  mixed_float16's dynamic loss scale (1 otherwise).
    float loss_scale;
    int64_t good_steps, skipped_steps;
    int64_t examples_done;          //  the input's place to save (za_replica_set_examples_done)
    int64_t examples_restored;      //  and the restored checkpoint's
    //  The last compute_gradients's forward and backward of thread 0's
    //  micro-batches, for the trace: start, forward's end, backward's end.
    double traced [ZA_REPLICA_TRACED_MAX][3];
    int traced_count;
    //  Asked (config.graphs, ZA_CUDA_GRAPHS), on a back end that records
    //  (graph_begin), a replayable model_fn; 0 after a recording failed (said once).
    int graphs_on;
    za_replica_graph_t graphs [ZA_REPLICA_MAX_THREADS][ZA_REPLICA_GRAPHS];
    int graph_next [ZA_REPLICA_MAX_THREADS];   //  the place that makes way next
    int64_t replayed;               //  thread-steps replayed (atomic)
    //  za_replica_defer_loss: training steps that do not wait for their
    //  work (`queued`: some may still run), and the loss of those not taken
    //  yet: summed here where the model_fn said it, on the device (its
    //  loss_take) where it left it there (`on_device`, out of n_classes);
    //  a failure of their work found where it could not be said (a read of
    //  the values), kept for the next take.
    int defer;
    int queued;
    int on_device;
    char kept [ZA_ERROR_MAX_CHARS];
    int n_classes;
    double pending_sum;
    int64_t pending_examples, pending_steps;
};

//  Where a block's newest numbers are, on a device with memory of its own.
typedef enum { REPLICA_AT_BOTH = 0, REPLICA_AT_HOST, REPLICA_AT_DEVICE } replica_at_t;

//  The optimizer's slots per variable (0 without one).
static inline int
za_replica_slot_count (const za_replica_t *self)
{
    return self->has_optim? za_optim_slot_count (self->optim.kind): 0;
}

//  za_replica_batch.c
//  The work of the steps that did not wait for their end (defer) done,
//  and the losses they left on the device added to pending_sum (a label
//  outside the classes said): before what reads their results. 0, or -1
//  with the first error of that work (the pending sums start again).
int za_replica_settle (za_replica_t *self);

//  za_replica.c
//  (Re)plans the threads' model states for batches of up to batch_max
//  examples. 0, or -1 with no state left.
int za_replica_plan (za_replica_t *self, int batch_max);
//  The host copies of `count` blocks that move together up to date;
//  `write`: the caller will change them.
void za_replica_to_host (za_replica_t *self, int *at, float *const *host,
                         float *const *device, int count, int write);
//  The first device's copies of `count` blocks up to date. 0 or -1.
int za_replica_to_device (za_replica_t *self, int *at, float *const *host,
                          float *const *device, int count);
//  The back end's collectives failed (za_last_error says how): said on
//  stderr once, and copies through device 0 from now on.
void za_replica_collectives_off (za_replica_t *self);
//  The runs of the variables that train, and the optimizer's pieces (again
//  after slots_step changed).
void za_replica_plan_runs (za_replica_t *self);
//  The first device's values and slots up to date. 0 or -1.
int za_replica_state_to_device (za_replica_t *self);
//  Before a step: that, and the values' copies on the other devices. 0 or -1.
int za_replica_values_to_devices (za_replica_t *self);

#endif
