/*  za_optim.c: SGD, Momentum, Adam and Adagrad as one loop each over the
    contiguous parameter block. The loops flush subnormal floats to zero
    (MXCSR's FTZ and DAZ, as TensorFlow's CPU threads run): late in
    training Adam's second moments and some gradients fall below 2^-126,
    and there x86 takes a microcode assist per value: the seed CNN's
    update then took 6x its time (280 us a step instead of 45).         */
#include "za/za_optim.h"
#include "za/za_util.h"
#include "za_elem.h"

#include <math.h>
#include <string.h>
#if defined (__SSE__)
#include <xmmintrin.h>
#endif

//  MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6).
#define S_FTZ_DAZ 0x8040u

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

//  The loops below run vectorised whether `in` is `w` or another block: the
//  two are the same or do not overlap (za_optim.h), so no iteration reads
//  what another writes, which S_IVDEP tells the compiler (its run-time
//  overlap test would otherwise send the in-place update, the common one,
//  to a scalar loop). The settings are read into locals first: a store
//  through w could be a store into *c as far as the compiler knows. Clang
//  (the fuzzing build) gets no hint: its "vectorize(assume_safety)" is an
//  error under -Werror wherever it cannot vectorise, as with sanitizers.
#if defined (__GNUC__) && !defined (__clang__)
#   define S_IVDEP _Pragma ("GCC ivdep")
#else
#   define S_IVDEP
#endif

void
za_optim_apply_into (const za_optim_config_t *c, int64_t step, const float *in, float *w,
                     const float *g, float **slots, size_t n)
{
#if defined (__SSE__)
    const unsigned int csr = _mm_getcsr ();
    _mm_setcsr (csr | S_FTZ_DAZ);
#endif
    const float lr = za_elem_learning_rate (c, step);
    const float mu = c->momentum, b1 = c->beta1, b2 = c->beta2, eps = c->epsilon;
    //  Decoupled weight decay first (Keras's weight_decay), then the update
    //  on the decayed values, in place.
    if (c->weight_decay > 0) {
        const float keep = fmaf (-lr, c->weight_decay, 1.0f);
        S_IVDEP
        for (size_t i = 0; i < n; i++)
            w [i] = in [i] * keep;
        in = w;
    }
    switch (c->kind) {
        case ZA_OPT_SGD:
            S_IVDEP
            for (size_t i = 0; i < n; i++)
                w [i] = za_elem_sgd (lr, in [i], g [i]);
            break;
        case ZA_OPT_MOMENTUM: {
            float *restrict a = slots [0];
            if (c->nesterov) {
                S_IVDEP
                for (size_t i = 0; i < n; i++)
                    w [i] = za_elem_momentum (lr, mu, 1, in [i], g [i], &a [i]);
            }
            else {
                S_IVDEP
                for (size_t i = 0; i < n; i++)
                    w [i] = za_elem_momentum (lr, mu, 0, in [i], g [i], &a [i]);
            }
            break;
        }
        case ZA_OPT_ADAM: {
            float *restrict m = slots [0], *restrict v = slots [1];
            //  (At least one update: a step back to the slots' start is none.)
            const int64_t updates = step > c->slots_step? step - c->slots_step: 1;
            const float m_scale = za_elem_bias_correction (b1, updates);
            const float v_scale = za_elem_bias_correction (b2, updates);
            S_IVDEP
            for (size_t i = 0; i < n; i++)
                w [i] = za_elem_adam (lr, b1, b2, eps, m_scale, v_scale, in [i], g [i], &m [i],
                                      &v [i]);
            break;
        }
        case ZA_OPT_ADAGRAD: {
            float *restrict a = slots [0];
            S_IVDEP
            for (size_t i = 0; i < n; i++)
                w [i] = za_elem_adagrad (lr, eps, in [i], g [i], &a [i]);
            break;
        }
        case ZA_OPT_UNKNOWN:        //  never applied: za_optim_config_check refuses it
            break;
    }
#if defined (__SSE__)
    _mm_setcsr (csr);
#endif
}
