/*  za_cpu_dnnl.c: the CPU's convolutions through oneDNN (libdnnl 2.6, the
    library PyTorch and TensorFlow compute convolutions with on CPUs):
    forward with the bias and ReLU fused, the kernel's gradient and the
    input's. NHWC activations as zactor keeps them; the HWIO kernel (and its
    gradient) reordered to and from the layouts oneDNN's kernels want: the
    kernel once a batch (it changes every step, but not between a batch's
    micro-batches: za_model_values_epoch), a frozen one once for as long as
    nothing writes it (za_model_frozen_epoch), its gradient each call. Measured
    on an AMD EPYC (avx512), one thread: forward 1.2x-3.5x im2col +
    OpenBLAS, backward 1.0x-2.0x; the seed CNN trains 1.23x-1.35x faster
    (docs/performance.md).

    In bf16 (mixed_bfloat16) the input and the output's gradient are cast
    here (round to nearest even, za_f32_to_bf16), the kernel by the reorder
    into oneDNN's layout; the results, the bias and every gradient stay
    fp32. Dense layers in bf16 are oneDNN matmuls over the same casts.

    Each thread computes alone (zactor splits a batch over its threads) and
    keeps its own primitives, made once per geometry and freed when the
    thread ends.                                                             */
#include "za_cpu_dnnl.h"
#include "za/za_model.h"
#include "za/za_tensor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>

#define S_CONVS_MAX 64
#define S_MATMULS_MAX 32
//  A thread keeps reordered kernels (one per kernel and pass) in buffers of
//  their own up to this many bytes; beyond, they take turns in its scratch
//  and are reordered at every call (VGG16's would take 118 MB a thread in
//  fp32, 59 MB in bf16).
#define S_KEPT_BYTES_MAX ((size_t) 64 << 20)
#define S_KEPT_MAX (2 * S_CONVS_MAX)
//  A kept kernel no call asked for in this many of the thread's calls makes
//  way for another (a replica gone, its values freed).
#define S_KEPT_IDLE_CALLS 1024

typedef enum { S_KEPT_FORWARD, S_KEPT_DATA } s_kept_pass_t;

struct _s_conv_t;

//  A kernel reordered into oneDNN's layout for one geometry's pass, kept
//  while the values epoch it was made in holds (za_model.h).
typedef struct {
    const struct _s_conv_t *owner;  //  the geometry's primitives; NULL: a free entry
    s_kept_pass_t pass;
    const float *kernel;            //  reordered from
    void *buffer;
    size_t bytes;
    uint64_t epoch;                 //  0: nothing kept
    uint64_t used;                  //  the thread's clock at its last call
} s_kept_t;

//  One geometry's primitives. Forward: the kernel reordered (when oneDNN
//  wants another layout), then the convolution with bias and ReLU. Backward
//  (made on first use): the input gradient from the kernel reordered for
//  it, and the kernel's gradient in oneDNN's layout, added into zactor's
//  HWIO gradient by a reorder that sums.
typedef struct _s_conv_t {
    za_conv2d_dims_t d;
    za_act_t act;
    za_precision_t precision;       //  of src, the kernel and diff_dst
    int tried;                      //  1: forward made or declined, 2: backward too
    uint64_t used;                  //  the thread's clock at its last call
    dnnl_primitive_t conv, reorder;
    dnnl_memory_t src, weights, blocked, bias, dst;
    dnnl_primitive_t data, data_reorder, filter, filter_add;
    dnnl_memory_t data_weights, diff_src, diff_dst, diff_blocked, diff_weights;
} s_conv_t;

//  One bf16 matmul's primitive: c [m, n] (+)= a [m, k] @ b [k, n], a and b
//  each stored as itself or as its transpose.
typedef struct {
    int m, k, n, ta, tb, sum;
    uint64_t used;
    dnnl_primitive_t matmul;
    dnnl_memory_t a, b, c;
} s_matmul_t;

//  The bf16 casts and the kernel's gradient in oneDNN's layout live only
//  through a call: every geometry of a thread takes its turn in the
//  thread's scratch buffers, one per role (so do the reordered kernels past
//  S_KEPT_BYTES_MAX).
typedef enum { S_WEIGHTS, S_SRC, S_DDST, S_SLOTS } s_slot_t;

typedef struct {
    int state;                      //  0: not yet, 1: ready, -1: off or failed
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    void *scratch [S_SLOTS];
    size_t scratch_bytes [S_SLOTS];
    s_conv_t convs [S_CONVS_MAX];
    int count;
    s_matmul_t matmuls [S_MATMULS_MAX];
    int matmul_count;
    uint64_t clock;                 //  calls so far
    s_kept_t kept [S_KEPT_MAX];     //  blocked's and data_weights' contents
    size_t kept_bytes;              //  their buffers'
} s_thread_t;

static _Thread_local s_thread_t s_self;
static pthread_key_t s_key;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

//  Destroys what is not NULL of the primitives and memories given, and
//  leaves them NULL.
static void
s_destroy (dnnl_primitive_t **primitives, size_t n_primitives, dnnl_memory_t **memories,
           size_t n_memories)
{
    for (size_t i = 0; i < n_primitives; i++)
        if (*primitives [i])
            dnnl_primitive_destroy (*primitives [i]), *primitives [i] = NULL;
    for (size_t i = 0; i < n_memories; i++)
        if (*memories [i])
            dnnl_memory_destroy (*memories [i]), *memories [i] = NULL;
}

static void
s_kept_drop (s_thread_t *self, s_kept_t *kept)
{
    free (kept->buffer);
    self->kept_bytes -= kept->bytes;
    memset (kept, 0, sizeof *kept);
}

//  Frees the kernels kept for c's pass (every pass: pass < 0).
static void
s_kept_free (s_thread_t *self, const s_conv_t *c, int pass)
{
    for (int i = 0; i < S_KEPT_MAX; i++)
        if (self->kept [i].owner == c && (pass < 0 || (int) self->kept [i].pass == pass))
            s_kept_drop (self, &self->kept [i]);
}

//  The backward's part of c (the forward's stays).
static void
s_backward_free (s_thread_t *self, s_conv_t *c)
{
    s_kept_free (self, c, S_KEPT_DATA);
    dnnl_primitive_t *primitives [] = {&c->data, &c->data_reorder, &c->filter, &c->filter_add};
    dnnl_memory_t *memories [] = {&c->data_weights, &c->diff_src, &c->diff_dst,
                                  &c->diff_blocked, &c->diff_weights};
    s_destroy (primitives, 4, memories, 5);
}

static void
s_conv_free (s_thread_t *self, s_conv_t *c)
{
    s_backward_free (self, c);
    s_kept_free (self, c, -1);
    dnnl_primitive_t *primitives [] = {&c->conv, &c->reorder};
    dnnl_memory_t *memories [] = {&c->src, &c->weights, &c->blocked, &c->bias, &c->dst};
    s_destroy (primitives, 2, memories, 5);
    memset (c, 0, sizeof *c);
}

static void
s_matmul_free (s_matmul_t *mm)
{
    dnnl_primitive_t *primitives [] = {&mm->matmul};
    dnnl_memory_t *memories [] = {&mm->a, &mm->b, &mm->c};
    s_destroy (primitives, 1, memories, 3);
    memset (mm, 0, sizeof *mm);
}

static void
s_thread_free (void *arg)
{
    s_thread_t *self = (s_thread_t *) arg;
    for (int i = 0; i < self->count; i++)
        s_conv_free (self, &self->convs [i]);
    for (int i = 0; i < self->matmul_count; i++)
        s_matmul_free (&self->matmuls [i]);
    if (self->stream)
        dnnl_stream_destroy (self->stream);
    if (self->engine)
        dnnl_engine_destroy (self->engine);
    for (int i = 0; i < S_SLOTS; i++)
        free (self->scratch [i]);
    memset (self, 0, sizeof *self);
    self->state = -1;
}

static void
s_key_new (void)
{
    pthread_key_create (&s_key, s_thread_free);
}

static int
s_thread_ready (s_thread_t *self)
{
    if (self->state)
        return self->state > 0? 0: -1;
    self->state = -1;
    const char *off = getenv ("ZA_DNNL");
    if (off && strcmp (off, "0") == 0)
        return -1;
    pthread_once (&s_once, s_key_new);
    if (dnnl_engine_create (&self->engine, dnnl_cpu, 0) != dnnl_success
    ||  dnnl_stream_create (&self->stream, self->engine, dnnl_stream_default_flags)
        != dnnl_success) {
        s_thread_free (self);
        return -1;
    }
    pthread_setspecific (s_key, self);
    self->state = 1;
    return 0;
}

//  oneDNN's type for a precision's matrix inputs.
static dnnl_data_type_t
s_type (za_precision_t precision)
{
    return precision == ZA_PRECISION_BF16? dnnl_bf16: dnnl_f32;
}

//  The memory descriptors and the padding of a geometry: src, any (the
//  kernel) and ddst (the output's gradient) in the precision's type, the
//  rest fp32 (src32: the input's gradient; any32: the kernel's).
typedef struct {
    dnnl_memory_desc_t src, src32, weights, any, any32, bias, dst, ddst;
    dnnl_dims_t strides, pad_l, pad_r;
} s_descs_t;

static int
s_descs (s_descs_t *m, const za_conv2d_dims_t *d, za_precision_t precision)
{
    dnnl_data_type_t low = s_type (precision);
    dnnl_dims_t src_dims = {d->n, d->c, d->h, d->w}, weight_dims = {d->oc, d->c, d->kh, d->kw};
    dnnl_dims_t bias_dims = {d->oc}, dst_dims = {d->n, d->oc, d->oh, d->ow};
    //  SAME's extra row and column go bottom and right; VALID's leftovers
    //  are never read (padding 0 there, as the output size already says).
    int bottom = (d->oh - 1) * d->stride + d->kh - d->h - d->pad_top;
    int right = (d->ow - 1) * d->stride + d->kw - d->w - d->pad_left;
    m->strides [0] = m->strides [1] = d->stride;
    m->pad_l [0] = d->pad_top, m->pad_l [1] = d->pad_left;
    m->pad_r [0] = bottom > 0? bottom: 0, m->pad_r [1] = right > 0? right: 0;
    return dnnl_memory_desc_init_by_tag (&m->src, 4, src_dims, low, dnnl_nhwc)
        || dnnl_memory_desc_init_by_tag (&m->src32, 4, src_dims, dnnl_f32, dnnl_nhwc)
        || dnnl_memory_desc_init_by_tag (&m->weights, 4, weight_dims, dnnl_f32, dnnl_hwio)
        || dnnl_memory_desc_init_by_tag (&m->any, 4, weight_dims, low, dnnl_format_tag_any)
        || dnnl_memory_desc_init_by_tag (&m->any32, 4, weight_dims, dnnl_f32,
                                         dnnl_format_tag_any)
        || dnnl_memory_desc_init_by_tag (&m->bias, 1, bias_dims, dnnl_f32, dnnl_x)
        || dnnl_memory_desc_init_by_tag (&m->dst, 4, dst_dims, dnnl_f32, dnnl_nhwc)
        || dnnl_memory_desc_init_by_tag (&m->ddst, 4, dst_dims, low, dnnl_nhwc)? -1: 0;
}

//  Primitive attributes with one post-op: S_RELU (the forward's
//  activation), S_SUM (add into the destination) or none. 0 or -1; the
//  caller destroys *attr when it is not NULL.
typedef enum { S_PLAIN, S_RELU, S_SUM } s_post_t;

static int
s_attr (s_post_t post, dnnl_primitive_attr_t *attr)
{
    *attr = NULL;
    if (dnnl_primitive_attr_create (attr))
        return -1;
    if (post == S_PLAIN)
        return 0;
    dnnl_post_ops_t ops = NULL;
    int rc = dnnl_post_ops_create (&ops)
          || (post == S_RELU? dnnl_post_ops_append_eltwise (ops, 1.0f, dnnl_eltwise_relu, 0, 0)
                            : dnnl_post_ops_append_sum (ops, 1.0f))
          || dnnl_primitive_attr_set_post_ops (*attr, ops);
    if (ops)
        dnnl_post_ops_destroy (ops);
    return rc? -1: 0;
}

//  A reorder from one layout to another, summing into the destination when
//  sum is set. 0 or -1.
static int
s_reorder (s_thread_t *self, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
           int sum, dnnl_primitive_t *reorder)
{
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd = NULL;
    int rc = s_attr (sum? S_SUM: S_PLAIN, &attr)
          || dnnl_reorder_primitive_desc_create (&pd, from, self->engine, to, self->engine, attr)
          || dnnl_primitive_create (reorder, pd);
    if (pd)
        dnnl_primitive_desc_destroy (pd);
    if (attr)
        dnnl_primitive_attr_destroy (attr);
    return rc? -1: 0;
}

//  Makes the forward primitives for one geometry into c. 0 or -1.
static int
s_forward_make (s_thread_t *self, s_conv_t *c)
{
    s_descs_t m;
    dnnl_convolution_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int rc = -1;
    if (s_descs (&m, &c->d, c->precision)
    ||  dnnl_convolution_forward_desc_init (&desc, dnnl_forward_training,
                                            dnnl_convolution_direct, &m.src, &m.any, &m.bias,
                                            &m.dst, m.strides, m.pad_l, m.pad_r)
    ||  s_attr (c->act == ZA_ACT_RELU? S_RELU: S_PLAIN, &attr)
    ||  dnnl_primitive_desc_create (&pd, &desc, attr, self->engine, NULL)
    ||  dnnl_primitive_create (&c->conv, pd))
        goto done;
    const dnnl_memory_desc_t *wanted = dnnl_primitive_desc_query_md (pd, dnnl_query_weights_md, 0);
    if (dnnl_memory_create (&c->src, &m.src, self->engine, DNNL_MEMORY_NONE)
    ||  dnnl_memory_create (&c->weights, &m.weights, self->engine, DNNL_MEMORY_NONE)
    ||  dnnl_memory_create (&c->bias, &m.bias, self->engine, DNNL_MEMORY_NONE)
    ||  dnnl_memory_create (&c->dst, &m.dst, self->engine, DNNL_MEMORY_NONE))
        goto done;
    if (!dnnl_memory_desc_equal (wanted, &m.weights)
    &&  (dnnl_memory_create (&c->blocked, wanted, self->engine, DNNL_MEMORY_NONE)
         || s_reorder (self, &m.weights, wanted, 0, &c->reorder)))
        goto done;
    rc = 0;
done:
    if (pd)
        dnnl_primitive_desc_destroy (pd);
    if (attr)
        dnnl_primitive_attr_destroy (attr);
    return rc;
}

//  Makes the backward primitives of c, whose forward is made. 0 or -1.
static int
s_backward_make (s_thread_t *self, s_conv_t *c)
{
    s_descs_t m;
    dnnl_convolution_desc_t forward, data, filter;
    dnnl_primitive_desc_t hint = NULL, data_pd = NULL, filter_pd = NULL;
    int rc = -1;
    //  oneDNN picks backward kernels to match a forward: one without the
    //  ReLU serves as the hint.
    if (s_descs (&m, &c->d, c->precision)
    ||  dnnl_convolution_forward_desc_init (&forward, dnnl_forward_training,
                                            dnnl_convolution_direct, &m.src, &m.any, &m.bias,
                                            &m.ddst, m.strides, m.pad_l, m.pad_r)
    ||  dnnl_primitive_desc_create (&hint, &forward, NULL, self->engine, NULL)
    ||  dnnl_convolution_backward_data_desc_init (&data, dnnl_convolution_direct, &m.src32,
                                                  &m.any, &m.ddst, m.strides, m.pad_l, m.pad_r)
    ||  dnnl_primitive_desc_create (&data_pd, &data, NULL, self->engine, hint)
    ||  dnnl_primitive_create (&c->data, data_pd)
    ||  dnnl_convolution_backward_weights_desc_init (&filter, dnnl_convolution_direct, &m.src,
                                                     &m.any32, NULL, &m.ddst, m.strides,
                                                     m.pad_l, m.pad_r)
    ||  dnnl_primitive_desc_create (&filter_pd, &filter, NULL, self->engine, hint)
    ||  dnnl_primitive_create (&c->filter, filter_pd))
        goto done;
    const dnnl_memory_desc_t *data_wanted = dnnl_primitive_desc_query_md (
        data_pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *diff_layout = dnnl_primitive_desc_query_md (
        filter_pd, dnnl_query_diff_weights_md, 0);
    if (dnnl_memory_create (&c->data_weights, data_wanted, self->engine, DNNL_MEMORY_NONE)
    ||  s_reorder (self, &m.weights, data_wanted, 0, &c->data_reorder)
    ||  dnnl_memory_create (&c->diff_blocked, diff_layout, self->engine, DNNL_MEMORY_NONE)
    ||  s_reorder (self, diff_layout, &m.weights, 1, &c->filter_add)
    ||  dnnl_memory_create (&c->diff_weights, &m.weights, self->engine, DNNL_MEMORY_NONE)
    ||  dnnl_memory_create (&c->diff_src, &m.src32, self->engine, DNNL_MEMORY_NONE)
    ||  dnnl_memory_create (&c->diff_dst, &m.ddst, self->engine, DNNL_MEMORY_NONE))
        goto done;
    rc = 0;
done:
    if (filter_pd)
        dnnl_primitive_desc_destroy (filter_pd);
    if (data_pd)
        dnnl_primitive_desc_destroy (data_pd);
    if (hint)
        dnnl_primitive_desc_destroy (hint);
    return rc;
}

//  The thread's scratch buffer `slot`, of bytes at least, or NULL.
static void *
s_grow (s_thread_t *self, s_slot_t slot, size_t bytes)
{
    if (bytes > self->scratch_bytes [slot]) {
        void *grown = NULL;
        if (posix_memalign (&grown, 64, bytes))
            return NULL;
        free (self->scratch [slot]);
        self->scratch [slot] = grown;
        self->scratch_bytes [slot] = bytes;
    }
    return self->scratch [slot];
}

//  Points memory at the thread's scratch `slot`, grown to its size. 0 or -1.
static int
s_scratch (s_thread_t *self, dnnl_memory_t memory, s_slot_t slot)
{
    const dnnl_memory_desc_t *desc;
    if (dnnl_memory_get_memory_desc (memory, &desc))
        return -1;
    void *buffer = s_grow (self, slot, dnnl_memory_desc_get_size (desc));
    return buffer && dnnl_memory_set_data_handle (memory, buffer) == 0? 0: -1;
}

//  A new entry of bytes for c's pass of kernel, the idle ones dropped to
//  make room; NULL where none fits.
static s_kept_t *
s_kept_new (s_thread_t *self, const s_conv_t *c, s_kept_pass_t pass, const float *kernel,
            size_t bytes)
{
    s_kept_t *free_entry = NULL;
    for (int i = 0; i < S_KEPT_MAX; i++) {
        s_kept_t *kept = &self->kept [i];
        if (kept->owner && kept->used + S_KEPT_IDLE_CALLS < self->clock)
            s_kept_drop (self, kept);
        if (!kept->owner && !free_entry)
            free_entry = kept;
    }
    void *buffer = NULL;
    if (!free_entry || self->kept_bytes + bytes > S_KEPT_BYTES_MAX
        || posix_memalign (&buffer, 64, bytes))
        return NULL;
    *free_entry = (s_kept_t) {.owner = c, .pass = pass, .kernel = kernel, .buffer = buffer,
                              .bytes = bytes};
    self->kept_bytes += bytes;
    return free_entry;
}

//  Points `to` at the kernel in the layout `reorder` makes from `from` for
//  c's pass: as kept from an earlier call of this values epoch (za_model.h)
//  for the same kernel, else reordered now: into a buffer of its own (then
//  kept) while the thread's kept buffers stay within S_KEPT_BYTES_MAX, else
//  (and in epoch 0, which keeps nothing) into the thread's scratch. The
//  kernel is known by its address: a caller whose kernel is not the
//  values' (a rounded copy) calls in epoch 0. 0 or -1.
static int
s_reordered (s_thread_t *self, const s_conv_t *c, s_kept_pass_t pass, dnnl_primitive_t reorder,
             dnnl_memory_t from, dnnl_memory_t to, const float *kernel)
{
    uint64_t epoch = za_model_values_epoch ();
    s_kept_t *kept = NULL;
    for (int i = 0; epoch && i < S_KEPT_MAX && !kept; i++)
        if (self->kept [i].owner == c && self->kept [i].pass == pass
            && self->kept [i].kernel == kernel)
            kept = &self->kept [i];
    const dnnl_memory_desc_t *desc;
    if (epoch && !kept && dnnl_memory_get_memory_desc (to, &desc) == dnnl_success)
        kept = s_kept_new (self, c, pass, kernel, dnnl_memory_desc_get_size (desc));
    if (kept)
        kept->used = self->clock;
    if (kept? dnnl_memory_set_data_handle (to, kept->buffer) != dnnl_success
            : s_scratch (self, to, S_WEIGHTS) != 0)
        return -1;
    if (kept && kept->epoch == epoch)
        return 0;
    if (kept)
        kept->epoch = 0;
    dnnl_exec_arg_t args [2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (dnnl_primitive_execute (reorder, self->stream, 2, args))
        return -1;
    if (kept)
        kept->epoch = epoch;
    return 0;
}

//  Points memory at x: itself in fp32, else its bf16 cast in scratch
//  `slot` (count values). 0 or -1.
static int
s_input (s_thread_t *self, dnnl_memory_t memory, const float *x, size_t count,
         za_precision_t precision, s_slot_t slot)
{
    if (precision == ZA_PRECISION_FP32)
        return dnnl_memory_set_data_handle (memory, (void *) x)? -1: 0;
    uint16_t *low = (uint16_t *) s_grow (self, slot, count * sizeof (uint16_t));
    if (!low)
        return -1;
    za_f32_to_bf16 (x, low, count);
    return dnnl_memory_set_data_handle (memory, low)? -1: 0;
}

//  This thread's primitives for the geometry (the least recently used make
//  way when S_CONVS_MAX are kept), the forward made or declined.
static s_conv_t *
s_conv (s_thread_t *self, const za_conv2d_dims_t *d, za_act_t act, za_precision_t precision)
{
    self->clock++;
    for (int i = 0; i < self->count; i++)
        if (self->convs [i].act == act && self->convs [i].precision == precision
            && memcmp (&self->convs [i].d, d, sizeof *d) == 0) {
            self->convs [i].used = self->clock;
            return &self->convs [i];
        }
    s_conv_t *c;
    if (self->count < S_CONVS_MAX)
        c = &self->convs [self->count++];
    else {
        c = &self->convs [0];
        for (int i = 1; i < self->count; i++)
            if (self->convs [i].used < c->used)
                c = &self->convs [i];
        s_conv_free (self, c);
    }
    c->used = self->clock;
    c->d = *d;
    c->act = act;
    c->precision = precision;
    if (s_forward_make (self, c)) {
        //  Kept as a geometry oneDNN declines: not asked again.
        s_conv_free (self, c);
        c->d = *d;
        c->act = act;
        c->precision = precision;
        c->tried = 2;
        c->used = self->clock;
    }
    else
        c->tried = 1;
    return c;
}

//  This thread's, ready for oneDNN (one thread of its own), or NULL.
static s_thread_t *
s_ready (void)
{
    s_thread_t *self = &s_self;
    if (s_thread_ready (self))
        return NULL;
    //  zactor's threads each compute one slice: oneDNN adds none of its own
    //  (nor while it makes a primitive).
    omp_set_num_threads (1);
    return self;
}

int
za_cpu_dnnl_on (void)
{
    return s_ready () != NULL;
}

int
za_cpu_dnnl_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                            const float *bias, za_act_t act, float *out,
                            za_precision_t precision)
{
    s_thread_t *self = precision == ZA_PRECISION_FP16? NULL: s_ready ();
    s_conv_t *c = self? s_conv (self, d, act, precision): NULL;
    if (!c || !c->conv)
        return -1;
    size_t inputs = (size_t) d->n * d->h * d->w * d->c;
    if (s_input (self, c->src, in, inputs, precision, S_SRC)
    ||  dnnl_memory_set_data_handle (c->weights, (void *) kernel)
    ||  dnnl_memory_set_data_handle (c->bias, (void *) bias)
    ||  dnnl_memory_set_data_handle (c->dst, out))
        return -1;
    if (c->reorder && s_reordered (self, c, S_KEPT_FORWARD, c->reorder, c->weights, c->blocked,
                                   kernel))
        return -1;
    dnnl_exec_arg_t args [4] = {
        {DNNL_ARG_SRC, c->src}, {DNNL_ARG_WEIGHTS, c->reorder? c->blocked: c->weights},
        {DNNL_ARG_BIAS, c->bias}, {DNNL_ARG_DST, c->dst}
    };
    if (dnnl_primitive_execute (c->conv, self->stream, 4, args)
    ||  dnnl_stream_wait (self->stream))
        return -1;
    return 0;
}

int
za_cpu_dnnl_conv2d_backward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                             za_act_t act, const float *dout, float *dkernel, float *din,
                             za_precision_t precision)
{
    if (!dkernel && !din)
        return -1;
    s_thread_t *self = precision == ZA_PRECISION_FP16? NULL: s_ready ();
    s_conv_t *c = self? s_conv (self, d, act, precision): NULL;
    if (!c || !c->conv)
        return -1;
    if (c->tried == 1) {
        c->tried = 2;
        //  Declined: the forward stays, backward is the caller's for this geometry.
        if (s_backward_make (self, c))
            s_backward_free (self, c);
    }
    if (!c->filter)
        return -1;
    size_t inputs = (size_t) d->n * d->h * d->w * d->c;
    size_t outputs = (size_t) d->n * d->oh * d->ow * d->oc;
    if ((dkernel && s_input (self, c->src, in, inputs, precision, S_SRC))
    ||  dnnl_memory_set_data_handle (c->weights, (void *) kernel)
    ||  s_input (self, c->diff_dst, dout, outputs, precision, S_DDST)
    ||  (dkernel && dnnl_memory_set_data_handle (c->diff_weights, dkernel)))
        return -1;
    //  The input's gradient first (overwritten: safe to redo), the sum into
    //  dkernel last, so a failure comes before dkernel changed.
    if (din) {
        dnnl_exec_arg_t data [3] = {
            {DNNL_ARG_DIFF_DST, c->diff_dst}, {DNNL_ARG_WEIGHTS, c->data_weights},
            {DNNL_ARG_DIFF_SRC, c->diff_src}
        };
        if (dnnl_memory_set_data_handle (c->diff_src, din)
        ||  s_reordered (self, c, S_KEPT_DATA, c->data_reorder, c->weights, c->data_weights,
                         kernel)
        ||  dnnl_primitive_execute (c->data, self->stream, 3, data)
        ||  dnnl_stream_wait (self->stream))
            return -1;
    }
    if (!dkernel)
        return 0;
    dnnl_exec_arg_t filter [3] = {
        {DNNL_ARG_SRC, c->src}, {DNNL_ARG_DIFF_DST, c->diff_dst},
        {DNNL_ARG_DIFF_WEIGHTS, c->diff_blocked}
    };
    dnnl_exec_arg_t add [2] = {{DNNL_ARG_FROM, c->diff_blocked}, {DNNL_ARG_TO, c->diff_weights}};
    if (s_scratch (self, c->diff_blocked, S_WEIGHTS)
    ||  dnnl_primitive_execute (c->filter, self->stream, 3, filter)
    ||  dnnl_stream_wait (self->stream)
    ||  dnnl_primitive_execute (c->filter_add, self->stream, 2, add))
        return -1;
    //  Added into dkernel: done, whatever the wait says (a CPU stream runs
    //  in order as it is called).
    dnnl_stream_wait (self->stream);
    return 0;
}

//  This thread's bf16 matmul for the shape, made on first use (the least
//  recently used makes way when S_MATMULS_MAX are kept), or NULL where
//  oneDNN declines it (remembered).
static s_matmul_t *
s_matmul (s_thread_t *self, int m, int k, int n, int ta, int tb, int sum)
{
    self->clock++;
    for (int i = 0; i < self->matmul_count; i++) {
        s_matmul_t *mm = &self->matmuls [i];
        if (mm->m == m && mm->k == k && mm->n == n && mm->ta == ta && mm->tb == tb
            && mm->sum == sum) {
            mm->used = self->clock;
            return mm->matmul? mm: NULL;
        }
    }
    s_matmul_t *mm;
    if (self->matmul_count < S_MATMULS_MAX)
        mm = &self->matmuls [self->matmul_count++];
    else {
        mm = &self->matmuls [0];
        for (int i = 1; i < self->matmul_count; i++)
            if (self->matmuls [i].used < mm->used)
                mm = &self->matmuls [i];
        s_matmul_free (mm);
    }
    s_matmul_t key = {.m = m, .k = k, .n = n, .ta = ta, .tb = tb, .sum = sum,
                      .used = self->clock};
    *mm = key;
    //  A transposed operand is the same bytes read with swapped strides.
    dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    dnnl_dims_t a_strides = {ta? 1: k, ta? m: 1}, b_strides = {tb? 1: n, tb? k: 1};
    dnnl_dims_t c_strides = {n, 1};
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int rc = dnnl_memory_desc_init_by_strides (&a, 2, a_dims, dnnl_bf16, a_strides)
          || dnnl_memory_desc_init_by_strides (&b, 2, b_dims, dnnl_bf16, b_strides)
          || dnnl_memory_desc_init_by_strides (&c, 2, c_dims, dnnl_f32, c_strides)
          || dnnl_matmul_desc_init (&desc, &a, &b, NULL, &c)
          || s_attr (sum? S_SUM: S_PLAIN, &attr)
          || dnnl_primitive_desc_create (&pd, &desc, attr, self->engine, NULL)
          || dnnl_primitive_create (&mm->matmul, pd)
          || dnnl_memory_create (&mm->a, &a, self->engine, DNNL_MEMORY_NONE)
          || dnnl_memory_create (&mm->b, &b, self->engine, DNNL_MEMORY_NONE)
          || dnnl_memory_create (&mm->c, &c, self->engine, DNNL_MEMORY_NONE);
    if (pd)
        dnnl_primitive_desc_destroy (pd);
    if (attr)
        dnnl_primitive_attr_destroy (attr);
    if (rc) {
        s_matmul_free (mm);
        *mm = key;
        return NULL;
    }
    return mm;
}

int
za_cpu_dnnl_matmul_mixed (int m, int k, int n, const float *a, const uint16_t *a16, int ta,
                          const float *b, const uint16_t *b16, int tb, int accumulate, float *c)
{
    s_thread_t *self = s_ready ();
    s_matmul_t *mm = self? s_matmul (self, m, k, n, ta, tb, accumulate): NULL;
    if (!mm)
        return -1;
    dnnl_exec_arg_t args [3] = {
        {DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c}
    };
    if ((a16? dnnl_memory_set_data_handle (mm->a, (void *) a16) != dnnl_success
            : s_input (self, mm->a, a, (size_t) m * k, ZA_PRECISION_BF16, S_SRC) != 0)
    ||  (b16? dnnl_memory_set_data_handle (mm->b, (void *) b16) != dnnl_success
            : s_input (self, mm->b, b, (size_t) k * n, ZA_PRECISION_BF16, S_WEIGHTS) != 0)
    ||  dnnl_memory_set_data_handle (mm->c, c)
    ||  dnnl_primitive_execute (mm->matmul, self->stream, 3, args))
        return -1;
    dnnl_stream_wait (self->stream);
    return 0;
}

int
za_cpu_dnnl_matmul (int m, int k, int n, const float *a, int ta, const float *b, int tb,
                    int accumulate, float *c, za_precision_t precision)
{
    if (precision != ZA_PRECISION_BF16)
        return -1;
    return za_cpu_dnnl_matmul_mixed (m, k, n, a, NULL, ta, b, NULL, tb, accumulate, c);
}

int
za_cpu_dnnl_amx (void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa ();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

int
za_cpu_dnnl_bf16_native (void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa ();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

#else

int
za_cpu_dnnl_on (void)
{
    return 0;
}

int
za_cpu_dnnl_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                            const float *bias, za_act_t act, float *out,
                            za_precision_t precision)
{
    (void) d, (void) in, (void) kernel, (void) bias, (void) act, (void) out, (void) precision;
    return -1;
}

int
za_cpu_dnnl_conv2d_backward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                             za_act_t act, const float *dout, float *dkernel, float *din,
                             za_precision_t precision)
{
    (void) d, (void) in, (void) kernel, (void) act, (void) dout, (void) dkernel, (void) din;
    (void) precision;
    return -1;
}

int
za_cpu_dnnl_matmul (int m, int k, int n, const float *a, int ta, const float *b, int tb,
                    int accumulate, float *c, za_precision_t precision)
{
    (void) m, (void) k, (void) n, (void) a, (void) ta, (void) b, (void) tb, (void) accumulate;
    (void) c, (void) precision;
    return -1;
}

int
za_cpu_dnnl_matmul_mixed (int m, int k, int n, const float *a, const uint16_t *a16, int ta,
                          const float *b, const uint16_t *b16, int tb, int accumulate, float *c)
{
    (void) m, (void) k, (void) n, (void) a, (void) a16, (void) ta, (void) b, (void) b16;
    (void) tb, (void) accumulate, (void) c;
    return -1;
}

int
za_cpu_dnnl_amx (void)
{
    return 0;
}

int
za_cpu_dnnl_bf16_native (void)
{
    return 0;
}

#endif
