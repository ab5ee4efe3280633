/*  za_test.h: what the Criterion suites under tests/ share: a temp dir per test, paths
    in it, zactor-run as a child process, whole files, checkpoints and Fashion-MNIST.

    Every function here checks with cr_assert and fails the running test on an error
    (it never returns one), so a suite's code reads as the steps of the test. The
    temp dir is state of the test process: Criterion runs each test in its own
    process, so each test gets its own.                                            */
#ifndef ZA_TEST_H_INCLUDED
#define ZA_TEST_H_INCLUDED

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "za/za_checkpoint.h"
#include "za/za_idx.h"
#include "za/za_model.h"
#include "za/za_util.h"

//  How much slower a sanitizer makes the code (AddressSanitizer at -O0 runs the
//  CNN some 10x slower): every time limit of the suites is multiplied by it.
#if defined (__SANITIZE_ADDRESS__)
#define ZA_TEST_SLOWDOWN 4
#else
#define ZA_TEST_SLOWDOWN 1
#endif


//  --------------------------------------------------------------------------
//  The temp dir of the running test

//  Makes a fresh directory "/tmp/<prefix>_XXXXXX" and makes it the test's temp dir.
//  Returns its path, owned by this module and valid until za_test_dir_remove.
const char *za_test_dir_create (const char *prefix);

//  The test's temp dir, or "" when none was made (owned by this module).
const char *za_test_dir (void);

//  Removes the temp dir and everything below it (links are removed, not
//  followed). Does nothing when there is none, so it is safe to call twice.
void za_test_dir_remove (void);

//  "<dir>/<name>". Caller frees.
char *za_test_join (const char *dir, const char *name);

//  "<temp dir>/<name>". Caller frees.
char *za_test_path (const char *name);


//  --------------------------------------------------------------------------
//  Files

//  The whole content of a file, with a NUL after the last byte so that a text
//  file can be used as a string; *size_p (when not NULL) gets the size without
//  the NUL. Caller frees.
void *za_test_read_file (const char *path, size_t *size_p);


//  Writes text to "<temp dir>/<name>" and returns that path. Caller frees.
char *za_test_write (const char *name, const char *text);

//  Reads the file at path (a log being written, or one not there yet: "")
//  until it holds `needle`, at most timeout_s (x ZA_TEST_SLOWDOWN). Returns
//  its last text (caller frees); the caller checks for the needle.
char *za_test_wait_for_text (const char *path, const char *needle, double timeout_s);

//  How often needle occurs in text.
int za_test_count (const char *text, const char *needle);

//  Files in /dev/shm whose names start with prefix (segments left behind).
int za_test_shm_count (const char *prefix);
//  The same, once it is at most `most` (a test beside may hold one for a
//  moment), or after timeout_s (x ZA_TEST_SLOWDOWN): the count then.
int za_test_shm_count_settled (const char *prefix, int most, double timeout_s);


//  --------------------------------------------------------------------------
//  zactor-run as a real process

//  The zactor-run to test: in $ZA_BINARY_DIR (what CTest sets), else in the
//  build directory the suite was compiled for. Fails the test when it is not
//  there or not executable. Returns a buffer owned by this module.
const char *za_test_binary (void);

//  Starts zactor-run with args (NULL-terminated, without argv[0]; 62 at most),
//  stdin from /dev/null, stdout and stderr to the files named (created or
//  truncated). Returns its pid; the caller waits for it (za_test_wait).
pid_t za_test_spawn (const char *const *args, const char *out_path, const char *err_path);

//  Waits at most timeout_s (x ZA_TEST_SLOWDOWN) for pid; on a hang kills it and
//  fails the test.
//  Returns the wait status.
int za_test_wait (pid_t pid, double timeout_s);

//  What one run of zactor-run gave.
typedef struct {
    int exit_code;                      //  -1 when killed by a signal
    char *out;                          //  all it wrote to stdout, owned
    char *err;                          //  all it wrote to stderr, owned
} za_test_result_t;

//  Runs zactor-run with args (as za_test_spawn) to completion, at most
//  timeout_s, with its output in temp-dir files that it deletes afterwards.
//  Free the result with za_test_result_free.
za_test_result_t za_test_run (const char *const *args, double timeout_s);

//  As za_test_run, for another program of the build (za_test_program).
za_test_result_t za_test_run_program (const char *name, const char *const *args,
                                      double timeout_s);

//  The accuracy of the "test accuracy A ..." line zactor-run printed in
//  out; fails the test when there is none.
double za_test_accuracy (const char *out);

//  Frees the output in a result and sets it to NULL; safe to call twice.
void za_test_result_free (za_test_result_t *result);

//  Another program of the build (custom_model_fn, zactor-top), or of the
//  system's when name is an absolute path (/usr/bin/python3): its path,
//  owned by this module until the next call. Fails the test when it is not
//  there.
const char *za_test_program (const char *name);

//  As za_test_spawn, for that program.
pid_t za_test_spawn_program (const char *name, const char *const *args, const char *out_path,
                             const char *err_path);


//  --------------------------------------------------------------------------
//  A cluster, watched through its broker

//  A TCP port on 127.0.0.1 nobody uses now (the kernel picks; closed again,
//  so a race with another process taking it in between is possible but rare).
int za_test_free_port (void);

//  The same as an endpoint ("tcp://127.0.0.1:PORT"). Caller frees.
char *za_test_free_endpoint (void);

//  `zactor-top --broker ADDR --once FLAGS`, its output to read (pclose it).
FILE *za_test_popen_top (const char *broker, const char *flags);

//  `zactor-top --broker ADDR --once --json`, parsed; NULL when it fails.
json_t *za_test_top (const char *broker);

//  The row of role/index in a state, or NULL.
json_t *za_test_row (json_t *state, const char *role, int index);

//  What a test waits for after a fault: role/index running again, restarted
//  at least `restarts` times, and the job's global_step at least `step`.
typedef struct {
    const char *role;
    int index;
    int restarts;
    int64_t step;
} za_test_want_t;

//  SIGKILLs the process of role/index in a broker state; returns the job's
//  global step then. Fails the test when the row has no pid.
int64_t za_test_kill (json_t *state, const char *role, int index);

//  A za_test_ready_fn for a za_test_want_t.
int za_test_task_back (json_t *state, void *arg);

//  Asks the broker for its state until `ready` says it is what the test
//  waits for (at most `timeout_s` x ZA_TEST_SLOWDOWN); returns that state (caller decrefs).
//  Fails the test, showing the last state, when it never comes.
typedef int (*za_test_ready_fn) (json_t *state, void *arg);
json_t *za_test_wait_for (const char *broker, za_test_ready_fn ready, void *arg,
                          const char *what, double timeout_s);

//  Starts `PROGRAM --local ...` (args) with its output in `out`; returns its
//  pid, and the broker's address the launcher prints first in broker [128].
pid_t za_test_start_local (const char *program, const char *const *args, const char *out,
                           char *broker);


//  --------------------------------------------------------------------------
//  Checkpoints and data

//  Checks that dir holds exactly the checkpoints of the expected steps, ascending.
void za_test_expect_checkpoints (const char *dir, const int64_t *expected,
                                 int expected_count);

//  Checks that every checkpoint file in dir loads and verifies, and that its
//  global step is the one in its name. Returns the newest step (-1 when there is
//  none) and, when count_p is not NULL, how many there are in *count_p.
int64_t za_test_expect_all_load (const char *dir, int *count_p);

//  The CRC32 of what ps `ps` holds at the end of a run, rebuilt from a
//  checkpoint: the layer stack's variables placed over ps_count ps (as every
//  role places them), ps's parts in placement order. A ps reports the same
//  CRC of its own block, so the two can be compared.
uint32_t za_test_ckpt_crc_of_ps (const za_checkpoint_t *ckpt, const za_stack_spec_t *spec,
                                 za_input_shape_t input, int ps_count,
                                 size_t partition_floats, int ps);

//  n floats drawn uniformly from [-1, 1) by rng (za_alloc'd: za_free them).
float *za_test_random (size_t n, za_rng_t *rng);

//  The first `count` examples of the real Fashion-MNIST split "train" or "t10k",
//  copied (count <= 0 or beyond the split: all of it). Fails the test when the
//  files cannot be loaded. Caller destroys with za_dataset_destroy.
za_dataset_t *za_test_fashion (const char *split, int64_t count);

//  --------------------------------------------------------------------------
//  HTTP and terminals

//  An HTTP answer: its status (-1: no server there) and body (caller frees).
typedef struct {
    int status;
    char *body;
} za_test_http_t;

//  One HTTP/1.1 request to 127.0.0.1:port on its own connection, read to its end.
za_test_http_t za_test_http (int port, const char *method, const char *path,
                             const char *body, size_t size);

//  The same with the request's head as given (its lines and the blank line
//  that ends them), then size bytes of body.
za_test_http_t za_test_http_raw (int port, const char *head, const char *body, size_t size);

//  The text of tmux server `socket`'s pane "top" (caller frees), or NULL.
char *za_test_tmux_capture (const char *socket);

//  The line of a zactor-top screen whose role and index are these, into
//  line (returned), or NULL ("" in line) when it has none.
const char *za_test_screen_row (const char *screen, const char *role, int index, char *line,
                                size_t size);

#endif
