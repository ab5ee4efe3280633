/*  cuda_replay.c: a training step replayed as a CUDA graph (ZA_CUDA_GRAPHS=1,
    docs/gpus.md) computes what the step run call by call computes. Two
    replicas of the seed CNN on the GPU, the same seed and the same batches
    (random pixels, labels 0-9), one with graphs and one without, each 40
    Adam steps on 3 batches in turn (each copied into the replica's upload
    buffer: one recording) and a short one (run as it comes: its first);
    then the losses step by step, the values and the slots compared, and
    the steps the first replayed counted (38: from the third on). cuDNN's
    algorithms are the deterministic ones here (ZA_CUDNN_DETERMINISTIC=1
    unless set): with those that sum with atomics, two runs of the same
    steps drifted apart by up to 4x the RMS in Adam's slot after 40 steps
    on an H200, where the deterministic ones give the same bits (1e-6 of
    |x| + RMS asked; 0 measured). Then steps that do not wait for their end
    (za_replica_defer_loss, as the Estimator's on a GPU), fed by the input's
    prefetch thread (which must not write a batch's copy while a queued
    step reads it: the fences), with graphs and without, against steps that
    wait: 12 different batches of 1024 (a copy written too early would
    train on the next batch), the values and the mean loss at two takes.
    Exits 77 (CTest: skipped) without a GPU, 0 when all holds, 1 otherwise;
    ZA_REPLAY_DEVICE=cpu-staged runs it on the CPU (a dry run). Not a
    Criterion suite: CUDA in every forked test would cost seconds.          */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_replica.h"
#include "za/za_dataset.h"
#include "za/za_input.h"
#include "za/za_model.h"
#include "za/za_util.h"

#define STEPS 40
#define BATCH 64
#define BUFFERS 3

static za_stack_spec_t s_spec;
static int s_failures;

static za_device_kind_t s_kind = ZA_DEVICE_CUDA;

static za_replica_t *
s_replica (int graphs)
{
    static za_optim_config_t optim;
    optim = za_optim_config_default (ZA_OPT_ADAM);
    setenv ("ZA_CUDA_GRAPHS", graphs? "1": "0", 1);
    za_replica_config_t config = {
        .model_fn = za_stack_model_fn (), .params = &s_spec, .input = {28, 28, 1},
        .threads = 1, .train = 1, .optim = &optim,
        .device = {.kind = s_kind},
    };
    return za_replica_new (&config, 11);
}

//  Largest |a - b| / (|a| + the RMS of a) over n floats.
static double
s_diff (const float *a, const float *b, size_t n)
{
    double squares = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        squares += (double) a [i] * a [i];
    double rms = sqrt (squares / (double) (n? n: 1));
    for (size_t i = 0; i < n; i++) {
        double d = fabs ((double) a [i] - b [i]) / (fabs ((double) a [i]) + rms + 1e-30);
        if (d > worst || d != d)
            worst = d;
    }
    return worst;
}

static void
s_expect (int ok, const char *what, double value)
{
    printf ("%-44s %.3e  %s\n", what, value, ok? "ok": "FAIL");
    s_failures += !ok;
}

//  Steps that do not wait, fed, with graphs (way 2) and without (1),
//  against steps that wait (0): FED_STEPS of FED_BATCH, a take after
//  FED_TAKE and one at the end.
#define FED_BATCH 1024
#define FED_STEPS 12
#define FED_TAKE 5

static int
s_deferred_part (void)
{
    size_t pixels = 28 * 28, count = (size_t) FED_BATCH * FED_STEPS;
    float *features = (float *) malloc (count * pixels * sizeof (float));
    int32_t *labels = (int32_t *) malloc (count * sizeof (int32_t));
    if (!features || !labels)
        return -1;
    uint64_t state = 11;
    for (size_t i = 0; i < count * pixels; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        features [i] = (float) (state >> 40) / (float) (1 << 24);
    }
    for (size_t i = 0; i < count; i++)
        labels [i] = (int32_t) ((i * 3 + i / 7) % 10);
    za_dataset_t *data = za_dataset_from_arrays (features, labels, (int64_t) count, 28, 28, 1);
    free (features), free (labels);
    if (!data)
        return -1;
    double taken [3][2];
    float *values [3] = {NULL};
    size_t total = 0;
    int64_t fed [3];
    double waited [3] = {0};
    for (int way = 0; way < 3; way++) {
        za_replica_t *replica = s_replica (way == 2);
        za_input_config_t config = za_input_config_default ();
        config.batch_size = FED_BATCH;
        config.prefetch = 2;
        za_input_t *input = replica? za_input_new (data, &config): NULL;
        if (!input || za_replica_feed (replica, input)
            || za_replica_defer_loss (replica, way > 0) != (way > 0)) {
            fprintf (stderr, "cuda_replay: %s\n", za_last_error ());
            return -1;
        }
        double sum = 0;
        int64_t steps;
        for (int step = 0; step < FED_STEPS; step++) {
            za_batch_t batch;
            double loss;
            if (za_input_next (input, &batch) != 1
                || za_replica_compute_gradients (replica, &batch, step, &loss)) {
                fprintf (stderr, "cuda_replay: fed step %d: %s\n", step, za_last_error ());
                return -1;
            }
            za_replica_apply (replica, step + 1);
            sum += way? 0: loss;
            int take = step + 1 == FED_TAKE? 0: step + 1 == FED_STEPS? 1: -1;
            if (take >= 0 && way == 0)
                taken [0][take] = sum / (take? FED_STEPS - FED_TAKE: FED_TAKE), sum = 0;
            double t0 = za_clock_mono ();
            if (take >= 0 && way > 0 && za_replica_take_loss (replica, &taken [way][take],
                                                              &steps)) {
                fprintf (stderr, "cuda_replay: the take: %s\n", za_last_error ());
                return -1;
            }
            //  How long the last take waited for the steps still queued (none
            //  if something made each step wait): said, not held to.
            if (take == 1 && way > 0)
                waited [way] = za_clock_mono () - t0;
        }
        fed [way] = za_replica_fed (replica);
        total = za_replica_vars (replica)->total;
        values [way] = (float *) malloc (total * sizeof (float));
        if (!values [way])
            return -1;
        memcpy (values [way], za_replica_values (replica), total * sizeof (float));
        za_input_destroy (&input);
        za_replica_destroy (&replica);
    }
    printf ("cuda_replay: seed CNN, %d Adam steps of %d fed by the input, steps that do not "
            "wait (without and with graphs) against steps that wait\n", FED_STEPS, FED_BATCH);
    for (int way = 1; way < 3; way++) {
        char what [64];
        for (int take = 0; take < 2; take++) {
            double d = fabs (taken [way][take] - taken [0][take]) / fabs (taken [0][take]);
            snprintf (what, sizeof what, "%s: mean loss at take %d", way == 1? "deferred"
                                                                   : "deferred+graphs", take);
            s_expect (d <= 1e-4, what, d);
        }
        double d = s_diff (values [0], values [way], total);
        snprintf (what, sizeof what, "%s: values (of |x| + rms)", way == 1? "deferred"
                                                                 : "deferred+graphs");
        s_expect (d <= 1e-6, what, d);
        snprintf (what, sizeof what, "%s: batches fed", way == 1? "deferred": "deferred+graphs");
        s_expect (fed [way] >= FED_STEPS - 3, what, (double) fed [way]);
        printf ("%s: the last read waited %.2f ms for the steps queued\n",
                way == 1? "deferred": "deferred+graphs", 1e3 * waited [way]);
    }
    for (int way = 0; way < 3; way++)
        free (values [way]);
    za_dataset_destroy (&data);
    return 0;
}

int
main (void)
{
    //  ZA_REPLAY_DEVICE=cpu-staged: a dry run on the CPU (nothing is
    //  recorded there: the replay counts fail, the rest must hold).
    const char *device = getenv ("ZA_REPLAY_DEVICE");
    setenv ("ZA_CUDNN_DETERMINISTIC", "1", 0);
    za_device_t parsed;
    if (device && *device) {
        if (za_device_parse (device, &parsed)) {
            fprintf (stderr, "cuda_replay: ZA_REPLAY_DEVICE: %s\n", za_last_error ());
            return 1;
        }
        s_kind = parsed.kind;
    }
    if (za_stack_parse (ZA_SEED_CNN, &s_spec)) {
        fprintf (stderr, "cuda_replay: %s\n", za_last_error ());
        return 1;
    }
    za_replica_t *replica [2] = {s_replica (1), NULL};
    if (!replica [0]) {
        printf ("cuda_replay: skipped: %s\n", za_last_error ());
        return 77;
    }
    if (!(replica [1] = s_replica (0))) {
        fprintf (stderr, "cuda_replay: %s\n", za_last_error ());
        return 1;
    }
    size_t pixels = 28 * 28;
    float *features = (float *) malloc ((size_t) BUFFERS * BATCH * pixels * sizeof (float));
    int32_t *labels = (int32_t *) malloc ((size_t) BUFFERS * BATCH * sizeof (int32_t));
    if (!features || !labels)
        return 1;
    uint64_t state = 7;
    for (size_t i = 0; i < (size_t) BUFFERS * BATCH * pixels; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        features [i] = (float) (state >> 40) / (float) (1 << 24);
    }
    for (int i = 0; i < BUFFERS * BATCH; i++)
        labels [i] = (int32_t) ((i * 7 + 3) % 10);
    double worst_loss = 0;
    for (int step = 0; step <= STEPS; step++) {
        //  The three batches in turn, then a short one (run as it comes).
        int b = step % BUFFERS, size = step == STEPS? BATCH / 2: BATCH;
        za_batch_t batch = {.features = features + (size_t) b * BATCH * pixels,
                            .labels = labels + (size_t) b * BATCH, .size = size,
                            .feature_size = (int64_t) pixels};
        double loss [2];
        for (int r = 0; r < 2; r++) {
            if (za_replica_compute_gradients (replica [r], &batch, step, &loss [r])) {
                fprintf (stderr, "cuda_replay: step %d: %s\n", step, za_last_error ());
                return 1;
            }
            za_replica_apply (replica [r], step + 1);
        }
        double d = fabs (loss [0] - loss [1]) / (fabs (loss [1]) + 1e-30);
        if (d > worst_loss || d != d)
            worst_loss = d;
    }
    const za_vars_t *vars = za_replica_vars (replica [1]);
    size_t total = vars->total;
    float *values = (float *) malloc (total * sizeof (float));
    float *slot = (float *) malloc (total * sizeof (float));
    if (!values || !slot)
        return 1;
    memcpy (values, za_replica_values (replica [1]), total * sizeof (float));
    memcpy (slot, za_replica_slot (replica [1], 0), total * sizeof (float));
    printf ("cuda_replay: seed CNN, %d Adam steps of %d, %d batches in turn, CUDA graphs"
            " against none\n", STEPS + 1, BATCH, BUFFERS);
    s_expect (worst_loss <= 1e-6, "loss, largest relative difference", worst_loss);
    double d = s_diff (values, za_replica_values (replica [0]), total);
    s_expect (d <= 1e-6, "values (of |x| + rms)", d);
    d = s_diff (slot, za_replica_slot (replica [0], 0), total);
    s_expect (d <= 1e-6, "Adam's first slot (of |x| + rms)", d);
    int64_t replayed = za_replica_replayed (replica [0]);
    s_expect (replayed == STEPS - 2, "steps replayed", (double) replayed);
    s_expect (za_replica_replayed (replica [1]) == 0, "steps replayed without graphs",
              (double) za_replica_replayed (replica [1]));
    free (values), free (slot), free (features), free (labels);
    za_replica_destroy (&replica [0]);
    za_replica_destroy (&replica [1]);
    if (s_deferred_part ())
        return 1;
    printf ("cuda_replay: %s\n", s_failures? "FAILED": "replayed steps compute the same");
    return s_failures? 1: 0;
}
