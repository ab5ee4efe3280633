/*  test_cluster.c: TF_CONFIG cluster specs: every valid form and what is derived
    from it, every mistake answered with one error that names it, and loading.  */
#define _GNU_SOURCE
#include "za/za_cluster.h"
#include "za/za_util.h"
#include "za_test.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPEC_TEXT_MAX 8192
#define CAPTURE_MAX_BYTES 8192

static void
s_setup (void)
{
    za_error_clear ();
    unsetenv ("TF_CONFIG");
}

TestSuite (cluster, .init = s_setup);


//  --------------------------------------------------------------------------
//  Helpers

//  Specs are written with ' for " so they read as JSON; this swaps them back.
static const char *
s_json (const char *quoted)
{
    static char text [SPEC_TEXT_MAX];
    size_t len = strlen (quoted);
    cr_assert_lt (len, sizeof text);
    for (size_t i = 0; i <= len; i++)
        text [i] = quoted [i] == '\'' ? '"' : quoted [i];
    return text;
}

static za_cluster_t *
s_parse_ok (const char *quoted)
{
    za_cluster_t *cluster = za_cluster_parse (s_json (quoted), "TF_CONFIG");
    cr_assert_not_null (cluster, "rejected: %s", za_last_error ());
    return cluster;
}

//  Parses text that must fail, capturing stderr: checks that exactly one error
//  was reported, that it starts with the source, and that it has `words`.
static void
s_expect_error_text (const char *text, const char *words)
{
    fflush (stderr);
    FILE *capture = tmpfile ();
    cr_assert_not_null (capture);
    int saved = dup (STDERR_FILENO);
    cr_assert_geq (saved, 0);
    cr_assert_geq (dup2 (fileno (capture), STDERR_FILENO), 0);
    za_error_clear ();
    za_cluster_t *cluster = za_cluster_parse (text, "TF_CONFIG");
    fflush (stderr);
    dup2 (saved, STDERR_FILENO);
    close (saved);

    char printed [CAPTURE_MAX_BYTES] = "";
    rewind (capture);
    size_t got = fread (printed, 1, sizeof printed - 1, capture);
    printed [got] = '\0';
    fclose (capture);

    cr_expect_null (cluster, "accepted: %s", text);
    za_cluster_destroy (&cluster);
    const char *error = za_last_error ();
    cr_expect (strstr (error, words) != NULL, "'%s' lacks '%s'", error, words);
    cr_expect (strncmp (error, "TF_CONFIG: ", strlen ("TF_CONFIG: ")) == 0,
               "'%s' does not name its source", error);
    int reported = 0;
    for (const char *at = printed; (at = strstr (at, "error:")) != NULL; at++)
        reported++;
    cr_expect_eq (reported, 1, "%d errors reported, not 1: %s", reported, printed);
}

static void
s_expect_error (const char *quoted, const char *words)
{
    s_expect_error_text (s_json (quoted), words);
}

//  A cluster of one chief and two ps around a job list and a task, for the
//  mistakes that concern one part only.
#define GOOD_CLUSTER "{'chief': ['c:2222'], 'worker': ['w0:2222', 'w1:2222'], " \
                     "'ps': ['p0:2222', 'p1:2222']}"
#define GOOD_TASK "{'type': 'worker', 'index': 1}"


//  --------------------------------------------------------------------------
//  Valid forms

Test (cluster, chief_only_and_ps)
{
    za_cluster_t *cluster = s_parse_ok ("{'cluster': {'chief': ['localhost:2222'], "
                                        "'ps': ['localhost:2223']}, "
                                        "'task': {'type': 'chief', 'index': 0}}");
    cr_expect_eq (cluster->chief_count, 1);
    cr_expect_eq (cluster->worker_count, 0);
    cr_expect_eq (cluster->ps_count, 1);
    cr_expect_eq (cluster->evaluator_count, 0);
    cr_expect_str_eq (cluster->chief [0], "localhost:2222");
    cr_expect_str_eq (cluster->ps [0], "localhost:2223");
    cr_expect_eq (cluster->task_type, ZA_TASK_CHIEF);
    cr_expect_eq (cluster->task_index, 0);
    cr_expect_eq (cluster->num_workers, 1);
    cr_expect_eq (cluster->is_chief, 1);
    cr_expect_eq (cluster->worker_index, 0);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":2222") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    char *endpoint = za_cluster_ps_endpoint (cluster, 0);
    cr_expect_str_eq (endpoint, "tcp://localhost:2223");
    free (endpoint);
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 2);
    za_cluster_destroy (&cluster);
    cr_expect_null (cluster);
    za_cluster_destroy (&cluster);      //  twice is harmless
}

Test (cluster, chief_workers_and_ps)
{
    za_cluster_t *cluster = s_parse_ok ("{'cluster': " GOOD_CLUSTER ", 'task': " GOOD_TASK "}");
    cr_expect_eq (cluster->chief_count, 1);
    cr_expect_eq (cluster->worker_count, 2);
    cr_expect_eq (cluster->ps_count, 2);
    cr_expect_str_eq (cluster->worker [0], "w0:2222");
    cr_expect_str_eq (cluster->worker [1], "w1:2222");
    cr_expect_str_eq (cluster->ps [1], "p1:2222");
    cr_expect_eq (cluster->task_type, ZA_TASK_WORKER);
    cr_expect_eq (cluster->task_index, 1);
    cr_expect_eq (cluster->num_workers, 3);
    cr_expect_eq (cluster->is_chief, 0);
    cr_expect_eq (cluster->worker_index, 2);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":2222") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 1);
    char *endpoint = za_cluster_ps_endpoint (cluster, 1);
    cr_expect_str_eq (endpoint, "tcp://p1:2222");
    free (endpoint);
    za_error_set_quiet (1);
    cr_expect_null (za_cluster_ps_endpoint (cluster, 2));
    cr_expect_null (za_cluster_ps_endpoint (cluster, -1));
    za_cluster_destroy (&cluster);

    //  Worker 0 is the second worker of the run (the chief is the first).
    cluster = s_parse_ok ("{'cluster': " GOOD_CLUSTER ", "
                          "'task': {'type': 'worker', 'index': 0}}");
    cr_expect_eq (cluster->worker_index, 1);
    za_cluster_destroy (&cluster);
}

Test (cluster, ps_task)
{
    za_cluster_t *cluster = s_parse_ok ("{'cluster': {'chief': ['h:1000'], 'worker': ['h:1001'],"
                                        " 'ps': ['h:1002', 'h:1003']},"
                                        " 'task': {'type': 'ps', 'index': 1}}");
    cr_expect_eq (cluster->task_type, ZA_TASK_PS);
    cr_expect_eq (cluster->task_index, 1);
    cr_expect_eq (cluster->num_workers, 2);
    cr_expect_eq (cluster->is_chief, 0);
    cr_expect_eq (cluster->worker_index, -1);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":1003") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 4);
    za_cluster_destroy (&cluster);
}

Test (cluster, evaluator_inside_cluster)
{
    za_cluster_t *cluster = s_parse_ok ("{'cluster': {'chief': ['c:2222'], 'ps': ['p:2222'],"
                                        " 'evaluator': ['e:2224']},"
                                        " 'task': {'type': 'evaluator', 'index': 0}}");
    cr_expect_eq (cluster->evaluator_count, 1);
    cr_expect_str_eq (cluster->evaluator [0], "e:2224");
    cr_expect_eq (cluster->task_type, ZA_TASK_EVALUATOR);
    cr_expect_eq (cluster->task_index, 0);
    cr_expect_eq (cluster->num_workers, 1);
    cr_expect_eq (cluster->is_chief, 0);
    cr_expect_eq (cluster->worker_index, -1);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":2224") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 1);
    za_cluster_destroy (&cluster);
}

Test (cluster, evaluator_outside_cluster)
{
    za_cluster_t *cluster = s_parse_ok ("{'cluster': {'chief': ['c:2222'], 'worker': ['w:2222'],"
                                        " 'ps': ['p:2222']},"
                                        " 'task': {'type': 'evaluator', 'index': 0}}");
    cr_expect_eq (cluster->evaluator_count, 0);
    cr_expect_eq (cluster->task_type, ZA_TASK_EVALUATOR);
    cr_expect_eq (cluster->task_index, 0);
    cr_expect_eq (cluster->num_workers, 2);
    cr_expect_eq (cluster->is_chief, 0);
    cr_expect_eq (cluster->worker_index, -1);
    cr_expect_str_eq (cluster->bind_endpoint, "");
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 1);
    za_cluster_destroy (&cluster);
}

Test (cluster, environment_rpc_layer_and_unknown_keys_ignored)
{
    za_cluster_t *cluster = s_parse_ok ("{'cluster': " GOOD_CLUSTER ", "
                                        "'task': {'type': 'chief', 'index': 0, 'trial': '7'},"
                                        " 'environment': 'cloud', 'rpc_layer': 'grpc',"
                                        " 'session_master': '', 'extra': [1, {'x': null}]}");
    cr_expect_eq (cluster->task_type, ZA_TASK_CHIEF);
    cr_expect_eq (cluster->is_chief, 1);
    cr_expect_eq (cluster->worker_index, 0);
    cr_expect_eq (cluster->num_workers, 3);
    za_cluster_destroy (&cluster);
}

Test (cluster, tasks_on_one_host_share_it)
{
    const char *spec = "{'cluster': {'chief': ['localhost:2222'],"
                       " 'worker': ['LocalHost:2223', 'localhost:2224', '10.0.0.2:2222'],"
                       " 'ps': ['localhost:2225', '10.0.0.2:2223'],"
                       " 'evaluator': ['localhost:2226']},"
                       " 'task': {'type': 'worker', 'index': 1}}";
    za_cluster_t *cluster = s_parse_ok (spec);
    //  Hosts compare as written, case aside: 5 tasks on "localhost".
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 5);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":2224") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    za_cluster_destroy (&cluster);

    cluster = s_parse_ok ("{'cluster': {'chief': ['localhost:2222'],"
                          " 'worker': ['10.0.0.2:2222'], 'ps': ['10.0.0.2:2223']},"
                          " 'task': {'type': 'ps', 'index': 0}}");
    cr_expect_eq (za_cluster_tasks_on_my_host (cluster), 2);
    za_cluster_destroy (&cluster);
}

Test (cluster, task_type_names)
{
    cr_expect_str_eq (za_task_type_name (ZA_TASK_CHIEF), "chief");
    cr_expect_str_eq (za_task_type_name (ZA_TASK_WORKER), "worker");
    cr_expect_str_eq (za_task_type_name (ZA_TASK_PS), "ps");
    cr_expect_str_eq (za_task_type_name (ZA_TASK_EVALUATOR), "evaluator");
    cr_expect_str_eq (za_task_type_name ((za_task_type_t) 9), "unknown");
}

Test (cluster, largest_job_and_ports_at_the_limits)
{
    char text [SPEC_TEXT_MAX];
    size_t used = (size_t) snprintf (text, sizeof text,
                                     "{\"cluster\": {\"chief\": [\"c:1\"], "
                                     "\"ps\": [\"p:65535\"], \"worker\": [");
    for (int i = 0; i < ZA_CLUSTER_MAX_TASKS; i++)
        used += (size_t) snprintf (text + used, sizeof text - used, "%s\"w%d:%d\"",
                                   i ? ", " : "", i, 3000 + i);
    snprintf (text + used, sizeof text - used,
              "]}, \"task\": {\"type\": \"worker\", \"index\": %d}}", ZA_CLUSTER_MAX_TASKS - 1);
    za_cluster_t *cluster = za_cluster_parse (text, "TF_CONFIG");
    cr_assert_not_null (cluster, "%s", za_last_error ());
    cr_expect_eq (cluster->worker_count, ZA_CLUSTER_MAX_TASKS);
    cr_expect_eq (cluster->num_workers, ZA_CLUSTER_MAX_TASKS + 1);
    cr_expect_eq (cluster->worker_index, ZA_CLUSTER_MAX_TASKS);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":3063") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    cr_expect_str_eq (cluster->chief [0], "c:1");
    cr_expect_str_eq (cluster->ps [0], "p:65535");
    za_cluster_destroy (&cluster);
}


//  --------------------------------------------------------------------------
//  Mistakes: each one error, naming it

Test (cluster, unparsable_json_gives_line_and_column)
{
    //  The stray comma is on line 3, column 2 (jansson counts from 1).
    s_expect_error ("{'cluster': {'chief': ['c:1'],\n 'ps': ['p:2']},\n ,'task': {}}",
                    "line 3, column 2");
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:2']}, 'task': ", "line 1");
    s_expect_error_text ("", "not valid JSON");
    s_expect_error ("{'cluster': {}, 'cluster': {}, 'task': {}}", "duplicate");
    s_expect_error ("{'cluster': {}, 'task': {}} trailing", "not valid JSON");
}

Test (cluster, not_an_object)
{
    s_expect_error ("[1, 2]", "top level must be a JSON object");
    s_expect_error ("'chief'", "top level must be a JSON object");
    s_expect_error ("42", "top level must be a JSON object");
    za_error_set_quiet (1);
    cr_expect_null (za_cluster_parse (NULL, "TF_CONFIG"));
    cr_expect (strstr (za_last_error (), "no text") != NULL, "%s", za_last_error ());
}

Test (cluster, missing_or_invalid_cluster_and_task)
{
    s_expect_error ("{'task': " GOOD_TASK "}", "no \"cluster\"");
    s_expect_error ("{'cluster': ['c:1'], 'task': " GOOD_TASK "}",
                    "\"cluster\" must be an object");
    s_expect_error ("{'cluster': " GOOD_CLUSTER "}", "no \"task\"");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': 'worker'}",
                    "\"task\" must be an object");
    s_expect_error ("{'cluster': {}, 'task': " GOOD_TASK "}", "lists no jobs");
}

Test (cluster, unknown_job_name)
{
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'master': ['m:1']},"
                    " 'task': {'type': 'chief', 'index': 0}}", "unknown job \"master\"");
}

Test (cluster, task_type_unknown_or_missing)
{
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'master', 'index': 0}}",
                    "task type \"master\" is unknown");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 1, 'index': 0}}",
                    "task type is an integer, not a string");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'index': 0}}", "no \"type\"");
}

Test (cluster, task_index_not_an_integer)
{
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'worker', 'index': 'one'}}",
                    "task index is a string, not an integer");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'worker', 'index': '-1'}}",
                    "task index is a string, not an integer");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'worker', 'index': 1.0}}",
                    "task index is a number, not an integer");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'worker'}}",
                    "no \"index\"");
}

Test (cluster, task_index_out_of_range)
{
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'worker', 'index': 2}}",
                    "task index 2 is out of range for job worker (0..1)");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'ps', 'index': -1}}",
                    "task index -1 is out of range for job ps (0..1)");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", 'task': {'type': 'chief', 'index': 1}}",
                    "task index 1 is out of range for job chief (0..0)");
    s_expect_error ("{'cluster': " GOOD_CLUSTER ", "
                    "'task': {'type': 'worker', 'index': 99999999999}}",
                    "task index 99999999999 is out of range");
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:1']},"
                    " 'task': {'type': 'worker', 'index': 0}}", "has no worker job");
}

Test (cluster, evaluator_index_out_of_range)
{
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'evaluator': ['e:1']},"
                    " 'task': {'type': 'evaluator', 'index': 1}}",
                    "task index 1 is out of range for job evaluator (0..0)");
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:1']},"
                    " 'task': {'type': 'evaluator', 'index': 1}}",
                    "evaluator outside the cluster must be index 0");
}

Test (cluster, no_chief)
{
    s_expect_error ("{'cluster': {'worker': ['w:1'], 'ps': ['p:1']}, 'task': " GOOD_TASK "}",
                    "no chief");
    s_expect_error ("{'cluster': {'ps': ['p:1']}, 'task': {'type': 'ps', 'index': 0}}",
                    "no chief");
}

Test (cluster, two_or_more_chiefs)
{
    s_expect_error ("{'cluster': {'chief': ['c:1', 'd:1'], 'ps': ['p:1']},"
                    " 'task': {'type': 'chief', 'index': 0}}", "2 chiefs");
    s_expect_error ("{'cluster': {'chief': ['c:1', 'd:1', 'e:1'], 'ps': ['p:1']},"
                    " 'task': {'type': 'ps', 'index': 0}}", "3 chiefs");
}

Test (cluster, job_lists_empty_or_not_strings)
{
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'worker': [], 'ps': ['p:1']},"
                    " 'task': {'type': 'chief', 'index': 0}}", "cluster.worker is empty");
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:1', 2222]},"
                    " 'task': {'type': 'chief', 'index': 0}}",
                    "cluster.ps[1] is an integer, not a \"host:port\" string");
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': [null]},"
                    " 'task': {'type': 'chief', 'index': 0}}", "cluster.ps[0] is null");
    s_expect_error ("{'cluster': {'chief': 'c:1', 'ps': ['p:1']},"
                    " 'task': {'type': 'chief', 'index': 0}}",
                    "cluster.chief must be a list");
}

Test (cluster, addresses_without_host_or_valid_port)
{
    struct {
        const char *address;
        const char *words;
    } cases [] = {
        { ":2222", "\":2222\" has no host" },
        { "host", "\"host\" has no port" },
        { "host:", "\"host:\" has no port" },
        { "host:0", "\"host:0\" has a port that is not in 1..65535" },
        { "host:65536", "\"host:65536\" has a port that is not in 1..65535" },
        { "host:99999999999999999999", "port that is not in 1..65535" },
        { "host:-1", "\"host:-1\" has a port that is not a number" },
        { "host:22a", "port that is not a number" },
        { "host: 22", "port that is not a number" },
        { "tcp://host:2222", "has a scheme" },
        { "my host:2222", "host that is not a host name" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        char spec [SPEC_TEXT_MAX];
        snprintf (spec, sizeof spec, "{'cluster': {'chief': ['c:1'], 'ps': ['p:1', '%s']},"
                  " 'task': {'type': 'chief', 'index': 0}}", cases [i].address);
        s_expect_error (spec, cases [i].words);
        cr_expect (strstr (za_last_error (), "cluster.ps[1]") != NULL, "%s", za_last_error ());
    }
}

Test (cluster, same_address_twice)
{
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'worker': ['w:1', 'w:1'], 'ps': ['p:1']},"
                    " 'task': {'type': 'chief', 'index': 0}}",
                    "\"w:1\" is used twice: by cluster.worker[0] and cluster.worker[1]");
    s_expect_error ("{'cluster': {'chief': ['h:2222'], 'ps': ['H:2222']},"
                    " 'task': {'type': 'chief', 'index': 0}}",
                    "used twice: by cluster.chief[0] and cluster.ps[0]");
    s_expect_error ("{'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'evaluator': ['p:1']},"
                    " 'task': {'type': 'chief', 'index': 0}}", "used twice");
}

Test (cluster, more_tasks_than_the_maximum)
{
    char text [SPEC_TEXT_MAX];
    size_t used = (size_t) snprintf (text, sizeof text,
                                     "{\"cluster\": {\"chief\": [\"c:1\"], \"ps\": [");
    for (int i = 0; i <= ZA_CLUSTER_MAX_TASKS; i++)
        used += (size_t) snprintf (text + used, sizeof text - used, "%s\"p%d:2222\"",
                                   i ? ", " : "", i);
    snprintf (text + used, sizeof text - used,
              "]}, \"task\": {\"type\": \"chief\", \"index\": 0}}");
    s_expect_error_text (text, "cluster.ps has 65 tasks, more than 64");
}

Test (cluster, workers_only_make_a_ring_whose_worker_0_is_the_chief)
{
    //  The tutorial's MultiWorkerMirrored TF_CONFIG: no chief, no ps.
    za_cluster_t *c = s_parse_ok ("{'cluster': {'worker': ['localhost:12345', "
                                  "'localhost:23456']}, 'task': {'type': 'worker', "
                                  "'index': 1}}");
    cr_expect_eq (c->num_workers, 2);
    cr_expect_eq (c->ps_count, 0);
    cr_expect_eq (c->worker_index, 1);
    cr_expect_eq (c->is_chief, 0);
    char *first = za_cluster_worker_endpoint (c, 0), *second = za_cluster_worker_endpoint (c, 1);
    cr_expect_str_eq (first, "tcp://localhost:12345");
    cr_expect_str_eq (second, "tcp://localhost:23456");
    cr_expect_null (za_cluster_worker_endpoint (c, 2));
    free (first);
    free (second);
    za_cluster_destroy (&c);
    c = s_parse_ok ("{'cluster': {'worker': ['a:1', 'b:1']}, 'task': {'type': 'worker', "
                    "'index': 0}}");
    cr_expect_eq (c->is_chief, 1);
    cr_expect_eq (c->worker_index, 0);
    za_cluster_destroy (&c);
    //  With a chief, the chief is rank 0 and worker i rank i + 1.
    c = s_parse_ok ("{'cluster': {'chief': ['c:1'], 'worker': ['w:1']}, 'task': {'type': "
                    "'worker', 'index': 0}}");
    cr_expect_eq (c->is_chief, 0);
    cr_expect_eq (c->worker_index, 1);
    first = za_cluster_worker_endpoint (c, 0);
    cr_expect_str_eq (first, "tcp://c:1");
    free (first);
    za_cluster_destroy (&c);
}


//  --------------------------------------------------------------------------
//  Loading from TF_CONFIG and from a file

#define FILE_SPEC "{\"cluster\": {\"chief\": [\"c:2222\"], \"ps\": [\"p:2222\"]},\n" \
                  " \"task\": {\"type\": \"ps\", \"index\": 0}}\n"

Test (cluster, load_from_tf_config)
{
    cr_assert_eq (setenv ("TF_CONFIG", s_json ("{'cluster': " GOOD_CLUSTER ", "
                                                "'task': " GOOD_TASK "}"), 1), 0);
    za_cluster_t *cluster = za_cluster_load (NULL);
    cr_assert_not_null (cluster, "%s", za_last_error ());
    cr_expect_eq (cluster->task_type, ZA_TASK_WORKER);
    cr_expect_eq (cluster->worker_index, 2);
    za_cluster_destroy (&cluster);

    za_error_set_quiet (1);
    cr_assert_eq (setenv ("TF_CONFIG", "{\"cluster\": {}}", 1), 0);
    cr_expect_null (za_cluster_load (NULL));
    cr_expect (strncmp (za_last_error (), "TF_CONFIG: ", 11) == 0, "%s", za_last_error ());

    cr_assert_eq (unsetenv ("TF_CONFIG"), 0);
    cr_expect_null (za_cluster_load (NULL));
    cr_expect (strstr (za_last_error (), "TF_CONFIG is not set") != NULL, "%s",
               za_last_error ());
    cr_assert_eq (setenv ("TF_CONFIG", "", 1), 0);
    cr_expect_null (za_cluster_load (NULL));
    cr_expect (strstr (za_last_error (), "TF_CONFIG is not set") != NULL, "%s",
               za_last_error ());
}

Test (cluster, load_from_file)
{
    za_test_dir_create ("za_cluster_test");
    char *path = za_test_path ("tf_config.json");
    FILE *file = fopen (path, "w");
    cr_assert_not_null (file);
    fputs (FILE_SPEC, file);
    fclose (file);
    //  The file wins over TF_CONFIG.
    cr_assert_eq (setenv ("TF_CONFIG", "not json", 1), 0);
    za_cluster_t *cluster = za_cluster_load (path);
    cr_assert_not_null (cluster, "%s", za_last_error ());
    cr_expect_eq (cluster->task_type, ZA_TASK_PS);
    cr_expect_eq (cluster->worker_index, -1);
    cr_expect (strncmp (cluster->bind_endpoint, "tcp://", 6) == 0 && strstr (cluster->bind_endpoint, ":2222") && !strstr (cluster->bind_endpoint, "*"), "%s", cluster->bind_endpoint);
    za_cluster_destroy (&cluster);

    //  A mistake in the file is reported with its path, line and column.
    file = fopen (path, "w");
    cr_assert_not_null (file);
    fputs ("{\"cluster\": {\"chief\": [\"c:2222\"]},\n \"task\": {\"type\": }}\n", file);
    fclose (file);
    za_error_set_quiet (1);
    cr_expect_null (za_cluster_load (path));
    cr_expect (strncmp (za_last_error (), path, strlen (path)) == 0, "%s", za_last_error ());
    cr_expect (strstr (za_last_error (), "line 2, column") != NULL, "%s", za_last_error ());

    char *missing = za_test_path ("absent.json");
    cr_expect_null (za_cluster_load (missing));
    cr_expect (strstr (za_last_error (), "cannot read") != NULL, "%s", za_last_error ());
    cr_expect (strstr (za_last_error (), missing) != NULL, "%s", za_last_error ());
    free (missing);
    free (path);
    za_test_dir_remove ();
}

//  The one splitter of tcp://HOST:PORT that the broker, the ring and a
//  task's bind all use.
Test (cluster, endpoints_split_into_host_and_port)
{
    char host [16];
    int port = 0;
    cr_expect_eq (za_cluster_endpoint_split ("tcp://node-1:5555", host, sizeof host, &port), 0);
    cr_expect_str_eq (host, "node-1");
    cr_expect_eq (port, 5555);
    cr_expect_eq (za_cluster_endpoint_split ("tcp://[::1]:1", host, sizeof host, &port), 0);
    cr_expect_str_eq (host, "[::1]");
    const char *bad [] = {"node:5555", "tcp://:5555", "tcp://node", "tcp://node:",
                          "tcp://node:0", "tcp://node:65536", "tcp://node:55x",
                          "ipc://node:5555", "tcp://a-host-name-too-long:1", NULL};
    for (int i = 0; bad [i]; i++)
        cr_expect_eq (za_cluster_endpoint_split (bad [i], host, sizeof host, &port), -1,
                      "%s was split", bad [i]);
}

Test (cluster, an_endpoint_from_the_network_is_a_tcp_host_and_port)
{
    const char *good [] = {"tcp://127.0.0.1:5555", "tcp://node-1.example.org:1",
                           "tcp://[::1]:65535", NULL};
    for (int i = 0; good [i]; i++)
        cr_expect (za_cluster_endpoint_valid (good [i]), "%s was refused", good [i]);
    const char *bad [] = {"", "ipc:///etc/passwd", "inproc://zeromq.zap.01", "tcp://*:5555",
                          "tcp://a b:1", "tcp://node;rm:1", "tcp://node/x:1",
                          "tcp://node\n:1", "tcp://node:0", NULL};
    for (int i = 0; bad [i]; i++)
        cr_expect (!za_cluster_endpoint_valid (bad [i]), "%s was taken", bad [i]);
    cr_expect (!za_cluster_host_valid (""));
    cr_expect (!za_cluster_host_valid ("host\x1b[2J"));
}


//  --------------------------------------------------------------------------
//  TF_CONFIG as TensorFlow reads it: tests/data/tf_config_answers.json holds
//  what TensorFlow's TFConfigClusterResolver answered for each case
//  (bench/tf_config_answers.py recorded it); zactor derives the same
//  cluster, task type and index, or refuses where the case says it must.

//  The addresses of one job as zactor holds them against TensorFlow's list.
static void
s_expect_job (const char *name, const char *job, char **addresses, int count,
              const json_t *cluster)
{
    const json_t *tasks = json_object_get (cluster, job);
    int expected = tasks? (int) json_array_size (tasks): 0;
    cr_expect_eq (count, expected, "%s: %s has %d tasks, TensorFlow %d", name, job, count,
                  expected);
    for (int t = 0; t < count && t < expected; t++)
        cr_expect_str_eq (addresses [t], json_string_value (json_array_get (tasks, t)),
                          "%s: %s %d", name, job, t);
}

Test (cluster, tf_config_as_tensorflow_reads_it)
{
    json_error_t error;
    json_t *record = json_load_file (ZA_SOURCE_DIR "/tests/data/tf_config_answers.json", 0,
                                     &error);
    cr_assert_not_null (record, "%s", error.text);
    const json_t *cases = json_object_get (record, "cases");
    cr_assert_geq (json_array_size (cases), 10);
    int same = 0, refused = 0;
    size_t c;
    const json_t *item;
    json_array_foreach (cases, c, item) {
        const char *name = json_string_value (json_object_get (item, "name"));
        const char *zactor = json_string_value (json_object_get (item, "zactor"));
        const json_t *tf = json_object_get (item, "tensorflow");
        cr_assert (name && zactor && tf);
        za_cluster_t *cluster = za_cluster_parse (
            json_string_value (json_object_get (item, "tf_config")), "TF_CONFIG");
        if (strncmp (zactor, "refuses", 7) == 0) {
            cr_expect_null (cluster, "%s: zactor should refuse it (%s)", name, zactor);
            za_cluster_destroy (&cluster);
            refused++;
            continue;
        }
        cr_assert_null (json_object_get (tf, "error"), "%s: TensorFlow refused it", name);
        cr_assert_not_null (cluster, "%s: %s", name, za_last_error ());
        const json_t *jobs = json_object_get (tf, "cluster");
        s_expect_job (name, "chief", cluster->chief, cluster->chief_count, jobs);
        s_expect_job (name, "worker", cluster->worker, cluster->worker_count, jobs);
        s_expect_job (name, "ps", cluster->ps, cluster->ps_count, jobs);
        s_expect_job (name, "evaluator", cluster->evaluator, cluster->evaluator_count, jobs);
        cr_expect_eq (json_object_size (jobs), (size_t) ((cluster->chief_count > 0)
                      + (cluster->worker_count > 0) + (cluster->ps_count > 0)
                      + (cluster->evaluator_count > 0)), "%s: a job zactor does not hold", name);
        cr_expect_str_eq (za_task_type_name (cluster->task_type),
                          json_string_value (json_object_get (tf, "task_type")), "%s", name);
        cr_expect_eq (cluster->task_index,
                      (int) json_integer_value (json_object_get (tf, "task_id")), "%s", name);
        za_cluster_destroy (&cluster);
        same++;
    }
    cr_expect_geq (same, 10);
    cr_expect_geq (refused, 3);
    json_decref (record);
}
