/*  za_worker_chief.c: the chief's duties beside training: every ps
    initialised (or, after a restart, given the freshest state there is,
    with ps-sync's slots it keeps), consistent checkpoints (hold, snapshot,
    release), the ps stopped at the end.                                   */
#include "za_worker_private.h"

//  Initialises every ps with the replica's values and slots at `step`.
int
za_worker_init_all (za_worker_t *self, int64_t step)
{
    //  What the ps held before is gone: the state comes again with the pulls.
    self->state_step = -1;
    za_worker_forget_slots (self);
    self->init_step = step;
    if (za_worker_call_all (self, ZA_OP_INIT) || za_worker_expect (self, ZA_OP_INIT_OK))
        return -1;
    return 0;
}

//  Ends the final checkpoint: stops every ps at the snapshot the replica
//  holds. A ps restarted since its snapshot answers not_ready: it gets the
//  snapshot back and is stopped in turn (the others, stopped already,
//  answer done to both).
static int
s_stop_all (za_worker_t *self, int64_t step)
{
    if (za_worker_call_all (self, ZA_OP_STOP))
        return -1;
    int lost;
    while ((lost = za_worker_error_from (self, "not_ready")) >= 0) {
        za_info ("chief: ps %d lost its state during the final stop (restarted?): giving it "
                 "the final snapshot (step %" PRId64 ")", lost, step);
        self->init_step = step;
        if (za_worker_call_all (self, ZA_OP_INIT)
            || za_worker_expect_or (self, ZA_OP_INIT_OK, "done")
            || za_worker_call_all (self, ZA_OP_STOP))
            return -1;
    }
    return za_worker_expect_or (self, ZA_OP_STOPPING, "done");
}

//  A consistent snapshot into the replica's blocks, then a checkpoint.
//  final: the ps are stopped instead of released, so nothing changes after.
//  Returns 0, -1 with an error, or WORKER_PS_LOST when a ps lost its state on the
//  way: the caller recovers (a snapshot complete by then is saved first, so
//  that is what the recovery reloads).
int
za_worker_checkpoint (za_worker_t *self, int final)
{
    int rc = za_worker_call_all (self, ZA_OP_HOLD)? -1: za_worker_outcome (self, ZA_OP_HELD);
    if (rc)
        return rc;              //  the holds lapse, or the recovery releases them
    rc = za_worker_call_all (self, ZA_OP_SNAPSHOT)? -1
       : za_worker_outcome (self, ZA_OP_SNAPSHOT_DATA);
    if (rc == 0)
        rc = za_worker_take_parts (self, 1);
    if (rc == 0)
        self->values_step = self->replies [0]->step;
    //  The replica now holds the snapshot's values (and slots): the state of
    //  ps-sync's recovery only if that is the step it held.
    if (rc || self->replies [0]->step != self->state_step)
        self->state_step = -1;
    if (rc == WORKER_PS_LOST)
        return rc;
    int64_t step = self->replies [0]->step;
    int ended = final? s_stop_all (self, step)
              : za_worker_call_all (self, ZA_OP_RELEASE)? -1
              : za_worker_outcome (self, ZA_OP_RELEASED);
    if (rc || ended < 0)
        return -1;
    const za_run_config_t *run = &self->config->run;
    int saved = za_replica_save_through (self->replica, run->model_dir, step,
                                         run->keep_checkpoint_max, final);
    if (saved < 0)
        return -1;
    if (final)
        self->global_step = step;
    if (saved == ZA_SAVE_SKIPPED)
        return ended? ended: ZA_SAVE_SKIPPED;
    za_info ("chief: checkpoint at step %" PRId64 "%s", step, final? " (final)": "");
    za_role_announce_checkpoint (self->config, self->pipe, step);
    return ended;
}

//  The checkpoint saver's save (za_hooks.h): 0, -1, or WORKER_PS_LOST.
int
za_worker_save_checkpoint (void *arg, int64_t step)
{
    (void) step;
    return za_worker_checkpoint ((za_worker_t *) arg, 0);
}

//  A restarted chief without values of its own: waits (at most heartbeat
//  interval x liveness x 2, the time a worker blocked on the lost ps needs to
//  find it out and offer) until every ps either holds its state or holds a
//  worker's offer (its not_ready carries the offer's step). 0, or -1.
static int
s_wait_for_offers (za_worker_t *self)
{
    const za_role_config_t *config = self->config;
    double deadline = za_clock_mono ()
                    + 2 * config->heartbeat.ivl_secs * config->heartbeat.liveness;
    while (1) {
        if (za_worker_call_all (self, ZA_OP_PULL))
            return -1;
        int waiting = 0;
        for (int p = 0; p < self->ps_count; p++) {
            const za_wire_msg_t *r = self->replies [p];
            waiting += r->op == ZA_OP_ERROR && streq (r->code, "not_ready") && r->step < 0;
        }
        if (!waiting)
            return 0;
        if (za_clock_mono () > deadline) {
            za_info ("chief: %d lost ps hold no worker's values after %.0f s: they get the "
                     "newest checkpoint's", waiting,
                     2 * config->heartbeat.ivl_secs * config->heartbeat.liveness);
            return 0;
        }
        za_worker_alive (self, za_clock_mono ());
        zclock_sleep (NOT_READY_RETRY_MS);
    }
}

//  ps-async: some ps lost their state (restarted), the others kept theirs.
//  Nothing goes back to a checkpoint: a lost ps gets the freshest values of
//  its shard the chief holds (pulled at most a step ago: with_pulled) and its
//  optimizer slots from the newest checkpoint (fresh ones before the first);
//  a ps that kept its state keeps its values and slots (its snapshot, taken
//  while it holds still); global_step goes on from the newest step the chief
//  or a live ps knows. A chief that has pulled nothing (it has just started)
//  gives a lost ps its shard of the newest checkpoint. Every ps is then
//  initialised with that one state, and a lost ps prefers a worker's offer
//  of a later step (PROTOCOL.md 7.5). Returns 0, or -1 with an error.
int
za_worker_reinit_lost (za_worker_t *self, int with_pulled)
{
    if (!with_pulled && self->config->rejoin && s_wait_for_offers (self))
        return -1;
    size_t bytes = self->vars->total * sizeof (float);
    float *pulled = with_pulled? (float *) malloc (bytes): NULL;
    if (with_pulled && !pulled)
        return za_error ("%s: out of memory keeping the pulled values", self->who);
    if (pulled)
        memcpy (pulled, za_replica_values (self->replica), bytes);
    int restored = 0;
    int64_t checkpoint_step = -1;
    int rc = za_worker_call_all (self, ZA_OP_RELEASE)
          || za_replica_restore_newest (self->replica, self->config->run.model_dir,
                                        !with_pulled, &restored, &checkpoint_step)? -1: 0;
    if (rc == 0 && !restored)
        za_replica_reset_slots (self->replica);
    //  Ours unless the checkpoint is newer (a snapshot may be a push ahead of
    //  what we pulled, and a restarted chief's values are only its first).
    int ours = pulled && (!restored || self->values_step > checkpoint_step);
    if (ours)
        memcpy (za_replica_values (self->replica), pulled, bytes);
    free (pulled);
    //  What the ps that kept their state hold: values and slots, held still.
    if (rc == 0)
        rc = za_worker_call_all (self, ZA_OP_HOLD)
          || za_worker_expect_or (self, ZA_OP_HELD, "not_ready")
          || za_worker_call_all (self, ZA_OP_SNAPSHOT)
          || za_worker_expect_or (self, ZA_OP_SNAPSHOT_DATA, "not_ready")
          || za_worker_take_parts_of (self, 1, 1)? -1: 0;
    if (rc)
        return -1;
    int64_t step = ours? self->values_step: restored? checkpoint_step: 0;
    if (with_pulled && self->global_step > step)
        step = self->global_step;
    char lost [256] = "";
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (r->op == ZA_OP_SNAPSHOT_DATA && r->step > step)
            step = r->step;
        if (r->op == ZA_OP_ERROR && strlen (lost) + 16 < sizeof lost)
            snprintf (lost + strlen (lost), sizeof lost - strlen (lost), "%s%d",
                      *lost? ", ": "", p);
    }
    //  A lost ps takes a worker's offer of a later step than ours (INIT_OK
    //  says the step it went on from: ps 0's is the global step).
    self->prefer_offer = 1;
    rc = za_worker_call_all (self, ZA_OP_RELEASE) || za_worker_init_all (self, step)? -1: 0;
    self->prefer_offer = 0;
    if (rc)
        return -1;
    int offered = 0;
    for (int p = 0; p < self->ps_count; p++)
        if (self->replies [p]->step > step) {
            offered = 1;
            if (p == 0)
                step = self->replies [p]->step;
        }
    char slots [64] = "fresh slots";
    if (restored)
        snprintf (slots, sizeof slots, "the slots of checkpoint %" PRId64, checkpoint_step);
    za_info ("chief: ps %s lost its state (restarted?): it gets %s values and %s%s: going "
             "on from step %" PRId64 " (no rewind)", lost,
             offered? "a worker's newer": ours? "the chief's newest"
             : restored? "the checkpoint's": "the initial",
             slots, self->ps_count > 1? ", the other ps keep theirs": "", step);
    return 0;
}

//  Returns 0 when the ps hold a state to train from, WORKER_OVER when they say
//  training is over already, -1 on an error.
int
za_worker_chief_init (za_worker_t *self)
{
    //  A restarted chief finds every ps holding the training state: it goes on
    //  from their step instead of rewinding them to its newest checkpoint.
    //  Its checkpoints keep the grid of save_checkpoints_steps, so the next
    //  one comes as soon as the step passes the next multiple.
    if (za_worker_call_all (self, ZA_OP_PULL))
        return -1;
    if (za_worker_any_error (self, "done")) {
        self->global_step = self->replies [0]->step;
        za_info ("chief: the ps say training is over (step %" PRId64 "): nothing to do",
                 self->global_step);
        return WORKER_OVER;
    }
    int all_ready = 1;
    for (int p = 0; p < self->ps_count; p++)
        all_ready &= self->replies [p]->op == ZA_OP_VALUES;
    if (all_ready && za_worker_take_values (self) == 0) {
        self->init_step = self->replies [0]->step;
        za_info ("chief: the ps are at step %" PRId64 ": going on from there",
                 self->init_step);
        //  The next checkpoint counts from the newest on disk, not from here.
        int64_t *steps = NULL;
        int count = za_checkpoint_list (self->config->run.model_dir, &steps);
        self->hooks.saver.last_saved = count > 0? steps [count - 1]: -1;
        free (steps);
        return 0;
    }
    //  ps-async, this chief was restarted and some ps too (or a ps lost while
    //  others kept their state): those keep it, a lost one gets a worker's
    //  offer or the checkpoint's shard.
    int any_ready = 0;
    for (int p = 0; p < self->ps_count; p++)
        any_ready |= self->replies [p]->op == ZA_OP_VALUES;
    if ((any_ready || self->config->rejoin) && self->config->strategy == ZA_STRATEGY_PS_ASYNC) {
        if (za_worker_reinit_lost (self, 0))
            return -1;
        int64_t *steps = NULL;
        int count = za_checkpoint_list (self->config->run.model_dir, &steps);
        self->hooks.saver.last_saved = count > 0? steps [count - 1]: -1;
        free (steps);
        return 0;
    }
    //  Fresh ps, or some restarted: every ps gets the newest checkpoint (or the
    //  initial values), one consistent state.
    int restored;
    int64_t step = 0;
    if (za_replica_restore_newest (self->replica, self->config->run.model_dir, 1, &restored,
                                   &step))
        return -1;
    if (restored)
        za_info ("chief: restored step %" PRId64 " from '%s'", step,
                 self->config->run.model_dir);
    if (za_worker_init_all (self, step))
        return -1;
    self->hooks.saver.last_saved = restored? step: -1;
    za_info ("chief: %d ps initialised at step %" PRId64, self->ps_count, step);
    return 0;
}

//  Forgets the slots kept: an init gives every ps a state of its own.
void
za_worker_forget_slots (za_worker_t *self)
{
    for (int p = 0; p < self->ps_count; p++)
        self->slot_steps [p][0] = self->slot_steps [p][1] = -1;
}

//  Which of ps p's two slot copies holds `step`'s (0, 1), or -1: neither.
int
za_worker_slot_copy_of (const za_worker_t *self, int p, int64_t step)
{
    return self->slot_steps [p][0] == step? 0: self->slot_steps [p][1] == step? 1: -1;
}

//  Copies every ps's slots of `step` into the replica, all or none. Returns
//  0, or -1 when a ps's are missing.
int
za_worker_restore_slots (za_worker_t *self, int64_t step)
{
    if (!za_worker_keeps_state (self))
        return 0;
    int which [ZA_ROLE_MAX_PS];
    for (int p = 0; p < self->ps_count; p++) {
        which [p] = za_worker_slot_copy_of (self, p, step);
        if (which [p] < 0)
            return -1;
    }
    int slot_count = za_optim_slot_count (za_replica_optim (self->replica)->kind);
    for (int p = 0; p < self->ps_count; p++) {
        const float *from = self->slot_copies [p][which [p]];
        for (int s = 0; s < slot_count; s++)
            for (int i = 0; i < self->part_count [p]; i++) {
                const za_part_t *part = &self->placement.parts [self->parts [p][i]];
                memcpy (za_replica_slot (self->replica, s)
                        + self->vars->vars [part->var].offset + part->offset, from,
                        part->size * sizeof (float));
                from += part->size;
            }
    }
    return 0;
}

//  Why the chief (ps-sync) cannot give every ps the state of the step it is
//  at: into why, for the log that says it reloads a checkpoint instead.
void
za_worker_why_no_state (za_worker_t *self, char *why, size_t size)
{
    *why = 0;
    if (!self->config->is_chief || self->config->strategy != ZA_STRATEGY_PS_SYNC)
        return;
    int64_t step = self->global_step;
    if (self->state_step < 0 || self->state_step != step) {
        snprintf (why, size, " (the chief holds no whole state of step %" PRId64 ")", step);
        return;
    }
    if (!za_worker_keeps_state (self))
        return;
    for (int p = 0; p < self->ps_count; p++) {
        if (za_worker_slot_copy_of (self, p, step) >= 0)
            continue;
        const int64_t *steps = self->slot_steps [p];
        int64_t newest = steps [0] > steps [1]? steps [0]: steps [1];
        if (newest < 0)
            snprintf (why, size, " (ps %d sent no slots since its init)", p);
        else
            snprintf (why, size, " (ps %d's slots of step %" PRId64 " did not come; its newest "
                      "are of step %" PRId64 ")", p, step, newest);
        return;
    }
}
