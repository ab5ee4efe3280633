/*  za_onnx.h: ONNX model files, written and read without protobuf's library:
    the few messages and fields of onnx.proto that zactor uses (ModelProto,
    GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto), by
    onnx.proto's field numbers, with a small protobuf encoder; and any ONNX
    file's initializers read back as named tensors (the weights a warm start
    takes from a PyTorch or Keras export).

    A model is built in order: inputs, initializers, nodes (each followed by
    its attributes), outputs, metadata; then saved. Every call after a
    failure (out of memory, a bad argument) does nothing, and save reports
    the first failure.                                                      */
#ifndef ZA_ONNX_H_INCLUDED
#define ZA_ONNX_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

//  What za_onnx_save writes: IR version 8 (ONNX 1.10 and later read it) and
//  the default domain's operator set 13.
#define ZA_ONNX_IR_VERSION 8
#define ZA_ONNX_OPSET 13
#define ZA_ONNX_MAX_DIMS 8

typedef struct za_onnx_t za_onnx_t;

//  A model whose graph is called graph_name; producer "zactor" `version`.
za_onnx_t *za_onnx_new (const char *graph_name, const char *version);
void za_onnx_destroy (za_onnx_t **self_p);

//  A float32 graph input or output of `shape`; a dimension < 0 is the
//  batch's, named "batch" (any size).
void za_onnx_input (za_onnx_t *self, const char *name, int ndim, const int64_t *shape);
void za_onnx_output (za_onnx_t *self, const char *name, int ndim, const int64_t *shape);

//  An initializer: float32 values (raw little-endian data, bit for bit) or
//  int64 ones (shapes, indices).
void za_onnx_initializer (za_onnx_t *self, const char *name, int ndim, const int64_t *shape,
                          const float *values);
void za_onnx_initializer_i64 (za_onnx_t *self, const char *name, int ndim,
                              const int64_t *shape, const int64_t *values);

//  A node of op_type `op` (default domain) named `name`, reading `inputs`
//  and writing `output`. The attributes that follow are its.
void za_onnx_node (za_onnx_t *self, const char *op, const char *name, int input_count,
                   const char *const *inputs, const char *output);
void za_onnx_attr_int (za_onnx_t *self, const char *name, int64_t value);
void za_onnx_attr_ints (za_onnx_t *self, const char *name, int count, const int64_t *values);
void za_onnx_attr_float (za_onnx_t *self, const char *name, float value);

//  A model's metadata_props entry, and its doc_string.
void za_onnx_meta (za_onnx_t *self, const char *key, const char *value);
void za_onnx_doc (za_onnx_t *self, const char *text);

//  Writes the model to path (a temporary file renamed over it). 0, or -1
//  with an error (the first failure while building, or the write's).
int za_onnx_save (za_onnx_t *self, const char *path);

//  The initializers of the ONNX file at path as named tensors: FLOAT,
//  FLOAT16, BFLOAT16 and DOUBLE ones as za_safetensors_floats converts them
//  (F32, F16, BF16, F64); INT64, INT32, INT8, UINT8 and BOOL listed (I64,
//  I32, I8, U8, BOOL); other types skipped. Data may be raw, in the typed
//  fields, or external (a file beside the model, named relative to its
//  folder). Metadata: "producer_name", "producer_version" and the model's
//  metadata_props. NULL with an error naming the file and the defect: not
//  protobuf, a truncated field, a tensor whose data is not its shape's, an
//  external file outside the model's folder.
za_safetensors_t *za_onnx_load_initializers (const char *path);

//  1 when path ends in ".onnx".
int za_onnx_named (const char *path);

#ifdef __cplusplus
}
#endif
#endif
