/*  za_onnx_read.c: an ONNX file's initializers, read by a bounds-checked
    walk of the protobuf fields, the unknown ones skipped by their wire
    type.                                                                   */
#include "za/za_onnx.h"
#include "za/za_util.h"
#include "za_onnx_private.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define PATH_CHARS 4096
#define NAME_CHARS 1024

typedef struct {
    const uint8_t *at, *end;
} s_reader_t;

//  One field: its number and wire type, and its value (a varint or fixed
//  number) or bytes (a length-delimited one).
typedef struct {
    int number, wire;
    uint64_t value;
    const uint8_t *bytes;
    size_t size;
} s_field_t;

static int
s_read_varint (s_reader_t *r, uint64_t *value)
{
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->at >= r->end)
            return -1;
        uint8_t byte = *r->at++;
        *value |= (uint64_t) (byte & 0x7f) << shift;
        if (!(byte & 0x80))
            return 0;
    }
    return -1;
}

//  The next field: 1, 0 at the end, -1 when the bytes are not protobuf.
static int
s_next (s_reader_t *r, s_field_t *field)
{
    if (r->at >= r->end)
        return 0;
    uint64_t key;
    if (s_read_varint (r, &key) || (key >> 3) == 0 || (key >> 3) > INT_MAX)
        return -1;
    field->number = (int) (key >> 3);
    field->wire = (int) (key & 7);
    field->bytes = NULL;
    field->size = 0;
    switch (field->wire) {
        case WIRE_VARINT:
            return s_read_varint (r, &field->value)? -1: 1;
        case WIRE_I64:
        case WIRE_I32: {
            size_t size = field->wire == WIRE_I64? 8: 4;
            if ((size_t) (r->end - r->at) < size)
                return -1;
            field->value = 0;
            memcpy (&field->value, r->at, size);
            field->bytes = r->at;
            field->size = size;
            r->at += size;
            return 1;
        }
        case WIRE_LEN: {
            uint64_t size;
            if (s_read_varint (r, &size) || size > (uint64_t) (r->end - r->at))
                return -1;
            field->bytes = r->at;
            field->size = (size_t) size;
            r->at += size;
            return 1;
        }
        default:                        //  groups (3, 4) are not in ONNX
            return -1;
    }
}

//  A repeated fixed-size field (float_data, double_data): packed or one by
//  one. 0, or -1 on a wrong wire type or size.
static int
s_fixed_values (const s_field_t *f, size_t element, s_buf_t *v)
{
    int want = element == 8? WIRE_I64: WIRE_I32;
    if (f->wire == want) {
        s_buf_put (v, f->bytes, element);
        return 0;
    }
    if (f->wire != WIRE_LEN || f->size % element)
        return -1;
    s_buf_put (v, f->bytes, f->size);
    return 0;
}

//  A repeated varint field (dims, int32_data, int64_data), as int64s:
//  packed or one by one.
static int
s_varint_values (const s_field_t *f, s_buf_t *v)
{
    if (f->wire == WIRE_VARINT) {
        int64_t value = (int64_t) f->value;
        s_buf_put (v, &value, sizeof value);
        return 0;
    }
    if (f->wire != WIRE_LEN)
        return -1;
    s_reader_t r = {f->bytes, f->bytes + f->size};
    while (r.at < r.end) {
        uint64_t value;
        if (s_read_varint (&r, &value))
            return -1;
        int64_t signed_value = (int64_t) value;
        s_buf_put (v, &signed_value, sizeof signed_value);
    }
    return 0;
}

//  A TensorProto as read.
typedef struct {
    char name [NAME_CHARS];
    int type;
    s_buf_t dims;                    //  int64s
    const uint8_t *raw;                 //  raw_data, or NULL
    size_t raw_size;
    s_buf_t typed;                   //  float_data or double_data bytes, or
                                        //  int32_data / int64_data as int64s
    int typed_field;
    int external;                       //  data_location EXTERNAL
    char location [NAME_CHARS];
    int64_t offset, length;             //  external data's (length -1: to the end)
} s_tensor_t;

//  A string field into text (cut to size).
static void
s_text (const s_field_t *f, char *text, size_t size)
{
    size_t length = f->size < size? f->size: size - 1;
    memcpy (text, f->bytes, length);
    text [length] = 0;
}

//  A StringStringEntryProto's key and value (cut to their sizes). 0, or -1.
static int
s_entry (const s_field_t *entry, char *key, size_t key_size, char *value, size_t value_size)
{
    s_reader_t r = {entry->bytes, entry->bytes + entry->size};
    s_field_t f;
    int more;
    *key = *value = 0;
    while ((more = s_next (&r, &f)) > 0) {
        if (f.wire != WIRE_LEN)
            continue;
        if (f.number == ENTRY_KEY)
            s_text (&f, key, key_size);
        if (f.number == ENTRY_VALUE)
            s_text (&f, value, value_size);
    }
    return more < 0? -1: 0;
}

//  An external_data entry into tensor.
static int
s_external_entry (s_tensor_t *tensor, const s_field_t *entry)
{
    char key [64], value [NAME_CHARS];
    if (s_entry (entry, key, sizeof key, value, sizeof value))
        return -1;
    if (!strcmp (key, "location"))
        snprintf (tensor->location, sizeof tensor->location, "%s", value);
    else
    if (!strcmp (key, "offset"))
        tensor->offset = strtoll (value, NULL, 10);
    else
    if (!strcmp (key, "length"))
        tensor->length = strtoll (value, NULL, 10);
    return 0;
}

//  Reads a TensorProto's fields. 0, or -1 (not protobuf, or a field of the
//  wrong wire type).
static int
s_read_tensor (const s_field_t *message, s_tensor_t *tensor)
{
    s_reader_t r = {message->bytes, message->bytes + message->size};
    s_field_t f;
    int more, bad = 0;
    tensor->length = -1;
    while (!bad && (more = s_next (&r, &f)) > 0)
        switch (f.number) {
            case TENSOR_DIMS:
                bad = s_varint_values (&f, &tensor->dims);
                break;
            case TENSOR_DATA_TYPE:
                tensor->type = f.wire == WIRE_VARINT? (int) f.value: -1;
                break;
            case TENSOR_NAME:
                if (f.wire != WIRE_LEN || f.size >= sizeof tensor->name)
                    return -1;
                memcpy (tensor->name, f.bytes, f.size);
                tensor->name [f.size] = 0;
                break;
            case TENSOR_RAW_DATA:
                if (f.wire != WIRE_LEN)
                    return -1;
                tensor->raw = f.bytes, tensor->raw_size = f.size;
                break;
            case TENSOR_FLOAT_DATA:
            case TENSOR_DOUBLE_DATA:
                tensor->typed_field = f.number;
                bad = s_fixed_values (&f, f.number == TENSOR_DOUBLE_DATA? 8: 4,
                                      &tensor->typed);
                break;
            case TENSOR_INT32_DATA:
            case TENSOR_INT64_DATA:
                tensor->typed_field = f.number;
                bad = s_varint_values (&f, &tensor->typed);
                break;
            case TENSOR_EXTERNAL_DATA:
                bad = f.wire != WIRE_LEN || s_external_entry (tensor, &f);
                break;
            case TENSOR_DATA_LOCATION:
                tensor->external = f.wire == WIRE_VARINT && f.value == 1;
                break;
            default:
                break;
        }
    return bad || more < 0 || tensor->dims.failed || tensor->typed.failed? -1: 0;
}

//  The safetensors dtype of an ONNX data type and its element's bytes, or
//  NULL for one that is not held.
static const char *
s_dtype (int type, size_t *element)
{
    switch (type) {
        case ONNX_FLOAT:    *element = 4; return "F32";
        case ONNX_FLOAT16:  *element = 2; return "F16";
        case ONNX_BFLOAT16: *element = 2; return "BF16";
        case ONNX_DOUBLE:   *element = 8; return "F64";
        case ONNX_INT64:    *element = 8; return "I64";
        case ONNX_INT32:    *element = 4; return "I32";
        case ONNX_INT8:     *element = 1; return "I8";
        case ONNX_UINT8:    *element = 1; return "U8";
        case ONNX_BOOL:     *element = 1; return "BOOL";
        default:            return NULL;
    }
}

//  An external tensor's bytes, from a file in the model's folder. 0, or -1
//  with an error.
static int
s_read_external (const char *model_path, const s_tensor_t *tensor, uint64_t bytes,
                 s_buf_t *out)
{
    const char *location = tensor->location;
    if (!*location || *location == '/' || strstr (location, ".."))
        return za_error ("%s: tensor '%s' keeps its data in '%s', not a file in the model's "
                         "folder", model_path, tensor->name, location);
    char path [PATH_CHARS];
    const char *slash = strrchr (model_path, '/');
    int folder = slash? (int) (slash - model_path + 1): 0;
    if (snprintf (path, sizeof path, "%.*s%s", folder, model_path, location)
        >= (int) sizeof path)
        return za_error ("%s: tensor '%s': the path of its data is too long", model_path,
                         tensor->name);
    if (tensor->offset < 0 || (tensor->length >= 0 && (uint64_t) tensor->length != bytes))
        return za_error ("%s: tensor '%s': its data in %s is %lld bytes at %lld, its shape "
                         "needs %llu", model_path, tensor->name, path,
                         (long long) tensor->length, (long long) tensor->offset,
                         (unsigned long long) bytes);
    FILE *file = fopen (path, "rb");
    if (!file)
        return za_error ("%s: tensor '%s': cannot open its data %s: %s", model_path,
                         tensor->name, path, strerror (errno));
    //  The file must hold the bytes before any is allocated.
    off_t end = fseeko (file, 0, SEEK_END) == 0? ftello (file): -1;
    uint8_t *data = NULL;
    int rc = 0;
    if (end < 0 || (uint64_t) end < (uint64_t) tensor->offset
    ||  (uint64_t) end - (uint64_t) tensor->offset < bytes)
        rc = za_error ("%s: tensor '%s': %s holds no %llu bytes at %lld", model_path,
                       tensor->name, path, (unsigned long long) bytes,
                       (long long) tensor->offset);
    else
    if (!(data = malloc (bytes? bytes: 1)))
        rc = za_error ("out of memory");
    else
    if (fseeko (file, (off_t) tensor->offset, SEEK_SET)
    ||  (bytes && fread (data, 1, bytes, file) != bytes))
        rc = za_error ("%s: tensor '%s': cannot read %s: %s", model_path, tensor->name, path,
                       strerror (errno? errno: EIO));
    fclose (file);
    if (rc)
        free (data);
    else {
        free (out->data);
        out->data = data, out->size = out->capacity = bytes;
    }
    return rc;
}

//  One initializer into the set. 0, or -1 with an error.
static int
s_add_tensor (za_safetensors_t *set, const char *path, s_tensor_t *tensor)
{
    size_t element = 0;
    const char *dtype = s_dtype (tensor->type, &element);
    size_t ndim = tensor->dims.size / sizeof (int64_t);
    const int64_t *dims = (const int64_t *) tensor->dims.data;
    if (!dtype)
        return 0;                       //  a type warm starts never take
    if (!*tensor->name)
        return za_error ("%s: an initializer without a name", path);
    if (ndim > ZA_SAFETENSORS_MAX_DIMS)
        return za_error ("%s: tensor '%s' has %zu dims (at most %d)", path, tensor->name,
                         ndim, ZA_SAFETENSORS_MAX_DIMS);
    uint64_t count = 1, bytes;
    for (size_t d = 0; d < ndim; d++)
        if (dims [d] < 0 || __builtin_mul_overflow (count, (uint64_t) dims [d], &count))
            return za_error ("%s: tensor '%s': a bad shape", path, tensor->name);
    if (__builtin_mul_overflow (count, (uint64_t) element, &bytes))
        return za_error ("%s: tensor '%s': a bad shape", path, tensor->name);
    const void *data = tensor->raw;
    uint64_t have = tensor->raw_size;
    s_buf_t converted = {0};
    if (tensor->external) {
        if (s_read_external (path, tensor, bytes, &converted))
            return -1;
        data = converted.data, have = converted.size;
    }
    else
    if (!tensor->raw && tensor->typed_field) {
        //  The typed fields: float_data and double_data hold the values as
        //  they are; int32_data holds FLOAT16, BFLOAT16, INT32, INT8, UINT8
        //  and BOOL values one per varint; int64_data INT64 ones.
        const int64_t *ints = (const int64_t *) tensor->typed.data;
        size_t n_ints = tensor->typed.size / sizeof (int64_t);
        int floats = tensor->typed_field == TENSOR_FLOAT_DATA && tensor->type == ONNX_FLOAT;
        int doubles = tensor->typed_field == TENSOR_DOUBLE_DATA && tensor->type == ONNX_DOUBLE;
        int longs = tensor->typed_field == TENSOR_INT64_DATA && tensor->type == ONNX_INT64;
        if (floats || doubles) {
            data = tensor->typed.data;
            have = tensor->typed.size;
        }
        else
        if (longs || tensor->typed_field == TENSOR_INT32_DATA) {
            for (size_t k = 0; k < n_ints; k++)
                s_buf_put (&converted, &ints [k], element);      //  little-endian low bytes
            if (converted.failed) {
                free (converted.data);
                return za_error ("out of memory");
            }
            data = converted.data;
            have = converted.size;
        }
        else
            have = UINT64_MAX;
    }
    int rc = 0;
    if (have != bytes)
        rc = za_error ("%s: tensor '%s' holds %s bytes of data, its shape needs %llu: the "
                       "file is damaged", path, tensor->name, have == UINT64_MAX? "the wrong"
                       : "another count of", (unsigned long long) bytes);
    else
        rc = za_safetensors_add (set, tensor->name, dtype, (int) ndim, dims, data, bytes);
    free (converted.data);
    return rc;
}

//  The graph's initializers into set. 0, or -1 with an error.
static int
s_read_graph (za_safetensors_t *set, const char *path, const s_field_t *graph)
{
    s_reader_t r = {graph->bytes, graph->bytes + graph->size};
    s_field_t f;
    int more, rc = 0;
    while (!rc && (more = s_next (&r, &f)) > 0) {
        if (f.number != GRAPH_INITIALIZER)
            continue;
        if (f.wire != WIRE_LEN)
            return za_error ("%s: not an ONNX model (an initializer of wire type %d)", path,
                             f.wire);
        s_tensor_t *tensor = calloc (1, sizeof *tensor);
        if (!tensor)
            return za_error ("out of memory");
        if (s_read_tensor (&f, tensor))
            rc = za_error ("%s: initializer %d is damaged (not a TensorProto)%s%s", path,
                           za_safetensors_count (set) + 1, *tensor->name? ": ": "",
                           tensor->name);
        else
            rc = s_add_tensor (set, path, tensor);
        free (tensor->dims.data), free (tensor->typed.data), free (tensor);
    }
    if (!rc && more < 0)
        rc = za_error ("%s: the graph is damaged (truncated or not protobuf)", path);
    return rc;
}

za_safetensors_t *
za_onnx_load_initializers (const char *path)
{
    FILE *file = fopen (path, "rb");
    if (!file) {
        za_error ("%s: cannot open: %s", path, strerror (errno));
        return NULL;
    }
    long size = fseek (file, 0, SEEK_END) == 0? ftell (file): -1;
    uint8_t *bytes = size > 0 && fseek (file, 0, SEEK_SET) == 0? malloc ((size_t) size): NULL;
    int rc = 0;
    if (size <= 0)
        rc = za_error ("%s: empty: not an ONNX model", path);
    else
    if (!bytes)
        rc = za_error ("%s: out of memory reading %ld bytes", path, size);
    else
    if (fread (bytes, 1, (size_t) size, file) != (size_t) size)
        rc = za_error ("%s: cannot read: %s", path, strerror (errno));
    fclose (file);
    za_safetensors_t *set = rc? NULL: za_safetensors_new (path);
    s_reader_t r = {bytes, bytes + (size > 0? size: 0)};
    s_field_t f;
    int more = 0, graphs = 0;
    int64_t ir_version = 0;
    while (set && !rc && (more = s_next (&r, &f)) > 0) {
        char text [NAME_CHARS];
        if (f.wire == WIRE_LEN && (f.number == MODEL_PRODUCER_NAME
                                   || f.number == MODEL_PRODUCER_VERSION)) {
            s_text (&f, text, sizeof text);
            rc = za_safetensors_set_meta (set, f.number == MODEL_PRODUCER_NAME
                                          ? "producer_name": "producer_version", text);
        }
        else
        if (f.number == MODEL_METADATA && f.wire == WIRE_LEN) {
            char key [NAME_CHARS];
            if (s_entry (&f, key, sizeof key, text, sizeof text) == 0 && *key)
                rc = za_safetensors_set_meta (set, key, text);
        }
        else
        if (f.number == MODEL_IR_VERSION && f.wire == WIRE_VARINT)
            ir_version = (int64_t) f.value;
        else
        if (f.number == MODEL_GRAPH && f.wire == WIRE_LEN) {
            graphs++;
            rc = s_read_graph (set, path, &f);
        }
    }
    if (set && !rc && (more < 0 || !graphs || ir_version <= 0))
        rc = za_error ("%s: not an ONNX model (%s)", path, more < 0? "not protobuf, or "
                       "truncated": !graphs? "no graph": "no IR version");
    free (bytes);
    if (rc)
        za_safetensors_destroy (&set);
    return set;
}
