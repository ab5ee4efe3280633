/*  za_tfrecord.h: TFRecord files, TensorFlow's record framing, and the
    tf.train.Example protobuf inside them (what a data set of images needs).

    A TFRecord file is a sequence of records, each:
      8 bytes  little-endian u64 length of the data
      4 bytes  little-endian u32 masked CRC32C of those 8 length bytes
      data
      4 bytes  little-endian u32 masked CRC32C of the data
    masked (crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, mod 2^32.
    A file may be GZIP-compressed as a whole (TFRecordOptions "GZIP"): the
    reader tells by its first bytes.

    tf.train.Example (tensorflow/core/example/example.proto, feature.proto):
      Example  { Features features = 1; }
      Features { map<string, Feature> feature = 1; }   entry: key 1, value 2
      Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                         Int64List int64_list = 3; } }
      BytesList { repeated bytes value = 1; }
      Int64List { repeated int64 value = 1 [packed]; }                      */
#ifndef ZA_TFRECORD_H_INCLUDED
#define ZA_TFRECORD_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_TFRECORD_LEN_BYTES 8
#define ZA_TFRECORD_CRC_BYTES 4
#define ZA_TFRECORD_HEAD_BYTES (ZA_TFRECORD_LEN_BYTES + ZA_TFRECORD_CRC_BYTES)
#define ZA_TFRECORD_MASK_DELTA 0xa282ead8u
//  A longer record is taken for a broken length.
#define ZA_TFRECORD_RECORD_MAX ((uint64_t) 1 << 30)

//  CRC32C (Castagnoli: polynomial 0x82F63B78 reflected, initial and final
//  value 0xFFFFFFFF) of size bytes. za_crc32c ("123456789", 9) == 0xe3069283.
uint32_t za_crc32c (const void *data, size_t size);

//  The masked CRC that TFRecord stores: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t za_crc32c_mask (uint32_t crc);

//  1 when the record's data (size bytes, followed by its 4 CRC bytes) is whole.
int za_tfrecord_data_ok (const uint8_t *data, size_t size);

//  A record's head for `size` bytes of data: the length and its masked CRC,
//  into head [ZA_TFRECORD_HEAD_BYTES].
void za_tfrecord_head (uint8_t *head, uint64_t size);

//  Reads the record at `offset` of fd (its length, checked; its data and
//  CRC) into *buffer (grown as needed, *capacity bytes): NULL and *size, or
//  why it cannot ("cut off", "a wrong length CRC", "a wrong data CRC",
//  "out of memory").
const char *za_tfrecord_read_at (int fd, uint64_t offset, uint8_t **buffer, size_t *capacity,
                                 size_t *size);

//  Reads a file's records in order.
typedef struct za_tfrecord_reader_t za_tfrecord_reader_t;

//  Opens path, plain or GZIP. NULL with an error naming it.
za_tfrecord_reader_t *za_tfrecord_reader_new (const char *path);
void za_tfrecord_reader_destroy (za_tfrecord_reader_t **self_p);

typedef enum {
    ZA_TFRECORD_END = 0,                //  no more records
    ZA_TFRECORD_OK = 1,                 //  a record
    ZA_TFRECORD_BAD = -1,               //  the data's CRC is wrong: this record
                                        //  is skipped, the next can be read
    ZA_TFRECORD_BROKEN = -2             //  the framing is broken (a length's CRC,
                                        //  a cut-off record, a read error): the
                                        //  rest of the file cannot be read
} za_tfrecord_status_t;

//  The next record: its data (valid until the next call), size and offset
//  (of its first length byte, in the uncompressed stream). BAD and BROKEN
//  leave why, naming the file and the offset, in za_tfrecord_error.
za_tfrecord_status_t za_tfrecord_next (za_tfrecord_reader_t *self, const uint8_t **data,
                                       size_t *size, uint64_t *offset);
//  The next record's size and offset, its length checked, its data skipped
//  unread (and unchecked): counting a plain file's records reads 12 bytes
//  each. END, OK or BROKEN as za_tfrecord_next.
za_tfrecord_status_t za_tfrecord_skip (za_tfrecord_reader_t *self, size_t *size,
                                       uint64_t *offset);
const char *za_tfrecord_error (const za_tfrecord_reader_t *self);
//  1 when the file is GZIP-compressed (its offsets cannot be read directly).
int za_tfrecord_compressed (const za_tfrecord_reader_t *self);

//  A feature of an Example: its list's kind and the list's bytes.
typedef enum {
    ZA_FEATURE_NONE = 0,
    ZA_FEATURE_BYTES = 1,
    ZA_FEATURE_FLOAT = 2,
    ZA_FEATURE_INT64 = 3
} za_feature_kind_t;

typedef struct {
    za_feature_kind_t kind;
    const uint8_t *list;                //  the BytesList / FloatList / Int64List
    size_t size;
} za_feature_t;

//  Finds the feature named key in a serialized Example: 1, 0 when it has
//  none, -1 when the bytes are not a valid Example.
int za_example_feature (const uint8_t *example, size_t size, const char *key,
                        za_feature_t *feature);
//  The first value of a BytesList feature: 0, or -1 (another kind, empty).
int za_feature_bytes (const za_feature_t *feature, const uint8_t **value, size_t *size);
//  The first value of an Int64List feature: 0, or -1 (another kind, empty).
int za_feature_int64 (const za_feature_t *feature, int64_t *value);

#ifdef __cplusplus
}
#endif
#endif
