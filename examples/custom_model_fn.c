/*  custom_model_fn: the Estimator contract from C. A hand-written model_fn
    (softmax regression over the pixels) trained on Fashion-MNIST, evaluated,
    and asked for predictions: what a user writes when a layer stack won't do.

    build/custom_model_fn [MODEL_DIR]                                         */
#include "za/za_estimator.h"

#include <stdio.h>
#include <stdlib.h>

#define CLASSES 10
#define STEPS 600
#define BATCH 100

//  The model's state: buffers for one batch, planned once in create.
typedef struct {
    const za_backend_t *be;
    int inputs;                 //  pixels per image
    int batch_max;
    int kernel, bias;           //  variable indexes
    float *logits, *dlogits;    //  [batch_max, CLASSES]
    za_var_t vars [2];
} model_t;

static void *
model_create (const void *params, za_input_shape_t input, int batch_max,
              const za_backend_t *be, za_vars_t *vars)
{
    (void) params;
    model_t *self = calloc (1, sizeof *self);
    self->be = be;
    self->inputs = input.height * input.width * input.channels;
    self->batch_max = batch_max;
    int64_t kshape [2] = {self->inputs, CLASSES}, bshape [1] = {CLASSES};
    self->kernel = za_vars_add (vars, "logits/kernel", 2, kshape);
    self->bias = za_vars_add (vars, "logits/bias", 1, bshape);
    self->vars [0] = vars->vars [self->kernel];
    self->vars [1] = vars->vars [self->bias];
    self->logits = be->buffer_alloc ((size_t) batch_max * CLASSES * sizeof (float));
    self->dlogits = be->buffer_alloc ((size_t) batch_max * CLASSES * sizeof (float));
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
    const float *kernel = values + self->vars [0].offset;
    const float *bias = values + self->vars [1].offset;
    self->be->dense_forward (n, self->inputs, CLASSES, features, kernel, bias, ZA_ACT_NONE,
                             self->logits);
    spec->logits = self->logits;
    spec->n_classes = CLASSES;
    if (mode == ZA_MODE_PREDICT)
        return 0;
    spec->loss_sum = self->be->softmax_xent (n, CLASSES, self->logits, labels,
                                             mode == ZA_MODE_TRAIN? self->dlogits: NULL,
                                             &spec->correct, NULL);
    if (mode == ZA_MODE_TRAIN)
        self->be->dense_backward (n, self->inputs, CLASSES, features, kernel, self->logits,
                                  ZA_ACT_NONE, self->dlogits,
                                  grads + self->vars [0].offset,
                                  grads + self->vars [1].offset, NULL);
    return 0;
}

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

static const za_model_fn_t softmax_regression = {
    .name = "softmax_regression",
    .create = model_create,
    .init_vars = model_init_vars,
    .model_fn = model_fn,
    .destroy = model_destroy,
};

typedef struct {
    za_dataset_t *train, *test;
} data_t;

static za_input_t *
input_fn (void *arg, const za_input_context_t *context)
{
    za_mode_t mode = context->mode;
    data_t *data = arg;
    za_input_config_t config = za_input_config_default ();
    config.batch_size = BATCH;
    if (mode == ZA_MODE_TRAIN) {
        config.shuffle_buffer = 10000;
        config.epochs = -1;
        return za_input_new (data->train, &config);
    }
    return za_input_new (data->test, &config);
}

static int
print_prediction (void *arg, int64_t index, const float *logits, int n_classes, int class_id)
{
    (void) logits, (void) n_classes;
    const za_dataset_t *test = arg;
    printf ("  test image %lld: predicted %d, label %d\n", (long long) index, class_id,
            test->labels [index]);
    return index + 1 >= 5;      //  stop after five
}

int
main (int argc, char **argv)
{
    data_t data = {za_dataset_load_dir (ZA_FASHION_MNIST_DIR, "train"),
                   za_dataset_load_dir (ZA_FASHION_MNIST_DIR, "t10k")};
    if (!data.train || !data.test)
        return 1;
    za_run_config_t config = za_run_config_default ();
    config.model_dir = argc > 1? argv [1]: "runs/custom_model_fn";
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_SGD);
    optim.learning_rate = 0.1f;
    za_input_shape_t shape = {28, 28, 1};
    za_estimator_t *estimator = za_estimator_new (&softmax_regression, NULL, shape, &optim,
                                                  &config);
    za_eval_result_t result;
    int rc = !estimator
          || za_estimator_train (estimator, input_fn, &data, STEPS)
          || za_estimator_evaluate (estimator, input_fn, &data, 0, &result);
    if (!rc) {
        printf ("softmax regression: test accuracy %.4f at step %lld\n", result.accuracy,
                (long long) result.global_step);
        rc = za_estimator_predict (estimator, input_fn, &data, print_prediction, data.test) < 0;
    }
    za_estimator_destroy (&estimator);
    za_dataset_destroy (&data.train);
    za_dataset_destroy (&data.test);
    return rc;
}
