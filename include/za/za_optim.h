/*  za_optim.h: optimizers over one contiguous parameter block. Each optimizer
    is a short loop; its slots (momentum, Adam's m and v, Adagrad's
    accumulator) are blocks of the same length as the parameters.          */
#ifndef ZA_OPTIM_H_INCLUDED
#define ZA_OPTIM_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_optim_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_OPTIM_MAX_SLOTS 2

//  Slots this optimizer keeps (0, 1 or 2) and their names ("momentum", "m",
//  "v", "accumulator"), used as checkpoint tensor name suffixes.
int za_optim_slot_count (za_optimizer_t kind);
const char *za_optim_slot_name (za_optimizer_t kind, int slot);

//  Sets the slots' starting values (zero, or Adagrad's initial accumulator).
void za_optim_init_slots (const za_optim_config_t *config, float **slots, size_t n);

//  One update of n parameters with gradients `grads`. `step` counts updates
//  including this one (1 for the first), for Adam's bias correction.
//    SGD:      w -= lr * g
//    Momentum: a = mu * a + g;  w -= lr * a   (nesterov: w -= lr * (g + mu * a))
//    Adam:     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//              w -= lr * (m / (1 - b1^t)) / (sqrt (v / (1 - b2^t)) + eps)
//              (PyTorch's form, Keras's epsilon; t counted from the config's
//              slots_step)
//    Adagrad:  a += g^2;  w -= lr * g / (sqrt (a) + eps)
//  tf.clip_by_global_norm over `count` ranges of grads (offset [r], size [r]
//  floats each): every gradient times clip / max (norm, clip), the norm the
//  square root of all their squares. Returns the norm before clipping.
double za_optim_clip_by_global_norm (float *grads, const size_t *offset, const size_t *size,
                                     int count, float clip);

//  The learning rate of update `step` (1 for the first): the schedule's at
//  global step step - 1, after its warm-up (za_optim_config.h).
double za_optim_learning_rate (const za_optim_config_t *config, int64_t step);

void za_optim_apply (const za_optim_config_t *config, int64_t step, float *params,
                     const float *grads, float **slots, size_t n);
//  The same update written to `out` from `in` (the same block, or two that do
//  not overlap; slots are updated in place). A ps uses it to keep two value
//  blocks, one being sent while the other is updated.
void za_optim_apply_into (const za_optim_config_t *config, int64_t step, const float *in,
                          float *out, const float *grads, float **slots, size_t n);

#ifdef __cplusplus
}
#endif
#endif
