/*  zactor-run: trains a layer stack (--model; the seed CNN of the TensorFlow
    Estimator tutorials by default) on MNIST-format data: in one process, as
    one task of a cluster (--role, TF_CONFIG, --broker), as the broker, or as
    a whole supervised cluster on this machine (--local). The runtime,
    za_run_main (include/za/za_run.h), does all of it for any program.      */
#include "za/za_run.h"

int
main (int argc, char **argv)
{
    static const za_program_t program = {.name = "zactor-run"};
    return za_run_main (argc, argv, &program);
}
