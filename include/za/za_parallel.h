/*  za_parallel.h: a fixed pool of worker threads that run one function over
    indexes 0..threads-1 and return when all are done (a fork-join per call).
    The caller's thread runs index 0, so a pool of 1 starts no thread.     */
#ifndef ZA_PARALLEL_H_INCLUDED
#define ZA_PARALLEL_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_PARALLEL_MAX_THREADS 64

typedef struct _za_parallel_t za_parallel_t;

//  The work of one index.
typedef void (za_parallel_fn) (void *arg, int index);

//  Starts threads - 1 workers (threads in 1..ZA_PARALLEL_MAX_THREADS).
//  Returns NULL with an error if a thread cannot be started.
za_parallel_t *za_parallel_new (int threads);

//  Runs fn (arg, i) for every i in 0..threads-1 at once, i = 0 on the
//  caller's thread; returns when every call has returned.
void za_parallel_run (za_parallel_t *self, za_parallel_fn *fn, void *arg);

//  How long (seconds, 0 by default) a worker watches for the next run and
//  the caller for the workers' end before each sleeps on its condition:
//  for a pool that forks often and owns its cores (a replica's threads);
//  0 for one that shares them (an input pipeline's decoders). Call it
//  between runs.
void za_parallel_set_spin (za_parallel_t *self, double seconds);

int za_parallel_threads (const za_parallel_t *self);

//  Stops and joins the workers; sets *self_p to NULL. Safe on NULL.
void za_parallel_destroy (za_parallel_t **self_p);

#ifdef __cplusplus
}
#endif
#endif
