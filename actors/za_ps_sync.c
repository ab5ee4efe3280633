/*  za_ps_sync.c: a checked push applied as the strategy says: at once
    (ps-async), or summed into its step until `aggregate` pushes are in
    (ps-sync, TensorFlow's SyncReplicasOptimizer), then applied once.  */
#include "za_ps_private.h"

//  Answers every waiting pusher: the values now (or, with `done`, that
//  training is over), and forgets them.
void
za_ps_answer_waiting (za_ps_t *self, int done)
{
    za_ps_waiter_t *waiter;
    while (self->waiting && (waiter = (za_ps_waiter_t *) zlist_pop (self->waiting))) {
        if (done)
            za_ps_reply_over (self, waiter->routing_id, waiter->seq);
        else
            za_ps_reply_values (self, waiter->routing_id, waiter->seq, waiter->task);
        zframe_destroy (&waiter->routing_id);
        free (waiter);
    }
}

//  Starts the next step's sum.
void
za_ps_sync_reset (za_ps_t *self)
{
    if (!self->accum)
        return;
    memset (self->accum, 0, (self->floats? self->floats: 1) * sizeof (float));
    memset (self->contributed, 0, sizeof self->contributed);
    memset (self->summed, 0, sizeof self->summed);
    self->aggregated = 0;
}

//  1 when task's waiter of this step came by another connection than
//  routing_id's: it now waits on routing_id, for msg's seq. The one before
//  is told (a process alive there, two of one task index, stops with why).
static int
s_take_the_place (za_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    za_ps_waiter_t *waiter = (za_ps_waiter_t *) zlist_first (self->waiting);
    while (waiter && waiter->task != msg->task)
        waiter = (za_ps_waiter_t *) zlist_next (self->waiting);
    if (!waiter || zframe_eq (waiter->routing_id, routing_id))
        return 0;
    char why [160];
    snprintf (why, sizeof why, "task %d pushed step %" PRId64 " again from another connection "
              "(restarted?), which waits in this one's place", msg->task, msg->step);
    za_ps_reply_error (self, waiter->routing_id, waiter->seq, "bad_request", why);
    zframe_destroy (&waiter->routing_id);
    waiter->routing_id = zframe_dup (routing_id);
    waiter->seq = msg->seq;
    za_info ("ps %d: task %d pushed step %" PRId64 " again from a new connection (restarted): "
             "its first push counts, and the new one waits for the step",
             self->config->ps_index, msg->task, msg->step);
    return 1;
}

//  A checked push under ps-sync.
static void
s_sync_push (za_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    char why [256];
    if (msg->step > self->updates) {
        //  Computed on values of a step this ps no longer holds: the chief
        //  gave every ps an earlier state (a ps was restarted) after the
        //  pusher had taken the later one. Dropped; the pusher pulls.
        snprintf (why, sizeof why, "the ps went back to step %" PRId64 " (a ps was "
                  "restarted); the push was computed at step %" PRId64 ": pull the values "
                  "again", self->updates, msg->step);
        za_ps_reply_error (self, routing_id, msg->seq, "rewound", why);
        return;
    }
    //  A task that pushed this step already from another connection: a
    //  restarted process (its first life's push is counted). It waits in
    //  its place, the gradient not summed twice.
    if (msg->step == self->updates && self->contributed [msg->task]
        && s_take_the_place (self, routing_id, msg))
        return;
    if (msg->step < 0 || self->contributed [msg->task]) {
        snprintf (why, sizeof why, "a ps-sync push needs the step of the values it was "
                  "computed on, once per task (task %d, step %" PRId64 ")", msg->task,
                  msg->step);
        za_ps_reply_error (self, routing_id, msg->seq, "bad_request", why);
        return;
    }
    if (msg->step < self->updates) {
        //  Computed on older values (a backup worker, or a slow one): dropped,
        //  counted, and answered with the values it should have used.
        if (self->stale++ % 100 == 0)
            za_info ("ps %d: a gradient of step %" PRId64 " from task %d came at step %" PRId64
                     ": dropped (%" PRIu64 " so far)", self->config->ps_index, msg->step,
                     msg->task, self->updates, self->stale);
        za_ps_reply_values (self, routing_id, msg->seq, msg->task);
        return;
    }
    for (int i = 0; i < self->part_count; i++) {
        if (self->pushed [i] < 0)
            continue;                       //  a frozen variable's: zero
        const float *grads = za_ps_floats_of (self, &msg->tensors [self->pushed [i]]);
        float *sum = self->accum + self->part_at [i];
        size_t n = self->placement.parts [self->parts [i]].size;
        for (size_t j = 0; j < n; j++)
            sum [j] += grads [j];
        self->summed [i] = 1;
    }
    self->contributed [msg->task] = 1;
    za_ps_waiter_t *waiter = (za_ps_waiter_t *) malloc (sizeof *waiter);
    if (waiter) {
        waiter->routing_id = zframe_dup (routing_id);
        waiter->seq = msg->seq;
        waiter->task = msg->task;
        zlist_append (self->waiting, waiter);
    }
    ++self->aggregated;
    za_ps_sync_follow (self);
}

void
za_ps_sync_follow (za_ps_t *self)
{
    const za_role_config_t *config = self->config;
    if (!self->aggregate)
        return;
    //  Elastic, unless --replicas-to-aggregate fixes it: one push per member.
    int members = config->membership && config->replicas_to_aggregate == 0
                ? za_membership_count (config->membership): 0;
    if (members > 0 && members != self->aggregate) {
        za_info ("ps %d: %d workers train now: each step aggregates %d gradients (was %d)",
                 config->ps_index, members, members, self->aggregate);
        self->aggregate = members;
    }
    if (self->aggregated == 0 || self->aggregated < self->aggregate)
        return;
    for (size_t j = 0; j < self->floats; j++)
        self->accum [j] /= (float) self->aggregated;
    za_ps_update (self, NULL);
    za_ps_sync_reset (self);
    za_ps_answer_waiting (self, 0);
}

//  A push, checked, then applied as the strategy says: at once (ps-async),
//  or summed into its step (ps-sync).
void
za_ps_push_now (za_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    char why [256];
    if (za_ps_match_push (self, msg, why, sizeof why))
        za_ps_reply_error (self, routing_id, msg->seq, "bad_request", why);
    else
    if (self->aggregate)
        s_sync_push (self, routing_id, msg);
    else {
        za_ps_update (self, msg);
        za_ps_reply_values (self, routing_id, msg->seq, msg->task);
    }
}
