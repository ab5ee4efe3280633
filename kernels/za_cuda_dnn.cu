/*  za_cuda_dnn.cu: the fp32 convolutions through cuDNN (forward, backward
    data, backward filter) on zactor's NHWC tensors, each geometry planned
    once per thread and device: descriptors, an algorithm per pass (cuDNN's
    heuristics, or a timed search as PyTorch's cudnn.benchmark) within a
    workspace limit, TF32 as PyTorch's convolutions allow it by default.   */
#include "za_cuda_dnn.h"
#include "za_cuda_util.h"

#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLANS_MAX 64                    //  geometries kept per thread (VGG16 has 13)
#define WORKSPACE_MB_DEFAULT 1024

//  ZA_CUDNN=0 turns cuDNN off; ZA_CUDNN_BENCHMARK=1 times every algorithm
//  on a geometry's first use and keeps the fastest; ZA_CUDNN_WORKSPACE_MB
//  bounds the scratch an algorithm may use.
typedef struct {
    int on;
    int benchmark;
    size_t workspace_limit;
} s_settings_t;

//  One geometry on one device: what cuDNN takes of it (until a call fails).
typedef struct {
    int used;
    int device;
    za_conv2d_dims_t d;
    int forward_ok, filter_ok, data_ok;
    int forward_taken;                  //  this thread's last forward went through cuDNN
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;          //  KRSC: [oc][kh][kw][c]
    //  A convolution descriptor per pass: each carries its algorithm's math type.
    cudnnConvolutionDescriptor_t forward_conv, filter_conv, data_conv;
    cudnnConvolutionFwdAlgo_t forward;
    cudnnConvolutionBwdFilterAlgo_t filter;
    cudnnConvolutionBwdDataAlgo_t data;
    size_t forward_bytes, filter_bytes, data_bytes;
} s_plan_t;

//  The calling thread's handles, scratch and plans.
typedef struct {
    cudnnHandle_t handle [ZA_DEVICE_MAX];
    int broken [ZA_DEVICE_MAX];         //  cudnnCreate failed there: not again
    void *workspace [ZA_DEVICE_MAX];
    size_t workspace_bytes [ZA_DEVICE_MAX];
    float *filter [ZA_DEVICE_MAX];      //  a kernel in KRSC, or its gradient
    size_t filter_floats [ZA_DEVICE_MAX];
    s_plan_t plans [PLANS_MAX];
    int next;                           //  the slot the next new plan takes
} s_thread_t;

static thread_local s_thread_t s_self;

static s_settings_t
s_settings_read (void)
{
    s_settings_t settings = {1, 0, (size_t) WORKSPACE_MB_DEFAULT << 20};
    const char *on = getenv ("ZA_CUDNN"), *benchmark = getenv ("ZA_CUDNN_BENCHMARK");
    const char *limit = getenv ("ZA_CUDNN_WORKSPACE_MB");
    settings.on = !(on && strcmp (on, "0") == 0);
    settings.benchmark = benchmark && strcmp (benchmark, "1") == 0;
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
        cudnnStatus_t rc = cudnnCreate (&s_self.handle [dev]);
        if (rc == CUDNN_STATUS_SUCCESS)
            rc = cudnnSetStream (s_self.handle [dev], cudaStreamPerThread);
        if (rc != CUDNN_STATUS_SUCCESS) {
            fprintf (stderr, "zactor: cuda:%d: cuDNN does not start (%s): convolutions"
                             " through im2col and cuBLAS\n", dev, cudnnGetErrorString (rc));
            s_self.broken [dev] = 1;
            s_self.handle [dev] = NULL;
        }
    }
    return s_self.handle [dev];
}

static void
s_say (const s_plan_t *plan, const char *pass, const char *why)
{
    const za_conv2d_dims_t *d = &plan->d;
    fprintf (stderr, "zactor: cuda:%d: cuDNN declines conv2d %s %dx%dx%dx%d k%dx%d s%d"
                     " -> %d filters (%s): im2col and cuBLAS for it\n", plan->device, pass,
             d->n, d->h, d->w, d->c, d->kh, d->kw, d->stride, d->oc, why);
}

static void
s_plan_free (s_plan_t *plan)
{
    if (!plan->used)
        return;
    cudnnDestroyTensorDescriptor (plan->x);
    cudnnDestroyTensorDescriptor (plan->y);
    cudnnDestroyFilterDescriptor (plan->w);
    cudnnDestroyConvolutionDescriptor (plan->forward_conv);
    cudnnDestroyConvolutionDescriptor (plan->filter_conv);
    cudnnDestroyConvolutionDescriptor (plan->data_conv);
    memset (plan, 0, sizeof *plan);
}

//  The first of cuDNN's candidates (fastest first) that ran, fits the
//  workspace and, in strict fp32, multiplies without TF32; -1 when none.
template <typename Perf>
static int
s_pick (const Perf *perf, int count, size_t limit)
{
    for (int i = 0; i < count; i++)
        if (perf [i].status == CUDNN_STATUS_SUCCESS && perf [i].memory <= limit
            && (za_cuda_tf32 || perf [i].mathType == CUDNN_FMA_MATH))
            return i;
    return -1;
}

//  Room for `bytes` of workspace on this thread's device. 0 or -1.
static int
s_workspace_room (size_t bytes)
{
    int dev = za_cuda_self.device;
    if (bytes <= s_self.workspace_bytes [dev])
        return 0;
    cudaFree (s_self.workspace [dev]);
    s_self.workspace [dev] = NULL;
    s_self.workspace_bytes [dev] = 0;
    if (cudaMalloc (&s_self.workspace [dev], bytes) != cudaSuccess) {
        cudaGetLastError ();            //  not the step's error: we fall back
        return -1;
    }
    s_self.workspace_bytes [dev] = bytes;
    return 0;
}

#define TRY(call)                                                                       \
    do {                                                                                \
        if (rc == CUDNN_STATUS_SUCCESS)                                                 \
            rc = (call);                                                                \
    } while (0)

//  Descriptors, and each pass's algorithm: what cuDNN takes of the geometry.
static void
s_plan_make (s_plan_t *plan, cudnnHandle_t handle, const za_conv2d_dims_t *d)
{
    memset (plan, 0, sizeof *plan);
    plan->used = 1;
    plan->device = za_cuda_self.device;
    plan->d = *d;
    cudnnStatus_t rc = CUDNN_STATUS_SUCCESS;
    TRY (cudnnCreateTensorDescriptor (&plan->x));
    TRY (cudnnCreateTensorDescriptor (&plan->y));
    TRY (cudnnCreateFilterDescriptor (&plan->w));
    TRY (cudnnCreateConvolutionDescriptor (&plan->forward_conv));
    TRY (cudnnCreateConvolutionDescriptor (&plan->filter_conv));
    TRY (cudnnCreateConvolutionDescriptor (&plan->data_conv));
    TRY (cudnnSetTensor4dDescriptor (plan->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, d->n, d->c,
                                     d->h, d->w));
    TRY (cudnnSetTensor4dDescriptor (plan->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, d->n, d->oc,
                                     d->oh, d->ow));
    TRY (cudnnSetFilter4dDescriptor (plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, d->oc, d->c,
                                     d->kh, d->kw));
    cudnnConvolutionDescriptor_t convs [3] = {plan->forward_conv, plan->filter_conv,
                                              plan->data_conv};
    for (int i = 0; i < 3; i++) {
        //  The padding on top and left, as on the bottom and right: where
        //  TensorFlow's SAME pads one more there, the output below tells.
        TRY (cudnnSetConvolution2dDescriptor (convs [i], d->pad_top, d->pad_left, d->stride,
                                              d->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
        TRY (cudnnSetConvolutionMathType (convs [i], za_cuda_tf32? CUDNN_DEFAULT_MATH
                                                                 : CUDNN_FMA_MATH));
    }
    int n = 0, c = 0, h = 0, w = 0;
    TRY (cudnnGetConvolution2dForwardOutputDim (plan->forward_conv, plan->x, plan->w, &n, &c,
                                                &h, &w));
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_say (plan, "", cudnnGetErrorString (rc));
    if (n != d->n || c != d->oc || h != d->oh || w != d->ow)
        return s_say (plan, "", "its padding is the same on both sides; this one is not");
    size_t limit = s_settings ()->workspace_limit;
    int benchmark = s_settings ()->benchmark, got = 0, at;

    cudnnConvolutionFwdAlgoPerf_t forward [CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    rc = benchmark? cudnnFindConvolutionForwardAlgorithm (handle, plan->x, plan->w,
                                                          plan->forward_conv, plan->y,
                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                          &got, forward)
                  : cudnnGetConvolutionForwardAlgorithm_v7 (handle, plan->x, plan->w,
                                                            plan->forward_conv, plan->y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                            &got, forward);
    if (rc == CUDNN_STATUS_SUCCESS && (at = s_pick (forward, got, limit)) >= 0
        && cudnnSetConvolutionMathType (plan->forward_conv, forward [at].mathType)
               == CUDNN_STATUS_SUCCESS
        && s_workspace_room (forward [at].memory) == 0) {
        plan->forward = forward [at].algo;
        plan->forward_bytes = forward [at].memory;
        plan->forward_ok = 1;
    }
    else
        s_say (plan, "forward", rc != CUDNN_STATUS_SUCCESS? cudnnGetErrorString (rc)
                                                          : "no algorithm within the workspace");

    cudnnConvolutionBwdFilterAlgoPerf_t filter [CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    rc = benchmark? cudnnFindConvolutionBackwardFilterAlgorithm (
                        handle, plan->x, plan->y, plan->filter_conv, plan->w,
                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, filter)
                  : cudnnGetConvolutionBackwardFilterAlgorithm_v7 (
                        handle, plan->x, plan->y, plan->filter_conv, plan->w,
                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, filter);
    if (rc == CUDNN_STATUS_SUCCESS && (at = s_pick (filter, got, limit)) >= 0
        && cudnnSetConvolutionMathType (plan->filter_conv, filter [at].mathType)
               == CUDNN_STATUS_SUCCESS
        && s_workspace_room (filter [at].memory) == 0) {
        plan->filter = filter [at].algo;
        plan->filter_bytes = filter [at].memory;
        plan->filter_ok = 1;
    }
    else
        s_say (plan, "backward filter", rc != CUDNN_STATUS_SUCCESS
                                        ? cudnnGetErrorString (rc)
                                        : "no algorithm within the workspace");

    cudnnConvolutionBwdDataAlgoPerf_t data [CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    rc = benchmark? cudnnFindConvolutionBackwardDataAlgorithm (
                        handle, plan->w, plan->y, plan->data_conv, plan->x,
                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, data)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7 (
                        handle, plan->w, plan->y, plan->data_conv, plan->x,
                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, data);
    if (rc == CUDNN_STATUS_SUCCESS && (at = s_pick (data, got, limit)) >= 0
        && cudnnSetConvolutionMathType (plan->data_conv, data [at].mathType)
               == CUDNN_STATUS_SUCCESS
        && s_workspace_room (data [at].memory) == 0) {
        plan->data = data [at].algo;
        plan->data_bytes = data [at].memory;
        plan->data_ok = 1;
    }
    else
        s_say (plan, "backward data", rc != CUDNN_STATUS_SUCCESS
                                      ? cudnnGetErrorString (rc)
                                      : "no algorithm within the workspace");
}

//  This thread's plan of the geometry on its device, if it has one.
static s_plan_t *
s_plan_find (const za_conv2d_dims_t *d)
{
    for (int i = 0; i < PLANS_MAX; i++) {
        s_plan_t *plan = &s_self.plans [i];
        if (plan->used && plan->device == za_cuda_self.device
            && memcmp (&plan->d, d, sizeof *d) == 0)
            return plan;
    }
    return NULL;
}

//  The geometry's plan, made on first use (the oldest goes when all are
//  used); NULL when cuDNN is off or cannot start.
static s_plan_t *
s_plan (const za_conv2d_dims_t *d)
{
    if (!s_settings ()->on)
        return NULL;
    s_plan_t *plan = s_plan_find (d);
    if (plan)
        return plan;
    cudnnHandle_t handle = s_handle ();
    if (!handle)
        return NULL;
    plan = &s_self.plans [s_self.next];
    s_self.next = (s_self.next + 1) % PLANS_MAX;
    s_plan_free (plan);
    s_plan_make (plan, handle, d);
    return plan;
}

//  A pass that failed: turned off for the geometry, said once.
static int
s_failed (s_plan_t *plan, int *ok, const char *pass, cudnnStatus_t rc)
{
    *ok = 0;
    s_say (plan, pass, cudnnGetErrorString (rc));
    return -1;
}

// ---------------------------------------------------------------------------
//  zactor's kernel is HWIO, [kh][kw][c][oc]: a [K, oc] matrix (K = kh kw c);
//  cuDNN's NHWC filter is KRSC, [oc][kh][kw][c]: its transpose.

__global__ void
k_to_krsc (size_t count, unsigned K, unsigned oc, const float *hwio, float *krsc)
{
    FOR_EACH (i, count) {
        unsigned o = (unsigned) (i / K), r = (unsigned) (i - (size_t) o * K);
        krsc [i] = hwio [(size_t) r * oc + o];
    }
}

__global__ void
k_add_from_krsc (size_t count, unsigned K, unsigned oc, const float *krsc, float *hwio)
{
    FOR_EACH (i, count) {
        unsigned r = (unsigned) (i / oc), o = (unsigned) (i - (size_t) r * oc);
        hwio [i] += krsc [(size_t) o * K + r];
    }
}

//  This thread's filter scratch on its device for the geometry, or NULL.
static float *
s_filter_room (const za_conv2d_dims_t *d)
{
    int dev = za_cuda_self.device;
    size_t floats = (size_t) d->kh * d->kw * d->c * d->oc;
    if (floats > s_self.filter_floats [dev]) {
        cudaFree (s_self.filter [dev]);
        s_self.filter [dev] = NULL;
        s_self.filter_floats [dev] = 0;
        if (cudaMalloc ((void **) &s_self.filter [dev], floats * sizeof (float)) != cudaSuccess) {
            cudaGetLastError ();
            return NULL;
        }
        s_self.filter_floats [dev] = floats;
    }
    return s_self.filter [dev];
}

int
za_cuda_dnn_conv_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                          float *out)
{
    s_plan_t *plan = s_plan (d);
    if (!plan)
        return -1;
    plan->forward_taken = 0;
    float *krsc = plan->forward_ok? s_filter_room (d): NULL;
    if (!krsc)
        return -1;
    unsigned K = (unsigned) (d->kh * d->kw * d->c);
    size_t count = (size_t) K * d->oc;
    LAUNCH (k_to_krsc, count, count, K, (unsigned) d->oc, kernel, krsc);
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc = cudnnConvolutionForward (
        s_self.handle [plan->device], &one, plan->x, in, plan->w, krsc, plan->forward_conv,
        plan->forward, s_self.workspace [plan->device], plan->forward_bytes, &zero, plan->y,
        out);
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_failed (plan, &plan->forward_ok, "forward", rc);
    plan->forward_taken = 1;
    return 0;
}

int
za_cuda_dnn_conv_backward_filter (const za_conv2d_dims_t *d, const float *in,
                                  const float *dout, float *dkernel)
{
    s_plan_t *plan = s_plan (d);
    float *dkrsc = plan && plan->filter_ok? s_filter_room (d): NULL;
    if (!dkrsc)
        return -1;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc = cudnnConvolutionBackwardFilter (
        s_self.handle [plan->device], &one, plan->x, in, plan->y, dout, plan->filter_conv,
        plan->filter, s_self.workspace [plan->device], plan->filter_bytes, &zero, plan->w,
        dkrsc);
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_failed (plan, &plan->filter_ok, "backward filter", rc);
    unsigned K = (unsigned) (d->kh * d->kw * d->c);
    size_t count = (size_t) K * d->oc;
    LAUNCH (k_add_from_krsc, count, count, K, (unsigned) d->oc, dkrsc, dkernel);
    return 0;
}

int
za_cuda_dnn_conv_backward_data (const za_conv2d_dims_t *d, const float *kernel,
                                const float *dout, float *din)
{
    s_plan_t *plan = s_plan (d);
    float *krsc = plan && plan->data_ok? s_filter_room (d): NULL;
    if (!krsc)
        return -1;
    unsigned K = (unsigned) (d->kh * d->kw * d->c);
    size_t count = (size_t) K * d->oc;
    LAUNCH (k_to_krsc, count, count, K, (unsigned) d->oc, kernel, krsc);
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc = cudnnConvolutionBackwardData (
        s_self.handle [plan->device], &one, plan->w, krsc, plan->y, dout, plan->data_conv,
        plan->data, s_self.workspace [plan->device], plan->data_bytes, &zero, plan->x, din);
    if (rc != CUDNN_STATUS_SUCCESS)
        return s_failed (plan, &plan->data_ok, "backward data", rc);
    return 0;
}

int
za_cuda_dnn_conv_taken (const za_conv2d_dims_t *d)
{
    if (!s_settings ()->on || !s_self.handle [za_cuda_self.device])
        return 0;
    //  A plan that made way for others since: its forward may have run.
    s_plan_t *plan = s_plan_find (d);
    return plan? plan->forward_taken: 1;
}

const char *
za_cuda_dnn_describe (void)
{
    static char text [64];
    if (!s_settings ()->on)
        return NULL;
    size_t version = cudnnGetVersion ();
    snprintf (text, sizeof text, "cuDNN %zu.%zu convolutions%s%s", version / 10000,
              version / 100 % 100, za_cuda_tf32? " in TF32": " in strict fp32",
              s_settings ()->benchmark? ", timed": "");
    return text;
}
