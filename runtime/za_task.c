/*  za_task.c: the model and the data of one process, which the runs
    (za_task_run.c) use. Each role loads only what it reads: a worker its
    shard (as bytes), the evaluator the evaluation set, the ps nothing.     */
#include "za_task.h"
#include "za_input_json.h"
#include "za/za_cache.h"
#include "za/za_checkpoint.h"
#include "za/za_early_stop.h"
#include "za/za_kernels.h"
#include "za/za_warm_start.h"
#include "za/za_images.h"
#include "za/za_role.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *s_no_data =
    "cannot read the data set in '%s' (on Debian: apt-get install dataset-fashion-mnist, "
    "or give --dataset-dir)";

// ---------------------------------------------------------------------------
//  The data: the IDX files of --dataset-dir (and --eval-data), or the image
//  folders of --train-data (and --eval-data, or its --validation-split).

//  --image-size (H,W or one side), --channels, --resize and
//  --crop-to-aspect-ratio as the pixels every example becomes (za_image.h):
//  the one place they become that. 0, or -1 with an error that names them.
static int
s_image_spec (const za_settings_t *s, za_image_spec_t *spec)
{
    int64_t size [2];
    int sides = za_options_list (s->image_size, size, 2);
    if (sides < 1 || sides > 2 || (s->channels != 1 && s->channels != 3))
        return za_error ("--image-size %s --channels %d: give H,W (or one side) and 1 or 3 "
                         "channels", s->image_size, (int) s->channels);
    *spec = (za_image_spec_t) {
        .height = (int) size [0], .width = (int) size [sides == 2? 1: 0],
        .channels = (int) s->channels, .resize = (za_resize_t) za_resize_parse (s->resize),
        .crop_to_aspect_ratio = s->crop_to_aspect_ratio,
    };
    return 0;
}

//  The data the settings name for training (train 1) or evaluation, as one
//  of io's sources: the IDX files of --dataset-dir (or --eval-data), or
//  the images of --train-data (and --eval-data, or its --validation-split).
//  Returns 0, or ZA_EXIT_USAGE after one message.
static int
s_images_config (const za_settings_t *s, int train, za_images_config_t *config)
{
    memset (config, 0, sizeof *config);
    if (s_image_spec (s, &config->image))
        return ZA_EXIT_USAGE;
    config->class_names = s->class_names;
    config->image_key = s->image_key;
    config->label_key = s->label_key;
    config->label_base = (int) s->label_base;
    config->seed = (uint64_t) s->run.seed;
    config->validation_split = s->validation_split;
    if (!s->train_data) {
        config->source = train || !s->eval_data? s->dataset_dir: s->eval_data;
        config->idx_split = train? "train": "t10k";
    }
    else
    if (s->predict) {                   //  every image of --data, labels unknown
        config->source = s->data;
        config->unlabeled = 1;
        config->validation_split = 0;
    }
    else
    if (train) {
        config->source = s->train_data;
        config->subset = s->validation_split > 0? ZA_SUBSET_TRAINING: ZA_SUBSET_ALL;
    }
    else
    if (s->eval_data)
        config->source = s->eval_data;
    else
    if (s->validation_split > 0) {
        config->source = s->train_data;
        config->subset = ZA_SUBSET_VALIDATION;
    }
    else {
        za_error ("--train-data %s: say what to evaluate on: --eval-data DIR (class "
                  "folders), --validation-split F, or --no-eval", s->train_data);
        return ZA_EXIT_USAGE;
    }
    return 0;
}

//  What the training (train 1) or evaluation data holds. 0, or an exit
//  status after one message.
static int
s_data_info (const za_settings_t *s, int train, za_dataset_info_t *info)
{
    za_images_config_t config;
    if (s_images_config (s, train, &config))
        return ZA_EXIT_USAGE;
    if (za_images_info (&config, info)) {
        if (!config.idx_split)
            return ZA_EXIT_USAGE;
        if (!train && s->eval_data)     //  IDX training, evaluated on --eval-data's
            za_info ("cannot read the evaluation data in '%s' (--eval-data: a folder of "
                     "Fashion-MNIST's t10k IDX files; with --train-data, class folders)",
                     config.source);
        else
            za_info (s_no_data, config.source);
        return 1;
    }
    //  Predictions: the classes are the model's (its class names), not the
    //  data's.
    if (s->predict && s->class_names) {
        info->n_classes = 1;
        for (const char *c = s->class_names; (c = strchr (c, ',')); c++)
            info->n_classes++;
    }
    return 0;
}

//  The training data's shard (or the evaluation data's whole), or NULL.
static za_dataset_t *
s_data_load (const za_settings_t *s, int train, int shards, int shard)
{
    za_images_config_t config;
    if (s_images_config (s, train, &config))
        return NULL;
    config.num_shards = shards;
    config.shard_index = shard;
    za_dataset_t *dataset = za_images_load (&config);
    za_cache_kind_t cache = (za_cache_kind_t) za_cache_parse (s->cache);
    if (dataset && cache != ZA_CACHE_NONE) {
        char path [4096];
        snprintf (path, sizeof path, "%s/cache/%s-%016llx.zacache", s->run.model_dir,
                  train? "train": "eval", (unsigned long long) za_images_config_hash (&config));
        if (za_dataset_cache (dataset, cache, path))
            za_info ("warning: %s: reading without a cache", za_last_error ());
    }
    return dataset;
}

//  The layer stack of --model (and --hidden-units), for `classes` classes.
//  Returns 0, or an exit status after one message.
//  A --freeze or --trainable regex, checked, into the stack spec. 0 or -1.
static int
s_copy_regex (const char *flag, const char *text, char *into)
{
    if (!text)
        return 0;
    regex_t regex;
    if (strlen (text) >= ZA_REGEX_MAX || regcomp (&regex, text, REG_EXTENDED | REG_NOSUB))
        return za_error ("%s '%s' is not an extended regular expression (of at most %d "
                         "characters)", flag, text, ZA_REGEX_MAX - 1);
    regfree (&regex);
    snprintf (into, ZA_REGEX_MAX, "%s", text);
    return 0;
}

static int
s_stack_model (za_task_t *task, int classes)
{
    const za_settings_t *s = task->settings;
    const char *model = s->model;
    int units [ZA_MAX_LAYERS], unit_count = 0;
    if (za_options_given (task->options, "hidden_units", ZA_FROM_DEFAULT)
        && strcmp (model, "dnn") != 0) {
        za_error ("--hidden-units applies to --model dnn only");
        return ZA_EXIT_USAGE;
    }
    int64_t widths [ZA_MAX_LAYERS - 2];
    unit_count = za_options_list (s->hidden_units, widths, ZA_MAX_LAYERS - 2);
    if (unit_count < 0 || unit_count > ZA_MAX_LAYERS - 2) {
        za_error ("--hidden-units: at most %d layers", ZA_MAX_LAYERS - 2);
        return ZA_EXIT_USAGE;
    }
    for (int u = 0; u < unit_count; u++)
        units [u] = (int) widths [u];
    int bad;
    if (streq (model, "cnn")) {
        //  The seed CNN, its last layer one unit per class of the data (10
        //  for Fashion-MNIST, as the tutorials').
        bad = za_stack_parse (ZA_SEED_CNN, &task->spec);
        if (!bad)
            task->spec.layers [task->spec.count - 1].units = classes;
    }
    else
    if (streq (model, "vgg16")) {
        //  Keras's VGG16 base, a global average pool and one unit per class.
        char text [64];
        snprintf (text, sizeof text, "vgg16 globalavgpool dense(%d)", classes);
        bad = za_stack_parse (text, &task->spec);
    }
    else
    if (streq (model, "dnn"))
        bad = za_dnn_classifier_spec (&task->spec, units, unit_count, classes);
    else
    if (streq (model, "linear"))
        bad = za_linear_classifier_spec (&task->spec, classes);
    else
        bad = za_stack_parse (model, &task->spec);
    if (!bad && (s_copy_regex ("--freeze", s->freeze, task->spec.freeze)
                 || s_copy_regex ("--trainable", s->trainable, task->spec.trainable)))
        bad = 1;
    task->spec.cache_frozen = s->cache_frozen;
    return bad? ZA_EXIT_USAGE: 0;
}

//  --warm-start-from checked before any training: the file, the variables
//  it selects, their names and shapes. 0, or ZA_EXIT_USAGE after one message.
static int
s_check_warm_start (const za_task_t *task)
{
    const za_settings_t *s = task->settings;
    int64_t *steps = NULL;
    int checkpoints = za_checkpoint_list (s->run.model_dir, &steps);
    free (steps);
    if (checkpoints > 0) {
        za_info ("%s holds a checkpoint: training goes on from it, not from "
                 "--warm-start-from (as TensorFlow's warm start)", s->run.model_dir);
        return 0;
    }
    za_vars_t vars;
    memset (&vars, 0, sizeof vars);
    void *state = task->model_fn->create (task->params, task->input, 1, za_backend_cpu (),
                                          &vars);
    if (!state)
        return ZA_EXIT_USAGE;
    za_run_config_t run = za_settings_run_config (s);
    int loaded = za_warm_start_load (&run.warm_start, &vars, NULL);
    task->model_fn->destroy (&state);
    return loaded < 0? ZA_EXIT_USAGE: 0;
}

//  --best-metric and --stop-if-no-improvement name what the evaluations
//  report: loss, accuracy, --eval-metrics' values or the model_fn's own.
static int
s_check_goal (const za_task_t *task, const char *option, const char *name)
{
    za_eval_metrics_spec_t spec;
    if (za_eval_metrics_parse (task->settings->eval.eval_metrics, &spec))
        return -1;
    if (za_eval_metrics_reports (&spec, task->model_fn->metrics, task->model_fn->metric_count,
                                 name))
        return 0;
    return za_error ("%s: the evaluations report no '%s' (loss, accuracy, and what "
                     "--eval-metrics adds: precision, recall, f1, auc, pr_auc, top_K_accuracy)",
                     option, name);
}

//  --epochs: the global steps of `examples` at global_batch each. An
//  all-reduce resumed from a checkpoint that says where the input was
//  (written by a job of another global batch: other trainers, an elastic
//  job's members): the examples left from there.
static void
s_max_steps_of_epochs (za_settings_t *settings, int64_t examples, int64_t global_batch)
{
    settings->max_steps = (examples + global_batch - 1) / global_batch;
    //  (All-reduce alone reads its input from there; its source's count,
    //  from its own model dir, is every rank's: za_mirrored's start.)
    if (!settings->run.model_dir || settings->strategy != ZA_STRATEGY_ALLREDUCE)
        return;
    za_error_set_quiet (1);             //  a damaged checkpoint is the restore's to say
    int64_t step = -1;
    char *text = za_checkpoint_newest_meta (settings->run.model_dir, ZA_CKPT_META_EXAMPLES,
                                            &step);
    za_error_set_quiet (0);
    int64_t done = za_checkpoint_examples_text (text);
    free (text);
    if (done <= 0 || done == step * global_batch)
        return;
    int64_t left = examples > done? examples - done: 0;
    settings->max_steps = step + (left + global_batch - 1) / global_batch;
    za_info ("--epochs %" PRId64 ": the checkpoint of step %" PRId64 " read %" PRId64
             " examples (global batches other than this job's %" PRId64 "); training ends "
             "at step %" PRId64, settings->epochs, step, done, global_batch,
             settings->max_steps);
}

static int
s_check_goals (const za_task_t *task)
{
    const za_settings_t *s = task->settings;
    za_metric_goal_t goal;
    za_early_stop_t stop;
    const char *best = s->eval.best_metric;
    if (best && (za_metric_goal_parse ("--best-metric", best, &goal)
                 || s_check_goal (task, "--best-metric", goal.name)))
        return -1;
    if (s->eval.stop_if_no_improvement
        && (za_early_stop_parse (s->eval.stop_if_no_improvement, &stop)
            || s_check_goal (task, "--stop-if-no-improvement", stop.goal.name)))
        return -1;
    return 0;
}

//  The optimizer the settings name, made whole once: every role takes it
//  from here as it is (the ps through the wire, as the same struct).
static int
s_resolve_optim (const za_program_t *program, za_settings_t *settings)
{
    za_optim_config_resolve (&settings->optim);
    settings->optim.schedule.warmup_steps = (double) settings->lr_warmup_steps;
    if (settings->lr_schedule && za_schedule_parse (settings->lr_schedule,
                                                    &settings->optim.schedule))
        return ZA_EXIT_USAGE;
    if (program->learning_rate_fn && settings->lr_schedule) {
        za_error ("--lr-schedule: %s has its own learning-rate schedule", program->name);
        return ZA_EXIT_USAGE;
    }
    if (program->learning_rate_fn) {
        settings->optim.schedule.kind = ZA_SCHEDULE_FUNCTION;
        settings->optim.schedule.fn = program->learning_rate_fn;
        settings->optim.schedule.fn_arg = program->learning_rate_arg;
    }
    return 0;
}

//  What can be refused before any data is read: the metrics, the
//  augmentation and the bad-image limit, the device and precision, a layer
//  stack given as text.
static int
s_check_early (za_task_t *task, const za_program_t *program, const za_settings_t *settings)
{
    za_eval_metrics_spec_t metrics;
    if (za_eval_metrics_parse (settings->eval.eval_metrics, &metrics))
        return ZA_EXIT_USAGE;
    //  Augmentation: zactor's pipeline's, and no cache of one epoch's features.
    za_augment_t augment;
    if (za_augment_parse (settings->augment, &augment)
        || za_bad_limit_parse (settings->max_bad_images, &task->max_bad))
        return ZA_EXIT_USAGE;
    if (za_augment_active (&augment) && settings->cache_frozen) {
        za_error ("--augment changes every example each epoch, and --cache-frozen keeps the "
                  "frozen layers' output of the first: use one or the other");
        return ZA_EXIT_USAGE;
    }
    if (za_augment_active (&augment) && program->input_fn) {
        za_error ("--augment works in zactor's input pipeline; this program's input_fn makes "
                  "its own batches (augment them there)");
        return ZA_EXIT_USAGE;
    }
    //  A device that is not there is said before any data is read.
    za_device_t device;
    int first, count;
    const za_backend_t *backend = za_device_parse (settings->device, &device)? NULL
                                : za_device_backend (&device, &first, &count);
    if (!backend || !za_backend_policy (backend, settings->run.precision))
        return ZA_EXIT_USAGE;
    //  A layer stack given as text is checked before any data is read.
    const char *model = settings->model;
    int premade = streq (model, "cnn") || streq (model, "dnn") || streq (model, "linear")
                || streq (model, "vgg16");
    if (!program->model_fn && !premade && za_stack_parse (model, &task->spec))
        return ZA_EXIT_USAGE;
    return 0;
}

//  The layer stack for the data: its last layer's units, and the input's
//  shape through every layer (a model that cannot take the images is said
//  now, not when training starts).
static int
s_stack_for_data (za_task_t *task, const za_dataset_info_t *train,
                  const za_dataset_info_t *eval)
{
    int rc;
    if ((rc = s_stack_model (task, train->n_classes > 2? train->n_classes: 2)))
        return rc;
    int model_classes = task->spec.layers [task->spec.count - 1].units;
    int data_classes = train->n_classes > eval->n_classes? train->n_classes: eval->n_classes;
    if (data_classes > model_classes) {
        za_error ("the data has labels up to %d but the model's last layer has %d units: "
                  "give a model ending in dense(%d)", data_classes - 1, model_classes,
                  data_classes);
        return ZA_EXIT_USAGE;
    }
    za_error_set_quiet (1);
    int fits = za_stack_forward_flops (&task->spec, task->input) >= 0;
    za_error_set_quiet (0);
    if (!fits) {
        za_error ("the model cannot take %dx%dx%d inputs: %s; give a larger "
                  "--image-size, or a model that shrinks them less", task->input.height,
                  task->input.width, task->input.channels, za_last_error ());
        return ZA_EXIT_USAGE;
    }
    task->model_fn = za_stack_model_fn ();
    task->params = &task->spec;
    return 0;
}

int
za_task_prepare (za_task_t *task, const za_program_t *program, za_options_t *options,
                 za_settings_t *settings, int need_eval, int replicas)
{
    memset (task, 0, sizeof *task);
    task->program = program;
    task->options = options;
    task->settings = settings;
    int rc;
    if ((rc = s_resolve_optim (program, settings))
        || (rc = s_check_early (task, program, settings)))
        return rc;
    //  What the data holds: the model's input, an epoch, the classes.
    za_dataset_info_t train = {0}, eval = {0};
    int own_input = program->input_fn != NULL;
    int need_train = !own_input || !program->examples_per_epoch || !program->input.height;
    if (need_train && (rc = s_data_info (settings, 1, &train)))
        return rc;
    if (need_eval && !own_input && (rc = s_data_info (settings, 0, &eval)))
        return rc;
    if (settings->train_data && need_eval && !own_input
        && (eval.height != train.height || eval.width != train.width
            || eval.channels != train.channels || eval.n_classes != train.n_classes)) {
        za_error ("--eval-data %s has %d classes, --train-data %s has %d: give both the "
                  "same class folders (or --class-names)", settings->eval_data,
                  eval.n_classes, settings->train_data, train.n_classes);
        return ZA_EXIT_USAGE;
    }
    task->input = program->input.height > 0? program->input
                : (za_input_shape_t) {train.height, train.width, train.channels};
    task->epoch_examples = program->examples_per_epoch > 0? program->examples_per_epoch
                                                          : train.count;
    if (!program->model_fn && (rc = s_stack_for_data (task, &train, &eval)))
        return rc;
    if (program->model_fn) {
        task->model_fn = program->model_fn;
        task->params = program->params;
    }
    if (s_check_goals (task))
        return ZA_EXIT_USAGE;
    if (settings->max_steps == 0) {
        if (task->epoch_examples <= 0) {
            za_error ("give --max-steps: %s does not say how many examples an epoch has",
                      program->name);
            return ZA_EXIT_USAGE;
        }
        int64_t global_batch = settings->batch_size * (replicas > 1? replicas: 1);
        s_max_steps_of_epochs (settings, settings->epochs * task->epoch_examples, global_batch);
    }
    if (settings->run.warm_start.from && !settings->predict && (rc = s_check_warm_start (task)))
        return rc;
    //  What predict needs to read images as training did: written once, by
    //  the process that trains alone, the launcher or the chief (the class
    //  names take a listing of the source).
    int writes = !settings->role || streq (settings->role, "chief");
    //  Its classes are the model's outputs (a layer stack may have more
    //  than the data's labels).
    int classes = program->model_fn? train.n_classes
                : task->spec.layers [task->spec.count - 1].units;
    //  (The IDX files' too: predict, serve and export then preprocess as
    //  training did, where they took none.)
    if (writes && !settings->predict && settings->run.model_dir
        && (settings->train_data || !program->input_fn))
        za_input_json_save (settings, !program->model_fn, classes);
    return 0;
}

void
za_task_release (za_task_t *task)
{
    za_dataset_destroy (&task->train);
    za_dataset_destroy (&task->eval);
}

za_input_t *
za_task_input (void *arg, const za_input_context_t *context)
{
    za_task_t *task = (za_task_t *) arg;
    const za_settings_t *s = task->settings;
    za_input_context_t asked = *context;
    int train = context->mode == ZA_MODE_TRAIN;
    if (!asked.batch_size)
        asked.batch_size = train? (int) s->batch_size: ZA_EVAL_BATCH;
    asked.data_dir = train || !s->eval_data? s->dataset_dir: s->eval_data;
    const za_program_t *program = task->program;
    if (program->input_fn)
        return program->input_fn (program->input_arg? program->input_arg: program->params,
                                  &asked);
    za_input_config_t config = za_input_config_default ();
    config.batch_size = asked.batch_size;
    if (train) {
        //  Split batches read the whole data; a shard reads its own rows only.
        //  Images shard by file under every strategy, as TensorFlow's AUTO
        //  shard policy does for a dataset of files: each worker opens only
        //  its own files, and its batches are its slice of the global batch.
        int split = asked.split_batches && !s->train_data;
        int shards = split? 1: asked.num_shards;
        int shard = split? 0: asked.shard_index;
        if (task->train && (task->train_shards != shards || task->train_shard != shard))
            za_dataset_destroy (&task->train);
        if (!task->train) {
            task->train = s_data_load (s, 1, shards, shard);
            task->train_shards = shards;
            task->train_shard = shard;
        }
        if (split) {
            config.replicas = asked.num_shards;
            config.replica = asked.shard_index;
            config.global_batch = asked.global_batch;
        }
        if (!task->train)
            return NULL;
        config.shuffle_buffer = s->shuffle_buffer < 0? (int) task->train->count
                                                     : (int) s->shuffle_buffer;
        //  Each worker's files in an order (and augmentation draws) of its
        //  own: with the synchronous strategies' one seed, shard w of a
        //  class-sorted list drew, at each place, the sorted neighbour of
        //  every other shard's file, so a global batch held pairs of one class.
        config.seed = !s->train_data || !asked.split_batches? asked.seed
                    : za_role_shard_seed (asked.seed, asked.shard_index);
        //  A resumed run reads on: its stream gave global batches (split)
        //  or its own batches so far.
        config.skip = split && asked.examples_done > 0
                    ? asked.examples_done
                    : asked.steps_done * asked.batch_size * (split? asked.num_shards: 1);
        config.epochs = -1;
        config.threads = (int) s->input_threads;
        config.preprocess = (za_preprocess_t) za_preprocess_parse (s->preprocess);
        //  Checked by za_task_prepare.
        za_augment_parse (s->augment, &config.augment);
        config.max_bad = task->max_bad;
        return za_input_new (task->train, &config);
    }
    if (!task->eval && !(task->eval = s_data_load (s, 0, 1, 0)))
        return NULL;
    config.threads = (int) s->input_threads;
    config.preprocess = (za_preprocess_t) za_preprocess_parse (s->preprocess);
    config.max_bad = task->max_bad;
    return za_input_new (task->eval, &config);
}
