/*  za_kernels.h: the numeric back end interface. Every layer is a forward /
    backward pair over flat float buffers (NHWC activations, HWIO conv kernels,
    [in, out] dense kernels); parameter gradients are accumulated with +=.

    One interface, several back ends: za_backend_cpu () is OpenBLAS (im2col +
    sgemm for convolutions); a CUDA back end fills the same table. Callers hold
    a const za_backend_t * and never call a back end's functions by name.
    Buffers passed to a back end live in its memory (host memory for the CPU).  */
#ifndef ZA_KERNELS_H_INCLUDED
#define ZA_KERNELS_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_optim.h"
#include "za/za_util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZA_PADDING_VALID = 0, ZA_PADDING_SAME = 1 } za_padding_t;
typedef enum { ZA_ACT_NONE = 0, ZA_ACT_RELU = 1 } za_act_t;

//  The geometry of a 2-D convolution over an NHWC batch, computed once by
//  za_conv2d_dims. SAME padding follows TensorFlow: out = ceil (in / stride),
//  the extra row/column of padding goes to the bottom/right.
typedef struct {
    int n, h, w, c;             //  input
    int kh, kw;                 //  kernel size
    int stride;
    int pad_top, pad_left;
    int oh, ow, oc;             //  output
} za_conv2d_dims_t;

//  Fills *dims. Returns 0, or -1 with an error when the output would be empty.
int za_conv2d_dims (za_conv2d_dims_t *dims, int n, int h, int w, int c,
                    int filters, int kernel, int stride, za_padding_t padding);
//  Floats of the im2col buffer a convolution with these dims needs.
size_t za_conv2d_cols_floats (const za_conv2d_dims_t *dims);

//  The geometry of a max-pool (VALID padding, window `pool`, step `stride`).
typedef struct {
    int n, h, w, c;
    int pool, stride;
    int oh, ow;
} za_pool2d_dims_t;

int za_pool2d_dims (za_pool2d_dims_t *dims, int n, int h, int w, int c,
                    int pool, int stride);

//  What the matrix products (convolutions, dense) take their inputs in
//  (TensorFlow's mixed-precision policies, PyTorch's autocast): FP32, or
//  the inputs rounded to bfloat16 / float16 with sums and everything else
//  (activations between layers, the loss, the optimizer, the weights) in
//  fp32.
typedef enum {
    ZA_PRECISION_FP32 = 0,
    ZA_PRECISION_BF16 = 1,          //  "mixed_bfloat16"
    ZA_PRECISION_FP16 = 2           //  "mixed_float16": needs loss scaling
} za_precision_t;

//  A --precision as asked, Keras's policy: a precision, or auto (BF16 where
//  the device computes it natively, else FP32; za_backend_policy picks).
//  The order is --precision's choices'; zero is FP32.
typedef enum {
    ZA_POLICY_FP32 = ZA_PRECISION_FP32,
    ZA_POLICY_BF16 = ZA_PRECISION_BF16,
    ZA_POLICY_FP16 = ZA_PRECISION_FP16,
    ZA_POLICY_AUTO
} za_policy_t;
//  --precision's choices, in za_policy_t's order, and their aliases (the
//  option table's ENUM form).
#define ZA_POLICY_CHOICES "fp32|mixed_bfloat16|mixed_float16|auto|float32=fp32|" \
                          "bf16=mixed_bfloat16|fp16=mixed_float16"

//  "fp32" (or "float32"), "mixed_bfloat16" ("bf16"), "mixed_float16"
//  ("fp16") or "auto"; NULL is fp32. 0, or -1 with an error listing what is
//  accepted.
int za_policy_parse (const char *text, za_policy_t *policy);
//  The same, as a precision and whether it was auto (*precision FP32 then).
int za_precision_parse (const char *text, za_precision_t *precision, int *is_auto);
//  The policy's name: "float32", "mixed_bfloat16", "mixed_float16".
const char *za_precision_text (za_precision_t precision);

typedef struct za_backend_t za_backend_t;

struct za_backend_t {
    const char *name;

    //  out[n,oh,ow,oc] = act (sum in * kernel + bias). `cols` (cols_floats)
    //  is the back end's to keep for the backward pass (the im2col matrix).
    void (*conv2d_forward) (const za_conv2d_dims_t *d, const float *in,
                            const float *kernel, const float *bias, za_act_t act,
                            float *cols, float *out);
    //  dout is the gradient w.r.t. out, masked by out > 0 with act RELU (the
    //  back end may do so in place: dout is its to overwrite). dkernel +=,
    //  dbias +=; din (may be NULL: not needed for the first layer) is
    //  overwritten. `in` is the forward's input and cols what the forward
    //  left there (the back end may write it again); dcols is scratch of
    //  cols_floats.
    void (*conv2d_backward) (const za_conv2d_dims_t *d, const float *in, float *cols,
                             const float *kernel, const float *out, za_act_t act,
                             float *dout, float *dkernel, float *dbias,
                             float *dcols, float *din);

    //  out[n, units] = act (in[n, in_dim] @ kernel[in_dim, units] + bias).
    void (*dense_forward) (int n, int in_dim, int units, const float *in,
                           const float *kernel, const float *bias, za_act_t act,
                           float *out);
    //  As conv2d_backward, for dense. din may be NULL.
    void (*dense_backward) (int n, int in_dim, int units, const float *in,
                            const float *kernel, const float *out, za_act_t act,
                            float *dout, float *dkernel, float *dbias, float *din);

    //  A convolution (d) and the max-pool (p) over its output as one, where
    //  the back end has it for this geometry (else NULL or -1, and each goes
    //  on its own; nothing written). Forward: pool_out and argmax as
    //  maxpool_forward leaves them from the convolution's output, which is
    //  not written. Backward, for a first layer (no input gradient): dkernel
    //  +=, dbias += from the pool's output gradient, after such a forward.
    int (*conv2d_pool_forward) (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
                                const float *in, const float *kernel, const float *bias,
                                za_act_t act, float *pool_out, int32_t *argmax);
    int (*conv2d_pool_backward) (const za_conv2d_dims_t *d, const za_pool2d_dims_t *p,
                                 const float *in, const float *pool_out,
                                 const int32_t *argmax, za_act_t act, const float *pool_dout,
                                 float *dkernel, float *dbias);
    //  1: the back end makes the im2col columns itself where it needs them
    //  (CUDA's, whose cuDNN mostly does not): the layers pass cols and
    //  dcols NULL and keep no buffers of cols_floats for them. 0: they do.
    int conv2d_cols_own;

    //  Max-pool; argmax[i] remembers which input fed out[i].
    void (*maxpool_forward) (const za_pool2d_dims_t *d, const float *in,
                             float *out, int32_t *argmax);
    //  din is overwritten: zero except at the argmax positions.
    void (*maxpool_backward) (const za_pool2d_dims_t *d, const float *dout,
                              const int32_t *argmax, float *din);

    //  Global average pool: out[n, c] = the mean over the `positions`
    //  (height * width) of in[n, p, c].
    void (*avgpool_global_forward) (int n, int positions, int channels, const float *in,
                                    float *out);
    //  din[n, p, c] = dout[n, c] / positions, overwritten.
    void (*avgpool_global_backward) (int n, int positions, int channels,
                                     const float *dout, float *din);

    void (*relu_forward) (size_t count, const float *in, float *out);
    //  din = dout where out > 0, else 0.
    void (*relu_backward) (size_t count, const float *out, const float *dout,
                           float *din);

    //  Inverted dropout: out = in * mask, mask 0 (probability rate) or
    //  1 / (1 - rate), element i's drawn from (seed, i) alone: every back end
    //  draws the same mask. In eval, callers skip the layer.
    void (*dropout_forward) (size_t count, float rate, uint64_t seed, const float *in,
                             float *mask, float *out);
    void (*dropout_backward) (size_t count, const float *mask, const float *dout,
                              float *din);

    //  Mean sparse softmax cross-entropy over n rows of `classes` logits.
    //  Returns the sum of the per-row losses; *correct gets the number of rows
    //  whose argmax equals the label. dlogits (may be NULL) = (softmax -
    //  onehot) / n. A label outside [0, classes) counts as wrong and adds no
    //  gradient; *invalid (may be NULL) gets how many there were.
    double (*softmax_xent) (int n, int classes, const float *logits,
                            const int32_t *labels, float *dlogits, int *correct,
                            int *invalid);

    //  softmax_xent without waiting for a device: the loss's sum, the right
    //  rows and the invalid labels are added to the calling thread's sums on
    //  its device, which loss_take reads after the thread's sync (and
    //  clears). A step then reads its loss once at its end, not in the
    //  middle of its work (a model_fn does so while za_model_loss_deferred
    //  says). loss_take: 0, or -1 with an error.
    void (*softmax_xent_add) (int n, int classes, const float *logits,
                              const int32_t *labels, float *dlogits);
    int (*loss_take) (double *loss_sum, int *correct, int *invalid);

    //  Buffers in this back end's memory, zeroed. Free with buffer_free.
    void *(*buffer_alloc) (size_t bytes);
    void (*buffer_free) (void *p);
    //  Threads the back end may use (OpenBLAS threads for the CPU).
    void (*set_threads) (int threads);

    //  What a back end with memory of its own (a GPU) adds. With
    //  host_memory 1 its buffers are host memory that callers may read and
    //  write directly (the CPU); else only through the calls below.
    int host_memory;
    //  Devices this back end drives (1 for the CPU).
    int device_count;
    //  Makes `device` (0 .. device_count - 1) the calling thread's: its
    //  later calls run there, in the thread's own order (a stream). 0, or -1
    //  with an error.
    int (*bind) (int device);
    //  Host buffers for copies to and from this back end (pinned for a GPU),
    //  zeroed. Free with host_free.
    void *(*host_alloc) (size_t bytes);
    void (*host_free) (void *p);
    //  Copies host to back end, back end to host (both return once the host
    //  side may be reused), and within the back end (across its devices
    //  too). 0, or -1 with an error.
    int (*upload) (void *dst, const void *src, size_t bytes);
    int (*download) (void *dst, const void *src, size_t bytes);
    int (*copy) (void *dst, const void *src, size_t bytes);
    void (*zero) (void *p, size_t bytes);
    //  y = alpha * y + beta * x over n floats (x NULL: y = alpha * y).
    void (*scale_add) (size_t n, float alpha, float *y, float beta, const float *x);
    //  1 when none of n floats is an infinity or a NaN, else 0 (waits for
    //  the thread's work on a device).
    int (*all_finite) (size_t n, const float *x);
    //  za_optim_apply on this back end's buffers (`slots` is a host array of
    //  its buffers).
    void (*optim_apply) (const za_optim_config_t *config, int64_t step, float *params,
                         const float *grads, float **slots, size_t n);
    //  tf.clip_by_global_norm over `count` runs of grads (run r: size [r]
    //  floats from offset [r]; both arrays the host's): every run scaled by
    //  clip / norm where their global norm is above clip (> 0). On a device
    //  the norm stays there and nothing waits (a failure shows at the sync).
    void (*clip_by_global_norm) (float *grads, const size_t *offset, const size_t *size,
                                 int count, float clip);
    //  Waits until the calling thread's work is done. 0, or -1 with the
    //  first error since the last sync.
    int (*sync) (void);
    //  Collectives over this back end's devices (NCCL on GPUs), on the
    //  calling thread's order on each: bufs [i] (floats each) is on
    //  devices [i], the first listed first. devices_sum sums them all into
    //  bufs [0] (a reduce to the first); devices_broadcast copies bufs [0]
    //  to the others. 0; or -1 with an error when it wrote nothing (no
    //  collective for these devices: the caller copies instead). A failure
    //  after it started is kept for the next sync, as a kernel's.
    int (*devices_sum) (float *const *bufs, const int *devices, int count, size_t floats);
    int (*devices_broadcast) (float *const *bufs, const int *devices, int count,
                              size_t floats);

    //  A group of processes, one rank each on its own device, whose sums
    //  run on the devices (NCCL between processes): the all-reduce
    //  strategy's gradients without a trip through host memory. group_id
    //  (rank 0's) makes a new group's id, which the caller passes to the
    //  others (ZA_GROUP_ID_BYTES); each rank then group_opens it, which
    //  returns at once: the group is formed once group_poll says 1.
    //  group_sum starts summing `floats` of buf (on the calling thread's
    //  device, after its work there) over the ranks, in place; group_poll
    //  says 1 once done, 0 while not yet (a rank that does not come keeps
    //  it 0: the caller watches for that and closes), -1 failed (error
    //  said; the group is no use after). group_close aborts what is under
    //  way and frees it. group_id: 0, or -1 with an error where there are
    //  none (the caller goes by host memory); group_open: NULL with an error.
    int (*group_id) (unsigned char *id);
    void *(*group_open) (const unsigned char *id, int rank, int size);
    int (*group_sum) (void *group, float *buf, size_t floats);
    int (*group_poll) (void *group);
    void (*group_close) (void *group);

    //  The precision of this table's matrix products; the table of the
    //  same device computing them in `precision` (itself for its own), or
    //  NULL with an error where the device cannot (a CPU without bf16
    //  instructions for BF16); and whether the device multiplies that
    //  precision in hardware (1), or rounds the inputs and multiplies in
    //  fp32 (0: right, but no faster), asked without an error.
    za_precision_t precision;
    const za_backend_t *(*mixed) (za_precision_t precision);
    int (*native) (za_precision_t precision);
    //  With host_memory: the examples per micro-batch this table's products
    //  run fastest at on this machine, or 0 (and NULL): the replica's default.
    int (*micro_batch) (void);

    //  Optional (NULL where there are none): the calling thread's calls
    //  recorded once and replayed as one launch (CUDA graphs). graph_begin:
    //  the thread's calls are recorded from now on, not run (0, or -1 with
    //  an error). graph_end: the recording, ready to run, or NULL with an
    //  error when it failed (its calls did not run, and an error they kept
    //  is dropped: the caller runs them again). graph_launch runs one after
    //  the thread's work: 0; 1 when it is stale (a scratch buffer it used
    //  was replaced since: not run, the caller frees it and runs the calls);
    //  or -1 with an error. graph_free frees one.
    int (*graph_begin) (void);
    void *(*graph_end) (void);
    int (*graph_launch) (void *graph);
    void (*graph_free) (void *graph);

    //  Optional (NULL where every call is done when it returns): fence
    //  marks the calling thread's work queued so far on its device (a CUDA
    //  event); NULL with an error when it could not, having waited for that
    //  work itself (an error the work kept stays for the next sync).
    //  fence_wait, on any thread, returns once that work is done and frees
    //  the mark (0, or -1 with an error). The input waits so before it
    //  writes again where a step that has not ended yet reads (a step that
    //  does not wait for its own end).
    void *(*fence) (void);
    int (*fence_wait) (void *fence);
};

//  The slots every back end fills with a function of its own file named
//  s_<slot>, said once for all of them, in the struct's order (C++ keeps
//  it): a back end's table writes ZA_BACKEND_LAYER_SLOTS (S_SLOT), its
//  host_memory and device_count, then ZA_BACKEND_MEMORY_SLOTS (S_SLOT), with
//  `#define S_SLOT(slot) .slot = s_##slot,` (the matrix products and the
//  precision it writes itself).
#define ZA_BACKEND_LAYER_SLOTS(X)                                                            \
    X (maxpool_forward) X (maxpool_backward) X (avgpool_global_forward)                      \
    X (avgpool_global_backward) X (relu_forward) X (relu_backward) X (dropout_forward)       \
    X (dropout_backward) X (softmax_xent) X (softmax_xent_add) X (loss_take)                \
    X (buffer_alloc) X (buffer_free) X (set_threads)
#define ZA_BACKEND_MEMORY_SLOTS(X)                                                           \
    X (bind) X (host_alloc) X (host_free) X (upload) X (download) X (copy) X (zero)          \
    X (scale_add) X (all_finite) X (optim_apply) X (clip_by_global_norm) X (sync)            \
    X (devices_sum) X (devices_broadcast) X (group_id) X (group_open) X (group_sum)          \
    X (group_poll) X (group_close)
#define ZA_GROUP_ID_BYTES 128

//  The table of `be` for a policy: auto is BF16 where the device computes it
//  natively, else FP32. NULL with an error (a precision the device cannot
//  compute).
const za_backend_t *za_backend_policy (const za_backend_t *be, za_policy_t policy);
//  The same for a --precision text (za_policy_parse); NULL also for a text
//  not known.
const za_backend_t *za_backend_mixed (const za_backend_t *be, const char *precision);

//  The CPU back end (OpenBLAS). Never NULL.
const za_backend_t *za_backend_cpu (void);
//  The CPU back end as if its memory were a device's (host_memory 0, own
//  buffers, copies through upload and download): callers take the path a
//  GPU takes, so that path is tested where there is no GPU. It has
//  ZA_STAGED_DEVICES devices (cpu-staged:all), all the CPU, whose
//  collectives are loops; ZA_STAGED_COLLECTIVE=fail makes them fail as an
//  NCCL that cannot start (=sum the sum alone), for the callers' fallback.
//  Its groups of processes are a segment of shared memory on this host
//  (za_cpu_group.c): ZA_STAGED_GROUP=0 has none, =fail fails every open,
//  =fail-open:R rank R's, =fail-sum:R:N rank R's N-th sum of each group
//  (from 1), for the callers' fallback and fault handling. Never NULL.
const za_backend_t *za_backend_cpu_staged (void);
#define ZA_STAGED_DEVICES 2
//  cpu-staged's fences (its work is done when a call returns: each is a
//  token all the same, freed by its wait) made and waited for so far in the
//  process, for tests of their callers.
void za_cpu_staged_fences (int64_t *made, int64_t *waited);

// ---------------------------------------------------------------------------
//  Devices: where a replica computes (--device).

typedef enum {
    ZA_DEVICE_CPU = 0,
    ZA_DEVICE_CUDA = 1,
    ZA_DEVICE_CPU_STAGED = 2        //  za_backend_cpu_staged: tests the GPU path
} za_device_kind_t;

#define ZA_DEVICE_ALL (-1)
#define ZA_DEVICE_TEXT_MAX 32
#define ZA_DEVICE_MAX 16

typedef struct {
    za_device_kind_t kind;
    int index;                  //  cuda:N; ZA_DEVICE_ALL for cuda:all, cpu-staged:all
} za_device_t;

//  "cpu", "cuda" (= cuda:0), "cuda:N", "cuda:all", "cpu-staged" or
//  "cpu-staged:all". Returns 0, or -1 with an error listing what is
//  accepted (cpu-staged is for tests: not listed).
int za_device_parse (const char *text, za_device_t *device);
//  The canonical text of a device ("cuda:0"), into buf.
const char *za_device_text (const za_device_t *device, char *buf, size_t size);

//  The back end that runs on `device`, and in *first and *count the back
//  end's devices it takes (cuda:2 -> 2, 1; cuda:all -> 0, every GPU). For
//  CUDA it loads the CUDA back end (libzactor_cuda.so, built with
//  -DZA_CUDA; $ZA_CUDA_LIBRARY names another file) once per process. NULL
//  with an error that says what to do: a build without CUDA, a missing
//  driver, no GPU, no device N.
const za_backend_t *za_device_backend (const za_device_t *device, int *first, int *count);

//  What the CUDA module exports (the loader looks it up by this name):
//  its table, with `error` for its messages (za_error's contract).
typedef int (za_error_fn) (const char *fmt, ...);
#define ZA_CUDA_ENTRY "za_backend_cuda_open"
typedef const za_backend_t *(za_backend_open_fn) (za_error_fn *error);

#ifdef __cplusplus
}
#endif
#endif
