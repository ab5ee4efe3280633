/*  za_role_private.h: what the ps and worker actors share and nobody else
    needs: the model's variable table, each part's wire shape, DONE reports. */
#ifndef ZA_ROLE_PRIVATE_H_INCLUDED
#define ZA_ROLE_PRIVATE_H_INCLUDED

#include "za/za_placement.h"
#include "za/za_role.h"
#include "za/za_wire.h"

//  The model's variable table (planned for one example, then let go).
int za_role_model_vars (const za_role_config_t *config, za_vars_t *vars);

//  The shape a part travels with: its variable's shape when whole, [size]
//  when the variable was split. Returns ndim.
int za_role_part_shape (const za_vars_t *vars, const za_part_t *part, int64_t *shape);

//  The optimizer as an init message carries it ("opt", docs/PROTOCOL.md 2),
//  and back: the one place its fields cross the wire. from_wire returns 0,
//  or -1 with a reason in `why` (no or an unknown optimizer, lr <= 0).
void za_role_optim_to_wire (const za_optim_config_t *optim, za_wire_msg_t *msg);
int za_role_optim_from_wire (const za_wire_msg_t *msg, za_optim_config_t *optim, char *why,
                             size_t size);

//  What a training loop publishes after each step (za_role_stats_t): rates
//  over the last one to two windows of ZA_ROLE_RATE_WINDOW_SECS, and a
//  moving average of the loss. Nothing allocated, relaxed stores only.
#define ZA_ROLE_RATE_WINDOW_SECS 2.0
typedef struct {
    double loss_average;
    double since_time, window_time;
    int64_t since_step, window_step, since_own_steps, window_own_steps;
} za_role_rates_t;

//  Counts rates from here (a start, or going on after a pause).
void za_role_rates_restart (za_role_rates_t *self, int64_t global_step, int64_t own_steps,
                            double now);
//  A step is done: own_steps of this task (1 for the first), its loss and
//  batch. stats may be NULL.
void za_role_rates_publish (za_role_rates_t *self, za_role_stats_t *stats,
                            int64_t global_step, int64_t own_steps, double loss, int batch,
                            double now);

//  A role that could not start: FAILED to its watchers, DONE 1 on the pipe.
void za_role_failed_start (zsock_t *pipe, za_role_stats_t *stats);

//  A role's end for its watchers: its last global_step, and DONE or FAILED
//  (rc 0 or not); a success stays RUNNING when the caller evaluates after
//  (config->evaluates_after). stats may be NULL.
void za_role_publish_end (const za_role_config_t *config, int rc, int64_t global_step);

//  CRC32 of a value block, as DONE reports it.
uint32_t za_role_values_crc (const float *values, size_t floats);

//  Sends the DONE report on the pipe and waits for $TERM.
void za_role_report_done (zsock_t *pipe, int rc, int64_t step, uint32_t crc, int64_t floats);

#endif
