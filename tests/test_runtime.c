/*  test_runtime.c: the runtime layer (za_run_main) from the outside and the
    inside: the option table walked whole (every flag has a job key and a
    help line, every default --help prints is the one used, mistakes exit 2
    naming them); a program's own model_fn and input_fn (examples/
    custom_model_fn) as a supervised cluster that survives a killed worker,
    and as TF_CONFIG tasks; the single process and the chief writing
    metrics.jsonl at the same steps; heartbeats of 200 ms finding a stopped
    ps in about 0.6 s.                                                      */
#include "za_test.h"

#include "za/za_options.h"
#include "za/za_role.h"
#include "za/za_util.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <jansson.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 300
#define PHASE_TIMEOUT_S 120

static void
s_setup (void)
{
    za_test_dir_create ("za_runtime");
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (options, .init = s_setup, .fini = s_teardown);
TestSuite (runtime, .init = s_setup, .fini = s_teardown, .timeout = 600 * ZA_TEST_SLOWDOWN);

static int
s_exit_code (int status)
{
    return WIFEXITED (status)? WEXITSTATUS (status): -1;
}

// ---------------------------------------------------------------------------
//  The option table

//  The "(default X)" that --help prints for --flag, into value; 0 when the
//  help line of the flag shows none. Fails when the flag is not there.
static int
s_help_default (const char *help, const char *flag, char *value, size_t size)
{
    char head [96];
    snprintf (head, sizeof head, "\n  --%s ", flag);
    const char *line = strstr (help, head);
    if (!line) {
        snprintf (head, sizeof head, "\n  --%s\n", flag);
        line = strstr (help, head);
    }
    cr_assert_not_null (line, "--help does not show --%s", flag);
    //  Its text runs until the next option or section.
    const char *end = line + 1;
    while ((end = strchr (end, '\n')) && strncmp (end, "\n   ", 4) == 0 && end [4] == ' ')
        end++;
    const char *found = strstr (line, "(default ");
    if (!found || (end && found > end))
        return 0;
    found += strlen ("(default ");
    size_t n = strcspn (found, ")");
    cr_assert_lt (n, size);
    memcpy (value, found, n);
    value [n] = 0;
    return 1;
}

//  The help's default and the setting are the same value.
static int
s_same_value (const char *printed, json_t *value)
{
    if (json_is_number (value))
        return fabs (strtod (printed, NULL) - json_number_value (value))
               <= 1e-9 * fabs (json_number_value (value));
    if (json_is_string (value))
        return streq (printed, json_string_value (value));
    if (json_is_array (value)) {
        char text [256] = "";
        size_t i;
        json_t *item;
        json_array_foreach (value, i, item)
            snprintf (text + strlen (text), sizeof text - strlen (text), "%s%lld", i? ",": "",
                      (long long) json_integer_value (item));
        return streq (printed, text);
    }
    return 0;
}

//  Walks every option `program` has, from outside: --print-settings names
//  each by its job key; --help shows each flag with a help line, and the
//  default it prints is the value the program runs with when nothing else
//  is said. Returns how many options it has.
static int
s_walk (const char *program)
{
    const char *help_args [] = {"--help", NULL}, *print_args [] = {"--print-settings", NULL};
    za_test_result_t help = za_test_run_program (program, help_args, 30);
    za_test_result_t print = za_test_run_program (program, print_args, 30);
    cr_assert_eq (help.exit_code, 0, "%s --help: %s", program, help.err);
    cr_assert_eq (print.exit_code, 0, "%s --print-settings: %s", program, print.err);
    json_error_t error;
    json_t *settings = json_loads (print.out, 0, &error);
    cr_assert_not_null (settings, "%s --print-settings: %s", program, print.out);
    const char *key;
    json_t *value;
    int count = 0;
    json_object_foreach (settings, key, value) {
        count++;
        char flag [80], printed [1024], head [96];
        snprintf (flag, sizeof flag, "%s", key);
        for (char *c = flag; *c; c++)
            *c = *c == '_'? '-': *c;
        cr_expect (!strchr (key, '-'), "job key %s has a '-'", key);
        //  The help line: the flag, then words on what it does.
        snprintf (head, sizeof head, "\n  --%s", flag);
        const char *line = strstr (help.out, head);
        cr_expect (line && strlen (line) > strlen (head) + 20, "%s --help: no line for --%s",
                   program, flag);
        if (!line || !s_help_default (help.out, flag, printed, sizeof printed))
            continue;
        cr_expect (s_same_value (printed, value), "%s --%s: --help prints default '%s', the "
                   "setting is %s", program, flag, printed, json_dumps (value, JSON_ENCODE_ANY));
    }
    json_decref (settings);
    za_test_result_free (&help);
    za_test_result_free (&print);
    return count;
}

Test (options, every_flag_has_a_key_a_help_line_and_the_default_it_prints)
{
    //  The table itself: one key per option, a help line, somebody reads it.
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    za_options_t *options = za_options_new ("zactor-run", NULL, &settings, 0);
    cr_assert_not_null (options, "%s", za_last_error ());
    for (int i = 0; i < za_options_count (options); i++) {
        const za_option_t *option = za_options_at (options, i);
        char key [80];
        za_option_key (option, key, sizeof key);
        cr_expect (za_options_find (options, key) == option, "job key %s finds another option",
                   key);
        cr_expect (option->help && strlen (option->help) > 10, "--%s has no help line",
                   option->flag);
        cr_expect (option->readers != 0, "--%s is read by nobody", option->flag);
    }
    //  From outside: every one of them in --help, with the default it uses.
    cr_expect_eq (s_walk ("zactor-run"), za_options_count (options) - 1,
                  "--print-settings shows another set of options (--job is the command "
                  "line's alone)");
    za_options_destroy (&options);
}

//  Found by fuzz/fuzz_job (it reuses one settings struct): options made
//  anew on settings that held a string of options destroyed since start
//  from their defaults, not from the freed string.
Test (options, new_options_never_keep_a_freed_string)
{
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    za_options_t *options = za_options_new ("zactor-run", NULL, &settings, 0);
    json_t *job = json_loads ("{\"eval_spec\": {\"eval_name\": \"replayed\"}}", 0, NULL);
    cr_assert_eq (za_options_apply_job (options, job, "job.json", ZA_FROM_JOB), 0, "%s",
                  za_last_error ());
    cr_assert_str_eq (settings.eval.name, "replayed");
    json_decref (job);
    za_options_destroy (&options);
    options = za_options_new ("zactor-run", NULL, &settings, 0);
    cr_assert_not_null (options);
    cr_expect_null (settings.eval.name, "a freed string was kept");
    char *text = za_options_settings_text (options);
    json_t *shown = json_loads (text, 0, NULL);
    cr_expect (json_is_null (json_object_get (shown, "eval_name")), "%s", text);
    json_decref (shown);
    free (text);
    za_options_destroy (&options);
}

Test (options, a_job_from_the_network_sets_the_job_alone)
{
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    za_options_t *options = za_options_new ("zactor-run", NULL, &settings, 0);
    //  A broker's job may set the job's settings ...
    json_t *job = json_loads ("{\"model_dir\": \"runs/a\", \"max_steps\": 7}", 0, NULL);
    cr_assert_eq (za_options_apply_wire_job (options, job, "the broker's job"), 0, "%s",
                  za_last_error ());
    cr_expect_str_eq (settings.run.model_dir, "runs/a");
    json_decref (job);
    //  ... never this process's own, nor a text with a control character.
    const char *refused [] = {"{\"bind\": \"tcp://*:1\"}", "{\"certs\": \"/tmp\"}",
                              "{\"insecure\": true}", "{\"host\": \"elsewhere\"}",
                              "{\"run_config\": {\"model_dir\": \"a\\nb\"}}", NULL};
    for (int i = 0; refused [i]; i++) {
        job = json_loads (refused [i], 0, NULL);
        cr_assert_not_null (job, "%s", refused [i]);
        cr_expect_eq (za_options_apply_wire_job (options, job, "the broker's job"), -1,
                      "%s was taken", refused [i]);
        json_decref (job);
    }
    cr_expect_null (settings.bind);
    cr_expect_null (settings.certs);
    cr_expect_eq (settings.insecure, 0);
    cr_expect_str_eq (settings.run.model_dir, "runs/a");
    //  A job file may set them (it is the user's own).
    job = json_loads ("{\"insecure\": true}", 0, NULL);
    cr_expect_eq (za_options_apply_job (options, job, "job.json", ZA_FROM_JOB), 0);
    cr_expect_eq (settings.insecure, 1);
    json_decref (job);
    za_options_destroy (&options);
}

Test (options, a_program_adds_its_own_options_and_defaults)
{
    //  custom_model_fn: its own --l2, its defaults (sgd 0.1, batch 100), no
    //  --model or --shuffle-buffer (it has its own model_fn and input_fn).
    int count = s_walk ("custom_model_fn");
    const char *args [] = {"--print-settings", NULL};
    za_test_result_t result = za_test_run_program ("custom_model_fn", args, 30);
    json_t *settings = json_loads (result.out, 0, NULL);
    cr_assert_not_null (settings);
    cr_expect_eq (json_number_value (json_object_get (settings, "l2")), 0);
    cr_expect_str_eq (json_string_value (json_object_get (settings, "optimizer")), "sgd");
    cr_expect_eq (json_integer_value (json_object_get (settings, "batch_size")), 100);
    cr_expect_null (json_object_get (settings, "model"));
    cr_expect_null (json_object_get (settings, "shuffle_buffer"));
    cr_expect_geq (count, 35, "custom_model_fn shows %d options", count);
    json_decref (settings);
    za_test_result_free (&result);
}

Test (options, the_job_travels_and_the_flags_win)
{
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    za_options_t *options = za_options_new ("test", NULL, &settings, 0);
    cr_assert_not_null (options);
    //  Defaults are not "given": the cluster job leaves them out.
    cr_expect_eq (settings.batch_size, 64);
    cr_expect_not (za_options_given (options, "batch_size", ZA_FROM_DEFAULT));
    char *argv [] = {"test", "--batch-size", "32", "--learning-rate=0.5", "--local", NULL};
    cr_assert_eq (za_options_parse_args (options, 5, argv), 0, "%s", za_last_error ());
    json_error_t error;
    json_t *job = json_loads ("{\"batch_size\": 128, \"run_config\": {\"save_checkpoints_steps\":"
                              " 250}, \"roles\": {\"worker\": 3}, \"hidden_units\": [256, 64]}",
                              0, &error);
    cr_assert_eq (za_options_apply_job (options, job, "job", ZA_FROM_JOB), 0, "%s",
                  za_last_error ());
    json_decref (job);
    cr_expect_eq (settings.batch_size, 32, "the flag lost to the job");
    cr_expect_eq (settings.run.save_checkpoints_steps, 250);
    cr_expect_eq (settings.workers.max, 3);
    cr_expect_str_eq (settings.hidden_units, "256,64");
    cr_expect_eq (settings.optim.learning_rate, 0.5f);
    //  --local's defaults are weaker than the job.
    cr_assert_eq (za_options_set (options, "save_checkpoints_steps", "1000", ZA_FROM_LOCAL,
                                  "local"), 0);
    cr_expect_eq (settings.run.save_checkpoints_steps, 250);
    char *text = za_options_job_text (options, NULL);
    json_t *sent = json_loads (text, 0, &error);
    cr_assert_not_null (sent, "%s", text);
    cr_expect_eq (json_integer_value (json_object_get (sent, "batch_size")), 32);
    cr_expect_eq (json_integer_value (json_object_get (sent, "save_checkpoints_steps")), 250);
    cr_expect_eq (json_integer_value (json_object_get (json_object_get (sent, "roles"),
                                                       "worker")), 3);
    cr_expect_eq (json_array_size (json_object_get (sent, "hidden_units")), 2);
    //  What belongs to this process alone stays here.
    cr_expect_null (json_object_get (sent, "local"));
    cr_expect_null (json_object_get (sent, "seed"), "a default travelled: %s", text);
    json_decref (sent);
    free (text);
    za_options_destroy (&options);
}

//  --print-settings writes a job that --job reads back: its unset texts
//  and the unset learning rate are null, read as unset (once refused:
//  "train_data: wants a string", then the learning rate 0.0).
Test (options, print_settings_is_a_job_that_reads_back)
{
    za_settings_t settings, again;
    memset (&settings, 0, sizeof settings);
    memset (&again, 0, sizeof again);
    za_options_t *options = za_options_new ("test", NULL, &settings, 0);
    za_options_t *other = za_options_new ("test", NULL, &again, 0);
    cr_assert (options && other);
    char *argv [] = {"test", "--batch-size", "32", "--optimizer", "sgd", NULL};
    cr_assert_eq (za_options_parse_args (options, 5, argv), 0, "%s", za_last_error ());
    char *text = za_options_settings_text (options);
    json_error_t error;
    json_t *job = json_loads (text, 0, &error);
    cr_assert_not_null (job, "%s", text);
    cr_expect (json_is_null (json_object_get (job, "learning_rate")), "%s", text);
    cr_expect_eq (za_options_apply_job (other, job, "settings.json", ZA_FROM_JOB), 0, "%s",
                  za_last_error ());
    cr_expect_eq (again.batch_size, 32);
    cr_expect_eq (again.optim.learning_rate, 0.0f);
    cr_expect_null (again.train_data);
    char *back = za_options_settings_text (other);
    cr_expect_str_eq (back, text);
    json_decref (job);
    free (back), free (text);
    za_options_destroy (&other);
    za_options_destroy (&options);
}

//  The class names of 1000 folders (ImageNet's: 10 KB of "n01440764,...")
//  come back from input.json (a job file's "class_names") whole, as from
//  the flag; a text past the limit is refused with the limit said.
Test (options, a_thousand_class_names_travel_whole)
{
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    za_options_t *options = za_options_new ("test", NULL, &settings, 0);
    cr_assert_not_null (options);
    char *names = malloc (1000 * 10 + 1), *at = names;
    for (int c = 0; c < 1000; c++)
        at += sprintf (at, "%sn%08d", c? ",": "", 1440764 + c);
    json_t *job = json_pack ("{s:s}", "class_names", names);
    cr_assert_eq (za_options_apply_job (options, job, "input.json", ZA_FROM_JOB), 0, "%s",
                  za_last_error ());
    json_decref (job);
    cr_expect_str_eq (settings.class_names, names);
    cr_expect_eq (strlen (settings.class_names), 9999);
    char *huge = malloc (300 * 1024);
    memset (huge, 'a', 300 * 1024 - 1);
    huge [300 * 1024 - 1] = 0;
    job = json_pack ("{s:s}", "class_names", huge);
    za_error_set_quiet (1);
    cr_expect_neq (za_options_apply_job (options, job, "input.json", ZA_FROM_JOB), 0);
    za_error_set_quiet (0);
    cr_expect (strstr (za_last_error (), "longer than"), "%s", za_last_error ());
    json_decref (job);
    free (huge);
    free (names);
    za_options_destroy (&options);
}

//  --workers MIN:MAX (an elastic job) from a flag and from a job's roles,
//  and as the job every task gets: the range, not a count.
Test (options, a_range_of_workers_travels_as_a_range)
{
    za_settings_t settings;
    memset (&settings, 0, sizeof settings);
    za_options_t *options = za_options_new ("test", NULL, &settings, 0);
    cr_assert_not_null (options);
    cr_expect (settings.workers.min == 2 && settings.workers.max == 2);
    char *argv [] = {"test", "--workers", "1:3", "--elastic-batch", "horovod", NULL};
    cr_assert_eq (za_options_parse_args (options, 5, argv), 0, "%s", za_last_error ());
    cr_expect (settings.workers.min == 1 && settings.workers.max == 3);
    cr_expect_eq (settings.elastic_batch, ZA_ELASTIC_SCALE_LR);
    char *text = za_options_job_text (options, NULL);
    json_error_t error;
    json_t *sent = json_loads (text, 0, &error);
    cr_assert_not_null (sent, "%s", text);
    cr_expect_str_eq (json_string_value (json_object_get (json_object_get (sent, "roles"),
                                                          "worker")), "1:3", "%s", text);
    free (text);
    //  A task applies it as its job: the same range.
    za_settings_t task;
    memset (&task, 0, sizeof task);
    za_options_t *task_options = za_options_new ("task", NULL, &task, 0);
    cr_assert_eq (za_options_apply_job (task_options, sent, "job", ZA_FROM_JOB), 0, "%s",
                  za_last_error ());
    cr_expect (task.workers.min == 1 && task.workers.max == 3);
    json_decref (sent);
    //  A fixed count stays a number.
    json_t *job = json_loads ("{\"roles\": {\"worker\": 4}}", 0, &error);
    cr_assert_eq (za_options_apply_job (task_options, job, "job", ZA_FROM_FLAG), 0);
    json_decref (job);
    cr_expect (task.workers.min == 4 && task.workers.max == 4);
    za_options_destroy (&task_options);
    za_options_destroy (&options);
}

Test (options, mistakes_exit_2_naming_them_before_any_work)
{
    char *unknown = za_test_write ("unknown.json", "{\"train_spec\": {\"max_stepz\": 10}}");
    char *range = za_test_write ("range.json", "{\"batch_size\": 0}");
    char *kind = za_test_write ("kind.json", "{\"save_summary_steps\": \"often\"}");
    char *roles = za_test_write ("roles.json", "{\"roles\": {\"worker\": 99}}");
    char *param = za_test_write ("param.json", "{\"l2\": -1}");
    struct {
        const char *program;
        const char *args [6];
        const char *says;
    } cases [] = {
        {"zactor-run", {"--job", unknown, NULL}, "train_spec.max_stepz: not a job key"},
        {"zactor-run", {"--job", range, NULL}, "batch_size wants an integer in [1, 65536]"},
        {"zactor-run", {"--job", kind, NULL}, "save_summary_steps wants an integer"},
        {"zactor-run", {"--job", roles, NULL}, "roles.worker is 99"},
        {"zactor-run", {"--epochs", "0", NULL}, "--epochs wants an integer in [1, 100000]"},
        {"zactor-run", {"--workers", "3:1", NULL}, "--workers: 3:1: the least (3) is above the most (1)"},
        {"zactor-run", {"--workers", "1:x", NULL}, "--workers wants N or MIN:MAX"},
        {"zactor-run", {"--model", "dnn", "--hidden-units", "64,x", NULL},
         "--hidden-units wants a list of integers in [1, 1048576]"},
        {"zactor-run", {"--elastic-batch", "some", NULL}, "'some' is not one of global,per-worker,scale-lr"},
        {"zactor-run", {"--heartbeat-ivl-ms", "5", NULL}, "--heartbeat-ivl-ms"},
        {"zactor-run", {"--optimizer", "rmsprop", NULL}, "'rmsprop' is not one of sgd"},
        {"zactor-run", {"--learning-rate", "1e39", NULL}, "does not fit a float"},
        {"zactor-run", {"--no-such-flag", NULL}, "unrecognized option '--no-such-flag'"},
        {"custom_model_fn", {"--l2", "2", NULL}, "--l2 wants a number >= 0 and <= 1"},
        {"custom_model_fn", {"--job", param, NULL}, "l2 wants a number >= 0"},
        {"custom_model_fn", {"--model", "cnn", NULL}, "--model: custom_model_fn has its own model_fn"},
        {"custom_model_fn", {"--shuffle-buffer", "9", NULL}, "has its own input_fn"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        za_test_result_t result = za_test_run_program (cases [i].program, cases [i].args, 30);
        cr_expect_eq (result.exit_code, 2, "case %zu (%s): exit %d: %s", i, cases [i].says,
                      result.exit_code, result.err);
        cr_expect (strstr (result.err, cases [i].says) != NULL, "case %zu: wanted '%s' in: %s",
                   i, cases [i].says, result.err);
        cr_expect (strstr (result.err, "step ") == NULL, "case %zu trained", i);
        //  One message (a list's item and the list once said it twice).
        cr_expect_leq (za_test_count (result.err, "error: "), 1, "case %zu: %s", i,
                       result.err);
        za_test_result_free (&result);
    }
    free (unknown);
    free (range);
    free (kind);
    free (roles);
    free (param);
}

// ---------------------------------------------------------------------------
//  A program's own model_fn as a supervised cluster

//  The chief has trained past *arg and every trainer is running.
static int
s_trained_past (json_t *state, void *arg)
{
    int running = 0;
    size_t i;
    json_t *row;
    json_array_foreach (json_object_get (state, "roles"), i, row) {
        const char *role = json_string_value (json_object_get (row, "role"));
        const char *run = json_string_value (json_object_get (row, "state"));
        running += role && run && !streq (role, "evaluator") && streq (run, "running");
    }
    return running >= 4 && json_integer_value (json_object_get (state, "global_step"))
                           >= *(int64_t *) arg;
}

Test (runtime, custom_model_fn_runs_a_supervised_cluster_and_survives_a_killed_worker)
{
    char *model_dir = za_test_path ("run");
    char *out = za_test_path ("local.out");
    //  Batches of 2000 keep the run going long enough to kill a worker in it.
    const char *args [] = {"--local", "--max-steps", "3000", "--model-dir", model_dir,
                           "--batch-size", "2000", "--l2", "0.0001", "--log-step-count-steps",
                           "0", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("custom_model_fn", args, out, broker);
    int64_t past = 300;
    json_t *state = za_test_wait_for (broker, s_trained_past, &past, "training past step 300",
                                      PHASE_TIMEOUT_S);
    int64_t killed_at = za_test_kill (state, "worker", 0);
    json_decref (state);
    int status = za_test_wait (local, RUN_TIMEOUT_S);
    char *text = (char *) za_test_read_file (out, NULL);
    cr_expect_eq (s_exit_code (status), 0, "%s", text);
    cr_expect (strstr (text, "test accuracy "), "no accuracy printed: %s", text);
    double accuracy = 0;
    const char *at = strstr (text, "test accuracy ");
    if (at)
        accuracy = strtod (at + strlen ("test accuracy "), NULL);
    cr_expect (accuracy > 0.70, "softmax regression reached %.4f", accuracy);
    cr_expect_lt (killed_at, 3000, "the worker was killed after the run (%lld)",
                  (long long) killed_at);
    free (text);
    //  The broker saw it die and started it again; the model is the program's.
    char *events_path = za_test_join (model_dir, "events.jsonl");
    char *events = (char *) za_test_read_file (events_path, NULL);
    cr_expect (strstr (events, "killed by signal 9"), "%s", events);
    const char *restarted = strstr (events, "\"event\":\"restarted\",\"role\":\"worker\"");
    cr_expect (restarted, "worker 0 was not restarted: %s", events);
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (model_dir, &found);
    cr_assert_not_null (ckpt, "%s", za_last_error ());
    cr_expect_geq (za_checkpoint_step (ckpt), 3000);
    cr_expect_str_eq (za_checkpoint_meta (ckpt, "model"), "softmax_regression(l2=0.0001)");
    za_checkpoint_destroy (&ckpt);
    //  The job every task ran carries the program's own option.
    char *job_path = za_test_join (model_dir, "job.json");
    char *job = (char *) za_test_read_file (job_path, NULL);
    cr_expect (strstr (job, "\"l2\""), "%s", job);
    free (job);
    free (job_path);
    free (events);
    free (events_path);
    free (out);
    free (model_dir);
}

Test (runtime, custom_model_fn_serves_every_role_from_tf_config)
{
    char *ports [3];
    for (int p = 0; p < 3; p++) {
        char *endpoint = za_test_free_endpoint ();
        ports [p] = strdup (strrchr (endpoint, ':') + 1);
        free (endpoint);
    }
    char cluster [512];
    snprintf (cluster, sizeof cluster, "{\"cluster\": {\"chief\": [\"127.0.0.1:%s\"], "
              "\"worker\": [\"127.0.0.1:%s\"], \"ps\": [\"127.0.0.1:%s\"]}", ports [0],
              ports [1], ports [2]);
    char *model_dir = za_test_path ("run");
    const char *tasks [][2] = {{"ps", "0"}, {"worker", "0"}, {"chief", "0"}};
    pid_t pids [3];
    char *outs [3], *errs [3], *chief_err = NULL;
    for (int t = 0; t < 3; t++) {
        char config [700], name [32];
        snprintf (config, sizeof config, "%s, \"task\": {\"type\": \"%s\", \"index\": %s}}",
                  cluster, tasks [t][0], tasks [t][1]);
        setenv ("TF_CONFIG", config, 1);
        snprintf (name, sizeof name, "%s.out", tasks [t][0]);
        outs [t] = za_test_path (name);
        snprintf (name, sizeof name, "%s.err", tasks [t][0]);
        errs [t] = za_test_path (name);
        const char *args [] = {"--max-steps", "400", "--model-dir", model_dir, "--l2", "0.001",
                               "--save-checkpoints-steps", "100", "--threads", "1", NULL};
        pids [t] = za_test_spawn_program ("custom_model_fn", args, outs [t], errs [t]);
    }
    unsetenv ("TF_CONFIG");
    for (int t = 0; t < 3; t++) {
        int status = za_test_wait (pids [t], RUN_TIMEOUT_S);
        char *out = (char *) za_test_read_file (outs [t], NULL);
        char *err = (char *) za_test_read_file (errs [t], NULL);
        cr_expect_eq (s_exit_code (status), 0, "%s: %s", tasks [t][0], err);
        char role [64];
        snprintf (role, sizeof role, "%s 0 of the cluster", tasks [t][0]);
        cr_expect (strstr (err, role), "%s: %s", tasks [t][0], err);
        if (t == 2)
            cr_expect (strstr (out, "test accuracy "), "the chief printed no accuracy: %s",
                       out);
        if (t == 2)
            chief_err = err;
        else
            free (err);
        free (out);
        free (outs [t]);
        free (errs [t]);
    }
    int found = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (model_dir, &found);
    cr_assert_not_null (ckpt);
    cr_expect_geq (za_checkpoint_step (ckpt), 400);
    cr_expect_str_eq (za_checkpoint_meta (ckpt, "model"), "softmax_regression(l2=0.001)");
    //  The chief says it is done at the step of its final checkpoint.
    char done [64];
    snprintf (done, sizeof done, "chief 0: done at step %lld ",
              (long long) za_checkpoint_step (ckpt));
    cr_expect (strstr (chief_err, done), "no '%s' in: %s", done, chief_err);
    free (chief_err);
    za_checkpoint_destroy (&ckpt);
    for (int p = 0; p < 3; p++)
        free (ports [p]);
    free (model_dir);
}

// ---------------------------------------------------------------------------
//  One rule for summaries; heartbeats that reach every role

//  The global steps of the lines of DIR/metrics.jsonl, into steps; how many.
static int
s_metric_steps (const char *dir, int64_t *steps, int max)
{
    char *path = za_test_join (dir, "metrics.jsonl");
    char *text = (char *) za_test_read_file (path, NULL);
    int count = 0;
    for (char *line = text; line && *line && count < max; ) {
        json_t *json = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        cr_assert_not_null (json, "a bad line in %s: %s", path, line);
        steps [count++] = json_integer_value (json_object_get (json, "global_step"));
        json_decref (json);
        line = strchr (line, '\n');
        line = line? line + 1: NULL;
    }
    free (text);
    free (path);
    return count;
}

Test (runtime, the_single_process_and_the_chief_write_metrics_at_the_same_steps)
{
    char *single_dir = za_test_path ("single");
    char *cluster_dir = za_test_path ("cluster");
    const char *common [] = {"--model", "linear", "--max-steps", "330", "--no-eval",
                             "--save-summary-steps", "40", "--threads", "1",
                             "--save-checkpoints-steps", "100"};
    const char *single [24], *chief [24], *ps [24];
    int n = (int) (sizeof common / sizeof common [0]);
    for (int i = 0; i < n; i++)
        single [i] = chief [i] = ps [i] = common [i];
    single [n] = "--model-dir", single [n + 1] = single_dir, single [n + 2] = NULL;
    za_test_result_t result = za_test_run_program ("zactor-run", single, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    //  A cluster of the chief and one ps: the chief alone moves global_step.
    char *endpoint = za_test_free_endpoint ();
    char config [256];
    snprintf (config, sizeof config, "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
              "[\"127.0.0.1:%s\"]}}", strrchr (endpoint, ':') + 1);
    char *cluster = za_test_write ("cluster.json", config);
    chief [n] = ps [n] = "--model-dir", chief [n + 1] = ps [n + 1] = cluster_dir;
    chief [n + 2] = ps [n + 2] = "--cluster", chief [n + 3] = ps [n + 3] = cluster;
    chief [n + 4] = ps [n + 4] = "--role";
    chief [n + 5] = "chief", ps [n + 5] = "ps";
    chief [n + 6] = ps [n + 6] = NULL;
    char *ps_out = za_test_path ("ps.out"), *chief_out = za_test_path ("chief.out");
    char *out = za_test_path ("roles.out");
    pid_t ps_pid = za_test_spawn (ps, out, ps_out);
    pid_t chief_pid = za_test_spawn (chief, out, chief_out);
    free (out);
    cr_expect_eq (s_exit_code (za_test_wait (chief_pid, RUN_TIMEOUT_S)), 0);
    cr_expect_eq (s_exit_code (za_test_wait (ps_pid, RUN_TIMEOUT_S)), 0);
    int64_t a [32], b [32];
    int count_a = s_metric_steps (single_dir, a, 32);
    int count_b = s_metric_steps (cluster_dir, b, 32);
    cr_expect_eq (count_a, 8, "the single process wrote %d lines", count_a);
    cr_expect_eq (count_a, count_b, "single process %d lines, chief %d", count_a, count_b);
    for (int i = 0; i < count_a && i < count_b; i++) {
        cr_expect_eq (a [i], 40 * (i + 1));
        cr_expect_eq (a [i], b [i], "line %d: single process step %lld, chief step %lld", i,
                      (long long) a [i], (long long) b [i]);
    }
    free (ps_out);
    free (chief_out);
    free (cluster);
    free (endpoint);
    free (single_dir);
    free (cluster_dir);
}

//  The seconds from `since` until `text` appears in the file at path (0.02 s
//  polls), or -1 after timeout_s.
static double
s_seconds_until (const char *path, const char *text, double since, double timeout_s)
{
    while (za_clock_mono () < since + timeout_s) {
        char *log = (char *) za_test_read_file (path, NULL);
        int found = strstr (log, text) != NULL;
        free (log);
        if (found)
            return za_clock_mono () - since;
        usleep (20000);
    }
    return -1;
}

Test (runtime, heartbeats_of_200_ms_find_a_stopped_ps_in_about_0_6_s)
{
    char *endpoint = za_test_free_endpoint ();
    char config [256];
    snprintf (config, sizeof config, "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
              "[\"127.0.0.1:%s\"]}}", strrchr (endpoint, ':') + 1);
    char *cluster = za_test_write ("cluster.json", config);
    char *model_dir = za_test_path ("run");
    const char *roles [] = {"ps", "chief"};
    char *outs [2];
    pid_t pids [2];
    for (int r = 0; r < 2; r++) {
        const char *args [] = {"--cluster", cluster, "--role", roles [r], "--model", "linear",
                               "--max-steps", "100000000", "--model-dir", model_dir,
                               "--heartbeat-ivl-ms", "200", "--heartbeat-liveness", "3",
                               "--threads", "1", "--save-summary-steps", "10", NULL};
        char name [32];
        snprintf (name, sizeof name, "%s.err", roles [r]);
        outs [r] = za_test_path (name);
        char *out = za_test_path ("roles.out");
        pids [r] = za_test_spawn (args, out, outs [r]);
        free (out);
    }
    //  Training runs (the chief writes metrics), then the ps stops.
    char *metrics = za_test_join (model_dir, "metrics.jsonl");
    double waited = 0;
    while (access (metrics, F_OK) != 0 && waited < 60)
        usleep (20000), waited += 0.02;
    cr_assert_lt (waited, 60, "the chief did not train");
    cr_assert_eq (kill (pids [0], SIGSTOP), 0);
    double stopped = za_clock_mono ();
    double noticed = s_seconds_until (outs [1], "missed 3 heartbeats", stopped, 10);
    //  Back again: the chief says so and trains on.
    kill (pids [0], SIGCONT);
    double back = s_seconds_until (outs [1], "answers again", za_clock_mono (), 10);
    for (int r = 1; r >= 0; r--) {
        kill (pids [r], SIGKILL);
        za_test_wait (pids [r], 30);
    }
    char *log = (char *) za_test_read_file (outs [1], NULL);
    cr_expect (noticed > 0.4 && noticed < 1.2, "the stopped ps was noticed after %.2f s "
               "(heartbeats 0.2 s x 3): %s", noticed, log);
    //  The lines name the task with its index.
    cr_expect (strstr (log, "chief 0: ps 0 at ") && strstr (log, "missed 3 heartbeats"), "%s",
               log);
    cr_expect (back >= 0, "the chief did not see the ps answer again: %s", log);
    free (log);
    for (int r = 0; r < 2; r++)
        free (outs [r]);
    free (metrics);
    free (model_dir);
    free (cluster);
    free (endpoint);
}

//  --partition-kib reaches the ps, as every other job setting does (the
//  workers place the variables by the same rule, or their pushes are
//  refused): the seed CNN's three variables above 64 KiB, the kernels of
//  its second and third convolutions ([3, 3, 32, 64], 72 KiB; [3, 3, 64,
//  64], 144 KiB) and of its first dense layer ([576, 64], 144 KiB), are one
//  part each by default and 2, 3 and 3 under --partition-kib 64: five more.
Test (runtime, partition_kib_reaches_the_ps)
{
    const char *kib [2] = {"4096", "64"};
    int parts [2] = {0, 0};
    for (int run = 0; run < 2; run++) {
        char name [32];
        snprintf (name, sizeof name, "partition-%s", kib [run]);
        char *dir = za_test_path (name);
        snprintf (name, sizeof name, "partition-%s.out", kib [run]);
        char *out = za_test_path (name);
        const char *args [] = {"--local", "--workers", "0", "--evaluators", "0", "--threads",
                               "1", "--max-steps", "2", "--model-dir", dir,
                               "--log-step-count-steps", "0", "--partition-kib", kib [run],
                               NULL};
        char broker [128];
        pid_t job = za_test_start_local ("zactor-run", args, out, broker);
        cr_expect_eq (s_exit_code (za_test_wait (job, RUN_TIMEOUT_S)), 0, "run %d", run);
        char *log_path = za_test_join (dir, "logs/ps-0.log");
        char *log = (char *) za_test_read_file (log_path, NULL);
        const char *at = log? strstr (log, ": serving "): NULL;
        cr_expect_not_null (at, "%s", log? log: "(no ps log)");
        parts [run] = at? atoi (at + strlen (": serving ")): -1;
        free (log);
        free (log_path);
        free (out);
        free (dir);
    }
    cr_expect (parts [0] > 0 && parts [1] == parts [0] + 5,
               "the ps served %d parts by default, %d under --partition-kib 64", parts [0],
               parts [1]);
}

Test (runtime, a_ps_lost_after_chief_restarts_costs_no_steps)
{
    //  The chief killed twice, then the ps: the restarted ps gets the values the
    //  (restarted) chief pulled a step ago, not a checkpoint's.
    char *model_dir = za_test_path ("run");
    char *out = za_test_path ("local.out");
    const char *args [] = {"--local", "--max-steps", "100000", "--model-dir", model_dir,
                           "--save-checkpoints-steps", "200", "--evaluators", "0",
                           "--log-step-count-steps", "0", "--save-summary-steps", "0", NULL};
    char broker [128];
    pid_t local = za_test_start_local ("zactor-run", args, out, broker);
    za_test_want_t want = {"chief", 0, 0, 360};
    json_t *state = za_test_wait_for (broker, za_test_task_back, &want, "step 360",
                                      PHASE_TIMEOUT_S);
    za_test_kill (state, "chief", 0);
    json_decref (state);
    want = (za_test_want_t) {"chief", 0, 1, 540};
    state = za_test_wait_for (broker, za_test_task_back, &want, "the chief back, step 540",
                              PHASE_TIMEOUT_S);
    za_test_kill (state, "chief", 0);
    json_decref (state);
    want = (za_test_want_t) {"chief", 0, 2, 720};
    state = za_test_wait_for (broker, za_test_task_back, &want,
                              "the chief back again, step 720",
                              PHASE_TIMEOUT_S);
    int64_t lost_at = za_test_kill (state, "ps", 0);
    json_decref (state);
    want = (za_test_want_t) {"ps", 0, 1, 0};
    state = za_test_wait_for (broker, za_test_task_back, &want, "the ps back", PHASE_TIMEOUT_S);
    //  The chief and the ps together: the restarted chief holds no values, the
    //  workers do: the ps takes a worker's offer instead of the checkpoint.
    int64_t both_at = json_integer_value (json_object_get (state, "global_step"));
    za_test_kill (state, "chief", 0);
    za_test_kill (state, "ps", 0);
    json_decref (state);
    want = (za_test_want_t) {"ps", 0, 2, both_at + 20};
    state = za_test_wait_for (broker, za_test_task_back, &want,
                              "the chief and the ps back together", PHASE_TIMEOUT_S);
    json_decref (state);
    kill (local, SIGINT);
    za_test_wait (local, 60);
    char *ps_log_path = za_test_join (model_dir, "logs/ps-0.log");
    char *ps_log = (char *) za_test_read_file (ps_log_path, NULL);
    //  The newest incarnation's init (the log is appended to).
    const char *offered = NULL;
    for (const char *at = strstr (ps_log, " with the values a worker offered"); at;
         at = strstr (at + 1, " with the values a worker offered"))
        offered = at;
    const char *line = offered;
    while (line && line > ps_log && line [-1] != '\n')
        line--;
    const char *init = line? strstr (line, "initialised at step "): NULL;
    long long offered_step = init? atoll (init + strlen ("initialised at step ")): -1;
    cr_expect (offered && offered_step >= both_at - 2 * 3, "the ps lost with the chief (step "
               "%lld) went on from %lld: %s", (long long) both_at, offered_step, ps_log);
    free (ps_log);
    free (ps_log_path);
    char *log_path = za_test_join (model_dir, "logs/chief-0.log");
    char *log = (char *) za_test_read_file (log_path, NULL);
    //  No rewind to a checkpoint: the ps gets the chief's newest values, and
    //  global_step goes back at most the pushes in flight (2 x the chief and
    //  2 workers; lost_at, from a report, is at most the true step).
    cr_expect_null (strstr (log, "reloading step "), "%s", log);
    const char *taken = strstr (log, "(no rewind)");
    //  The values the chief pulled, a worker's newer ones it offered, or the
    //  checkpoint's when it was the newest.
    const char *from = taken? strstr (log, "lost its state (restarted?): it gets "): NULL;
    cr_assert (from && taken > from, "the chief did not give the ps its values: %s", log);
    const char *at = strstr (from, "going on from step ");
    long long reloaded = at? atoll (at + strlen ("going on from step ")): -1;
    cr_expect (reloaded >= lost_at - 2 * 3, "the ps was lost at step %lld and training went on "
               "from step %lld", (long long) lost_at, reloaded);
    free (log);
    free (log_path);
    free (out);
    free (model_dir);
}

//  The final test accuracy of a run's output, or -1.
static double
s_accuracy_of (const char *path)
{
    char *text = (char *) za_test_read_file (path, NULL);
    const char *at = text? strstr (text, "test accuracy "): NULL;
    double accuracy = at? strtod (at + strlen ("test accuracy "), NULL): -1;
    free (text);
    return accuracy;
}

Test (runtime, a_ps_lost_three_times_costs_no_accuracy)
{
    //  Issue 29's short run: the chief alone (one thread: the undisturbed run
    //  is the same on every run of one machine) beside the same job whose ps is
    //  SIGKILLed at steps 300, 700 and 1100 of 1500. The restarted ps gets the
    //  chief's newest values and the newest checkpoint's slots: global_step
    //  goes back at most 2 (the pushes of one trainer in flight) and the final
    //  accuracy is not 0.5 points below (0.8758 against 0.8761 when written;
    //  seeds 1, 7 and 42 undisturbed: 0.8774, 0.8749, 0.8761). A chief restart is left
    //  out: the restarted chief's shuffle takes its starting step (as a resumed
    //  run's does), a new order worth as much as another seed, more than 0.5
    //  points apart at this length (bench/ps_loss.sh runs it, 10 epochs long;
    //  a_ps_lost_after_chief_restarts_costs_no_steps counts its steps).
    char *dirs [2] = {za_test_path ("undisturbed"), za_test_path ("ps-lost")};
    char *outs [2] = {za_test_path ("undisturbed.out"), za_test_path ("ps-lost.out")};
    pid_t jobs [2];
    char broker [2][128];
    for (int run = 0; run < 2; run++) {
        const char *args [] = {"--local", "--workers", "0", "--evaluators", "0", "--threads",
                               "1", "--max-steps", "1500", "--model-dir", dirs [run],
                               "--save-checkpoints-steps", "100", "--log-step-count-steps",
                               "0", NULL};
        jobs [run] = za_test_start_local ("zactor-run", args, outs [run], broker [run]);
    }
    int64_t lost_at [3];
    for (int loss = 0; loss < 3; loss++) {
        //  Running with the restarts so far, at the step of this loss.
        za_test_want_t want = {"ps", 0, loss, 300 + 400 * loss};
        json_t *state = za_test_wait_for (broker [1], za_test_task_back, &want,
                                          "the ps running at its step", PHASE_TIMEOUT_S);
        lost_at [loss] = za_test_kill (state, "ps", 0);
        json_decref (state);
    }
    for (int run = 0; run < 2; run++) {
        int status = za_test_wait (jobs [run], RUN_TIMEOUT_S);
        cr_expect_eq (s_exit_code (status), 0, "run %d ended with %d", run, status);
    }
    //  Each loss: the chief gave the ps its values and went on (its log is
    //  appended to by each incarnation, in order).
    char *log_path = za_test_join (dirs [1], "logs/chief-0.log");
    char *log = (char *) za_test_read_file (log_path, NULL);
    cr_expect_null (strstr (log, "reloading step "), "%s", log);
    const char *at = log;
    for (int loss = 0; loss < 3; loss++) {
        at = strstr (at, "lost its state (restarted?)");
        const char *went = at? strstr (at, "going on from step "): NULL;
        cr_assert (went && strstr (went, "(no rewind)"), "ps loss %d: %s", loss, log);
        long long from = atoll (went + strlen ("going on from step "));
        cr_expect (from >= lost_at [loss] - 2, "ps loss %d at step %lld: went on from %lld",
                   loss, (long long) lost_at [loss], from);
        at = went;
    }
    free (log);
    free (log_path);
    double undisturbed = s_accuracy_of (outs [0]);
    double lost = s_accuracy_of (outs [1]);
    cr_log_info ("test accuracy undisturbed %.4f, the ps lost three times %.4f", undisturbed,
                 lost);
    cr_expect (undisturbed > 0.80, "undisturbed: %.4f", undisturbed);
    //  No accuracy lost: at most 0.5 points below. Above is no loss: after a
    //  restart the slots come from a checkpoint up to 100 steps old, and the
    //  run goes another path, as another seed would (with the first layer's
    //  own loops the undisturbed run here is 0.8700, the lost one 0.8707 to
    //  0.8762 in 9 runs); more than 1.5 points above would say it is not the
    //  same job.
    cr_expect (lost >= undisturbed - 0.005 && lost <= undisturbed + 0.015,
               "the ps lost three times: %.4f, undisturbed: %.4f", lost, undisturbed);
    for (int run = 0; run < 2; run++) {
        free (dirs [run]);
        free (outs [run]);
    }
}
