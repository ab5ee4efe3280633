/*  test_metrics.c: the Prometheus text of a broker state (za_metrics_render)
    and the server's refusals. The live endpoint is tests/check_metrics.py. */
#include "za/za_metrics.h"
#include "za/za_util.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static json_t *
s_state (const char *host)
{
    json_t *state = json_pack ("{s:{s:I}, s:{s:f, s:i, s:I}, s:I, s:b, s:[], s:{s:i, s:i}}",
                               "job", "max_steps", (json_int_t) 500, "broker", "uptime_secs",
                               12.5, "restarts", 1, "dropped", (json_int_t) 3, "global_step",
                               (json_int_t) 42, "done", 0, "roles", "event_counts", "started",
                               5, "restarted", 2);
    json_t *row = json_pack ("{s:s, s:i, s:s, s:s, s:I, s:f, s:f, s:f, s:i, s:n, s:n, s:f, s:i}",
                             "role", "worker", "index", 1, "host", host, "state", "running",
                             "global_step", (json_int_t) 40, "steps_per_sec", 2.5,
                             "examples_per_sec", 160.0, "loss", 0.25, "restarts", 1,
                             "eval_step", "eval_accuracy", "heartbeat_age_secs", 0.5,
                             "bad_images", 3);
    json_object_set_new (row, "step_ms", json_real (61.5));
    json_object_set_new (row, "straggler", json_true ());
    json_object_set_new (row, "slowdown", json_real (3.5));
    json_object_set_new (row, "slowest_phase", json_string ("input"));
    json_array_append_new (json_object_get (state, "roles"), row);
    return state;
}

Test (metrics, a_state_renders_one_sample_per_reported_value)
{
    json_t *state = s_state ("node-1");
    char *text = za_metrics_render (state);
    cr_assert_not_null (text);
    const char *labels = "{role=\"worker\",index=\"1\",host=\"node-1\"}";
    char line [256];
    snprintf (line, sizeof line, "zactor_task_global_step%s 40\n", labels);
    cr_expect (strstr (text, line), "%s", text);
    snprintf (line, sizeof line, "zactor_task_restarts_total%s 1\n", labels);
    cr_expect (strstr (text, line), "%s", text);
    cr_expect (strstr (text, "# TYPE zactor_task_restarts_total counter\n"), "%s", text);
    snprintf (line, sizeof line, "zactor_task_bad_images_total%s 3\n", labels);
    cr_expect (strstr (text, line), "%s", text);
    cr_expect (strstr (text, "zactor_task_state{role=\"worker\",index=\"1\",host=\"node-1\","
                             "state=\"running\"} 1\n"), "%s", text);
    //  A straggler, with its slowest phase.
    snprintf (line, sizeof line, "zactor_task_step_seconds%s ", labels);
    const char *sample = strstr (text, line);
    double seconds = 0;
    cr_expect (sample && sscanf (sample + strlen (line), "%lf", &seconds) == 1, "%s", text);
    cr_expect_float_eq (seconds, 0.0615, 1e-12, "%s", text);
    snprintf (line, sizeof line, "zactor_task_slowdown%s 3.5\n", labels);
    cr_expect (strstr (text, line), "%s", text);
    cr_expect (strstr (text, "zactor_task_straggler{role=\"worker\",index=\"1\",host=\"node-1\","
                             "phase=\"input\"} 1\n"), "%s", text);
    //  No evaluation yet: no sample, not a 0.
    cr_expect_null (strstr (text, "zactor_task_eval_accuracy{"), "%s", text);
    cr_expect (strstr (text, "zactor_job_global_step 42\n"), "%s", text);
    cr_expect (strstr (text, "zactor_job_max_steps 500\n"), "%s", text);
    cr_expect (strstr (text, "zactor_broker_dropped_total 3\n"), "%s", text);
    cr_expect (strstr (text, "zactor_events_total{event=\"restarted\"} 2\n"), "%s", text);
    free (text);
    json_decref (state);
}

Test (metrics, label_values_are_escaped)
{
    //  A host name is checked by the broker, but the format must hold whatever
    //  it is given: \ " and a newline escaped.
    json_t *state = s_state ("a\\b\"c\nd");
    char *text = za_metrics_render (state);
    cr_assert_not_null (text);
    cr_expect (strstr (text, "host=\"a\\\\b\\\"c\\nd\""), "%s", text);
    free (text);
    json_decref (state);
}

Test (metrics, bad_addresses_are_refused)
{
    za_error_set_quiet (1);
    const char *bad [] = {"9100", "host:", ":0", "127.0.0.1:70000", "127.0.0.1:x",
                          "no-such-host.invalid:9100", NULL};
    for (int i = 0; bad [i]; i++) {
        za_error_clear ();
        za_metrics_t *metrics = za_metrics_new (bad [i]);
        cr_expect_null (metrics, "%s was taken", bad [i]);
        za_metrics_destroy (&metrics);
        cr_expect_neq (za_last_error () [0], 0, "%s: no error", bad [i]);
    }
    //  A port in use is refused too.
    if (za_metrics_available ()) {
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
        addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        socklen_t length = sizeof addr;
        cr_assert (fd >= 0 && bind (fd, (struct sockaddr *) &addr, sizeof addr) == 0
                   && listen (fd, 1) == 0
                   && getsockname (fd, (struct sockaddr *) &addr, &length) == 0);
        char taken [64];
        snprintf (taken, sizeof taken, "127.0.0.1:%d", ntohs (addr.sin_port));
        za_metrics_t *metrics = za_metrics_new (taken);
        cr_expect_null (metrics, "%s is in use, yet was taken", taken);
        cr_expect (strstr (za_last_error (), "cannot serve HTTP"), "%s", za_last_error ());
        za_metrics_destroy (&metrics);
        close (fd);
    }
}
