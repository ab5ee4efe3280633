/*  za_registry_private.h: what the registry's files share (za_registry.c:
    the tasks' life; za_registry_show.c: what the broker shows of them).    */
#ifndef ZA_REGISTRY_PRIVATE_H_INCLUDED
#define ZA_REGISTRY_PRIVATE_H_INCLUDED

#include "za_registry.h"
#include "za/za_util.h"

#include <string.h>

//  The registry (za_registry.h).
struct za_registry_t {
    const za_broker_config_t *config;
    za_events_t *events;
    char host [ZA_REGISTRY_TEXT_MAX];
    double start;
    int failed;
    int preempting;                 //  the job stops for preemption
    int preempt_told;               //  its tasks were sent SIGTERM
    int64_t membership;             //  elastic: changes of the members so far
    int64_t membership_held;        //  the newest a trainer's report says it holds
    int member_count;
    za_entry_t tasks [ZA_BROKER_ROLE_KINDS][ZA_BROKER_MAX_TASKS];
};

#define FOR_EACH_TASK(self, task)                                                   \
    for (int kind_ = 0; kind_ < ZA_BROKER_ROLE_KINDS; kind_++)                      \
        for (__typeof__ (&(self)->tasks [0][0]) task = &(self)->tasks [kind_][0];   \
             task < &(self)->tasks [kind_][(self)->config->counts [kind_]]; task++)

//  A task state's name ("empty", "started", ...).
extern const char *za_registry_state_names [];

//  1 for a job whose worker count is a range (--workers MIN:MAX).
int za_registry_elastic (const za_registry_t *self);
//  1 for a worker slot above an elastic job's minimum: taken and left while
//  the job runs, never started by us.
int za_registry_elastic_slot (const za_registry_t *self, const za_entry_t *task);
//  1 for a chief or worker that is one of the job's members now.
int za_registry_is_member (const za_registry_t *self, const za_entry_t *task);

//  1 for a trainer that trains now and said how long its steps take.
static inline int
za_registry_timed_trainer (const za_entry_t *task)
{
    return (task->kind == ZA_TASK_CHIEF || task->kind == ZA_TASK_WORKER)
        && task->state == ZA_ENTRY_LIVE && streq (task->role_state, "running")
        && task->times.step_ms > 0;
}

#endif
