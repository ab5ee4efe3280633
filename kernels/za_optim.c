/*  za_optim.c: SGD, Momentum, Adam and Adagrad as one loop each over the
    contiguous parameter block.                                              */
#include "za/za_optim.h"
#include "za/za_util.h"
#include "za_elem.h"

#include <math.h>
#include <string.h>

int
za_optim_slot_count (za_optimizer_t kind)
{
    return kind == ZA_OPT_ADAM? 2: kind == ZA_OPT_SGD? 0: 1;
}

const char *
za_optim_slot_name (za_optimizer_t kind, int slot)
{
    switch (kind) {
        case ZA_OPT_MOMENTUM: return "momentum";
        case ZA_OPT_ADAM:     return slot == 0? "m": "v";
        case ZA_OPT_ADAGRAD:  return "accumulator";
        default:              return "?";
    }
}

void
za_optim_init_slots (const za_optim_config_t *config, float **slots, size_t n)
{
    int count = za_optim_slot_count (config->kind);
    for (int s = 0; s < count; s++) {
        if (config->kind == ZA_OPT_ADAGRAD)
            for (size_t i = 0; i < n; i++)
                slots [s][i] = config->initial_accumulator;
        else
            memset (slots [s], 0, n * sizeof (float));
    }
}

double
za_optim_clip_by_global_norm (float *grads, const size_t *offset, const size_t *size,
                              int count, float clip)
{
    double squares = 0;
    for (int r = 0; r < count; r++)
        for (size_t i = 0; i < size [r]; i++)
            squares += (double) grads [offset [r] + i] * grads [offset [r] + i];
    double norm = sqrt (squares);
    if (clip > 0 && norm > clip) {
        float scale = (float) (clip / norm);
        for (int r = 0; r < count; r++)
            for (size_t i = 0; i < size [r]; i++)
                grads [offset [r] + i] *= scale;
    }
    return norm;
}

double
za_optim_learning_rate (const za_optim_config_t *c, int64_t step)
{
    return za_elem_learning_rate (c, step);
}

void
za_optim_apply (const za_optim_config_t *c, int64_t step, float *w, const float *g,
                float **slots, size_t n)
{
    za_optim_apply_into (c, step, w, w, g, slots, n);
}

void
za_optim_apply_into (const za_optim_config_t *c, int64_t step, const float *in, float *w,
                     const float *g, float **slots, size_t n)
{
    const float lr = za_elem_learning_rate (c, step);
    //  Decoupled weight decay first (Keras's weight_decay), then the update
    //  on the decayed values, in place.
    if (c->weight_decay > 0) {
        const float keep = 1.0f - lr * c->weight_decay;
        for (size_t i = 0; i < n; i++)
            w [i] = in [i] * keep;
        in = w;
    }
    switch (c->kind) {
        case ZA_OPT_SGD:
            for (size_t i = 0; i < n; i++)
                w [i] = za_elem_sgd (lr, in [i], g [i]);
            break;
        case ZA_OPT_MOMENTUM: {
            float *a = slots [0];
            if (c->nesterov)
                for (size_t i = 0; i < n; i++)
                    w [i] = za_elem_momentum (lr, c->momentum, 1, in [i], g [i], &a [i]);
            else
                for (size_t i = 0; i < n; i++)
                    w [i] = za_elem_momentum (lr, c->momentum, 0, in [i], g [i], &a [i]);
            break;
        }
        case ZA_OPT_ADAM: {
            float *m = slots [0], *v = slots [1];
            const float m_scale = za_elem_bias_correction (c->beta1, step);
            const float v_scale = za_elem_bias_correction (c->beta2, step);
            for (size_t i = 0; i < n; i++)
                w [i] = za_elem_adam (lr, c->beta1, c->beta2, c->epsilon, m_scale, v_scale,
                                      in [i], g [i], &m [i], &v [i]);
            break;
        }
        case ZA_OPT_ADAGRAD: {
            float *a = slots [0];
            for (size_t i = 0; i < n; i++)
                w [i] = za_elem_adagrad (lr, c->epsilon, in [i], g [i], &a [i]);
            break;
        }
        case ZA_OPT_UNKNOWN:        //  never applied: za_optim_config_check refuses it
            break;
    }
}
