/*  zactor-top: attaches to a running cluster's broker and shows one row per
    task and the recent events, refreshed every second; --once --json prints
    one snapshot for scripts. It only asks the broker (`watch`): the roles
    never see it, so watching never slows training.                        */
#include "za/za_util.h"
#include "za/za_wire.h"

#include <jansson.h>

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define SHOWN_EVENTS 12

static void
s_usage (FILE *out)
{
    fprintf (out,
"Usage: zactor-top --broker ADDR [--once] [--json] [--interval SECS] [--timeout SECS]\n"
"Shows a running zactor cluster: one row per task (role, index, host, pid, state,\n"
"global step, steps/s, examples/s, loss, last evaluation, restarts, heartbeat age)\n"
"and the recent events (starts, restarts and their causes), refreshed every second\n"
"until the job is done or Ctrl-C.\n"
"\n"
"  --broker ADDR      the broker's endpoint, e.g. tcp://127.0.0.1:5555\n"
"                     (zactor-run --local prints it)\n"
"  --once             one snapshot, then exit\n"
"  --json             the broker's state as JSON (one object per line)\n"
"  --interval SECS    refresh period (default 1)\n"
"  --timeout SECS     give up when the broker does not answer this long (default 5)\n"
"  -h, --help         this help\n"
"Exit status: 0, 1 when the broker does not answer, 2 bad arguments.\n");
}

//  Asks the broker for its state. Returns the JSON text (caller frees) or NULL.
static char *
s_watch (zsock_t *dealer, za_wire_msg_t *msg, double timeout_secs)
{
    za_wire_msg_init (msg, ZA_OP_WATCH);
    if (za_wire_send (dealer, NULL, msg, NULL))
        return NULL;
    zpoller_t *poller = zpoller_new (dealer, NULL);
    double deadline = za_clock_mono () + timeout_secs;
    char *text = NULL;
    while (!text && !zsys_interrupted && za_clock_mono () < deadline) {
        if (!zpoller_wait (poller, 100))
            continue;
        zmsg_t *reply = zmsg_recv (dealer);
        if (reply && za_wire_decode (reply, msg) == 0 && msg->op == ZA_OP_STATE && msg->body)
            text = strndup (msg->body, msg->body_len);
        zmsg_destroy (&reply);
    }
    zpoller_destroy (&poller);
    return text;
}

static const char *
s_str (json_t *object, const char *key)
{
    const char *text = json_string_value (json_object_get (object, key));
    return text? text: "";
}

static double
s_num (json_t *object, const char *key)
{
    return json_number_value (json_object_get (object, key));
}

static void
s_show (json_t *state)
{
    json_t *job = json_object_get (state, "job");
    json_t *broker = json_object_get (state, "broker");
    int up = (int) s_num (broker, "uptime_secs");
    printf ("zactor-top  broker %s  pid %d  up %d:%02d  restarts %d%s\n",
            s_str (broker, "endpoint"), (int) s_num (broker, "pid"), up / 60, up % 60,
            (int) s_num (broker, "restarts"),
            json_is_true (json_object_get (broker, "supervise"))? "  supervising": "");
    printf ("global step %" PRId64 " / %" PRId64 "   model_dir %s%s\n\n",
            (int64_t) s_num (state, "global_step"), (int64_t) s_num (job, "max_steps"),
            s_str (job, "model_dir"), json_is_true (json_object_get (state, "done"))
            ? "   (done)": "");
    printf ("%-9s %3s %-15s %7s %-10s %8s %8s %8s %7s %-14s %8s %6s\n", "ROLE", "IDX", "HOST",
            "PID", "STATE", "STEP", "STEPS/S", "EX/S", "LOSS", "LAST EVAL", "RESTARTS",
            "HB AGE");
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get (state, "roles"), i, row) {
        char eval [32] = "-", age [16] = "-";
        if (json_is_integer (json_object_get (row, "eval_step")))
            snprintf (eval, sizeof eval, "%.4f@%" PRId64, s_num (row, "eval_accuracy"),
                      (int64_t) s_num (row, "eval_step"));
        if (json_is_number (json_object_get (row, "heartbeat_age_secs")))
            snprintf (age, sizeof age, "%.1fs", s_num (row, "heartbeat_age_secs"));
        printf ("%-9s %3d %-15.15s %7d %-10s %8" PRId64 " %8.1f %8.0f %7.4f %-14s %8d %6s\n",
                s_str (row, "role"), (int) s_num (row, "index"), s_str (row, "host"),
                (int) s_num (row, "pid"), s_str (row, "state"),
                (int64_t) s_num (row, "global_step"), s_num (row, "steps_per_sec"),
                s_num (row, "examples_per_sec"), s_num (row, "loss"), eval,
                (int) s_num (row, "restarts"), age);
    }
    json_t *events = json_object_get (state, "events");
    size_t count = json_array_size (events);
    printf ("\nrecent events:\n");
    for (size_t e = count > SHOWN_EVENTS? count - SHOWN_EVENTS: 0; e < count; e++) {
        json_t *event = json_array_get (events, e);
        time_t when = (time_t) s_num (event, "time");
        struct tm tm;
        localtime_r (&when, &tm);
        char clock [16];
        strftime (clock, sizeof clock, "%H:%M:%S", &tm);
        printf ("  %s  %-9s %2d  pid %-7d %-10s %s\n", clock, s_str (event, "role"),
                (int) s_num (event, "index"), (int) s_num (event, "pid"),
                s_str (event, "event"), s_str (event, "cause"));
    }
}

int
main (int argc, char **argv)
{
    static const struct option options [] = {
        {"broker", required_argument, NULL, 'b'},
        {"once", no_argument, NULL, 'o'},
        {"json", no_argument, NULL, 'j'},
        {"interval", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *broker = NULL;
    int once = 0, as_json = 0;
    double interval = 1, timeout = 5;
    int opt;
    while ((opt = getopt_long (argc, argv, "h", options, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
            case 'b': broker = optarg; break;
            case 'o': once = 1; break;
            case 'j': as_json = 1; break;
            case 'i':
            case 't': {
                double value = strtod (optarg, &end);
                if (end == optarg || *end || !isfinite (value) || value <= 0) {
                    fprintf (stderr, "zactor-top: --%s wants a number > 0, got '%s'\n",
                             opt == 'i'? "interval": "timeout", optarg);
                    return EXIT_USAGE;
                }
                *(opt == 'i'? &interval: &timeout) = value;
                break;
            }
            case 'h': s_usage (stdout); return 0;
            default:
                fprintf (stderr, "Try 'zactor-top --help'.\n");
                return EXIT_USAGE;
        }
    }
    if (!broker || optind < argc) {
        fprintf (stderr, "zactor-top: %s\nTry 'zactor-top --help'.\n",
                 broker? "unexpected argument": "--broker ADDR is needed");
        return EXIT_USAGE;
    }
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    za_wire_msg_t *msg = (za_wire_msg_t *) malloc (sizeof *msg);
    if (!dealer || !msg || zsock_connect (dealer, "%s", broker) < 0) {
        fprintf (stderr, "zactor-top: cannot connect to '%s' (an endpoint such as "
                 "tcp://127.0.0.1:5555)\n", broker);
        zsock_destroy (&dealer);
        free (msg);
        return EXIT_USAGE;
    }
    zsock_set_sndtimeo (dealer, 0);
    zsock_set_maxmsgsize (dealer, ZA_WIRE_MAX_HEADER_BYTES + 1024);
    int rc = 0, tty = isatty (STDOUT_FILENO);
    while (!zsys_interrupted) {
        char *text = s_watch (dealer, msg, timeout);
        if (!text) {
            if (!zsys_interrupted) {
                fprintf (stderr, "zactor-top: no answer from the broker at %s within %g s\n",
                         broker, timeout);
                rc = 1;
            }
            break;
        }
        json_t *state = json_loads (text, 0, NULL);
        int done = json_is_true (json_object_get (state, "done"));
        if (as_json)
            printf ("%s\n", text);
        else
        if (state) {
            if (tty && !once)
                printf ("\033[H\033[2J");
            s_show (state);
        }
        fflush (stdout);
        json_decref (state);
        free (text);
        if (once || done)
            break;
        zclock_sleep ((int) (interval * 1000));
    }
    zsock_destroy (&dealer);
    free (msg);
    return rc;
}
