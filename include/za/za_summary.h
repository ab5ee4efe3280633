/*  za_summary.h: TensorBoard event files (events.out.tfevents.*) with scalar
    summaries, written by a small encoder of our own: no protobuf library.

    File: <dir>/events.out.tfevents.<unix seconds>.<hostname>[.N], a sequence of
    TFRecords, one per Event:
      8 bytes  little-endian u64 length of the data
      4 bytes  little-endian u32 masked CRC32C of those 8 length bytes
      data     the Event, serialized as protobuf (tensorflow/core/util/event.proto)
      4 bytes  little-endian u32 masked CRC32C of the data
    masked (crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, mod 2^32.
    Event:   1 wall_time double, 2 step int64, 3 file_version string, 5 summary.
    Summary: repeated 1 value; Summary.Value: 1 tag string, 2 simple_value float
    or 4 image (Summary.Image: 1 height, 2 width, 3 colorspace, 4 the PNG).
    The first Event of every file is {wall_time, file_version: "brain.Event:2"}.
    Fields at their proto3 default (step 0, tag "") are left out, as TensorFlow's
    own serializer does, so the bytes are the canonical encoding.             */
#ifndef ZA_SUMMARY_H_INCLUDED
#define ZA_SUMMARY_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_tfrecord.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_SUMMARY_FILE_PREFIX "events.out.tfevents."
#define ZA_SUMMARY_FILE_VERSION "brain.Event:2"
//  The most scalars za_summary_scalars takes in one Event.
#define ZA_SUMMARY_MAX_SCALARS 64

typedef struct _za_summary_writer_t za_summary_writer_t;

//  Opens a new event file in dir (created with its missing parents, like
//  mkdir -p) and writes the file_version event. The name is
//  events.out.tfevents.<unix seconds>.<hostname>; when that file exists (two
//  writers in one second) ".1", ".2", ... is appended: an existing file is never
//  opened or truncated. Returns NULL with za_error on failure (dir cannot be
//  created, file cannot be created or written). Destroy with
//  za_summary_writer_destroy.
za_summary_writer_t *za_summary_writer_new (const char *dir);

//  Appends one Event {wall_time: now, step, summary: {value: {tag,
//  simple_value: (float) value}}} and fflushes it, so a reader sees it at once.
//  tag must not be NULL. Returns 0, or -1 with za_error (a NULL argument, a
//  write error). After a write error the file may end in a torn record, so the
//  writer refuses every later call with -1.
int za_summary_scalar (za_summary_writer_t *self, const char *tag, int64_t step, double value);

//  Appends an image summary: Summary.Value {tag, image: Summary.Image
//  {height, width, colorspace (1 gray, 3 RGB, 4 RGBA), encoded_image_string:
//  the PNG's bytes}}, what TensorBoard's Images tab shows. 0, or -1 with an
//  error.
int za_summary_image (za_summary_writer_t *self, const char *tag, int64_t step,
                      const uint8_t *png, size_t size, int width, int height, int colorspace);

//  As za_summary_scalar with count scalars in one Event: tags [i] with
//  values [i], in that order. 1 <= count <= ZA_SUMMARY_MAX_SCALARS, no tag NULL;
//  otherwise -1 with za_error and nothing is written.
int za_summary_scalars (za_summary_writer_t *self, int64_t step, const char *const *tags,
                        const double *values, int count);

//  The event file's path, owned by the writer, valid until it is destroyed.
const char *za_summary_writer_path (const za_summary_writer_t *self);

//  1 when a write failed and the file could not be cut back to its last
//  whole record: it is written no further (start a new writer).
int za_summary_writer_broken (const za_summary_writer_t *self);

//  Flushes, fsyncs and closes the file, frees the writer and sets *self_p to
//  NULL. Safe on NULL and on a NULL *self_p. A failing fsync or close is
//  reported with za_error (the writer is freed anyway).
void za_summary_writer_destroy (za_summary_writer_t **self_p);

//  za_crc32c and za_crc32c_mask: za_tfrecord.h.

#ifdef __cplusplus
}
#endif
#endif
