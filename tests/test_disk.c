/*  test_disk.c: training whose model dir fills up. The model dir is a small
    tmpfs of its own; a first run writes checkpoints, then a file takes every
    free byte and a second run resumes to a later max_steps: each save fails
    with ENOSPC, which is said once, nothing half-written is ever listed, the
    newest intact checkpoint and the index stay, and training goes on to the
    end, where the final save waits. When the file is removed the final
    checkpoint is written and the run exits 0.                             */
#include "za_test.h"

#include "za/za_checkpoint.h"
#include "za/za_util.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *s_mount;

static void
s_setup (void)
{
    za_test_dir_create ("za_disk");
}

static void
s_teardown (void)
{
    if (s_mount)
        umount2 (s_mount, MNT_DETACH);
    free (s_mount);
    s_mount = NULL;
    za_test_dir_remove ();
}

TestSuite (disk, .init = s_setup, .fini = s_teardown, .timeout = 300 * ZA_TEST_SLOWDOWN);

//  Writes `path` until the file system has no byte left. Returns the bytes.
static long
s_fill (const char *path)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq (fd, 0);
    static char block [4096];
    long total = 0;
    ssize_t n;
    while ((n = write (fd, block, sizeof block)) > 0)
        total += n;
    cr_assert (n < 0 && errno == ENOSPC, "filling stopped with %s", strerror (errno));
    close (fd);
    return total;
}

//  No "*.tmp" (a half-written checkpoint) in dir.
static void
s_expect_no_temp_files (const char *dir)
{
    DIR *d = opendir (dir);
    cr_assert_not_null (d);
    struct dirent *entry;
    while ((entry = readdir (d))) {
        size_t n = strlen (entry->d_name);
        cr_expect (n < 4 || strcmp (entry->d_name + n - 4, ".tmp"), "%s/%s is left", dir,
                   entry->d_name);
    }
    closedir (d);
}

Test (disk, a_full_model_dir_keeps_the_newest_checkpoint_and_the_run_ends_when_room_returns)
{
    s_mount = za_test_path ("model");
    cr_assert_eq (mkdir (s_mount, 0755), 0);
    if (mount ("tmpfs", s_mount, "tmpfs", 0, "size=4m,mode=0755")) {
        int err = errno;
        free (s_mount);
        s_mount = NULL;
        cr_skip_test ("cannot mount a tmpfs here (%s): this test needs root", strerror (err));
    }
    const char *first [] = {"--model", "linear", "--max-steps", "100",
                            "--save-checkpoints-steps", "20", "--save-summary-steps", "10",
                            "--model-dir", s_mount, "--no-eval", NULL};
    za_test_result_t result = za_test_run (first, 120);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    cr_assert_eq (za_test_expect_all_load (s_mount, NULL), 100);

    //  The disk fills up; a second run resumes from step 100 towards 200.
    char *filler = za_test_join (s_mount, "filler");
    long filled = s_fill (filler);
    cr_assert_gt (filled, 0);
    char *log_path = za_test_path ("second.log");
    const char *second [] = {"--model", "linear", "--max-steps", "200",
                             "--save-checkpoints-steps", "20", "--save-summary-steps", "10",
                             "--model-dir", s_mount, "--no-eval", NULL};
    pid_t pid = za_test_spawn (second, log_path, log_path);
    char *log = za_test_wait_for_text (log_path, "waiting for room", 60);
    cr_assert (strstr (log, "waiting for room"), "%s", log);
    //  Four periodic saves (120 .. 180) and the final one failed: said once.
    cr_expect_eq (za_test_count (log, "cannot write the checkpoint"), 1, "%s", log);
    cr_expect_leq (za_test_count (log, "summaries are not written"), 1, "%s", log);
    cr_expect_eq (za_test_expect_all_load (s_mount, NULL), 100, "the newest intact one moved");
    s_expect_no_temp_files (s_mount);
    char *index_path = za_test_join (s_mount, "checkpoint");
    char *index = za_test_read_file (index_path, NULL);
    cr_expect (strstr (index, "model_checkpoint_path: \"model.ckpt-100"), "%s", index);
    //  What a resume loads now: step 100.
    int found = 0;
    za_checkpoint_t *newest = za_checkpoint_load_newest (s_mount, &found);
    cr_expect_not_null (newest, "%s", za_last_error ());
    if (newest)
        cr_expect_eq (za_checkpoint_step (newest), 100);
    za_checkpoint_destroy (&newest);

    //  Room again: the final checkpoint is written and the run ends.
    cr_assert_eq (unlink (filler), 0);
    int status = za_test_wait (pid, 60);
    free (log);
    log = za_test_read_file (log_path, NULL);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s", log);
    cr_expect (strstr (log, "checkpoints are written again (step 200)"), "%s", log);
    cr_expect_eq (za_test_expect_all_load (s_mount, NULL), 200);
    s_expect_no_temp_files (s_mount);
    free (index);
    index = za_test_read_file (index_path, NULL);
    cr_expect (strstr (index, "model_checkpoint_path: \"model.ckpt-200"), "%s", index);
    //  metrics.jsonl holds whole lines only.
    char *metrics_path = za_test_join (s_mount, "metrics.jsonl");
    char *metrics = za_test_read_file (metrics_path, NULL);
    for (char *line = strtok (metrics, "\n"); line; line = strtok (NULL, "\n")) {
        json_error_t error;
        json_t *row = json_loads (line, 0, &error);
        cr_expect_not_null (row, "a torn line in metrics.jsonl: %s", line);
        json_decref (row);
    }
    free (metrics);
    free (metrics_path);
    //  Every TensorBoard event file holds whole records only (an independent
    //  reader checks every CRC).
    DIR *dir = opendir (s_mount);
    cr_assert_not_null (dir);
    struct dirent *entry;
    int files = 0;
    while ((entry = readdir (dir)))
        if (strncmp (entry->d_name, "events.out.tfevents.", 20) == 0) {
            char command [8192];
            snprintf (command, sizeof command, "python3 %s/tests/read_events.py '%s/%s' "
                      "> /dev/null", ZA_SOURCE_DIR, s_mount, entry->d_name);
            int rc = system (command);
            cr_expect (WIFEXITED (rc) && WEXITSTATUS (rc) != 1, "%s is torn", entry->d_name);
            files++;
        }
    closedir (dir);
    cr_expect_geq (files, 1);
    free (index);
    free (index_path);
    free (log);
    free (log_path);
    free (filler);
    cr_expect_eq (umount (s_mount), 0);
    free (s_mount);
    s_mount = NULL;
}
