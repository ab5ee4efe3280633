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

#include "za/za_program.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Runs the program as its command line says (see the top of this file and
//  `PROGRAM --help`). Returns the exit status: 0 done, 1 a run-time error,
//  2 bad arguments (with one message saying what is wrong), 65 bad data,
//  --requeue-exit-code (75) preempted (za_preempt.h), 130 interrupted.
int za_run_main (int argc, char **argv, const za_program_t *program);

#ifdef __cplusplus
}
#endif
#endif
