/*  test_straggler.c: the broker names the trainer that holds the others
    back. The judgement's arithmetic (own time, the others' median, the
    factor, reports in a row, the slowest phase) on figures; reports whose
    times are wrong, refused field by field; and a real --local all-reduce
    job in which one worker is slowed by SIGSTOP/SIGCONT: zactor-top (in
    tmux), events.jsonl and the Prometheus endpoint name it, and only it,
    with its slowest phase, within 30 s, and say when it has caught up.    */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../broker/za_registration.h"
#include "../broker/za_straggler.h"
#include "za/za_util.h"
#include "za_test.h"

#define NAMED_WITHIN_S 30.0

static void
s_setup (void)
{
    za_test_dir_create ("za_straggler");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (straggler, .init = s_setup, .fini = s_teardown);

//  A step of step_ms: input, compute, exchange, apply.
static za_step_times_t
s_times (double input, double compute, double exchange, double apply, int waits)
{
    za_step_times_t times = {.step_ms = input + compute + exchange + apply,
                             .phase_ms = {input, compute, exchange, apply},
                             .exchange_waits = waits};
    return times;
}

Test (straggler, ps_async_counts_the_whole_step)
{
    //  ps-async: nobody waits for anybody; a slow push and pull is its own.
    za_step_times_t others [3] = {s_times (1, 10, 4, 0, 0), s_times (1, 11, 4, 0, 0),
                                  s_times (1, 12, 5, 0, 0)};
    za_step_times_t slow = s_times (1, 11, 30, 0, 0);
    za_straggler_t judged;
    za_straggler_reset (&judged);
    for (int report = 1; report < ZA_STRAGGLER_REPORTS; report++)
        cr_expect_eq (za_straggler_judge (&judged, &slow, others, 3, 2.0), 0);
    cr_expect_eq (za_straggler_judge (&judged, &slow, others, 3, 2.0), 1);
    cr_expect (judged.straggler);
    cr_expect_float_eq (judged.own_ms, 42, 1e-9);
    cr_expect_float_eq (judged.median_ms, 16, 1e-9);
    cr_expect_float_eq (judged.slowdown, 42.0 / 16, 1e-9);
    cr_expect_str_eq (za_phase_name (judged.phase), "exchange");
    cr_expect_float_eq (judged.phase_excess_ms, 26, 1e-9);
    //  Still slow: nothing new. Within the factor again: cleared after as
    //  many reports in a row, and one slow report between starts over.
    cr_expect_eq (za_straggler_judge (&judged, &slow, others, 3, 2.0), 0);
    za_step_times_t fast = s_times (1, 12, 4, 0, 0);
    cr_expect_eq (za_straggler_judge (&judged, &fast, others, 3, 2.0), 0);
    cr_expect_eq (za_straggler_judge (&judged, &slow, others, 3, 2.0), 0);
    for (int report = 1; report < ZA_STRAGGLER_REPORTS; report++)
        cr_expect_eq (za_straggler_judge (&judged, &fast, others, 3, 2.0), 0);
    cr_expect_eq (za_straggler_judge (&judged, &fast, others, 3, 2.0), -1);
    cr_expect_not (judged.straggler);
    //  A factor of 0 judges nothing; nor does a trainer alone.
    za_straggler_reset (&judged);
    for (int report = 0; report < 2 * ZA_STRAGGLER_REPORTS; report++) {
        cr_expect_eq (za_straggler_judge (&judged, &slow, others, 3, 0), 0);
        cr_expect_eq (za_straggler_judge (&judged, &slow, others, 0, 2.0), 0);
    }
    cr_expect_not (judged.straggler);
}

Test (straggler, a_synchronous_exchange_is_waiting_not_own_time)
{
    //  ps-sync and all-reduce: the others wait for the slow one in their
    //  exchange; every step takes as long, and only the slow one's own part
    //  (its compute here) is above theirs.
    za_step_times_t others [2] = {s_times (1, 10, 35, 1, 1), s_times (1, 11, 33, 1, 1)};
    za_step_times_t slow = s_times (1, 44, 2, 1, 1);
    za_straggler_t judged;
    za_straggler_reset (&judged);
    int named = 0;
    for (int report = 0; report < ZA_STRAGGLER_REPORTS; report++)
        named += za_straggler_judge (&judged, &slow, others, 2, 2.0);
    cr_expect_eq (named, 1);
    cr_expect_float_eq (judged.own_ms, 46, 1e-9);
    cr_expect_float_eq (judged.median_ms, 12.5, 1e-9);
    cr_expect_str_eq (za_phase_name (judged.phase), "compute");
    //  The ones that wait are no stragglers, though their steps are as long.
    za_step_times_t rest [2] = {slow, others [1]};
    za_straggler_t waiting;
    za_straggler_reset (&waiting);
    for (int report = 0; report < 2 * ZA_STRAGGLER_REPORTS; report++)
        cr_expect_eq (za_straggler_judge (&waiting, &others [0], rest, 2, 2.0), 0);
    cr_expect_not (waiting.straggler);
    cr_expect_lt (waiting.slowdown, 1);
}

//  A report of worker 0 with `times` (JSON text, NULL: none) parsed: 0, or
//  -1 with why.
static int
s_parse (const char *times, za_registration_t *reg, char *why, size_t size)
{
    char text [1024];
    snprintf (text, sizeof text, "{\"role\": \"worker\", \"index\": 0, \"host\": \"h\", "
              "\"pid\": 7, \"restarts\": 0, \"endpoint\": \"\", \"state\": \"running\", "
              "\"global_step\": 5, \"loss\": 0.5, \"steps_per_sec\": 2, \"examples_per_sec\": 64"
              "%s%s}", times? ", \"times\": ": "", times? times: "");
    json_t *body = json_loads (text, 0, NULL);
    cr_assert_not_null (body, "%s", text);
    int counts [ZA_BROKER_ROLE_KINDS] = {1, 1, 1, 1};
    int rc = za_registration_parse (body, 1, counts, reg, why, size);
    json_decref (body);
    return rc;
}

Test (straggler, wrong_times_in_a_report_are_refused_whole)
{
    const char *bad [] = {
        "[]", "{}", "\"fast\"",
        "{\"step_ms\": 10, \"input_ms\": 1, \"compute_ms\": 8, \"exchange_ms\": 1, "
        "\"exchange_waits\": false}",
        "{\"step_ms\": -1, \"input_ms\": 1, \"compute_ms\": 8, \"exchange_ms\": 1, "
        "\"apply_ms\": 0, \"exchange_waits\": false}",
        "{\"step_ms\": 10, \"input_ms\": \"1\", \"compute_ms\": 8, \"exchange_ms\": 1, "
        "\"apply_ms\": 0, \"exchange_waits\": false}",
        "{\"step_ms\": 10, \"input_ms\": 1, \"compute_ms\": 8, \"exchange_ms\": 1, "
        "\"apply_ms\": 0, \"exchange_waits\": 1}",
    };
    za_registration_t reg;
    char why [256];
    for (size_t b = 0; b < sizeof bad / sizeof bad [0]; b++) {
        why [0] = 0;
        cr_expect_eq (s_parse (bad [b], &reg, why, sizeof why), -1, "taken: %s", bad [b]);
        cr_expect (strstr (why, "times: {step_ms"), "%s: %s", bad [b], why);
    }
    //  A good one after them, and a report without times, parse exactly.
    cr_assert_eq (s_parse ("{\"step_ms\": 10.5, \"input_ms\": 0.5, \"compute_ms\": 8, "
                           "\"exchange_ms\": 1.5, \"apply_ms\": 0.25, \"exchange_waits\": true}",
                           &reg, why, sizeof why), 0, "%s", why);
    cr_expect_float_eq (reg.times.step_ms, 10.5, 0);
    cr_expect_float_eq (reg.times.phase_ms [ZA_PHASE_INPUT], 0.5, 0);
    cr_expect_float_eq (reg.times.phase_ms [ZA_PHASE_COMPUTE], 8, 0);
    cr_expect_float_eq (reg.times.phase_ms [ZA_PHASE_EXCHANGE], 1.5, 0);
    cr_expect_float_eq (reg.times.phase_ms [ZA_PHASE_APPLY], 0.25, 0);
    cr_expect_eq (reg.times.exchange_waits, 1);
    cr_expect_eq (reg.global_step, 5);
    cr_assert_eq (s_parse (NULL, &reg, why, sizeof why), 0, "%s", why);
    cr_expect_float_eq (reg.times.step_ms, 0, 0);
}

// ---------------------------------------------------------------------------
//  A real job

//  Every trainer of the job running and saying its step time.
static int
s_trainers_timed (json_t *state, void *arg)
{
    (void) arg;
    const char *roles [3] = {"chief", "worker", "worker"};
    int indexes [3] = {0, 0, 1};
    for (int t = 0; t < 3; t++) {
        json_t *row = za_test_row (state, roles [t], indexes [t]);
        if (!row || !json_is_number (json_object_get (row, "step_ms")))
            return 0;
    }
    return 1;
}

//  A process that stops `pid` 300 ms of every 400 until it is killed.
static pid_t
s_slow_down (pid_t pid)
{
    pid_t parent = getpid (), child = fork ();
    cr_assert_geq (child, 0);
    if (child == 0) {
        while (getppid () == parent) {
            kill (pid, SIGSTOP);
            usleep (300 * 1000);
            kill (pid, SIGCONT);
            usleep (100 * 1000);
        }
        kill (pid, SIGCONT);
        _exit (0);
    }
    return child;
}

//  The lines of text that hold every one of needles [0 .. count).
static int
s_lines_with (const char *text, const char *const *needles, int count)
{
    int lines = 0;
    for (const char *at = text; at && *at; ) {
        const char *end = strchr (at, '\n');
        size_t len = end? (size_t) (end - at): strlen (at);
        char *line = strndup (at, len);
        int all = 1;
        for (int n = 0; n < count; n++)
            all &= strstr (line, needles [n]) != NULL;
        lines += all;
        free (line);
        at = end? end + 1: NULL;
    }
    return lines;
}

Test (straggler, a_slowed_worker_is_named_with_its_phase, .timeout = 400 * ZA_TEST_SLOWDOWN)
{
    cr_assert_eq (system ("tmux -V >/dev/null 2>&1"), 0, "tmux is needed (apt-get install tmux)");
    char *model_dir = za_test_path ("run");
    char *out = za_test_path ("local.out");
    int port = za_test_free_port ();
    char metrics [32];
    snprintf (metrics, sizeof metrics, "127.0.0.1:%d", port);
    const char *args [] = {"--local", "--model-dir", model_dir, "--max-steps", "100000000",
                           "--strategy", "allreduce", "--workers", "2", "--evaluators", "0",
                           "--log-step-count-steps", "0", "--metrics-bind", metrics, NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    json_t *state = za_test_wait_for (broker, s_trainers_timed, NULL,
                                      "every trainer saying its step time", 120);
    pid_t slowed = (pid_t) json_integer_value (json_object_get (za_test_row (state, "worker", 1),
                                                                "pid"));
    json_decref (state);
    cr_assert_gt (slowed, 0);
    char socket [64], command [1024];
    snprintf (socket, sizeof socket, "za_straggler_%d", (int) getpid ());
    snprintf (command, sizeof command,
              "tmux -L %s -f /dev/null -u new-session -d -s top -x 240 -y 40 "
              "'env LANG=C.UTF-8 %s --broker %s --interval 0.5'", socket,
              za_test_program ("zactor-top"), broker);
    cr_assert_eq (system (command), 0, "%s", command);

    //  Until the screen, the events and the metrics all name worker 1.
    pid_t slower = s_slow_down (slowed);
    double started = za_clock_mono (), deadline = started + NAMED_WITHIN_S * ZA_TEST_SLOWDOWN;
    char row [1024] = "", *screen = NULL, *events = NULL, *scrape = NULL;
    char events_path [4200];
    snprintf (events_path, sizeof events_path, "%s/events.jsonl", model_dir);
    const char *named_event [] = {"\"event\":\"straggler\"", "\"role\":\"worker\"",
                                  "\"index\":1", "slowest phase: compute"};
    int on_screen = 0, in_events = 0, in_metrics = 0;
    while (!(on_screen && in_events && in_metrics) && za_clock_mono () < deadline) {
        free (screen);
        free (events);
        free (scrape);
        screen = za_test_tmux_capture (socket);
        za_test_screen_row (screen, "worker", 1, row, sizeof row);
        on_screen = strstr (row, "x compute") != NULL;
        events = za_test_read_file (events_path, NULL);
        in_events = events && s_lines_with (events, named_event, 4) == 1;
        za_test_http_t answer = za_test_http (port, "GET", "/metrics", NULL, 0);
        scrape = answer.body;
        in_metrics = scrape && strstr (scrape, "zactor_task_straggler{role=\"worker\","
                                       "index=\"1\",host=\"127.0.0.1\",phase=\"compute\"} 1");
        if (!(on_screen && in_events && in_metrics))
            zclock_sleep (250);
    }
    double took = za_clock_mono () - started;
    fprintf (stderr, "test_straggler: worker 1 named after %.1f s of slowing\n", took);
    cr_expect (on_screen, "zactor-top did not name worker 1 within %.0f s:\n%s", took,
               screen? screen: "(nothing)");
    cr_expect (in_events, "events.jsonl did not name worker 1 within %.0f s:\n%s", took,
               events? events: "(nothing)");
    cr_expect (in_metrics, "/metrics did not name worker 1 within %.0f s:\n%s", took,
               scrape? scrape: "(nothing)");
    //  Nobody else: the chief and worker 0 wait for it, and are no stragglers.
    const char *others [] = {"zactor_task_straggler{role=\"chief\",index=\"0\",host=\"127.0.0.1\","
                             "phase=\"\"} 0",
                             "zactor_task_straggler{role=\"worker\",index=\"0\","
                             "host=\"127.0.0.1\",phase=\"\"} 0"};
    for (int o = 0; o < 2; o++)
        cr_expect (scrape && strstr (scrape, others [o]), "not %s:\n%s", others [o], scrape);
    cr_expect (events && !strstr (events, "\"event\":\"straggler\",\"role\":\"chief\""),
               "%s", events);
    char line [1024];
    za_test_screen_row (screen, "worker", 0, line, sizeof line);
    cr_expect (*line && !strstr (line, "x compute") && !strstr (line, "x input"), "%s", line);

    //  Let it go: it catches up, and says so.
    kill (slower, SIGKILL);
    waitpid (slower, NULL, 0);
    kill (slowed, SIGCONT);
    char *caught = za_test_wait_for_text (events_path, "\"event\":\"caught_up\"", 120);
    cr_expect (caught && strstr (caught, "\"event\":\"caught_up\""), "%s", caught);
    free (caught);

    snprintf (command, sizeof command, "tmux -L %s kill-server", socket);
    cr_expect_eq (system (command), 0);
    kill (local, SIGINT);
    za_test_wait (local, 120);
    free (screen);
    free (events);
    free (scrape);
    free (model_dir);
    free (out);
}
