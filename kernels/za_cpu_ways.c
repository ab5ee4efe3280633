/*  za_cpu_ways.c: what the ways of the CPU's convolution (za_cpu_conv.c,
    za_cpu_direct.c, za_cpu_gemm.c) share, so that none asks another for
    it: a thread's buffers and rounded copies, whether the direct loops take
    a layer, and ZA_CONV_TRACE's saying which way took it.                  */
#include "za_cpu_ways.h"
#include "za_elem.h"
#include "za/za_tensor.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_ENV "ZA_CONV_TRACE"
#define TRACE_SEEN_MAX 256              //  layers and passes said, at most

// ---------------------------------------------------------------------------
//  A thread's buffers

//  A thread's buffers for rounded copies of a layer's input and kernel,
//  and for the direct loops' plane and its pairs.
typedef struct {
    float *buffer [4];
    size_t floats [4];
} s_rounding_t;

static pthread_key_t s_rounding_key;
static pthread_once_t s_rounding_once = PTHREAD_ONCE_INIT;

static void
s_rounding_free (void *arg)
{
    s_rounding_t *self = (s_rounding_t *) arg;
    for (int slot = 0; slot < 4; slot++)
        free (self->buffer [slot]);
    free (self);
}

static void
s_rounding_key_new (void)
{
    pthread_key_create (&s_rounding_key, s_rounding_free);
}

//  This thread's buffer `slot` (0 to 3), of n floats at least, or NULL.
float *
za_cpu_buffer (int slot, size_t n)
{
    pthread_once (&s_rounding_once, s_rounding_key_new);
    s_rounding_t *self = (s_rounding_t *) pthread_getspecific (s_rounding_key);
    if (!self) {
        if (!(self = (s_rounding_t *) calloc (1, sizeof *self)))
            return NULL;
        pthread_setspecific (s_rounding_key, self);
    }
    if (n > self->floats [slot]) {
        float *grown = (float *) malloc (n * sizeof (float));
        if (!grown)
            return NULL;
        free (self->buffer [slot]);
        self->buffer [slot] = grown;
        self->floats [slot] = n;
    }
    return self->buffer [slot];
}

//  x rounded to the precision, in this thread's buffer `slot` (0 or 1);
//  x itself where no memory is left for the copy (then fp32 it is).
const float *
za_cpu_rounded (int slot, const float *x, size_t n, za_precision_t precision)
{
    float *y = za_cpu_buffer (slot, n);
    if (!y)
        return x;
    for (size_t i = 0; i < n; i++)
        y [i] = za_elem_round (x [i], precision);
    return y;
}

// ---------------------------------------------------------------------------
//  The direct loops' reach (za_cpu_direct.c says why they stop there)

int
za_cpu_direct_takes (const za_conv2d_dims_t *d, za_precision_t precision)
{
    return (precision == ZA_PRECISION_FP32 || precision == ZA_PRECISION_BF16)
        && d->kh == 3 && d->kw == 3 && d->c == 1 && d->oc % DIRECT_LANES == 0
        && d->oc <= DIRECT_OC_MAX && za_cpu_has (ZA_ISA_AVX512);
}

// ---------------------------------------------------------------------------
//  ZA_CONV_TRACE

static pthread_mutex_t s_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t s_trace_seen [TRACE_SEEN_MAX];
static int s_trace_count;

int
za_cpu_conv_tracing (void)
{
    static int asked = -1;
    if (asked < 0) {
        const char *value = getenv (TRACE_ENV);
        asked = value && *value && strcmp (value, "0") != 0;
    }
    return asked;
}

void
za_cpu_conv_trace (const za_conv2d_dims_t *d, za_precision_t precision, int backward,
                   int input_gradient, const char *way)
{
    int fields [] = {d->n, d->h, d->w, d->c, d->kh, d->kw, d->stride, d->oc,
                     (int) precision, backward, input_gradient};
    uint64_t key = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof fields / sizeof fields [0]; i++)
        key = (key ^ (uint64_t) (uint32_t) fields [i]) * 1099511628211ull;
    pthread_mutex_lock (&s_trace_lock);
    int seen = 0;
    for (int i = 0; i < s_trace_count && !seen; i++)
        seen = s_trace_seen [i] == key;
    if (!seen && s_trace_count < TRACE_SEEN_MAX) {
        s_trace_seen [s_trace_count++] = key;
        static const char *precisions [] = {"fp32", "bf16", "float16"};
        za_info ("conv2d %dx%dx%dx%d -> %d, %dx%d, stride %d, %s, %s%s: %s", d->n, d->h, d->w,
                 d->c, d->oc, d->kh, d->kw, d->stride,
                 precisions [precision <= ZA_PRECISION_FP16? precision: 0],
                 backward? "backward": "forward",
                 backward && !input_gradient? " (no input gradient)": "", way);
    }
    pthread_mutex_unlock (&s_trace_lock);
}
