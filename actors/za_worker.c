/*  za_worker.c: the worker actor, and the chief's duties on top of it. Each
    step: compute gradients on this worker's shard of the data, push them to
    every ps and take the fresh values from the replies (one round trip per
    ps per step). The chief initialises or restores the ps, checkpoints from
    a consistent snapshot (hold all, snapshot all, release all), writes
    metrics, and at max_steps saves the final snapshot and stops the ps.

    A ps restarted at the same endpoint comes back without state and says
    not_ready: the chief reloads the newest checkpoint into every ps (under
    ps-sync, the state of the current step, which it holds), a worker waits
    for that, and both go on from there (s_recover).

    This file is the actor and its training loop; its requests to every ps
    are za_worker_calls.c's, the chief's duties za_worker_chief.c's, and
    za_worker_private.h is what they share.                                */
#include "za_worker_private.h"
#include "za/za_trace.h"
#include "za/za_curve.h"
#include "za/za_preempt.h"

//  After a failure a ps may be gone: the bye does not wait longer than this.
#define BYE_AFTER_FAILURE_SECS 2.0

static void
s_worker_destroy (za_worker_t **self_p)
{
    za_worker_t *self = *self_p;
    if (!self)
        return;
    //  Closing the sockets lets libzmq drop what it could not send; only then
    //  can the frames lent from our blocks all come back.
    for (int p = 0; p < self->ps_count; p++) {
        zsock_destroy (&self->dealers [p]);
        za_shm_link_destroy (&self->links [p]);     //  (with a record it held)
        zmsg_destroy (&self->reply_msgs [p]);
        za_free (self->slot_copies [p][0]);
        za_free (self->slot_copies [p][1]);
        free (self->replies [p]);
    }
    za_shm_bell_destroy (&self->bell);
    free (self->spare);
    za_wire_lease_wait (&self->lease);
    za_free (self->low_grads);
    za_input_destroy (&self->input);
    za_hooks_end (&self->hooks.hooks, &self->hooks.context);
    za_replica_destroy (&self->replica);
    free (self->out);
    free (self);
    *self_p = NULL;
}

//  What we keep of ps p: its parts, a reply, a socket connected to it, its
//  liveness, and a link when it is on this host. 0, or -1 with an error.
static int
s_ps_new (za_worker_t *self, int p, double now)
{
    const za_role_config_t *config = self->config;
    self->part_count [p] = za_partition_parts_of (&self->placement, p, self->parts [p],
                                                  ZA_PARTITION_MAX_PARTS);
    self->replies [p] = (za_wire_msg_t *) malloc (sizeof (za_wire_msg_t));
    self->dealers [p] = zsock_new (ZMQ_DEALER);
    if (!self->replies [p] || !self->dealers [p])
        return za_error ("%s: out of memory", self->who);
    //  No ZMTP heartbeats here: they would drop the connection, and the
    //  request in flight, of a ps that is only paused; our pings judge it.
    //  Nothing ps p sends is larger than its largest part (or a header).
    uint64_t largest = 0;
    size_t push = 0;
    for (int i = 0; i < self->part_count [p]; i++) {
        uint64_t size = self->placement.parts [self->parts [p][i]].size;
        largest = size > largest? size: largest;
        push += size * sizeof (float) + 4096;
    }
    zsock_set_maxmsgsize (self->dealers [p], za_wire_max_frame (largest * sizeof (float)));
    za_curve_client (self->dealers [p]);
    //  A send that would block (a ps never reached, its queue full) gives
    //  up when the reply would have: it names the ps then.
    if (config->timeout_secs > 0)
        zsock_set_sndtimeo (self->dealers [p], (int) (config->timeout_secs * 1000));
    if (zsock_connect (self->dealers [p], "%s", config->ps_endpoints [p]) < 0)
        return za_error ("%s: cannot connect to ps %d at %s", self->who, p,
                         config->ps_endpoints [p]);
    //  A ps on this host, in another process: our pushes through a segment
    //  of twice a push (inproc frames are zero-copy already).
    if (za_curve_loopback (config->ps_endpoints [p]) && za_shm_enabled ()
        && strncmp (config->ps_endpoints [p], "inproc://", 9)) {
        self->links [p] = za_shm_link_new (1, 2 * push);
        if (!self->links [p])
            za_info ("%s: no shared memory for ps %d (%s): tensors go as frames", self->who, p,
                     za_last_error ());
        if (self->links [p] && !self->bell && !(self->bell = za_shm_bell_new ()))
            za_info ("%s: %s; headers go over ZeroMQ", self->who, za_last_error ());
        if (self->links [p])
            za_shm_link_set_bell (self->links [p], self->bell);
    }
    za_peer_init (&self->peers [p], config->heartbeat, now);
    return 0;
}

static za_worker_t *
s_worker_new (const za_role_config_t *config, zsock_t *pipe)
{
    za_worker_t *self = (za_worker_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->config = config;
    self->pipe = pipe;
    self->ps_count = config->ps_count;
    self->stats = config->stats;
    za_role_who (config, self->who, sizeof self->who);
    za_wire_lease_init (&self->lease);
    self->state_step = -1;
    for (int p = 0; p < ZA_ROLE_MAX_PS; p++)
        self->slot_steps [p][0] = self->slot_steps [p][1] = -1;
    self->out = (za_wire_msg_t *) malloc (sizeof *self->out);
    self->spare = (za_wire_msg_t *) malloc (sizeof *self->spare);
    if (!self->out || !self->spare || config->ps_count < 1 || config->ps_count > ZA_ROLE_MAX_PS) {
        za_error ("%s: needs 1 to %d ps (got %d)", self->who, ZA_ROLE_MAX_PS,
                  config->ps_count);
        goto fail;
    }
    //  The ps apply the updates: only the chief, who initialises them and
    //  checkpoints their snapshots, holds optimizer slots.
    za_replica_config_t replica = za_run_config_replica (&config->run, config->model_fn,
                                                         config->params, config->input);
    replica.train = 1;
    replica.optim = config->is_chief? &config->optim: NULL;
    replica.replica_index = config->worker_index;
    self->replica = za_replica_new (&replica, config->run.seed);
    if (!self->replica)
        goto fail;
    self->vars = za_replica_vars (self->replica);
    if (za_partition_compute (self->vars, config->ps_count, config->partition_floats,
                              &self->placement))
        goto fail;
    if (config->wire_dtype == ZA_DTYPE_BF16
        && !(self->low_grads = (uint16_t *) za_alloc ((self->vars->total + 1)
                                                      * sizeof (uint16_t))))
        goto fail;
    double now = za_clock_mono ();
    for (int p = 0; p < self->ps_count; p++)
        if (s_ps_new (self, p, now))
            goto fail;
    if (!config->train && !config->input_fn) {
        za_error ("%s: no training data", self->who);
        goto fail;
    }
    za_role_hooks_init (&self->hooks, config, self->who, za_worker_save_checkpoint, self);
    return self;
fail:
    s_worker_destroy (&self);
    return NULL;
}

// ---------------------------------------------------------------------------
//  The loop

//  Pulls the values, waiting while the chief has not initialised the ps.
//  The chief, who has, does not wait: a ps that says not_ready to it lost
//  its state. Returns 0, WORKER_OVER when the ps say training is over, WORKER_PS_LOST
//  (the chief), or -1 with an error.
static int
s_pull_when_ready (za_worker_t *self)
{
    double deadline = za_clock_mono () + self->config->timeout_secs;
    for (int asked = 0; ; asked++) {
        if (za_worker_call_all (self, ZA_OP_PULL))
            return -1;
        if (!za_worker_any_error (self, "not_ready"))
            break;
        if (self->config->is_chief)
            return WORKER_PS_LOST;
        if (asked == 0)
            za_info ("%s: ps %d waits for the chief to initialise it: waiting up to %.0f s",
                     self->who, za_worker_error_from (self, "not_ready"),
                     self->config->timeout_secs);
        //  Nothing of ours to save while we wait: SIGTERM ends it at once
        //  (exit 75: the job runs again), as Ctrl-C does (130).
        if (za_preempt_requested ()) {
            za_info ("%s: preempted (SIGTERM) while waiting for the chief to initialise the "
                     "ps", self->who);
            return WORKER_OVER;
        }
        if (zsys_interrupted)
            return za_error ("%s: interrupted while waiting for the chief to initialise the ps",
                             self->who);
        double now = za_clock_mono ();
        if (now > deadline)
            return za_error ("%s: the ps were not initialised within %.0f s (is the chief "
                             "running?)", self->who, self->config->timeout_secs);
        za_worker_alive (self, now);
        zclock_sleep (NOT_READY_RETRY_MS);
    }
    if (za_worker_any_error (self, "done")) {
        //  We came after the end: the refusal still says where training ended.
        self->global_step = self->replies [0]->step;
        self->ps_preempted = za_worker_any_error (self, "preempted");
        return WORKER_OVER;
    }
    if (za_worker_expect (self, ZA_OP_VALUES) || za_worker_take_values (self))
        return -1;
    self->global_step = self->replies [0]->step;
    return 0;
}

//  Logs, summaries, checkpoints and published rates measure from here: the
//  start, or a reload that moved global_step back.
static void
s_restart_clocks (za_worker_t *self)
{
    za_role_rates_restart (&self->rates, self->global_step, self->own_steps, za_clock_mono ());
    za_hooks_begin (&self->hooks.hooks, self->global_step);
}

//  ps-async, a worker: offers each ps that lost its state the values of its
//  shard we pulled last, with their step, so that a restarted chief without
//  values of its own need not reload a checkpoint (PROTOCOL.md 7.5). Never
//  answered; what could not go is said and left.
static void
s_offer (za_worker_t *self)
{
    for (int p = 0; p < self->ps_count; p++) {
        const za_wire_msg_t *r = self->replies [p];
        if (r->op != ZA_OP_ERROR || !streq (r->code, "not_ready"))
            continue;
        za_worker_build (self, ZA_OP_OFFER, p);
        if (za_worker_send_to (self, p))
            za_info ("%s: cannot offer ps %d our values: %s", self->who, p,
                     za_last_error ());
        else
            za_info ("%s: offered ps %d our values of step %" PRId64, self->who, p,
                     self->values_step);
    }
    //  The frames point into the values the next pull overwrites.
    za_wire_lease_wait (&self->lease);
}

//  A ps lost its state: it answered not_ready, so it was restarted (by a
//  supervisor or by hand, at the same endpoint). The chief brings every ps
//  back to one consistent state: under ps-async without going back
//  (za_worker_reinit_lost), under ps-sync from the state of its step it holds, else
//  from the newest checkpoint (it releases them all first: a held ps refuses
//  init). A worker offers the lost ps its values (ps-async) and waits for
//  that. Both then pull the values and go on from there. Returns as
//  s_pull_when_ready (WORKER_PS_LOST: a ps was lost again).
static int
s_recover (za_worker_t *self)
{
    int lost = za_worker_error_from (self, "not_ready");
    za_worker_set_state (self, ZA_ROLE_RECOVERING);
    if (lost < 0)
        //  ps-sync: a push computed on values the ps no longer hold (the
        //  chief gave them an earlier state after we had taken the later).
        za_info ("%s: ps %d went back to an earlier step (a ps was restarted): pulling "
                 "its values", self->who, za_worker_error_from (self, "rewound"));
    else
    if (self->config->is_chief && self->state_step >= 0
        && self->state_step == self->global_step
        && za_worker_restore_slots (self, self->state_step) == 0) {
        //  ps-sync: the replica holds the values of the chief's step, and
        //  every ps's slots of it. Every ps gets that state (a step half
        //  applied, on the ps that kept theirs, is undone): nobody goes back
        //  further than the chief's step.
        int64_t step = self->state_step;
        if (za_worker_call_all (self, ZA_OP_RELEASE))
            return -1;
        za_info ("chief: ps %d lost its state (restarted?): giving all %d ps the state of "
                 "step %" PRId64 " the chief holds (no rewind)", lost, self->ps_count, step);
        if (za_worker_init_all (self, step))
            return -1;
    }
    else
    if (self->config->is_chief && self->config->strategy == ZA_STRATEGY_PS_ASYNC) {
        if (za_worker_reinit_lost (self, self->pulled_any))
            return -1;
    }
    else
    if (self->config->is_chief) {
        int restored;
        int64_t step = 0;
        char why [160];
        za_worker_why_no_state (self, why, sizeof why);
        if (za_worker_call_all (self, ZA_OP_RELEASE)
            || za_replica_restore_newest (self->replica, self->config->run.model_dir, 0,
                                          &restored, &step))
            return -1;
        //  Before the first checkpoint there is only what we pulled last (not
        //  a warm start's values again: warm 0).
        if (!restored)
            step = self->global_step;
        za_info ("chief: ps %d lost its state (restarted?) at step %" PRId64 ": reloading "
                 "step %" PRId64 " from %s into all %d ps%s", lost, self->global_step, step,
                 restored? self->config->run.model_dir: "the chief's newest values",
                 self->ps_count, why);
        if (za_worker_init_all (self, step))
            return -1;
        self->hooks.saver.last_saved = restored? step: -1;
    }
    else {
        za_info ("%s: ps %d lost its state (restarted?): waiting for the chief to "
                 "reload it", self->who, lost);
        if (self->config->strategy == ZA_STRATEGY_PS_ASYNC && self->pulled_any)
            s_offer (self);
    }
    int pulled = s_pull_when_ready (self);
    if (pulled == 0) {
        za_info ("%s: going on from step %" PRId64, self->who, self->global_step);
        s_restart_clocks (self);
        za_worker_set_state (self, ZA_ROLE_RUNNING);
    }
    return pulled;
}

//  The hooks after a step: 0, -1 with an error, or what the checkpoint
//  saver's save said (WORKER_PS_LOST).
static int
s_after_step (za_worker_t *self, double loss, int batch, double now)
{
    int rc = za_role_hooks_after_step (&self->hooks, self->config, self->replica,
                                       self->global_step, loss, batch, now - self->start_time);
    if (rc < 0)
        return -1;
    return rc > 0 && self->config->is_chief? self->hooks.saver.rc: 0;
}

//  Trains until max_steps, or until the ps say training is over; the chief
//  also until a preemption request (za_preempt.h: its final checkpoint then
//  stops the ps, and the workers hear `done`). Returns 0, -1 with an error,
//  or WORKER_PS_LOST.
static int s_share_input (za_worker_t *self);

static int
s_run_steps (za_worker_t *self)
{
    const za_role_config_t *config = self->config;
    //  ps-sync: a push and pull wait at the ps for every member's push.
    if (self->stats)
        atomic_store_explicit (&self->stats->exchange_waits,
                               config->strategy == ZA_STRATEGY_PS_SYNC, memory_order_relaxed);
    while (self->global_step < config->max_steps && !self->hooks.stop.requested
           && !zsys_interrupted && !(config->is_chief && za_preempt_requested ())) {
        double step_start = za_clock_mono ();
        za_worker_alive (self, step_start);
        if (config->membership && s_share_input (self))
            return -1;
        if (self->left)
            break;
        za_batch_t batch;
        if (za_role_next_batch (self->input, self->who, &batch))
            return -1;
        double input = za_clock_mono () - step_start;
        //  The last push's gradient frames must be let go before we overwrite.
        za_wire_lease_wait (&self->lease);
        double loss, t0 = za_clock_mono ();
        za_role_stats_computing (self->stats, t0);
        if (za_replica_compute_gradients (self->replica, &batch, self->global_step, &loss))
            return -1;
        //  A diverged model's gradient is not pushed: the ps keep their values.
        if (za_role_loss_check (&self->hooks, loss, self->global_step + 1))
            return -1;
        za_worker_alive (self, za_clock_mono ());
        //  mixed_float16: a gradient that overflowed goes out as none (the
        //  loss scale halves for the next).
        self->skip_push = !za_replica_loss_scale_check (self->replica);
        //  The whole gradient is here: clipped by its global norm before it is
        //  split among the ps (a ps sees only its part).
        if (config->optim.global_clipnorm > 0
            && za_replica_clip_gradients (self->replica, config->optim.global_clipnorm))
            return -1;
        //  --wire-dtype bf16: the push carries the gradient's cast (its frames
        //  came back at the lease wait above, as the block's did).
        if (self->low_grads)
            za_f32_to_bf16 (za_replica_gradients (self->replica), self->low_grads,
                            self->vars->total);
        double t1 = za_clock_mono ();
        if (za_worker_call_all (self, ZA_OP_PUSH))
            return -1;
        if (za_worker_any_error (self, "done")) {
            if (self->replies [0]->step > self->global_step)
                self->global_step = self->replies [0]->step;
            self->ps_preempted = za_worker_any_error (self, "preempted");
            return 0;
        }
        int rc = za_worker_outcome (self, ZA_OP_VALUES);
        if (rc == 0)
            rc = za_worker_take_values (self);
        if (rc)
            return rc;
        int64_t step = self->global_step;
        self->global_step = self->replies [0]->step;
        self->own_steps++;
        double now = za_clock_mono ();
        if (za_trace_on ()) {
            za_trace_event (ZA_TRACE_STEP, "step", step_start, now, step);
            za_trace_event (ZA_TRACE_INPUT, "input", step_start, step_start + input, step);
            za_trace_event (ZA_TRACE_COMPUTE, "forward+backward", t0, t1, step);
            za_replica_trace_compute (self->replica, step);
            za_trace_event (ZA_TRACE_EXCHANGE, "push+pull", t1, now, step);
        }
        za_role_step_times_t times = {
            .step = now - step_start,
            .phase = {[ZA_PHASE_INPUT] = input, [ZA_PHASE_COMPUTE] = t1 - t0,
                      [ZA_PHASE_EXCHANGE] = now - t1}};
        za_role_rates_publish (&self->rates, self->stats, self->global_step, self->own_steps,
                               loss, batch.size, &times, now);
        za_role_bad_publish (self->stats, self->input);
        //  The summaries' examples/sec count a global step's batches.
        if ((rc = s_after_step (self, loss, batch.size * za_role_batches_per_step (config),
                                now)))
            return rc;
    }
    return 0;
}

//  The input of this task's share: in an elastic job, among the members
//  now (a change since the last call re-shards it; a worker not listed yet
//  reads as its place among all the slots says); otherwise of the cluster.
//  Returns 0, or -1 with an error.
static int
s_share_input (za_worker_t *self)
{
    const za_role_config_t *config = self->config;
    if (!config->membership) {
        self->input = za_role_train_input (config, self->who, self->global_step);
        return self->input? za_replica_feed (self->replica, self->input): -1;
    }
    int64_t number = za_membership_number (config->membership);
    if (self->input && number == self->members_seen)
        return 0;
    za_members_t *members = (za_members_t *) calloc (1, sizeof *members);
    if (!members)
        return za_error ("%s: out of memory", self->who);
    za_membership_get (config->membership, members);
    int rank = za_members_rank (members, config->worker_index);
    //  It got SIGTERM and the broker no longer lists it: it leaves, the
    //  others go on.
    if (rank < 0 && za_preempt_leave_requested () && members->number > 0) {
        self->left = 1;
        za_info ("%s: left the job at step %" PRId64 " (SIGTERM): members change %" PRId64
                 " goes on with %d trainers", self->who, self->global_step, members->number,
                 members->count);
        free (members);
        return 0;
    }
    //  ps-sync's global rule: the members share the global batch of those it
    //  started with (ps-async: each worker its --batch-size).
    int global = config->strategy == ZA_STRATEGY_PS_SYNC
                 && config->elastic_batch == ZA_ELASTIC_GLOBAL
               ? config->batch_size * config->min_trainers: 0;
    if (rank >= 0 || !self->input) {
        self->members_seen = members->number;
        za_input_destroy (&self->input);
        if (rank >= 0) {
            char text [512];
            za_members_text (members, text, sizeof text);
            za_info ("%s: members change %" PRId64 ": %d trainers (%s); this one reads share "
                     "%d of %d from step %" PRId64, self->who, members->number, members->count,
                     text, rank, members->count, self->global_step);
        }
        self->input = rank >= 0
            ? za_role_train_input_among (config, self->who, self->global_step, members->count,
                                         rank, self->global_step * global, global)
            : za_role_train_input (config, self->who, self->global_step);
        if (self->input && za_replica_feed (self->replica, self->input))
            za_input_destroy (&self->input);
    }
    free (members);
    return self->input? 0: -1;
}

static int
s_train (za_worker_t *self)
{
    const za_role_config_t *config = self->config;
    za_worker_set_state (self, ZA_ROLE_WAITING);
    int rc = config->is_chief? za_worker_chief_init (self): 0;
    if (rc == 0)
        rc = s_pull_when_ready (self);
    if (rc == 0)
        rc = s_share_input (self);
    self->start_time = za_clock_mono ();
    self->start_step = self->global_step;
    s_restart_clocks (self);
    if (rc == 0)
        za_worker_set_state (self, ZA_ROLE_RUNNING);
    while (rc == 0 || rc == WORKER_PS_LOST) {
        if (rc == WORKER_PS_LOST) {
            rc = s_recover (self);
            continue;
        }
        rc = s_run_steps (self);
        if (rc == 0 && config->is_chief)
            rc = za_worker_checkpoint (self, 1);
        //  Stopped early: the evaluators learn where training ended.
        if (rc == 0 && config->run.early_stopping && !self->left)
            rc = za_early_stop_end (config->run.model_dir, self->global_step);
        if (rc == 0)
            return 0;
    }
    return rc == WORKER_OVER? 0: -1;
}

void
za_worker_actor (zsock_t *pipe, void *args)
{
    const za_role_config_t *config = (const za_role_config_t *) args;
    za_worker_t *self = s_worker_new (config, pipe);
    zsock_signal (pipe, 0);
    if (!self) {
        za_role_failed_start (pipe, config->stats);
        return;
    }
    za_info ("%s (shard %d of %d): %d ps, batch %d, up to step %" PRId64, self->who,
             config->worker_index, config->num_workers, config->ps_count, config->batch_size,
             config->max_steps);
    int failed = s_train (self);         //  before its input is looked at: s_train makes it
    int rc = za_role_end_status (failed, self->input, &self->hooks, self->replica);
    //  Preempted: SIGTERM, or the chief's (the ps stopped for it: a static
    //  cluster has no broker to tell every task).
    int preempted = rc == 0 && (za_preempt_requested () || self->ps_preempted)
                 && self->global_step < config->max_steps;
    if (!self->terminated) {
        //  Leave: every ps counts our bye before it exits. After a failure a ps
        //  may be gone, so we do not wait long; one that lost its state has
        //  nothing to leave.
        double wait = config->timeout_secs;
        if (rc && wait > BYE_AFTER_FAILURE_SECS)
            wait = BYE_AFTER_FAILURE_SECS;
        if (za_worker_call_all_within (self, ZA_OP_BYE, wait) == 0)
            za_worker_expect_or (self, ZA_OP_BYE_OK, "not_ready");
    }
    za_role_publish_end (config, rc, self->global_step);
    double secs = za_clock_mono () - self->start_time;
    za_info ("%s: %s at step %" PRId64 " after %" PRId64 " own steps in %.1f s",
             self->who, rc? "failed": preempted? "preempted": self->left? "left": "done",
             self->global_step,
             self->own_steps, secs);
    if (self->own_steps > 0) {
        double n = (double) self->own_steps;
        const za_role_step_times_t *spent = &self->rates.spent;
        double compute = spent->phase [ZA_PHASE_COMPUTE];
        double exchange = spent->phase [ZA_PHASE_EXCHANGE], input = spent->phase [ZA_PHASE_INPUT];
        double other = spent->step - compute - exchange;
        za_info ("%s: per step %.3f ms: compute %.3f ms, push+pull %.3f ms, other %.3f ms "
                 "(%.1f%%), of which waiting for input %.3f ms (%.2f%%)", self->who,
                 1e3 * spent->step / n, 1e3 * compute / n, 1e3 * exchange / n, 1e3 * other / n,
                 spent->step > 0? 100 * other / spent->step: 0, 1e3 * input / n,
                 spent->step > 0? 100 * input / spent->step: 0);
    }
    if (self->frozen_left_out)
        za_info ("%s: %" PRIu64 " tensors of frozen variables left out of the pushes",
                 self->who, self->frozen_left_out);
    uint32_t crc = za_role_values_crc (za_replica_values (self->replica), self->vars->total);
    int64_t step = self->global_step, floats = (int64_t) self->vars->total;
    int terminated = self->terminated;
    s_worker_destroy (&self);
    if (!terminated)
        za_role_report_done (pipe, preempted? ZA_EXIT_REQUEUE: rc, step, crc, floats);
}
