/*  za_membership.h: who trains in an elastic job now (--workers MIN:MAX):
    the broker numbers each change of its members and says it in every view
    (docs/PROTOCOL.md 13); a task's broker client publishes the newest here,
    and its role reads it between steps (a lock for the whole list, an
    atomic for "did it change?"). Members are worker indexes: the chief 0,
    worker i at i + 1; with the all-reduce, each with its ring endpoint.   */
#ifndef ZA_MEMBERSHIP_H_INCLUDED
#define ZA_MEMBERSHIP_H_INCLUDED

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "za/za_cluster.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_MEMBERS_MAX (ZA_CLUSTER_MAX_TASKS + 1)   //  the chief and 64 workers

//  One numbered list of members.
typedef struct {
    int64_t number;                 //  the broker's count of changes; 0: none yet
    int count;
    int index [ZA_MEMBERS_MAX];     //  worker indexes, ascending
    char endpoint [ZA_MEMBERS_MAX][ZA_CLUSTER_ENDPOINT_MAX];    //  ring: where each binds
} za_members_t;

//  Shared between a broker client (writes) and a role (reads).
typedef struct {
    pthread_mutex_t mutex;
    _Atomic int64_t number;
    _Atomic int count;
    za_members_t now;
} za_membership_t;

void za_membership_init (za_membership_t *self);
void za_membership_destroy (za_membership_t *self);
//  The broker's newest list (an older number than the one held is ignored).
void za_membership_set (za_membership_t *self, const za_members_t *members);
//  The number of the newest list (0: none yet), without the lock.
int64_t za_membership_number (za_membership_t *self);
//  How many members the newest list has (0: none yet), without the lock.
int za_membership_count (za_membership_t *self);
//  A copy of the newest list.
void za_membership_get (za_membership_t *self, za_members_t *members);

//  Where worker index `index` is in the list: its rank; -1 when it is no member.
int za_members_rank (const za_members_t *members, int index);
//  "chief, worker 0, worker 2" into text.
void za_members_text (const za_members_t *members, char *text, size_t size);

#ifdef __cplusplus
}
#endif
#endif
