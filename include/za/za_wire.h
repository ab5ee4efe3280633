/*  za_wire.h: the wire codec, the one place that knows how a zactor message looks
    on a ZeroMQ socket: [routing id] [msgpack header] [one raw frame per tensor].
    docs/PROTOCOL.md is the protocol itself; this module encodes and checks it.

    Sending is zero-copy for tensor bytes: libzmq keeps a reference to the
    caller's buffer until the bytes are on the wire (tcp/ipc) or until the peer
    has destroyed the received frame (inproc). A lease counts those references;
    the caller must not change or free the bytes while its lease is busy.

    Receiving is zero-copy too: decoded tensor data points into the received
    frames. Decoding checks everything (sizes, counts, nesting, types, frames)
    before msgpack allocates anything, so a hostile or corrupt message costs at
    most its own size and gets a one-line error, never a crash.            */
#ifndef ZA_WIRE_H_INCLUDED
#define ZA_WIRE_H_INCLUDED

#include "za/za_optim_config.h"

#include <czmq.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "za/za_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The protocol version this build speaks (header key "v").
#define ZA_WIRE_VERSION 1
//  A header frame larger than this is refused before it is parsed.
#define ZA_WIRE_MAX_HEADER_BYTES (64 * 1024)
//  Tensors (= payload frames) in one message.
#define ZA_WIRE_MAX_TENSORS 256
//  Nesting of msgpack maps/arrays in a header; the top-level map is depth 1,
//  a tensor's shape array is depth 4.
#define ZA_WIRE_MAX_DEPTH 4
//  Tensor name buffer, including the NUL: names are 1..95 bytes.
#define ZA_WIRE_NAME_MAX 96
#define ZA_WIRE_MAX_DIMS 8
//  Largest payload frame of any socket. A socket whose tensors are known
//  (the model's) takes less: za_wire_max_frame.
#define ZA_WIRE_MAX_FRAME_BYTES (1u << 30)
//  What CURVE adds to a frame on the wire (its MESSAGE command: name, nonce,
//  MAC, flags), with room to spare.
#define ZA_WIRE_CURVE_BYTES 256
//  A control message's JSON body, in bytes (it lives in the header frame).
#define ZA_WIRE_MAX_BODY_BYTES (60 * 1024)
//  A same-host link's word ("shm"), in bytes.
#define ZA_WIRE_MAX_SHM_BYTES 512

//  The largest frame a socket that carries tensors of at most
//  largest_tensor_bytes each takes: that or a header, whichever is larger,
//  plus ZA_WIRE_CURVE_BYTES; never above ZA_WIRE_MAX_FRAME_BYTES. Callers
//  give it to zsock_set_maxmsgsize on every socket that receives wire
//  messages (docs/PROTOCOL.md 14): libzmq closes the connection of a peer
//  announcing a larger frame before it allocates anything (the option is
//  per frame).
int64_t za_wire_max_frame (uint64_t largest_tensor_bytes);

typedef enum {
    ZA_OP_INIT = 1,
    ZA_OP_INIT_OK,
    ZA_OP_PULL,
    ZA_OP_PUSH,
    ZA_OP_VALUES,
    ZA_OP_HOLD,
    ZA_OP_HELD,
    ZA_OP_SNAPSHOT,
    ZA_OP_SNAPSHOT_DATA,
    ZA_OP_RELEASE,
    ZA_OP_RELEASED,
    ZA_OP_STOP,
    ZA_OP_STOPPING,
    ZA_OP_BYE,
    ZA_OP_BYE_OK,
    ZA_OP_ERROR,
    ZA_OP_PING,
    ZA_OP_PONG,
    //  The broker's control plane (docs/PROTOCOL.md section 13): a JSON body.
    ZA_OP_REGISTER,
    ZA_OP_WELCOME,
    ZA_OP_REPORT,
    ZA_OP_VIEW,
    ZA_OP_WATCH,
    ZA_OP_STATE,
    //  The ring of the all-reduce strategy (section 14): one f32 chunk each.
    ZA_OP_RING,
    ZA_OP_BROADCAST,
    ZA_OP_RESYNC,
    //  The broker's control plane, continued
    ZA_OP_CHECKPOINT,
    //  ps-sync: a ps's optimizer slots, after the values sent to the chief
    ZA_OP_SLOTS,
    //  ps-async: a worker's values of a ps's shard, offered to a ps without state
    ZA_OP_OFFER,
    //  The ring: a link's own data path, shared memory or tcp (section 14)
    ZA_OP_LINK
} za_op_t;

//  The op's wire name: "init", "init_ok", "pull", "push", "values", "hold",
//  "held", "snapshot", "snapshot_data", "release", "released", "stop",
//  "stopping", "bye", "bye_ok", "error", "ping", "pong", "register", "welcome",
//  "report", "view", "watch", "state", "ring", "broadcast", "resync", "checkpoint",
//  "slots", "offer", "link". Returns a static
//  string, or NULL when op is not one of za_op_t's values.
const char *za_op_name (za_op_t op);

//  Looks up an op by its wire name (exact, case-sensitive). Returns 0 and sets
//  *op, or -1 (no error is recorded: the caller knows the context).
int za_op_parse (const char *name, za_op_t *op);

//  The names the codec knows, said once here and listed in docs/PROTOCOL.md
//  (tests/test_wire.c holds the two together): every op; the header's keys;
//  the keys of init's `opt` map; a tensor map's keys. The i-th name of a
//  list, or NULL past its last.
typedef enum {
    ZA_WIRE_OPS, ZA_WIRE_HEADER_KEYS, ZA_WIRE_OPT_KEYS, ZA_WIRE_TENSOR_KEYS
} za_wire_names_t;
const char *za_wire_name (za_wire_names_t list, int i);
//  The msgpack type the codec takes for the i-th key of a list (not
//  ZA_WIRE_OPS), with its limits, written into text as PROTOCOL.md's tables
//  write it ("int, 0 .. 2^63-1", "str, 0..31 bytes"); NULL past the last.
const char *za_wire_type (za_wire_names_t list, int i, char *text, size_t size);

//  One tensor of a message.
typedef struct {
    char name [ZA_WIRE_NAME_MAX];       //  1..95 bytes, NUL-terminated
    za_dtype_t dtype;                   //  ZA_DTYPE_F32 ("f32"), ZA_DTYPE_BF16 ("bf16")
                                        //  or ZA_DTYPE_I64 ("i64")
    int ndim;                           //  0..ZA_WIRE_MAX_DIMS; 0 is a scalar
    int64_t shape [ZA_WIRE_MAX_DIMS];
    //  Decode: points into the received frame, valid while that zmsg lives. It
    //  is NOT necessarily aligned for the dtype (libzmq receives small frames
    //  into a shared buffer at any offset): read with memcpy, or copy out.
    //  Encode: the caller's bytes, which must stay unchanged until the lease
    //  they were sent under is no longer busy.
    const void *data;
    size_t bytes;                       //  product (shape) * dtype size
} za_wire_tensor_t;

//  One message: the decoded header plus its tensors. About 48 KB: keep one per
//  role (or per connection), not on small thread stacks.
typedef struct {
    za_op_t op;
    uint64_t seq;                       //  request id; a reply echoes its request's seq
    int64_t step;                       //  global step where meaningful; -1 when absent
    int32_t task;                       //  sender's worker index (chief = 0); -1 when absent
    int32_t ps;                         //  ps index (in ps replies); -1 when absent
    //  ERROR: "not_ready", "bad_request", "done", "busy", "replaced", "rewound";
    //  PONG: "not_ready"
    //  from a ps without state for the pinger (PROTOCOL.md 7.5); "" otherwise
    char code [32];
    char error [256];                   //  ERROR: human message; "" otherwise
    //  INIT only: the optimizer the ps applies, as the job's settings hold it
    //  (decoded: a kind nobody knows is ZA_OPT_UNKNOWN, a number beyond
    //  float32 +-inf; za_optim_config_check says whether it can be applied)
    int has_optim;
    za_optim_config_t optim;
    //  The control plane's JSON document ("body"), not NUL-terminated; NULL
    //  when absent. Decode: points into the header frame (keep the zmsg).
    //  Encode: the caller's bytes, copied into the header.
    const char *body;
    size_t body_len;
    //  A same-host link's word ("shm", za_shm_link.h; PROTOCOL.md 3): a JSON
    //  text of at most ZA_WIRE_MAX_SHM_BYTES, not NUL-terminated; NULL when
    //  absent. Decode: points into the header frame.
    const char *shm;
    size_t shm_len;
    //  Encode only: the tensors' bytes went through a segment: only the
    //  header frame is sent (its tensors name frames as ever; the receiver's
    //  link appends them before decoding).
    int payload_elsewhere;
    int tensor_count;
    za_wire_tensor_t tensors [ZA_WIRE_MAX_TENSORS];
} za_wire_msg_t;

//  Zeroes the whole message and sets op, with step, task and ps = -1 (absent).
void za_wire_msg_init (za_wire_msg_t *msg, za_op_t op);

//  Appends a tensor descriptor to an outgoing message: copies the name and the
//  shape, keeps the data pointer (no copy; the bytes must stay valid and
//  unchanged until the lease the message is sent under is no longer busy).
//  shape may be NULL when ndim is 0; data may be NULL only when the tensor has
//  no bytes. Returns 0, or -1 with an error when the message already holds
//  ZA_WIRE_MAX_TENSORS tensors, the name is empty, longer than 95 bytes or
//  already in the message, the dtype is unknown, ndim is outside 0..8, a dim
//  is negative, or the size overflows or exceeds ZA_WIRE_MAX_FRAME_BYTES.
//  On error msg is unchanged.
int za_wire_msg_add (za_wire_msg_t *msg, const char *name, za_dtype_t dtype, int ndim,
                     const int64_t *shape, const void *data);

//  Tracks zero-copy payloads in flight: pending counts frames libzmq still
//  holds. libzmq drops its reference from its I/O thread (tcp, ipc) or from
//  whichever thread destroys the received frame (inproc), hence the atomic.
//  A lease must outlive every frame sent under it: wait before freeing it.
typedef struct {
    atomic_int pending;
} za_wire_lease_t;

//  Sets pending to 0. Only on a lease that is not busy.
void za_wire_lease_init (za_wire_lease_t *lease);

//  1 while any frame sent under the lease is still held by libzmq, else 0.
int za_wire_lease_busy (za_wire_lease_t *lease);

//  Waits, sleeping in 10 us steps, until the lease is not busy. On inproc that
//  means until the receiver has destroyed the message: never wait on a lease
//  whose frames the same thread has yet to receive. Over tcp a peer that
//  stops reading keeps the lease busy until the socket's send buffers drain,
//  the peer disconnects, or the socket is destroyed (linger 0 drops them).
void za_wire_lease_wait (za_wire_lease_t *lease);

//  Sends msg on sock as [routing_id if not NULL][header][one frame per tensor].
//  The header is packed with msgpack (keys for absent fields are left out);
//  each tensor's bytes go as their own frame WITHOUT copying, each counted in
//  lease until libzmq lets go of it. routing_id (for ROUTER sockets) is sent as
//  a copy and not destroyed. lease may be NULL only when msg has no tensors.
//  Blocks like zmq_msg_send (sndtimeo, HWM, no DEALER peer yet). On a ROUTER,
//  a routing id that is not connected drops the message silently (the lease
//  drains at once), or with ZMQ_ROUTER_MANDATORY fails here with -1 before
//  anything is queued.
//  Checks msg first (known op, tensor count, dtypes, shapes, bytes = product
//  of shape * dtype size, data present when bytes > 0) and sends nothing if it
//  is wrong. Returns 0, or -1 with an error when the check fails or a send
//  fails; frames already handed to libzmq are released normally (the lease
//  still drains). If a frame after the first fails, the message is ended with
//  an empty last frame so the socket is not left mid-message; the peer drops
//  that message as undecodable.
int za_wire_send (zsock_t *sock, zframe_t *routing_id, const za_wire_msg_t *msg,
                  za_wire_lease_t *lease);

//  Decodes a received message whose routing id (if any) the caller has already
//  popped: the first frame is the header, the others are payload frames.
//  Checks, before msgpack allocates anything: at most ZA_WIRE_MAX_TENSORS
//  payload frames; a non-empty header of at most ZA_WIRE_MAX_HEADER_BYTES; a
//  pre-pass over the msgpack bytes that checks every str/bin/ext length and
//  array/map count against the bytes remaining (each element needs >= 1
//  byte), nesting depth <= ZA_WIRE_MAX_DEPTH, a map at the top level, no bytes
//  after it. Then: "v" == ZA_WIRE_VERSION, "op" a known op, every known key
//  with its type and range (unknown keys are ignored, duplicate known keys
//  refused), and the tensors and frames as docs/PROTOCOL.md says: each payload
//  frame referenced by exactly one tensor, its size equal to the tensor's.
//  On success fills *out (tensor data pointing into msg's frames: keep msg
//  alive while using them) and returns 0. Otherwise returns -1 with one error
//  line "wire: <what was wrong>", and *out holds tensor_count 0 and otherwise
//  unspecified fields. Never touches anything but *out and msg's frame cursor
//  (it walks the frames with zmsg_first/zmsg_next).
int za_wire_decode (zmsg_t *msg, za_wire_msg_t *out);

//  The same for a message that is its header frame alone, its `count`
//  payloads held elsewhere (a same-host link's segment: za_shm_link.h):
//  data [i] and sizes [i] stand for payload frame i, checked as frames are;
//  the tensors point into them (keep them while using the tensors).
int za_wire_decode_payloads (zmsg_t *msg, const void *const *data, const size_t *sizes,
                             int count, za_wire_msg_t *out);

//  The header frame of msg, whose payloads are held elsewhere
//  (payload_elsewhere: a same-host link's segment carries the whole
//  message), checked as za_wire_send checks it, into `bytes` (`size` of
//  them; ZA_WIRE_MAX_HEADER_BYTES always do). Returns its length, or -1
//  with an error.
int za_wire_pack (const za_wire_msg_t *msg, char *bytes, size_t size);

//  The "shm" text of a received message's header (routing id popped), for a
//  same-host link to read before the message is whole: copies it into
//  text (size bytes, NUL-terminated) and returns its length, 0 when the
//  header has none, or -1 when the header does not decode (za_wire_decode
//  says why). seq (NULL: not wanted) gets the header's seq (0: none).
int za_wire_peek_shm (zmsg_t *msg, char *text, size_t size, uint64_t *seq);

#ifdef __cplusplus
}
#endif
#endif
