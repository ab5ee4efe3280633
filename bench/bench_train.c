/*  bench_train: trains the seed CNN on the real Fashion-MNIST through the
    Estimator (input pipeline included) and prints images/sec, or measures
    cblas_sgemm's peak. bench/train_vs_torch.sh runs it against PyTorch.

    bench_train speed BATCH THREADS STEPS WARMUP
      -> zactor images_per_sec=F batch=B threads=T steps=S seconds=F gflops=F
    bench_train model TEXT SIDE BATCH THREADS STEPS WARMUP [FREEZE [cache]]
      -> the same for the layer stack TEXT on 2,048 Fashion-MNIST images
         upscaled to SIDE x SIDE x 3 (bench/transfer.sh: VGG16), the
         variables FREEZE selects frozen; with `cache`, --cache-frozen, timed
         after a first epoch that fills it
    bench_train peak THREADS
      -> sgemm_peak gflops=F threads=T n=N
    bench_train peak_bf16 THREADS
      -> bf16_peak gflops=F threads=T n=N isa=I: oneDNN's matmul of bf16
         inputs into fp32, the limit of --precision mixed_bfloat16 here

    ZA_BENCH_DEVICE=cuda (any --device text) trains on that device,
    ZA_BENCH_REPLICAS=N puts N replicas on each GPU (--replicas-per-device),
    ZA_BENCH_PRECISION=mixed_bfloat16 (any --precision text) computes so,
    ZA_BENCH_PROFILE=1 adds the timed steps' ms per step in each layer
    (`profile row=I name=N forward_ms=F backward_ms=F`, then the step, the
    layers' sum and the time outside them; za_stack_profile_start).
    ZA_BENCH_BUSY=1, on a GPU, adds the share of the timed steps in which
    the GPU computed or copied (CUPTI's records: gpu_busy=%), and the
    kernels and copies a step launched (bench/gpu_busy.h).                 */
#include "za/za_estimator.h"
#include "za/za_idx.h"

#include <cblas.h>
#ifdef ZA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif
#ifdef ZA_HAVE_CUPTI
#include "gpu_busy.h"
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PEAK_N 1536
#define UPSCALED_COUNT 2048
//  A peak is the best of at least PEAK_REPEATS products and PEAK_SECONDS:
//  a CPU that clocks up (or warms its AMX units) late, on a shared host,
//  gets the time to show its best.
#define PEAK_REPEATS 10
#define PEAK_SECONDS 1.5

typedef struct {
    int64_t warmup;
    double t_start;
    double t_end;
    double wall_start;              //  the same, in Unix time (bench/gpu.sh
    double wall_end;                //  reads the GPU's samples in between)
    int profile;                    //  ZA_BENCH_PROFILE: per layer, from warmup on
    int busy;                       //  ZA_BENCH_BUSY: the GPU's busy share, from warmup on
    double before;                  //  the step's before_run (za_clock_mono)
    double input;                   //  the timed steps' seconds from an after_run to the
    double run;                     //  next before_run (the batch taken), and from there
} s_timer_t;                        //  to its after_run (the step queued or run)

static double
s_wall (void)
{
    struct timespec now;
    clock_gettime (CLOCK_REALTIME, &now);
    return (double) now.tv_sec + now.tv_nsec * 1e-9;
}

//  The warmup's last step read (its work done) before the clock starts; the
//  last step's is read by the loop.
static int
s_before_run (void *arg, const za_run_context_t *ctx)
{
    s_timer_t *timer = (s_timer_t *) arg;
    timer->before = za_clock_mono ();
    if (ctx->global_step >= timer->warmup)
        timer->input += timer->before - timer->t_end;
    return ctx->global_step + 1 == timer->warmup;
}

static int
s_after_run (void *arg, const za_run_context_t *ctx)
{
    s_timer_t *timer = (s_timer_t *) arg;
    if (ctx->global_step == timer->warmup) {
        //  (CUPTI's start, a dlopen and its set-up, before the clock.)
#ifdef ZA_HAVE_CUPTI
        if (timer->busy && s_busy_start ())
            timer->busy = 0;
#endif
        if (timer->profile)
            za_stack_profile_start ();
        timer->t_start = za_clock_mono ();
        timer->wall_start = s_wall ();
    }
    timer->t_end = za_clock_mono ();
    timer->wall_end = s_wall ();
    if (ctx->global_step > timer->warmup)
        timer->run += timer->t_end - timer->before;
#ifdef ZA_HAVE_CUPTI
    s_busy_mark ();
#endif
    return 0;
}

typedef struct {
    const za_dataset_t *train;
    int batch;
} s_input_t;

static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    za_mode_t mode = context->mode;
    (void) mode;
    s_input_t *input = (s_input_t *) arg;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = input->batch;
    config.shuffle_buffer = (int) input->train->count;
    config.seed = 1;
    config.epochs = -1;
    return za_input_new (input->train, &config);
}

//  The first `count` Fashion-MNIST images, nearest-upscaled to side x side
//  and repeated over `channels`: real pixels at a transfer model's size.
static za_dataset_t *
s_upscaled (const za_dataset_t *train, int count, int side, int channels)
{
    za_dataset_t *data = za_dataset_new (count, side, side, channels, 0);
    for (int i = 0; data && i < count; i++) {
        for (int y = 0; y < side; y++)
            for (int x = 0; x < side; x++)
                for (int c = 0; c < channels; c++)
                    data->features [(((size_t) i * side + y) * side + x) * channels + c]
                        = train->features [(size_t) i * 784 + (y * 28 / side) * 28
                                           + x * 28 / side];
        data->labels [i] = train->labels [i];
    }
    if (data)
        za_dataset_count_classes (data);
    return data;
}

//  ZA_BENCH_PROFILE=1: the timed steps' milliseconds per step in each layer
//  (summed over the threads), the loss, and what no layer holds (the
//  optimizer, the input, the hand-offs between threads; on one thread).
static void
s_profile_print (int steps, double seconds)
{
    za_stack_profile_stop ();
    double layers = 0;
    for (int i = 0; i <= ZA_MAX_LAYERS; i++) {
        double forward, backward;
        const char *name;
        if (za_stack_profile_get (i, &forward, &backward, &name) || !name)
            continue;
        char row [16];
        snprintf (row, sizeof row, i == ZA_MAX_LAYERS? "loss": "%d", i);
        printf ("profile row=%s name=%s forward_ms=%.3f backward_ms=%.3f\n", row, name,
                1e3 * forward / steps, 1e3 * backward / steps);
        layers += forward + backward;
    }
    printf ("profile step_ms=%.3f layers_ms=%.3f outside_ms=%.3f\n", 1e3 * seconds / steps,
            1e3 * layers / steps, 1e3 * (seconds - layers) / steps);
}

//  Trains `model` (a layer stack) on data, timing the steps after warmup.
static int
s_speed (const char *model, const char *freeze, int cache, za_dataset_t *train, int batch,
         int threads, int steps, int warmup)
{
    za_stack_spec_t spec;
    if (za_stack_parse (model, &spec))
        return 1;
    if (freeze)
        snprintf (spec.freeze, sizeof spec.freeze, "%s", freeze);
    //  --cache-frozen: the warmup fills the cache (one epoch), then it serves.
    spec.cache_frozen = cache;
    if (cache)
        warmup += (int) ((train->count + batch - 1) / batch);
    char dir [] = "/tmp/zactor-bench-XXXXXX";
    if (!mkdtemp (dir))
        return 1;
    za_run_config_t config = za_run_config_default ();
    config.model_dir = dir;
    config.threads = threads;
    config.save_checkpoints_secs = 0;
    config.save_checkpoints_steps = 1000000000;
    config.log_step_count_steps = 0;
    config.save_summary_steps = 0;
    config.progress = 0;
    const char *device = getenv ("ZA_BENCH_DEVICE");
    if (device && *device && za_device_parse (device, &config.device)) {
        fprintf (stderr, "bench_train: ZA_BENCH_DEVICE: %s\n", za_last_error ());
        return 1;
    }
    const char *replicas = getenv ("ZA_BENCH_REPLICAS");
    config.replicas_per_device = replicas? atoi (replicas): 0;
    const char *precision = getenv ("ZA_BENCH_PRECISION");
    precision = precision && *precision? precision: "fp32";
    if (za_policy_parse (precision, &config.precision)) {
        fprintf (stderr, "bench_train: ZA_BENCH_PRECISION: %s\n", za_last_error ());
        return 1;
    }
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_input_shape_t shape = {train->height, train->width, train->channels};
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim,
                                                  &config);
    const char *profile = getenv ("ZA_BENCH_PROFILE");
    const char *busy = getenv ("ZA_BENCH_BUSY");
    s_timer_t timer = {.warmup = warmup, .profile = profile && atoi (profile) > 0,
                       .busy = busy && atoi (busy) > 0 && config.device.kind == ZA_DEVICE_CUDA};
    za_hook_t hook = {.arg = &timer, .before_run = s_before_run, .after_run = s_after_run};
    int rc = estimator? za_estimator_add_hook (estimator, &hook): -1;
    s_input_t input = {train, batch};
    if (rc == 0)
        rc = za_estimator_train (estimator, s_input_fn, &input, warmup + steps);
    double seconds = timer.t_end - timer.t_start;
    double images = (double) steps * batch;
    //  Training costs about three forward passes (forward, and backward's two
    //  products per layer).
    double flops = 3 * za_stack_forward_flops (&spec, shape) * images;
    if (rc == 0)
        printf ("zactor images_per_sec=%.2f batch=%d threads=%d steps=%d seconds=%.4f "
                "gflops=%.1f device=%s replicas=%d precision=%s window=%.3f,%.3f\n",
                images / seconds, batch, threads, steps, seconds, flops / seconds / 1e9,
                device && *device? device: "cpu",
                config.replicas_per_device? (int) config.replicas_per_device: 1, precision,
                timer.wall_start, timer.wall_end);
    if (rc == 0 && timer.profile)
        s_profile_print (steps, seconds);
#ifdef ZA_HAVE_CUPTI
    double share;
    int64_t kernels, copies;
    if (rc == 0 && timer.busy && s_busy_stop (&share, &kernels, &copies) == 0)
        printf ("busy gpu_busy=%.1f kernels_per_step=%.1f copies_per_step=%.1f "
                "host_input_ms=%.4f host_step_ms=%.4f\n", 100 * share,
                (double) kernels / steps, (double) copies / steps, 1e3 * timer.input / steps,
                1e3 * timer.run / steps);
#else
    if (timer.busy)
        fprintf (stderr, "bench_train: ZA_BENCH_BUSY: built without CUPTI (a CUDA build"
                         " with cupti.h)\n");
#endif
    za_estimator_destroy (&estimator);
    char command [256];
    snprintf (command, sizeof command, "rm -rf '%s'", dir);
    if (system (command) != 0)
        fprintf (stderr, "bench_train: could not remove %s\n", dir);
    return rc? 1: 0;
}

static int
s_peak (int threads)
{
    openblas_set_num_threads (threads);
    size_t n = PEAK_N;
    float *a = (float *) za_alloc (n * n * sizeof (float));
    float *b = (float *) za_alloc (n * n * sizeof (float));
    float *c = (float *) za_alloc (n * n * sizeof (float));
    for (size_t i = 0; i < n * n; i++)
        a [i] = (float) (i % 7) * 0.1f, b [i] = (float) (i % 5) * 0.1f;
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) n, (int) n, (int) n, 1.0f,
                 a, (int) n, b, (int) n, 0.0f, c, (int) n);
    double best = 1e9, start = za_clock_mono ();
    for (int r = 0; r < PEAK_REPEATS || za_clock_mono () - start < PEAK_SECONDS; r++) {
        double t0 = za_clock_mono ();
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) n, (int) n, (int) n,
                     1.0f, a, (int) n, b, (int) n, 0.0f, c, (int) n);
        double t = za_clock_mono () - t0;
        if (t < best)
            best = t;
    }
    printf ("sgemm_peak gflops=%.1f threads=%d n=%zu\n", 2.0 * n * n * n / best / 1e9,
            threads, n);
    za_free (a), za_free (b), za_free (c);
    return 0;
}

static int
s_peak_bf16 (int threads)
{
#ifdef ZA_HAVE_DNNL
    omp_set_num_threads (threads);
    const int64_t n = PEAK_N;
    dnnl_engine_t engine = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t dims = {n, n};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t matmul = NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    if (dnnl_engine_create (&engine, dnnl_cpu, 0)
    ||  dnnl_stream_create (&stream, engine, dnnl_stream_default_flags)
    ||  dnnl_memory_desc_init_by_tag (&a, 2, dims, dnnl_bf16, dnnl_ab)
    ||  dnnl_memory_desc_init_by_tag (&b, 2, dims, dnnl_bf16, dnnl_ab)
    ||  dnnl_memory_desc_init_by_tag (&c, 2, dims, dnnl_f32, dnnl_ab)
    ||  dnnl_matmul_desc_init (&desc, &a, &b, NULL, &c)
    ||  dnnl_primitive_desc_create (&pd, &desc, NULL, engine, NULL)
    ||  dnnl_primitive_create (&matmul, pd)
    ||  dnnl_memory_create (&ma, &a, engine, DNNL_MEMORY_ALLOCATE)
    ||  dnnl_memory_create (&mb, &b, engine, DNNL_MEMORY_ALLOCATE)
    ||  dnnl_memory_create (&mc, &c, engine, DNNL_MEMORY_ALLOCATE)) {
        fprintf (stderr, "bench_train: oneDNN has no bf16 matmul here\n");
        return 1;
    }
    void *pa, *pb;
    dnnl_memory_get_data_handle (ma, &pa);
    dnnl_memory_get_data_handle (mb, &pb);
    for (int64_t i = 0; i < n * n; i++) {
        ((uint16_t *) pa) [i] = (uint16_t) (0x3f80 + i % 7);     //  1.0 and near
        ((uint16_t *) pb) [i] = (uint16_t) (0x3f80 + i % 5);
    }
    dnnl_exec_arg_t args [3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double best = 1e9, start = za_clock_mono ();
    for (int r = 0; r <= PEAK_REPEATS || za_clock_mono () - start < PEAK_SECONDS; r++) {
        double t0 = za_clock_mono ();
        dnnl_primitive_execute (matmul, stream, 3, args);
        dnnl_stream_wait (stream);
        double t = za_clock_mono () - t0;
        if (r > 0 && t < best)
            best = t;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa ();
    const char *name = (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx
                     ? "amx"
                     : (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16
                     ? "avx512_bf16": "emulated";
    printf ("bf16_peak gflops=%.1f threads=%d n=%lld isa=%s\n", 2.0 * n * n * n / best / 1e9,
            threads, (long long) n, name);
    dnnl_memory_destroy (ma), dnnl_memory_destroy (mb), dnnl_memory_destroy (mc);
    dnnl_primitive_destroy (matmul), dnnl_primitive_desc_destroy (pd);
    dnnl_stream_destroy (stream), dnnl_engine_destroy (engine);
    return 0;
#else
    (void) threads;
    fprintf (stderr, "bench_train: built without oneDNN\n");
    return 1;
#endif
}

int
main (int argc, char **argv)
{
    za_dataset_t *train = argc >= 6? za_idx_load_dir (ZA_FASHION_MNIST_DIR, "train"): NULL;
    if (argc >= 6 && !train)
        return 1;
    int rc = 2;
    if (argc >= 6 && strcmp (argv [1], "speed") == 0)
        rc = s_speed (ZA_SEED_CNN, NULL, 0, train, atoi (argv [2]), atoi (argv [3]),
                      atoi (argv [4]), atoi (argv [5]));
    else
    if (argc >= 8 && strcmp (argv [1], "model") == 0) {
        za_dataset_t *data = s_upscaled (train, UPSCALED_COUNT, atoi (argv [3]), 3);
        int cache = argc > 9 && strcmp (argv [9], "cache") == 0;
        rc = data? s_speed (argv [2], argc > 8? argv [8]: NULL, cache, data, atoi (argv [4]),
                            atoi (argv [5]), atoi (argv [6]), atoi (argv [7])): 1;
        za_dataset_destroy (&data);
    }
    za_dataset_destroy (&train);
    if (rc != 2)
        return rc;
    if (argc >= 3 && strcmp (argv [1], "peak") == 0)
        return s_peak (atoi (argv [2]));
    if (argc >= 3 && strcmp (argv [1], "peak_bf16") == 0)
        return s_peak_bf16 (atoi (argv [2]));
    fprintf (stderr, "usage: bench_train speed BATCH THREADS STEPS WARMUP | peak THREADS | "
                     "peak_bf16 THREADS\n");
    return 2;
}
