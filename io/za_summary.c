/*  za_summary.c: TensorBoard event files: Event protos with scalar summaries,
    encoded by hand and framed as TFRecords with masked CRC32C checksums.     */
#define _GNU_SOURCE                     //  gethostname, fileno
#include "za/za_summary.h"
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

//  TFRecord framing.
#define TFRECORD_LEN_BYTES 8
#define TFRECORD_CRC_BYTES 4
#define TFRECORD_HEAD_BYTES (TFRECORD_LEN_BYTES + TFRECORD_CRC_BYTES)
#define TFRECORD_MASK_DELTA 0xa282ead8u

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

struct _za_summary_writer_t {
    char *path;
    FILE *file;
    uint8_t *buffer;                    //  one record being encoded, reused
    size_t capacity;
    bool broken;                        //  a write failed: the file may be torn
};


//  --------------------------------------------------------------------------
//  CRC32C (Castagnoli), one table lookup per byte

//  s_crc32c_table [b] is the CRC register after shifting byte b through the
//  reflected polynomial 0x82F63B78 eight times.
static const uint32_t s_crc32c_table [256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu,
    0x26a1e7e8u, 0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu,
    0x4d43cfd0u, 0xbf284cd3u, 0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu,
    0xf165b798u, 0x030e349bu, 0xd7c45070u, 0x25afd373u, 0x36ff2087u, 0xc494a384u,
    0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u, 0x5d1d08bfu, 0xaf768bbcu,
    0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u, 0x33ed7d2au,
    0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau,
    0x30e349b1u, 0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu,
    0x1642ae59u, 0xe4292d5au, 0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au,
    0x7da08661u, 0x8fcb0562u, 0x9c9bf696u, 0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu,
    0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u, 0x67dafa54u, 0x95b17957u,
    0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu, 0xfe53516fu,
    0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu,
    0x3ac7f2ebu, 0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u,
    0x61c69362u, 0x93ad1061u, 0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu,
    0x4767748au, 0xb50cf789u, 0xeb1fcbadu, 0x197448aeu, 0x0a24bb5au, 0xf84f3859u,
    0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u, 0x7198540du, 0x83f3d70eu,
    0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u, 0xa55230e6u,
    0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu,
    0x456cac67u, 0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u,
    0xe9141340u, 0x1b7f9043u, 0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu,
    0x92a8fc17u, 0x60c37f14u, 0x73938ce0u, 0x81f80fe3u, 0x55326b08u, 0xa759e80bu,
    0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu, 0xf94ad42fu, 0x0b21572cu,
    0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u, 0x502036a5u,
    0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u,
    0x0e330a81u, 0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du,
    0x758fe5d6u, 0x87e466d5u, 0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u,
    0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u, 0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu,
    0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u, 0x0417b1dbu, 0xf67c32d8u,
    0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu, 0x5a048dffu,
    0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u,
    0x590ab964u, 0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u,
    0x7fab5e8cu, 0x8dc0dd8fu, 0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu,
    0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u, 0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u,
    0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u, 0x4f48173du, 0xbd23943eu,
    0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au, 0xc69f7b69u,
    0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

uint32_t
za_crc32c (const void *data, size_t size)
{
    const uint8_t *bytes = (const uint8_t *) data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < size; i++)
        crc = s_crc32c_table [(crc ^ bytes [i]) & 0xffu] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

uint32_t
za_crc32c_mask (uint32_t crc)
{
    //  Rotated and offset so that a CRC of data holding CRCs stays strong.
    return ((crc >> 15) | (crc << 17)) + TFRECORD_MASK_DELTA;
}


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
    size_t needed = TFRECORD_HEAD_BYTES + data_size + TFRECORD_CRC_BYTES;
    if (needed > self->capacity) {
        uint8_t *grown = (uint8_t *) realloc (self->buffer, needed);
        if (!grown) {
            za_error ("'%s': out of memory for a %zu-byte event", self->path, needed);
            return NULL;
        }
        self->buffer = grown;
        self->capacity = needed;
    }
    return self->buffer + TFRECORD_HEAD_BYTES;
}

//  Frames the data_size bytes of Event that s_record_begin's pointer got,
//  writes the record and flushes it.
static int
s_record_write (za_summary_writer_t *self, size_t data_size)
{
    uint8_t *head = self->buffer;
    s_put_le64 (head, (uint64_t) data_size);
    s_put_le32 (head + TFRECORD_LEN_BYTES, za_crc32c_mask (za_crc32c (head, TFRECORD_LEN_BYTES)));
    uint8_t *data = head + TFRECORD_HEAD_BYTES;
    s_put_le32 (data + data_size, za_crc32c_mask (za_crc32c (data, data_size)));

    size_t record_size = TFRECORD_HEAD_BYTES + data_size + TFRECORD_CRC_BYTES;
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

int
za_summary_scalars (za_summary_writer_t *self, int64_t step, const char *const *tags,
                    const double *values, int count)
{
    if (!self)
        return za_error ("summary: no writer");
    if (self->broken)
        return za_error ("'%s': an earlier write failed, the file is not written further",
                         self->path);
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
    size_t data_size = s_event_head_size (step) + s_len_field_size (summary_size);
    uint8_t *out = s_record_begin (self, data_size);
    if (!out)
        return -1;
    out = s_put_event_head (out, za_clock_wall (), step);
    out = s_put_len_field (out, EVENT_SUMMARY, NULL, summary_size);
    for (int i = 0; i < count; i++) {
        out = s_put_len_field (out, SUMMARY_VALUE, NULL, s_value_size (tags [i]));
        out = s_put_value (out, tags [i], values [i]);
    }
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
