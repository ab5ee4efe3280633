/*  za_layer.h: what a layer type is to the layer stack. Each type lives in one
    source, kernels/za_layer_NAME.c, that defines one za_layer_ops_t named
    za_layer_NAME (its parser, canonical text, shape, variables, forward and
    backward side by side) and has one row in ZA_LAYER_TYPES (za_model.h).
    Internal to kernels/; not installed.                                     */
#ifndef ZA_LAYER_H_INCLUDED
#define ZA_LAYER_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_model.h"

#define ZA_LAYER_ARGS_MAX 8
#define ZA_LAYER_INT_MAX 1000000

//  The shape of one example between two layers (NHWC without N; a flat
//  vector is 1 x 1 x C).
typedef struct {
    int h, w, c;
} za_shape_t;

// ---------------------------------------------------------------------------
//  Parsing: the stack's parser reads a layer's name and its arguments and the
//  options every layer shares (stride=, padding=, activation= and their bare
//  words same, valid, relu, none, linear); it refuses the options a type's
//  `takes` leaves out, then hands the rest to the type's parse.

enum {
    ZA_TAKES_STRIDE = 1,
    ZA_TAKES_PADDING = 2,
    ZA_TAKES_ACTIVATION = 4
};

typedef struct {
    const char *text;                   //  the whole stack text, for errors
    const char *name;                   //  the layer's name as read, lower case
    const char *end_at;                 //  the last argument (or the name)
    int count;                          //  positional arguments
    const char *value [ZA_LAYER_ARGS_MAX];
    const char *at [ZA_LAYER_ARGS_MAX];
    int stride;                         //  0: not given
    const char *stride_at;
    za_padding_t padding;
    za_act_t act;
    int frozen;                         //  trainable=false
    const char *frozen_at;
    float l2;                           //  l2=F
    const char *l2_at;
} za_layer_args_t;

//  Reports a mistake at `at` in the text (fmt has one %s for `what`), with a
//  caret under its column. Returns -1.
int za_layer_args_error (const za_layer_args_t *args, const char *at, const char *fmt,
                         const char *what);
//  Reads a positive integer (at most ZA_LAYER_INT_MAX) written alone in s.
//  0, or -1 without an error.
int za_layer_parse_int (const char *s, int *value);
//  Reads the positional arguments as positive integers, at most `max` of
//  them. Returns how many, or -1 after reporting the first that is not one.
int za_layer_args_ints (const za_layer_args_t *args, int max, int *ints);
//  -1 with "NAME takes no arguments" when any is given, else 0.
int za_layer_args_none (const za_layer_args_t *args);

//  Appends a layer of `type` to the stack, zeroed; NULL with an error when
//  the stack is full.
za_layer_spec_t *za_stack_push (za_stack_spec_t *spec, za_layer_type_t type);

// ---------------------------------------------------------------------------
//  A planned stack: each layer's place, buffers and variables.

typedef struct {
    za_layer_spec_t spec;
    int index;                          //  in the stack, from 0
    za_shape_t in_shape, out_shape;
    size_t in_size, out_size;           //  floats per example
    int kernel_var, bias_var;           //  indices into the vars table, or -1
    float *out, *dout;                  //  [batch_max, out_size]; may alias
    float *cols;                        //  conv2d im2col, kept for backward
    int32_t *argmax;                    //  maxpool
    float *mask;                        //  dropout
    int owns_out;
} za_layer_t;

//  What plan gets: where variables are declared and buffers come from.
typedef struct {
    const za_backend_t *be;
    za_vars_t *vars;
    int batch_max;
    int seen;                           //  earlier layers of this type
    size_t scratch_floats;              //  the largest backward scratch asked
    za_var_t *copies;                   //  the stack's copy of the table
    int *copy_count;
} za_layer_plan_t;

//  Declares variable `what` of the layer, named like Keras's ("conv2d/kernel",
//  "conv2d_1/kernel", ...). Returns its index, or -1 with an error.
int za_layer_declare (za_layer_plan_t *plan, const char *base, const char *what,
                      int ndim, const int64_t *shape);

//  One forward or backward call of a layer for a batch of n.
typedef struct {
    const za_backend_t *be;
    int n;
    int train;
    const float *in;                    //  the layer's input [n, in_size]
    const float *kernel, *bias;         //  its variables' values, or NULL
    float *din;                         //  backward: d(loss)/d(in), or NULL
    float *dkernel, *dbias;             //  backward: gradients, or NULL
    float *scratch;                     //  backward scratch (plan's largest)
    uint64_t seed;                      //  draws of this layer at this step
} za_layer_call_t;

typedef struct {
    const char *name;                   //  in the stack text and variable names
    const char *alias;                  //  another name the parser takes, or NULL
    unsigned takes;                     //  ZA_TAKES_* options it accepts
    //  Adds the layer from its arguments to the stack. 0 or -1 (reported).
    int (*parse) (const za_layer_args_t *args, za_stack_spec_t *stack);
    //  Its canonical text; returns what snprintf returns.
    int (*format) (const za_layer_spec_t *spec, char *buf, size_t size);
    //  Its output shape for an input of `in`, checked at a batch of n.
    //  NULL: the shape is unchanged. -1 when the input does not fit.
    int (*shape) (const za_layer_spec_t *spec, int n, za_shape_t in, za_shape_t *out);
    //  Multiply-adds times 2 of one example's forward. NULL: none counted.
    double (*flops) (const za_layer_spec_t *spec, za_shape_t in, za_shape_t out);
    //  Declares its variables and allocates its buffers other than out and
    //  dout (freed by the stack). NULL: none. 0 or -1 with an error.
    int (*plan) (za_layer_t *layer, za_layer_plan_t *plan);
    //  Writes its variables' starting values. NULL: it has none.
    void (*init_vars) (const za_layer_t *layer, const za_vars_t *vars, float *values,
                       uint64_t seed);
    void (*forward) (const za_layer_t *layer, const za_layer_call_t *call);
    //  Adds into din (when not NULL) and into its variables' gradients.
    void (*backward) (const za_layer_t *layer, const za_layer_call_t *call);
    //  1: out and dout are its input's buffers (a reshape), none of its own.
    int reshapes;
} za_layer_ops_t;

#define ZA_LAYER_EXTERN(TYPE, name) extern const za_layer_ops_t za_layer_##name;
ZA_LAYER_TYPES (ZA_LAYER_EXTERN)
#undef ZA_LAYER_EXTERN

//  The type's operations (type < ZA_LAYER_TYPE_COUNT).
const za_layer_ops_t *za_layer_ops (za_layer_type_t type);
//  The type named `name` (or its alias), or NULL.
const za_layer_ops_t *za_layer_ops_find (const char *name);
//  "conv2d, maxpool, ..." for messages.
const char *za_layer_names (void);

//  A conv2d layer and the maxpool layer after it as one, where the back end
//  takes the pair (za_backend_t's conv2d_pool_*): the forward writes the
//  pool's output and argmax, not the convolution's; the backward (a first
//  layer's: no input gradient) reads the pool's output gradient. call is
//  the convolution's. 0, or -1 when each goes on its own (nothing written).
int za_layer_conv2d_pool_forward (const za_layer_t *conv, const za_layer_t *pool,
                                  const za_layer_call_t *call);
int za_layer_conv2d_pool_backward (const za_layer_t *conv, const za_layer_t *pool,
                                   const za_layer_call_t *call);

//  Glorot uniform (Keras's default) into a kernel, zeros into its bias.
void za_layer_init_glorot (const za_layer_t *layer, const za_vars_t *vars, float *values,
                           uint64_t seed, double fan_in, double fan_out);

#endif
