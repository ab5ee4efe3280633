/*  za_estimator.c: the single-process Estimator: the training loop with its
    hooks (step counter, summaries, checkpoints), restore, evaluation and
    prediction, over one replica of the model.                              */
#include "za/za_estimator.h"
#include "za/za_json.h"
#include "za/za_trace.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_preempt.h"

#include <czmq.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HOOKS 8
#define EVAL_LINE_MAX 512

struct _za_estimator_t {
    za_replica_t *replica;
    za_run_config_t config;
    char *model_dir;
    int64_t global_step;
    za_hooks_t hooks;               //  the caller's
    const za_model_fn_t *model_fn;
    za_eval_metrics_spec_t metrics; //  RunConfig's eval_metrics
    int diverged;                   //  the last train stopped at a NaN loss
};

za_replica_config_t
za_run_config_replica (const za_run_config_t *run, const za_model_fn_t *model_fn,
                       const void *params, za_input_shape_t input)
{
    za_replica_config_t replica = {
        .model_fn = model_fn, .params = params, .input = input, .threads = run->threads,
        .device = run->device, .replicas_per_device = run->replicas_per_device,
        .precision = run->precision, .initial_loss_scale = run->initial_loss_scale,
        .warm_start = &run->warm_start,
    };
    return replica;
}

za_run_config_t
za_run_config_default (void)
{
    za_run_config_t config = {
        .model_dir = NULL,
        .save_checkpoints_steps = 0,
        .save_checkpoints_secs = ZA_RUN_SAVE_CHECKPOINTS_SECS,
        .keep_checkpoint_max = ZA_RUN_KEEP_CHECKPOINT_MAX,
        .log_step_count_steps = ZA_RUN_LOG_STEP_COUNT_STEPS,
        .save_summary_steps = ZA_RUN_SAVE_SUMMARY_STEPS,
        .seed = ZA_RUN_SEED,
        .threads = 0,
        .progress = -1,
    };
    return config;
}

za_estimator_t *
za_estimator_new (const za_model_fn_t *model_fn, const void *params, za_input_shape_t input,
                  const za_optim_config_t *optim, const za_run_config_t *config)
{
    za_estimator_t *self = (za_estimator_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    self->config = *config;
    self->model_fn = model_fn;
    if (za_eval_metrics_parse (config->eval_metrics, &self->metrics)
        || za_eval_metrics_check_own (model_fn->metrics, model_fn->metric_count)) {
        free (self);
        return NULL;
    }
    self->model_dir = config->model_dir? strdup (config->model_dir): NULL;
    self->config.model_dir = self->model_dir;
    za_replica_config_t replica = za_run_config_replica (&self->config, model_fn, params,
                                                         input);
    replica.train = optim != NULL;
    replica.optim = optim;
    replica.graphs = 1;
    if (!(self->replica = za_replica_new (&replica, config->seed)))
        za_estimator_destroy (&self);   //  (the replica said why)
    return self;
}

void
za_estimator_destroy (za_estimator_t **self_p)
{
    za_estimator_t *self = *self_p;
    if (!self)
        return;
    za_replica_destroy (&self->replica);
    free (self->model_dir);
    free (self);
    *self_p = NULL;
}

int
za_estimator_add_hook (za_estimator_t *self, const za_hook_t *hook)
{
    if (self->hooks.count >= MAX_HOOKS)
        return za_error ("estimator: at most %d hooks", MAX_HOOKS);
    return za_hooks_add (&self->hooks, hook);
}

void
za_estimator_pop_hook (za_estimator_t *self)
{
    if (self->hooks.count > 0)
        self->hooks.count--;
}

int
za_estimator_diverged (const za_estimator_t *self)
{
    return self->diverged;
}

int64_t
za_estimator_global_step (const za_estimator_t *self)
{
    return self->global_step;
}

const za_vars_t *
za_estimator_vars (const za_estimator_t *self)
{
    return za_replica_vars (self->replica);
}

const float *
za_estimator_values (const za_estimator_t *self)
{
    return za_replica_values (self->replica);
}

void
za_estimator_set_global_step (za_estimator_t *self, int64_t step)
{
    self->global_step = step;
}

int
za_estimator_save (za_estimator_t *self)
{
    return za_replica_save (self->replica, self->model_dir, self->global_step,
                            self->config.keep_checkpoint_max);
}

//  Restores the newest intact checkpoint if there is one. *restored tells.
static int
s_restore_newest (za_estimator_t *self, int *restored)
{
    return za_replica_restore_newest (self->replica, self->model_dir, 1, restored,
                                      &self->global_step);
}

static int
s_is_dir (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

static int
s_append_line (const char *dir, const char *file, const char *line)
{
    if (za_mkdirs (dir))
        return -1;
    char path [4200];
    snprintf (path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen (path, "a");
    if (!f)
        return za_error ("cannot append to '%s': %s", path, strerror (errno));
    int ok = fputs (line, f) >= 0 && fputc ('\n', f) != EOF;
    ok &= fclose (f) == 0;
    return ok? 0: za_error ("cannot write '%s': %s", path, strerror (errno));
}

//  The checkpoint saver's save: the estimator's own state.
static int
s_save_at (void *arg, int64_t step)
{
    za_estimator_t *self = (za_estimator_t *) arg;
    (void) step;
    return za_replica_save_through (self->replica, self->model_dir, self->global_step,
                                    self->config.keep_checkpoint_max, 0);
}

//  The input of `mode`: the context says what this estimator knows.
static za_input_t *
s_input (za_estimator_t *self, za_input_fn_t input_fn, void *arg, za_mode_t mode)
{
    //  Training reads on from where the steps so far left the stream.
    za_input_context_t context = {
        .mode = mode, .num_shards = 1, .shard_index = 0, .seed = self->config.seed,
        .global_step = self->global_step,
        .steps_done = mode == ZA_MODE_TRAIN? self->global_step: 0,
    };
    //  On a device its prefetch thread copies the batches up as well.
    za_input_t *input = input_fn (arg, &context);
    if (input && za_replica_feed (self->replica, input))
        za_input_destroy (&input);
    return input;
}

// ---------------------------------------------------------------------------
//  Train

//  1 (said, and remembered) when the loss read at this step is NaN or
//  infinite: the model diverged (za_loss_check).
static int
s_diverged (za_estimator_t *self, double loss)
{
    if (za_loss_check (loss, self->global_step) == 0)
        return 0;
    self->diverged = 1;
    return 1;
}

//  The steps of a train, from ctx's global_step until its max_steps, the
//  input's end, a hook's stop, a preemption request (za_preempt.h) or an
//  error; ctx is left at the last step for the hooks' end. Returns 0 or -1.
//  On a device the steps do not wait for their end (za_replica_defer_loss):
//  the loss is read where a hook wants it and at the last step; the host
//  makes the next step while the device computes. ZA_SYNC_STEPS=1: every
//  step waits, as on the CPU (to measure what that costs).
static int
s_train_steps (za_estimator_t *self, za_input_t *input, za_hooks_t *hooks,
               za_run_context_t *ctx, double start, int stop)
{
    const char *sync = getenv ("ZA_SYNC_STEPS");
    int defer = za_replica_defer_loss (self->replica, !(sync && strcmp (sync, "1") == 0));
    int rc = 0;
    while (self->global_step < ctx->max_steps && !stop && !za_preempt_requested ()
           && !zsys_interrupted) {
        za_batch_t batch;
        double t0 = za_clock_mono ();
        int got = za_input_next (input, &batch);
        if (got < 0)
            rc = -1;
        if (got <= 0)
            break;
        ctx->global_step = self->global_step;
        ctx->batch_size = batch.size;
        int wanted = za_hooks_before_run (hooks, ctx);
        double loss, t1 = za_clock_mono ();
        if (za_replica_compute_gradients (self->replica, &batch, self->global_step, &loss)) {
            rc = -1;
            break;
        }
        double t2 = za_clock_mono ();
        za_replica_apply (self->replica, self->global_step + 1);
        if (za_trace_on ()) {
            double t3 = za_clock_mono ();
            za_trace_event (ZA_TRACE_STEP, "step", t0, t3, self->global_step);
            za_trace_event (ZA_TRACE_INPUT, "input", t0, t1, self->global_step);
            za_trace_event (ZA_TRACE_COMPUTE, "forward+backward", t1, t2, self->global_step);
            za_replica_trace_compute (self->replica, self->global_step);
            za_trace_event (ZA_TRACE_APPLY, "apply", t2, t3, self->global_step);
        }
        self->global_step++;
        ctx->global_step = self->global_step;
        if (!defer) {
            ctx->loss = loss;
            ctx->loss_steps = 1;
        }
        else
        if (!wanted && self->global_step < ctx->max_steps)
            ctx->loss_steps = 0;            //  (ctx->loss: the last read)
        else
        if (za_replica_take_loss (self->replica, &ctx->loss, &ctx->loss_steps)) {
            rc = -1;
            break;
        }
        if (ctx->loss_steps > 0 && s_diverged (self, ctx->loss)) {
            rc = -1;
            break;
        }
        ctx->loss_scale = za_replica_loss_scale (self->replica, &ctx->skipped_steps);
        ctx->elapsed_secs = za_clock_mono () - start;
        stop = za_hooks_after_run (hooks, ctx);
        if (stop < 0)
            rc = -1;
    }
    //  The steps not read yet (the input ended, a hook stopped, a failure):
    //  their work done, its failure said, their loss the end's.
    if (defer) {
        double loss;
        int64_t steps;
        char first [ZA_ERROR_MAX_CHARS];
        snprintf (first, sizeof first, "%s", za_last_error ());
        za_replica_defer_loss (self->replica, 0);
        if (za_replica_take_loss (self->replica, &loss, &steps) && rc == 0)
            rc = -1;
        else
        if (rc)
            za_error_adopt (first);         //  the first failure is the one said
        if (steps > 0 && rc == 0) {
            ctx->loss = loss;
            ctx->loss_steps = steps;
            if (s_diverged (self, loss))
                rc = -1;
        }
    }
    return rc;
}

int
za_estimator_train (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                    int64_t max_steps)
{
    if (!self->model_dir)
        return za_error ("train: RunConfig.model_dir is not set");
    if (max_steps <= 0)
        return za_error ("train: max_steps must be positive (got %" PRId64 ")", max_steps);
    if (!za_replica_optim (self->replica))
        return za_error ("train: this estimator was made without an optimizer");
    if (za_mkdirs (self->model_dir))
        return -1;
    int restored;
    if (s_restore_newest (self, &restored))
        return -1;
    if (restored)
        za_info ("restored step %" PRId64 " from '%s'", self->global_step, self->model_dir);
    if (self->global_step >= max_steps) {
        za_info ("'%s' is already at step %" PRId64 " >= max_steps %" PRId64
                 ": nothing to train", self->model_dir, self->global_step, max_steps);
        return 0;
    }
    za_input_t *input = s_input (self, input_fn, arg, ZA_MODE_TRAIN);
    if (!input)
        return -1;
    self->diverged = 0;
    //  The built-in hooks run first, then the caller's.
    const za_run_config_t *config = &self->config;
    za_step_counter_t counter = {.who = ""};
    za_summary_hook_t summary;
    za_saver_hook_t saver;
    za_stop_hook_t stopper;
    za_hooks_t hooks = {.count = 0};
    za_hook_t builtin [] = {
        za_step_counter_hook (&counter, config->log_step_count_steps,
                              config->progress > 0 || (config->progress < 0 && isatty (2))),
        za_summary_hook (&summary, self->model_dir, config->save_summary_steps,
                         za_replica_optim (self->replica)),
        za_saver_hook (&saver, config->save_checkpoints_steps, config->save_checkpoints_secs,
                       restored? self->global_step: -1, s_save_at, self),
    };
    for (size_t h = 0; h < sizeof builtin / sizeof builtin [0]; h++)
        za_hooks_add (&hooks, &builtin [h]);
    za_hook_t stop_hook = za_stop_hook (&stopper, self->model_dir);
    if (config->early_stopping)
        za_hooks_add (&hooks, &stop_hook);
    for (int h = 0; h < self->hooks.count; h++)
        za_hooks_add (&hooks, &self->hooks.hooks [h]);
    za_hooks_begin (&hooks, self->global_step);
    double start = za_clock_mono ();
    za_run_context_t ctx = {.global_step = self->global_step, .max_steps = max_steps};
    int stop = config->early_stopping && stopper.requested;
    int rc = s_train_steps (self, input, &hooks, &ctx, start, stop);
    za_input_destroy (&input);
    //  The final step is always saved, also when the input ended early.
    if (rc == 0 && self->global_step != saver.last_saved && self->global_step > 0)
        rc = za_replica_save_through (self->replica, self->model_dir, self->global_step,
                                      self->config.keep_checkpoint_max, 1);
    //  A checkpoint refused for its values (not finite) says so too.
    if (rc && za_replica_diverged (self->replica))
        self->diverged = 1;
    //  Stopped early: the evaluators learn where training ended.
    if (rc == 0 && config->early_stopping)
        rc = za_early_stop_end (self->model_dir, self->global_step);
    za_hooks_end (&hooks, &ctx);
    return rc;
}

// ---------------------------------------------------------------------------
//  Evaluate and predict

//  Loads the newest checkpoint for evaluate / predict.
static int
s_load_for_inference (za_estimator_t *self, const char *what)
{
    if (!self->model_dir)
        return za_error ("%s: RunConfig.model_dir is not set", what);
    if (!s_is_dir (self->model_dir))
        return za_error ("%s: model_dir '%s' is not a directory: train first", what,
                         self->model_dir);
    int restored;
    if (s_restore_newest (self, &restored))
        return -1;
    if (!restored)
        return za_error ("%s: no checkpoint in '%s': train first", what, self->model_dir);
    return 0;
}

//  The line metrics.jsonl gets for a result, with the metrics' values (NULL:
//  none), which also go into the result. 0, or -1 with an error.
static int
s_eval_line (za_estimator_t *self, za_eval_metrics_t *metrics, const char *ckpt_name,
             za_eval_result_t *result, char **line_p)
{
    (void) self;
    char head [EVAL_LINE_MAX], age [64] = "", loss [ZA_JSON_REAL_MAX];
    if (result->checkpoint_age_secs >= 0)
        snprintf (age, sizeof age, ", \"checkpoint_age_secs\": %.4f",
                  result->checkpoint_age_secs);
    //  The loss to 9 digits: a restarted evaluator's early stopping walks
    //  these lines (a loss below 5e-7 was 0.000000).
    snprintf (head, sizeof head,
              "{\"global_step\": %" PRId64 ", \"checkpoint\": \"%s\", \"loss\": %s, "
              "\"accuracy\": %.6f, \"examples\": %" PRId64 ", \"seconds\": %.3f, "
              "\"wall_time\": %.3f%s", result->global_step, ckpt_name,
              za_json_real_text (result->loss, 9, loss, sizeof loss), result->accuracy,
              result->examples, result->seconds, za_clock_wall (), age);
    //  A set of files: how many it lists, and how many of them were skipped.
    if (result->images > 0) {
        size_t used = strlen (head);
        snprintf (head + used, sizeof head - used,
                  ", \"images\": %" PRId64 ", \"skipped_images\": %" PRId64, result->images,
                  result->bad_images);
    }
    char *extra = NULL;
    if (metrics) {
        result->scalar_count = za_eval_metrics_scalars (metrics, result->scalars,
                                                        ZA_EVAL_SCALARS_MAX);
        json_t *json = za_eval_metrics_json (metrics);
        extra = json? json_dumps (json, JSON_PRESERVE_ORDER
                                        | JSON_REAL_PRECISION (6)): NULL;
        json_decref (json);
        if (!extra)
            return za_error ("evaluate: out of memory for the metrics' line");
        if (self->metrics.confusion_matrix
            && za_eval_metrics_confusion_png (metrics, &result->confusion_png,
                                              &result->confusion_png_size,
                                              &result->confusion_width,
                                              &result->confusion_height))
            za_info ("warning: evaluate: %s (the metrics go without it)", za_last_error ());
    }
    //  The metrics' object without its braces joins the line's.
    size_t extra_len = extra? strlen (extra): 0;
    size_t size = strlen (head) + extra_len + 8;
    char *line = (char *) malloc (size);
    if (line)
        snprintf (line, size, "%s%s%.*s}", head, extra_len > 2? ", ": "",
                  extra_len > 2? (int) extra_len - 2: 0, extra_len > 2? extra + 1: "");
    free (extra);
    if (!line)
        return za_error ("evaluate: out of memory for the metrics' line");
    *line_p = line;
    return 0;
}

void
za_eval_result_free (za_eval_result_t *result)
{
    free (result->confusion_png);
    result->confusion_png = NULL;
    result->confusion_png_size = 0;
}

int
za_eval_result_value (const za_eval_result_t *result, const char *name, double *value)
{
    if (!strcmp (name, "loss") || !strcmp (name, "accuracy")) {
        *value = !strcmp (name, "loss")? result->loss: result->accuracy;
        return 0;
    }
    for (int i = 0; i < result->scalar_count; i++)
        if (!strcmp (result->scalars [i].name, name)) {
            *value = result->scalars [i].value;
            return 0;
        }
    return -1;
}

//  Evaluates the variables now loaded (from checkpoint `ckpt_name`), appends
//  a line to model_dir/<subdir>/metrics.jsonl and fills *result.
static int
s_evaluate_loaded (za_estimator_t *self, za_input_fn_t input_fn, void *arg, int64_t steps,
                   const char *subdir, const char *ckpt_name, za_eval_result_t *result)
{
    za_input_t *input = s_input (self, input_fn, arg, ZA_MODE_EVAL);
    if (!input)
        return -1;
    const za_model_fn_t *model_fn = self->model_fn;
    za_eval_metrics_t *metrics = NULL;
    if (za_eval_metrics_any (&self->metrics, model_fn->metric_count)
        && !(metrics = za_eval_metrics_new (&self->metrics, model_fn->metrics,
                                            model_fn->metric_count))) {
        za_input_destroy (&input);
        return za_error ("evaluate: out of memory for the metrics");
    }
    double start = za_clock_mono (), loss_sum = 0;
    int64_t correct = 0, examples = 0;
    int rc = 0;
    for (int64_t b = 0; steps <= 0 || b < steps; b++) {
        za_batch_t batch;
        int got = za_input_next (input, &batch);
        if (got < 0)
            rc = -1;
        if (got <= 0)
            break;
        double batch_loss;
        int batch_correct;
        if (za_replica_evaluate_batch (self->replica, &batch, &batch_loss, &batch_correct,
                                       metrics)) {
            rc = -1;
            break;
        }
        loss_sum += batch_loss;
        correct += batch_correct;
        examples += batch.size;
    }
    result->images = za_input_listed (input);
    result->bad_images = za_input_bad (input);
    result->input_failed = za_input_failed (input);
    za_input_destroy (&input);
    if (rc == 0 && examples == 0)
        rc = za_error ("evaluate: the input gave no examples");
    char *line = NULL;
    if (rc == 0) {
        result->global_step = self->global_step;
        result->loss = loss_sum / (double) examples;
        result->accuracy = (double) correct / (double) examples;
        result->examples = examples;
        result->seconds = za_clock_mono () - start;
        rc = s_eval_line (self, metrics, ckpt_name, result, &line);
    }
    za_eval_metrics_destroy (&metrics);
    if (rc == 0) {
        char dir [4096];
        snprintf (dir, sizeof dir, "%s/%s", self->model_dir, subdir);
        rc = s_append_line (dir, "metrics.jsonl", line);
    }
    free (line);
    return rc;
}

int
za_estimator_evaluate (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                       int64_t steps, za_eval_result_t *result)
{
    return za_estimator_evaluate_named (self, input_fn, arg, steps, NULL, result);
}

int
za_estimator_evaluate_named (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                             int64_t steps, const char *eval_name, za_eval_result_t *result)
{
    memset (result, 0, sizeof *result);
    result->checkpoint_age_secs = -1;
    if (s_load_for_inference (self, "evaluate"))
        return -1;
    char name [64], subdir [ZA_EVAL_SUBDIR_MAX];
    snprintf (name, sizeof name, "model.ckpt-%" PRId64 ".safetensors", self->global_step);
    za_eval_subdir (eval_name, subdir, sizeof subdir);
    return s_evaluate_loaded (self, input_fn, arg, steps, subdir, name, result);
}

void
za_eval_subdir (const char *eval_name, char *subdir, size_t size)
{
    int named = eval_name && *eval_name;
    snprintf (subdir, size, "eval%s%s", named? "_": "", named? eval_name: "");
}

int
za_estimator_evaluate_checkpoint (za_estimator_t *self, const char *path,
                                  za_input_fn_t input_fn, void *arg, int64_t steps,
                                  const char *subdir, za_eval_result_t *result)
{
    memset (result, 0, sizeof *result);
    if (!self->model_dir)
        return za_error ("evaluate: RunConfig.model_dir is not set");
    //  Its age as the evaluation starts: the file's last write to now (0 when
    //  the file's clock, another host's, runs ahead of ours).
    struct stat st;
    result->checkpoint_age_secs = -1;
    if (stat (path, &st) == 0) {
        double age = za_clock_wall () - ((double) st.st_mtim.tv_sec
                                         + (double) st.st_mtim.tv_nsec * 1e-9);
        result->checkpoint_age_secs = age > 0? age: 0;
    }
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    if (!ckpt) {
        result->unreadable = 1;
        return -1;
    }
    int rc = za_replica_restore (self->replica, ckpt, &self->global_step);
    za_checkpoint_destroy (&ckpt);
    if (rc) {
        result->model_differs = 1;      //  (the file itself is intact: verified)
        return -1;
    }
    const char *name = strrchr (path, '/');
    return s_evaluate_loaded (self, input_fn, arg, steps, subdir, name? name + 1: path, result);
}

int64_t
za_estimator_predict (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                      za_predict_fn_t fn, void *fn_arg)
{
    return za_estimator_predict_from (self, NULL, input_fn, arg, fn, fn_arg);
}

int64_t
za_estimator_predict_from (za_estimator_t *self, const char *checkpoint_path,
                           za_input_fn_t input_fn, void *arg, za_predict_fn_t fn,
                           void *fn_arg)
{
    if (checkpoint_path) {
        za_checkpoint_t *ckpt = za_checkpoint_load (checkpoint_path);
        int rc = ckpt? za_replica_restore (self->replica, ckpt, &self->global_step): -1;
        za_checkpoint_destroy (&ckpt);
        if (rc)
            return -1;
    }
    else
    if (s_load_for_inference (self, "predict"))
        return -1;
    za_input_t *input = s_input (self, input_fn, arg, ZA_MODE_PREDICT);
    if (!input)
        return -1;
    int64_t index = 0;
    int rc = 0;
    while (rc == 0) {
        za_batch_t batch;
        int got = za_input_next (input, &batch);
        if (got < 0)
            rc = -1;
        if (got <= 0)
            break;
        rc = za_replica_predict_batch (self->replica, &batch, fn, fn_arg, &index);
    }
    za_input_destroy (&input);
    return rc < 0? -1: index;
}
