/*  za_wire.c: encodes and decodes zactor messages: a msgpack header frame plus
    one zero-copy frame per tensor; every byte received is checked before use.  */
#include "za/za_wire.h"
#include "za/za_util.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define WIRE_LEASE_POLL_NS 10000        //  za_wire_lease_wait's sleep step: 10 us
#define WIRE_QUOTE_MAX_CHARS 48         //  wire strings quoted in errors are cut here
#define WIRE_SHAPE_TEXT_CHARS 192       //  "d0xd1x...": 8 dims of 20 digits
#define WIRE_CODE_BYTES sizeof (((za_wire_msg_t *) 0)->code)
#define WIRE_ERROR_BYTES sizeof (((za_wire_msg_t *) 0)->error)
//  opt.kind: 1..15 bytes (PROTOCOL.md 2).
#define WIRE_OPT_SCHEDULE "schedule"
#define WIRE_OPT_WEIGHT_DECAY "weight_decay"
#define WIRE_OPTIMIZER_BYTES 16

static const char *s_op_names [] = {
    NULL, "init", "init_ok", "pull", "push", "values", "hold", "held", "snapshot",
    "snapshot_data", "release", "released", "stop", "stopping", "bye", "bye_ok",
    "error", "ping", "pong", "register", "welcome", "report", "view", "watch", "state",
    "ring", "broadcast", "resync", "checkpoint", "slots", "offer",
    "link"
};
#define WIRE_OP_LAST ZA_OP_LINK

//  Header keys, in the order they are written.
typedef enum {
    KEY_V, KEY_OP, KEY_SEQ, KEY_STEP, KEY_TASK, KEY_PS, KEY_CODE, KEY_ERROR, KEY_OPT,
    KEY_BODY, KEY_SHM, KEY_TENSORS, KEY_COUNT
} s_key_t;
static const char *s_key_names [KEY_COUNT] = {
    "v", "op", "seq", "step", "task", "ps", "code", "error", "opt", "body", "shm", "tensors"
};

//  Keys of the "opt" map; all are required.
typedef enum {
    OPT_KIND, OPT_LR, OPT_MOMENTUM, OPT_BETA1, OPT_BETA2, OPT_EPSILON, OPT_ACC0,
    OPT_NESTEROV, OPT_COUNT
} s_opt_key_t;
static const char *s_opt_names [OPT_COUNT] = {
    "kind", "lr", "momentum", "beta1", "beta2", "epsilon", "acc0", "nesterov"
};

//  Keys of a tensor map; all are required.
typedef enum {
    TENSOR_NAME, TENSOR_DTYPE, TENSOR_SHAPE, TENSOR_FRAME, TENSOR_COUNT
} s_tensor_key_t;
static const char *s_tensor_names [TENSOR_COUNT] = { "name", "dtype", "shape", "frame" };


//  --------------------------------------------------------------------------
//  Small helpers

static const char *
s_dtype_name (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32 ? "f32" : dtype == ZA_DTYPE_BF16 ? "bf16" : "i64";
}

static bool
s_dtype_valid (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32 || dtype == ZA_DTYPE_I64 || dtype == ZA_DTYPE_BF16;
}

//  "4x3", "0", or "scalar", for error messages.
static const char *
s_shape_text (int ndim, const int64_t *shape, char *text, size_t size)
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

//  A string from the wire made safe to print: at most WIRE_QUOTE_MAX_CHARS
//  bytes, control characters and non-ASCII bytes shown as '?'.
static const char *
s_quote (const char *bytes, size_t size, char *text)
{
    size_t shown = size > WIRE_QUOTE_MAX_CHARS ? WIRE_QUOTE_MAX_CHARS : size;
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char) bytes [i];
        text [i] = c < 0x20 || c >= 0x7f ? '?' : (char) c;
    }
    strcpy (text + shown, size > shown ? "..." : "");
    return text;
}

//  Size of s_quote's output buffer.
#define WIRE_QUOTE_BYTES (WIRE_QUOTE_MAX_CHARS + 4)


//  --------------------------------------------------------------------------
//  Ops

const char *
za_op_name (za_op_t op)
{
    if ((int) op < ZA_OP_INIT || (int) op > WIRE_OP_LAST)
        return NULL;
    return s_op_names [op];
}

int
za_op_parse (const char *name, za_op_t *op)
{
    if (!name || !op)
        return -1;
    for (int i = ZA_OP_INIT; i <= WIRE_OP_LAST; i++)
        if (strcmp (name, s_op_names [i]) == 0) {
            *op = (za_op_t) i;
            return 0;
        }
    return -1;
}

const char *
za_wire_name (za_wire_names_t list, int i)
{
    static const char *opt_optional [] = {WIRE_OPT_SCHEDULE, WIRE_OPT_WEIGHT_DECAY};
    if (i < 0)
        return NULL;
    switch (list) {
        case ZA_WIRE_OPS:
            return i < WIRE_OP_LAST? s_op_names [ZA_OP_INIT + i]: NULL;
        case ZA_WIRE_HEADER_KEYS:
            return i < KEY_COUNT? s_key_names [i]: NULL;
        case ZA_WIRE_OPT_KEYS:
            return i < OPT_COUNT? s_opt_names [i]: i < OPT_COUNT + 2? opt_optional [i - OPT_COUNT]
                 : NULL;
        case ZA_WIRE_TENSOR_KEYS:
            return i < TENSOR_COUNT? s_tensor_names [i]: NULL;
    }
    return NULL;
}

//  za_op_parse over a msgpack string (not NUL-terminated).
static int
s_op_parse_bytes (const char *bytes, size_t size, za_op_t *op)
{
    for (int i = ZA_OP_INIT; i <= WIRE_OP_LAST; i++)
        if (strlen (s_op_names [i]) == size && memcmp (bytes, s_op_names [i], size) == 0) {
            *op = (za_op_t) i;
            return 0;
        }
    return -1;
}


//  --------------------------------------------------------------------------
//  Building a message

void
za_wire_msg_init (za_wire_msg_t *msg, za_op_t op)
{
    //  The tensor table (most of the struct) is read only up to tensor_count.
    memset (msg, 0, offsetof (za_wire_msg_t, tensors));
    msg->op = op;
    msg->step = -1;
    msg->task = -1;
    msg->ps = -1;
}

//  Checks one tensor descriptor as the encoder will send it; `what` names the
//  caller in the error. Returns 0 or -1 with an error.
static int
s_check_tensor (const za_wire_tensor_t *tensor, const char *what)
{
    size_t name_len = strnlen (tensor->name, ZA_WIRE_NAME_MAX);
    if (name_len == 0)
        return za_error ("wire: %s: a tensor name is empty", what);
    if (name_len >= ZA_WIRE_NAME_MAX)
        return za_error ("wire: %s: tensor name '%.40s...' is longer than %d bytes", what,
                         tensor->name, ZA_WIRE_NAME_MAX - 1);
    if (!s_dtype_valid (tensor->dtype))
        return za_error ("wire: %s: tensor '%s' has unknown dtype %d", what, tensor->name,
                         (int) tensor->dtype);
    if (tensor->ndim < 0 || tensor->ndim > ZA_WIRE_MAX_DIMS)
        return za_error ("wire: %s: tensor '%s' has %d dims (0..%d allowed)", what,
                         tensor->name, tensor->ndim, ZA_WIRE_MAX_DIMS);
    char shape_text [WIRE_SHAPE_TEXT_CHARS];
    uint64_t bytes;
    if (za_tensor_bytes (tensor->dtype, tensor->ndim, tensor->shape, &bytes))
        return za_error ("wire: %s: tensor '%s' has shape %s: a dim is negative or its "
                         "size overflows", what, tensor->name,
                         s_shape_text (tensor->ndim, tensor->shape, shape_text,
                                       sizeof shape_text));
    if (bytes > ZA_WIRE_MAX_FRAME_BYTES)
        return za_error ("wire: %s: tensor '%s' is %" PRIu64 " bytes, more than the frame "
                         "limit of %u", what, tensor->name, bytes, ZA_WIRE_MAX_FRAME_BYTES);
    if (tensor->bytes != bytes)
        return za_error ("wire: %s: tensor '%s' says %zu bytes but %s %s is %" PRIu64, what,
                         tensor->name, tensor->bytes,
                         s_shape_text (tensor->ndim, tensor->shape, shape_text,
                                       sizeof shape_text),
                         s_dtype_name (tensor->dtype), bytes);
    if (bytes > 0 && !tensor->data)
        return za_error ("wire: %s: tensor '%s' has %" PRIu64 " bytes but no data", what,
                         tensor->name, bytes);
    return 0;
}

int
za_wire_msg_add (za_wire_msg_t *msg, const char *name, za_dtype_t dtype, int ndim,
                 const int64_t *shape, const void *data)
{
    if (!msg || !name)
        return za_error ("wire: za_wire_msg_add: no message or no name");
    if (msg->tensor_count < 0 || msg->tensor_count >= ZA_WIRE_MAX_TENSORS)
        return za_error ("wire: cannot add tensor '%.40s': the message already holds %d "
                         "tensors (limit %d)", name, msg->tensor_count, ZA_WIRE_MAX_TENSORS);
    size_t name_len = strlen (name);
    if (name_len == 0 || name_len >= ZA_WIRE_NAME_MAX)
        return za_error ("wire: cannot add tensor '%.40s%s': a name is 1..%d bytes, not %zu",
                         name, name_len > 40 ? "..." : "", ZA_WIRE_NAME_MAX - 1, name_len);
    if (ndim < 0 || ndim > ZA_WIRE_MAX_DIMS || (ndim > 0 && !shape))
        return za_error ("wire: cannot add tensor '%s': %d dims%s (0..%d allowed)", name, ndim,
                         ndim > 0 && !shape ? " but no shape" : "", ZA_WIRE_MAX_DIMS);
    for (int i = 0; i < msg->tensor_count; i++)
        if (strcmp (msg->tensors [i].name, name) == 0)
            return za_error ("wire: cannot add tensor '%s': the message already has one of "
                             "that name", name);

    za_wire_tensor_t tensor;
    memset (&tensor, 0, sizeof tensor);
    memcpy (tensor.name, name, name_len + 1);
    tensor.dtype = dtype;
    tensor.ndim = ndim;
    for (int dim = 0; dim < ndim; dim++)
        tensor.shape [dim] = shape [dim];
    tensor.data = data;
    uint64_t bytes = 0;
    if (s_dtype_valid (dtype) && za_tensor_bytes (dtype, ndim, tensor.shape, &bytes) == 0)
        tensor.bytes = (size_t) bytes;
    if (s_check_tensor (&tensor, "cannot add"))
        return -1;
    msg->tensors [msg->tensor_count++] = tensor;
    return 0;
}


//  --------------------------------------------------------------------------
//  Leases

void
za_wire_lease_init (za_wire_lease_t *lease)
{
    atomic_init (&lease->pending, 0);
}

int
za_wire_lease_busy (za_wire_lease_t *lease)
{
    return atomic_load (&lease->pending) > 0;
}

void
za_wire_lease_wait (za_wire_lease_t *lease)
{
    struct timespec step = { 0, WIRE_LEASE_POLL_NS };
    while (za_wire_lease_busy (lease))
        nanosleep (&step, NULL);
}

//  libzmq's free function for a tensor frame: called once per frame, from the
//  I/O thread or from whichever thread closes the last copy of the frame.
static void
s_release (void *data, void *hint)
{
    (void) data;
    za_wire_lease_t *lease = (za_wire_lease_t *) hint;
    atomic_fetch_sub (&lease->pending, 1);
}


//  --------------------------------------------------------------------------
//  Sending

static int
s_pack_str (msgpack_packer *pk, const char *text)
{
    size_t len = strlen (text);
    return msgpack_pack_str (pk, len) || msgpack_pack_str_body (pk, text, len) ? -1 : 0;
}

static int
s_pack_key (msgpack_packer *pk, const char *key)
{
    return s_pack_str (pk, key);
}

//  The optimizer as za_optim_config_t holds it: its kind's name, each float
//  as a float64, nesterov as a bool.
static int
s_pack_optim (msgpack_packer *pk, const za_optim_config_t *optim)
{
    const double numbers [] = { optim->learning_rate, optim->momentum, optim->beta1,
                                optim->beta2, optim->epsilon, optim->initial_accumulator };
    //  A schedule (not the constant rate) goes as "schedule": its numbers.
    const za_schedule_t *schedule = &optim->schedule;
    int scheduled = schedule->kind != ZA_SCHEDULE_CONSTANT || schedule->warmup_steps > 0;
    int decayed = optim->weight_decay != 0;
    if (msgpack_pack_map (pk, OPT_COUNT + (scheduled? 1: 0) + (decayed? 1: 0))
    ||  s_pack_key (pk, s_opt_names [OPT_KIND]) || s_pack_str (pk, za_optim_name (optim->kind)))
        return -1;
    if (decayed && (s_pack_key (pk, WIRE_OPT_WEIGHT_DECAY)
                    || msgpack_pack_double (pk, optim->weight_decay)))
        return -1;
    if (scheduled) {
        double values [ZA_SCHEDULE_NUMBERS];
        za_schedule_numbers (schedule, values);
        if (s_pack_key (pk, WIRE_OPT_SCHEDULE) || msgpack_pack_array (pk, ZA_SCHEDULE_NUMBERS))
            return -1;
        for (int i = 0; i < ZA_SCHEDULE_NUMBERS; i++)
            if (msgpack_pack_double (pk, values [i]))
                return -1;
    }
    for (int i = OPT_LR; i <= OPT_ACC0; i++)
        if (s_pack_key (pk, s_opt_names [i]) || msgpack_pack_double (pk, numbers [i - OPT_LR]))
            return -1;
    if (s_pack_key (pk, s_opt_names [OPT_NESTEROV])
    ||  (optim->nesterov ? msgpack_pack_true (pk) : msgpack_pack_false (pk)))
        return -1;
    return 0;
}

static int
s_pack_tensors (msgpack_packer *pk, const za_wire_msg_t *msg)
{
    if (msgpack_pack_array (pk, (size_t) msg->tensor_count))
        return -1;
    for (int i = 0; i < msg->tensor_count; i++) {
        const za_wire_tensor_t *tensor = &msg->tensors [i];
        if (msgpack_pack_map (pk, TENSOR_COUNT)
        ||  s_pack_key (pk, s_tensor_names [TENSOR_NAME]) || s_pack_str (pk, tensor->name)
        ||  s_pack_key (pk, s_tensor_names [TENSOR_DTYPE])
        ||  s_pack_str (pk, s_dtype_name (tensor->dtype))
        ||  s_pack_key (pk, s_tensor_names [TENSOR_SHAPE])
        ||  msgpack_pack_array (pk, (size_t) tensor->ndim))
            return -1;
        for (int dim = 0; dim < tensor->ndim; dim++)
            if (msgpack_pack_int64 (pk, tensor->shape [dim]))
                return -1;
        if (s_pack_key (pk, s_tensor_names [TENSOR_FRAME]) || msgpack_pack_int (pk, i))
            return -1;
    }
    return 0;
}

static int
s_pack_header (msgpack_packer *pk, const za_wire_msg_t *msg)
{
    bool present [KEY_COUNT] = {
        [KEY_V] = true, [KEY_OP] = true, [KEY_SEQ] = true,
        [KEY_STEP] = msg->step != -1, [KEY_TASK] = msg->task != -1, [KEY_PS] = msg->ps != -1,
        [KEY_CODE] = msg->code [0] != 0, [KEY_ERROR] = msg->error [0] != 0,
        [KEY_OPT] = msg->has_optim != 0, [KEY_BODY] = msg->body != NULL, [KEY_SHM] = msg->shm != NULL,
        [KEY_TENSORS] = msg->tensor_count > 0
    };
    size_t count = 0;
    for (int key = 0; key < KEY_COUNT; key++)
        count += present [key];
    if (msgpack_pack_map (pk, count))
        return -1;
    for (int key = 0; key < KEY_COUNT; key++) {
        if (!present [key])
            continue;
        if (s_pack_key (pk, s_key_names [key]))
            return -1;
        int rc = 0;
        switch ((s_key_t) key) {
            case KEY_V:       rc = msgpack_pack_int (pk, ZA_WIRE_VERSION); break;
            case KEY_OP:      rc = s_pack_str (pk, za_op_name (msg->op)); break;
            case KEY_SEQ:     rc = msgpack_pack_uint64 (pk, msg->seq); break;
            case KEY_STEP:    rc = msgpack_pack_int64 (pk, msg->step); break;
            case KEY_TASK:    rc = msgpack_pack_int32 (pk, msg->task); break;
            case KEY_PS:      rc = msgpack_pack_int32 (pk, msg->ps); break;
            case KEY_CODE:    rc = s_pack_str (pk, msg->code); break;
            case KEY_ERROR:   rc = s_pack_str (pk, msg->error); break;
            case KEY_OPT:     rc = s_pack_optim (pk, &msg->optim); break;
            case KEY_BODY:    rc = msgpack_pack_str (pk, msg->body_len)
                                || msgpack_pack_str_body (pk, msg->body, msg->body_len);
                              break;
            case KEY_SHM:     rc = msgpack_pack_str (pk, msg->shm_len)
                                || msgpack_pack_str_body (pk, msg->shm, msg->shm_len);
                              break;
            case KEY_TENSORS: rc = s_pack_tensors (pk, msg); break;
            case KEY_COUNT:   break;
        }
        if (rc)
            return -1;
    }
    return 0;
}

//  Checks a message before anything of it is sent, so that what goes out
//  always decodes. Returns 0 or -1 with an error.
static int
s_check_outgoing (const za_wire_msg_t *msg, const za_wire_lease_t *lease)
{
    if (!za_op_name (msg->op))
        return za_error ("wire: cannot send: unknown op %d", (int) msg->op);
    if (msg->tensor_count < 0 || msg->tensor_count > ZA_WIRE_MAX_TENSORS)
        return za_error ("wire: cannot send: %d tensors (0..%d allowed)", msg->tensor_count,
                         ZA_WIRE_MAX_TENSORS);
    if (msg->tensor_count > 0 && !lease && !msg->payload_elsewhere)
        return za_error ("wire: cannot send %s with %d tensors without a lease",
                         za_op_name (msg->op), msg->tensor_count);
    if (msg->step < -1 || msg->task < -1 || msg->ps < -1)
        return za_error ("wire: cannot send: step, task and ps are >= 0, or -1 when absent "
                         "(got %" PRId64 ", %d, %d)", msg->step, msg->task, msg->ps);
    if (strnlen (msg->code, WIRE_CODE_BYTES) == WIRE_CODE_BYTES
    ||  strnlen (msg->error, WIRE_ERROR_BYTES) == WIRE_ERROR_BYTES)
        return za_error ("wire: cannot send: code or error is not NUL-terminated");
    if (msg->body && msg->body_len > ZA_WIRE_MAX_BODY_BYTES)
        return za_error ("wire: cannot send: a body of %zu bytes (at most %d)", msg->body_len,
                         ZA_WIRE_MAX_BODY_BYTES);
    if (msg->body && memchr (msg->body, 0, msg->body_len))
        return za_error ("wire: cannot send: the body contains a NUL byte");
    if (msg->shm && (msg->shm_len > ZA_WIRE_MAX_SHM_BYTES || memchr (msg->shm, 0, msg->shm_len)))
        return za_error ("wire: cannot send: an shm word of %zu bytes or with a NUL byte",
                         msg->shm_len);
    if (msg->has_optim) {
        if (!za_optim_known (msg->optim.kind))
            return za_error ("wire: cannot send: has_optim but no known optimizer kind");
        const float numbers [] = { msg->optim.learning_rate, msg->optim.momentum,
                                   msg->optim.beta1, msg->optim.beta2, msg->optim.epsilon,
                                   msg->optim.initial_accumulator };
        for (int i = 0; i < OPT_ACC0 - OPT_LR + 1; i++)
            if (!isfinite (numbers [i]))
                return za_error ("wire: cannot send: optimizer '%s' is not finite",
                                 s_opt_names [OPT_LR + i]);
    }
    for (int i = 0; i < msg->tensor_count; i++)
        if (s_check_tensor (&msg->tensors [i], "cannot send"))
            return -1;
    return 0;
}

//  Ends a multipart message cut short by a failed send, so the socket is not
//  left in the middle of one: the peer gets a message that does not decode.
static void
s_end_message (void *handle)
{
    zmq_send (handle, "", 0, 0);
}

//  Packs msg's header into *header (initialised here; the caller destroys
//  it). Returns 0, or -1 with an error.
static int
s_pack (const za_wire_msg_t *msg, za_wire_lease_t *lease, msgpack_sbuffer *header)
{
    msgpack_sbuffer_init (header);
    if (s_check_outgoing (msg, lease))
        return -1;
    msgpack_packer packer;
    msgpack_packer_init (&packer, header, msgpack_sbuffer_write);
    if (s_pack_header (&packer, msg))
        return za_error ("wire: cannot send %s: out of memory packing the header",
                         za_op_name (msg->op));
    if (header->size > ZA_WIRE_MAX_HEADER_BYTES)
        return za_error ("wire: cannot send %s: header of %zu bytes exceeds the limit of %d",
                         za_op_name (msg->op), header->size, ZA_WIRE_MAX_HEADER_BYTES);
    return 0;
}

int
za_wire_pack (const za_wire_msg_t *msg, char *bytes, size_t size)
{
    if (!msg || !msg->payload_elsewhere)
        return za_error ("wire: za_wire_pack: only for a message whose payloads are held "
                         "elsewhere");
    msgpack_sbuffer header;
    int rc = s_pack (msg, NULL, &header);
    if (rc == 0 && header.size > size)
        rc = za_error ("wire: za_wire_pack: a header of %zu bytes for %zu", header.size, size);
    if (rc == 0) {
        memcpy (bytes, header.data, header.size);
        rc = (int) header.size;
    }
    msgpack_sbuffer_destroy (&header);
    return rc;
}

int
za_wire_send (zsock_t *sock, zframe_t *routing_id, const za_wire_msg_t *msg,
              za_wire_lease_t *lease)
{
    if (!sock || !msg)
        return za_error ("wire: za_wire_send: no socket or no message");
    void *handle = zsock_resolve (sock);
    msgpack_sbuffer header;
    if (s_pack (msg, lease, &header)) {
        msgpack_sbuffer_destroy (&header);
        return -1;
    }

    //  The header is copied (it is small); only tensor bytes go zero-copy.
    bool started = false;
    if (routing_id) {
        if (zmq_send (handle, zframe_data (routing_id), zframe_size (routing_id),
                      ZMQ_SNDMORE) == -1)
            goto failed;
        started = true;
    }
    int frames = msg->payload_elsewhere? 0: msg->tensor_count;
    if (zmq_send (handle, header.data, header.size, frames > 0 ? ZMQ_SNDMORE : 0) == -1)
        goto failed;
    started = true;
    msgpack_sbuffer_destroy (&header);

    for (int i = 0; i < frames; i++) {
        const za_wire_tensor_t *tensor = &msg->tensors [i];
        zmq_msg_t part;
        if (zmq_msg_init_data (&part, (void *) tensor->data, tensor->bytes, s_release, lease)) {
            int err = errno;
            s_end_message (handle);
            return za_error ("wire: cannot send %s: tensor '%s': %s", za_op_name (msg->op),
                             tensor->name, zmq_strerror (err));
        }
        //  Counted before the send, so the release can never come first.
        atomic_fetch_add (&lease->pending, 1);
        if (zmq_msg_send (&part, handle, i + 1 < frames ? ZMQ_SNDMORE : 0) == -1) {
            int err = errno;
            zmq_msg_close (&part);      //  still ours: this releases it from the lease
            s_end_message (handle);
            return za_error ("wire: cannot send %s: tensor '%s': %s", za_op_name (msg->op),
                             tensor->name, zmq_strerror (err));
        }
    }
    return 0;

failed: {
        int err = errno;
        msgpack_sbuffer_destroy (&header);
        if (started)
            s_end_message (handle);
        //  A send that would block (no peer yet, or its queue full) is the
        //  caller's to say, once, with who the peer is: it repeats.
        char text [256];
        snprintf (text, sizeof text, "wire: cannot send %s: %s", za_op_name (msg->op),
                  zmq_strerror (err));
        return err == EAGAIN? za_error_adopt (text): za_error ("%s", text);
    }
}


//  --------------------------------------------------------------------------
//  Pre-pass: checks the msgpack bytes before msgpack-c sees them, since it
//  has no limits of its own (a 5-byte array32 header makes it allocate
//  gigabytes). Every declared length and count must fit in what remains.

typedef struct {
    const uint8_t *bytes;
    size_t size;
    size_t pos;
} s_scanner_t;

static uint64_t
s_read_be (const uint8_t *bytes, int n)
{
    uint64_t value = 0;
    for (int i = 0; i < n; i++)
        value = value << 8 | bytes [i];
    return value;
}

//  The msgpack family of a first byte, for messages.
static const char *
s_tag_name (uint8_t tag)
{
    if (tag <= 0x7f || tag >= 0xe0 || (tag >= 0xcc && tag <= 0xd3))
        return "int";
    if (tag <= 0x8f || tag == 0xde || tag == 0xdf)
        return "map";
    if (tag <= 0x9f || tag == 0xdc || tag == 0xdd)
        return "array";
    if (tag <= 0xbf || (tag >= 0xd9 && tag <= 0xdb))
        return "str";
    switch (tag) {
        case 0xc0: return "nil";
        case 0xc2: case 0xc3: return "bool";
        case 0xc4: case 0xc5: case 0xc6: return "bin";
        case 0xca: case 0xcb: return "float";
        case 0xc1: return "reserved byte 0xc1";
        default: return "ext";
    }
}

static int
s_scan_value (s_scanner_t *scan, int depth)
{
    if (scan->pos >= scan->size)
        return za_error ("wire: header truncated: a value is missing at offset %zu", scan->pos);
    size_t at = scan->pos;
    uint8_t tag = scan->bytes [scan->pos++];
    int length_bytes = 0;               //  bytes of the length/count field that follows
    uint64_t fixed = 0;                 //  bytes of a fixed-size body (or of a fix* length)
    uint64_t extra = 0;                 //  an ext's type byte
    int container = 0;                  //  elements per count: 1 array, 2 map
    bool has_count = false;

    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3)
        return 0;
    else
    if (tag <= 0x8f) {
        container = 2;
        fixed = tag & 0x0f;
        has_count = true;
    }
    else
    if (tag <= 0x9f) {
        container = 1;
        fixed = tag & 0x0f;
        has_count = true;
    }
    else
    if (tag <= 0xbf)
        fixed = tag & 0x1f;
    else
    switch (tag) {
        case 0xc1:
            return za_error ("wire: header has the never-used byte 0xc1 at offset %zu", at);
        case 0xc4: case 0xd9: length_bytes = 1; break;
        case 0xc5: case 0xda: length_bytes = 2; break;
        case 0xc6: case 0xdb: length_bytes = 4; break;
        case 0xc7: length_bytes = 1; extra = 1; break;
        case 0xc8: length_bytes = 2; extra = 1; break;
        case 0xc9: length_bytes = 4; extra = 1; break;
        case 0xca: fixed = 4; break;
        case 0xcb: fixed = 8; break;
        case 0xcc: case 0xd0: fixed = 1; break;
        case 0xcd: case 0xd1: fixed = 2; break;
        case 0xce: case 0xd2: fixed = 4; break;
        case 0xcf: case 0xd3: fixed = 8; break;
        case 0xd4: fixed = 1 + 1; break;
        case 0xd5: fixed = 1 + 2; break;
        case 0xd6: fixed = 1 + 4; break;
        case 0xd7: fixed = 1 + 8; break;
        case 0xd8: fixed = 1 + 16; break;
        case 0xdc: container = 1; length_bytes = 2; has_count = true; break;
        case 0xdd: container = 1; length_bytes = 4; has_count = true; break;
        case 0xde: container = 2; length_bytes = 2; has_count = true; break;
        case 0xdf: container = 2; length_bytes = 4; has_count = true; break;
        default: break;
    }
    if (container && depth > ZA_WIRE_MAX_DEPTH)
        return za_error ("wire: header nests deeper than %d levels (%s at offset %zu)",
                         ZA_WIRE_MAX_DEPTH, s_tag_name (tag), at);

    size_t left = scan->size - scan->pos;
    uint64_t declared = fixed;
    if (length_bytes > 0) {
        if ((size_t) length_bytes > left)
            return za_error ("wire: header truncated: the length of the %s at offset %zu "
                             "needs %d bytes, only %zu left", s_tag_name (tag), at,
                             length_bytes, left);
        declared = s_read_be (scan->bytes + scan->pos, length_bytes);
        scan->pos += (size_t) length_bytes;
        left -= (size_t) length_bytes;
    }
    if (!has_count) {
        //  A scalar or a str/bin/ext body: exactly this many bytes follow.
        uint64_t body = declared + extra;
        if (body > left)
            return za_error ("wire: header truncated or corrupt: the %s at offset %zu "
                             "declares %" PRIu64 " bytes, only %zu left", s_tag_name (tag), at,
                             body, left);
        scan->pos += (size_t) body;
        return 0;
    }
    //  A container: each element takes at least one byte.
    uint64_t elements = declared * (uint64_t) container;
    if (elements > left)
        return za_error ("wire: header truncated or corrupt: the %s at offset %zu declares "
                         "%" PRIu64 " %s, needing at least %" PRIu64 " bytes, only %zu left",
                         s_tag_name (tag), at, declared,
                         container == 2 ? "entries" : "elements",
                         elements, left);
    for (uint64_t i = 0; i < elements; i++)
        if (s_scan_value (scan, depth + 1))
            return -1;
    return 0;
}

static int
s_scan_header (const uint8_t *bytes, size_t size)
{
    s_scanner_t scan = { bytes, size, 0 };
    if (s_scan_value (&scan, 1))
        return -1;
    if (scan.pos != size)
        return za_error ("wire: header has %zu bytes after its end (offset %zu)",
                         size - scan.pos, scan.pos);
    uint8_t tag = bytes [0];
    if (!((tag >= 0x80 && tag <= 0x8f) || tag == 0xde || tag == 0xdf))
        return za_error ("wire: header is a msgpack %s, not a map", s_tag_name (tag));
    return 0;
}


//  --------------------------------------------------------------------------
//  Reading the unpacked header

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

//  Index of a str key in names [0..count), or -1 (not a str, or not known).
static int
s_key_index (const msgpack_object *key, const char *const *names, int count)
{
    if (key->type != MSGPACK_OBJECT_STR)
        return -1;
    for (int i = 0; i < count; i++)
        if (strlen (names [i]) == key->via.str.size
        &&  memcmp (key->via.str.ptr, names [i], key->via.str.size) == 0)
            return i;
    return -1;
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
    if (obj->type != MSGPACK_OBJECT_ARRAY || obj->via.array.size != ZA_SCHEDULE_NUMBERS)
        return za_error ("wire: 'opt.%s' must be an array of %d numbers", WIRE_OPT_SCHEDULE,
                         ZA_SCHEDULE_NUMBERS);
    double numbers [ZA_SCHEDULE_NUMBERS];
    for (int i = 0; i < ZA_SCHEDULE_NUMBERS; i++)
        if (s_get_number (&obj->via.array.ptr [i], "'opt.schedule'", &numbers [i]))
            return -1;
    za_schedule_from_numbers (schedule, numbers);
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
    float *numbers [] = { &optim->learning_rate, &optim->momentum, &optim->beta1,
                          &optim->beta2, &optim->epsilon, &optim->initial_accumulator };
    memset (&optim->schedule, 0, sizeof optim->schedule);
    optim->weight_decay = 0;
    for (uint32_t i = 0; i < obj->via.map.size; i++) {
        const msgpack_object_kv *kv = &obj->via.map.ptr [i];
        static const char *optional [] = {WIRE_OPT_SCHEDULE, WIRE_OPT_WEIGHT_DECAY};
        int which = s_key_index (&kv->key, optional, 2);
        if (which == 0) {
            if (s_decode_schedule (&kv->val, &optim->schedule))
                return -1;
            continue;
        }
        if (which == 1) {
            double decay = 0;
            if (s_get_number (&kv->val, "'opt.weight_decay'", &decay))
                return -1;
            optim->weight_decay = s_float_of (decay);
            continue;
        }
        int key = s_key_index (&kv->key, s_opt_names, OPT_COUNT);
        if (key < 0)
            continue;                   //  unknown: a newer peer's field
        char what [32];
        snprintf (what, sizeof what, "'opt.%s'", s_opt_names [key]);
        if (seen [key])
            return za_error ("wire: %s appears twice", what);
        seen [key] = true;
        if (key == OPT_KIND) {
            char kind [WIRE_OPTIMIZER_BYTES];
            if (s_get_str (&kv->val, what, 1, kind, sizeof kind))
                return -1;
            optim->kind = za_optim_kind_of (kind);
        }
        else
        if (key == OPT_NESTEROV) {
            if (kv->val.type != MSGPACK_OBJECT_BOOLEAN)
                return za_error ("wire: %s must be a bool, got %s", what,
                                 s_type_name (kv->val.type));
            optim->nesterov = kv->val.via.boolean ? 1 : 0;
        }
        else {
            double number = 0;
            if (s_get_number (&kv->val, what, &number))
                return -1;
            *numbers [key - OPT_LR] = s_float_of (number);
        }
    }
    for (int key = 0; key < OPT_COUNT; key++)
        if (!seen [key])
            return za_error ("wire: 'opt' has no '%s'", s_opt_names [key]);
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

static int
s_decode_tensor (const msgpack_object *obj, int index, za_wire_msg_t *out, s_payload_t *payload)
{
    if (obj->type != MSGPACK_OBJECT_MAP)
        return za_error ("wire: tensor %d must be a map, got %s", index,
                         s_type_name (obj->type));
    const msgpack_object *values [TENSOR_COUNT] = { NULL };
    for (uint32_t i = 0; i < obj->via.map.size; i++) {
        const msgpack_object_kv *kv = &obj->via.map.ptr [i];
        int key = s_key_index (&kv->key, s_tensor_names, TENSOR_COUNT);
        if (key < 0)
            continue;
        if (values [key])
            return za_error ("wire: tensor %d has '%s' twice", index, s_tensor_names [key]);
        values [key] = &kv->val;
    }
    for (int key = 0; key < TENSOR_COUNT; key++)
        if (!values [key])
            return za_error ("wire: tensor %d has no '%s'", index, s_tensor_names [key]);

    za_wire_tensor_t *tensor = &out->tensors [index];
    char what [64];
    snprintf (what, sizeof what, "tensor %d's name", index);
    if (s_get_str (values [TENSOR_NAME], what, 1, tensor->name, sizeof tensor->name))
        return -1;
    char name [WIRE_QUOTE_BYTES];
    s_quote (tensor->name, strlen (tensor->name), name);
    for (int i = 0; i < index; i++)
        if (strcmp (out->tensors [i].name, tensor->name) == 0)
            return za_error ("wire: tensor %d: name '%s' is already used by tensor %d", index,
                             name, i);

    const msgpack_object *dtype = values [TENSOR_DTYPE];
    if (dtype->type != MSGPACK_OBJECT_STR)
        return za_error ("wire: tensor '%s': 'dtype' must be a str, got %s", name,
                         s_type_name (dtype->type));
    if (dtype->via.str.size == 3 && memcmp (dtype->via.str.ptr, "f32", 3) == 0)
        tensor->dtype = ZA_DTYPE_F32;
    else
    if (dtype->via.str.size == 3 && memcmp (dtype->via.str.ptr, "i64", 3) == 0)
        tensor->dtype = ZA_DTYPE_I64;
    else
    if (dtype->via.str.size == 4 && memcmp (dtype->via.str.ptr, "bf16", 4) == 0)
        tensor->dtype = ZA_DTYPE_BF16;
    else {
        char text [WIRE_QUOTE_BYTES];
        return za_error ("wire: tensor '%s': unknown dtype '%s' (expected \"f32\", \"bf16\" "
                         "or \"i64\")", name,
                         s_quote (dtype->via.str.ptr, dtype->via.str.size, text));
    }

    const msgpack_object *shape = values [TENSOR_SHAPE];
    if (shape->type != MSGPACK_OBJECT_ARRAY)
        return za_error ("wire: tensor '%s': 'shape' must be an array, got %s", name,
                         s_type_name (shape->type));
    if (shape->via.array.size > ZA_WIRE_MAX_DIMS)
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
        snprintf (what, sizeof what, "tensor '%.20s' dim %d", name, dim);
        int64_t size = 0;
        if (s_get_int (value, what, 0, INT64_MAX, &size))
            return -1;
        tensor->shape [dim] = size;
    }
    char shape_text [WIRE_SHAPE_TEXT_CHARS];
    uint64_t bytes;
    if (za_tensor_bytes (tensor->dtype, tensor->ndim, tensor->shape, &bytes)) {
        s_shape_text (tensor->ndim, tensor->shape, shape_text, sizeof shape_text);
        return za_error ("wire: tensor '%s': shape %s %s overflows", name, shape_text,
                         s_dtype_name (tensor->dtype));
    }
    if (bytes > ZA_WIRE_MAX_FRAME_BYTES) {
        s_shape_text (tensor->ndim, tensor->shape, shape_text, sizeof shape_text);
        return za_error ("wire: tensor '%s' declares %s %s (%" PRIu64 " bytes), more than "
                         "the frame limit of %u", name, shape_text,
                         s_dtype_name (tensor->dtype), bytes, ZA_WIRE_MAX_FRAME_BYTES);
    }

    const msgpack_object *frame = values [TENSOR_FRAME];
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
                         frame_index, s_quote (other_name, strlen (other_name), other));
    }
    payload->user [frame_index] = (int16_t) (index + 1);

    size_t frame_bytes = payload->size [frame_index];
    if (frame_bytes != bytes) {
        s_shape_text (tensor->ndim, tensor->shape, shape_text, sizeof shape_text);
        return za_error ("wire: tensor '%s' declares %s %s (%" PRIu64 " bytes) but frame %d "
                         "has %zu bytes", name, shape_text, s_dtype_name (tensor->dtype),
                         bytes, frame_index, frame_bytes);
    }
    tensor->bytes = frame_bytes;
    tensor->data = payload->data [frame_index];
    return 0;
}

static int
s_decode_tensors (const msgpack_object *obj, za_wire_msg_t *out, s_payload_t *payload,
                  int *count_p)
{
    if (obj->type != MSGPACK_OBJECT_ARRAY)
        return za_error ("wire: 'tensors' must be an array, got %s", s_type_name (obj->type));
    if (obj->via.array.size > ZA_WIRE_MAX_TENSORS)
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
        if (s_key_index (&map->via.map.ptr [i].key, s_key_names, KEY_COUNT) == KEY_V) {
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

static int
s_decode_header (const msgpack_object *map, za_wire_msg_t *out, s_payload_t *payload,
                 int *count_p)
{
    if (s_check_version (map))
        return -1;
    bool seen [KEY_COUNT] = { false };
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr [i];
        int key = s_key_index (&kv->key, s_key_names, KEY_COUNT);
        if (key < 0 || key == KEY_V)
            continue;                   //  unknown keys: a newer peer's fields
        if (seen [key])
            return za_error ("wire: header has '%s' twice", s_key_names [key]);
        seen [key] = true;
        char what [32];
        snprintf (what, sizeof what, "'%s'", s_key_names [key]);
        const msgpack_object *value = &kv->val;
        int64_t number = 0;
        switch ((s_key_t) key) {
            case KEY_OP:
                if (value->type != MSGPACK_OBJECT_STR)
                    return za_error ("wire: 'op' must be a str, got %s",
                                     s_type_name (value->type));
                if (s_op_parse_bytes (value->via.str.ptr, value->via.str.size, &out->op)) {
                    char text [WIRE_QUOTE_BYTES];
                    return za_error ("wire: unknown op '%s'",
                                     s_quote (value->via.str.ptr, value->via.str.size, text));
                }
                break;
            case KEY_SEQ:
                if (value->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                    return za_error ("wire: 'seq' must be a non-negative int, got %s%s",
                                     value->type == MSGPACK_OBJECT_NEGATIVE_INTEGER
                                         ? "a negative " : "",
                                     s_type_name (value->type));
                out->seq = value->via.u64;
                break;
            case KEY_STEP:
                if (s_get_int (value, what, -1, INT64_MAX, &number))
                    return -1;
                out->step = number;
                break;
            case KEY_TASK:
            case KEY_PS:
                if (s_get_int (value, what, -1, INT32_MAX, &number))
                    return -1;
                *(key == KEY_TASK ? &out->task : &out->ps) = (int32_t) number;
                break;
            case KEY_CODE:
                if (s_get_str (value, what, 0, out->code, sizeof out->code))
                    return -1;
                break;
            case KEY_ERROR:
                if (s_get_str (value, what, 0, out->error, sizeof out->error))
                    return -1;
                break;
            case KEY_OPT:
                if (s_decode_optim (value, out))
                    return -1;
                break;
            case KEY_BODY:
                if (value->type != MSGPACK_OBJECT_STR)
                    return za_error ("wire: 'body' must be a str, got %s",
                                     s_type_name (value->type));
                if (value->via.str.size > ZA_WIRE_MAX_BODY_BYTES)
                    return za_error ("wire: 'body' is %u bytes, more than %d",
                                     value->via.str.size, ZA_WIRE_MAX_BODY_BYTES);
                if (memchr (value->via.str.ptr, 0, value->via.str.size))
                    return za_error ("wire: 'body' contains a NUL byte");
                out->body = value->via.str.ptr;
                out->body_len = value->via.str.size;
                break;
            case KEY_SHM:
                if (value->type != MSGPACK_OBJECT_STR || value->via.str.size > ZA_WIRE_MAX_SHM_BYTES
                    || memchr (value->via.str.ptr, 0, value->via.str.size))
                    return za_error ("wire: 'shm' must be a str of at most %d bytes, no NUL",
                                     ZA_WIRE_MAX_SHM_BYTES);
                out->shm = value->via.str.ptr;
                out->shm_len = value->via.str.size;
                break;
            case KEY_TENSORS:
                if (s_decode_tensors (value, out, payload, count_p))
                    return -1;
                break;
            case KEY_V:
            case KEY_COUNT:
                break;
        }
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
    if (s_scan_header ((const uint8_t *) header_bytes, header_size))
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
        || s_scan_header (zframe_data (header), header_size))
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

int64_t
za_wire_max_frame (uint64_t largest_tensor_bytes)
{
    uint64_t bytes = largest_tensor_bytes > ZA_WIRE_MAX_HEADER_BYTES? largest_tensor_bytes
                                                                     : ZA_WIRE_MAX_HEADER_BYTES;
    bytes += ZA_WIRE_CURVE_BYTES;
    return (int64_t) (bytes < ZA_WIRE_MAX_FRAME_BYTES? bytes: ZA_WIRE_MAX_FRAME_BYTES);
}
