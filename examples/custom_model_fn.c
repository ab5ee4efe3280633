/*  custom_model_fn: the Estimator contract from C, and the runtime around it.
    A hand-written model_fn (softmax regression over the pixels, with an L2
    penalty of its own) and a hand-written input_fn, handed to za_run_main:
    this one binary trains in one process, runs a whole supervised cluster
    on this machine, or serves as any task of a cluster.

      build/custom_model_fn                         # one process
      build/custom_model_fn --local --max-steps 3000  # chief, 2 workers, ps, evaluator
      build/custom_model_fn --role ps --cluster cluster.json ...
      build/custom_model_fn --help                  # its own --l2 among the rest   */
#include "za/za_idx.h"
#include "za/za_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CLASSES 10
#define SHUFFLE_EXAMPLES 10000

//  The program's own settings (TensorFlow's params): --l2 on the command
//  line, "l2" in a job file, handed to every task of a cluster.
typedef struct {
    double l2;
    double halve_every;         //  the learning rate halves every this many steps (0: never)
} params_t;

//  The model's state: buffers for one batch, planned once in create.
typedef struct {
    const za_backend_t *be;
    float l2;
    int inputs;                 //  pixels per image
    float *logits, *dlogits;    //  [batch_max, CLASSES]
    za_var_t kernel, bias;
} model_t;

static void
model_destroy (void **state_p)
{
    model_t *self = *state_p;
    if (self) {
        self->be->buffer_free (self->logits);
        self->be->buffer_free (self->dlogits);
        free (self);
        *state_p = NULL;
    }
}

static void *
model_create (const void *params, za_input_shape_t input, int batch_max,
              const za_backend_t *be, za_vars_t *vars)
{
    model_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->be = be;
    self->l2 = (float) ((const params_t *) params)->l2;
    self->inputs = input.height * input.width * input.channels;
    int64_t kshape [2] = {self->inputs, CLASSES}, bshape [1] = {CLASSES};
    int kernel = za_vars_add (vars, "logits/kernel", 2, kshape);
    int bias = za_vars_add (vars, "logits/bias", 1, bshape);
    self->logits = be->buffer_alloc ((size_t) batch_max * CLASSES * sizeof (float));
    self->dlogits = be->buffer_alloc ((size_t) batch_max * CLASSES * sizeof (float));
    if (kernel < 0 || bias < 0 || !self->logits || !self->dlogits) {
        void *state = self;
        model_destroy (&state);
        return NULL;
    }
    self->kernel = vars->vars [kernel];
    self->bias = vars->vars [bias];
    return self;
}

static void
model_init_vars (void *state, const za_vars_t *vars, float *values, uint64_t seed)
{
    (void) state, (void) vars, (void) values, (void) seed;     //  zeros are fine here
}

static int
model_fn (void *state, const float *features, const int32_t *labels, int n, za_mode_t mode,
          const float *values, float *grads, int64_t step, za_spec_t *spec)
{
    (void) step;
    model_t *self = state;
    const float *kernel = values + self->kernel.offset;
    const float *bias = values + self->bias.offset;
    self->be->dense_forward (n, self->inputs, CLASSES, features, kernel, bias, ZA_ACT_NONE,
                             self->logits);
    spec->logits = self->logits;
    spec->n_classes = CLASSES;
    if (mode == ZA_MODE_PREDICT)
        return 0;
    spec->loss_sum = self->be->softmax_xent (n, CLASSES, self->logits, labels,
                                             mode == ZA_MODE_TRAIN? self->dlogits: NULL,
                                             &spec->correct, NULL);
    if (mode != ZA_MODE_TRAIN)
        return 0;
    //  mixed_float16 scales the loss (1 otherwise): the gradients come scaled.
    float scale = za_model_loss_scale ();
    if (scale != 1.0f)
        self->be->scale_add ((size_t) n * CLASSES, scale, self->dlogits, 0.0f, NULL);
    float *dkernel = grads + self->kernel.offset;
    self->be->dense_backward (n, self->inputs, CLASSES, features, kernel, self->logits,
                              ZA_ACT_NONE, self->dlogits, dkernel, grads + self->bias.offset,
                              NULL);
    //  d/dw of (l2 / 2) |w|^2, once per call, as the mean loss's own term.
    for (size_t i = 0; i < self->kernel.size && self->l2 > 0; i++)
        dkernel [i] += self->l2 * kernel [i];
    return 0;
}

static const char *
model_describe (const void *params)
{
    static char text [64];
    snprintf (text, sizeof text, "softmax_regression(l2=%g)", ((const params_t *) params)->l2);
    return text;
}

static const za_model_fn_t softmax_regression = {
    .name = "softmax_regression",
    .create = model_create,
    .init_vars = model_init_vars,
    .model_fn = model_fn,
    .destroy = model_destroy,
    .describe = model_describe,
};

//  The input_fn: this task's shard of the training files (the runtime says
//  which, and where the files are), or the test files; loaded once each.
static za_input_t *
input_fn (void *arg, const za_input_context_t *context)
{
    (void) arg;
    static za_dataset_t *train, *test;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = context->batch_size;
    if (context->mode == ZA_MODE_TRAIN) {
        if (!train && !(train = za_idx_load_dir_shard (context->data_dir, "train",
                                                           context->num_shards,
                                                           context->shard_index)))
            return NULL;
        config.shuffle_buffer = SHUFFLE_EXAMPLES;
        config.seed = context->seed;
        config.epochs = -1;
        return za_input_new (train, &config);
    }
    if (!test && !(test = za_idx_load_dir_shard (context->data_dir, "t10k", 1, 0)))
        return NULL;
    return za_input_new (test, &config);
}

//  Its own learning-rate schedule (a model_fn's tf.train.exponential_decay
//  with staircase, or a Keras LearningRateSchedule): the base rate halved
//  every --halve-every global steps. Every process that applies updates (a
//  ps, each all-reduce worker) calls it, with the settings it was given.
static double
step_decay (void *arg, double learning_rate, int64_t step)
{
    const params_t *p = (const params_t *) arg;
    return p->halve_every > 0? learning_rate * pow (0.5, floor ((double) step / p->halve_every))
                             : learning_rate;
}

static params_t params = {0};

static const za_option_t options [] = {
    ZA_PARAM ("l2", ZA_OPTION_NUMBER, params_t, l2, "RATE", "0", 0, 1, NULL,
              ZA_READ_ALL, "The model (softmax regression over the pixels)",
              "L2 penalty on the kernel: RATE / 2 * |w|^2 added to the loss"),
    ZA_PARAM ("halve-every", ZA_OPTION_NUMBER, params_t, halve_every, "STEPS", "0", 0, 1e12,
              NULL, ZA_READ_ALL, NULL,
              "its own schedule: the learning rate halves every STEPS global\n"
              "steps (0: never)"),
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL, 0, 0, 0, NULL, NULL},
};

//  Its own defaults: plain SGD at 0.1 on batches of 100.
static const char *const defaults [][2] = {
    {"optimizer", "sgd"}, {"learning_rate", "0.1"}, {"batch_size", "100"},
    {"model_dir", "runs/custom_model_fn"}, {NULL, NULL},
};

int
main (int argc, char **argv)
{
    static const za_program_t program = {
        .name = "custom_model_fn",
        .about = "Trains softmax regression, a model_fn written by hand, on Fashion-MNIST: "
                 "in one process,\nas a whole supervised cluster on this machine (--local), "
                 "or as one task of a cluster.",
        .model_fn = &softmax_regression,
        .params = &params,
        .options = options,
        .defaults = defaults,
        .input_fn = input_fn,
        .learning_rate_fn = step_decay,
        .learning_rate_arg = &params,
    };
    return za_run_main (argc, argv, &program);
}
