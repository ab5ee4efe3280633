/*  za_trace.c: the trace's ring and its writer thread. A recorder takes the
    ring's lock with trylock only: a held lock (the writer swapping the ring
    out) or a full ring drops the event.                                    */
#include "za/za_trace.h"
#include "za/za_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RING_EVENTS 16384
#define WRITE_EVERY_NS 200000000L
#define WRITER_NICE 10
#define PATH_CHARS 4096

typedef struct {
    const char *name;
    int row;
    double start, end;
    int64_t step;
} s_event_t;

typedef struct {
    pthread_mutex_t lock;
    s_event_t *ring, *spare;            //  recorded into, and written out of
    int count;
    FILE *file;
    char path [PATH_CHARS];
    int64_t max_bytes, bytes;           //  the file turns over at half of max_bytes
    int steps;                          //  it wrote a step's row: turns at a step's start
    double clock_written;               //  the offset the last clock line said (NAN: none)
    pthread_t writer;
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    int stopping;
} s_trace_t;

static s_trace_t *s_trace;
static _Atomic int s_on;
static _Atomic int64_t s_dropped;
//  The broker's clock less ours, the round trip it was measured over, and
//  how it was known (za_trace_clock_source_t).
static _Atomic double s_offset, s_rtt;
static _Atomic int s_source;

const char *
za_trace_row_name (int row)
{
    static const char *names [] = {NULL, "step", "input", "compute", "exchange", "apply",
                                   "checkpoint", "evaluation", "bucket"};
    return row > 0 && row < ZA_TRACE_ROWS? names [row]: NULL;
}

//  The file holds half of max_bytes: it becomes PATH.1 (the one before
//  it gone) and a new one starts, so the newest events are kept.
static void
s_turn_over (s_trace_t *self)
{
    char older [PATH_CHARS + 8];
    snprintf (older, sizeof older, "%s.1", self->path);
    fclose (self->file);
    if (rename (self->path, older))
        za_info ("trace: cannot turn %s over: %s", self->path, strerror (errno));
    self->file = fopen (self->path, "w");
    self->bytes = 0;
    self->clock_written = NAN;
    if (!self->file)
        za_info ("trace: cannot write %s: %s; tracing stops", self->path, strerror (errno));
}

//  A line saying how this task's times are put on the broker's clock, when
//  that changed (and at the start of each file).
static void
s_write_clock (s_trace_t *self, double offset)
{
    int source = atomic_load (&s_source);
    if (source == ZA_TRACE_CLOCK_OWN || offset == self->clock_written)
        return;
    self->clock_written = offset;
    int n = fprintf (self->file, "{\"clock\":{\"offset_us\":%.3f,\"rtt_us\":%.3f,"
                     "\"source\":\"%s\"}}\n", offset * 1e6, atomic_load (&s_rtt) * 1e6,
                     source == ZA_TRACE_CLOCK_SAME_HOST? "same host": "estimated");
    self->bytes += n > 0? n: 0;
}

//  Appends a time in microseconds with 3 decimals (its nanoseconds) to
//  *at: integer digits, no printf (the writer formats thousands a second).
static char *
s_micros (char *at, double seconds)
{
    int64_t ns = llround (seconds * 1e9);
    if (ns < 0) {
        *at++ = '-';
        ns = -ns;
    }
    char digits [24];
    int n = 0;
    int64_t us = ns / 1000;
    do
        digits [n++] = (char) ('0' + us % 10);
    while ((us /= 10) > 0);
    while (n > 0)
        *at++ = digits [--n];
    int frac = (int) (ns % 1000);
    *at++ = '.';
    *at++ = (char) ('0' + frac / 100);
    *at++ = (char) ('0' + frac / 10 % 10);
    *at++ = (char) ('0' + frac % 10);
    return at;
}

//  Appends text to *at.
static char *
s_text (char *at, const char *text)
{
    size_t n = strlen (text);
    memcpy (at, text, n);
    return at + n;
}

//  Writes the events of the spare ring (count of them) to the file, their
//  times on the broker's clock.
static void
s_write (s_trace_t *self, int count)
{
    double offset = atomic_load (&s_offset);
    for (int i = 0; i < count && self->file; i++) {
        //  A step's events stay in one file: it turns over at a step's
        //  start (a step longer than an eighth of the file, a little later);
        //  a task without steps (a ps) at once, so that its two files keep
        //  at most max_bytes (it kept 1.25 times).
        const s_event_t *e = &self->spare [i];
        self->steps |= e->row == ZA_TRACE_STEP;
        if (self->max_bytes > 0 && self->bytes >= self->max_bytes / 2
            && (e->row == ZA_TRACE_STEP || !self->steps
                || self->bytes >= self->max_bytes / 8 * 5))
            s_turn_over (self);
        if (!self->file)
            break;
        s_write_clock (self, offset);
        //  {"name":N,"ph":"X","ts":T,"dur":D,"tid":R,"args":{"step":S}}
        char line [256], *at = line;
        at = s_text (at, "{\"name\":\"");
        at = s_text (at, e->name);
        at = s_text (at, "\",\"ph\":\"X\",\"ts\":");
        at = s_micros (at, e->start + offset);
        at = s_text (at, ",\"dur\":");
        at = s_micros (at, e->end > e->start? e->end - e->start: 0);
        at += snprintf (at, (size_t) (line + sizeof line - at),
                        ",\"tid\":%d,\"args\":{\"step\":%lld}}\n", e->row,
                        (long long) e->step);
        size_t length = (size_t) (at - line);
        self->bytes += (int64_t) fwrite (line, 1, length, self->file);
    }
    if (self->file)
        fflush (self->file);
}

//  Swaps the ring out under its lock and writes what it held.
static void
s_drain (s_trace_t *self)
{
    pthread_mutex_lock (&self->lock);
    s_event_t *full = self->ring;
    int count = self->count;
    self->ring = self->spare;
    self->spare = full;
    self->count = 0;
    pthread_mutex_unlock (&self->lock);
    s_write (self, count);
}

static void *
s_writer (void *arg)
{
    s_trace_t *self = (s_trace_t *) arg;
    //  The steps' threads come first: on a machine whose cores they fill,
    //  the writer takes what they leave (Linux: a thread's own nice).
    if (setpriority (PRIO_PROCESS, (id_t) syscall (SYS_gettid), WRITER_NICE))
        za_info ("trace: its writer keeps its priority: %s", strerror (errno));
    pthread_mutex_lock (&self->wake_lock);
    while (!self->stopping) {
        struct timespec at;
        clock_gettime (CLOCK_REALTIME, &at);
        at.tv_nsec += WRITE_EVERY_NS;
        if (at.tv_nsec >= 1000000000L)
            at.tv_sec++, at.tv_nsec -= 1000000000L;
        pthread_cond_timedwait (&self->wake, &self->wake_lock, &at);
        pthread_mutex_unlock (&self->wake_lock);
        s_drain (self);
        pthread_mutex_lock (&self->wake_lock);
    }
    pthread_mutex_unlock (&self->wake_lock);
    s_drain (self);
    return NULL;
}

int
za_trace_open (const char *path, int64_t max_bytes)
{
    if (s_trace)
        return za_error ("trace: already open");
    char folder [PATH_CHARS];
    snprintf (folder, sizeof folder, "%s", path);
    char *slash = strrchr (folder, '/');
    if (slash && slash != folder) {
        *slash = 0;
        if (za_mkdirs (folder))
            return -1;
    }
    s_trace_t *self = calloc (1, sizeof *self);
    if (!self)
        return za_error ("out of memory");
    self->ring = calloc (RING_EVENTS, sizeof *self->ring);
    self->spare = calloc (RING_EVENTS, sizeof *self->spare);
    snprintf (self->path, sizeof self->path, "%s", path);
    self->max_bytes = max_bytes;
    self->clock_written = NAN;
    self->file = fopen (path, "a");
    if (self->file) {
        fseek (self->file, 0, SEEK_END);
        self->bytes = ftell (self->file);
    }
    if (!self->ring || !self->spare || !self->file) {
        int rc = za_error ("trace: cannot write %s: %s", path,
                           self->file? "out of memory": strerror (errno));
        if (self->file)
            fclose (self->file);
        free (self->ring), free (self->spare), free (self);
        return rc;
    }
    pthread_mutex_init (&self->lock, NULL);
    pthread_mutex_init (&self->wake_lock, NULL);
    pthread_cond_init (&self->wake, NULL);
    if (pthread_create (&self->writer, NULL, s_writer, self)) {
        fclose (self->file);
        free (self->ring), free (self->spare), free (self);
        return za_error ("trace: cannot start its writer");
    }
    s_trace = self;
    atomic_store (&s_on, 1);
    return 0;
}

void
za_trace_close (void)
{
    s_trace_t *self = s_trace;
    if (!self)
        return;
    atomic_store (&s_on, 0);
    pthread_mutex_lock (&self->wake_lock);
    self->stopping = 1;
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->wake_lock);
    pthread_join (self->writer, NULL);
    s_trace = NULL;
    if (self->file)
        fclose (self->file);
    pthread_mutex_destroy (&self->lock);
    pthread_mutex_destroy (&self->wake_lock);
    pthread_cond_destroy (&self->wake);
    free (self->ring), free (self->spare), free (self);
}

int
za_trace_on (void)
{
    return atomic_load_explicit (&s_on, memory_order_relaxed);
}

void
za_trace_event (za_trace_row_t row, const char *name, double start, double end, int64_t step)
{
    if (!atomic_load_explicit (&s_on, memory_order_relaxed))
        return;
    s_trace_t *self = s_trace;
    if (!self || pthread_mutex_trylock (&self->lock)) {
        atomic_fetch_add_explicit (&s_dropped, 1, memory_order_relaxed);
        return;
    }
    if (self->count < RING_EVENTS)
        self->ring [self->count++] = (s_event_t) {name, (int) row, start, end, step};
    else
        atomic_fetch_add_explicit (&s_dropped, 1, memory_order_relaxed);
    pthread_mutex_unlock (&self->lock);
}

void
za_trace_clock (double offset, double rtt, za_trace_clock_source_t source)
{
    atomic_store (&s_offset, offset);
    atomic_store (&s_rtt, rtt);
    atomic_store (&s_source, (int) source);
}

int64_t
za_trace_dropped (void)
{
    return atomic_load (&s_dropped);
}
