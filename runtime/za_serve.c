/*  za_serve.c: TensorFlow Serving's REST API over a predictor. Each HTTP
    connection has its thread (libmicrohttpd's); a predict request becomes
    a job on one queue; batch threads take the queued jobs together, up to
    --max-batch-size instances or --batch-timeout-micros after the first,
    run them as one batch and wake their connections. The main thread
    watches the model dir and swaps in a newer checkpoint once it loads; a
    batch holds the model it started with until it ends. The requests
    themselves are za_serve_http.c's.                                        */
#include "za_serve.h"

#include "za/za_checkpoint.h"
#include "za/za_predictor.h"
#include "za/za_util.h"

#include <czmq.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef ZA_HAVE_MHD
#include "za_serve_private.h"

#include <netdb.h>
#include <sys/socket.h>

#define NAME_CHARS ZA_SERVE_NAME_CHARS
#define ERROR_CHARS ZA_SERVE_ERROR_CHARS
#define MAX_CONNECTIONS 1024
#define CONNECTION_TIMEOUT_SECS 60

// ---------------------------------------------------------------------------
//  The model

static void
s_model_free (za_serve_model_t **model_p)
{
    if (*model_p)
        za_predictor_destroy (&(*model_p)->predictor);
    free (*model_p);
    *model_p = NULL;
}

za_serve_model_t *
za_serve_model_take (za_serve_t *self)
{
    pthread_mutex_lock (&self->model_lock);
    za_serve_model_t *model = self->model;
    model->users++;
    pthread_mutex_unlock (&self->model_lock);
    return model;
}

void
za_serve_model_give (za_serve_t *self, za_serve_model_t *model)
{
    pthread_mutex_lock (&self->model_lock);
    int last = --model->users == 0 && model != self->model;
    pthread_mutex_unlock (&self->model_lock);
    if (last)
        s_model_free (&model);
}

static za_serve_model_t *
s_model_load (const za_settings_t *s)
{
    za_predictor_config_t config = za_predictor_config_default ();
    config.batch_max = (int) s->max_batch_size;
    config.precision = s->run.precision == ZA_POLICY_AUTO? "auto"
                     : za_precision_text ((za_precision_t) s->run.precision);
    za_serve_model_t *model = calloc (1, sizeof *model);
    if (!model) {
        za_error ("out of memory");
        return NULL;
    }
    model->predictor = za_predictor_new (s->run.model_dir, &config);
    if (!model->predictor) {
        free (model);
        return NULL;
    }
    model->step = za_predictor_step (model->predictor);
    return model;
}

//  What the model dir holds: a hash of its checkpoints' steps, sizes and
//  times (a new checkpoint, one gone, or one written again: a corrupt one
//  copied over whole changes it).
static uint64_t
s_dir_state (const char *model_dir)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (model_dir, &steps);
    uint64_t hash = 1469598103934665603ULL ^ (uint64_t) (count < 0? 0: count);
    for (int i = 0; i < count; i++) {
        uint64_t facts [4] = {(uint64_t) steps [i]};
        char *path = za_checkpoint_path (model_dir, steps [i]);
        struct stat st;
        if (path && stat (path, &st) == 0) {
            facts [1] = (uint64_t) st.st_size;
            facts [2] = (uint64_t) st.st_mtim.tv_sec;
            facts [3] = (uint64_t) st.st_mtim.tv_nsec;
        }
        free (path);
        for (int f = 0; f < 4; f++)
            hash = (hash ^ facts [f]) * 1099511628211ULL;
    }
    free (steps);
    return hash;
}

//  When the model dir changed: its newest intact checkpoint, swapped in
//  when it is newer than the one served. One that is not (the newest file
//  is corrupt) is said once, and looked for again when the dir changes
//  (the newest file written again included).
static void
s_reload (za_serve_t *self, uint64_t *dir_state)
{
    uint64_t state = s_dir_state (self->s->run.model_dir);
    if (state == *dir_state)
        return;
    *dir_state = state;
    pthread_mutex_lock (&self->model_lock);
    int64_t serving = self->model->step;
    pthread_mutex_unlock (&self->model_lock);
    int64_t newest = za_checkpoint_newest_step (self->s->run.model_dir);
    if (newest <= serving)
        return;
    za_error_set_quiet (1);
    za_serve_model_t *model = s_model_load (self->s);
    za_error_set_quiet (0);
    if (!model || model->step <= serving) {
        self->reload_failures++;
        za_info ("serve: the checkpoint of step %lld does not load (%s): still serving "
                 "step %lld", (long long) newest, model? "corrupt": za_last_error (),
                 (long long) serving);
        s_model_free (&model);
        return;
    }
    pthread_mutex_lock (&self->model_lock);
    za_serve_model_t *old = self->model;
    self->model = model;
    int idle = old->users == 0;
    pthread_mutex_unlock (&self->model_lock);
    if (idle)
        s_model_free (&old);
    self->reloads++;
    za_info ("serve: now serving step %lld (was %lld)", (long long) model->step,
             (long long) serving);
}

// ---------------------------------------------------------------------------
//  Batching

//  The jobs to run as one batch: the first, and those after it while the
//  instances stay within the batch size. NULL when stopping.
static za_serve_job_t *
s_batch_take (za_serve_t *self, int *count)
{
    pthread_mutex_lock (&self->lock);
    while (!self->head && !self->stopping)
        pthread_cond_wait (&self->queued, &self->lock);
    if (!self->head) {
        pthread_mutex_unlock (&self->lock);
        return NULL;
    }
    //  Wait for more, up to the timeout after the first came.
    struct timespec deadline;
    clock_gettime (CLOCK_REALTIME, &deadline);
    int64_t nanos = deadline.tv_nsec + self->s->batch_timeout_micros * 1000;
    deadline.tv_sec += nanos / 1000000000;
    deadline.tv_nsec = nanos % 1000000000;
    while (self->head && self->queued_instances < self->s->max_batch_size && !self->stopping)
        if (pthread_cond_timedwait (&self->queued, &self->lock, &deadline))
            break;
    za_serve_job_t *first = self->head, *last = NULL;
    int64_t instances = 0;
    *count = 0;
    for (za_serve_job_t *job = self->head; job; job = job->next) {
        if (instances && instances + job->n > self->s->max_batch_size)
            break;
        instances += job->n;
        last = job;
        (*count)++;
    }
    if (!last) {                        //  another batch thread took them
        pthread_mutex_unlock (&self->lock);
        return s_batch_take (self, count);
    }
    self->head = last->next;
    if (!self->head)
        self->tail = NULL;
    last->next = NULL;
    self->queued_instances -= instances;
    if (self->head)
        pthread_cond_signal (&self->queued);
    pthread_mutex_unlock (&self->lock);
    return first;
}

//  Runs the jobs as one batch and wakes their connections.
static void
s_batch_run (za_serve_t *self, za_serve_job_t *jobs, int count)
{
    za_serve_model_t *model = za_serve_model_take (self);
    za_input_shape_t in = za_predictor_input (model->predictor);
    size_t row = (size_t) in.height * in.width * in.channels;
    int classes = za_predictor_classes (model->predictor);
    int n = 0, rc = 0;
    for (za_serve_job_t *job = jobs; job; job = job->next)
        n += job->n;
    char error [ERROR_CHARS] = "";
    //  A job read for another model's input (one reloaded since) fails.
    for (za_serve_job_t *job = jobs; job && !rc; job = job->next)
        if (job->row != row) {
            snprintf (error, sizeof error, "the model changed its input to %dx%dx%d while "
                      "the request waited; send it again", in.height, in.width, in.channels);
            rc = -1;
        }
    float *pixels = NULL, *logits = NULL, *probabilities = NULL;
    if (!rc && count == 1) {
        pixels = jobs->pixels;
        logits = jobs->logits = malloc ((size_t) n * classes * sizeof (float));
        probabilities = jobs->probabilities = malloc ((size_t) n * classes * sizeof (float));
    }
    else
    if (!rc) {
        pixels = malloc ((size_t) n * row * sizeof (float));
        logits = malloc ((size_t) n * classes * sizeof (float));
        probabilities = malloc ((size_t) n * classes * sizeof (float));
        size_t at = 0;
        for (za_serve_job_t *job = jobs; pixels && job; job = job->next) {
            memcpy (pixels + at * row, job->pixels, (size_t) job->n * row * sizeof (float));
            at += (size_t) job->n;
        }
    }
    if (!rc && (!pixels || !logits || !probabilities)) {
        snprintf (error, sizeof error, "out of memory for a batch of %d", n);
        rc = -1;
    }
    if (!rc && za_predictor_run (model->predictor, pixels, n, logits, probabilities)) {
        snprintf (error, sizeof error, "%s", za_last_error ());
        rc = -1;
    }
    self->batches++;
    self->batched_instances += n;
    //  Each job's share.
    size_t at = 0;
    for (za_serve_job_t *job = jobs; job && count > 1 && !rc; job = job->next) {
        size_t values = (size_t) job->n * classes * sizeof (float);
        job->logits = malloc (values ? values: 1);
        job->probabilities = malloc (values ? values: 1);
        if (job->logits && job->probabilities) {
            memcpy (job->logits, logits + at * classes, values);
            memcpy (job->probabilities, probabilities + at * classes, values);
        }
        else
            job->rc = -1, snprintf (job->error, sizeof job->error, "out of memory");
        at += (size_t) job->n;
    }
    if (count > 1) {
        free (pixels), free (logits), free (probabilities);
    }
    pthread_mutex_lock (&self->lock);
    for (za_serve_job_t *job = jobs; job; job = job->next) {
        if (rc)
            job->rc = -1, snprintf (job->error, sizeof job->error, "%s", error);
        job->classes = classes;
        job->model = model;
        pthread_mutex_lock (&self->model_lock);
        model->users++;                 //  the answer reads its class names
        pthread_mutex_unlock (&self->model_lock);
        job->done = 1;
    }
    pthread_cond_broadcast (&self->finished);
    pthread_mutex_unlock (&self->lock);
    za_serve_model_give (self, model);
}

static void *
s_batcher (void *arg)
{
    za_serve_t *self = (za_serve_t *) arg;
    int count;
    za_serve_job_t *jobs;
    while ((jobs = s_batch_take (self, &count)))
        s_batch_run (self, jobs, count);
    return NULL;
}

//  Queues a job and waits for its batch to run it.
void
za_serve_job_run (za_serve_t *self, za_serve_job_t *job)
{
    pthread_mutex_lock (&self->lock);
    if (self->tail)
        self->tail->next = job;
    else
        self->head = job;
    self->tail = job;
    self->queued_instances += job->n;
    pthread_cond_signal (&self->queued);
    while (!job->done)
        pthread_cond_wait (&self->finished, &self->lock);
    pthread_mutex_unlock (&self->lock);
}

//  The model's name: --model-name, else the model dir's last part; a name
//  a URL's path and the metrics' labels take as it is (letters, digits,
//  '_', '-', '.'). 0, or -1 with an error.
static int
s_name (za_serve_t *self)
{
    const char *dir = self->s->run.model_dir;
    if (self->s->model_name)
        snprintf (self->name, sizeof self->name, "%s", self->s->model_name);
    else {
        size_t end = strlen (dir);
        while (end > 1 && dir [end - 1] == '/')
            end--;
        size_t start = end;
        while (start > 0 && dir [start - 1] != '/')
            start--;
        snprintf (self->name, sizeof self->name, "%.*s", (int) (end - start), dir + start);
    }
    static const char allowed [] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789_-.";
    if (!*self->name || self->name [strspn (self->name, allowed)])
        return za_error ("serve: the model's name '%s' has a character a URL or a metric "
                         "label would change (letters, digits, '_', '-' and '.' are kept): "
                         "give --model-name", self->name);
    return 0;
}

static int
s_start (za_serve_t *self)
{
    const za_settings_t *s = self->s;
    char port [16];
    snprintf (port, sizeof port, "%lld", (long long) s->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *found = NULL;
    int rc = getaddrinfo (s->listen, port, &hints, &found);
    if (rc || !found)
        return za_error ("serve: --listen %s: %s", s->listen,
                         rc? gai_strerror (rc): "no address");
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD
                   | MHD_USE_POLL | (found->ai_family == AF_INET6? MHD_USE_IPv6: 0);
    self->daemon = MHD_start_daemon (flags, (uint16_t) s->port, NULL, NULL, za_serve_on_request, self,
                                     MHD_OPTION_SOCK_ADDR, found->ai_addr,
                                     MHD_OPTION_NOTIFY_COMPLETED, za_serve_on_completed, self,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned) MAX_CONNECTIONS,
                                     MHD_OPTION_CONNECTION_TIMEOUT,
                                     (unsigned) CONNECTION_TIMEOUT_SECS, MHD_OPTION_END);
    freeaddrinfo (found);
    if (!self->daemon)
        return za_error ("serve: cannot listen on %s port %lld (in use, or not this "
                         "machine's address): give another --port or --listen", s->listen,
                         (long long) s->port);
    return 0;
}

int
za_serve_run (const za_settings_t *s)
{
    if (!s->run.model_dir || !*s->run.model_dir) {
        za_error ("serve: give --model-dir, the folder training wrote its checkpoints to");
        return ZA_EXIT_USAGE;
    }
    za_serve_t *self = calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return 1;
    }
    self->s = s;
    if (s_name (self)) {
        free (self);
        return ZA_EXIT_USAGE;
    }
    pthread_mutex_init (&self->model_lock, NULL);
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->queued, NULL);
    pthread_cond_init (&self->finished, NULL);
    int rc = (self->model = s_model_load (s))? 0: 1;
    long cores = sysconf (_SC_NPROCESSORS_ONLN);
    self->batcher_count = s->num_batch_threads > 0? (int) s->num_batch_threads
                        : cores > 0? (int) cores: 1;
    if (sem_init (&self->decoding, 0, (unsigned) self->batcher_count)) {
        za_error ("serve: cannot make the decoding semaphore: %s", strerror (errno));
        rc = 1;
    }
    self->batchers = rc? NULL: calloc ((size_t) self->batcher_count, sizeof *self->batchers);
    int started = 0;
    for (int t = 0; self->batchers && t < self->batcher_count; t++)
        started += pthread_create (&self->batchers [t], NULL, s_batcher, self) == 0;
    if (!rc && started < self->batcher_count)
        rc = za_error ("serve: cannot start the batch threads");
    if (!rc && s_start (self))
        rc = 1;
    if (!rc) {
        za_input_shape_t in = za_predictor_input (self->model->predictor);
        const union MHD_DaemonInfo *info = MHD_get_daemon_info (self->daemon,
                                                                     MHD_DAEMON_INFO_BIND_PORT);
        za_info ("serving %s (step %lld: %s, input %dx%dx%d, %s) at http://%s:%u/v1/models/"
                 "%s:predict; batches of up to %lld after %lld us on %d threads; Ctrl-C stops",
                 s->run.model_dir, (long long) self->model->step,
                 za_predictor_model (self->model->predictor), in.height, in.width,
                 in.channels, za_predictor_precision (self->model->predictor), s->listen,
                 info? info->port: (unsigned) s->port, self->name,
                 (long long) s->max_batch_size, (long long) s->batch_timeout_micros,
                 self->batcher_count);
    }
    double next_poll = za_clock_mono () + s->poll_secs;
    uint64_t dir_state = s_dir_state (s->run.model_dir);
    while (!rc && !zsys_interrupted) {
        usleep (20000);
        if (za_clock_mono () >= next_poll) {
            s_reload (self, &dir_state);
            next_poll = za_clock_mono () + s->poll_secs;
        }
    }
    if (self->daemon)
        MHD_stop_daemon (self->daemon);
    pthread_mutex_lock (&self->lock);
    self->stopping = 1;
    pthread_cond_broadcast (&self->queued);
    pthread_mutex_unlock (&self->lock);
    for (int t = 0; t < started; t++)
        pthread_join (self->batchers [t], NULL);
    if (!rc)
        za_info ("serve: stopped after %lld requests (%lld images in %lld batches)",
                 (long long) (self->requests [1] + self->requests [3] + self->requests [4]),
                 (long long) self->instances, (long long) self->batches);
    s_model_free (&self->model);
    free (self->batchers);
    pthread_mutex_destroy (&self->model_lock);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->queued);
    pthread_cond_destroy (&self->finished);
    sem_destroy (&self->decoding);
    free (self);
    return rc;
}

#else

int
za_serve_run (const za_settings_t *s)
{
    (void) s;
    za_error ("serve: this zactor was built without libmicrohttpd (apt-get install "
              "libmicrohttpd-dev, then build again)");
    return 1;
}

#endif
