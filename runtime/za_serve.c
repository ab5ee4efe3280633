/*  za_serve.c: TensorFlow Serving's REST API over a predictor. Each HTTP
    connection has its thread (libmicrohttpd's); a predict request becomes
    a job on one queue; batch threads take the queued jobs together, up to
    --max-batch-size instances or --batch-timeout-micros after the first,
    run them as one batch and wake their connections. The main thread
    watches the model dir and swaps in a newer checkpoint once it loads; a
    batch holds the model it started with until it ends.                   */
#include "za_serve.h"

#include "za/za_checkpoint.h"
#include "za/za_image.h"
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
#include <time.h>
#include <unistd.h>

#ifdef ZA_HAVE_MHD
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#define NAME_CHARS 256
#define ERROR_CHARS 512
#define MAX_CONNECTIONS 1024
#define CONNECTION_TIMEOUT_SECS 60

//  A served model: a predictor and the batches using it.
typedef struct {
    za_predictor_t *predictor;
    int64_t step;
    int users;
} s_model_t;

//  One predict request's images, waiting to be run.
typedef struct s_job_t {
    float *pixels;                      //  [n, row]
    int n;
    size_t row;
    float *logits, *probabilities;      //  [n, classes], filled by the batch
    int classes;
    s_model_t *model;                   //  what it ran on (held until answered)
    int done, rc;
    char error [ERROR_CHARS];
    struct s_job_t *next;
} s_job_t;

typedef struct {
    const za_settings_t *s;
    char name [NAME_CHARS];
    //  The model, swapped under model_lock.
    pthread_mutex_t model_lock;
    s_model_t *model;
    //  The queue.
    pthread_mutex_t lock;
    pthread_cond_t queued, finished;
    s_job_t *head, *tail;
    int64_t queued_instances;
    int stopping;
    pthread_t *batchers;
    int batcher_count;
    //  Counters for the metrics.
    atomic_llong requests [6];          //  by status class: 2xx, 4xx, 5xx, ...
    atomic_llong instances, batches, batched_instances, latency_us, reloads, reload_failures;
    struct MHD_Daemon *daemon;
} s_server_t;

//  One connection's request being read.
typedef struct {
    char *body;
    size_t size, capacity;
    int too_large;
    double started;
} s_request_t;

// ---------------------------------------------------------------------------
//  The model

static s_model_t *
s_model_take (s_server_t *self)
{
    pthread_mutex_lock (&self->model_lock);
    s_model_t *model = self->model;
    model->users++;
    pthread_mutex_unlock (&self->model_lock);
    return model;
}

static void
s_model_give (s_server_t *self, s_model_t *model)
{
    pthread_mutex_lock (&self->model_lock);
    int last = --model->users == 0 && model != self->model;
    pthread_mutex_unlock (&self->model_lock);
    if (last) {
        za_predictor_destroy (&model->predictor);
        free (model);
    }
}

static s_model_t *
s_model_load (const za_settings_t *s)
{
    za_predictor_config_t config = za_predictor_config_default ();
    config.batch_max = (int) s->max_batch_size;
    s_model_t *model = calloc (1, sizeof *model);
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

//  What the model dir holds: a hash of its checkpoints' steps (a new
//  checkpoint, or one gone, changes it).
static uint64_t
s_dir_state (const char *model_dir)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (model_dir, &steps);
    uint64_t hash = 1469598103934665603ULL ^ (uint64_t) (count < 0? 0: count);
    for (int i = 0; i < count; i++)
        hash = (hash ^ (uint64_t) steps [i]) * 1099511628211ULL;
    free (steps);
    return hash;
}

//  When the model dir changed: its newest intact checkpoint, swapped in
//  when it is newer than the one served. One that is not (the newest file
//  is corrupt) is said once, and looked for again when the dir changes.
static void
s_reload (s_server_t *self, uint64_t *dir_state)
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
    s_model_t *model = s_model_load (self->s);
    za_error_set_quiet (0);
    if (!model || model->step <= serving) {
        self->reload_failures++;
        za_info ("serve: the checkpoint of step %lld does not load (%s): still serving "
                 "step %lld", (long long) newest, model? "corrupt": za_last_error (),
                 (long long) serving);
        if (model) {
            za_predictor_destroy (&model->predictor);
            free (model);
        }
        return;
    }
    pthread_mutex_lock (&self->model_lock);
    s_model_t *old = self->model;
    self->model = model;
    int idle = old->users == 0;
    pthread_mutex_unlock (&self->model_lock);
    if (idle) {
        za_predictor_destroy (&old->predictor);
        free (old);
    }
    self->reloads++;
    za_info ("serve: now serving step %lld (was %lld)", (long long) model->step,
             (long long) serving);
}

// ---------------------------------------------------------------------------
//  Batching

//  The jobs to run as one batch: the first, and those after it while the
//  instances stay within the batch size. NULL when stopping.
static s_job_t *
s_batch_take (s_server_t *self, int *count)
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
    s_job_t *first = self->head, *last = NULL;
    int64_t instances = 0;
    *count = 0;
    for (s_job_t *job = self->head; job; job = job->next) {
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
s_batch_run (s_server_t *self, s_job_t *jobs, int count)
{
    s_model_t *model = s_model_take (self);
    za_input_shape_t in = za_predictor_input (model->predictor);
    size_t row = (size_t) in.height * in.width * in.channels;
    int classes = za_predictor_classes (model->predictor);
    int n = 0, rc = 0;
    for (s_job_t *job = jobs; job; job = job->next)
        n += job->n;
    char error [ERROR_CHARS] = "";
    //  A job read for another model's input (one reloaded since) fails.
    for (s_job_t *job = jobs; job && !rc; job = job->next)
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
        for (s_job_t *job = jobs; pixels && job; job = job->next) {
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
    for (s_job_t *job = jobs; job && count > 1 && !rc; job = job->next) {
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
    for (s_job_t *job = jobs; job; job = job->next) {
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
    s_model_give (self, model);
}

static void *
s_batcher (void *arg)
{
    s_server_t *self = (s_server_t *) arg;
    int count;
    s_job_t *jobs;
    while ((jobs = s_batch_take (self, &count)))
        s_batch_run (self, jobs, count);
    return NULL;
}

//  Queues a job and waits for its batch to run it.
static void
s_job_run (s_server_t *self, s_job_t *job)
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

// ---------------------------------------------------------------------------
//  Requests

//  Standard or URL-safe base64 into out (size at least 3/4 of the text's).
//  Its length, or -1 when the text is not base64.
static long
s_base64 (const char *text, uint8_t *out)
{
    uint32_t bits = 0;
    int held = 0;
    long length = 0;
    for (const char *p = text; *p && *p != '='; p++) {
        int v = *p >= 'A' && *p <= 'Z'? *p - 'A': *p >= 'a' && *p <= 'z'? *p - 'a' + 26
              : *p >= '0' && *p <= '9'? *p - '0' + 52: *p == '+' || *p == '-'? 62
              : *p == '/' || *p == '_'? 63: *p == '\n' || *p == '\r'? -2: -1;
        if (v == -2)
            continue;
        if (v < 0)
            return -1;
        bits = bits << 6 | (uint32_t) v;
        held += 6;
        if (held >= 8) {
            held -= 8;
            out [length++] = (uint8_t) (bits >> held);
        }
    }
    return length;
}

//  The shape of a nested array by its first elements (up to 4 dims).
static int
s_shape (json_t *value, int64_t *dims)
{
    int ndim = 0;
    while (json_is_array (value) && ndim < 4) {
        dims [ndim++] = (int64_t) json_array_size (value);
        value = json_array_get (value, 0);
    }
    return json_is_array (value)? -1: ndim;
}

//  A nested array of exactly dims into out. 0, or -1 (not rectangular, or
//  a value that is not a number).
static int
s_fill (json_t *value, const int64_t *dims, int ndim, float *out, size_t *at)
{
    if (ndim == 0) {
        if (!json_is_number (value))
            return -1;
        out [(*at)++] = (float) json_number_value (value);
        return 0;
    }
    if (!json_is_array (value) || (int64_t) json_array_size (value) != dims [0])
        return -1;
    for (size_t i = 0; i < json_array_size (value); i++)
        if (s_fill (json_array_get (value, i), dims + 1, ndim - 1, out, at))
            return -1;
    return 0;
}

//  One instance into out [row]. 0, or -1 with its error in error.
static int
s_instance (json_t *value, za_input_shape_t in, const za_settings_t *s,
            za_image_decoder_t **decoder, float *out, char *error, size_t size)
{
    size_t row = (size_t) in.height * in.width * in.channels;
    if (json_is_object (value) && json_object_get (value, "pixels"))
        value = json_object_get (value, "pixels");
    const char *b64 = json_string_value (json_object_get (value, "b64"));
    if (b64) {
        size_t length = strlen (b64);
        uint8_t *bytes = malloc (length * 3 / 4 + 4), *pixels = malloc (row);
        long decoded = bytes? s_base64 (b64, bytes): -1;
        za_image_spec_t spec = {.height = in.height, .width = in.width,
                                .channels = in.channels,
                                .resize = (za_resize_t) za_resize_parse (s->resize),
                                .crop_to_aspect_ratio = s->crop_to_aspect_ratio};
        if ((int) spec.resize < 0)
            spec.resize = ZA_RESIZE_AREA;
        if (!*decoder)
            *decoder = za_image_decoder_new ();
        int rc = -1;
        if (decoded < 0)
            snprintf (error, size, "its b64 is not base64");
        else
        if (!pixels || !*decoder)
            snprintf (error, size, "out of memory");
        else
        if (za_image_decode (*decoder, bytes, (size_t) decoded, &spec, pixels))
            snprintf (error, size, "its b64 image does not decode: %s",
                      za_image_error (*decoder));
        else {
            for (size_t k = 0; k < row; k++)
                out [k] = pixels [k];
            rc = 0;
        }
        free (bytes), free (pixels);
        return rc;
    }
    int64_t dims [4] = {0};
    int ndim = s_shape (value, dims);
    int fits = (ndim == 3 && dims [0] == in.height && dims [1] == in.width
                && dims [2] == in.channels)
            || (ndim == 2 && in.channels == 1 && dims [0] == in.height && dims [1] == in.width)
            || (ndim == 1 && (size_t) dims [0] == row);
    size_t at = 0;
    if (fits && s_fill (value, dims, ndim, out, &at) == 0 && at == row)
        return 0;
    char shape [96] = "a value";
    for (int d = 0, used = 0; d < ndim && used < 80; d++)
        used += snprintf (shape + used, sizeof shape - (size_t) used, "%s%lld%s",
                          d? ", ": "[", (long long) dims [d], d + 1 == ndim? "]": "");
    snprintf (error, size, "%s %s; the model takes [%d, %d, %d] of numbers 0 .. 255%s, "
              "%zu numbers flat, or {\"b64\": a JPEG or PNG}", fits? "not a rectangular "
              "array of numbers:": "its shape is", ndim < 0? "of more than 4 dims": shape,
              in.height, in.width, in.channels, in.channels == 1? " (or [H, W])": "", row);
    return -1;
}

//  The answer for the job: row format (one object per instance) or
//  columnar (one array per output).
static json_t *
s_answer_json (const s_job_t *job, int columnar)
{
    za_predictor_t *p = job->model->predictor;
    json_t *rows = json_array (), *columns = json_object ();
    json_t *all_logits = json_array (), *all_p = json_array (), *all_ids = json_array (),
           *all_classes = json_array ();
    for (int i = 0; i < job->n; i++) {
        const float *l = job->logits + (size_t) i * job->classes;
        const float *q = job->probabilities + (size_t) i * job->classes;
        json_t *logits = json_array (), *probabilities = json_array ();
        int best = 0;
        for (int k = 0; k < job->classes; k++) {
            json_array_append_new (logits, json_real (l [k]));
            json_array_append_new (probabilities, json_real (q [k]));
            best = l [k] > l [best]? k: best;
        }
        char number [16];
        snprintf (number, sizeof number, "%d", best);
        const char *name = za_predictor_class_name (p, best);
        if (columnar) {
            json_array_append_new (all_logits, logits);
            json_array_append_new (all_p, probabilities);
            json_array_append_new (all_ids, json_pack ("[i]", best));
            json_array_append_new (all_classes, json_pack ("[s]", name? name: number));
        }
        else
            json_array_append_new (rows, json_pack ("{s:o, s:o, s:[i], s:[s]}", "logits",
                                                    logits, "probabilities", probabilities,
                                                    "class_ids", best, "classes",
                                                    name? name: number));
    }
    json_object_set_new (columns, "logits", all_logits);
    json_object_set_new (columns, "probabilities", all_p);
    json_object_set_new (columns, "class_ids", all_ids);
    json_object_set_new (columns, "classes", all_classes);
    json_t *answer = columnar? json_pack ("{s:o}", "outputs", columns)
                             : json_pack ("{s:o}", "predictions", rows);
    json_decref (columnar? rows: columns);
    return answer;
}

//  A predict request's body into an answer (*status its HTTP status).
static json_t *
s_predict (s_server_t *self, const char *body, size_t size, unsigned *status)
{
    char error [ERROR_CHARS] = "";
    json_error_t parse;
    json_t *root = json_loadb (body, size, 0, &parse);
    *status = MHD_HTTP_BAD_REQUEST;
    if (!root)
        return json_pack ("{s:s+}", "error", "JSON Parse error: ", parse.text);
    json_t *instances = json_object_get (root, "instances");
    json_t *inputs = json_object_get (root, "inputs");
    if (json_is_object (inputs) && json_object_get (inputs, "pixels"))
        inputs = json_object_get (inputs, "pixels");
    json_t *list = instances? instances: inputs;
    if (!json_is_object (root) || !list || (instances && inputs)) {
        json_decref (root);
        return json_pack ("{s:s}", "error", instances && inputs
                          ? "Both 'instances' and 'inputs' were specified"
                          : "Missing 'inputs' or 'instances' key");
    }
    if (!json_is_array (list)) {
        json_decref (root);
        return json_pack ("{s:s}", "error", "'instances' (or 'inputs') is not a list of "
                          "images");
    }
    s_model_t *model = s_model_take (self);
    za_input_shape_t in = za_predictor_input (model->predictor);
    s_model_give (self, model);
    size_t row = (size_t) in.height * in.width * in.channels;
    s_job_t job = {.n = (int) json_array_size (list), .row = row};
    job.pixels = malloc (((size_t) job.n + 1) * row * sizeof (float));
    za_image_decoder_t *decoder = NULL;
    int bad = job.pixels? 0: -1;
    if (bad)
        snprintf (error, sizeof error, "out of memory for %d images", job.n);
    for (int i = 0; i < job.n && !bad; i++) {
        char why [ERROR_CHARS - 32];
        if ((bad = s_instance (json_array_get (list, (size_t) i), in, self->s, &decoder,
                               job.pixels + (size_t) i * row, why, sizeof why)))
            snprintf (error, sizeof error, "instance %d: %s", i, why);
    }
    za_image_decoder_destroy (&decoder);
    json_decref (root);
    json_t *answer = NULL;
    if (bad)
        answer = json_pack ("{s:s}", "error", error);
    else
    if (job.n == 0) {
        *status = MHD_HTTP_OK;
        answer = instances? json_pack ("{s:[]}", "predictions"): json_pack ("{s:{}}", "outputs");
    }
    else {
        s_job_run (self, &job);
        self->instances += job.n;
        if (job.rc) {
            *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            answer = json_pack ("{s:s}", "error", job.error);
        }
        else {
            *status = MHD_HTTP_OK;
            answer = s_answer_json (&job, instances == NULL);
        }
        if (job.model)
            s_model_give (self, job.model);
    }
    free (job.pixels), free (job.logits), free (job.probabilities);
    return answer;
}

//  GET /v1/models/NAME: TF Serving's version status.
static json_t *
s_status (s_server_t *self)
{
    s_model_t *model = s_model_take (self);
    char version [32];
    snprintf (version, sizeof version, "%lld", (long long) model->step);
    s_model_give (self, model);
    return json_pack ("{s:[{s:s, s:s, s:{s:s, s:s}}]}", "model_version_status", "version",
                      version, "state", "AVAILABLE", "status", "error_code", "OK",
                      "error_message", "");
}

//  A TensorInfo of TF Serving's metadata: its name, dtype and dims (-1:
//  the batch's).
static json_t *
s_tensor_info (const char *name, const char *dtype, int ndim, const int64_t *dims)
{
    json_t *list = json_array ();
    for (int d = 0; d < ndim; d++) {
        char size [24];
        snprintf (size, sizeof size, "%lld", (long long) dims [d]);
        json_array_append_new (list, json_pack ("{s:s}", "size", size));
    }
    return json_pack ("{s:s, s:s, s:{s:o}}", "name", name, "dtype", dtype, "tensor_shape",
                      "dim", list);
}

//  GET /v1/models/NAME/metadata: the signature, as TF Serving lists one.
static json_t *
s_metadata (s_server_t *self)
{
    s_model_t *model = s_model_take (self);
    za_predictor_t *p = model->predictor;
    za_input_shape_t in = za_predictor_input (p);
    int64_t pixels [4] = {-1, in.height, in.width, in.channels};
    int64_t per_class [2] = {-1, za_predictor_classes (p)}, one [2] = {-1, 1};
    char version [32];
    snprintf (version, sizeof version, "%lld", (long long) model->step);
    json_t *outputs = json_object ();
    json_object_set_new (outputs, "logits", s_tensor_info ("logits", "DT_FLOAT", 2, per_class));
    json_object_set_new (outputs, "probabilities",
                         s_tensor_info ("probabilities", "DT_FLOAT", 2, per_class));
    json_object_set_new (outputs, "class_ids", s_tensor_info ("class_ids", "DT_INT64", 2, one));
    json_object_set_new (outputs, "classes", s_tensor_info ("classes", "DT_STRING", 2, one));
    json_t *signature = json_pack ("{s:{s:o}, s:o, s:s}", "inputs", "pixels",
                                   s_tensor_info ("pixels", "DT_FLOAT", 4, pixels), "outputs",
                                   outputs, "method_name", "tensorflow/serving/predict");
    json_t *answer = json_pack ("{s:{s:s, s:n, s:s}, s:{s:{s:{s:o}}, s:s}}", "model_spec",
                                "name", self->name, "signature_name", "version", version,
                                "metadata", "signature_def", "signature_def",
                                "serving_default", signature, "model",
                                za_predictor_model (p));
    s_model_give (self, model);
    return answer;
}

static char *
s_metrics_text (s_server_t *self)
{
    s_model_t *model = s_model_take (self);
    long long step = (long long) model->step;
    s_model_give (self, model);
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream (&text, &size);
    if (!out)
        return NULL;
    fprintf (out, "# HELP zactor_serve_requests_total HTTP requests answered, by status class.\n"
                  "# TYPE zactor_serve_requests_total counter\n");
    static const char *classes [] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    for (int k = 0; k < 5; k++)
        fprintf (out, "zactor_serve_requests_total{model=\"%s\",code=\"%s\"} %lld\n",
                 self->name, classes [k], (long long) self->requests [k]);
    fprintf (out, "# HELP zactor_serve_instances_total Images predicted.\n"
                  "# TYPE zactor_serve_instances_total counter\n"
                  "zactor_serve_instances_total{model=\"%s\"} %lld\n"
                  "# HELP zactor_serve_batches_total Batches run (requests batched together).\n"
                  "# TYPE zactor_serve_batches_total counter\n"
                  "zactor_serve_batches_total{model=\"%s\"} %lld\n"
                  "# HELP zactor_serve_batch_instances_total Images in those batches.\n"
                  "# TYPE zactor_serve_batch_instances_total counter\n"
                  "zactor_serve_batch_instances_total{model=\"%s\"} %lld\n"
                  "# HELP zactor_serve_request_seconds_total Time spent answering predict "
                  "requests.\n"
                  "# TYPE zactor_serve_request_seconds_total counter\n"
                  "zactor_serve_request_seconds_total{model=\"%s\"} %.6f\n"
                  "# HELP zactor_serve_model_step The global step of the checkpoint served.\n"
                  "# TYPE zactor_serve_model_step gauge\n"
                  "zactor_serve_model_step{model=\"%s\"} %lld\n"
                  "# HELP zactor_serve_reloads_total Newer checkpoints swapped in, and those "
                  "that did not load.\n"
                  "# TYPE zactor_serve_reloads_total counter\n"
                  "zactor_serve_reloads_total{model=\"%s\",result=\"loaded\"} %lld\n"
                  "zactor_serve_reloads_total{model=\"%s\",result=\"failed\"} %lld\n",
             self->name, (long long) self->instances, self->name, (long long) self->batches,
             self->name, (long long) self->batched_instances, self->name,
             (double) self->latency_us / 1e6, self->name, step, self->name,
             (long long) self->reloads, self->name, (long long) self->reload_failures);
    fclose (out);
    return text;
}

static enum MHD_Result
s_send (struct MHD_Connection *connection, unsigned status, char *body, const char *type,
        const char *allow)
{
    struct MHD_Response *response = body? MHD_create_response_from_buffer (
        strlen (body), body, MHD_RESPMEM_MUST_FREE): NULL;
    if (!response) {
        free (body);
        return MHD_NO;
    }
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (allow)
        MHD_add_response_header (response, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result rc = MHD_queue_response (connection, status, response);
    MHD_destroy_response (response);
    return rc;
}

static enum MHD_Result
s_send_json (s_server_t *self, struct MHD_Connection *connection, unsigned status,
             json_t *json, const char *allow)
{
    char *body = json? json_dumps (json, JSON_COMPACT | JSON_REAL_PRECISION (9)): NULL;
    json_decref (json);
    self->requests [status / 100 - 1 < 5? status / 100 - 1: 4]++;
    return s_send (connection, status, body, "application/json", allow);
}

static enum MHD_Result
s_error (s_server_t *self, struct MHD_Connection *connection, unsigned status,
         const char *allow, const char *fmt, const char *a, const char *b)
{
    char message [ERROR_CHARS];
    snprintf (message, sizeof message, fmt, a, b);
    return s_send_json (self, connection, status, json_pack ("{s:s}", "error", message), allow);
}

//  Routes a whole request.
static enum MHD_Result
s_route (s_server_t *self, struct MHD_Connection *connection, const char *url,
         const char *method, s_request_t *request)
{
    int get = !strcmp (method, "GET") || !strcmp (method, "HEAD");
    int post = !strcmp (method, "POST");
    if (!strcmp (url, "/monitoring/prometheus/metrics") || !strcmp (url, "/metrics")) {
        if (!get)
            return s_error (self, connection, MHD_HTTP_METHOD_NOT_ALLOWED, "GET, HEAD",
                            "%s %s: metrics are read with GET", method, url);
        self->requests [1]++;
        return s_send (connection, MHD_HTTP_OK, s_metrics_text (self),
                       "text/plain; version=0.0.4; charset=utf-8", NULL);
    }
    static const char prefix [] = "/v1/models/";
    if (strncmp (url, prefix, sizeof prefix - 1))
        return s_error (self, connection, MHD_HTTP_NOT_FOUND, NULL,
                        "Malformed request: %s %s", method, url);
    //  NAME, then /versions/V, then :predict or /metadata or nothing.
    const char *name = url + sizeof prefix - 1;
    size_t length = strcspn (name, "/:");
    const char *rest = name + length;
    char version [32] = "";
    if (!strncmp (rest, "/versions/", 10)) {
        size_t digits = strcspn (rest + 10, "/:");
        snprintf (version, sizeof version, "%.*s", (int) (digits < 31? digits: 31), rest + 10);
        rest += 10 + digits;
    }
    int predict = !strcmp (rest, ":predict"), metadata = !strcmp (rest, "/metadata");
    if (!predict && !metadata && *rest)
        return s_error (self, connection, MHD_HTTP_NOT_FOUND, NULL,
                        "Malformed request: %s %s", method, url);
    char wanted [NAME_CHARS];
    snprintf (wanted, sizeof wanted, "%.*s", (int) (length < NAME_CHARS - 1? length
                                                    : NAME_CHARS - 1), name);
    if (strcmp (wanted, self->name))
        return s_error (self, connection, MHD_HTTP_NOT_FOUND, NULL,
                        "Servable not found for request: Latest(%s)%s", wanted, "");
    if (*version) {
        s_model_t *model = s_model_take (self);
        char serving [32];
        snprintf (serving, sizeof serving, "%lld", (long long) model->step);
        s_model_give (self, model);
        if (strcmp (version, serving)) {
            char what [NAME_CHARS + 64];
            snprintf (what, sizeof what, "%s, %s", wanted, version);
            return s_error (self, connection, MHD_HTTP_NOT_FOUND, NULL,
                            "Servable not found for request: Specific(%s)%s", what, "");
        }
    }
    if (predict != post)
        return s_error (self, connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                        predict? "POST": "GET, HEAD", "%s %s: not this method", method, url);
    if (metadata)
        return s_send_json (self, connection, MHD_HTTP_OK, s_metadata (self), NULL);
    if (!predict)
        return s_send_json (self, connection, MHD_HTTP_OK, s_status (self), NULL);
    unsigned status;
    json_t *answer = s_predict (self, request->body? request->body: "", request->size,
                                &status);
    self->latency_us += (long long) ((za_clock_mono () - request->started) * 1e6);
    return s_send_json (self, connection, status, answer, NULL);
}

static enum MHD_Result
s_on_request (void *cls, struct MHD_Connection *connection, const char *url,
              const char *method, const char *http_version, const char *upload_data,
              size_t *upload_data_size, void **con_cls)
{
    (void) http_version;
    s_server_t *self = (s_server_t *) cls;
    s_request_t *request = (s_request_t *) *con_cls;
    if (!request) {                     //  the headers: a new request
        request = calloc (1, sizeof *request);
        if (!request)
            return MHD_NO;
        request->started = za_clock_mono ();
        *con_cls = request;
        return MHD_YES;
    }
    if (*upload_data_size) {            //  a part of the body
        size_t more = *upload_data_size;
        *upload_data_size = 0;
        if (request->too_large || request->size + more > (size_t) self->s->max_body_bytes) {
            request->too_large = 1;
            return MHD_YES;             //  read on, answer once it ends
        }
        if (request->size + more + 1 > request->capacity) {
            size_t capacity = request->capacity? request->capacity: 65536;
            while (capacity < request->size + more + 1)
                capacity *= 2;
            char *grown = realloc (request->body, capacity);
            if (!grown) {
                request->too_large = 1;
                return MHD_YES;
            }
            request->body = grown, request->capacity = capacity;
        }
        memcpy (request->body + request->size, upload_data, more);
        request->size += more;
        return MHD_YES;
    }
    if (request->too_large) {
        char limit [32];
        snprintf (limit, sizeof limit, "%lld", (long long) self->s->max_body_bytes);
        return s_error (self, connection, 413, NULL,
                        "the request's body is larger than %s bytes (--max-body-bytes)%s",
                        limit, "");
    }
    return s_route (self, connection, url, method, request);
}

static void
s_on_completed (void *cls, struct MHD_Connection *connection, void **con_cls,
                enum MHD_RequestTerminationCode code)
{
    (void) cls, (void) connection, (void) code;
    s_request_t *request = (s_request_t *) *con_cls;
    if (request)
        free (request->body);
    free (request);
    *con_cls = NULL;
}

//  The model's name: --model-name, else the model dir's last part.
static void
s_name (s_server_t *self)
{
    const char *dir = self->s->run.model_dir;
    if (self->s->model_name) {
        snprintf (self->name, sizeof self->name, "%s", self->s->model_name);
        return;
    }
    size_t end = strlen (dir);
    while (end > 1 && dir [end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && dir [start - 1] != '/')
        start--;
    snprintf (self->name, sizeof self->name, "%.*s", (int) (end - start), dir + start);
}

static int
s_start (s_server_t *self)
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
    self->daemon = MHD_start_daemon (flags, (uint16_t) s->port, NULL, NULL, s_on_request, self,
                                     MHD_OPTION_SOCK_ADDR, found->ai_addr,
                                     MHD_OPTION_NOTIFY_COMPLETED, s_on_completed, self,
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
    s_server_t *self = calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return 1;
    }
    self->s = s;
    s_name (self);
    pthread_mutex_init (&self->model_lock, NULL);
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->queued, NULL);
    pthread_cond_init (&self->finished, NULL);
    int rc = (self->model = s_model_load (s))? 0: 1;
    long cores = sysconf (_SC_NPROCESSORS_ONLN);
    self->batcher_count = s->num_batch_threads > 0? (int) s->num_batch_threads
                        : cores > 0? (int) cores: 1;
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
        za_info ("serving %s (step %lld: %s, input %dx%dx%d) at http://%s:%u/v1/models/%s"
                 ":predict; batches of up to %lld after %lld us on %d threads; Ctrl-C stops",
                 s->run.model_dir, (long long) self->model->step,
                 za_predictor_model (self->model->predictor), in.height, in.width,
                 in.channels, s->listen, info? info->port: (unsigned) s->port, self->name,
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
    if (self->model) {
        za_predictor_destroy (&self->model->predictor);
        free (self->model);
    }
    free (self->batchers);
    pthread_mutex_destroy (&self->model_lock);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->queued);
    pthread_cond_destroy (&self->finished);
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
