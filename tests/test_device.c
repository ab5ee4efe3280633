/*  test_device.c: --device, and a replica on a back end with memory of its
    own. No GPU runs here: the replica's device path (blocks on the device,
    host mirrors copied when asked for, replicas per device, the optimizer
    through the table) is run on the cpu-staged back end, which is the CPU's
    arithmetic behind a device's copies, and held against the plain CPU.   */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_checkpoint.h"
#include "za/za_input.h"
#include "za/za_kernels.h"
#include "za/za_replica.h"
#include "za_test.h"

Test (device, parses_every_form_and_refuses_others)
{
    za_device_t d;
    char text [ZA_DEVICE_TEXT_MAX];
    cr_expect_eq (za_device_parse ("cpu", &d), 0);
    cr_expect_eq (d.kind, ZA_DEVICE_CPU);
    cr_expect_eq (za_device_parse ("cuda", &d), 0);
    cr_expect (d.kind == ZA_DEVICE_CUDA && d.index == 0);
    cr_expect_eq (za_device_parse ("cuda:3", &d), 0);
    cr_expect (d.kind == ZA_DEVICE_CUDA && d.index == 3);
    cr_expect_str_eq (za_device_text (&d, text, sizeof text), "cuda:3");
    cr_expect_eq (za_device_parse ("cuda:all", &d), 0);
    cr_expect (d.kind == ZA_DEVICE_CUDA && d.index == ZA_DEVICE_ALL);
    cr_expect_str_eq (za_device_text (&d, text, sizeof text), "cuda:all");
    cr_expect_eq (za_device_parse ("cpu-staged", &d), 0);
    cr_expect_eq (d.kind, ZA_DEVICE_CPU_STAGED);
    cr_expect_eq (za_device_parse ("cpu-staged:all", &d), 0);
    cr_expect (d.kind == ZA_DEVICE_CPU_STAGED && d.index == ZA_DEVICE_ALL);
    cr_expect_str_eq (za_device_text (&d, text, sizeof text), "cpu-staged:all");
    za_error_set_quiet (1);
    const char *bad [] = {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda:99", "cudaa",
                          "CPU", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        cr_expect_eq (za_device_parse (bad [i], &d), -1, "'%s'", bad [i]);
        cr_expect (strstr (za_last_error (), "cuda:N"), "'%s': %s", bad [i], za_last_error ());
        cr_expect_eq (d.kind, ZA_DEVICE_CPU);
    }
}

//  Where no GPU is (this machine, CI), --device cuda is one clear error:
//  the module is not built, or it is and finds no GPU. Where one is, the
//  back end says how many.
Test (device, cuda_without_a_gpu_is_one_clear_error)
{
    za_device_t d;
    cr_assert_eq (za_device_parse ("cuda", &d), 0);
    int first = -1, count = -1;
    za_error_set_quiet (1);
    const za_backend_t *be = za_device_backend (&d, &first, &count);
    if (be) {
        cr_expect_gt (be->device_count, 0);
        cr_expect_eq (be->host_memory, 0);
        cr_skip_test ("a GPU is here: %d device(s)", be->device_count);
    }
    const char *why = za_last_error ();
    cr_expect (strstr (why, "--device cpu") || strstr (why, "GPU"), "%s", why);
    //  Said again, the same way, without loading again.
    cr_expect_null (za_device_backend (&d, &first, &count));
    cr_expect_str_eq (za_last_error (), why);
}

static za_stack_spec_t s_spec;

//  One thread; Adam. The dropout layer draws each micro-batch's mask
//  from its place in the batch, so CPU and device draw the same masks only
//  where they split the batch alike (a batch of up to 16).
#define S_MODEL "conv2d(8,3,relu) maxpool(2) conv2d(8,3,relu) flatten dense(16,relu) dense(10)"
#define S_MODEL_DROPOUT "conv2d(8,3,relu) maxpool(2) flatten dense(16,relu) dropout(0.5) " \
                        "dense(10)"

//  s_spec's replica on `kind`, one thread, with `optim`.
static za_replica_t *
s_replica_with (za_device_kind_t kind, const za_optim_config_t *optim)
{
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &s_spec, .input = {28, 28, 1},
        .threads = 1, .train = 1, .optim = optim, .device = {.kind = kind},
    };
    za_replica_t *replica = za_replica_new (&config, 11);
    cr_assert (replica, "%s", za_last_error ());
    return replica;
}

static za_replica_t *
s_replica (za_device_kind_t kind, const char *model)
{
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    cr_assert_eq (za_stack_parse (model, &s_spec), 0);
    return s_replica_with (kind, &optim);
}

//  Largest |a - b| / (1 + |a|) over n floats.
static double
s_max_diff (const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs ((double) a [i] - b [i]) / (1 + fabs ((double) a [i]));
        if (d > worst)
            worst = d;
    }
    return worst;
}

//  Trains `steps` steps of `size` examples of the real Fashion-MNIST.
static void
s_train (za_replica_t *replica, const za_dataset_t *data, int size, int steps, double *loss)
{
    for (int s = 0; s < steps; s++) {
        za_batch_t batch = {data->features + (size_t) s * size * 784, data->labels + s * size,
                            size, 784, NULL, NULL};
        cr_assert_eq (za_replica_compute_gradients (replica, &batch, s, &loss [s]), 0, "%s",
                      za_last_error ());
        za_replica_apply (replica, s + 1);
    }
}

//  A staged replica (values, gradients and Adam's slots on "the device",
//  copied only when asked for) trains as the CPU does: the same losses and
//  values within rounding (the CPU sums its micro-batches of 16 in another
//  order), slots included, and the same checkpoint layout.
Test (device, a_staged_replica_trains_as_the_cpu_does)
{
    enum { SIZE = 40, STEPS = 6 };
    za_dataset_t *data = za_test_fashion ("train", SIZE * STEPS);
    za_replica_t *cpu = s_replica (ZA_DEVICE_CPU, S_MODEL);
    za_replica_t *staged = s_replica (ZA_DEVICE_CPU_STAGED, S_MODEL);
    size_t total = za_replica_vars (cpu)->total;
    double loss_cpu [STEPS], loss_staged [STEPS];
    s_train (cpu, data, SIZE, STEPS, loss_cpu);
    s_train (staged, data, SIZE, STEPS, loss_staged);
    for (int s = 0; s < STEPS; s++)
        cr_expect (fabs (loss_cpu [s] - loss_staged [s]) < 1e-5, "step %d: %g vs %g", s,
                   loss_cpu [s], loss_staged [s]);
    //  The loss fell: the optimizer ran on the staged side too.
    cr_expect_lt (loss_staged [STEPS - 1], loss_staged [0]);
    cr_expect_lt (s_max_diff (za_replica_values (cpu), za_replica_values (staged), total), 1e-5);
    for (int s = 0; s < 2; s++)
        cr_expect_lt (s_max_diff (za_replica_slot (cpu, s), za_replica_slot (staged, s), total),
                      1e-5, "slot %d", s);
    //  Values written on the host are what the next step uses.
    float *values = za_replica_values (staged);
    memcpy (values, za_replica_values (cpu), total * sizeof (float));
    za_batch_t batch = {data->features, data->labels, SIZE, 784, NULL, NULL};
    double a, b;
    cr_assert_eq (za_replica_compute_gradients (cpu, &batch, 99, &a), 0);
    cr_assert_eq (za_replica_compute_gradients (staged, &batch, 99, &b), 0);
    cr_expect (fabs (a - b) < 1e-6, "%g vs %g", a, b);
    cr_expect_lt (s_max_diff (za_replica_gradients (cpu), za_replica_gradients (staged), total),
                  1e-4);
    //  A checkpoint written from the staged side resumes on the CPU.
    const char *dir = za_test_dir_create ("device");
    cr_assert_eq (za_replica_save (staged, dir, 7, 0), 0);
    za_replica_t *resumed = s_replica (ZA_DEVICE_CPU, S_MODEL);
    int restored = 0;
    int64_t step = 0;
    cr_assert_eq (za_replica_restore_newest (resumed, dir, 1, &restored, &step), 0);
    cr_expect (restored && step == 7);
    cr_expect_eq (memcmp (za_replica_values (resumed), za_replica_values (staged),
                          total * sizeof (float)), 0);
    cr_expect_eq (memcmp (za_replica_slot (resumed, 1), za_replica_slot (staged, 1),
                          total * sizeof (float)), 0);
    //  And back: a CPU checkpoint loads onto the staged side, which evaluates
    //  and predicts as the CPU does.
    za_replica_t *back = s_replica (ZA_DEVICE_CPU_STAGED, S_MODEL);
    cr_assert_eq (za_replica_restore_newest (back, dir, 1, &restored, &step), 0);
    double sum_cpu, sum_back;
    int right_cpu, right_back;
    cr_assert_eq (za_replica_evaluate_batch (resumed, &batch, &sum_cpu, &right_cpu, NULL), 0);
    cr_assert_eq (za_replica_evaluate_batch (back, &batch, &sum_back, &right_back, NULL), 0);
    cr_expect (fabs (sum_cpu - sum_back) < 1e-4 * SIZE, "%g vs %g", sum_cpu, sum_back);
    cr_expect_eq (right_cpu, right_back);
    za_test_dir_remove ();
    za_replica_destroy (&back);
    za_replica_destroy (&resumed);
    za_replica_destroy (&cpu);
    za_replica_destroy (&staged);
    //  With dropout, at a batch both take in one piece: the same masks.
    cpu = s_replica (ZA_DEVICE_CPU, S_MODEL_DROPOUT);
    staged = s_replica (ZA_DEVICE_CPU_STAGED, S_MODEL_DROPOUT);
    s_train (cpu, data, 16, STEPS, loss_cpu);
    s_train (staged, data, 16, STEPS, loss_staged);
    for (int s = 0; s < STEPS; s++)
        cr_expect (fabs (loss_cpu [s] - loss_staged [s]) < 1e-6, "step %d: %g vs %g", s,
                   loss_cpu [s], loss_staged [s]);
    za_replica_destroy (&cpu);
    za_replica_destroy (&staged);
    za_dataset_destroy (&data);
}

//  What a back end derives from the values within a batch (oneDNN's
//  reordered kernels, kept over its micro-batches) is derived anew for the
//  next: values written between two batches (a pull, a restore) give the
//  gradients a replica that never saw the old ones computes, to the bit.
Test (device, values_written_between_batches_are_read_anew)
{
    enum { SIZE = 40 };
    za_dataset_t *data = za_test_fashion ("train", SIZE);
    za_batch_t batch = {data->features, data->labels, SIZE, 784, NULL, NULL};
    const za_device_kind_t kinds [2] = {ZA_DEVICE_CPU, ZA_DEVICE_CPU_STAGED};
    for (int k = 0; k < 2; k++) {
        za_replica_t *used = s_replica (kinds [k], S_MODEL);
        za_replica_t *fresh = s_replica (kinds [k], S_MODEL);
        size_t total = za_replica_vars (used)->total, bytes = total * sizeof (float);
        double loss;
        cr_assert_eq (za_replica_compute_gradients (used, &batch, 1, &loss), 0);
        float *values = za_replica_values (used);
        for (size_t i = 0; i < total; i++)
            values [i] *= 1.5f;
        memcpy (za_replica_values (fresh), values, bytes);
        cr_assert_eq (za_replica_compute_gradients (used, &batch, 2, &loss), 0);
        cr_assert_eq (za_replica_compute_gradients (fresh, &batch, 2, &loss), 0);
        cr_expect_eq (memcmp (za_replica_gradients (used), za_replica_gradients (fresh), bytes),
                      0, "device kind %d", kinds [k]);
        za_replica_destroy (&used);
        za_replica_destroy (&fresh);
    }
    za_dataset_destroy (&data);
}

//  The stack's model_fn, noting whether the replica let it leave its loss
//  on the device (za_model_loss_deferred).
static int s_deferred_calls, s_calls;

static int
s_noting_model_fn (void *state, const float *features, const int32_t *labels, int n,
                   za_mode_t mode, const float *values, float *grads, int64_t step,
                   za_spec_t *spec)
{
    s_calls++;
    s_deferred_calls += za_model_loss_deferred ();
    return za_stack_model_fn ()->model_fn (state, features, labels, n, mode, values, grads,
                                           step, spec);
}

//  On a device a step reads its loss once, where it ends (softmax_xent_add,
//  loss_take): the same losses and right answers as the CPU's, a label
//  outside the classes fails its own batch alone with the CPU's error (the
//  CPU stops at the first micro-batch with one, so may count fewer), and
//  the batches after it (train and evaluate) are exactly as before.
Test (device, a_device_reads_the_loss_at_the_batch_end_and_a_bad_label_fails_its_batch_alone)
{
    enum { SIZE = 40 };
    za_dataset_t *data = za_test_fashion ("train", 2 * SIZE);
    za_model_fn_t noting = *za_stack_model_fn ();
    noting.model_fn = s_noting_model_fn;
    int32_t bad_labels [SIZE];
    memcpy (bad_labels, data->labels, sizeof bad_labels);
    bad_labels [7] = 10;
    bad_labels [30] = -1;
    const za_device_kind_t kinds [2] = {ZA_DEVICE_CPU, ZA_DEVICE_CPU_STAGED};
    double loss [2][3], eval_loss [2];
    int correct [2];
    za_error_set_quiet (1);
    for (int k = 0; k < 2; k++) {
        static za_optim_config_t optim;
        optim = za_optim_config_default (ZA_OPT_ADAM);
        cr_assert_eq (za_stack_parse (S_MODEL, &s_spec), 0);
        za_replica_config_t config = {
            .model_fn = &noting, .params = &s_spec, .input = {28, 28, 1},
            .threads = 1, .train = 1, .optim = &optim, .device = {.kind = kinds [k]},
        };
        za_replica_t *replica = za_replica_new (&config, 11);
        cr_assert (replica, "%s", za_last_error ());
        s_calls = s_deferred_calls = 0;
        za_batch_t good = {data->features, data->labels, SIZE, 784, NULL, NULL};
        za_batch_t bad = {data->features + SIZE * 784, bad_labels, SIZE, 784, NULL, NULL};
        cr_assert_eq (za_replica_compute_gradients (replica, &good, 0, &loss [k][0]), 0);
        za_replica_apply (replica, 1);
        cr_expect_eq (za_replica_compute_gradients (replica, &bad, 1, &loss [k][1]), -1);
        cr_expect (strstr (za_last_error (), "labels outside [0, 10)"), "%s",
                   za_last_error ());
        cr_assert_eq (za_replica_compute_gradients (replica, &good, 1, &loss [k][2]), 0,
                      "%s", za_last_error ());
        za_replica_apply (replica, 2);
        cr_assert_eq (za_replica_evaluate_batch (replica, &good, &eval_loss [k], &correct [k],
                                                 NULL), 0, "%s", za_last_error ());
        //  The CPU's loss is its own; a device's waits for the batch's end.
        cr_expect_gt (s_calls, 0);
        cr_expect_eq (s_deferred_calls, kinds [k] == ZA_DEVICE_CPU? 0: s_calls);
        za_replica_destroy (&replica);
    }
    //  The same model and values: the same losses (the bad batch's sums were
    //  cleared with it), the same right answers.
    cr_expect (fabs (loss [0][0] - loss [1][0]) < 1e-6, "%g vs %g", loss [0][0], loss [1][0]);
    cr_expect (fabs (loss [0][2] - loss [1][2]) < 1e-5, "%g vs %g", loss [0][2], loss [1][2]);
    cr_expect (fabs (eval_loss [0] - eval_loss [1]) < 1e-4 * SIZE, "%g vs %g", eval_loss [0],
               eval_loss [1]);
    cr_expect_eq (correct [0], correct [1]);
    cr_expect_gt (loss [1][0], 1.0);
    za_dataset_destroy (&data);
}

//  Steps on a device that do not wait for their end (za_replica_defer_loss)
//  train to the same bits as steps that do, fed by the input as a GPU is;
//  a take says the mean loss of the steps since the one before, to
//  rounding. A batch that waits between them (an evaluation) reads its own
//  loss alone. A bad label in a deferred step fails the take, and a save
//  before it (nothing of that step is saved), or the take after a read of
//  the values; the steps after it read their own losses again. On the CPU
//  nothing defers.
Test (device, steps_that_do_not_wait_train_to_the_same_bits_and_say_their_mean_loss)
{
    enum { SIZE = 24, STEPS = 9, TAKEN = 4 };
    za_dataset_t *data = za_test_fashion ("train", SIZE * (STEPS + 1));
    float *values [2];
    double loss [2][STEPS], eval [2];
    int right [2];
    size_t bytes = 0;
    za_batch_t first = {data->features, data->labels, SIZE, 784, NULL, NULL};
    for (int defer = 0; defer < 2; defer++) {
        za_replica_t *replica = s_replica (ZA_DEVICE_CPU_STAGED, S_MODEL);
        cr_expect_eq (za_replica_defer_loss (replica, defer), defer);
        za_input_config_t config = za_input_config_default ();
        config.batch_size = SIZE;
        config.prefetch = 2;
        za_input_t *input = za_input_new (data, &config);
        cr_assert (input, "%s", za_last_error ());
        cr_assert_eq (za_replica_feed (replica, input), 0, "%s", za_last_error ());
        za_batch_t batch;
        double mean;
        int64_t steps;
        for (int s = 0; s < STEPS; s++) {
            cr_assert_eq (za_input_next (input, &batch), 1);
            cr_assert_eq (za_replica_compute_gradients (replica, &batch, s, &loss [defer][s]),
                          0, "%s", za_last_error ());
            cr_expect (defer? isnan (loss [defer][s]): loss [defer][s] > 0, "step %d: %g", s,
                       loss [defer][s]);
            za_replica_apply (replica, s + 1);
            if (defer && s + 1 == TAKEN) {
                cr_assert_eq (za_replica_take_loss (replica, &mean, &steps), 0, "%s",
                              za_last_error ());
                cr_expect_eq (steps, TAKEN);
                double sum = 0;
                for (int k = 0; k < TAKEN; k++)
                    sum += loss [0][k];
                cr_expect (fabs (mean - sum / TAKEN) < 1e-6, "%g vs %g", mean, sum / TAKEN);
            }
            if (s == TAKEN + 1)
                cr_assert_eq (za_replica_evaluate_batch (replica, &first, &eval [defer],
                                                         &right [defer], NULL), 0, "%s",
                              za_last_error ());
        }
        if (defer) {
            cr_assert_eq (za_replica_take_loss (replica, &mean, &steps), 0, "%s",
                          za_last_error ());
            cr_expect_eq (steps, STEPS - TAKEN);
            double sum = 0;
            for (int k = TAKEN; k < STEPS; k++)
                sum += loss [0][k];
            cr_expect (fabs (mean - sum / (STEPS - TAKEN)) < 1e-6, "%g vs %g", mean,
                       sum / (STEPS - TAKEN));
            cr_assert_eq (za_replica_take_loss (replica, &mean, &steps), 0);
            cr_expect (steps == 0 && isnan (mean), "%" PRId64 " steps, %g", steps, mean);
        }
        bytes = za_replica_vars (replica)->total * sizeof (float);
        values [defer] = malloc (bytes);
        memcpy (values [defer], za_replica_values (replica), bytes);
        //  All but those the prefetch thread made before it was asked to copy.
        cr_expect_geq (za_replica_fed (replica), STEPS - 2 - 1);
        //  A bad label: the take fails, and so does a save before it; the
        //  step after reads its own loss.
        if (defer) {
            int32_t bad_labels [SIZE];
            memcpy (bad_labels, data->labels + STEPS * SIZE, sizeof bad_labels);
            bad_labels [3] = 10;
            za_batch_t bad = {data->features + (size_t) STEPS * SIZE * 784, bad_labels, SIZE,
                              784, NULL, NULL};
            double nothing;
            za_error_set_quiet (1);
            cr_assert_eq (za_replica_compute_gradients (replica, &bad, STEPS, &nothing), 0);
            const char *dir = za_test_dir_create ("deferred");
            cr_expect_eq (za_replica_save (replica, dir, STEPS + 1, 0), -1);
            cr_expect (strstr (za_last_error (), "labels outside [0, 10)"), "%s",
                       za_last_error ());
            cr_expect_eq (za_checkpoint_newest_step (dir), -1);
            cr_assert_eq (za_replica_compute_gradients (replica, &bad, STEPS, &nothing), 0);
            cr_expect_eq (za_replica_take_loss (replica, &mean, &steps), -1);
            cr_expect (strstr (za_last_error (), "labels outside [0, 10)"), "%s",
                       za_last_error ());
            //  Found by a read of the values, it is the take's to say.
            cr_assert_eq (za_replica_compute_gradients (replica, &bad, STEPS, &nothing), 0);
            cr_assert_not_null (za_replica_values (replica));
            za_error_clear ();
            cr_expect_eq (za_replica_take_loss (replica, &mean, &steps), -1);
            cr_expect (strstr (za_last_error (), "labels outside [0, 10)"), "%s",
                       za_last_error ());
            za_error_set_quiet (0);
            cr_assert_eq (za_replica_compute_gradients (replica, &first, STEPS + 1, &nothing), 0);
            cr_assert_eq (za_replica_take_loss (replica, &mean, &steps), 0, "%s",
                          za_last_error ());
            double alone;
            cr_assert_eq (za_replica_defer_loss (replica, 0), 0);
            cr_assert_eq (za_replica_compute_gradients (replica, &first, STEPS + 1, &alone), 0);
            cr_expect (steps == 1 && mean == alone, "%" PRId64 " steps: %.9g vs %.9g", steps,
                       mean, alone);
            za_test_dir_remove ();
        }
        za_input_destroy (&input);
        za_replica_destroy (&replica);
        //  The input fenced each fed batch it was given back and waited for
        //  every fence (the last ones as it ended).
        int64_t made, waited;
        za_cpu_staged_fences (&made, &waited);
        cr_expect (made >= STEPS - 2 - 1 && waited == made, "%" PRId64 " fences made, %"
                   PRId64 " waited", made, waited);
    }
    cr_expect_eq (memcmp (values [0], values [1], bytes), 0);
    cr_expect (eval [0] == eval [1] && right [0] == right [1], "%g vs %g", eval [0], eval [1]);
    //  On the CPU the steps wait: their losses are there at once.
    za_replica_t *cpu = s_replica (ZA_DEVICE_CPU, S_MODEL);
    cr_expect_eq (za_replica_defer_loss (cpu, 1), 0);
    za_replica_destroy (&cpu);
    free (values [0]), free (values [1]);
    za_dataset_destroy (&data);
}

//  tf.data's prefetch_to_device: the input's prefetch thread copies each
//  batch up, cut as the replica's threads cut it, while the batches before
//  are computed; the replica reads those copies, and trains to the same
//  bits as when it copies each batch itself. A copy cut for other threads
//  is not taken (the replica copies that batch itself, the same bits).
Test (device, an_input_feeding_the_device_trains_to_the_same_bits)
{
    enum { SIZE = 41, STEPS = 9, PREFETCH = 2, WAYS = 5 };
    za_dataset_t *data = za_test_fashion ("train", SIZE * STEPS);
    //  Threads of the replica (replicas on the device); 0 copied by the
    //  replica, 1 fed, 2 fed as for two threads. Each way is held against the first of its threads.
    const int threads [WAYS] = {1, 1, 1, 2, 2}, feeds [WAYS] = {0, 1, 2, 0, 1};
    const int against [WAYS] = {0, 0, 0, 3, 3};
    float *values [WAYS];
    double loss [WAYS][STEPS];
    int64_t fed [WAYS];
    int copied [WAYS] = {0};
    for (int way = 0; way < WAYS; way++) {
        static za_optim_config_t optim;
        optim = za_optim_config_default (ZA_OPT_ADAM);
        cr_assert_eq (za_stack_parse (S_MODEL, &s_spec), 0);
        za_replica_config_t rc = {
            .model_fn = za_stack_model_fn (), .params = &s_spec, .input = {28, 28, 1},
            .threads = 1, .replicas_per_device = threads [way], .train = 1, .optim = &optim,
            .device = {.kind = ZA_DEVICE_CPU_STAGED},
        };
        za_replica_t *replica = za_replica_new (&rc, 11);
        cr_assert (replica, "%s", za_last_error ());
        za_input_config_t config = za_input_config_default ();
        config.batch_size = SIZE;
        config.prefetch = PREFETCH;
        za_input_t *input = za_input_new (data, &config);
        cr_assert (input, "%s", za_last_error ());
        if (feeds [way] == 1)
            cr_assert_eq (za_replica_feed (replica, input), 0, "%s", za_last_error ());
        int both [2] = {0, 0};
        if (feeds [way] == 2)
            cr_assert_eq (za_input_to_device (input, za_backend_cpu_staged (), 2, both), 0);
        za_batch_t batch;
        int s = 0;
        while (za_input_next (input, &batch) == 1) {
            cr_assert_lt (s, STEPS);
            copied [way] += batch.device != NULL;
            cr_assert_eq (za_replica_compute_gradients (replica, &batch, s, &loss [way][s]), 0,
                          "%s", za_last_error ());
            za_replica_apply (replica, ++s);
        }
        cr_assert_eq (s, STEPS);
        fed [way] = za_replica_fed (replica);
        size_t bytes = za_replica_vars (replica)->total * sizeof (float);
        values [way] = malloc (bytes);
        memcpy (values [way], za_replica_values (replica), bytes);
        za_input_destroy (&input);
        za_replica_destroy (&replica);
        int a = against [way];
        cr_expect_eq (memcmp (values [way], values [a], bytes), 0, "way %d", way);
        cr_expect_eq (memcmp (loss [way], loss [a], sizeof loss [0]), 0, "way %d", way);
        //  The batches the prefetch thread made before the replica asked (at
        //  most its slots) were not copied; all after were, and taken where
        //  cut alike.
        if (feeds [way] == 0)
            cr_expect_eq (copied [way], 0, "way %d", way);
        else
            cr_expect_geq (copied [way], STEPS - PREFETCH - 1, "way %d", way);
        cr_expect_eq (fed [way], feeds [way] == 1? copied [way]: 0, "way %d", way);
    }
    for (int way = 0; way < WAYS; way++)
        free (values [way]);
    za_dataset_destroy (&data);
}

static int s_predicted [2][64];

static int
s_note (void *arg, int64_t index, const float *logits, int n_classes, int class_id)
{
    (void) logits, (void) n_classes;
    ((int *) arg) [index] = class_id;
    return 0;
}

//  ZA_MICRO_BATCH (a measuring knob) splits a thread's slice otherwise: the
//  same mean gradient within rounding, other bits (another order of sums),
//  and the same evaluation and predictions (each view's logits whole, below
//  16 too); a value outside 1..4096 or not a number is the default's, to
//  the bit.
Test (device, micro_batch_from_the_environment_keeps_the_gradient)
{
    enum { SIZE = 40 };
    za_dataset_t *data = za_test_fashion ("train", SIZE);
    za_batch_t batch = {data->features, data->labels, SIZE, 784, NULL, NULL};
    const char *settings [] = {NULL, "5", "40", "0", "x16", "5000", ""};
    float *reference = NULL;
    size_t bytes = 0;
    double eval_reference = 0;
    int right_reference = 0;
    for (size_t i = 0; i < sizeof settings / sizeof settings [0]; i++) {
        if (settings [i])
            setenv ("ZA_MICRO_BATCH", settings [i], 1);
        else
            unsetenv ("ZA_MICRO_BATCH");
        za_replica_t *replica = s_replica (ZA_DEVICE_CPU, S_MODEL);
        size_t total = za_replica_vars (replica)->total;
        double loss, eval;
        int right;
        cr_assert_eq (za_replica_compute_gradients (replica, &batch, 1, &loss), 0);
        cr_assert_eq (za_replica_evaluate_batch (replica, &batch, &eval, &right, NULL), 0);
        int64_t index = 0;
        int *predicted = s_predicted [reference? 1: 0];
        cr_assert_eq (za_replica_predict_batch (replica, &batch, s_note, predicted, &index), 0);
        if (!reference) {
            bytes = total * sizeof (float);
            reference = (float *) malloc (bytes);
            memcpy (reference, za_replica_gradients (replica), bytes);
            eval_reference = eval;
            right_reference = right;
        }
        const char *setting = settings [i]? settings [i]: "(unset)";
        cr_expect (fabs (eval - eval_reference) < 1e-4 * SIZE, "ZA_MICRO_BATCH=%s: %g vs %g",
                   setting, eval, eval_reference);
        cr_expect_eq (right, right_reference, "ZA_MICRO_BATCH=%s", setting);
        cr_expect_eq (memcmp (s_predicted [0], predicted, SIZE * sizeof (int)), 0,
                      "ZA_MICRO_BATCH=%s: other predictions", setting);
        if (i > 0 && i <= 2) {
            cr_expect_lt (s_max_diff (reference, za_replica_gradients (replica), total), 1e-5,
                          "ZA_MICRO_BATCH=%s", settings [i]);
            cr_expect_neq (memcmp (reference, za_replica_gradients (replica), bytes), 0,
                           "ZA_MICRO_BATCH=%s: split as the default", settings [i]);
        }
        else if (i > 2)
            cr_expect_eq (memcmp (reference, za_replica_gradients (replica), bytes), 0,
                          "ZA_MICRO_BATCH=%s: not the default", settings [i]);
        za_replica_destroy (&replica);
    }
    unsetenv ("ZA_MICRO_BATCH");
    free (reference);
    za_dataset_destroy (&data);
}

//  s_spec's replica on `kind` with SGD (0.1), clipping at `clip` (0: not).
static za_replica_t *
s_clipping (za_device_kind_t kind, float clip)
{
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    optim.learning_rate = 0.1f;
    optim.global_clipnorm = clip;
    return s_replica_with (kind, &optim);
}

//  --clip-norm on a device: the gradient scaled there to the global norm
//  (tf.clip_by_global_norm) over the variables that train, as the CPU
//  scales it, and the update is the clipped gradient's (SGD, where a clip
//  shows in full). A frozen layer in the middle splits what trains in two.
Test (device, a_device_clips_the_gradient_as_the_cpu_does)
{
    enum { SIZE = 40, STEPS = 4 };
    const float clip = 0.05f;
    za_dataset_t *data = za_test_fashion ("train", SIZE * STEPS);
    cr_assert_eq (za_stack_parse (S_MODEL, &s_spec), 0);
    snprintf (s_spec.freeze, sizeof s_spec.freeze, "conv2d_1/");
    za_replica_t *replicas [3];         //  the CPU's clipped, the device's, the device's not
    for (int i = 0; i < 3; i++)
        replicas [i] = s_clipping (i == 0? ZA_DEVICE_CPU: ZA_DEVICE_CPU_STAGED, i < 2? clip: 0);
    const za_vars_t *vars = za_replica_vars (replicas [0]);
    size_t total = vars->total;
    //  The clip itself, on the device: the norm of what trains becomes the
    //  clip; a frozen variable's gradient is left as it was.
    za_batch_t batch = {data->features, data->labels, SIZE, 784, NULL, NULL};
    double loss;
    cr_assert_eq (za_replica_compute_gradients (replicas [1], &batch, 0, &loss), 0, "%s",
                  za_last_error ());
    float *before = (float *) malloc (total * sizeof (float));
    memcpy (before, za_replica_gradients (replicas [1]), total * sizeof (float));
    cr_assert_eq (za_replica_compute_gradients (replicas [1], &batch, 0, &loss), 0);
    cr_assert_eq (za_replica_clip_gradients (replicas [1], clip), 0, "%s", za_last_error ());
    const float *after = za_replica_gradients (replicas [1]);
    double squares = 0, unclipped = 0;
    int frozen = 0;
    for (int v = 0; v < vars->count; v++) {
        const za_var_t *var = &vars->vars [v];
        for (size_t i = var->offset; i < var->offset + var->size; i++) {
            if (var->frozen) {
                cr_assert_eq (after [i], before [i], "%s: untouched", var->name);
                continue;
            }
            squares += (double) after [i] * after [i];
            unclipped += (double) before [i] * before [i];
        }
        frozen += var->frozen;
    }
    cr_expect_eq (frozen, 2, "conv2d_1's kernel and bias are frozen");
    cr_expect_gt (sqrt (unclipped), 2 * clip, "the gradient is above the clip");
    cr_expect (fabs (sqrt (squares) - clip) < 1e-4 * clip, "norm %g, clip %g", sqrt (squares),
               clip);
    free (before);
    //  Training: the device's steps are the CPU's; without the clip they are not.
    double losses [3][STEPS];
    for (int i = 0; i < 3; i++) {
        za_replica_destroy (&replicas [i]);
        replicas [i] = s_clipping (i == 0? ZA_DEVICE_CPU: ZA_DEVICE_CPU_STAGED, i < 2? clip: 0);
        s_train (replicas [i], data, SIZE, STEPS, losses [i]);
    }
    for (int s = 0; s < STEPS; s++)
        cr_expect (fabs (losses [0][s] - losses [1][s]) < 1e-5, "step %d: %g vs %g", s,
                   losses [0][s], losses [1][s]);
    const float *cpu = za_replica_values (replicas [0]);
    cr_expect_lt (s_max_diff (cpu, za_replica_values (replicas [1]), total), 1e-6);
    const float *staged = za_replica_values (replicas [1]);
    cr_expect_gt (s_max_diff (staged, za_replica_values (replicas [2]), total), 1e-3,
                  "the clip changed the update");
    for (int i = 0; i < 3; i++)
        za_replica_destroy (&replicas [i]);
    za_dataset_destroy (&data);
}

//  With threads, the optimizer's update is split over them (a share of
//  each run of variables per thread): every value and slot ends as one
//  update over the whole block makes it, bit for bit.
Test (device, the_optimizer_split_over_threads_updates_each_value_once)
{
    enum { SIZE = 30 };
    za_dataset_t *data = za_test_fashion ("train", SIZE);
    za_batch_t batch = {data->features, data->labels, SIZE, 784, NULL, NULL};
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(64,relu) dense(10)",
                                  &s_spec), 0);
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &s_spec, .input = {28, 28, 1},
        .threads = 3, .train = 1, .optim = &optim, .device = {.kind = ZA_DEVICE_CPU},
    };
    za_replica_t *replica = za_replica_new (&config, 11);
    cr_assert (replica, "%s", za_last_error ());
    size_t total = za_replica_vars (replica)->total, bytes = total * sizeof (float);
    cr_assert_gt (total, 3 * 16384, "big enough to be split");
    double loss;
    for (int64_t step = 1; step <= 2; step++) {
        cr_assert_eq (za_replica_compute_gradients (replica, &batch, step, &loss), 0);
        float *values = (float *) malloc (bytes), *m = (float *) malloc (bytes);
        float *v = (float *) malloc (bytes);
        memcpy (values, za_replica_values (replica), bytes);
        memcpy (m, za_replica_slot (replica, 0), bytes);
        memcpy (v, za_replica_slot (replica, 1), bytes);
        float *slots [] = {m, v};
        za_optim_apply (&optim, step, values, za_replica_gradients (replica), slots, total);
        za_replica_apply (replica, step);
        cr_expect_eq (memcmp (values, za_replica_values (replica), bytes), 0, "step %lld",
                      (long long) step);
        cr_expect_eq (memcmp (m, za_replica_slot (replica, 0), bytes), 0);
        cr_expect_eq (memcmp (v, za_replica_slot (replica, 1), bytes), 0);
        free (values), free (m), free (v);
    }
    za_replica_destroy (&replica);
    za_dataset_destroy (&data);
}

//  Two replicas on one device, each half of the batch, make one replica's
//  step at the whole batch within rounding (MirroredStrategy's promise).
Test (device, two_replicas_per_device_equal_one_at_twice_the_batch)
{
    enum { SIZE = 64, STEPS = 4 };
    za_dataset_t *data = za_test_fashion ("train", SIZE * STEPS);
    double loss_one [STEPS], loss_two [STEPS];
    //  Dropout draws its mask per replica: without it the two are the same
    //  function of the batch.
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(10)", &s_spec), 0);
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_MOMENTUM);
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &s_spec, .input = {28, 28, 1},
        .train = 1, .optim = &optim, .device = {.kind = ZA_DEVICE_CPU_STAGED},
    };
    za_replica_t *one = za_replica_new (&config, 5);
    config.replicas_per_device = 2;
    za_replica_t *two = za_replica_new (&config, 5);
    cr_assert (one && two);
    size_t total = za_replica_vars (one)->total;
    s_train (one, data, SIZE, STEPS, loss_one);
    s_train (two, data, SIZE, STEPS, loss_two);
    for (int s = 0; s < STEPS; s++)
        cr_expect (fabs (loss_one [s] - loss_two [s]) < 1e-5, "step %d: %g vs %g", s,
                   loss_one [s], loss_two [s]);
    cr_expect_lt (s_max_diff (za_replica_values (one), za_replica_values (two), total), 1e-5);
    cr_expect_lt (s_max_diff (za_replica_slot (one, 0), za_replica_slot (two, 0), total), 1e-5);
    //  Predictions come back from each replica's half in order.
    za_batch_t batch = {data->features, NULL, SIZE, 784, NULL, NULL};
    int64_t index = 0;
    cr_assert_eq (za_replica_predict_batch (one, &batch, s_note, s_predicted [0], &index), 0);
    index = 0;
    cr_assert_eq (za_replica_predict_batch (two, &batch, s_note, s_predicted [1], &index), 0);
    cr_expect_eq (index, SIZE);
    cr_expect_eq (memcmp (s_predicted [0], s_predicted [1], sizeof s_predicted [0]), 0);
    za_replica_destroy (&one);
    za_replica_destroy (&two);
    za_dataset_destroy (&data);
}

//  A replica of `config` trained `steps` steps of `size` examples; what the
//  back end's collectives said in *said (za_error_clear first).
static za_replica_t *
s_trained (const za_replica_config_t *config, const za_dataset_t *data, int size, int steps,
           double *loss, const char *collective, char *said, size_t said_size)
{
    if (collective)
        setenv ("ZA_STAGED_COLLECTIVE", collective, 1);
    za_error_set_quiet (1);
    za_error_clear ();
    za_replica_t *replica = za_replica_new (config, 5);
    cr_assert (replica, "%s", za_last_error ());
    s_train (replica, data, size, steps, loss);
    snprintf (said, said_size, "%s", za_last_error ());
    unsetenv ("ZA_STAGED_COLLECTIVE");
    return replica;
}

//  Two devices, two replicas each: the replicas summed on their device,
//  the devices' sums on the first by the back end's collective (NCCL's
//  reduce on GPUs; loops on cpu-staged), the values broadcast back, train
//  as four replicas on one device, at a batch that splits unevenly and at
//  one smaller than the replicas. A collective that does not start (as an
//  NCCL that cannot) is said and the devices go by copies, alike: the sum
//  alone (ZA_STAGED_COLLECTIVE=sum: the fallback after the weighting), or
//  both (=fail: the broadcast fails first, before any sum). No GPU runs
//  here: NCCL itself runs only under --device cuda:all on a machine with
//  several GPUs (docs/gpus.md).
Test (device, two_devices_by_collective_or_by_copies_train_as_one_device)
{
    enum { SIZE = 63, STEPS = 4, WAYS = 4 };
    za_dataset_t *data = za_test_fashion ("train", SIZE * STEPS + 3);
    cr_assert_eq (za_stack_parse ("conv2d(8,3,relu) maxpool(2) flatten dense(10)", &s_spec), 0);
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_MOMENTUM);
    za_replica_config_t one = {
        .model_fn = za_stack_model_fn (), .params = &s_spec, .input = {28, 28, 1},
        .train = 1, .optim = &optim, .device = {.kind = ZA_DEVICE_CPU_STAGED},
        .replicas_per_device = 4,
    };
    za_replica_config_t two = one;
    two.device.index = ZA_DEVICE_ALL;
    two.replicas_per_device = 2;
    const char *how [WAYS] = {"one device", "the collective", "copies after the sum failed",
                              "copies throughout"};
    za_replica_t *replica [WAYS];
    double loss [WAYS][STEPS];
    char said [WAYS][ZA_ERROR_MAX_CHARS];
    replica [0] = s_trained (&one, data, SIZE, STEPS, loss [0], NULL, said [0], sizeof said [0]);
    replica [1] = s_trained (&two, data, SIZE, STEPS, loss [1], NULL, said [1], sizeof said [1]);
    replica [2] = s_trained (&two, data, SIZE, STEPS, loss [2], "sum", said [2], sizeof said [2]);
    replica [3] = s_trained (&two, data, SIZE, STEPS, loss [3], "fail", said [3], sizeof said [3]);
    //  The collectives ran where asked, and failed where made to.
    cr_expect_eq (said [1][0], 0, "the collective said: %s", said [1]);
    cr_expect (strstr (said [2], "collective sum does not start"), "%s", said [2]);
    cr_expect (strstr (said [3], "collective broadcast does not start"), "%s", said [3]);
    size_t total = za_replica_vars (replica [0])->total;
    cr_expect_gt (fabs (loss [0][STEPS - 1] - loss [0][0]), 1e-3, "it trained");
    //  A last step of 3 examples: one replica of the four gets none.
    za_batch_t small = {data->features + (size_t) SIZE * STEPS * 784,
                        data->labels + SIZE * STEPS, 3, 784, NULL, NULL};
    for (int w = 0; w < WAYS; w++) {
        double last;
        cr_assert_eq (za_replica_compute_gradients (replica [w], &small, STEPS, &last), 0, "%s",
                      za_last_error ());
        za_replica_apply (replica [w], STEPS + 1);
    }
    for (int w = 1; w < WAYS; w++) {
        for (int s = 0; s < STEPS; s++)
            cr_expect (fabs (loss [0][s] - loss [w][s]) < 1e-5, "%s, step %d: %g vs %g",
                       how [w], s, loss [0][s], loss [w][s]);
        cr_expect_lt (s_max_diff (za_replica_values (replica [0]), za_replica_values (replica [w]),
                                  total), 1e-5, "%s", how [w]);
        cr_expect_lt (s_max_diff (za_replica_slot (replica [0], 0), za_replica_slot (replica [w], 0),
                                  total), 1e-5, "%s", how [w]);
    }
    for (int w = 0; w < WAYS; w++)
        za_replica_destroy (&replica [w]);
    za_dataset_destroy (&data);
}

//  A model_fn that reads memory itself cannot run on a device: one error
//  naming it, no replica.
static void *
s_host_create (const void *params, za_input_shape_t input, int batch_max,
               const za_backend_t *backend, za_vars_t *vars)
{
    return za_stack_model_fn ()->create (params, input, batch_max, backend, vars);
}

Test (device, a_host_only_model_fn_is_refused_on_a_device)
{
    za_model_fn_t host_only = *za_stack_model_fn ();
    host_only.name = "host_only";
    host_only.create = s_host_create;
    host_only.device_ready = 0;
    cr_assert_eq (za_stack_parse ("flatten dense(10)", &s_spec), 0);
    za_replica_config_t config = {
        .model_fn = &host_only, .params = &s_spec, .input = {28, 28, 1}, .train = 1,
        .device = {.kind = ZA_DEVICE_CPU_STAGED},
    };
    za_error_set_quiet (1);
    cr_expect_null (za_replica_new (&config, 1));
    cr_expect (strstr (za_last_error (), "host_only") && strstr (za_last_error (), "cpu"), "%s",
               za_last_error ());
    config.device.kind = ZA_DEVICE_CPU;
    za_replica_t *replica = za_replica_new (&config, 1);
    cr_expect_not_null (replica);
    za_replica_destroy (&replica);
}
