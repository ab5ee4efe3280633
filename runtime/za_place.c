/*  za_place.c: placing this task in its cluster, from TF_CONFIG (or
    --cluster, --role, --index) or from a broker that hands out indexes, the
    job and the ps endpoints; then running it there.                        */
#include "za_place.h"
#include "za/za_curve.h"
#include "za_trace_merge.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Processes on one machine share its cores, unless --threads says.
static void
s_share_cores (za_options_t *options, za_settings_t *settings, int tasks)
{
    if (za_options_given (options, "threads", ZA_FROM_DEFAULT) || tasks < 1)
        return;
    int share = (int) sysconf (_SC_NPROCESSORS_ONLN) / tasks;
    settings->run.threads = share > 0? share: 1;
}

//  The cluster from --cluster FILE or TF_CONFIG, with --role / --index (when
//  given) as this task: --role alone takes the index of the file's task of
//  that type (else 0). NULL with one error when anything is wrong.
static za_cluster_t *
s_load_cluster (const za_settings_t *s)
{
    if (!s->role && s->index >= 0) {
        za_error ("--index %" PRId64 " goes with --role TYPE (the task is TF_CONFIG's, or the "
                  "cluster file's, otherwise)", s->index);
        return NULL;
    }
    if (!s->role)
        return za_cluster_load (s->cluster);
    json_error_t error;
    const char *env = getenv ("TF_CONFIG");
    const char *source = s->cluster? s->cluster: "TF_CONFIG";
    if (!s->cluster && (!env || !*env)) {
        za_error ("--role %s: no cluster: set TF_CONFIG, or give --cluster FILE, or "
                  "--broker ADDR (a job's broker); --local runs a whole job here", s->role);
        return NULL;
    }
    json_t *root = s->cluster? json_load_file (s->cluster, 0, &error)
                 : env? json_loads (env, 0, &error): json_object ();
    if (!root) {
        za_error ("%s: line %d column %d: %s", source, error.line, error.column, error.text);
        return NULL;
    }
    if (!json_is_object (root)) {
        json_decref (root);
        za_error ("%s: not a JSON object", source);
        return NULL;
    }
    json_t *task = json_object_get (root, "task");
    json_t *own = json_object_get (task, "index");
    json_int_t index = s->index >= 0? s->index
                     : json_is_integer (own) && json_is_string (json_object_get (task, "type"))
                       && !strcmp (json_string_value (json_object_get (task, "type")), s->role)
                     ? json_integer_value (own): 0;
    json_object_set_new (root, "task", json_pack ("{s:s, s:I}", "type", s->role, "index",
                                                  index));
    char *text = json_dumps (root, 0);
    json_decref (root);
    za_cluster_t *cluster = text? za_cluster_parse (text, source): NULL;
    free (text);
    return cluster;
}

//  Where this task binds: --bind when given, else the address its cluster
//  names, a host name resolved to this machine's own address (libzmq binds
//  numeric addresses only). Never every interface unless told. Returns 0, or
//  -1 with an error.
static int
s_bind_endpoint (const za_settings_t *s, const char *named, char *endpoint, size_t size)
{
    if (s->bind) {
        snprintf (endpoint, size, "%s", s->bind);
        return 0;
    }
    char host [ZA_CLUSTER_ENDPOINT_MAX];
    int port;
    if (za_cluster_endpoint_split (named, host, sizeof host, &port))
        return za_error ("cannot bind '%s': not tcp://HOST:PORT", named);
    struct in_addr literal;
    if (inet_pton (AF_INET, host, &literal) == 1) {
        snprintf (endpoint, size, "%s", named);
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *found = NULL;
    if (getaddrinfo (host, NULL, &hints, &found) || !found)
        return za_error ("cannot bind '%s': the host name '%s' does not resolve", named, host);
    //  The first of its addresses this machine can bind.
    int local = 0;
    char address [INET_ADDRSTRLEN] = "";
    for (struct addrinfo *a = found; a && !local; a = a->ai_next) {
        int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in probe = *(struct sockaddr_in *) a->ai_addr;
        probe.sin_port = 0;
        local = fd >= 0 && bind (fd, (struct sockaddr *) &probe, sizeof probe) == 0;
        if (fd >= 0)
            close (fd);
        inet_ntop (AF_INET, &probe.sin_addr, address, sizeof address);
    }
    freeaddrinfo (found);
    if (!local)
        return za_error ("cannot bind '%s': '%s' is %s, not an address of this machine; give "
                         "this machine's own address in the cluster, or --bind tcp://*:PORT "
                         "to listen on every interface", named, host, address);
    snprintf (endpoint, size, "tcp://%s:%d", address, port);
    return 0;
}

static void
s_place_from_cluster (za_place_t *place, const za_cluster_t *cluster)
{
    memset (place, 0, sizeof *place);
    place->type = cluster->task_type;
    place->index = cluster->task_index;
    place->is_chief = cluster->is_chief;
    place->worker_index = cluster->worker_index;
    place->num_workers = cluster->num_workers;
    place->ps_count = cluster->ps_count;
    place->evaluators = cluster->evaluator_count;
    for (int p = 0; p < cluster->ps_count && p < ZA_ROLE_MAX_PS; p++) {
        char *endpoint = za_cluster_ps_endpoint (cluster, p);
        snprintf (place->ps_endpoints [p], sizeof place->ps_endpoints [p], "%s",
                  endpoint? endpoint: "");
        free (endpoint);
    }
    snprintf (place->bind, sizeof place->bind, "%s", cluster->bind_endpoint);
}

//  What the strategy needs of the cluster: ps for the ps strategies, none
//  for the all-reduce. Returns 0, or -1 with an error.
static int
s_check_strategy (const za_settings_t *s, const za_cluster_t *cluster, const char *source)
{
    int allreduce = s->strategy == ZA_STRATEGY_ALLREDUCE;
    if (allreduce && cluster->ps_count > 0)
        return za_error ("%s: --strategy allreduce uses no ps, but the cluster has %d: remove "
                         "the \"ps\" job (or use --strategy ps-async)", source,
                         cluster->ps_count);
    if (!allreduce && cluster->ps_count == 0)
        return za_error ("%s: the cluster has no ps: --strategy %s needs at least one \"ps\" "
                         "task to hold the variables (or use --strategy allreduce)", source,
                         za_strategy_name (s->strategy));
    if (!allreduce && cluster->chief_count == 0)
        return za_error ("%s: the cluster has no chief: add a \"chief\" job with one task "
                         "(the chief trains too, as worker 0)", source);
    return 0;
}

//  This task's place in the cluster (a training task's), and where it binds
//  when it serves: a ps, or a worker of the all-reduce ring with the next
//  worker's endpoint. Returns 0, or -1 with an error.
static int
s_place_in (za_place_t *place, const za_settings_t *s, const za_cluster_t *cluster)
{
    s_place_from_cluster (place, cluster);
    int ring = s->strategy == ZA_STRATEGY_ALLREDUCE
            && place->type != ZA_TASK_PS;
    //  --bind was judged with the other flags.
    if (place->type == ZA_TASK_PS || ring)
        if (s_bind_endpoint (s, cluster->bind_endpoint, place->bind, sizeof place->bind)
            || (!s->bind && za_settings_bind_allowed (s, place->bind)))
            return -1;
    if (ring) {
        char *right = za_cluster_worker_endpoint (cluster, (place->worker_index + 1)
                                                           % place->num_workers);
        if (!right)
            return -1;
        snprintf (place->right, sizeof place->right, "%s", right);
        free (right);
    }
    return 0;
}

int
za_place_run_in_cluster (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    int is_evaluator = s->role && streq (s->role, "evaluator");
    za_cluster_t *cluster = NULL;
    const char *source = s->cluster? s->cluster: "TF_CONFIG";
    //  An evaluator needs no cluster (it follows model_dir); one given is checked.
    if (!is_evaluator || s->cluster || getenv ("TF_CONFIG")) {
        if (!(cluster = s_load_cluster (s)))
            return ZA_EXIT_USAGE;
        is_evaluator = cluster->task_type == ZA_TASK_EVALUATOR;
        if (s_check_strategy (s, cluster, source)) {
            za_cluster_destroy (&cluster);
            return ZA_EXIT_USAGE;
        }
    }
    //  Its end is the chief's last step: without a cluster to count the
    //  workers, --epochs cannot say it where a step takes a batch from each.
    if (is_evaluator && !cluster && !s->eval.replay && s->max_steps <= 0
        && s->strategy != ZA_STRATEGY_PS_ASYNC) {
        za_error ("--role evaluator without a cluster (TF_CONFIG or --cluster): under "
                  "--strategy %s a global step takes a batch from each worker, so --epochs "
                  "does not say where training ends; give the cluster, or --max-steps",
                  za_strategy_name (s->strategy));
        return ZA_EXIT_USAGE;
    }
    za_place_t place;
    memset (&place, 0, sizeof place);
    //  A global step of the synchronous strategies takes a batch from every
    //  worker (ps-sync: from --replicas-to-aggregate of them).
    int replicas = cluster? za_settings_replicas (s, cluster->num_workers): 1;
    if (cluster && !is_evaluator) {
        s_share_cores (options, s, za_cluster_tasks_on_my_host (cluster));
        if (s_place_in (&place, s, cluster)) {
            za_cluster_destroy (&cluster);
            return ZA_EXIT_USAGE;
        }
    }
    //  libzmq looks a name up in silence for ever: every host of the cluster
    //  must resolve within --timeout-secs, or the task says which and ends.
    if (cluster && za_cluster_wait_resolved (cluster, s->timeout_secs)) {
        za_cluster_destroy (&cluster);
        return 1;
    }
    za_cluster_destroy (&cluster);
    za_task_t task;
    int need_eval = is_evaluator || (place.is_chief && !s->no_eval && !place.evaluators);
    int rc = za_task_prepare (&task, program, options, s, need_eval, replicas);
    if (!rc)
        rc = is_evaluator? za_task_run_evaluator (&task, NULL)
                          : za_task_run_role (&task, &place, NULL);
    za_task_release (&task);
    //  No launcher or broker to merge the trace: the chief does, at its end,
    //  from MODEL_DIR/trace/ (every task's, where the hosts share it).
    if (s->trace && place.is_chief && za_trace_merge (s) && rc == 0)
        rc = 1;
    return rc;
}

// ---------------------------------------------------------------------------
//  Joining a broker

int
za_place_tf_config_broker (za_settings_t *s)
{
    const char *env = getenv ("TF_CONFIG");
    if (s->broker || s->cluster || !env)
        return 0;
    json_t *root = json_loads (env, 0, NULL);
    json_t *ours = json_object_get (root, "zactor");
    if (!ours) {
        json_decref (root);         //  a TF_CONFIG that does not parse is said later
        return 0;
    }
    //  Kept for the process's life: the settings point into them.
    static char broker [ZA_CLUSTER_ENDPOINT_MAX], role [16];
    json_t *address = json_object_get (ours, "broker");
    json_t *task = json_object_get (root, "task");
    json_t *type = json_object_get (task, "type"), *index = json_object_get (task, "index");
    int rc = ZA_EXIT_USAGE;
    if (!json_is_object (ours) || !json_is_string (address)
        || !za_cluster_endpoint_valid (json_string_value (address))
        || strlen (json_string_value (address)) >= sizeof broker)
        za_error ("TF_CONFIG: \"zactor\" wants {\"broker\": \"tcp://HOST:PORT\"}");
    else
    if (!json_is_string (type) || strlen (json_string_value (type)) >= sizeof role
        || (index && !json_is_integer (index)))
        za_error ("TF_CONFIG: with \"zactor\": {\"broker\": ...}, \"task\" wants a \"type\" "
                  "(chief, worker, ps or evaluator) and an integer \"index\" (or none: any "
                  "free one)");
    else {
        snprintf (broker, sizeof broker, "%s", json_string_value (address));
        snprintf (role, sizeof role, "%s", json_string_value (type));
        s->broker = broker;
        if (!s->role)
            s->role = role;
        if (s->index < 0 && index)
            s->index = json_integer_value (index);
        rc = 1;
    }
    json_decref (root);
    return rc;
}

//  This machine's name as other hosts reach it; 127.0.0.1 when the broker
//  is on loopback (everything is on this machine).
static void
s_my_host (const za_settings_t *s, char *host, size_t size)
{
    if (s->host)
        snprintf (host, size, "%s", s->host);
    else
    if (strstr (s->broker, "127.0.0.1") || strstr (s->broker, "localhost")
        || strncmp (s->broker, "ipc://", 6) == 0 || strncmp (s->broker, "inproc://", 9) == 0)
        snprintf (host, size, "127.0.0.1");
    else
    if (gethostname (host, size - 1))
        snprintf (host, size, "localhost");
}

//  Waits for the client's WELCOME and applies the broker's job. Returns 0
//  with the index and the endpoint this ps index had before, or 1.
static int
s_welcome (zactor_t *client, const char *role, za_options_t *options, int *index,
           char *endpoint, size_t size)
{
    char *what = NULL, *index_text = NULL, *job = NULL, *old_endpoint = NULL;
    int rc = 1;
    if (zstr_recvx (client, &what, &index_text, &job, &old_endpoint, NULL) < 1
        || zsys_interrupted)
        ;
    else
    if (streq (what, "FAILED"))
        za_error ("%s: %s", role, index_text? index_text: "the broker failed");
    else
    if (streq (what, "WELCOME") && job && index_text) {
        json_error_t error;
        json_t *json = json_loads (job, 0, &error);
        rc = json && za_options_apply_wire_job (options, json, "the broker's job") == 0? 0: 1;
        json_decref (json);
        *index = atoi (index_text);
        snprintf (endpoint, size, "%s", old_endpoint? old_endpoint: "");
    }
    zstr_free (&what);
    zstr_free (&index_text);
    zstr_free (&job);
    zstr_free (&old_endpoint);
    return rc;
}

//  The rest of a VIEW: the ring's endpoints (none without the all-reduce);
//  this task's right neighbour into place->right. Returns 0, or 1 with an
//  error.
static int
s_ring_from_view (zmsg_t *view, const char *role, za_place_t *place)
{
    char *count = zmsg_popstr (view);
    int members = count? atoi (count): -1, rc = 0;
    zstr_free (&count);
    if (members == 0)
        return 0;
    //  Elastic: the role forms its ring from the members (za_membership.h).
    if (place->membership) {
        for (int r = 0; r < members; r++) {
            char *endpoint = zmsg_popstr (view);
            zstr_free (&endpoint);
        }
        return 0;
    }
    if (members != place->num_workers)
        rc = 1;
    for (int r = 0; r < members && !rc; r++) {
        char *endpoint = zmsg_popstr (view);
        if (!endpoint || !*endpoint)
            rc = 1;
        else
        if (r == (place->worker_index + 1) % place->num_workers)
            snprintf (place->right, sizeof place->right, "%s", endpoint);
        zstr_free (&endpoint);
    }
    if (rc)
        za_error ("%s: the broker's view is not a ring of %d endpoints", role,
                  place->num_workers);
    return rc;
}

//  Waits for the cluster view (every ps's endpoint), at most timeout_secs.
//  Returns 0, or 1 with an error.
static int
s_view (zactor_t *client, const char *role, za_place_t *place, double timeout_secs)
{
    zpoller_t *poller = zpoller_new (zactor_sock (client), NULL);
    void *which = zpoller_wait (poller, (int) (timeout_secs * 1000));
    zpoller_destroy (&poller);
    if (!which && zsys_interrupted) {
        za_error ("%s: interrupted while waiting for the cluster to be complete", role);
        return 1;
    }
    if (!which) {
        za_error ("%s: the cluster was not complete within %.0f s (the broker's view lacks a "
                  "task or a ps endpoint: see zactor-top)", role, timeout_secs);
        return 1;
    }
    zmsg_t *view = zmsg_recv (client);
    char *what = view? zmsg_popstr (view): NULL;
    int rc = 1;
    if (what && streq (what, "VIEW")) {
        char *count = zmsg_popstr (view);
        if (count && atoi (count) == place->ps_count) {
            rc = 0;
            for (int p = 0; p < place->ps_count; p++) {
                char *endpoint = zmsg_popstr (view);
                if (!endpoint || !*endpoint)
                    rc = 1;
                else
                    snprintf (place->ps_endpoints [p], sizeof place->ps_endpoints [p], "%s",
                              endpoint);
                zstr_free (&endpoint);
            }
        }
        zstr_free (&count);
        if (rc)
            za_error ("%s: the broker's view is not a list of %d ps endpoints", role,
                      place->ps_count);
        else
            rc = s_ring_from_view (view, role, place);
    }
    else
    if (what && streq (what, "FAILED")) {
        char *why = zmsg_popstr (view);
        za_error ("%s: %s", role, why? why: "the broker failed");
        zstr_free (&why);
    }
    zstr_free (&what);
    zmsg_destroy (&view);
    return rc;
}

//  Every host of the view this task connects to (each ps; its right
//  neighbour in the ring) resolves within timeout_secs. Returns 0, or 1.
static int
s_view_resolved (const za_place_t *place, double timeout_secs)
{
    const char *endpoints [ZA_ROLE_MAX_PS + 1], *who [ZA_ROLE_MAX_PS + 1];
    char names [ZA_ROLE_MAX_PS][16];
    int count = 0;
    for (int p = 0; p < place->ps_count && p < ZA_ROLE_MAX_PS; p++)
        if (*place->ps_endpoints [p]) {
            snprintf (names [count], sizeof names [count], "ps %d", p);
            who [count] = names [count];
            endpoints [count++] = place->ps_endpoints [p];
        }
    if (*place->right) {
        who [count] = "the next worker of the ring";
        endpoints [count++] = place->right;
    }
    return za_cluster_wait_for_hosts (endpoints, who, count, timeout_secs)? 1: 0;
}

//  The task type --role names into *type. 0, or -1 (said, *type untouched)
//  when it names none.
static int
s_role_type (const char *role, za_task_type_t *type)
{
    int known = 0;
    for (int k = ZA_TASK_CHIEF; k <= ZA_TASK_EVALUATOR; k++)
        if (role && streq (role, za_task_type_name ((za_task_type_t) k)))
            *type = (za_task_type_t) k, known = 1;
    if (!known) {
        za_error ("--broker needs --role chief, worker, ps or evaluator");
        return -1;
    }
    return 0;
}

//  Where the welcome put this task in the job, and the endpoint it binds
//  when it serves (told to the broker when it is a ring's). Returns 0, 1
//  when no port is free, or ZA_EXIT_USAGE when the bind is not allowed.
static int
s_place_set (za_place_t *place, za_task_type_t type, const za_settings_t *s, const char *host,
             const char *old_endpoint, zactor_t *client)
{
    int rc = 0;
    place->type = type;
    place->is_chief = type == ZA_TASK_CHIEF;
    place->worker_index = type == ZA_TASK_CHIEF? 0
                        : type == ZA_TASK_WORKER? place->index + 1: -1;
    place->num_workers = (int) (1 + s->workers.max);
    place->ps_count = (int) s->ps;
    place->evaluators = (int) s->evaluators;
    //  The ps serve; so do the chief and workers of the all-reduce ring, which
    //  say where before the view can be complete. A restarted task binds
    //  where its index was, so that its peers' sockets find it again.
    int ring = s->strategy == ZA_STRATEGY_ALLREDUCE && place->worker_index >= 0;
    //  Its port, that is, on this host (it may have moved). Peers reach it by
    //  this host's name, which libzmq does not bind (and which Debian's
    //  /etc/hosts maps to 127.0.1.1): a name binds every interface, but
    //  localhost loopback's alone.
    char old_host [ZA_CLUSTER_ENDPOINT_MAX];
    int port = 0;
    struct in_addr literal;
    if (type == ZA_TASK_PS || ring) {
        if (*old_endpoint && !za_cluster_endpoint_split (old_endpoint, old_host,
                                                         sizeof old_host, &port))
            snprintf (place->bind, sizeof place->bind, "tcp://%s:%d", host, port);
        else
        if (za_cluster_free_endpoint (host, place->bind, sizeof place->bind)
            || za_cluster_endpoint_split (place->bind, old_host, sizeof old_host, &port))
            rc = 1;
        if (!rc && inet_pton (AF_INET, host, &literal) != 1 && !strchr (host, ':'))
            snprintf (place->listen, sizeof place->listen, "tcp://%s:%d",
                      za_curve_loopback (place->bind)? "127.0.0.1": "*", port);
    }
    if (!rc && *place->bind && za_settings_bind_allowed (s, place->bind))
        rc = ZA_EXIT_USAGE;
    if (!rc && ring)
        zstr_sendx (client, "ENDPOINT", place->bind, NULL);
    return rc;
}

int
za_place_run_with_broker (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    const char *role = s->role;
    za_task_type_t type = ZA_TASK_CHIEF;
    if (s_role_type (role, &type))
        return ZA_EXIT_USAGE;
    char host [256];
    s_my_host (s, host, sizeof host);
    static za_role_stats_t stats;
    za_role_stats_init (&stats);
    const char *restarts = getenv ("ZA_RESTARTS");
    const char *the_broker = "the broker";
    if (strncmp (s->broker, "tcp://", 6) == 0
        && za_cluster_wait_for_hosts (&s->broker, &the_broker, 1, s->timeout_secs))
        return 1;
    //  Every task hears an elastic job's members (the job is known only
    //  from the welcome: published in any case, read when it is elastic).
    static za_membership_t membership;
    za_membership_init (&membership);
    za_broker_client_config_t client_config = {
        .broker = s->broker, .role = role, .index = (int) s->index, .host = host,
        .restarts = restarts? atoi (restarts): 0, .stats = &stats,
        .heartbeat = za_settings_heartbeat (s), .timeout_secs = s->timeout_secs,
        .membership = &membership,
    };
    zactor_t *client = zactor_new (za_broker_client_actor, &client_config);
    if (!client)
        return 1;
    //  The client ends at SIGINT/SIGTERM, maybe before we say DONE: a word
    //  to it must never wait for a reader that is gone (the role hung at its
    //  end, the broker long dead).
    zsock_set_sndtimeo (zactor_sock (client), 0);
    za_place_t place;
    memset (&place, 0, sizeof place);
    char old_endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    int rc = s_welcome (client, role, options, &place.index, old_endpoint,
                        sizeof old_endpoint);
    za_task_t task;
    memset (&task, 0, sizeof task);
    if (!rc) {
        //  The job's heartbeat, which the broker judges our reports by.
        za_heartbeat_t beat = za_settings_heartbeat (s);
        char text [64];
        snprintf (text, sizeof text, "%.17g %d", beat.ivl_secs, beat.liveness);
        zstr_sendx (client, "HEARTBEAT", text, NULL);
        za_info ("%s %d: registered with the broker at %s", role, place.index, s->broker);
        if (streq (host, "127.0.0.1"))
            s_share_cores (options, s, (int) (1 + s->workers.max + s->ps + s->evaluators));
        place.membership = za_settings_elastic (s)? &membership: NULL;
        rc = s_place_set (&place, type, s, host, old_endpoint, client);
        int need_eval = type == ZA_TASK_EVALUATOR
                     || (place.is_chief && !s->no_eval && !place.evaluators);
        if (!rc)
            rc = za_task_prepare (&task, program, options, s, need_eval,
                                  za_settings_replicas (s, place.num_workers));
        task.stats = &stats;
    }
    if (!rc && (type == ZA_TASK_CHIEF || type == ZA_TASK_WORKER))
        rc = s_view (client, role, &place, s->timeout_secs);
    if (!rc)
        rc = s_view_resolved (&place, s->timeout_secs);
    if (!rc)
        rc = type == ZA_TASK_EVALUATOR? za_task_run_evaluator (&task, client)
                                      : za_task_run_role (&task, &place, client);
    za_task_release (&task);
    char code [16];
    snprintf (code, sizeof code, "%d", rc);
    zstr_sendx (client, "DONE", code, NULL);
    zactor_destroy (&client);
    za_membership_destroy (&membership);
    return rc;
}
