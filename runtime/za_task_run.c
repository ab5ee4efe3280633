/*  za_task_run.c: the runs of a prepared task (za_task.c): training in one
    process (and train_and_evaluate), a training role of a cluster, the
    evaluator, and what they print at the end.                              */
#include "za_task.h"
#include "za_trace_merge.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_preempt.h"
#include "za/za_trace.h"

#include <czmq.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Received frames of a few hundred KB are freed every step: a role keeps
//  that memory in the heap instead of mapping and faulting it in each time.
#define MALLOC_KEEP_BYTES (256 * 1024 * 1024)

static const char *
s_model_text (const za_task_t *task)
{
    const char *text = task->model_fn->describe? task->model_fn->describe (task->params): NULL;
    return text? text: task->model_fn->name;
}

//  --eval-metrics' values of an evaluation's line, on a line of their own
//  under the accuracy ("  precision 0.8566  recall 0.8508 ..."); nothing
//  when there are none. Undefined ones (null) print as "-".
static void
s_print_metrics (json_t *line)
{
    static const char *base [] = {"global_step", "checkpoint", "loss", "accuracy", "examples",
                                  "seconds", "wall_time", "checkpoint_age_secs", "images",
                                  "skipped_images"};
    const char *key;
    json_t *value;
    int printed = 0;
    json_object_foreach (line, key, value) {
        int skip = !(json_is_number (value) || json_is_null (value));
        for (size_t b = 0; b < sizeof base / sizeof base [0] && !skip; b++)
            skip = !strcmp (key, base [b]);
        if (skip)
            continue;
        if (json_is_null (value))
            printf ("  %s -", key);
        else
            printf ("  %s %.4f", key, json_number_value (value));
        printed++;
    }
    if (printed)
        printf ("\n");
}

//  The newest evaluation: the last line of MODEL_DIR/eval[_NAME]/metrics.jsonl
//  (whose path goes into path [4400]), or NULL.
static json_t *
s_last_eval (const za_settings_t *s, char *path)
{
    char subdir [ZA_EVAL_SUBDIR_MAX];
    za_eval_subdir (s->eval.name, subdir, sizeof subdir);
    snprintf (path, 4400, "%s/%s/metrics.jsonl", s->run.model_dir, subdir);
    //  The last line (with --eval-metrics a long one).
    FILE *f = fopen (path, "r");
    char *line = NULL, *last = NULL;
    size_t size = 0;
    while (f && getline (&line, &size, f) > 0) {
        free (last);
        last = strdup (line);
    }
    if (f)
        fclose (f);
    free (line);
    json_t *json = last? json_loads (last, JSON_DISABLE_EOF_CHECK, NULL): NULL;
    free (last);
    return json;
}

int
za_task_print_last_eval (const za_settings_t *s, int64_t evaluations)
{
    char path [4400];
    json_t *json = s_last_eval (s, path);
    if (!json) {
        za_error ("no evaluation in %s", path);
        return 1;
    }
    char count [48] = "";
    if (evaluations >= 0)
        snprintf (count, sizeof count, "; %" PRId64 " evaluations", evaluations);
    json_t *loss = json_object_get (json, "loss");     //  null: not finite
    printf ("test accuracy %.4f  loss %.4f  on %" PRId64 " examples at step %" PRId64
            " (%s%s)\n",
            json_number_value (json_object_get (json, "accuracy")),
            json_is_number (loss)? json_number_value (loss): NAN,
            (int64_t) json_integer_value (json_object_get (json, "examples")),
            (int64_t) json_integer_value (json_object_get (json, "global_step")), path, count);
    s_print_metrics (json);
    json_decref (json);
    return 0;
}

int
za_task_preempted (const za_settings_t *s, int64_t reached)
{
    if (reached >= 0)
        za_info ("preempted at step %" PRId64 " of %" PRId64 ": the checkpoint of that step is"
                 " in '%s'; run the same command again to resume from it (exit %d)", reached,
                 s->max_steps, s->run.model_dir, (int) s->requeue_exit_code);
    else
        za_info ("preempted: the job's checkpoint is in '%s'; run the same command again to "
                 "resume from it (exit %d)", s->run.model_dir, (int) s->requeue_exit_code);
    fflush (stdout);
    return (int) s->requeue_exit_code;
}

void
za_task_print_skipped (const za_settings_t *s, int64_t bad, int64_t images, int evaluated,
                       const char *named_in)
{
    char path [4400], text [4][ZA_COUNT_TEXT_MAX];
    json_t *eval = evaluated? s_last_eval (s, path): NULL;
    int64_t eval_images = json_integer_value (json_object_get (eval, "images"));
    int64_t eval_bad = json_integer_value (json_object_get (eval, "skipped_images"));
    json_decref (eval);
    if (images <= 0 && eval_images <= 0)
        return;                         //  data in memory (IDX): nothing to decode
    char training [96] = "", evaluation [96] = "";
    if (images > 0)
        snprintf (training, sizeof training, "%s of %s images skipped in training",
                  za_count_text (bad, text [0], sizeof text [0]),
                  za_count_text (images, text [1], sizeof text [1]));
    if (eval_images > 0)
        snprintf (evaluation, sizeof evaluation, "%s of %s%s in evaluation",
                  za_count_text (eval_bad, text [2], sizeof text [2]),
                  za_count_text (eval_images, text [3], sizeof text [3]),
                  images > 0? "": " images skipped");
    printf ("%s%s%s%s%s\n", training, images > 0 && eval_images > 0? ", ": "", evaluation,
            bad + eval_bad > 0? ": they could not be decoded, each is named in ": "",
            bad + eval_bad > 0? named_in: "");
}

static void
s_evaluator_config (za_task_t *task, za_evaluator_config_t *config)
{
    const za_settings_t *s = task->settings;
    za_evaluator_config_init (config);
    config->model_fn = task->model_fn;
    config->params = task->params;
    config->input = task->input;
    config->model_dir = s->run.model_dir;
    config->spec = s->eval;
    config->input_fn = za_task_input;
    config->input_arg = task;
    config->max_steps = s->max_steps;
    config->threads = (int) s->run.threads;
    za_device_parse (s->device, &config->device);
    config->precision = s->run.precision;
    config->stats = task->stats;
}

//  Evaluates the newest checkpoint on the evaluation set and prints it.
static int
s_evaluate_final (za_task_t *task)
{
    za_run_config_t run = za_settings_run_config (task->settings);
    run.progress = 0;
    za_estimator_t *estimator = za_estimator_new (task->model_fn, task->params, task->input,
                                                  NULL, &run);
    za_eval_result_t result = {0};
    const za_settings_t *s = task->settings;
    int rc = !estimator || za_estimator_evaluate_named (estimator, za_task_input, task,
                                                        s->eval.steps, s->eval.name, &result);
    if (!rc) {
        char subdir [ZA_EVAL_SUBDIR_MAX];
        za_eval_subdir (s->eval.name, subdir, sizeof subdir);
        printf ("test accuracy %.4f  loss %.4f  on %" PRId64 " examples at step %" PRId64
                " (%s/%s/metrics.jsonl)\n", result.accuracy, result.loss, result.examples,
                result.global_step, s->run.model_dir, subdir);
        json_t *metrics = json_object ();
        for (int i = 0; metrics && i < result.scalar_count; i++)
            json_object_set_new (metrics, result.scalars [i].name,
                                 isfinite (result.scalars [i].value)
                                 ? json_real (result.scalars [i].value): json_null ());
        s_print_metrics (metrics);
        json_decref (metrics);
        //  With no evaluator, the end is the job's one evaluation, and so
        //  its best so far: kept as the evaluator keeps its own (a copy that
        //  fails is a warning: training and its evaluation are done).
        char *path = za_checkpoint_path (s->run.model_dir, result.global_step);
        if (!path || za_evaluator_keep_best ("final evaluation", s->run.model_dir, &s->eval,
                                             task->input, path, &result))
            za_info ("warning: the final evaluation is not kept in export/: %s",
                     za_last_error ());
        free (path);
        //  And in TensorBoard, as an evaluator's are.
        if (za_evaluator_summarize (s->run.model_dir, s->eval.name, &result))
            za_info ("warning: the final evaluation's TensorBoard events are not written: %s",
                     za_last_error ());
    }
    za_eval_result_free (&result);
    fflush (stdout);
    za_estimator_destroy (&estimator);
    return rc? 1: 0;
}

int
za_task_run_single (za_task_t *task)
{
    const za_settings_t *s = task->settings;
    za_run_config_t run = za_settings_run_config (s);
    za_estimator_t *estimator = za_estimator_new (task->model_fn, task->params, task->input,
                                                  &s->optim, &run);
    if (!estimator)
        return 1;
    za_info ("model %s", s_model_text (task));
    za_info ("%s lr %g, batch %" PRId64 ", %" PRId64 " steps (%.2f epochs of %" PRId64
             " examples), %d threads, model_dir %s", za_optim_name (s->optim.kind),
             (double) s->optim.learning_rate, s->batch_size, s->max_steps,
             task->epoch_examples > 0? (double) s->max_steps * s->batch_size
                                       / (double) task->epoch_examples: 0,
             task->epoch_examples,
             run.threads > 0? (int) run.threads: (int) sysconf (_SC_NPROCESSORS_ONLN),
             s->run.model_dir);
    if (s->eval.stop_if_no_improvement && !s->train_and_evaluate) {
        za_estimator_destroy (&estimator);
        za_error ("--stop-if-no-improvement needs an evaluator to watch the metric: add "
                  "--train-and-evaluate");
        return ZA_EXIT_USAGE;
    }
    double start = za_clock_mono ();
    int rc;
    //  --trace: this process is the job: its trace alone, merged at the end.
    if (s->trace) {
        za_trace_clear (s);
        if (za_trace_task_start (s, "trainer", 0)) {
            za_estimator_destroy (&estimator);
            return 1;
        }
    }
    //  SIGTERM: the steps stop, the step reached is saved (za_preempt.h).
    za_preempt_set_handled (1);
    if (s->train_and_evaluate) {
        za_evaluator_config_t eval;
        s_evaluator_config (task, &eval);
        int evaluations = 0;
        rc = za_train_and_evaluate (estimator, za_task_input, task, s->max_steps, &eval,
                                    &evaluations)? 1: 0;
        if (!rc && !za_preempt_requested () && !zsys_interrupted)
            rc = za_task_print_last_eval (s, evaluations);
    }
    else
        rc = za_estimator_train (estimator, za_task_input, task, s->max_steps)? 1: 0;
    if (rc && za_estimator_diverged (estimator))
        rc = ZA_EXIT_DATA;
    int64_t reached = za_estimator_global_step (estimator);
    za_estimator_destroy (&estimator);
    za_trace_close ();
    if (s->trace && za_trace_merge (s) && !rc)
        rc = 1;
    if (!rc && za_preempt_requested () && reached < s->max_steps)
        return za_task_preempted (s, reached);
    //  Ctrl-C: the step reached is saved too, and nothing more is done (an
    //  evaluation of --train-and-evaluate under way is cut short).
    if (!rc && zsys_interrupted && (reached < s->max_steps || s->train_and_evaluate)) {
        za_info ("interrupted at step %" PRId64 " of %" PRId64 "%s%s%s", reached, s->max_steps,
                 s->run.model_dir? ": its checkpoint is in '": "",
                 s->run.model_dir? s->run.model_dir: "", s->run.model_dir? "'": "");
        return ZA_EXIT_INTERRUPTED;
    }
    if (!rc)
        za_info ("trained to step %" PRId64 " in %.1f s", reached, za_clock_mono () - start);
    if (!rc && !s->no_eval && !s->train_and_evaluate)
        rc = s_evaluate_final (task);
    if (!rc)
        za_task_print_skipped (s, za_dataset_bad (task->train), za_dataset_listed (task->train),
                               !s->no_eval || s->train_and_evaluate, "the log above");
    return rc;
}

int
za_task_run_evaluator (za_task_t *task, zactor_t *client)
{
    const za_settings_t *s = task->settings;
    za_evaluator_config_t config;
    s_evaluator_config (task, &config);
    //  ZA_EVAL_WAKE (bench/eval_trigger.sh) picks how the evaluator hears of
    //  checkpoints: "broker", "inotify", "poll" (neither: the old way); unset,
    //  both.
    const char *wake = getenv ("ZA_EVAL_WAKE");
    int both = !wake || !*wake;
    config.trigger = both || streq (wake, "broker")? client: NULL;
    config.watch_dir = both || streq (wake, "inotify");
    za_info ("evaluator: %s '%s' (start delay %g s, throttle %g s, until step %" PRId64
             "), model %s", config.spec.replay? "replaying": "following", s->run.model_dir,
             config.spec.start_delay_secs, config.spec.throttle_secs, s->max_steps,
             s_model_text (task));
    int evaluations = 0;
    if (za_trace_task_start (s, "evaluator", s->index > 0? (int) s->index: 0))
        return 1;
    //  It keeps nothing a checkpoint does not: SIGTERM ends it at once (after
    //  an evaluation under way), as preempted.
    za_preempt_set_handled (1);
    int rc = za_evaluator_run (&config, NULL, &evaluations);
    za_trace_close ();
    if (rc == ZA_EVALUATOR_STOPPED && za_preempt_requested ()) {
        char subdir [ZA_EVAL_SUBDIR_MAX];
        za_eval_subdir (s->eval.name, subdir, sizeof subdir);
        za_info ("preempted: the evaluator stops after %d evaluations; run the same command "
                 "again to go on after what %s/%s/metrics.jsonl holds (exit %d)",
                 evaluations, s->run.model_dir, subdir, (int) s->requeue_exit_code);
        return (int) s->requeue_exit_code;
    }
    return rc == 0? 0: rc == ZA_EVALUATOR_BAD_DATA? ZA_EXIT_DATA: 1;
}

//  The role's config: the job's settings, and this task's place.
static void
s_role_config (za_task_t *task, const za_place_t *place, za_role_config_t *role)
{
    const za_settings_t *s = task->settings;
    za_role_config_init (role);
    role->model_fn = task->model_fn;
    role->params = task->params;
    role->input = task->input;
    role->strategy = s->strategy;
    role->replicas_to_aggregate = (int) s->replicas_to_aggregate;
    role->bucket_floats = (size_t) s->bucket_kib * (1024 / sizeof (float));
    role->partition_floats = (size_t) s->partition_kib * (1024 / sizeof (float));
    role->wire_dtype = s->wire_dtype && streq (s->wire_dtype, "bf16")? ZA_DTYPE_BF16
                                                                     : ZA_DTYPE_F32;
    //  The chief initialises the ps with the job's optimizer: the one source.
    //  All-reduce workers each apply it (the chief checks they agree).
    if (place->is_chief || role->strategy == ZA_STRATEGY_ALLREDUCE)
        role->optim = s->optim;
    //  Every worker clips its whole gradient before its pushes.
    role->optim.global_clipnorm = s->optim.global_clipnorm;
    //  A ps applies the chief's schedule; when that is the program's
    //  function, its own copy of it (the same program).
    if (s->optim.schedule.kind == ZA_SCHEDULE_FUNCTION)
        role->optim.schedule = s->optim.schedule;
    role->run = za_settings_run_config (s);
    role->max_steps = s->max_steps;
    role->batch_size = (int) s->batch_size;
    role->timeout_secs = s->timeout_secs;
    role->heartbeat = za_settings_heartbeat (s);
    role->input_fn = za_task_input;
    role->input_arg = task;
    role->stats = task->stats;
    role->ps_count = place->ps_count;
    role->num_workers = place->num_workers;
    role->membership = place->membership;
    role->min_trainers = (int) (1 + s->workers.min);
    role->elastic_batch = (za_elastic_batch_t) s->elastic_batch;
    for (int p = 0; p < place->ps_count && p < ZA_ROLE_MAX_PS; p++)
        role->ps_endpoints [p] = place->ps_endpoints [p];
    role->is_chief = place->is_chief;
    //  A broker restarts a task with ZA_RESTARTS set.
    const char *restarts = getenv ("ZA_RESTARTS");
    role->rejoin = restarts && atoi (restarts) > 0;
    snprintf (role->who, sizeof role->who, "%s %d", za_task_type_name (place->type),
              place->index);
    role->worker_index = place->worker_index;
    role->ps_index = place->type == ZA_TASK_PS? place->index: -1;
    role->bind_endpoint = *place->listen? place->listen: place->bind;
    role->ring_right = place->right;
}

int
za_task_run_role (za_task_t *task, const za_place_t *place, zactor_t *client)
{
    mallopt (M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES);
    mallopt (M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES);
    za_role_config_t role;
    s_role_config (task, place, &role);
    //  Only the chief evaluates at the end, and only when no evaluator does:
    //  until then the broker must not see it done.
    int evaluates = place->is_chief && !task->settings->no_eval && place->evaluators == 0;
    role.evaluates_after = evaluates;
    role.announce_checkpoints = place->is_chief && client != NULL;
    za_info ("%s %d of the cluster (%d workers, %d ps), model %s, %d threads",
             za_task_type_name (place->type), place->index, place->num_workers,
             place->ps_count, s_model_text (task), (int) role.run.threads);
    zactor_fn *run = place->type == ZA_TASK_PS? za_ps_actor
                   : role.strategy == ZA_STRATEGY_ALLREDUCE? za_mirrored_actor
                   : za_worker_actor;
    if (za_trace_task_start (task->settings, za_task_type_name (place->type), place->index))
        return 1;
    zactor_t *actor = zactor_new (run, &role);
    if (actor && client && place->type == ZA_TASK_PS)
        zstr_sendx (client, "ENDPOINT", place->bind, NULL);
    //  Every training role takes SIGTERM as preemption, and its actor says
    //  ZA_EXIT_REQUEUE when it stopped so: all-reduce ranks agree on the step
    //  to stop after and the chief saves it; under the ps strategies the
    //  chief stops, its final checkpoint stops the ps, and the workers hear
    //  `done` (the others go on until then).
    za_preempt_set_handled (1);
    //  An elastic job's worker leaves on SIGTERM (the broker says whether
    //  it may, or stops the job).
    za_preempt_set_leaves (role.membership && place->type == ZA_TASK_WORKER && !place->is_chief);
    int rc = actor? za_role_wait_relay (actor, client): -1;
    zactor_destroy (&actor);
    za_trace_close ();
    if (rc == ZA_EXIT_REQUEUE)
        return za_task_preempted (task->settings, -1);
    if (rc)
        return rc == ZA_EXIT_DATA? ZA_EXIT_DATA: 1;
    //  A cluster spec seldom names its evaluator (TF_CONFIG does not): one
    //  started apart says it follows model_dir, and evaluates the end itself.
    char who [256];
    if (evaluates && za_evaluator_following (task->settings->run.model_dir,
                                                task->settings->eval.name, who, sizeof who)) {
        za_info ("chief: an evaluator (%s) follows '%s': it evaluates the final checkpoint, "
                 "not the chief", who, task->settings->run.model_dir);
        evaluates = 0;
        za_role_stats_publish (task->stats, ZA_ROLE_DONE, za_clock_mono ());
    }
    if (!evaluates)
        return 0;
    //  The evaluation has no loop that says it is alive (0: not kept): the
    //  broker client reports on, and the broker does not take a long one
    //  for a hang.
    if (task->stats)
        atomic_store_explicit (&task->stats->alive, 0.0, memory_order_relaxed);
    rc = s_evaluate_final (task);
    za_role_stats_publish (task->stats, rc? ZA_ROLE_FAILED: ZA_ROLE_DONE, za_clock_mono ());
    return rc;
}
