/*  test_placement.c: variable placement over the ps for the seed CNN: coverage,
    loads worked out by hand, determinism, order, splitting, and its errors.    */
#include "za/za_model.h"
#include "za/za_partition.h"
#include "za/za_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The seed CNN on 28x28x1 inputs: sizes of its variables, in table order.
#define SEED_VAR_COUNT 10
#define SEED_TOTAL_FLOATS 93322
#define SPLIT_FLOATS 10000

static const char *s_seed_names [SEED_VAR_COUNT] = {
    "conv2d/kernel", "conv2d/bias", "conv2d_1/kernel", "conv2d_1/bias",
    "conv2d_2/kernel", "conv2d_2/bias", "dense/kernel", "dense/bias",
    "dense_1/kernel", "dense_1/bias"
};
static const size_t s_seed_sizes [SEED_VAR_COUNT] = {
    3 * 3 * 1 * 32, 32, 3 * 3 * 32 * 64, 64, 3 * 3 * 64 * 64, 64, 3 * 3 * 64 * 64, 64, 64 * 10, 10
};

static void
s_seed_vars (za_vars_t *vars)
{
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0, "%s", za_last_error ());
    memset (vars, 0, sizeof *vars);
    void *state = za_stack_model_fn ()->create (&spec, (za_input_shape_t) { 28, 28, 1 }, 1,
                                                za_backend_cpu (), vars);
    cr_assert_not_null (state, "%s", za_last_error ());
    za_stack_model_fn ()->destroy (&state);
    cr_assert_eq (vars->count, SEED_VAR_COUNT);
    for (int var = 0; var < SEED_VAR_COUNT; var++) {
        cr_assert_str_eq (vars->vars [var].name, s_seed_names [var]);
        cr_assert_eq (vars->vars [var].size, s_seed_sizes [var], "%s", s_seed_names [var]);
    }
}

static void
s_compute (const za_vars_t *vars, int ps_count, size_t partition_floats, za_partition_t *out)
{
    cr_assert_eq (za_partition_compute (vars, ps_count, partition_floats, out), 0, "%s",
                  za_last_error ());
}

//  Checks every invariant a placement must keep: each float of each variable
//  in exactly one part, parts contiguous and in order within a variable,
//  names, ps in range, loads equal to the parts' sum, parts_of a partition.
static void
s_expect_valid (const za_vars_t *vars, const za_partition_t *placement, int ps_count)
{
    cr_assert_eq (placement->ps_count, ps_count);
    size_t loads [ZA_PARTITION_MAX_PS] = { 0 };
    for (int var = 0; var < vars->count; var++) {
        size_t size = vars->vars [var].size;
        unsigned char *covered = calloc (size ? size : 1, 1);
        cr_assert_not_null (covered);
        size_t next = 0;
        int pieces = 0;
        for (int p = 0; p < placement->count; p++) {
            const za_part_t *part = &placement->parts [p];
            if (part->var != var)
                continue;
            cr_expect_eq (part->offset, next, "%s: parts not contiguous", part->name);
            cr_assert_leq (part->offset + part->size, size);
            for (size_t f = part->offset; f < part->offset + part->size; f++)
                covered [f]++;
            next = part->offset + part->size;
            pieces++;
        }
        for (size_t f = 0; f < size; f++)
            cr_assert_eq (covered [f], 1, "%s float %zu covered %d times",
                          vars->vars [var].name, f, covered [f]);
        free (covered);
        cr_expect_geq (pieces, 1);
    }
    for (int p = 0; p < placement->count; p++) {
        const za_part_t *part = &placement->parts [p];
        cr_assert (part->var >= 0 && part->var < vars->count);
        cr_assert (part->ps >= 0 && part->ps < ps_count, "%s on ps %d", part->name, part->ps);
        loads [part->ps] += part->size;
        const char *var_name = vars->vars [part->var].name;
        if (part->size == vars->vars [part->var].size)
            cr_expect_str_eq (part->name, var_name);
        else
            cr_expect (strncmp (part->name, var_name, strlen (var_name)) == 0
                       && strncmp (part->name + strlen (var_name), "/part_", 6) == 0,
                       "part name %s", part->name);
    }
    int seen [ZA_PARTITION_MAX_PARTS] = { 0 };
    for (int ps = 0; ps < ps_count; ps++) {
        cr_expect_eq (placement->ps_floats [ps], loads [ps], "ps %d load", ps);
        int idx [ZA_PARTITION_MAX_PARTS];
        int held = za_partition_parts_of (placement, ps, idx, ZA_PARTITION_MAX_PARTS);
        cr_assert_geq (held, 0);
        for (int i = 0; i < held; i++) {
            cr_expect_eq (placement->parts [idx [i]].ps, ps);
            if (i > 0)
                cr_expect_lt (idx [i - 1], idx [i], "parts_of not in placement order");
            seen [idx [i]]++;
        }
    }
    for (int p = 0; p < placement->count; p++)
        cr_expect_eq (seen [p], 1, "part %d listed %d times", p, seen [p]);
    for (int ps = ps_count; ps < ZA_PARTITION_MAX_PS; ps++)
        cr_expect_eq (placement->ps_floats [ps], 0);
}


//  --------------------------------------------------------------------------
//  The seed CNN

Test (placement, covers_every_float_once)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    const size_t thresholds [] = { 0, SPLIT_FLOATS, 1000, 36864, 36863 };
    for (int ps_count = 1; ps_count <= 3; ps_count++)
        for (size_t t = 0; t < sizeof thresholds / sizeof thresholds [0]; t++) {
            za_partition_t placement;
            s_compute (&vars, ps_count, thresholds [t], &placement);
            s_expect_valid (&vars, &placement, ps_count);
            size_t total = 0;
            for (int ps = 0; ps < ps_count; ps++)
                total += placement.ps_floats [ps];
            cr_expect_eq (total, SEED_TOTAL_FLOATS);
        }
}

Test (placement, one_ps_holds_everything)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    s_compute (&vars, 1, 0, &placement);
    cr_expect_eq (placement.count, SEED_VAR_COUNT);
    cr_expect_eq (placement.ps_floats [0], SEED_TOTAL_FLOATS);
    for (int p = 0; p < placement.count; p++) {
        cr_expect_eq (placement.parts [p].ps, 0);
        cr_expect_eq (placement.parts [p].offset, 0);
    }
}

//  Worked by hand: sorted sizes 36864 (conv2d_2/kernel), 36864 (dense/kernel),
//  18432, 640, 288, 64, 64, 64, 32, 10. ps 0 takes 36864, ps 1 takes 36864,
//  the tie goes to ps 0 with 18432 (55296), then ps 1 is the lighter for
//  everything left: 36864 + 640 + 288 + 3 * 64 + 32 + 10 = 38026.
Test (placement, two_ps_loads_by_hand)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    s_compute (&vars, 2, 0, &placement);
    const int expected_var [SEED_VAR_COUNT] = { 4, 6, 2, 8, 0, 3, 5, 7, 1, 9 };
    const int expected_ps [SEED_VAR_COUNT] = { 0, 1, 0, 1, 1, 1, 1, 1, 1, 1 };
    cr_assert_eq (placement.count, SEED_VAR_COUNT);
    for (int p = 0; p < SEED_VAR_COUNT; p++) {
        cr_expect_eq (placement.parts [p].var, expected_var [p], "part %d", p);
        cr_expect_eq (placement.parts [p].ps, expected_ps [p], "part %d", p);
        cr_expect_str_eq (placement.parts [p].name, s_seed_names [expected_var [p]]);
        cr_expect_eq (placement.parts [p].size, s_seed_sizes [expected_var [p]]);
    }
    cr_expect_eq (placement.ps_floats [0], 55296);
    cr_expect_eq (placement.ps_floats [1], 38026);

    int idx [ZA_PARTITION_MAX_PARTS];
    cr_assert_eq (za_partition_parts_of (&placement, 0, idx, ZA_PARTITION_MAX_PARTS), 2);
    cr_expect_eq (idx [0], 0);
    cr_expect_eq (idx [1], 2);
    cr_assert_eq (za_partition_parts_of (&placement, 1, idx, ZA_PARTITION_MAX_PARTS), 8);
    cr_expect_eq (idx [0], 1);
    cr_expect_eq (idx [7], 9);
}

//  Three ps: the two largest take ps 0 and 1, everything else fits on ps 2.
Test (placement, three_ps_loads_by_hand)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    s_compute (&vars, 3, 0, &placement);
    cr_expect_eq (placement.ps_floats [0], 36864);
    cr_expect_eq (placement.ps_floats [1], 36864);
    cr_expect_eq (placement.ps_floats [2], 19594);
    cr_expect_eq (placement.parts [0].var, 4);
    cr_expect_eq (placement.parts [1].var, 6);
    for (int p = 2; p < placement.count; p++)
        cr_expect_eq (placement.parts [p].ps, 2);
}

Test (placement, deterministic)
{
    za_vars_t vars, again;
    s_seed_vars (&vars);
    s_seed_vars (&again);
    for (int ps_count = 1; ps_count <= 3; ps_count++) {
        za_partition_t *first = malloc (sizeof *first);
        za_partition_t *second = malloc (sizeof *second);
        cr_assert (first && second);
        //  Different garbage beforehand must not matter.
        memset (first, 0xA5, sizeof *first);
        memset (second, 0x5A, sizeof *second);
        s_compute (&vars, ps_count, SPLIT_FLOATS, first);
        s_compute (&again, ps_count, SPLIT_FLOATS, second);
        cr_expect_eq (memcmp (first, second, sizeof *first), 0, "%d ps", ps_count);
        free (first);
        free (second);
    }
}

Test (placement, largest_first)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    s_compute (&vars, 2, 0, &placement);
    for (int p = 1; p < placement.count; p++) {
        const za_part_t *before = &placement.parts [p - 1];
        const za_part_t *part = &placement.parts [p];
        cr_expect_geq (before->size, part->size, "%s before %s", before->name, part->name);
        if (before->size == part->size)
            cr_expect_lt (before->var, part->var, "tie not by index: %s, %s", before->name,
                          part->name);
    }
}

//  With 10000 floats a part: both 36864-float kernels make 4 parts of 9216,
//  conv2d_1/kernel 2 parts of 9216, the rest stay whole: 17 parts. On 2 ps the
//  parts alternate 0,1,0,1 ... (46080 each after the kernels), then dense_1/kernel
//  (640) goes to ps 0 and everything else to ps 1.
Test (placement, splits_large_variables)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    s_compute (&vars, 2, SPLIT_FLOATS, &placement);
    s_expect_valid (&vars, &placement, 2);
    cr_expect_eq (placement.count, 17);
    int dense_parts = 0;
    for (int p = 0; p < placement.count; p++) {
        const za_part_t *part = &placement.parts [p];
        if (part->var != 6)
            continue;
        char name [ZA_PART_NAME_MAX];
        snprintf (name, sizeof name, "dense/kernel/part_%d", dense_parts);
        cr_expect_str_eq (part->name, name);
        cr_expect_eq (part->offset, (size_t) dense_parts * 9216);
        cr_expect_eq (part->size, 9216);
        cr_expect_eq (part->ps, dense_parts % 2);
        dense_parts++;
    }
    cr_expect_eq (dense_parts, 4);
    //  conv2d_2/kernel comes first (lower index), then dense/kernel, then conv2d_1/kernel.
    cr_expect_str_eq (placement.parts [0].name, "conv2d_2/kernel/part_0");
    cr_expect_str_eq (placement.parts [3].name, "conv2d_2/kernel/part_3");
    cr_expect_str_eq (placement.parts [4].name, "dense/kernel/part_0");
    cr_expect_str_eq (placement.parts [8].name, "conv2d_1/kernel/part_0");
    cr_expect_str_eq (placement.parts [9].name, "conv2d_1/kernel/part_1");
    cr_expect_str_eq (placement.parts [10].name, "dense_1/kernel");
    cr_expect_eq (placement.parts [10].ps, 0);
    cr_expect_eq (placement.ps_floats [0], 46720);
    cr_expect_eq (placement.ps_floats [1], 46602);

    //  A variable exactly at the threshold is not split.
    s_compute (&vars, 2, 36864, &placement);
    cr_expect_eq (placement.count, SEED_VAR_COUNT);
    cr_expect_str_eq (placement.parts [0].name, "conv2d_2/kernel");
}

Test (placement, parts_are_near_equal)
{
    za_vars_t vars;
    memset (&vars, 0, sizeof vars);
    cr_assert_eq (za_vars_add (&vars, "odd", 1, (const int64_t []) { 7 }), 0);
    cr_assert_eq (za_vars_add (&vars, "many", 2, (const int64_t []) { 10, 101 }), 1);
    za_partition_t placement;
    s_compute (&vars, 3, 100, &placement);
    s_expect_valid (&vars, &placement, 3);
    //  1010 floats in ceil (1010 / 100) = 11 parts: 1010 = 11 * 91 + 9, so the
    //  first 9 parts have 92 floats and the last 2 have 91.
    int k = 0;
    for (int p = 0; p < placement.count; p++) {
        if (placement.parts [p].var != 1)
            continue;
        cr_expect_eq (placement.parts [p].size, k < 9 ? 92u : 91u, "part %d", k);
        k++;
    }
    cr_expect_eq (k, 11);

    memset (&vars, 0, sizeof vars);
    cr_assert_eq (za_vars_add (&vars, "odd", 1, (const int64_t []) { 7 }), 0);
    s_compute (&vars, 2, 3, &placement);
    cr_assert_eq (placement.count, 3);
    const size_t sizes [] = { 3, 2, 2 };
    const size_t offsets [] = { 0, 3, 5 };
    const int ps [] = { 0, 1, 1 };
    for (int p = 0; p < 3; p++) {
        cr_expect_eq (placement.parts [p].size, sizes [p]);
        cr_expect_eq (placement.parts [p].offset, offsets [p]);
        cr_expect_eq (placement.parts [p].ps, ps [p]);
    }
    cr_expect_str_eq (placement.parts [2].name, "odd/part_2");
}

Test (placement, parts_of_reports_the_full_count)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    s_compute (&vars, 2, 0, &placement);
    int idx [4] = { -7, -7, -7, -7 };
    cr_expect_eq (za_partition_parts_of (&placement, 1, idx, 3), 8);
    cr_expect_eq (idx [0], 1);
    cr_expect_eq (idx [2], 4);
    cr_expect_eq (idx [3], -7, "wrote past max");
    cr_expect_eq (za_partition_parts_of (&placement, 1, NULL, 0), 8);
    za_error_set_quiet (1);
    cr_expect_eq (za_partition_parts_of (&placement, 2, idx, 4), -1);
    cr_expect_eq (za_partition_parts_of (&placement, -1, idx, 4), -1);
}


//  --------------------------------------------------------------------------
//  Errors

Test (placement, bad_ps_count_and_too_many_parts)
{
    za_vars_t vars;
    s_seed_vars (&vars);
    za_partition_t placement;
    za_error_set_quiet (1);
    cr_expect_eq (za_partition_compute (&vars, 0, 0, &placement), -1);
    cr_expect (strstr (za_last_error (), "ps count 0 is not in 1..64") != NULL, "%s",
               za_last_error ());
    cr_expect_eq (za_partition_compute (&vars, -3, 0, &placement), -1);
    cr_expect_eq (za_partition_compute (&vars, ZA_PARTITION_MAX_PS + 1, 0, &placement), -1);
    cr_expect (strstr (za_last_error (), "ps count 65") != NULL, "%s", za_last_error ());
    cr_expect_eq (za_partition_compute (&vars, ZA_PARTITION_MAX_PS, 0, &placement), 0);
    //  100 floats a part: conv2d_2/kernel alone makes 369 parts.
    cr_expect_eq (za_partition_compute (&vars, 2, 100, &placement), -1);
    cr_expect (strstr (za_last_error (), "more than 256 parts") != NULL, "%s",
               za_last_error ());
    cr_expect_eq (za_partition_compute (NULL, 2, 0, &placement), -1);
    cr_expect_eq (za_partition_compute (&vars, 2, 0, NULL), -1);
}
