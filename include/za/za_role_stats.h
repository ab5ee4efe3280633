/*  za_role_stats.h: what a task shows whoever watches it (its broker client,
    and through the broker zactor-top): its state and its statistics, shared
    between the task's threads through relaxed atomics, so that watching never
    slows training. Knows nothing of models or of the wire.               */
#ifndef ZA_ROLE_STATS_H_INCLUDED
#define ZA_ROLE_STATS_H_INCLUDED

#include <stdatomic.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

//  A training step's phases, as a trainer reports them for the broker's
//  straggler check: input (waiting for the batch), compute (forward and
//  backward), exchange (push and pull, or the all-reduce), apply (the
//  optimizer's update where the trainer makes it).
typedef enum {
    ZA_PHASE_INPUT, ZA_PHASE_COMPUTE, ZA_PHASE_EXCHANGE, ZA_PHASE_APPLY, ZA_PHASES
} za_phase_t;

//  "input", "compute", "exchange", "apply"; NULL outside the enum.
const char *za_phase_name (int phase);

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
                                        //  (0: the role does not keep it; -T: a step
                                        //  computes since T)
    _Atomic int state;                  //  za_role_state_t
    _Atomic int ring_rank;              //  the all-reduce ring's rank; -1: no ring
    _Atomic double wait_ms;             //  ring: recent time per step waiting for peers
    _Atomic int64_t bad_images;         //  input examples skipped: could not be decoded
    _Atomic int64_t images;             //  files and records its input lists (0: none)
    _Atomic double step_ms;             //  recent time per step of its own (0: none yet)
    _Atomic double phase_ms [ZA_PHASES];    //  of which in each phase
    _Atomic int exchange_waits;         //  1: its exchange waits for the other trainers
                                        //  (ps-sync, all-reduce): not its own time
} za_role_stats_t;

//  Zeroes stats and sets eval_step, eval_accuracy and ring_rank to -1.
void za_role_stats_init (za_role_stats_t *stats);

//  Publishes a role's state and that its loop turned at `now` (za_clock_mono)
//  into stats (NULL: nothing). Relaxed stores: no lock, no allocation.
static inline void
za_role_stats_publish (za_role_stats_t *stats, za_role_state_t state, double now)
{
    if (!stats)
        return;
    atomic_store_explicit (&stats->state, (int) state, memory_order_relaxed);
    atomic_store_explicit (&stats->alive, now, memory_order_relaxed);
}

//  A step's compute runs without a turn of the role's loop for as long as
//  the model takes (a VGG16 step at 224x224 on one core: tens of seconds):
//  alive reads -now through it, "computing since", which the broker client
//  judges by a far longer limit than a quiet loop. The loop's next turn
//  keeps alive again.
static inline void
za_role_stats_computing (za_role_stats_t *stats, double now)
{
    if (stats)
        atomic_store_explicit (&stats->alive, -now, memory_order_relaxed);
}

#ifdef __cplusplus
}
#endif
#endif
