/*  za_place.h: placing this task in its cluster (za_place.c), from TF_CONFIG
    (or --cluster, --role, --index) or from a broker that hands out indexes,
    the job and the ps endpoints; then running it there.                    */
#ifndef ZA_PLACE_H_INCLUDED
#define ZA_PLACE_H_INCLUDED

#include "za_task.h"

//  --role / --index / --cluster / TF_CONFIG: runs this task of a static
//  cluster. Returns the exit status.
int za_place_run_in_cluster (const za_program_t *program, za_options_t *options,
                             za_settings_t *settings);
//  TF_CONFIG's zactor extension, {"zactor": {"broker": ADDR}} beside its
//  cluster and task (docs/clusters.md): when there is no --broker, this
//  task joins that broker as its task type and index (as --role TYPE
//  --index I --broker ADDR would; the job, an elastic one too, comes from
//  the broker). Returns 1 when it set them, 0 when TF_CONFIG says nothing
//  of it, or ZA_EXIT_USAGE after one error (not an endpoint, no task).
int za_place_tf_config_broker (za_settings_t *settings);

//  --broker ADDR: registers, takes the job and the place the broker gives,
//  then runs the task while the client reports. Returns the exit status.
int za_place_run_with_broker (const za_program_t *program, za_options_t *options,
                              za_settings_t *settings);

#endif
