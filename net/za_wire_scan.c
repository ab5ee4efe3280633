/*  za_wire_scan.c: the pre-pass that checks a header's msgpack bytes before
    msgpack-c sees them, since it has no limits of its own (a 5-byte array32
    header makes it allocate gigabytes): every declared length and count must
    fit in what remains.                                                     */
#include "za_wire_private.h"

#include <string.h>

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

//  What follows a first byte: a length field, a fixed body, elements.
typedef struct {
    int length_bytes;           //  bytes of the length/count field that follows
    uint64_t fixed;             //  bytes of a fixed-size body (or of a fix* length)
    uint64_t extra;             //  an ext's type byte
    int container;              //  elements per count: 1 array, 2 map
    bool has_count;
} s_layout_t;

//  The layout of a value by its first byte; false for a scalar that is the
//  byte alone (ints up to 0x7f and from 0xe0, nil, bools).
static bool
s_tag_layout (uint8_t tag, s_layout_t *layout)
{
    memset (layout, 0, sizeof *layout);
    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3)
        return false;
    if (tag <= 0x9f) {
        layout->container = tag <= 0x8f? 2: 1;
        layout->fixed = tag & 0x0f;
        layout->has_count = true;
        return true;
    }
    if (tag <= 0xbf) {
        layout->fixed = tag & 0x1f;
        return true;
    }
    switch (tag) {
        case 0xc4: case 0xd9: layout->length_bytes = 1; break;
        case 0xc5: case 0xda: layout->length_bytes = 2; break;
        case 0xc6: case 0xdb: layout->length_bytes = 4; break;
        case 0xc7: layout->length_bytes = 1; layout->extra = 1; break;
        case 0xc8: layout->length_bytes = 2; layout->extra = 1; break;
        case 0xc9: layout->length_bytes = 4; layout->extra = 1; break;
        case 0xca: layout->fixed = 4; break;
        case 0xcb: layout->fixed = 8; break;
        case 0xcc: case 0xd0: layout->fixed = 1; break;
        case 0xcd: case 0xd1: layout->fixed = 2; break;
        case 0xce: case 0xd2: layout->fixed = 4; break;
        case 0xcf: case 0xd3: layout->fixed = 8; break;
        case 0xd4: layout->fixed = 1 + 1; break;
        case 0xd5: layout->fixed = 1 + 2; break;
        case 0xd6: layout->fixed = 1 + 4; break;
        case 0xd7: layout->fixed = 1 + 8; break;
        case 0xd8: layout->fixed = 1 + 16; break;
        case 0xdc: layout->container = 1; layout->length_bytes = 2; break;
        case 0xdd: layout->container = 1; layout->length_bytes = 4; break;
        case 0xde: layout->container = 2; layout->length_bytes = 2; break;
        case 0xdf: layout->container = 2; layout->length_bytes = 4; break;
        default: break;
    }
    layout->has_count = layout->container != 0;
    return true;
}

static int
s_scan_value (s_scanner_t *scan, int depth)
{
    if (scan->pos >= scan->size)
        return za_error ("wire: header truncated: a value is missing at offset %zu", scan->pos);
    size_t at = scan->pos;
    uint8_t tag = scan->bytes [scan->pos++];
    if (tag == 0xc1)
        return za_error ("wire: header has the never-used byte 0xc1 at offset %zu", at);
    s_layout_t layout;
    if (!s_tag_layout (tag, &layout))
        return 0;
    int length_bytes = layout.length_bytes;
    uint64_t fixed = layout.fixed, extra = layout.extra;
    int container = layout.container;
    bool has_count = layout.has_count;
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

int
za_wire_scan_header (const uint8_t *bytes, size_t size)
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

