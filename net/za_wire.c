/*  za_wire.c: encodes zactor messages: a msgpack header frame plus one
    zero-copy frame per tensor, each field written as its row in
    za_wire_table.c says; the ops' names; the leases on sent tensors.
    za_wire_decode.c reads them back.                                        */
#include "za_wire_private.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define WIRE_LEASE_POLL_NS 10000        //  za_wire_lease_wait's sleep step: 10 us


//  --------------------------------------------------------------------------
//  Ops

const char *
za_op_name (za_op_t op)
{
    if ((int) op < ZA_OP_INIT || (int) op > WIRE_OP_LAST)
        return NULL;
    return za_wire_op_names [op];
}

int
za_op_parse (const char *name, za_op_t *op)
{
    if (!name || !op)
        return -1;
    for (int i = ZA_OP_INIT; i <= WIRE_OP_LAST; i++)
        if (strcmp (name, za_wire_op_names [i]) == 0) {
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
    if (!za_wire_dtype_valid (tensor->dtype))
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
                         za_wire_shape_text (tensor->ndim, tensor->shape, shape_text,
                                       sizeof shape_text));
    if (bytes > ZA_WIRE_MAX_FRAME_BYTES)
        return za_error ("wire: %s: tensor '%s' is %" PRIu64 " bytes, more than the frame "
                         "limit of %u", what, tensor->name, bytes, ZA_WIRE_MAX_FRAME_BYTES);
    if (tensor->bytes != bytes)
        return za_error ("wire: %s: tensor '%s' says %zu bytes but %s %s is %" PRIu64, what,
                         tensor->name, tensor->bytes,
                         za_wire_shape_text (tensor->ndim, tensor->shape, shape_text,
                                       sizeof shape_text),
                         za_wire_dtype_name (tensor->dtype), bytes);
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
    if (za_wire_dtype_valid (dtype) && za_tensor_bytes (dtype, ndim, tensor.shape, &bytes) == 0)
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

//  One key of the opt map and its value, from optim as the key's row says:
//  the kind's name, each float as a float64, nesterov as a bool, a schedule
//  as its numbers.
static int
s_pack_opt_field (msgpack_packer *pk, const wire_field_t *field, const za_optim_config_t *optim)
{
    const char *at = (const char *) optim + field->at;
    if (s_pack_key (pk, field->name))
        return -1;
    switch (field->form) {
        case WIRE_TEXT:
            return s_pack_str (pk, za_optim_name (optim->kind));
        case WIRE_BOOL:
            return *(const int *) at ? msgpack_pack_true (pk) : msgpack_pack_false (pk);
        case WIRE_NUMBERS: {
            double values [ZA_SCHEDULE_NUMBERS];
            za_schedule_numbers (&optim->schedule, values);
            if (msgpack_pack_array (pk, ZA_SCHEDULE_NUMBERS))
                return -1;
            for (int i = 0; i < ZA_SCHEDULE_NUMBERS; i++)
                if (msgpack_pack_double (pk, values [i]))
                    return -1;
            return 0;
        }
        default:
            return msgpack_pack_double (pk, *(const float *) at);
    }
}

static int
s_pack_optim (msgpack_packer *pk, const za_optim_config_t *optim)
{
    //  Written in this order: kind, the optional keys, then the others.
    static const wire_opt_key_t order [OPT_COUNT] = {
        OPT_KIND, OPT_WEIGHT_DECAY, OPT_SCHEDULE, OPT_LR, OPT_MOMENTUM, OPT_BETA1,
        OPT_BETA2, OPT_EPSILON, OPT_ACC0, OPT_NESTEROV
    };
    bool present [OPT_COUNT];
    for (int key = 0; key < OPT_COUNT; key++)
        present [key] = !za_wire_opt_fields [key].optional;
    //  A schedule (not the constant rate) goes as "schedule": its numbers.
    const za_schedule_t *schedule = &optim->schedule;
    present [OPT_SCHEDULE] = schedule->kind != ZA_SCHEDULE_CONSTANT || schedule->warmup_steps > 0;
    present [OPT_WEIGHT_DECAY] = optim->weight_decay != 0;
    size_t count = 0;
    for (int key = 0; key < OPT_COUNT; key++)
        count += present [key];
    if (msgpack_pack_map (pk, count))
        return -1;
    for (int i = 0; i < OPT_COUNT; i++)
        if (present [order [i]] && s_pack_opt_field (pk, &za_wire_opt_fields [order [i]], optim))
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
        ||  s_pack_key (pk, za_wire_tensor_fields [TENSOR_NAME].name) || s_pack_str (pk, tensor->name)
        ||  s_pack_key (pk, za_wire_tensor_fields [TENSOR_DTYPE].name)
        ||  s_pack_str (pk, za_wire_dtype_name (tensor->dtype))
        ||  s_pack_key (pk, za_wire_tensor_fields [TENSOR_SHAPE].name)
        ||  msgpack_pack_array (pk, (size_t) tensor->ndim))
            return -1;
        for (int dim = 0; dim < tensor->ndim; dim++)
            if (msgpack_pack_int64 (pk, tensor->shape [dim]))
                return -1;
        if (s_pack_key (pk, za_wire_tensor_fields [TENSOR_FRAME].name) || msgpack_pack_int (pk, i))
            return -1;
    }
    return 0;
}

//  One header key and its value, from msg as the key's row says.
static int
s_pack_field (msgpack_packer *pk, const wire_field_t *field, const za_wire_msg_t *msg)
{
    const char *at = (const char *) msg + field->at;
    if (s_pack_key (pk, field->name))
        return -1;
    switch (field->form) {
        case WIRE_VERSION: return msgpack_pack_int (pk, ZA_WIRE_VERSION);
        case WIRE_OP:      return s_pack_str (pk, za_op_name (msg->op));
        case WIRE_UINT64:  return msgpack_pack_uint64 (pk, *(const uint64_t *) at);
        case WIRE_INT:     return field->width == sizeof (int64_t)
                                ? msgpack_pack_int64 (pk, *(const int64_t *) at)
                                : msgpack_pack_int32 (pk, *(const int32_t *) at);
        case WIRE_TEXT:    return s_pack_str (pk, at);
        case WIRE_BYTES: {
            size_t len;
            const char *bytes = za_wire_field_bytes (field, msg, &len);
            return msgpack_pack_str (pk, len) || msgpack_pack_str_body (pk, bytes, len) ? -1 : 0;
        }
        case WIRE_OPTIM:   return s_pack_optim (pk, &msg->optim);
        case WIRE_TENSORS: return s_pack_tensors (pk, msg);
        default:           return -1;
    }
}

static int
s_pack_header (msgpack_packer *pk, const za_wire_msg_t *msg)
{
    size_t count = 0;
    for (int key = 0; key < KEY_COUNT; key++)
        count += za_wire_field_present (&za_wire_header_fields [key], msg);
    if (msgpack_pack_map (pk, count))
        return -1;
    for (int key = 0; key < KEY_COUNT; key++)
        if (za_wire_field_present (&za_wire_header_fields [key], msg)
        &&  s_pack_field (pk, &za_wire_header_fields [key], msg))
            return -1;
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
    //  body, shm: what the decoder takes (their rows' limits).
    for (int key = 0; key < KEY_COUNT; key++) {
        const wire_field_t *field = &za_wire_header_fields [key];
        size_t len;
        const char *bytes = field->form == WIRE_BYTES? za_wire_field_bytes (field, msg, &len)
                                                     : NULL;
        if (bytes && (len > (size_t) field->max || memchr (bytes, 0, len)))
            return za_error ("wire: cannot send: a '%s' of %zu bytes (at most %" PRId64
                             ", no NUL byte)", field->name, len, field->max);
    }
    if (msg->has_optim) {
        if (!za_optim_known (msg->optim.kind))
            return za_error ("wire: cannot send: has_optim but no known optimizer kind");
        const float numbers [] = { msg->optim.learning_rate, msg->optim.momentum,
                                   msg->optim.beta1, msg->optim.beta2, msg->optim.epsilon,
                                   msg->optim.initial_accumulator };
        for (int i = 0; i < OPT_ACC0 - OPT_LR + 1; i++)
            if (!isfinite (numbers [i]))
                return za_error ("wire: cannot send: optimizer '%s' is not finite",
                                 za_wire_opt_fields [OPT_LR + i].name);
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

int64_t
za_wire_max_frame (uint64_t largest_tensor_bytes)
{
    uint64_t bytes = largest_tensor_bytes > ZA_WIRE_MAX_HEADER_BYTES? largest_tensor_bytes
                                                                     : ZA_WIRE_MAX_HEADER_BYTES;
    bytes += ZA_WIRE_CURVE_BYTES;
    return (int64_t) (bytes < ZA_WIRE_MAX_FRAME_BYTES? bytes: ZA_WIRE_MAX_FRAME_BYTES);
}
