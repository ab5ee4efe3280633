/*  za_predictor.h: a trained model for inference from C, in a few calls and
    nothing of training: load a model dir (its newest intact checkpoint and
    input.json) or a checkpoint file, then predict batches of images from
    memory.

        za_predictor_t *model = za_predictor_new ("runs/fmnist", NULL);
        float probabilities [16 * 10];
        za_predictor_run (model, pixels, 16, NULL, probabilities);
        za_predictor_destroy (&model);

    Images are what an image decoder gives, as the ONNX export takes them
    (za_export.h): float [n, H, W, C] of values 0 .. 255, channels last (RGB
    or gray), resized to the model's input; the predictor applies the
    training's preprocessing. Any number of threads may call
    za_predictor_run at once: each call takes one of the predictor's model
    states (made as needed, at most config.states), the weights are shared
    and never written.                                                      */
#ifndef ZA_PREDICTOR_H_INCLUDED
#define ZA_PREDICTOR_H_INCLUDED

#include <stdint.h>

#include "za/za_image.h"
#include "za/za_input.h"
#include "za/za_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct za_predictor_t za_predictor_t;

typedef struct {
    int batch_max;                      //  images per model call (larger batches go in
                                        //  parts); 0: 64
    int states;                         //  concurrent calls that run at once (more
                                        //  wait); 0: the cores
    const char *precision;              //  NULL or "float32"; "mixed_bfloat16"
    za_input_shape_t input;             //  zero: the model dir's (input.json, else
                                        //  28 x 28 x 1)
    int preprocess;                     //  a za_preprocess_t, or -1: the model dir's
} za_predictor_config_t;

//  Defaults: every field as its comment says (preprocess -1).
za_predictor_config_t za_predictor_config_default (void);

//  Loads the model at path: a model dir (its newest intact checkpoint) or a
//  checkpoint file (input.json is read beside it). config NULL: defaults.
//  NULL with an error: no checkpoint, a corrupt one, a model that is not a
//  layer stack, variables that do not fit the input shape.
za_predictor_t *za_predictor_new (const char *path, const za_predictor_config_t *config);
void za_predictor_destroy (za_predictor_t **self_p);

//  Predicts n images: logits and probabilities (each [n, classes], either
//  NULL) of pixels [n, H, W, C]. 0, or -1 with an error (n < 0, a model
//  call that failed).
int za_predictor_run (za_predictor_t *self, const float *pixels, int n, float *logits,
                      float *probabilities);

//  The input one image must have, the classes, class k's name (training's
//  class names, or NULL), the checkpoint's step, the model's text, and the
//  precision its products compute in ("float32", "mixed_bfloat16", ...).
za_input_shape_t za_predictor_input (const za_predictor_t *self);
//  How an image file is decoded for the model: its input's size and
//  channels, resized and cropped as training read its images (input.json;
//  area and no crop without one).
za_image_spec_t za_predictor_image (const za_predictor_t *self);
int za_predictor_classes (const za_predictor_t *self);
const char *za_predictor_class_name (const za_predictor_t *self, int k);
int64_t za_predictor_step (const za_predictor_t *self);
const char *za_predictor_model (const za_predictor_t *self);
const char *za_predictor_precision (const za_predictor_t *self);

#ifdef __cplusplus
}
#endif
#endif
