/*  za_estimator.c: the single-process Estimator: the training loop, its
    checkpoint and summary policy, restore, evaluation and prediction.      */
#include "za/za_estimator.h"
#include "za/za_checkpoint.h"
#include "za/za_parallel.h"
#include "za/za_summary.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HOOKS 8
#define MAX_WORKERS 64
//  Each worker walks its slice of a batch in micro-batches of at most this
//  many examples: activations and im2col buffers then stay in cache (the
//  seed CNN runs ~25% faster per core at 16 than at 128 examples).
#define MICRO_BATCH_MAX 16
#define PROGRESS_REDRAW_SECS 0.25
#define CKPT_META_MODEL "model"
#define CKPT_META_MODEL_FN "model_fn"

struct _za_estimator_t {
    const za_model_fn_t *model_fn;
    const void *params;
    za_input_shape_t input;
    za_optim_config_t optim;
    za_run_config_t config;
    char *model_dir;
    const za_backend_t *be;

    //  Data parallelism inside the process: each batch is split over
    //  `workers` threads, each with its own model state and gradient buffer
    //  (worker 0's is `grads`); OpenBLAS runs single-threaded under them.
    int workers;
    za_parallel_t *pool;
    void *states [MAX_WORKERS];     //  the model_fn's state per worker
    float *worker_grads [MAX_WORKERS];
    int per_worker;                 //  examples each state is planned for
    size_t feature_size;
    za_vars_t vars;
    float *values;                  //  [vars.total]
    float *grads;                   //  = worker_grads [0]
    float *slots [ZA_OPTIM_MAX_SLOTS];
    int64_t global_step;

    za_hook_t hooks [MAX_HOOKS];
    int hook_count;
};

za_run_config_t
za_run_config_default (void)
{
    za_run_config_t config = {
        .model_dir = NULL,
        .save_checkpoints_steps = 0,
        .save_checkpoints_secs = 600,
        .keep_checkpoint_max = 5,
        .log_step_count_steps = 100,
        .save_summary_steps = 100,
        .seed = 42,
        .threads = 0,
        .progress = -1,
    };
    return config;
}

static void
s_destroy_states (za_estimator_t *self)
{
    for (int w = 0; w < MAX_WORKERS; w++)
        if (self->states [w])
            self->model_fn->destroy (&self->states [w]);
    self->per_worker = 0;
}

//  (Re)plans the workers' model states for batches of up to batch_max
//  examples (each state holds one micro-batch at most). The variable table
//  comes out the same each time; values are kept. On failure no state is
//  left, so the next call plans again.
static int
s_plan (za_estimator_t *self, int batch_max)
{
    int per_worker = (batch_max + self->workers - 1) / self->workers;
    if (per_worker > MICRO_BATCH_MAX)
        per_worker = MICRO_BATCH_MAX;
    if (self->states [0] && per_worker <= self->per_worker)
        return 0;
    s_destroy_states (self);
    for (int w = 0; w < self->workers; w++) {
        za_vars_t vars = {0};
        self->states [w] = self->model_fn->create (self->params, self->input, per_worker,
                                                   self->be, &vars);
        if (!self->states [w] || (self->values && vars.total != self->vars.total)) {
            if (self->states [w])
                za_error ("model_fn '%s' declared different variables on re-planning",
                          self->model_fn->name);
            s_destroy_states (self);
            return -1;
        }
        self->vars = vars;
    }
    self->per_worker = per_worker;
    return 0;
}

za_estimator_t *
za_estimator_new (const za_model_fn_t *model_fn, const void *params, za_input_shape_t input,
                  const za_optim_config_t *optim, const za_run_config_t *config)
{
    if (!model_fn || !model_fn->create || !model_fn->model_fn || !model_fn->destroy
        || !model_fn->init_vars) {
        za_error ("estimator: model_fn must provide create, init_vars, model_fn, destroy");
        return NULL;
    }
    if (input.height <= 0 || input.width <= 0 || input.channels <= 0) {
        za_error ("estimator: bad input shape %dx%dx%d", input.height, input.width,
                  input.channels);
        return NULL;
    }
    if (!(optim->learning_rate > 0)) {
        za_error ("estimator: learning rate must be positive (got %g)",
                  (double) optim->learning_rate);
        return NULL;
    }
    za_estimator_t *self = (za_estimator_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory");
        return NULL;
    }
    self->model_fn = model_fn;
    self->params = params;
    self->input = input;
    self->optim = *optim;
    self->config = *config;
    self->model_dir = config->model_dir? strdup (config->model_dir): NULL;
    self->config.model_dir = self->model_dir;
    self->be = za_backend_cpu ();
    //  Our workers own the cores: one OpenBLAS thread under each.
    self->be->set_threads (1);
    self->workers = config->threads > 0? config->threads: (int) sysconf (_SC_NPROCESSORS_ONLN);
    if (self->workers < 1)
        self->workers = 1;
    if (self->workers > MAX_WORKERS)
        self->workers = MAX_WORKERS;
    self->feature_size = (size_t) input.height * input.width * input.channels;
    if (!(self->pool = za_parallel_new (self->workers)))
        goto fail;
    if (s_plan (self, 1))
        goto fail;
    size_t bytes = self->vars.total * sizeof (float);
    self->values = (float *) za_alloc (bytes);
    if (!self->values)
        goto fail;
    for (int w = 0; w < self->workers; w++)
        if (!(self->worker_grads [w] = (float *) za_alloc (bytes)))
            goto fail;
    self->grads = self->worker_grads [0];
    int slot_count = za_optim_slot_count (optim->kind);
    for (int s = 0; s < slot_count; s++)
        if (!(self->slots [s] = (float *) za_alloc (bytes)))
            goto fail;
    model_fn->init_vars (self->states [0], &self->vars, self->values, config->seed);
    za_optim_init_slots (&self->optim, self->slots, self->vars.total);
    return self;
fail:
    za_estimator_destroy (&self);
    return NULL;
}

void
za_estimator_destroy (za_estimator_t **self_p)
{
    za_estimator_t *self = *self_p;
    if (!self)
        return;
    s_destroy_states (self);
    for (int w = 0; w < MAX_WORKERS; w++)
        za_free (self->worker_grads [w]);
    za_parallel_destroy (&self->pool);
    za_free (self->values);
    for (int s = 0; s < ZA_OPTIM_MAX_SLOTS; s++)
        za_free (self->slots [s]);
    free (self->model_dir);
    free (self);
    *self_p = NULL;
}

int
za_estimator_add_hook (za_estimator_t *self, const za_hook_t *hook)
{
    if (self->hook_count >= MAX_HOOKS)
        return za_error ("estimator: at most %d hooks", MAX_HOOKS);
    self->hooks [self->hook_count++] = *hook;
    return 0;
}

int64_t
za_estimator_global_step (const za_estimator_t *self)
{
    return self->global_step;
}

const za_vars_t *
za_estimator_vars (const za_estimator_t *self)
{
    return &self->vars;
}

const float *
za_estimator_values (const za_estimator_t *self)
{
    return self->values;
}

static const char *
s_model_text (const za_estimator_t *self)
{
    const char *text = self->model_fn->describe? self->model_fn->describe (self->params): NULL;
    return text? text: self->model_fn->name;
}

// ---------------------------------------------------------------------------
//  Checkpoints

static void
s_tensor_of_var (za_ckpt_tensor_t *t, const za_var_t *var, const char *name,
                 const float *block)
{
    memset (t, 0, sizeof *t);
    t->name = name;
    t->dtype = ZA_DTYPE_F32;
    t->ndim = var->ndim;
    for (int d = 0; d < var->ndim; d++)
        t->shape [d] = var->shape [d];
    t->data = block + var->offset;
}

static int
s_save (za_estimator_t *self)
{
    int slot_count = za_optim_slot_count (self->optim.kind);
    int count = self->vars.count * (1 + slot_count) + 1;
    za_ckpt_tensor_t tensors [ZA_MAX_VARS * (1 + ZA_OPTIM_MAX_SLOTS) + 1];
    char names [ZA_MAX_VARS * ZA_OPTIM_MAX_SLOTS][ZA_VAR_NAME_MAX + 16];
    int t = 0;
    for (int v = 0; v < self->vars.count; v++)
        s_tensor_of_var (&tensors [t++], &self->vars.vars [v], self->vars.vars [v].name,
                         self->values);
    for (int s = 0; s < slot_count; s++)
        for (int v = 0; v < self->vars.count; v++) {
            char *name = names [s * self->vars.count + v];
            snprintf (name, ZA_VAR_NAME_MAX + 16, "%s/%s", self->vars.vars [v].name,
                      za_optim_slot_name (self->optim.kind, s));
            s_tensor_of_var (&tensors [t++], &self->vars.vars [v], name, self->slots [s]);
        }
    int64_t step = self->global_step;
    tensors [t] = (za_ckpt_tensor_t) {.name = "global_step", .dtype = ZA_DTYPE_I64,
                                      .ndim = 0, .data = &step};
    t++;
    char lr [32];
    snprintf (lr, sizeof lr, "%g", (double) self->optim.learning_rate);
    za_ckpt_meta_t meta [] = {
        {CKPT_META_MODEL, s_model_text (self)},
        {CKPT_META_MODEL_FN, self->model_fn->name},
        {"optimizer", za_optim_name (self->optim.kind)},
        {"learning_rate", lr},
    };
    (void) count;
    return za_checkpoint_write_atomic (self->model_dir, self->global_step, tensors, t, meta,
                                       (int) (sizeof meta / sizeof meta [0]),
                                       self->config.keep_checkpoint_max);
}

//  Finds `name` in the checkpoint and checks it has var's shape; copies it
//  into block (when block is not NULL). Returns 0, 1 when the checkpoint
//  lacks it, or -1 with an error on another shape or type.
static int
s_copy_tensor (const za_checkpoint_t *ckpt, const char *name, const za_var_t *var,
               float *block)
{
    const za_ckpt_tensor_t *t = za_checkpoint_find (ckpt, name);
    if (!t)
        return 1;
    int same = t->dtype == ZA_DTYPE_F32 && t->ndim == var->ndim;
    for (int d = 0; same && d < var->ndim; d++)
        same = t->shape [d] == var->shape [d];
    if (!same)
        return za_error ("'%s': tensor '%s' has another shape or type than the model's",
                         za_checkpoint_filename (ckpt), name);
    if (block)
        memcpy (block + var->offset, t->data, var->size * sizeof (float));
    return 0;
}

//  Loads variables, slots and global_step from a checkpoint. Everything is
//  checked before anything is copied, so a refused checkpoint changes nothing.
//  Returns 0, or -1 with an error when it belongs to another model.
static int
s_restore_from (za_estimator_t *self, const za_checkpoint_t *ckpt)
{
    const char *model = za_checkpoint_meta (ckpt, CKPT_META_MODEL);
    if (model && strcmp (model, s_model_text (self)) != 0)
        return za_error ("'%s' holds another model:\n  checkpoint: %s\n  this run:   %s\n"
                         "Use another --model-dir, or the same model.",
                         za_checkpoint_filename (ckpt), model, s_model_text (self));
    int slot_count = za_optim_slot_count (self->optim.kind);
    int missing_slots = 0;
    for (int pass = 0; pass < 2; pass++) {
        int copy = pass == 1;
        for (int v = 0; v < self->vars.count; v++) {
            const za_var_t *var = &self->vars.vars [v];
            int rc = s_copy_tensor (ckpt, var->name, var, copy? self->values: NULL);
            if (rc > 0)
                return za_error ("'%s' has no variable '%s': written by another model?",
                                 za_checkpoint_filename (ckpt), var->name);
            if (rc < 0)
                return -1;
            for (int s = 0; s < slot_count; s++) {
                char name [ZA_VAR_NAME_MAX + 16];
                snprintf (name, sizeof name, "%s/%s", var->name,
                          za_optim_slot_name (self->optim.kind, s));
                rc = s_copy_tensor (ckpt, name, var, copy && !missing_slots? self->slots [s]: NULL);
                if (rc < 0)
                    return -1;
                if (!copy)
                    missing_slots += rc;
            }
        }
    }
    if (missing_slots) {
        za_info ("'%s' has no %s slots: starting them fresh",
                 za_checkpoint_filename (ckpt), za_optim_name (self->optim.kind));
        za_optim_init_slots (&self->optim, self->slots, self->vars.total);
    }
    self->global_step = za_checkpoint_step (ckpt);
    return 0;
}

//  Restores the newest intact checkpoint if there is one. *restored tells.
static int
s_restore_newest (za_estimator_t *self, int *restored)
{
    int found_any = 0;
    *restored = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (self->model_dir, &found_any);
    if (!ckpt) {
        if (found_any)
            return za_error ("no intact checkpoint in '%s' (all are corrupt; see above)",
                             self->model_dir);
        return 0;
    }
    int rc = s_restore_from (self, ckpt);
    za_checkpoint_destroy (&ckpt);
    *restored = rc == 0;
    return rc;
}

// ---------------------------------------------------------------------------
//  Logs and metrics

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
    char path [4096];
    snprintf (path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen (path, "a");
    if (!f)
        return za_error ("cannot append to '%s': %s", path, strerror (errno));
    int ok = fputs (line, f) >= 0 && fputc ('\n', f) != EOF;
    ok &= fclose (f) == 0;
    return ok? 0: za_error ("cannot write '%s': %s", path, strerror (errno));
}

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

//  The built-in hook (TensorFlow's StepCounterHook): a log line every
//  `every_steps` steps with global_step/sec and examples/sec, or on a terminal
//  one progress line redrawn in place.

static void
s_counter_begin (void *arg, int64_t global_step)
{
    za_step_counter_t *c = (za_step_counter_t *) arg;
    c->start_step = c->log_step = global_step;
    c->start_time = c->log_time = za_clock_mono ();
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
    int log_due = c->every_steps > 0 && ctx->global_step % c->every_steps == 0;
    if (log_due && !c->bar) {
        double span = now - c->log_time;
        fprintf (stderr, "zactor: step %" PRId64 "/%" PRId64 "  loss %.4f  global_step/sec %.1f"
                 "  examples/sec %.0f  ETA %s\n", ctx->global_step, ctx->max_steps, ctx->loss,
                 span > 0? (ctx->global_step - c->log_step) / span: 0,
                 span > 0? c->examples_since_log / span: 0, eta);
    }
    if (log_due) {
        c->log_step = ctx->global_step;
        c->log_time = now;
        c->examples_since_log = 0;
    }
    if (c->bar && (final || now - c->last_draw >= PROGRESS_REDRAW_SECS)) {
        const int width = 24;
        double frac = ctx->max_steps > 0? (double) ctx->global_step / ctx->max_steps: 1;
        int filled = (int) (frac * width);
        char bar [32];
        for (int i = 0; i < width; i++)
            bar [i] = i < filled? '#': '.';
        bar [width] = 0;
        fprintf (stderr, "\r[%s] step %" PRId64 "/%" PRId64 "  loss %.4f  %.0f examples/sec"
                 "  ETA %s  ", bar, ctx->global_step, ctx->max_steps, ctx->loss,
                 rate * ctx->batch_size, final? "0m00s": eta);
        c->last_draw = now;
        c->drew = 1;
    }
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
    memset (state, 0, sizeof *state);
    state->every_steps = every_steps;
    state->bar = bar;
    za_hook_t hook = {.arg = state, .begin = s_counter_begin,
                      .after_run = s_counter_after_run, .end = s_counter_end};
    return hook;
}

// ---------------------------------------------------------------------------
//  One batch over the workers

typedef struct {
    za_estimator_t *self;
    const za_batch_t *batch;
    za_mode_t mode;
    int64_t step;
    int first [MAX_WORKERS];            //  each worker's slice of the batch
    int count [MAX_WORKERS];
    int last_micro [MAX_WORKERS];       //  examples in each worker's last micro-batch
    za_spec_t specs [MAX_WORKERS];
    int rc [MAX_WORKERS];
    char error [MAX_WORKERS][ZA_ERROR_MAX_CHARS];
} s_batch_run_t;

static void
s_batch_slice (void *arg, int w)
{
    s_batch_run_t *run = (s_batch_run_t *) arg;
    za_estimator_t *self = run->self;
    const za_batch_t *batch = run->batch;
    int n = batch->size, workers = self->workers;
    int first = (int) ((int64_t) n * w / workers);
    int last = (int) ((int64_t) n * (w + 1) / workers);
    run->first [w] = first;
    run->count [w] = last - first;
    memset (&run->specs [w], 0, sizeof run->specs [w]);
    run->rc [w] = 0;
    float *grads = run->mode == ZA_MODE_TRAIN? self->worker_grads [w]: NULL;
    if (grads)
        memset (grads, 0, self->vars.total * sizeof (float));
    //  A model_fn adds the gradient of its call's MEAN loss. The buffer is kept
    //  as (gradient of the summed loss so far) / (this micro-batch's count):
    //  when the count changes it is rescaled once, and s_batch_run weighs each
    //  worker by last_micro / batch size, so the step's gradient is the mean
    //  over the whole batch whatever the split.
    int previous = 0;
    for (int lo = first; lo < last && run->rc [w] == 0; lo += MICRO_BATCH_MAX) {
        int count = last - lo < MICRO_BATCH_MAX? last - lo: MICRO_BATCH_MAX;
        if (grads && previous && count != previous) {
            float scale = (float) previous / (float) count;
            for (size_t i = 0; i < self->vars.total; i++)
                grads [i] *= scale;
        }
        previous = count;
        //  Randomness (dropout) differs per worker and micro-batch, fixed by the step.
        uint64_t seed = (uint64_t) run->step * 0x9e3779b97f4a7c15ULL
                      ^ ((uint64_t) w << 40) ^ (uint64_t) (lo - first);
        za_spec_t spec;
        run->rc [w] = self->model_fn->model_fn (
            self->states [w], batch->features + (size_t) lo * self->feature_size,
            run->mode == ZA_MODE_PREDICT? NULL: batch->labels + lo, count, run->mode,
            self->values, grads, (int64_t) seed, &spec);
        run->specs [w].logits = spec.logits;
        run->specs [w].n_classes = spec.n_classes;
        run->specs [w].loss_sum += spec.loss_sum;
        run->specs [w].correct += spec.correct;
    }
    run->last_micro [w] = previous;
    if (run->rc [w])
        snprintf (run->error [w], ZA_ERROR_MAX_CHARS, "%s", za_last_error ());
}

//  Runs the model_fn over a batch split across the workers; in TRAIN leaves
//  the summed gradients in self->grads. *loss_sum and *correct add up the
//  slices. Returns 0, or -1 with the first worker's error.
static int
s_batch_run (za_estimator_t *self, const za_batch_t *batch, za_mode_t mode,
             s_batch_run_t *run, double *loss_sum, int *correct)
{
    *loss_sum = 0;
    *correct = 0;
    if (batch->feature_size != (int64_t) self->feature_size)
        return za_error ("input_fn gives examples of %lld values; the model expects %dx%dx%d"
                         " = %zu", (long long) batch->feature_size, self->input.height,
                         self->input.width, self->input.channels, self->feature_size);
    if (s_plan (self, batch->size))
        return -1;
    run->self = self;
    run->batch = batch;
    run->mode = mode;
    run->step = self->global_step;
    za_parallel_run (self->pool, s_batch_slice, run);
    for (int w = 0; w < self->workers; w++) {
        if (run->rc [w])
            return za_error_adopt (run->error [w]);
        *loss_sum += run->specs [w].loss_sum;
        *correct += run->specs [w].correct;
    }
    if (mode == ZA_MODE_TRAIN) {
        //  grads = sum over workers of (last_micro / n) * worker buffer.
        const float inv_n = 1.0f / (float) batch->size;
        const float scale0 = (float) run->last_micro [0] * inv_n;
        for (size_t i = 0; i < self->vars.total; i++)
            self->grads [i] *= scale0;
        for (int w = 1; w < self->workers; w++) {
            if (run->count [w] == 0)
                continue;
            const float *g = self->worker_grads [w];
            const float scale = (float) run->last_micro [w] * inv_n;
            for (size_t i = 0; i < self->vars.total; i++)
                self->grads [i] += scale * g [i];
        }
    }
    return 0;
}

// ---------------------------------------------------------------------------
//  Train

int
za_estimator_train (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                    int64_t max_steps)
{
    if (!self->model_dir)
        return za_error ("train: RunConfig.model_dir is not set");
    if (max_steps <= 0)
        return za_error ("train: max_steps must be positive (got %" PRId64 ")", max_steps);
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
    za_input_t *input = input_fn (arg, ZA_MODE_TRAIN);
    if (!input)
        return -1;

    //  The built-in step counter runs first, then the caller's hooks.
    za_step_counter_t counter;
    za_hook_t hooks [MAX_HOOKS + 1];
    int hook_count = 0;
    hooks [hook_count++] = za_step_counter_hook (
        &counter, self->config.log_step_count_steps,
        self->config.progress > 0 || (self->config.progress < 0 && isatty (2)));
    for (int h = 0; h < self->hook_count; h++)
        hooks [hook_count++] = self->hooks [h];
    for (int h = 0; h < hook_count; h++)
        if (hooks [h].begin)
            hooks [h].begin (hooks [h].arg, self->global_step);
    double start = za_clock_mono ();
    //  TensorBoard scalars beside metrics.jsonl, every save_summary_steps.
    za_summary_writer_t *summary = self->config.save_summary_steps > 0
                                 ? za_summary_writer_new (self->model_dir): NULL;
    double last_save_time = start;
    int64_t last_saved_step = restored? self->global_step: -1;
    double summary_loss = 0;
    int64_t summary_steps = 0, summary_examples = 0, summary_step0 = self->global_step;
    double summary_time0 = start;
    za_run_context_t ctx = {.global_step = self->global_step, .max_steps = max_steps};
    s_batch_run_t run;
    int rc = 0, stop = 0;
    while (self->global_step < max_steps && !stop) {
        za_batch_t batch;
        int got = za_input_next (input, &batch);
        if (got <= 0)
            break;
        ctx.global_step = self->global_step;
        ctx.batch_size = batch.size;
        for (int h = 0; h < hook_count; h++)
            if (hooks [h].before_run)
                hooks [h].before_run (hooks [h].arg, &ctx);
        double loss_sum;
        int correct;
        if (s_batch_run (self, &batch, ZA_MODE_TRAIN, &run, &loss_sum, &correct)) {
            rc = -1;
            break;
        }
        za_optim_apply (&self->optim, self->global_step + 1, self->values, self->grads,
                        self->slots, self->vars.total);
        self->global_step++;
        double now = za_clock_mono ();
        ctx.global_step = self->global_step;
        ctx.loss = loss_sum / batch.size;
        ctx.elapsed_secs = now - start;
        summary_loss += ctx.loss;
        summary_steps++;
        summary_examples += batch.size;
        for (int h = 0; h < hook_count; h++)
            if (hooks [h].after_run && hooks [h].after_run (hooks [h].arg, &ctx))
                stop = 1;
        if (self->config.save_summary_steps > 0
            && self->global_step % self->config.save_summary_steps == 0) {
            double span = now - summary_time0;
            char line [256];
            snprintf (line, sizeof line,
                      "{\"global_step\": %" PRId64 ", \"loss\": %.6f, \"steps_per_sec\": %.3f, "
                      "\"examples_per_sec\": %.1f, \"wall_time\": %.3f}",
                      self->global_step, summary_loss / summary_steps,
                      span > 0? (self->global_step - summary_step0) / span: 0,
                      span > 0? summary_examples / span: 0, za_clock_wall ());
            const char *tags [] = {"loss", "global_step/sec", "examples/sec"};
            double values [] = {summary_loss / summary_steps,
                                span > 0? (self->global_step - summary_step0) / span: 0,
                                span > 0? summary_examples / span: 0};
            if (s_append_line (self->model_dir, "metrics.jsonl", line)
                || (summary && za_summary_scalars (summary, self->global_step, tags, values, 3))) {
                rc = -1;
                break;
            }
            summary_loss = 0, summary_steps = 0, summary_examples = 0;
            summary_step0 = self->global_step, summary_time0 = now;
        }
        int save_due = self->config.save_checkpoints_steps > 0
            ? self->global_step % self->config.save_checkpoints_steps == 0
            : self->config.save_checkpoints_secs > 0
              && now - last_save_time >= self->config.save_checkpoints_secs;
        if (save_due && self->global_step < max_steps) {
            if (s_save (self)) {
                rc = -1;
                break;
            }
            last_save_time = now;
            last_saved_step = self->global_step;
        }
    }
    za_input_destroy (&input);
    za_summary_writer_destroy (&summary);
    //  The final step is always saved, also when the input ended early.
    if (rc == 0 && self->global_step != last_saved_step && self->global_step > 0)
        rc = s_save (self);
    for (int h = 0; h < hook_count; h++)
        if (hooks [h].end)
            hooks [h].end (hooks [h].arg, &ctx);
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

//  Evaluates the variables now loaded (from checkpoint `ckpt_name`), appends
//  a line to model_dir/<subdir>/metrics.jsonl and fills *result.
static int
s_evaluate_loaded (za_estimator_t *self, za_input_fn_t input_fn, void *arg, int64_t steps,
                   const char *subdir, const char *ckpt_name, za_eval_result_t *result)
{
    za_input_t *input = input_fn (arg, ZA_MODE_EVAL);
    if (!input)
        return -1;
    double start = za_clock_mono (), loss_sum = 0;
    int64_t correct = 0, examples = 0;
    s_batch_run_t run;
    int rc = 0;
    for (int64_t b = 0; steps <= 0 || b < steps; b++) {
        za_batch_t batch;
        if (za_input_next (input, &batch) <= 0)
            break;
        double batch_loss;
        int batch_correct;
        if (s_batch_run (self, &batch, ZA_MODE_EVAL, &run, &batch_loss, &batch_correct)) {
            rc = -1;
            break;
        }
        loss_sum += batch_loss;
        correct += batch_correct;
        examples += batch.size;
    }
    za_input_destroy (&input);
    if (rc)
        return -1;
    if (examples == 0)
        return za_error ("evaluate: the input gave no examples");
    result->global_step = self->global_step;
    result->loss = loss_sum / (double) examples;
    result->accuracy = (double) correct / (double) examples;
    result->examples = examples;
    result->seconds = za_clock_mono () - start;
    char dir [4096], line [512];
    snprintf (dir, sizeof dir, "%s/%s", self->model_dir, subdir);
    snprintf (line, sizeof line,
              "{\"global_step\": %" PRId64 ", \"checkpoint\": \"%s\", \"loss\": %.6f, "
              "\"accuracy\": %.6f, \"examples\": %" PRId64 ", \"seconds\": %.3f, "
              "\"wall_time\": %.3f}", result->global_step, ckpt_name, result->loss,
              result->accuracy, result->examples, result->seconds, za_clock_wall ());
    return s_append_line (dir, "metrics.jsonl", line);
}

int
za_estimator_evaluate (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                       int64_t steps, za_eval_result_t *result)
{
    memset (result, 0, sizeof *result);
    if (s_load_for_inference (self, "evaluate"))
        return -1;
    char name [64];
    snprintf (name, sizeof name, "model.ckpt-%" PRId64 ".safetensors", self->global_step);
    return s_evaluate_loaded (self, input_fn, arg, steps, "eval", name, result);
}

int
za_estimator_evaluate_checkpoint (za_estimator_t *self, const char *path,
                                  za_input_fn_t input_fn, void *arg, int64_t steps,
                                  const char *subdir, za_eval_result_t *result)
{
    memset (result, 0, sizeof *result);
    if (!self->model_dir)
        return za_error ("evaluate: RunConfig.model_dir is not set");
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    if (!ckpt)
        return -1;
    int rc = s_restore_from (self, ckpt);
    za_checkpoint_destroy (&ckpt);
    if (rc)
        return -1;
    const char *name = strrchr (path, '/');
    return s_evaluate_loaded (self, input_fn, arg, steps, subdir, name? name + 1: path, result);
}

int64_t
za_estimator_predict (za_estimator_t *self, za_input_fn_t input_fn, void *arg,
                      za_predict_fn_t fn, void *fn_arg)
{
    if (s_load_for_inference (self, "predict"))
        return -1;
    za_input_t *input = input_fn (arg, ZA_MODE_PREDICT);
    if (!input)
        return -1;
    int64_t index = 0;
    s_batch_run_t run;
    int rc = 0, stop = 0;
    while (!stop) {
        za_batch_t batch;
        if (za_input_next (input, &batch) <= 0)
            break;
        //  Views of at most one micro-batch per worker, so each worker's
        //  logits cover its whole slice.
        int view_max = self->workers * MICRO_BATCH_MAX;
        for (int lo = 0; lo < batch.size && !stop && rc == 0; lo += view_max) {
            za_batch_t view = {batch.features + (size_t) lo * self->feature_size, NULL,
                               batch.size - lo < view_max? batch.size - lo: view_max,
                               batch.feature_size};
            double unused_loss;
            int unused_correct;
            if (s_batch_run (self, &view, ZA_MODE_PREDICT, &run, &unused_loss,
                             &unused_correct)) {
                rc = -1;
                break;
            }
            for (int w = 0; w < self->workers && !stop; w++) {
                const za_spec_t *spec = &run.specs [w];
                for (int r = 0; r < run.count [w] && !stop; r++, index++) {
                    const float *z = spec->logits + (size_t) r * spec->n_classes;
                    int best = 0;
                    for (int k = 1; k < spec->n_classes; k++)
                        if (z [k] > z [best])
                            best = k;
                    stop = fn (fn_arg, index, z, spec->n_classes, best);
                }
            }
        }
        if (rc)
            break;
    }
    za_input_destroy (&input);
    return rc? -1: index;
}

// ---------------------------------------------------------------------------
//  For the distributed roles: the same machinery, the update applied elsewhere

int
za_estimator_compute_gradients (za_estimator_t *self, const za_batch_t *batch,
                                double *loss_mean)
{
    s_batch_run_t run;
    double loss_sum;
    int correct;
    if (s_batch_run (self, batch, ZA_MODE_TRAIN, &run, &loss_sum, &correct))
        return -1;
    *loss_mean = loss_sum / batch->size;
    return 0;
}

float *
za_estimator_values_mut (za_estimator_t *self)
{
    return self->values;
}

const float *
za_estimator_gradients (const za_estimator_t *self)
{
    return self->grads;
}

float *
za_estimator_slot (za_estimator_t *self, int slot)
{
    return slot >= 0 && slot < za_optim_slot_count (self->optim.kind)? self->slots [slot]: NULL;
}

const za_optim_config_t *
za_estimator_optim (const za_estimator_t *self)
{
    return &self->optim;
}

void
za_estimator_set_global_step (za_estimator_t *self, int64_t step)
{
    self->global_step = step;
}

int
za_estimator_save (za_estimator_t *self)
{
    if (!self->model_dir)
        return za_error ("save: RunConfig.model_dir is not set");
    if (za_mkdirs (self->model_dir))
        return -1;
    return s_save (self);
}

int
za_estimator_restore (za_estimator_t *self, int *restored)
{
    *restored = 0;
    if (!self->model_dir)
        return za_error ("restore: RunConfig.model_dir is not set");
    if (za_mkdirs (self->model_dir))
        return -1;
    return s_restore_newest (self, restored);
}

int
za_estimator_append_metrics (za_estimator_t *self, const char *subdir, const char *json_line)
{
    char dir [4096];
    if (subdir)
        snprintf (dir, sizeof dir, "%s/%s", self->model_dir, subdir);
    else
        snprintf (dir, sizeof dir, "%s", self->model_dir);
    return s_append_line (dir, "metrics.jsonl", json_line);
}
