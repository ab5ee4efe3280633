/*  za_broker_config.c: a broker's defaults and its restart backoff. */
#include "za/za_broker_config.h"
#include "za/za_preempt.h"

#include <string.h>

void
za_broker_config_init (za_broker_config_t *config)
{
    memset (config, 0, sizeof *config);
    config->heartbeat = za_heartbeat_default ();
    config->max_restarts = ZA_BROKER_MAX_RESTARTS;
    config->backoff_secs = ZA_BROKER_BACKOFF_SECS;
    config->backoff_max_secs = ZA_BROKER_BACKOFF_MAX_SECS;
    config->requeue_exit_code = ZA_EXIT_REQUEUE;
    config->min_workers = -1;
    config->elastic_timeout_secs = ZA_BROKER_ELASTIC_TIMEOUT_SECS;
    config->straggler_factor = ZA_BROKER_STRAGGLER_FACTOR;
}

double
za_broker_backoff (const za_broker_config_t *config, int failures)
{
    double delay = config->backoff_secs;
    for (int i = 0; i < failures && delay < config->backoff_max_secs; i++)
        delay *= 2;
    return delay < config->backoff_max_secs? delay: config->backoff_max_secs;
}

double
za_broker_backoff_next (const za_broker_config_t *config, int *failures, double ran)
{
    if (ran > ZA_BROKER_STABLE_SECS)
        *failures = 0;
    return za_broker_backoff (config, (*failures)++);
}
