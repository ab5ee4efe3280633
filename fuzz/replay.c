/*  replay.c: a libFuzzer harness without libFuzzer, for ctest under any
    compiler. Runs LLVMFuzzerTestOneInput on every file of the given seed
    corpus folders, then on MUTATIONS variants of each made by a fixed
    pseudo-random generator seeded by the file's path (bytes flipped, set to 0x00/0xff/0x7f/0x80,
    runs cut out or repeated, the end cut off), so a run is the same every
    time. A finding aborts (ASan, UBSan or the harness's own checks).
    Usage: replay_HARNESS [-m MUTATIONS] DIR|FILE...                      */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REPLAY_MAX_INPUT (1 << 20)

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerInitialize (int *argc, char ***argv) __attribute__ ((weak));
void fuzz_cleanup (void) __attribute__ ((weak));

static uint64_t s_state = 0x9e3779b97f4a7c15ULL;

static uint64_t
s_random (void)
{
    s_state ^= s_state << 13;
    s_state ^= s_state >> 7;
    s_state ^= s_state << 17;
    return s_state;
}

//  One variant of in (size bytes) into out; returns its size.
static size_t
s_mutate (const uint8_t *in, size_t size, uint8_t *out)
{
    memcpy (out, in, size);
    int edits = 1 + (int) (s_random () % 4);
    for (int e = 0; e < edits && size > 0; e++) {
        size_t at = s_random () % size;
        static const uint8_t special [] = {0x00, 0xff, 0x7f, 0x80, '"', '{', '9', ','};
        switch (s_random () % 5) {
            case 0: out [at] ^= (uint8_t) (1 << (s_random () % 8)); break;
            case 1: out [at] = special [s_random () % sizeof special]; break;
            case 2: {                                       //  cut a run out
                size_t n = 1 + s_random () % 16;
                if (n > size - at)
                    n = size - at;
                memmove (out + at, out + at + n, size - at - n);
                size -= n;
                break;
            }
            case 3: {                                       //  repeat a run
                size_t n = 1 + s_random () % 16;
                if (n > size - at)
                    n = size - at;
                if (size + n <= 2 * REPLAY_MAX_INPUT) {
                    memmove (out + at + n, out + at, size - at);
                    size += n;
                }
                break;
            }
            default: size = at; break;                      //  cut the end off
        }
    }
    return size;
}

static long s_runs;

static void
s_file (const char *path, int mutations)
{
    FILE *file = fopen (path, "rb");
    if (!file)
        return;
    static uint8_t data [REPLAY_MAX_INPUT], variant [2 * REPLAY_MAX_INPUT];
    size_t size = fread (data, 1, REPLAY_MAX_INPUT, file);
    fclose (file);
    //  The variants of a file depend on its name only, not on the order.
    s_state = 0x9e3779b97f4a7c15ULL;
    for (const char *c = path; *c; c++)
        s_state = (s_state ^ (uint8_t) *c) * 0x100000001b3ULL;
    s_state |= 1;
    LLVMFuzzerTestOneInput (data, size);
    s_runs++;
    for (int m = 0; m < mutations; m++) {
        size_t n = s_mutate (data, size, variant);
        LLVMFuzzerTestOneInput (variant, n);
        s_runs++;
    }
}

int
main (int argc, char **argv)
{
    int mutations = 0, first = 1;
    if (argc > 2 && strcmp (argv [1], "-m") == 0) {
        mutations = atoi (argv [2]);
        first = 3;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize (&argc, &argv);
    for (int a = first; a < argc; a++) {
        struct stat st;
        if (stat (argv [a], &st) != 0) {
            fprintf (stderr, "replay: no such corpus '%s'\n", argv [a]);
            return 2;
        }
        if (!S_ISDIR (st.st_mode)) {
            s_file (argv [a], mutations);
            continue;
        }
        DIR *dir = opendir (argv [a]);
        struct dirent *entry;
        while (dir && (entry = readdir (dir)))
            if (entry->d_name [0] != '.') {
                char path [4096];
                snprintf (path, sizeof path, "%s/%s", argv [a], entry->d_name);
                s_file (path, mutations);
            }
        if (dir)
            closedir (dir);
    }
    if (fuzz_cleanup)
        fuzz_cleanup ();
    printf ("replay: %ld inputs, no finding\n", s_runs);
    return 0;
}
