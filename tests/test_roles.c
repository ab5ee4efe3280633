/*  test_roles.c: a whole cluster in one process: ps, chief and workers as
    CZMQ actors over inproc://, training on real Fashion-MNIST. Checks every
    role ends with rc 0, the loss fell, and the final checkpoint holds exactly
    what each ps holds; bad messages sent to a ps are dropped and counted.
    Every role publishes its progress to a stats block.                      */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "za/za_checkpoint.h"
#include "za/za_partition.h"
#include "za/za_role.h"
#include "za_test.h"

#define TIMEOUT_S 120.0

typedef struct {
    za_role_config_t ps [4];
    za_role_config_t workers [4];
    char endpoints [4][64];
    za_stack_spec_t spec;
    za_dataset_t *train;
    za_role_stats_t ps_stats [4], worker_stats [4];
    int num_workers;
    _Atomic int arrived;                //  workers at the start line (s_together_input)
} s_cluster_t;

static void
s_cluster_setup (s_cluster_t *c, int ps_count, int num_workers, const char *tag,
                 int64_t max_steps, size_t partition_floats)
{
    memset (c, 0, sizeof *c);
    c->num_workers = num_workers;
    c->train = za_test_fashion ("train", 6000);
    cr_assert_eq (za_stack_parse ("flatten dense(32,relu) dense(10)", &c->spec), 0);
    za_role_config_t base;
    za_role_config_init (&base);
    base.model_fn = za_stack_model_fn ();
    base.params = &c->spec;
    base.input = (za_input_shape_t) {28, 28, 1};
    base.run.model_dir = za_test_dir ();
    base.run.save_checkpoints_steps = 20;
    base.run.save_summary_steps = 10;
    base.run.log_step_count_steps = 0;
    base.run.threads = 1;
    base.run.keep_checkpoint_max = 0;
    base.max_steps = max_steps;
    base.batch_size = 32;
    base.shuffle_buffer = 1000;
    base.partition_floats = partition_floats;
    base.timeout_secs = 30;
    base.ps_count = ps_count;
    base.num_workers = num_workers;
    base.train = c->train;
    for (int p = 0; p < ps_count; p++) {
        snprintf (c->endpoints [p], sizeof c->endpoints [p], "inproc://%s-ps%d", tag, p);
        base.ps_endpoints [p] = c->endpoints [p];
    }
    for (int p = 0; p < ps_count; p++) {
        c->ps [p] = base;
        c->ps [p].ps_index = p;
        c->ps [p].bind_endpoint = c->endpoints [p];
        za_role_stats_init (&c->ps_stats [p]);
        c->ps [p].stats = &c->ps_stats [p];
    }
    for (int w = 0; w < num_workers; w++) {
        c->workers [w] = base;
        c->workers [w].worker_index = w;
        c->workers [w].is_chief = w == 0;
        za_role_stats_init (&c->worker_stats [w]);
        c->workers [w].stats = &c->worker_stats [w];
    }
}


//  An input_fn that holds each worker at the start line (the ps initialised,
//  the values pulled) until every worker is there: so all of them train.
//  Without it a worker whose retry sleeps 100 ms while the ps wait for the
//  chief's init may find the chief done with a small model's 400 steps.
static za_input_t *
s_together_input (void *arg, const za_input_context_t *context)
{
    s_cluster_t *c = (s_cluster_t *) arg;
    atomic_fetch_add (&c->arrived, 1);
    double deadline = za_clock_mono () + TIMEOUT_S;
    while (atomic_load (&c->arrived) < c->num_workers && za_clock_mono () < deadline)
        zclock_sleep (1);
    za_input_config_t input = za_input_config_default ();
    input.num_shards = context->num_shards;
    input.shard_index = context->shard_index;
    input.shuffle_buffer = 1000;
    input.seed = context->seed;
    input.epochs = -1;
    input.batch_size = context->batch_size;
    return za_input_new (c->train, &input);
}

static double
s_first_or_last_loss (int last)
{
    char *path = za_test_path ("metrics.jsonl");
    char *text = za_test_read_file (path, NULL);
    char *line = text, *pick = NULL;
    while (line && *line) {
        if (!pick || last)
            pick = line;
        char *next = strchr (line, '\n');
        line = next? next + 1: NULL;
    }
    cr_assert_not_null (pick);
    json_error_t error;
    json_t *json = json_loads (pick, JSON_DISABLE_EOF_CHECK, &error);
    cr_assert_not_null (json, "%s", error.text);
    double loss = json_number_value (json_object_get (json, "loss"));
    json_decref (json);
    free (text);
    free (path);
    return loss;
}

static void
s_run_cluster (s_cluster_t *c, int ps_count, int num_workers, int64_t max_steps,
               zactor_t **ps_out)
{
    zactor_t *ps [4], *workers [4];
    for (int p = 0; p < ps_count; p++)
        ps [p] = zactor_new (za_ps_actor, &c->ps [p]);
    for (int w = 0; w < num_workers; w++)
        workers [w] = zactor_new (za_worker_actor, &c->workers [w]);
    for (int w = 0; w < num_workers; w++) {
        int64_t step;
        int rc = za_role_wait (workers [w], TIMEOUT_S, &step, NULL, NULL);
        cr_expect_eq (rc, 0, "worker %d ended with %d", w, rc);
        //  The chief ends at max_steps or past it; a worker may learn of the
        //  end from a refused push and report the step it last saw.
        if (w == 0)
            cr_expect_geq (step, max_steps, "chief stopped at %lld", (long long) step);
        else
            cr_expect_geq (step, max_steps - 2 * num_workers, "worker %d stopped at %lld", w,
                           (long long) step);
        zactor_destroy (&workers [w]);
    }
    for (int p = 0; p < ps_count; p++)
        ps_out [p] = ps [p];
}

Test (roles, chief_worker_two_ps_train_and_checkpoint_matches_ps)
{
    za_test_dir_create ("za_roles_test");
    s_cluster_t c;
    //  Split dense/kernel (25088 floats) so partitions travel too.
    s_cluster_setup (&c, 2, 2, "a", 400, 10000);
    for (int w = 0; w < 2; w++) {
        c.workers [w].input_fn = s_together_input;
        c.workers [w].input_arg = &c;
    }
    zactor_t *ps [4];
    s_run_cluster (&c, 2, 2, 400, ps);
    uint32_t ps_crc [4];
    int64_t ps_step [4], ps_floats [4];
    for (int p = 0; p < 2; p++) {
        int rc = za_role_wait (ps [p], TIMEOUT_S, &ps_step [p], &ps_crc [p], &ps_floats [p]);
        cr_expect_eq (rc, 0, "ps %d ended with %d", p, rc);
        zactor_destroy (&ps [p]);
    }
    cr_expect_gt (ps_floats [0], 0);
    cr_expect_gt (ps_floats [1], 0);
    //  What the roles published.
    for (int p = 0; p < 2; p++) {
        cr_expect_eq (atomic_load (&c.ps_stats [p].state), ZA_ROLE_DONE);
        cr_expect_eq (atomic_load (&c.ps_stats [p].global_step), ps_step [p]);
        cr_expect_gt (atomic_load (&c.ps_stats [p].alive), 0.0);
    }
    for (int w = 0; w < 2; w++) {
        za_role_stats_t *stats = &c.worker_stats [w];
        cr_expect_eq (atomic_load (&stats->state), ZA_ROLE_DONE, "worker %d", w);
        cr_expect_geq (atomic_load (&stats->global_step), 390, "worker %d", w);
        double loss = atomic_load (&stats->loss);
        cr_expect (loss > 0 && loss < 2.3, "worker %d: loss %f", w, loss);
        cr_expect_gt (atomic_load (&stats->steps_per_sec), 0.0, "worker %d", w);
        cr_expect_gt (atomic_load (&stats->examples_per_sec), 0.0, "worker %d", w);
        cr_expect_gt (atomic_load (&stats->alive), 0.0, "worker %d", w);
        cr_expect_eq (atomic_load (&stats->eval_step), -1);
    }
    //  The final checkpoint is the snapshot the ps were stopped at.
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (za_test_dir (), &found);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_expect_geq (za_checkpoint_step (ckpt), 400);
    cr_expect_eq (za_checkpoint_step (ckpt), ps_step [0]);
    for (int p = 0; p < 2; p++)
        cr_expect_eq (za_test_ckpt_crc_of_ps (ckpt, &c.spec, c.ps [0].input, 2, 10000, p), ps_crc [p],
                      "ps %d holds %08x, the checkpoint %08x", p, ps_crc [p],
                      za_test_ckpt_crc_of_ps (ckpt, &c.spec, c.ps [0].input, 2, 10000, p));
    za_checkpoint_destroy (&ckpt);
    //  Checkpoints on the way, on their grid (due every 20 steps; the chief
    //  saves between its own steps, so how many depends on how many of the 400
    //  the chief took, which the machine's load decides: 13 of 20 with a
    //  fuzzer on the other core, fewer than 10 beside a build): at least one
    //  besides the final.
    int64_t *steps = NULL;
    int count = za_checkpoint_list (za_test_dir (), &steps);
    cr_expect_geq (count, 2, "%d checkpoints", count);
    free (steps);
    double first = s_first_or_last_loss (0), last = s_first_or_last_loss (1);
    cr_expect_lt (last, first * 0.8, "loss %f -> %f", first, last);
    za_dataset_destroy (&c.train);
    za_test_dir_remove ();
}

Test (roles, chief_resumes_from_the_checkpoint)
{
    za_test_dir_create ("za_roles_resume");
    s_cluster_t c;
    s_cluster_setup (&c, 1, 1, "b", 40, 0);
    zactor_t *ps [4];
    s_run_cluster (&c, 1, 1, 40, ps);
    cr_expect_eq (za_role_wait (ps [0], TIMEOUT_S, NULL, NULL, NULL), 0);
    zactor_destroy (&ps [0]);
    //  A second run to 80 starts from the step-40 checkpoint.
    s_cluster_t again;
    s_cluster_setup (&again, 1, 1, "c", 80, 0);
    s_run_cluster (&again, 1, 1, 80, ps);
    int64_t step;
    cr_expect_eq (za_role_wait (ps [0], TIMEOUT_S, &step, NULL, NULL), 0);
    cr_expect_geq (step, 80);
    zactor_destroy (&ps [0]);
    int64_t *steps = NULL;
    int count = za_checkpoint_list (za_test_dir (), &steps);
    cr_assert_gt (count, 0);
    cr_expect_geq (steps [count - 1], 80);
    free (steps);
    za_dataset_destroy (&c.train);
    za_dataset_destroy (&again.train);
    za_test_dir_remove ();
}

Test (roles, a_worker_that_comes_after_the_end_leaves_cleanly)
{
    //  The chief trains alone to the end; the ps, told there are 2 workers,
    //  waits for the second bye. A worker that starts only then is told the
    //  training is over, reports the final step, says bye, and the ps leaves.
    za_test_dir_create ("za_roles_late");
    s_cluster_t c;
    s_cluster_setup (&c, 1, 2, "d", 60, 0);
    zactor_t *ps = zactor_new (za_ps_actor, &c.ps [0]);
    zactor_t *chief = zactor_new (za_worker_actor, &c.workers [0]);
    int64_t step = 0;
    cr_expect_eq (za_role_wait (chief, TIMEOUT_S, &step, NULL, NULL), 0);
    cr_expect_geq (step, 60);
    zactor_destroy (&chief);
    zactor_t *late = zactor_new (za_worker_actor, &c.workers [1]);
    int64_t late_step = 0;
    cr_expect_eq (za_role_wait (late, TIMEOUT_S, &late_step, NULL, NULL), 0);
    cr_expect_eq (late_step, step, "the late worker reports step %lld", (long long) late_step);
    zactor_destroy (&late);
    int64_t ps_step = 0;
    cr_expect_eq (za_role_wait (ps, 10, &ps_step, NULL, NULL), 0, "the ps did not leave");
    cr_expect_eq (ps_step, step);
    zactor_destroy (&ps);
    za_dataset_destroy (&c.train);
    za_test_dir_remove ();
}
