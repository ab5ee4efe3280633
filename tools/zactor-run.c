/*  zactor-run: starts zactor work from the command line. For now it trains
    and evaluates a model on MNIST-format data in one process.              */
#include "za/za_cluster.h"
#include "za/za_estimator.h"
#include "za/za_evaluator.h"
#include "za/za_role.h"

#include <jansson.h>
#include <malloc.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define DEFAULT_MODEL_DIR "runs/fmnist"
#define DEFAULT_EPOCHS 5
#define DEFAULT_BATCH 64
#define DEFAULT_EVAL_BATCH 500
#define MALLOC_KEEP_BYTES (256 * 1024 * 1024)

static void
s_usage (FILE *out)
{
    fprintf (out,
"Usage: zactor-run [OPTIONS]\n"
"Train a model on MNIST-format data (Fashion-MNIST by default) and evaluate it on\n"
"the test set, in one process. With no options it trains the seed CNN of the\n"
"TensorFlow Estimator tutorials for %d epochs with Adam 1e-3, batch %d.\n"
"\n"
"Model and data:\n"
"  --model SPEC           cnn (default), dnn, linear, or a layer stack such as\n"
"                         \"conv2d(32,3,relu) maxpool(2) flatten dense(64,relu) dense(10)\"\n"
"  --hidden-units LIST    hidden layers of --model dnn (default 128), e.g. 256,128\n"
"  --dataset-dir DIR      holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
"                         (default %s)\n"
"  --batch-size N         training batch size (default %d)\n"
"  --shuffle-buffer N     shuffle buffer in examples (default: the whole set; 0: none)\n"
"Training:\n"
"  --optimizer NAME       sgd, momentum, adam (default), adagrad\n"
"  --learning-rate LR     default: 1e-3 for adam, 0.01 for the others\n"
"  --max-steps N          train until global_step N (default: --epochs worth)\n"
"  --epochs N             epochs when --max-steps is not given (default %d)\n"
"  --no-eval              skip the evaluation on the test set\n"
"RunConfig (TensorFlow names):\n"
"  --model-dir DIR        checkpoints and metrics (default %s); training\n"
"                         continues from the newest checkpoint there\n"
"  --save-checkpoints-steps N   checkpoint every N steps\n"
"  --save-checkpoints-secs S    checkpoint every S seconds (default 600)\n"
"  --keep-checkpoint-max N      checkpoints kept (default 5; 0 keeps all)\n"
"  --log-step-count-steps N     log line every N steps (default 100)\n"
"  --save-summary-steps N       metrics.jsonl line every N steps (default 100)\n"
"  --seed N               random seed for initialisation, shuffling, dropout (default 42);\n"
"                         a resumed run mixes its starting step into the shuffle seed\n"
"  --threads N            compute threads, 1 to 64 (default: all cores)\n"
"Evaluation (EvalSpec):\n"
"  --train-and-evaluate   train and run the evaluator together in this process\n"
"  --eval-data DIR        evaluate on DIR/t10k-* instead of --dataset-dir's\n"
"  --eval-name NAME       results in MODEL_DIR/eval_NAME (default MODEL_DIR/eval)\n"
"  --eval-steps N         batches per evaluation (default: the whole set)\n"
"  --start-delay-secs S   the evaluator starts after S seconds (default 120)\n"
"  --throttle-secs S      at most one evaluation per S seconds (default 600)\n"
"  --replay               with --role evaluator: evaluate every checkpoint in\n"
"                         --model-dir in step order, then exit\n"
"Distributed (asynchronous parameter-server training, like TF_CONFIG):\n"
"  --role ROLE            chief, worker, ps or evaluator (default: the task in TF_CONFIG)\n"
"  --index N              this task's index in its job (default 0)\n"
"  --cluster FILE         the cluster as TF_CONFIG JSON (default: $TF_CONFIG);\n"
"                         every role gets the same model and training flags\n"
"  --timeout-secs S       a peer never heard from this long is unreachable: exit 1\n"
"                         (default 60)\n"
"  --heartbeat-ivl-ms N   a worker waiting on a ps pings it every N ms (default 1000)\n"
"  --heartbeat-liveness N ...and gives up on it, as stopped or hung, after N silent\n"
"                         intervals (default 3): exit 1\n"
"  -h, --help             this help\n"
"\n"
"Output: a progress bar on a terminal (log lines otherwise), checkpoints\n"
"DIR/model.ckpt-STEP.safetensors, DIR/metrics.jsonl, DIR/eval/metrics.jsonl.\n"
"Exit status: 0 done, 1 a run-time error, 2 bad arguments.\n",
             DEFAULT_EPOCHS, DEFAULT_BATCH, ZA_FASHION_MNIST_DIR, DEFAULT_BATCH,
             DEFAULT_EPOCHS, DEFAULT_MODEL_DIR);
}

//  Parses a whole-string integer in [min, max]; exits 2 with a message if not.
static int64_t
s_int_arg (const char *flag, const char *text, int64_t min, int64_t max)
{
    char *end;
    errno = 0;
    long long v = strtoll (text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        fprintf (stderr, "zactor-run: %s wants an integer in [%" PRId64 ", %" PRId64
                 "], got '%s'\n", flag, min, max, text);
        exit (EXIT_USAGE);
    }
    return v;
}

//  Parses a whole-string finite number > min (or >= min when inclusive);
//  exits 2 with a message if not.
static double
s_float_arg (const char *flag, const char *text, double min, int inclusive)
{
    char *end;
    double v = strtod (text, &end);
    if (end == text || *end || !isfinite (v) || v < min || (!inclusive && v == min)) {
        fprintf (stderr, "zactor-run: %s wants a number %s %g, got '%s'\n", flag,
                 inclusive? ">=": ">", min, text);
        exit (EXIT_USAGE);
    }
    return v;
}

typedef struct {
    const za_dataset_t *train;
    const za_dataset_t *test;
    int batch_size;
    int shuffle_buffer;
    uint64_t seed;
    const za_estimator_t *estimator;
} s_inputs_t;

//  Mixes the step training starts from into the shuffle seed, so a run that
//  resumes from a checkpoint goes on with a new order instead of replaying
//  the examples it began with.
#define SEED_STEP_MIX 0x9e3779b97f4a7c15ULL

static za_input_t *
s_input_fn (void *arg, za_mode_t mode)
{
    s_inputs_t *inputs = (s_inputs_t *) arg;
    za_input_config_t config = za_input_config_default ();
    if (mode == ZA_MODE_TRAIN) {
        config.batch_size = inputs->batch_size;
        config.shuffle_buffer = inputs->shuffle_buffer;
        config.seed = inputs->seed
                      + SEED_STEP_MIX * (uint64_t) za_estimator_global_step (inputs->estimator);
        config.epochs = -1;
        return za_input_new (inputs->train, &config);
    }
    config.batch_size = DEFAULT_EVAL_BATCH;
    return za_input_new (inputs->test, &config);
}

//  Prints the newest line of the evaluator's metrics.jsonl as the result.
static int
s_print_last_eval (const char *model_dir, const char *name, int64_t evaluations)
{
    char path [4096];
    snprintf (path, sizeof path, "%s/eval%s%s/metrics.jsonl", model_dir,
              name && *name? "_": "", name && *name? name: "");
    FILE *f = fopen (path, "r");
    char line [1024], last [1024] = "";
    while (f && fgets (line, sizeof line, f))
        snprintf (last, sizeof last, "%s", line);
    if (f)
        fclose (f);
    json_t *json = json_loads (last, JSON_DISABLE_EOF_CHECK, NULL);
    if (!json) {
        fprintf (stderr, "zactor-run: no evaluation in %s\n", path);
        return 1;
    }
    printf ("test accuracy %.4f  loss %.4f  on %" PRId64 " examples at step %" PRId64
            " (%s; %" PRId64 " evaluations)\n",
            json_number_value (json_object_get (json, "accuracy")),
            json_number_value (json_object_get (json, "loss")),
            (int64_t) json_integer_value (json_object_get (json, "examples")),
            (int64_t) json_integer_value (json_object_get (json, "global_step")), path,
            evaluations);
    json_decref (json);
    return 0;
}

enum {
    OPT_MODEL = 256, OPT_HIDDEN, OPT_DATASET_DIR, OPT_BATCH, OPT_SHUFFLE, OPT_OPTIMIZER,
    OPT_LR, OPT_MAX_STEPS, OPT_EPOCHS, OPT_NO_EVAL, OPT_MODEL_DIR, OPT_CKPT_STEPS,
    OPT_CKPT_SECS, OPT_KEEP, OPT_LOG_STEPS, OPT_SUMMARY_STEPS, OPT_SEED, OPT_THREADS,
    OPT_ROLE, OPT_INDEX, OPT_CLUSTER, OPT_TIMEOUT, OPT_TRAIN_AND_EVAL, OPT_EVAL_DATA,
    OPT_EVAL_NAME, OPT_EVAL_STEPS, OPT_START_DELAY, OPT_THROTTLE, OPT_REPLAY,
    OPT_HEARTBEAT_IVL, OPT_HEARTBEAT_LIVENESS
};

//  The cluster, freed at exit whichever way main returns.
static za_cluster_t *s_cluster;

static void
s_free_cluster (void)
{
    za_cluster_destroy (&s_cluster);
}

//  The cluster from --cluster FILE or TF_CONFIG, with --role / --index (when
//  given) as this task. NULL with one error when anything is wrong.
static za_cluster_t *
s_load_cluster (const char *file, const char *role, int index)
{
    if (!role)
        return za_cluster_load (file);
    json_error_t error;
    const char *env = getenv ("TF_CONFIG");
    json_t *root = file? json_load_file (file, 0, &error)
                       : env? json_loads (env, 0, &error): json_object ();
    if (!root) {
        za_error ("%s: line %d column %d: %s", file? file: "TF_CONFIG", error.line,
                  error.column, error.text);
        return NULL;
    }
    if (!json_is_object (root)) {
        json_decref (root);
        za_error ("%s: not a JSON object", file? file: "TF_CONFIG");
        return NULL;
    }
    json_object_set_new (root, "task", json_pack ("{s:s, s:i}", "type", role, "index", index));
    char *text = json_dumps (root, 0);
    json_decref (root);
    za_cluster_t *cluster = text? za_cluster_parse (text, file? file: "TF_CONFIG"): NULL;
    free (text);
    return cluster;
}

//  Runs this process's role of the cluster. Returns the exit status.
static int
s_run_role (const za_cluster_t *cluster, za_role_config_t *role)
{
    //  Received frames of a few hundred KB are freed every step: keep that
    //  memory in the heap instead of mapping and faulting it in each time.
    mallopt (M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES);
    mallopt (M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES);
    char *endpoints [ZA_ROLE_MAX_PS] = {NULL};
    role->ps_count = cluster->ps_count;
    role->num_workers = cluster->num_workers;
    for (int p = 0; p < cluster->ps_count && p < ZA_ROLE_MAX_PS; p++)
        role->ps_endpoints [p] = endpoints [p] = za_cluster_ps_endpoint (cluster, p);
    role->is_chief = cluster->is_chief;
    role->worker_index = cluster->worker_index;
    role->ps_index = cluster->task_type == ZA_TASK_PS? cluster->task_index: -1;
    role->bind_endpoint = cluster->bind_endpoint;
    zactor_t *actor = zactor_new (cluster->task_type == ZA_TASK_PS? za_ps_actor
                                                                   : za_worker_actor, role);
    int rc = actor? za_role_wait (actor, 0, NULL, NULL, NULL): -1;
    zactor_destroy (&actor);
    for (int p = 0; p < ZA_ROLE_MAX_PS; p++)
        free (endpoints [p]);
    return rc == 0? 0: 1;
}

int
main (int argc, char **argv)
{
    static const struct option options [] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"hidden-units", required_argument, NULL, OPT_HIDDEN},
        {"dataset-dir", required_argument, NULL, OPT_DATASET_DIR},
        {"batch-size", required_argument, NULL, OPT_BATCH},
        {"shuffle-buffer", required_argument, NULL, OPT_SHUFFLE},
        {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
        {"learning-rate", required_argument, NULL, OPT_LR},
        {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"no-eval", no_argument, NULL, OPT_NO_EVAL},
        {"model-dir", required_argument, NULL, OPT_MODEL_DIR},
        {"save-checkpoints-steps", required_argument, NULL, OPT_CKPT_STEPS},
        {"save-checkpoints-secs", required_argument, NULL, OPT_CKPT_SECS},
        {"keep-checkpoint-max", required_argument, NULL, OPT_KEEP},
        {"log-step-count-steps", required_argument, NULL, OPT_LOG_STEPS},
        {"save-summary-steps", required_argument, NULL, OPT_SUMMARY_STEPS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"role", required_argument, NULL, OPT_ROLE},
        {"index", required_argument, NULL, OPT_INDEX},
        {"cluster", required_argument, NULL, OPT_CLUSTER},
        {"timeout-secs", required_argument, NULL, OPT_TIMEOUT},
        {"train-and-evaluate", no_argument, NULL, OPT_TRAIN_AND_EVAL},
        {"eval-data", required_argument, NULL, OPT_EVAL_DATA},
        {"eval-name", required_argument, NULL, OPT_EVAL_NAME},
        {"eval-steps", required_argument, NULL, OPT_EVAL_STEPS},
        {"start-delay-secs", required_argument, NULL, OPT_START_DELAY},
        {"throttle-secs", required_argument, NULL, OPT_THROTTLE},
        {"replay", no_argument, NULL, OPT_REPLAY},
        {"heartbeat-ivl-ms", required_argument, NULL, OPT_HEARTBEAT_IVL},
        {"heartbeat-liveness", required_argument, NULL, OPT_HEARTBEAT_LIVENESS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = "cnn", *hidden = "128", *dataset_dir = ZA_FASHION_MNIST_DIR;
    const char *optimizer = "adam";
    int batch_size = DEFAULT_BATCH, shuffle_buffer = -1, eval = 1;
    int hidden_given = 0, threads_given = 0;
    const char *role = NULL, *cluster_file = NULL;
    int task_index = 0;
    double timeout_secs = ZA_ROLE_TIMEOUT_SECS;
    za_evaluator_config_t eval_spec;
    za_evaluator_config_init (&eval_spec);
    const char *eval_data = NULL;
    int train_and_evaluate = 0;
    int64_t heartbeat_ivl_ms = 1000, heartbeat_liveness = 3;
    double learning_rate = 0;
    int64_t max_steps = 0, epochs = DEFAULT_EPOCHS;
    za_run_config_t config = za_run_config_default ();
    config.model_dir = DEFAULT_MODEL_DIR;
    config.threads = (int) sysconf (_SC_NPROCESSORS_ONLN);

    int opt;
    while ((opt = getopt_long (argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
            case OPT_MODEL: model = optarg; break;
            case OPT_HIDDEN: hidden = optarg, hidden_given = 1; break;
            case OPT_DATASET_DIR: dataset_dir = optarg; break;
            case OPT_BATCH: batch_size = (int) s_int_arg ("--batch-size", optarg, 1, 65536); break;
            case OPT_SHUFFLE:
                shuffle_buffer = (int) s_int_arg ("--shuffle-buffer", optarg, 0, INT32_MAX);
                break;
            case OPT_OPTIMIZER: optimizer = optarg; break;
            case OPT_LR: learning_rate = s_float_arg ("--learning-rate", optarg, 0, 0); break;
            case OPT_MAX_STEPS: max_steps = s_int_arg ("--max-steps", optarg, 1, INT64_MAX); break;
            case OPT_EPOCHS: epochs = s_int_arg ("--epochs", optarg, 1, 100000); break;
            case OPT_NO_EVAL: eval = 0; break;
            case OPT_MODEL_DIR: config.model_dir = optarg; break;
            case OPT_CKPT_STEPS:
                config.save_checkpoints_steps = s_int_arg ("--save-checkpoints-steps", optarg,
                                                           0, INT64_MAX);
                break;
            case OPT_CKPT_SECS:
                config.save_checkpoints_secs = s_float_arg ("--save-checkpoints-secs", optarg, 0, 1);
                break;
            case OPT_KEEP:
                config.keep_checkpoint_max = (int) s_int_arg ("--keep-checkpoint-max", optarg,
                                                              0, 1000000);
                break;
            case OPT_LOG_STEPS:
                config.log_step_count_steps = s_int_arg ("--log-step-count-steps", optarg,
                                                         0, INT64_MAX);
                break;
            case OPT_SUMMARY_STEPS:
                config.save_summary_steps = s_int_arg ("--save-summary-steps", optarg, 0,
                                                       INT64_MAX);
                break;
            case OPT_SEED: config.seed = (uint64_t) s_int_arg ("--seed", optarg, 0, INT64_MAX); break;
            case OPT_THREADS:
                config.threads = (int) s_int_arg ("--threads", optarg, 1, 64);
                threads_given = 1;
                break;
            case OPT_ROLE: role = optarg; break;
            case OPT_INDEX: task_index = (int) s_int_arg ("--index", optarg, 0, 1 << 20); break;
            case OPT_CLUSTER: cluster_file = optarg; break;
            case OPT_TIMEOUT: timeout_secs = s_float_arg ("--timeout-secs", optarg, 0, 0); break;
            case OPT_TRAIN_AND_EVAL: train_and_evaluate = 1; break;
            case OPT_EVAL_DATA: eval_data = optarg; break;
            case OPT_EVAL_NAME: eval_spec.name = optarg; break;
            case OPT_EVAL_STEPS:
                eval_spec.steps = s_int_arg ("--eval-steps", optarg, 1, INT64_MAX);
                break;
            case OPT_START_DELAY:
                eval_spec.start_delay_secs = s_float_arg ("--start-delay-secs", optarg, 0, 1);
                break;
            case OPT_THROTTLE:
                eval_spec.throttle_secs = s_float_arg ("--throttle-secs", optarg, 0, 1);
                break;
            case OPT_REPLAY: eval_spec.replay = 1; break;
            case OPT_HEARTBEAT_IVL:
                heartbeat_ivl_ms = s_int_arg ("--heartbeat-ivl-ms", optarg, 10, 3600000);
                break;
            case OPT_HEARTBEAT_LIVENESS:
                heartbeat_liveness = s_int_arg ("--heartbeat-liveness", optarg, 1, 1000);
                break;
            case 'h': s_usage (stdout); return 0;
            default:
                fprintf (stderr, "Try 'zactor-run --help'.\n");
                return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf (stderr, "zactor-run: unexpected argument '%s'\nTry 'zactor-run --help'.\n",
                 argv [optind]);
        return EXIT_USAGE;
    }

    //  Everything that can be wrong with the arguments is found before any work.
    za_cluster_t *cluster = NULL;
    atexit (s_free_cluster);
    int is_evaluator = role && strcmp (role, "evaluator") == 0;
    if (eval_spec.replay && !is_evaluator) {
        fprintf (stderr, "zactor-run: --replay goes with --role evaluator\n");
        return EXIT_USAGE;
    }
    if (train_and_evaluate && (role || cluster_file)) {
        fprintf (stderr, "zactor-run: --train-and-evaluate is the local case; in a cluster "
                 "run an evaluator task (--role evaluator)\n");
        return EXIT_USAGE;
    }
    //  An evaluator needs no cluster (it follows model_dir); one given is checked.
    if (!is_evaluator && (role || cluster_file || getenv ("TF_CONFIG"))) {
        if (role && strcmp (role, "chief") && strcmp (role, "worker") && strcmp (role, "ps")) {
            fprintf (stderr, "zactor-run: --role %s: chief, worker, ps or evaluator\n", role);
            return EXIT_USAGE;
        }
        cluster = s_cluster = s_load_cluster (cluster_file, role, task_index);
        if (!cluster)
            return EXIT_USAGE;
        if (cluster->task_type == ZA_TASK_EVALUATOR)
            is_evaluator = 1;
        if (!threads_given) {
            int share = config.threads / za_cluster_tasks_on_my_host (cluster);
            config.threads = share > 0? share: 1;
        }
        //  Only the chief evaluates, once training is over.
        eval = eval && cluster->is_chief;
    }
    else
    if (is_evaluator && (cluster_file || getenv ("TF_CONFIG"))) {
        cluster = s_cluster = s_load_cluster (cluster_file, role, task_index);
        if (!cluster)
            return EXIT_USAGE;
    }
    if (is_evaluator)
        eval = 1;
    za_optimizer_t kind;
    if (za_optim_parse (optimizer, &kind))
        return EXIT_USAGE;
    za_optim_config_t optim = za_optim_config_default (kind);
    if (learning_rate > 0)
        optim.learning_rate = (float) learning_rate;

    //  A layer stack given as text is checked before any data is read.
    int premade = !strcmp (model, "cnn") || !strcmp (model, "dnn") || !strcmp (model, "linear");
    za_stack_spec_t spec;
    if (!premade && za_stack_parse (model, &spec))
        return EXIT_USAGE;
    if (hidden_given && strcmp (model, "dnn") != 0) {
        fprintf (stderr, "zactor-run: --hidden-units applies to --model dnn only\n");
        return EXIT_USAGE;
    }
    int units [ZA_MAX_LAYERS], unit_count = 0;
    if (strcmp (model, "dnn") == 0) {
        char list [256];
        if (strlen (hidden) >= sizeof list) {
            fprintf (stderr, "zactor-run: --hidden-units list is too long\n");
            return EXIT_USAGE;
        }
        snprintf (list, sizeof list, "%s", hidden);
        for (char *tok = strtok (list, ","); tok; tok = strtok (NULL, ",")) {
            if (unit_count >= ZA_MAX_LAYERS - 2) {
                fprintf (stderr, "zactor-run: --hidden-units: at most %d layers\n",
                         ZA_MAX_LAYERS - 2);
                return EXIT_USAGE;
            }
            units [unit_count++] = (int) s_int_arg ("--hidden-units", tok, 1, 1 << 20);
        }
    }

    za_dataset_t *train = za_dataset_load_dir (dataset_dir, "train");
    za_dataset_t *test = train && (eval || train_and_evaluate)
                       ? za_dataset_load_dir (eval_data? eval_data: dataset_dir, "t10k"): NULL;
    if (!train || ((eval || train_and_evaluate) && !test)) {
        fprintf (stderr, "zactor-run: cannot read the data set in '%s' (on Debian: "
                 "apt-get install dataset-fashion-mnist, or give --dataset-dir)\n", dataset_dir);
        za_dataset_destroy (&train);
        return 1;
    }
    //  The premade classifiers take their class count from the data.
    int n_classes = train->n_classes > 2? train->n_classes: 2;
    int bad_model = 0;
    if (strcmp (model, "cnn") == 0)
        bad_model = za_stack_parse (ZA_SEED_CNN, &spec);
    else
    if (strcmp (model, "dnn") == 0)
        bad_model = za_dnn_classifier_spec (&spec, units, unit_count, n_classes);
    else
    if (strcmp (model, "linear") == 0)
        bad_model = za_linear_classifier_spec (&spec, n_classes);
    if (bad_model) {
        za_dataset_destroy (&train);
        za_dataset_destroy (&test);
        return EXIT_USAGE;
    }
    int model_classes = spec.layers [spec.count - 1].units;
    if (train->n_classes > model_classes || (test && test->n_classes > model_classes)) {
        fprintf (stderr, "zactor-run: the data has labels up to %d but the model's last "
                 "layer has %d units: give a model ending in dense(%d)\n",
                 (train->n_classes > (test? test->n_classes: 0)? train->n_classes
                                                                : test->n_classes) - 1,
                 model_classes, train->n_classes);
        za_dataset_destroy (&train);
        za_dataset_destroy (&test);
        return EXIT_USAGE;
    }
    if (max_steps == 0)
        max_steps = (epochs * train->count + batch_size - 1) / batch_size;
    s_inputs_t inputs = {
        .train = train,
        .test = test,
        .batch_size = batch_size,
        .shuffle_buffer = shuffle_buffer < 0? (int) train->count: shuffle_buffer,
        .seed = config.seed,
    };
    za_input_shape_t shape = {train->height, train->width, train->channels};
    eval_spec.model_fn = za_stack_model_fn ();
    eval_spec.params = &spec;
    eval_spec.input = shape;
    eval_spec.model_dir = config.model_dir;
    eval_spec.data = test;
    eval_spec.max_steps = max_steps;
    eval_spec.threads = config.threads;
    if (is_evaluator) {
        za_info ("evaluator: %s '%s' (start delay %g s, throttle %g s, until step %" PRId64
                 "), model %s", eval_spec.replay? "replaying": "following", config.model_dir,
                 eval_spec.start_delay_secs, eval_spec.throttle_secs, max_steps, spec.text);
        int evaluations = 0;
        int eval_rc = za_evaluator_run (&eval_spec, NULL, &evaluations);
        za_dataset_destroy (&train);
        za_dataset_destroy (&test);
        return eval_rc == 0? 0: 1;
    }
    int distributed_done = 0;
    if (cluster) {
        za_role_config_t role_config;
        za_role_config_init (&role_config);
        role_config.model_fn = za_stack_model_fn ();
        role_config.params = &spec;
        role_config.input = shape;
        role_config.optim = optim;
        role_config.run = config;
        role_config.max_steps = max_steps;
        role_config.batch_size = batch_size;
        role_config.shuffle_buffer = inputs.shuffle_buffer;
        role_config.timeout_secs = timeout_secs;
        role_config.heartbeat_ivl_secs = (double) heartbeat_ivl_ms / 1000.0;
        role_config.heartbeat_liveness = (int) heartbeat_liveness;
        role_config.train = train;
        za_info ("%s %d of the cluster (%d workers, %d ps), model %s, %d threads",
                 za_task_type_name (cluster->task_type), cluster->task_index,
                 cluster->num_workers, cluster->ps_count, spec.text, config.threads);
        int role_rc = s_run_role (cluster, &role_config);
        distributed_done = 1;
        if (role_rc || !eval) {
            za_dataset_destroy (&train);
            za_dataset_destroy (&test);
            return role_rc;
        }
    }
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim,
                                                  &config);
    inputs.estimator = estimator;
    int rc = estimator? 0: 1;
    if (!rc && !distributed_done) {
        za_info ("model %s", spec.text);
        za_info ("%s lr %g, batch %d, %" PRId64 " steps (%.2f epochs of %" PRId64
                 " examples), %d threads, model_dir %s", za_optim_name (kind),
                 (double) optim.learning_rate, batch_size, max_steps,
                 (double) max_steps * batch_size / (double) train->count, train->count,
                 config.threads, config.model_dir);
        double start = za_clock_mono ();
        if (train_and_evaluate) {
            int evaluations = 0;
            rc = za_train_and_evaluate (estimator, s_input_fn, &inputs, max_steps, &eval_spec,
                                        &evaluations)? 1: 0;
            if (!rc)
                rc = s_print_last_eval (config.model_dir, eval_spec.name, evaluations);
            eval = 0;       //  the evaluator did the final one
        }
        else
            rc = za_estimator_train (estimator, s_input_fn, &inputs, max_steps)? 1: 0;
        if (!rc)
            za_info ("trained to step %" PRId64 " in %.1f s",
                     za_estimator_global_step (estimator), za_clock_mono () - start);
    }
    if (!rc && eval) {
        za_eval_result_t result;
        rc = za_estimator_evaluate (estimator, s_input_fn, &inputs, 0, &result)? 1: 0;
        if (!rc)
            printf ("test accuracy %.4f  loss %.4f  on %" PRId64 " examples at step %"
                    PRId64 " (%s/eval/metrics.jsonl)\n", result.accuracy, result.loss,
                    result.examples, result.global_step, config.model_dir);
    }
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&train);
    za_dataset_destroy (&test);
    return rc;
}
