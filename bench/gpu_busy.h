/*  gpu_busy.h: the share of a time window in which the GPU ran a kernel, a
    copy or a memset, measured by CUPTI's activity records (what Nsight
    Systems reads), for bench_train's ZA_BENCH_BUSY=1. CUPTI is opened
    with dlopen (libcupti.so.13, in the CUDA toolkit and in PyTorch's
    wheels), so bench_train loads no CUDA library where it is not asked;
    built where CMake finds cupti.h beside a CUDA build (ZA_HAVE_CUPTI).

    s_busy_start () before the window (the GPU idle), s_busy_mark () at each
    point the window may end (the last one counts), s_busy_stop () after:
    the spans recorded are merged (overlaps counted once), cut to the
    window, and divided by its length. 0, or -1 (a line on stderr where
    CUPTI failed). The records are read as CUPTI 13's (Kernel10, Memcpy6,
    Memset4: their start and end sit where the earlier versions' do).    */
#ifndef ZA_BENCH_GPU_BUSY_H
#define ZA_BENCH_GPU_BUSY_H

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BUSY_BUFFER_BYTES (8u << 20)

typedef struct {
    uint64_t start;
    uint64_t end;
    int kind;                           //  CUpti_ActivityKind
} s_span_t;

static struct {
    CUptiResult (*enable) (CUpti_ActivityKind);
    CUptiResult (*disable) (CUpti_ActivityKind);
    CUptiResult (*next) (uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*flush) (uint32_t);
    CUptiResult (*now) (uint64_t *);
    pthread_mutex_t lock;
    s_span_t *spans;
    size_t count, capacity;
    uint64_t window_start, window_end;
    int on;
    int lost;                           //  a span not kept (out of memory)
} s_busy = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const CUpti_ActivityKind s_busy_kinds [] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET};
#define BUSY_KINDS (sizeof s_busy_kinds / sizeof s_busy_kinds [0])

static void CUPTIAPI
s_busy_buffer (uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = (uint8_t *) aligned_alloc (8, BUSY_BUFFER_BYTES);
    *size = *buffer? BUSY_BUFFER_BYTES: 0;
    *max_records = 0;
}

static void
s_busy_add (int kind, uint64_t start, uint64_t end)
{
    if (s_busy.count == s_busy.capacity) {
        size_t capacity = s_busy.capacity? 2 * s_busy.capacity: 65536;
        s_span_t *spans = (s_span_t *) realloc (s_busy.spans, capacity * sizeof *spans);
        if (!spans) {
            s_busy.lost = 1;
            return;
        }
        s_busy.spans = spans, s_busy.capacity = capacity;
    }
    s_busy.spans [s_busy.count++] = (s_span_t) {start, end, kind};
}

static void CUPTIAPI
s_busy_done (CUcontext context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void) context, (void) stream, (void) size;
    CUpti_Activity *record = NULL;
    pthread_mutex_lock (&s_busy.lock);
    while (valid && s_busy.next (buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
            || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            CUpti_ActivityKernel10 *kernel = (CUpti_ActivityKernel10 *) record;
            s_busy_add (CUPTI_ACTIVITY_KIND_KERNEL, kernel->start, kernel->end);
        }
        else
        if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *copy = (CUpti_ActivityMemcpy6 *) record;
            s_busy_add (record->kind, copy->start, copy->end);
        }
        else
        if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            CUpti_ActivityMemset4 *set = (CUpti_ActivityMemset4 *) record;
            s_busy_add (record->kind, set->start, set->end);
        }
    }
    pthread_mutex_unlock (&s_busy.lock);
    free (buffer);
}

static int
s_busy_start (void)
{
    void *lib = dlopen ("libcupti.so.13", RTLD_NOW);
    lib = lib? lib: dlopen ("libcupti.so", RTLD_NOW);
    if (!lib) {
        fprintf (stderr, "bench_train: ZA_BENCH_BUSY: no libcupti (%s)\n", dlerror ());
        return -1;
    }
    CUptiResult (*callbacks) (CUpti_BuffersCallbackRequestFunc,
                              CUpti_BuffersCallbackCompleteFunc);
    *(void **) &callbacks = dlsym (lib, "cuptiActivityRegisterCallbacks");
    *(void **) &s_busy.enable = dlsym (lib, "cuptiActivityEnable");
    *(void **) &s_busy.disable = dlsym (lib, "cuptiActivityDisable");
    *(void **) &s_busy.next = dlsym (lib, "cuptiActivityGetNextRecord");
    *(void **) &s_busy.flush = dlsym (lib, "cuptiActivityFlushAll");
    *(void **) &s_busy.now = dlsym (lib, "cuptiGetTimestamp");
    if (!callbacks || !s_busy.enable || !s_busy.disable || !s_busy.next || !s_busy.flush
        || !s_busy.now || callbacks (s_busy_buffer, s_busy_done) != CUPTI_SUCCESS) {
        fprintf (stderr, "bench_train: ZA_BENCH_BUSY: libcupti does not start\n");
        return -1;
    }
    for (size_t k = 0; k < BUSY_KINDS; k++)
        if (s_busy.enable (s_busy_kinds [k]) != CUPTI_SUCCESS) {
            fprintf (stderr, "bench_train: ZA_BENCH_BUSY: CUPTI records no kind %d\n",
                     (int) s_busy_kinds [k]);
            while (k--)
                s_busy.disable (s_busy_kinds [k]);
            return -1;
        }
    s_busy.now (&s_busy.window_start);
    s_busy.on = 1;
    return 0;
}

static void
s_busy_mark (void)
{
    if (s_busy.on)
        s_busy.now (&s_busy.window_end);
}

static int
s_busy_compare (const void *a, const void *b)
{
    uint64_t x = ((const s_span_t *) a)->start, y = ((const s_span_t *) b)->start;
    return x < y? -1: x > y;
}

//  The window's busy share (0 to 1), and the kernels and copies that
//  started in it.
static int
s_busy_stop (double *share, int64_t *kernels, int64_t *copies)
{
    if (!s_busy.on)
        return -1;
    for (size_t k = 0; k < BUSY_KINDS; k++)
        s_busy.disable (s_busy_kinds [k]);
    s_busy.flush (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    s_busy.on = 0;
    pthread_mutex_lock (&s_busy.lock);
    qsort (s_busy.spans, s_busy.count, sizeof *s_busy.spans, s_busy_compare);
    uint64_t from = s_busy.window_start, to = s_busy.window_end, busy = 0, reached = from;
    *kernels = *copies = 0;
    for (size_t i = 0; i < s_busy.count; i++) {
        if (s_busy.spans [i].start >= from && s_busy.spans [i].start < to) {
            *kernels += s_busy.spans [i].kind == CUPTI_ACTIVITY_KIND_KERNEL;
            *copies += s_busy.spans [i].kind == CUPTI_ACTIVITY_KIND_MEMCPY;
        }
        uint64_t start = s_busy.spans [i].start < reached? reached: s_busy.spans [i].start;
        uint64_t end = s_busy.spans [i].end > to? to: s_busy.spans [i].end;
        if (end > start)
            busy += end - start, reached = end;
    }
    *share = to > from? (double) busy / (double) (to - from): 0;
    free (s_busy.spans);
    s_busy.spans = NULL, s_busy.count = s_busy.capacity = 0;
    pthread_mutex_unlock (&s_busy.lock);
    if (s_busy.lost) {
        fprintf (stderr, "bench_train: ZA_BENCH_BUSY: out of memory for CUPTI's records\n");
        return -1;
    }
    return 0;
}

#endif
