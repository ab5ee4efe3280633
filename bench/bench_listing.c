/*  bench_listing: lists a folder of FILES (default 200,000) empty-bodied
    .jpg files in 10 class folders and keeps one of 4 workers' shards, as a
    worker does before training; prints the seconds (the bar: < 3 s
    for 200,000 here). The folder is made once in DIR (default
    $TMPDIR/za_bench_listing) and reused.

    Usage: bench_listing [FILES [DIR]]                                       */
#include "za/za_images.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLASSES 10
#define SHARDS 4
#define REPEATS 3

//  Makes DIR/class_C/NNNNNNN.jpg, FILES in all, unless they are there.
static int
s_make (const char *dir, long files)
{
    char path [4096];
    snprintf (path, sizeof path, "%s/class_%d/%07ld.jpg", dir, CLASSES - 1, files - 1);
    if (access (path, F_OK) == 0)
        return 0;
    mkdir (dir, 0755);
    for (long i = 0; i < files; i++) {
        if (i < CLASSES) {
            snprintf (path, sizeof path, "%s/class_%ld", dir, i);
            mkdir (path, 0755);
        }
        snprintf (path, sizeof path, "%s/class_%ld/%07ld.jpg", dir, i % CLASSES, i);
        int fd = open (path, O_WRONLY | O_CREAT, 0644);
        if (fd < 0) {
            fprintf (stderr, "bench_listing: %s: %s\n", path, strerror (errno));
            return -1;
        }
        close (fd);
    }
    return 0;
}

int
main (int argc, char **argv)
{
    long files = argc > 1? atol (argv [1]): 200000;
    char dir [2048];
    const char *tmp = getenv ("TMPDIR");
    snprintf (dir, sizeof dir, "%s", argc > 2? argv [2]: "");
    if (!*dir)
        snprintf (dir, sizeof dir, "%s/za_bench_listing", tmp && *tmp? tmp: "/tmp");
    if (files < CLASSES || s_make (dir, files))
        return 1;
    printf ("%ld files in %d class folders under %s; shard 0 of %d\n", files, CLASSES, dir,
            SHARDS);
    za_images_config_t config = {
        .source = dir, .num_shards = SHARDS, .shard_index = 0,
        .image = {.height = 224, .width = 224, .channels = 3},
    };
    for (int r = 0; r < REPEATS; r++) {
        double start = za_clock_mono ();
        za_dataset_info_t info;
        if (za_images_info (&config, &info)) {
            fprintf (stderr, "bench_listing: %s\n", za_last_error ());
            return 1;
        }
        za_dataset_t *dataset = za_images_load (&config);
        double seconds = za_clock_mono () - start;
        if (!dataset) {
            fprintf (stderr, "bench_listing: %s\n", za_last_error ());
            return 1;
        }
        printf ("run %d: listed twice (info, then the shard) in %.3f s: %lld examples of "
                "%lld files in shard 0\n", r + 1, seconds, (long long) dataset->count,
                (long long) info.count);
        za_dataset_destroy (&dataset);
    }
    return 0;
}
