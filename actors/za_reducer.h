/*  za_reducer.h: the all-reduce strategy's reducer (za_mirrored.c): a
    thread that all-reduces each bucket of a step's gradient as soon as the
    replica says it is final (za_replica_on_gradients), so that the ring
    works while backward is still at the first layers. The buckets are
    fixed by the variable table, and each is one all-reduce: the order of
    the additions does not depend on timing, and a run is repeatable bit for
    bit. The ring is the reducer's from za_reducer_begin to za_reducer_end
    (the mutex hands it over); its caller's otherwise. Internal to actors/. */
#ifndef ZA_REDUCER_H_INCLUDED
#define ZA_REDUCER_H_INCLUDED

#include "za/za_model.h"
#include "za/za_ring.h"
#include "za/za_util.h"

#include <pthread.h>
#include <stdint.h>

//  With --bucket-kib the gradient block goes round the ring in buckets of
//  whole variables, the last layer's first, each at least that large; what
//  is left at the start, or past this many buckets, joins the last one. A
//  step's rounds start at (step + 1) x ZA_REDUCER_MAX_BUCKETS; its last
//  round is the stop flags' (za_mirrored.c), which no bucket takes.
#define ZA_REDUCER_MAX_BUCKETS 64

typedef struct {
    pthread_t thread;
    int running;                //  the thread runs (more than one bucket)
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    za_ring_t *ring;
    float *grads;
    size_t total;
    size_t first;               //  grads below it are frozen variables': never
                                //  reduced (the layers below the lowest that trains)
    int bucket_count;
    size_t lo [ZA_REDUCER_MAX_BUCKETS], hi [ZA_REDUCER_MAX_BUCKETS];  //  bucket 0 ends at total
    //  Under mutex:
    int64_t round_base;         //  a step is being reduced: its first round; -1: none
    size_t final_from;          //  grads [final_from .. total) are final
    int next;                   //  buckets reduced
    int done, rc, abort, quit;
    char error [ZA_ERROR_MAX_CHARS];
} za_reducer_t;

//  Cuts the block into buckets of at least `least` floats (0: one bucket)
//  and starts the thread where there is more than one. Returns 0 or -1.
int za_reducer_start (za_reducer_t *self, za_ring_t *ring, float *grads, const za_vars_t *vars,
                      size_t least);
void za_reducer_stop (za_reducer_t *self);
//  The replica's word that grads [offset ..) are final (za_grads_final_fn,
//  from a compute thread).
void za_reducer_final (void *self, size_t offset);
//  The step whose rounds start at round_base: the reducer takes the ring
//  and waits for the buckets to become final.
void za_reducer_begin (za_reducer_t *self, int64_t round_base);
//  Waits for the step's buckets (abort: the gradients will not come; the
//  bucket under way ends first) and takes the ring back. Returns 0,
//  ZA_RING_RESYNC, or -1 with the reducer's error.
int za_reducer_end (za_reducer_t *self, int abort);

#endif
