/*  test_augment.c: --augment on real Fashion-MNIST pixels: the text, each
    step changing the pixels as it says (and no more), the draws repeating
    with the seed and changing with another, the same example augmented the
    same whatever the replicas, and zactor-run's refusals.                  */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "za/za_augment.h"
#include "za/za_input.h"
#include "za/za_util.h"
#include "za_test.h"

#define SIDE 28
#define PIXELS (SIDE * SIDE)
#define BATCH 64

Test (augment, the_text)
{
    za_augment_t a;
    cr_assert_eq (za_augment_parse ("pad_crop(4) flip brightness(0.2) contrast(0.3)", &a), 0,
                  "%s", za_last_error ());
    cr_expect (a.pad == 4 && a.flip && fabsf (a.brightness - 0.2f) < 1e-6f
               && fabsf (a.contrast - 0.3f) < 1e-6f);
    cr_expect_eq (za_augment_parse (NULL, &a), 0);
    cr_expect (!za_augment_active (&a));
    cr_expect_eq (za_augment_parse ("none", &a), 0);
    cr_expect (!za_augment_active (&a));
    const char *bad [] = {"spin", "flip(2)", "pad_crop", "pad_crop(0)", "pad_crop(1.5)",
                          "brightness(2)", "contrast(x)", "flip flip", "pad_crop(4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        cr_expect_eq (za_augment_parse (bad [i], &a), -1, "'%s' was taken", bad [i]);
        cr_expect (strstr (za_last_error (), "--augment"), "%s", za_last_error ());
    }
}

//  The first batch of 64 Fashion-MNIST images, in order, augmented by
//  `text` with `seed` (caller frees).
static float *
s_batch (const za_dataset_t *data, const char *text, uint64_t seed, int replicas, int replica)
{
    za_input_config_t config = za_input_config_default ();
    config.batch_size = BATCH / replicas;
    config.replicas = replicas;
    config.replica = replica;
    config.prefetch = 0;
    config.seed = seed;
    cr_assert_eq (za_augment_parse (text, &config.augment), 0, "%s", za_last_error ());
    za_input_t *input = za_input_new (data, &config);
    cr_assert_not_null (input, "%s", za_last_error ());
    za_batch_t batch;
    cr_assert_eq (za_input_next (input, &batch), 1);
    size_t floats = (size_t) batch.size * PIXELS;
    float *copy = malloc (floats * sizeof (float));
    memcpy (copy, batch.features, floats * sizeof (float));
    za_input_destroy (&input);
    return copy;
}

//  Pixel (y, x) of image `image` shifted by (dy, dx) and maybe mirrored, as
//  za_augment.h says: black (0) outside.
static float
s_moved (const float *image, int y, int x, int dy, int dx, int flip)
{
    int sy = y + dy, sx = (flip? SIDE - 1 - x: x) + dx;
    return sy < 0 || sy >= SIDE || sx < 0 || sx >= SIDE? 0.0f: image [sy * SIDE + sx];
}

//  Whether `got` is `image` moved by some (dy, dx) within pad (and, with
//  may_flip, maybe mirrored); *moved set when that is not the identity.
static int
s_is_moved (const float *image, const float *got, int pad, int may_flip, int *moved)
{
    for (int flip = 0; flip <= may_flip; flip++)
        for (int dy = -pad; dy <= pad; dy++)
            for (int dx = -pad; dx <= pad; dx++) {
                int same = 1;
                for (int p = 0; p < PIXELS && same; p++)
                    same = got [p] == s_moved (image, p / SIDE, p % SIDE, dy, dx, flip);
                if (same) {
                    *moved |= dy || dx || flip;
                    return 1;
                }
            }
    return 0;
}

Test (augment, flip_and_pad_crop_move_pixels_and_do_nothing_else)
{
    za_dataset_t *data = za_test_fashion ("train", BATCH);
    float *plain = s_batch (data, NULL, 7, 1, 0);
    const char *texts [] = {"flip", "pad_crop(2)", "pad_crop(2) flip"};
    for (int t = 0; t < 3; t++) {
        float *got = s_batch (data, texts [t], 7, 1, 0);
        int pad = t? 2: 0, flip = t != 1, moved = 0, unmoved = 0;
        for (int i = 0; i < BATCH; i++) {
            int was = moved;
            cr_assert (s_is_moved (plain + i * PIXELS, got + i * PIXELS, pad, flip, &moved),
                       "%s: image %d is no shift%s of the original", texts [t], i,
                       flip? " or mirror": "");
            unmoved += was == moved && memcmp (plain + i * PIXELS, got + i * PIXELS,
                                               PIXELS * sizeof (float)) == 0;
        }
        cr_expect (moved, "%s moved no image of 64", texts [t]);
        cr_expect_lt (unmoved, BATCH, "%s: every image as it was", texts [t]);
        free (got);
    }
    free (plain);
    za_dataset_destroy (&data);
}

Test (augment, brightness_adds_one_delta_and_contrast_keeps_the_mean)
{
    za_dataset_t *data = za_test_fashion ("train", BATCH);
    float *plain = s_batch (data, NULL, 3, 1, 0);
    float *bright = s_batch (data, "brightness(0.1)", 3, 1, 0);
    float *contrast = s_batch (data, "contrast(0.5)", 3, 1, 0);
    int changed = 0;
    for (int i = 0; i < BATCH; i++) {
        const float *a = plain + i * PIXELS, *b = bright + i * PIXELS, *c = contrast + i * PIXELS;
        float delta = b [0] - a [0];
        cr_assert_leq (fabsf (delta), 0.1f + 1e-6f, "image %d: delta %g", i, (double) delta);
        double mean = 0, mean_c = 0;
        for (int p = 0; p < PIXELS; p++) {
            cr_assert_float_eq (b [p] - a [p], delta, 1e-6, "image %d pixel %d", i, p);
            mean += a [p], mean_c += c [p];
        }
        changed += delta != 0;
        mean /= PIXELS, mean_c /= PIXELS;
        cr_assert_float_eq (mean_c, mean, 1e-5, "image %d: contrast moved the mean", i);
        //  One factor f in [0.5, 1.5] for the whole image.
        int p0 = 0;
        while (p0 < PIXELS && fabs (a [p0] - mean) < 0.1)
            p0++;
        double f = (c [p0] - mean) / (a [p0] - mean);
        cr_assert (f >= 0.5 - 1e-4 && f <= 1.5 + 1e-4, "image %d: factor %g", i, f);
        for (int p = 0; p < PIXELS; p++)
            cr_assert_float_eq (c [p], (a [p] - mean) * f + mean, 1e-4, "image %d pixel %d", i, p);
    }
    cr_expect_gt (changed, BATCH / 2, "brightness changed %d images of 64", changed);
    free (plain), free (bright), free (contrast);
    za_dataset_destroy (&data);
}

Test (augment, the_seed_repeats_the_draws_and_replicas_see_the_same)
{
    za_dataset_t *data = za_test_fashion ("train", BATCH);
    const char *all = "pad_crop(3) flip brightness(0.2) contrast(0.2)";
    float *a = s_batch (data, all, 11, 1, 0), *b = s_batch (data, all, 11, 1, 0);
    float *c = s_batch (data, all, 12, 1, 0);
    cr_expect_eq (memcmp (a, b, BATCH * PIXELS * sizeof (float)), 0, "one seed, two draws");
    cr_expect_neq (memcmp (a, c, BATCH * PIXELS * sizeof (float)), 0, "another seed, the same");
    //  Two replicas' halves of the global batch are the one process's batch.
    for (int r = 0; r < 2; r++) {
        float *half = s_batch (data, all, 11, 2, r);
        cr_expect_eq (memcmp (half, a + r * (BATCH / 2) * PIXELS,
                              (BATCH / 2) * PIXELS * sizeof (float)), 0, "replica %d", r);
        free (half);
    }
    free (a), free (b), free (c);
    za_dataset_destroy (&data);
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

Test (augment, zactor_run_trains_with_it_and_refuses_what_cannot_be, .fini = s_teardown)
{
    za_test_dir_create ("za_augment_test");
    char *dir = za_test_path ("run");
    const char *train [] = {"--model", "cnn", "--augment", "pad_crop(2) flip", "--max-steps",
                            "200", "--threads", "2", "--model-dir", dir, NULL};
    za_test_result_t r = za_test_run (train, 300);
    cr_assert_eq (r.exit_code, 0, "%s", r.err);
    cr_expect_gt (za_test_accuracy (r.out), 0.6);
    za_test_result_free (&r);
    const char *bad [] = {"--model", "cnn", "--augment", "spin", "--max-steps", "5",
                          "--model-dir", dir, NULL};
    r = za_test_run (bad, 60);
    cr_expect_eq (r.exit_code, 2, "%s", r.err);
    cr_expect (strstr (r.err, "unknown step 'spin'"), "%s", r.err);
    za_test_result_free (&r);
    const char *cached [] = {"--model", "cnn", "--freeze", "conv2d", "--cache-frozen",
                             "--augment", "flip", "--max-steps", "5", "--model-dir", dir, NULL};
    r = za_test_run (cached, 60);
    cr_expect_eq (r.exit_code, 2, "%s", r.err);
    cr_expect (strstr (r.err, "use one or the other"), "%s", r.err);
    za_test_result_free (&r);
    free (dir);
}
