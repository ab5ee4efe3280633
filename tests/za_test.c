/*  za_test.c: the helpers the Criterion suites share (see za_test.h), kept in one
    place so that each suite holds only its own tests.                           */
#define _GNU_SOURCE                     //  asprintf
#include <zlib.h>

#include "za/za_partition.h"
#include "za_test.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_util.h"

#include <czmq.h>

#define WAIT_POLL_US 10000
#define REMOVE_MAX_FDS 16
#define READ_CHUNK_BYTES 4096
#define SPAWN_MAX_ARGS 64
#define OUTPUT_FILE_MODE 0644
#define MARK_NAME "ZA_TEST_MARK"
#define LEFTOVER_GRACE_S 15.0           //  a process may take this long to end after its test
#define ENVIRON_MAX_BYTES (1 << 20)

extern char **environ;

static char s_dir [PATH_MAX];
static char s_binary [PATH_MAX];


//  --------------------------------------------------------------------------
//  The temp dir of the running test

const char *
za_test_dir_create (const char *prefix)
{
    int len = snprintf (s_dir, sizeof s_dir, "/tmp/%s_XXXXXX", prefix);
    cr_assert (len > 0 && (size_t) len < sizeof s_dir, "prefix too long: %s", prefix);
    cr_assert_not_null (mkdtemp (s_dir), "mkdtemp %s: %s", s_dir, strerror (errno));
    return s_dir;
}

const char *
za_test_dir (void)
{
    return s_dir;
}

static int
s_remove_entry (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st;
    (void) flag;
    (void) ftw;
    return remove (path);
}

void
za_test_dir_remove (void)
{
    if (s_dir [0])
        nftw (s_dir, s_remove_entry, REMOVE_MAX_FDS, FTW_DEPTH | FTW_PHYS);
    s_dir [0] = 0;
}

char *
za_test_join (const char *dir, const char *name)
{
    char *path = NULL;
    cr_assert (asprintf (&path, "%s/%s", dir, name) > 0);
    return path;
}

char *
za_test_path (const char *name)
{
    cr_assert (s_dir [0], "no temp dir for '%s': call za_test_dir_create first", name);
    return za_test_join (s_dir, name);
}


//  --------------------------------------------------------------------------
//  Files

void *
za_test_read_file (const char *path, size_t *size_p)
{
    FILE *file = fopen (path, "rb");
    cr_assert_not_null (file, "cannot open %s", path);
    size_t size = 0, capacity = READ_CHUNK_BYTES;
    char *bytes = malloc (capacity);
    cr_assert_not_null (bytes);
    size_t got;
    while ((got = fread (bytes + size, 1, capacity - size - 1, file)) > 0) {
        size += got;
        if (capacity - size < 2) {
            capacity *= 2;
            bytes = realloc (bytes, capacity);
            cr_assert_not_null (bytes);
        }
    }
    cr_assert_not (ferror (file), "cannot read %s", path);
    bytes [size] = 0;
    fclose (file);
    if (size_p)
        *size_p = size;
    return bytes;
}


char *
za_test_write (const char *name, const char *text)
{
    char *path = za_test_path (name);
    FILE *file = fopen (path, "w");
    cr_assert_not_null (file, "cannot write %s", path);
    fputs (text, file);
    cr_assert_eq (fclose (file), 0);
    return path;
}


char *
za_test_wait_for_text (const char *path, const char *needle, double timeout_s)
{
    double deadline = za_clock_mono () + timeout_s * ZA_TEST_SLOWDOWN;
    char *text = NULL;
    while (!text || (!strstr (text, needle) && za_clock_mono () < deadline)) {
        if (text)
            zclock_sleep (100);
        free (text);
        text = access (path, F_OK)? strdup (""): za_test_read_file (path, NULL);
    }
    return text;
}

int
za_test_count (const char *text, const char *needle)
{
    int count = 0;
    for (const char *at = strstr (text, needle); at; at = strstr (at + 1, needle))
        count++;
    return count;
}

int
za_test_shm_count (const char *prefix)
{
    DIR *dir = opendir ("/dev/shm");
    int count = 0;
    struct dirent *entry;
    while (dir && (entry = readdir (dir)))
        count += strncmp (entry->d_name, prefix, strlen (prefix)) == 0;
    if (dir)
        closedir (dir);
    return count;
}

int
za_test_shm_count_settled (const char *prefix, int most, double timeout_s)
{
    double end = za_clock_mono () + timeout_s * ZA_TEST_SLOWDOWN;
    int count;
    while ((count = za_test_shm_count (prefix)) > most && za_clock_mono () < end)
        usleep (10000);
    return count;
}

//  --------------------------------------------------------------------------
//  zactor-run as a real process

const char *
za_test_program (const char *name)
{
    const char *bin_dir = getenv ("ZA_BINARY_DIR");
    if (!bin_dir || !*bin_dir)
        bin_dir = ZA_BINARY_DIR;
    if (name [0] == '/')                //  a program of the system's
        snprintf (s_binary, sizeof s_binary, "%s", name);
    else
        snprintf (s_binary, sizeof s_binary, "%s/%s", bin_dir, name);
    cr_assert_eq (access (s_binary, X_OK), 0, "no %s at %s", name, s_binary);
    return s_binary;
}

const char *
za_test_binary (void)
{
    return za_test_program ("zactor-run");
}

pid_t
za_test_spawn (const char *const *args, const char *out_path, const char *err_path)
{
    return za_test_spawn_program ("zactor-run", args, out_path, err_path);
}

// ---------------------------------------------------------------------------
//  What a test starts ends with it
//
//  Every process a test starts carries ZA_TEST_MARK=RUNNER/SUITE/TEST in its
//  environment, and so does everything it starts in turn (a launcher's broker,
//  the broker's roles). After each test the runner (Criterion's parent
//  process) ends whatever still carries that test's mark, and after the last
//  test whatever carries the run's: a test that passed and left one fails
//  the suite. A child is also told to end (SIGTERM) when the test process
//  dies, so a test killed for its time limit leaves no launcher behind.

//  Puts this test's mark in the environment (the test runs in a process of
//  its own: Criterion's worker, whose parent is the runner).
static void
s_mark_this_test (void)
{
    char mark [512];
    snprintf (mark, sizeof mark, "%d/%s/%s", (int) getppid (),
              criterion_current_test? criterion_current_test->category: "?",
              criterion_current_test? criterion_current_test->name: "?");
    setenv (MARK_NAME, mark, 1);
}

//  1 when process pid carries a mark that starts with prefix ("NAME=...").
static int
s_carries (const char *pid, const char *prefix)
{
    char path [300];
    snprintf (path, sizeof path, "/proc/%s/environ", pid);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    static char text [ENVIRON_MAX_BYTES];
    ssize_t n = read (fd, text, sizeof text - 1);
    close (fd);
    if (n <= 0)
        return 0;               //  a zombie's environment is gone: it has ended
    text [n] = 0;
    size_t length = strlen (prefix);
    for (const char *entry = text; entry < text + n; entry += strlen (entry) + 1)
        if (strncmp (entry, prefix, length) == 0)
            return 1;
    return 0;
}

//  The processes (never this one) that carry a mark starting with prefix:
//  their count, and with kill_them each is SIGKILLed.
static int
s_marked (const char *prefix, int kill_them, char *pids, size_t size)
{
    DIR *proc = opendir ("/proc");
    if (!proc)
        return 0;
    int count = 0;
    struct dirent *entry;
    if (pids && size)
        *pids = 0;
    while ((entry = readdir (proc)))
        if (entry->d_name [0] >= '1' && entry->d_name [0] <= '9'
            && atoi (entry->d_name) != getpid () && s_carries (entry->d_name, prefix)) {
            count++;
            if (kill_them)
                kill ((pid_t) atoi (entry->d_name), SIGKILL);
            if (pids && strlen (pids) + strlen (entry->d_name) + 2 < size)
                strcat (strcat (pids, " "), entry->d_name);
        }
    closedir (proc);
    return count;
}

//  Waits (at most LEFTOVER_GRACE_S) for the processes of a mark to end by
//  themselves, then kills the rest. Returns how many had to be killed, and
//  says which.
static int
s_end_marked (const char *prefix, const char *what)
{
    double deadline = za_clock_mono () + LEFTOVER_GRACE_S * ZA_TEST_SLOWDOWN;
    while (s_marked (prefix, 0, NULL, 0) && za_clock_mono () < deadline)
        usleep (WAIT_POLL_US * 5);
    char pids [512];
    int left = s_marked (prefix, 1, pids, sizeof pids);
    if (left)
        fprintf (stderr, "za_test: %s left %d process%s running (killed:%s)\n", what, left,
                 left == 1? "": "es", pids);
    return left;
}

static int s_leftovers;                 //  in the runner: processes passing tests left

ReportHook (POST_TEST) (struct criterion_test_stats *stats)
{
    char prefix [600], what [300];
    snprintf (prefix, sizeof prefix, MARK_NAME "=%d/%s/%s", (int) getpid (),
              stats->test->category, stats->test->name);
    snprintf (what, sizeof what, "test %s/%s", stats->test->category, stats->test->name);
    int left = s_end_marked (prefix, what);
    if (stats->test_status == CR_STATUS_PASSED)
        s_leftovers += left;
}

ReportHook (POST_ALL) (struct criterion_global_stats *stats)
{
    (void) stats;
    char prefix [64];
    snprintf (prefix, sizeof prefix, MARK_NAME "=%d/", (int) getpid ());
    s_leftovers += s_end_marked (prefix, "the suite");
    if (s_leftovers) {
        fprintf (stderr, "za_test: FAILED: %d process%s outlived the test that started "
                 "them\n", s_leftovers, s_leftovers == 1? "": "es");
        fflush (stderr);
        _exit (1);
    }
}

pid_t
za_test_spawn_program (const char *name, const char *const *args, const char *out_path,
                       const char *err_path)
{
    const char *binary = za_test_program (name);
    const char *argv [SPAWN_MAX_ARGS];
    int argc = 0;
    argv [argc++] = binary;
    while (*args && argc < SPAWN_MAX_ARGS - 1)
        argv [argc++] = *args++;
    cr_assert_null (*args, "more than %d arguments", SPAWN_MAX_ARGS - 2);
    argv [argc] = NULL;
    s_mark_this_test ();
    //  The files exist when we return (the caller may read them at once).
    int in = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = open (out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, OUTPUT_FILE_MODE);
    int err = open (err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, OUTPUT_FILE_MODE);
    cr_assert (in >= 0 && out >= 0 && err >= 0, "cannot open %s or %s: %s", out_path, err_path,
               strerror (errno));
    pid_t parent = getpid ();
    pid_t pid = fork ();
    if (pid == 0) {
        //  Only async-signal-safe calls here: the test may have threads.
        prctl (PR_SET_PDEATHSIG, SIGTERM);
        if (getppid () != parent || dup2 (in, 0) < 0 || dup2 (out, 1) < 0 || dup2 (err, 2) < 0)
            _exit (127);
        execve (binary, (char *const *) argv, environ);
        _exit (127);
    }
    int fork_errno = errno;
    close (in);
    close (out);
    close (err);
    cr_assert_geq (pid, 0, "fork: %s", strerror (fork_errno));
    return pid;
}

int
za_test_wait (pid_t pid, double timeout_s)
{
    timeout_s *= ZA_TEST_SLOWDOWN;
    double deadline = za_clock_mono () + timeout_s;
    while (true) {
        int status;
        pid_t got = waitpid (pid, &status, WNOHANG);
        if (got == pid)
            return status;
        cr_assert_eq (got, 0, "waitpid: %s", strerror (errno));
        if (za_clock_mono () > deadline) {
            kill (pid, SIGKILL);
            waitpid (pid, &status, 0);
            cr_assert_fail ("zactor-run (pid %d) still running after %.0f s", (int) pid,
                            timeout_s);
        }
        usleep (WAIT_POLL_US);
    }
}

za_test_result_t
za_test_run (const char *const *args, double timeout_s)
{
    return za_test_run_program ("zactor-run", args, timeout_s);
}

za_test_result_t
za_test_run_program (const char *name, const char *const *args, double timeout_s)
{
    char *out_path = za_test_path ("stdout.txt");
    char *err_path = za_test_path ("stderr.txt");
    pid_t pid = za_test_spawn_program (name, args, out_path, err_path);
    int status = za_test_wait (pid, timeout_s);
    za_test_result_t result = {
        .exit_code = WIFEXITED (status)? WEXITSTATUS (status): -1,
        .out = za_test_read_file (out_path, NULL),
        .err = za_test_read_file (err_path, NULL),
    };
    unlink (out_path);
    unlink (err_path);
    free (out_path);
    free (err_path);
    return result;
}

double
za_test_accuracy (const char *out)
{
    double accuracy = -1;
    const char *line = out? strstr (out, "test accuracy "): NULL;
    cr_assert (line && sscanf (line, "test accuracy %lf", &accuracy) == 1, "%s", out);
    return accuracy;
}

void
za_test_result_free (za_test_result_t *result)
{
    free (result->out);
    free (result->err);
    result->out = NULL;
    result->err = NULL;
}


//  --------------------------------------------------------------------------
//  A cluster, watched through its broker

int
za_test_free_port (void)
{
    //  A plain socket: libzmq closes its listeners later, in its I/O thread,
    //  and the port would still be taken (and listening) for a while. The
    //  kernel may hand the same free port out twice in a row, so a port this
    //  process got lately is not given again (two tasks of one cluster on one
    //  port fail as "address used twice").
    static int recent [256];
    static size_t given;
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        cr_assert_geq (fd, 0);
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
        addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        cr_assert_eq (bind (fd, (struct sockaddr *) &addr, sizeof addr), 0);
        socklen_t len = sizeof addr;
        cr_assert_eq (getsockname (fd, (struct sockaddr *) &addr, &len), 0);
        close (fd);
        int port = ntohs (addr.sin_port);
        size_t known = given < 256? given: 256;
        size_t i = 0;
        while (i < known && recent [i] != port)
            i++;
        if (i < known)
            continue;
        recent [given++ % 256] = port;
        return port;
    }
    cr_assert_fail ("no free port that this test has not had already");
    return 0;
}

char *
za_test_free_endpoint (void)
{
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", za_test_free_port ());
    return strdup (endpoint);
}

FILE *
za_test_popen_top (const char *broker, const char *flags)
{
    char command [4096];
    snprintf (command, sizeof command, "%s --broker %s --once %s",
              za_test_program ("zactor-top"), broker, flags);
    s_mark_this_test ();
    FILE *pipe = popen (command, "r");
    cr_assert_not_null (pipe);
    return pipe;
}

json_t *
za_test_top (const char *broker)
{
    FILE *pipe = za_test_popen_top (broker, "--json --timeout 3");
    static char text [1 << 20];
    size_t n = fread (text, 1, sizeof text - 1, pipe);
    text [n] = 0;
    int status = pclose (pipe);
    if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
        return NULL;
    return json_loads (text, 0, NULL);
}

json_t *
za_test_row (json_t *state, const char *role, int index)
{
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get (state, "roles"), i, row)
        if (streq (json_string_value (json_object_get (row, "role")), role)
            && json_integer_value (json_object_get (row, "index")) == index)
            return row;
    return NULL;
}

int64_t
za_test_kill (json_t *state, const char *role, int index)
{
    pid_t pid = (pid_t) json_integer_value (json_object_get (za_test_row (state, role, index),
                                                             "pid"));
    cr_assert_gt (pid, 1, "no pid for %s %d", role, index);
    if (kill (pid, SIGKILL)) {
        //  The row named a process that is gone: say what the broker said of
        //  it (restarted in between? by whom?), so that a failure explains itself.
        int error = errno;
        char *row = json_dumps (za_test_row (state, role, index), JSON_COMPACT);
        cr_assert_fail ("kill -9 %s %d (pid %d): %s; the broker's row: %s", role, index,
                        (int) pid, strerror (error), row? row: "?");
    }
    return json_integer_value (json_object_get (state, "global_step"));
}

int
za_test_task_back (json_t *state, void *arg)
{
    za_test_want_t *want = (za_test_want_t *) arg;
    json_t *row = za_test_row (state, want->role, want->index);
    const char *run = json_string_value (json_object_get (row, "state"));
    return row && run && streq (run, "running")
        && json_integer_value (json_object_get (row, "restarts")) >= want->restarts
        && json_integer_value (json_object_get (state, "global_step")) >= want->step;
}

json_t *
za_test_wait_for (const char *broker, za_test_ready_fn ready, void *arg, const char *what,
                  double timeout_s)
{
    double deadline = za_clock_mono () + timeout_s;
    json_t *last = NULL;
    while (za_clock_mono () < deadline) {
        json_t *state = za_test_top (broker);
        if (state && ready (state, arg)) {
            json_decref (last);
            return state;
        }
        if (state) {
            json_decref (last);
            last = state;
        }
        zclock_sleep (100);
    }
    char *text = last? json_dumps (last, JSON_INDENT (1)): NULL;
    cr_assert_fail ("waited %.0f s for %s; last state:\n%s", timeout_s, what,
                    text? text: "(none)");
    return NULL;
}

pid_t
za_test_start_local (const char *program, const char *const *args, const char *out,
                     char *broker)
{
    pid_t local = za_test_spawn_program (program, args, out, out);
    *broker = 0;
    for (int tries = 0; tries < 300 && !*broker; tries++) {
        char *text = (char *) za_test_read_file (out, NULL);
        char *at = strstr (text, "--broker ");
        if (at && strchr (at, '\n'))
            sscanf (at + 9, "%127s", broker);
        free (text);
        if (!*broker)
            zclock_sleep (100);
    }
    cr_assert (*broker, "the launcher printed no broker address");
    return local;
}


//  --------------------------------------------------------------------------
//  Checkpoints and data

void
za_test_expect_checkpoints (const char *dir, const int64_t *expected, int expected_count)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (dir, &steps);
    cr_assert_eq (count, expected_count, "%d checkpoints in %s, expected %d", count, dir,
                  expected_count);
    for (int i = 0; i < count; i++)
        cr_assert_eq (steps [i], expected [i], "checkpoint %d is step %lld, expected %lld",
                      i, (long long) steps [i], (long long) expected [i]);
    free (steps);
}

int64_t
za_test_expect_all_load (const char *dir, int *count_p)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (dir, &steps);
    cr_assert_geq (count, 0, "cannot list %s", dir);
    for (int i = 0; i < count; i++) {
        char *path = za_checkpoint_path (dir, steps [i]);
        za_checkpoint_t *ckpt = za_checkpoint_load (path);
        cr_assert_not_null (ckpt, "'%s' does not load: %s", path, za_last_error ());
        cr_assert_eq (za_checkpoint_step (ckpt), steps [i]);
        za_checkpoint_destroy (&ckpt);
        free (path);
    }
    int64_t newest = count > 0? steps [count - 1]: -1;
    free (steps);
    if (count_p)
        *count_p = count;
    return newest;
}

za_dataset_t *
za_test_fashion (const char *split, int64_t count)
{
    za_dataset_t *full = za_idx_load_dir (ZA_FASHION_MNIST_DIR, split);
    cr_assert_not_null (full, "cannot load Fashion-MNIST %s: %s", split, za_last_error ());
    if (count <= 0 || count >= full->count)
        return full;
    za_dataset_t *part = za_dataset_from_arrays (full->features, full->labels, count,
                                                 full->height, full->width, full->channels);
    cr_assert_not_null (part, "%s", za_last_error ());
    za_dataset_destroy (&full);
    return part;
}

uint32_t
za_test_ckpt_crc_of_ps (const za_checkpoint_t *ckpt, const za_stack_spec_t *spec,
                        za_input_shape_t input, int ps_count, size_t partition_floats, int ps)
{
    za_vars_t vars = {0};
    void *state = za_stack_model_fn ()->create (spec, input, 1, za_backend_cpu (), &vars);
    cr_assert_not_null (state, "%s", za_last_error ());
    za_stack_model_fn ()->destroy (&state);
    za_partition_t placement;
    cr_assert_eq (za_partition_compute (&vars, ps_count, partition_floats, &placement), 0);
    int parts [ZA_PARTITION_MAX_PARTS];
    int n = za_partition_parts_of (&placement, ps, parts, ZA_PARTITION_MAX_PARTS);
    uLong crc = crc32 (0L, Z_NULL, 0);
    for (int i = 0; i < n; i++) {
        const za_part_t *part = &placement.parts [parts [i]];
        const za_ckpt_tensor_t *t = za_checkpoint_find (ckpt, vars.vars [part->var].name);
        cr_assert_not_null (t, "checkpoint lacks %s", vars.vars [part->var].name);
        crc = crc32 (crc, (const Bytef *) ((const float *) t->data + part->offset),
                     (uInt) (part->size * sizeof (float)));
    }
    return (uint32_t) crc;
}

float *
za_test_random (size_t n, za_rng_t *rng)
{
    float *x = (float *) za_alloc (n * sizeof (float));
    cr_assert_not_null (x);
    for (size_t i = 0; i < n; i++)
        x [i] = 2.0f * za_rng_uniform (rng) - 1.0f;
    return x;
}

// ---------------------------------------------------------------------------
//  HTTP and terminals

za_test_http_t
za_test_http (int port, const char *method, const char *path, const char *body, size_t size)
{
    char head [512];
    snprintf (head, sizeof head, "%s %s HTTP/1.1\r\nHost: localhost\r\n"
              "Content-Type: application/json\r\nContent-Length: %zu\r\n"
              "Connection: close\r\n\r\n", method, path, body? size: 0);
    return za_test_http_raw (port, head, body, size);
}

za_test_http_t
za_test_http_raw (int port, const char *head, const char *body, size_t size)
{
    za_test_http_t answer = {.status = -1};
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    cr_assert_geq (fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons ((uint16_t) port)};
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    if (connect (fd, (struct sockaddr *) &addr, sizeof addr)) {
        close (fd);
        return answer;
    }
    ssize_t length = (ssize_t) strlen (head);
    int sent = send (fd, head, (size_t) length, MSG_NOSIGNAL) == length;
    for (size_t at = 0; sent && body && at < size; ) {
        ssize_t n = send (fd, body + at, size - at, MSG_NOSIGNAL);
        if (n <= 0)
            break;                      //  a server that refused the rest
        at += (size_t) n;
    }
    size_t capacity = 1 << 16, got = 0;
    char *text = malloc (capacity);
    ssize_t n;
    while ((n = read (fd, text + got, capacity - got - 1)) > 0) {
        got += (size_t) n;
        if (got + 1 == capacity)
            text = realloc (text, capacity *= 2);
    }
    text [got] = 0;
    close (fd);
    char *start = strstr (text, "\r\n\r\n");
    if (sscanf (text, "HTTP/1.%*d %d", &answer.status) == 1 && start)
        answer.body = strdup (start + 4);
    free (text);
    return answer;
}

char *
za_test_tmux_capture (const char *socket)
{
    char command [256];
    snprintf (command, sizeof command, "tmux -L %s capture-pane -p -t top 2>/dev/null", socket);
    FILE *pipe = popen (command, "r");
    if (!pipe)
        return NULL;
    size_t size = 0, cap = 65536;
    char *text = (char *) malloc (cap);
    size_t got;
    while (text && (got = fread (text + size, 1, cap - 1 - size, pipe)) > 0)
        size += got;
    pclose (pipe);
    if (text)
        text [size] = 0;
    return text;
}

const char *
za_test_screen_row (const char *screen, const char *role, int index, char *line, size_t size)
{
    *line = 0;
    for (const char *at = screen; at && *at; ) {
        const char *end = strchr (at, '\n');
        int len = end? (int) (end - at): (int) strlen (at), got;
        char name [16];
        if (sscanf (at, "%15s %d", name, &got) == 2 && !strcmp (name, role) && got == index) {
            snprintf (line, size, "%.*s", len, at);
            return line;
        }
        at = end? end + 1: NULL;
    }
    return NULL;
}
