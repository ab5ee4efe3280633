/*  za_events.h: the broker's events (started, registered, failed, restarted,
    done and why): the last ZA_BROKER_EVENTS kept in memory for the state,
    every one appended to MODEL_DIR/events.jsonl and logged, and a count per
    kind over the whole job (zactor_events_total). A restarted broker reloads
    the file, so it shows the events of the one before it.                  */
#ifndef ZA_EVENTS_H_INCLUDED
#define ZA_EVENTS_H_INCLUDED

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "za/za_broker_config.h"

//  Of each kind of trouble (a message dropped, a request refused, a reply
//  or event that could not be built) the first this many are logged, the
//  rest only counted.
#define ZA_BROKER_LOGGED_MAX 20

typedef struct za_events_t za_events_t;

//  model_dir may be NULL (memory only). json_failures (outliving the
//  events) counts the events that could not be built. NULL when out of
//  memory.
za_events_t *za_events_new (const char *model_dir, uint64_t *json_failures);
void za_events_destroy (za_events_t **self_p);

//  Adds an event of a task (role NULL: of the broker itself, with this
//  process's pid) with its cause (fmt may be NULL: none).
void za_events_add (za_events_t *self, const char *event, const char *role, int index,
                    pid_t pid, int restarts, const char *fmt, ...)
    __attribute__ ((format (printf, 7, 8)));

//  Reads this job's events of MODEL_DIR/events.jsonl (since its broker's first
//  start: the file outlives jobs) into the ring and the counts.
void za_events_reload (za_events_t *self);

//  The events in memory, oldest first (a new array), counting the ones that
//  do not parse as failures.
json_t *za_events_recent (za_events_t *self);
//  {"event": times} over the job (borrowed).
json_t *za_events_counts (za_events_t *self);

#endif
