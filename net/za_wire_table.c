/*  za_wire_table.c: every field of a message described once (its key, how it
    is carried, its limits), with the ops' names and the helpers both halves
    of the codec share. The encoder, the decoder and PROTOCOL.md's tables
    (checked by test_wire) all follow these rows.                            */
#include "za_wire_private.h"

#include <stdio.h>
#include <string.h>

#define MSG(field) offsetof (za_wire_msg_t, field)
#define OPTIM(field) offsetof (za_optim_config_t, field)
#define WIDTH(field) sizeof (((za_wire_msg_t *) 0)->field)

const char *const za_wire_op_names [WIRE_OP_LAST + 1] = {
    NULL, "init", "init_ok", "pull", "push", "values", "hold", "held", "snapshot",
    "snapshot_data", "release", "released", "stop", "stopping", "bye", "bye_ok",
    "error", "ping", "pong", "register", "welcome", "report", "view", "watch", "state",
    "ring", "broadcast", "resync", "checkpoint", "slots", "offer",
    "link"
};

//  PROTOCOL.md 2: the header.
const wire_field_t za_wire_header_fields [KEY_COUNT] = {
    [KEY_V]       = { "v", WIRE_VERSION, 0, 0, false, 0, 0 },
    [KEY_OP]      = { "op", WIRE_OP, 0, 0, false, MSG (op), 0 },
    [KEY_SEQ]     = { "seq", WIRE_UINT64, 0, 0, false, MSG (seq), 0 },
    [KEY_STEP]    = { "step", WIRE_INT, -1, INT64_MAX, false, MSG (step), WIDTH (step) },
    [KEY_TASK]    = { "task", WIRE_INT, -1, INT32_MAX, false, MSG (task), WIDTH (task) },
    [KEY_PS]      = { "ps", WIRE_INT, -1, INT32_MAX, false, MSG (ps), WIDTH (ps) },
    [KEY_CODE]    = { "code", WIRE_TEXT, 0, WIRE_CODE_BYTES - 1, false, MSG (code), 0 },
    [KEY_ERROR]   = { "error", WIRE_TEXT, 0, WIRE_ERROR_BYTES - 1, false, MSG (error), 0 },
    [KEY_OPT]     = { "opt", WIRE_OPTIM, 0, 0, false, MSG (optim), 0 },
    [KEY_BODY]    = { "body", WIRE_BYTES, 0, ZA_WIRE_MAX_BODY_BYTES, false, MSG (body),
                      MSG (body_len) },
    [KEY_SHM]     = { "shm", WIRE_BYTES, 0, ZA_WIRE_MAX_SHM_BYTES, false, MSG (shm),
                      MSG (shm_len) },
    [KEY_TENSORS] = { "tensors", WIRE_TENSORS, 0, ZA_WIRE_MAX_TENSORS, false, 0, 0 },
};

//  PROTOCOL.md 2: init's "opt" map, as za_optim_config_t holds it.
const wire_field_t za_wire_opt_fields [OPT_COUNT] = {
    [OPT_KIND]         = { "kind", WIRE_TEXT, 1, WIRE_OPTIMIZER_BYTES - 1, false, 0, 0 },
    [OPT_LR]           = { "lr", WIRE_NUMBER, 0, 0, false, OPTIM (learning_rate), 0 },
    [OPT_MOMENTUM]     = { "momentum", WIRE_NUMBER, 0, 0, false, OPTIM (momentum), 0 },
    [OPT_BETA1]        = { "beta1", WIRE_NUMBER, 0, 0, false, OPTIM (beta1), 0 },
    [OPT_BETA2]        = { "beta2", WIRE_NUMBER, 0, 0, false, OPTIM (beta2), 0 },
    [OPT_EPSILON]      = { "epsilon", WIRE_NUMBER, 0, 0, false, OPTIM (epsilon), 0 },
    [OPT_ACC0]         = { "acc0", WIRE_NUMBER, 0, 0, false, OPTIM (initial_accumulator), 0 },
    [OPT_NESTEROV]     = { "nesterov", WIRE_BOOL, 0, 0, false, OPTIM (nesterov), 0 },
    [OPT_SCHEDULE]     = { "schedule", WIRE_NUMBERS, 0, ZA_SCHEDULE_NUMBERS, true,
                           OPTIM (schedule), 0 },
    [OPT_WEIGHT_DECAY] = { "weight_decay", WIRE_NUMBER, 0, 0, true, OPTIM (weight_decay), 0 },
};

//  PROTOCOL.md 3: a tensor's map.
const wire_field_t za_wire_tensor_fields [TENSOR_COUNT] = {
    [TENSOR_NAME]  = { "name", WIRE_TEXT, 1, ZA_WIRE_NAME_MAX - 1, false, 0, 0 },
    [TENSOR_DTYPE] = { "dtype", WIRE_DTYPE, 0, 0, false, 0, 0 },
    [TENSOR_SHAPE] = { "shape", WIRE_SHAPE, 0, ZA_WIRE_MAX_DIMS, false, 0, 0 },
    [TENSOR_FRAME] = { "frame", WIRE_FRAME, 0, 0, false, 0, 0 },
};

static const wire_field_t *
s_table (za_wire_names_t list, int *count)
{
    switch (list) {
        case ZA_WIRE_HEADER_KEYS: *count = KEY_COUNT; return za_wire_header_fields;
        case ZA_WIRE_OPT_KEYS:    *count = OPT_COUNT; return za_wire_opt_fields;
        case ZA_WIRE_TENSOR_KEYS: *count = TENSOR_COUNT; return za_wire_tensor_fields;
        case ZA_WIRE_OPS:         break;
    }
    *count = 0;
    return NULL;
}

const char *
za_wire_name (za_wire_names_t list, int i)
{
    if (i < 0)
        return NULL;
    if (list == ZA_WIRE_OPS)
        return i < WIRE_OP_LAST? za_wire_op_names [ZA_OP_INIT + i]: NULL;
    int count;
    const wire_field_t *fields = s_table (list, &count);
    return i < count? fields [i].name: NULL;
}

//  "2^63-1" for 2^k - 1, else the number.
static const char *
s_limit_text (int64_t max, char *text, size_t size)
{
    uint64_t value = (uint64_t) max;
    if (value > 1 && (value & (value + 1)) == 0)
        snprintf (text, size, "2^%d-1", __builtin_popcountll (value));
    else
        snprintf (text, size, "%" PRId64, max);
    return text;
}

//  "60 KiB" or "512 bytes".
static const char *
s_bytes_text (int64_t bytes, char *text, size_t size)
{
    if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf (text, size, "%" PRId64 " KiB", bytes / 1024);
    else
        snprintf (text, size, "%" PRId64 " bytes", bytes);
    return text;
}

const char *
za_wire_type (za_wire_names_t list, int i, char *text, size_t size)
{
    int count;
    const wire_field_t *fields = s_table (list, &count);
    if (!fields || i < 0 || i >= count || !text || size == 0)
        return NULL;
    const wire_field_t *field = &fields [i];
    char limit [32];
    int n = 0;
    switch (field->form) {
        case WIRE_VERSION:
        case WIRE_FRAME:   n = snprintf (text, size, "int"); break;
        case WIRE_OP:
        case WIRE_DTYPE:   n = snprintf (text, size, "str"); break;
        case WIRE_UINT64:  n = snprintf (text, size, "int, 0 .. 2^64-1"); break;
        case WIRE_INT:     n = snprintf (text, size, "int, 0 .. %s",
                                         s_limit_text (field->max, limit, sizeof limit));
                           break;
        case WIRE_TEXT:    n = snprintf (text, size, "str, %" PRId64 "..%" PRId64 " bytes",
                                         field->min, field->max);
                           break;
        case WIRE_BYTES:   n = snprintf (text, size, "str, at most %s, no NUL",
                                         s_bytes_text (field->max, limit, sizeof limit));
                           break;
        case WIRE_OPTIM:   n = snprintf (text, size, "map"); break;
        case WIRE_TENSORS: n = snprintf (text, size, "array of maps, at most %" PRId64,
                                         field->max);
                           break;
        case WIRE_NUMBER:  n = snprintf (text, size, "number"); break;
        case WIRE_BOOL:    n = snprintf (text, size, "bool"); break;
        case WIRE_NUMBERS: n = snprintf (text, size, "array of %" PRId64 " numbers",
                                         field->max);
                           break;
        case WIRE_SHAPE:   n = snprintf (text, size, "array of at most %" PRId64 " ints, "
                                         "each 0 .. 2^63-1", field->max);
                           break;
    }
    if (n >= 0 && (size_t) n < size && field->optional)
        snprintf (text + n, size - (size_t) n, ", optional");
    return text;
}

bool
za_wire_field_present (const wire_field_t *field, const za_wire_msg_t *msg)
{
    const char *at = (const char *) msg + field->at;
    switch (field->form) {
        case WIRE_INT:
            return field->width == sizeof (int64_t)? *(const int64_t *) at != -1
                                                    : *(const int32_t *) at != -1;
        case WIRE_TEXT:    return at [0] != 0;
        case WIRE_BYTES:   return *(const char *const *) at != NULL;
        case WIRE_OPTIM:   return msg->has_optim != 0;
        case WIRE_TENSORS: return msg->tensor_count > 0;
        default:           return true;
    }
}

const char *
za_wire_field_bytes (const wire_field_t *field, const za_wire_msg_t *msg, size_t *len)
{
    *len = *(const size_t *) ((const char *) msg + field->width);
    return *(const char *const *) ((const char *) msg + field->at);
}

int
za_wire_field_index (const msgpack_object *key, const wire_field_t *fields, int count)
{
    if (key->type != MSGPACK_OBJECT_STR)
        return -1;
    for (int i = 0; i < count; i++)
        if (strlen (fields [i].name) == key->via.str.size
        &&  memcmp (key->via.str.ptr, fields [i].name, key->via.str.size) == 0)
            return i;
    return -1;
}

int
za_wire_op_parse_bytes (const char *bytes, size_t size, za_op_t *op)
{
    for (int i = ZA_OP_INIT; i <= WIRE_OP_LAST; i++)
        if (strlen (za_wire_op_names [i]) == size
        &&  memcmp (bytes, za_wire_op_names [i], size) == 0) {
            *op = (za_op_t) i;
            return 0;
        }
    return -1;
}

const char *
za_wire_dtype_name (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32 ? "f32" : dtype == ZA_DTYPE_BF16 ? "bf16" : "i64";
}

bool
za_wire_dtype_valid (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32 || dtype == ZA_DTYPE_I64 || dtype == ZA_DTYPE_BF16;
}

const char *
za_wire_shape_text (int ndim, const int64_t *shape, char *text, size_t size)
{
    if (ndim == 0) {
        snprintf (text, size, "scalar");
        return text;
    }
    size_t used = 0;
    text [0] = 0;
    for (int dim = 0; dim < ndim && used < size; dim++) {
        int n = snprintf (text + used, size - used, "%s%" PRId64, dim ? "x" : "", shape [dim]);
        if (n < 0)
            break;
        used += (size_t) n;
    }
    return text;
}

const char *
za_wire_quote (const char *bytes, size_t size, char *text)
{
    size_t shown = size > WIRE_QUOTE_MAX_CHARS ? WIRE_QUOTE_MAX_CHARS : size;
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char) bytes [i];
        text [i] = c < 0x20 || c >= 0x7f ? '?' : (char) c;
    }
    strcpy (text + shown, size > shown ? "..." : "");
    return text;
}
