/*  za_reducer.c: the all-reduce strategy's reducer thread (za_reducer.h). */
#include "za_reducer.h"
#include "za/za_trace.h"

#include <stdio.h>

static void *
s_reducer_run (void *arg)
{
    za_reducer_t *self = (za_reducer_t *) arg;
    pthread_mutex_lock (&self->mutex);
    while (!self->quit) {
        int idle = self->round_base < 0 || self->done;
        if (!idle && self->abort) {
            self->done = 1;
            self->rc = -1;
            snprintf (self->error, sizeof self->error, "the step's gradients were not made");
            pthread_cond_broadcast (&self->cond);
            continue;
        }
        if (idle || self->final_from > self->lo [self->next]) {
            pthread_cond_wait (&self->cond, &self->mutex);
            continue;
        }
        int b = self->next;
        int64_t round = self->round_base + b;
        //  Its global step: the step's rounds start at (step + 1) x ZA_REDUCER_MAX_BUCKETS.
        int64_t step = self->round_base / ZA_REDUCER_MAX_BUCKETS - 1;
        pthread_mutex_unlock (&self->mutex);
        double start = za_clock_mono ();
        int rc = za_ring_allreduce_mean (self->ring, self->grads + self->lo [b],
                                         self->hi [b] - self->lo [b], round);
        za_trace_event (ZA_TRACE_BUCKET, "bucket", start, za_clock_mono (), step);
        pthread_mutex_lock (&self->mutex);
        self->next++;
        if (rc || self->next == self->bucket_count) {
            self->done = 1;
            self->rc = rc;
            if (rc < 0)
                snprintf (self->error, sizeof self->error, "%s", za_last_error ());
            pthread_cond_broadcast (&self->cond);
        }
    }
    pthread_mutex_unlock (&self->mutex);
    return NULL;
}

//  The replica's word that grads [offset ..) are final (a compute thread).
void
za_reducer_final (void *arg, size_t offset)
{
    za_reducer_t *self = (za_reducer_t *) arg;
    pthread_mutex_lock (&self->mutex);
    if (offset < self->final_from) {
        self->final_from = offset;
        pthread_cond_broadcast (&self->cond);
    }
    pthread_mutex_unlock (&self->mutex);
}

//  Cuts the block into buckets of at least `least` floats (0: one bucket)
//  and starts the thread. Returns 0 or -1.
int
za_reducer_start (za_reducer_t *self, za_ring_t *ring, float *grads, const za_vars_t *vars,
                 size_t least)
{
    self->ring = ring;
    self->grads = grads;
    self->total = vars->total;
    self->round_base = -1;
    self->first = vars->total;
    for (int v = 0; v < vars->count; v++)
        if (!vars->vars [v].frozen && vars->vars [v].offset < self->first)
            self->first = vars->vars [v].offset;
    if (least == 0)
        least = vars->total;
    size_t hi = vars->total;
    //  At most ZA_REDUCER_MAX_BUCKETS - 1 with the last: the last round of a step is
    //  early stopping's (s_run_steps).
    for (int v = vars->count - 1; v >= 0 && self->bucket_count < ZA_REDUCER_MAX_BUCKETS - 2; v--)
        if (vars->vars [v].offset > self->first && hi - vars->vars [v].offset >= least) {
            self->lo [self->bucket_count] = vars->vars [v].offset;
            self->hi [self->bucket_count++] = hi;
            hi = vars->vars [v].offset;
        }
    if (hi > self->first || self->bucket_count == 0) {
        if (self->bucket_count == 0 || hi - self->first >= least) {
            self->hi [self->bucket_count] = hi;
            self->bucket_count++;
        }
        self->lo [self->bucket_count - 1] = self->first;
    }
    if (self->bucket_count == 1)
        return 0;               //  one bucket: the main thread reduces it after backward
    pthread_mutex_init (&self->mutex, NULL);
    pthread_cond_init (&self->cond, NULL);
    if (pthread_create (&self->thread, NULL, s_reducer_run, self)) {
        pthread_mutex_destroy (&self->mutex);
        pthread_cond_destroy (&self->cond);
        return za_error ("cannot start the reducer thread");
    }
    self->running = 1;
    return 0;
}

void
za_reducer_stop (za_reducer_t *self)
{
    if (!self->running)
        return;
    pthread_mutex_lock (&self->mutex);
    self->quit = 1;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->mutex);
    pthread_join (self->thread, NULL);
    pthread_mutex_destroy (&self->mutex);
    pthread_cond_destroy (&self->cond);
    self->running = 0;
}

//  The step whose rounds start at round_base: the reducer takes the ring
//  and waits for the buckets to become final.
void
za_reducer_begin (za_reducer_t *self, int64_t round_base)
{
    if (!self->running) {
        self->round_base = round_base;
        return;
    }
    pthread_mutex_lock (&self->mutex);
    self->round_base = round_base;
    self->final_from = self->total;
    self->next = 0;
    self->done = self->rc = self->abort = 0;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->mutex);
}

//  Waits for the step's buckets (abort: the gradients will not come; the
//  bucket under way ends first) and takes the ring back. Returns 0,
//  ZA_RING_RESYNC, or -1 with the reducer's error.
int
za_reducer_end (za_reducer_t *self, int abort)
{
    if (!self->running) {
        int64_t round = self->round_base;
        self->round_base = -1;
        if (abort)
            return -1;
        return self->total > self->first? za_ring_allreduce_mean (self->ring,
                                                                  self->grads + self->first,
                                                                  self->total - self->first,
                                                                  round): 0;
    }
    pthread_mutex_lock (&self->mutex);
    if (abort) {
        self->abort = 1;
        pthread_cond_broadcast (&self->cond);
    }
    while (!self->done)
        pthread_cond_wait (&self->cond, &self->mutex);
    self->round_base = -1;
    int rc = self->rc;
    pthread_mutex_unlock (&self->mutex);
    if (rc < 0 && !abort)
        za_error_adopt (self->error);
    return rc;
}

