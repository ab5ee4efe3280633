/*  za_role.c: role configuration defaults, the DONE report both roles send
    when they end, and waiting for it.                                      */
#include "za_role_private.h"
#include "za/za_preempt.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

void
za_role_config_init (za_role_config_t *config)
{
    memset (config, 0, sizeof *config);
    config->run = za_run_config_default ();
    config->optim = za_optim_config_default (ZA_OPT_ADAM);
    config->batch_size = ZA_ROLE_BATCH_SIZE;
    config->partition_floats = ZA_ROLE_PARTITION_KIB * (1024 / sizeof (float));
    config->bucket_floats = ZA_ROLE_BUCKET_FLOATS;
    config->timeout_secs = ZA_ROLE_TIMEOUT_SECS;
    config->heartbeat = za_heartbeat_default ();
    config->num_workers = 1;
}

int
za_role_batches_per_step (const za_role_config_t *config)
{
    if (config->strategy == ZA_STRATEGY_PS_ASYNC)
        return 1;
    if (config->strategy == ZA_STRATEGY_PS_SYNC && config->replicas_to_aggregate > 0)
        return config->replicas_to_aggregate;
    //  Elastic: one per member now.
    int members = config->membership? za_membership_count (config->membership): 0;
    return members > 0? members: config->num_workers;
}

int
za_role_model_vars (const za_role_config_t *config, za_vars_t *vars)
{
    memset (vars, 0, sizeof *vars);
    void *state = config->model_fn->create (config->params, config->input, 1,
                                            za_backend_cpu (), vars);
    if (!state)
        return -1;
    config->model_fn->destroy (&state);
    return 0;
}

int
za_role_part_shape (const za_vars_t *vars, const za_part_t *part, int64_t *shape)
{
    const za_var_t *var = &vars->vars [part->var];
    if (part->size == var->size) {
        for (int d = 0; d < var->ndim; d++)
            shape [d] = var->shape [d];
        return var->ndim;
    }
    shape [0] = (int64_t) part->size;
    return 1;
}

void
za_role_report_done (zsock_t *pipe, int rc, int64_t step, uint32_t crc, int64_t floats)
{
    char rc_text [16], step_text [32], crc_text [16], floats_text [32];
    snprintf (rc_text, sizeof rc_text, "%d", rc);
    snprintf (step_text, sizeof step_text, "%" PRId64, step);
    snprintf (crc_text, sizeof crc_text, "%08x", crc);
    snprintf (floats_text, sizeof floats_text, "%" PRId64, floats);
    zstr_sendx (pipe, "DONE", rc_text, step_text, crc_text, floats_text, NULL);
    //  The caller ends us with $TERM (zactor_destroy).
    while (!zsys_interrupted) {
        char *command = zstr_recv (pipe);
        if (!command)
            break;
        int term = streq (command, "$TERM");
        zstr_free (&command);
        if (term)
            break;
    }
}

void
za_role_announce_checkpoint (const za_role_config_t *config, zsock_t *pipe, int64_t step)
{
    if (!config->announce_checkpoints)
        return;
    char text [32];
    snprintf (text, sizeof text, "%" PRId64, step);
    zstr_sendx (pipe, "CHECKPOINT", text, NULL);
}

static int
s_wait (zactor_t *actor, double timeout_secs, zactor_t *relay, int64_t *step, uint32_t *crc,
        int64_t *floats);

int
za_role_wait (zactor_t *actor, double timeout_secs, int64_t *step, uint32_t *crc,
              int64_t *floats)
{
    return s_wait (actor, timeout_secs, NULL, step, crc, floats);
}

int
za_role_wait_relay (zactor_t *actor, zactor_t *relay)
{
    return s_wait (actor, 0, relay, NULL, NULL, NULL);
}

static int
s_wait (zactor_t *actor, double timeout_secs, zactor_t *relay, int64_t *step, uint32_t *crc,
        int64_t *floats)
{
    zsock_t *pipe = zactor_sock (actor);
    zpoller_t *poller = zpoller_new (pipe, NULL);
    double deadline = za_clock_mono () + timeout_secs;
    int rc = -1;
    while (1) {
        int wait_ms = 200;
        if (timeout_secs > 0 && za_clock_mono () > deadline)
            break;
        if (!zpoller_wait (poller, wait_ms)) {
            //  SIGTERM taken as preemption (or an elastic worker's leave)
            //  cut the wait short: the actor saves (leaves) and says DONE,
            //  which we wait for.
            if (zpoller_terminated (poller)
                && (zsys_interrupted
                    || (!za_preempt_requested () && !za_preempt_leave_requested ())))
                break;
            continue;
        }
        char *command = NULL, *rc_text = NULL, *step_text = NULL, *crc_text = NULL;
        char *floats_text = NULL;
        //  zstr_recvx counts the pointers it filled or set to NULL: not the frames.
        int got = zstr_recvx (pipe, &command, &rc_text, &step_text, &crc_text, &floats_text,
                              NULL) >= 2 && command && rc_text;
        int announced = got && streq (command, "CHECKPOINT");
        if (announced && relay)
            zstr_sendx (relay, "CHECKPOINT", rc_text, NULL);
        if (got && streq (command, "DONE")) {
            rc = atoi (rc_text);
            if (step)
                *step = step_text? strtoll (step_text, NULL, 10): -1;
            if (crc)
                *crc = crc_text? (uint32_t) strtoul (crc_text, NULL, 16): 0;
            if (floats)
                *floats = floats_text? strtoll (floats_text, NULL, 10): 0;
        }
        zstr_free (&command);
        zstr_free (&rc_text);
        zstr_free (&step_text);
        zstr_free (&crc_text);
        zstr_free (&floats_text);
        if (!announced)
            break;
    }
    zpoller_destroy (&poller);
    return rc;
}

// ---------------------------------------------------------------------------
//  Rates

//  The published loss is a moving average giving the newest step this weight.
#define LOSS_AVERAGE_WEIGHT 0.05

void
za_role_rates_restart (za_role_rates_t *self, int64_t global_step, int64_t own_steps,
                       double now)
{
    self->since_time = self->window_time = now;
    self->since_step = self->window_step = global_step;
    self->since_own_steps = self->window_own_steps = own_steps;
    self->since_spent = self->window_spent = self->spent;
}

void
za_role_rates_publish (za_role_rates_t *self, za_role_stats_t *stats, int64_t global_step,
                       int64_t own_steps, double loss, int batch,
                       const za_role_step_times_t *times, double now)
{
    self->spent.step += times->step;
    for (int phase = 0; phase < ZA_PHASES; phase++)
        self->spent.phase [phase] += times->phase [phase];
    if (!stats)
        return;
    self->loss_average = own_steps == 1? loss
        : self->loss_average + LOSS_AVERAGE_WEIGHT * (loss - self->loss_average);
    if (now - self->window_time >= ZA_ROLE_RATE_WINDOW_SECS) {
        self->since_time = self->window_time;
        self->since_step = self->window_step;
        self->since_own_steps = self->window_own_steps;
        self->since_spent = self->window_spent;
        self->window_time = now;
        self->window_step = global_step;
        self->window_own_steps = own_steps;
        self->window_spent = self->spent;
    }
    double span = now - self->since_time;
    if (span > 0) {
        atomic_store_explicit (&stats->steps_per_sec,
                               (double) (global_step - self->since_step) / span,
                               memory_order_relaxed);
        atomic_store_explicit (&stats->examples_per_sec,
                               (double) (own_steps - self->since_own_steps) * batch / span,
                               memory_order_relaxed);
    }
    int64_t steps = own_steps - self->since_own_steps;
    if (steps > 0) {
        const za_role_step_times_t *now_spent = &self->spent, *then = &self->since_spent;
        atomic_store_explicit (&stats->step_ms, 1e3 * (now_spent->step - then->step)
                               / (double) steps, memory_order_relaxed);
        for (int phase = 0; phase < ZA_PHASES; phase++)
            atomic_store_explicit (&stats->phase_ms [phase],
                                   1e3 * (now_spent->phase [phase] - then->phase [phase])
                                   / (double) steps, memory_order_relaxed);
    }
    atomic_store_explicit (&stats->global_step, global_step, memory_order_relaxed);
    atomic_store_explicit (&stats->loss, self->loss_average, memory_order_relaxed);
    atomic_store_explicit (&stats->alive, now, memory_order_relaxed);
}

void
za_role_bad_publish (za_role_stats_t *stats, const za_input_t *input)
{
    if (!stats)
        return;
    atomic_store_explicit (&stats->bad_images, za_input_bad (input), memory_order_relaxed);
    atomic_store_explicit (&stats->images, za_input_listed (input), memory_order_relaxed);
}

int
za_role_next_batch (za_input_t *input, const char *who, za_batch_t *batch)
{
    int got = za_input_next (input, batch);
    return got > 0? 0: got < 0? -1: za_error ("%s: the input ended", who);
}

int
za_role_end_status (int failed, const za_input_t *input, const za_role_hooks_t *hooks,
                    const za_replica_t *replica)
{
    return !failed? 0: za_input_failed (input) || hooks->diverged
                       || za_replica_diverged (replica)? ZA_EXIT_DATA: 1;
}

int
za_role_loss_check (za_role_hooks_t *hooks, double loss, int64_t step)
{
    if (za_loss_check (loss, step) == 0)
        return 0;
    hooks->diverged = 1;
    return -1;
}

// ---------------------------------------------------------------------------
//  A role's end

void
za_role_failed_start (zsock_t *pipe, za_role_stats_t *stats)
{
    za_role_stats_publish (stats, ZA_ROLE_FAILED, za_clock_mono ());
    za_role_report_done (pipe, 1, 0, 0, 0);
}

void
za_role_publish_end (const za_role_config_t *config, int rc, int64_t global_step)
{
    za_role_stats_t *stats = config->stats;
    if (stats)
        atomic_store_explicit (&stats->global_step, global_step, memory_order_relaxed);
    za_role_stats_publish (stats, rc? ZA_ROLE_FAILED
                                : config->evaluates_after? ZA_ROLE_RUNNING: ZA_ROLE_DONE,
                           za_clock_mono ());
}

uint32_t
za_role_values_crc (const float *values, size_t floats)
{
    return (uint32_t) crc32 (crc32 (0L, Z_NULL, 0), (const Bytef *) values,
                             (uInt) (floats * sizeof (float)));
}

// ---------------------------------------------------------------------------
//  What every training role (worker, chief, all-reduce worker) shares

void
za_role_who (const za_role_config_t *config, char *who, size_t size)
{
    if (*config->who)
        snprintf (who, size, "%s", config->who);
    else
        snprintf (who, size, "%s %d", config->is_chief? "chief": "worker",
                  config->is_chief? 0: config->worker_index - 1);
}

float
za_role_elastic_rate (const za_role_config_t *config, float rate, int trainers)
{
    if (!config->membership || config->elastic_batch != ZA_ELASTIC_SCALE_LR
        || config->min_trainers < 1 || trainers < 1)
        return rate;
    return rate * (float) trainers / (float) config->min_trainers;
}

za_input_t *
za_role_train_input (const za_role_config_t *config, const char *who, int64_t global_step)
{
    return za_role_train_input_among (config, who, global_step, config->num_workers,
                                      config->worker_index, 0, 0);
}

za_input_t *
za_role_train_input_among (const za_role_config_t *config, const char *who,
                           int64_t global_step, int trainers, int place,
                           int64_t examples_done, int global_batch)
{
    //  A global batch shared: each takes at most its rounded-up share.
    int batch = global_batch > 0? (global_batch + trainers - 1) / trainers
                                : config->batch_size;
    //  The synchronous strategies split each global batch across the workers
    //  (one order of the whole data, the same seed everywhere; image files,
    //  sharded by file, each shard in its own order: za_task's input) and read on
    //  from where the global steps so far left it. ps-async workers each
    //  read their own shard in their own order, and a resumed one reads on
    //  from its share of the global steps so far (each global step is one
    //  worker's batch): the same order, not a new one from the step, so
    //  that a job preempted again and again still sees every example of an
    //  epoch about once.
    int split = config->strategy != ZA_STRATEGY_PS_ASYNC;
    uint64_t seed = split? config->run.seed
                  : za_role_shard_seed (config->run.seed, config->worker_index);
    int64_t steps_done = split? global_step: global_step / (trainers > 0? trainers: 1);
    if (config->input_fn) {
        za_input_context_t context = {
            .mode = ZA_MODE_TRAIN, .num_shards = trainers,
            .shard_index = place, .seed = seed, .global_step = global_step,
            .steps_done = steps_done, .batch_size = batch,
            .split_batches = split, .examples_done = split? examples_done: 0,
            .global_batch = split? global_batch: 0,
        };
        return config->input_fn (config->input_arg, &context);
    }
    if (!config->train) {
        za_error ("%s: no training data", who);
        return NULL;
    }
    za_input_config_t input = za_input_config_default ();
    input.num_shards = split? 1: trainers;
    input.shard_index = split? 0: place;
    input.replicas = split? trainers: 1;
    input.replica = split? place: 0;
    input.shuffle_buffer = config->shuffle_buffer;
    input.seed = seed;
    input.epochs = -1;
    input.batch_size = batch;
    input.global_batch = split? global_batch: 0;
    input.skip = split && examples_done > 0? examples_done
               : steps_done * config->batch_size * input.replicas;
    return za_input_new (config->train, &input);
}

void
za_role_hooks_init (za_role_hooks_t *self, const za_role_config_t *config, const char *who,
                    za_save_fn *save, void *arg)
{
    const za_run_config_t *run = &config->run;
    snprintf (self->prefix, sizeof self->prefix, "%s: ", who);
    self->counter.who = self->prefix;
    za_hook_t hooks [4];
    int count = 0;
    self->optim = config->optim;
    hooks [count++] = za_step_counter_hook (&self->counter, run->log_step_count_steps, 0);
    if (config->is_chief) {
        hooks [count++] = za_summary_hook (&self->summary, run->model_dir,
                                           run->save_summary_steps, &self->optim);
        hooks [count++] = za_saver_hook (&self->saver, run->save_checkpoints_steps,
                                         run->save_checkpoints_secs, -1, save, arg);
        if (run->early_stopping)
            hooks [count++] = za_stop_hook (&self->stop, run->model_dir);
    }
    for (int h = 0; h < count; h++)
        za_hooks_add (&self->hooks, &hooks [h]);
}

int
za_role_hooks_after_step (za_role_hooks_t *self, const za_role_config_t *config,
                          const za_replica_t *replica, int64_t global_step, double loss,
                          int batch, double elapsed)
{
    za_run_context_t *ctx = &self->context;
    ctx->loss_scale = za_replica_loss_scale (replica, &ctx->skipped_steps);
    ctx->global_step = global_step;
    ctx->max_steps = self->max_steps > 0? self->max_steps: config->max_steps;
    ctx->loss = loss;
    ctx->loss_steps = 1;
    ctx->batch_size = batch;
    ctx->elapsed_secs = elapsed;
    //  Only the chief's summary shows it, and only scale-lr changes it.
    if (config->is_chief && config->membership
        && config->elastic_batch == ZA_ELASTIC_SCALE_LR)
        self->optim.learning_rate =
            za_role_elastic_rate (config, config->optim.learning_rate,
                                  za_membership_count (config->membership));
    return za_hooks_after_run (&self->hooks, ctx);
}


const char *
za_strategy_name (za_strategy_t strategy)
{
    static const char *names [] = {"ps-async", "ps-sync", "allreduce"};
    return (unsigned) strategy < sizeof names / sizeof names [0]? names [strategy]: "unknown";
}
