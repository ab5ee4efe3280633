/*  za_evaluator.c: the evaluator's schedule (start delay, throttle, final
    checkpoint), checkpoint discovery by watching model_dir, replay, and the
    best-checkpoint exporter.                                                */
#include "za/za_evaluator.h"
#include "za/za_export.h"
#include "za/za_json.h"
#include "za/za_trace.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_preempt.h"
#include "za/za_summary.h"
#include "za_role_private.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_BATCH 500
#define DEFAULT_POLL_SECS 0.2
//  With a trigger or an inotify watch, model_dir is still looked at this
//  often: the fallback for what neither can tell (a broker away, a chief
//  writing on another host without one).
#define FALLBACK_POLL_SECS 1.0
#define LOCK_NAME ".evaluator"

void
za_evaluator_config_init (za_evaluator_config_t *config)
{
    memset (config, 0, sizeof *config);
    config->batch_size = DEFAULT_BATCH;
    config->spec.start_delay_secs = ZA_EVAL_START_DELAY_SECS;
    config->spec.throttle_secs = ZA_EVAL_THROTTLE_SECS;
    config->export_best = 1;
    config->poll_secs = DEFAULT_POLL_SECS;
    config->watch_dir = 1;
}

//  The keeper of an evaluation's best checkpoint (--best-metric,
//  --export-onnx): the evaluator's, and that of a chief's or one process's
//  final evaluation (za_evaluator_keep_best).
typedef struct {
    const char *who;                        //  what its lines start with
    const char *model_dir;
    const za_eval_spec_t *spec;
    za_input_shape_t input;
    za_metric_goal_t goal;                  //  --best-metric
    double best_value;                      //  the best checkpoint's (NaN: none yet)
    int input_failed;                       //  input.json's copy failed once: said
    int onnx_failed;                        //  --export-onnx failed once: said
} s_best_t;

typedef struct {
    const za_evaluator_config_t *config;
    za_estimator_t *est;
    char subdir [ZA_EVAL_SUBDIR_MAX];
    s_best_t best;
    int stopping;                           //  --stop-if-no-improvement: the rule in stop
    za_early_stop_t stop;
    int asked;                              //  the request is written
    za_summary_writer_t *summary;           //  TensorBoard scalars in the eval dir
    int inotify;                            //  -1: none (not watch_dir, or refused)
    int watch;                              //  on model_dir; -1: not yet there
    int lock;                               //  MODEL_DIR/<subdir>/.evaluator, held;
                                            //  -1: not yet; -2: another evaluator's
    int told;                               //  a trigger has announced a checkpoint
    int bad_data;                           //  the evaluation set failed on its
                                            //  images (--max-bad-images)
} s_eval_t;

//  The evaluation data: the config's input_fn, or its data set in batches.
static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    const za_evaluator_config_t *config = (const za_evaluator_config_t *) arg;
    za_input_context_t eval = *context;
    eval.batch_size = config->batch_size > 0? config->batch_size: DEFAULT_BATCH;
    if (config->input_fn)
        return config->input_fn (config->input_arg, &eval);
    za_input_config_t input = za_input_config_default ();
    input.batch_size = eval.batch_size;
    return za_input_new (config->data, &input);
}

//  The largest global_step in <eval dir>/metrics.jsonl (-1 if none): what a
//  restarted evaluator has done already. Also where early stopping's rule
//  stands, walked by its own metric.
static int64_t
s_already_evaluated (s_eval_t *self)
{
    char path [4096];
    snprintf (path, sizeof path, "%s/%s/metrics.jsonl", self->config->model_dir, self->subdir);
    FILE *f = fopen (path, "r");
    if (!f)
        return -1;
    int64_t last = -1;
    char *line = NULL;
    size_t size = 0;
    //  Lines of any length: --eval-metrics makes long ones.
    while (getline (&line, &size, f) > 0) {
        json_t *json = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        if (!json)
            continue;
        json_t *step = json_object_get (json, "global_step");
        if (json_is_integer (step) && json_integer_value (step) > last)
            last = json_integer_value (step);
        json_t *value = json_object_get (json, self->stop.goal.name);
        if (self->stopping && json_is_integer (step))
            za_early_stop_add (&self->stop, json_integer_value (step),
                               json_is_number (value)? json_number_value (value): NAN);
        json_decref (json);
    }
    free (line);
    fclose (f);
    return last;
}

//  Copies `src` (read from held, an open descriptor of it, where >= 0) to
//  `dst` atomically (temp file, fsync, rename).
static int
s_copy_atomic (const char *src, int held, const char *dst)
{
    char tmp [4700];
    snprintf (tmp, sizeof tmp, "%s.tmp", dst);
    int fd = held >= 0? dup (held): -1;
    FILE *in = held < 0? fopen (src, "rb")
             : fd >= 0 && lseek (fd, 0, SEEK_SET) == 0? fdopen (fd, "rb"): NULL;
    if (!in && fd >= 0)
        close (fd);
    if (!in)
        return za_error ("export: cannot read '%s': %s", src, strerror (errno));
    FILE *out = fopen (tmp, "wb");
    if (!out) {
        fclose (in);
        return za_error ("export: cannot write '%s': %s", tmp, strerror (errno));
    }
    char buf [65536];
    size_t n;
    int ok = 1;
    while (ok && (n = fread (buf, 1, sizeof buf, in)) > 0)
        ok = fwrite (buf, 1, n, out) == n;
    ok = ok && !ferror (in) && fflush (out) == 0 && fsync (fileno (out)) == 0;
    fclose (in);
    ok = fclose (out) == 0 && ok;
    if (!ok || rename (tmp, dst)) {
        unlink (tmp);
        return za_error ("export: cannot write '%s': %s", dst, strerror (errno));
    }
    return 0;
}

void
za_evaluator_best_dir (const char *model_dir, const char *name, char *dir, size_t size)
{
    int named = name && *name;
    snprintf (dir, size, "%s/export/best%s%s", model_dir, named? "_": "", named? name: "");
}

//  The best checkpoint (dst, in dir) gets the model dir's input.json beside
//  it (its input's shape, preprocessing and class names), so that the
//  folder is a model of its own (zactor-run serve and predict, zactor-ckpt
//  export, za_predictor); with --export-onnx, also dir/model.onnx (for
//  onnxruntime). A failure is a warning: the checkpoint is kept all the same.
static void
s_export_beside (s_best_t *self, const char *dir, const char *dst)
{
    char input [4200], copy [4200], onnx [4200];
    snprintf (input, sizeof input, "%s/input.json", self->model_dir);
    snprintf (copy, sizeof copy, "%s/input.json", dir);
    snprintf (onnx, sizeof onnx, "%s/model.onnx", dir);
    if (access (input, F_OK) == 0 && s_copy_atomic (input, -1, copy) && !self->input_failed++)
        za_info ("warning: %s: the best checkpoint's folder has no input.json: %s (said "
                 "once)", self->who, za_last_error ());
    if (!self->spec->export_onnx)
        return;
    za_export_config_t config;
    void *json = NULL;
    za_checkpoint_t *ckpt = NULL;
    int rc = za_export_config_load (self->model_dir, &config, &json);
    if (!rc) {
        config.input = self->input;
        ckpt = za_checkpoint_load (dst);
        rc = ckpt? za_export_onnx (za_checkpoint_meta (ckpt, "model"), ckpt, &config, onnx)
                 : -1;
    }
    if (rc && !self->onnx_failed++)
        za_info ("warning: %s: --export-onnx: %s (the checkpoint is exported all the "
                 "same; said once)", self->who, za_last_error ());
    za_checkpoint_destroy (&ckpt);
    za_export_config_free (&json);
}

//  Keeps a copy of the best checkpoint so far (by --best-metric) in the
//  evaluation's best folder (za_evaluator_best_dir), with best.json naming it.
//  held (>= 0): the checkpoint opened before it was evaluated, what is
//  copied also when retention has deleted it since.
static int
s_export_best (s_best_t *self, const char *path, int held, const za_eval_result_t *result)
{
    double value;
    if (za_eval_result_value (result, self->goal.name, &value))
        return za_error ("%s: --best-metric %s: the evaluation reports no such value "
                         "(add it to --eval-metrics)", self->who, self->goal.name);
    if (!za_metric_goal_better (&self->goal, value, self->best_value))
        return 0;
    char dir [4096], dst [4600], json [4700], previous [4600] = "";
    za_evaluator_best_dir (self->model_dir, self->spec->name, dir, sizeof dir);
    if (za_mkdirs (dir))
        return -1;
    snprintf (json, sizeof json, "%s/best.json", dir);
    FILE *f = fopen (json, "r");
    if (f) {
        json_t *old = json_loadf (f, 0, NULL);
        fclose (f);
        const char *name = json_string_value (json_object_get (old, "checkpoint"));
        if (name)
            snprintf (previous, sizeof previous, "%s/%s", dir, name);
        json_decref (old);
    }
    const char *name = strrchr (path, '/');
    name = name? name + 1: path;
    snprintf (dst, sizeof dst, "%s/%s", dir, name);
    if (held < 0 && access (path, F_OK) != 0) {
        //  Retention deleted it after we evaluated it: nothing to export.
        za_info ("%s: step %" PRId64 " is the best so far but was deleted before it "
                 "could be exported", self->who, result->global_step);
        return 0;
    }
    if (s_copy_atomic (path, held, dst)) {
        if (held < 0 && access (path, F_OK) != 0)
            return 0;       //  deleted while we copied
        return -1;
    }
    self->best_value = value;
    //  (value is finite: za_metric_goal_better; the loss may not be.)
    json_t *best = json_pack ("{s:I, s:s, s:s, s:f, s:f, s:o}", "global_step",
                              (json_int_t) result->global_step, "checkpoint", name, "metric",
                              self->goal.name, "value", value, "accuracy", result->accuracy,
                              "loss", za_json_real (result->loss));
    char tmp [4800];
    snprintf (tmp, sizeof tmp, "%s.tmp", json);
    int rc = json_dump_file (best, tmp, JSON_INDENT (2)) == 0 && rename (tmp, json) == 0? 0: -1;
    json_decref (best);
    if (rc)
        return za_error ("export: cannot write '%s'", json);
    if (*previous && strcmp (previous, dst) != 0)
        unlink (previous);
    s_export_beside (self, dir, dst);
    za_info ("%s: step %" PRId64 " is the best so far (%s %.4f): exported to %s", self->who,
             result->global_step, self->goal.name, value, dir);
    return 0;
}

//  The value of the copy kept (best.json's, where it is of this metric), or
//  NaN: what a new evaluation must beat to replace it. (An evaluation that
//  metrics.jsonl holds but that was never kept, its copy deleted first or
//  its evaluator killed before the copy, is not what must be beaten.)
static double
s_best_kept (const s_best_t *self)
{
    char dir [4096], file [4200];
    za_evaluator_best_dir (self->model_dir, self->spec->name, dir, sizeof dir);
    snprintf (file, sizeof file, "%s/best.json", dir);
    json_t *kept = json_load_file (file, 0, NULL);
    const char *metric = json_string_value (json_object_get (kept, "metric"));
    json_t *value = json_object_get (kept, "value");
    double best = metric && !strcmp (metric, self->goal.name) && json_is_number (value)
                ? json_number_value (value): NAN;
    json_decref (kept);
    return best;
}

//  A keeper for spec's best (--best-metric, accuracy by default), to beat
//  what is kept already. 0, or -1 with an error.
static int
s_best_init (s_best_t *self, const char *who, const char *model_dir,
             const za_eval_spec_t *spec, za_input_shape_t input)
{
    *self = (s_best_t) {who, model_dir, spec, input, .best_value = NAN};
    if (za_metric_goal_parse ("--best-metric", spec->best_metric? spec->best_metric: "accuracy",
                              &self->goal))
        return -1;
    self->best_value = s_best_kept (self);
    return 0;
}

int
za_evaluator_keep_best (const char *who, const char *model_dir, const za_eval_spec_t *spec,
                        za_input_shape_t input, const char *path,
                        const za_eval_result_t *result)
{
    s_best_t best;
    return s_best_init (&best, who, model_dir, spec, input)
        || s_export_best (&best, path, -1, result)? -1: 0;
}

//  An evaluation into TensorBoard's events: loss, accuracy and the metrics'
//  scalars (an undefined one, NaN, left out), and the confusion image. 0 or -1.
static int
s_summarize (za_summary_writer_t *summary, const za_eval_result_t *result)
{
    const char *tags [2 + ZA_EVAL_SCALARS_MAX] = {"loss", "accuracy"};
    double values [2 + ZA_EVAL_SCALARS_MAX] = {result->loss, result->accuracy};
    int count = 2;
    for (int i = 0; i < result->scalar_count; i++)
        if (!isnan (result->scalars [i].value)) {
            tags [count] = result->scalars [i].name;
            values [count++] = result->scalars [i].value;
        }
    return za_summary_scalars (summary, result->global_step, tags, values, count)
        || (result->confusion_png
            && za_summary_image (summary, "confusion_matrix", result->global_step,
                                 result->confusion_png, result->confusion_png_size,
                                 result->confusion_width, result->confusion_height, 3))? -1: 0;
}

int
za_evaluator_summarize (const char *model_dir, const char *eval_name,
                        const za_eval_result_t *result)
{
    char subdir [ZA_EVAL_SUBDIR_MAX], dir [4096];
    za_eval_subdir (eval_name, subdir, sizeof subdir);
    snprintf (dir, sizeof dir, "%s/%s", model_dir, subdir);
    za_summary_writer_t *summary = za_summary_writer_new (dir);
    int rc = !summary || s_summarize (summary, result)? -1: 0;
    za_summary_writer_destroy (&summary);
    return rc;
}

//  Evaluates the checkpoint of `step`. Returns 0 when evaluated, 1 when it
//  was skipped (deleted before it was opened, corrupt), -1 on an error that
//  should end the evaluator (another model, bad data, results that cannot
//  be written).
static int
s_evaluate (s_eval_t *self, int64_t step, za_eval_result_t *result)
{
    char *path = za_checkpoint_path (self->config->model_dir, step);
    if (!path)
        return -1;
    //  Held open while it is evaluated: retention may delete it meanwhile
    //  (keep_checkpoint_max), and the best is exported all the same.
    int held = self->config->export_best? open (path, O_RDONLY | O_CLOEXEC): -1;
    double start = za_clock_mono ();
    int rc = za_estimator_evaluate_checkpoint (self->est, path, s_input_fn,
                                               (void *) self->config, self->config->spec.steps,
                                               self->subdir, result);
    za_trace_event (ZA_TRACE_EVALUATION, "evaluation", start, za_clock_mono (), step);
    if (rc == 0) {
        za_info ("evaluator: step %" PRId64 ": accuracy %.4f, loss %.4f on %" PRId64
                 " examples (%.1f s)", result->global_step, result->accuracy, result->loss,
                 result->examples, result->seconds);
        if (!self->summary) {
            char dir [4096];
            snprintf (dir, sizeof dir, "%s/%s", self->config->model_dir, self->subdir);
            self->summary = za_summary_writer_new (dir);
        }
        rc = !self->summary || s_summarize (self->summary, result)
          || (self->config->export_best && s_export_best (&self->best, path, held, result))
           ? -1: 0;
    }
    else
    if (result->input_failed) {
        //  Every checkpoint would meet the same files: the evaluator ends.
        self->bad_data = 1;
        rc = -1;
    }
    else
    if (result->model_differs)          //  and every checkpoint would be so too
        rc = za_error ("evaluator: cannot evaluate the checkpoints of '%s' with this model "
                       "(see above): give the training's model flags (--model, ...)",
                       self->config->model_dir);
    else
    if (result->unreadable) {           //  a newer one may come
        za_info ("evaluator: skipped the checkpoint of step %" PRId64 ": %s", step,
                 za_last_error ());
        rc = 1;
    }
    else                                //  its results could not be written, ...
        rc = -1;
    if (held >= 0)
        close (held);
    za_eval_result_free (result);
    free (path);
    return rc;
}

//  What watchers see (config->stats, NULL: nothing): relaxed stores.
static void
s_publish (const za_evaluator_config_t *config, za_role_state_t state)
{
    za_role_stats_publish (config->stats, state, za_clock_mono ());
}

static void
s_publish_result (const za_evaluator_config_t *config, const za_eval_result_t *result);

//  An evaluation runs without a turn of our loop for as long as it takes
//  (seconds, more on a slow or instrumented build): while it runs nobody
//  should take the quiet for a hang, so alive reads 0, "not kept".
static void
s_publish_evaluating (const za_evaluator_config_t *config)
{
    s_publish (config, ZA_ROLE_RUNNING);
    if (config->stats)
        atomic_store_explicit (&config->stats->alive, 0.0, memory_order_relaxed);
}

static void
s_publish_result (const za_evaluator_config_t *config, const za_eval_result_t *result)
{
    if (!config->stats)
        return;
    atomic_store_explicit (&config->stats->eval_step, result->global_step,
                           memory_order_relaxed);
    atomic_store_explicit (&config->stats->eval_accuracy, result->accuracy,
                           memory_order_relaxed);
    atomic_store_explicit (&config->stats->global_step, result->global_step,
                           memory_order_relaxed);
}

// ---------------------------------------------------------------------------
//  Hearing of a new checkpoint: the trigger, inotify, or a look

//  Watches model_dir for files renamed into it (every checkpoint and the
//  index arrive so) once it exists; a watch the kernel dropped (the folder
//  removed) is made again.
static void
s_watch (s_eval_t *self)
{
    if (self->inotify < 0 || self->watch >= 0)
        return;
    self->watch = inotify_add_watch (self->inotify, self->config->model_dir,
                                     IN_MOVED_TO | IN_ONLYDIR);
}

//  Reads what inotify has (the wake-up is all it brings); notes a watch the
//  kernel dropped.
static void
s_drain_inotify (s_eval_t *self)
{
    char buf [4096] __attribute__ ((aligned (__alignof__ (struct inotify_event))));
    ssize_t n;
    while ((n = read (self->inotify, buf, sizeof buf)) > 0)
        for (char *at = buf; at < buf + n; ) {
            const struct inotify_event *event = (const struct inotify_event *) at;
            if (event->mask & IN_IGNORED)
                self->watch = -1;
            at += sizeof *event + event->len;
        }
}

//  Reads every message the trigger has (the wake-up is all they bring; what
//  to evaluate is decided from the files).
static void
s_drain_trigger (s_eval_t *self, zsock_t *trigger)
{
    while (zsock_events (trigger) & ZMQ_POLLIN) {
        char *command = NULL, *step = NULL;
        if (zstr_recvx (trigger, &command, &step, NULL) < 1)
            break;
        if (streq (command, "CHECKPOINT") && step && !self->told) {
            za_info ("evaluator: the chief tells of its checkpoints (step %s): evaluations "
                     "start as they are written", step);
            self->told = 1;
        }
        zstr_free (&command);
        zstr_free (&step);
    }
}

//  Sleeps up to secs, or until a trigger or inotify says a checkpoint came;
//  returns 1 on $TERM on the pipe (or an interrupt).
static int
s_sleep (s_eval_t *self, zsock_t *pipe, double secs)
{
    void *trigger_any = self->config->trigger;
    zsock_t *trigger = !trigger_any? NULL
                     : zactor_is (trigger_any)? zactor_sock ((zactor_t *) trigger_any)
                     : (zsock_t *) trigger_any;
    zmq_pollitem_t items [3];
    int count = 0, pipe_at = -1, trigger_at = -1, inotify_at = -1;
    if (pipe)
        items [pipe_at = count++] = (zmq_pollitem_t) {zsock_resolve (pipe), 0, ZMQ_POLLIN, 0};
    if (trigger)
        items [trigger_at = count++] = (zmq_pollitem_t) {zsock_resolve (trigger), 0,
                                                         ZMQ_POLLIN, 0};
    if (self->inotify >= 0 && self->watch >= 0)
        items [inotify_at = count++] = (zmq_pollitem_t) {NULL, self->inotify, ZMQ_POLLIN, 0};
    int term = 0;
    if (count == 0)
        zclock_sleep ((int) (secs * 1000));
    else
    if (zmq_poll (items, count, (long) (secs * 1000)) > 0) {
        if (pipe_at >= 0 && (items [pipe_at].revents & ZMQ_POLLIN)) {
            char *command = zstr_recv (pipe);
            term = !command || streq (command, "$TERM");
            zstr_free (&command);
        }
        if (trigger_at >= 0 && (items [trigger_at].revents & ZMQ_POLLIN))
            s_drain_trigger (self, trigger);
        if (inotify_at >= 0 && (items [inotify_at].revents & ZMQ_POLLIN))
            s_drain_inotify (self);
    }
    return term || zsys_interrupted || za_preempt_requested ();
}

//  How long to sleep when nothing is due: the fallback look at model_dir.
static double
s_poll_secs (const s_eval_t *self)
{
    const za_evaluator_config_t *config = self->config;
    int told = config->trigger || self->watch >= 0;
    return told && config->poll_secs < FALLBACK_POLL_SECS? FALLBACK_POLL_SECS
                                                          : config->poll_secs;
}

//  The lock file's "pid PID on HOST" into who (size > 0 bytes).
static void
s_read_who (int fd, char *who, size_t size)
{
    ssize_t n = pread (fd, who, size - 1, 0);
    who [n > 0? n: 0] = 0;
    who [strcspn (who, "\n")] = 0;
}

//  Says "an evaluator follows model_dir" to a chief (za_evaluator_following)
//  by holding a lock on MODEL_DIR/<subdir>/.evaluator, once model_dir exists.
static void
s_lock (s_eval_t *self)
{
    struct stat st;
    if (self->lock != -1 || stat (self->config->model_dir, &st) != 0 || !S_ISDIR (st.st_mode))
        return;
    char dir [4096], path [4200];
    snprintf (dir, sizeof dir, "%s/%s", self->config->model_dir, self->subdir);
    snprintf (path, sizeof path, "%s/" LOCK_NAME, dir);
    if (za_mkdirs (dir))
        return;
    int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (flock (fd, LOCK_EX | LOCK_NB) != 0) {
        char who [256];
        s_read_who (fd, who, sizeof who);
        za_info ("evaluator: another evaluator (%s) follows '%s' into %s too: each "
                 "evaluation will be there twice", *who? who: "?", self->config->model_dir,
                 self->subdir);
        close (fd);
        self->lock = -2;            //  not ours, and not asked again
        return;
    }
    char host [256] = "localhost", text [320];
    gethostname (host, sizeof host - 1);
    int n = snprintf (text, sizeof text, "pid %d on %s\n", (int) getpid (), host);
    if (ftruncate (fd, 0) != 0 || pwrite (fd, text, (size_t) n, 0) != n)
        za_info ("evaluator: cannot write '%s' (%s); a chief may evaluate too", path,
                 strerror (errno));
    self->lock = fd;
}

int
za_evaluator_following (const char *model_dir, const char *eval_name, char *who, size_t size)
{
    char path [4400], subdir [ZA_EVAL_SUBDIR_MAX];
    za_eval_subdir (eval_name, subdir, sizeof subdir);
    snprintf (path, sizeof path, "%s/%s/" LOCK_NAME, model_dir, subdir);
    if (size)
        *who = 0;
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int following = flock (fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (following && size)
        s_read_who (fd, who, size);
    close (fd);                     //  and with it our shared lock, if we took one
    return following;
}

//  --replay: every checkpoint in step order. Returns 0 or -1; *done counts.
static int
s_replay (s_eval_t *self, int *done)
{
    const za_evaluator_config_t *config = self->config;
    int64_t *steps = NULL;
    int count = za_checkpoint_list (config->model_dir, &steps);
    int rc = count < 0? -1: 0;
    if (count == 0)
        rc = za_error ("evaluator: no checkpoint in '%s' to replay", config->model_dir);
    for (int i = 0; i < count && rc == 0; i++) {
        za_eval_result_t result;
        s_publish_evaluating (config);
        int one = s_evaluate (self, steps [i], &result);
        if (one < 0)
            rc = -1;
        if (one == 0)
            s_publish_result (config, &result);
        *done += one == 0;
    }
    free (steps);
    za_info ("evaluator: replayed %d of the checkpoints in '%s' into %s/%s", *done,
             config->model_dir, config->model_dir, self->subdir);
    return rc;
}

//  Early stopping: after an evaluation, whether the metric improved within
//  the rule's steps; if not, the request for the chief (once). 0 or -1.
static int
s_early_stop (s_eval_t *self, const za_eval_result_t *result)
{
    double value;
    if (za_eval_result_value (result, self->stop.goal.name, &value))
        return za_error ("evaluator: --stop-if-no-improvement %s: the evaluation reports no "
                         "such value (add it to --eval-metrics)", self->stop.goal.name);
    if (!za_early_stop_add (&self->stop, result->global_step, value) || self->asked)
        return 0;
    //  Another evaluator's request, or one answered: nothing to add.
    if (za_early_stop_requested (self->config->model_dir)) {
        self->asked = 1;
        return 0;
    }
    if (za_early_stop_request (self->config->model_dir, &self->stop, result->global_step))
        return -1;
    self->asked = 1;
    za_info ("evaluator: %s has not improved for %" PRId64 " steps (best %.4f at step %" PRId64
             "): asking the chief to stop (%s/%s)", self->stop.goal.name,
             result->global_step - self->stop.best_step, self->stop.best,
             self->stop.best_step, self->config->model_dir, ZA_EARLY_STOP_FILE);
    return 0;
}

//  EvalSpec's schedule: after the start delay, the newest checkpoint not
//  evaluated yet, at most once per throttle_secs, until one at or past
//  max_steps (or, stopped early, the step the chief ended at, evaluated at
//  once). Returns 0, ZA_EVALUATOR_STOPPED, ZA_EVALUATOR_IDLE or -1; *done
//  counts.
static int
s_follow (s_eval_t *self, zsock_t *pipe, int *done)
{
    const za_evaluator_config_t *config = self->config;
    int64_t last = s_already_evaluated (self);
    if (last >= 0)
        za_info ("evaluator: %s/metrics.jsonl says step %" PRId64 " was evaluated: going on "
                 "after it", self->subdir, last);
    double now = za_clock_mono (), started = now, last_new = now;
    double next_allowed = now + config->spec.start_delay_secs;
    int64_t end_step = config->max_steps;
    int finished = end_step > 0 && last >= end_step, stopped_early = 0;
    int rc = 0;
    while (!finished && rc == 0) {
        s_lock (self);
        s_watch (self);
        now = za_clock_mono ();
        //  Stopped early: the chief's final checkpoint is evaluated at once.
        if (self->stopping && !stopped_early
            && za_early_stop_final_step (config->model_dir, &end_step) == 0) {
            stopped_early = 1;
            za_info ("evaluator: the chief stopped training early at step %" PRId64, end_step);
        }
        if (stopped_early) {
            if (last >= end_step) {
                finished = 1;
                break;
            }
            next_allowed = now;
        }
        s_publish (config, *done? ZA_ROLE_RUNNING: ZA_ROLE_WAITING);
        //  The final checkpoint is evaluated at once, delay and throttle or
        //  not (TensorFlow's local train_and_evaluate evaluates it as
        //  training ends).
        int64_t newest = za_checkpoint_newest_step (config->model_dir);
        if (now < next_allowed && !(end_step > 0 && newest >= end_step))
            newest = -1;
        if (newest > last) {
            za_eval_result_t result;
            double eval_start = za_clock_mono ();
            s_publish_evaluating (config);
            int one = s_evaluate (self, newest, &result);
            last = newest;
            last_new = za_clock_mono ();
            if (one == 0) {
                s_publish_result (config, &result);
                (*done)++;
                next_allowed = eval_start + config->spec.throttle_secs;
                finished = end_step > 0 && result.global_step >= end_step;
                if (self->stopping && !finished && s_early_stop (self, &result))
                    one = -1;
            }
            //  Nothing comes after the final checkpoint: one that cannot be
            //  read ends the evaluation (the data is at fault: not restarted).
            if (one == 1 && end_step > 0 && newest >= end_step) {
                za_error ("evaluator: the final checkpoint (step %" PRId64 ") cannot be "
                          "evaluated (above); the newest evaluated is in %s/metrics.jsonl",
                          newest, self->subdir);
                self->bad_data = 1;
                one = -1;
            }
            rc = one < 0? -1: 0;
            continue;
        }
        if (now >= next_allowed && config->idle_timeout_secs > 0
            && now - last_new > config->idle_timeout_secs) {
            za_error ("evaluator: no new checkpoint in '%s' for %.0f s; giving up",
                      config->model_dir, config->idle_timeout_secs);
            rc = ZA_EVALUATOR_IDLE;
            break;
        }
        double poll = s_poll_secs (self);
        double nap = now < next_allowed && next_allowed - now < poll? next_allowed - now: poll;
        if (s_sleep (self, pipe, nap))
            rc = ZA_EVALUATOR_STOPPED;
    }
    if (finished && *done == 0)
        za_info ("evaluator: the final checkpoint (step >= %" PRId64 ") was evaluated before: "
                 "nothing left to do", end_step);
    else
    if (finished)
        za_info ("evaluator: evaluated the final checkpoint (step >= %" PRId64 ") after %.1f s;"
                 " done", end_step, za_clock_mono () - started);
    return rc;
}

int
za_evaluator_run (const za_evaluator_config_t *config, zsock_t *pipe, int *evaluations)
{
    int done = 0;
    if (evaluations)
        *evaluations = 0;
    if (!config->model_dir || (!config->data && !config->input_fn)) {
        s_publish (config, ZA_ROLE_FAILED);
        return za_error ("evaluator: needs a model_dir and evaluation data");
    }
    s_eval_t self = {.config = config, .inotify = -1, .watch = -1, .lock = -1};
    if (s_best_init (&self.best, "evaluator", config->model_dir, &config->spec, config->input)
        || (config->spec.stop_if_no_improvement
            && za_early_stop_parse (config->spec.stop_if_no_improvement, &self.stop))) {
        s_publish (config, ZA_ROLE_FAILED);
        return -1;
    }
    self.stopping = config->spec.stop_if_no_improvement && !config->spec.replay;
    za_eval_subdir (config->spec.name, self.subdir, sizeof self.subdir);
    za_run_config_t run = za_run_config_default ();
    run.model_dir = config->model_dir;
    run.threads = config->threads;
    run.device = config->device;
    run.precision = config->precision;
    run.eval_metrics = config->spec.eval_metrics;
    run.progress = 0;
    //  An evaluator runs no optimizer: no gradient, no slot is allocated.
    self.est = za_estimator_new (config->model_fn, config->params, config->input, NULL, &run);
    if (!self.est) {
        s_publish (config, ZA_ROLE_FAILED);
        return -1;
    }
    if (config->watch_dir && !config->spec.replay)
        self.inotify = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
    s_publish (config, config->spec.replay? ZA_ROLE_RUNNING: ZA_ROLE_WAITING);
    int rc = config->spec.replay? s_replay (&self, &done): s_follow (&self, pipe, &done);
    za_estimator_destroy (&self.est);
    za_summary_writer_destroy (&self.summary);
    if (self.inotify >= 0)
        close (self.inotify);
    if (self.lock >= 0)
        close (self.lock);          //  and the lock with it
    if (evaluations)
        *evaluations = done;
    if (self.bad_data)
        rc = ZA_EVALUATOR_BAD_DATA;
    s_publish (config, rc == 0 || rc == ZA_EVALUATOR_STOPPED? ZA_ROLE_DONE: ZA_ROLE_FAILED);
    return rc;
}

void
za_evaluator_actor (zsock_t *pipe, void *args)
{
    const za_evaluator_config_t *config = (const za_evaluator_config_t *) args;
    zsock_signal (pipe, 0);
    int evaluations = 0;
    int rc = za_evaluator_run (config, pipe, &evaluations);
    //  Stopped by $TERM: the caller is already waiting for us to end.
    if (rc != ZA_EVALUATOR_STOPPED)
        za_role_report_done (pipe, rc == 0? 0: rc == ZA_EVALUATOR_BAD_DATA? ZA_EXIT_DATA: 1,
                             0, 0, evaluations);
}

#define WATCH_EVALUATOR_SECS 0.2

//  Training's watch on its evaluator, looked at every 0.2 s of steps: an
//  evaluator that ends before training does has failed (its evaluation
//  cannot go on), and training stops after the step, which is saved, as
//  TensorFlow's local train_and_evaluate fails with its evaluation.
typedef struct {
    zactor_t *evaluator;
    double next_look;                   //  elapsed_secs of the next look
    int ended;                          //  it said its end: rc, evaluations
    int rc;
    int64_t evaluations;
} s_watch_evaluator_t;

static int
s_watch_evaluator (void *arg, const za_run_context_t *context)
{
    s_watch_evaluator_t *self = (s_watch_evaluator_t *) arg;
    if (self->ended || context->elapsed_secs < self->next_look)
        return 0;
    self->next_look = context->elapsed_secs + WATCH_EVALUATOR_SECS;
    if (!(zsock_events (zactor_sock (self->evaluator)) & ZMQ_POLLIN))
        return 0;
    self->ended = 1;
    self->rc = za_role_wait (self->evaluator, 0, NULL, NULL, &self->evaluations);
    return self->rc != 0;
}

int
za_train_and_evaluate (za_estimator_t *estimator, za_input_fn_t input_fn, void *arg,
                       int64_t max_steps, za_evaluator_config_t *eval, int *evaluations)
{
    if (evaluations)
        *evaluations = 0;
    eval->max_steps = max_steps;
    s_watch_evaluator_t watch = {.evaluator = zactor_new (za_evaluator_actor, eval)};
    if (!watch.evaluator)
        return za_error ("train_and_evaluate: cannot start the evaluator");
    za_hook_t hook = {.arg = &watch, .after_run = s_watch_evaluator};
    int rc = za_estimator_add_hook (estimator, &hook);
    if (rc == 0) {
        rc = za_estimator_train (estimator, input_fn, arg, max_steps);
        za_estimator_pop_hook (estimator);
    }
    //  After a training error, a preemption or Ctrl-C the evaluator is
    //  stopped ($TERM), not awaited.
    if (!watch.ended && !rc && !za_preempt_requested () && !zsys_interrupted) {
        watch.rc = za_role_wait (watch.evaluator, 0, NULL, NULL, &watch.evaluations);
        if (za_preempt_requested () || zsys_interrupted)
            watch.rc = 0;               //  stopped while it evaluated the last
    }
    zactor_destroy (&watch.evaluator);
    if (evaluations)
        *evaluations = (int) watch.evaluations;
    if (rc)
        return -1;
    if (watch.rc && watch.ended)
        return za_error ("train_and_evaluate: the evaluator failed (see above): training "
                         "stopped at step %" PRId64 ", saved in '%s'",
                         za_estimator_global_step (estimator), eval->model_dir);
    return watch.rc? za_error ("train_and_evaluate: the evaluator failed (see above)"): 0;
}
