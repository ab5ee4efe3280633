/*  za_trace.c: the trace's ring and its writer thread. A recorder takes the
    ring's lock with trylock only: a held lock (the writer swapping the ring
    out) or a full ring drops the event.                                    */
#include "za/za_trace.h"
#include "za/za_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING_EVENTS 16384
#define WRITE_EVERY_NS 200000000L
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
    pthread_t writer;
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    int stopping;
} s_trace_t;

static s_trace_t *s_trace;
static _Atomic int s_on;
static _Atomic int64_t s_dropped;

const char *
za_trace_row_name (int row)
{
    static const char *names [] = {NULL, "step", "input", "compute", "exchange", "apply",
                                   "checkpoint", "evaluation"};
    return row > 0 && row < ZA_TRACE_ROWS? names [row]: NULL;
}

//  Writes the events of the spare ring (count of them) to the file.
static void
s_write (s_trace_t *self, int count)
{
    for (int i = 0; i < count; i++) {
        const s_event_t *e = &self->spare [i];
        double duration = e->end > e->start? (e->end - e->start) * 1e6: 0;
        fprintf (self->file, "{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                 "\"tid\":%d,\"args\":{\"step\":%lld}}\n", e->name, e->start * 1e6, duration,
                 e->row, (long long) e->step);
    }
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
za_trace_open (const char *path)
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
    self->file = fopen (path, "a");
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

int64_t
za_trace_dropped (void)
{
    return atomic_load (&s_dropped);
}
