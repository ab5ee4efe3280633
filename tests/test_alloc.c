/*  test_alloc.c: a training step allocates nothing. The binary is linked with
    --wrap for malloc, calloc, realloc and aligned_alloc, so every allocation
    zactor's own code makes (workers and prefetch thread included) is counted. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "za/za_estimator.h"
#include "za_test.h"

#define WARM_STEP 5
#define LAST_STEP 25
#define SUBSET 2000

static atomic_long s_allocations;

void *__real_malloc (size_t size);
void *__real_calloc (size_t count, size_t size);
void *__real_realloc (void *p, size_t size);
void *__real_aligned_alloc (size_t alignment, size_t size);
//  What the linker's --wrap sends every call of malloc and the others to.
void *__wrap_malloc (size_t size);
void *__wrap_calloc (size_t count, size_t size);
void *__wrap_realloc (void *p, size_t size);
void *__wrap_aligned_alloc (size_t alignment, size_t size);

void *
__wrap_malloc (size_t size)
{
    atomic_fetch_add (&s_allocations, 1);
    return __real_malloc (size);
}

void *
__wrap_calloc (size_t count, size_t size)
{
    atomic_fetch_add (&s_allocations, 1);
    return __real_calloc (count, size);
}

void *
__wrap_realloc (void *p, size_t size)
{
    atomic_fetch_add (&s_allocations, 1);
    return __real_realloc (p, size);
}

void *
__wrap_aligned_alloc (size_t alignment, size_t size)
{
    atomic_fetch_add (&s_allocations, 1);
    return __real_aligned_alloc (alignment, size);
}

typedef struct {
    long at_warm, at_last;
} s_counts_t;

static int
s_after_run (void *arg, const za_run_context_t *ctx)
{
    s_counts_t *counts = (s_counts_t *) arg;
    if (ctx->global_step == WARM_STEP)
        counts->at_warm = atomic_load (&s_allocations);
    if (ctx->global_step == LAST_STEP)
        counts->at_last = atomic_load (&s_allocations);
    return 0;
}

static za_dataset_t *s_train;

static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    za_mode_t mode = context->mode;
    (void) arg, (void) mode;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 64;
    config.shuffle_buffer = SUBSET;
    config.epochs = -1;
    config.prefetch = 2;
    return za_input_new (s_train, &config);
}

static void
s_check_steady_state (int threads)
{
    za_test_dir_create ("za_alloc_test");
    s_train = za_test_fashion ("train", SUBSET);
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse (ZA_SEED_CNN, &spec), 0);
    za_run_config_t config = za_run_config_default ();
    config.model_dir = za_test_dir ();
    config.threads = threads;
    config.save_checkpoints_steps = 1000;       //  none inside the window
    config.log_step_count_steps = 0;
    config.save_summary_steps = 0;
    config.progress = 0;
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_input_shape_t shape = {28, 28, 1};
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim,
                                                  &config);
    cr_assert_not_null (estimator);
    s_counts_t counts = {-1, -1};
    za_hook_t hook = {.arg = &counts, .after_run = s_after_run};
    za_estimator_add_hook (estimator, &hook);
    long before = atomic_load (&s_allocations);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, NULL, LAST_STEP + 5), 0);
    //  The counter works: setting up training allocated.
    cr_assert_gt (counts.at_warm, before);
    cr_expect_eq (counts.at_last, counts.at_warm,
                  "%ld allocations in steps %d..%d with %d threads",
                  counts.at_last - counts.at_warm, WARM_STEP + 1, LAST_STEP, threads);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&s_train);
    za_test_dir_remove ();
}

Test (alloc, training_step_allocates_nothing_one_thread)
{
    s_check_steady_state (1);
}

Test (alloc, training_step_allocates_nothing_two_threads)
{
    s_check_steady_state (2);
}
