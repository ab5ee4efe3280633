/*  za_cluster.c: TF_CONFIG parsed with jansson and checked in one pass, so that
    every mistake in a cluster spec is reported once, with where it is.         */
#define _GNU_SOURCE                     //  asprintf, strdup
#include "za/za_cluster.h"
#include "za/za_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CLUSTER_JOB_COUNT 4
#define CLUSTER_PORT_MIN 1
#define CLUSTER_PORT_MAX 65535
#define CLUSTER_HOST_MAX_CHARS 255      //  a DNS name is at most 253
#define CLUSTER_FILE_MAX_BYTES (1024 * 1024)
#define CLUSTER_READ_CHUNK_BYTES 4096
#define CLUSTER_DEFAULT_SOURCE "cluster spec"
#define CLUSTER_ENV_NAME "TF_CONFIG"

//  Job names, indexed by za_task_type_t.
static const char *s_job_names [CLUSTER_JOB_COUNT] = { "chief", "worker", "ps", "evaluator" };

//  One address of the cluster while checking for duplicates.
typedef struct {
    const char *address;
    size_t host_len;
    int port;
    za_task_type_t job;
    int index;
} s_task_t;


//  --------------------------------------------------------------------------
//  Small helpers

const char *
za_task_type_name (za_task_type_t type)
{
    if ((int) type < 0 || (int) type >= CLUSTER_JOB_COUNT)
        return "unknown";
    return s_job_names [type];
}

//  The job named `name`, or -1.
static int
s_job_type (const char *name)
{
    for (int job = 0; job < CLUSTER_JOB_COUNT; job++)
        if (strcmp (name, s_job_names [job]) == 0)
            return job;
    return -1;
}

//  The address slots and the count of a job.
static char **
s_job_slots (za_cluster_t *self, za_task_type_t job, int **count_p)
{
    switch (job) {
        case ZA_TASK_CHIEF:
            *count_p = &self->chief_count;
            return self->chief;
        case ZA_TASK_WORKER:
            *count_p = &self->worker_count;
            return self->worker;
        case ZA_TASK_PS:
            *count_p = &self->ps_count;
            return self->ps;
        default:
            *count_p = &self->evaluator_count;
            return self->evaluator;
    }
}

static const char *
s_json_kind (const json_t *value)
{
    switch (json_typeof (value)) {
        case JSON_OBJECT:
            return "an object";
        case JSON_ARRAY:
            return "an array";
        case JSON_STRING:
            return "a string";
        case JSON_INTEGER:
            return "an integer";
        case JSON_REAL:
            return "a number";
        case JSON_TRUE:
        case JSON_FALSE:
            return "a boolean";
        default:
            return "null";
    }
}

//  The task's index as TensorFlow's TFConfigClusterResolver reads it
//  (int (task["index"])): an integer, or text that is one ("1", as shell
//  scripts often quote it). 1, or 0 when it is neither.
static int
s_task_index (const json_t *index, json_int_t *value)
{
    if (json_is_integer (index)) {
        *value = json_integer_value (index);
        return 1;
    }
    const char *text = json_string_value (index);
    if (!text || !isdigit ((unsigned char) *text) || strlen (text) > 9)
        return 0;
    for (const char *c = text; *c; c++)
        if (!isdigit ((unsigned char) *c))
            return 0;
    *value = (json_int_t) strtol (text, NULL, 10);
    return 1;
}

//  Checks "host:port" and splits it. Returns NULL when it is fine (with the
//  host's length and the port set), else what is wrong, to follow the address
//  in a message.
static const char *
s_address_check (const char *address, size_t *host_len_p, int *port_p)
{
    if (strstr (address, "://"))
        return "has a scheme: write host:port";
    const char *colon = strrchr (address, ':');
    if (!colon)
        return "has no port: write host:port";
    if (colon == address)
        return "has no host: write host:port";
    size_t host_len = (size_t) (colon - address);
    if (host_len > CLUSTER_HOST_MAX_CHARS)
        return "has a host longer than 255 characters";
    for (const char *c = address; c < colon; c++)
        if (isspace ((unsigned char) *c) || *c == '/')
            return "has a host that is not a host name";
    const char *digits = colon + 1;
    if (*digits == '\0')
        return "has no port: write host:port";
    long port = 0;
    for (const char *c = digits; *c; c++) {
        if (!isdigit ((unsigned char) *c))
            return "has a port that is not a number in 1..65535";
        port = port * 10 + (*c - '0');
        if (port > CLUSTER_PORT_MAX)
            return "has a port that is not in 1..65535";
    }
    if (port < CLUSTER_PORT_MIN)
        return "has a port that is not in 1..65535";
    *host_len_p = host_len;
    *port_p = (int) port;
    return NULL;
}

//  The address of this task, or NULL for an evaluator outside the cluster.
static const char *
s_my_address (const za_cluster_t *self)
{
    int *count;
    char **slots = s_job_slots ((za_cluster_t *) self, self->task_type, &count);
    if (self->task_index < 0 || self->task_index >= *count)
        return NULL;
    return slots [self->task_index];
}


//  --------------------------------------------------------------------------
//  Parsing

//  Reads one job's list of addresses into the cluster.
static int
s_parse_job (za_cluster_t *self, const char *source, za_task_type_t job, json_t *list)
{
    const char *name = s_job_names [job];
    if (!json_is_array (list))
        return za_error ("%s: cluster.%s must be a list of \"host:port\" strings, not %s",
                         source, name, s_json_kind (list));
    size_t size = json_array_size (list);
    if (size == 0)
        return za_error ("%s: cluster.%s is empty: list its tasks or leave the job out",
                         source, name);
    if (size > ZA_CLUSTER_MAX_TASKS)
        return za_error ("%s: cluster.%s has %zu tasks, more than %d", source, name, size,
                         ZA_CLUSTER_MAX_TASKS);
    int *count;
    char **slots = s_job_slots (self, job, &count);
    for (size_t index = 0; index < size; index++) {
        json_t *entry = json_array_get (list, index);
        if (!json_is_string (entry))
            return za_error ("%s: cluster.%s[%zu] is %s, not a \"host:port\" string", source,
                             name, index, s_json_kind (entry));
        const char *address = json_string_value (entry);
        size_t host_len;
        int port;
        const char *defect = s_address_check (address, &host_len, &port);
        if (defect)
            return za_error ("%s: cluster.%s[%zu] \"%.300s\" %s", source, name, index, address,
                             defect);
        slots [index] = strdup (address);
        if (!slots [index])
            return za_error ("%s: out of memory", source);
        *count = (int) index + 1;
    }
    return 0;
}

//  Every address once in the whole cluster (same host, case aside, same port).
static int
s_check_duplicates (za_cluster_t *self, const char *source)
{
    s_task_t tasks [CLUSTER_JOB_COUNT * ZA_CLUSTER_MAX_TASKS];
    int task_count = 0;
    for (int job = 0; job < CLUSTER_JOB_COUNT; job++) {
        int *count;
        char **slots = s_job_slots (self, (za_task_type_t) job, &count);
        for (int index = 0; index < *count; index++) {
            s_task_t *task = &tasks [task_count++];
            task->address = slots [index];
            task->job = (za_task_type_t) job;
            task->index = index;
            //  Checked when parsed, so it cannot fail here.
            s_address_check (task->address, &task->host_len, &task->port);
        }
    }
    for (int i = 0; i < task_count; i++)
        for (int j = i + 1; j < task_count; j++) {
            s_task_t *first = &tasks [i];
            s_task_t *second = &tasks [j];
            if (first->port == second->port && first->host_len == second->host_len
            &&  strncasecmp (first->address, second->address, first->host_len) == 0)
                return za_error ("%s: address \"%.300s\" is used twice: by cluster.%s[%d] "
                                 "and cluster.%s[%d]", source, second->address,
                                 s_job_names [first->job], first->index,
                                 s_job_names [second->job], second->index);
        }
    return 0;
}

//  Reads "task" and derives what follows from it.
static int
s_parse_task (za_cluster_t *self, const char *source, json_t *task)
{
    json_t *type = json_object_get (task, "type");
    if (!type)
        return za_error ("%s: task has no \"type\" (chief, worker, ps or evaluator)", source);
    if (!json_is_string (type))
        return za_error ("%s: task type is %s, not a string (chief, worker, ps or evaluator)",
                         source, s_json_kind (type));
    int job = s_job_type (json_string_value (type));
    if (job < 0)
        return za_error ("%s: task type \"%.100s\" is unknown (chief, worker, ps or evaluator)",
                         source, json_string_value (type));
    json_t *index = json_object_get (task, "index");
    if (!index)
        return za_error ("%s: task has no \"index\"", source);
    json_int_t value;
    if (!s_task_index (index, &value))
        return za_error ("%s: task index is %s, not an integer", source, s_json_kind (index));
    int *count;
    s_job_slots (self, (za_task_type_t) job, &count);
    const char *name = s_job_names [job];
    if (job == ZA_TASK_EVALUATOR && *count == 0) {
        //  An evaluator outside the cluster: TensorFlow has one, index 0.
        if (value != 0)
            return za_error ("%s: task index %lld is out of range: an evaluator outside the "
                             "cluster must be index 0", source, (long long) value);
    }
    else
    if (*count == 0)
        return za_error ("%s: task type is \"%s\" but the cluster has no %s job", source, name,
                         name);
    else
    if (value < 0 || value >= *count)
        return za_error ("%s: task index %lld is out of range for job %s (0..%d)", source,
                         (long long) value, name, *count - 1);

    self->task_type = (za_task_type_t) job;
    self->task_index = (int) value;
    self->num_workers = self->chief_count + self->worker_count;
    //  Without a chief (the all-reduce strategy's own clusters) worker 0 has
    //  the chief's duties, as in TensorFlow.
    self->is_chief = job == ZA_TASK_CHIEF
                  || (job == ZA_TASK_WORKER && self->chief_count == 0 && self->task_index == 0);
    if (job == ZA_TASK_CHIEF)
        self->worker_index = 0;
    else
    if (job == ZA_TASK_WORKER)
        self->worker_index = self->chief_count + self->task_index;
    else
        self->worker_index = -1;

    const char *address = s_my_address (self);
    if (address)
        snprintf (self->bind_endpoint, sizeof self->bind_endpoint, "tcp://%s", address);
    else
        self->bind_endpoint [0] = '\0';
    return 0;
}

static int
s_parse_root (za_cluster_t *self, const char *source, json_t *root)
{
    if (!json_is_object (root))
        return za_error ("%s: the top level must be a JSON object with \"cluster\" and "
                         "\"task\", not %s", source, s_json_kind (root));
    json_t *cluster = json_object_get (root, "cluster");
    if (!cluster)
        return za_error ("%s: has no \"cluster\" object", source);
    if (!json_is_object (cluster))
        return za_error ("%s: \"cluster\" must be an object of jobs, not %s", source,
                         s_json_kind (cluster));
    json_t *task = json_object_get (root, "task");
    if (!task)
        return za_error ("%s: has no \"task\" object ({\"type\": ..., \"index\": ...})", source);
    if (!json_is_object (task))
        return za_error ("%s: \"task\" must be an object ({\"type\": ..., \"index\": ...}), "
                         "not %s", source, s_json_kind (task));

    const char *key;
    json_t *value;
    json_object_foreach (cluster, key, value) {
        int job = s_job_type (key);
        if (job < 0)
            return za_error ("%s: unknown job \"%.100s\" in \"cluster\" (jobs are chief, "
                             "worker, ps and evaluator)", source, key);
        if (s_parse_job (self, source, (za_task_type_t) job, value))
            return -1;
    }
    if (self->chief_count + self->worker_count + self->ps_count + self->evaluator_count == 0)
        return za_error ("%s: \"cluster\" lists no jobs", source);
    if (s_check_duplicates (self, source))
        return -1;
    if (self->chief_count > 1)
        return za_error ("%s: cluster.chief has %d chiefs; there must be exactly one", source,
                         self->chief_count);
    if (self->chief_count == 0 && self->ps_count > 0)
        return za_error ("%s: the cluster has no chief: add a \"chief\" job with one task "
                         "(the chief trains too, as worker 0)", source);
    return s_parse_task (self, source, task);
}


//  --------------------------------------------------------------------------
//  Public API

za_cluster_t *
za_cluster_parse (const char *json_text, const char *source)
{
    if (!source)
        source = CLUSTER_DEFAULT_SOURCE;
    if (!json_text) {
        za_error ("%s: no text to parse", source);
        return NULL;
    }
    json_error_t error;
    json_t *root = json_loads (json_text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &error);
    if (!root) {
        za_error ("%s: not valid JSON: %s at line %d, column %d", source, error.text,
                  error.line, error.column);
        return NULL;
    }
    za_cluster_t *self = calloc (1, sizeof *self);
    if (!self) {
        json_decref (root);
        za_error ("%s: out of memory", source);
        return NULL;
    }
    int rc = s_parse_root (self, source, root);
    json_decref (root);
    if (rc)
        za_cluster_destroy (&self);
    return self;
}

//  The whole file as a NUL-terminated string (caller frees), or NULL with an error.
static char *
s_read_text_file (const char *path)
{
    FILE *file = fopen (path, "rb");
    if (!file) {
        za_error ("cannot read cluster spec %s: %s", path, strerror (errno));
        return NULL;
    }
    char *text = NULL;
    size_t size = 0;
    int failed = 0;
    while (!failed) {
        char *grown = realloc (text, size + CLUSTER_READ_CHUNK_BYTES + 1);
        if (!grown) {
            za_error ("cannot read cluster spec %s: out of memory", path);
            failed = 1;
            break;
        }
        text = grown;
        size_t got = fread (text + size, 1, CLUSTER_READ_CHUNK_BYTES, file);
        size += got;
        if (got < CLUSTER_READ_CHUNK_BYTES) {
            if (ferror (file)) {
                za_error ("cannot read cluster spec %s: %s", path, strerror (errno));
                failed = 1;
            }
            break;
        }
        if (size > CLUSTER_FILE_MAX_BYTES) {
            za_error ("cluster spec %s is larger than %d bytes", path, CLUSTER_FILE_MAX_BYTES);
            failed = 1;
        }
    }
    fclose (file);
    if (failed) {
        free (text);
        return NULL;
    }
    text [size] = '\0';
    return text;
}

za_cluster_t *
za_cluster_load (const char *file)
{
    if (!file) {
        const char *text = getenv (CLUSTER_ENV_NAME);
        if (!text || !*text) {
            za_error ("no cluster spec: %s is not set and no cluster file was given",
                      CLUSTER_ENV_NAME);
            return NULL;
        }
        return za_cluster_parse (text, CLUSTER_ENV_NAME);
    }
    char *text = s_read_text_file (file);
    if (!text)
        return NULL;
    za_cluster_t *self = za_cluster_parse (text, file);
    free (text);
    return self;
}

char *
za_cluster_ps_endpoint (const za_cluster_t *self, int ps_index)
{
    if (!self || ps_index < 0 || ps_index >= self->ps_count) {
        za_error ("ps %d is not in the cluster (it has %d)", ps_index,
                  self ? self->ps_count : 0);
        return NULL;
    }
    char *endpoint = NULL;
    if (asprintf (&endpoint, "tcp://%s", self->ps [ps_index]) < 0) {
        za_error ("out of memory");
        return NULL;
    }
    return endpoint;
}

char *
za_cluster_worker_endpoint (const za_cluster_t *self, int worker_index)
{
    if (!self || worker_index < 0 || worker_index >= self->num_workers) {
        za_error ("worker index %d is not in the cluster (it has %d with the chief)",
                  worker_index, self? self->num_workers: 0);
        return NULL;
    }
    const char *address = worker_index < self->chief_count
                        ? self->chief [worker_index]
                        : self->worker [worker_index - self->chief_count];
    char *endpoint = NULL;
    if (asprintf (&endpoint, "tcp://%s", address) < 0) {
        za_error ("out of memory");
        return NULL;
    }
    return endpoint;
}

int
za_cluster_free_endpoint (const char *host, char *endpoint, size_t size)
{
    //  The kernel picks a port for a plain socket, we read it and close it.
    //  Not a ZeroMQ socket: libzmq closes its listeners later, in its I/O
    //  thread, and a ps that binds the port at once would find it in use.
    int local = strcmp (host, "127.0.0.1") == 0;
    struct sockaddr_in address;
    memset (&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl (local? INADDR_LOOPBACK: INADDR_ANY);
    socklen_t length = sizeof address;
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0? -1: bind (fd, (struct sockaddr *) &address, sizeof address);
    if (rc == 0)
        rc = getsockname (fd, (struct sockaddr *) &address, &length);
    if (fd >= 0)
        close (fd);
    if (rc)
        return za_error ("cannot find a free tcp port on %s: %s", host, strerror (errno));
    snprintf (endpoint, size, "tcp://%s:%d", host, ntohs (address.sin_port));
    return 0;
}

int
za_cluster_endpoint_split (const char *endpoint, char *host, size_t size, int *port)
{
    const char *colon = strrchr (endpoint, ':');
    if (strncmp (endpoint, "tcp://", 6) != 0 || !colon || colon <= endpoint + 6)
        return -1;
    char *end;
    long number = strtol (colon + 1, &end, 10);
    size_t length = (size_t) (colon - endpoint - 6);
    if (!colon [1] || *end || number < 1 || number > 65535 || length >= size)
        return -1;
    memcpy (host, endpoint + 6, length);
    host [length] = 0;
    *port = (int) number;
    return 0;
}

int
za_cluster_tasks_on_my_host (const za_cluster_t *self)
{
    const char *mine = s_my_address (self);
    if (!mine)
        return 1;
    size_t my_host_len = (size_t) (strrchr (mine, ':') - mine);
    int tasks = 0;
    for (int job = 0; job < CLUSTER_JOB_COUNT; job++) {
        int *count;
        char **slots = s_job_slots ((za_cluster_t *) self, (za_task_type_t) job, &count);
        for (int index = 0; index < *count; index++) {
            const char *address = slots [index];
            size_t host_len = (size_t) (strrchr (address, ':') - address);
            if (host_len == my_host_len && strncasecmp (address, mine, host_len) == 0)
                tasks++;
        }
    }
    return tasks > 0 ? tasks : 1;
}

void
za_cluster_destroy (za_cluster_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_cluster_t *self = *self_p;
    for (int job = 0; job < CLUSTER_JOB_COUNT; job++) {
        int *count;
        char **slots = s_job_slots (self, (za_task_type_t) job, &count);
        for (int index = 0; index < ZA_CLUSTER_MAX_TASKS; index++)
            free (slots [index]);
    }
    free (self);
    *self_p = NULL;
}

int
za_cluster_host_valid (const char *text)
{
    size_t n = strlen (text);
    if (n == 0 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = text [i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']'))
            return 0;
    }
    return 1;
}

int
za_cluster_endpoint_valid (const char *text)
{
    char host [ZA_CLUSTER_ENDPOINT_MAX];
    int port;
    return strlen (text) < ZA_CLUSTER_ENDPOINT_MAX
        && za_cluster_endpoint_split (text, host, sizeof host, &port) == 0
        && za_cluster_host_valid (host);
}


// ---------------------------------------------------------------------------
//  Waiting for names to resolve

//  A lookup still in flight when its wait ended (the resolver cannot always
//  cancel one): kept reachable until the process ends.
static struct gaicb *s_abandoned [8];

//  0 when host resolves within wait_secs, else -1 with the resolver's word
//  in why.
static int
s_resolves (const char *host, double wait_secs, char *why, size_t size)
{
    struct in_addr literal;
    if (inet_pton (AF_INET, host, &literal) == 1)
        return 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct gaicb *request = (struct gaicb *) calloc (1, sizeof *request);
    char *name = strdup (host);
    struct addrinfo *asked = (struct addrinfo *) malloc (sizeof hints);
    if (!request || !name || !asked) {
        free (request);
        free (name);
        free (asked);
        snprintf (why, size, "out of memory");
        return -1;
    }
    *asked = hints;
    request->ar_name = name;
    request->ar_request = asked;
    struct gaicb *list [1] = {request};
    int rc = getaddrinfo_a (GAI_NOWAIT, list, 1, NULL);
    if (rc == 0) {
        double deadline = za_clock_mono () + wait_secs;
        while ((rc = gai_error (request)) == EAI_INPROGRESS) {
            double left = deadline - za_clock_mono ();
            if (left <= 0)
                break;
            struct timespec wait = {(time_t) left, (long) ((left - (time_t) left) * 1e9)};
            gai_suspend ((const struct gaicb *const *) list, 1, &wait);
        }
    }
    if (rc == EAI_INPROGRESS && gai_cancel (request) != EAI_CANCELED) {
        snprintf (why, size, "the name server gave no answer within %.0f s", wait_secs);
        for (size_t i = 0; i < sizeof s_abandoned / sizeof s_abandoned [0]; i++)
            if (!s_abandoned [i]) {
                s_abandoned [i] = request;
                return -1;
            }
        return -1;                  //  more than we keep: let it go
    }
    if (rc == EAI_INPROGRESS || rc == EAI_CANCELED)
        snprintf (why, size, "the name server gave no answer within %.0f s", wait_secs);
    else
    if (rc)
        snprintf (why, size, "%s", gai_strerror (rc));
    if (request->ar_result)
        freeaddrinfo (request->ar_result);
    free (name);
    free (asked);
    free (request);
    return rc? -1: 0;
}

int
za_cluster_wait_for_hosts (const char *const *endpoints, const char *const *who, int count,
                           double timeout_secs)
{
    double started = za_clock_mono (), deadline = started + timeout_secs;
    za_said_t said;
    memset (&said, 0, sizeof said);
    said.said_at = started;             //  quiet at first: most names come soon
    for (int i = 0; i < count; i++) {
        const char *endpoint = endpoints [i];
        if (strncmp (endpoint, "tcp://", 6) == 0)
            endpoint += 6;
        const char *colon = strrchr (endpoint, ':');
        size_t length = colon? (size_t) (colon - endpoint): strlen (endpoint);
        char host [ZA_CLUSTER_ENDPOINT_MAX], why [256] = "";
        if (length >= sizeof host)
            length = sizeof host - 1;
        memcpy (host, endpoint, length);
        host [length] = 0;
        if (host [0] == '[')            //  an IPv6 address: not looked up
            continue;
        while (1) {
            double left = deadline - za_clock_mono ();
            if (s_resolves (host, left > 0? left: 0.1, why, sizeof why) == 0)
                break;
            left = deadline - za_clock_mono ();
            if (left <= 0)
                return za_error ("the host '%s' of %s (%s) did not resolve within %.0f s: %s "
                                 "(check the cluster's names, DNS and /etc/hosts; "
                                 "--timeout-secs sets the wait)", host, who [i], endpoints [i],
                                 timeout_secs, why);
            za_info_every (&said, ZA_RESOLVE_QUIET_SECS, "waiting for the host '%s' of %s to "
                           "resolve: %s", host, who [i], why);
            double nap_secs = left < 1? left: 1;
            struct timespec nap = {(time_t) nap_secs,
                                   (long) ((nap_secs - (time_t) nap_secs) * 1e9)};
            nanosleep (&nap, NULL);
        }
    }
    return 0;
}

int
za_cluster_wait_resolved (const za_cluster_t *self, double timeout_secs)
{
    const char *endpoints [4 * ZA_CLUSTER_MAX_TASKS];
    char who [4 * ZA_CLUSTER_MAX_TASKS][32];
    const char *whos [4 * ZA_CLUSTER_MAX_TASKS];
    int count = 0;
    for (int job = 0; job < CLUSTER_JOB_COUNT; job++) {
        int *job_count;
        char **slots = s_job_slots ((za_cluster_t *) self, (za_task_type_t) job, &job_count);
        for (int index = 0; index < *job_count; index++) {
            snprintf (who [count], sizeof who [count], "%s %d",
                      za_task_type_name ((za_task_type_t) job), index);
            whos [count] = who [count];
            endpoints [count++] = slots [index];
        }
    }
    return za_cluster_wait_for_hosts (endpoints, whos, count, timeout_secs);
}
