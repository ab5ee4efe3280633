/*  za_metrics.c: the broker's Prometheus endpoint (za_metrics.h).           */
#include "za/za_metrics.h"
#include "za/za_util.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZA_HAVE_MHD
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#endif

#define METRICS_CONNECTIONS_MAX 32      //  a scraper or two, and room for a crowd
#define METRICS_TIMEOUT_SECS 10         //  a connection that says nothing is closed

// ---------------------------------------------------------------------------
//  The exposition text

typedef struct {
    char *text;
    size_t length, capacity;
    int failed;
} s_text_t;

static void
s_append (s_text_t *self, const char *fmt, ...)
{
    if (self->failed)
        return;
    va_list args;
    va_start (args, fmt);
    int n = vsnprintf (NULL, 0, fmt, args);
    va_end (args);
    if (n < 0 || (self->length + (size_t) n + 1 > self->capacity
                  && !(self->text = realloc (self->text,
                                             self->capacity = 2 * (self->length + (size_t) n
                                                                   + 1024))))) {
        self->failed = 1;
        return;
    }
    va_start (args, fmt);
    vsnprintf (self->text + self->length, self->capacity - self->length, fmt, args);
    va_end (args);
    self->length += (size_t) n;
}

//  A label value as the format quotes it: \\, \" and \n escaped.
static void
s_append_label (s_text_t *self, const char *value)
{
    for (const char *c = value? value: ""; *c; c++)
        if (*c == '\\' || *c == '"')
            s_append (self, "\\%c", *c);
        else
        if (*c == '\n')
            s_append (self, "\\n");
        else
            s_append (self, "%c", *c);
}

static void
s_header (s_text_t *self, const char *name, const char *type, const char *help)
{
    s_append (self, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

//  `name{role="R",index="I",host="H"` of a task's row: the caller closes it.
static void
s_task_series (s_text_t *self, const char *name, const json_t *row)
{
    s_append (self, "%s{role=\"", name);
    s_append_label (self, json_string_value (json_object_get (row, "role")));
    s_append (self, "\",index=\"%" JSON_INTEGER_FORMAT "\",host=\"",
              json_integer_value (json_object_get (row, "index")));
    s_append_label (self, json_string_value (json_object_get (row, "host")));
    s_append (self, "\"");
}

//  The per-task metrics: (name, state key, type, help).
static const struct {
    const char *name, *key, *type, *help;
} s_task_metrics [] = {
    {"zactor_task_global_step", "global_step", "gauge", "The global step of the task's last report."},
    {"zactor_task_steps_per_second", "steps_per_sec", "gauge", "Global steps per second the task reported."},
    {"zactor_task_examples_per_second", "examples_per_sec", "gauge", "Training examples per second the task reported."},
    {"zactor_task_loss", "loss", "gauge", "The training loss the task reported last."},
    {"zactor_task_eval_accuracy", "eval_accuracy", "gauge", "The accuracy of the task's last evaluation."},
    {"zactor_task_eval_step", "eval_step", "gauge", "The global step of the task's last evaluation."},
    {"zactor_task_restarts_total", "restarts", "counter", "Times the task was restarted."},
    {"zactor_task_bad_images_total", "bad_images", "counter", "Input images the task skipped: they could not be decoded."},
    {"zactor_task_heartbeat_age_seconds", "heartbeat_age_secs", "gauge", "Seconds since the broker last heard from the task."},
    {"zactor_task_slowdown", "slowdown", "gauge", "A trainer's own time per step over the other trainers' median (waits for them not counted)."},
};

char *
za_metrics_render (const json_t *state)
{
    s_text_t out = {0};
    const json_t *roles = json_object_get (state, "roles");
    size_t i;
    const json_t *row;
    for (size_t m = 0; m < sizeof s_task_metrics / sizeof s_task_metrics [0]; m++) {
        s_header (&out, s_task_metrics [m].name, s_task_metrics [m].type,
                  s_task_metrics [m].help);
        json_array_foreach (roles, i, row) {
            //  A value the task has not reported (no evaluation yet, never
            //  heard from) is no sample at all, not a made-up 0.
            const json_t *value = json_object_get (row, s_task_metrics [m].key);
            if (json_is_number (value)) {
                s_task_series (&out, s_task_metrics [m].name, row);
                s_append (&out, "} %.17g\n", json_number_value (value));
            }
        }
    }
    s_header (&out, "zactor_task_state", "gauge",
              "1 for the task's state (running, waiting, recovering, done, backoff, lost, ...).");
    json_array_foreach (roles, i, row) {
        s_task_series (&out, "zactor_task_state", row);
        s_append (&out, ",state=\"");
        s_append_label (&out, json_string_value (json_object_get (row, "state")));
        s_append (&out, "\"} 1\n");
    }
    s_header (&out, "zactor_task_step_seconds", "gauge", "A trainer's recent time per step.");
    json_array_foreach (roles, i, row) {
        const json_t *step_ms = json_object_get (row, "step_ms");
        if (json_is_number (step_ms)) {
            s_task_series (&out, "zactor_task_step_seconds", row);
            s_append (&out, "} %.17g\n", json_number_value (step_ms) / 1e3);
        }
    }
    s_header (&out, "zactor_task_straggler", "gauge",
              "1 while the broker names the trainer a straggler (--straggler-factor), with "
              "the phase it is slowest in.");
    json_array_foreach (roles, i, row) {
        const json_t *straggler = json_object_get (row, "straggler");
        if (!json_is_boolean (straggler))
            continue;
        s_task_series (&out, "zactor_task_straggler", row);
        s_append (&out, ",phase=\"");
        s_append_label (&out, json_is_true (straggler)
                        ? json_string_value (json_object_get (row, "slowest_phase")): "");
        s_append (&out, "\"} %d\n", json_is_true (straggler));
    }
    const json_t *job = json_object_get (state, "job"), *broker = json_object_get (state, "broker");
    s_header (&out, "zactor_job_global_step", "gauge", "The job's global step (the chief's).");
    s_append (&out, "zactor_job_global_step %" JSON_INTEGER_FORMAT "\n",
              json_integer_value (json_object_get (state, "global_step")));
    s_header (&out, "zactor_job_max_steps", "gauge", "The step the job trains to.");
    s_append (&out, "zactor_job_max_steps %" JSON_INTEGER_FORMAT "\n",
              json_integer_value (json_object_get (job, "max_steps")));
    const json_t *membership = json_object_get (state, "membership");
    if (membership) {
        s_header (&out, "zactor_job_members", "gauge",
                  "Trainers (the chief and the workers) in the job now.");
        s_append (&out, "zactor_job_members %" JSON_INTEGER_FORMAT "\n",
                  json_integer_value (json_object_get (membership, "members")));
        s_header (&out, "zactor_job_membership_changes_total", "counter",
                  "Times an elastic job's trainers changed (workers joined or were dropped).");
        s_append (&out, "zactor_job_membership_changes_total %" JSON_INTEGER_FORMAT "\n",
                  json_integer_value (json_object_get (membership, "changes")));
    }
    s_header (&out, "zactor_job_done", "gauge", "1 once every task of the job has finished.");
    s_append (&out, "zactor_job_done %d\n", json_is_true (json_object_get (state, "done")));
    s_header (&out, "zactor_broker_uptime_seconds", "gauge", "Seconds since this broker started.");
    s_append (&out, "zactor_broker_uptime_seconds %.17g\n",
              json_number_value (json_object_get (broker, "uptime_secs")));
    s_header (&out, "zactor_broker_restarts_total", "counter", "Times the broker was restarted.");
    s_append (&out, "zactor_broker_restarts_total %" JSON_INTEGER_FORMAT "\n",
              json_integer_value (json_object_get (broker, "restarts")));
    s_header (&out, "zactor_broker_dropped_total", "counter",
              "Messages to the broker that did not decode.");
    s_append (&out, "zactor_broker_dropped_total %" JSON_INTEGER_FORMAT "\n",
              json_integer_value (json_object_get (broker, "dropped")));
    s_header (&out, "zactor_events_total", "counter",
              "The job's events (starts, registrations, failures, restarts, ...) by kind.");
    const char *event;
    const json_t *count;
    json_object_foreach ((json_t *) json_object_get (state, "event_counts"), event, count) {
        s_append (&out, "zactor_events_total{event=\"");
        s_append_label (&out, event);
        s_append (&out, "\"} %" JSON_INTEGER_FORMAT "\n", json_integer_value (count));
    }
    if (out.failed) {
        free (out.text);
        return NULL;
    }
    return out.text;
}

// ---------------------------------------------------------------------------
//  The server

struct _za_metrics_t {
    pthread_mutex_t mutex;
    char *text;                         //  what a scrape gets, owned
#ifdef ZA_HAVE_MHD
    struct MHD_Daemon *daemon;
#endif
};

#ifdef ZA_HAVE_MHD
static enum MHD_Result
s_answer (void *cls, struct MHD_Connection *connection, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size,
          void **state)
{
    za_metrics_t *self = (za_metrics_t *) cls;
    (void) version;
    (void) upload_data;
    (void) upload_data_size;
    (void) state;
    int get = strcmp (method, "GET") == 0 || strcmp (method, "HEAD") == 0;
    int found = strcmp (url, "/metrics") == 0 || strcmp (url, "/") == 0;
    char *body;
    unsigned status = MHD_HTTP_OK;
    if (!get) {
        body = strdup ("only GET /metrics\n");
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    }
    else
    if (!found) {
        body = strdup ("not found: the metrics are at /metrics\n");
        status = MHD_HTTP_NOT_FOUND;
    }
    else {
        pthread_mutex_lock (&self->mutex);
        body = strdup (self->text? self->text: "");
        pthread_mutex_unlock (&self->mutex);
    }
    if (!body)
        return MHD_NO;
    struct MHD_Response *response = MHD_create_response_from_buffer (strlen (body), body,
                                                                     MHD_RESPMEM_MUST_FREE);
    if (!response) {
        free (body);
        return MHD_NO;
    }
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE,
                             status == MHD_HTTP_OK? "text/plain; version=0.0.4; charset=utf-8"
                                                  : "text/plain; charset=utf-8");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response (connection, status, response);
    MHD_destroy_response (response);
    return rc;
}
#endif

int
za_metrics_available (void)
{
#ifdef ZA_HAVE_MHD
    return 1;
#else
    return 0;
#endif
}

za_metrics_t *
za_metrics_new (const char *bind)
{
#ifdef ZA_HAVE_MHD
    const char *colon = bind? strrchr (bind, ':'): NULL;
    char *end = NULL;
    long port = colon? strtol (colon + 1, &end, 10): 0;
    if (!colon || !end || *end || port < 1 || port > 65535) {
        za_error ("--metrics-bind '%s': give HOST:PORT (e.g. 127.0.0.1:9100 or *:9100)",
                  bind? bind: "");
        return NULL;
    }
    char host [256];
    snprintf (host, sizeof host, "%.*s", (int) (colon - bind), bind);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *found = NULL;
    int any = !*host || strcmp (host, "*") == 0;
    int rc = getaddrinfo (any? NULL: host, colon + 1, &hints, &found);
    if (rc || !found) {
        za_error ("--metrics-bind '%s': %s", bind, rc? gai_strerror (rc): "no address");
        return NULL;
    }
    za_metrics_t *self = (za_metrics_t *) calloc (1, sizeof *self);
    if (!self) {
        freeaddrinfo (found);
        za_error ("metrics: out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->mutex, NULL);
    self->daemon = MHD_start_daemon (MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t) port, NULL,
                                     NULL, s_answer, self,
                                     MHD_OPTION_SOCK_ADDR, found->ai_addr,
                                     MHD_OPTION_CONNECTION_LIMIT,
                                     (unsigned) METRICS_CONNECTIONS_MAX,
                                     MHD_OPTION_CONNECTION_TIMEOUT,
                                     (unsigned) METRICS_TIMEOUT_SECS, MHD_OPTION_END);
    freeaddrinfo (found);
    if (!self->daemon) {
        za_error ("--metrics-bind '%s': cannot serve HTTP there (the port in use, or the "
                  "address not this machine's)", bind);
        za_metrics_destroy (&self);
        return NULL;
    }
    return self;
#else
    za_error ("--metrics-bind '%s': this zactor was built without libmicrohttpd "
              "(apt-get install libmicrohttpd-dev, then build again)", bind? bind: "");
    return NULL;
#endif
}

void
za_metrics_destroy (za_metrics_t **self_p)
{
    za_metrics_t *self = *self_p;
    if (!self)
        return;
#ifdef ZA_HAVE_MHD
    if (self->daemon)
        MHD_stop_daemon (self->daemon);
#endif
    pthread_mutex_destroy (&self->mutex);
    free (self->text);
    free (self);
    *self_p = NULL;
}

void
za_metrics_set (za_metrics_t *self, const char *text)
{
    char *copy = text? strdup (text): NULL;
    if (text && !copy)
        return;                         //  out of memory: the last text stays
    pthread_mutex_lock (&self->mutex);
    free (self->text);
    self->text = copy;
    pthread_mutex_unlock (&self->mutex);
}
