/*  za_mirrored.c: a worker of the all-reduce strategy (TensorFlow's
    MultiWorkerMirroredStrategy). No ps: every worker holds the whole model
    and its optimizer slots. Each step it computes gradients on its shard,
    the ring replaces them by their mean over all workers (the same bits on
    each), and each applies that mean itself: the replicas never differ.

    The chief (worker index 0: the chief task, or worker 0 when the cluster
    has no chief) starts everyone from one state. It restores the newest
    checkpoint, or keeps the seed's values, and broadcasts a start record
    (the model's size, the optimizer, the step) and then the values and the
    slots; a worker whose model or optimizer differs from the chief's stops
    with an error naming the difference. Global steps count synchronous
    steps, each of num_workers x batch_size examples; the chief writes the
    checkpoints and the metrics.                                           */
#include "za_group.h"
#include "za_reducer.h"
#include "za_role_private.h"
#include "za/za_early_stop.h"
#include "za/za_preempt.h"
#include "za/za_ring.h"
#include "za/za_trace.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

//  A step's rounds on the ring (za_reducer.h).
#define MAX_BUCKETS ZA_REDUCER_MAX_BUCKETS
//  Elastic: how often a task looks for the broker's news of its members.
#define MEMBERS_POLL_MS 20
//  The stop round's flags before the members' numbers: the chief's early
//  stop, a preemption, a diverged loss.
#define STOP_FLAGS 3

typedef struct {
    const za_role_config_t *config;
    zsock_t *pipe;
    char who [32];                              //  "chief 0", "worker 2"
    za_replica_t *replica;                      //  gradients and slots: the whole model
    const za_vars_t *vars;
    za_ring_t *ring;
    za_input_t *input;
    int64_t global_step;
    int64_t own_steps;
    int preempted;                  //  every rank stopped for preemption before max_steps
    int left;                       //  this worker left the job (SIGTERM, elastic)
    int values_diverged;            //  a checkpoint refused our values (not finite)
    int live;                                   //  holds values this process trained on
    int terminated;                             //  $TERM came on the pipe
    za_role_hooks_t hooks;                      //  the counter; the savers for the chief
    double start_time;
    //  Where a step's time goes: the gradients, the all-reduce, the rest.
    za_role_stats_t *stats;
    za_role_rates_t rates;
    double wait_average;                        //  ms per step waiting on the ring
    za_reducer_t reducer;
    za_group_t group;                           //  the gradients' sum on the devices
    //  An elastic job (config->membership): the members the ring has now,
    //  and where the global stream of examples is (the global batch changes
    //  size with them).
    za_members_t *members;
    int rank, size;                             //  in the ring now
    int64_t examples_done;
    double reform_start;                        //  a re-formation under way since
    int64_t max_steps;                          //  the chief's (--epochs counted from
                                                //  the input's place it resumed at)
} s_mirrored_t;

//  What the chief broadcasts first: everyone checks it against its own.
typedef struct {
    int64_t floats;                             //  the model's variables
    int64_t step;                               //  where training goes on from
    int64_t num_workers;
    za_optim_config_t optim;
    int64_t bucket_floats;                      //  --bucket-kib: the rounds depend on it
    int64_t wire_dtype;                         //  --wire-dtype: the chunks' dtype
    int64_t early_stopping;                     //  a stop flag goes round after each step
    int64_t loss_good_steps;                    //  mixed_float16: the source's loss scale,
    float loss_scale;                           //  which every rank takes (the same scale
                                                //  everywhere, or the mean is wrong)
    int64_t examples_done;                      //  the global stream's place (elastic)
    int64_t slots_step [ZA_MAX_VARS];           //  where each variable's slots started
                                                //  (Adam's bias correction counts from it)
    int64_t max_steps;                          //  where every rank stops
} s_start_t;

#define START_FLOATS ((sizeof (s_start_t) + sizeof (float) - 1) / sizeof (float))

//  The checkpoint of `step`; the final one waits for room on a full disk.
//  Returns 0, ZA_SAVE_SKIPPED (a periodic one the disk refused) or -1.
static int
s_save_at (s_mirrored_t *self, int64_t step, int final)
{
    const za_run_config_t *run = &self->config->run;
    za_replica_set_examples_done (self->replica, self->examples_done);
    int saved = za_replica_save_through (self->replica, run->model_dir, step,
                                         run->keep_checkpoint_max, final);
    if (saved)
        return saved;
    za_info ("%s: checkpoint at step %" PRId64, self->who, step);
    za_role_announce_checkpoint (self->config, self->pipe, step);
    return 0;
}

//  The checkpoint saver's save (za_hooks.h). Values that diverged (not
//  finite, not written) end the training in the step's stop round, where
//  every rank stops with this one.
static int
s_save (void *arg, int64_t step)
{
    s_mirrored_t *self = (s_mirrored_t *) arg;
    int saved = s_save_at (self, step, 0);
    if (saved < 0 && za_replica_diverged (self->replica)) {
        self->values_diverged = 1;
        return ZA_SAVE_SKIPPED;
    }
    return saved;
}

static void
s_mirrored_destroy (s_mirrored_t **self_p)
{
    s_mirrored_t *self = *self_p;
    if (!self)
        return;
    za_reducer_stop (&self->reducer);
    za_group_close (&self->group);
    za_ring_destroy (&self->ring);
    za_input_destroy (&self->input);
    za_hooks_end (&self->hooks.hooks, &self->hooks.context);
    za_replica_destroy (&self->replica);
    free (self->members);
    free (self);
    *self_p = NULL;
}

//  The ring's cancel (za_ring_config_t): the members changed since the ring
//  took them.
static int
s_members_changed (void *arg)
{
    s_mirrored_t *self = (s_mirrored_t *) arg;
    return za_membership_number (self->config->membership) != self->members->number;
}

//  The examples of one global step: --batch-size for each trainer, or
//  (an elastic job's global rule) for each of those it started with.
static int64_t
s_global_batch (const s_mirrored_t *self)
{
    const za_role_config_t *config = self->config;
    int trainers = config->membership && config->elastic_batch == ZA_ELASTIC_GLOBAL
                 ? config->min_trainers: self->size;
    return (int64_t) config->batch_size * trainers;
}

static s_mirrored_t *
s_mirrored_new (const za_role_config_t *config, zsock_t *pipe)
{
    s_mirrored_t *self = (s_mirrored_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->config = config;
    self->pipe = pipe;
    self->stats = config->stats;
    self->start_time = za_clock_mono ();
    self->max_steps = config->max_steps;
    za_role_who (config, self->who, sizeof self->who);
    za_replica_config_t replica = za_run_config_replica (&config->run, config->model_fn,
                                                         config->params, config->input);
    replica.train = 1;
    replica.optim = &config->optim;
    replica.replica_index = config->worker_index;
    self->replica = za_replica_new (&replica, config->run.seed);
    if (!self->replica)
        goto fail;
    self->vars = za_replica_vars (self->replica);
    self->rank = config->worker_index;
    self->size = config->num_workers;
    za_ring_config_t ring = {
        .rank = config->worker_index, .size = config->num_workers,
        .bind = config->bind_endpoint, .right = config->ring_right,
        .timeout_secs = config->timeout_secs, .interrupt = pipe,
        .wire_dtype = config->wire_dtype,
    };
    //  Elastic: a ring of one until the members are known (s_reform), and
    //  any wait ends when they change.
    if (config->membership) {
        self->members = (za_members_t *) calloc (1, sizeof *self->members);
        if (!self->members)
            goto fail;
        self->rank = ring.rank = 0;
        self->size = ring.size = 1;
        ring.cancelled = s_members_changed;
        ring.cancel_arg = self;
    }
    self->ring = za_ring_new (&ring);
    if (!self->ring
        || za_reducer_start (&self->reducer, self->ring, za_replica_gradients (self->replica),
                            self->vars, config->bucket_floats))
        goto fail;
    if (self->reducer.running)
        za_replica_on_gradients (self->replica, za_reducer_final, &self->reducer);
    za_group_init (&self->group, self->replica, self->who);
    za_role_hooks_init (&self->hooks, config, self->who, s_save, self);
    return self;
fail:
    s_mirrored_destroy (&self);
    return NULL;
}

//  After a failed ring call: was it $TERM on the pipe?
static void
s_check_term (s_mirrored_t *self)
{
    if (zsock_events (self->pipe) & ZMQ_POLLIN) {
        char *command = zstr_recv (self->pipe);
        self->terminated = command && streq (command, "$TERM");
        zstr_free (&command);
    }
}

// ---------------------------------------------------------------------------
//  One state for all

//  A start record's field that differs from ours, as an error; 0 when none.
static int
s_compare_start (s_mirrored_t *self, const s_start_t *chief, const s_start_t *mine)
{
    const za_optim_config_t *a = &chief->optim, *b = &mine->optim;
    if (chief->floats != mine->floats)
        return za_error ("%s: the chief's model has %" PRId64 " variables' floats, this one "
                         "%" PRId64 ": every worker must run the same model", self->who,
                         chief->floats, mine->floats);
    if (chief->num_workers != mine->num_workers)
        return za_error ("%s: the chief's cluster has %" PRId64 " workers, this one's %"
                         PRId64, self->who, chief->num_workers, mine->num_workers);
    if (chief->bucket_floats != mine->bucket_floats)
        return za_error ("%s: the chief reduces in buckets of --bucket-kib %" PRId64 ", this "
                         "one %" PRId64 ": every worker must run the same job", self->who,
                         chief->bucket_floats / 256, mine->bucket_floats / 256);
    if (chief->wire_dtype != mine->wire_dtype)
        return za_error ("%s: the chief's gradients travel as --wire-dtype %s, this one's as "
                         "%s: every worker must run the same job", self->who,
                         chief->wire_dtype == ZA_DTYPE_BF16? "bf16": "fp32",
                         mine->wire_dtype == ZA_DTYPE_BF16? "bf16": "fp32");
    if (chief->early_stopping != mine->early_stopping)
        return za_error ("%s: the chief %s --stop-if-no-improvement, this one %s: every worker "
                         "must run the same job", self->who,
                         chief->early_stopping? "has": "has no",
                         mine->early_stopping? "has": "has no");
    if (a->kind != b->kind || a->learning_rate != b->learning_rate
        || a->momentum != b->momentum || a->nesterov != b->nesterov || a->beta1 != b->beta1
        || a->beta2 != b->beta2 || a->epsilon != b->epsilon
        || a->initial_accumulator != b->initial_accumulator)
        return za_error ("%s: the chief's optimizer is %s lr %g, this one's %s lr %g (or "
                         "another of their settings differs): every worker must run the same "
                         "job", self->who, za_optim_name (a->kind), (double) a->learning_rate,
                         za_optim_name (b->kind), (double) b->learning_rate);
    const char *name_a = za_schedule_name (a->schedule.kind);
    const char *name_b = za_schedule_name (b->schedule.kind);
    double schedule_a [ZA_SCHEDULE_NUMBERS], schedule_b [ZA_SCHEDULE_NUMBERS];
    za_schedule_numbers (&a->schedule, schedule_a);
    za_schedule_numbers (&b->schedule, schedule_b);
    if (a->weight_decay != b->weight_decay || a->global_clipnorm != b->global_clipnorm
        || memcmp (schedule_a, schedule_b, sizeof schedule_a))
        return za_error ("%s: the chief's update has --weight-decay %g, --clip-norm %g, the "
                         "schedule %s and %g warmup steps, this one's %g, %g, %s and %g (or "
                         "another of the schedule's numbers differs): every worker must run "
                         "the same job", self->who, (double) a->weight_decay,
                         (double) a->global_clipnorm, name_a? name_a: "unknown",
                         a->schedule.warmup_steps, (double) b->weight_decay,
                         (double) b->global_clipnorm, name_b? name_b: "unknown",
                         b->schedule.warmup_steps);
    return 0;
}

//  Which rank a generation starts from: the lowest that holds live values
//  (it has trained in this process), so a restarted chief takes the current
//  values from a peer instead of rewinding everyone to its checkpoint; when
//  none does (the job's start, or every member restarted), rank 0 with its
//  newest checkpoint or its seed's values. Each rank in turn broadcasts the
//  step it holds (-1: none). Returns 0, ZA_RING_RESYNC or -1 with an error.
static int
s_source (s_mirrored_t *self, int *source)
{
    *source = -1;
    for (int rank = 0; rank < self->size; rank++) {
        int64_t held = rank != self->rank? 0: self->live? self->global_step: -1;
        float record [(sizeof held + sizeof (float) - 1) / sizeof (float)];
        memcpy (record, &held, sizeof held);
        int rc = za_ring_broadcast (self->ring, record, sizeof record / sizeof (float), rank, 0);
        if (rc)
            return rc;
        memcpy (&held, record, sizeof held);
        if (held >= 0 && *source < 0)
            *source = rank;
    }
    if (*source < 0)
        *source = 0;
    return 0;
}

//  Starts a generation of the ring: the chief (rank 0) restores its newest
//  checkpoint or keeps the seed's values when it starts; then every worker
//  gets the start record, values and slots of the rank s_source names. A
//  worker that was restarted asks for a new generation first. Returns 0,
//  ZA_RING_RESYNC (again), or -1 with an error.
static int
s_start (s_mirrored_t *self, int first)
{
    const za_role_config_t *config = self->config;
    int64_t step = self->global_step;
    int restored = 0;
    if (!config->is_chief && first && config->rejoin && za_ring_ask_resync (self->ring))
        return -1;
    if (config->is_chief && first
        && (za_mkdirs (config->run.model_dir)
            || za_replica_restore_newest (self->replica, config->run.model_dir, 1, &restored,
                                          &step)))
        return -1;
    if (za_ring_resync (self->ring))
        return -1;
    int source;
    int rc = s_source (self, &source);
    if (rc)
        return rc;
    int64_t read = restored? za_replica_examples_restored (self->replica): 0;
    s_start_t mine = {
        .floats = (int64_t) self->vars->total, .step = step,
        .num_workers = config->num_workers, .optim = *za_replica_optim (self->replica),
        .bucket_floats = (int64_t) config->bucket_floats,
        .wire_dtype = (int64_t) config->wire_dtype,
        .early_stopping = config->run.early_stopping,
        //  Where the stream is: counted on from where the checkpoint said
        //  (it may have been written at another global batch).
        .examples_done = self->examples_done > 0? self->examples_done
                       : read > 0? read: step * s_global_batch (self),
    };
    //  Elastic scale-lr: every rank compares the job's rate, not its scaled one.
    if (config->membership)
        mine.optim.learning_rate = config->optim.learning_rate;
    za_replica_loss_scale_state (self->replica, &mine.loss_scale, &mine.loss_good_steps);
    memcpy (mine.slots_step, za_replica_slots_steps (self->replica), sizeof mine.slots_step);
    mine.max_steps = self->max_steps;
    float record [START_FLOATS];
    memset (record, 0, sizeof record);
    memcpy (record, &mine, sizeof mine);
    //  Bits only: a broadcast copies, it never computes.
    rc = za_ring_broadcast (self->ring, record, START_FLOATS, source, 0);
    if (rc)
        return rc;
    s_start_t chief;
    memcpy (&chief, record, sizeof chief);
    if (s_compare_start (self, &chief, &mine))
        return -1;
    za_replica_set_loss_scale (self->replica, chief.loss_scale, chief.loss_good_steps);
    za_replica_set_slots_steps (self->replica, chief.slots_step);
    //  (--epochs from a checkpoint of another global batch: the source's
    //  count, which its model dir told it.)
    if (chief.max_steps != self->max_steps)
        za_info ("%s: training ends at step %" PRId64 ", the source's (this rank counted %"
                 PRId64 ")", self->who, chief.max_steps, self->max_steps);
    self->max_steps = self->hooks.max_steps = chief.max_steps;
    const za_optim_config_t *optim = za_replica_optim (self->replica);
    int slots = za_optim_slot_count (optim->kind);
    rc = za_ring_broadcast (self->ring, za_replica_values (self->replica), self->vars->total,
                            source, 0);
    for (int s = 0; s < slots && !rc; s++)
        rc = za_ring_broadcast (self->ring, za_replica_slot (self->replica, s),
                                self->vars->total, source, 0);
    if (rc)
        return rc;
    self->global_step = chief.step;
    self->examples_done = chief.examples_done;
    self->live = 1;
    if (config->membership && config->elastic_batch == ZA_ELASTIC_SCALE_LR) {
        float rate = za_role_elastic_rate (config, config->optim.learning_rate, self->size);
        za_replica_set_learning_rate (self->replica, rate);
        za_info ("%s: %d trainers: the learning rate is %g (scale-lr)", self->who, self->size,
                 (double) rate);
    }
    if (config->is_chief && first && source != self->rank)
        za_info ("%s: restarted; took the current values of step %" PRId64 " from rank %d of "
                 "the ring%s", self->who, self->global_step, source,
                 restored? ", not its newest checkpoint": "");
    else if (config->is_chief && first && restored)
        za_info ("%s: restored step %" PRId64 " from '%s'", self->who, step,
                 config->run.model_dir);
    if (!first && self->reform_start > 0)
        za_info ("%s: the ring is re-formed at step %" PRId64 " with %d members, in %.2f s "
                 "(generation %" PRId64 ")", self->who, self->global_step, self->size,
                 za_clock_mono () - self->reform_start, za_ring_generation (self->ring));
    else
    if (!first)
        za_info ("%s: the ring is re-formed at step %" PRId64 " (generation %" PRId64 ")",
                 self->who, self->global_step, za_ring_generation (self->ring));
    self->reform_start = 0;
    if (config->is_chief && first)
        self->hooks.saver.last_saved = restored? step: -1;
    return 0;
}

// ---------------------------------------------------------------------------
//  Training

//  What zactor-top shows of the ring: this worker's rank, and a moving
//  average of the time per step it waited for its neighbour.
static void
s_publish_wait (s_mirrored_t *self, double wait_ms)
{
    if (!self->stats)
        return;
    self->wait_average = self->own_steps == 1? wait_ms
                       : self->wait_average + 0.05 * (wait_ms - self->wait_average);
    atomic_store_explicit (&self->stats->ring_rank, self->rank, memory_order_relaxed);
    atomic_store_explicit (&self->stats->wait_ms, self->wait_average, memory_order_relaxed);
}

//  Waits until this process knows the members' change `number` (another
//  rank heard of it first). Returns 0, or -1 with an error.
static int
s_wait_members (s_mirrored_t *self, int64_t number)
{
    double start = za_clock_mono ();
    while (za_membership_number (self->config->membership) < number) {
        if (zsys_interrupted || za_clock_mono () - start > self->config->timeout_secs)
            return za_error ("%s: the members' change %" PRId64 " did not reach this task "
                             "within %.0f s", self->who, number, self->config->timeout_secs);
        zclock_sleep (MEMBERS_POLL_MS);
    }
    return 0;
}

//  s_reform's word that this worker left the job.
#define MIRRORED_LEFT 1

//  The ring of the members now (an elastic job): this rank's place among
//  them, and its right neighbour, once the broker lists this task with every
//  member's endpoint. Returns 0, MIRRORED_LEFT when it leaves (it got SIGTERM
//  and the broker no longer lists it: the others re-form without it), or -1
//  with an error (not listed within timeout_secs: this task was dropped, or
//  never admitted).
static int
s_reform (s_mirrored_t *self)
{
    const za_role_config_t *config = self->config;
    za_members_t *members = self->members;
    double start = za_clock_mono ();
    int rank = -1, known = 0;
    za_role_stats_publish (self->stats, self->live? ZA_ROLE_RECOVERING: ZA_ROLE_WAITING, start);
    while (!zsys_interrupted) {
        za_membership_get (config->membership, members);
        rank = za_members_rank (members, config->worker_index);
        known = members->count > 0;
        for (int m = 0; m < members->count; m++)
            known &= *members->endpoint [m] != 0;
        if (rank >= 0 && known)
            break;
        if (rank < 0 && za_preempt_leave_requested ()) {
            self->left = 1;
            za_info ("%s: left the job after step %" PRId64 " (SIGTERM): members change %"
                     PRId64 " goes on with %d trainers", self->who, self->global_step,
                     members->number, members->count);
            return MIRRORED_LEFT;
        }
        if (za_clock_mono () - start > config->timeout_secs)
            return za_error ("%s: the broker has not listed this task among the job's members "
                             "within %.0f s (dropped after --elastic-timeout, or the job is "
                             "full)", self->who, config->timeout_secs);
        za_role_stats_publish (self->stats, self->live? ZA_ROLE_RECOVERING: ZA_ROLE_WAITING,
                               za_clock_mono ());
        zclock_sleep (MEMBERS_POLL_MS);
    }
    if (rank < 0)
        return za_error ("%s: interrupted", self->who);
    const char *right = members->endpoint [(rank + 1) % members->count];
    if (za_ring_reshape (self->ring, rank, members->count, right, members->number))
        return -1;
    self->rank = rank;
    self->size = members->count;
    char text [512];
    za_members_text (members, text, sizeof text);
    za_info ("%s: members change %" PRId64 ": %d trainers (%s); rank %d, sending to %s",
             self->who, members->number, members->count, text, rank,
             za_ring_right_endpoint (self->ring));
    return 0;
}

static int
s_run_steps (s_mirrored_t *self)
{
    const za_role_config_t *config = self->config;
    //  The all-reduce waits for every member's gradients.
    if (self->stats)
        atomic_store_explicit (&self->stats->exchange_waits, 1, memory_order_relaxed);
    while (self->global_step < self->max_steps && !zsys_interrupted) {
        double step_start = za_clock_mono ();
        za_role_stats_publish (self->stats, ZA_ROLE_RUNNING, step_start);
        za_batch_t batch;
        if (za_role_next_batch (self->input, self->who, &batch))
            return -1;
        double input = za_clock_mono () - step_start;
        double loss, t0 = za_clock_mono (), waited = za_ring_wait_secs (self->ring);
        //  The buckets go round as backward makes them final (or the
        //  group sums the whole gradient on the devices once it is made).
        int grouped = self->group.group != NULL;
        if (!grouped)
            za_reducer_begin (&self->reducer, (self->global_step + 1) * MAX_BUCKETS);
        //  Each worker its own dropout masks (replica_index tells them apart).
        //  Until the ring is done, the loop turns no more: waiting on a peer
        //  still computing is part of the step (the ring keeps its own time).
        za_role_stats_computing (self->stats, t0);
        int failed = za_replica_compute_gradients (self->replica, &batch, self->global_step,
                                                   &loss);
        double t1 = za_clock_mono ();
        if (grouped) {
            if (failed)
                return -1;
            int rc = za_group_mean (&self->group, self->replica, self->ring, self->size,
                                    config->timeout_secs);
            if (rc)
                return rc;
        }
        else {
            //  On a GPU the gradient is copied down here (on the CPU: the
            //  same block, nothing to do); with buckets the replica did so.
            if (!failed && !self->reducer.running)
                self->reducer.grads = za_replica_gradients (self->replica);
            int rc = za_reducer_end (&self->reducer, failed);
            if (failed)
                return -1;
            if (rc)
                return rc;
        }
        double t2 = za_clock_mono ();
        za_replica_apply (self->replica, self->global_step + 1);
        self->global_step++;
        self->own_steps++;
        self->examples_done += s_global_batch (self);
        double now = za_clock_mono ();
        if (za_trace_on ()) {
            int64_t step = self->global_step - 1;
            za_trace_event (ZA_TRACE_STEP, "step", step_start, now, step);
            za_trace_event (ZA_TRACE_INPUT, "input", step_start, step_start + input, step);
            za_trace_event (ZA_TRACE_COMPUTE, "forward+backward", t0, t1, step);
            za_replica_trace_compute (self->replica, step);
            za_trace_event (ZA_TRACE_EXCHANGE, "all-reduce", t1, t2, step);
            za_trace_event (ZA_TRACE_APPLY, "apply", t2, now, step);
        }
        za_role_step_times_t times = {
            .step = now - step_start,
            .phase = {[ZA_PHASE_INPUT] = input, [ZA_PHASE_COMPUTE] = t1 - t0,
                      [ZA_PHASE_EXCHANGE] = t2 - t1, [ZA_PHASE_APPLY] = now - t2}};
        za_role_rates_publish (&self->rates, self->stats, self->global_step, self->own_steps,
                               loss, batch.size, &times, now);
        za_role_bad_publish (self->stats, self->input);
        s_publish_wait (self, 1e3 * (za_ring_wait_secs (self->ring) - waited));
        //  The summaries' examples/sec count a global step's batches.
        int examples = config->membership? (int) s_global_batch (self)
                     : batch.size * za_role_batches_per_step (config);
        //  A rank whose loss diverged runs no hook (it saves nothing) and
        //  says so in the round below: every rank stops after this step.
        int diverged = !isfinite (loss);
        if (!diverged
            && za_role_hooks_after_step (&self->hooks, config, self->replica, self->global_step,
                                         loss, examples, now - self->start_time) < 0)
            return -1;
        //  Whether to go on, agreed by every rank so that all end after the
        //  same step: the chief's early stop, any rank's preemption
        //  (za_preempt.h) and any rank's diverged loss. A round of its own:
        //  the buckets leave the last index free. The mean of the flags is
        //  not 0 where one rank's is. Elastic: each rank says which members'
        //  change it knows of (in its own place), so that all re-form at
        //  this step for the newest any of them knows.
        float stop [STOP_FLAGS + ZA_MEMBERS_MAX];
        int flags = config->membership? STOP_FLAGS + self->size: STOP_FLAGS;
        memset (stop, 0, sizeof stop);
        stop [0] = config->is_chief && self->hooks.stop.requested? 1.0f: 0.0f;
        stop [1] = za_preempt_requested ()? 1.0f: 0.0f;
        stop [2] = diverged || self->values_diverged? 1.0f: 0.0f;
        if (config->membership)
            stop [STOP_FLAGS + self->rank] = (float) za_membership_number (config->membership);
        int said = za_ring_allreduce_mean_f32 (self->ring, stop, (size_t) flags,
                                               self->global_step * MAX_BUCKETS + MAX_BUCKETS
                                               - 1);
        if (said)
            return said;
        if (stop [2] != 0) {
            if (diverged)
                return za_role_loss_check (&self->hooks, loss, self->global_step);
            self->hooks.diverged = 1;
            if (self->values_diverged)
                return -1;                  //  (said by the save)
            return za_error ("another rank's loss or values diverged at step %" PRId64 ": "
                             "every rank stops without saving it", self->global_step);
        }
        if (stop [1] != 0 && self->global_step < self->max_steps) {
            za_preempt_request ();
            self->preempted = 1;
            za_info ("%s: preempted: every rank stops after step %" PRId64, self->who,
                     self->global_step);
            break;
        }
        if (stop [0] != 0)
            break;
        int64_t newest = 0;
        for (int r = 0; r < flags - STOP_FLAGS; r++) {
            int64_t known = (int64_t) lrintf (stop [STOP_FLAGS + r] * (float) self->size);
            newest = known > newest? known: newest;
        }
        if (config->membership && newest > self->members->number) {
            self->reform_start = za_clock_mono ();
            za_info ("%s: the members changed (change %" PRId64 "): re-forming the ring after "
                     "step %" PRId64, self->who, newest, self->global_step);
            return s_wait_members (self, newest)? -1: ZA_RING_CANCELLED;
        }
    }
    return zsys_interrupted? za_error ("%s: interrupted", self->who): 0;
}

//  A generation of the ring: its start, then steps until max_steps or until
//  the ring must be re-formed (a member restarted). Returns 0,
//  ZA_RING_RESYNC, or -1 with an error.
static int
s_generation (s_mirrored_t *self, int first)
{
    za_role_stats_publish (self->stats, first? ZA_ROLE_WAITING: ZA_ROLE_RECOVERING,
                           za_clock_mono ());
    int rc = s_start (self, first);
    if (rc)
        return rc;
    //  On devices: a group of the processes sums the gradients there, where
    //  every rank can have one; the reducer then hears of no gradient.
    int said = self->group.said;
    rc = za_group_form (&self->group, self->ring, self->rank, self->size,
                        self->config->timeout_secs);
    if (rc)
        return rc;
    //  Said with the group's first word of itself.
    if (!said && self->group.said && self->config->wire_dtype == ZA_DTYPE_BF16)
        za_info ("%s: --wire-dtype bf16 is the ring's: the group on the devices sums the "
                 "gradients in fp32", self->who);
    if (self->reducer.running)
        za_replica_on_gradients (self->replica, self->group.group? NULL: za_reducer_final,
                                 self->group.group? NULL: &self->reducer);
    //  Elastic: this rank's slice of the global batch among the members now,
    //  from where the stream is; and after a re-formation in any job: the
    //  step the ring dropped is trained again on its own examples (a rank
    //  that took them before it dropped read on from the next batch, while
    //  a restarted one read from here: slices of two batches each step).
    if (self->config->membership || !first)
        za_input_destroy (&self->input);
    if (!self->input
        && !(self->input = za_role_train_input_among (
                 self->config, self->who, self->global_step, self->size, self->rank,
                 self->examples_done, self->config->membership
                 && self->config->elastic_batch == ZA_ELASTIC_GLOBAL
                 ? (int) s_global_batch (self): 0)))
        return -1;
    if (za_replica_feed (self->replica, self->input))
        return -1;
    za_role_rates_restart (&self->rates, self->global_step, self->own_steps, za_clock_mono ());
    za_hooks_begin (&self->hooks.hooks, self->global_step);
    if (first)
        za_info ("%s: going from step %" PRId64 " to %" PRId64 " (the input from example %"
                 PRId64 ")", self->who, self->global_step, self->max_steps,
                 self->examples_done);
    return s_run_steps (self);
}

static int
s_train (s_mirrored_t *self)
{
    //  Elastic: the ring of the members that train now.
    int rc = self->config->membership? s_reform (self): 0;
    if (rc == MIRRORED_LEFT)
        return 0;
    if (rc == 0)
        rc = s_generation (self, 1);
    while (rc == ZA_RING_RESYNC || rc == ZA_RING_CANCELLED) {
        //  A root's notice of newer members than this task has heard of:
        //  hear of them first, then re-form as it did.
        int64_t root_knows = za_ring_pending_tag (self->ring);
        if (self->config->membership && root_knows > self->members->number
            && s_wait_members (self, root_knows))
            return -1;
        if (self->config->membership
            && (rc == ZA_RING_CANCELLED || s_members_changed (self))) {
            if (self->reform_start == 0)
                self->reform_start = za_clock_mono ();
            int reformed = s_reform (self);
            if (reformed == MIRRORED_LEFT)
                return 0;
            if (reformed)
                return -1;
        }
        else
            za_info ("%s: a member of the ring (re)joined at step %" PRId64 ": re-forming it",
                     self->who, self->global_step);
        rc = s_generation (self, 0);
    }
    if (rc)
        return -1;
    //  The final step is always saved (the saver may have done it).
    if (self->config->is_chief && self->global_step != self->hooks.saver.last_saved
        && s_save_at (self, self->global_step, 1))
        return -1;
    //  Stopped early: the evaluators learn where training ended.
    if (self->config->is_chief && self->config->run.early_stopping
        && za_early_stop_end (self->config->run.model_dir, self->global_step))
        return -1;
    return 0;
}

void
za_mirrored_actor (zsock_t *pipe, void *args)
{
    const za_role_config_t *config = (const za_role_config_t *) args;
    s_mirrored_t *self = s_mirrored_new (config, pipe);
    zsock_signal (pipe, 0);
    if (!self) {
        za_role_failed_start (pipe, config->stats);
        return;
    }
    if (!config->membership)
        za_info ("%s: rank %d of %d in the ring (sends to %s), batch %d, up to step %" PRId64,
                 self->who, config->worker_index, config->num_workers,
                 za_ring_right_endpoint (self->ring), config->batch_size, config->max_steps);
    if (self->reducer.running)
        za_info ("%s: the gradients go round in %d buckets, the first of %zu floats, each "
                 "beside backward", self->who, self->reducer.bucket_count,
                 self->reducer.hi [0] - self->reducer.lo [0]);
    int failed = s_train (self);         //  before its input is looked at: s_train makes it
    int rc = za_role_end_status (failed, self->input, &self->hooks, self->replica);
    if (rc)
        s_check_term (self);
    za_role_publish_end (config, rc, self->global_step);
    uint32_t crc = za_role_values_crc (za_replica_values (self->replica), self->vars->total);
    //  The same crc on every worker: the replicas are identical.
    za_info ("%s: %s at step %" PRId64 " in %.1f s (values crc32 %08x)", self->who,
             rc? "failed": self->preempted? "preempted": self->left? "left": "done",
             self->global_step,
             za_clock_mono () - self->start_time, crc);
    if (self->own_steps > 0) {
        double n = (double) self->own_steps;
        const za_role_step_times_t *spent = &self->rates.spent;
        double compute = spent->phase [ZA_PHASE_COMPUTE];
        double reduce = spent->phase [ZA_PHASE_EXCHANGE], input = spent->phase [ZA_PHASE_INPUT];
        double other = spent->step - compute - reduce;
        za_info ("%s: per step %.3f ms: compute %.3f ms, all-reduce left after it %.3f ms "
                 "(ring waits %.3f ms), other %.3f ms, of which waiting for input %.3f ms "
                 "(%.2f%%); %" PRIu64 " ring messages dropped", self->who,
                 1e3 * spent->step / n, 1e3 * compute / n, 1e3 * reduce / n,
                 1e3 * za_ring_wait_secs (self->ring) / n, 1e3 * other / n, 1e3 * input / n,
                 spent->step > 0? 100 * input / spent->step: 0, za_ring_dropped (self->ring));
    }
    int64_t step = self->global_step, floats = (int64_t) self->vars->total;
    int terminated = self->terminated;
    //  The caller hears ZA_EXIT_REQUEUE: preempted, run again.
    if (rc == 0 && self->preempted)
        rc = ZA_EXIT_REQUEUE;
    s_mirrored_destroy (&self);
    if (!terminated)
        za_role_report_done (pipe, rc, step, crc, floats);
}
