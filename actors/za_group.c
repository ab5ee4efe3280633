/*  za_group.c: the all-reduce strategy's gradients summed on the devices by
    a group of its processes (za_group.h).                                */
#include "za_group.h"
#include "za/za_util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

//  A rank that has given up on the group's start (a message of the ring's
//  next round came) waits this long for the others before it says no.
#define GROUP_START_GRACE_SECS 5.0
#define GROUP_POLL_USECS 20

void
za_group_init (za_group_t *self, za_replica_t *replica, const char *who)
{
    memset (self, 0, sizeof *self);
    self->replica = replica;
    const za_backend_t *be = za_replica_backend (replica);
    self->be = !be->host_memory && be->group_id? be: NULL;
    snprintf (self->who, sizeof self->who, "%s", who);
}

void
za_group_close (za_group_t *self)
{
    if (self->group)
        self->be->group_close (self->group);
    self->group = NULL;
}

//  Waits for the group (its start, or its sum), watching the ring. Returns
//  0 once done; 1 with *ring_rc when the ring says it will not come (a rank
//  (re)joined, the members changed, interrupted); -1 with an error when the
//  group failed or said nothing for timeout_secs (or for `grace` seconds
//  after a rank went on without it, where grace > 0).
static int
s_wait (za_group_t *self, za_ring_t *ring, double timeout_secs, double grace, int *ring_rc)
{
    double start = za_clock_mono (), went_on = 0;
    while (1) {
        int state = self->be->group_poll (self->group);
        if (state != 0)
            return state > 0? 0: -1;
        int watched = za_ring_watch (ring);
        if (watched != 0 && watched != ZA_RING_HELD) {
            *ring_rc = watched;
            return 1;
        }
        double now = za_clock_mono ();
        if (watched == ZA_RING_HELD && went_on == 0)
            went_on = now;
        if (grace > 0 && went_on > 0 && now - went_on > grace)
            return za_error ("the group did not start, and another rank went on without it");
        if (now - start > timeout_secs)
            return za_error ("the group heard nothing from a rank for %.0f s", timeout_secs);
        usleep (GROUP_POLL_USECS);
    }
}

int
za_group_form (za_group_t *self, za_ring_t *ring, int rank, int size, double timeout_secs)
{
    za_group_close (self);
    if (size < 2)
        return 0;
    //  Whether every rank can: a rank on the CPU, or off, cannot (every rank
    //  votes, so that all take the same rounds).
    float flag = self->be && !self->off? 1.0f: 0.0f;
    int rc = za_ring_allreduce_mean (ring, &flag, 1, 0);
    if (rc || flag != 1.0f)
        return rc;
    //  Rank 0's id, round the ring (an id of zeros: it has none).
    unsigned char id [ZA_GROUP_ID_BYTES];
    float floats [ZA_GROUP_ID_BYTES / sizeof (float)];
    memset (id, 0, sizeof id);
    int ok = 1;
    char why [ZA_ERROR_MAX_CHARS] = "";
    if (rank == 0 && self->be->group_id (id)) {
        snprintf (why, sizeof why, "%s", za_last_error ());
        memset (id, 0, sizeof id);
    }
    memcpy (floats, id, sizeof id);
    rc = za_ring_broadcast (ring, floats, ZA_GROUP_ID_BYTES / sizeof (float), 0, 0);
    if (rc)
        return rc;
    memcpy (id, floats, sizeof id);
    unsigned char zeros [ZA_GROUP_ID_BYTES] = {0};
    //  Opened on the replica's device (the thread's may be another's).
    int local = 0;
    if (memcmp (id, zeros, sizeof id) == 0)
        ok = 0;
    else
    if (za_replica_bind (self->replica)
        || !(self->group = self->be->group_open (id, rank, size))) {
        snprintf (why, sizeof why, "%s", za_last_error ());
        ok = 0;
        local = 1;
    }
    int ring_rc = 0;
    if (ok && s_wait (self, ring, timeout_secs, GROUP_START_GRACE_SECS, &ring_rc)) {
        if (ring_rc) {
            za_group_close (self);
            return ring_rc;
        }
        snprintf (why, sizeof why, "%s", za_last_error ());
        ok = 0;
    }
    //  Every rank's word: all in a group, or none.
    flag = ok? 1.0f: 0.0f;
    rc = za_ring_allreduce_mean (ring, &flag, 1, 0);
    if (rc || flag != 1.0f) {
        za_group_close (self);
        //  A group that cannot open here will not later; one that did not
        //  start in time may at the next generation.
        if (!ok && why [0]) {
            self->off = local;
            za_info ("%s: no group of processes on the devices (%s): the ring carries the "
                     "gradients through host memory%s", self->who, why,
                     local? "": " in this generation");
        }
        return rc;
    }
    //  Said once a process: how its gradients go.
    if (!self->said)
        za_info ("%s: the gradients are summed on the devices by a group of %d processes (%s)",
                 self->who, size, self->be->name);
    self->said = 1;
    return 0;
}

int
za_group_mean (za_group_t *self, za_replica_t *replica, za_ring_t *ring, int size,
               double timeout_secs)
{
    float *grads = za_replica_device_gradients (replica);
    if (!grads)
        return -1;
    size_t total = za_replica_vars (replica)->total;
    int ring_rc = 0;
    int rc = self->be->group_sum (self->group, grads, total);
    if (rc == 0)
        rc = s_wait (self, ring, timeout_secs, 0, &ring_rc);
    if (rc == 0) {
        self->be->scale_add (total, 1.0f / (float) size, grads, 0.0f, NULL);
        return 0;
    }
    za_group_close (self);
    if (ring_rc)
        return ring_rc;
    //  This group failed (a peer lost, or this process's own fault): the
    //  ring re-forms, a new group with it; after a second failure, the ring
    //  alone. The step is dropped on every rank (nothing applied).
    self->off = ++self->failures >= 2;
    za_info ("%s: the group of processes failed%s (%s): re-forming the ring%s", self->who,
             self->off? " again": "", za_last_error (),
             self->off? ", which carries the gradients from now on": " and the group");
    if (za_ring_ask_resync (ring))
        return -1;
    return ZA_RING_RESYNC;
}
