/*  fuzz_file.h: what the harnesses share: the input as a C string (for
    the text parsers), or written to a file of a given name in a folder
    made once per process (for the readers that take a path; under
    /dev/shm when there is one: no disk wear at a million runs).          */
#ifndef FUZZ_FILE_H_INCLUDED
#define FUZZ_FILE_H_INCLUDED

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  The input with a NUL after it (caller frees), or NULL.
static inline char *
fuzz_text (const uint8_t *data, size_t size)
{
    char *text = (char *) malloc (size + 1);
    if (text) {
        memcpy (text, data, size);
        text [size] = 0;
    }
    return text;
}

static char s_fuzz_dir [64];

//  At exit: the folder and what the harness wrote in it (flat) go.
static inline void
s_fuzz_dir_remove (void)
{
    DIR *dir = opendir (s_fuzz_dir);
    struct dirent *entry;
    char path [sizeof s_fuzz_dir + sizeof entry->d_name + 2];
    while (dir && (entry = readdir (dir)))
        if (entry->d_name [0] != '.') {
            snprintf (path, sizeof path, "%s/%s", s_fuzz_dir, entry->d_name);
            unlink (path);
        }
    if (dir)
        closedir (dir);
    rmdir (s_fuzz_dir);
}

//  Writes data to DIR/name; returns the path (static), or NULL.
static inline const char *
fuzz_file_write (const char *name, const uint8_t *data, size_t size)
{
    static char path [256];
    if (!*s_fuzz_dir) {
        snprintf (s_fuzz_dir, sizeof s_fuzz_dir, "%s/zactor-fuzz.XXXXXX",
                  access ("/dev/shm", W_OK) == 0? "/dev/shm": "/tmp");
        if (!mkdtemp (s_fuzz_dir)) {
            *s_fuzz_dir = 0;
            return NULL;
        }
        atexit (s_fuzz_dir_remove);
    }
    const char *dir = s_fuzz_dir;
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *file = fopen (path, "wb");
    if (!file)
        return NULL;
    int ok = fwrite (data, 1, size, file) == size;
    ok = fclose (file) == 0 && ok;
    return ok? path: NULL;
}

//  Streams every example and label of set as training would (batches of
//  16, no prefetch thread), aborting on a label outside 0 .. label_max, and
//  destroys set. For the readers of data sets.
#include "za/za_input.h"

static inline void
fuzz_stream (za_dataset_t *set, int64_t label_max)
{
    za_input_config_t config = za_input_config_default ();
    config.batch_size = 16;
    config.prefetch = 0;
    za_input_t *input = za_input_new (set, &config);
    za_batch_t batch;
    volatile float sum = 0;
    while (input && za_input_next (input, &batch) > 0)
        for (int i = 0; i < batch.size; i++) {
            for (int64_t f = 0; f < batch.feature_size; f++)
                sum += batch.features [i * batch.feature_size + f];
            if (batch.labels [i] < 0 || batch.labels [i] > label_max)
                abort ();
        }
    (void) sum;
    za_input_destroy (&input);
    za_dataset_destroy (&set);
}

#endif
