/*  predict: a trained model in a program of your own, through libzactor's
    predictor (za_predictor.h): no training machinery, a few calls. Loads
    MODEL_DIR, predicts the first COUNT Fashion-MNIST test images from
    memory in one call, prints the first ones' classes and probabilities and
    the accuracy of them all.

      build/zactor-run --model-dir runs/fmnist --max-steps 1000
      build/predict runs/fmnist 1000                                        */
#include "za/za_idx.h"
#include "za/za_predictor.h"

#include <stdio.h>
#include <stdlib.h>

int
main (int argc, char **argv)
{
    if (argc < 2) {
        fprintf (stderr, "usage: predict MODEL_DIR [COUNT]\n");
        return 2;
    }
    za_predictor_t *model = za_predictor_new (argv [1], NULL);
    if (!model)
        return 1;                       //  the error is said
    za_dataset_t *test = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "t10k");
    if (!test) {
        za_predictor_destroy (&model);
        return 1;
    }
    int count = argc > 2? atoi (argv [2]): 100;
    if (count <= 0 || count > test->count)
        count = (int) test->count;
    //  The images as a decoder gives them: pixels 0 .. 255, H x W x C.
    size_t row = (size_t) test->feature_size;
    float *pixels = malloc ((size_t) count * row * sizeof (float));
    int classes = za_predictor_classes (model);
    float *probabilities = malloc ((size_t) count * (size_t) classes * sizeof (float));
    for (size_t k = 0; pixels && k < (size_t) count * row; k++)
        pixels [k] = test->pixels? test->pixels [k]: test->features [k] * 255.0f;

    int rc = pixels && probabilities? za_predictor_run (model, pixels, count, NULL,
                                                        probabilities): -1;
    int right = 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        const float *p = probabilities + (size_t) i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            best = p [k] > p [best]? k: best;
        right += best == test->labels [i];
        if (i < 5)
            printf ("image %d: class %d (p %.3f), label %d\n", i, best, p [best],
                    test->labels [i]);
    }
    if (rc == 0)
        printf ("predict: %d of %d right (%.4f) with step %lld of %s\n", right, count,
                (double) right / count, (long long) za_predictor_step (model),
                za_predictor_model (model));
    free (pixels);
    free (probabilities);
    za_dataset_destroy (&test);
    za_predictor_destroy (&model);
    return rc? 1: 0;
}
