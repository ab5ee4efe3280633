/*  za_trace.h: a task's trace (--trace): where its steps' time goes, as
    Chrome's trace events (Perfetto and chrome://tracing read them): each
    phase a complete event ("ph": "X") with a name, a start and a duration
    in microseconds of CLOCK_MONOTONIC (za_clock_mono) put on the broker's
    clock (za_trace_clock), on the row of its activity, and the global step
    it belongs to.

    Events go into a bounded ring in memory; a thread of the trace's own
    writes them to the task's file, one JSON object a line, every 200 ms.
    Recording never blocks a step: when the ring is full or the writer holds
    it, the event is dropped and counted. The process's tasks of a job each
    write their own file; za_trace_merge (runtime/za_trace_merge.h) makes
    the job's one trace of them.                                           */
#ifndef ZA_TRACE_H_INCLUDED
#define ZA_TRACE_H_INCLUDED

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The rows a task's events go on (the trace's "threads").
typedef enum {
    ZA_TRACE_STEP = 1,                  //  a whole training step
    ZA_TRACE_INPUT,                     //  waiting for the input's batch
    ZA_TRACE_COMPUTE,                   //  forward and backward
    ZA_TRACE_EXCHANGE,                  //  push and pull, or the ring's all-reduce
    ZA_TRACE_APPLY,                     //  the optimizer's update
    ZA_TRACE_CHECKPOINT,                //  a checkpoint written
    ZA_TRACE_EVALUATION,                //  an evaluation of a checkpoint
    ZA_TRACE_BUCKET,                    //  all-reduce: one bucket of the gradient going
                                        //  round the ring (beside backward)
    ZA_TRACE_ROWS
} za_trace_row_t;

//  The row's name ("step", "input", ...), or NULL.
const char *za_trace_row_name (int row);

//  Starts tracing this process into path (appended to: a restarted task
//  goes on in its file), its folder made. When the file holds half of
//  max_bytes (0: no limit) it becomes PATH.1, the one before it gone, and a
//  new one starts at the next step's events (the newest events are kept,
//  and a step's events stay together). 0, or -1 with an error.
int za_trace_open (const char *path, int64_t max_bytes);
//  Writes what the ring holds and stops tracing. Safe when not open.
void za_trace_close (void);
//  1 while tracing.
int za_trace_on (void);

//  Records one phase: `name` (a string that lives as long as the process:
//  a literal) on `row`, from `start` to `end` (za_clock_mono seconds), of
//  global step `step` (-1: none). Does nothing when not tracing.
void za_trace_event (za_trace_row_t row, const char *name, double start, double end,
                     int64_t step);

//  How the task's times are put on the broker's clock (za_broker_client
//  measures it with each report): its own (no broker heard yet), the same
//  machine's clock, or an offset estimated from a report's round trip.
typedef enum {
    ZA_TRACE_CLOCK_OWN = 0, ZA_TRACE_CLOCK_SAME_HOST, ZA_TRACE_CLOCK_ESTIMATED
} za_trace_clock_source_t;

//  From now on the events are written at their time plus offset (seconds:
//  the broker's clock less ours), measured over a round trip of rtt
//  seconds; the file says so in a line {"clock": {offset_us, rtt_us,
//  source}} when it changes. Safe from any thread, traced or not.
void za_trace_clock (double offset, double rtt, za_trace_clock_source_t source);

//  Events dropped so far (the ring full or held).
int64_t za_trace_dropped (void);

#ifdef __cplusplus
}
#endif
#endif
