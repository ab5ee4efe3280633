/*  za_program.h: what a program hands to za_run_main (za_run.h): its name,
    its model_fn and params, its own options and defaults, its input. The
    runtime's parts read it; only za_run_main runs it.                     */
#ifndef ZA_PROGRAM_H_INCLUDED
#define ZA_PROGRAM_H_INCLUDED

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
    //  Its own learning-rate schedule (NULL: --lr-schedule's): every process
    //  that applies updates (one process, each ps, each all-reduce rank)
    //  calls it with the base rate and the global step; --lr-warmup-steps
    //  still goes before it.
    za_schedule_fn *learning_rate_fn;
    void *learning_rate_arg;
} za_program_t;

#ifdef __cplusplus
}
#endif
#endif
