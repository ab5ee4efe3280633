/*  za_predictor.c: a layer stack's inference over a pool of model states.
    The values block is written once, at load; each call takes a free state
    (or makes one, up to the pool's size, or waits for one), preprocesses
    its images into the state's feature buffer and runs the model_fn in
    PREDICT, batch_max images at a time.                                    */
#include "za/za_predictor.h"
#include "za/za_checkpoint.h"
#include "za/za_export.h"
#include "za/za_util.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CHARS 4096
#define DEFAULT_BATCH 64
#define MAX_STATES 256

typedef struct {
    void *state;
    float *features;                    //  [batch_max, row]
} s_slot_t;

struct za_predictor_t {
    za_stack_spec_t spec;
    const za_backend_t *be;
    za_input_shape_t input;
    za_preprocess_t preprocess;
    za_resize_t resize;                 //  input.json's, as training read images
    int crop_to_aspect_ratio;
    int batch_max;
    size_t row;                         //  floats per image
    int classes;
    int64_t step;
    za_vars_t vars;
    float *values;
    uint64_t epoch;                     //  the values' epoch: they never change
    char **names;                       //  class names, or NULL
    int name_count;
    //  The pool: slots [0, made) exist; free_slots [0, free_count) are idle.
    pthread_mutex_t lock;
    pthread_cond_t freed;
    s_slot_t *slots;
    int *free_slots;
    int made, free_count, slot_max;
    //  Each channel's preprocessing (za_preprocess_channel).
    int from [ZA_INPUT_CHANNELS_MAX];
    float scale [ZA_INPUT_CHANNELS_MAX], offset [ZA_INPUT_CHANNELS_MAX];
};

za_predictor_config_t
za_predictor_config_default (void)
{
    return (za_predictor_config_t) {.preprocess = -1};
}

//  Copies the checkpoint's variables into the block. 0, or -1 with an error.
static int
s_restore (za_predictor_t *self, const za_checkpoint_t *ckpt)
{
    for (int v = 0; v < self->vars.count; v++) {
        const za_var_t *var = &self->vars.vars [v];
        const za_ckpt_tensor_t *t = za_checkpoint_find (ckpt, var->name);
        int same = t && t->dtype == ZA_DTYPE_F32 && t->ndim == var->ndim;
        for (int d = 0; same && d < var->ndim; d++)
            same = t->shape [d] == var->shape [d];
        if (!same)
            return za_error ("predictor: the checkpoint %s %s '%s' for an input of %dx%dx%d "
                             "(give the training's input shape)",
                             za_checkpoint_filename (ckpt), t? "holds another shape of"
                             : "has no", var->name, self->input.height, self->input.width,
                             self->input.channels);
        memcpy (self->values + var->offset, t->data, var->size * sizeof (float));
    }
    return 0;
}

static void
s_names (za_predictor_t *self, const char *text)
{
    if (!text || !*text)
        return;
    self->names = calloc ((size_t) self->classes, sizeof *self->names);
    const char *at = text;
    for (int k = 0; self->names && k < self->classes && at; k++) {
        const char *comma = strchr (at, ',');
        size_t length = comma? (size_t) (comma - at): strlen (at);
        self->names [k] = strndup (at, length);
        self->name_count = k + 1;
        at = comma? comma + 1: NULL;
    }
}

//  Makes slot i's model state and feature buffer. 0, or -1 with an error.
static int
s_slot_make (za_predictor_t *self, s_slot_t *slot)
{
    za_vars_t vars = {0};
    slot->state = za_stack_model_fn ()->create (&self->spec, self->input, self->batch_max,
                                                self->be, &vars);
    slot->features = malloc ((size_t) self->batch_max * self->row * sizeof (float));
    if (!slot->state || !slot->features) {
        if (slot->state)
            za_stack_model_fn ()->destroy (&slot->state);
        free (slot->features);
        slot->features = NULL;
        return slot->state? za_error ("out of memory"): -1;
    }
    return 0;
}

za_predictor_t *
za_predictor_new (const char *path, const za_predictor_config_t *config)
{
    za_predictor_config_t defaults = za_predictor_config_default ();
    if (!config)
        config = &defaults;
    struct stat st;
    if (stat (path, &st)) {
        za_error ("predictor: no model dir or checkpoint '%s'", path);
        return NULL;
    }
    int is_dir = S_ISDIR (st.st_mode);
    char dir [PATH_CHARS];
    snprintf (dir, sizeof dir, "%s", path);
    if (!is_dir) {
        char *slash = strrchr (dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf (dir, sizeof dir, ".");
    }
    int found = 0;
    za_checkpoint_t *ckpt = is_dir? za_checkpoint_load_newest (path, &found)
                                  : za_checkpoint_load (path);
    if (!ckpt) {
        if (is_dir && !found)
            za_error ("predictor: no checkpoint in %s", path);
        return NULL;
    }
    za_export_config_t dir_input;
    void *json = NULL;
    za_predictor_t *self = calloc (1, sizeof *self);
    int rc = self? 0: za_error ("out of memory");
    if (!rc)
        rc = za_export_config_load (dir, &dir_input, &json);
    const char *text = za_checkpoint_meta (ckpt, "model");
    if (!rc && (!text || za_stack_parse (text, &self->spec)))
        rc = za_error ("predictor: the model of %s is not a layer stack (%s)",
                       za_checkpoint_filename (ckpt), text? text: "none named");
    if (!rc) {
        self->input = config->input.height > 0? config->input: dir_input.input;
        self->preprocess = config->preprocess >= 0? (za_preprocess_t) config->preprocess
                                                  : dir_input.preprocess;
        int resize = dir_input.resize? za_resize_parse (dir_input.resize): -1;
        self->resize = resize < 0? ZA_RESIZE_AREA: (za_resize_t) resize;
        self->crop_to_aspect_ratio = dir_input.crop_to_aspect_ratio;
        self->batch_max = config->batch_max > 0? config->batch_max: DEFAULT_BATCH;
        long cores = sysconf (_SC_NPROCESSORS_ONLN);
        self->slot_max = config->states > 0? config->states: cores > 0? (int) cores: 1;
        if (self->slot_max > MAX_STATES)
            self->slot_max = MAX_STATES;
        self->row = (size_t) self->input.height * self->input.width * self->input.channels;
        self->classes = self->spec.layers [self->spec.count - 1].units;
        self->step = za_checkpoint_step (ckpt);
        self->be = za_backend_cpu ();
        if (config->precision && strcmp (config->precision, "float32")
            && !(self->be = za_backend_mixed (self->be, config->precision)))
            rc = -1;
        for (int k = 0; k < ZA_INPUT_CHANNELS_MAX; k++)
            za_preprocess_channel (self->preprocess, self->input.channels, k, &self->from [k],
                                   &self->scale [k], &self->offset [k]);
        s_names (self, dir_input.class_names);
    }
    if (!rc) {
        self->slots = calloc ((size_t) self->slot_max, sizeof *self->slots);
        self->free_slots = calloc ((size_t) self->slot_max, sizeof *self->free_slots);
        pthread_mutex_init (&self->lock, NULL);
        pthread_cond_init (&self->freed, NULL);
        //  The first state declares the variables.
        if (!self->slots || !self->free_slots)
            rc = za_error ("out of memory");
        else {
            self->slots [0].state = za_stack_model_fn ()->create (&self->spec, self->input,
                                                                  self->batch_max, self->be,
                                                                  &self->vars);
            self->slots [0].features = malloc ((size_t) self->batch_max * self->row
                                               * sizeof (float));
            self->made = self->slots [0].state && self->slots [0].features? 1: 0;
            self->free_slots [self->free_count++] = 0;
            if (!self->made)
                rc = -1;
        }
    }
    if (!rc && !(self->values = calloc (self->vars.total + 1, sizeof (float))))
        rc = za_error ("out of memory");
    if (!rc)
        rc = s_restore (self, ckpt);
    static atomic_uint_fast64_t epochs = 1;
    if (!rc)
        self->epoch = (UINT64_C (1) << 62) | atomic_fetch_add (&epochs, 1);
    za_export_config_free (&json);
    za_checkpoint_destroy (&ckpt);
    if (rc)
        za_predictor_destroy (&self);
    return self;
}

void
za_predictor_destroy (za_predictor_t **self_p)
{
    za_predictor_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; self->slots && i < self->slot_max; i++) {
        if (self->slots [i].state)
            za_stack_model_fn ()->destroy (&self->slots [i].state);
        free (self->slots [i].features);
    }
    if (self->slots) {
        pthread_mutex_destroy (&self->lock);
        pthread_cond_destroy (&self->freed);
    }
    for (int k = 0; k < self->name_count; k++)
        free (self->names [k]);
    free (self->names);
    free (self->slots);
    free (self->free_slots);
    free (self->values);
    free (self);
    *self_p = NULL;
}

//  A free slot, or a new one while the pool has room, else one waited for;
//  its state made if it has none (new, or given back after a make failed).
//  Its index, or -1 with an error.
static int
s_take (za_predictor_t *self)
{
    pthread_mutex_lock (&self->lock);
    while (!self->free_count && self->made == self->slot_max)
        pthread_cond_wait (&self->freed, &self->lock);
    int index = self->free_count? self->free_slots [--self->free_count]: self->made++;
    pthread_mutex_unlock (&self->lock);
    if (!self->slots [index].state && s_slot_make (self, &self->slots [index])) {
        pthread_mutex_lock (&self->lock);
        self->free_slots [self->free_count++] = index;
        pthread_cond_signal (&self->freed);
        pthread_mutex_unlock (&self->lock);
        return -1;
    }
    return index;
}

static void
s_give (za_predictor_t *self, int index)
{
    pthread_mutex_lock (&self->lock);
    self->free_slots [self->free_count++] = index;
    pthread_cond_signal (&self->freed);
    pthread_mutex_unlock (&self->lock);
}

//  n images' pixels into features, as the training's input made them.
static void
s_preprocess (const za_predictor_t *self, const float *pixels, int n, float *features)
{
    size_t total = (size_t) n * self->row;
    if (self->preprocess == ZA_PREPROCESS_NONE) {
        for (size_t k = 0; k < total; k++)
            features [k] = pixels [k] / ZA_DATASET_PIXEL_MAX;
        return;
    }
    size_t channels = (size_t) self->input.channels;
    if (channels > ZA_INPUT_CHANNELS_MAX)
        channels = 1;
    for (size_t p = 0; p < total; p += channels)
        for (size_t k = 0; k < channels; k++) {
            float value = pixels [p + (size_t) self->from [k]] / ZA_DATASET_PIXEL_MAX;
            features [p + k] = value * self->scale [k] + self->offset [k];
        }
}

int
za_predictor_run (za_predictor_t *self, const float *pixels, int n, float *logits,
                  float *probabilities)
{
    if (n < 0)
        return za_error ("predictor: %d images", n);
    if (n == 0)
        return 0;
    int index = s_take (self);
    if (index < 0)
        return -1;
    s_slot_t *slot = &self->slots [index];
    uint64_t epoch = za_model_values_epoch ();
    za_model_set_values_epoch (self->epoch);
    int rc = 0;
    for (int at = 0; at < n && !rc; at += self->batch_max) {
        int count = n - at < self->batch_max? n - at: self->batch_max;
        s_preprocess (self, pixels + (size_t) at * self->row, count, slot->features);
        za_spec_t spec;
        rc = za_stack_model_fn ()->model_fn (slot->state, slot->features, NULL, count,
                                             ZA_MODE_PREDICT, self->values, NULL, 0, &spec);
        for (int i = 0; !rc && i < count; i++) {
            const float *row = spec.logits + (size_t) i * self->classes;
            size_t out = (size_t) (at + i) * self->classes;
            if (logits)
                memcpy (logits + out, row, (size_t) self->classes * sizeof (float));
            if (probabilities)
                za_softmax (row, self->classes, probabilities + out);
        }
    }
    za_model_set_values_epoch (epoch);
    s_give (self, index);
    return rc;
}

za_input_shape_t
za_predictor_input (const za_predictor_t *self)
{
    return self->input;
}

za_image_spec_t
za_predictor_image (const za_predictor_t *self)
{
    return (za_image_spec_t) {.height = self->input.height, .width = self->input.width,
                              .channels = self->input.channels, .resize = self->resize,
                              .crop_to_aspect_ratio = self->crop_to_aspect_ratio};
}

int
za_predictor_classes (const za_predictor_t *self)
{
    return self->classes;
}

const char *
za_predictor_class_name (const za_predictor_t *self, int k)
{
    return self->names && k >= 0 && k < self->name_count? self->names [k]: NULL;
}

int64_t
za_predictor_step (const za_predictor_t *self)
{
    return self->step;
}

const char *
za_predictor_model (const za_predictor_t *self)
{
    return self->spec.text;
}

const char *
za_predictor_precision (const za_predictor_t *self)
{
    return za_precision_text (self->be->precision);
}
