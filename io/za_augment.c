/*  za_augment.c: random augmentation of training images (za_augment.h).   */
#include "za/za_augment.h"
#include "za/za_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AUGMENT_PAD_MAX 64
#define AUGMENT_NAME_MAX 32

//  The steps' draws for one example: splitmix64 of (seed, position, k).
static uint64_t
s_draw (uint64_t seed, uint64_t position, uint64_t k)
{
    uint64_t z = seed ^ (position * 0x9e3779b97f4a7c15ULL) ^ ((k + 1) * 0xd1b54a32d192ed03ULL);
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

//  A draw as a number in [0, 1).
static double
s_uniform (uint64_t seed, uint64_t position, uint64_t k)
{
    return (double) (s_draw (seed, position, k) >> 11) * (1.0 / 9007199254740992.0);
}

int
za_augment_parse (const char *text, za_augment_t *augment)
{
    memset (augment, 0, sizeof *augment);
    if (!text || !*text || strcmp (text, "none") == 0)
        return 0;
    const char *at = text;
    int seen [4] = {0}, got, has_arg;
    char name [AUGMENT_NAME_MAX];
    double arg;
    while ((got = za_next_word (&at, " ", name, sizeof name, &has_arg, &arg))) {
        if (got < 0)
            return za_error ("--augment '%s': %s( needs one number and a ')'", text, name);
        int step = !strcmp (name, "pad_crop")? 0: !strcmp (name, "flip")? 1
                 : !strcmp (name, "brightness")? 2: !strcmp (name, "contrast")? 3: -1;
        if (step < 0)
            return za_error ("--augment '%s': unknown step '%s' (use pad_crop(P), flip, "
                             "brightness(D), contrast(D), or none)", text, name);
        if (seen [step]++)
            return za_error ("--augment '%s': '%s' twice", text, name);
        if (step == 1 && has_arg)
            return za_error ("--augment '%s': flip takes no argument", text);
        if (step != 1 && !has_arg)
            return za_error ("--augment '%s': %s needs its argument, as %s(%s)", text, name,
                             name, step == 0? "4": "0.2");
        if (step == 0 && (arg != (int) arg || arg < 1 || arg > AUGMENT_PAD_MAX))
            return za_error ("--augment '%s': pad_crop(P) takes whole pixels from 1 to %d",
                             text, AUGMENT_PAD_MAX);
        if ((step == 2 || step == 3) && !(arg > 0 && arg <= 1))
            return za_error ("--augment '%s': %s(D) takes D in (0, 1]", text, name);
        if (step == 0)
            augment->pad = (int) arg;
        else
        if (step == 1)
            augment->flip = 1;
        else
        if (step == 2)
            augment->brightness = (float) arg;
        else
            augment->contrast = (float) arg;
    }
    return 0;
}

int
za_augment_active (const za_augment_t *augment)
{
    return augment->flip || augment->pad || augment->brightness > 0 || augment->contrast > 0;
}

void
za_augment_apply (const za_augment_t *augment, float *image, int height, int width,
                  int channels, const float *scale, const float *offset, uint64_t seed,
                  uint64_t position, float *scratch)
{
    size_t row = (size_t) width * channels, size = (size_t) height * row;
    int dy = 0, dx = 0;
    if (augment->pad) {
        int span = 2 * augment->pad + 1;
        dy = (int) (s_uniform (seed, position, 0) * span) - augment->pad;
        dx = (int) (s_uniform (seed, position, 1) * span) - augment->pad;
    }
    int flip = augment->flip && s_uniform (seed, position, 2) < 0.5;
    if (dy || dx || flip) {
        //  Output pixel (y, x) is input (y + dy, x' + dx), x' mirrored when
        //  flipping; outside the input: black.
        for (int y = 0; y < height; y++)
            for (int x = 0; x < width; x++) {
                int sy = y + dy, sx = (flip? width - 1 - x: x) + dx;
                float *to = scratch + (size_t) y * row + (size_t) x * channels;
                if (sy < 0 || sy >= height || sx < 0 || sx >= width)
                    for (int k = 0; k < channels; k++)
                        to [k] = offset [k];
                else
                    memcpy (to, image + (size_t) sy * row + (size_t) sx * channels,
                            sizeof (float) * (size_t) channels);
            }
        memcpy (image, scratch, size * sizeof (float));
    }
    if (augment->brightness > 0) {
        float delta = (float) ((2 * s_uniform (seed, position, 3) - 1) * augment->brightness);
        for (size_t i = 0; i < size; i++)
            image [i] += delta * scale [i % (size_t) channels];
    }
    if (augment->contrast > 0) {
        float factor = (float) (1 + (2 * s_uniform (seed, position, 4) - 1) * augment->contrast);
        for (int k = 0; k < channels; k++) {
            double sum = 0;
            for (size_t i = (size_t) k; i < size; i += (size_t) channels)
                sum += image [i];
            float mean = (float) (sum / ((double) size / channels));
            for (size_t i = (size_t) k; i < size; i += (size_t) channels)
                image [i] = (image [i] - mean) * factor + mean;
        }
    }
}
