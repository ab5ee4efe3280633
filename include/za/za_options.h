/*  za_options.h: every setting of a zactor program, declared once: its flag,
    its job-file key (the flag with '_' for '-'), where its value lives, its
    type, default, range, help line and which roles read it. The command
    line, job files, the job a broker or --local hands to every task, --help
    and validation all come from this one table (za_settings_options ()),
    and a program adds its own settings (its params) the same way.

    Values come from, weakest first: the table's default, the program's own
    default, --local's defaults, a job (a --job file, or the broker's), the
    command line. A value never replaces a stronger one.                   */
#ifndef ZA_OPTIONS_H_INCLUDED
#define ZA_OPTIONS_H_INCLUDED

#include <jansson.h>
#include "za/za_evaluator.h"        //  za_eval_spec_t
#include "za/za_kernels.h"          //  za_policy_t
#include "za/za_optim_config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZA_OPTION_FLAG,                 //  int 0/1; no value on the command line (--local),
                                    //  true or false in a job
    ZA_OPTION_INT,                  //  int64_t within [min, max]
    ZA_OPTION_NUMBER,               //  double, finite, within [min, max] (> min with
                                    //  ZA_OPTION_ABOVE_MIN)
    ZA_OPTION_STRING,               //  const char * (owned by the options)
    ZA_OPTION_CHOICE,               //  const char *, one of `choices` ("a|b|c")
    ZA_OPTION_LIST,                 //  const char *, integers in [min, max] separated by
                                    //  commas ("256,128"); a JSON array of them in a job
    ZA_OPTION_REAL,                 //  float, as NUMBER, and one a float holds
    ZA_OPTION_ENUM,                 //  int: the place of its name among `choices`
                                    //  ("sgd|momentum": 0, 1; aliases "alias=name" take
                                    //  name's place and count none of their own)
    ZA_OPTION_RANGE                 //  za_option_range_t: "N" (N to N) or "MIN:MAX",
                                    //  integers in [min, max]; a number or that text
                                    //  in a job
} za_option_type_t;

//  A ZA_OPTION_RANGE's value.
typedef struct {
    int64_t min, max;
} za_option_range_t;

//  Who reads a setting.
#define ZA_READ_SINGLE      (1u << 0)   //  one process, no cluster
#define ZA_READ_CHIEF       (1u << 1)
#define ZA_READ_WORKER      (1u << 2)
#define ZA_READ_PS          (1u << 3)
#define ZA_READ_EVALUATOR   (1u << 4)
#define ZA_READ_BROKER      (1u << 5)
#define ZA_READ_LAUNCHER    (1u << 6)   //  --local
#define ZA_READ_TRAINERS    (ZA_READ_SINGLE | ZA_READ_CHIEF | ZA_READ_WORKER)
#define ZA_READ_TASKS       (ZA_READ_CHIEF | ZA_READ_WORKER | ZA_READ_PS | ZA_READ_EVALUATOR)
#define ZA_READ_ALL         0x7fu

//  Where a setting travels.
typedef enum {
    ZA_SCOPE_JOB,                   //  the same for every task: in the job handed out
    ZA_SCOPE_PROCESS,               //  this process alone (its role, its host)
    ZA_SCOPE_COMMAND                //  the command line alone (--job itself)
} za_option_scope_t;

//  Option flags.
#define ZA_OPTION_PARAM     (1u << 0)   //  offset is into the program's params
#define ZA_OPTION_ABOVE_MIN (1u << 1)   //  NUMBER: strictly greater than min
#define ZA_OPTION_STACK     (1u << 2)   //  about the layer stack: hidden, and refused,
                                        //  in a program with a model_fn of its own
#define ZA_OPTION_IDX_INPUT (1u << 3)   //  about the built-in input: hidden, and refused,
                                        //  in a program with an input_fn of its own

typedef struct {
    const char *flag;               //  "batch-size": --batch-size; job key "batch_size"
    za_option_type_t type;
    size_t offset;                  //  of the value in za_settings_t, or in the
                                    //  program's params (ZA_OPTION_PARAM)
    const char *value_name;         //  "N", "DIR" in --help
    const char *fallback;           //  the default, as text given on the command line
                                    //  would be; NULL: none (the help says what then)
    double min, max;                //  INT, NUMBER, LIST
    const char *choices;            //  CHOICE
    unsigned readers;               //  ZA_READ_*
    za_option_scope_t scope;
    unsigned flags;                 //  ZA_OPTION_*
    const char *section;            //  --help's heading, on the first option of one
    const char *help;               //  one line or two; the default is added to it
} za_option_t;

//  Declaring options: za_settings.c uses these for the built-in table; a
//  program's own options use ZA_PARAM (offsets into its params struct).
#define ZA_OPTION(flag, type, field, value, fallback, min, max, choices, readers, scope,  \
                  flags, section, help)                                                    \
    {flag, type, offsetof (za_settings_t, field), value, fallback, min, max, choices,     \
     readers, scope, flags, section, help}
#define ZA_PARAM(flag, type, params_type, field, value, fallback, min, max, choices,      \
                 readers, section, help)                                                   \
    {flag, type, offsetof (params_type, field), value, fallback, min, max, choices,       \
     readers, ZA_SCOPE_JOB, ZA_OPTION_PARAM, section, help}

//  Where a value came from, weakest first.
typedef enum {
    ZA_FROM_DEFAULT = 0,
    ZA_FROM_PROGRAM,                //  the program's own default
    ZA_FROM_LOCAL,                  //  --local's defaults
    ZA_FROM_JOB,                    //  a job file, or the broker's job
    ZA_FROM_FLAG                    //  the command line
} za_option_source_t;

//  Every setting of the runtime. Fields are set from the table; the program's
//  own settings are in *params.
typedef struct {
    //  Model and data
    const char *model;
    const char *hidden_units;
    const char *dataset_dir;
    const char *train_data;         //  NULL: dataset_dir's IDX files; else images (za_images.h)
    const char *image_size;         //  "H,W" (or "S"): what every image becomes
    int64_t channels;               //  1 (gray) or 3 (RGB)
    const char *resize;             //  area or bilinear
    int crop_to_aspect_ratio;
    const char *class_names;        //  NULL: the sorted class folders
    double validation_split;        //  0: none
    const char *image_key;          //  TFRecord: the image's feature
    const char *label_key;          //  TFRecord: the label's feature
    int64_t label_base;             //  TFRecord: the first class's label (0 or 1)
    int64_t input_threads;          //  decoding threads of a worker's input
    const char *max_bad_images;     //  "25" or "1%" (za_input.h's za_bad_limit_t)
    const char *preprocess;         //  none, tf, torch or caffe (za_input.h)
    const char *augment;            //  "pad_crop(4) flip ..." (za_augment.h)
    const char *lr_schedule;        //  NULL: a constant rate (za_optim_config.h)
    int64_t lr_warmup_steps;
    const char *cache;              //  none, memory or disk (za_cache.h)
    //  Transfer learning
    //  (--warm-start-from, -vars, -rename, -layout: run.warm_start)
    const char *freeze;             //  regex of variables not trained; NULL: none
    const char *trainable;          //  regex of the only variables trained
    int cache_frozen;               //  keep the frozen layers' output per example
    int64_t batch_size;
    int64_t shuffle_buffer;         //  -1: the whole set
    //  Training
    //  The optimizer, as the ps and every replica apply it: --optimizer sets
    //  its kind, --learning-rate its rate (0: the kind's own until
    //  za_options_parse_args and the job have been read, then resolved).
    za_optim_config_t optim;
    int64_t max_steps;              //  0: --epochs worth
    int64_t epochs;
    int no_eval;
    za_strategy_t strategy;         //  ps-async, ps-sync, allreduce
    int64_t replicas_to_aggregate;
    int64_t bucket_kib;
    int64_t partition_kib;          //  variables above it split over the ps; 0: never
    const char *wire_dtype;         //  fp32, bf16
    //  RunConfig (za_estimator.h) as the options table sets it: model_dir,
    //  the checkpoint and logging policy, seed, threads (0: the cores, shared
    //  by the tasks of this machine), precision, replicas_per_device and
    //  warm_start; the rest is za_settings_run_config's
    za_run_config_t run;
    const char *device;             //  cpu, cuda, cuda:N, cuda:all
    //  Evaluation (EvalSpec)
    int train_and_evaluate;
    const char *eval_data;
    //  --eval-name, --eval-steps (0: the whole set), --start-delay-secs,
    //  --throttle-secs, --replay, --eval-metrics ("precision recall auc ..."),
    //  --best-metric ("accuracy", "loss", "auc,max"), --stop-if-no-improvement
    //  ("accuracy,2000"): as the evaluator takes them
    za_eval_spec_t eval;
    //  Prediction (zactor-run predict)
    int predict;                    //  1: the predict subcommand (not an option)
    const char *data;               //  what to predict: images (za_images.h)
    const char *checkpoint;         //  NULL: the newest in model_dir
    const char *output;             //  "-": standard output
    const char *format;             //  jsonl or csv
    int logits;                     //  1: the logits too
    //  Serving (zactor-run serve: TensorFlow Serving's REST API)
    int serve;                      //  1: the serve subcommand (not an option)
    int64_t port;                   //  the REST API's port (8501, TF Serving's)
    const char *listen;             //  its address (127.0.0.1: this machine only)
    const char *model_name;         //  NULL: the model dir's last part
    int64_t max_batch_size;         //  requests batched together, in instances
    int64_t batch_timeout_micros;   //  how long a batch waits to fill
    int64_t num_batch_threads;      //  batches run at once (0: the cores)
    double poll_secs;               //  how often a newer checkpoint is looked for
    int64_t max_body_bytes;         //  a larger request is refused (413)
    //  This task in a cluster
    const char *role;
    int64_t index;                  //  -1: not said
    const char *cluster;
    const char *broker;
    const char *host;
    double timeout_secs;
    int64_t heartbeat_ivl_ms;
    int64_t heartbeat_liveness;
    //  The whole cluster on this machine, and the broker
    int local;
    za_option_range_t workers;      //  besides the chief; min < max: elastic
    double elastic_timeout;         //  an elastic worker silent this long is dropped
    double straggler_factor;        //  a trainer this much slower than the median is named
    int elastic_batch;              //  za_elastic_batch_t
    int64_t ps;
    int64_t evaluators;
    const char *job;
    const char *bind;
    int supervise;
    int64_t max_restarts;
    int64_t requeue_exit_code;      //  preempted: run me again (za_preempt.h)
    const char *metrics_bind;
    const char *trace;              //  --trace FILE: the job's trace (za_trace.h); NULL: none
    double trace_max_mb;            //  of each task's trace, the newest kept (0: no limit)
    //  Security
    const char *certs;              //  NULL: no CURVE
    int insecure;
    //  The program's own settings (its options write there)
    void *params;
} za_settings_t;

//  The built-in table, ended by an entry with a NULL flag.
const za_option_t *za_settings_options (void);

typedef struct _za_options_t za_options_t;

//  The options of a program: the built-in table plus `extra` (its own, with
//  ZA_OPTION_PARAM, NULL-flag-terminated; may be NULL) writing into
//  settings and settings->params. `program` names it in messages and help;
//  options with a flag in `hide` (ZA_OPTION_STACK for a program with its own
//  model_fn, ZA_OPTION_IDX_INPUT for one with its own input_fn) are hidden
//  and refused. Every default is applied. NULL with an error when a
//  declaration is wrong (two options of one name, a default out of range):
//  a bug of the program.
za_options_t *za_options_new (const char *program, const za_option_t *extra,
                              za_settings_t *settings, unsigned hide);
void za_options_destroy (za_options_t **self_p);

//  The program's own default for an option (stronger than the table's).
//  Returns 0, or -1 with an error naming it (no such option, a bad value).
int za_options_default (za_options_t *self, const char *name, const char *text);

//  Sets an option by flag or job key from text, if `source` is at least as
//  strong as where its value came from so far. `what` names it in errors
//  ("--batch-size", "job.json: batch_size"). Returns 0, or -1 with an error.
int za_options_set (za_options_t *self, const char *name, const char *text,
                    za_option_source_t source, const char *what);

//  Parses the command line. Returns 0, 1 when it asked for --help (the
//  caller prints za_options_usage and exits 0), or -1 with an error (exit 2).
//  --print-settings is noted (za_options_print_asked), not an option.
int za_options_parse_args (za_options_t *self, int argc, char **argv);

//  1 when the command line said --print-settings: the caller prints
//  za_options_settings_text once everything is in, and runs nothing.
int za_options_print_asked (const za_options_t *self);

//  Every option the program shows, job key -> value (null when unset), as
//  JSON text (caller frees): what this process would run with.
char *za_options_settings_text (const za_options_t *self);

//  Applies a job: keys at the top or in sections (run_config, train_spec,
//  eval_spec, ...: any object of keys), "roles" as the task counts
//  ({"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}). `source` names it
//  in errors. Returns 0, or -1 with an error naming the key: one that no
//  option has, a value of the wrong type or out of range.
int za_options_apply_job (za_options_t *self, json_t *job, const char *source,
                          za_option_source_t from);
//  A job that came over the network (the broker's welcome), as ZA_FROM_JOB,
//  where only job-scope keys may be set (never this process's --bind,
//  --certs, --insecure, --host ...) and no text holds a control character.
int za_options_apply_wire_job (za_options_t *self, json_t *job, const char *source);
//  The same from a file (ZA_FROM_JOB), with jansson's line and column on a
//  syntax error.
int za_options_apply_job_file (za_options_t *self, const char *path);

//  1 when the option's value came from anything stronger than `than`.
int za_options_given (const za_options_t *self, const char *name, za_option_source_t than);

//  The job every task of a cluster runs, as JSON text (caller frees): every
//  job-scope option that was given (by a job, a flag, --local or the
//  program), the task counts as "roles", and `extra` (may be NULL) on top.
char *za_options_job_text (const za_options_t *self, json_t *extra);

//  Prints the help: the usage line, `about`, then every option the program
//  has, by section, with its default; only those `readers` reads (0: all).
void za_options_usage (const za_options_t *self, FILE *out, const char *about,
                       unsigned readers);

//  A LIST option's value ("256,128", checked when it was set) as integers:
//  at most `max` of them into values; returns how many it holds (more than
//  max when it holds more), or -1 with an error for a text that is not one.
int za_options_list (const char *text, int64_t *values, int max);

//  The options, in table order (built-in first), and one by flag or key.
int za_options_count (const za_options_t *self);
const za_option_t *za_options_at (const za_options_t *self, int index);
const za_option_t *za_options_find (const za_options_t *self, const char *name);
//  The job key of an option ("batch_size"), into key.
void za_option_key (const za_option_t *option, char *key, size_t size);
//  The option's current value as text, as a flag would give it ("" for an
//  unset string, "true"/"false" for a flag).
void za_options_value_text (const za_options_t *self, const za_option_t *option, char *text,
                            size_t size);
//  The default --help shows for it (the program's, or the table's); NULL
//  when there is none.
const char *za_options_default_text (const za_options_t *self, const za_option_t *option);

#ifdef __cplusplus
}
#endif
#endif
