/*  zactor-top: attaches to a running cluster's broker and shows one row per
    task and the recent events, refreshed every second; --once --json prints
    one snapshot for scripts. It only asks the broker, through the broker
    client (`watch`): the roles never see it, so watching never slows
    training.                                                               */
#include "za/za_broker_client.h"
#include "za/za_curve.h"
#include "za/za_util.h"

#include <getopt.h>
#include <inttypes.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define SHOWN_EVENTS 12
#define TREND_POINTS 20                 //  a task's trend: its last values
#define TREND_TASKS 256

//  A task's trend, kept here across refreshes: a trainer's loss at each new
//  step it reports, an evaluator's accuracy at each new evaluation.
typedef struct {
    int type, index;
    int64_t step;                       //  of the last value taken
    double values [TREND_POINTS];
    int count;
} s_trend_t;

static s_trend_t s_trends [TREND_TASKS];
static int s_trend_count;
static int s_utf8;                      //  the terminal takes UTF-8: block sparklines

static s_trend_t *
s_trend_of (int type, int index)
{
    for (int t = 0; t < s_trend_count; t++)
        if (s_trends [t].type == type && s_trends [t].index == index)
            return &s_trends [t];
    if (s_trend_count == TREND_TASKS)
        return NULL;
    s_trend_t *trend = &s_trends [s_trend_count++];
    *trend = (s_trend_t) {.type = type, .index = index, .step = -1};
    return trend;
}

//  Takes a row's newest figure into its trend.
static void
s_trend_take (const za_broker_task_row_t *row)
{
    int trainer = row->type == ZA_TASK_CHIEF || row->type == ZA_TASK_WORKER;
    int64_t step = trainer? row->global_step: row->type == ZA_TASK_EVALUATOR? row->eval_step: -1;
    double value = trainer? row->loss: row->eval_accuracy;
    s_trend_t *trend = step >= 0? s_trend_of (row->type, row->index): NULL;
    if (!trend || step == trend->step || !isfinite (value) || (trainer && value <= 0))
        return;
    trend->step = step;
    if (trend->count == TREND_POINTS) {
        memmove (trend->values, trend->values + 1, (TREND_POINTS - 1) * sizeof (double));
        trend->count--;
    }
    trend->values [trend->count++] = value;
}

//  A sparkline of the trend, scaled from its least to its largest value
//  (flat: mid-height): blocks in UTF-8, else ASCII. "-": nothing yet.
static void
s_sparkline (int type, int index, char *out, size_t size)
{
    static const char *blocks [] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585",
                                    "\u2586", "\u2587", "\u2588"};
    static const char ascii [] = "_.-~=+*#";
    s_trend_t *trend = s_trend_of (type, index);
    snprintf (out, size, "-");
    if (!trend || trend->count == 0)
        return;
    double low = trend->values [0], high = trend->values [0];
    for (int i = 1; i < trend->count; i++) {
        low = fmin (low, trend->values [i]);
        high = fmax (high, trend->values [i]);
    }
    size_t at = 0;
    for (int i = 0; i < trend->count && at + 4 < size; i++) {
        int level = high > low? (int) lround (7 * (trend->values [i] - low) / (high - low)): 3;
        if (s_utf8) {
            memcpy (out + at, blocks [level], strlen (blocks [level]));
            at += strlen (blocks [level]);
        }
        else
            out [at++] = ascii [level];
    }
    out [at] = 0;
}

static void
s_usage (FILE *out)
{
    fprintf (out,
"Usage: zactor-top --broker ADDR [--once] [--json] [--interval SECS] [--timeout SECS]\n"
"                  [--certs DIR]\n"
"Shows a running zactor cluster: one row per task (role, index, host, pid, state,\n"
"global step, steps/s, examples/s, loss, last evaluation, restarts, heartbeat age,\n"
"milliseconds a step, whether the broker names it a straggler (how many times the\n"
"other trainers' median step it takes, and its slowest phase), and a trend: a\n"
"sparkline of a trainer's loss at its last 20 refreshes with a new step, of an\n"
"evaluator's accuracy at its last 20 evaluations) and the recent events\n"
"(starts, restarts and their causes), refreshed every second until the job is done\n"
"or Ctrl-C.\n"
"\n"
"  --broker ADDR      the broker's endpoint, e.g. tcp://127.0.0.1:5555\n"
"                     (zactor-run --local prints it)\n"
"  --once             one snapshot, then exit\n"
"  --json             the broker's state as JSON (one object per line)\n"
"  --interval SECS    refresh period (default 1)\n"
"  --timeout SECS     give up when the broker does not answer this long (default 5)\n"
"  --certs DIR        the job's certificate (zactor-run keygen DIR), when the job\n"
"                     runs with --certs: its broker answers nobody else\n"
"  -h, --help         this help\n"
"Exit status: 0, 1 when the broker does not answer, 2 bad arguments.\n");
}

static void
s_show (FILE *out, const za_broker_state_t *state)
{
    int up = (int) state->broker_uptime_secs;
    fprintf (out, "zactor-top  broker %s  pid %d  up %d:%02d  restarts %d%s%s",
             state->broker_endpoint, state->broker_pid, up / 60, up % 60,
             state->broker_restarts, state->supervise? "  supervising": "",
             state->curve? "  CURVE": "  no CURVE");
    if (state->refused_peers > 0)
        fprintf (out, "  refused peers %" PRId64, state->refused_peers);
    fprintf (out, "\n");
    fprintf (out, "global step %" PRId64 " / %" PRId64 "   model_dir %s%s\n",
             state->global_step, state->max_steps, state->model_dir,
             state->done? "   (done)": "");
    if (state->min_workers < state->max_workers)
        fprintf (out, "trainers %d (elastic: the chief and %d to %d workers; members changed %"
                 PRId64 " times)\n", state->members, state->min_workers, state->max_workers,
                 state->membership_changes);
    fprintf (out, "\n");
    int ring = 0, bad = 0;
    for (int t = 0; t < state->task_count; t++) {
        ring |= state->tasks [t].ring_rank >= 0;
        bad |= state->tasks [t].bad_images > 0;
    }
    fprintf (out, "%-9s %3s %-15s %7s %-10s %8s %8s %8s %7s %-14s %8s %6s %8s %-16s%s%s  %s\n",
             "ROLE", "IDX", "HOST", "PID", "STATE", "STEP", "STEPS/S", "EX/S", "LOSS",
             "LAST EVAL", "RESTARTS", "HB AGE", "MS/STEP", "STRAGGLER",
             ring? "  RING  WAIT MS/STEP": "", bad? "  BAD IMAGES": "",
             "TREND (loss; evaluator: accuracy)");
    for (int t = 0; t < state->task_count; t++) {
        const za_broker_task_row_t *row = &state->tasks [t];
        char eval [32] = "-", age [16] = "-";
        if (row->eval_step >= 0)
            snprintf (eval, sizeof eval, "%.4f@%" PRId64, row->eval_accuracy, row->eval_step);
        if (row->heartbeat_age_secs >= 0)
            snprintf (age, sizeof age, "%.1fs", row->heartbeat_age_secs);
        char place [48] = "", skipped [32] = "";
        if (row->ring_rank >= 0)
            snprintf (place, sizeof place, "  %4d  %12.2f", row->ring_rank, row->wait_ms);
        else
        if (ring && bad)
            snprintf (place, sizeof place, "  %4s  %12s", "", "");
        if (bad)
            snprintf (skipped, sizeof skipped, "  %10" PRId64, row->bad_images);
        //  The rates and the loss are a trainer's: a ps or an evaluator shows -.
        char rate [16] = "-", examples [16] = "-", loss [16] = "-";
        if (row->type == ZA_TASK_CHIEF || row->type == ZA_TASK_WORKER) {
            snprintf (rate, sizeof rate, "%.1f", row->steps_per_sec);
            snprintf (examples, sizeof examples, "%.0f", row->examples_per_sec);
            snprintf (loss, sizeof loss, "%.4f", row->loss);
        }
        //  A trainer's time a step; a straggler's slowdown and slowest phase.
        char step_ms [16] = "-", straggler [32] = "-";
        if (row->step_ms > 0)
            snprintf (step_ms, sizeof step_ms, "%.1f", row->step_ms);
        if (row->straggler)
            snprintf (straggler, sizeof straggler, "%.1fx %s", row->slowdown,
                      row->slowest_phase);
        s_trend_take (row);
        char trend [TREND_POINTS * 4 + 8];
        s_sparkline (row->type, row->index, trend, sizeof trend);
        fprintf (out, "%-9s %3d %-15.15s %7d %-10s %8" PRId64 " %8s %8s %7s %-14s %8d %6s %8s "
                 "%-16s%s%s  %s\n", za_task_type_name (row->type), row->index, row->host,
                 row->pid, row->state, row->global_step, rate, examples, loss, eval,
                 row->restarts, age, step_ms, straggler, place, skipped,
                 row->type == ZA_TASK_PS? "-": trend);
    }
    fprintf (out, "\nrecent events:\n");
    int first = state->event_count > SHOWN_EVENTS? state->event_count - SHOWN_EVENTS: 0;
    for (int e = first; e < state->event_count; e++) {
        const za_broker_event_row_t *event = &state->events [e];
        time_t when = (time_t) event->time;
        struct tm tm;
        localtime_r (&when, &tm);
        char clock [16];
        strftime (clock, sizeof clock, "%H:%M:%S", &tm);
        fprintf (out, "  %s  %-9s %2d  pid %-7d %-10s %s\n", clock, event->role, event->index,
                 event->pid, event->event, event->cause);
    }
}

//  The screen as s_show makes it, each line cut at the terminal's width
//  (live: a live view on one, where a wrapped row would push the table
//  apart; --once's snapshot stays whole), read again at each refresh so
//  that a resized terminal is followed.
static void
s_show_in_width (const za_broker_state_t *state, int live)
{
    struct winsize size;
    int width = live && ioctl (STDOUT_FILENO, TIOCGWINSZ, &size) == 0? size.ws_col: 0;
    char *text = NULL;
    size_t length = 0;
    FILE *screen = width > 0? open_memstream (&text, &length): NULL;
    s_show (screen? screen: stdout, state);
    if (!screen)
        return;
    fclose (screen);
    for (const char *line = text; line && *line; ) {
        const char *end = strchr (line, '\n');
        size_t bytes = end? (size_t) (end - line): strlen (line), cut = 0;
        //  Columns are characters: UTF-8's continuation bytes take none.
        for (int columns = 0; cut < bytes; cut++)
            if (((unsigned char) line [cut] & 0xc0) != 0x80 && ++columns > width)
                break;
        fwrite (line, 1, cut, stdout);
        fputc ('\n', stdout);
        line = end? end + 1: NULL;
    }
    free (text);
}

//  Asks the broker for the job's state every interval seconds and shows it
//  (once, or until the job is done or we are interrupted). Returns 0, or 1
//  when the broker did not answer within timeout seconds.
static int
s_watch (za_broker_client_t *client, const char *broker, const char *certs, double interval,
         double timeout, int once, int as_json)
{
    int rc = 0, tty = isatty (STDOUT_FILENO);
    while (!zsys_interrupted) {
        za_broker_state_t *state = NULL;
        char *text = NULL;
        if (za_broker_client_state (client, timeout, &state, &text)) {
            if (!zsys_interrupted) {
                fprintf (stderr, "zactor-top: no answer from the broker at %s within %g s%s\n",
                         broker, timeout, certs? " (is it the job of the certificate in --certs?)"
                         : " (a job started with --certs answers only --certs DIR)");
                rc = 1;
            }
            break;
        }
        int done = state->done;
        if (as_json)
            printf ("%s\n", text);
        else {
            if (tty && !once)
                printf ("\033[H\033[2J");
            s_show_in_width (state, tty && !once);
        }
        fflush (stdout);
        free (state);
        free (text);
        if (once || done)
            break;
        zclock_sleep ((int) (interval * 1000));
    }
    return rc;
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
        {"certs", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *broker = NULL, *certs = NULL;
    int once = 0, as_json = 0;
    setlocale (LC_CTYPE, "");
    s_utf8 = !strcmp (nl_langinfo (CODESET), "UTF-8");
    double interval = 1, timeout = 5;
    int opt;
    while ((opt = getopt_long (argc, argv, "h", options, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
            case 'b': broker = optarg; break;
            case 'c': certs = optarg; break;
            case 'o': once = 1; break;
            case 'j': as_json = 1; break;
            case 'i':
            case 't': {
                double value = strtod (optarg, &end);
                //  (A day at most: the period is slept in milliseconds.)
                if (end == optarg || *end || !isfinite (value) || value <= 0
                    || value > 86400) {
                    fprintf (stderr, "zactor-top: --%s wants seconds in (0, 86400], got "
                             "'%s'\n", opt == 'i'? "interval": "timeout", optarg);
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
    if (certs && za_curve_use (certs))
        return EXIT_USAGE;
    za_heartbeat_t beat = {interval, ZA_HEARTBEAT_LIVENESS};
    za_broker_client_t *client = za_broker_client_new (broker, beat);
    if (!client) {
        fprintf (stderr, "zactor-top: cannot connect to '%s' (an endpoint such as "
                 "tcp://127.0.0.1:5555)\n", broker);
        return EXIT_USAGE;
    }
    int rc = s_watch (client, broker, certs, interval, timeout, once, as_json);
    za_broker_client_destroy (&client);
    za_curve_stop ();
    return rc;
}
