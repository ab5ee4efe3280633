/*  za_serve_http.c: the server's HTTP requests, TF Serving's REST API:
    routing, instances read from JSON (or decoded from base64 images), the
    answers, the errors and the metrics text.                               */
#ifdef ZA_HAVE_MHD
#include "za_serve_private.h"

#include "za/za_image.h"
#include "za/za_util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NAME_CHARS ZA_SERVE_NAME_CHARS
#define ERROR_CHARS ZA_SERVE_ERROR_CHARS
//  What one request's images may take as the model's input (floats), in
//  bodies of --max-body-bytes (1 GiB at its default 64 MiB).
#define INPUT_PER_BODY 16

//  Standard or URL-safe base64 into out (size at least 3/4 of the text's).
//  Its length, or -1 when the text is not base64 (anything but at most two
//  '=' after the first '=' included).
static long
s_base64 (const char *text, uint8_t *out)
{
    uint32_t bits = 0;
    int held = 0;
    long length = 0;
    const char *pad = strchr (text, '=');
    if (pad && (pad [strspn (pad, "=")] || strlen (pad) > 2))
        return -1;
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
        //  (1e39 is no float: infinite, as TensorFlow would take it, is no pixel.)
        float number = (float) json_number_value (value);
        if (!json_is_number (value) || !isfinite (number))
            return -1;
        out [(*at)++] = number;
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
s_instance (json_t *value, const za_image_spec_t *in, za_image_decoder_t **decoder,
            float *out, char *error, size_t size)
{
    size_t row = (size_t) in->height * in->width * in->channels;
    if (json_is_object (value) && json_object_get (value, "pixels"))
        value = json_object_get (value, "pixels");
    const char *b64 = json_string_value (json_object_get (value, "b64"));
    if (b64 && json_object_size (value) != 1) {
        snprintf (error, size, "its {\"b64\": ...} object holds other keys too (TensorFlow "
                  "Serving's binary value is the object of b64 alone)");
        return -1;
    }
    if (b64) {
        size_t length = strlen (b64);
        uint8_t *bytes = malloc (length * 3 / 4 + 4), *pixels = malloc (row);
        long decoded = bytes? s_base64 (b64, bytes): -1;
        if (!*decoder)
            *decoder = za_image_decoder_new ();
        int rc = -1;
        if (decoded < 0)
            snprintf (error, size, "its b64 is not base64");
        else
        if (!pixels || !*decoder)
            snprintf (error, size, "out of memory");
        else
        if (za_image_decode (*decoder, bytes, (size_t) decoded, in, pixels))
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
    int fits = (ndim == 3 && dims [0] == in->height && dims [1] == in->width
                && dims [2] == in->channels)
            || (ndim == 2 && in->channels == 1 && dims [0] == in->height
                && dims [1] == in->width)
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
              "array of finite (float) numbers:": "its shape is",
              ndim < 0? "of more than 4 dims": shape,
              in->height, in->width, in->channels, in->channels == 1? " (or [H, W])": "", row);
    return -1;
}

//  The answer for the job: row format (one object per instance) or
//  columnar (one array per output).
static json_t *
s_answer_json (const za_serve_job_t *job, int columnar)
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

//  A predict request's body read into job (its pixels, from numbers or
//  decoded images; *columnar for "inputs"): NULL, or the error's answer.
static json_t *
s_read_job (za_serve_t *self, const char *body, size_t size, za_serve_job_t *job,
            int *columnar)
{
    char error [ERROR_CHARS] = "";
    json_error_t parse;
    json_t *root = json_loadb (body, size, 0, &parse);
    if (!root)
        return json_pack ("{s:s+}", "error", "JSON Parse error: ", parse.text);
    json_t *instances = json_object_get (root, "instances");
    json_t *inputs = json_object_get (root, "inputs");
    if (json_is_object (inputs) && json_object_get (inputs, "pixels"))
        inputs = json_object_get (inputs, "pixels");
    json_t *list = instances? instances: inputs;
    *columnar = instances == NULL;
    json_t *answer = NULL;
    //  The model has one signature, TF Serving's default one ("" names it too).
    json_t *signature = json_object_get (root, "signature_name");
    const char *named = json_string_value (signature);
    if (signature && !(named && (!*named || streq (named, "serving_default"))))
        answer = json_pack ("{s:s++}", "error", "Serving signature name: \"",
                            named? named: "(not a string)", "\" not found in signature def");
    else
    if (!json_is_object (root) || !list || (instances && inputs))
        answer = json_pack ("{s:s}", "error", instances && inputs
                            ? "Both 'instances' and 'inputs' were specified"
                            : "Missing 'inputs' or 'instances' key");
    else
    if (!json_is_array (list))
        answer = json_pack ("{s:s}", "error", "'instances' (or 'inputs') is not a list of "
                            "images");
    else
    if (json_array_size (list) == 0)    //  TensorFlow Serving's words
        answer = json_pack ("{s:s}", "error", instances? "No values in 'instances' array"
                                                       : "No values in 'inputs' array");
    if (answer) {
        json_decref (root);
        return answer;
    }
    za_serve_model_t *model = za_serve_model_take (self);
    za_image_spec_t in = za_predictor_image (model->predictor);
    za_serve_model_give (self, model);
    size_t row = (size_t) in.height * in.width * in.channels;
    job->n = (int) json_array_size (list);
    job->row = row;
    //  A 92-byte PNG is 786 KB of 256 x 256 x 3 floats: the images of one
    //  request are bounded as the model takes them, not only by the body.
    size_t most_bytes = (size_t) self->s->max_body_bytes * INPUT_PER_BODY;
    size_t most = most_bytes / sizeof (float) / row;
    if ((size_t) job->n > most) {
        json_decref (root);
        snprintf (error, sizeof error, "%d instances: at most %zu go in one request (%zu MiB "
                  "of the model's %dx%dx%d input, %d x --max-body-bytes): send them in parts",
                  job->n, most, most_bytes >> 20, in.height, in.width, in.channels,
                  INPUT_PER_BODY);
        return json_pack ("{s:s}", "error", error);
    }
    job->pixels = malloc (((size_t) job->n + 1) * row * sizeof (float));
    za_image_decoder_t *decoder = NULL;
    int bad = job->pixels? 0: -1;
    if (bad)
        snprintf (error, sizeof error, "out of memory for %d images", job->n);
    for (int i = 0; i < job->n && !bad; i++) {
        char why [ERROR_CHARS - 32];
        if ((bad = s_instance (json_array_get (list, (size_t) i), &in, &decoder,
                               job->pixels + (size_t) i * row, why, sizeof why)))
            snprintf (error, sizeof error, "instance %d: %s", i, why);
    }
    za_image_decoder_destroy (&decoder);
    json_decref (root);
    return bad? json_pack ("{s:s}", "error", error): NULL;
}

//  A predict request's body into an answer (*status its HTTP status). Its
//  body is read (its images decoded) by at most batcher_count requests at
//  once; the batches then take any number.
static json_t *
s_predict (za_serve_t *self, const char *body, size_t size, unsigned *status)
{
    za_serve_job_t job = {0};
    int columnar = 0;
    while (sem_wait (&self->decoding) && errno == EINTR)
        ;
    json_t *answer = s_read_job (self, body, size, &job, &columnar);
    sem_post (&self->decoding);
    *status = MHD_HTTP_BAD_REQUEST;
    if (!answer) {
        za_serve_job_run (self, &job);
        self->instances += job.n;
        if (job.rc) {
            *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            answer = json_pack ("{s:s}", "error", job.error);
        }
        else {
            *status = MHD_HTTP_OK;
            answer = s_answer_json (&job, columnar);
        }
        if (job.model)
            za_serve_model_give (self, job.model);
    }
    free (job.pixels), free (job.logits), free (job.probabilities);
    return answer;
}

//  GET /v1/models/NAME: TF Serving's version status.
static json_t *
s_status (za_serve_t *self)
{
    za_serve_model_t *model = za_serve_model_take (self);
    char version [32];
    snprintf (version, sizeof version, "%lld", (long long) model->step);
    za_serve_model_give (self, model);
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
s_metadata (za_serve_t *self)
{
    za_serve_model_t *model = za_serve_model_take (self);
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
    za_serve_model_give (self, model);
    return answer;
}

static char *
s_metrics_text (za_serve_t *self)
{
    za_serve_model_t *model = za_serve_model_take (self);
    long long step = (long long) model->step;
    za_serve_model_give (self, model);
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
s_send_json (za_serve_t *self, struct MHD_Connection *connection, unsigned status,
             json_t *json, const char *allow)
{
    char *body = json? json_dumps (json, JSON_COMPACT | JSON_REAL_PRECISION (9)): NULL;
    json_decref (json);
    self->requests [status / 100 - 1 < 5? status / 100 - 1: 4]++;
    return s_send (connection, status, body, "application/json", allow);
}

static enum MHD_Result
s_error (za_serve_t *self, struct MHD_Connection *connection, unsigned status,
         const char *allow, const char *fmt, const char *a, const char *b)
{
    char message [ERROR_CHARS];
    snprintf (message, sizeof message, fmt, a, b);
    return s_send_json (self, connection, status, json_pack ("{s:s}", "error", message), allow);
}

//  Routes a whole request.
static enum MHD_Result
s_route (za_serve_t *self, struct MHD_Connection *connection, const char *url,
         const char *method, za_serve_request_t *request)
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
        //  A version is a number (TensorFlow Serving's int64): "030" is 30.
        if (!digits || digits > 18 || strspn (version, "0123456789") != strlen (version))
            return s_error (self, connection, MHD_HTTP_BAD_REQUEST, NULL,
                            "Malformed request: %s %s (a version is a number)", method, url);
        snprintf (version, sizeof version, "%lld", strtoll (version, NULL, 10));
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
        za_serve_model_t *model = za_serve_model_take (self);
        char serving [32];
        snprintf (serving, sizeof serving, "%lld", (long long) model->step);
        za_serve_model_give (self, model);
        if (strcmp (version, serving)) {
            char what [NAME_CHARS + 64];
            snprintf (what, sizeof what, "%s, %s", wanted, version);
            return s_error (self, connection, MHD_HTTP_NOT_FOUND, NULL,
                            "Servable not found for request: Specific(%s)%s", what, "");
        }
    }
    if (predict? !post: !get)
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
s_too_large (za_serve_t *self, struct MHD_Connection *connection)
{
    char limit [32];
    snprintf (limit, sizeof limit, "%lld", (long long) self->s->max_body_bytes);
    return s_error (self, connection, 413, NULL,
                    "the request's body is larger than %s bytes (--max-body-bytes)%s",
                    limit, "");
}

enum MHD_Result
za_serve_on_request (void *cls, struct MHD_Connection *connection, const char *url,
              const char *method, const char *http_version, const char *upload_data,
              size_t *upload_data_size, void **con_cls)
{
    (void) http_version;
    za_serve_t *self = (za_serve_t *) cls;
    za_serve_request_t *request = (za_serve_request_t *) *con_cls;
    if (!request) {                     //  the headers: a new request
        request = calloc (1, sizeof *request);
        if (!request)
            return MHD_NO;
        request->started = za_clock_mono ();
        *con_cls = request;
        //  A client that waits for "100 Continue" before it sends a body its
        //  Content-Length says is too large is told now (413), the body
        //  never sent. (One that sends at once is read to the end first: a
        //  connection closed on unread data may lose the answer to a reset.)
        const char *length = MHD_lookup_connection_value (connection, MHD_HEADER_KIND,
                                                          MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *expect = MHD_lookup_connection_value (connection, MHD_HEADER_KIND,
                                                          MHD_HTTP_HEADER_EXPECT);
        if (length && expect && !strcasecmp (expect, "100-continue")
            && strtoull (length, NULL, 10) > (unsigned long long) self->s->max_body_bytes)
            return s_too_large (self, connection);
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
    if (request->too_large)
        return s_too_large (self, connection);
    return s_route (self, connection, url, method, request);
}

void
za_serve_on_completed (void *cls, struct MHD_Connection *connection, void **con_cls,
                enum MHD_RequestTerminationCode code)
{
    (void) cls, (void) connection, (void) code;
    za_serve_request_t *request = (za_serve_request_t *) *con_cls;
    if (request)
        free (request->body);
    free (request);
    *con_cls = NULL;
}

#endif
