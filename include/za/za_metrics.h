/*  za_metrics.h: the broker's Prometheus endpoint. A small HTTP server
    (libmicrohttpd, its own thread) answers GET /metrics with the text
    exposition format (version 0.0.4) of the broker's state: one series per
    task for its step, steps/sec, examples/sec, loss, last evaluation,
    restarts, heartbeat age and state, and the job's events counted by kind.
    The broker renders the text from its state (za_metrics_render) as it
    runs and hands it over (za_metrics_set); a scrape never waits on the
    broker's loop and never touches its tables.                            */
#ifndef ZA_METRICS_H_INCLUDED
#define ZA_METRICS_H_INCLUDED

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _za_metrics_t za_metrics_t;

//  Starts serving on bind, "HOST:PORT" (HOST a name or an address; "*" or
//  empty: every interface). Returns NULL with an error (a bad address, a
//  port in use, zactor built without libmicrohttpd).
za_metrics_t *za_metrics_new (const char *bind);
void za_metrics_destroy (za_metrics_t **self_p);

//  What the next scrapes get (copied). Safe from any thread.
void za_metrics_set (za_metrics_t *self, const char *text);

//  The exposition text of a broker state (the object zactor-top --json
//  prints): a new string (caller frees), or NULL when out of memory.
char *za_metrics_render (const json_t *state);

//  1 when this build serves metrics (it found libmicrohttpd).
int za_metrics_available (void);

#ifdef __cplusplus
}
#endif

#endif
