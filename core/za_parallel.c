/*  za_parallel.c: the fork-join pool. A generation counter under one mutex
    wakes the workers; a count of finished workers wakes the caller. With a
    spin set (za_parallel_set_spin), both sides first watch their counter
    that long before they sleep: a training step forks every millisecond or
    so, and a sleeping thread takes tens of microseconds to wake (a futex,
    the scheduler, on a virtual machine an interrupt between cores).      */
#include "za/za_parallel.h"
#include "za/za_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct _za_parallel_t {
    int threads;
    pthread_t workers [ZA_PARALLEL_MAX_THREADS];
    int started;
    pthread_mutex_t lock;
    pthread_cond_t work_ready;
    pthread_cond_t work_done;
    unsigned long generation;       //  bumped for each run (read unlocked while spinning)
    int pending;                    //  workers still busy with this run (likewise)
    int stopping;
    za_parallel_fn *fn;
    void *arg;
    double spin_s;                  //  how long a waiting thread watches before it sleeps
};

typedef struct {
    za_parallel_t *pool;
    int index;
} s_worker_arg_t;

//  1 while `until` (za_clock_mono) has not passed, after a pause.
static int
s_spinning (double until)
{
    for (int i = 0; i < 8; i++)
        __builtin_ia32_pause ();
    return za_clock_mono () < until;
}

static void *
s_worker (void *p)
{
    s_worker_arg_t *wa = (s_worker_arg_t *) p;
    za_parallel_t *self = wa->pool;
    int index = wa->index;
    free (wa);
    unsigned long seen = 0;
    pthread_mutex_lock (&self->lock);
    while (1) {
        if (self->generation == seen && !self->stopping && self->spin_s > 0) {
            double until = za_clock_mono () + self->spin_s;
            pthread_mutex_unlock (&self->lock);
            while (__atomic_load_n (&self->generation, __ATOMIC_ACQUIRE) == seen
                   && !__atomic_load_n (&self->stopping, __ATOMIC_ACQUIRE)
                   && s_spinning (until))
                ;
            pthread_mutex_lock (&self->lock);
        }
        while (self->generation == seen && !self->stopping)
            pthread_cond_wait (&self->work_ready, &self->lock);
        if (self->stopping)
            break;
        seen = self->generation;
        za_parallel_fn *fn = self->fn;
        void *arg = self->arg;
        pthread_mutex_unlock (&self->lock);
        fn (arg, index);
        pthread_mutex_lock (&self->lock);
        if (__atomic_sub_fetch (&self->pending, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal (&self->work_done);
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

za_parallel_t *
za_parallel_new (int threads)
{
    if (threads < 1 || threads > ZA_PARALLEL_MAX_THREADS) {
        za_error ("parallel: %d threads (1 to %d)", threads, ZA_PARALLEL_MAX_THREADS);
        return NULL;
    }
    za_parallel_t *self = (za_parallel_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    self->threads = threads;
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->work_ready, NULL);
    pthread_cond_init (&self->work_done, NULL);
    for (int i = 1; i < threads; i++) {
        s_worker_arg_t *wa = (s_worker_arg_t *) malloc (sizeof *wa);
        if (wa) {
            wa->pool = self;
            wa->index = i;
        }
        if (!wa || pthread_create (&self->workers [i], NULL, s_worker, wa)) {
            free (wa);
            za_error ("parallel: cannot start worker thread %d", i);
            za_parallel_destroy (&self);
            return NULL;
        }
        self->started = i;
    }
    return self;
}

void
za_parallel_run (za_parallel_t *self, za_parallel_fn *fn, void *arg)
{
    if (self->threads == 1) {
        fn (arg, 0);
        return;
    }
    pthread_mutex_lock (&self->lock);
    self->fn = fn;
    self->arg = arg;
    __atomic_store_n (&self->pending, self->threads - 1, __ATOMIC_RELEASE);
    __atomic_store_n (&self->generation, self->generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast (&self->work_ready);
    pthread_mutex_unlock (&self->lock);
    fn (arg, 0);
    double until = za_clock_mono () + self->spin_s;
    while (self->spin_s > 0 && __atomic_load_n (&self->pending, __ATOMIC_ACQUIRE) > 0
           && s_spinning (until))
        ;
    pthread_mutex_lock (&self->lock);
    while (self->pending > 0)
        pthread_cond_wait (&self->work_done, &self->lock);
    pthread_mutex_unlock (&self->lock);
}

void
za_parallel_set_spin (za_parallel_t *self, double seconds)
{
    pthread_mutex_lock (&self->lock);
    self->spin_s = seconds > 0? seconds: 0;
    pthread_mutex_unlock (&self->lock);
}

int
za_parallel_threads (const za_parallel_t *self)
{
    return self->threads;
}

void
za_parallel_destroy (za_parallel_t **self_p)
{
    za_parallel_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_lock (&self->lock);
    __atomic_store_n (&self->stopping, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast (&self->work_ready);
    pthread_mutex_unlock (&self->lock);
    for (int i = 1; i <= self->started; i++)
        pthread_join (self->workers [i], NULL);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->work_ready);
    pthread_cond_destroy (&self->work_done);
    free (self);
    *self_p = NULL;
}
