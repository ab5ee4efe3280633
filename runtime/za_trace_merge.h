/*  za_trace_merge.h: a job's tasks' traces (za_trace.h, one file each in
    MODEL_DIR/trace/) made into the one file --trace names.                 */
#ifndef ZA_TRACE_MERGE_H_INCLUDED
#define ZA_TRACE_MERGE_H_INCLUDED

#include "za_settings.h"

//  The folder the tasks write their traces to, and a task's file in it
//  (TYPE-INDEX.jsonl: chief-0, worker-1, ...).
void za_trace_dir (const za_settings_t *s, char *dir, size_t size);
void za_trace_task_path (const za_settings_t *s, const char *type, int index, char *path,
                         size_t size);

//  Starts this task's trace when --trace is given (its file appended to: a
//  restart goes on in it). 0, or -1 with an error.
int za_trace_task_start (const za_settings_t *s, const char *type, int index);

//  Empties the folder's traces (a job starting: a run before it in the same
//  model dir keeps none).
void za_trace_clear (const za_settings_t *s);

//  Writes the tasks' traces as one Chrome trace-event JSON file at --trace:
//  {"traceEvents": [...]}, a process per task (in name order, named by its
//  file), a thread per row (za_trace_row_name), their timestamps as they are
//  (one machine's CLOCK_MONOTONIC). A line cut short (a task killed while
//  writing) is passed over. 0, or -1 with an error.
int za_trace_merge (const za_settings_t *s);

#endif
