/*  za_cuda_dnn.cu: the convolutions through cuDNN (forward, backward data,
    backward filter) on zactor's NHWC tensors, each geometry and precision
    planned once per thread and device: descriptors, an algorithm per pass
    (cuDNN's heuristics, or a timed search as PyTorch's cudnn.benchmark)
    within a workspace limit. fp32 may multiply in TF32 as PyTorch's
    convolutions do by default; bf16 and fp16 compute on copies cast down,
    results in that type cast back up, as PyTorch's autocast convolutions.
    cuDNN is opened on first use (dlopen): a machine without it runs the
    convolutions through im2col and cuBLAS instead of not loading at all. */
#include "za_cuda_dnn.h"
#include "za_cuda_util.h"

#include <cudnn.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLANS_MAX 64                    //  geometries kept per thread (VGG16 has 13)
#define WORKSPACE_MB_DEFAULT 1024

//  The cuDNN calls this file makes, looked up in the library once opened.
#define S_CUDNN_CALLS(X) \
    X (cudnnCreate) X (cudnnSetStream) X (cudnnGetErrorString) X (cudnnGetVersion) \
    X (cudnnCreateTensorDescriptor) X (cudnnDestroyTensorDescriptor) \
    X (cudnnSetTensor4dDescriptor) X (cudnnCreateFilterDescriptor) \
    X (cudnnDestroyFilterDescriptor) X (cudnnSetFilter4dDescriptor) \
    X (cudnnCreateConvolutionDescriptor) X (cudnnDestroyConvolutionDescriptor) \
    X (cudnnSetConvolution2dDescriptor) X (cudnnSetConvolutionMathType) \
    X (cudnnGetConvolution2dForwardOutputDim) X (cudnnFindConvolutionForwardAlgorithm) \
    X (cudnnGetConvolutionForwardAlgorithm_v7) \
    X (cudnnFindConvolutionBackwardFilterAlgorithm) \
    X (cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
    X (cudnnFindConvolutionBackwardDataAlgorithm) \
    X (cudnnGetConvolutionBackwardDataAlgorithm_v7) X (cudnnConvolutionForward) \
    X (cudnnConvolutionBackwardFilter) X (cudnnConvolutionBackwardData)

static struct {
#define S_FIELD(call) decltype (&::call) call;
    S_CUDNN_CALLS (S_FIELD)
#undef S_FIELD
} s_dnn;

#ifndef ZA_CUDNN_PATH
#   define ZA_CUDNN_PATH "libcudnn.so.9"
#endif

//  Opens cuDNN: the build's library, else the loader's libcudnn.so.9.
//  NULL, or why not.
static const char *
s_dnn_open (void)
{
    static char why [256];
    const char *paths [] = {ZA_CUDNN_PATH, "libcudnn.so.9"};
    void *library = NULL;
    for (int i = 0; i < 2 && !library; i++)
        library = dlopen (paths [i], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf (why, sizeof why, "%s", dlerror ());
        return why;
    }
#define S_LOOK_UP(call)                                                                 \
    if (!(*(void **) &s_dnn.call = dlsym (library, #call))) {                           \
        snprintf (why, sizeof why, "libcudnn has no %s", #call);                        \
        return why;                                                                     \
    }
    S_CUDNN_CALLS (S_LOOK_UP)
#undef S_LOOK_UP
    return NULL;
}

//  ZA_CUDNN=0 turns cuDNN off; ZA_CUDNN_BENCHMARK=1 times every algorithm
//  on a geometry's first use and keeps the fastest; ZA_CUDNN_WORKSPACE_MB
//  bounds the scratch an algorithm may use; ZA_CUDNN_DETERMINISTIC=1 takes
//  only algorithms that sum in the same order every run; ZA_CUDNN_VERBOSE=1
//  prints each pass's candidates and the one taken (to stderr).
typedef struct {
    int on;
    int benchmark;
    int deterministic;
    int verbose;                        //  ZA_CUDNN_VERBOSE=1: each pass's candidates and pick
    size_t workspace_limit;
} s_settings_t;

//  One geometry in one precision on one device: what cuDNN takes of it
//  (until a call fails).
typedef struct {
    int used;
    int device;
    za_conv2d_dims_t d;
    za_precision_t q;
    size_t inputs, outputs, weights;    //  values of x, y and the kernel (of d)
    int forward_ok, filter_ok, data_ok;
    int forward_planned;                //  forward_ok as planned: every forward of
                                        //  the geometry but a failed one skipped im2col
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;          //  KRSC: [oc][kh][kw][c]
    //  A convolution descriptor per pass: each carries its algorithm's math type.
    cudnnConvolutionDescriptor_t forward_conv, filter_conv, data_conv;
    cudnnConvolutionFwdAlgo_t forward;
    cudnnConvolutionBwdFilterAlgo_t filter;
    cudnnConvolutionBwdDataAlgo_t data;
    size_t forward_bytes, filter_bytes, data_bytes;
} s_plan_t;

//  Scratch on a device: the workspace, a kernel in KRSC (or its gradient),
//  and in bf16 / fp16 the input and the output (or their gradients) cast.
enum { S_WORKSPACE, S_FILTER, S_X, S_Y, S_SCRATCH_COUNT };

//  The calling thread's handles, scratch and plans.
typedef struct {
    cudnnHandle_t handle [ZA_DEVICE_MAX];
    int broken [ZA_DEVICE_MAX];         //  cudnnCreate failed there: not again
    void *scratch [ZA_DEVICE_MAX][S_SCRATCH_COUNT];
    size_t scratch_bytes [ZA_DEVICE_MAX][S_SCRATCH_COUNT];
    s_plan_t plans [PLANS_MAX];
    int next;                           //  the slot the next new plan takes
    //  In bf16 / fp16: the output gradient whose cast is in S_Y (made by
    //  za_cuda_dnn_conv_backward_begin or the backward filter), for the
    //  passes that follow (one cast a layer, not two).
    const float *dy_cast;
    const s_plan_t *dy_plan;
} s_thread_t;

static thread_local s_thread_t s_self;

static s_settings_t
s_settings_read (void)
{
    s_settings_t settings = {1, 0, 0, 0, (size_t) WORKSPACE_MB_DEFAULT << 20};
    const char *on = getenv ("ZA_CUDNN"), *benchmark = getenv ("ZA_CUDNN_BENCHMARK");
    const char *deterministic = getenv ("ZA_CUDNN_DETERMINISTIC");
    const char *limit = getenv ("ZA_CUDNN_WORKSPACE_MB");
    settings.on = !(on && strcmp (on, "0") == 0);
    const char *why = settings.on? s_dnn_open (): NULL;
    if (why) {
        fprintf (stderr, "zactor: cuDNN does not open (%s): convolutions through im2col and"
                         " cuBLAS\n", why);
        settings.on = 0;
    }
    settings.benchmark = benchmark && strcmp (benchmark, "1") == 0;
    settings.deterministic = deterministic && strcmp (deterministic, "1") == 0;
    const char *verbose = getenv ("ZA_CUDNN_VERBOSE");
    settings.verbose = verbose && strcmp (verbose, "1") == 0;
    if (limit && *limit) {
        char *end;
        long long mb = strtoll (limit, &end, 10);
        if (*end || mb < 0 || mb > (1LL << 30))
            fprintf (stderr, "zactor: ZA_CUDNN_WORKSPACE_MB=%s is not a number of MiB from 0"
                             " up: %d MiB instead\n", limit, WORKSPACE_MB_DEFAULT);
        else
            settings.workspace_limit = (size_t) mb << 20;
    }
    return settings;
}

//  Read once per process (a function's static: initialized once, thread-safe).
static const s_settings_t *
s_settings (void)
{
    static const s_settings_t settings = s_settings_read ();
    return &settings;
}

//  This thread's handle on its device, or NULL where cuDNN cannot start.
static cudnnHandle_t
s_handle (void)
{
    int dev = za_cuda_self.device;
    if (!s_self.handle [dev] && !s_self.broken [dev]) {
        cudnnStatus_t rc = s_dnn.cudnnCreate (&s_self.handle [dev]);
        if (rc == CUDNN_STATUS_SUCCESS)
            rc = s_dnn.cudnnSetStream (s_self.handle [dev], cudaStreamPerThread);
        if (rc != CUDNN_STATUS_SUCCESS) {
            fprintf (stderr, "zactor: cuda:%d: cuDNN does not start (%s): convolutions"
                             " through im2col and cuBLAS\n", dev, s_dnn.cudnnGetErrorString (rc));
            s_self.broken [dev] = 1;
            s_self.handle [dev] = NULL;
        }
    }
    return s_self.handle [dev];
}

static const char *
s_precision_name (za_precision_t q)
{
    return q == ZA_PRECISION_BF16? "bf16": q == ZA_PRECISION_FP16? "fp16": "fp32";
}

static void
s_say (const s_plan_t *plan, const char *pass, const char *why)
{
    const za_conv2d_dims_t *d = &plan->d;
    fprintf (stderr, "zactor: cuda:%d: cuDNN declines the %s conv2d%s%s %dx%dx%dx%d k%dx%d s%d"
                     " -> %d filters (%s): im2col and cuBLAS for it\n", plan->device,
             s_precision_name (plan->q), *pass? " ": "", pass, d->n, d->h, d->w, d->c, d->kh,
             d->kw, d->stride, d->oc, why);
}

static void
s_plan_free (s_plan_t *plan)
{
    if (!plan->used)
        return;
    s_dnn.cudnnDestroyTensorDescriptor (plan->x);
    s_dnn.cudnnDestroyTensorDescriptor (plan->y);
    s_dnn.cudnnDestroyFilterDescriptor (plan->w);
    s_dnn.cudnnDestroyConvolutionDescriptor (plan->forward_conv);
    s_dnn.cudnnDestroyConvolutionDescriptor (plan->filter_conv);
    s_dnn.cudnnDestroyConvolutionDescriptor (plan->data_conv);
    memset (plan, 0, sizeof *plan);
}

//  This thread's scratch `slot` on its device with room for `bytes`, or
//  NULL (what it held is kept: earlier plans count on their workspace; the
//  caller falls back).
static void *
s_room (int slot, size_t bytes)
{
    int dev = za_cuda_self.device;
    return za_cuda_room (&s_self.scratch [dev][slot], &s_self.scratch_bytes [dev][slot], bytes,
                         NULL);
}

//  The first of cuDNN's candidates (fastest first) that ran, fits the
//  workspace, multiplies without TF32 in strict fp32 and, when asked, sums
//  deterministically. Where the workspace cannot grow to it, the first
//  that fits the one there is. -1 when none; *why then says why.
template <typename Perf>
static int
s_pick (const Perf *perf, int count, za_precision_t q, const char **why)
{
    size_t limit = s_settings ()->workspace_limit;
    int strict = q == ZA_PRECISION_FP32 && !za_cuda_tf32;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < count; i++)
            if (perf [i].status == CUDNN_STATUS_SUCCESS && perf [i].memory <= limit
                && (!strict || perf [i].mathType == CUDNN_FMA_MATH)
                && (!s_settings ()->deterministic
                    || perf [i].determinism == CUDNN_DETERMINISTIC)) {
                if (perf [i].memory && !s_room (S_WORKSPACE, perf [i].memory))
                    break;
                return i;
            }
        //  The next pass: within the workspace this thread already holds.
        limit = s_self.scratch_bytes [za_cuda_self.device][S_WORKSPACE];
    }
    *why = strict? "no algorithm in strict fp32 within the workspace"
                 : "no algorithm within the workspace";
    return -1;
}

#define TRY(call)                                                                       \
    do {                                                                                \
        if (rc == CUDNN_STATUS_SUCCESS)                                                 \
            rc = (call);                                                                \
    } while (0)

//  A pass's algorithm: cuDNN's candidates for it (`list`: its heuristics or
//  its timed search), the pick, and the math type it computes in set on
//  the pass's descriptor. 1, or 0 said.
#define CANDIDATES_MAX 8                //  the most algorithms a pass has
static_assert (CANDIDATES_MAX >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT
               && CANDIDATES_MAX >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT
               && CANDIDATES_MAX >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, "room for each");

//  ZA_CUDNN_VERBOSE=1: a pass's candidates as cuDNN listed them (algorithm,
//  math type, ms where timed, workspace MiB), the one taken marked.
template <typename Perf>
static void
s_show (const s_plan_t *plan, const char *pass, const Perf *perf, int count, int taken)
{
    static const char *maths [] = {"default", "tensor", "tensor-convert", "fma"};
    const za_conv2d_dims_t *d = &plan->d;
    char line [1024];
    int at = snprintf (line, sizeof line, "zactor: cuda:%d: cuDNN %s conv2d %dx%dx%dx%d k%dx%d s%d"
                       " -> %d, %s:", plan->device, s_precision_name (plan->q), d->n, d->h,
                       d->w, d->c, d->kh, d->kw, d->stride, d->oc, pass);
    for (int i = 0; i < count && at < (int) sizeof line - 64; i++)
        at += snprintf (line + at, sizeof line - at, " %s%d/%s/%s%.3fms/%zuMiB", i == taken? "*": "",
                        (int) perf [i].algo, (unsigned) perf [i].mathType < 4?
                        maths [perf [i].mathType]: "?",
                        perf [i].status == CUDNN_STATUS_SUCCESS? "": "failed/",
                        (double) perf [i].time, perf [i].memory >> 20);
    fprintf (stderr, "%s\n", line);
}

template <typename Perf, typename Algo, typename List>
static int
s_choose (const s_plan_t *plan, const char *pass, cudnnConvolutionDescriptor_t conv,
          Algo *algo, size_t *bytes, List list)
{
    Perf perf [CANDIDATES_MAX];
    int got = 0, at = -1;
    const char *why = NULL;
    cudnnStatus_t rc = list (CANDIDATES_MAX, &got, perf);
    if (rc == CUDNN_STATUS_SUCCESS) {
        at = s_pick (perf, got, plan->q, &why);
        if (s_settings ()->verbose)
            s_show (plan, pass, perf, got, at);
    }
    if (rc == CUDNN_STATUS_SUCCESS && at >= 0
        && (rc = s_dnn.cudnnSetConvolutionMathType (conv, perf [at].mathType))
               == CUDNN_STATUS_SUCCESS) {
        *algo = perf [at].algo;
        *bytes = perf [at].memory;
        return 1;
    }
    s_say (plan, pass, rc != CUDNN_STATUS_SUCCESS? s_dnn.cudnnGetErrorString (rc): why);
    return 0;
}

//  Descriptors, and each pass's algorithm: what cuDNN takes of the geometry.
static void
s_plan_make (s_plan_t *plan, cudnnHandle_t handle, const za_conv2d_dims_t *d, za_precision_t q)
{
    memset (plan, 0, sizeof *plan);
    plan->used = 1;
    plan->device = za_cuda_self.device;
    plan->d = *d;
    plan->q = q;
    plan->inputs = (size_t) d->n * d->h * d->w * d->c;
    plan->outputs = (size_t) d->n * d->oh * d->ow * d->oc;
    plan->weights = (size_t) d->kh * d->kw * d->c * d->oc;
    //  Tensors in the precision, sums in fp32 (cuDNN's "pseudo-half" configs).
    //  bf16 and fp16 ask for the tensor cores: with the default math type
    //  cuDNN 9's legacy heuristics offered those types only algorithms 0 and
    //  1 on CUDA cores (VGG16 at 224x224 in bf16 on an H200: 16 images/s
    //  against 2,100 with tensor ops).
    cudnnDataType_t type = q == ZA_PRECISION_BF16? CUDNN_DATA_BFLOAT16
                         : q == ZA_PRECISION_FP16? CUDNN_DATA_HALF: CUDNN_DATA_FLOAT;
    cudnnMathType_t math = q != ZA_PRECISION_FP32? CUDNN_TENSOR_OP_MATH: za_cuda_tf32? CUDNN_DEFAULT_MATH
                                                                 : CUDNN_FMA_MATH;
    cudnnStatus_t rc = CUDNN_STATUS_SUCCESS;
    TRY (s_dnn.cudnnCreateTensorDescriptor (&plan->x));
    TRY (s_dnn.cudnnCreateTensorDescriptor (&plan->y));
    TRY (s_dnn.cudnnCreateFilterDescriptor (&plan->w));
    TRY (s_dnn.cudnnCreateConvolutionDescriptor (&plan->forward_conv));
    TRY (s_dnn.cudnnCreateConvolutionDescriptor (&plan->filter_conv));
    TRY (s_dnn.cudnnCreateConvolutionDescriptor (&plan->data_conv));
    TRY (s_dnn.cudnnSetTensor4dDescriptor (plan->x, CUDNN_TENSOR_NHWC, type, d->n, d->c, d->h,
                                     d->w));
    TRY (s_dnn.cudnnSetTensor4dDescriptor (plan->y, CUDNN_TENSOR_NHWC, type, d->n, d->oc, d->oh,
                                     d->ow));
    TRY (s_dnn.cudnnSetFilter4dDescriptor (plan->w, type, CUDNN_TENSOR_NHWC, d->oc, d->c, d->kh,
                                     d->kw));
    cudnnConvolutionDescriptor_t convs [3] = {plan->forward_conv, plan->filter_conv,
                                              plan->data_conv};
    for (int i = 0; i < 3; i++) {
        //  The padding on top and left, as on the bottom and right: where
        //  TensorFlow's SAME pads one more there, the output below tells.
        TRY (s_dnn.cudnnSetConvolution2dDescriptor (convs [i], d->pad_top, d->pad_left, d->stride,
                                              d->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
        TRY (s_dnn.cudnnSetConvolutionMathType (convs [i], math));
    }
    int n = 0, c = 0, h = 0, w = 0;
    TRY (s_dnn.cudnnGetConvolution2dForwardOutputDim (plan->forward_conv, plan->x, plan->w, &n, &c,
                                                &h, &w));
    if (rc != CUDNN_STATUS_SUCCESS) {
        s_say (plan, "", s_dnn.cudnnGetErrorString (rc));
        return;
    }
    if (n != d->n || c != d->oc || h != d->oh || w != d->ow) {
        s_say (plan, "", "its padding is the same on both sides; this one is not");
        return;
    }
    int benchmark = s_settings ()->benchmark;

    plan->forward_ok = plan->forward_planned = s_choose<cudnnConvolutionFwdAlgoPerf_t> (
        plan, "forward", plan->forward_conv, &plan->forward, &plan->forward_bytes,
        [&] (int most, int *got, cudnnConvolutionFwdAlgoPerf_t *perf) {
            return benchmark? s_dnn.cudnnFindConvolutionForwardAlgorithm (
                                  handle, plan->x, plan->w, plan->forward_conv, plan->y, most,
                                  got, perf)
                            : s_dnn.cudnnGetConvolutionForwardAlgorithm_v7 (
                                  handle, plan->x, plan->w, plan->forward_conv, plan->y, most,
                                  got, perf);
        });
    plan->filter_ok = s_choose<cudnnConvolutionBwdFilterAlgoPerf_t> (
        plan, "backward filter", plan->filter_conv, &plan->filter, &plan->filter_bytes,
        [&] (int most, int *got, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
            return benchmark? s_dnn.cudnnFindConvolutionBackwardFilterAlgorithm (
                                  handle, plan->x, plan->y, plan->filter_conv, plan->w, most,
                                  got, perf)
                            : s_dnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7 (
                                  handle, plan->x, plan->y, plan->filter_conv, plan->w, most,
                                  got, perf);
        });
    plan->data_ok = s_choose<cudnnConvolutionBwdDataAlgoPerf_t> (
        plan, "backward data", plan->data_conv, &plan->data, &plan->data_bytes,
        [&] (int most, int *got, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
            return benchmark? s_dnn.cudnnFindConvolutionBackwardDataAlgorithm (
                                  handle, plan->w, plan->y, plan->data_conv, plan->x, most,
                                  got, perf)
                            : s_dnn.cudnnGetConvolutionBackwardDataAlgorithm_v7 (
                                  handle, plan->w, plan->y, plan->data_conv, plan->x, most,
                                  got, perf);
        });
}

//  This thread's plan of the geometry in q on its device, if it has one.
static s_plan_t *
s_plan_find (const za_conv2d_dims_t *d, za_precision_t q)
{
    for (int i = 0; i < PLANS_MAX; i++) {
        s_plan_t *plan = &s_self.plans [i];
        if (plan->used && plan->device == za_cuda_self.device && plan->q == q
            && memcmp (&plan->d, d, sizeof *d) == 0)
            return plan;
    }
    return NULL;
}

//  The geometry's plan in q, made on first use (the oldest goes when all
//  are used); NULL when cuDNN is off or cannot start.
static s_plan_t *
s_plan (const za_conv2d_dims_t *d, za_precision_t q)
{
    if (!s_settings ()->on)
        return NULL;
    s_plan_t *plan = s_plan_find (d, q);
    if (plan)
        return plan;
    if (za_cuda_self.recording) {
        za_cuda_fail ("a CUDA graph's recording", "a convolution had no cuDNN plan yet");
        return NULL;
    }
    cudnnHandle_t handle = s_handle ();
    if (!handle)
        return NULL;
    plan = &s_self.plans [s_self.next];
    s_self.next = (s_self.next + 1) % PLANS_MAX;
    s_plan_free (plan);
    s_plan_make (plan, handle, d, q);
    return plan;
}

//  A pass that failed: turned off for the geometry, said once.
static int
s_failed (s_plan_t *plan, int *ok, const char *pass, cudnnStatus_t rc)
{
    //  While a CUDA graph records, the recording fails, not the geometry.
    if (za_cuda_self.recording) {
        za_cuda_fail ("cuDNN while recording a CUDA graph", s_dnn.cudnnGetErrorString (rc));
        return -1;
    }
    *ok = 0;
    s_say (plan, pass, s_dnn.cudnnGetErrorString (rc));
    return -1;
}

// ---------------------------------------------------------------------------
//  zactor's kernel is HWIO, [kh][kw][c][oc]: a [K, oc] matrix (K = kh kw
//  c); cuDNN's NHWC filter is KRSC, [oc][kh][kw][c]: its transpose, in the
//  plan's precision (za_cuda_store).

__global__ void
k_to_krsc (za_precision_t q, size_t count, unsigned K, unsigned oc, const float *hwio,
           void *krsc)
{
    FOR_EACH (i, count) {
        unsigned o = (unsigned) (i / K), r = (unsigned) (i - (size_t) o * K);
        za_cuda_store (q, krsc, i, hwio [(size_t) r * oc + o]);
    }
}

__global__ void
k_add_from_krsc (za_precision_t q, size_t count, unsigned K, unsigned oc, const void *krsc,
                 float *hwio)
{
    FOR_EACH (i, count) {
        unsigned r = (unsigned) (i / oc), o = (unsigned) (i - (size_t) r * oc);
        hwio [i] += za_cuda_load (q, krsc, (size_t) o * K + r);
    }
}

static size_t
s_bytes (za_precision_t q, size_t count)
{
    return count * (q == ZA_PRECISION_FP32? sizeof (float): sizeof (uint16_t));
}

//  x as cuDNN reads it in the plan's precision: x itself in fp32, else a
//  copy cast down into scratch `slot`. NULL when there is no room.
static const void *
s_as_tensor (const s_plan_t *plan, int slot, const float *x, size_t count)
{
    if (plan->q == ZA_PRECISION_FP32)
        return x;
    void *low = s_room (slot, s_bytes (plan->q, count));
    if (low)
        LAUNCH (za_cuda_cast_down, count, plan->q, count, x, low);
    return low;
}

//  Where cuDNN writes a result of `count` values that belongs in x.
static void *
s_result (const s_plan_t *plan, int slot, float *x, size_t count)
{
    return plan->q == ZA_PRECISION_FP32? (void *) x: s_room (slot, s_bytes (plan->q, count));
}

//  The kernel in KRSC and the plan's precision, in the filter scratch.
static const void *
s_as_filter (const s_plan_t *plan, const float *kernel)
{
    const za_conv2d_dims_t *d = &plan->d;
    size_t count = plan->weights;
    void *krsc = s_room (S_FILTER, s_bytes (plan->q, count));
    if (krsc)
        LAUNCH (k_to_krsc, count, plan->q, count, (unsigned) (d->kh * d->kw * d->c),
                (unsigned) d->oc, kernel, krsc);
    return krsc;
}

static void *
s_workspace (const s_plan_t *plan)
{
    return s_self.scratch [plan->device][S_WORKSPACE];
}

//  A plan's pass that may run: cuDNN took it and its workspace is there.
static int
s_runs (const s_plan_t *plan, int ok, size_t bytes)
{
    return ok && bytes <= s_self.scratch_bytes [plan->device][S_WORKSPACE];
}

//  1 when S_Y holds dout cast for this plan (the backward's first call
//  made it: the others read it instead of casting it again).
static int
s_cast_of (const s_plan_t *plan, const float *dout)
{
    return s_self.dy_cast == dout && s_self.dy_plan == plan;
}

//  dout masked where the ReLU's output was 0 (where relu), and its cast
//  to q in low: one pass for what the mask and the cast did in two.
__global__ void
k_mask_cast_down (za_precision_t q, size_t count, const float *out, int relu, float *dout,
                  void *low)
{
    FOR_EACH (i, count) {
        float g = dout [i];
        if (relu && !(out [i] > 0)) {
            g = 0.0f;
            dout [i] = g;
        }
        za_cuda_store (q, low, i, g);
    }
}

int
za_cuda_dnn_conv_backward_begin (za_precision_t q, const za_conv2d_dims_t *d,
                                 const float *out, int relu, float *dout)
{
    s_self.dy_cast = NULL;
    if (q == ZA_PRECISION_FP32)
        return -1;
    s_plan_t *plan = s_plan (d, q);
    if (!plan || !(plan->filter_ok || plan->data_ok))
        return -1;
    void *low = s_room (S_Y, s_bytes (q, plan->outputs));
    if (!low)
        return -1;
    LAUNCH (k_mask_cast_down, plan->outputs, q, plan->outputs, out, relu, dout, low);
    s_self.dy_cast = dout;
    s_self.dy_plan = plan;
    return 0;
}

//  out = y (the convolution in q) + its channel's bias, through the ReLU
//  where relu: in fp32 y is out.
__global__ void
k_bias_act_from (za_precision_t q, size_t count, int units, const void *y, const float *bias,
                 int relu, float *out)
{
    FOR_EACH (i, count)
        out [i] = za_cuda_bias_act (za_cuda_load (q, y, i), bias, i, units, relu);
}

int
za_cuda_dnn_conv_forward (za_precision_t q, const za_conv2d_dims_t *d, const float *in,
                          const float *kernel, const float *bias, int relu, float *out)
{
    s_self.dy_cast = NULL;
    s_plan_t *plan = s_plan (d, q);
    if (!plan || !s_runs (plan, plan->forward_ok, plan->forward_bytes))
        return -1;
    const void *x = s_as_tensor (plan, S_X, in, plan->inputs), *w = s_as_filter (plan, kernel);
    void *y = s_result (plan, S_Y, out, plan->outputs);
    if (!x || !w || !y)
        return -1;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc = s_dnn.cudnnConvolutionForward (
        s_self.handle [plan->device], &one, plan->x, x, plan->w, w, plan->forward_conv,
        plan->forward, s_workspace (plan), plan->forward_bytes, &zero, plan->y, y);
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_failed (plan, &plan->forward_ok, "forward", rc);
    LAUNCH (k_bias_act_from, plan->outputs, q, plan->outputs, d->oc, y, bias, relu, out);
    return 0;
}

int
za_cuda_dnn_conv_backward_filter (za_precision_t q, const za_conv2d_dims_t *d,
                                  const float *in, const float *dout, float *dkernel)
{
    s_plan_t *plan = s_plan (d, q);
    if (!plan || !s_runs (plan, plan->filter_ok, plan->filter_bytes))
        return -1;
    size_t count = plan->weights;
    const void *x = s_as_tensor (plan, S_X, in, plan->inputs);
    const void *dy = s_cast_of (plan, dout)? s_self.scratch [plan->device][S_Y]
                                           : s_as_tensor (plan, S_Y, dout, plan->outputs);
    void *dw = s_room (S_FILTER, s_bytes (q, count));
    if (!x || !dy || !dw)
        return -1;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc = s_dnn.cudnnConvolutionBackwardFilter (
        s_self.handle [plan->device], &one, plan->x, x, plan->y, dy, plan->filter_conv,
        plan->filter, s_workspace (plan), plan->filter_bytes, &zero, plan->w, dw);
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_failed (plan, &plan->filter_ok, "backward filter", rc);
    if (q != ZA_PRECISION_FP32) {
        s_self.dy_cast = dout;
        s_self.dy_plan = plan;
    }
    LAUNCH (k_add_from_krsc, count, q, count, (unsigned) (d->kh * d->kw * d->c),
            (unsigned) d->oc, dw, dkernel);
    return 0;
}

int
za_cuda_dnn_conv_backward_data (za_precision_t q, const za_conv2d_dims_t *d,
                                const float *kernel, const float *dout, float *din)
{
    s_plan_t *plan = s_plan (d, q);
    int cast = plan && s_cast_of (plan, dout);
    s_self.dy_cast = NULL;
    if (!plan || !s_runs (plan, plan->data_ok, plan->data_bytes))
        return -1;
    const void *w = s_as_filter (plan, kernel);
    const void *dy = cast? s_self.scratch [plan->device][S_Y]
                         : s_as_tensor (plan, S_Y, dout, plan->outputs);
    void *dx = s_result (plan, S_X, din, plan->inputs);
    if (!w || !dy || !dx)
        return -1;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc = s_dnn.cudnnConvolutionBackwardData (
        s_self.handle [plan->device], &one, plan->w, w, plan->y, dy, plan->data_conv,
        plan->data, s_workspace (plan), plan->data_bytes, &zero, plan->x, dx);
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_failed (plan, &plan->data_ok, "backward data", rc);
    if (q != ZA_PRECISION_FP32)
        LAUNCH (za_cuda_cast_up, plan->inputs, q, plan->inputs, dx, din);
    return 0;
}

int
za_cuda_dnn_conv_taken (za_precision_t q, const za_conv2d_dims_t *d)
{
    if (!s_settings ()->on || !s_self.handle [za_cuda_self.device])
        return 0;
    //  No plan (it made way for others since): its forward may have run.
    //  One whose forward failed once: an earlier forward may have skipped
    //  im2col. Either way the columns are made again.
    s_plan_t *plan = s_plan_find (d, q);
    return plan? plan->forward_planned: 1;
}

const char *
za_cuda_dnn_describe (za_precision_t q)
{
    static char text [3][96];
    if (!s_settings ()->on)
        return NULL;
    size_t version = s_dnn.cudnnGetVersion ();
    snprintf (text [q], sizeof text [q], "cuDNN %zu.%zu convolutions%s%s%s", version / 10000,
              version / 100 % 100, q != ZA_PRECISION_FP32? "": za_cuda_tf32? " in TF32"
                                                                            : " in strict fp32",
              s_settings ()->benchmark? ", timed": "",
              s_settings ()->deterministic? ", deterministic": "");
    return text [q];
}
