/*  za_hooks.c: running a list of session hooks, the one rule for "due", and
    the built-in hooks: step counter, summary saver, checkpoint saver.      */
#include "za/za_hooks.h"
#include "za/za_trace.h"
#include "za/za_early_stop.h"
#include "za/za_optim.h"
#include "za/za_json.h"
#include "za/za_util.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define PROGRESS_REDRAW_SECS 0.25
#define PROGRESS_BAR_CHARS 24
#define SUMMARY_LINE_MAX 256

int
za_hooks_add (za_hooks_t *self, const za_hook_t *hook)
{
    if (self->count >= ZA_HOOKS_MAX)
        return za_error ("at most %d hooks", ZA_HOOKS_MAX);
    self->hooks [self->count++] = *hook;
    return 0;
}

void
za_hooks_begin (za_hooks_t *self, int64_t global_step)
{
    for (int h = 0; h < self->count; h++)
        if (self->hooks [h].begin)
            self->hooks [h].begin (self->hooks [h].arg, global_step);
}

int
za_hooks_before_run (za_hooks_t *self, const za_run_context_t *context)
{
    int wants = 0;
    for (int h = 0; h < self->count; h++)
        if (self->hooks [h].before_run)
            wants |= self->hooks [h].before_run (self->hooks [h].arg, context) > 0;
    return wants;
}

int
za_hooks_after_run (za_hooks_t *self, const za_run_context_t *context)
{
    int stop = 0;
    for (int h = 0; h < self->count; h++) {
        if (!self->hooks [h].after_run)
            continue;
        int rc = self->hooks [h].after_run (self->hooks [h].arg, context);
        if (rc < 0)
            return rc;
        stop |= rc > 0;
    }
    return stop;
}

void
za_hooks_end (za_hooks_t *self, const za_run_context_t *context)
{
    for (int h = 0; h < self->count; h++)
        if (self->hooks [h].end)
            self->hooks [h].end (self->hooks [h].arg, context);
}

// ---------------------------------------------------------------------------
//  Due

void
za_every_init (za_every_t *self, int64_t steps, double secs, int64_t step, double now)
{
    self->steps = steps;
    self->secs = secs;
    self->last_step = step;
    self->last_time = now;
}

int
za_every_due (const za_every_t *self, int64_t step, double now)
{
    //  Multiples of `steps`, not `steps` after the last: a loop that started
    //  (or was restarted) anywhere keeps the same grid, and one whose global
    //  step jumps (other workers push too) does not drift.
    if (self->steps > 0)
        return step / self->steps > self->last_step / self->steps;
    return self->secs > 0 && now - self->last_time >= self->secs;
}

void
za_every_done (za_every_t *self, int64_t step, double now)
{
    self->last_step = step;
    self->last_time = now;
}

// ---------------------------------------------------------------------------
//  The step counter

static void
s_format_eta (double secs, char *buf, size_t size)
{
    if (!(secs >= 0) || secs > 99 * 3600)
        snprintf (buf, size, "--");
    else
    if (secs >= 3600)
        snprintf (buf, size, "%dh%02dm", (int) secs / 3600, (int) secs % 3600 / 60);
    else
        snprintf (buf, size, "%dm%02ds", (int) secs / 60, (int) secs % 60);
}

static void
s_counter_begin (void *arg, int64_t global_step)
{
    za_step_counter_t *c = (za_step_counter_t *) arg;
    double now = za_clock_mono ();
    za_every_init (&c->every, c->every.steps, 0, global_step, now);
    c->start_step = global_step;
    c->start_time = now;
    c->last_draw = 0;
    c->examples_since_log = 0;
    c->drew = 0;
}

static void
s_counter_report (za_step_counter_t *c, const za_run_context_t *ctx, int final)
{
    double now = za_clock_mono ();
    double elapsed = now - c->start_time;
    double rate = elapsed > 0? (ctx->global_step - c->start_step) / elapsed: 0;
    char eta [32];
    s_format_eta (rate > 0? (ctx->max_steps - ctx->global_step) / rate: -1, eta, sizeof eta);
    int log_due = za_every_due (&c->every, ctx->global_step, now);
    if (log_due && !c->bar) {
        double span = now - c->every.last_time;
        fprintf (stderr, "zactor: %sstep %" PRId64 "/%" PRId64 "  loss %.4f  "
                 "global_step/sec %.1f  examples/sec %.0f  ETA %s\n", c->who? c->who: "",
                 ctx->global_step, ctx->max_steps, ctx->loss,
                 span > 0? (ctx->global_step - c->every.last_step) / span: 0,
                 span > 0? c->examples_since_log / span: 0, eta);
    }
    if (log_due) {
        za_every_done (&c->every, ctx->global_step, now);
        c->examples_since_log = 0;
    }
    //  (The bar redraws with a loss read after this step: before_run asked.)
    if (c->bar && (final || (ctx->loss_steps > 0
                             && now - c->last_draw >= PROGRESS_REDRAW_SECS))) {
        double frac = ctx->max_steps > 0? (double) ctx->global_step / ctx->max_steps: 1;
        int filled = (int) (frac * PROGRESS_BAR_CHARS);
        char bar [PROGRESS_BAR_CHARS + 1];
        for (int i = 0; i < PROGRESS_BAR_CHARS; i++)
            bar [i] = i < filled? '#': '.';
        bar [PROGRESS_BAR_CHARS] = 0;
        fprintf (stderr, "\r[%s] step %" PRId64 "/%" PRId64 "  loss %.4f  %.0f examples/sec"
                 "  ETA %s  ", bar, ctx->global_step, ctx->max_steps, ctx->loss,
                 rate * ctx->batch_size, final? "0m00s": eta);
        c->last_draw = now;
        c->drew = 1;
    }
}

//  The loss of a step that logs, or after the bar's pause.
static int
s_counter_before_run (void *arg, const za_run_context_t *ctx)
{
    za_step_counter_t *c = (za_step_counter_t *) arg;
    double now = za_clock_mono ();
    return za_every_due (&c->every, ctx->global_step + 1, now)
        || (c->bar && now - c->last_draw >= PROGRESS_REDRAW_SECS);
}

static int
s_counter_after_run (void *arg, const za_run_context_t *ctx)
{
    za_step_counter_t *c = (za_step_counter_t *) arg;
    c->examples_since_log += ctx->batch_size;
    s_counter_report (c, ctx, 0);
    return 0;
}

static void
s_counter_end (void *arg, const za_run_context_t *ctx)
{
    za_step_counter_t *c = (za_step_counter_t *) arg;
    if (c->bar && c->drew) {
        s_counter_report (c, ctx, 1);
        fputc ('\n', stderr);
    }
}

za_hook_t
za_step_counter_hook (za_step_counter_t *state, int64_t every_steps, int bar)
{
    const char *who = state->who;
    memset (state, 0, sizeof *state);
    state->who = who;
    state->every.steps = every_steps;
    state->bar = bar;
    za_hook_t hook = {.arg = state, .begin = s_counter_begin,
                      .before_run = s_counter_before_run, .after_run = s_counter_after_run,
                      .end = s_counter_end};
    return hook;
}

// ---------------------------------------------------------------------------
//  The summary saver

static void
s_summary_begin (void *arg, int64_t global_step)
{
    za_summary_hook_t *s = (za_summary_hook_t *) arg;
    za_every_init (&s->every, s->every.steps, 0, global_step, za_clock_mono ());
    s->loss_sum = 0;
    s->loss_count = 0;
}

//  Appends one line to dir/metrics.jsonl in one write; one that fails (a
//  full disk) is cut off again, so the file holds whole lines only.
//  Returns 0 or -1 with an error.
static int
s_append_line (const char *dir, const char *line)
{
    char path [4096];
    snprintf (path, sizeof path, "%s/metrics.jsonl", dir);
    int fd = open (path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return za_error ("cannot append to '%s': %s", path, strerror (errno));
    size_t n = strlen (line);
    char *text = malloc (n + 1);
    if (!text) {
        close (fd);
        return za_error ("out of memory");
    }
    memcpy (text, line, n);
    text [n] = '\n';
    off_t before = lseek (fd, 0, SEEK_END);
    ssize_t wrote = write (fd, text, n + 1);
    int err = errno;
    free (text);
    if (wrote != (ssize_t) (n + 1)) {
        if (before >= 0 && ftruncate (fd, before)) {}
        close (fd);
        return za_error ("cannot write '%s': %s", path, wrote < 0? strerror (err)
                                                                 : "No space left on device");
    }
    return close (fd) == 0? 0: za_error ("cannot write '%s': %s", path, strerror (errno));
}

//  The loss of a step that writes.
static int
s_summary_before_run (void *arg, const za_run_context_t *ctx)
{
    za_summary_hook_t *s = (za_summary_hook_t *) arg;
    return za_every_due (&s->every, ctx->global_step + 1, za_clock_mono ());
}

//  The mean loss over the steps since the last line: each read weighs as
//  the steps it is the mean of.
static int
s_summary_after_run (void *arg, const za_run_context_t *ctx)
{
    za_summary_hook_t *s = (za_summary_hook_t *) arg;
    if (ctx->loss_steps > 0) {
        s->loss_sum += ctx->loss * (double) ctx->loss_steps;
        s->loss_count += ctx->loss_steps;
    }
    double now = za_clock_mono ();
    if (!za_every_due (&s->every, ctx->global_step, now))
        return 0;
    double span = now - s->every.last_time;
    double steps_per_sec = span > 0? (ctx->global_step - s->every.last_step) / span: 0;
    double values [] = {s->loss_count? s->loss_sum / (double) s->loss_count: ctx->loss,
                        steps_per_sec,
                        steps_per_sec * ctx->batch_size,
                        s->optim? za_optim_learning_rate (s->optim, ctx->global_step): 0};
    char line [SUMMARY_LINE_MAX], rate [48] = "", scale [80] = "", loss [ZA_JSON_REAL_MAX];
    if (s->optim)
        snprintf (rate, sizeof rate, ", \"learning_rate\": %.6g", values [3]);
    if (ctx->loss_scale > 0)
        snprintf (scale, sizeof scale, ", \"loss_scale\": %.17g, \"skipped_steps\": %" PRId64,
                  ctx->loss_scale, ctx->skipped_steps);
    snprintf (line, sizeof line,
              "{\"global_step\": %" PRId64 ", \"loss\": %s, \"steps_per_sec\": %.3f, "
              "\"examples_per_sec\": %.1f%s%s, \"wall_time\": %.3f}", ctx->global_step,
              za_json_real_text (values [0], 9, loss, sizeof loss), values [1], values [2],
              rate, scale, za_clock_wall ());
    static const char *const tags [] = {"loss", "global_step/sec", "examples/sec",
                                        "learning_rate"};
    //  Summaries are not the model: one the disk refuses is dropped, said
    //  once until they are written again, and training goes on.
    int failed = za_mkdirs (s->model_dir) || s_append_line (s->model_dir, line)
              || (!s->writer && !(s->writer = za_summary_writer_new (s->model_dir)))
              || za_summary_scalars (s->writer, ctx->global_step, tags, values,
                                     s->optim? 4: 3);
    //  A file that could not be cut back is left; the next line starts another.
    if (failed && za_summary_writer_broken (s->writer))
        za_summary_writer_destroy (&s->writer);
    if (failed && !s->failing)
        za_info ("summaries are not written (%s); training goes on, they resume when the "
                 "disk has room", za_last_error ());
    else
    if (!failed && s->failing)
        za_info ("summaries are written again (step %" PRId64 ")", ctx->global_step);
    s->failing = failed;
    s->loss_sum = 0;
    s->loss_count = 0;
    za_every_done (&s->every, ctx->global_step, now);
    return 0;
}

static void
s_summary_end (void *arg, const za_run_context_t *ctx)
{
    (void) ctx;
    za_summary_hook_t *s = (za_summary_hook_t *) arg;
    za_summary_writer_destroy (&s->writer);
}

za_hook_t
za_summary_hook (za_summary_hook_t *state, const char *model_dir, int64_t every_steps,
                 const za_optim_config_t *optim)
{
    memset (state, 0, sizeof *state);
    state->model_dir = model_dir;
    state->optim = optim;
    state->every.steps = every_steps;
    za_hook_t hook = {.arg = state};
    if (every_steps > 0 && model_dir) {
        hook.begin = s_summary_begin;
        hook.before_run = s_summary_before_run;
        hook.after_run = s_summary_after_run;
        hook.end = s_summary_end;
    }
    return hook;
}

// ---------------------------------------------------------------------------
//  The checkpoint saver

static void
s_saver_begin (void *arg, int64_t global_step)
{
    za_saver_hook_t *s = (za_saver_hook_t *) arg;
    //  Counting from the newest checkpoint, not from where this loop began: a
    //  restarted chief that missed a multiple of steps saves at once.
    za_every_init (&s->every, s->every.steps, s->every.secs,
                   s->last_saved >= 0 && s->last_saved < global_step? s->last_saved
                                                                     : global_step,
                   za_clock_mono ());
    s->rc = 0;
}

static int
s_saver_after_run (void *arg, const za_run_context_t *ctx)
{
    za_saver_hook_t *s = (za_saver_hook_t *) arg;
    double now = za_clock_mono ();
    if (ctx->global_step >= ctx->max_steps || !za_every_due (&s->every, ctx->global_step, now))
        return 0;
    s->rc = s->save (s->arg, ctx->global_step);
    za_trace_event (ZA_TRACE_CHECKPOINT, "checkpoint", now, za_clock_mono (), ctx->global_step);
    if (s->rc < 0)
        return -1;
    if (s->rc == ZA_SAVE_SKIPPED) {
        //  The disk kept it from being written (said): the next one tries.
        s->rc = 0;
        za_every_done (&s->every, ctx->global_step, za_clock_mono ());
        return 0;
    }
    if (s->rc > 0)
        return 1;
    s->last_saved = ctx->global_step;
    za_every_done (&s->every, ctx->global_step, za_clock_mono ());
    return 0;
}

za_hook_t
za_saver_hook (za_saver_hook_t *state, int64_t every_steps, double every_secs,
               int64_t start_saved, za_save_fn *save, void *arg)
{
    memset (state, 0, sizeof *state);
    state->save = save;
    state->arg = arg;
    state->every.steps = every_steps;
    state->every.secs = every_secs;
    state->last_saved = start_saved;
    za_hook_t hook = {.arg = state, .begin = s_saver_begin, .after_run = s_saver_after_run};
    return hook;
}

// ---------------------------------------------------------------------------
//  Early stopping's listener

static int
s_stop_after_run (void *arg, const za_run_context_t *ctx)
{
    za_stop_hook_t *s = (za_stop_hook_t *) arg;
    double now = za_clock_mono ();
    if (!s->requested && now >= s->next_check) {
        s->next_check = now + ZA_EARLY_STOP_CHECK_SECS;
        s->requested = za_early_stop_requested (s->model_dir);
        if (s->requested)
            za_info ("early stopping: the evaluator asks to stop (%s/%s): training ends at "
                     "step %" PRId64, s->model_dir, ZA_EARLY_STOP_FILE, ctx->global_step);
    }
    return s->requested;
}

//  A request there before training starts (a chief started again): it ends
//  before its first step.
static void
s_stop_begin (void *arg, int64_t global_step)
{
    za_stop_hook_t *s = (za_stop_hook_t *) arg;
    s->requested = za_early_stop_requested (s->model_dir);
    if (s->requested)
        za_info ("early stopping: %s/%s asks to stop: training ends at step %" PRId64
                 " (delete the file to train on)", s->model_dir, ZA_EARLY_STOP_FILE,
                 global_step);
}

za_hook_t
za_stop_hook (za_stop_hook_t *state, const char *model_dir)
{
    memset (state, 0, sizeof *state);
    state->model_dir = model_dir;
    za_hook_t hook = {.arg = state, .begin = s_stop_begin, .after_run = s_stop_after_run};
    return hook;
}

// ---------------------------------------------------------------------------
//  The loss's check

int
za_loss_check (double loss, int64_t step)
{
    if (isfinite (loss))
        return 0;
    return za_error ("%s loss during training at step %" PRId64 ": the model diverged, and "
                     "training stops without saving it (lower --learning-rate, or clip the "
                     "gradients: --clip-norm)", isnan (loss)? "NaN": "infinite", step);
}
