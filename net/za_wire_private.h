/*  za_wire_private.h: what the codec's files share: the table that describes
    every field of a message once (za_wire_table.c), which the encoder
    (za_wire.c), the decoder (za_wire_decode.c) and PROTOCOL.md's tables all
    follow, the msgpack pre-pass (za_wire_scan.c) and small helpers.        */
#ifndef ZA_WIRE_PRIVATE_H_INCLUDED
#define ZA_WIRE_PRIVATE_H_INCLUDED

#include "za/za_wire.h"
#include "za/za_util.h"

#include <inttypes.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WIRE_QUOTE_MAX_CHARS 48         //  wire strings quoted in errors are cut here
#define WIRE_QUOTE_BYTES (WIRE_QUOTE_MAX_CHARS + 4)    //  za_wire_quote's buffer
#define WIRE_SHAPE_TEXT_CHARS 192       //  "d0xd1x...": 8 dims of 20 digits
#define WIRE_OP_LAST ZA_OP_LINK
#define WIRE_CODE_BYTES sizeof (((za_wire_msg_t *) 0)->code)
#define WIRE_ERROR_BYTES sizeof (((za_wire_msg_t *) 0)->error)
#define WIRE_OPTIMIZER_BYTES 16         //  opt.kind: 1..15 bytes

//  How a field is carried, and so how the codec reads and writes it.
typedef enum {
    WIRE_VERSION,       //  int: ZA_WIRE_VERSION
    WIRE_OP,            //  str: an op's name
    WIRE_UINT64,        //  int, 0 .. 2^64-1
    WIRE_INT,           //  int, 0 .. max, or -1 for absent; `width` bytes in C
    WIRE_TEXT,          //  str of min .. max bytes, no NUL, copied into a char array
    WIRE_BYTES,         //  str of at most max bytes, no NUL, left where it arrived
    WIRE_OPTIM,         //  the optimizer's map (the ZA_WIRE_OPT_KEYS table)
    WIRE_TENSORS,       //  an array of at most max tensor maps
    WIRE_NUMBER,        //  a finite number, held as a float
    WIRE_BOOL,
    WIRE_NUMBERS,       //  an array of exactly max numbers
    WIRE_DTYPE,         //  str: "f32", "bf16" or "i64"
    WIRE_SHAPE,         //  an array of at most max ints, each 0 .. 2^63-1
    WIRE_FRAME          //  int: a payload frame's index
} wire_form_t;

//  One field: its key, how it is carried, and where the message holds it.
typedef struct {
    const char *name;
    wire_form_t form;
    int64_t min, max;           //  a str's length in bytes, an int's range, a count
    bool optional;              //  a map's key that may be missing (ZA_WIRE_OPT_KEYS)
    size_t at;                  //  offsetof its value in za_wire_msg_t (or za_optim_config_t)
    size_t width;               //  WIRE_INT: sizeof the value; WIRE_BYTES: offsetof its length
} wire_field_t;

//  The header's keys, in the order they are written.
typedef enum {
    KEY_V, KEY_OP, KEY_SEQ, KEY_STEP, KEY_TASK, KEY_PS, KEY_CODE, KEY_ERROR, KEY_OPT,
    KEY_BODY, KEY_SHM, KEY_TENSORS, KEY_COUNT
} wire_key_t;

//  The opt map's keys: the required ones first, in the order they are
//  written after kind (weight_decay and schedule, when present, go first).
typedef enum {
    OPT_KIND, OPT_LR, OPT_MOMENTUM, OPT_BETA1, OPT_BETA2, OPT_EPSILON, OPT_ACC0,
    OPT_NESTEROV, OPT_REQUIRED, OPT_SCHEDULE = OPT_REQUIRED, OPT_WEIGHT_DECAY, OPT_COUNT
} wire_opt_key_t;

//  A tensor map's keys; all are required.
typedef enum {
    TENSOR_NAME, TENSOR_DTYPE, TENSOR_SHAPE, TENSOR_FRAME, TENSOR_COUNT
} wire_tensor_key_t;

extern const wire_field_t za_wire_header_fields [KEY_COUNT];
extern const wire_field_t za_wire_opt_fields [OPT_COUNT];
extern const wire_field_t za_wire_tensor_fields [TENSOR_COUNT];
extern const char *const za_wire_op_names [WIRE_OP_LAST + 1];

//  Whether msg carries the header field (an absent int is -1, an absent str
//  empty or NULL).
bool za_wire_field_present (const wire_field_t *field, const za_wire_msg_t *msg);

//  A WIRE_BYTES field's bytes in msg (NULL when absent), and its length.
const char *za_wire_field_bytes (const wire_field_t *field, const za_wire_msg_t *msg,
                                 size_t *len);

//  Index of a str key among fields [0..count), or -1 (not a str, or not known).
int za_wire_field_index (const msgpack_object *key, const wire_field_t *fields, int count);

//  za_op_parse over a msgpack string (not NUL-terminated).
int za_wire_op_parse_bytes (const char *bytes, size_t size, za_op_t *op);

//  "f32", "bf16" or "i64"; whether dtype is one of them.
const char *za_wire_dtype_name (za_dtype_t dtype);
bool za_wire_dtype_valid (za_dtype_t dtype);

//  "4x3", "0", or "scalar", for error messages.
const char *za_wire_shape_text (int ndim, const int64_t *shape, char *text, size_t size);

//  A string from the wire made safe to print in `text` (WIRE_QUOTE_BYTES):
//  at most WIRE_QUOTE_MAX_CHARS bytes, control and non-ASCII bytes as '?'.
const char *za_wire_quote (const char *bytes, size_t size, char *text);

//  The pre-pass: checks the msgpack bytes of a header before msgpack-c sees
//  them. Returns 0, or -1 with an error.
int za_wire_scan_header (const uint8_t *bytes, size_t size);

#endif
