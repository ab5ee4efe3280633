/*  za_wire_decode.c: reads a received message: the pre-passed header is
    unpacked and each field checked as its row in za_wire_table.c says, and
    each tensor is bound to its payload frame. Every byte is checked before use. */
#include "za_wire_private.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *
s_type_name (msgpack_object_type type)
{
    switch (type) {
        case MSGPACK_OBJECT_NIL: return "nil";
        case MSGPACK_OBJECT_BOOLEAN: return "bool";
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return "int";
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "int";
        case MSGPACK_OBJECT_FLOAT32: return "float";
        case MSGPACK_OBJECT_FLOAT64: return "float";
        case MSGPACK_OBJECT_STR: return "str";
        case MSGPACK_OBJECT_ARRAY: return "array";
        case MSGPACK_OBJECT_MAP: return "map";
        case MSGPACK_OBJECT_BIN: return "bin";
        case MSGPACK_OBJECT_EXT: return "ext";
    }
    return "unknown";
}

//  An int in [min, max]. `what` names it in errors ("'step'").
static int
s_get_int (const msgpack_object *obj, const char *what, int64_t min, int64_t max,
           int64_t *value)
{
    if (obj->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (obj->via.u64 > (uint64_t) max)
            return za_error ("wire: %s is %" PRIu64 ", more than %" PRId64, what, obj->via.u64,
                             max);
        *value = (int64_t) obj->via.u64;
        return 0;
    }
    if (obj->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        if (obj->via.i64 < min)
            return za_error ("wire: %s is %" PRId64 ", less than %" PRId64, what, obj->via.i64,
                             min);
        *value = obj->via.i64;
        return 0;
    }
    return za_error ("wire: %s must be an int, got %s", what, s_type_name (obj->type));
}

//  A str of min_len .. size-1 bytes without NUL, copied NUL-terminated.
static int
s_get_str (const msgpack_object *obj, const char *what, size_t min_len, char *text,
           size_t size)
{
    if (obj->type != MSGPACK_OBJECT_STR)
        return za_error ("wire: %s must be a str, got %s", what, s_type_name (obj->type));
    size_t len = obj->via.str.size;
    if (len < min_len)
        return za_error ("wire: %s is empty", what);
    if (len >= size)
        return za_error ("wire: %s is %zu bytes, longer than %zu", what, len, size - 1);
    if (memchr (obj->via.str.ptr, 0, len))
        return za_error ("wire: %s contains a NUL byte", what);
    memcpy (text, obj->via.str.ptr, len);
    text [len] = 0;
    return 0;
}

//  A finite number (float or int).
static int
s_get_number (const msgpack_object *obj, const char *what, double *value)
{
    switch (obj->type) {
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: *value = obj->via.f64; break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER: *value = (double) obj->via.u64; break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: *value = (double) obj->via.i64; break;
        default:
            return za_error ("wire: %s must be a number, got %s", what,
                             s_type_name (obj->type));
    }
    if (!isfinite (*value))
        return za_error ("wire: %s is not finite", what);
    return 0;
}

//  A number as the float32 za_optim_config_t holds: beyond its range,
//  +-inf (a float conversion out of range is undefined in C).
static float
s_float_of (double value)
{
    if (fabs (value) > FLT_MAX)
        return value > 0? INFINITY: -INFINITY;
    return (float) value;
}

//  "schedule": ZA_SCHEDULE_NUMBERS numbers (za_schedule_numbers' order); a
//  kind out of range is left for za_optim_config_check to refuse.
static int
s_decode_schedule (const msgpack_object *obj, za_schedule_t *schedule)
{
    const wire_field_t *field = &za_wire_opt_fields [OPT_SCHEDULE];
    if (obj->type != MSGPACK_OBJECT_ARRAY || obj->via.array.size != field->max)
        return za_error ("wire: 'opt.%s' must be an array of %d numbers", field->name,
                         ZA_SCHEDULE_NUMBERS);
    double numbers [ZA_SCHEDULE_NUMBERS];
    for (int i = 0; i < ZA_SCHEDULE_NUMBERS; i++)
        if (s_get_number (&obj->via.array.ptr [i], "'opt.schedule'", &numbers [i]))
            return -1;
    za_schedule_from_numbers (schedule, numbers);
    return 0;
}

//  One value of the opt map into optim, as its row says.
static int
s_decode_opt_field (const wire_field_t *field, const msgpack_object *value, const char *what,
                    za_optim_config_t *optim)
{
    char *at = (char *) optim + field->at;
    if (field->form == WIRE_NUMBERS)
        return s_decode_schedule (value, &optim->schedule);
    if (field->form == WIRE_TEXT) {
        char kind [WIRE_OPTIMIZER_BYTES];
        if (s_get_str (value, what, (size_t) field->min, kind, (size_t) field->max + 1))
            return -1;
        optim->kind = za_optim_kind_of (kind);
        return 0;
    }
    if (field->form == WIRE_BOOL) {
        if (value->type != MSGPACK_OBJECT_BOOLEAN)
            return za_error ("wire: %s must be a bool, got %s", what,
                             s_type_name (value->type));
        *(int *) at = value->via.boolean ? 1 : 0;
        return 0;
    }
    double number = 0;
    if (s_get_number (value, what, &number))
        return -1;
    *(float *) at = s_float_of (number);
    return 0;
}

//  The optimizer into out->optim: the codec checks types; a kind it does not
//  know is ZA_OPT_UNKNOWN and a number beyond float32 is +-inf, for the ps
//  to refuse with bad_request (za_optim_config_check).
static int
s_decode_optim (const msgpack_object *obj, za_wire_msg_t *out)
{
    if (obj->type != MSGPACK_OBJECT_MAP)
        return za_error ("wire: 'opt' must be a map, got %s", s_type_name (obj->type));
    bool seen [OPT_COUNT] = { false };
    za_optim_config_t *optim = &out->optim;
    memset (&optim->schedule, 0, sizeof optim->schedule);
    optim->weight_decay = 0;
    for (uint32_t i = 0; i < obj->via.map.size; i++) {
        const msgpack_object_kv *kv = &obj->via.map.ptr [i];
        int key = za_wire_field_index (&kv->key, za_wire_opt_fields, OPT_COUNT);
        if (key < 0)
            continue;                   //  unknown: a newer peer's field
        const wire_field_t *field = &za_wire_opt_fields [key];
        char what [32];
        snprintf (what, sizeof what, "'opt.%s'", field->name);
        if (seen [key] && !field->optional)
            return za_error ("wire: %s appears twice", what);
        seen [key] = true;
        if (s_decode_opt_field (field, &kv->val, what, optim))
            return -1;
    }
    for (int key = 0; key < OPT_COUNT; key++)
        if (!seen [key] && !za_wire_opt_fields [key].optional)
            return za_error ("wire: 'opt' has no '%s'", za_wire_opt_fields [key].name);
    out->has_optim = 1;
    return 0;
}

//  What decoding the tensors needs to know about the payload frames (or the
//  payloads a same-host link holds in place of them).
typedef struct {
    const void *data [ZA_WIRE_MAX_TENSORS];
    size_t size [ZA_WIRE_MAX_TENSORS];
    int count;
    int16_t user [ZA_WIRE_MAX_TENSORS]; //  1 + index of the tensor using a frame, 0 if none
} s_payload_t;

//  The tensor map's values in values [TENSOR_COUNT], each once.
static int
s_tensor_values (const msgpack_object *obj, int index, const msgpack_object **values)
{
    if (obj->type != MSGPACK_OBJECT_MAP)
        return za_error ("wire: tensor %d must be a map, got %s", index,
                         s_type_name (obj->type));
    for (uint32_t i = 0; i < obj->via.map.size; i++) {
        const msgpack_object_kv *kv = &obj->via.map.ptr [i];
        int key = za_wire_field_index (&kv->key, za_wire_tensor_fields, TENSOR_COUNT);
        if (key < 0)
            continue;
        if (values [key])
            return za_error ("wire: tensor %d has '%s' twice", index,
                             za_wire_tensor_fields [key].name);
        values [key] = &kv->val;
    }
    for (int key = 0; key < TENSOR_COUNT; key++)
        if (!values [key])
            return za_error ("wire: tensor %d has no '%s'", index,
                             za_wire_tensor_fields [key].name);
    return 0;
}

static int
s_decode_dtype (const msgpack_object *dtype, const char *name, za_wire_tensor_t *tensor)
{
    if (dtype->type != MSGPACK_OBJECT_STR)
        return za_error ("wire: tensor '%s': 'dtype' must be a str, got %s", name,
                         s_type_name (dtype->type));
    const za_dtype_t dtypes [] = { ZA_DTYPE_F32, ZA_DTYPE_I64, ZA_DTYPE_BF16 };
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes [0]; i++) {
        const char *text = za_wire_dtype_name (dtypes [i]);
        if (dtype->via.str.size == strlen (text)
        &&  memcmp (dtype->via.str.ptr, text, dtype->via.str.size) == 0) {
            tensor->dtype = dtypes [i];
            return 0;
        }
    }
    char text [WIRE_QUOTE_BYTES];
    return za_error ("wire: tensor '%s': unknown dtype '%s' (expected \"f32\", \"bf16\" "
                     "or \"i64\")", name,
                     za_wire_quote (dtype->via.str.ptr, dtype->via.str.size, text));
}

//  The shape, and its bytes in *bytes (at most a frame's).
static int
s_decode_shape (const msgpack_object *shape, const char *name, za_wire_tensor_t *tensor,
                uint64_t *bytes)
{
    if (shape->type != MSGPACK_OBJECT_ARRAY)
        return za_error ("wire: tensor '%s': 'shape' must be an array, got %s", name,
                         s_type_name (shape->type));
    if (shape->via.array.size > za_wire_tensor_fields [TENSOR_SHAPE].max)
        return za_error ("wire: tensor '%s': shape has %u dims, more than %d", name,
                         shape->via.array.size, ZA_WIRE_MAX_DIMS);
    tensor->ndim = (int) shape->via.array.size;
    for (int dim = 0; dim < tensor->ndim; dim++) {
        const msgpack_object *value = &shape->via.array.ptr [dim];
        if (value->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            return za_error ("wire: tensor '%s': dim %d is %" PRId64 ", negative", name, dim,
                             value->via.i64);
        //  The common case without formatting anything; the message text is
        //  built only when the value is wrong.
        if (value->type == MSGPACK_OBJECT_POSITIVE_INTEGER && value->via.u64 <= INT64_MAX) {
            tensor->shape [dim] = (int64_t) value->via.u64;
            continue;
        }
        char what [64];
        snprintf (what, sizeof what, "tensor '%.20s' dim %d", name, dim);
        int64_t size = 0;
        if (s_get_int (value, what, 0, INT64_MAX, &size))
            return -1;
        tensor->shape [dim] = size;
    }
    char shape_text [WIRE_SHAPE_TEXT_CHARS];
    if (za_tensor_bytes (tensor->dtype, tensor->ndim, tensor->shape, bytes)) {
        za_wire_shape_text (tensor->ndim, tensor->shape, shape_text, sizeof shape_text);
        return za_error ("wire: tensor '%s': shape %s %s overflows", name, shape_text,
                         za_wire_dtype_name (tensor->dtype));
    }
    if (*bytes > ZA_WIRE_MAX_FRAME_BYTES) {
        za_wire_shape_text (tensor->ndim, tensor->shape, shape_text, sizeof shape_text);
        return za_error ("wire: tensor '%s' declares %s %s (%" PRIu64 " bytes), more than "
                         "the frame limit of %u", name, shape_text,
                         za_wire_dtype_name (tensor->dtype), *bytes, ZA_WIRE_MAX_FRAME_BYTES);
    }
    return 0;
}

//  The tensor's payload frame: in range, used by no other tensor, of its bytes.
static int
s_bind_frame (const msgpack_object *frame, const char *name, int index, uint64_t bytes,
              za_wire_msg_t *out, s_payload_t *payload)
{
    za_wire_tensor_t *tensor = &out->tensors [index];
    if (frame->type == MSGPACK_OBJECT_NEGATIVE_INTEGER
    ||  (frame->type == MSGPACK_OBJECT_POSITIVE_INTEGER
         && frame->via.u64 >= (uint64_t) payload->count)) {
        char number [32];
        if (frame->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            snprintf (number, sizeof number, "%" PRId64, frame->via.i64);
        else
            snprintf (number, sizeof number, "%" PRIu64, frame->via.u64);
        return za_error ("wire: tensor '%s': frame %s is out of range (the message has %d "
                         "payload frames)", name, number, payload->count);
    }
    if (frame->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return za_error ("wire: tensor '%s': 'frame' must be an int, got %s", name,
                         s_type_name (frame->type));
    int frame_index = (int) frame->via.u64;
    if (payload->user [frame_index]) {
        char other [WIRE_QUOTE_BYTES];
        const char *other_name = out->tensors [payload->user [frame_index] - 1].name;
        return za_error ("wire: tensor '%s': frame %d is already used by tensor '%s'", name,
                         frame_index, za_wire_quote (other_name, strlen (other_name), other));
    }
    payload->user [frame_index] = (int16_t) (index + 1);

    size_t frame_bytes = payload->size [frame_index];
    if (frame_bytes != bytes) {
        char shape_text [WIRE_SHAPE_TEXT_CHARS];
        za_wire_shape_text (tensor->ndim, tensor->shape, shape_text, sizeof shape_text);
        return za_error ("wire: tensor '%s' declares %s %s (%" PRIu64 " bytes) but frame %d "
                         "has %zu bytes", name, shape_text, za_wire_dtype_name (tensor->dtype),
                         bytes, frame_index, frame_bytes);
    }
    tensor->bytes = frame_bytes;
    tensor->data = payload->data [frame_index];
    return 0;
}

static int
s_decode_tensor (const msgpack_object *obj, int index, za_wire_msg_t *out, s_payload_t *payload)
{
    const msgpack_object *values [TENSOR_COUNT] = { NULL };
    if (s_tensor_values (obj, index, values))
        return -1;
    za_wire_tensor_t *tensor = &out->tensors [index];
    const wire_field_t *field = &za_wire_tensor_fields [TENSOR_NAME];
    char what [64];
    snprintf (what, sizeof what, "tensor %d's name", index);
    if (s_get_str (values [TENSOR_NAME], what, (size_t) field->min, tensor->name,
                   (size_t) field->max + 1))
        return -1;
    char name [WIRE_QUOTE_BYTES];
    za_wire_quote (tensor->name, strlen (tensor->name), name);
    for (int i = 0; i < index; i++)
        if (strcmp (out->tensors [i].name, tensor->name) == 0)
            return za_error ("wire: tensor %d: name '%s' is already used by tensor %d", index,
                             name, i);
    uint64_t bytes = 0;
    if (s_decode_dtype (values [TENSOR_DTYPE], name, tensor)
    ||  s_decode_shape (values [TENSOR_SHAPE], name, tensor, &bytes))
        return -1;
    return s_bind_frame (values [TENSOR_FRAME], name, index, bytes, out, payload);
}

static int
s_decode_tensors (const msgpack_object *obj, za_wire_msg_t *out, s_payload_t *payload,
                  int *count_p)
{
    if (obj->type != MSGPACK_OBJECT_ARRAY)
        return za_error ("wire: 'tensors' must be an array, got %s", s_type_name (obj->type));
    if (obj->via.array.size > za_wire_header_fields [KEY_TENSORS].max)
        return za_error ("wire: %u tensors, more than the limit of %d", obj->via.array.size,
                         ZA_WIRE_MAX_TENSORS);
    for (uint32_t i = 0; i < obj->via.array.size; i++)
        if (s_decode_tensor (&obj->via.array.ptr [i], (int) i, out, payload))
            return -1;
    *count_p = (int) obj->via.array.size;
    return 0;
}

//  Finds "v" first, so that a newer peer's message is refused for its version
//  and not for whatever else changed.
static int
s_check_version (const msgpack_object *map)
{
    const msgpack_object *version = NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (za_wire_field_index (&map->via.map.ptr [i].key, za_wire_header_fields, KEY_COUNT) == KEY_V) {
            if (version)
                return za_error ("wire: header has 'v' twice");
            version = &map->via.map.ptr [i].val;
        }
    if (!version)
        return za_error ("wire: header has no 'v' (protocol version)");
    if (version->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (version->via.u64 != ZA_WIRE_VERSION)
            return za_error ("wire: unsupported protocol version %" PRIu64 " (this build "
                             "speaks %d)", version->via.u64, ZA_WIRE_VERSION);
        return 0;
    }
    if (version->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return za_error ("wire: unsupported protocol version %" PRId64 " (this build speaks "
                         "%d)", version->via.i64, ZA_WIRE_VERSION);
    return za_error ("wire: 'v' must be an int, got %s", s_type_name (version->type));
}

//  A str left where it arrived (body, shm): at most field->max bytes, no NUL.
static int
s_get_bytes (const wire_field_t *field, const msgpack_object *value, za_wire_msg_t *out)
{
    if (value->type != MSGPACK_OBJECT_STR)
        return za_error ("wire: '%s' must be a str, got %s", field->name,
                         s_type_name (value->type));
    if (value->via.str.size > field->max)
        return za_error ("wire: '%s' is %u bytes, more than %" PRId64, field->name,
                         value->via.str.size, field->max);
    if (memchr (value->via.str.ptr, 0, value->via.str.size))
        return za_error ("wire: '%s' contains a NUL byte", field->name);
    *(const char **) ((char *) out + field->at) = value->via.str.ptr;
    *(size_t *) ((char *) out + field->width) = value->via.str.size;
    return 0;
}

//  One header value into out, as its row says.
static int
s_decode_field (const wire_field_t *field, const msgpack_object *value, za_wire_msg_t *out,
                s_payload_t *payload, int *count_p)
{
    char what [32];
    snprintf (what, sizeof what, "'%s'", field->name);
    char *at = (char *) out + field->at;
    int64_t number = 0;
    switch (field->form) {
        case WIRE_OP:
            if (value->type != MSGPACK_OBJECT_STR)
                return za_error ("wire: %s must be a str, got %s", what,
                                 s_type_name (value->type));
            if (za_wire_op_parse_bytes (value->via.str.ptr, value->via.str.size, &out->op)) {
                char text [WIRE_QUOTE_BYTES];
                return za_error ("wire: unknown op '%s'",
                                 za_wire_quote (value->via.str.ptr, value->via.str.size, text));
            }
            return 0;
        case WIRE_UINT64:
            if (value->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return za_error ("wire: %s must be a non-negative int, got %s%s", what,
                                 value->type == MSGPACK_OBJECT_NEGATIVE_INTEGER
                                     ? "a negative " : "",
                                 s_type_name (value->type));
            *(uint64_t *) at = value->via.u64;
            return 0;
        case WIRE_INT:
            if (s_get_int (value, what, field->min, field->max, &number))
                return -1;
            if (field->width == sizeof (int64_t))
                *(int64_t *) at = number;
            else
                *(int32_t *) at = (int32_t) number;
            return 0;
        case WIRE_TEXT:
            return s_get_str (value, what, (size_t) field->min, at, (size_t) field->max + 1);
        case WIRE_BYTES:
            return s_get_bytes (field, value, out);
        case WIRE_OPTIM:
            return s_decode_optim (value, out);
        case WIRE_TENSORS:
            return s_decode_tensors (value, out, payload, count_p);
        default:
            return 0;                   //  "v": read first, by s_check_version
    }
}

static int
s_decode_header (const msgpack_object *map, za_wire_msg_t *out, s_payload_t *payload,
                 int *count_p)
{
    if (s_check_version (map))
        return -1;
    bool seen [KEY_COUNT] = { false };
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr [i];
        int key = za_wire_field_index (&kv->key, za_wire_header_fields, KEY_COUNT);
        if (key < 0 || key == KEY_V)
            continue;                   //  unknown keys: a newer peer's fields
        if (seen [key])
            return za_error ("wire: header has '%s' twice", za_wire_header_fields [key].name);
        seen [key] = true;
        if (s_decode_field (&za_wire_header_fields [key], &kv->val, out, payload, count_p))
            return -1;
    }
    if (!seen [KEY_OP])
        return za_error ("wire: header has no 'op'");
    for (int frame = 0; frame < payload->count; frame++)
        if (!payload->user [frame])
            return za_error ("wire: frame %d is not referenced by any tensor (the message "
                             "has %d payload frames, the header %d tensors)", frame,
                             payload->count, *count_p);
    return 0;
}

//  Decodes msg's header with its payloads: msg's frames after the header,
//  or (data != NULL) `count` payloads held elsewhere, msg being the header
//  alone.
static int
s_decode (zmsg_t *msg, const void *const *data, const size_t *sizes, int count,
          za_wire_msg_t *out)
{
    if (!out)
        return za_error ("wire: za_wire_decode: no output message");
    memset (out, 0, offsetof (za_wire_msg_t, tensors));
    out->step = -1;
    out->task = -1;
    out->ps = -1;
    if (!msg)
        return za_error ("wire: za_wire_decode: no message");

    size_t frame_count = data? 1 + (size_t) count: zmsg_size (msg);
    if (frame_count == 0 || (data && zmsg_size (msg) != 1))
        return za_error ("wire: empty message (no header frame)");
    if (frame_count - 1 > ZA_WIRE_MAX_TENSORS)
        return za_error ("wire: message has %zu payload frames, more than the limit of %d",
                         frame_count - 1, ZA_WIRE_MAX_TENSORS);
    s_payload_t payload;
    payload.count = (int) frame_count - 1;
    memset (payload.user, 0, sizeof payload.user);
    zframe_t *header = zmsg_first (msg);
    for (int i = 0; i < payload.count; i++) {
        zframe_t *frame = data? NULL: zmsg_next (msg);
        payload.data [i] = data? data [i]: zframe_data (frame);
        payload.size [i] = data? sizes [i]: zframe_size (frame);
    }

    size_t header_size = zframe_size (header);
    if (header_size == 0)
        return za_error ("wire: header frame is empty");
    if (header_size > ZA_WIRE_MAX_HEADER_BYTES)
        return za_error ("wire: header frame is %zu bytes, more than the limit of %d",
                         header_size, ZA_WIRE_MAX_HEADER_BYTES);
    const char *header_bytes = (const char *) zframe_data (header);
    if (za_wire_scan_header ((const uint8_t *) header_bytes, header_size))
        return -1;

    //  Only now may msgpack-c allocate: at most a few objects per header byte.
    msgpack_unpacked unpacked;
    msgpack_unpacked_init (&unpacked);
    size_t offset = 0;
    msgpack_unpack_return unpack_rc = msgpack_unpack_next (&unpacked, header_bytes,
                                                           header_size, &offset);
    int rc;
    int tensor_count = 0;
    if (unpack_rc != MSGPACK_UNPACK_SUCCESS || offset != header_size)
        rc = za_error ("wire: msgpack could not unpack the header (code %d)", (int) unpack_rc);
    else
    if (unpacked.data.type != MSGPACK_OBJECT_MAP)
        rc = za_error ("wire: header is a msgpack %s, not a map",
                       s_type_name (unpacked.data.type));
    else
        rc = s_decode_header (&unpacked.data, out, &payload, &tensor_count);
    msgpack_unpacked_destroy (&unpacked);
    out->tensor_count = rc == 0 ? tensor_count : 0;
    return rc;
}

int
za_wire_decode (zmsg_t *msg, za_wire_msg_t *out)
{
    return s_decode (msg, NULL, NULL, 0, out);
}

int
za_wire_decode_payloads (zmsg_t *msg, const void *const *data, const size_t *sizes, int count,
                         za_wire_msg_t *out)
{
    if (!data || count < 0)
        return za_error ("wire: za_wire_decode_payloads: no payloads");
    return s_decode (msg, data, sizes, count, out);
}

int
za_wire_peek_shm (zmsg_t *msg, char *text, size_t size, uint64_t *seq)
{
    zframe_t *header = msg? zmsg_first (msg): NULL;
    size_t header_size = header? zframe_size (header): 0;
    if (seq)
        *seq = 0;
    if (header_size == 0 || header_size > ZA_WIRE_MAX_HEADER_BYTES
        || za_wire_scan_header (zframe_data (header), header_size))
        return -1;
    msgpack_unpacked unpacked;
    msgpack_unpacked_init (&unpacked);
    size_t offset = 0;
    int len = -1;
    if (msgpack_unpack_next (&unpacked, (const char *) zframe_data (header), header_size,
                             &offset) == MSGPACK_UNPACK_SUCCESS
        && unpacked.data.type == MSGPACK_OBJECT_MAP) {
        len = 0;
        const msgpack_object_map *map = &unpacked.data.via.map;
        for (uint32_t i = 0; i < map->size; i++) {
            const msgpack_object *key = &map->ptr [i].key, *value = &map->ptr [i].val;
            if (key->type != MSGPACK_OBJECT_STR)
                continue;
            if (seq && key->via.str.size == 3 && memcmp (key->via.str.ptr, "seq", 3) == 0
                && value->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                *seq = value->via.u64;
            if (key->via.str.size == 3 && memcmp (key->via.str.ptr, "shm", 3) == 0) {
                if (value->type != MSGPACK_OBJECT_STR || value->via.str.size >= size)
                    len = -1;
                else {
                    len = (int) value->via.str.size;
                    memcpy (text, value->via.str.ptr, (size_t) len);
                    text [len] = 0;
                }
            }
        }
    }
    msgpack_unpacked_destroy (&unpacked);
    return len;
}
