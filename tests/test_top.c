/*  test_top.c: what a person sees in zactor-top, in a real terminal: tmux
    runs zactor-top against a --local job and the test reads the screen
    (tmux capture-pane) until the chief's loss trend and the evaluator's
    accuracy trend are sparklines of several points, and checks that a ps
    row shows "-" where a trainer's figures do not apply.                  */
#include <criterion/criterion.h>
#include <czmq.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "za_test.h"

#define SCREEN_TIMEOUT_S 240.0

static void
s_setup (void)
{
    za_test_dir_create ("za_top");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (top, .init = s_setup, .fini = s_teardown);

//  Block characters (U+2581 .. U+2588: E2 96 81 .. 88) in a line.
static int
s_blocks (const char *line)
{
    int count = 0;
    for (const unsigned char *at = (const unsigned char *) line; at [0]; at++)
        if (at [0] == 0xe2 && at [1] == 0x96 && at [2] >= 0x81 && at [2] <= 0x88)
            count++;
    return count;
}

Test (top, trends_and_dashes_on_a_terminal, .timeout = 400)
{
    cr_assert_eq (system ("tmux -V >/dev/null 2>&1"), 0, "tmux is needed (apt-get install tmux)");
    char *model_dir = za_test_path ("run");
    char *out = za_test_path ("local.out");
    const char *args [] = {"--local", "--model-dir", model_dir, "--max-steps", "100000000",
                           "--model", "flatten dense(32,relu) dense(10)",
                           "--save-checkpoints-steps", "300", "--log-step-count-steps", "0",
                           "--start-delay-secs", "0", "--throttle-secs", "0", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    char socket [64], command [1024];
    snprintf (socket, sizeof socket, "za_top_%d", (int) getpid ());
    snprintf (command, sizeof command,
              "tmux -L %s -f /dev/null -u new-session -d -s top -x 240 -y 40 "
              "'env LANG=C.UTF-8 %s --broker %s --interval 0.2'", socket,
              za_test_program ("zactor-top"), broker);
    cr_assert_eq (system (command), 0, "%s", command);
    //  Until the trends have several points (each refresh with a new step
    //  adds one to a trainer's; each evaluation one to the evaluator's).
    char chief [1024] = "", evaluator [1024] = "", ps [1024] = "";
    char *screen = NULL;
    double deadline = za_clock_mono () + SCREEN_TIMEOUT_S;
    int seen = 0;
    while (!seen && za_clock_mono () < deadline) {
        free (screen);
        screen = za_test_tmux_capture (socket);
        seen = screen && za_test_screen_row (screen, "chief", 0, chief, sizeof chief)
            && za_test_screen_row (screen, "evaluator", 0, evaluator, sizeof evaluator)
            && za_test_screen_row (screen, "ps", 0, ps, sizeof ps)
            && s_blocks (chief) >= 5 && s_blocks (evaluator) >= 3;
        if (!seen)
            zclock_sleep (200);
    }
    //  An 80-column terminal: each line cut at its width, so that the table
    //  keeps one line a row (its 170-column rows wrapped, the header's end
    //  where the chief's row should be).
    int narrow = 0;
    char *small = NULL;
    if (seen) {
        snprintf (command, sizeof command, "tmux -L %s resize-window -t top -x 80 -y 40",
                  socket);
        cr_expect_eq (system (command), 0, "%s", command);
        deadline = za_clock_mono () + SCREEN_TIMEOUT_S;
        while (!narrow && za_clock_mono () < deadline) {
            free (small);
            small = za_test_tmux_capture (socket);
            const char *header = small? strstr (small, "\nROLE "): NULL;
            const char *next = header? strchr (header + 1, '\n'): NULL;
            narrow = next && !strncmp (next + 1, "chief ", 6);
            if (!narrow)
                zclock_sleep (200);
        }
    }
    snprintf (command, sizeof command, "tmux -L %s kill-server", socket);
    cr_expect_eq (system (command), 0);
    kill (local, SIGINT);
    za_test_wait (local, 120);
    cr_assert (seen, "no trends on the screen within %.0f s:\n%s", SCREEN_TIMEOUT_S,
               screen? screen: "(nothing)");
    cr_expect (strstr (screen, "TREND"), "%s", screen);
    cr_expect (narrow, "80 columns: a row wrapped:\n%s", small? small: "(nothing)");
    free (small);
    //  A ps row: STEPS/S, EX/S, LOSS, LAST EVAL and TREND do not apply.
    char role [16], index [8], host [64], pid [16], state [16], step [24], rate [16],
         examples [16], loss [16], eval [32];
    cr_assert_eq (sscanf (ps, "%15s %7s %63s %15s %15s %23s %15s %15s %15s %31s", role, index,
                          host, pid, state, step, rate, examples, loss, eval), 10, "%s", ps);
    cr_expect_str_eq (rate, "-", "%s", ps);
    cr_expect_str_eq (examples, "-", "%s", ps);
    cr_expect_str_eq (loss, "-", "%s", ps);
    cr_expect_str_eq (eval, "-", "%s", ps);
    cr_expect_eq (s_blocks (ps), 0, "%s", ps);
    size_t len = strlen (ps);
    while (len > 0 && ps [len - 1] == ' ')
        len--;
    cr_expect (len > 0 && ps [len - 1] == '-', "the ps row ends in '-': %s", ps);
    free (screen);
    free (model_dir);
    free (out);
}

//  --interval and --timeout are seconds in (0, a day]: a huge one once
//  overflowed the sleep's milliseconds and asked the broker thousands of
//  times a second. Refused with exit 2 before any broker is asked.
Test (top, an_interval_past_a_day_is_refused)
{
    const char *values [] = {"3000000", "1e300", "0", "-1"};
    for (int v = 0; v < 4; v++) {
        const char *args [] = {"--broker", "tcp://127.0.0.1:1", "--interval", values [v], NULL};
        za_test_result_t result = za_test_run_program ("zactor-top", args, 30);
        cr_expect_eq (result.exit_code, 2, "--interval %s: exit %d: %s", values [v],
                      result.exit_code, result.err);
        cr_expect (strstr (result.err, "--interval wants seconds in (0, 86400]"), "%s",
                   result.err);
        za_test_result_free (&result);
    }
}
