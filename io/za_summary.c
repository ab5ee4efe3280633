/*  za_summary.c: TensorBoard event files: Event protos with scalar summaries,
    encoded by hand and framed as TFRecords with masked CRC32C checksums.     */
#define _GNU_SOURCE                     //  gethostname, fileno
#include "za/za_summary.h"
#include "za/za_tfrecord.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUMMARY_FILE_MODE 0644
#define SUMMARY_MAX_NAME_SUFFIX 9999    //  ".1" ... ".9999" for one second's name
#define SUMMARY_HOSTNAME_MAX_CHARS 256
#define SUMMARY_FALLBACK_HOSTNAME "localhost"


//  Protobuf wire format (what this file needs of it).
#define PB_WIRE_VARINT 0
#define PB_WIRE_FIXED64 1
#define PB_WIRE_LEN 2
#define PB_WIRE_FIXED32 5
#define PB_VARINT_MAX_BYTES 10          //  a negative int64 takes all 10
#define PB_KEY(field, wire) ((uint8_t) (((field) << 3) | (wire)))

//  event.proto field numbers.
#define EVENT_WALL_TIME 1
#define EVENT_STEP 2
#define EVENT_FILE_VERSION 3
#define EVENT_SUMMARY 5
#define SUMMARY_VALUE 1
#define VALUE_TAG 1
#define VALUE_SIMPLE_VALUE 2
#define VALUE_IMAGE 4
#define IMAGE_HEIGHT 1
#define IMAGE_WIDTH 2
#define IMAGE_COLORSPACE 3
#define IMAGE_ENCODED 4

struct _za_summary_writer_t {
    char *path;
    FILE *file;
    uint8_t *buffer;                    //  one record being encoded, reused
    size_t capacity;
    bool broken;                        //  a write failed: the file may be torn
};


//  --------------------------------------------------------------------------
//  Protobuf encoding into a buffer sized beforehand

static size_t
s_varint_size (uint64_t value)
{
    size_t size = 1;
    while (value >= 0x80) {
        value >>= 7;
        size++;
    }
    return size;
}

static uint8_t *
s_put_varint (uint8_t *out, uint64_t value)
{
    while (value >= 0x80) {
        *out++ = (uint8_t) (value | 0x80);
        value >>= 7;
    }
    *out++ = (uint8_t) value;
    return out;
}

static uint8_t *
s_put_le32 (uint8_t *out, uint32_t value)
{
    for (int i = 0; i < 4; i++)
        *out++ = (uint8_t) (value >> (8 * i));
    return out;
}

static uint8_t *
s_put_le64 (uint8_t *out, uint64_t value)
{
    for (int i = 0; i < 8; i++)
        *out++ = (uint8_t) (value >> (8 * i));
    return out;
}

//  Size of a length-delimited field (key, length, payload); keys here are 1 byte.
static size_t
s_len_field_size (size_t payload_size)
{
    return 1 + s_varint_size (payload_size) + payload_size;
}

static uint8_t *
s_put_len_field (uint8_t *out, int field, const void *payload, size_t payload_size)
{
    *out++ = PB_KEY (field, PB_WIRE_LEN);
    out = s_put_varint (out, payload_size);
    if (payload_size > 0 && payload)
        memcpy (out, payload, payload_size);
    return out + (payload ? payload_size : 0);
}

//  Summary.Value {tag, simple_value}; an empty tag is the proto3 default, left out.
static size_t
s_value_size (const char *tag)
{
    size_t tag_len = strlen (tag);
    return (tag_len > 0? s_len_field_size (tag_len): 0) + 1 + sizeof (float);
}

static uint8_t *
s_put_value (uint8_t *out, const char *tag, double value)
{
    size_t tag_len = strlen (tag);
    if (tag_len > 0)
        out = s_put_len_field (out, VALUE_TAG, tag, tag_len);
    *out++ = PB_KEY (VALUE_SIMPLE_VALUE, PB_WIRE_FIXED32);
    float simple_value = (float) value;
    uint32_t bits;
    memcpy (&bits, &simple_value, sizeof bits);
    return s_put_le32 (out, bits);
}

//  Event fields 1 and 2: wall_time always, step when not 0 (proto3 default).
static size_t
s_event_head_size (int64_t step)
{
    return 1 + sizeof (double) + (step != 0? 1 + s_varint_size ((uint64_t) step): 0);
}

static uint8_t *
s_put_event_head (uint8_t *out, double wall_time, int64_t step)
{
    *out++ = PB_KEY (EVENT_WALL_TIME, PB_WIRE_FIXED64);
    uint64_t bits;
    memcpy (&bits, &wall_time, sizeof bits);
    out = s_put_le64 (out, bits);
    if (step != 0) {
        *out++ = PB_KEY (EVENT_STEP, PB_WIRE_VARINT);
        //  int64 is a plain varint of the two's complement: negative takes 10 bytes.
        out = s_put_varint (out, (uint64_t) step);
    }
    return out;
}


//  --------------------------------------------------------------------------
//  Records

//  Makes room for a record whose Event takes data_size bytes; returns a pointer
//  to where the Event goes, or NULL with an error.
static uint8_t *
s_record_begin (za_summary_writer_t *self, size_t data_size)
{
    size_t needed = ZA_TFRECORD_HEAD_BYTES + data_size + ZA_TFRECORD_CRC_BYTES;
    if (needed > self->capacity) {
        uint8_t *grown = (uint8_t *) realloc (self->buffer, needed);
        if (!grown) {
            za_error ("'%s': out of memory for a %zu-byte event", self->path, needed);
            return NULL;
        }
        self->buffer = grown;
        self->capacity = needed;
    }
    return self->buffer + ZA_TFRECORD_HEAD_BYTES;
}

//  Frames the data_size bytes of Event that s_record_begin's pointer got,
//  writes the record and flushes it.
static int
s_record_write (za_summary_writer_t *self, size_t data_size)
{
    uint8_t *head = self->buffer;
    za_tfrecord_head (head, (uint64_t) data_size);
    uint8_t *data = head + ZA_TFRECORD_HEAD_BYTES;
    s_put_le32 (data + data_size, za_crc32c_mask (za_crc32c (data, data_size)));

    size_t record_size = ZA_TFRECORD_HEAD_BYTES + data_size + ZA_TFRECORD_CRC_BYTES;
    long before = ftell (self->file);
    if (fwrite (head, 1, record_size, self->file) != record_size
    ||  fflush (self->file) != 0) {
        int err = errno;
        //  A full disk: what part of the record got out is cut off again,
        //  and what stdio still holds is thrown away, so the file ends on a
        //  whole record and the next write may succeed. Else it is torn.
        __fpurge (self->file);
        clearerr (self->file);
        if (before < 0 || ftruncate (fileno (self->file), before)
            || fseek (self->file, before, SEEK_SET))
            self->broken = true;
        return za_error ("'%s': cannot write event: %s", self->path, strerror (err));
    }
    return 0;
}

static int
s_write_file_version (za_summary_writer_t *self, double wall_time)
{
    size_t version_len = strlen (ZA_SUMMARY_FILE_VERSION);
    size_t data_size = s_event_head_size (0) + s_len_field_size (version_len);
    uint8_t *out = s_record_begin (self, data_size);
    if (!out)
        return -1;
    out = s_put_event_head (out, wall_time, 0);
    s_put_len_field (out, EVENT_FILE_VERSION, ZA_SUMMARY_FILE_VERSION, version_len);
    return s_record_write (self, data_size);
}


//  --------------------------------------------------------------------------
//  Files

//  Creates a file that did not exist: <dir>/events.out.tfevents.<seconds>.<host>,
//  else the same with ".1", ".2", ... O_EXCL makes the check and the creation
//  one step, so two writers in one second (or two processes) never share a file.
//  Returns the open descriptor and the path in *path_p (caller frees), or -1.
static int
s_create_event_file (const char *dir, long long seconds, char **path_p)
{
    char hostname [SUMMARY_HOSTNAME_MAX_CHARS + 1] = "";
    if (gethostname (hostname, SUMMARY_HOSTNAME_MAX_CHARS) != 0 || hostname [0] == 0)
        snprintf (hostname, sizeof hostname, "%s", SUMMARY_FALLBACK_HOSTNAME);
    hostname [SUMMARY_HOSTNAME_MAX_CHARS] = 0;

    for (int suffix = 0; suffix <= SUMMARY_MAX_NAME_SUFFIX; suffix++) {
        char *path = NULL;
        int chars = suffix == 0
            ? asprintf (&path, "%s/%s%010lld.%s", dir, ZA_SUMMARY_FILE_PREFIX, seconds, hostname)
            : asprintf (&path, "%s/%s%010lld.%s.%d", dir, ZA_SUMMARY_FILE_PREFIX, seconds,
                        hostname, suffix);
        if (chars < 0)
            return za_error ("out of memory naming an event file in '%s'", dir);
        int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SUMMARY_FILE_MODE);
        if (fd >= 0) {
            *path_p = path;
            return fd;
        }
        int open_errno = errno;
        if (open_errno != EEXIST) {
            za_error ("'%s': cannot create event file: %s", path, strerror (open_errno));
            free (path);
            return -1;
        }
        free (path);
    }
    return za_error ("'%s': more than %d event files for second %lld", dir,
                     SUMMARY_MAX_NAME_SUFFIX, seconds);
}


//  --------------------------------------------------------------------------
//  Public API

za_summary_writer_t *
za_summary_writer_new (const char *dir)
{
    if (!dir || !*dir) {
        za_error ("summary writer: no directory given");
        return NULL;
    }
    if (za_mkdirs (dir))
        return NULL;
    za_summary_writer_t *self = (za_summary_writer_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory creating a summary writer");
        return NULL;
    }
    //  One clock reading names the file and stamps its first event, as TensorFlow does.
    double wall_time = za_clock_wall ();
    int fd = s_create_event_file (dir, (long long) floor (wall_time), &self->path);
    if (fd < 0) {
        free (self);
        return NULL;
    }
    self->file = fdopen (fd, "wb");
    if (!self->file) {
        za_error ("'%s': cannot open event file: %s", self->path, strerror (errno));
        close (fd);
        unlink (self->path);
        free (self->path);
        free (self);
        return NULL;
    }
    if (s_write_file_version (self, wall_time)) {
        //  A full disk: no empty file left behind per try.
        unlink (self->path);
        za_summary_writer_destroy (&self);
        return NULL;
    }
    return self;
}

int
za_summary_writer_broken (const za_summary_writer_t *self)
{
    return self && self->broken;
}

//  0 when self takes another event, else -1 with an error.
static int
s_writable (za_summary_writer_t *self)
{
    if (!self)
        return za_error ("summary: no writer");
    if (self->broken)
        return za_error ("'%s': an earlier write failed, the file is not written further",
                         self->path);
    return 0;
}

//  Begins a record of one Event {wall_time, step, summary} whose Summary
//  takes summary_size bytes: returns where its values go (NULL with an
//  error) and the Event's size in *data_size.
static uint8_t *
s_summary_begin (za_summary_writer_t *self, int64_t step, size_t summary_size,
                 size_t *data_size)
{
    *data_size = s_event_head_size (step) + s_len_field_size (summary_size);
    uint8_t *out = s_record_begin (self, *data_size);
    if (!out)
        return NULL;
    out = s_put_event_head (out, za_clock_wall (), step);
    return s_put_len_field (out, EVENT_SUMMARY, NULL, summary_size);
}

int
za_summary_scalars (za_summary_writer_t *self, int64_t step, const char *const *tags,
                    const double *values, int count)
{
    if (s_writable (self))
        return -1;
    if (count < 1 || count > ZA_SUMMARY_MAX_SCALARS)
        return za_error ("'%s': %d scalars in one event, want 1 to %d", self->path, count,
                         ZA_SUMMARY_MAX_SCALARS);
    if (!tags || !values)
        return za_error ("'%s': no tags or no values given", self->path);

    size_t summary_size = 0;
    for (int i = 0; i < count; i++) {
        if (!tags [i])
            return za_error ("'%s': scalar %d has no tag", self->path, i);
        summary_size += s_len_field_size (s_value_size (tags [i]));
    }
    size_t data_size;
    uint8_t *out = s_summary_begin (self, step, summary_size, &data_size);
    if (!out)
        return -1;
    for (int i = 0; i < count; i++) {
        out = s_put_len_field (out, SUMMARY_VALUE, NULL, s_value_size (tags [i]));
        out = s_put_value (out, tags [i], values [i]);
    }
    return s_record_write (self, data_size);
}

//  Summary.Image {height, width, colorspace, encoded_image_string}.
static size_t
s_image_size (int width, int height, int colorspace, size_t size)
{
    return 1 + s_varint_size ((uint64_t) height) + 1 + s_varint_size ((uint64_t) width)
         + 1 + s_varint_size ((uint64_t) colorspace) + s_len_field_size (size);
}

int
za_summary_image (za_summary_writer_t *self, const char *tag, int64_t step,
                  const uint8_t *png, size_t size, int width, int height, int colorspace)
{
    if (s_writable (self))
        return -1;
    if (!tag || !*tag || !png || size == 0 || width < 1 || height < 1 || colorspace < 1
        || colorspace > 4)
        return za_error ("'%s': an image needs a tag, its bytes, a size and 1 to 4 channels",
                         self->path);
    size_t tag_len = strlen (tag);
    size_t image_size = s_image_size (width, height, colorspace, size);
    size_t value_size = s_len_field_size (tag_len) + s_len_field_size (image_size);
    size_t summary_size = s_len_field_size (value_size);
    size_t data_size;
    uint8_t *out = s_summary_begin (self, step, summary_size, &data_size);
    if (!out)
        return -1;
    out = s_put_len_field (out, SUMMARY_VALUE, NULL, value_size);
    out = s_put_len_field (out, VALUE_TAG, tag, tag_len);
    out = s_put_len_field (out, VALUE_IMAGE, NULL, image_size);
    *out++ = PB_KEY (IMAGE_HEIGHT, PB_WIRE_VARINT);
    out = s_put_varint (out, (uint64_t) height);
    *out++ = PB_KEY (IMAGE_WIDTH, PB_WIRE_VARINT);
    out = s_put_varint (out, (uint64_t) width);
    *out++ = PB_KEY (IMAGE_COLORSPACE, PB_WIRE_VARINT);
    out = s_put_varint (out, (uint64_t) colorspace);
    s_put_len_field (out, IMAGE_ENCODED, png, size);
    return s_record_write (self, data_size);
}

int
za_summary_scalar (za_summary_writer_t *self, const char *tag, int64_t step, double value)
{
    return za_summary_scalars (self, step, &tag, &value, 1);
}

const char *
za_summary_writer_path (const za_summary_writer_t *self)
{
    return self? self->path: NULL;
}

void
za_summary_writer_destroy (za_summary_writer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_summary_writer_t *self = *self_p;
    if (self->file) {
        if (fflush (self->file) != 0 || fsync (fileno (self->file)) != 0)
            za_error ("'%s': cannot flush event file to disk: %s", self->path,
                      strerror (errno));
        if (fclose (self->file) != 0)
            za_error ("'%s': cannot close event file: %s", self->path, strerror (errno));
    }
    free (self->buffer);
    free (self->path);
    free (self);
    *self_p = NULL;
}
