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

//  Sends the DONE report on the pipe and waits for $TERM.
void za_role_report_done (zsock_t *pipe, int rc, int64_t step, uint32_t crc, int64_t floats);

#endif
