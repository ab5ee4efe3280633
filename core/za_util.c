/*  za_util.c: aligned allocation, the error channel, the seeded RNG and clocks.
    Kept free of ZeroMQ so kernels/ can use it.                                  */
#include "za/za_util.h"

#include <stdarg.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

static _Thread_local char s_last_error [ZA_ERROR_MAX_CHARS];
static int s_quiet;

void *
za_alloc (size_t n)
{
    if (n > SIZE_MAX - ZA_ALIGN_BYTES) {
        za_error ("out of memory: %zu bytes asked for", n);
        return NULL;
    }
    size_t rounded = (n + ZA_ALIGN_BYTES - 1) / ZA_ALIGN_BYTES * ZA_ALIGN_BYTES;
    if (rounded == 0)
        rounded = ZA_ALIGN_BYTES;
    void *p = aligned_alloc (ZA_ALIGN_BYTES, rounded);
    if (!p) {
        za_error ("out of memory allocating %zu bytes", n);
        return NULL;
    }
    memset (p, 0, rounded);
    return p;
}

void
za_free (void *p)
{
    free (p);
}

int
za_error (const char *fmt, ...)
{
    //  Made apart first: an argument may be the last error itself
    //  (za_error ("estimator: %s", za_last_error ())).
    char message [sizeof s_last_error];
    va_list args;
    va_start (args, fmt);
    vsnprintf (message, sizeof message, fmt, args);
    va_end (args);
    memcpy (s_last_error, message, sizeof message);
    if (!s_quiet)
        fprintf (stderr, "zactor: error: %s\n", s_last_error);
    return -1;
}

int
za_error_adopt (const char *message)
{
    snprintf (s_last_error, sizeof s_last_error, "%s", message);
    return -1;
}

const char *
za_last_error (void)
{
    return s_last_error;
}

void
za_error_clear (void)
{
    s_last_error [0] = 0;
}

void
za_error_set_quiet (int quiet)
{
    s_quiet = quiet;
}

void
za_info (const char *fmt, ...)
{
    char line [1024];
    va_list args;
    va_start (args, fmt);
    vsnprintf (line, sizeof line, fmt, args);
    va_end (args);
    fprintf (stderr, "zactor: %s\n", line);
}

int
za_info_every (za_said_t *every, double period_secs, const char *fmt, ...)
{
    every->times++;
    double now = za_clock_mono ();
    if (every->said_at > 0 && now - every->said_at < period_secs)
        return 0;
    every->said_at = now;
    char line [1024];
    va_list args;
    va_start (args, fmt);
    vsnprintf (line, sizeof line, fmt, args);
    va_end (args);
    if (every->times > 1)
        fprintf (stderr, "zactor: %s (%" PRIu64 " times so far)\n", line, every->times);
    else
        fprintf (stderr, "zactor: %s\n", line);
    return 1;
}

static uint64_t
s_splitmix64 (uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void
za_rng_seed (za_rng_t *rng, uint64_t seed)
{
    rng->s [0] = s_splitmix64 (&seed);
    rng->s [1] = s_splitmix64 (&seed);
}

//  xorshift128+: fast, good enough for shuffles, dropout and initialisation.
uint64_t
za_rng_next (za_rng_t *rng)
{
    uint64_t s1 = rng->s [0];
    const uint64_t s0 = rng->s [1];
    rng->s [0] = s0;
    s1 ^= s1 << 23;
    rng->s [1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return rng->s [1] + s0;
}

float
za_rng_uniform (za_rng_t *rng)
{
    return (float) (za_rng_next (rng) >> 40) * (1.0f / 16777216.0f);
}

uint32_t
za_rng_below (za_rng_t *rng, uint32_t n)
{
    return (uint32_t) (((za_rng_next (rng) >> 32) * (uint64_t) n) >> 32);
}

double
za_clock_mono (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

void
za_softmax (const float *logits, int n, float *probabilities)
{
    double top = logits [0], total = 0;
    for (int k = 1; k < n; k++)
        top = logits [k] > top? logits [k]: top;
    for (int k = 0; k < n; k++)
        total += exp ((double) logits [k] - top);
    for (int k = 0; k < n; k++)
        probabilities [k] = (float) (exp ((double) logits [k] - top) / total);
}

static char s_boot_id [64];

static void
s_read_boot_id (void)
{
    FILE *file = fopen ("/proc/sys/kernel/random/boot_id", "r");
    if (file && fgets (s_boot_id, sizeof s_boot_id, file))
        s_boot_id [strcspn (s_boot_id, "\n")] = 0;
    else
        s_boot_id [0] = 0;
    if (file)
        fclose (file);
}

const char *
za_boot_id (void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once (&once, s_read_boot_id);
    return s_boot_id;
}

double
za_clock_wall (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

int
za_next_word (const char **at, const char *seps, char *name, size_t size, int *has_arg,
              double *arg)
{
    const char *p = *at + strspn (*at, seps);
    *has_arg = 0;
    *arg = 0;
    if (!*p) {
        *at = p;
        return 0;
    }
    char stops [16];
    snprintf (stops, sizeof stops, "%s(", seps);
    size_t len = strcspn (p, stops);
    snprintf (name, size, "%.*s", (int) (len < size? len: size - 1), p);
    p += len;
    int rc = 1;
    if (*p == '(') {
        char *end = NULL;
        *has_arg = 1;
        *arg = strtod (p + 1, &end);
        if (end == p + 1 || *end != ')') {
            rc = -1;
            end = (char *) p + 1 + strcspn (p + 1, ")");
        }
        p = *end? end + 1: end;
    }
    *at = p;
    return rc;
}

const char *
za_count_text (int64_t n, char *text, size_t size)
{
    char digits [24];
    int length = snprintf (digits, sizeof digits, "%llu",
                           (unsigned long long) (n < 0? -(uint64_t) n: (uint64_t) n));
    char grouped [ZA_COUNT_TEXT_MAX];
    int at = 0;
    if (n < 0)
        grouped [at++] = '-';
    for (int d = 0; d < length; d++) {
        if (d > 0 && (length - d) % 3 == 0)
            grouped [at++] = ',';
        grouped [at++] = digits [d];
    }
    grouped [at] = 0;
    snprintf (text, size, "%s", grouped);
    return text;
}

int
za_mkdirs (const char *dir)
{
    char *path = strdup (dir);
    if (!path)
        return za_error ("out of memory creating directory '%s'", dir);
    int rc = 0;
    size_t len = strlen (path);
    for (size_t i = 1; i <= len && rc == 0; i++) {
        if (path [i] != '/' && path [i] != 0)
            continue;
        if (path [i - 1] == '/')
            continue;                   //  "a//b" or a trailing slash
        char saved = path [i];
        path [i] = 0;
        struct stat st;
        if (mkdir (path, 0755) != 0 && errno != EEXIST)
            rc = za_error ("'%s': cannot create directory: %s", path, strerror (errno));
        else
        if (stat (path, &st) != 0)
            rc = za_error ("'%s': cannot stat directory: %s", path, strerror (errno));
        else
        if (!S_ISDIR (st.st_mode))
            rc = za_error ("'%s' exists and is not a directory", path);
        path [i] = saved;
    }
    free (path);
    return rc;
}
