/*  za_events.c: the broker's events: a ring in memory, MODEL_DIR/events.jsonl
    on disk, a count per kind, and the log.                                 */
#include "za_events.h"
#include "za/za_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CAUSE_MAX 1024
#define PATH_MAX_CHARS 4096

typedef struct {
    double time;
    char *text;                 //  one JSON object, owned
} s_event_t;

struct za_events_t {
    char *path;                 //  MODEL_DIR/events.jsonl, or NULL
    s_event_t ring [ZA_BROKER_EVENTS];
    int count;                  //  ever; the ring holds the last ZA_BROKER_EVENTS
    json_t *counts;             //  {"event": times}
    uint64_t *json_failures;
};

za_events_t *
za_events_new (const char *model_dir, uint64_t *json_failures)
{
    za_events_t *self = (za_events_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->json_failures = json_failures;
    self->counts = json_object ();
    if (model_dir) {
        char path [PATH_MAX_CHARS];
        snprintf (path, sizeof path, "%s/events.jsonl", model_dir);
        self->path = strdup (path);
    }
    if (!self->counts || (model_dir && !self->path))
        za_events_destroy (&self);
    return self;
}

void
za_events_destroy (za_events_t **self_p)
{
    za_events_t *self = *self_p;
    if (!self)
        return;
    for (int e = 0; e < ZA_BROKER_EVENTS; e++)
        free (self->ring [e].text);
    json_decref (self->counts);
    free (self->path);
    free (self);
    *self_p = NULL;
}

//  Counts a reply or row that could not be built, and says so (the first
//  few times): never a silent skip.
static void
s_failed (za_events_t *self, const char *what)
{
    (*self->json_failures)++;
    if (*self->json_failures <= ZA_BROKER_LOGGED_MAX)
        za_info ("broker: could not build %s (%llu so far)", what,
                 (unsigned long long) *self->json_failures);
}

static void
s_count (za_events_t *self, const char *event)
{
    if (!event)
        return;
    json_t *count = json_object_get (self->counts, event);
    json_object_set_new (self->counts, event,
                         json_integer (count? json_integer_value (count) + 1: 1));
}

static void
s_keep (za_events_t *self, double time, const char *text)
{
    s_event_t *slot = &self->ring [self->count++ % ZA_BROKER_EVENTS];
    slot->time = time;
    free (slot->text);
    slot->text = strdup (text);
}

void
za_events_add (za_events_t *self, const char *event, const char *role, int index, pid_t pid,
               int restarts, const char *fmt, ...)
{
    char cause [CAUSE_MAX] = "";
    if (fmt) {
        va_list args;
        va_start (args, fmt);
        vsnprintf (cause, sizeof cause, fmt, args);
        va_end (args);
    }
    double now = za_clock_wall ();
    json_t *json = json_pack ("{s:f, s:s, s:s, s:i, s:i, s:s, s:i}", "time", now,
                              "event", event, "role", role? role: "broker",
                              "index", role? index: 0,
                              "pid", role? (int) pid: (int) getpid (), "cause", cause,
                              "restarts", restarts);
    char *text = json? json_dumps (json, JSON_COMPACT): NULL;
    json_decref (json);
    if (!text) {
        s_failed (self, "an event");
        return;
    }
    s_keep (self, now, text);
    s_count (self, event);
    FILE *file = self->path? fopen (self->path, "a"): NULL;
    if (file) {
        fprintf (file, "%s\n", text);
        fclose (file);
    }
    free (text);
    if (role)
        za_info ("broker: %s %d (pid %d): %s%s%s", role, index, (int) pid, event,
                 *cause? ": ": "", cause);
    else
        za_info ("broker: %s%s%s", event, *cause? ": ": "", cause);
}

//  Forgets every event kept and counted (those of an earlier job).
static void
s_forget (za_events_t *self)
{
    for (int e = 0; e < ZA_BROKER_EVENTS; e++) {
        free (self->ring [e].text);
        self->ring [e].text = NULL;
    }
    self->count = 0;
    json_object_clear (self->counts);
}

void
za_events_reload (za_events_t *self)
{
    FILE *file = self->path? fopen (self->path, "r"): NULL;
    if (!file)
        return;
    char *line = NULL;
    size_t capacity = 0;
    while (getline (&line, &capacity, file) > 0) {
        json_t *json = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        //  The file outlives jobs (a model dir trained again): this job's
        //  are those since its broker's first start.
        const char *role = json_string_value (json_object_get (json, "role"));
        const char *event = json_string_value (json_object_get (json, "event"));
        if (role && event && !strcmp (role, "broker") && !strcmp (event, "started"))
            s_forget (self);
        if (json && json_is_object (json)) {
            line [strcspn (line, "\n")] = 0;
            s_keep (self, json_number_value (json_object_get (json, "time")), line);
            s_count (self, json_string_value (json_object_get (json, "event")));
        }
        json_decref (json);
    }
    free (line);
    fclose (file);
}

json_t *
za_events_recent (za_events_t *self)
{
    json_t *events = json_array ();
    int first = self->count > ZA_BROKER_EVENTS? self->count - ZA_BROKER_EVENTS: 0;
    for (int e = first; e < self->count; e++) {
        const char *text = self->ring [e % ZA_BROKER_EVENTS].text;
        json_t *event = text? json_loads (text, 0, NULL): NULL;
        if (event)
            json_array_append_new (events, event);
        else
            s_failed (self, "an event of the state");
    }
    return events;
}

json_t *
za_events_counts (za_events_t *self)
{
    return self->counts;
}
