/*  test_ckpt_tool.c: zactor-ckpt as a real process: `ls` lists every
    checkpoint with its state (a corrupt one flagged, exit 1), `show` prints
    a checkpoint's metadata and tensors.                                    */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_estimator.h"
#include "za_test.h"

//  Runs zactor-ckpt with two arguments; returns its exit status and output.
static int
s_ckpt_tool (const char *command, const char *target, char *out, size_t size)
{
    const char *bin_dir = getenv ("ZA_BINARY_DIR");
    char line [4096];
    snprintf (line, sizeof line, "'%s/zactor-ckpt' %s '%s' 2>&1",
              bin_dir && *bin_dir? bin_dir: ZA_BINARY_DIR, command, target);
    FILE *p = popen (line, "r");
    cr_assert_not_null (p);
    size_t n = fread (out, 1, size - 1, p);
    out [n] = 0;
    int status = pclose (p);
    return WIFEXITED (status)? WEXITSTATUS (status): -1;
}

Test (ckpt_tool, ls_flags_corrupt_and_show_prints_tensors)
{
    za_test_dir_create ("za_ckpt_tool");
    za_stack_spec_t spec;
    cr_assert_eq (za_stack_parse ("flatten dense(10)", &spec), 0);
    za_run_config_t run = za_run_config_default ();
    run.model_dir = za_test_dir ();
    run.keep_checkpoint_max = 0;
    za_optim_config_t optim = za_optim_config_default (ZA_OPT_ADAM);
    za_input_shape_t shape = {28, 28, 1};
    za_estimator_t *est = za_estimator_new (za_stack_model_fn (), &spec, shape, &optim, &run);
    cr_assert_not_null (est);
    for (int64_t step = 10; step <= 20; step += 10) {
        za_estimator_set_global_step (est, step);
        cr_assert_eq (za_estimator_save (est), 0);
    }
    za_estimator_destroy (&est);
    char out [8192];
    cr_expect_eq (s_ckpt_tool ("ls", za_test_dir (), out, sizeof out), 0, "%s", out);
    cr_expect (strstr (out, "10 ") && strstr (out, "20 "), "%s", out);
    //  A corrupt one: listed with the reason, exit 1.
    char *bad = za_checkpoint_path (za_test_dir (), 30);
    FILE *f = fopen (bad, "w");
    fputs ("garbage", f);
    fclose (f);
    cr_expect_eq (s_ckpt_tool ("ls", za_test_dir (), out, sizeof out), 1, "%s", out);
    cr_expect (strstr (out, "CORRUPT") != NULL, "%s", out);
    cr_expect (strstr (out, "intact") != NULL, "%s", out);
    //  show DIR: the newest intact one (20), with its model and tensors.
    cr_expect_eq (s_ckpt_tool ("show", za_test_dir (), out, sizeof out), 0, "%s", out);
    cr_expect (strstr (out, "step 20") != NULL, "%s", out);
    cr_expect (strstr (out, "flatten dense(10)") != NULL, "%s", out);
    cr_expect (strstr (out, "dense/kernel") && strstr (out, "[784,10]"), "%s", out);
    cr_expect (strstr (out, "dense/kernel/m") != NULL, "%s", out);
    cr_expect_eq (s_ckpt_tool ("show", bad, out, sizeof out), 1, "%s", out);
    cr_expect_eq (s_ckpt_tool ("frobnicate", bad, out, sizeof out), 2, "%s", out);
    //  Step 20's file copied in as step 40: intact bytes, but every loader
    //  passes it over (its metadata says 20): ls says so (it said intact).
    unlink (bad);
    char *twenty = za_checkpoint_path (za_test_dir (), 20);
    char *forty = za_checkpoint_path (za_test_dir (), 40);
    size_t size;
    void *bytes = za_test_read_file (twenty, &size);
    f = fopen (forty, "wb");
    cr_assert (bytes && f && fwrite (bytes, 1, size, f) == size);
    fclose (f);
    cr_expect_eq (s_ckpt_tool ("ls", za_test_dir (), out, sizeof out), 1, "%s", out);
    cr_expect (strstr (out, "CORRUPT: ") && strstr (out, "metadata says global_step 20, the name "
                                                       "says 40"), "%s", out);
    cr_expect_eq (za_test_count (out, "intact"), 2, "%s", out);
    free (bytes), free (twenty), free (forty);
    free (bad);
    za_test_dir_remove ();
}
