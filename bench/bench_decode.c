/*  bench_decode: the image pipeline on its own, for bench/images.sh.

    bench_decode make DIR N
        writes N JPEGs (quality 75) of the Retinal OCT set's size, 512 wide
        and 496 high, gray, into DIR/{CNV,DME,DRUSEN,NORMAL}/: each a mosaic
        of Fashion-MNIST's real pixels (18 x 17 different images of 28 x 28,
        so the JPEG holds real edges and texture, not a smooth upscale).
    bench_decode run DIR [SIZE [area|bilinear [THREADS]]]
        one epoch of DIR (a folder of class folders) through zactor's input
        pipeline as training reads it: listed, decoded with libjpeg-turbo's
        decode-time scaling, resized to SIZE x SIZE gray (default 224, area),
        batches of 32 on THREADS decoding threads (default 1); prints
        "images/s X".                                                       */
#include "za/za_idx.h"
#include "za/za_image.h"
#include "za/za_images.h"
#include "za/za_input.h"
#include "za/za_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define OCT_WIDTH 512
#define OCT_HEIGHT 496
#define TILE 28
#define QUALITY 75
#define BATCH 32

static const char *s_classes [] = {"CNV", "DME", "DRUSEN", "NORMAL"};

static int
s_make (const char *dir, int count)
{
    za_dataset_t *fashion = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "train");
    if (!fashion) {
        fprintf (stderr, "bench_decode: %s (install dataset-fashion-mnist)\n", za_last_error ());
        return 1;
    }
    uint8_t *image = malloc ((size_t) OCT_WIDTH * OCT_HEIGHT);
    char path [4096];
    mkdir (dir, 0755);
    for (int c = 0; c < 4; c++) {
        snprintf (path, sizeof path, "%s/%s", dir, s_classes [c]);
        mkdir (path, 0755);
    }
    int64_t next = 0;
    for (int i = 0; i < count; i++) {
        for (int ty = 0; ty * TILE < OCT_HEIGHT; ty++)
            for (int tx = 0; tx * TILE < OCT_WIDTH; tx++, next++) {
                int64_t e = next % fashion->count;
                for (int y = 0; y < TILE && ty * TILE + y < OCT_HEIGHT; y++)
                    for (int x = 0; x < TILE && tx * TILE + x < OCT_WIDTH; x++) {
                        float v = fashion->features
                                ? fashion->features [e * TILE * TILE + y * TILE + x] * 255.0f
                                : fashion->pixels [e * TILE * TILE + y * TILE + x];
                        image [(size_t) (ty * TILE + y) * OCT_WIDTH + tx * TILE + x]
                            = (uint8_t) (v + 0.5f);
                    }
            }
        snprintf (path, sizeof path, "%s/%s/oct-%06d.jpeg", dir, s_classes [i % 4], i);
        if (za_image_write_jpeg (path, image, OCT_HEIGHT, OCT_WIDTH, 1, QUALITY)) {
            fprintf (stderr, "bench_decode: %s\n", za_last_error ());
            return 1;
        }
    }
    free (image);
    za_dataset_destroy (&fashion);
    printf ("wrote %d JPEGs of %dx%d in %s\n", count, OCT_WIDTH, OCT_HEIGHT, dir);
    return 0;
}

static int
s_run (const char *dir, int size, const char *resize, int threads)
{
    double start = za_clock_mono ();
    za_images_config_t config = {
        .source = dir,
        .image = {.height = size, .width = size, .channels = 1,
                  .resize = (za_resize_t) za_resize_parse (resize)},
    };
    za_dataset_t *dataset = za_images_load (&config);
    if (!dataset) {
        fprintf (stderr, "bench_decode: %s\n", za_last_error ());
        return 1;
    }
    za_input_config_t input_config = za_input_config_default ();
    input_config.batch_size = BATCH;
    input_config.threads = threads;
    za_input_t *input = za_input_new (dataset, &input_config);
    if (!input) {
        fprintf (stderr, "bench_decode: %s\n", za_last_error ());
        return 1;
    }
    za_batch_t batch;
    int64_t images = 0;
    double sum = 0;
    while (za_input_next (input, &batch) > 0) {
        images += batch.size;
        sum += batch.features [0];
    }
    double seconds = za_clock_mono () - start;
    printf ("images/s %.1f (%lld images in %.2f s, %s, %d thread%s; checksum %.3f)\n",
            (double) images / seconds, (long long) images, seconds, resize, threads,
            threads == 1? "": "s", sum);
    za_input_destroy (&input);
    za_dataset_destroy (&dataset);
    return 0;
}

int
main (int argc, char **argv)
{
    if (argc == 4 && !strcmp (argv [1], "make"))
        return s_make (argv [2], atoi (argv [3]));
    if (argc >= 3 && !strcmp (argv [1], "run"))
        return s_run (argv [2], argc > 3? atoi (argv [3]): 224, argc > 4? argv [4]: "area",
                      argc > 5? atoi (argv [5]): 1);
    fprintf (stderr, "usage: bench_decode make DIR N | run DIR [SIZE [area|bilinear "
             "[THREADS]]]\n");
    return 2;
}
