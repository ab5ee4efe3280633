/*  za_onnx.c: ONNX files written by onnx.proto's field numbers: each
    message is a byte buffer, a nested one written into its parent as a
    length-delimited field (the reader is za_onnx_read.c).                  */
#include "za/za_onnx.h"
#include "za/za_util.h"
#include "za_onnx_private.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PATH_CHARS 4096
#define NAME_CHARS 1024

// ---------------------------------------------------------------------------
//  Writing

struct za_onnx_t {
    char *graph_name, *version;
    s_buf_t nodes, initializers, inputs, outputs, meta, doc;
    s_buf_t node;                       //  the node being built
    int failed;                         //  -1 after the first failure (reported)
};

static void
s_put (za_onnx_t *self, s_buf_t *buf, const void *bytes, size_t size)
{
    if (self->failed)
        return;
    s_buf_put (buf, bytes, size);
    if (buf->failed)
        self->failed = za_error ("onnx: out of memory building the model");
}

//  A varint's bytes into out [10]; returns how many.
static int
s_varint_bytes (uint64_t value, uint8_t *out)
{
    int n = 0;
    do {
        out [n] = (uint8_t) (value & 0x7f);
        value >>= 7;
        if (value)
            out [n] |= 0x80;
        n++;
    } while (value);
    return n;
}

static void
s_varint (za_onnx_t *self, s_buf_t *buf, uint64_t value)
{
    uint8_t bytes [10];
    s_put (self, buf, bytes, (size_t) s_varint_bytes (value, bytes));
}

static void
s_key (za_onnx_t *self, s_buf_t *buf, int field, int wire)
{
    s_varint (self, buf, (uint64_t) field << 3 | (uint64_t) wire);
}

static void
s_field_int (za_onnx_t *self, s_buf_t *buf, int field, int64_t value)
{
    s_key (self, buf, field, WIRE_VARINT);
    s_varint (self, buf, (uint64_t) value);
}

static void
s_field_bytes (za_onnx_t *self, s_buf_t *buf, int field, const void *bytes, size_t size)
{
    s_key (self, buf, field, WIRE_LEN);
    s_varint (self, buf, size);
    s_put (self, buf, bytes, size);
}

static void
s_field_string (za_onnx_t *self, s_buf_t *buf, int field, const char *text)
{
    s_field_bytes (self, buf, field, text, strlen (text));
}

//  A nested message, which is then emptied.
static void
s_field_message (za_onnx_t *self, s_buf_t *buf, int field, s_buf_t *message)
{
    s_field_bytes (self, buf, field, message->data, message->size);
    message->size = 0;
}

za_onnx_t *
za_onnx_new (const char *graph_name, const char *version)
{
    za_onnx_t *self = calloc (1, sizeof *self);
    if (self) {
        self->graph_name = strdup (graph_name);
        self->version = strdup (version);
    }
    if (!self || !self->graph_name || !self->version) {
        za_onnx_destroy (&self);
        za_error ("out of memory");
    }
    return self;
}

void
za_onnx_destroy (za_onnx_t **self_p)
{
    za_onnx_t *self = *self_p;
    if (!self)
        return;
    s_buf_t *bufs [] = {&self->nodes, &self->initializers, &self->inputs, &self->outputs,
                        &self->meta, &self->doc, &self->node};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs [0]; k++)
        free (bufs [k]->data);
    free (self->graph_name);
    free (self->version);
    free (self);
    *self_p = NULL;
}

//  Checks a shape's rank. 0, or -1 (reported once).
static int
s_rank_ok (za_onnx_t *self, const char *name, int ndim)
{
    if (!self->failed && (ndim < 0 || ndim > ZA_ONNX_MAX_DIMS))
        self->failed = za_error ("onnx: '%s' has %d dims (at most %d)", name, ndim,
                                 ZA_ONNX_MAX_DIMS);
    return self->failed;
}

//  A ValueInfoProto of a float tensor into buf.
static void
s_value_info (za_onnx_t *self, s_buf_t *buf, int field, const char *name, int ndim,
              const int64_t *shape)
{
    if (s_rank_ok (self, name, ndim))
        return;
    s_buf_t dims = {0}, dim = {0}, tensor = {0}, type = {0}, value = {0};
    for (int d = 0; d < ndim; d++) {
        if (shape [d] < 0)
            s_field_string (self, &dim, DIM_PARAM, "batch");
        else
            s_field_int (self, &dim, DIM_VALUE, shape [d]);
        s_field_message (self, &dims, SHAPE_DIM, &dim);
    }
    s_field_int (self, &tensor, TYPE_TENSOR_ELEM_TYPE, ONNX_FLOAT);
    s_field_message (self, &tensor, TYPE_TENSOR_SHAPE, &dims);
    s_field_message (self, &type, TYPE_TENSOR, &tensor);
    s_field_string (self, &value, VALUE_NAME, name);
    s_field_message (self, &value, VALUE_TYPE, &type);
    s_field_message (self, buf, field, &value);
    free (dims.data), free (dim.data), free (tensor.data), free (type.data), free (value.data);
}

void
za_onnx_input (za_onnx_t *self, const char *name, int ndim, const int64_t *shape)
{
    s_value_info (self, &self->inputs, GRAPH_INPUT, name, ndim, shape);
}

void
za_onnx_output (za_onnx_t *self, const char *name, int ndim, const int64_t *shape)
{
    s_value_info (self, &self->outputs, GRAPH_OUTPUT, name, ndim, shape);
}

//  A TensorProto of raw little-endian data into the initializers.
static void
s_initializer (za_onnx_t *self, const char *name, int type, int ndim, const int64_t *shape,
               const void *data, size_t element_size)
{
    if (s_rank_ok (self, name, ndim))
        return;
    size_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= (size_t) shape [d];
    s_buf_t tensor = {0};
    for (int d = 0; d < ndim; d++)
        s_field_int (self, &tensor, TENSOR_DIMS, shape [d]);
    s_field_int (self, &tensor, TENSOR_DATA_TYPE, type);
    s_field_string (self, &tensor, TENSOR_NAME, name);
    s_field_bytes (self, &tensor, TENSOR_RAW_DATA, data, count * element_size);
    s_field_message (self, &self->initializers, GRAPH_INITIALIZER, &tensor);
    free (tensor.data);
}

void
za_onnx_initializer (za_onnx_t *self, const char *name, int ndim, const int64_t *shape,
                     const float *values)
{
    s_initializer (self, name, ONNX_FLOAT, ndim, shape, values, sizeof *values);
}

void
za_onnx_initializer_i64 (za_onnx_t *self, const char *name, int ndim, const int64_t *shape,
                         const int64_t *values)
{
    s_initializer (self, name, ONNX_INT64, ndim, shape, values, sizeof *values);
}

//  The node being built, into the graph.
static void
s_node_end (za_onnx_t *self)
{
    if (self->node.size)
        s_field_message (self, &self->nodes, GRAPH_NODE, &self->node);
}

void
za_onnx_node (za_onnx_t *self, const char *op, const char *name, int input_count,
              const char *const *inputs, const char *output)
{
    s_node_end (self);
    for (int k = 0; k < input_count; k++)
        s_field_string (self, &self->node, NODE_INPUT, inputs [k]);
    s_field_string (self, &self->node, NODE_OUTPUT, output);
    s_field_string (self, &self->node, NODE_NAME, name);
    s_field_string (self, &self->node, NODE_OP_TYPE, op);
}

//  An AttributeProto of the node being built (the caller adds its value).
static void
s_attr (za_onnx_t *self, s_buf_t *attr, const char *name, int type)
{
    if (!self->failed && !self->node.size)
        self->failed = za_error ("onnx: attribute '%s' before any node", name);
    s_field_string (self, attr, ATTR_NAME, name);
    s_field_int (self, attr, ATTR_TYPE, type);
}

void
za_onnx_attr_int (za_onnx_t *self, const char *name, int64_t value)
{
    s_buf_t attr = {0};
    s_attr (self, &attr, name, ATTR_INT);
    s_field_int (self, &attr, ATTR_I, value);
    s_field_message (self, &self->node, NODE_ATTRIBUTE, &attr);
    free (attr.data);
}

void
za_onnx_attr_ints (za_onnx_t *self, const char *name, int count, const int64_t *values)
{
    s_buf_t attr = {0};
    s_attr (self, &attr, name, ATTR_INTS_TYPE);
    for (int k = 0; k < count; k++)
        s_field_int (self, &attr, ATTR_INTS, values [k]);
    s_field_message (self, &self->node, NODE_ATTRIBUTE, &attr);
    free (attr.data);
}

void
za_onnx_attr_float (za_onnx_t *self, const char *name, float value)
{
    s_buf_t attr = {0};
    s_attr (self, &attr, name, ATTR_FLOAT);
    s_key (self, &attr, ATTR_F, WIRE_I32);
    s_put (self, &attr, &value, sizeof value);
    s_field_message (self, &self->node, NODE_ATTRIBUTE, &attr);
    free (attr.data);
}

void
za_onnx_meta (za_onnx_t *self, const char *key, const char *value)
{
    s_buf_t entry = {0};
    s_field_string (self, &entry, ENTRY_KEY, key);
    s_field_string (self, &entry, ENTRY_VALUE, value);
    s_field_message (self, &self->meta, MODEL_METADATA, &entry);
    free (entry.data);
}

void
za_onnx_doc (za_onnx_t *self, const char *text)
{
    self->doc.size = 0;
    s_field_string (self, &self->doc, MODEL_DOC, text);
}

//  Writes size bytes; 0, or -1 (errno).
static int
s_write (FILE *file, const void *bytes, size_t size)
{
    return size && fwrite (bytes, 1, size, file) != size? -1: 0;
}

int
za_onnx_save (za_onnx_t *self, const char *path)
{
    s_node_end (self);
    s_buf_t head = {0}, opset = {0}, name = {0};
    s_field_int (self, &head, MODEL_IR_VERSION, ZA_ONNX_IR_VERSION);
    s_field_string (self, &head, MODEL_PRODUCER_NAME, "zactor");
    s_field_string (self, &head, MODEL_PRODUCER_VERSION, self->version);
    s_put (self, &head, self->doc.data, self->doc.size);
    s_field_int (self, &opset, OPSET_VERSION, ZA_ONNX_OPSET);
    s_field_message (self, &head, MODEL_OPSET_IMPORT, &opset);
    s_put (self, &head, self->meta.data, self->meta.size);
    //  The graph, written in pieces after its key and length.
    s_field_string (self, &name, GRAPH_NAME, self->graph_name);
    const s_buf_t *parts [] = {&self->nodes, &name, &self->initializers, &self->inputs,
                               &self->outputs};
    size_t graph_size = 0;
    for (size_t k = 0; k < sizeof parts / sizeof parts [0]; k++)
        graph_size += parts [k]->size;
    s_key (self, &head, MODEL_GRAPH, WIRE_LEN);
    s_varint (self, &head, graph_size);
    int rc = self->failed;
    char temporary [PATH_CHARS];
    if (!rc && snprintf (temporary, sizeof temporary, "%s.tmp.%d", path, (int) getpid ())
               >= (int) sizeof temporary)
        rc = za_error ("onnx: the path %s is too long", path);
    FILE *file = rc? NULL: fopen (temporary, "wb");
    if (!rc && !file)
        rc = za_error ("onnx: cannot write %s: %s", temporary, strerror (errno));
    if (file) {
        int bad = s_write (file, head.data, head.size);
        for (size_t k = 0; k < sizeof parts / sizeof parts [0] && !bad; k++)
            bad = s_write (file, parts [k]->data, parts [k]->size);
        if (fflush (file) || fsync (fileno (file)))
            bad = -1;
        if (fclose (file))
            bad = -1;
        if (bad || rename (temporary, path)) {
            rc = za_error ("onnx: cannot write %s: %s", path, strerror (errno? errno: EIO));
            unlink (temporary);
        }
    }
    free (head.data), free (opset.data), free (name.data);
    return rc;
}

int
za_onnx_named (const char *path)
{
    size_t length = strlen (path);
    return length > 5 && !strcmp (path + length - 5, ".onnx");
}

