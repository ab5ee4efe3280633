/*  za_run.h: the runtime. One call, za_run_main, turns a program that
    supplies a model_fn (or trains the layer stack of --model) and,
    optionally, its own input_fn into everything zactor-run does: training in
    one process, --train-and-evaluate, a task of a TF_CONFIG cluster
    (--role, --cluster), a task that joins a broker (--broker), the broker
    itself (--role broker [--supervise]), the whole cluster on this machine
    (--local) and the evaluator's --replay. The same binary serves every
    role: under --local and --supervise the broker starts this program.

      static za_program_t program = {.name = "my_model", .model_fn = &my_model_fn};
      int main (int argc, char **argv) { return za_run_main (argc, argv, &program); }

    The program's own settings (TensorFlow's `params`) are options like the
    built-in ones (za_options.h): flags, job keys, --help lines, and they
    travel to every task in the job.                                        */
#ifndef ZA_RUN_H_INCLUDED
#define ZA_RUN_H_INCLUDED

#include "za/za_estimator.h"
#include "za/za_options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;               //  in --help and messages: "zactor-run"
    const char *about;              //  --help's lines on what the program trains
    const za_model_fn_t *model_fn;  //  NULL: the layer stack of --model
    void *params;                   //  the model_fn's params; the program's options
                                    //  write into it (NULL with model_fn NULL)
    const za_option_t *options;     //  its own options (ZA_PARAM), NULL-flag-ended;
                                    //  may be NULL
    //  Its own defaults for built-in options, {name, value} pairs ended by
    //  {NULL, NULL} ({"optimizer", "sgd"}, {"learning_rate", "0.1"}); may be NULL.
    const char *const (*defaults) [2];
    //  The model's input; {0}: from the image files of --dataset-dir.
    za_input_shape_t input;
    //  Its own input (NULL: the IDX files of --dataset-dir, each worker its
    //  shard, shuffled, in --batch-size batches). It is asked for TRAIN with
    //  the task's shard, seed and batch size, and for EVAL; context->data_dir
    //  is --dataset-dir (TRAIN) or --eval-data (EVAL, when given).
    za_input_fn_t input_fn;
    void *input_arg;                //  for input_fn; NULL: params
    int64_t examples_per_epoch;     //  what --epochs counts with its own input_fn
                                    //  (0: the training files of --dataset-dir)
    //  Checks the program's settings once they are all in (may be NULL):
    //  returns 0, or -1 with an error, and the program exits 2.
    int (*check) (void *params, const za_settings_t *settings);
} za_program_t;

//  Runs the program as its command line says (see the top of this file and
//  `PROGRAM --help`). Returns the exit status: 0 done, 1 a run-time error,
//  2 bad arguments (with one message saying what is wrong), 130 interrupted.
int za_run_main (int argc, char **argv, const za_program_t *program);

#ifdef __cplusplus
}
#endif
#endif
