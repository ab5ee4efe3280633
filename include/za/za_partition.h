/*  za_partition.h: the model's variables partitioned over the ps: which ps
    holds which variable, or which part of one. Every role computes it from
    the variable table alone, so all agree without talking (not to be
    mistaken for runtime/za_place.c, which places a task in its cluster).

    The rule (PROTOCOL.md 3): greedy by bytes. Variables are taken largest first
    (equal sizes: lower index first). A variable larger than partition_floats is
    split into ceil(size / partition_floats) contiguous parts whose sizes differ
    by at most 1 (the first size % parts parts get the extra float), named
    "<name>/part_<k>" as TensorFlow names partitioned variables. Each part, in
    order, goes to the ps with the fewest floats so far (equal loads: the lowest
    ps index). global_step is not in the placement: it lives on ps 0.        */
#ifndef ZA_PARTITION_H_INCLUDED
#define ZA_PARTITION_H_INCLUDED

#include <stddef.h>

#include "za/za_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_PARTITION_MAX_PARTS 256
#define ZA_PARTITION_MAX_PS 64
#define ZA_PART_NAME_MAX (ZA_VAR_NAME_MAX + 16)

typedef struct {
    //  The variable's name, or "<name>/part_<k>" when it is split.
    char name [ZA_PART_NAME_MAX];
    int var;                            //  index in the za_vars_t
    size_t offset;                      //  first float of this part within the variable
    size_t size;                        //  floats
    int ps;                             //  the ps that holds it
} za_part_t;

typedef struct {
    int ps_count;
    int count;
    za_part_t parts [ZA_PARTITION_MAX_PARTS];   //  in placement order
    size_t ps_floats [ZA_PARTITION_MAX_PS];     //  floats held by each ps
} za_partition_t;

//  Computes the placement of `vars` over ps_count ps into *out (overwritten
//  whole; entries past count and past ps_count are zero). partition_floats 0
//  means never split. The result depends only on the table's sizes and names,
//  ps_count and partition_floats. Returns 0, or -1 with an error: vars or out
//  NULL, ps_count < 1 or > ZA_PARTITION_MAX_PS, or more than
//  ZA_PARTITION_MAX_PARTS parts needed (raise partition_floats).
int za_partition_compute (const za_vars_t *vars, int ps_count, size_t partition_floats,
                          za_partition_t *out);

//  The parts held by ps `ps`, in placement order: writes the indexes into
//  self->parts of the first `max` of them to idx and returns how many there
//  are in all (which may be more than max: compare to see if idx was too
//  small). Returns -1 with an error when ps is not in 0..ps_count-1 or max < 0.
int za_partition_parts_of (const za_partition_t *self, int ps, int *idx, int max);

#ifdef __cplusplus
}
#endif
#endif
