/*  za_settings.h: runtime/'s own view of the settings (za_settings.c): the
    exit statuses, and the one place each group of settings becomes what a
    layer below takes: a RunConfig, an optimizer, heartbeat timings, the
    strategy, and whether an endpoint may be bound.                         */
#ifndef ZA_SETTINGS_H_INCLUDED
#define ZA_SETTINGS_H_INCLUDED

#include "za/za_estimator.h"
#include "za/za_options.h"
#include "za/za_process.h"          //  ZA_EXIT_DATA
#include "za/za_role.h"

#define ZA_EXIT_USAGE 2
#define ZA_EXIT_INTERRUPTED 130
//  Batches an evaluation reads when nobody says.
#define ZA_EVAL_BATCH 500

za_run_config_t za_settings_run_config (const za_settings_t *settings);
//  --heartbeat-ivl-ms and --heartbeat-liveness as every class that judges
//  a peer takes them (za_peer.h): the one place they become that.
za_heartbeat_t za_settings_heartbeat (const za_settings_t *settings);

//  Batches that make one global step, in a cluster of num_workers (the
//  chief included): 1 with ps-async, --replicas-to-aggregate (else every
//  worker) with ps-sync, every worker with the all-reduce.
int za_settings_replicas (const za_settings_t *settings, int num_workers);

//  --workers as a person reads it: "2", or "1 to 3" (elastic).
void za_settings_workers_text (const za_settings_t *settings, char *text, size_t size);
//  1 for an elastic job (--workers MIN:MAX with MIN < MAX).
int za_settings_elastic (const za_settings_t *settings);

//  Whether this process may bind endpoint: loopback always; anything else
//  with --certs, or with --insecure (said loudly, once per endpoint).
//  Returns 0, or ZA_EXIT_USAGE after one error that says what to give.
int za_settings_bind_allowed (const za_settings_t *s, const char *endpoint);

#endif
