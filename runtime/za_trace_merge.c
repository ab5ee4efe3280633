/*  za_trace_merge.c: the tasks' trace files into one trace-event file.    */
#include "za_trace_merge.h"

#include "za/za_trace.h"
#include "za/za_util.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PATH_CHARS 4096
#define TASKS_MAX 1024
#define SUFFIX ".jsonl"

void
za_trace_dir (const za_settings_t *s, char *dir, size_t size)
{
    snprintf (dir, size, "%s/trace", s->run.model_dir);
}

void
za_trace_task_path (const za_settings_t *s, const char *type, int index, char *path,
                    size_t size)
{
    char dir [PATH_CHARS];
    za_trace_dir (s, dir, sizeof dir);
    snprintf (path, size, "%.4000s/%s-%d%s", dir, type, index, SUFFIX);
}

int
za_trace_task_start (const za_settings_t *s, const char *type, int index)
{
    if (!s->trace || !*s->trace || za_trace_on ())
        return 0;
    char path [PATH_CHARS + 64];
    za_trace_task_path (s, type, index, path, sizeof path);
    return za_trace_open (path, (int64_t) (s->trace_max_mb * 1048576));
}

//  The task files in the folder, sorted by name (caller frees each and the
//  list). Their count.
static int
s_task_files (const char *dir, char ***names_p)
{
    *names_p = NULL;
    DIR *d = opendir (dir);
    if (!d)
        return 0;
    char **names = calloc (TASKS_MAX, sizeof *names);
    int count = 0;
    struct dirent *entry;
    size_t suffix = strlen (SUFFIX);
    while (names && (entry = readdir (d)) && count < TASKS_MAX) {
        size_t length = strlen (entry->d_name);
        if (length > suffix && !strcmp (entry->d_name + length - suffix, SUFFIX))
            names [count++] = strdup (entry->d_name);
    }
    closedir (d);
    for (int i = 1; i < count; i++)                     //  a few: insertion sort
        for (int j = i; j > 0 && strcmp (names [j - 1], names [j]) > 0; j--) {
            char *swap = names [j];
            names [j] = names [j - 1], names [j - 1] = swap;
        }
    *names_p = names;
    return count;
}

void
za_trace_clear (const za_settings_t *s)
{
    char dir [PATH_CHARS], path [PATH_CHARS + 300];
    za_trace_dir (s, dir, sizeof dir);
    char **names;
    int count = s_task_files (dir, &names);
    for (int i = 0; i < count; i++) {
        snprintf (path, sizeof path, "%s/%s", dir, names [i]);
        unlink (path);
        snprintf (path, sizeof path, "%s/%s.1", dir, names [i]);
        unlink (path);
        free (names [i]);
    }
    free (names);
}

//  A metadata event ("ph": "M"): a process's or thread's name (key
//  "name"), or a process's label (Perfetto shows it beside the name: key
//  "labels").
static void
s_meta (FILE *out, int *first, const char *what, int pid, int tid, const char *key,
        const char *value)
{
    json_t *event = json_pack ("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", what, "ph", "M",
                               "pid", pid, "tid", tid, "args", key, value);
    char *text = json_dumps (event, JSON_COMPACT);
    if (text)
        fprintf (out, "%s%s", *first? "": ",\n", text);
    *first = 0;
    free (text);
    json_decref (event);
}

typedef struct {
    int64_t events, cut;
} s_count_t;

//  A task's file (absent: nothing) into out as process pid: each event, the
//  rows it uses marked, the last clock line said in clock ("clock: same
//  host", "clock: +1234.5 us, estimated over a 210.0 us round trip"). A line
//  cut short is counted and passed over.
static void
s_copy (FILE *out, const char *path, int pid, int *first, int *rows, s_count_t *counts,
        char *clock, size_t clock_size)
{
    FILE *in = fopen (path, "r");
    if (!in)
        return;
    char *line = NULL;
    size_t size = 0;
    while (getline (&line, &size, in) > 0) {
        json_t *event = json_loads (line, 0, NULL);
        json_t *said = json_object_get (event, "clock");
        if (json_is_object (said)) {
            const char *source = json_string_value (json_object_get (said, "source"));
            if (source && !strcmp (source, "same host"))
                snprintf (clock, clock_size, "clock: the broker's host");
            else
                snprintf (clock, clock_size, "clock: %+.1f us to the broker's, estimated over "
                          "a %.1f us round trip",
                          json_number_value (json_object_get (said, "offset_us")),
                          json_number_value (json_object_get (said, "rtt_us")));
            json_decref (event);
            continue;
        }
        json_int_t row = json_integer_value (json_object_get (event, "tid"));
        if (!json_is_object (event) || row <= 0 || row >= ZA_TRACE_ROWS) {
            counts->cut++;
            json_decref (event);
            continue;
        }
        rows [row] = 1;
        json_object_set_new (event, "pid", json_integer (pid));
        //  Microseconds of a monotonic clock: 15 digits keep the
        //  nanoseconds the tasks wrote.
        char *text = json_dumps (event, JSON_COMPACT | JSON_REAL_PRECISION (15));
        if (text)
            fprintf (out, "%s%s", *first? "": ",\n", text);
        *first = 0;
        free (text);
        json_decref (event);
        counts->events++;
    }
    free (line);
    fclose (in);
}

int
za_trace_merge (const za_settings_t *s)
{
    if (!s->trace || !*s->trace)
        return 0;
    char dir [PATH_CHARS], temporary [PATH_CHARS + 32];
    za_trace_dir (s, dir, sizeof dir);
    snprintf (temporary, sizeof temporary, "%.4000s.%d.tmp", s->trace, (int) getpid ());
    FILE *out = fopen (temporary, "w");
    if (!out)
        return za_error ("--trace %s: cannot write it: %s", s->trace, strerror (errno));
    char **names;
    int count = s_task_files (dir, &names), first = 1;
    int64_t events = 0, cut = 0;
    fprintf (out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int t = 0; t < count; t++) {
        int pid = t + 1, rows [ZA_TRACE_ROWS] = {0};
        char name [PATH_CHARS], path [PATH_CHARS + 300];
        snprintf (name, sizeof name, "%.*s", (int) (strlen (names [t]) - strlen (SUFFIX)),
                  names [t]);
        s_meta (out, &first, "process_name", pid, 0, "name", name);
        //  The part it turned over first (--trace-max-mb), then its file.
        s_count_t counts = {0};
        char clock [128] = "";
        snprintf (path, sizeof path, "%s/%s.1", dir, names [t]);
        s_copy (out, path, pid, &first, rows, &counts, clock, sizeof clock);
        snprintf (path, sizeof path, "%s/%s", dir, names [t]);
        s_copy (out, path, pid, &first, rows, &counts, clock, sizeof clock);
        events += counts.events;
        cut += counts.cut;
        if (*clock)
            s_meta (out, &first, "process_labels", pid, 0, "labels", clock);
        for (int row = 1; row < ZA_TRACE_ROWS; row++)
            if (rows [row])
                s_meta (out, &first, "thread_name", pid, row, "name", za_trace_row_name (row));
        free (names [t]);
    }
    free (names);
    fprintf (out, "\n]}\n");
    int failed = ferror (out);
    if (fclose (out) || failed || rename (temporary, s->trace)) {
        unlink (temporary);
        return za_error ("--trace %s: cannot write it: %s", s->trace, strerror (errno));
    }
    za_info ("trace: %lld events of %d tasks in %s (open it in https://ui.perfetto.dev or "
             "chrome://tracing)%s", (long long) events, count, s->trace,
             cut? "; lines cut short passed over": "");
    return 0;
}
