/*  za_serve_private.h: what za_serve.c (the server: its model, batching
    and main loop) and za_serve_http.c (its HTTP requests: TF Serving's
    REST API) share. Internal to runtime/.                                 */
#ifndef ZA_SERVE_PRIVATE_H_INCLUDED
#define ZA_SERVE_PRIVATE_H_INCLUDED

#include "za_settings.h"

#include "za/za_predictor.h"

#include <microhttpd.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#define ZA_SERVE_NAME_CHARS 256
#define ZA_SERVE_ERROR_CHARS 512

//  A served model: a predictor and the batches using it.
typedef struct {
    za_predictor_t *predictor;
    int64_t step;
    int users;
} za_serve_model_t;

//  One predict request's images, waiting to be run.
typedef struct za_serve_job_t {
    float *pixels;                      //  [n, row]
    int n;
    size_t row;
    float *logits, *probabilities;      //  [n, classes], filled by the batch
    int classes;
    za_serve_model_t *model;                   //  what it ran on (held until answered)
    int done, rc;
    char error [ZA_SERVE_ERROR_CHARS];
    struct za_serve_job_t *next;
} za_serve_job_t;

typedef struct {
    const za_settings_t *s;
    char name [ZA_SERVE_NAME_CHARS];
    //  The model, swapped under model_lock.
    pthread_mutex_t model_lock;
    za_serve_model_t *model;
    //  The queue.
    pthread_mutex_t lock;
    pthread_cond_t queued, finished;
    za_serve_job_t *head, *tail;
    int64_t queued_instances;
    int stopping;
    pthread_t *batchers;
    int batcher_count;
    //  Requests whose instances are read (and images decoded) at once: at
    //  most batcher_count, however many connections wait (a 348 KB PNG of
    //  16384 x 16384 decodes into 800 MB).
    sem_t decoding;
    //  Counters for the metrics.
    atomic_llong requests [6];          //  by status class: 2xx, 4xx, 5xx, ...
    atomic_llong instances, batches, batched_instances, latency_us, reloads, reload_failures;
    struct MHD_Daemon *daemon;
} za_serve_t;

//  One connection's request being read.
typedef struct {
    char *body;
    size_t size, capacity;
    int too_large;
    double started;
} za_serve_request_t;

//  The model served now, held (a reload leaves it to its users), and given
//  back.
za_serve_model_t *za_serve_model_take (za_serve_t *self);
void za_serve_model_give (za_serve_t *self, za_serve_model_t *model);

//  Queues a job and waits for its batch to run it.
void za_serve_job_run (za_serve_t *self, za_serve_job_t *job);

//  libmicrohttpd's callbacks: a request (its parts, then the whole), and
//  its end.
enum MHD_Result za_serve_on_request (void *cls, struct MHD_Connection *connection,
                                     const char *url, const char *method,
                                     const char *http_version, const char *upload_data,
                                     size_t *upload_data_size, void **con_cls);
void za_serve_on_completed (void *cls, struct MHD_Connection *connection, void **con_cls,
                            enum MHD_RequestTerminationCode code);

#endif
