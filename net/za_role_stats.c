/*  za_role_stats.c: role state names and the statistics block's start
    values.                                                                 */
#include "za/za_role_stats.h"

#include <stddef.h>

const char *
za_role_state_name (za_role_state_t state)
{
    static const char *names [] = {"starting", "waiting", "running", "recovering", "done",
                                   "failed"};
    return (int) state >= 0 && state <= ZA_ROLE_FAILED? names [state]: "unknown";
}

const char *
za_phase_name (int phase)
{
    static const char *names [] = {"input", "compute", "exchange", "apply"};
    return phase >= 0 && phase < ZA_PHASES? names [phase]: NULL;
}

void
za_role_stats_init (za_role_stats_t *stats)
{
    atomic_store (&stats->global_step, 0);
    atomic_store (&stats->loss, 0.0);
    atomic_store (&stats->steps_per_sec, 0.0);
    atomic_store (&stats->examples_per_sec, 0.0);
    atomic_store (&stats->eval_step, -1);
    atomic_store (&stats->eval_accuracy, -1.0);
    atomic_store (&stats->alive, 0.0);
    atomic_store (&stats->ring_rank, -1);
    atomic_store (&stats->wait_ms, 0.0);
    atomic_store (&stats->bad_images, (int64_t) 0);
    atomic_store (&stats->images, (int64_t) 0);
    atomic_store (&stats->step_ms, 0.0);
    for (int phase = 0; phase < ZA_PHASES; phase++)
        atomic_store (&stats->phase_ms [phase], 0.0);
    atomic_store (&stats->exchange_waits, 0);
    atomic_store (&stats->state, ZA_ROLE_STARTING);
}
