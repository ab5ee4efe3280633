/*  za_group.h: the all-reduce strategy's gradients summed on the devices by
    a group of its processes (the back end's group_* slots: NCCL between
    processes on GPUs; cpu-staged's shared memory where there is none), in
    place of the ring through host memory (za_mirrored.c). A group is
    formed over the ring at the start of each of its generations, by every
    rank or by none: the id goes round the ring (its broker-authenticated
    links), each rank opens it, and all say whether they could. While a
    group sums, the ring is watched (za_ring_watch): a rank that (re)joins
    or a change of the members aborts the group, the ring re-forms, and a
    new group with it. A group whose sum fails (a peer lost, which NCCL may
    say so) is said, and the ring re-forms with a new one; a process whose
    group cannot open, or whose groups failed twice, votes for the ring at
    every generation after. Internal to actors/.                           */
#ifndef ZA_GROUP_H_INCLUDED
#define ZA_GROUP_H_INCLUDED

#include "za/za_kernels.h"
#include "za/za_replica.h"
#include "za/za_ring.h"

typedef struct {
    za_replica_t *replica;
    const za_backend_t *be;     //  the replica's: groups where it has the slots
    void *group;                //  this generation's; NULL: the ring carries them
    int failures;               //  of this process's groups (a peer lost among them)
    int off;                    //  no group from this process: the ring from then on
    int said;                   //  the log said how the gradients go
    char who [64];
} za_group_t;

void za_group_init (za_group_t *self, za_replica_t *replica, const char *who);

//  Every rank of the ring, after each za_ring_resync and the start's
//  broadcasts: this generation's group where every rank can have one (none
//  on the CPU, in a ring of one, or where a rank says no). Returns 0 (with
//  or without a group), ZA_RING_RESYNC or ZA_RING_CANCELLED (the ring must
//  re-form first), or -1 with an error.
int za_group_form (za_group_t *self, za_ring_t *ring, int rank, int size,
                   double timeout_secs);

//  The step's gradient on the device replaced by the mean of every rank's,
//  there. Returns 0; ZA_RING_RESYNC or ZA_RING_CANCELLED with the group
//  closed (a rank (re)joined or the members changed while it summed; or
//  this group failed, said, and a new generation was asked for); or -1
//  with an error (interrupted).
int za_group_mean (za_group_t *self, za_replica_t *replica, za_ring_t *ring, int size,
                   double timeout_secs);

void za_group_close (za_group_t *self);

#endif
