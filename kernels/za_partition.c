/*  za_partition.c: greedy placement of variables (and parts of large ones) over
    the ps, largest first onto the least-loaded ps, the same on every role.     */
#include "za/za_partition.h"
#include "za/za_util.h"

#include <stdio.h>
#include <string.h>

//  Variable indexes sorted by size, largest first, equal sizes by index. An
//  insertion sort: stable, and the table holds at most ZA_MAX_VARS.
static void
s_sort_by_size (const za_vars_t *vars, int *order)
{
    for (int i = 0; i < vars->count; i++) {
        int var = i;
        int slot = i;
        while (slot > 0 && vars->vars [order [slot - 1]].size < vars->vars [var].size) {
            order [slot] = order [slot - 1];
            slot--;
        }
        order [slot] = var;
    }
}

//  The ps with the fewest floats so far (equal loads: lowest index).
static int
s_least_loaded (const za_partition_t *self)
{
    int best = 0;
    for (int ps = 1; ps < self->ps_count; ps++)
        if (self->ps_floats [ps] < self->ps_floats [best])
            best = ps;
    return best;
}

int
za_partition_compute (const za_vars_t *vars, int ps_count, size_t partition_floats,
                      za_partition_t *out)
{
    if (!vars || !out)
        return za_error ("placement: no variable table or no output");
    if (ps_count < 1 || ps_count > ZA_PARTITION_MAX_PS)
        return za_error ("placement: ps count %d is not in 1..%d", ps_count,
                         ZA_PARTITION_MAX_PS);
    if (vars->count < 0 || vars->count > ZA_MAX_VARS)
        return za_error ("placement: variable count %d is not in 0..%d", vars->count,
                         ZA_MAX_VARS);
    memset (out, 0, sizeof *out);
    out->ps_count = ps_count;

    int order [ZA_MAX_VARS];
    s_sort_by_size (vars, order);
    for (int rank = 0; rank < vars->count; rank++) {
        int var = order [rank];
        const za_var_t *variable = &vars->vars [var];
        size_t part_count = 1;
        if (partition_floats > 0 && variable->size > partition_floats)
            part_count = (variable->size + partition_floats - 1) / partition_floats;
        if (part_count > (size_t) (ZA_PARTITION_MAX_PARTS - out->count))
            return za_error ("placement: more than %d parts needed (variable %s alone makes "
                             "%zu parts of at most %zu floats): raise the partition size",
                             ZA_PARTITION_MAX_PARTS, variable->name, part_count,
                             partition_floats);
        size_t base = variable->size / part_count;
        size_t extra = variable->size % part_count;
        size_t offset = 0;
        for (size_t k = 0; k < part_count; k++) {
            za_part_t *part = &out->parts [out->count];
            int len = part_count == 1
                    ? snprintf (part->name, sizeof part->name, "%s", variable->name)
                    : snprintf (part->name, sizeof part->name, "%s/part_%zu", variable->name, k);
            if (len < 0 || (size_t) len >= sizeof part->name)
                return za_error ("placement: part name of %s is too long", variable->name);
            part->var = var;
            part->offset = offset;
            part->size = base + (k < extra ? 1 : 0);
            part->ps = s_least_loaded (out);
            out->ps_floats [part->ps] += part->size;
            offset += part->size;
            out->count++;
        }
    }
    return 0;
}

int
za_partition_parts_of (const za_partition_t *self, int ps, int *idx, int max)
{
    if (!self || ps < 0 || ps >= self->ps_count)
        return za_error ("placement: ps %d is not in 0..%d", ps, self ? self->ps_count - 1 : -1);
    if (max < 0 || (max > 0 && !idx))
        return za_error ("placement: no room for the part indexes");
    int found = 0;
    for (int part = 0; part < self->count; part++)
        if (self->parts [part].ps == ps) {
            if (found < max)
                idx [found] = part;
            found++;
        }
    return found;
}
