/*  za_tfrecord.c: TFRecord files read in order (plain or GZIP, through
    zlib's gzread, which passes plain files through; ZLIB, TensorFlow's
    other compression, through inflate), their CRC32Cs, and the few
    protobuf rules a tf.train.Example needs.                                */
#define _GNU_SOURCE                     //  pread
#include "za/za_tfrecord.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define TFRECORD_ERROR_MAX 1024
#define GZ_BUFFER_BYTES (256 * 1024)

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
    return ((crc >> 15) | (crc << 17)) + ZA_TFRECORD_MASK_DELTA;
}


static uint64_t
s_get_le64 (const uint8_t *p)
{
    uint64_t value = 0;
    for (int i = 7; i >= 0; i--)
        value = value << 8 | p [i];
    return value;
}

static uint32_t
s_get_le32 (const uint8_t *p)
{
    return (uint32_t) p [0] | (uint32_t) p [1] << 8 | (uint32_t) p [2] << 16
         | (uint32_t) p [3] << 24;
}

int
za_tfrecord_data_ok (const uint8_t *data, size_t size)
{
    return s_get_le32 (data + size) == za_crc32c_mask (za_crc32c (data, size));
}

static void
s_put_le (uint8_t *p, uint64_t value, int bytes)
{
    for (int i = 0; i < bytes; i++, value >>= 8)
        p [i] = (uint8_t) value;
}

void
za_tfrecord_head (uint8_t *head, uint64_t size)
{
    s_put_le (head, size, ZA_TFRECORD_LEN_BYTES);
    s_put_le (head + ZA_TFRECORD_LEN_BYTES,
              za_crc32c_mask (za_crc32c (head, ZA_TFRECORD_LEN_BYTES)), ZA_TFRECORD_CRC_BYTES);
}

const char *
za_tfrecord_read_at (int fd, uint64_t offset, uint8_t **buffer, size_t *capacity,
                     size_t *size)
{
    uint8_t head [ZA_TFRECORD_HEAD_BYTES];
    if (pread (fd, head, sizeof head, (off_t) offset) != (ssize_t) sizeof head)
        return "cut off";
    uint64_t length = s_get_le64 (head);
    if (s_get_le32 (head + ZA_TFRECORD_LEN_BYTES)
        != za_crc32c_mask (za_crc32c (head, ZA_TFRECORD_LEN_BYTES))
        || length > ZA_TFRECORD_RECORD_MAX)
        return "a wrong length CRC";
    size_t needed = (size_t) length + ZA_TFRECORD_CRC_BYTES;
    if (needed > *capacity) {
        uint8_t *grown = realloc (*buffer, needed);
        if (!grown)
            return "out of memory";
        *buffer = grown;
        *capacity = needed;
    }
    if (pread (fd, *buffer, needed, (off_t) (offset + sizeof head)) != (ssize_t) needed)
        return "cut off";
    if (!za_tfrecord_data_ok (*buffer, (size_t) length))
        return "a wrong data CRC";
    *size = (size_t) length;
    return NULL;
}

//  --------------------------------------------------------------------------
//  The reader

struct za_tfrecord_reader_t {
    char *path;
    gzFile file;                        //  plain or GZIP; NULL for ZLIB:
    int fd;                             //  a ZLIB stream's file (-1: none),
    z_stream *zlib;                     //  its inflate,
    uint8_t *zlib_in;                   //  its input buffer
    int zlib_end;                       //  and whether its stream ended
    uint64_t offset;                    //  of the next record
    uint8_t *buffer;                    //  the last record's data and CRC
    size_t capacity;
    char error [TFRECORD_ERROR_MAX];
};

za_tfrecord_reader_t *
za_tfrecord_reader_new (const char *path)
{
    za_tfrecord_reader_t *self = calloc (1, sizeof *self);
    if (!self || !(self->path = strdup (path))) {
        free (self);
        za_error ("out of memory opening %s", path);
        return NULL;
    }
    //  TFRecordOptions ("ZLIB"): a zlib header (RFC 1950) where a plain
    //  file's first length and its CRC would be (which decide where both fit).
    self->fd = -1;
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    uint8_t head [ZA_TFRECORD_HEAD_BYTES] = {0};
    ssize_t got = fd < 0? -1: pread (fd, head, sizeof head, 0);
    int plain = got == (ssize_t) sizeof head
             && s_get_le32 (head + ZA_TFRECORD_LEN_BYTES)
                == za_crc32c_mask (za_crc32c (head, ZA_TFRECORD_LEN_BYTES));
    if (got >= 2 && !plain && (head [0] & 0x0f) == 8 && (head [0] >> 4) <= 7
        && ((head [0] << 8) | head [1]) % 31 == 0) {
        self->fd = fd;
        self->zlib = calloc (1, sizeof *self->zlib);
        self->zlib_in = malloc (GZ_BUFFER_BYTES);
        if (!self->zlib || !self->zlib_in || inflateInit (self->zlib) != Z_OK) {
            za_error ("%s: out of memory opening it", path);
            if (self->zlib && self->zlib_in)
                inflateEnd (self->zlib);
            free (self->zlib), self->zlib = NULL;
            za_tfrecord_reader_destroy (&self);
            return NULL;
        }
        return self;
    }
    if (fd >= 0)
        close (fd);
    errno = 0;
    self->file = gzopen (path, "rb");
    if (!self->file) {
        za_error ("%s: cannot open: %s", path, errno? strerror (errno): "out of memory");
        za_tfrecord_reader_destroy (&self);
        return NULL;
    }
    gzbuffer (self->file, GZ_BUFFER_BYTES);
    return self;
}

void
za_tfrecord_reader_destroy (za_tfrecord_reader_t **self_p)
{
    za_tfrecord_reader_t *self = *self_p;
    if (!self)
        return;
    if (self->file)
        gzclose (self->file);
    if (self->zlib)
        inflateEnd (self->zlib);
    if (self->fd >= 0)
        close (self->fd);
    free (self->zlib);
    free (self->zlib_in);
    free (self->buffer);
    free (self->path);
    free (self);
    *self_p = NULL;
}

//  Up to size bytes of a ZLIB stream into `into`: their count (0 at its
//  end), or -1 (the error says why).
static int
s_inflate (za_tfrecord_reader_t *self, uint8_t *into, unsigned size)
{
    z_stream *z = self->zlib;
    z->next_out = into;
    z->avail_out = size;
    while (z->avail_out > 0 && !self->zlib_end) {
        if (z->avail_in == 0) {
            ssize_t n = read (self->fd, self->zlib_in, GZ_BUFFER_BYTES);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                snprintf (self->error, sizeof self->error, "%s: the ZLIB stream %s%s at "
                          "offset %llu", self->path, n? "cannot be read: ": "is cut off",
                          n? strerror (errno): "", (unsigned long long) self->offset);
                return -1;
            }
            z->next_in = self->zlib_in;
            z->avail_in = (unsigned) n;
        }
        int rc = inflate (z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END)
            self->zlib_end = 1;
        else
        if (rc != Z_OK) {
            snprintf (self->error, sizeof self->error, "%s: the ZLIB stream does not "
                      "decompress at offset %llu: %s", self->path,
                      (unsigned long long) self->offset, z->msg? z->msg: "damaged");
            return -1;
        }
    }
    return (int) (size - z->avail_out);
}

//  Reads size bytes: 1, 0 at the end before any byte, -1 when cut off or
//  unreadable (the error says which).
static int
s_read (za_tfrecord_reader_t *self, uint8_t *into, size_t size, const char *what)
{
    size_t got = 0;
    while (got < size) {
        unsigned chunk = size - got > (1u << 30)? 1u << 30: (unsigned) (size - got);
        int n = self->zlib? s_inflate (self, into + got, chunk)
                          : gzread (self->file, into + got, chunk);
        if (n < 0 && self->zlib)
            return -1;
        if (n < 0) {
            int code;
            const char *why = gzerror (self->file, &code);
            snprintf (self->error, sizeof self->error, "%s: the %s at offset %llu cannot be "
                      "read: %s", self->path, what, (unsigned long long) self->offset,
                      code == Z_ERRNO? strerror (errno): why);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t) n;
    }
    if (got == size)
        return 1;
    if (got == 0 && !strcmp (what, "record"))
        return 0;
    snprintf (self->error, sizeof self->error, "%s: the %s at offset %llu is cut off "
              "(%zu of %zu bytes)", self->path, what, (unsigned long long) self->offset,
              got, size);
    return -1;
}

//  Reads and checks a record's head: 1 and its length, 0 at the end, or -1
//  (BROKEN, why in the error).
static int
s_head (za_tfrecord_reader_t *self, uint64_t *length)
{
    uint8_t head [ZA_TFRECORD_HEAD_BYTES];
    int rc = s_read (self, head, sizeof head, "record");
    if (rc <= 0)
        return rc;
    *length = s_get_le64 (head);
    if (s_get_le32 (head + ZA_TFRECORD_LEN_BYTES)
        != za_crc32c_mask (za_crc32c (head, ZA_TFRECORD_LEN_BYTES))) {
        snprintf (self->error, sizeof self->error, "%s: the record at offset %llu has a "
                  "wrong length CRC: the file is corrupt from there on", self->path,
                  (unsigned long long) self->offset);
        return -1;
    }
    if (*length > ZA_TFRECORD_RECORD_MAX) {
        snprintf (self->error, sizeof self->error, "%s: the record at offset %llu is "
                  "%llu bytes long, more than zactor reads", self->path,
                  (unsigned long long) self->offset, (unsigned long long) *length);
        return -1;
    }
    return 1;
}

za_tfrecord_status_t
za_tfrecord_skip (za_tfrecord_reader_t *self, size_t *size, uint64_t *offset)
{
    uint64_t length;
    int rc = s_head (self, &length);
    if (rc <= 0)
        return rc == 0? ZA_TFRECORD_END: ZA_TFRECORD_BROKEN;
    uint64_t next = self->offset + ZA_TFRECORD_HEAD_BYTES + length + ZA_TFRECORD_CRC_BYTES;
    //  Past the data and its CRC (a plain file's: a seek; a GZIP or ZLIB
    //  file's: decompressed and dropped).
    uint8_t drop [4096];
    for (uint64_t left = length + ZA_TFRECORD_CRC_BYTES; self->zlib && left > 0; ) {
        size_t piece = left < sizeof drop? (size_t) left: sizeof drop;
        if (s_read (self, drop, piece, "record's data") <= 0)
            return ZA_TFRECORD_BROKEN;
        left -= piece;
    }
    if (!self->zlib
        && gzseek (self->file, (z_off_t) (length + ZA_TFRECORD_CRC_BYTES), SEEK_CUR) < 0) {
        snprintf (self->error, sizeof self->error, "%s: cannot skip the record at offset "
                  "%llu", self->path, (unsigned long long) self->offset);
        return ZA_TFRECORD_BROKEN;
    }
    *size = (size_t) length;
    *offset = self->offset;
    self->offset = next;
    return ZA_TFRECORD_OK;
}

za_tfrecord_status_t
za_tfrecord_next (za_tfrecord_reader_t *self, const uint8_t **data, size_t *size,
                  uint64_t *offset)
{
    uint64_t length;
    int rc = s_head (self, &length);
    if (rc <= 0)
        return rc == 0? ZA_TFRECORD_END: ZA_TFRECORD_BROKEN;
    size_t needed = (size_t) length + ZA_TFRECORD_CRC_BYTES;
    if (needed > self->capacity) {
        uint8_t *grown = realloc (self->buffer, needed);
        if (!grown) {
            snprintf (self->error, sizeof self->error, "%s: out of memory reading a record "
                      "of %llu bytes", self->path, (unsigned long long) length);
            return ZA_TFRECORD_BROKEN;
        }
        self->buffer = grown;
        self->capacity = needed;
    }
    if (s_read (self, self->buffer, needed, "record's data") <= 0)
        return ZA_TFRECORD_BROKEN;
    *data = self->buffer;
    *size = (size_t) length;
    *offset = self->offset;
    self->offset += ZA_TFRECORD_HEAD_BYTES + needed;
    if (!za_tfrecord_data_ok (self->buffer, (size_t) length)) {
        snprintf (self->error, sizeof self->error, "%s: the record at offset %llu has a "
                  "wrong data CRC: it is skipped", self->path, (unsigned long long) *offset);
        return ZA_TFRECORD_BAD;
    }
    return ZA_TFRECORD_OK;
}

const char *
za_tfrecord_error (const za_tfrecord_reader_t *self)
{
    return self->error;
}

int
za_tfrecord_compressed (const za_tfrecord_reader_t *self)
{
    return self->zlib || !gzdirect (self->file);
}

//  --------------------------------------------------------------------------
//  Protobuf, as far as tf.train.Example goes

#define WIRE_VARINT 0
#define WIRE_FIXED64 1
#define WIRE_LEN 2
#define WIRE_FIXED32 5

//  A field of a message: its number, wire type, and value (a varint) or
//  bytes (a length-delimited one).
typedef struct {
    uint32_t number;
    int wire;
    uint64_t varint;
    const uint8_t *bytes;
    size_t size;
} s_field_t;

static int
s_varint (const uint8_t **p, const uint8_t *end, uint64_t *value)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return -1;
        uint8_t byte = *(*p)++;
        v |= (uint64_t) (byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return -1;
}

//  The next field at *p: 1, 0 at the end, -1 when malformed.
static int
s_next_field (const uint8_t **p, const uint8_t *end, s_field_t *field)
{
    if (*p >= end)
        return 0;
    uint64_t tag;
    if (s_varint (p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
        return -1;
    field->number = (uint32_t) (tag >> 3);
    field->wire = (int) (tag & 7);
    field->bytes = NULL;
    field->size = 0;
    switch (field->wire) {
        case WIRE_VARINT:
            return s_varint (p, end, &field->varint)? -1: 1;
        case WIRE_FIXED64:
        case WIRE_FIXED32: {
            size_t size = field->wire == WIRE_FIXED64? 8: 4;
            if ((size_t) (end - *p) < size)
                return -1;
            field->bytes = *p;
            field->size = size;
            *p += size;
            return 1;
        }
        case WIRE_LEN: {
            uint64_t size;
            if (s_varint (p, end, &size) || size > (uint64_t) (end - *p))
                return -1;
            field->bytes = *p;
            field->size = (size_t) size;
            *p += size;
            return 1;
        }
        default:
            return -1;                  //  groups are not in an Example
    }
}

//  The feature in one Features map entry, when its key is key: 1, 0, -1.
static int
s_map_entry (const uint8_t *entry, size_t size, const char *key, za_feature_t *feature)
{
    const uint8_t *p = entry, *end = entry + size;
    const uint8_t *value = NULL;
    size_t value_size = 0;
    int key_matches = 0, rc;
    s_field_t field;
    while ((rc = s_next_field (&p, end, &field)) == 1)
        if (field.number == 1 && field.wire == WIRE_LEN)
            key_matches = field.size == strlen (key) && !memcmp (field.bytes, key, field.size);
        else
        if (field.number == 2 && field.wire == WIRE_LEN)
            value = field.bytes, value_size = field.size;
    if (rc < 0)
        return -1;
    if (!key_matches)
        return 0;
    feature->kind = ZA_FEATURE_NONE;
    feature->list = NULL;
    feature->size = 0;
    if (!value)                 //  the key without a Feature: a feature of no kind
        return 1;
    p = value, end = value + value_size;
    while ((rc = s_next_field (&p, end, &field)) == 1)
        if (field.wire == WIRE_LEN && field.number >= 1 && field.number <= 3) {
            feature->kind = (za_feature_kind_t) field.number;
            feature->list = field.bytes;
            feature->size = field.size;
        }
    return rc < 0? -1: 1;
}

int
za_example_feature (const uint8_t *example, size_t size, const char *key,
                    za_feature_t *feature)
{
    const uint8_t *p = example, *end = example + size;
    s_field_t field;
    int rc, found = 0;
    while ((rc = s_next_field (&p, end, &field)) == 1) {
        if (field.number != 1 || field.wire != WIRE_LEN)
            continue;
        const uint8_t *q = field.bytes, *features_end = field.bytes + field.size;
        s_field_t entry;
        while ((rc = s_next_field (&q, features_end, &entry)) == 1)
            if (entry.number == 1 && entry.wire == WIRE_LEN) {
                int matched = s_map_entry (entry.bytes, entry.size, key, feature);
                if (matched < 0)
                    return -1;
                found |= matched;       //  a later entry of the key wins, as in protobuf
            }
        if (rc < 0)
            return -1;
    }
    return rc < 0? -1: found;
}

int
za_feature_bytes (const za_feature_t *feature, const uint8_t **value, size_t *size)
{
    if (feature->kind != ZA_FEATURE_BYTES)
        return -1;
    const uint8_t *p = feature->list, *end = feature->list + feature->size;
    s_field_t field;
    int rc;
    while ((rc = s_next_field (&p, end, &field)) == 1)
        if (field.number == 1 && field.wire == WIRE_LEN) {
            *value = field.bytes;
            *size = field.size;
            return 0;
        }
    return -1;
}

int
za_feature_int64 (const za_feature_t *feature, int64_t *value)
{
    if (feature->kind != ZA_FEATURE_INT64)
        return -1;
    const uint8_t *p = feature->list, *end = feature->list + feature->size;
    s_field_t field;
    int rc;
    while ((rc = s_next_field (&p, end, &field)) == 1) {
        if (field.number != 1)
            continue;
        uint64_t v;
        if (field.wire == WIRE_VARINT)
            v = field.varint;           //  unpacked
        else
        if (field.wire == WIRE_LEN) {   //  packed
            const uint8_t *q = field.bytes;
            if (field.size == 0 || s_varint (&q, field.bytes + field.size, &v))
                continue;
        }
        else
            continue;
        *value = (int64_t) v;
        return 0;
    }
    return -1;
}
