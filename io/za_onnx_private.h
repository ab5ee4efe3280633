/*  za_onnx_private.h: what io/za_onnx.c (the writer) and io/za_onnx_read.c
    (the reader) share: onnx.proto's field numbers and a growable buffer.
    Internal to io/; not installed.                                         */
#ifndef ZA_ONNX_PRIVATE_H_INCLUDED
#define ZA_ONNX_PRIVATE_H_INCLUDED

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

//  Protobuf's wire types.
enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

//  onnx.proto's field numbers (those used here).
enum {
    MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2, MODEL_PRODUCER_VERSION = 3,
    MODEL_DOC = 6, MODEL_GRAPH = 7, MODEL_OPSET_IMPORT = 8, MODEL_METADATA = 14,
    OPSET_VERSION = 2,
    ENTRY_KEY = 1, ENTRY_VALUE = 2,
    GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11,
    GRAPH_OUTPUT = 12,
    NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
    ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20,
    TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_FLOAT_DATA = 4, TENSOR_INT32_DATA = 5,
    TENSOR_INT64_DATA = 7, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9, TENSOR_DOUBLE_DATA = 10,
    TENSOR_EXTERNAL_DATA = 13, TENSOR_DATA_LOCATION = 14,
    VALUE_NAME = 1, VALUE_TYPE = 2,
    TYPE_TENSOR = 1, TYPE_TENSOR_ELEM_TYPE = 1, TYPE_TENSOR_SHAPE = 2,
    SHAPE_DIM = 1, DIM_VALUE = 1, DIM_PARAM = 2
};

//  AttributeProto.AttributeType and TensorProto.DataType.
enum { ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_INTS_TYPE = 7 };
enum {
    ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_INT32 = 6, ONNX_INT64 = 7,
    ONNX_BOOL = 9, ONNX_FLOAT16 = 10, ONNX_DOUBLE = 11, ONNX_BFLOAT16 = 16
};

//  A growable byte buffer: a message being written, or values being read.
typedef struct {
    uint8_t *data;
    size_t size, capacity;
    int failed;                         //  1: out of memory once; nothing added since
} s_buf_t;

static inline void
s_buf_put (s_buf_t *buf, const void *bytes, size_t size)
{
    if (buf->failed || !size)
        return;
    if (buf->size + size > buf->capacity) {
        size_t capacity = buf->capacity? buf->capacity: 256;
        while (capacity < buf->size + size)
            capacity *= 2;
        uint8_t *grown = realloc (buf->data, capacity);
        if (!grown) {
            buf->failed = 1;
            return;
        }
        buf->data = grown;
        buf->capacity = capacity;
    }
    memcpy (buf->data + buf->size, bytes, size);
    buf->size += size;
}

#endif
