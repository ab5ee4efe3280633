/*  za_cluster.h: the cluster spec, TensorFlow's TF_CONFIG: which tasks exist
    (chief, workers, ps, evaluator, each "host:port") and which one this is.

    Format (the same text in the TF_CONFIG environment variable or in a file):
      {"cluster": {"chief": ["host:port"],
                   "worker": ["host:port", ...],
                   "ps": ["host:port", ...],
                   "evaluator": ["host:port"]},
       "task": {"type": "worker", "index": 1},
       "environment": "cloud", "rpc_layer": "grpc"}
    "evaluator" may be a job inside "cluster", or absent from it while the task
    is {"type": "evaluator", "index": 0} (TensorFlow's Estimator writes the
    latter: the evaluator is no part of the training cluster). "environment",
    "rpc_layer" and any other top-level key are accepted and ignored, and so are
    task keys other than "type" and "index"; a job name in "cluster" other than
    the four above is an error.
    Rules beyond the syntax: at most one chief, and one when the cluster has
    ps (the chief trains too, as worker 0); without a chief (the all-reduce
    strategy's clusters: workers only) worker 0 has the chief's duties;
    every address used once in the whole cluster; at most
    ZA_CLUSTER_MAX_TASKS tasks per job. Whether the strategy needs ps is the
    runtime's to check.                                                      */
#ifndef ZA_CLUSTER_H_INCLUDED
#define ZA_CLUSTER_H_INCLUDED

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZA_TASK_CHIEF = 0,
    ZA_TASK_WORKER,
    ZA_TASK_PS,
    ZA_TASK_EVALUATOR
} za_task_type_t;

#define ZA_CLUSTER_MAX_TASKS 64         //  per job
#define ZA_CLUSTER_ENDPOINT_MAX 300     //  bytes of bind_endpoint, NUL included

typedef struct {
    int chief_count, worker_count, ps_count, evaluator_count;
    //  "host:port" as written in the spec, owned by the cluster.
    char *chief [ZA_CLUSTER_MAX_TASKS];
    char *worker [ZA_CLUSTER_MAX_TASKS];
    char *ps [ZA_CLUSTER_MAX_TASKS];
    char *evaluator [ZA_CLUSTER_MAX_TASKS];
    za_task_type_t task_type;
    int task_index;
    int num_workers;                    //  chief + workers (the chief is worker 0)
    int is_chief;                       //  1 for the chief task (or worker 0 when
                                        //  there is no chief), else 0
    //  This task's data shard and rank: chief 0, worker i -> i + 1 (i without
    //  a chief); -1 for ps and evaluator.
    int worker_index;
    //  "tcp://HOST:PORT": this task's address as the cluster writes it (never
    //  every interface: a host name is for whoever binds to resolve to this
    //  machine's own address); "" for an evaluator outside the cluster.
    char bind_endpoint [ZA_CLUSTER_ENDPOINT_MAX];
} za_cluster_t;

//  The job name of a task type: "chief", "worker", "ps" or "evaluator"
//  ("unknown" for a value outside the enum). Static string, never NULL.
const char *za_task_type_name (za_task_type_t type);

//  Parses and validates a cluster spec. `source` names where the text came from
//  ("TF_CONFIG" or a file path) and starts every error message (NULL reads as
//  "cluster spec"). Returns a new cluster, which the caller destroys with
//  za_cluster_destroy, or NULL with exactly one error (za_error) naming the
//  mistake: text that is not JSON (with jansson's line and column), a top
//  level that is not an object, "cluster" or "task" missing or not objects, an
//  empty "cluster", an unknown job name, a job that is not a non-empty array of
//  strings or has more than ZA_CLUSTER_MAX_TASKS entries, an address without a
//  host, with a scheme ("tcp://"), without a port or with a port outside
//  1..65535, an address used twice (same host, same port) anywhere in the
//  cluster, no chief while there are ps, two or more chiefs,
//  a task type that is not a string naming one of the four jobs, a task index
//  that is missing or not an integer (text of decimal digits counts, as
//  TensorFlow's int (index) reads it), or an index out of range for its job
//  (an evaluator outside the cluster must be index 0).
za_cluster_t *za_cluster_parse (const char *json_text, const char *source);

//  Reads the spec from the environment variable TF_CONFIG when `file` is NULL,
//  else from the file (TF_CONFIG is then not looked at), and parses it as
//  za_cluster_parse does, with "TF_CONFIG" or the path as the source. Returns
//  a new cluster (caller destroys) or NULL with an error: TF_CONFIG unset or
//  empty, the file unreadable, or any error of za_cluster_parse.
za_cluster_t *za_cluster_load (const char *file);

//  "tcp://host:port" of ps `ps_index`, for connecting to it. The caller frees
//  the string with free (). NULL with an error when ps_index is out of range.
char *za_cluster_ps_endpoint (const za_cluster_t *self, int ps_index);

//  "tcp://host:port" of the training task with worker index `worker_index`
//  (the chief first, then the workers), for the all-reduce ring. The caller
//  frees it. NULL with an error when out of range.
char *za_cluster_worker_endpoint (const za_cluster_t *self, int worker_index);

//  How many tasks of the cluster (all jobs, the evaluator included, this task
//  included) have the same host as this task, compared as written (case aside;
//  names are not resolved, so "localhost" and "127.0.0.1" differ). Role
//  processes on one host share its cores: threads = cores / this, at least 1.
//  Always >= 1; 1 for an evaluator outside the cluster.
int za_cluster_tasks_on_my_host (const za_cluster_t *self);

//  A free TCP port on `host` (the kernel picks it; INADDR_ANY unless host is
//  127.0.0.1): "tcp://HOST:PORT" into endpoint. Returns 0, or -1 with an error.
int za_cluster_free_endpoint (const char *host, char *endpoint, size_t size);

//  Splits "tcp://HOST:PORT" (PORT 1..65535, HOST not empty) into host and
//  *port. Returns 0, or -1 (no error set) when the endpoint is not that or
//  its host does not fit.
int za_cluster_endpoint_split (const char *endpoint, char *host, size_t size, int *port);

//  1 when text is a host as a task names itself: 1..255 bytes of letters,
//  digits, '.', '-', '_', ':' (IPv6) and '[' ']' around an IPv6 address.
int za_cluster_host_valid (const char *text);

//  1 when text is "tcp://HOST:PORT" with a valid host and a port 1..65535:
//  what an endpoint from the network must be before it is connected to or
//  bound (docs/PROTOCOL.md 13).
int za_cluster_endpoint_valid (const char *text);

//  How long a wait for hosts stays quiet, and then how often it says which
//  host it still waits for (with a count).
#define ZA_RESOLVE_QUIET_SECS 10.0

//  Waits until the host of every endpoint resolves to an IPv4 address (as
//  libzmq's tcp connect looks it up, which itself retries in silence for
//  ever), at most timeout_secs: a name a cluster gives may resolve only once
//  its machine or pod is up. endpoints are "tcp://HOST:PORT" or "HOST:PORT";
//  who [i] says whose it is ("worker 1"); numeric addresses pass at once.
//  Each lookup is bounded by the time left, so an unreachable name server
//  cannot stretch the wait. Quiet for ZA_RESOLVE_QUIET_SECS, then says the
//  host waited for at most that often. Returns 0, or -1 with an error naming
//  the first host that did not resolve, whose it is and the resolver's word.
int za_cluster_wait_for_hosts (const char *const *endpoints, const char *const *who, int count,
                               double timeout_secs);

//  The same for every task this cluster names.
int za_cluster_wait_resolved (const za_cluster_t *self, double timeout_secs);

//  Frees the cluster and its strings and sets *self_p to NULL. Safe to call
//  with *self_p NULL, so twice is harmless.
void za_cluster_destroy (za_cluster_t **self_p);

#ifdef __cplusplus
}
#endif
#endif
