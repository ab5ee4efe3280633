/*  za_registration.h: what a register or report says of its task (role,
    index, host, pid, restarts, endpoint, token, and a report's statistics),
    every field checked before the registry sees it.                       */
#ifndef ZA_REGISTRATION_H_INCLUDED
#define ZA_REGISTRATION_H_INCLUDED

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "za/za_broker_client.h"
#include "za/za_broker_config.h"
#include "za_straggler.h"

#define ZA_REGISTRATION_HOST_MAX 256

//  A register or report, every field checked (za_registration_parse).
typedef struct {
    int kind;
    int index;                  //  -1: any free one (a register)
    char host [ZA_REGISTRATION_HOST_MAX];
    pid_t pid;
    int restarts;
    char endpoint [ZA_CLUSTER_ENDPOINT_MAX];
    char token [ZA_TASK_TOKEN_SIZE];    //  "" when it named none
    //  A report's statistics.
    char state [16];
    int64_t global_step;
    double loss, steps_per_sec, examples_per_sec;
    int64_t eval_step;          //  -1: none
    double eval_accuracy;
    int ring_rank;              //  -1: none
    double wait_ms;
    int64_t bad_images;         //  0 when not said
    int64_t images;             //  0 when not said
    int preempting;             //  1: it got SIGTERM (za_preempt.h); 0 when not said
    int leaving;                //  1: an elastic job's worker got SIGTERM; 0 when not said
    int64_t membership;         //  elastic: the members' change it holds; 0 when not said
    za_step_times_t times;      //  a trainer's recent step; step_ms 0 when not said
    double clock_sent;          //  its clock when it sent the report (-1: not said)
    char clock_boot [64];       //  its machine's boot (za_boot_id), "" when not said
} za_registration_t;

//  Checks every field of a register (report 0) or report (1) of a job with
//  counts [kind] tasks into *reg. Returns 0, or -1 with what is wrong in why.
int za_registration_parse (json_t *body, int report, const int *counts,
                           za_registration_t *reg, char *why, size_t size);

//  The role kind named `name` ("chief": ZA_TASK_CHIEF), or -1.
int za_registration_kind_parse (const char *name);

#endif
