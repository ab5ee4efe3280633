/*  za_straggler.c: a trainer's own step time against the others' median,
    and its phase furthest above theirs.                                    */
#include "za_straggler.h"
#include "za/za_broker_config.h"

#include <stdlib.h>
#include <string.h>

double
za_step_own_ms (const za_step_times_t *times)
{
    double own = times->step_ms;
    if (times->exchange_waits)
        own -= times->phase_ms [ZA_PHASE_EXCHANGE];
    return own > 0? own: 0;
}

void
za_straggler_reset (za_straggler_t *self)
{
    memset (self, 0, sizeof *self);
    self->phase = -1;
}

static int
s_compare (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y? -1: x > y;
}

//  The median of values [0 .. count) (sorted in place); count > 0.
static double
s_median (double *values, int count)
{
    qsort (values, (size_t) count, sizeof values [0], s_compare);
    return count % 2? values [count / 2]: (values [count / 2 - 1] + values [count / 2]) / 2;
}

int
za_straggler_judge (za_straggler_t *self, const za_step_times_t *own,
                    const za_step_times_t *others, int count, double factor)
{
    if (factor <= 0 || count < 1 || own->step_ms <= 0)
        return 0;
    //  The trainers: the chief and the workers.
    double values [ZA_BROKER_MAX_TASKS + 1];
    if (count > ZA_BROKER_MAX_TASKS + 1)
        count = ZA_BROKER_MAX_TASKS + 1;
    for (int i = 0; i < count; i++)
        values [i] = za_step_own_ms (&others [i]);
    self->own_ms = za_step_own_ms (own);
    self->median_ms = s_median (values, count);
    self->slowdown = self->median_ms > 0? self->own_ms / self->median_ms: 0;
    //  The phase it spends furthest above the others (not the exchange
    //  that waits for them: a straggler waits least).
    self->phase = -1;
    self->phase_excess_ms = 0;
    for (int phase = 0; phase < ZA_PHASES; phase++) {
        if (phase == ZA_PHASE_EXCHANGE && own->exchange_waits)
            continue;
        for (int i = 0; i < count; i++)
            values [i] = others [i].phase_ms [phase];
        double excess = own->phase_ms [phase] - s_median (values, count);
        if (self->phase < 0 || excess > self->phase_excess_ms) {
            self->phase = phase;
            self->phase_excess_ms = excess;
        }
    }
    int slow = self->median_ms > 0 && self->own_ms > factor * self->median_ms;
    self->slow = slow? self->slow + 1: 0;
    self->fast = slow? 0: self->fast + 1;
    if (!self->straggler && self->slow >= ZA_STRAGGLER_REPORTS) {
        self->straggler = 1;
        return 1;
    }
    if (self->straggler && self->fast >= ZA_STRAGGLER_REPORTS) {
        self->straggler = 0;
        return -1;
    }
    return 0;
}
