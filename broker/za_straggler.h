/*  za_straggler.h: which trainer holds the others back. Each trainer
    reports its recent time per step and in each phase (za_role_stats_t);
    its own time is the step less what it waits for the other trainers (a
    synchronous exchange). One whose own time stays above `factor` times the
    others' median for STRAGGLER_REPORTS reports in a row is a straggler,
    with the phase it spends furthest above theirs; it stops being one after
    as many reports in a row within the factor. No allocation, no clock:
    the registry calls it on each report.                                  */
#ifndef ZA_STRAGGLER_H_INCLUDED
#define ZA_STRAGGLER_H_INCLUDED

#include "za/za_role_stats.h"

#define ZA_STRAGGLER_REPORTS 3          //  in a row, to name one or to clear it

//  A trainer's recent step, as it reported it.
typedef struct {
    double step_ms;                     //  per step; 0: not known
    double phase_ms [ZA_PHASES];
    int exchange_waits;                 //  its exchange waits for the others
} za_step_times_t;

//  A trainer's judgement so far.
typedef struct {
    int straggler;                      //  1 while named
    int slow, fast;                     //  reports in a row above / within the factor
    double own_ms;                      //  its own time per step, last judged
    double median_ms;                   //  the others' median own time then
    double slowdown;                    //  own_ms / median_ms (0: not judged)
    int phase;                          //  its phase furthest above the others' (-1: none)
    double phase_excess_ms;             //  by how much, per step
} za_straggler_t;

//  A step's own time: less the exchange when that waits for the others.
double za_step_own_ms (const za_step_times_t *times);

//  Forgets a trainer's judgement (a new process, or it stopped training).
void za_straggler_reset (za_straggler_t *self);

//  Judges a report `own` against the others' latest (count of them; none:
//  nothing to judge). factor <= 0 judges nothing. Returns 1 when it has just
//  become a straggler, -1 when it has just stopped being one, else 0.
int za_straggler_judge (za_straggler_t *self, const za_step_times_t *own,
                        const za_step_times_t *others, int count, double factor);

#endif
