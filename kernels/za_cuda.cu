/*  za_cuda.cu: the CUDA back end, function by function beside za_cpu.c.
    Convolutions are cuDNN's where it is built in (za_cuda_dnn.cu), the
    collectives over several GPUs NCCL's (za_cuda_nccl.cu);
    GEMMs are cuBLAS (row-major products written as their column-major
    transposes); im2col, col2im, pooling, activations, softmax cross-entropy
    and the optimizers are kernels over kernels/za_elem.h, the arithmetic the
    CPU back end runs too. Each host thread has its own stream (built with
    --default-stream per-thread) and cuBLAS handle per device. Built as a
    module (libzactor_cuda.so) that za_device.c loads on first use.         */
#include "za_cuda_dnn.h"
#include "za_cuda_gemm.h"
#include "za_cuda_nccl.h"
#include "za_cuda_util.h"
#include "za_elem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static za_error_fn *s_error;
static int s_device_count;

// ---------------------------------------------------------------------------
//  Element kernels

__global__ void
k_maxpool_forward (za_pool2d_dims_t d, const float *in, float *out, int32_t *argmax,
                   size_t count)
{
    FOR_EACH (i, count)
        out [i] = za_elem_maxpool (&d, in, i, &argmax [i]);
}

__global__ void
k_maxpool_backward (za_pool2d_dims_t d, const float *dout, const int32_t *argmax, float *din,
                    size_t count)
{
    FOR_EACH (i, count)
        din [i] = za_elem_maxpool_backward (&d, dout, argmax, i);
}

__global__ void
k_avgpool_global_forward (int positions, int channels, const float *in, float *out,
                          size_t count)
{
    FOR_EACH (i, count)
        out [i] = za_elem_avgpool_global (positions, channels, in, i);
}

__global__ void
k_avgpool_global_backward (int positions, int channels, const float *dout, float *din,
                           size_t count)
{
    FOR_EACH (i, count)
        din [i] = za_elem_avgpool_global_backward (positions, channels, dout, i);
}

__global__ void
k_relu_forward (size_t count, const float *in, float *out)
{
    FOR_EACH (i, count)
        out [i] = in [i] > 0? in [i]: 0.0f;
}

__global__ void
k_relu_backward (size_t count, const float *out, const float *dout, float *din)
{
    FOR_EACH (i, count)
        din [i] = out [i] > 0? dout [i]: 0.0f;
}

__global__ void
k_dropout_forward (size_t count, float rate, uint64_t seed, const float *in, float *mask,
                   float *out)
{
    FOR_EACH (i, count) {
        mask [i] = za_elem_dropout_mask (seed, i, rate);
        out [i] = in [i] * mask [i];
    }
}

__global__ void
k_multiply (size_t count, const float *a, const float *b, float *out)
{
    FOR_EACH (i, count)
        out [i] = a [i] * b [i];
}

//  One row of softmax cross-entropy per thread (as the CPU's loop body).
__global__ void
k_softmax_xent (int n, int classes, const float *logits, const int32_t *labels,
                float *dlogits, double *row_loss, int *row_flags)
{
    FOR_EACH (r, (size_t) n) {
        const float *z = logits + r * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (z [k] > z [best])
                best = k;
        float zmax = z [best];
        double sum = 0;
        for (int k = 0; k < classes; k++)
            sum += exp ((double) (z [k] - zmax));
        int label = labels [r];
        int valid = label >= 0 && label < classes;
        row_loss [r] = valid? log (sum) - (double) (z [label] - zmax): 0.0;
        row_flags [r] = valid? (best == label): 2;
        if (dlogits) {
            float *g = dlogits + r * classes;
            float inv = (float) (1.0 / sum) / (float) n;
            for (int k = 0; k < classes; k++)
                g [k] = valid? expf (z [k] - zmax) * inv: 0.0f;
            if (valid)
                g [label] -= 1.0f / (float) n;
        }
    }
}

__global__ void
k_scale_add (size_t count, float alpha, float *y, float beta, const float *x)
{
    FOR_EACH (i, count)
        y [i] = x? alpha * y [i] + beta * x [i]: alpha * y [i];
}

__global__ void
k_optim (za_optim_config_t c, float m_scale, float v_scale, float *w, const float *g,
         float *s0, float *s1, size_t count)
{
    FOR_EACH (i, count) {
        w [i] *= 1.0f - c.learning_rate * c.weight_decay;     //  decoupled, as Keras's
        switch (c.kind) {
            case ZA_OPT_SGD:
                w [i] = za_elem_sgd (c.learning_rate, w [i], g [i]);
                break;
            case ZA_OPT_MOMENTUM:
                w [i] = za_elem_momentum (c.learning_rate, c.momentum, c.nesterov, w [i], g [i],
                                          &s0 [i]);
                break;
            case ZA_OPT_ADAM:
                w [i] = za_elem_adam (c.learning_rate, c.beta1, c.beta2, c.epsilon, m_scale,
                                      v_scale, w [i], g [i], &s0 [i], &s1 [i]);
                break;
            case ZA_OPT_ADAGRAD:
                w [i] = za_elem_adagrad (c.learning_rate, c.epsilon, w [i], g [i], &s0 [i]);
                break;
            case ZA_OPT_UNKNOWN:    //  never applied: za_optim_config_check refuses it
                break;
        }
    }
}

// ---------------------------------------------------------------------------
//  The table, in za_cpu.c's order

static void
s_maxpool_forward (const za_pool2d_dims_t *d, const float *in, float *out, int32_t *argmax)
{
    size_t count = (size_t) d->n * d->oh * d->ow * d->c;
    LAUNCH (k_maxpool_forward, count, *d, in, out, argmax, count);
}

static void
s_maxpool_backward (const za_pool2d_dims_t *d, const float *dout, const int32_t *argmax,
                    float *din)
{
    size_t count = (size_t) d->n * d->h * d->w * d->c;
    LAUNCH (k_maxpool_backward, count, *d, dout, argmax, din, count);
}

static void
s_avgpool_global_forward (int n, int positions, int channels, const float *in, float *out)
{
    size_t count = (size_t) n * channels;
    LAUNCH (k_avgpool_global_forward, count, positions, channels, in, out, count);
}

static void
s_avgpool_global_backward (int n, int positions, int channels, const float *dout,
                           float *din)
{
    size_t count = (size_t) n * positions * channels;
    LAUNCH (k_avgpool_global_backward, count, positions, channels, dout, din, count);
}

static void
s_relu_forward (size_t count, const float *in, float *out)
{
    LAUNCH (k_relu_forward, count, count, in, out);
}

static void
s_relu_backward (size_t count, const float *out, const float *dout, float *din)
{
    LAUNCH (k_relu_backward, count, count, out, dout, din);
}

static void
s_dropout_forward (size_t count, float rate, uint64_t seed, const float *in, float *mask,
                   float *out)
{
    LAUNCH (k_dropout_forward, count, count, rate, seed, in, mask, out);
}

static void
s_dropout_backward (size_t count, const float *mask, const float *dout, float *din)
{
    LAUNCH (k_multiply, count, count, mask, dout, din);
}

//  Room for n rows of results on this device and the host. 0 or -1.
static int
s_row_scratch (int n)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int dev = self->device;
    //  The device's rows as every scratch grows (za_cuda_room: a recording
    //  made on the old ones is stale, none grows while recording).
    void *loss = self->row_loss [dev], *flags = self->row_flags [dev];
    int ok = za_cuda_room (&loss, &self->row_loss_bytes [dev], n * sizeof (double), "cudaMalloc")
          && za_cuda_room (&flags, &self->row_flags_bytes [dev], n * sizeof (int), "cudaMalloc");
    self->row_loss [dev] = (double *) loss;
    self->row_flags [dev] = (int *) flags;
    if (!ok)
        return -1;
    if (n > self->host_rows) {
        cudaFreeHost (self->host_loss);
        cudaFreeHost (self->host_flags);
        self->host_rows = 0;
        if (!za_cuda_ok (cudaMallocHost (&self->host_loss, n * sizeof (double)),
                         "cudaMallocHost")
            || !za_cuda_ok (cudaMallocHost (&self->host_flags, n * sizeof (int)),
                            "cudaMallocHost"))
            return -1;
        self->host_rows = n;
    }
    return 0;
}

//  Each row on the GPU; the rows' losses summed on the host in order, as
//  the CPU sums them. Waits for the stream (the caller needs the numbers).
static double
s_softmax_xent (int n, int classes, const float *logits, const int32_t *labels,
                float *dlogits, int *correct, int *invalid)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int right = 0, bad = 0;
    double loss = 0;
    if (s_row_scratch (n) == 0) {
        int dev = self->device;
        LAUNCH (k_softmax_xent, (size_t) n, n, classes, logits, labels, dlogits,
                self->row_loss [dev], self->row_flags [dev]);
        if (za_cuda_ok (cudaMemcpy (self->host_loss, self->row_loss [dev], n * sizeof (double),
                                    cudaMemcpyDeviceToHost), "cudaMemcpy")
            && za_cuda_ok (cudaMemcpy (self->host_flags, self->row_flags [dev],
                                       n * sizeof (int), cudaMemcpyDeviceToHost), "cudaMemcpy"))
            for (int r = 0; r < n; r++) {
                loss += self->host_loss [r];
                right += self->host_flags [r] == 1;
                bad += self->host_flags [r] == 2;
            }
    }
    if (correct)
        *correct = right;
    if (invalid)
        *invalid = bad;
    return loss;
}

//  One block adds the rows' results to the thread's sums: each thread its
//  stride of rows, then halves in shared memory (an order of its own: the
//  loss may differ from the CPU's in its last bits, the same every run).
__global__ void
k_loss_add (int n, const double *row_loss, const int *row_flags, za_cuda_loss_t *sums)
{
    __shared__ double loss [BLOCK_THREADS];
    __shared__ int right [BLOCK_THREADS], bad [BLOCK_THREADS];
    int i = threadIdx.x;
    loss [i] = 0;
    right [i] = bad [i] = 0;
    for (int r = i; r < n; r += BLOCK_THREADS) {
        loss [i] += row_loss [r];
        right [i] += row_flags [r] == 1;
        bad [i] += row_flags [r] == 2;
    }
    __syncthreads ();
    for (int half = BLOCK_THREADS / 2; half > 0; half /= 2) {
        if (i < half) {
            loss [i] += loss [i + half];
            right [i] += right [i + half];
            bad [i] += bad [i + half];
        }
        __syncthreads ();
    }
    if (i == 0) {
        sums->loss += loss [0];
        sums->correct += right [0];
        sums->invalid += bad [0];
    }
}

//  The thread's sums on this device, made (zeroed) on first use.
static za_cuda_loss_t *
s_loss_sums (void)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int dev = self->device;
    if (!self->loss_sums [dev]
        && (!za_cuda_ok (cudaMalloc (&self->loss_sums [dev], sizeof (za_cuda_loss_t)),
                         "cudaMalloc")
            || !za_cuda_ok (cudaMemsetAsync (self->loss_sums [dev], 0, sizeof (za_cuda_loss_t),
                                             cudaStreamPerThread), "cudaMemsetAsync"))) {
        cudaFree (self->loss_sums [dev]);
        self->loss_sums [dev] = NULL;
    }
    return self->loss_sums [dev];
}

//  As softmax_xent, its results summed on the GPU: nothing waits.
static void
s_softmax_xent_add (int n, int classes, const float *logits, const int32_t *labels,
                    float *dlogits)
{
    za_cuda_thread_t *self = &za_cuda_self;
    za_cuda_loss_t *sums = s_loss_sums ();
    if (!sums || s_row_scratch (n))
        return;
    int dev = self->device;
    LAUNCH (k_softmax_xent, (size_t) n, n, classes, logits, labels, dlogits,
            self->row_loss [dev], self->row_flags [dev]);
    k_loss_add<<<1, BLOCK_THREADS, 0, cudaStreamPerThread>>> (n, self->row_loss [dev],
                                                              self->row_flags [dev], sums);
    za_cuda_launched ("k_loss_add");
}

static int s_copy_result (cudaError_t rc, size_t bytes, const char *what);

//  The sums, read after the step's sync (this copy waits for the stream
//  anyway), then cleared on the stream.
static int
s_loss_take (double *loss_sum, int *correct, int *invalid)
{
    za_cuda_thread_t *self = &za_cuda_self;
    *loss_sum = 0;
    *correct = *invalid = 0;
    za_cuda_loss_t *sums = s_loss_sums (), host;
    if (!sums)
        return s_error ("cuda:%d: no room on the GPU for the loss's sums", self->device);
    if (s_copy_result (cudaMemcpy (&host, sums, sizeof host, cudaMemcpyDeviceToHost),
                       sizeof host, "copy of the loss from the GPU")
        || s_copy_result (cudaMemsetAsync (sums, 0, sizeof host, cudaStreamPerThread),
                          sizeof host, "clearing of the loss's sums"))
        return -1;
    *loss_sum = host.loss;
    *correct = host.correct;
    *invalid = host.invalid;
    return 0;
}

static void *
s_buffer_alloc (size_t bytes)
{
    void *p = NULL;
    if (!za_cuda_ok (cudaMalloc (&p, bytes? bytes: 1), "cudaMalloc")
        || !za_cuda_ok (cudaMemset (p, 0, bytes), "cudaMemset")) {
        cudaFree (p);
        s_error ("cuda:%d: out of GPU memory for %zu bytes", za_cuda_self.device, bytes);
        za_cuda_self.error [0] = 0;
        return NULL;
    }
    return p;
}

static void
s_buffer_free (void *p)
{
    if (p)
        cudaFree (p);
}

static void
s_set_threads (int threads)
{
    (void) threads;
}

static int
s_bind (int device)
{
    if (device < 0 || device >= s_device_count)
        return s_error ("cuda: no device %d (%d here)", device, s_device_count);
    cudaError_t rc = cudaSetDevice (device);
    if (rc != cudaSuccess)
        return s_error ("cuda:%d: cudaSetDevice failed: %s", device, cudaGetErrorString (rc));
    za_cuda_self.device = device;
    //  cuBLAS's handle comes with the thread's first product there
    //  (za_cuda_blas): a thread that only copies (an input's prefetch
    //  thread, which ends with its iterator) makes none to leak.
    return 0;
}

static void *
s_host_alloc (size_t bytes)
{
    void *p = NULL;
    cudaError_t rc = cudaMallocHost (&p, bytes? bytes: 1);
    if (rc != cudaSuccess) {
        s_error ("cuda: out of pinned host memory for %zu bytes: %s", bytes,
                 cudaGetErrorString (rc));
        return NULL;
    }
    memset (p, 0, bytes);
    return p;
}

static void
s_host_free (void *p)
{
    if (p)
        cudaFreeHost (p);
}

//  Host copies wait for the stream and the copy: the host side may be
//  reused at once. Copies within the GPUs queue on the stream.
static int
s_copy_result (cudaError_t rc, size_t bytes, const char *what)
{
    if (rc == cudaSuccess)
        return 0;
    return s_error ("cuda:%d: %s of %zu bytes failed: %s", za_cuda_self.device, what, bytes,
                    cudaGetErrorString (rc));
}

static int
s_upload (void *dst, const void *src, size_t bytes)
{
    return s_copy_result (cudaMemcpy (dst, src, bytes, cudaMemcpyHostToDevice), bytes,
                        "copy to the GPU");
}

static int
s_download (void *dst, const void *src, size_t bytes)
{
    return s_copy_result (cudaMemcpy (dst, src, bytes, cudaMemcpyDeviceToHost), bytes,
                        "copy from the GPU");
}

static int
s_copy (void *dst, const void *src, size_t bytes)
{
    return s_copy_result (cudaMemcpyAsync (dst, src, bytes, cudaMemcpyDefault,
                                         cudaStreamPerThread), bytes, "copy on the GPU");
}

static void
s_zero (void *p, size_t bytes)
{
    za_cuda_ok (cudaMemsetAsync (p, 0, bytes, cudaStreamPerThread), "cudaMemsetAsync");
}

static void
s_scale_add (size_t n, float alpha, float *y, float beta, const float *x)
{
    LAUNCH (k_scale_add, n, n, alpha, y, beta, x);
}

__global__ void
k_nonfinite (size_t n, const float *x, int *flag)
{
    FOR_EACH (i, n)
        if (!isfinite (x [i]))
            *flag = 1;
}

//  The flag in the loss's row scratch; waits for the stream.
static int
s_all_finite (size_t n, const float *x)
{
    za_cuda_thread_t *self = &za_cuda_self;
    if (s_row_scratch (1))
        return 0;
    int dev = self->device;
    if (!za_cuda_ok (cudaMemsetAsync (self->row_flags [dev], 0, sizeof (int),
                                      cudaStreamPerThread), "cudaMemsetAsync"))
        return 0;
    if (n)
        LAUNCH (k_nonfinite, n, n, x, self->row_flags [dev]);
    if (!za_cuda_ok (cudaMemcpy (self->host_flags, self->row_flags [dev], sizeof (int),
                                 cudaMemcpyDeviceToHost), "cudaMemcpy"))
        return 0;
    return self->host_flags [0] == 0;
}

static void
s_optim_apply (const za_optim_config_t *c, int64_t step, float *w, const float *g,
               float **slots, size_t n)
{
    int64_t updates = step > c->slots_step? step - c->slots_step: 1;
    float m_scale = c->kind == ZA_OPT_ADAM? za_elem_bias_correction (c->beta1, updates): 1.0f;
    float v_scale = c->kind == ZA_OPT_ADAM? za_elem_bias_correction (c->beta2, updates): 1.0f;
    //  (za_optim_slot_count lives in the host library, which this module
    //  does not link.)
    int count = c->kind == ZA_OPT_ADAM? 2: c->kind == ZA_OPT_SGD? 0: 1;
    //  The schedule is the host's: the kernel gets this update's rate.
    za_optim_config_t now = *c;
    now.learning_rate = za_elem_learning_rate (c, step);
    LAUNCH (k_optim, n, now, m_scale, v_scale, w, g, count > 0? slots [0]: NULL,
            count > 1? slots [1]: NULL, n);
}

//  clip_by_global_norm: each of CLIP_BLOCKS blocks adds the squares of its
//  stride of each run to a partial sum of its own; one block then adds the
//  partials up (in a fixed order: the same norm every run) and writes the
//  scale after them, by which a last pass multiplies each run.
#define CLIP_BLOCKS 128
static_assert (CLIP_BLOCKS <= BLOCK_THREADS, "k_clip_scale adds the partials in one block");

//  In place, halving: sums [0] is the block's sum of its BLOCK_THREADS.
__device__ static void
s_block_sum (double *sums)
{
    for (int half = BLOCK_THREADS / 2; half > 0; half /= 2) {
        __syncthreads ();
        if ((int) threadIdx.x < half)
            sums [threadIdx.x] += sums [threadIdx.x + half];
    }
    __syncthreads ();
}

__global__ void
k_squares_add (size_t n, const float *x, double *partial)
{
    __shared__ double sums [BLOCK_THREADS];
    double sum = 0;
    FOR_EACH (i, n)
        sum += (double) x [i] * x [i];
    sums [threadIdx.x] = sum;
    s_block_sum (sums);
    if (threadIdx.x == 0)
        partial [blockIdx.x] += sums [0];
}

__global__ void
k_clip_scale (double *partial, float clip)
{
    __shared__ double sums [BLOCK_THREADS];
    sums [threadIdx.x] = threadIdx.x < CLIP_BLOCKS? partial [threadIdx.x]: 0.0;
    s_block_sum (sums);
    if (threadIdx.x == 0) {
        double norm = sqrt (sums [0]);
        partial [CLIP_BLOCKS] = clip > 0 && norm > clip? (double) (float) (clip / norm): 1.0;
    }
}

__global__ void
k_scale_by (size_t n, float *x, const double *scale)
{
    float by = (float) *scale;
    if (by != 1.0f)
        FOR_EACH (i, n)
            x [i] *= by;
}

static void
s_clip_by_global_norm (float *grads, const size_t *offset, const size_t *size, int count,
                       float clip)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int dev = self->device;
    size_t bytes = (CLIP_BLOCKS + 1) * sizeof (double);
    if (!self->clip_sums [dev]
        && !za_cuda_ok (cudaMalloc (&self->clip_sums [dev], bytes), "cudaMalloc")) {
        self->clip_sums [dev] = NULL;
        return;
    }
    double *partial = self->clip_sums [dev];
    if (!za_cuda_ok (cudaMemsetAsync (partial, 0, bytes, cudaStreamPerThread),
                     "cudaMemsetAsync"))
        return;
    for (int r = 0; r < count; r++) {
        k_squares_add<<<CLIP_BLOCKS, BLOCK_THREADS>>> (size [r], grads + offset [r], partial);
        za_cuda_launched ("k_squares_add");
    }
    k_clip_scale<<<1, BLOCK_THREADS>>> (partial, clip);
    za_cuda_launched ("k_clip_scale");
    for (int r = 0; r < count; r++)
        if (size [r])
            LAUNCH (k_scale_by, size [r], size [r], grads + offset [r], partial + CLIP_BLOCKS);
}

static int
s_sync (void)
{
    za_cuda_ok (cudaStreamSynchronize (cudaStreamPerThread), "the step");
    za_cuda_launched ("the step");
    if (!za_cuda_self.error [0])
        return 0;
    int rc = s_error ("%s", za_cuda_self.error);
    za_cuda_self.error [0] = 0;
    return rc;
}

//  CUDA graphs (za_kernels.h's graph_*): the thread's stream recorded in
//  the thread's own capture mode, so that the input's thread copies and
//  allocates on as before. A failure kept while recording (a call that
//  cannot be recorded) is the recording's, not the step's.
//  A recording's scratch (za_cuda_thread_t.scratch_generation) stays as it
//  was while the recording lives; launched otherwise, it would write where
//  buffers were freed.
typedef struct {
    cudaGraphExec_t exec;
    unsigned generation;
} s_graph_t;

static thread_local int s_graph_kept;   //  an error was kept before graph_begin
static thread_local unsigned s_graph_generation;

static int
s_graph_begin (void)
{
    s_graph_kept = za_cuda_self.error [0] != 0;
    s_graph_generation = za_cuda_self.scratch_generation;
    cudaError_t rc = cudaStreamBeginCapture (cudaStreamPerThread,
                                             cudaStreamCaptureModeThreadLocal);
    if (rc == cudaSuccess) {
        za_cuda_self.recording = 1;
        return 0;
    }
    cudaGetLastError ();
    return s_error ("cuda:%d: a CUDA graph does not start recording (%s)", za_cuda_self.device,
                    cudaGetErrorString (rc));
}

static void *
s_graph_end (void)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t rc = cudaStreamEndCapture (cudaStreamPerThread, &graph);
    za_cuda_self.recording = 0;
    int failed = !s_graph_kept && za_cuda_self.error [0];
    //  Freed on each launch: what a library allocated on the stream while
    //  recording (cuBLAS may) does not block the next launch.
    if (rc == cudaSuccess && graph && !failed
        && s_graph_generation == za_cuda_self.scratch_generation
        && (rc = cudaGraphInstantiate (&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch))
               != cudaSuccess)
        exec = NULL;
    if (graph)
        cudaGraphDestroy (graph);
    s_graph_t *recorded = exec? (s_graph_t *) malloc (sizeof *recorded): NULL;
    if (recorded) {
        recorded->exec = exec;
        recorded->generation = s_graph_generation;
        return recorded;
    }
    if (exec)
        cudaGraphExecDestroy (exec);
    cudaGetLastError ();
    s_error ("cuda:%d: a step could not be recorded as a CUDA graph (%s)", za_cuda_self.device,
             failed? za_cuda_self.error: cudaGetErrorString (rc != cudaSuccess? rc
                                                             : cudaErrorStreamCaptureInvalidated));
    if (failed)
        za_cuda_self.error [0] = 0;
    return NULL;
}

static int
s_graph_launch (void *graph)
{
    s_graph_t *recorded = (s_graph_t *) graph;
    if (recorded->generation != za_cuda_self.scratch_generation)
        return 1;
    cudaError_t rc = cudaGraphLaunch (recorded->exec, cudaStreamPerThread);
    if (rc == cudaSuccess)
        return 0;
    cudaGetLastError ();
    return s_error ("cuda:%d: a CUDA graph does not launch (%s)", za_cuda_self.device,
                    cudaGetErrorString (rc));
}

static void
s_graph_free (void *graph)
{
    s_graph_t *recorded = (s_graph_t *) graph;
    if (recorded) {
        cudaGraphExecDestroy (recorded->exec);
        free (recorded);
    }
}

//  Fences (za_kernels.h): an event recorded on the thread's stream, waited
//  for on the host by whichever thread waits (sleeping, not spinning: the
//  input's thread shares the CPU with the decoders). Where none can be
//  made, the thread's work is waited for here instead (its kept error left
//  for the step's sync) and NULL says so.
static void *
s_fence (void)
{
    cudaEvent_t event = NULL;
    cudaError_t rc = cudaEventCreateWithFlags (&event, cudaEventDisableTiming
                                                       | cudaEventBlockingSync);
    if (rc == cudaSuccess && (rc = cudaEventRecord (event, cudaStreamPerThread)) == cudaSuccess)
        return event;
    if (event)
        cudaEventDestroy (event);
    cudaGetLastError ();
    s_error ("cuda:%d: a fence after the thread's work was not recorded (%s)",
             za_cuda_self.device, cudaGetErrorString (rc));
    cudaStreamSynchronize (cudaStreamPerThread);
    cudaGetLastError ();
    return NULL;
}

static int
s_fence_wait (void *fence)
{
    cudaEvent_t event = (cudaEvent_t) fence;
    cudaError_t rc = cudaEventSynchronize (event);
    cudaEventDestroy (event);
    if (rc == cudaSuccess)
        return 0;
    cudaGetLastError ();
    return s_error ("cuda: waiting for a fence failed (%s)", cudaGetErrorString (rc));
}

//  NCCL's collectives (za_cuda_nccl.cu); where it cannot run, one error
//  and the caller copies.
static int
s_devices_sum (float *const *bufs, const int *devices, int count, size_t floats)
{
    char why [ZA_ERROR_MAX_CHARS];
    return za_cuda_nccl_sum (bufs, devices, count, floats, why, sizeof why)
         ? s_error ("%s", why): 0;
}

static int
s_devices_broadcast (float *const *bufs, const int *devices, int count, size_t floats)
{
    char why [ZA_ERROR_MAX_CHARS];
    return za_cuda_nccl_broadcast (bufs, devices, count, floats, why, sizeof why)
         ? s_error ("%s", why): 0;
}

//  Groups of processes: NCCL's communicators between them (za_cuda_nccl.cu).
static int
s_group_id (unsigned char *id)
{
    char why [ZA_ERROR_MAX_CHARS];
    return za_cuda_nccl_group_id (id, why, sizeof why)? s_error ("%s", why): 0;
}

static void *
s_group_open (const unsigned char *id, int rank, int size)
{
    char why [ZA_ERROR_MAX_CHARS];
    void *group = za_cuda_nccl_group_open (id, rank, size, why, sizeof why);
    if (!group)
        s_error ("%s", why);
    return group;
}

static int
s_group_sum (void *group, float *buf, size_t floats)
{
    char why [ZA_ERROR_MAX_CHARS];
    return za_cuda_nccl_group_sum (group, buf, floats, why, sizeof why)? s_error ("%s", why): 0;
}

static int
s_group_poll (void *group)
{
    char why [ZA_ERROR_MAX_CHARS];
    int rc = za_cuda_nccl_group_poll (group, why, sizeof why);
    return rc < 0? s_error ("%s", why): rc;
}

static void
s_group_close (void *group)
{
    za_cuda_nccl_group_close (group);
}

static const za_backend_t *s_mixed (za_precision_t precision);
static int s_native (za_precision_t precision);

#define S_SLOT(slot) .slot = s_##slot,
#define S_TABLE(P, text)                                          \
    {                                                             \
        .name = text,                                             \
        .conv2d_forward = za_cuda_conv2d_forward<P>,              \
        .conv2d_backward = za_cuda_conv2d_backward<P>,            \
        .dense_forward = za_cuda_dense_forward<P>,                \
        .dense_backward = za_cuda_dense_backward<P>,              \
        .conv2d_pool_forward = NULL,                              \
        .conv2d_pool_backward = NULL,                             \
        .conv2d_cols_own = 0,                                     \
        ZA_BACKEND_LAYER_SLOTS (S_SLOT)                           \
        .host_memory = 0,                                         \
        .device_count = 0,                                        \
        ZA_BACKEND_MEMORY_SLOTS (S_SLOT)                          \
        .precision = P,                                           \
        .mixed = s_mixed,                                         \
        .native = s_native,                                       \
        .micro_batch = NULL,                                      \
        .graph_begin = s_graph_begin,                             \
        .graph_end = s_graph_end,                                 \
        .graph_launch = s_graph_launch,                           \
        .graph_free = s_graph_free,                               \
        .fence = s_fence,                                         \
        .fence_wait = s_fence_wait,                               \
    }

static za_backend_t s_cuda [3] = {
    S_TABLE (ZA_PRECISION_FP32, "cuda (cuBLAS)"),
    S_TABLE (ZA_PRECISION_BF16, "cuda (cuBLAS, bf16 tensor cores)"),
    S_TABLE (ZA_PRECISION_FP16, "cuda (cuBLAS, fp16 tensor cores)"),
};

//  bf16 GEMMs need compute capability 8.0 (Ampere) for tensor cores; fp16
//  7.0. Older GPUs still compute both (cuBLAS converts), more slowly.
static int
s_native (za_precision_t precision)
{
    cudaDeviceProp prop;
    int major = cudaGetDeviceProperties (&prop, 0) == cudaSuccess? prop.major: 0;
    return precision == ZA_PRECISION_FP32
        || (precision == ZA_PRECISION_BF16 && major >= 8)
        || (precision == ZA_PRECISION_FP16 && major >= 7);
}

static const za_backend_t *
s_mixed (za_precision_t precision)
{
    return &s_cuda [precision];
}

//  Without a GPU cudaGetDeviceCount fails (error 35 without a driver, 100
//  without a device) and may leave the count unwritten.
extern "C" __attribute__ ((visibility ("default"))) const za_backend_t *
za_backend_cuda_open (za_error_fn *error)
{
    s_error = error;
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount (&count);
    if (rc != cudaSuccess || count <= 0) {
        error ("--device cuda: no usable GPU here (CUDA says: %s). Use --device cpu",
               rc != cudaSuccess? cudaGetErrorString (rc): "no CUDA device");
        return NULL;
    }
    s_device_count = count < ZA_DEVICE_MAX? count: ZA_DEVICE_MAX;
    for (int p = 0; p < 3; p++)
        s_cuda [p].device_count = s_device_count;
    const char *tf32 = getenv ("NVIDIA_TF32_OVERRIDE");
    za_cuda_tf32 = !(tf32 && strcmp (tf32, "0") == 0);
    //  With cuDNN the layers keep no im2col columns: the back end makes
    //  them in its own scratch for what cuDNN declines.
    for (int p = 0; p < 3; p++)
        s_cuda [p].conv2d_cols_own = za_cuda_dnn_describe ((za_precision_t) p) != NULL;
    //  Each table's name says what its convolutions go through.
    static char names [3][160];
    for (int p = 0; p < 3; p++) {
        const char *dnn = za_cuda_dnn_describe ((za_precision_t) p);
        const char *cores = p == ZA_PRECISION_BF16? ", bf16 tensor cores"
                          : p == ZA_PRECISION_FP16? ", fp16 tensor cores": "";
        if (dnn)
            snprintf (names [p], sizeof names [p], "cuda (%s; cuBLAS%s)", dnn, cores);
        else
            snprintf (names [p], sizeof names [p], "cuda (cuBLAS%s%s)", cores,
                      p == ZA_PRECISION_FP32 && za_cuda_tf32? ", TF32 convolutions": "");
        s_cuda [p].name = names [p];
    }
    return &s_cuda [ZA_PRECISION_FP32];
}
