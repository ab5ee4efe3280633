/*  za_augment.h: random augmentation of training images, per example, in
    the input pipeline (--augment), the transformations Keras's preprocessing
    layers and tf.image make: RandomFlip("horizontal"), a random crop after
    padding (RandomTranslation with a black fill), random_brightness and
    random_contrast. Each example's draws come from the input's seed and its
    place in the stream alone, so a run repeats.                            */
#ifndef ZA_AUGMENT_H_INCLUDED
#define ZA_AUGMENT_H_INCLUDED

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int flip;                   //  mirror left-right with probability 1/2
    int pad;                    //  pad_crop(P): shifted by dy, dx in -P..P, the
                                //  uncovered border black
    float brightness;           //  brightness(D): + delta, delta in [-D, D] (a pixel's
                                //  0..1 scale), the same for every pixel
    float contrast;             //  contrast(D): per channel (x - mean) * f + mean,
                                //  f in [1 - D, 1 + D]
} za_augment_t;

//  "pad_crop(4) flip brightness(0.2) contrast(0.2)": the steps, separated by
//  spaces, each at most once (applied in the order pad_crop, flip,
//  brightness, contrast whatever the text's). NULL or "" or "none": none.
//  0, or -1 with an error naming what is accepted.
int za_augment_parse (const char *text, za_augment_t *augment);

//  1 when any step is on.
int za_augment_active (const za_augment_t *augment);

//  Applies the steps to one HWC image of values after preprocessing, where
//  a channel's value is its 0..1 pixel x scale [k] + offset [k] (black is
//  offset [k]). The draws come from (seed, position). scratch holds
//  height x width x channels floats.
void za_augment_apply (const za_augment_t *augment, float *image, int height, int width,
                       int channels, const float *scale, const float *offset, uint64_t seed,
                       uint64_t position, float *scratch);

#ifdef __cplusplus
}
#endif
#endif
