/*  test_summary.c: za_summary event files: CRC32C vectors, file names, records
    parsed by hand here, and the same files read by an independent Python reader. */
#define _GNU_SOURCE
#include "za/za_summary.h"
#include "za/za_util.h"
#include "za_test.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define PYTHON_PATH "/usr/bin/python3"
#define READER_SCRIPT ZA_SOURCE_DIR "/tests/read_events.py"
#define READER_TIMEOUT_S 60.0
#define READER_EXIT_MISSING_TOOL 2      //  what read_events.py exits with then
#define OUTPUT_FILE_MODE 0644
#define MAX_RECORDS 256
#define MAX_VALUES 64
#define HOSTNAME_MAX_CHARS 256
#define STEP_COUNT 20                   //  steps the readers check, 1..STEP_COUNT
#define PRECREATED_SECONDS 4            //  seconds of names taken before a writer starts

static void
s_setup (void)
{
    za_test_dir_create ("za_summary_test");
    za_error_clear ();
}

static void
s_teardown (void)
{
    za_test_dir_remove ();
}

TestSuite (summary, .init = s_setup, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  A reader written here by hand: TFRecord framing and the Event fields we use

typedef struct {
    const uint8_t *data;
    uint64_t size;
} s_record_t;

typedef struct {
    char tag [128];
    bool has_simple_value;
    float simple_value;
} s_value_t;

typedef struct {
    bool has_wall_time;
    double wall_time;
    int64_t step;
    char file_version [64];
    bool has_summary;
    s_value_t values [MAX_VALUES];
    int value_count;
} s_event_t;

static uint32_t
s_get_le32 (const uint8_t *bytes)
{
    return (uint32_t) bytes [0] | (uint32_t) bytes [1] << 8 | (uint32_t) bytes [2] << 16
         | (uint32_t) bytes [3] << 24;
}

static uint64_t
s_get_le64 (const uint8_t *bytes)
{
    uint64_t value = 0;
    for (int i = 0; i < 8; i++)
        value |= (uint64_t) bytes [i] << (8 * i);
    return value;
}

//  Splits a whole file into records, checking both masked CRCs of each.
static int
s_split_records (const uint8_t *bytes, size_t size, s_record_t *records)
{
    int count = 0;
    size_t offset = 0;
    while (offset < size) {
        cr_assert_lt (count, MAX_RECORDS);
        cr_assert_geq (size - offset, 12, "torn record header at %zu", offset);
        uint64_t length = s_get_le64 (bytes + offset);
        cr_assert_eq (s_get_le32 (bytes + offset + 8),
                      za_crc32c_mask (za_crc32c (bytes + offset, 8)),
                      "bad length CRC at offset %zu", offset);
        cr_assert_geq (size - offset - 12, length + 4, "torn record data at %zu", offset);
        const uint8_t *data = bytes + offset + 12;
        cr_assert_eq (s_get_le32 (data + length), za_crc32c_mask (za_crc32c (data, length)),
                      "bad data CRC at offset %zu", offset);
        records [count++] = (s_record_t) {data, length};
        offset += 12 + length + 4;
    }
    return count;
}

static uint64_t
s_get_varint (const uint8_t **cursor, const uint8_t *end)
{
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        cr_assert_lt (*cursor, end, "varint runs past the end");
        uint8_t byte = *(*cursor)++;
        value |= (uint64_t) (byte & 0x7f) << shift;
        if (!(byte & 0x80))
            return value;
    }
    cr_assert_fail ("varint longer than 10 bytes");
    return 0;
}

//  Reads a length-delimited payload; returns it and its size in *size_p.
static const uint8_t *
s_get_bytes (const uint8_t **cursor, const uint8_t *end, uint64_t *size_p)
{
    uint64_t size = s_get_varint (cursor, end);
    cr_assert_leq (size, (uint64_t) (end - *cursor), "field runs past the end");
    const uint8_t *payload = *cursor;
    *cursor += size;
    *size_p = size;
    return payload;
}

static void
s_parse_value (const uint8_t *cursor, const uint8_t *end, s_value_t *value)
{
    memset (value, 0, sizeof *value);
    while (cursor < end) {
        uint64_t key = s_get_varint (&cursor, end);
        if (key == ((1 << 3) | 2)) {
            uint64_t size;
            const uint8_t *tag = s_get_bytes (&cursor, end, &size);
            cr_assert_lt (size, sizeof value->tag);
            memcpy (value->tag, tag, size);
            value->tag [size] = 0;
        }
        else
        if (key == ((2 << 3) | 5)) {
            cr_assert_leq (4, end - cursor);
            uint32_t bits = s_get_le32 (cursor);
            memcpy (&value->simple_value, &bits, sizeof bits);
            value->has_simple_value = true;
            cursor += 4;
        }
        else
            cr_assert_fail ("unexpected key %" PRIu64 " in Summary.Value", key);
    }
}

static void
s_parse_event (const s_record_t *record, s_event_t *event)
{
    memset (event, 0, sizeof *event);
    const uint8_t *cursor = record->data;
    const uint8_t *end = record->data + record->size;
    while (cursor < end) {
        uint64_t key = s_get_varint (&cursor, end);
        uint64_t size;
        if (key == ((1 << 3) | 1)) {
            cr_assert_leq (8, end - cursor);
            uint64_t bits = s_get_le64 (cursor);
            memcpy (&event->wall_time, &bits, sizeof bits);
            event->has_wall_time = true;
            cursor += 8;
        }
        else
        if (key == ((2 << 3) | 0))
            event->step = (int64_t) s_get_varint (&cursor, end);
        else
        if (key == ((3 << 3) | 2)) {
            const uint8_t *text = s_get_bytes (&cursor, end, &size);
            cr_assert_lt (size, sizeof event->file_version);
            memcpy (event->file_version, text, size);
            event->file_version [size] = 0;
        }
        else
        if (key == ((5 << 3) | 2)) {
            const uint8_t *summary = s_get_bytes (&cursor, end, &size);
            const uint8_t *summary_end = summary + size;
            event->has_summary = true;
            while (summary < summary_end) {
                cr_assert_eq (s_get_varint (&summary, summary_end), (1 << 3) | 2,
                              "Summary holds something other than values");
                uint64_t value_size;
                const uint8_t *value = s_get_bytes (&summary, summary_end, &value_size);
                cr_assert_lt (event->value_count, MAX_VALUES);
                s_parse_value (value, value + value_size, &event->values [event->value_count++]);
            }
        }
        else
            cr_assert_fail ("unexpected key %" PRIu64 " in Event", key);
    }
}

//  Reads the whole file and parses every record into events; returns the count
//  and the file's bytes in *bytes_p (caller frees).
static int
s_read_events (const char *path, s_event_t *events, uint8_t **bytes_p)
{
    size_t size;
    uint8_t *bytes = (uint8_t *) za_test_read_file (path, &size);
    s_record_t records [MAX_RECORDS];
    int count = s_split_records (bytes, size, records);
    for (int i = 0; i < count; i++)
        s_parse_event (&records [i], &events [i]);
    *bytes_p = bytes;
    return count;
}


//  --------------------------------------------------------------------------
//  The independent reader: tests/read_events.py under /usr/bin/python3

typedef struct {
    int exit_code;
    char *out;
    char *err;
} s_reader_result_t;

static s_reader_result_t
s_run_reader (const char *event_path)
{
    cr_assert_eq (access (PYTHON_PATH, X_OK), 0,
                  "%s is missing: the summary tests need it with python3-protobuf and "
                  "protobuf-compiler (apt-get install python3-protobuf protobuf-compiler)",
                  PYTHON_PATH);
    char *out_path = za_test_path ("reader.out");
    char *err_path = za_test_path ("reader.err");
    posix_spawn_file_actions_t actions;
    cr_assert_eq (posix_spawn_file_actions_init (&actions), 0);
    posix_spawn_file_actions_addopen (&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen (&actions, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC,
                                      OUTPUT_FILE_MODE);
    posix_spawn_file_actions_addopen (&actions, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC,
                                      OUTPUT_FILE_MODE);
    const char *argv [] = {PYTHON_PATH, READER_SCRIPT, event_path, NULL};
    pid_t pid;
    int rc = posix_spawn (&pid, PYTHON_PATH, &actions, NULL, (char *const *) argv, environ);
    posix_spawn_file_actions_destroy (&actions);
    cr_assert_eq (rc, 0, "posix_spawn %s: %s", PYTHON_PATH, strerror (rc));
    int status = za_test_wait (pid, READER_TIMEOUT_S);
    s_reader_result_t result = {
        .exit_code = WIFEXITED (status)? WEXITSTATUS (status): -1,
        .out = za_test_read_file (out_path, NULL),
        .err = za_test_read_file (err_path, NULL),
    };
    free (out_path);
    free (err_path);
    //  CI installs both; a machine without them must fail here, not skip.
    cr_assert_neq (result.exit_code, READER_EXIT_MISSING_TOOL,
                   "the independent event reader cannot run: %s"
                   "install python3-protobuf and protobuf-compiler",
                   result.err);
    return result;
}

static void
s_reader_result_free (s_reader_result_t *result)
{
    free (result->out);
    free (result->err);
    result->out = NULL;
    result->err = NULL;
}


//  --------------------------------------------------------------------------
//  What the tests write

static const char *const s_tags [] = {"loss", "global_step/sec", "accuracy"};
#define TAG_COUNT 3

//  Values that float rounds (none is exact in binary), so precision is checked.
static double
s_value_of (int tag_index, int64_t step)
{
    switch (tag_index) {
    case 0: return 2.3 / (double) step;
    case 1: return 123.456789 + 0.1 * (double) step;
    default: return 1.0 - 0.7 / (double) (step + 2);
    }
}

//  Per step: "loss" alone, then the other two in one event.
static void
s_write_steps (za_summary_writer_t *writer)
{
    for (int64_t step = 1; step <= STEP_COUNT; step++) {
        cr_assert_eq (za_summary_scalar (writer, s_tags [0], step, s_value_of (0, step)), 0);
        double values [TAG_COUNT - 1] = {s_value_of (1, step), s_value_of (2, step)};
        cr_assert_eq (za_summary_scalars (writer, step, s_tags + 1, values, TAG_COUNT - 1), 0);
    }
}

//  Checks the reader's lines against what s_write_steps wrote, in order.
static void
s_expect_reader_lines (const char *out)
{
    const char *line = out;
    for (int64_t step = 1; step <= STEP_COUNT; step++)
        for (int tag_index = 0; tag_index < TAG_COUNT; tag_index++) {
            cr_assert (*line, "reader output ends before step %" PRId64 " %s", step,
                       s_tags [tag_index]);
            const char *newline = strchr (line, '\n');
            cr_assert_not_null (newline);
            char text [256];
            size_t len = (size_t) (newline - line);
            cr_assert_lt (len, sizeof text);
            memcpy (text, line, len);
            text [len] = 0;
            long long got_step;
            char got_tag [128];
            char got_value [64];
            cr_assert_eq (sscanf (text, "%lld %127s %63s", &got_step, got_tag, got_value), 3,
                          "bad reader line '%s'", text);
            cr_assert_eq (got_step, step, "line '%s'", text);
            cr_assert_str_eq (got_tag, s_tags [tag_index], "line '%s'", text);
            float expected = (float) s_value_of (tag_index, step);
            cr_assert_eq ((float) strtod (got_value, NULL), expected,
                          "line '%s': want %.9g", text, (double) expected);
            line = newline + 1;
        }
    cr_assert_str_eq (line, "", "reader printed more than was written");
}

static char *
s_hostname (void)
{
    char hostname [HOSTNAME_MAX_CHARS + 1] = "";
    cr_assert_eq (gethostname (hostname, HOSTNAME_MAX_CHARS), 0);
    hostname [HOSTNAME_MAX_CHARS] = 0;
    return strdup (hostname [0]? hostname: "localhost");
}

static off_t
s_file_size (const char *path)
{
    struct stat st;
    cr_assert_eq (stat (path, &st), 0, "stat %s", path);
    return st.st_size;
}


//  --------------------------------------------------------------------------
//  CRC32C

Test (summary, crc32c_known_vectors)
{
    cr_assert_eq (za_crc32c ("123456789", 9), 0xe3069283u);
    cr_assert_eq (za_crc32c ("", 0), 0);
    //  RFC 3720 (iSCSI) B.4.
    uint8_t bytes [32];
    memset (bytes, 0, sizeof bytes);
    cr_assert_eq (za_crc32c (bytes, sizeof bytes), 0x8a9136aau);
    memset (bytes, 0xff, sizeof bytes);
    cr_assert_eq (za_crc32c (bytes, sizeof bytes), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        bytes [i] = (uint8_t) i;
    cr_assert_eq (za_crc32c (bytes, sizeof bytes), 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        bytes [i] = (uint8_t) (31 - i);
    cr_assert_eq (za_crc32c (bytes, sizeof bytes), 0x113fdb5cu);
}

Test (summary, masked_crc)
{
    cr_assert_eq (za_crc32c_mask (0), 0xa282ead8u);
    uint32_t crc = 0xe3069283u;
    cr_assert_eq (za_crc32c_mask (crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
    cr_assert_eq (za_crc32c_mask (crc), 0xc78ab0e5u);
}


//  --------------------------------------------------------------------------
//  Files

Test (summary, file_named_in_created_dir)
{
    char *dir = za_test_path ("model/eval_test/deeper");
    char *hostname = s_hostname ();
    //  The writer's clock (CLOCK_REALTIME): time () reads a coarser one that
    //  may lag it across a second's turn.
    time_t before = (time_t) za_clock_wall ();
    za_summary_writer_t *writer = za_summary_writer_new (dir);
    time_t after = (time_t) za_clock_wall ();
    cr_assert_not_null (writer, "%s", za_last_error ());

    const char *path = za_summary_writer_path (writer);
    char *prefix = za_test_join (dir, "events.out.tfevents.");
    cr_assert_eq (strncmp (path, prefix, strlen (prefix)), 0, "path %s", path);
    char *end;
    long long seconds = strtoll (path + strlen (prefix), &end, 10);
    cr_assert_geq (seconds, before);
    cr_assert_leq (seconds, after);
    cr_assert_eq (*end, '.');
    cr_assert_str_eq (end + 1, hostname, "path %s", path);
    cr_assert_gt (s_file_size (path), 0, "the file_version event is written at once");

    za_summary_writer_destroy (&writer);
    cr_assert_null (writer);
    za_summary_writer_destroy (&writer);
    za_summary_writer_destroy (NULL);
    free (prefix);
    free (hostname);
    free (dir);
}

Test (summary, taken_name_gets_suffix)
{
    //  Take the plain names of the next few seconds, as another writer would.
    char *dir = za_test_path ("run");
    cr_assert_eq (mkdir (dir, 0755), 0);
    char *hostname = s_hostname ();
    time_t now = time (NULL);
    for (int i = 0; i < PRECREATED_SECONDS; i++) {
        char name [512];
        snprintf (name, sizeof name, "%s/events.out.tfevents.%010lld.%s", dir,
                  (long long) now + i, hostname);
        FILE *file = fopen (name, "wb");
        cr_assert_not_null (file);
        fclose (file);
    }
    za_summary_writer_t *first = za_summary_writer_new (dir);
    za_summary_writer_t *second = za_summary_writer_new (dir);
    cr_assert_not_null (first, "%s", za_last_error ());
    cr_assert_not_null (second, "%s", za_last_error ());
    const char *first_path = za_summary_writer_path (first);
    const char *second_path = za_summary_writer_path (second);
    size_t first_len = strlen (first_path);
    cr_assert_str_eq (first_path + first_len - 2, ".1", "path %s", first_path);
    cr_assert_str_neq (first_path, second_path);
    if (strncmp (first_path, second_path, first_len - 2) == 0)
        cr_assert_str_eq (second_path + first_len - 2, ".2", "path %s", second_path);

    //  The names taken before are left empty, not opened by a writer.
    for (int i = 0; i < PRECREATED_SECONDS; i++) {
        char name [512];
        snprintf (name, sizeof name, "%s/events.out.tfevents.%010lld.%s", dir,
                  (long long) now + i, hostname);
        cr_assert_eq (s_file_size (name), 0, "%s was written", name);
    }
    za_summary_writer_destroy (&first);
    za_summary_writer_destroy (&second);
    free (hostname);
    free (dir);
}

Test (summary, errors)
{
    za_error_set_quiet (1);
    char *blocker = za_test_path ("plain_file");
    FILE *file = fopen (blocker, "wb");
    cr_assert_not_null (file);
    fclose (file);
    char *below = za_test_join (blocker, "dir");
    cr_assert_null (za_summary_writer_new (below));
    cr_assert (strstr (za_last_error (), "not a directory"), "error: %s", za_last_error ());
    cr_assert_null (za_summary_writer_new (NULL));

    char *dir = za_test_path ("run");
    za_summary_writer_t *writer = za_summary_writer_new (dir);
    cr_assert_not_null (writer);
    const char *path = za_summary_writer_path (writer);
    off_t size = s_file_size (path);
    const char *tags [ZA_SUMMARY_MAX_SCALARS + 1];
    double values [ZA_SUMMARY_MAX_SCALARS + 1];
    for (int i = 0; i <= ZA_SUMMARY_MAX_SCALARS; i++) {
        tags [i] = "t";
        values [i] = i;
    }
    cr_assert_eq (za_summary_scalars (writer, 1, tags, values, 0), -1);
    cr_assert_eq (za_summary_scalars (writer, 1, tags, values, ZA_SUMMARY_MAX_SCALARS + 1), -1);
    cr_assert (strstr (za_last_error (), "scalars"), "error: %s", za_last_error ());
    cr_assert_eq (za_summary_scalar (writer, NULL, 1, 1.0), -1);
    cr_assert_eq (za_summary_scalar (NULL, "loss", 1, 1.0), -1);
    tags [3] = NULL;
    cr_assert_eq (za_summary_scalars (writer, 1, tags, values, 4), -1);
    cr_assert_eq (s_file_size (path), size, "a refused call wrote something");

    tags [3] = "t";
    cr_assert_eq (za_summary_scalars (writer, 1, tags, values, ZA_SUMMARY_MAX_SCALARS), 0);
    cr_assert_gt (s_file_size (path), size);
    za_summary_writer_destroy (&writer);
    za_error_set_quiet (0);
    free (dir);
    free (below);
    free (blocker);
}


//  --------------------------------------------------------------------------
//  Records parsed by hand

Test (summary, records_parsed_by_hand)
{
    char *dir = za_test_path ("run");
    double before = za_clock_wall ();
    za_summary_writer_t *writer = za_summary_writer_new (dir);
    cr_assert_not_null (writer, "%s", za_last_error ());
    const char *path = za_summary_writer_path (writer);
    cr_assert_eq (za_summary_scalar (writer, "loss", 1, 0.1), 0);
    const char *tags [] = {"global_step/sec", "accuracy", ""};
    double values [] = {42.5, 1.0 / 3.0, -0.0};
    cr_assert_eq (za_summary_scalars (writer, 2, tags, values, 3), 0);
    cr_assert_eq (za_summary_scalar (writer, "neg", -3, 1e30), 0);
    cr_assert_eq (za_summary_scalar (writer, "zero", 0, -7.25), 0);
    cr_assert_eq (za_summary_scalar (writer, "big", INT64_MAX, 0.0), 0);
    double after = za_clock_wall ();

    //  Read while the writer is still open: every call has been flushed.
    static s_event_t events [MAX_RECORDS];
    uint8_t *bytes;
    int count = s_read_events (path, events, &bytes);
    cr_assert_eq (count, 6);

    cr_assert (events [0].has_wall_time);
    cr_assert_str_eq (events [0].file_version, "brain.Event:2");
    cr_assert_not (events [0].has_summary);
    cr_assert_eq (events [0].step, 0);
    for (int i = 0; i < count; i++) {
        cr_assert (events [i].has_wall_time, "event %d has no wall_time", i);
        cr_assert_geq (events [i].wall_time, before - 1.0);
        cr_assert_leq (events [i].wall_time, after + 1.0);
    }
    //  The file's name carries the whole seconds of its first event.
    char *seconds_text = strrchr (path, '/') + 1 + strlen ("events.out.tfevents.");
    cr_assert_eq (strtoll (seconds_text, NULL, 10), (long long) events [0].wall_time);

    cr_assert_eq (events [1].step, 1);
    cr_assert_eq (events [1].value_count, 1);
    cr_assert_str_eq (events [1].values [0].tag, "loss");
    cr_assert (events [1].values [0].has_simple_value);
    cr_assert_eq (events [1].values [0].simple_value, 0.1f);
    cr_assert_str_eq (events [1].file_version, "");

    cr_assert_eq (events [2].step, 2);
    cr_assert_eq (events [2].value_count, 3);
    cr_assert_str_eq (events [2].values [0].tag, "global_step/sec");
    cr_assert_eq (events [2].values [0].simple_value, 42.5f);
    cr_assert_str_eq (events [2].values [1].tag, "accuracy");
    cr_assert_eq (events [2].values [1].simple_value, (float) (1.0 / 3.0));
    cr_assert_str_eq (events [2].values [2].tag, "");
    cr_assert (events [2].values [2].has_simple_value, "a zero value is still written");

    cr_assert_eq (events [3].step, -3);
    cr_assert_eq (events [3].values [0].simple_value, 1e30f);
    cr_assert_eq (events [4].step, 0);
    cr_assert_eq (events [4].values [0].simple_value, -7.25f);
    cr_assert_eq (events [5].step, INT64_MAX);

    //  The second record byte by byte: Event{1: wall_time, 2: 1, 5: {1: {1: "loss", 2: 0.1f}}}.
    size_t first_size = (size_t) s_get_le64 (bytes) + 16;
    const uint8_t *record = bytes + first_size;
    uint64_t data_size = s_get_le64 (record);
    const uint8_t *data = record + 12;
    uint8_t expected [] = {0x10, 0x01, 0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 'l', 'o', 's', 's',
                           0x15, 0xcd, 0xcc, 0xcc, 0x3d};
    cr_assert_eq (data_size, 9 + sizeof expected);
    cr_assert_eq (data [0], 0x09, "wall_time key");
    cr_assert_eq (memcmp (data + 9, expected, sizeof expected), 0);

    za_summary_writer_destroy (&writer);
    free (bytes);
    free (dir);
}


//  --------------------------------------------------------------------------
//  The independent reader

Test (summary, python_reader_agrees)
{
    char *dir = za_test_path ("model");
    za_summary_writer_t *writer = za_summary_writer_new (dir);
    cr_assert_not_null (writer, "%s", za_last_error ());
    s_write_steps (writer);

    //  While the writer is open: what a running TensorBoard would see.
    s_reader_result_t result = s_run_reader (za_summary_writer_path (writer));
    cr_assert_eq (result.exit_code, 0, "read_events.py: %s", result.err);
    s_expect_reader_lines (result.out);
    s_reader_result_free (&result);

    char *path = strdup (za_summary_writer_path (writer));
    za_summary_writer_destroy (&writer);
    result = s_run_reader (path);
    cr_assert_eq (result.exit_code, 0, "read_events.py: %s", result.err);
    s_expect_reader_lines (result.out);
    s_reader_result_free (&result);
    free (path);
    free (dir);
}

Test (summary, python_reader_rejects_corruption)
{
    //  The reader must check CRCs itself, or agreeing with it would prove little.
    char *dir = za_test_path ("model");
    za_summary_writer_t *writer = za_summary_writer_new (dir);
    cr_assert_not_null (writer, "%s", za_last_error ());
    cr_assert_eq (za_summary_scalar (writer, "loss", 1, 0.5), 0);
    char *path = strdup (za_summary_writer_path (writer));
    za_summary_writer_destroy (&writer);

    size_t size;
    uint8_t *bytes = (uint8_t *) za_test_read_file (path, &size);
    bytes [size - 6] ^= 0x01;           //  inside the last record's float
    FILE *file = fopen (path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (bytes, 1, size, file), size);
    fclose (file);

    s_reader_result_t result = s_run_reader (path);
    cr_assert_eq (result.exit_code, 1, "read_events.py accepted a corrupt file: %s",
                  result.out);
    cr_assert (strstr (result.err, "bad data CRC"), "reader said: %s", result.err);
    s_reader_result_free (&result);
    free (bytes);
    free (path);
    free (dir);
}
