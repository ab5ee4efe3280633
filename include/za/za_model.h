/*  za_model.h: models. A model is a model_fn (the Estimator contract: given
    features, labels and a mode, compute logits, the loss and in TRAIN the
    gradients) over variables that live in one contiguous block described by a
    (name, offset, shape) table. The layer stack, written as text such as
    "conv2d(32,3,relu) maxpool(2) flatten dense(10)" or built from C, is the
    model_fn most users need; dnn_classifier and linear_classifier are
    premade stacks.                                                        */
#ifndef ZA_MODEL_H_INCLUDED
#define ZA_MODEL_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_MAX_VARS 64
#define ZA_VAR_NAME_MAX 64
#define ZA_MAX_DIMS 4
#define ZA_MAX_LAYERS 32
#define ZA_SPEC_TEXT_MAX 1024

// ---------------------------------------------------------------------------
//  Variables: one block, a table of (name, offset, shape).

typedef struct {
    char name [ZA_VAR_NAME_MAX];
    size_t offset;                      //  in floats from the block's start
    size_t size;                        //  floats
    int ndim;
    int64_t shape [ZA_MAX_DIMS];
    int frozen;                         //  1: not trained (Keras's trainable=False):
                                        //  no update, no slots, a zero gradient
} za_var_t;

typedef struct {
    int count;
    za_var_t vars [ZA_MAX_VARS];
    size_t total;                       //  floats in the block
} za_vars_t;

//  Appends a variable; offsets are padded to 16 floats so each variable starts
//  64-byte aligned. Returns its index, or -1 with an error (table full, name
//  too long or taken, empty shape).
int za_vars_add (za_vars_t *vars, const char *name, int ndim, const int64_t *shape);
//  Index of the variable named `name`, or -1.
int za_vars_find (const za_vars_t *vars, const char *name);

// ---------------------------------------------------------------------------
//  The Estimator contract.

typedef enum { ZA_MODE_TRAIN = 0, ZA_MODE_EVAL = 1, ZA_MODE_PREDICT = 2 } za_mode_t;

//  What a model_fn returns for one batch (TensorFlow's EstimatorSpec).
typedef struct {
    const float *logits;        //  [n, n_classes], owned by the model state
    int n_classes;
    double loss_sum;            //  sum of per-example losses (TRAIN, EVAL)
    int correct;                //  examples whose argmax equals the label
} za_spec_t;

//  The shape of one input example (NHWC without N).
typedef struct {
    int height, width, channels;
} za_input_shape_t;

//  A model_fn's own metric: the evaluation zeroes state_size bytes, calls
//  update for each batch's examples (their logits [n, n_classes] and labels;
//  from several threads' slices, one call at a time) and result once at the
//  end. Its value is the scalar `name` in metrics.jsonl and TensorBoard.
typedef struct {
    const char *name;
    size_t state_size;
    void (*update) (void *state, const float *logits, const int32_t *labels, int n,
                    int n_classes);
    double (*result) (const void *state);
} za_metric_fn_t;

typedef struct {
    const char *name;
    //  Declares the model's variables in `vars` and returns its private state,
    //  planned for batches of up to batch_max examples (every buffer a step
    //  needs is allocated here; the step allocates nothing). NULL on error.
    void *(*create) (const void *params, za_input_shape_t input, int batch_max,
                     const za_backend_t *backend, za_vars_t *vars);
    //  Writes the variables' starting values into `values` (seeded).
    void (*init_vars) (void *state, const za_vars_t *vars, float *values,
                       uint64_t seed);
    //  The model_fn. features [n, H*W*C], labels [n] (NULL in PREDICT),
    //  n <= batch_max. In TRAIN it adds d(mean loss)/d(variables) into grads;
    //  in EVAL and PREDICT grads is NULL. `step` seeds dropout. Returns 0 or
    //  -1 with an error.
    int (*model_fn) (void *state, const float *features, const int32_t *labels,
                     int n, za_mode_t mode, const float *values, float *grads,
                     int64_t step, za_spec_t *spec);
    //  Frees the state, sets *state_p to NULL.
    void (*destroy) (void **state_p);
    //  A text that names the model for checkpoint metadata (may be NULL).
    const char *(*describe) (const void *params);
    //  1: every buffer it touches goes through the back end (its calls and
    //  buffer_alloc), so it runs on any device; 0: it reads or writes memory
    //  itself and runs on the CPU alone.
    int device_ready;
    //  Its own evaluation metrics (tf.metrics, Keras's Metric), reported
    //  beside loss and accuracy (za_eval_metrics.h); NULL: none.
    const za_metric_fn_t *metrics;
    int metric_count;
    //  Optional: 1 when a TRAIN call does the same work on the same buffers
    //  at every step for the same inputs and n (nothing drawn from `step`,
    //  nothing derived once and kept across steps), so that a device may
    //  record it once and replay it (a CUDA graph); NULL or 0: never.
    int (*replayable) (const void *state);
} za_model_fn_t;

//  Optional, from a model_fn in TRAIN: the gradients at offsets >= `offset`
//  of the block are final for this call (backward adds nothing to them
//  after). A model_fn that never says so is final when it returns. The
//  replica listens (za_model_on_grads_final, per thread) so that a
//  synchronous strategy reduces the last layers' gradients while backward
//  is still at the first ones. The layer stack says so after each layer.
void za_model_grads_final (size_t offset);

typedef void (za_grads_final_fn) (void *arg, size_t offset);
//  This thread's listener for za_model_grads_final (NULL: none).
void za_model_on_grads_final (za_grads_final_fn *fn, void *arg);

//  A model_fn in TRAIN may say where its forward pass (and the loss) ends
//  and backward begins: the trace (--trace) then shows the two apart on
//  the compute row. za_model_forward_done takes the time (while tracing;
//  else nothing); the replica takes it back after the call (0: not said).
void za_model_forward_done (void);
double za_model_take_forward_done (void);

//  mixed_float16's loss scale for this call (1 in other precisions): a
//  model_fn in TRAIN multiplies its loss's gradient (the logits' gradient
//  softmax_xent gave) by it before its backward pass, so that small
//  gradients survive float16 (Keras's LossScaleOptimizer). The replica
//  divides the summed gradient by it again, and fails a model_fn that never
//  asked while the scale is not 1.
float za_model_loss_scale (void);
//  The replica's: the scale of this thread's next model_fn call; and
//  whether that call asked for it since.
void za_model_set_loss_scale (float scale);
int za_model_loss_scale_asked (void);

//  On a device the loss can wait for the step's end: while the replica
//  defers it, za_model_loss_deferred () is 1 and a model_fn may add its
//  loss through the back end's softmax_xent_add (returning loss_sum 0 and
//  correct 0, labels not checked): the replica reads the sums, and fails
//  the step on a label outside [0, n_classes), after the step's work, so
//  that nothing waits for the device in the middle of it. Asking says the
//  model_fn took the offer; one that never asks returns its loss itself.
int za_model_loss_deferred (void);
//  The replica's: whether this thread's next call may defer; whether it did.
void za_model_set_loss_deferred (int deferred);
int za_model_loss_deferred_taken (void);

//  A number that stays the same while the values this thread's model_fn
//  calls read stay the same: the replica gives every batch a new one (its
//  threads read the values, nothing writes them, until the batch ends).
//  0, the default, says nothing: every call reads the values anew. A back
//  end may keep what it derives from a kernel (oneDNN's reordered copy)
//  for as long as the number holds.
void za_model_set_values_epoch (uint64_t epoch);
uint64_t za_model_values_epoch (void);
//  The same for the frozen variables alone (trainable=False): a number the
//  replica keeps from batch to batch while nothing but its optimizer, which
//  never writes a frozen variable, has written the values (a restore, a
//  pull from the ps, a ring's broadcast, any za_replica_values caller draws
//  a new one). A layer whose variables are all frozen runs under it as its
//  values epoch, so what a back end derives from its kernel lasts across
//  batches. 0: says nothing.
void za_model_set_frozen_epoch (uint64_t epoch);
uint64_t za_model_frozen_epoch (void);

// ---------------------------------------------------------------------------
//  Layer stacks.

//  The layer types, one row each: the type's enum value (ZA_LAYER_CONV2D, ...)
//  and its name; kernels/za_layer_NAME.c holds all of it (parser, shape,
//  variables, forward and backward). A new layer is a new source and a row.
#define ZA_LAYER_TYPES(X)            \
    X (CONV2D, conv2d)               \
    X (MAXPOOL, maxpool)             \
    X (FLATTEN, flatten)             \
    X (DENSE, dense)                 \
    X (RELU, relu)                   \
    X (DROPOUT, dropout)             \
    X (GLOBALAVGPOOL, globalavgpool)

typedef enum {
#define ZA_LAYER_ENUM(TYPE, name) ZA_LAYER_##TYPE,
    ZA_LAYER_TYPES (ZA_LAYER_ENUM)
#undef ZA_LAYER_ENUM
    ZA_LAYER_TYPE_COUNT
} za_layer_type_t;

typedef struct {
    za_layer_type_t type;
    int units;                  //  conv2d filters, dense units
    int kernel;                 //  conv2d kernel size
    int stride;                 //  conv2d stride (1), maxpool stride (= pool)
    za_padding_t padding;       //  conv2d (valid)
    int pool;                   //  maxpool window
    za_act_t act;               //  conv2d, dense (none)
    float rate;                 //  dropout
    int frozen;                 //  conv2d, dense: trainable=false
    float l2;                   //  conv2d, dense: l2=F, Keras's kernel_regularizer L2:
                                //  the kernel's gradient gains 2 F w
} za_layer_spec_t;

#define ZA_REGEX_MAX 256

typedef struct {
    int count;
    za_layer_spec_t layers [ZA_MAX_LAYERS];
    char text [ZA_SPEC_TEXT_MAX];   //  canonical text, set by za_stack_finish
    //  Variables frozen by name (extended regexes matched from the start,
    //  "" for none): those `freeze` selects, and, when `trainable` is given,
    //  those it does not select.
    char freeze [ZA_REGEX_MAX];
    char trainable [ZA_REGEX_MAX];
    //  1: what the frozen layers below the lowest that trains make of an
    //  example is computed once and kept (bf16, in memory), so the next
    //  epochs run the layers that train alone (CPU only)
    int cache_frozen;
} za_stack_spec_t;

//  Parses a stack. Grammar: layers separated by spaces;
//    conv2d(FILTERS, KERNEL [, STRIDE] [, relu] [, same|valid]
//           [, stride=S] [, padding=same|valid] [, activation=relu|none])
//    maxpool(POOL [, STRIDE])   flatten   relu   dropout(RATE)
//    dense(UNITS [, relu] [, activation=relu|none])   globalavgpool
//  ("linear" means none.) An option a layer does not take (a padding on
//  maxpool, a stride on dense, an activation on dropout) is an error. A dense
//  layer on a non-flat input flattens it first (Keras's Dense would act on the
//  last axis). The last layer must be dense (its units are the classes). On a
//  mistake it returns -1 with an error that quotes the text and points at the
//  bad token.
int za_stack_parse (const char *text, za_stack_spec_t *spec);
//  Appends the layers written in `text` (the grammar above) to a stack, as
//  Keras's model.add: the one C builder every layer type has. Finish the
//  stack with za_stack_finish. 0, or -1 with an error pointing into text.
int za_stack_add (za_stack_spec_t *spec, const char *text);

//  C builders of the first layer types (za_stack_add builds any). Each
//  returns 0 or -1 with an error (stack full, bad argument).
void za_stack_init (za_stack_spec_t *spec);
int za_stack_conv2d (za_stack_spec_t *spec, int filters, int kernel, int stride,
                     za_padding_t padding, za_act_t act);
int za_stack_maxpool (za_stack_spec_t *spec, int pool, int stride);
int za_stack_flatten (za_stack_spec_t *spec);
int za_stack_dense (za_stack_spec_t *spec, int units, za_act_t act);
int za_stack_relu (za_stack_spec_t *spec);
int za_stack_dropout (za_stack_spec_t *spec, float rate);
//  Checks the stack (ends in dense) and writes its canonical text.
int za_stack_finish (za_stack_spec_t *spec);

//  Premade models (TensorFlow's DNNClassifier and LinearClassifier): a flatten,
//  dense(h, relu) per hidden layer, dense(n_classes). n_classes >= 2.
int za_dnn_classifier_spec (za_stack_spec_t *spec, const int *hidden_units,
                            int hidden_count, int n_classes);
int za_linear_classifier_spec (za_stack_spec_t *spec, int n_classes);

//  The seed CNN of the TensorFlow Estimator tutorials for Fashion-MNIST.
#define ZA_SEED_CNN "conv2d(32,3,relu) maxpool(2) conv2d(64,3,relu) maxpool(2) " \
                    "conv2d(64,3,relu) flatten dense(64,relu) dense(10)"
//  VGG16's convolutional base (Keras's VGG16 with include_top=False: 13
//  3x3 convolutions in 5 blocks, each block ending in a 2x2 max pool). The
//  word `vgg16` in a stack text is these layers; `vgg16(trainable=false)`
//  freezes them.
#define ZA_VGG16_BASE "conv2d(64,3,relu,same) conv2d(64,3,relu,same) maxpool(2) " \
    "conv2d(128,3,relu,same) conv2d(128,3,relu,same) maxpool(2) " \
    "conv2d(256,3,relu,same) conv2d(256,3,relu,same) conv2d(256,3,relu,same) maxpool(2) " \
    "conv2d(512,3,relu,same) conv2d(512,3,relu,same) conv2d(512,3,relu,same) maxpool(2) " \
    "conv2d(512,3,relu,same) conv2d(512,3,relu,same) conv2d(512,3,relu,same) maxpool(2)"

//  The model_fn of a layer stack; `params` is a za_stack_spec_t *. Variables
//  are named like Keras's: conv2d/kernel, conv2d/bias, conv2d_1/kernel, ...,
//  dense/kernel, dense_1/kernel; kernels Glorot-uniform, biases zero.
const za_model_fn_t *za_stack_model_fn (void);

//  Floating-point operations of one forward pass of one example through the
//  stack (multiply-add = 2), for GFLOP/s figures. -1 on a bad stack.
double za_stack_forward_flops (const za_stack_spec_t *spec, za_input_shape_t input);

//  Where a step's time goes, layer by layer, for benchmarks (bench_train's
//  ZA_BENCH_PROFILE): off until started. While on, the stacks of every
//  thread add each layer's wall time to row i (its index in the stack; a
//  convolution that went as one with the max-pool after it holds the
//  pair's) and the loss's to row ZA_MAX_LAYERS. Meant for CPU back ends: a
//  GPU's calls return before its kernels end.
void za_stack_profile_start (void);
void za_stack_profile_stop (void);
//  Row i's summed forward and backward seconds and the layer's name (NULL
//  for a row no layer used): 0, or -1 for i outside [0, ZA_MAX_LAYERS].
int za_stack_profile_get (int i, double *forward, double *backward, const char **name);

#ifdef __cplusplus
}
#endif
#endif
