/*  test_estimator.c: the Estimator API on real Fashion-MNIST: training, resume, corrupt and
    foreign checkpoints, retention, hooks, evaluate, predict, a custom model_fn, seeds. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_estimator.h"
#include "za/za_kernels.h"
#include "za/za_replica.h"
#include "za/za_util.h"
#include "za_test.h"

#define TRAIN_SUBSET_EXAMPLES 4000
#define PREDICT_EXAMPLES 1000
#define TRAIN_BATCH 64
#define EVAL_BATCH 500
#define HIDDEN_UNITS 64
#define FMNIST_CLASSES 10
#define INPUT_SEED 1234

static void
s_setup (void)
{
    za_test_dir_create ("za_estimator_test");
    za_error_clear ();
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (estimator, .init = s_setup, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  Helpers

//  What the input_fn streams: train shuffled and repeated, eval/predict once.
typedef struct {
    const za_dataset_t *train;
    const za_dataset_t *eval;
    int batch_size;
    uint64_t seed;
} s_inputs_t;

static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    za_mode_t mode = context->mode;
    s_inputs_t *inputs = (s_inputs_t *) arg;
    za_input_config_t config = za_input_config_default ();
    if (mode == ZA_MODE_TRAIN) {
        config.batch_size = inputs->batch_size;
        config.shuffle_buffer = (int) inputs->train->count;
        config.seed = inputs->seed;
        config.epochs = -1;
        return za_input_new (inputs->train, &config);
    }
    config.batch_size = EVAL_BATCH;
    return za_input_new (inputs->eval, &config);
}

static za_input_shape_t
s_shape_of (const za_dataset_t *dataset)
{
    za_input_shape_t shape = {dataset->height, dataset->width, dataset->channels};
    return shape;
}

static za_run_config_t
s_config (const char *model_dir)
{
    za_run_config_t config = za_run_config_default ();
    config.model_dir = model_dir;
    config.threads = 1;
    config.progress = 0;
    config.log_step_count_steps = 0;
    return config;
}

static void
s_dnn_spec (za_stack_spec_t *spec)
{
    int hidden [] = {HIDDEN_UNITS};
    cr_assert_eq (za_dnn_classifier_spec (spec, hidden, 1, FMNIST_CLASSES), 0, "%s",
                  za_last_error ());
}

static za_estimator_t *
s_new_estimator (const za_stack_spec_t *spec, const za_dataset_t *dataset,
                 const za_run_config_t *config)
{
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), spec,
                                                  s_shape_of (dataset), &optim, config);
    cr_assert_not_null (estimator, "%s", za_last_error ());
    return estimator;
}

//  Reads a JSON-lines file; *count_p gets the number of lines. Caller decrefs
//  each and frees the array.
static json_t **
s_read_jsonl (const char *path, int *count_p)
{
    FILE *file = fopen (path, "r");
    cr_assert_not_null (file, "cannot open %s", path);
    json_t **lines = NULL;
    int count = 0;
    char *line = NULL;
    size_t size = 0;
    while (getline (&line, &size, file) > 0) {
        json_error_t error;
        json_t *value = json_loads (line, 0, &error);
        cr_assert_not_null (value, "%s line %d is not JSON (%s): %s", path, count + 1,
                            error.text, line);
        lines = realloc (lines, (size_t) (count + 1) * sizeof *lines);
        cr_assert_not_null (lines);
        lines [count++] = value;
    }
    free (line);
    fclose (file);
    *count_p = count;
    return lines;
}

static void
s_free_jsonl (json_t **lines, int count)
{
    for (int i = 0; i < count; i++)
        json_decref (lines [i]);
    free (lines);
}

static double
s_json_number (const json_t *object, const char *key)
{
    json_t *value = json_object_get (object, key);
    cr_assert (json_is_number (value), "no number '%s'", key);
    return json_number_value (value);
}

//  Counts hook calls and checks their order and steps as they come.
typedef struct {
    int begin_calls, before_calls, after_calls, end_calls;
    int64_t begin_step;
    int64_t last_before_step, last_after_step, end_step;
    int64_t end_max_steps;
    int64_t stop_at;                    //  after_run asks to stop here; 0: never
    int batch_size;                     //  expected in every context
    int in_order;                       //  1 until a call comes out of order
    char begin_error [ZA_ERROR_MAX_CHARS];
} s_counter_t;

static void
s_counter_init (s_counter_t *counter, int batch_size)
{
    memset (counter, 0, sizeof *counter);
    counter->begin_step = counter->last_before_step = counter->last_after_step = -1;
    counter->end_step = -1;
    counter->batch_size = batch_size;
    counter->in_order = 1;
}

static void
s_hook_begin (void *arg, int64_t global_step)
{
    s_counter_t *counter = (s_counter_t *) arg;
    if (counter->begin_calls++ > 0 || counter->before_calls > 0)
        counter->in_order = 0;
    counter->begin_step = global_step;
    counter->last_after_step = global_step;
    snprintf (counter->begin_error, sizeof counter->begin_error, "%s", za_last_error ());
}

static int
s_hook_before_run (void *arg, const za_run_context_t *context)
{
    s_counter_t *counter = (s_counter_t *) arg;
    counter->before_calls++;
    //  The step before this one is the one the last after_run (or begin) saw.
    if (counter->begin_calls != 1 || context->global_step != counter->last_after_step
        || context->batch_size != counter->batch_size)
        counter->in_order = 0;
    counter->last_before_step = context->global_step;
    //  Every step's loss (after_run checks it).
    return 1;
}

static int
s_hook_after_run (void *arg, const za_run_context_t *context)
{
    s_counter_t *counter = (s_counter_t *) arg;
    counter->after_calls++;
    if (context->global_step != counter->last_before_step + 1
        || counter->after_calls != counter->before_calls || !(context->loss > 0)
        || !isfinite (context->loss) || context->global_step > context->max_steps)
        counter->in_order = 0;
    counter->last_after_step = context->global_step;
    return counter->stop_at > 0 && context->global_step == counter->stop_at;
}

static void
s_hook_end (void *arg, const za_run_context_t *context)
{
    s_counter_t *counter = (s_counter_t *) arg;
    counter->end_calls++;
    counter->end_step = context->global_step;
    counter->end_max_steps = context->max_steps;
}

static void
s_add_counter (za_estimator_t *estimator, s_counter_t *counter)
{
    za_hook_t hook = {
        .arg = counter,
        .begin = s_hook_begin,
        .before_run = s_hook_before_run,
        .after_run = s_hook_after_run,
        .end = s_hook_end,
    };
    cr_assert_eq (za_estimator_add_hook (estimator, &hook), 0);
}

//  Sends fd 2 to a file until s_capture_end; returns the saved descriptor.
static int
s_capture_begin (const char *path)
{
    fflush (stderr);
    int saved = dup (2);
    cr_assert_geq (saved, 0);
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq (fd, 0);
    cr_assert_eq (dup2 (fd, 2), 2);
    close (fd);
    return saved;
}

//  Restores fd 2 and returns what was written (caller frees).
static char *
s_capture_end (int saved, const char *path)
{
    fflush (stderr);
    dup2 (saved, 2);
    close (saved);
    return za_test_read_file (path, NULL);
}


//  --------------------------------------------------------------------------
//  Training

Test (estimator, training_reduces_loss_and_beats_070_on_t10k)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    za_dataset_t *test = za_test_fashion ("t10k", 0);
    cr_assert_eq (test->count, 10000);
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    config.save_summary_steps = 20;
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    s_inputs_t inputs = {train, test, TRAIN_BATCH, INPUT_SEED};

    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 300), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_estimator_global_step (estimator), 300);

    char *metrics = za_test_path ("metrics.jsonl");
    int count;
    json_t **lines = s_read_jsonl (metrics, &count);
    cr_assert_eq (count, 300 / 20, "%d summary lines", count);
    cr_assert_eq (s_json_number (lines [0], "global_step"), 20);
    cr_assert_eq (s_json_number (lines [count - 1], "global_step"), 300);
    double first = s_json_number (lines [0], "loss");
    double last = s_json_number (lines [count - 1], "loss");
    cr_assert (isfinite (first) && isfinite (last));
    cr_assert_lt (last, 0.75 * first, "loss went from %.4f to %.4f", first, last);
    s_free_jsonl (lines, count);

    za_eval_result_t result;
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result), 0,
                  "%s", za_last_error ());
    cr_assert_eq (result.examples, 10000);
    cr_assert_eq (result.global_step, 300);
    cr_assert_gt (result.accuracy, 0.70, "t10k accuracy %.4f", result.accuracy);
    cr_assert (result.loss > 0 && isfinite (result.loss));

    free (metrics);
    za_estimator_destroy (&estimator);
    cr_assert_null (estimator);
    za_dataset_destroy (&train);
    za_dataset_destroy (&test);
}

Test (estimator, resume_continues_from_the_newest_checkpoint)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    config.save_checkpoints_steps = 20;
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};

    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 60), 0, "%s",
                  za_last_error ());
    za_estimator_destroy (&estimator);
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {20, 40, 60}, 3);

    estimator = s_new_estimator (&spec, train, &config);
    cr_assert_eq (za_estimator_global_step (estimator), 0, "nothing is read before train");
    s_counter_t counter;
    s_counter_init (&counter, TRAIN_BATCH);
    s_add_counter (estimator, &counter);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 100), 0, "%s",
                  za_last_error ());
    cr_assert_eq (counter.begin_calls, 1);
    cr_assert_eq (counter.begin_step, 60, "begin saw step %lld",
                  (long long) counter.begin_step);
    cr_assert_eq (counter.after_calls, 40, "ran %d steps", counter.after_calls);
    cr_assert_eq (counter.before_calls, 40);
    cr_assert (counter.in_order);
    cr_assert_eq (counter.last_after_step, 100);
    cr_assert_eq (za_estimator_global_step (estimator), 100);
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {20, 40, 60, 80, 100}, 5);

    //  Already at max_steps: nothing runs, and that is not an error, whether
    //  asked of the same estimator or of a new one.
    s_counter_init (&counter, TRAIN_BATCH);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 100), 0, "%s",
                  za_last_error ());
    cr_assert_eq (counter.after_calls, 0);
    cr_assert_eq (za_estimator_global_step (estimator), 100);
    za_estimator_destroy (&estimator);
    estimator = s_new_estimator (&spec, train, &config);
    s_add_counter (estimator, &counter);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 100), 0, "%s",
                  za_last_error ());
    cr_assert_eq (counter.after_calls, 0);
    cr_assert_eq (counter.before_calls, 0);
    cr_assert_eq (za_estimator_global_step (estimator), 100);
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {20, 40, 60, 80, 100}, 5);

    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}

Test (estimator, corrupt_newest_checkpoint_falls_back_to_the_previous)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    config.save_checkpoints_steps = 20;
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};

    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 60), 0, "%s",
                  za_last_error ());
    za_estimator_destroy (&estimator);

    //  Cut the newest file in half, as a crash of a non-atomic writer would.
    char *newest = za_checkpoint_path (za_test_dir (), 60);
    struct stat st;
    cr_assert_eq (stat (newest, &st), 0);
    cr_assert_eq (truncate (newest, st.st_size / 2), 0);
    za_error_set_quiet (1);
    za_checkpoint_t *broken = za_checkpoint_load (newest);
    cr_assert_null (broken);
    za_error_clear ();
    estimator = s_new_estimator (&spec, train, &config);
    s_counter_t counter;
    s_counter_init (&counter, TRAIN_BATCH);
    s_add_counter (estimator, &counter);
    char *log = za_test_path ("stderr.txt");
    int saved = s_capture_begin (log);
    int rc = za_estimator_train (estimator, s_input_fn, &inputs, 80);
    char *text = s_capture_end (saved, log);
    za_error_set_quiet (0);
    cr_assert_eq (rc, 0, "%s", za_last_error ());
    cr_assert_eq (counter.begin_step, 40, "resumed from %lld", (long long) counter.begin_step);
    cr_assert_eq (counter.after_calls, 40);
    cr_assert (strstr (counter.begin_error, "model.ckpt-60.safetensors"),
               "the error does not name the corrupt file: '%s'", counter.begin_error);
    cr_assert (strstr (text, "restored step 40"), "stderr: %s", text);
    unlink (log);

    //  Everything kept afterwards is intact, the rewritten step 60 included.
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {20, 40, 60, 80}, 4);
    int loaded;
    za_test_expect_all_load (za_test_dir (), &loaded);
    cr_assert_eq (loaded, 4);

    free (text);
    free (log);
    free (newest);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}

Test (estimator, checkpoint_of_another_model_is_refused)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};
    za_run_config_t config = s_config (za_test_dir ());
    za_stack_spec_t linear;
    cr_assert_eq (za_linear_classifier_spec (&linear, FMNIST_CLASSES), 0);
    za_estimator_t *estimator = s_new_estimator (&linear, train, &config);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 10), 0, "%s",
                  za_last_error ());
    za_estimator_destroy (&estimator);

    za_stack_spec_t dnn;
    s_dnn_spec (&dnn);
    estimator = s_new_estimator (&dnn, train, &config);
    s_counter_t counter;
    s_counter_init (&counter, TRAIN_BATCH);
    s_add_counter (estimator, &counter);
    za_error_set_quiet (1);
    int rc = za_estimator_train (estimator, s_input_fn, &inputs, 20);
    za_error_set_quiet (0);
    cr_assert_eq (rc, -1);
    cr_assert (strstr (za_last_error (), "another model"), "error: %s", za_last_error ());
    cr_assert (strstr (za_last_error (), "model.ckpt-10.safetensors"), "error: %s",
               za_last_error ());
    cr_assert_eq (counter.after_calls, 0, "trained over a foreign checkpoint");
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {10}, 1);

    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}

Test (estimator, keep_checkpoint_max_keeps_the_newest)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    config.save_checkpoints_steps = 10;
    config.keep_checkpoint_max = 2;
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 50), 0, "%s",
                  za_last_error ());
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {40, 50}, 2);
    int loaded;
    za_test_expect_all_load (za_test_dir (), &loaded);
    cr_assert_eq (loaded, 2);

    //  The index names the same two, the newest as model_checkpoint_path.
    char *index_path = za_test_path ("checkpoint");
    char *index = za_test_read_file (index_path, NULL);
    cr_assert (strstr (index, "model_checkpoint_path: \"model.ckpt-50.safetensors\""), "%s",
               index);
    cr_assert (strstr (index, "model.ckpt-40.safetensors"), "%s", index);
    cr_assert_null (strstr (index, "model.ckpt-30.safetensors"), "%s", index);

    free (index);
    free (index_path);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}


//  --------------------------------------------------------------------------
//  Hooks

Test (estimator, hooks_see_every_step_in_order)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    s_counter_t first, second;
    s_counter_init (&first, TRAIN_BATCH);
    s_counter_init (&second, TRAIN_BATCH);
    s_add_counter (estimator, &first);
    s_add_counter (estimator, &second);

    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 25), 0, "%s",
                  za_last_error ());
    s_counter_t *counters [] = {&first, &second};
    for (int i = 0; i < 2; i++) {
        s_counter_t *c = counters [i];
        cr_assert (c->in_order, "hook %d saw calls out of order", i);
        cr_assert_eq (c->begin_calls, 1);
        cr_assert_eq (c->begin_step, 0);
        cr_assert_eq (c->before_calls, 25);
        cr_assert_eq (c->after_calls, 25);
        cr_assert_eq (c->last_before_step, 24);
        cr_assert_eq (c->last_after_step, 25);
        cr_assert_eq (c->end_calls, 1);
        cr_assert_eq (c->end_step, 25);
        cr_assert_eq (c->end_max_steps, 25);
    }
    //  A second train call on the same estimator calls begin and end again.
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 30), 0, "%s",
                  za_last_error ());
    cr_assert_eq (first.begin_calls, 2);
    cr_assert_eq (first.begin_step, 25);
    cr_assert_eq (first.after_calls, 30);
    cr_assert_eq (first.end_calls, 2);
    cr_assert_eq (first.end_step, 30);

    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}

//  A hook that wants no loss: what each after_run saw.
typedef struct {
    int64_t loss_steps [64];
    double loss [64];
} s_reads_t;

static int
s_reads_after_run (void *arg, const za_run_context_t *context)
{
    s_reads_t *reads = (s_reads_t *) arg;
    if (context->global_step < 64) {
        reads->loss_steps [context->global_step] = context->loss_steps;
        reads->loss [context->global_step] = context->loss;
    }
    return 0;
}

//  On a device (cpu-staged here, a GPU alike) the steps do not wait for
//  their end: the loss is read only at the steps a hook wants it (the
//  summaries' every 5 steps) and at the last, as the mean of the steps
//  since the read before. ZA_SYNC_STEPS=1 reads every step. Both train to
//  the same bits, and the summaries say the same mean losses.
Test (estimator, a_device_reads_the_loss_only_where_a_hook_wants_it)
{
    enum { STEPS = 12, EVERY = 5 };
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    s_reads_t reads [2];
    double summary [2][2];
    float *values [2];
    size_t bytes = 0;
    for (int sync = 0; sync < 2; sync++) {
        char name [32];
        snprintf (name, sizeof name, "sync%d", sync);
        char *dir = za_test_path (name);
        za_run_config_t config = s_config (dir);
        config.save_summary_steps = EVERY;
        cr_assert_eq (za_device_parse ("cpu-staged", &config.device), 0);
        za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
        memset (&reads [sync], 0, sizeof reads [sync]);
        za_hook_t hook = {.arg = &reads [sync], .after_run = s_reads_after_run};
        cr_assert_eq (za_estimator_add_hook (estimator, &hook), 0);
        if (sync)
            setenv ("ZA_SYNC_STEPS", "1", 1);
        int rc = za_estimator_train (estimator, s_input_fn, &inputs, STEPS);
        unsetenv ("ZA_SYNC_STEPS");
        cr_assert_eq (rc, 0, "%s", za_last_error ());
        bytes = za_estimator_vars (estimator)->total * sizeof (float);
        values [sync] = malloc (bytes);
        memcpy (values [sync], za_estimator_values (estimator), bytes);
        char path [4096];
        snprintf (path, sizeof path, "%s/metrics.jsonl", dir);
        int count;
        json_t **lines = s_read_jsonl (path, &count);
        cr_assert_eq (count, 2, "%d summary lines", count);
        for (int i = 0; i < 2; i++)
            summary [sync][i] = s_json_number (lines [i], "loss");
        s_free_jsonl (lines, count);
        za_estimator_destroy (&estimator);
        free (dir);
    }
    for (int step = 1; step <= STEPS; step++) {
        //  Read at 5, 10 (the summaries) and 12 (the last): the mean of 5, 5, 2.
        int64_t expected = step % EVERY == 0? EVERY: step == STEPS? STEPS % EVERY: 0;
        cr_expect_eq (reads [0].loss_steps [step], expected, "step %d", step);
        cr_expect_eq (reads [1].loss_steps [step], 1, "step %d", step);
        if (expected) {
            double sum = 0;
            for (int k = step - (int) expected + 1; k <= step; k++)
                sum += reads [1].loss [k];
            cr_expect (fabs (reads [0].loss [step] - sum / expected) < 1e-6, "step %d: %g vs %g",
                       step, reads [0].loss [step], sum / expected);
        }
    }
    for (int i = 0; i < 2; i++)
        cr_expect (fabs (summary [0][i] - summary [1][i]) < 1e-6, "line %d: %g vs %g", i,
                   summary [0][i], summary [1][i]);
    cr_expect_eq (memcmp (values [0], values [1], bytes), 0);
    free (values [0]), free (values [1]);
    za_dataset_destroy (&train);
}

Test (estimator, after_run_stops_training_and_the_last_step_is_saved)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ()); //  by seconds: no save before the end
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    s_counter_t counter;
    s_counter_init (&counter, TRAIN_BATCH);
    counter.stop_at = 7;
    s_add_counter (estimator, &counter);

    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 100), 0, "%s",
                  za_last_error ());
    cr_assert (counter.in_order);
    cr_assert_eq (za_estimator_global_step (estimator), 7);
    cr_assert_eq (counter.after_calls, 7);
    cr_assert_eq (counter.before_calls, 7);
    cr_assert_eq (counter.end_calls, 1);
    cr_assert_eq (counter.end_step, 7);
    za_test_expect_checkpoints (za_test_dir (), (int64_t []) {7}, 1);
    int loaded;
    za_test_expect_all_load (za_test_dir (), &loaded);
    cr_assert_eq (loaded, 1);

    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}


//  --------------------------------------------------------------------------
//  Evaluate and predict

Test (estimator, evaluate_needs_a_checkpoint_and_logs_each_call)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    za_dataset_t *test = za_test_fashion ("t10k", PREDICT_EXAMPLES);
    s_inputs_t inputs = {train, test, TRAIN_BATCH, INPUT_SEED};
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);

    za_eval_result_t result;
    za_error_set_quiet (1);
    int rc = za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result);
    za_error_set_quiet (0);
    cr_assert_eq (rc, -1);
    cr_assert (strstr (za_last_error (), "train first"), "error: %s", za_last_error ());
    char *eval_log = za_test_path ("eval/metrics.jsonl");
    cr_assert_neq (access (eval_log, F_OK), 0, "a failed evaluate wrote %s", eval_log);

    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 20), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result), 0,
                  "%s", za_last_error ());
    cr_assert_eq (result.global_step, 20);
    cr_assert_eq (result.examples, PREDICT_EXAMPLES);
    //  steps bounds the batches read.
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 1, &result), 0,
                  "%s", za_last_error ());
    cr_assert_eq (result.examples, EVAL_BATCH);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 30), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result), 0,
                  "%s", za_last_error ());
    cr_assert_eq (result.global_step, 30);

    int count;
    json_t **lines = s_read_jsonl (eval_log, &count);
    cr_assert_eq (count, 3, "%d lines in eval/metrics.jsonl", count);
    int64_t want_step [] = {20, 20, 30};
    int64_t want_examples [] = {PREDICT_EXAMPLES, EVAL_BATCH, PREDICT_EXAMPLES};
    for (int i = 0; i < count; i++) {
        cr_assert_eq ((int64_t) s_json_number (lines [i], "global_step"), want_step [i],
                      "line %d", i + 1);
        cr_assert_eq ((int64_t) s_json_number (lines [i], "examples"), want_examples [i]);
        double accuracy = s_json_number (lines [i], "accuracy");
        cr_assert (accuracy >= 0 && accuracy <= 1);
    }
    cr_assert_float_eq (s_json_number (lines [2], "accuracy"), result.accuracy, 1e-6);
    s_free_jsonl (lines, count);

    free (eval_log);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
    za_dataset_destroy (&test);
}

typedef struct {
    int32_t *classes;
    int64_t capacity;
    int64_t calls;
    int64_t stop_after;                 //  0: never stop
    int in_order;
    int n_classes;
} s_predictions_t;

static int
s_on_prediction (void *arg, int64_t index, const float *logits, int n_classes, int class_id)
{
    s_predictions_t *p = (s_predictions_t *) arg;
    if (index != p->calls || index >= p->capacity || n_classes != p->n_classes
        || class_id < 0 || class_id >= n_classes)
        p->in_order = 0;
    else {
        for (int k = 0; k < n_classes; k++)
            if (logits [k] > logits [class_id])
                p->in_order = 0;
        p->classes [index] = class_id;
    }
    p->calls++;
    return p->stop_after > 0 && p->calls >= p->stop_after;
}

Test (estimator, predict_agrees_with_evaluate)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    za_dataset_t *test = za_test_fashion ("t10k", PREDICT_EXAMPLES);
    cr_assert_eq (test->count, PREDICT_EXAMPLES);
    s_inputs_t inputs = {train, test, TRAIN_BATCH, INPUT_SEED};
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (za_test_dir ());
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);

    s_predictions_t predictions = {
        .classes = calloc (PREDICT_EXAMPLES, sizeof (int32_t)),
        .capacity = PREDICT_EXAMPLES,
        .in_order = 1,
        .n_classes = FMNIST_CLASSES,
    };
    cr_assert_not_null (predictions.classes);
    za_error_set_quiet (1);
    int64_t none = za_estimator_predict (estimator, s_input_fn, &inputs, s_on_prediction,
                                         &predictions);
    za_error_set_quiet (0);
    cr_assert_eq (none, -1);
    cr_assert (strstr (za_last_error (), "train first"), "error: %s", za_last_error ());
    cr_assert_eq (predictions.calls, 0);

    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 150), 0, "%s",
                  za_last_error ());
    int64_t count = za_estimator_predict (estimator, s_input_fn, &inputs, s_on_prediction,
                                          &predictions);
    cr_assert_eq (count, PREDICT_EXAMPLES, "predicted %lld", (long long) count);
    cr_assert_eq (predictions.calls, PREDICT_EXAMPLES);
    cr_assert (predictions.in_order, "indices, n_classes or argmax wrong");
    int64_t agree = 0;
    for (int64_t i = 0; i < PREDICT_EXAMPLES; i++)
        agree += predictions.classes [i] == test->labels [i];

    za_eval_result_t result;
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result), 0,
                  "%s", za_last_error ());
    cr_assert_eq (result.examples, PREDICT_EXAMPLES);
    double share = (double) agree / PREDICT_EXAMPLES;
    cr_assert_float_eq (share, result.accuracy, 1e-9, "predict %.4f, evaluate %.4f", share,
                        result.accuracy);
    cr_assert_gt (share, 0.5);

    //  The callback can stop early; the count says how many were predicted.
    predictions.calls = 0;
    predictions.stop_after = 10;
    count = za_estimator_predict (estimator, s_input_fn, &inputs, s_on_prediction,
                                  &predictions);
    cr_assert_eq (count, 10);
    cr_assert_eq (predictions.calls, 10);

    free (predictions.classes);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
    za_dataset_destroy (&test);
}


//  --------------------------------------------------------------------------
//  A model_fn of our own: multinomial logistic regression on the features,
//  written against the Estimator contract with the CPU back end's kernels.

#define LOGREG_CLASSES 3
#define LOGREG_FEATURES 4
#define LOGREG_PER_CLASS 300
#define LOGREG_NAME "logreg"
#define LOGREG_INIT_SCALE 0.01f

typedef struct {
    const za_backend_t *be;
    int in_dim;
    int batch_max;
    size_t kernel_offset, bias_offset;
    float *logits;                      //  [batch_max, classes]
    float *dlogits;
} s_logreg_t;

static void
s_logreg_destroy (void **state_p)
{
    s_logreg_t *self = (s_logreg_t *) *state_p;
    if (!self)
        return;
    self->be->buffer_free (self->logits);
    self->be->buffer_free (self->dlogits);
    free (self);
    *state_p = NULL;
}

static void *
s_logreg_create (const void *params, za_input_shape_t input, int batch_max,
                 const za_backend_t *backend, za_vars_t *vars)
{
    (void) params;
    s_logreg_t *self = (s_logreg_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->be = backend;
    self->in_dim = input.height * input.width * input.channels;
    self->batch_max = batch_max;
    int64_t kernel_shape [] = {self->in_dim, LOGREG_CLASSES};
    int64_t bias_shape [] = {LOGREG_CLASSES};
    int kernel = za_vars_add (vars, "logits/kernel", 2, kernel_shape);
    int bias = za_vars_add (vars, "logits/bias", 1, bias_shape);
    size_t bytes = (size_t) batch_max * LOGREG_CLASSES * sizeof (float);
    self->logits = (float *) backend->buffer_alloc (bytes);
    self->dlogits = (float *) backend->buffer_alloc (bytes);
    if (kernel < 0 || bias < 0 || !self->logits || !self->dlogits) {
        void *state = self;
        s_logreg_destroy (&state);
        return NULL;
    }
    self->kernel_offset = vars->vars [kernel].offset;
    self->bias_offset = vars->vars [bias].offset;
    return self;
}

static void
s_logreg_init_vars (void *state, const za_vars_t *vars, float *values, uint64_t seed)
{
    s_logreg_t *self = (s_logreg_t *) state;
    za_rng_t rng;
    za_rng_seed (&rng, seed);
    const za_var_t *kernel = &vars->vars [za_vars_find (vars, "logits/kernel")];
    for (size_t i = 0; i < kernel->size; i++)
        values [self->kernel_offset + i] = (2 * za_rng_uniform (&rng) - 1) * LOGREG_INIT_SCALE;
    memset (values + self->bias_offset, 0, LOGREG_CLASSES * sizeof (float));
}

static int
s_logreg_model_fn (void *state, const float *features, const int32_t *labels, int n,
                   za_mode_t mode, const float *values, float *grads, int64_t step,
                   za_spec_t *spec)
{
    (void) step;
    s_logreg_t *self = (s_logreg_t *) state;
    if (n <= 0 || n > self->batch_max)
        return za_error ("logreg: batch of %d (planned for %d)", n, self->batch_max);
    const float *kernel = values + self->kernel_offset;
    const float *bias = values + self->bias_offset;
    self->be->dense_forward (n, self->in_dim, LOGREG_CLASSES, features, kernel, bias,
                             ZA_ACT_NONE, self->logits);
    spec->logits = self->logits;
    spec->n_classes = LOGREG_CLASSES;
    spec->loss_sum = 0;
    spec->correct = 0;
    if (mode == ZA_MODE_PREDICT || !labels)
        return 0;
    int train = mode == ZA_MODE_TRAIN;
    int invalid = 0;
    spec->loss_sum = self->be->softmax_xent (n, LOGREG_CLASSES, self->logits, labels,
                                             train? self->dlogits: NULL, &spec->correct,
                                             &invalid);
    if (invalid)
        return za_error ("logreg: %d labels outside [0, %d)", invalid, LOGREG_CLASSES);
    if (train)
        self->be->dense_backward (n, self->in_dim, LOGREG_CLASSES, features, kernel,
                                  self->logits, ZA_ACT_NONE, self->dlogits,
                                  grads + self->kernel_offset, grads + self->bias_offset,
                                  NULL);
    return 0;
}

static const char *
s_logreg_describe (const void *params)
{
    (void) params;
    return "logreg(3 classes)";
}

static const za_model_fn_t s_logreg_model = {
    .name = LOGREG_NAME,
    .create = s_logreg_create,
    .init_vars = s_logreg_init_vars,
    .model_fn = s_logreg_model_fn,
    .destroy = s_logreg_destroy,
    .describe = s_logreg_describe,
};

Test (estimator, custom_model_fn_learns_a_separable_problem)
{
    //  Class k has feature k in [1.5, 2.5] and every other feature in
    //  [-0.5, 0.5]: argmax of the first three features separates them.
    const int count = LOGREG_CLASSES * LOGREG_PER_CLASS;
    float *features = calloc ((size_t) count * LOGREG_FEATURES, sizeof (float));
    int32_t *labels = calloc ((size_t) count, sizeof (int32_t));
    cr_assert (features && labels);
    za_rng_t rng;
    za_rng_seed (&rng, 99);
    for (int i = 0; i < count; i++) {
        int label = i % LOGREG_CLASSES;
        labels [i] = label;
        for (int f = 0; f < LOGREG_FEATURES; f++)
            features [i * LOGREG_FEATURES + f] = za_rng_uniform (&rng) - 0.5f
                                                 + (f == label? 2.0f: 0.0f);
    }
    za_dataset_t *data = za_dataset_from_arrays (features, labels, count, 1,
                                                 LOGREG_FEATURES, 1);
    cr_assert_not_null (data, "%s", za_last_error ());
    cr_assert_eq (data->n_classes, LOGREG_CLASSES);
    free (features);
    free (labels);

    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    optim.learning_rate = 0.5f;
    za_run_config_t config = s_config (za_test_dir ());
    za_estimator_t *estimator = za_estimator_new (&s_logreg_model, NULL, s_shape_of (data),
                                                  &optim, &config);
    cr_assert_not_null (estimator, "%s", za_last_error ());
    const za_vars_t *vars = za_estimator_vars (estimator);
    cr_assert_eq (vars->count, 2);
    cr_assert_geq (vars->total, LOGREG_FEATURES * LOGREG_CLASSES + LOGREG_CLASSES);

    s_inputs_t inputs = {data, data, 30, INPUT_SEED};
    za_eval_result_t before;
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 1), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &before), 0,
                  "%s", za_last_error ());
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 200), 0, "%s",
                  za_last_error ());
    za_eval_result_t after;
    cr_assert_eq (za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &after), 0, "%s",
                  za_last_error ());
    cr_assert_eq (after.examples, count);
    cr_assert_geq (after.accuracy, 0.95, "training accuracy %.4f", after.accuracy);
    cr_assert_lt (after.loss, before.loss, "loss %.4f -> %.4f", before.loss, after.loss);

    //  The checkpoint names the model_fn's variables and holds their values.
    char *path = za_checkpoint_path (za_test_dir (), 200);
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_assert_str_eq (za_checkpoint_meta (ckpt, "model_fn"), LOGREG_NAME);
    cr_assert_str_eq (za_checkpoint_meta (ckpt, "model"), "logreg(3 classes)");
    const za_ckpt_tensor_t *kernel = za_checkpoint_find (ckpt, "logits/kernel");
    const za_ckpt_tensor_t *bias = za_checkpoint_find (ckpt, "logits/bias");
    cr_assert_not_null (kernel);
    cr_assert_not_null (bias);
    cr_assert_eq (kernel->ndim, 2);
    cr_assert_eq (kernel->shape [0], LOGREG_FEATURES);
    cr_assert_eq (kernel->shape [1], LOGREG_CLASSES);
    cr_assert_eq (bias->ndim, 1);
    cr_assert_eq (bias->shape [0], LOGREG_CLASSES);
    const float *values = za_estimator_values (estimator);
    const za_var_t *kernel_var = &vars->vars [za_vars_find (vars, "logits/kernel")];
    cr_assert_eq (memcmp (kernel->data, values + kernel_var->offset,
                          kernel_var->size * sizeof (float)), 0);
    za_checkpoint_destroy (&ckpt);

    free (path);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&data);
}


//  --------------------------------------------------------------------------
//  Seeding

static float *
s_values_after (const char *subdir, uint64_t seed, const za_dataset_t *train, size_t *count_p)
{
    char *dir = za_test_path (subdir);
    za_stack_spec_t spec;
    s_dnn_spec (&spec);
    za_run_config_t config = s_config (dir);
    config.seed = seed;
    s_inputs_t inputs = {train, train, TRAIN_BATCH, INPUT_SEED};
    za_estimator_t *estimator = s_new_estimator (&spec, train, &config);
    cr_assert_eq (za_estimator_train (estimator, s_input_fn, &inputs, 30), 0, "%s",
                  za_last_error ());
    size_t count = za_estimator_vars (estimator)->total;
    float *values = malloc (count * sizeof (float));
    cr_assert_not_null (values);
    memcpy (values, za_estimator_values (estimator), count * sizeof (float));
    za_estimator_destroy (&estimator);
    free (dir);
    *count_p = count;
    return values;
}

Test (estimator, same_seed_same_values_other_seed_other_values)
{
    za_dataset_t *train = za_test_fashion ("train", TRAIN_SUBSET_EXAMPLES);
    size_t count_a, count_b, count_c;
    float *a = s_values_after ("a", 7, train, &count_a);
    float *b = s_values_after ("b", 7, train, &count_b);
    float *c = s_values_after ("c", 8, train, &count_c);
    cr_assert_eq (count_a, count_b);
    cr_assert_eq (count_a, count_c);
    cr_assert_eq (memcmp (a, b, count_a * sizeof (float)), 0, "seed 7 twice differs");
    cr_assert_neq (memcmp (a, c, count_a * sizeof (float)), 0, "seeds 7 and 8 agree");
    free (a);
    free (b);
    free (c);
    za_dataset_destroy (&train);
}


//  --------------------------------------------------------------------------
//  The step's gradient is the mean over the whole batch, however the batch is
//  split over workers and micro-batches.

typedef struct {
    const za_dataset_t *data;
    int batch;
} s_whole_input_t;

static za_input_t *
s_whole_input_fn (void *arg, const za_input_context_t *context)
{
    za_mode_t mode = context->mode;
    (void) mode;
    s_whole_input_t *in = (s_whole_input_t *) arg;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = in->batch;
    config.epochs = -1;
    config.prefetch = 0;
    return za_input_new (in->data, &config);
}

//  One SGD step (lr 1) through the estimator with `threads` workers must move
//  the variables by exactly the full-batch mean gradient computed directly.
static void
s_check_one_sgd_step (int batch, int threads)
{
    za_dataset_t *train = za_test_fashion ("train", batch);
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(16,relu) "
                                  "dense(10)", &spec), 0);
    za_input_shape_t shape = {28, 28, 1};
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    optim.learning_rate = 1.0f;
    za_run_config_t config = za_run_config_default ();
    config.model_dir = za_test_dir ();
    config.threads = threads;
    config.progress = 0;
    config.log_step_count_steps = 0;
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim,
                                                  &config);
    cr_assert_not_null (estimator);
    const za_vars_t *vars = za_estimator_vars (estimator);
    size_t total = vars->total;
    float *before = malloc (total * sizeof (float));
    memcpy (before, za_estimator_values (estimator), total * sizeof (float));

    //  The reference: one model_fn call over the whole batch.
    za_vars_t ref_vars = {0};
    void *state = za_stack_model_fn ()->create (&spec, shape, batch, za_backend_cpu (),
                                                &ref_vars);
    cr_assert_not_null (state);
    float *grads = za_alloc (total * sizeof (float));
    za_spec_t out;
    cr_assert_eq (za_stack_model_fn ()->model_fn (state, train->features, train->labels, batch,
                                                  ZA_MODE_TRAIN, before, grads, 0, &out), 0);

    s_whole_input_t input = {train, batch};
    cr_assert_eq (za_estimator_train (estimator, s_whole_input_fn, &input, 1), 0, "%s",
                  za_last_error ());
    const float *after = za_estimator_values (estimator);
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < total; i++) {
        double moved = (double) before [i] - after [i];
        double diff = fabs (moved - grads [i]);
        if (diff > worst)
            worst = diff, worst_at = i;
    }
    cr_expect (worst < 1e-5, "batch %d, %d threads: update differs from the full-batch "
               "gradient by %g at %zu (gradient %g)", batch, threads, worst, worst_at,
               (double) grads [worst_at]);
    za_stack_model_fn ()->destroy (&state);
    za_free (grads);
    free (before);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}

Test (estimator, step_gradient_is_the_batch_mean_two_threads_uneven)
{
    s_check_one_sgd_step (40, 2);       //  workers of 20: micro-batches 16 + 4
}

Test (estimator, step_gradient_is_the_batch_mean_one_thread)
{
    s_check_one_sgd_step (33, 1);       //  micro-batches 16 + 16 + 1
}

Test (estimator, step_gradient_is_the_batch_mean_three_threads)
{
    s_check_one_sgd_step (64, 3);       //  slices 21, 21, 22
}

//  What a replica's gradient listener heard: each offset, and a copy of the
//  gradient from there up as it was when it was said to be final.
typedef struct {
    const float *grads;
    size_t total;
    int calls;
    size_t offsets [64];
    float *seen [64];
} s_heard_t;

static void
s_hear (void *arg, size_t offset)
{
    s_heard_t *heard = (s_heard_t *) arg;
    if (heard->calls == 64)
        return;
    heard->offsets [heard->calls] = offset;
    float *copy = malloc ((heard->total - offset + 1) * sizeof (float));
    memcpy (copy, heard->grads + offset, (heard->total - offset) * sizeof (float));
    heard->seen [heard->calls++] = copy;
}

//  The model_fn says after each layer with variables that their gradients
//  are final; the replica combines the threads' buffers over that range and
//  says so: the allreduce strategy reduces those buckets while backward goes
//  on. A batch of `size` over 3 threads; every_layer: each of them has
//  examples, so each layer's gradients are said final on their own.
static void
s_check_streamed (int size, int every_layer)
{
    za_dataset_t *train = za_test_fashion ("train", size);
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(16,relu) "
                                  "dropout(0.5) dense(10)", &spec), 0);
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &spec, .input = {28, 28, 1},
        .threads = 3, .train = 1,
    };
    za_replica_t *plain = za_replica_new (&config, 7);
    za_replica_t *streamed = za_replica_new (&config, 7);
    cr_assert (plain && streamed);
    size_t total = za_replica_vars (plain)->total;
    s_heard_t heard = {za_replica_gradients (streamed), total, 0, {0}, {0}};
    za_replica_on_gradients (streamed, s_hear, &heard);
    za_batch_t batch = {train->features, train->labels, size, 28 * 28, NULL, NULL};
    double loss [2];
    cr_assert_eq (za_replica_compute_gradients (plain, &batch, 5, &loss [0]), 0);
    cr_assert_eq (za_replica_compute_gradients (streamed, &batch, 5, &loss [1]), 0);
    //  The same bits as without a listener.
    cr_expect_eq (loss [0], loss [1]);
    cr_expect_eq (memcmp (za_replica_gradients (plain), za_replica_gradients (streamed),
                          total * sizeof (float)), 0);
    //  Three layers with variables: said three times, last layer first, the
    //  last time from 0; what was said final did not change after. A thread
    //  without examples is final only once it has cleared its buffer, which
    //  may come last: then layers come together.
    if (every_layer) {
        cr_assert_eq (heard.calls, 3);
        cr_expect_gt (heard.offsets [0], 0);
    }
    else
        cr_assert (heard.calls >= 1 && heard.calls <= 3, "%d calls", heard.calls);
    for (int c = 0; c < heard.calls; c++) {
        if (c > 0)
            cr_expect_lt (heard.offsets [c], heard.offsets [c - 1]);
        size_t at = heard.offsets [c];
        cr_expect_eq (memcmp (heard.seen [c], za_replica_gradients (streamed) + at,
                              (total - at) * sizeof (float)), 0, "call %d (from %zu)", c, at);
        free (heard.seen [c]);
    }
    cr_expect_eq (heard.offsets [heard.calls - 1], 0);
    za_replica_destroy (&plain);
    za_replica_destroy (&streamed);
    za_dataset_destroy (&train);
}

Test (estimator, a_streamed_gradient_is_final_where_said_and_the_same_bits)
{
    //  Slices of 33, 33 and 34: micro-batches 16 + 16 + 1 and 16 + 16 + 2.
    s_check_streamed (100, 1);
    //  Slices of 0, 1 and 1: thread 0, whose buffer the others combine
    //  into, has no example.
    s_check_streamed (2, 0);
}

//  --------------------------------------------------------------------------
//  Bad inputs get one error and change nothing.

static za_estimator_t *
s_small_cnn (za_stack_spec_t *spec, za_input_shape_t shape, const char *model_dir)
{
    cr_assert_eq (za_stack_parse ("conv2d(4,3,relu) maxpool(2) flatten dense(10)", spec), 0);
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_run_config_t config = za_run_config_default ();
    config.model_dir = model_dir;
    config.threads = 1;
    config.progress = 0;
    config.log_step_count_steps = 0;
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), spec, shape, &optim,
                                                  &config);
    cr_assert_not_null (estimator);
    return estimator;
}

Test (estimator, input_of_the_wrong_shape_is_an_error)
{
    za_dataset_t *train = za_test_fashion ("train", 200);
    za_stack_spec_t spec;
    za_input_shape_t shape = {14, 14, 1};       //  the data is 28x28
    za_estimator_t *estimator = s_small_cnn (&spec, shape, za_test_dir ());
    s_whole_input_t input = {train, 32};
    za_error_set_quiet (1);
    cr_expect_eq (za_estimator_train (estimator, s_whole_input_fn, &input, 5), -1);
    cr_expect (strstr (za_last_error (), "784") && strstr (za_last_error (), "14x14x1"),
               "%s", za_last_error ());
    cr_expect_eq (za_estimator_global_step (estimator), 0);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
}

Test (estimator, model_dir_that_is_a_file_is_an_error)
{
    char *file = za_test_path ("plain_file");
    FILE *f = fopen (file, "w");
    cr_assert_not_null (f);
    fputs ("not a directory\n", f);
    fclose (f);
    za_dataset_t *train = za_test_fashion ("train", 200);
    za_stack_spec_t spec;
    za_input_shape_t shape = {28, 28, 1};
    za_estimator_t *estimator = s_small_cnn (&spec, shape, file);
    s_whole_input_t input = {train, 32};
    za_error_set_quiet (1);
    cr_expect_eq (za_estimator_train (estimator, s_whole_input_fn, &input, 5), -1);
    cr_expect (strstr (za_last_error (), "not a directory") != NULL, "%s", za_last_error ());
    za_eval_result_t result;
    cr_expect_eq (za_estimator_evaluate (estimator, s_whole_input_fn, &input, 1, &result), -1);
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
    free (file);
}

Test (estimator, refused_restore_changes_no_variable)
{
    //  Same stack text, other input size: the conv kernel fits, the dense one
    //  does not. The refusal must leave every value as it was.
    za_dataset_t *train = za_test_fashion ("train", 200);
    za_stack_spec_t spec_a, spec_b;
    za_input_shape_t big = {28, 28, 1}, small = {20, 20, 1};
    za_estimator_t *a = s_small_cnn (&spec_a, big, za_test_dir ());
    s_whole_input_t input = {train, 32};
    cr_assert_eq (za_estimator_train (a, s_whole_input_fn, &input, 3), 0, "%s",
                  za_last_error ());
    za_estimator_t *b = s_small_cnn (&spec_b, small, za_test_dir ());
    size_t bytes = za_estimator_vars (b)->total * sizeof (float);
    float *before = malloc (bytes);
    memcpy (before, za_estimator_values (b), bytes);
    za_eval_result_t result;
    za_error_set_quiet (1);
    cr_expect_eq (za_estimator_evaluate (b, s_whole_input_fn, &input, 1, &result), -1);
    cr_expect (strstr (za_last_error (), "another shape") != NULL, "%s", za_last_error ());
    cr_expect_eq (memcmp (before, za_estimator_values (b), bytes), 0,
                  "a refused checkpoint changed variables");
    cr_expect_eq (za_estimator_global_step (b), 0);
    free (before);
    za_estimator_destroy (&a);
    za_estimator_destroy (&b);
    za_dataset_destroy (&train);
}

//  The one place the estimator, a worker and an all-reduce worker make
//  their replica's config: every RunConfig setting a replica takes (the
//  initial loss scale too, which the workers' own copies had left out).
Test (estimator, a_replica_takes_every_run_config_setting)
{
    za_run_config_t run = za_run_config_default ();
    run.threads = 3;
    run.replicas_per_device = 2;
    run.precision = ZA_POLICY_FP16;
    run.initial_loss_scale = 1024.0f;
    run.device.kind = ZA_DEVICE_CUDA;
    run.warm_start.from = "runs/elsewhere";
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("flatten dense(3)", &spec), 0);
    za_input_shape_t input = {2, 2, 1};
    za_replica_config_t replica = za_run_config_replica (&run, za_stack_model_fn (), &spec,
                                                         input);
    cr_expect_eq (replica.threads, 3);
    cr_expect_eq (replica.replicas_per_device, 2);
    cr_expect_eq (replica.precision, ZA_POLICY_FP16);
    cr_expect_eq (replica.initial_loss_scale, 1024.0f);
    cr_expect_eq (replica.device.kind, ZA_DEVICE_CUDA);
    cr_expect_eq (replica.warm_start, &run.warm_start);
    cr_expect_eq (replica.params, &spec);
    cr_expect (replica.input.height == 2 && replica.input.width == 2 && replica.input.channels == 1);
    cr_expect (!replica.train && !replica.optim && !replica.replica_index,
               "what a role decides is left to it");
}
