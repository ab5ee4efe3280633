/*  za_launcher.h: the processes on the broker's side (za_launcher.c): the
    broker itself, and --local, the launcher of a whole cluster here.       */
#ifndef ZA_LAUNCHER_H_INCLUDED
#define ZA_LAUNCHER_H_INCLUDED

#include "za_task.h"

//  --role broker --bind EP [--supervise]. Returns the exit status.
int za_launcher_run_broker (const za_program_t *program, za_options_t *options,
                            za_settings_t *settings);
//  --local. Returns the exit status.
int za_launcher_run_local (const za_program_t *program, za_options_t *options,
                           za_settings_t *settings);

#endif
