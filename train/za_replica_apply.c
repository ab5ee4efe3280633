/*  za_replica_apply.c: a replica's optimizer update over the variables that
    train, clipping by the global norm, and mixed_float16's loss scale.   */
#include "za_replica_private.h"

#include <math.h>
#include <string.h>

//  mixed_float16's loss scale: Keras's dynamic_growth_steps.
#define LOSS_SCALE_GROWTH_STEPS 2000
#define LOSS_SCALE_MAX 0x1p24f          //  doubled no further (2^128 would be inf)

//  Calls the optimizer over share `share` of `shares` of each piece of the
//  runs of variables that train (frozen ones are never updated; the update is
//  element by element, so the values are the same however it is split), on
//  values, grads and slots in either memory.
static void
s_apply_trainable (za_replica_t *self, int64_t step, float *values, const float *grads,
                   float **slots, void (*apply) (const za_optim_config_t *, int64_t, float *,
                                                 const float *, float **, size_t),
                   int share, int shares)
{
    int slot_count = za_replica_slot_count (self);
    za_optim_config_t optim = self->optim;
    for (int r = 0; r < self->piece_count; r++) {
        size_t length = self->piece_to [r] - self->piece_from [r];
        size_t from = self->piece_from [r] + length * share / shares;
        size_t to = self->piece_from [r] + length * (share + 1) / shares;
        float *views [ZA_OPTIM_MAX_SLOTS];
        for (int s = 0; s < slot_count; s++)
            views [s] = slots [s] + from;
        optim.slots_step = self->piece_slots_step [r];
        apply (&optim, step, values + from, grads + from, views, to - from);
    }
}

//  The optimizer's update in host memory split over the replica's threads:
//  thread t takes the t-th share.
typedef struct {
    za_replica_t *self;
    int64_t step;
} s_apply_run_t;

static void
s_apply_share (void *arg, int t)
{
    s_apply_run_t *run = (s_apply_run_t *) arg;
    za_replica_t *self = run->self;
    s_apply_trainable (self, run->step, self->values, self->grads, self->slots, za_optim_apply,
                       t, self->threads);
}

int
za_replica_clip_gradients (za_replica_t *self, float clip)
{
    size_t size [ZA_MAX_VARS];
    for (int r = 0; r < self->run_count; r++)
        size [r] = self->run_to [r] - self->run_from [r];
    //  Where the newest copy is: the host's (a worker's, once its loss scale
    //  was checked there) or the first device's, without a wait.
    if (self->be->host_memory || self->grads_at == REPLICA_AT_HOST) {
        za_optim_clip_by_global_norm (self->grads, self->run_from, size, self->run_count, clip);
        return 0;
    }
    if (za_replica_bind (self))
        return -1;
    self->be->clip_by_global_norm (self->dev_grads [0], self->run_from, size, self->run_count,
                                   clip);
    self->grads_at = REPLICA_AT_DEVICE;
    return 0;
}

//  The loss scale's step for the gradient block `grads` (in the memory of
//  back end `be`): 1 when its trainable runs are finite, else 0, the scale
//  halved.
static int
s_loss_scale_step (za_replica_t *self, const za_backend_t *be, const float *grads)
{
    if (self->be->precision != ZA_PRECISION_FP16)
        return 1;
    int finite = 1;
    for (int r = 0; r < self->run_count && finite; r++)
        finite = be->all_finite (self->run_to [r] - self->run_from [r],
                                 grads + self->run_from [r]);
    if (finite) {
        if (++self->good_steps >= LOSS_SCALE_GROWTH_STEPS) {
            if (self->loss_scale < LOSS_SCALE_MAX)
                self->loss_scale *= 2.0f;
            self->good_steps = 0;
        }
        return 1;
    }
    self->loss_scale = self->loss_scale > 2.0f? self->loss_scale / 2.0f: 1.0f;
    self->good_steps = 0;
    self->skipped_steps++;
    return 0;
}

int
za_replica_loss_scale_check (za_replica_t *self)
{
    if (self->be->precision != ZA_PRECISION_FP16 || !self->train)
        return 1;
    float *grads = za_replica_gradients (self);
    if (s_loss_scale_step (self, za_backend_cpu (), grads))
        return 1;
    memset (grads, 0, self->vars.total * sizeof (float));
    return 0;
}

float
za_replica_loss_scale (const za_replica_t *self, int64_t *skipped)
{
    if (skipped)
        *skipped = self->skipped_steps;
    return self->be->precision == ZA_PRECISION_FP16? self->loss_scale: 0.0f;
}

void
za_replica_loss_scale_state (const za_replica_t *self, float *scale, int64_t *good_steps)
{
    *scale = self->loss_scale;
    *good_steps = self->good_steps;
}

void
za_replica_set_loss_scale (za_replica_t *self, float scale, int64_t good_steps)
{
    if (self->be->precision != ZA_PRECISION_FP16 || !isfinite (scale) || scale < 1
        || scale > LOSS_SCALE_MAX || good_steps < 0)
        return;
    self->loss_scale = scale;
    self->good_steps = good_steps;
}

void
za_replica_apply (za_replica_t *self, int64_t step)
{
    float clip = self->optim.global_clipnorm;
    if (self->be->host_memory) {
        //  An overflow in mixed_float16 updates nothing (values and slots as they were).
        if (!s_loss_scale_step (self, self->be, self->grads))
            return;
        if (clip > 0)
            za_replica_clip_gradients (self, clip);
        s_apply_run_t run = {self, step};
        if (self->threads > 1 && self->vars.total >= APPLY_SPLIT_MIN)
            za_parallel_run (self->pool, s_apply_share, &run);
        else
            s_apply_trainable (self, step, self->values, self->grads, self->slots,
                               za_optim_apply, 0, 1);
        return;
    }
    //  On the device: a failed copy shows at the next step's sync.
    if (za_replica_state_to_device (self)
        || za_replica_to_device (self, &self->grads_at, &self->grads, self->dev_grads, 1)
        || !s_loss_scale_step (self, self->be, self->dev_grads [0])
        || (clip > 0 && za_replica_clip_gradients (self, clip)))
        return;
    s_apply_trainable (self, step, self->device_values [0], self->dev_grads [0],
                       self->dev_slots, self->be->optim_apply, 0, 1);
    self->values_at = self->slots_at = REPLICA_AT_DEVICE;
    self->copies_stale = self->device_count > 1;
}
