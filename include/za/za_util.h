/*  za_util.h: the small things every module needs: aligned buffers, a seeded
    random generator, monotonic time, and one error/log channel.

    Errors: a function that fails calls za_error (...) once, where the reason is
    known, and returns -1 (or NULL). The message goes to stderr and is kept in a
    per-thread buffer that za_last_error () returns, so callers and tests can show
    or check it without parsing stderr.                                          */
#ifndef ZA_UTIL_H_INCLUDED
#define ZA_UTIL_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_ALIGN_BYTES 64
#define ZA_ERROR_MAX_CHARS 512

//  Allocates n bytes aligned to ZA_ALIGN_BYTES, zero-filled. Returns NULL (and
//  sets the error) when out of memory. Free with za_free.
void *za_alloc (size_t n);
void za_free (void *p);

//  Records an error message (printf format), writes "zactor: error: MSG" to
//  stderr unless quiet mode is on. Always returns -1 so callers can
//  `return za_error (...)`.
int za_error (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
//  Records `message` as this thread's last error without printing it (an
//  error already reported on another thread, handed over). Returns -1.
int za_error_adopt (const char *message);
//  The last error recorded on this thread ("" if none).
const char *za_last_error (void);
//  Clears the last error on this thread.
void za_error_clear (void);
//  1 silences the stderr copy of errors (tests that provoke errors on purpose).
void za_error_set_quiet (int quiet);

//  The next word of a list such as "pad_crop(4) flip" or "auc, top_k(5)":
//  words separated by any of `seps`, each with at most one number in
//  parentheses. Its name goes into name [size] (cut to fit), *has_arg says
//  whether it had a number, *arg holds it. Returns 1 for a word, 0 at the
//  end of the text, -1 when a '(' holds no number or lacks its ')' (*at is
//  past the word either way).
int za_next_word (const char **at, const char *seps, char *name, size_t size, int *has_arg,
                  double *arg);

//  mkdir -p: creates dir and its missing parents (mode 0755). A path that
//  exists but is not a directory is an error. Returns 0 or -1 with an error.
int za_mkdirs (const char *dir);

//  n with a comma between each three digits ("12,001"), into text [size];
//  returns text. 27 bytes hold any int64.
#define ZA_COUNT_TEXT_MAX 27
const char *za_count_text (int64_t n, char *text, size_t size);

//  Informational log line to stderr: "zactor: MSG".
void za_info (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

//  A thing that may happen again and again (a send that would block, a host
//  that does not resolve), said at most once per period: zero it before use.
typedef struct {
    double said_at;                 //  za_clock_mono of the last line; 0: never said
    uint64_t times;                 //  how often it happened in all
} za_said_t;

//  Counts one more time; says "zactor: MSG (N times so far)" when nothing
//  was said in the last period_secs (the first time at once). Returns 1 when
//  it said it, 0 when it only counted.
int za_info_every (za_said_t *every, double period_secs, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

//  Seeded pseudo-random generator: xorshift128+, state seeded by splitmix64.
typedef struct {
    uint64_t s[2];
} za_rng_t;

void za_rng_seed (za_rng_t *rng, uint64_t seed);
uint64_t za_rng_next (za_rng_t *rng);
//  Uniform float in [0, 1).
float za_rng_uniform (za_rng_t *rng);
//  Uniform integer in [0, n), n > 0.
uint32_t za_rng_below (za_rng_t *rng, uint32_t n);

//  Monotonic clock in seconds, and wall clock (Unix epoch) in seconds.
double za_clock_mono (void);
double za_clock_wall (void);
//  The softmax of n logits into probabilities: from the largest logit (no
//  overflow), summed in double.
void za_softmax (const float *logits, int n, float *probabilities);

//  This boot of this machine (/proc/sys/kernel/random/boot_id; "" where it
//  cannot be read): processes that say the same share za_clock_mono.
const char *za_boot_id (void);

#ifdef __cplusplus
}
#endif
#endif
