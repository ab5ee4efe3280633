/*  za_optim_config.h: an optimizer's settings, as one struct from the option
    table (--optimizer, --learning-rate) through the wire's init to the ps's
    update and every replica's (kernels/za_optim.c applies it). A plain value
    every layer may hold: no arithmetic here.                               */
#ifndef ZA_OPTIM_CONFIG_H_INCLUDED
#define ZA_OPTIM_CONFIG_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZA_OPT_UNKNOWN = -1,        //  a name no optimizer has (as a peer sent it)
    ZA_OPT_SGD = 0,
    ZA_OPT_MOMENTUM = 1,
    ZA_OPT_ADAM = 2,
    ZA_OPT_ADAGRAD = 3
} za_optimizer_t;

//  Learning-rate schedules, with TensorFlow's names and arguments: the rate
//  of update `step` (1 for the first) is a function of step - 1, the
//  global step before it, as Keras's LearningRateSchedule of iterations.
typedef enum {
    ZA_SCHEDULE_CONSTANT = 0,   //  learning_rate
    ZA_SCHEDULE_EXPONENTIAL,    //  lr * decay_rate ^ (s / decay_steps) (staircase: floor)
    ZA_SCHEDULE_PIECEWISE,      //  values [i] while s <= boundaries [i]; values [n] after
    ZA_SCHEDULE_COSINE,         //  lr * ((1 - alpha) * (1 + cos (pi min (s, d) / d)) / 2 + alpha)
    ZA_SCHEDULE_COSINE_RESTARTS,//  SGDR: periods decay_steps x t_mul ^ i, peaks m_mul ^ i
    ZA_SCHEDULE_POLYNOMIAL,     //  (lr - end) (1 - min (s, d) / d) ^ power + end (cycle:
                                //  d x ceil (s / d))
    ZA_SCHEDULE_FUNCTION,       //  fn (fn_arg, lr, s): the program's own (za_program_t's
                                //  learning_rate_fn); the wire carries only the kind, and
                                //  each process (a ps, every all-reduce rank) calls its own
    ZA_SCHEDULE_COUNT
} za_schedule_kind_t;

//  A program's learning-rate schedule (Keras's LearningRateSchedule
//  subclass, a model_fn's tf.train.*_decay of global_step): the rate of the
//  update from global step `step` (0 for the first), given the base rate.
//  It must be a pure function of its arguments: every process that applies
//  updates calls it with the same ones.
typedef double (za_schedule_fn) (void *arg, double learning_rate, int64_t step);

#define ZA_SCHEDULE_PIECES_MAX 8
//  The numbers of a schedule, as the wire carries them (za_schedule_numbers).
#define ZA_SCHEDULE_NUMBERS (12 + 2 * ZA_SCHEDULE_PIECES_MAX + 1)

typedef struct {
    za_schedule_kind_t kind;
    double decay_steps;         //  exponential, cosine, polynomial; restarts: the first
    double decay_rate;          //  exponential
    int staircase;              //  exponential
    double alpha;               //  cosine, restarts: the floor, a fraction of lr
    double t_mul, m_mul;        //  restarts: 2, 1
    double end_learning_rate;   //  polynomial: 0.0001
    double power;               //  polynomial: 1
    int cycle;                  //  polynomial
    int boundary_count;         //  piecewise: boundaries [n], values [n + 1]
    double boundaries [ZA_SCHEDULE_PIECES_MAX];
    double values [ZA_SCHEDULE_PIECES_MAX + 1];
    double warmup_steps;        //  > 0: the rate rises linearly, (s + 1) / warmup of the
                                //  schedule's at warmup_steps, before it
    za_schedule_fn *fn;         //  ZA_SCHEDULE_FUNCTION: the function, this process's
    void *fn_arg;
} za_schedule_t;

typedef struct {
    za_optimizer_t kind;
    float learning_rate;
    float momentum;             //  Momentum: 0.9
    int nesterov;               //  Momentum: 0
    float beta1, beta2;         //  Adam: 0.9, 0.999
    float epsilon;              //  Adam: 1e-7 (Keras), Adagrad: 1e-7
    float initial_accumulator;  //  Adagrad: 0.1 (TensorFlow)
    float weight_decay;         //  decoupled, as Keras's weight_decay: before each
                                //  update w -= lr * weight_decay * w (AdamW, SGDW); 0: none
    za_schedule_t schedule;     //  zero: constant
    float global_clipnorm;      //  > 0: the whole gradient scaled to at most this global
                                //  norm before the update (Keras's global_clipnorm): by
                                //  the process that holds it whole (a worker before its
                                //  pushes, after the all-reduce); never travels to a ps
    int64_t slots_step;         //  Adam: the global step its slots started from (0: the
                                //  start); its bias correction counts the updates since,
                                //  as PyTorch's per-parameter step does (a layer that
                                //  trains from a resume on: za_replica's, per run)
} za_optim_config_t;

//  The defaults above for `kind`, with learning rate 1e-3 for Adam and 0.01
//  for the others (Keras's defaults).
za_optim_config_t za_optim_config_default (za_optimizer_t kind);

//  The config as the settings leave it (a kind, a learning rate or 0) made
//  whole: the kind's defaults, and its own learning rate unless one is set;
//  the weight decay, the clip and the schedule kept.
void za_optim_config_resolve (za_optim_config_t *config);

//  0 when the config can be applied: a known kind, every number finite, a
//  learning rate > 0; else -1 with why ("opt.lr ...") in why [size].
int za_optim_config_check (const za_optim_config_t *config, char *why, size_t size);

//  "sgd", "momentum", "adam", "adagrad" (case-insensitive). Returns 0, or -1
//  with an error listing the known names.
int za_optim_parse (const char *name, za_optimizer_t *kind);
//  The same, quietly: ZA_OPT_UNKNOWN for a name no optimizer has (a peer's).
za_optimizer_t za_optim_kind_of (const char *name);
//  1 for SGD, Momentum, Adam and Adagrad; 0 for ZA_OPT_UNKNOWN or anything else.
int za_optim_known (za_optimizer_t kind);
const char *za_optim_name (za_optimizer_t kind);

//  Reads a schedule as TensorFlow writes it: "cosine_decay(decay_steps=9375,
//  alpha=0.0)", "exponential_decay(decay_steps=1000, decay_rate=0.96,
//  staircase=true)", "piecewise_constant(boundaries=[1000, 2000],
//  values=[0.1, 0.01, 0.001])", "polynomial_decay(decay_steps=1000,
//  end_learning_rate=0.0001, power=1.0, cycle=false)",
//  "cosine_decay_restarts(first_decay_steps=1000, t_mul=2.0, m_mul=1.0,
//  alpha=0.0)", or "constant". Keeps warmup_steps. 0, or -1 with an error
//  that names the argument.
int za_schedule_parse (const char *text, za_schedule_t *schedule);
//  "constant", "exponential_decay", ... (NULL for none of them).
const char *za_schedule_name (za_schedule_kind_t kind);
//  The kind of that name, or -1.
int za_schedule_kind_of (const char *name);
//  Its numbers in a fixed order (ZA_SCHEDULE_NUMBERS), and back: for the wire.
void za_schedule_numbers (const za_schedule_t *schedule, double *numbers);
void za_schedule_from_numbers (za_schedule_t *schedule, const double *numbers);

#ifdef __cplusplus
}
#endif
#endif
