/*  za_run.c: za_run_main: the options in, everything that can be wrong with
    them found before any work, then the one mode the command line asks for:
    the whole cluster here (--local), the broker, a task that joins a broker,
    a task of a static cluster, or training in this process.               */
#include "za/za_run.h"
#include "za_launcher.h"
#include "za_input_json.h"
#include "za_place.h"
#include "za_predict.h"
#include "za_serve.h"
#include "za/za_cluster.h"
#include "za/za_curve.h"
#include "za/za_preempt.h"
#include "za/za_role.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  --local's defaults, unless the job or the flags say otherwise: 10 epochs
//  (asynchronous training needs more steps than one process for the same
//  accuracy), checkpoints every 1000 steps (what a restarted ps can lose),
//  and an evaluator that starts soon and runs every 10 s.
static const char *const s_local_defaults [][2] = {
    {"epochs", "10"},
    {"save_checkpoints_steps", "1000"},
    {"start_delay_secs", "5"},
    {"throttle_secs", "10"},
};

static const char *s_about =
    "Trains a model on your images (--train-data: a folder of class folders of JPEG\n"
    "or PNG files, a file pattern, TFRecord files) or on MNIST-format IDX files\n"
    "(Fashion-MNIST by default), and evaluates it: in one process, as a whole\n"
    "supervised cluster on this machine (--local), or as one task of a cluster\n"
    "(--role, TF_CONFIG, --broker). The same program serves every role.\n"
    "`%s predict --model-dir DIR --data SPEC` writes a trained model's class and\n"
    "probabilities for each image; `serve --model-dir DIR` answers TensorFlow\n"
    "Serving's REST API (POST /v1/models/NAME:predict).";

static const char *s_epilogue =
    "\nOutput: a progress bar on a terminal (log lines otherwise), checkpoints\n"
    "MODEL_DIR/model.ckpt-STEP.safetensors, MODEL_DIR/metrics.jsonl, MODEL_DIR/eval/metrics.jsonl.\n"
    "Exit status: 0 done, 1 a run-time error, 2 bad arguments, 65 bad data,\n"
    "75 preempted (SIGTERM: a checkpoint was written, run the same command again\n"
    "to resume; --requeue-exit-code sets the code),\n"
    "130 interrupted.\n";

//  The readers of --help for `role` (0: everyone).
static unsigned
s_readers_of (const za_settings_t *s)
{
    if (s->local)
        return ZA_READ_LAUNCHER;
    if (!s->role)
        return 0;
    static const struct {
        const char *role;
        unsigned readers;
    } roles [] = {
        {"chief", ZA_READ_CHIEF}, {"worker", ZA_READ_WORKER}, {"ps", ZA_READ_PS},
        {"evaluator", ZA_READ_EVALUATOR}, {"broker", ZA_READ_BROKER},
    };
    for (size_t r = 0; r < sizeof roles / sizeof roles [0]; r++)
        if (streq (s->role, roles [r].role))
            return roles [r].readers;
    return 0;
}

static void
s_usage (const za_program_t *program, za_options_t *options, const za_settings_t *s)
{
    char about [2048];
    char ours [1024];
    snprintf (ours, sizeof ours, s_about, program->name);
    snprintf (about, sizeof about, "%s%s%s", program->about? program->about: ours,
              program->about? "": "",
              program->model_fn? "": "\nWith no options it trains the seed CNN of the "
              "TensorFlow Estimator tutorials\nin this process.");
    za_options_usage (options, stdout, about, s_readers_of (s));
    printf ("%s", s_epilogue);
}

//  1 when a tcp:// endpoint is not tcp://HOST:PORT with PORT 1..65535 or *
//  (libzmq takes 99999 as 99999 mod 65536).
static int
s_tcp_port_bad (const char *endpoint)
{
    char host [ZA_CLUSTER_ENDPOINT_MAX];
    int port;
    size_t length = strlen (endpoint);
    return !strncmp (endpoint, "tcp://", 6)
        && !(length > 2 && !strcmp (endpoint + length - 2, ":*"))
        && za_cluster_endpoint_split (endpoint, host, sizeof host, &port);
}

//  1 when `key` was given (by a job or a flag) another value than its
//  default: --print-settings's job gives every key, most at their defaults.
static int
s_changed (const za_options_t *options, const char *key)
{
    const za_option_t *option = za_options_find (options, key);
    if (!option || !za_options_given (options, key, ZA_FROM_LOCAL))
        return 0;
    char value [256];
    za_options_value_text (options, option, value, sizeof value);
    const char *fallback = za_options_default_text (options, option);
    if (!fallback)
        fallback = option->type == ZA_OPTION_FLAG? "false": "";
    if (option->type == ZA_OPTION_INT || option->type == ZA_OPTION_NUMBER
        || option->type == ZA_OPTION_REAL)
        return strtod (value, NULL) != strtod (fallback, NULL);
    return strcmp (value, fallback) != 0;
}

//  1 for a process that trains (or evaluates) alone, as s_run dispatches:
//  no --local, no task of a cluster (--role, --cluster, --broker, TF_CONFIG).
static int
s_single_process (const za_settings_t *s)
{
    return !s->local && !s->role && !s->cluster && !s->broker && !getenv ("TF_CONFIG")
        && !s->predict && !s->serve;
}

//  What can be wrong between options, found before any work. Returns 0, or
//  an exit status after one message.
static int
s_check (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    //  (An empty one trained to the end, then could not save.)
    if (s->run.model_dir && !*s->run.model_dir) {
        za_error ("--model-dir is empty: give the folder for checkpoints and metrics");
        return ZA_EXIT_USAGE;
    }
    if (s->replicas_to_aggregate > 0 && s->strategy != ZA_STRATEGY_PS_SYNC) {
        za_error ("--replicas-to-aggregate goes with --strategy ps-sync");
        return ZA_EXIT_USAGE;
    }
    if (s->local && s->replicas_to_aggregate > 1 + s->workers.min) {
        za_error ("--replicas-to-aggregate %" PRId64 ": the job has %" PRId64 " workers with "
                  "the chief", s->replicas_to_aggregate, 1 + s->workers.min);
        return ZA_EXIT_USAGE;
    }
    //  The all-reduce has no ps; the ps strategies need one.
    if (s->strategy == ZA_STRATEGY_ALLREDUCE) {
        if (s->ps > 0 && za_options_given (options, "ps", ZA_FROM_DEFAULT)) {
            za_error ("--strategy allreduce uses no ps: leave out --ps (or the job's "
                      "roles.ps)");
            return ZA_EXIT_USAGE;
        }
        s->ps = 0;
    }
    else
    if (s->ps < 1) {
        za_error ("--ps 0: --strategy %s needs at least one ps", za_strategy_name (s->strategy));
        return ZA_EXIT_USAGE;
    }
    if (s->requeue_exit_code == ZA_EXIT_DATA) {
        za_error ("--requeue-exit-code %d is the status of a task whose data is at fault: "
                  "pick another (the default is %d)", ZA_EXIT_DATA, ZA_EXIT_REQUEUE);
        return ZA_EXIT_USAGE;
    }
    if ((s->predict || s->serve) && (s->local || s->role || s->cluster || s->broker)) {
        za_error ("%s runs in this process: leave out --local, --role, --cluster "
                  "and --broker", s->serve? "serve": "predict");
        return ZA_EXIT_USAGE;
    }
    //  serve decodes and scales every model it loads as its training read
    //  images (the model dir's input.json): a flag of its own would not hold.
    static const char *const inputs [] = {"image-size", "channels", "preprocess",
                                          "class-names", "resize", "crop-to-aspect-ratio"};
    for (size_t i = 0; s->serve && i < sizeof inputs / sizeof inputs [0]; i++)
        if (za_options_given (options, inputs [i], ZA_FROM_JOB)) {
            za_error ("serve takes each model's input as its training read images (the model "
                      "dir's input.json): leave out --%s", inputs [i]);
            return ZA_EXIT_USAGE;
        }
    if (s->no_eval && s->train_and_evaluate) {
        za_error ("--no-eval and --train-and-evaluate: the one skips the evaluation, the other "
                  "evaluates as training goes; give one of them");
        return ZA_EXIT_USAGE;
    }
    //  (A job file's device is no reason to refuse: said, not used.)
    if (s->serve && s->device && strcmp (s->device, "cpu"))
        za_info ("warning: serve computes on the CPU: --device %s is not used (`%s predict "
                 "--device %s` predicts a set of images there)", s->device, program->name,
                 s->device);
    if (!s->predict && (s->data || s->checkpoint)) {
        za_error ("--data and --checkpoint go with `%s predict`; to train on images, "
                  "give --train-data", program->name);
        return ZA_EXIT_USAGE;
    }
    int is_evaluator = s->role && streq (s->role, "evaluator");
    if (s->eval.replay && !is_evaluator) {
        za_error ("--replay goes with --role evaluator");
        return ZA_EXIT_USAGE;
    }
    //  Other data's results beside the training's, not over them (eval/ and
    //  export/best are what the training's own evaluations made).
    if (s->eval.replay && za_options_given (options, "eval_data", ZA_FROM_JOB)
        && !(s->eval.name && *s->eval.name)) {
        za_error ("--replay --eval-data %s: give --eval-name NAME too, so that its results go "
                  "to eval_NAME/ beside the training's eval/ (and its best to export/best_NAME)",
                  s->eval_data);
        return ZA_EXIT_USAGE;
    }
    if (s->train_and_evaluate && (s->role || s->cluster || s->broker || s->local)) {
        za_error ("--train-and-evaluate is the local case; in a cluster run an evaluator "
                  "task (--role evaluator)");
        return ZA_EXIT_USAGE;
    }
    if (s->broker && s->local) {
        za_error ("--local starts its own broker: give --local or --broker, not both");
        return ZA_EXIT_USAGE;
    }
    if (s->local && (s->role || s->cluster || za_options_given (options, "index",
                                                                 ZA_FROM_DEFAULT))) {
        za_error ("--local starts every task itself: leave out --role, --index and --cluster "
                  "(or leave out --local to run one task of a cluster)");
        return ZA_EXIT_USAGE;
    }
    //  Settings another one makes moot (TensorFlow's RunConfig refuses the
    //  first; the others would be silently without effect).
    if (s->run.save_checkpoints_steps > 0 && s_changed (options, "save_checkpoints_secs")) {
        za_error ("--save-checkpoints-steps %" PRId64 " and --save-checkpoints-secs %g: give "
                  "one of them (as TensorFlow's RunConfig; steps 0 saves by the seconds)",
                  s->run.save_checkpoints_steps, s->run.save_checkpoints_secs);
        return ZA_EXIT_USAGE;
    }
    //  One process evaluates once, at the end (none with --no-eval), unless
    //  it trains and evaluates.
    int alone = s_single_process (s);
    static const char *const evaluating [][2] = {
        {"eval_metrics", "--eval-metrics"}, {"best_metric", "--best-metric"},
        {"export_onnx", "--export-onnx"}, {"eval_steps", "--eval-steps"}};
    for (size_t e = 0; alone && s->no_eval && e < sizeof evaluating / sizeof evaluating [0];
         e++)
        if (s_changed (options, evaluating [e][0])) {
            za_error ("--no-eval and %s: nothing is evaluated to apply it to",
                      evaluating [e][1]);
            return ZA_EXIT_USAGE;
        }
    static const char *const pacing [][2] = {
        {"throttle_secs", "--throttle-secs"}, {"start_delay_secs", "--start-delay-secs"}};
    for (int p = 0; alone && !s->train_and_evaluate && p < 2; p++)
        if (s_changed (options, pacing [p][0])) {
            za_error ("%s paces an evaluator that follows the training: give "
                      "--train-and-evaluate (or --local, or a cluster's evaluator)",
                      pacing [p][1]);
            return ZA_EXIT_USAGE;
        }
    if (!s->run.warm_start.from && (s->run.warm_start.vars || s->run.warm_start.rename)) {
        za_error ("--warm-start-%s goes with --warm-start-from (the checkpoint to take the "
                  "variables from)", s->run.warm_start.vars? "vars": "rename");
        return ZA_EXIT_USAGE;
    }
    //  Horovod's recipe scales --learning-rate; piecewise_constant's values
    //  are rates of their own, which it would leave as they are.
    if (s->elastic_batch == ZA_ELASTIC_SCALE_LR && s->lr_schedule
        && !strncmp (s->lr_schedule, "piecewise_constant", 18)
        && strchr ("( ", s->lr_schedule [18])) {
        za_error ("--elastic-batch scale-lr scales --learning-rate, which --lr-schedule "
                  "piecewise_constant does not use (its values are the rates): give a schedule "
                  "that decays --learning-rate (exponential_decay, cosine_decay, ...), or "
                  "--elastic-batch per-worker");
        return ZA_EXIT_USAGE;
    }
    //  Keras's image flags, with no images to apply them to.
    if (!s->train_data && !s->eval_data && !s->predict && !s->serve && !program->input_fn
        && (s->class_names || s->validation_split > 0)) {
        za_error ("%s applies to images (--train-data); the Fashion-MNIST files have their own "
                  "classes and test set", s->class_names? "--class-names": "--validation-split");
        return ZA_EXIT_USAGE;
    }
    //  The trace is written at the end, by this process alone or --local's:
    //  where it goes is checked now, not after the training.
    if (s->trace && !*s->trace) {
        za_error ("--trace is empty: give the file to write (trace.json)");
        return ZA_EXIT_USAGE;
    }
    if (s->trace && (s_single_process (s) || s->local
                     || (s->role && streq (s->role, "broker")))) {
        char dir [4096];
        const char *slash = strrchr (s->trace, '/');
        snprintf (dir, sizeof dir, "%.*s", slash? (int) (slash - s->trace) + 1: 1,
                  slash? s->trace: ".");
        if (access (dir, W_OK)) {
            za_error ("--trace %s: cannot write in %s: %s", s->trace, dir, strerror (errno));
            return ZA_EXIT_USAGE;
        }
    }
    const char *endpoints [2][2] = {{"--bind", s->bind}, {"--broker", s->broker}};
    for (int e = 0; e < 2; e++)
        if (endpoints [e][1] && s_tcp_port_bad (endpoints [e][1])) {
            za_error ("%s %s: give tcp://HOST:PORT, the port in 1..65535 (or *)",
                      endpoints [e][0], endpoints [e][1]);
            return ZA_EXIT_USAGE;
        }
    if (program->check && program->check (program->params, s))
        return ZA_EXIT_USAGE;
    if (s->bind && za_settings_bind_allowed (s, s->bind))
        return ZA_EXIT_USAGE;
    //  The metrics are plain HTTP (no CURVE): beyond loopback they are
    //  anyone's to read, with or without --certs.
    char metrics [300];
    snprintf (metrics, sizeof metrics, "tcp://%s", s->metrics_bind? s->metrics_bind: "");
    if (s->metrics_bind && !za_curve_loopback (metrics) && !s->insecure) {
        za_error ("--metrics-bind %s serves the job's state over plain HTTP beyond this "
                  "machine (--certs does not cover it): bind 127.0.0.1:PORT and scrape "
                  "through a tunnel, or give --insecure", s->metrics_bind);
        return ZA_EXIT_USAGE;
    }
    if (s->metrics_bind && !za_curve_loopback (metrics))
        za_info ("WARNING: --insecure: --metrics-bind %s serves the job's state to anyone "
                 "who can reach it", s->metrics_bind);
    return 0;
}

//  --certs DIR: CURVE from here on, with DIR made absolute for the
//  processes a broker starts (they may start elsewhere).
static int
s_use_certs (za_settings_t *s)
{
    static char path [PATH_MAX];
    if (!realpath (s->certs, path))
        return za_error ("--certs %s: %s; make the cluster's certificate with: zactor-run "
                         "keygen %s", s->certs, strerror (errno), s->certs);
    s->certs = path;
    return za_curve_use (path);
}

//  `zactor-run keygen DIR`: the cluster's certificate (za_curve.h).
static int
s_keygen (const za_program_t *program, int argc, char **argv)
{
    if (argc != 3 || streq (argv [2], "--help") || streq (argv [2], "-h")) {
        FILE *out = argc == 3? stdout: stderr;
        fprintf (out, "Usage: %s keygen DIR\n"
                 "Writes a new cluster certificate into DIR (made, owner-only, when missing):\n"
                 "DIR/%s and DIR/%s, mode 0600. Copy DIR to every host of\n"
                 "the cluster and start every process (and zactor-top) with --certs DIR:\n"
                 "every socket then uses CURVE, and a peer without the certificate gets\n"
                 "nothing. *.key files added to DIR later (public keys of other certificates)\n"
                 "are let in too. Refuses to overwrite a certificate.\n",
                 program->name, ZA_CURVE_PUBLIC_FILE, ZA_CURVE_SECRET_FILE);
        return argc == 3? 0: ZA_EXIT_USAGE;
    }
    if (za_curve_keygen (argv [2]))
        return 1;
    printf ("wrote %s/%s and %s/%s (owner-only)\n"
            "copy %s to every host of the cluster, then give every process --certs %s\n",
            argv [2], ZA_CURVE_PUBLIC_FILE, argv [2], ZA_CURVE_SECRET_FILE, argv [2], argv [2]);
    return 0;
}

//  SIGINT interrupts (zsys_interrupted, as CZMQ's own handler does);
//  SIGTERM asks for preemption where this process handles it (an elastic
//  worker's: to leave the job; za_preempt.h;
//  more of them are the same request: a job's processes may each get one
//  from the scheduler and one from their supervisor), and interrupts
//  otherwise.
static void
s_on_signal (int signal)
{
    if (signal == SIGTERM && za_preempt_handled ()) {
        if (za_preempt_leaves ())
            za_preempt_leave ();
        else
            za_preempt_request ();
        return;
    }
    zctx_interrupted = 1;
    zsys_interrupted = 1;
}

static int
s_run (const za_program_t *program, za_options_t *options, za_settings_t *s)
{
    //  After CZMQ's start, which installs its own handler.
    zsys_init ();
    zsys_handler_set (s_on_signal);
    if (s->predict)
        return za_predict_run (program, options, s);
    if (s->serve)
        return za_serve_run (s);
    if (s->local)
        return za_launcher_run_local (program, options, s);
    if (s->role && streq (s->role, "broker"))
        return za_launcher_run_broker (program, options, s);
    int joins = za_place_tf_config_broker (s);
    if (joins == ZA_EXIT_USAGE)
        return ZA_EXIT_USAGE;
    if (s->broker)
        return za_place_run_with_broker (program, options, s);
    if (s->role || s->cluster || getenv ("TF_CONFIG"))
        return za_place_run_in_cluster (program, options, s);
    za_task_t task;
    int rc = za_task_prepare (&task, program, options, s,
                              !s->no_eval || s->train_and_evaluate, 1);
    if (!rc)
        rc = za_task_run_single (&task);
    za_task_release (&task);
    return rc;
}

int
za_run_main (int argc, char **argv, const za_program_t *program)
{
    if (argc >= 2 && streq (argv [1], "keygen"))
        return s_keygen (program, argc, argv);
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    settings.params = program->params;
    unsigned hide = (program->model_fn? ZA_OPTION_STACK: 0)
                  | (program->input_fn? ZA_OPTION_IDX_INPUT: 0);
    za_options_t *options = za_options_new (program->name, program->options, &settings, hide);
    if (!options)
        return ZA_EXIT_USAGE;
    int rc = 0;
    for (int d = 0; program->defaults && program->defaults [d][0] && !rc; d++)
        rc = za_options_default (options, program->defaults [d][0], program->defaults [d][1]);
    //  `predict` first: the rest is parsed as any command line.
    settings.predict = argc >= 2 && streq (argv [1], "predict");
    settings.serve = argc >= 2 && streq (argv [1], "serve");
    if (settings.predict || settings.serve) {
        argv [1] = argv [0];
        argv++, argc--;
    }
    int parsed = rc? -1: za_options_parse_args (options, argc, argv);
    if (parsed == 1)
        s_usage (program, options, &settings);
    else
    if (parsed < 0) {
        fprintf (stderr, "Try '%s --help'.\n", program->name);
        rc = ZA_EXIT_USAGE;
    }
    else
    if (settings.job && za_options_apply_job_file (options, settings.job))
        rc = ZA_EXIT_USAGE;
    else
    if (settings.predict && za_input_json_apply (options, &settings))
        rc = ZA_EXIT_USAGE;
    else {
        //  --local's defaults are weaker than the job's and the flags'.
        size_t count = sizeof s_local_defaults / sizeof s_local_defaults [0];
        //  (Not its checkpoint steps where seconds are asked for.)
        for (size_t d = 0; settings.local && d < count && !rc; d++)
            if ((!streq (s_local_defaults [d][0], "epochs")
                 || !za_options_given (options, "max_steps", ZA_FROM_DEFAULT))
                && (!streq (s_local_defaults [d][0], "save_checkpoints_steps")
                    || !za_options_given (options, "save_checkpoints_secs", ZA_FROM_DEFAULT)))
                rc = za_options_set (options, s_local_defaults [d][0], s_local_defaults [d][1],
                                     ZA_FROM_LOCAL, s_local_defaults [d][0])? ZA_EXIT_USAGE: 0;
        if (!rc)
            rc = s_check (program, options, &settings);
        if (!rc && za_options_print_asked (options)) {
            char *text = za_options_settings_text (options);
            printf ("%s\n", text? text: "{}");
            free (text);
        }
        else
        if (!rc && settings.certs && s_use_certs (&settings))
            rc = ZA_EXIT_USAGE;
        else
        if (!rc)
            rc = s_run (program, options, &settings);
    }
    za_curve_stop ();
    za_options_destroy (&options);
    if (zsys_interrupted && rc != 0)
        rc = ZA_EXIT_INTERRUPTED;
    return rc;
}
