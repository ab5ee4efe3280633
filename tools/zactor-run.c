/*  zactor-run: starts zactor work from the command line. For now it trains
    and evaluates a model on MNIST-format data in one process.              */
#include "za/za_broker.h"
#include "za/za_broker_client.h"
#include "za/za_cluster.h"
#include "za/za_estimator.h"
#include "za/za_evaluator.h"
#include "za/za_role.h"
#include "za/za_wire.h"

#include <jansson.h>
#include <malloc.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define EXIT_USAGE 2
#define DEFAULT_MODEL_DIR "runs/fmnist"
#define DEFAULT_EPOCHS 5
#define DEFAULT_BATCH 64
#define DEFAULT_EVAL_BATCH 500
#define MALLOC_KEEP_BYTES (256 * 1024 * 1024)
#define DEFAULT_MAX_RESTARTS 10
#define DEFAULT_WORKERS 2

static void
s_usage (FILE *out)
{
    fprintf (out,
"Usage: zactor-run [OPTIONS]\n"
"Train a model on MNIST-format data (Fashion-MNIST by default) and evaluate it on\n"
"the test set: in one process, as a whole supervised cluster on this machine\n"
"(--local), or as one task of a cluster (--role). With no options it trains the\n"
"seed CNN of the TensorFlow Estimator tutorials for %d epochs with Adam 1e-3,\n"
"batch %d, in this process.\n"
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
"  --role ROLE            chief, worker, ps, evaluator or broker (default: the task in\n"
"                         TF_CONFIG)\n"
"  --index N              this task's index in its job (default 0)\n"
"  --cluster FILE         the cluster as TF_CONFIG JSON (default: $TF_CONFIG);\n"
"                         every role gets the same model and training flags\n"
"  --timeout-secs S       a peer never heard from this long is unreachable: exit 1\n"
"                         (default 60)\n"
"  --heartbeat-ivl-ms N   a worker waiting on a ps pings it every N ms, and every task\n"
"                         reports to the broker as often (default 1000)\n"
"  --heartbeat-liveness N a ps silent for N intervals is logged as stopped, hung or\n"
"                         restarting (the worker waits on, up to --timeout-secs); a\n"
"                         supervising broker kills and restarts a task that silent\n"
"                         (default 3)\n"
"The whole cluster on this machine, and the broker:\n"
"  --local                a broker supervising a chief, --workers workers, --ps ps and\n"
"                         an evaluator on this machine, one progress bar, the final test\n"
"                         accuracy at the end. Its defaults: 10 epochs, a checkpoint\n"
"                         every 1000 steps, evaluations every 10 s. Watch it with\n"
"                         zactor-top; logs in MODEL_DIR/logs, events in events.jsonl\n"
"  --workers N            workers besides the chief (default %d)\n"
"  --ps N                 parameter servers (default 1)\n"
"  --evaluators N         0 or 1 (default 1)\n"
"  --job FILE             the job as JSON. Keys are these flags' names with '_' for '-'\n"
"                         (max_steps, model_dir, ...), at the top or in sections\n"
"                         (run_config, train_spec, eval_spec, ...), plus \"roles\":\n"
"                         {\"chief\": 1, \"worker\": 2, \"ps\": 1, \"evaluator\": 1} and\n"
"                         \"strategy\": \"ps-async\". Flags given as well win\n"
"  --role broker --bind EP  run the broker on EP (e.g. tcp://*:5555): registry, task\n"
"                         indexes, the cluster view, heartbeats, events; it ends when\n"
"                         every task of the job has finished\n"
"  --supervise            with --role broker: start every task of the job and restart\n"
"                         any that exits with an error, is killed or misses heartbeats,\n"
"                         with backoff from 0.5 s to 10 s\n"
"  --max-restarts N       restarts per task before the job fails (default %d)\n"
"  --broker ADDR          with --role ROLE [--index N]: join the cluster of the broker at\n"
"                         ADDR; the job comes from the broker, so nothing else is needed\n"
"  --host NAME            how other machines reach this one (default: the host name;\n"
"                         127.0.0.1 with a broker on loopback)\n"
"  --strategy NAME        ps-async (the only strategy built so far)\n"
"  -h, --help             this help\n"
"\n"
"Output: a progress bar on a terminal (log lines otherwise), checkpoints\n"
"DIR/model.ckpt-STEP.safetensors, DIR/metrics.jsonl, DIR/eval/metrics.jsonl.\n"
"Exit status: 0 done, 1 a run-time error, 2 bad arguments.\n",
             DEFAULT_EPOCHS, DEFAULT_BATCH, ZA_FASHION_MNIST_DIR, DEFAULT_BATCH,
             DEFAULT_EPOCHS, DEFAULT_MODEL_DIR, DEFAULT_WORKERS, DEFAULT_MAX_RESTARTS);
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

static za_input_t *
s_input_fn (void *arg, const za_input_context_t *context)
{
    s_inputs_t *inputs = (s_inputs_t *) arg;
    za_input_config_t config = za_input_config_default ();
    if (context->mode == ZA_MODE_TRAIN) {
        config.batch_size = inputs->batch_size;
        config.shuffle_buffer = inputs->shuffle_buffer;
        config.seed = context->seed;
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
    char count [48] = "";
    if (evaluations >= 0)
        snprintf (count, sizeof count, "; %" PRId64 " evaluations", evaluations);
    printf ("test accuracy %.4f  loss %.4f  on %" PRId64 " examples at step %" PRId64
            " (%s%s)\n",
            json_number_value (json_object_get (json, "accuracy")),
            json_number_value (json_object_get (json, "loss")),
            (int64_t) json_integer_value (json_object_get (json, "examples")),
            (int64_t) json_integer_value (json_object_get (json, "global_step")), path, count);
    json_decref (json);
    return 0;
}

enum {
    OPT_MODEL = 256, OPT_HIDDEN, OPT_DATASET_DIR, OPT_BATCH, OPT_SHUFFLE, OPT_OPTIMIZER,
    OPT_LR, OPT_MAX_STEPS, OPT_EPOCHS, OPT_NO_EVAL, OPT_MODEL_DIR, OPT_CKPT_STEPS,
    OPT_CKPT_SECS, OPT_KEEP, OPT_LOG_STEPS, OPT_SUMMARY_STEPS, OPT_SEED, OPT_THREADS,
    OPT_ROLE, OPT_INDEX, OPT_CLUSTER, OPT_TIMEOUT, OPT_TRAIN_AND_EVAL, OPT_EVAL_DATA,
    OPT_EVAL_NAME, OPT_EVAL_STEPS, OPT_START_DELAY, OPT_THROTTLE, OPT_REPLAY,
    OPT_HEARTBEAT_IVL, OPT_HEARTBEAT_LIVENESS, OPT_BROKER, OPT_BIND, OPT_JOB, OPT_LOCAL,
    OPT_SUPERVISE, OPT_MAX_RESTARTS, OPT_HOST, OPT_WORKERS, OPT_PS, OPT_EVALUATORS,
    OPT_STRATEGY
};

static const struct option s_options [] = {
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
    {"broker", required_argument, NULL, OPT_BROKER},
    {"bind", required_argument, NULL, OPT_BIND},
    {"job", required_argument, NULL, OPT_JOB},
    {"local", no_argument, NULL, OPT_LOCAL},
    {"supervise", no_argument, NULL, OPT_SUPERVISE},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"host", required_argument, NULL, OPT_HOST},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"ps", required_argument, NULL, OPT_PS},
    {"evaluators", required_argument, NULL, OPT_EVALUATORS},
    {"strategy", required_argument, NULL, OPT_STRATEGY},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

//  Every setting, from defaults, then the job file, then the flags (the last
//  word wins). A job key is its flag's name with '_' for '-'.
typedef struct {
    const char *model, *hidden, *dataset_dir, *optimizer;
    int batch_size, shuffle_buffer, eval, hidden_given, threads_given;
    const char *role, *cluster_file;
    int task_index, index_given;
    double timeout_secs;
    za_evaluator_config_t eval_spec;
    const char *eval_data;
    int train_and_evaluate;
    int64_t heartbeat_ivl_ms, heartbeat_liveness;
    double learning_rate;
    int64_t max_steps, epochs;
    za_run_config_t config;
    //  The broker, and the whole cluster on this machine.
    const char *broker, *bind, *job_file, *host;
    int local, supervise, max_restarts;
    int counts [ZA_BROKER_ROLE_KINDS];
    json_t *job;                        //  the job file, or an empty object
    json_t *given;                      //  the flags given, as job keys
    zlist_t *strings;                   //  job values as text, freed at exit
} s_settings_t;

static s_settings_t S;

static void
s_settings_init (void)
{
    S.model = "cnn", S.hidden = "128", S.dataset_dir = ZA_FASHION_MNIST_DIR;
    S.optimizer = "adam";
    S.batch_size = DEFAULT_BATCH, S.shuffle_buffer = -1, S.eval = 1;
    S.timeout_secs = ZA_ROLE_TIMEOUT_SECS;
    za_evaluator_config_init (&S.eval_spec);
    S.heartbeat_ivl_ms = 1000, S.heartbeat_liveness = 3;
    S.epochs = DEFAULT_EPOCHS;
    S.config = za_run_config_default ();
    S.config.model_dir = DEFAULT_MODEL_DIR;
    S.config.threads = (int) sysconf (_SC_NPROCESSORS_ONLN);
    S.max_restarts = DEFAULT_MAX_RESTARTS;
    S.counts [ZA_TASK_CHIEF] = 1;
    S.counts [ZA_TASK_WORKER] = DEFAULT_WORKERS;
    S.counts [ZA_TASK_PS] = 1;
    S.counts [ZA_TASK_EVALUATOR] = 1;
    S.job = json_object ();
    S.given = json_object ();
    S.strings = zlist_new ();
    zlist_autofree (S.strings);
}

static void
s_settings_free (void)
{
    json_decref (S.job);
    json_decref (S.given);
    zlist_destroy (&S.strings);
}

static double
s_heartbeat_ivl_secs (void)
{
    return (double) S.heartbeat_ivl_ms / 1000.0;
}

//  Flags that say how this process runs, not what the job is.
static int
s_is_job_key (int opt)
{
    return opt != OPT_ROLE && opt != OPT_INDEX && opt != OPT_CLUSTER && opt != OPT_BROKER
        && opt != OPT_BIND && opt != OPT_JOB && opt != OPT_LOCAL && opt != OPT_SUPERVISE
        && opt != OPT_HOST && opt != 'h' && opt != OPT_REPLAY && opt != OPT_TRAIN_AND_EVAL
        && opt != OPT_WORKERS && opt != OPT_PS && opt != OPT_EVALUATORS;   //  job: "roles"
}

//  Sets one option; `what` names it in errors ("--batch-size" or "job.json:
//  batch_size"). Exits 2 on a bad value.
static void
s_option (int opt, const char *arg, const char *what)
{
    switch (opt) {
        case OPT_MODEL: S.model = arg; break;
        case OPT_HIDDEN: S.hidden = arg, S.hidden_given = 1; break;
        case OPT_DATASET_DIR: S.dataset_dir = arg; break;
        case OPT_BATCH: S.batch_size = (int) s_int_arg (what, arg, 1, 65536); break;
        case OPT_SHUFFLE:
            S.shuffle_buffer = (int) s_int_arg (what, arg, 0, INT32_MAX);
            break;
        case OPT_OPTIMIZER: S.optimizer = arg; break;
        case OPT_LR: S.learning_rate = s_float_arg (what, arg, 0, 0); break;
        case OPT_MAX_STEPS: S.max_steps = s_int_arg (what, arg, 1, INT64_MAX); break;
        case OPT_EPOCHS: S.epochs = s_int_arg (what, arg, 1, 100000); break;
        case OPT_NO_EVAL: S.eval = 0; break;
        case OPT_MODEL_DIR: S.config.model_dir = arg; break;
        case OPT_CKPT_STEPS:
            S.config.save_checkpoints_steps = s_int_arg (what, arg,
                                                       0, INT64_MAX);
            break;
        case OPT_CKPT_SECS:
            S.config.save_checkpoints_secs = s_float_arg (what, arg, 0, 1);
            break;
        case OPT_KEEP:
            S.config.keep_checkpoint_max = (int) s_int_arg (what, arg,
                                                          0, 1000000);
            break;
        case OPT_LOG_STEPS:
            S.config.log_step_count_steps = s_int_arg (what, arg,
                                                     0, INT64_MAX);
            break;
        case OPT_SUMMARY_STEPS:
            S.config.save_summary_steps = s_int_arg (what, arg, 0,
                                                   INT64_MAX);
            break;
        case OPT_SEED: S.config.seed = (uint64_t) s_int_arg (what, arg, 0, INT64_MAX); break;
        case OPT_THREADS:
            S.config.threads = (int) s_int_arg (what, arg, 1, 64);
            S.threads_given = 1;
            break;
        case OPT_ROLE: S.role = arg; break;
        case OPT_INDEX:
            S.task_index = (int) s_int_arg (what, arg, 0, 1 << 20);
            S.index_given = 1;
            break;
        case OPT_CLUSTER: S.cluster_file = arg; break;
        case OPT_TIMEOUT: S.timeout_secs = s_float_arg (what, arg, 0, 0); break;
        case OPT_TRAIN_AND_EVAL: S.train_and_evaluate = 1; break;
        case OPT_EVAL_DATA: S.eval_data = arg; break;
        case OPT_EVAL_NAME: S.eval_spec.name = arg; break;
        case OPT_EVAL_STEPS:
            S.eval_spec.steps = s_int_arg (what, arg, 1, INT64_MAX);
            break;
        case OPT_START_DELAY:
            S.eval_spec.start_delay_secs = s_float_arg (what, arg, 0, 1);
            break;
        case OPT_THROTTLE:
            S.eval_spec.throttle_secs = s_float_arg (what, arg, 0, 1);
            break;
        case OPT_REPLAY: S.eval_spec.replay = 1; break;
        case OPT_HEARTBEAT_IVL:
            S.heartbeat_ivl_ms = s_int_arg (what, arg, 10, 3600000);
            break;
        case OPT_HEARTBEAT_LIVENESS:
            S.heartbeat_liveness = s_int_arg (what, arg, 1, 1000);
            break;
        case OPT_BROKER: S.broker = arg; break;
        case OPT_BIND: S.bind = arg; break;
        case OPT_JOB: S.job_file = arg; break;
        case OPT_LOCAL: S.local = 1; break;
        case OPT_SUPERVISE: S.supervise = 1; break;
        case OPT_MAX_RESTARTS: S.max_restarts = (int) s_int_arg (what, arg, 0, 1000000); break;
        case OPT_HOST: S.host = arg; break;
        case OPT_WORKERS:
            S.counts [ZA_TASK_WORKER] = (int) s_int_arg (what, arg, 0, ZA_BROKER_MAX_TASKS - 1);
            break;
        case OPT_PS: S.counts [ZA_TASK_PS] = (int) s_int_arg (what, arg, 1, ZA_ROLE_MAX_PS); break;
        case OPT_EVALUATORS:
            S.counts [ZA_TASK_EVALUATOR] = (int) s_int_arg (what, arg, 0, 1);
            break;
        case OPT_STRATEGY:
            if (strcmp (arg, "ps-async") != 0) {
                fprintf (stderr, "zactor-run: %s '%s': only ps-async is built so far "
                         "(ps-sync and allreduce are planned)\n", what, arg);
                exit (EXIT_USAGE);
            }
            break;
        default: break;
    }
}

//  Applies the command line; with `record`, also keeps the job keys given.
static void
s_parse_cli (int argc, char **argv, int record)
{
    optind = 0;                         //  GNU: start over (this runs more than once)
    int opt, at;
    while ((opt = getopt_long (argc, argv, "h", s_options, &at)) != -1) {
        if (opt == 'h') {
            s_usage (stdout);
            exit (0);
        }
        if (opt == '?' || opt == ':') {
            fprintf (stderr, "Try 'zactor-run --help'.\n");
            exit (EXIT_USAGE);
        }
        char what [80];
        snprintf (what, sizeof what, "--%s", s_options [at].name);
        s_option (opt, optarg, what);
        if (record && s_is_job_key (opt)) {
            char key [64];
            snprintf (key, sizeof key, "%s", s_options [at].name);
            for (char *c = key; *c; c++)
                if (*c == '-')
                    *c = '_';
            json_object_set_new (S.given, key, optarg? json_string (optarg): json_true ());
        }
    }
    if (optind < argc) {
        fprintf (stderr, "zactor-run: unexpected argument '%s'\nTry 'zactor-run --help'.\n",
                 argv [optind]);
        exit (EXIT_USAGE);
    }
}

//  A job value as the text its flag would take, kept until exit; NULL for a
//  false flag. Exits 2 on a value no flag takes.
static const char *
s_job_value (json_t *value, int has_arg, const char *what)
{
    char text [1024] = "";
    if (json_is_string (value))
        snprintf (text, sizeof text, "%s", json_string_value (value));
    else
    if (json_is_integer (value))
        snprintf (text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value (value));
    else
    if (json_is_real (value))
        snprintf (text, sizeof text, "%.17g", json_real_value (value));
    else
    if (json_is_boolean (value) && !has_arg) {
        if (json_is_false (value))
            return NULL;
    }
    else
    if (json_is_array (value) && has_arg) {
        size_t i;
        json_t *item;
        json_array_foreach (value, i, item) {
            if (!json_is_integer (item))
                goto bad;
            size_t used = strlen (text);
            snprintf (text + used, sizeof text - used, "%s%" JSON_INTEGER_FORMAT,
                      i? ",": "", json_integer_value (item));
        }
    }
    else
        goto bad;
    if (strlen (text) >= sizeof text - 1) {
        fprintf (stderr, "zactor-run: %s: the value is longer than %zu bytes\n", what,
                 sizeof text - 2);
        exit (EXIT_USAGE);
    }
    zlist_append (S.strings, text);
    return (const char *) zlist_tail (S.strings);
bad:
    fprintf (stderr, "zactor-run: %s: %s\n", what, has_arg
             ? "wants a string, a number or a list of integers" : "wants true or false");
    exit (EXIT_USAGE);
}

static void
s_job_roles (json_t *roles, const char *source)
{
    const char *kind;
    json_t *count;
    json_object_foreach (roles, kind, count) {
        char what [300];
        snprintf (what, sizeof what, "%s: roles.%s", source, kind);
        int max [] = {1, ZA_BROKER_MAX_TASKS - 1, ZA_ROLE_MAX_PS, 1};
        int found = -1;
        for (int k = 0; k < ZA_BROKER_ROLE_KINDS; k++)
            if (streq (kind, za_task_type_name ((za_task_type_t) k)))
                found = k;
        if (found < 0 || !json_is_integer (count)) {
            fprintf (stderr, "zactor-run: %s: roles are chief, worker, ps and evaluator, each "
                     "an integer count\n", what);
            exit (EXIT_USAGE);
        }
        json_int_t n = json_integer_value (count);
        int min = found == ZA_TASK_CHIEF || found == ZA_TASK_PS? 1: 0;
        if (n < min || n > max [found]) {
            fprintf (stderr, "zactor-run: %s is %" JSON_INTEGER_FORMAT ": %d to %d\n", what,
                     n, min, max [found]);
            exit (EXIT_USAGE);
        }
        S.counts [found] = (int) n;
    }
}

//  The index in s_options of a job key (its flag's name with '_' for '-'),
//  or -1 when no job key has that name.
static int
s_option_index_of_key (const char *key)
{
    char name [64];
    snprintf (name, sizeof name, "%s", key);
    for (char *c = name; *c; c++)
        if (*c == '_')
            *c = '-';
    for (int i = 0; s_options [i].name; i++)
        if (streq (s_options [i].name, name) && s_is_job_key (s_options [i].val))
            return i;
    return -1;
}

static int
s_option_of_key (const char *key)
{
    int i = s_option_index_of_key (key);
    return i < 0? 0: s_options [i].val;
}

//  Applies a job object: keys are flag names with '_'; an object value is a
//  section (run_config, train_spec, eval_spec, data...) of more keys, except
//  "roles", the counts. Exits 2 naming the key on any mistake.
static void
s_apply_job_object (json_t *object, const char *section, const char *source)
{
    const char *key;
    json_t *value;
    json_object_foreach (object, key, value) {
        char what [300];
        snprintf (what, sizeof what, "%s: %s%s%s", source, section? section: "",
                  section? ".": "", key);
        if (!section && streq (key, "roles") && json_is_object (value)) {
            s_job_roles (value, source);
            continue;
        }
        if (!section && json_is_object (value)) {
            s_apply_job_object (value, key, source);
            continue;
        }
        int found = s_option_index_of_key (key);
        if (found < 0) {
            fprintf (stderr, "zactor-run: %s: not a job key (job keys are the flags of "
                     "'zactor-run --help' with '_' for '-')\n", what);
            exit (EXIT_USAGE);
        }
        const char *text = s_job_value (value, s_options [found].has_arg != no_argument, what);
        if (text)
            s_option (s_options [found].val, text, what);
    }
}

//  Applies a parsed job (NULL: it did not parse, `error` says why) and
//  returns it; exits 2 on a mistake. `source` names it in messages.
static json_t *
s_apply_job (json_t *job, const json_error_t *error, const char *source)
{
    if (!job || !json_is_object (job)) {
        if (job)
            fprintf (stderr, "zactor-run: %s: the job is not a JSON object\n", source);
        else
        if (error->line > 0)
            fprintf (stderr, "zactor-run: %s: line %d column %d: %s\n", source, error->line,
                     error->column, error->text);
        else
            fprintf (stderr, "zactor-run: %s: %s\n", source, error->text);
        json_decref (job);
        exit (EXIT_USAGE);
    }
    s_apply_job_object (job, NULL, source);
    return job;
}

//  Reads and applies the job file into S.job; exits 2 on a mistake.
static void
s_read_job_file (const char *path)
{
    json_error_t error;
    json_t *job = s_apply_job (json_load_file (path, 0, &error), &error, path);
    json_decref (S.job);
    S.job = job;
}

//  The job every task of a cluster runs, as JSON text (caller frees): the
//  job file, `defaults` where it is silent (may be NULL), the flags given on
//  top, the counts as "roles" and max_steps as worked out.
static char *
s_cluster_job (json_t *defaults)
{
    json_t *job = defaults? json_deep_copy (defaults): json_object ();
    json_object_update (job, S.job);
    json_object_update (job, S.given);
    json_object_set_new (job, "max_steps", json_integer (S.max_steps));
    json_object_set_new (job, "roles", json_pack ("{s:i, s:i, s:i, s:i}",
                         "chief", S.counts [ZA_TASK_CHIEF], "worker", S.counts [ZA_TASK_WORKER],
                         "ps", S.counts [ZA_TASK_PS], "evaluator", S.counts [ZA_TASK_EVALUATOR]));
    char *text = json_dumps (job, JSON_INDENT (2));
    json_decref (job);
    return text;
}

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

//  Where this task is in its cluster, from TF_CONFIG or from the broker.
typedef struct {
    za_task_type_t type;
    int index;
    int is_chief;
    int worker_index;                   //  data shard: chief 0, worker i -> i + 1
    int num_workers;
    int ps_count;
    char *ps_endpoints [ZA_ROLE_MAX_PS];
    char bind [ZA_CLUSTER_ENDPOINT_MAX];
} s_place_t;

static void
s_place_free (s_place_t *place)
{
    for (int p = 0; p < ZA_ROLE_MAX_PS; p++)
        free (place->ps_endpoints [p]);
    memset (place, 0, sizeof *place);
}

static void
s_place_from_cluster (s_place_t *place, const za_cluster_t *cluster)
{
    memset (place, 0, sizeof *place);
    place->type = cluster->task_type;
    place->index = cluster->task_index;
    place->is_chief = cluster->is_chief;
    place->worker_index = cluster->worker_index;
    place->num_workers = cluster->num_workers;
    place->ps_count = cluster->ps_count;
    for (int p = 0; p < cluster->ps_count && p < ZA_ROLE_MAX_PS; p++)
        place->ps_endpoints [p] = za_cluster_ps_endpoint (cluster, p);
    snprintf (place->bind, sizeof place->bind, "%s", cluster->bind_endpoint);
}

//  Runs this process's training role (ps, worker or chief). Returns the
//  exit status. `client` (may be NULL) is told the ps's endpoint.
static int
s_run_role (const s_place_t *place, za_role_config_t *role, zactor_t *client)
{
    //  Received frames of a few hundred KB are freed every step: keep that
    //  memory in the heap instead of mapping and faulting it in each time.
    mallopt (M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES);
    mallopt (M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES);
    role->ps_count = place->ps_count;
    role->num_workers = place->num_workers;
    for (int p = 0; p < place->ps_count && p < ZA_ROLE_MAX_PS; p++)
        role->ps_endpoints [p] = place->ps_endpoints [p];
    role->is_chief = place->is_chief;
    role->worker_index = place->worker_index;
    role->ps_index = place->type == ZA_TASK_PS? place->index: -1;
    role->bind_endpoint = place->bind;
    zactor_t *actor = zactor_new (place->type == ZA_TASK_PS? za_ps_actor: za_worker_actor,
                                  role);
    if (actor && client && place->type == ZA_TASK_PS)
        zstr_sendx (client, "ENDPOINT", place->bind, NULL);
    int rc = actor? za_role_wait (actor, 0, NULL, NULL, NULL): -1;
    zactor_destroy (&actor);
    return rc == 0? 0: 1;
}

//  The data, the model and max_steps: what every kind of process needs.
typedef struct {
    za_dataset_t *train, *test;
    za_stack_spec_t spec;
    za_optim_config_t optim;
    za_optimizer_t kind;
} s_work_t;

static void
s_work_free (s_work_t *work)
{
    za_dataset_destroy (&work->train);
    za_dataset_destroy (&work->test);
}

//  Checks the model and the optimizer, loads the data (the test set when
//  `need_test`) and works out max_steps. Returns 0, or an exit status.
static int
s_prepare (s_work_t *work, int need_test)
{
    memset (work, 0, sizeof *work);
    if (za_optim_parse (S.optimizer, &work->kind))
        return EXIT_USAGE;
    work->optim = za_optim_config_default (work->kind);
    if (S.learning_rate > 0)
        work->optim.learning_rate = (float) S.learning_rate;
    //  A layer stack given as text is checked before any data is read.
    const char *model = S.model;
    int premade = !strcmp (model, "cnn") || !strcmp (model, "dnn") || !strcmp (model, "linear");
    if (!premade && za_stack_parse (model, &work->spec))
        return EXIT_USAGE;
    if (S.hidden_given && strcmp (model, "dnn") != 0) {
        fprintf (stderr, "zactor-run: --hidden-units applies to --model dnn only\n");
        return EXIT_USAGE;
    }
    int units [ZA_MAX_LAYERS], unit_count = 0;
    if (strcmp (model, "dnn") == 0) {
        char list [256];
        if (strlen (S.hidden) >= sizeof list) {
            fprintf (stderr, "zactor-run: --hidden-units list is too long\n");
            return EXIT_USAGE;
        }
        snprintf (list, sizeof list, "%s", S.hidden);
        for (char *tok = strtok (list, ","); tok; tok = strtok (NULL, ",")) {
            if (unit_count >= ZA_MAX_LAYERS - 2) {
                fprintf (stderr, "zactor-run: --hidden-units: at most %d layers\n",
                         ZA_MAX_LAYERS - 2);
                return EXIT_USAGE;
            }
            units [unit_count++] = (int) s_int_arg ("--hidden-units", tok, 1, 1 << 20);
        }
    }
    work->train = za_dataset_load_dir (S.dataset_dir, "train");
    work->test = work->train && need_test
               ? za_dataset_load_dir (S.eval_data? S.eval_data: S.dataset_dir, "t10k"): NULL;
    if (!work->train || (need_test && !work->test)) {
        fprintf (stderr, "zactor-run: cannot read the data set in '%s' (on Debian: "
                 "apt-get install dataset-fashion-mnist, or give --dataset-dir)\n",
                 S.eval_data && work->train? S.eval_data: S.dataset_dir);
        s_work_free (work);
        return 1;
    }
    //  The premade classifiers take their class count from the data.
    za_dataset_t *train = work->train, *test = work->test;
    int n_classes = train->n_classes > 2? train->n_classes: 2;
    int bad_model = 0;
    if (strcmp (model, "cnn") == 0)
        bad_model = za_stack_parse (ZA_SEED_CNN, &work->spec);
    else
    if (strcmp (model, "dnn") == 0)
        bad_model = za_dnn_classifier_spec (&work->spec, units, unit_count, n_classes);
    else
    if (strcmp (model, "linear") == 0)
        bad_model = za_linear_classifier_spec (&work->spec, n_classes);
    if (bad_model) {
        s_work_free (work);
        return EXIT_USAGE;
    }
    int model_classes = work->spec.layers [work->spec.count - 1].units;
    if (train->n_classes > model_classes || (test && test->n_classes > model_classes)) {
        fprintf (stderr, "zactor-run: the data has labels up to %d but the model's last "
                 "layer has %d units: give a model ending in dense(%d)\n",
                 (train->n_classes > (test? test->n_classes: 0)? train->n_classes
                                                                : test->n_classes) - 1,
                 model_classes, train->n_classes);
        s_work_free (work);
        return EXIT_USAGE;
    }
    if (S.max_steps == 0)
        S.max_steps = (S.epochs * train->count + S.batch_size - 1) / S.batch_size;
    return 0;
}

//  This machine's name as other hosts reach it; 127.0.0.1 when the broker
//  is on loopback (everything is on this machine).
static void
s_my_host (char *host, size_t size)
{
    if (S.host)
        snprintf (host, size, "%s", S.host);
    else
    if (!S.broker || strstr (S.broker, "127.0.0.1") || strstr (S.broker, "localhost")
        || strncmp (S.broker, "ipc://", 6) == 0 || strncmp (S.broker, "inproc://", 9) == 0)
        snprintf (host, size, "127.0.0.1");
    else
    if (gethostname (host, size - 1))
        snprintf (host, size, "localhost");
}

//  A port nobody uses now, for a ps that had none: the kernel picks one
//  (libzmq's own "*", not CZMQ's, whose "!" repeats in processes started in
//  the same second), we read it and let it go.
static int
s_free_endpoint (const char *host, char *endpoint, size_t size)
{
    zsock_t *probe = zsock_new (ZMQ_ROUTER);
    int local = streq (host, "127.0.0.1");
    char bound [ZA_CLUSTER_ENDPOINT_MAX] = "";
    size_t bound_size = sizeof bound;
    int rc = probe? zmq_bind (zsock_resolve (probe), local? "tcp://127.0.0.1:*": "tcp://*:*"): -1;
    if (rc == 0)
        rc = zmq_getsockopt (zsock_resolve (probe), ZMQ_LAST_ENDPOINT, bound, &bound_size);
    zsock_destroy (&probe);
    const char *port = strrchr (bound, ':');
    if (rc || !port)
        return za_error ("cannot find a free tcp port on %s", host);
    snprintf (endpoint, size, "tcp://%s%s", host, port);
    return 0;
}

//  Runs one task: the evaluator (is_evaluator), a training role of a cluster
//  (place->ps_count > 0), or training in this process. `stats` and `client`
//  (may be NULL) connect it to a broker. Returns the exit status.
static int
s_run_task (const s_place_t *place, int is_evaluator, za_role_stats_t *stats,
            zactor_t *client)
{
    int in_cluster = place->ps_count > 0;
    s_work_t work;
    int rc = s_prepare (&work, S.eval || S.train_and_evaluate || is_evaluator);
    if (rc)
        return rc;
    za_dataset_t *train = work.train, *test = work.test;
    za_stack_spec_t *spec = &work.spec;
    za_run_config_t config = S.config;
    int64_t max_steps = S.max_steps;
    s_inputs_t inputs = {
        .train = train,
        .test = test,
        .batch_size = S.batch_size,
        .shuffle_buffer = S.shuffle_buffer < 0? (int) train->count: S.shuffle_buffer,
        .seed = config.seed,
    };
    za_input_shape_t shape = {train->height, train->width, train->channels};
    za_evaluator_config_t eval_spec = S.eval_spec;
    eval_spec.model_fn = za_stack_model_fn ();
    eval_spec.params = spec;
    eval_spec.input = shape;
    eval_spec.model_dir = config.model_dir;
    eval_spec.data = test;
    eval_spec.max_steps = max_steps;
    eval_spec.threads = config.threads;
    eval_spec.stats = stats;
    if (is_evaluator) {
        za_info ("evaluator: %s '%s' (start delay %g s, throttle %g s, until step %" PRId64
                 "), model %s", eval_spec.replay? "replaying": "following", config.model_dir,
                 eval_spec.start_delay_secs, eval_spec.throttle_secs, max_steps, spec->text);
        int evaluations = 0;
        int eval_rc = za_evaluator_run (&eval_spec, NULL, &evaluations);
        s_work_free (&work);
        return eval_rc == 0? 0: 1;
    }
    int distributed_done = 0;
    int eval = S.eval;
    if (in_cluster) {
        za_role_config_t role_config;
        za_role_config_init (&role_config);
        role_config.model_fn = za_stack_model_fn ();
        role_config.params = spec;
        role_config.input = shape;
        role_config.optim = work.optim;
        role_config.run = config;
        role_config.max_steps = max_steps;
        role_config.batch_size = S.batch_size;
        role_config.shuffle_buffer = inputs.shuffle_buffer;
        role_config.timeout_secs = S.timeout_secs;
        role_config.heartbeat_ivl_secs = s_heartbeat_ivl_secs ();
        role_config.heartbeat_liveness = (int) S.heartbeat_liveness;
        role_config.train = train;
        role_config.stats = stats;
        za_info ("%s %d of the cluster (%d workers, %d ps), model %s, %d threads",
                 za_task_type_name (place->type), place->index, place->num_workers,
                 place->ps_count, spec->text, config.threads);
        int role_rc = s_run_role (place, &role_config, client);
        distributed_done = 1;
        if (role_rc || !eval) {
            s_work_free (&work);
            return role_rc;
        }
    }
    za_estimator_t *estimator = za_estimator_new (za_stack_model_fn (), spec, shape,
                                                  &work.optim, &config);
    inputs.estimator = estimator;
    rc = estimator? 0: 1;
    if (!rc && !distributed_done) {
        za_info ("model %s", spec->text);
        za_info ("%s lr %g, batch %d, %" PRId64 " steps (%.2f epochs of %" PRId64
                 " examples), %d threads, model_dir %s", za_optim_name (work.kind),
                 (double) work.optim.learning_rate, S.batch_size, max_steps,
                 (double) max_steps * S.batch_size / (double) train->count, train->count,
                 config.threads, config.model_dir);
        double start = za_clock_mono ();
        if (S.train_and_evaluate) {
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
    s_work_free (&work);
    return rc;
}

//  The program's own path, for the processes a broker starts.
static void
s_self_exe (char *path, size_t size, const char *argv0)
{
    ssize_t n = readlink ("/proc/self/exe", path, size - 1);
    if (n > 0)
        path [n] = 0;
    else
        snprintf (path, size, "%s", argv0);
}

//  --role broker: the registry (and with --supervise, the supervisor) of a
//  job's tasks, until every task is done.
static int
s_run_broker (const char *argv0)
{
    if (!S.bind) {
        fprintf (stderr, "zactor-run: --role broker needs --bind ENDPOINT (e.g. tcp://*:5555)\n");
        return EXIT_USAGE;
    }
    s_work_t work;
    int rc = s_prepare (&work, 0);
    if (rc)
        return rc;
    s_work_free (&work);
    char *job_text = s_cluster_job (NULL);
    char exe [4096], connect [ZA_CLUSTER_ENDPOINT_MAX];
    s_self_exe (exe, sizeof exe, argv0);
    //  Roles it starts reach it on loopback when it binds every interface.
    snprintf (connect, sizeof connect, "%s", S.bind);
    char *star = strstr (connect, "://*:");
    if (star)
        snprintf (star, sizeof connect - (size_t) (star - connect), "://127.0.0.1:%s",
                  strstr (S.bind, "://*:") + 5);
    char log_dir [4096];
    snprintf (log_dir, sizeof log_dir, "%s/logs", S.config.model_dir);
    if (S.supervise && za_mkdirs (log_dir)) {
        fprintf (stderr, "zactor-run: cannot create %s\n", log_dir);
        free (job_text);
        return 1;
    }
    za_broker_config_t config;
    za_broker_config_init (&config);
    config.bind = S.bind;
    config.connect = connect;
    config.job_text = job_text;
    memcpy (config.counts, S.counts, sizeof config.counts);
    config.model_dir = S.config.model_dir;
    config.max_steps = S.max_steps;
    config.heartbeat_ivl_secs = s_heartbeat_ivl_secs ();
    config.heartbeat_liveness = (int) S.heartbeat_liveness;
    config.supervise = S.supervise;
    config.exe = exe;
    config.log_dir = log_dir;
    config.max_restarts = S.max_restarts;
    const char *restarts = getenv ("ZA_RESTARTS");
    config.restarts = restarts? atoi (restarts): 0;
    config.restart_cause = getenv ("ZA_RESTART_CAUSE");
    za_mkdirs (S.config.model_dir);
    za_info ("broker: on %s for %d chief, %d workers, %d ps, %d evaluator, until step %"
             PRId64 "%s", S.bind, S.counts [0], S.counts [1], S.counts [2], S.counts [3],
             S.max_steps, S.supervise? ", supervising": "");
    zactor_t *broker = zactor_new (za_broker_actor, &config);
    char *done = NULL, *code = NULL;
    rc = 1;
    if (broker && zstr_recvx (broker, &done, &code, NULL) == 2 && streq (done, "DONE"))
        rc = atoi (code);
    zstr_free (&done);
    zstr_free (&code);
    zactor_destroy (&broker);
    free (job_text);
    return zsys_interrupted? 130: rc;
}

//  --broker ADDR: register, take the job and the place the broker gives,
//  then run the task while the client reports to the broker.
static int
s_run_with_broker (int argc, char **argv)
{
    const char *role = S.role;
    za_task_type_t type = ZA_TASK_CHIEF;
    int known = 0;
    for (int k = 0; k < ZA_BROKER_ROLE_KINDS; k++)
        if (role && streq (role, za_task_type_name ((za_task_type_t) k)))
            type = (za_task_type_t) k, known = 1;
    if (!known) {
        fprintf (stderr, "zactor-run: --broker needs --role chief, worker, ps or evaluator\n");
        return EXIT_USAGE;
    }
    int index_given = S.index_given;
    char host [256];
    s_my_host (host, sizeof host);
    static za_role_stats_t stats;
    za_role_stats_init (&stats);
    za_broker_client_config_t client_config = {
        .broker = S.broker, .role = role, .index = index_given? S.task_index: -1,
        .host = host, .stats = &stats,
        .heartbeat_ivl_secs = s_heartbeat_ivl_secs (),
        .heartbeat_liveness = (int) S.heartbeat_liveness,
        .timeout_secs = S.timeout_secs,
    };
    const char *restarts = getenv ("ZA_RESTARTS");
    client_config.restarts = restarts? atoi (restarts): 0;
    zactor_t *client = zactor_new (za_broker_client_actor, &client_config);
    if (!client)
        return 1;
    char *what = NULL, *index = NULL, *job = NULL, *endpoint = NULL;
    int rc = 1;
    if (zstr_recvx (client, &what, &index, &job, &endpoint, NULL) < 1 || zsys_interrupted)
        ;
    else
    if (streq (what, "FAILED"))
        za_error ("%s: %s", role, index? index: "the broker failed");
    else
    if (streq (what, "WELCOME") && job) {
        json_error_t error;
        json_decref (s_apply_job (json_loads (job, 0, &error), &error, "the broker's job"));
        s_parse_cli (argc, argv, 0);
        S.task_index = atoi (index);
        rc = 0;
    }
    zstr_free (&what);
    zstr_free (&index);
    zstr_free (&job);
    if (rc) {
        zstr_free (&endpoint);
        zactor_destroy (&client);
        return 1;
    }
    //  Processes on this machine share its cores.
    int tasks = 0;
    for (int k = 0; k < ZA_BROKER_ROLE_KINDS; k++)
        tasks += S.counts [k];
    if (!S.threads_given && streq (host, "127.0.0.1") && tasks > 0) {
        int share = S.config.threads / tasks;
        S.config.threads = share > 0? share: 1;
    }
    za_info ("%s %d: registered with the broker at %s", role, S.task_index, S.broker);
    s_place_t place;
    memset (&place, 0, sizeof place);
    place.type = type;
    place.index = S.task_index;
    place.is_chief = type == ZA_TASK_CHIEF;
    place.worker_index = type == ZA_TASK_CHIEF? 0: type == ZA_TASK_WORKER? S.task_index + 1: -1;
    place.num_workers = S.counts [ZA_TASK_CHIEF] + S.counts [ZA_TASK_WORKER];
    place.ps_count = S.counts [ZA_TASK_PS];
    if (type == ZA_TASK_PS) {
        if (endpoint && *endpoint)
            snprintf (place.bind, sizeof place.bind, "%s", endpoint);
        else
        if (s_free_endpoint (host, place.bind, sizeof place.bind)) {
            za_info ("%s", za_last_error ());
            rc = 1;
        }
    }
    zstr_free (&endpoint);
    if (!rc && (type == ZA_TASK_CHIEF || type == ZA_TASK_WORKER)) {
        //  Wait for every ps's endpoint.
        char *view_what = NULL, *view = NULL;
        rc = 1;
        if (zstr_recvx (client, &view_what, &view, NULL) == 2 && streq (view_what, "VIEW")) {
            json_t *json = json_loads (view, 0, NULL);
            json_t *ps = json_object_get (json, "ps");
            if (json_is_array (ps) && (int) json_array_size (ps) == place.ps_count) {
                rc = 0;
                for (int p = 0; p < place.ps_count; p++) {
                    const char *endpoint = json_string_value (json_array_get (ps, p));
                    if (!endpoint || !*endpoint)
                        rc = 1;
                    else
                        place.ps_endpoints [p] = strdup (endpoint);
                }
            }
            if (rc)
                za_error ("%s: the broker's view is not a list of %d ps endpoints", role,
                          place.ps_count);
            json_decref (json);
        }
        else
        if (view_what && streq (view_what, "FAILED"))
            za_error ("%s: %s", role, view? view: "the broker failed");
        zstr_free (&view_what);
        zstr_free (&view);
    }
    if (!rc) {
        //  Only the chief evaluates at the end, and only when no evaluator does.
        S.eval = S.eval && place.is_chief && S.counts [ZA_TASK_EVALUATOR] == 0;
        if (type == ZA_TASK_PS && place.ps_count < 1)
            rc = EXIT_USAGE;
        else
            rc = s_run_task (&place, type == ZA_TASK_EVALUATOR, &stats, client);
    }
    char code [16];
    snprintf (code, sizeof code, "%d", rc);
    zstr_sendx (client, "DONE", code, NULL);
    zactor_destroy (&client);
    s_place_free (&place);
    return rc;
}

//  --local: the defaults that make sense on one machine, unless the job or
//  the flags say otherwise: 10 epochs (asynchronous training needs more steps
//  than one process for the same accuracy), checkpoints every 1000 steps
//  (what a restarted ps can lose), and an evaluator that starts soon and
//  runs every 10 s.
static const char *s_local_defaults [][2] = {
    {"epochs", "10"},
    {"save_checkpoints_steps", "1000"},
    {"start_delay_secs", "5"},
    {"throttle_secs", "10"},
};
#define LOCAL_DEFAULTS (sizeof s_local_defaults / sizeof s_local_defaults [0])
#define LOCAL_TICK_MS 100
#define LOCAL_WATCH_SECS 1.0
#define LOCAL_LOG_SECS 10.0
#define LOCAL_BROKER_FIRST_SECS 30.0    //  a new broker has this long to first answer
#define LOCAL_BROKER_SILENT_SECS 10.0   //  at least this silence before a broker is hung
#define LOCAL_STOP_GRACE_SECS 10.0
#define LOCAL_MAX_GROUPS 1024

static int
s_job_has_key (json_t *job, const char *key)
{
    if (json_object_get (job, key))
        return 1;
    const char *section;
    json_t *value;
    json_object_foreach (job, section, value)
        if (json_is_object (value) && json_object_get (value, key))
            return 1;
    return 0;
}

static pid_t
s_spawn_broker (const char *exe, const char *bind, const char *job_path, const char *log,
                int restarts, const char *cause)
{
    char max_restarts [16], restarts_env [32], cause_env [300];
    snprintf (max_restarts, sizeof max_restarts, "%d", S.max_restarts);
    snprintf (restarts_env, sizeof restarts_env, "ZA_RESTARTS=%d", restarts);
    snprintf (cause_env, sizeof cause_env, "ZA_RESTART_CAUSE=%s", cause? cause: "");
    char *argv [] = {(char *) exe, "--role", "broker", "--bind", (char *) bind, "--job",
                     (char *) job_path, "--supervise", "--max-restarts", max_restarts, NULL};
    //  The broker leads a process group of its own, with the roles it starts:
    //  Ctrl-C reaches us alone, and we can stop every process of the job.
    const char *env [] = {restarts_env, cause_env, NULL};
    return za_broker_spawn (exe, argv, env, log, 1);
}

//  Stops every process of the job: each broker's process group (its roles
//  are in it), SIGTERM, then SIGKILL after a grace; reaps them all.
static void
s_stop_groups (const pid_t *groups, int count)
{
    for (int pass = 0; pass < 2; pass++) {
        int alive = 0;
        for (int g = 0; g < count; g++)
            if (killpg (groups [g], pass? SIGKILL: SIGTERM) == 0)
                alive++;
        double deadline = za_clock_mono () + LOCAL_STOP_GRACE_SECS;
        while (alive && za_clock_mono () < deadline) {
            while (waitpid (-1, NULL, WNOHANG) > 0)
                ;
            alive = 0;
            for (int g = 0; g < count; g++)
                alive += killpg (groups [g], 0) == 0;
            if (alive)
                zclock_sleep (50);
        }
        if (!alive)
            break;
    }
    while (waitpid (-1, NULL, WNOHANG) > 0)
        ;
}

//  "1:02:03" or "4:05".
static void
s_duration (double secs, char *text, size_t size)
{
    if (!(secs >= 0) || secs > 99 * 3600) {
        snprintf (text, size, "?");
        return;
    }
    int s = (int) (secs + 0.5);
    if (s >= 3600)
        snprintf (text, size, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf (text, size, "%d:%02d", s / 60, s % 60);
}

//  One line of progress from the broker's state.
static void
s_progress_line (json_t *state, char *line, size_t size, int bar)
{
    int64_t max_steps = json_integer_value (json_object_get (json_object_get (state, "job"),
                                                             "max_steps"));
    int64_t step = json_integer_value (json_object_get (state, "global_step"));
    double loss = 0, steps_per_sec = 0, examples_per_sec = 0, eval_accuracy = -1;
    int64_t eval_step = -1;
    int restarts = (int) json_integer_value (json_object_get (json_object_get (state, "broker"),
                                                              "restarts"));
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get (state, "roles"), i, row) {
        const char *role = json_string_value (json_object_get (row, "role"));
        restarts += (int) json_integer_value (json_object_get (row, "restarts"));
        if (!role)
            continue;
        if (streq (role, "chief")) {
            loss = json_number_value (json_object_get (row, "loss"));
            steps_per_sec = json_number_value (json_object_get (row, "steps_per_sec"));
        }
        if (streq (role, "chief") || streq (role, "worker"))
            examples_per_sec += json_number_value (json_object_get (row, "examples_per_sec"));
        if (streq (role, "evaluator") && json_is_integer (json_object_get (row, "eval_step"))) {
            eval_step = json_integer_value (json_object_get (row, "eval_step"));
            eval_accuracy = json_number_value (json_object_get (row, "eval_accuracy"));
        }
    }
    double fraction = max_steps > 0? (double) step / (double) max_steps: 0;
    if (fraction > 1)
        fraction = 1;
    char eta [32], eval [64] = "eval -";
    s_duration (steps_per_sec > 0? (double) (max_steps - step) / steps_per_sec: -1, eta,
                sizeof eta);
    if (eval_step >= 0)
        snprintf (eval, sizeof eval, "eval %.4f@%" PRId64, eval_accuracy, eval_step);
    char meter [32] = "";
    if (bar) {
        int filled = (int) (fraction * 20);
        meter [0] = '[';
        for (int c = 0; c < 20; c++)
            meter [1 + c] = c < filled? '#': '.';
        meter [21] = ']';
        meter [22] = ' ';
        meter [23] = 0;
    }
    snprintf (line, size, "%s%3.0f%% step %" PRId64 "/%" PRId64 "  loss %.4f  %.0f ex/s  %s  "
              "ETA %s  restarts %d", meter, 100 * fraction, step, max_steps, loss,
              examples_per_sec, eval, eta, restarts);
}

//  1 when the job file or the flags say `key`.
static int
s_said (const char *key)
{
    return s_job_has_key (S.job, key) || json_object_get (S.given, key) != NULL;
}

static int
s_run_local (const char *argv0)
{
    json_t *defaults = json_object ();
    for (size_t d = 0; d < LOCAL_DEFAULTS; d++) {
        const char *key = s_local_defaults [d][0];
        if (s_said (key) || (streq (key, "epochs") && s_said ("max_steps")))
            continue;
        json_object_set_new (defaults, key, json_string (s_local_defaults [d][1]));
        s_option (s_option_of_key (key), s_local_defaults [d][1], key);
    }
    s_work_t work;
    int rc = s_prepare (&work, 1);
    char *job = rc? NULL: s_cluster_job (defaults);
    json_decref (defaults);
    if (rc)
        return rc;
    s_work_free (&work);
    const char *model_dir = S.config.model_dir;
    char logs [4096], job_path [4200], log [4200], exe [4096], bind [ZA_CLUSTER_ENDPOINT_MAX];
    snprintf (logs, sizeof logs, "%s/logs", model_dir);
    snprintf (job_path, sizeof job_path, "%s/job.json", model_dir);
    snprintf (log, sizeof log, "%s/broker.log", logs);
    FILE *file = za_mkdirs (logs) == 0? fopen (job_path, "w"): NULL;
    int written = file && fputs (job, file) >= 0;
    if (file && fclose (file))
        written = 0;
    free (job);
    if (!written) {
        fprintf (stderr, "zactor-run: cannot write %s\n", job_path);
        return 1;
    }
    if (s_free_endpoint ("127.0.0.1", bind, sizeof bind)) {
        fprintf (stderr, "zactor-run: %s\n", za_last_error ());
        return 1;
    }
    s_self_exe (exe, sizeof exe, argv0);
    //  Orphans (roles whose broker died) come to us: we reap them.
    prctl (PR_SET_CHILD_SUBREAPER, 1);
    za_broker_config_t backoff;         //  the broker restarts as it restarts tasks
    za_broker_config_init (&backoff);
    int restarts = 0, group_count = 0;
    static pid_t groups [LOCAL_MAX_GROUPS];
    pid_t broker = s_spawn_broker (exe, bind, job_path, log, 0, NULL);
    if (broker > 0)
        groups [group_count++] = broker;
    if (broker < 0) {
        fprintf (stderr, "zactor-run: cannot start the broker (%s)\n", exe);
        return 1;
    }
    int tty = isatty (STDOUT_FILENO);
    printf ("zactor: %d chief, %d workers, %d ps, %d evaluator on this machine, until step %"
            PRId64 "\n  watch:  zactor-top --broker %s\n  logs:   %s\n",
            S.counts [ZA_TASK_CHIEF], S.counts [ZA_TASK_WORKER], S.counts [ZA_TASK_PS],
            S.counts [ZA_TASK_EVALUATOR], S.max_steps, bind, logs);
    fflush (stdout);
    zsock_t *watch = zsock_new (ZMQ_DEALER);
    zsock_set_sndtimeo (watch, 0);
    zsock_set_sndhwm (watch, 4);
    zsock_set_maxmsgsize (watch, ZA_WIRE_MAX_HEADER_BYTES + 1024);
    zsock_connect (watch, "%s", bind);
    za_wire_msg_t *msg = (za_wire_msg_t *) malloc (sizeof *msg);
    //  The broker answers a watch at once; one that misses several is hung.
    double silent_max = s_heartbeat_ivl_secs () * (double) S.heartbeat_liveness;
    if (silent_max < LOCAL_BROKER_SILENT_SECS)
        silent_max = LOCAL_BROKER_SILENT_SECS;
    double now = za_clock_mono (), broker_since = now, last_state = 0, last_watch = 0;
    double last_log = now, restart_at = 0;
    int done = 0, failures = 0;
    char line [512] = "", cause [256] = "";
    rc = 1;
    while (!done && msg) {
        if (zsys_interrupted) {
            rc = 130;
            break;
        }
        zmsg_t *reply = NULL;
        zpoller_t *poller = zpoller_new (watch, NULL);
        if (zpoller_wait (poller, LOCAL_TICK_MS))
            reply = zmsg_recv (watch);
        zpoller_destroy (&poller);
        now = za_clock_mono ();
        if (reply && za_wire_decode (reply, msg) == 0 && msg->op == ZA_OP_STATE && msg->body) {
            json_t *state = json_loadb (msg->body, msg->body_len, 0, NULL);
            if (state) {
                last_state = now;
                s_progress_line (state, line, sizeof line, tty);
                if (tty) {
                    printf ("\r\033[K%s", line);
                    fflush (stdout);
                }
                else
                if (now - last_log >= LOCAL_LOG_SECS) {
                    printf ("%s\n", line);
                    fflush (stdout);
                    last_log = now;
                }
            }
            json_decref (state);
        }
        zmsg_destroy (&reply);
        //  The broker: done, dead (restart it), or silent (kill it).
        int status;
        pid_t pid;
        while ((pid = waitpid (-1, &status, WNOHANG)) > 0) {
            if (pid != broker)
                continue;               //  an orphaned role, reaped
            broker = -1;
            if (WIFEXITED (status) && WEXITSTATUS (status) == 0) {
                done = 1;
                rc = 0;
                break;
            }
            char how [128];
            if (WIFEXITED (status))
                snprintf (how, sizeof how, "exit code %d", WEXITSTATUS (status));
            else
                snprintf (how, sizeof how, "killed by signal %d", WTERMSIG (status));
            if (*cause)
                snprintf (cause + strlen (cause), sizeof cause - strlen (cause), ", %s", how);
            else
                snprintf (cause, sizeof cause, "%s", how);
            if (WIFEXITED (status) && WEXITSTATUS (status) == 1) {
                //  The broker gave up on the job (a task beyond its restarts).
                done = 1;
                break;
            }
            if (restarts >= S.max_restarts) {
                fprintf (stderr, "\nzactor-run: the broker failed (%s) after %d restarts\n",
                         cause, restarts);
                done = 1;
                break;
            }
            restart_at = now + za_broker_backoff (&backoff, failures++);
        }
        if (done)
            break;
        if (broker < 0 && now >= restart_at) {
            restarts++;
            if (tty)
                printf ("\n");
            printf ("zactor: the broker stopped (%s); restart %d\n", cause, restarts);
            fflush (stdout);
            broker = s_spawn_broker (exe, bind, job_path, log, restarts, cause);
            if (broker > 0 && group_count < LOCAL_MAX_GROUPS)
                groups [group_count++] = broker;
            cause [0] = 0;
            broker_since = now;
            if (broker < 0) {
                fprintf (stderr, "zactor-run: cannot start the broker again\n");
                break;
            }
        }
        if (broker > 0 && now - (last_state > broker_since? last_state: broker_since)
                          > (last_state > broker_since? silent_max: LOCAL_BROKER_FIRST_SECS)) {
            snprintf (cause, sizeof cause, "silent for %.0f s", silent_max);
            kill (broker, SIGKILL);
            last_state = broker_since = now;
        }
        if (now - last_watch >= LOCAL_WATCH_SECS) {
            za_wire_msg_init (msg, ZA_OP_WATCH);
            za_wire_send (watch, NULL, msg, NULL);
            last_watch = now;
        }
    }
    if (*line)
        printf (tty? "\n": "%s\n", line);      //  the bar's last state ends its line
    zsock_destroy (&watch);
    free (msg);
    //  Whatever is left (nothing, after a job that ended well) is stopped.
    s_stop_groups (groups, group_count);
    if (rc == 130) {
        fprintf (stderr, "zactor-run: interrupted; every process of the job is stopped\n");
        return rc;
    }
    if (rc == 0) {
        rc = s_print_last_eval (model_dir, S.eval_spec.name, -1);
        char best_path [4200];
        snprintf (best_path, sizeof best_path, "%s/export/best/best.json", model_dir);
        json_t *best = json_load_file (best_path, 0, NULL);
        if (best)
            printf ("best evaluation %.4f at step %" JSON_INTEGER_FORMAT
                    ", kept in %s/export/best\n",
                    json_number_value (json_object_get (best, "accuracy")),
                    json_integer_value (json_object_get (best, "global_step")), model_dir);
        json_decref (best);
        printf ("checkpoints and TensorBoard events in %s, evaluations in %s/eval%s%s, "
                "events in %s/events.jsonl, logs in %s\n", model_dir, model_dir,
                S.eval_spec.name && *S.eval_spec.name? "_": "",
                S.eval_spec.name? S.eval_spec.name: "", model_dir, logs);
    }
    else
        fprintf (stderr, "zactor-run: the job failed: see %s/events.jsonl and %s\n", model_dir,
                 logs);
    return rc;
}

int
main (int argc, char **argv)
{
    s_settings_init ();
    atexit (s_settings_free);
    atexit (s_free_cluster);
    s_parse_cli (argc, argv, 1);
    //  Defaults, then the job file, then the flags again: the flags win.
    if (S.job_file) {
        s_read_job_file (S.job_file);
        s_parse_cli (argc, argv, 0);
    }
    const char *role = S.role;
    if (S.local || (role && streq (role, "broker")))
        return S.local? s_run_local (argv [0]): s_run_broker (argv [0]);
    if (S.broker)
        return s_run_with_broker (argc, argv);

    //  Everything that can be wrong with the arguments is found before any work.
    za_cluster_t *cluster = NULL;
    int is_evaluator = role && strcmp (role, "evaluator") == 0;
    if (S.eval_spec.replay && !is_evaluator) {
        fprintf (stderr, "zactor-run: --replay goes with --role evaluator\n");
        return EXIT_USAGE;
    }
    if (S.train_and_evaluate && (role || S.cluster_file)) {
        fprintf (stderr, "zactor-run: --train-and-evaluate is the local case; in a cluster "
                 "run an evaluator task (--role evaluator)\n");
        return EXIT_USAGE;
    }
    //  An evaluator needs no cluster (it follows model_dir); one given is checked.
    if (!is_evaluator && (role || S.cluster_file || getenv ("TF_CONFIG"))) {
        if (role && strcmp (role, "chief") && strcmp (role, "worker") && strcmp (role, "ps")) {
            fprintf (stderr, "zactor-run: --role %s: chief, worker, ps, evaluator or broker\n",
                     role);
            return EXIT_USAGE;
        }
        cluster = s_cluster = s_load_cluster (S.cluster_file, role, S.task_index);
        if (!cluster)
            return EXIT_USAGE;
        if (cluster->task_type == ZA_TASK_EVALUATOR)
            is_evaluator = 1;
        if (!S.threads_given) {
            int share = S.config.threads / za_cluster_tasks_on_my_host (cluster);
            S.config.threads = share > 0? share: 1;
        }
        //  Only the chief evaluates, once training is over.
        S.eval = S.eval && cluster->is_chief;
    }
    else
    if (is_evaluator && (S.cluster_file || getenv ("TF_CONFIG"))) {
        cluster = s_cluster = s_load_cluster (S.cluster_file, role, S.task_index);
        if (!cluster)
            return EXIT_USAGE;
    }
    if (is_evaluator)
        S.eval = 1;
    s_place_t place;
    memset (&place, 0, sizeof place);
    if (cluster && !is_evaluator)
        s_place_from_cluster (&place, cluster);
    int rc = s_run_task (&place, is_evaluator, NULL, NULL);
    s_place_free (&place);
    return rc;
}
