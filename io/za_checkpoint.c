/*  za_checkpoint.c: a safetensors checkpoint read back, its header parsed and its
    data's CRC32 verified, and what it holds; the newest intact one in a model_dir. */
#include "za_checkpoint_private.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

struct _za_checkpoint_t {
    char *filename;
    int64_t step;
    json_t *header;                     //  owns tensor names and metadata strings
    json_t *metadata;                   //  borrowed from header
    za_ckpt_tensor_t *tensors;          //  in data-offset order
    int tensor_count;
    uint8_t *data;                      //  the data section, za_alloc'ed
    size_t data_size;
};

//  A tensor's place in the data section while parsing a header.
typedef struct {
    za_ckpt_tensor_t tensor;
    uint64_t begin;
    uint64_t end;
    size_t order;                       //  position in the JSON header
} s_entry_t;


//  --------------------------------------------------------------------------
//  Small helpers

//  crc updated with size bytes of data (zlib's crc32, in pieces it can take).
uint32_t
za_checkpoint_crc32_update (uint32_t crc, const uint8_t *data, size_t size)
{
    while (size > 0) {
        uInt piece = size > CKPT_CRC_CHUNK_BYTES ? CKPT_CRC_CHUNK_BYTES : (uInt) size;
        crc = (uint32_t) crc32 (crc, data, piece);
        data += piece;
        size -= piece;
    }
    return crc;
}

//  Parses a non-negative decimal integer string, strictly. Returns 0 or -1.
static int
s_parse_step_value (const char *text, int64_t *step_p)
{
    size_t len = strlen (text);
    if (len == 0 || len > CKPT_MAX_STEP_DIGITS || (text [0] == '0' && len > 1))
        return -1;
    int64_t step = 0;
    for (size_t i = 0; i < len; i++) {
        if (text [i] < '0' || text [i] > '9')
            return -1;
        if (__builtin_mul_overflow (step, 10, &step)
        ||  __builtin_add_overflow (step, text [i] - '0', &step))
            return -1;
    }
    *step_p = step;
    return 0;
}

//  Parses exactly 8 hex digits. Returns 0 or -1.
static int
s_parse_crc (const char *text, uint32_t *crc_p)
{
    if (strlen (text) != CKPT_CRC_HEX_DIGITS)
        return -1;
    uint32_t crc = 0;
    for (int i = 0; i < CKPT_CRC_HEX_DIGITS; i++) {
        char c = text [i];
        uint32_t nibble;
        if (c >= '0' && c <= '9')
            nibble = (uint32_t) (c - '0');
        else
        if (c >= 'a' && c <= 'f')
            nibble = (uint32_t) (c - 'a' + 10);
        else
        if (c >= 'A' && c <= 'F')
            nibble = (uint32_t) (c - 'A' + 10);
        else
            return -1;
        crc = (crc << 4) | nibble;
    }
    *crc_p = crc;
    return 0;
}

//  Reads exactly size bytes at offset. Returns 0, or -1 with errno set
//  (errno 0 means the file ended first).
static int
s_read_at (int fd, void *buffer, size_t size, uint64_t offset)
{
    uint8_t *cursor = buffer;
    while (size > 0) {
        ssize_t got = pread (fd, cursor, size, (off_t) offset);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (got == 0) {
            errno = 0;
            return -1;
        }
        cursor += got;
        size -= (size_t) got;
        offset += (uint64_t) got;
    }
    return 0;
}


//  --------------------------------------------------------------------------
//  Loading

static int
s_entry_compare (const void *a, const void *b)
{
    const s_entry_t *left = a;
    const s_entry_t *right = b;
    if (left->begin != right->begin)
        return left->begin < right->begin ? -1 : 1;
    if (left->end != right->end)
        return left->end < right->end ? -1 : 1;
    return (left->order > right->order) - (left->order < right->order);
}

//  Checks the metadata: string values, format, global_step, crc32.
static int
s_metadata_check (za_checkpoint_t *self, const char *path, uint32_t *crc_p)
{
    json_t *metadata = json_object_get (self->header, "__metadata__");
    if (!metadata)
        return za_error ("'%s': header has no __metadata__ (no crc32 to verify)", path);
    if (!json_is_object (metadata))
        return za_error ("'%s': __metadata__ is not a JSON object", path);
    const char *key;
    json_t *value;
    json_object_foreach (metadata, key, value) {
        if (!json_is_string (value))
            return za_error ("'%s': metadata value of '%s' is not a string", path, key);
    }
    self->metadata = metadata;

    const char *format = json_string_value (json_object_get (metadata, "format"));
    if (!format)
        return za_error ("'%s': metadata has no format (expected '%s')", path, ZA_CKPT_FORMAT);
    if (strcmp (format, ZA_CKPT_FORMAT) != 0)
        return za_error ("'%s': format is '%s', expected '%s'", path, format, ZA_CKPT_FORMAT);

    const char *step = json_string_value (json_object_get (metadata, "global_step"));
    if (!step)
        return za_error ("'%s': metadata has no global_step", path);
    if (s_parse_step_value (step, &self->step))
        return za_error ("'%s': global_step '%s' is not a non-negative integer", path, step);

    const char *crc = json_string_value (json_object_get (metadata, "crc32"));
    if (!crc)
        return za_error ("'%s': metadata has no crc32", path);
    if (s_parse_crc (crc, crc_p))
        return za_error ("'%s': crc32 '%s' is not 8 hex digits", path, crc);
    return 0;
}

//  Reads one tensor's header entry into entry.
static int
s_entry_parse (const char *path, const char *name, json_t *value, s_entry_t *entry)
{
    if (!json_is_object (value))
        return za_error ("'%s': tensor '%s': entry is not a JSON object", path, name);
    entry->tensor.name = name;

    const char *dtype = json_string_value (json_object_get (value, "dtype"));
    if (!dtype)
        return za_error ("'%s': tensor '%s': dtype is missing or not a string", path, name);
    if (strcmp (dtype, "F32") == 0)
        entry->tensor.dtype = ZA_DTYPE_F32;
    else
    if (strcmp (dtype, "I64") == 0)
        entry->tensor.dtype = ZA_DTYPE_I64;
    else
        return za_error ("'%s': tensor '%s': unsupported dtype '%s' (only F32 and I64)",
                         path, name, dtype);

    json_t *shape = json_object_get (value, "shape");
    if (!json_is_array (shape))
        return za_error ("'%s': tensor '%s': shape is missing or not an array", path, name);
    if (json_array_size (shape) > ZA_CKPT_MAX_DIMS)
        return za_error ("'%s': tensor '%s': shape has %zu dimensions, at most %d allowed",
                         path, name, json_array_size (shape), ZA_CKPT_MAX_DIMS);
    entry->tensor.ndim = (int) json_array_size (shape);
    for (int dim = 0; dim < entry->tensor.ndim; dim++) {
        json_t *extent = json_array_get (shape, (size_t) dim);
        if (!json_is_integer (extent) || json_integer_value (extent) < 0)
            return za_error ("'%s': tensor '%s': shape dimension %d is not a non-negative integer",
                             path, name, dim);
        entry->tensor.shape [dim] = json_integer_value (extent);
    }

    json_t *offsets = json_object_get (value, "data_offsets");
    if (!json_is_array (offsets) || json_array_size (offsets) != 2
    ||  !json_is_integer (json_array_get (offsets, 0))
    ||  !json_is_integer (json_array_get (offsets, 1)))
        return za_error ("'%s': tensor '%s': data_offsets is not a pair of integers", path, name);
    json_int_t begin = json_integer_value (json_array_get (offsets, 0));
    json_int_t end = json_integer_value (json_array_get (offsets, 1));
    if (begin < 0 || end < begin)
        return za_error ("'%s': tensor '%s': data_offsets [%lld, %lld] are not an ascending "
                         "non-negative pair", path, name, (long long) begin, (long long) end);
    entry->begin = (uint64_t) begin;
    entry->end = (uint64_t) end;

    uint64_t bytes;
    if (za_tensor_bytes (entry->tensor.dtype, entry->tensor.ndim, entry->tensor.shape, &bytes))
        return za_error ("'%s': tensor '%s': shape is too large", path, name);
    if (entry->end - entry->begin != bytes)
        return za_error ("'%s': tensor '%s': data_offsets [%lld, %lld] hold %" PRIu64
                         " bytes, its shape and dtype need %" PRIu64,
                         path, name, (long long) begin, (long long) end,
                         entry->end - entry->begin, bytes);
    return 0;
}

//  Checks every tensor entry and that they tile the data section exactly.
//  The tensors' data offsets go to *begins_p (caller frees).
static int
s_tensors_parse (za_checkpoint_t *self, const char *path, uint64_t data_start,
                 uint64_t file_size, uint64_t **begins_p)
{
    size_t entry_count = json_object_size (self->header) - 1;   //  less __metadata__
    if (entry_count > (size_t) INT32_MAX)
        return za_error ("'%s': too many tensors", path);
    s_entry_t *entries = calloc (entry_count + 1, sizeof (s_entry_t));
    if (!entries)
        return za_error ("'%s': out of memory parsing the header", path);

    int rc = 0;
    size_t index = 0;
    const char *name;
    json_t *value;
    json_object_foreach (self->header, name, value) {
        if (strcmp (name, "__metadata__") == 0)
            continue;
        entries [index].order = index;
        if ((rc = s_entry_parse (path, name, value, &entries [index])) != 0)
            break;
        index++;
    }
    if (rc == 0)
        qsort (entries, entry_count, sizeof (s_entry_t), s_entry_compare);

    uint64_t expected = 0;
    for (size_t i = 0; i < entry_count && rc == 0; i++) {
        if (entries [i].begin != expected)
            rc = za_error ("'%s': tensor '%s': data begins at offset %" PRIu64
                           ", expected %" PRIu64 " (tensors must be contiguous)",
                           path, entries [i].tensor.name, entries [i].begin, expected);
        expected = entries [i].end;
    }
    if (rc == 0) {
        uint64_t data_end;
        if (__builtin_add_overflow (data_start, expected, &data_end) || data_end > file_size)
            rc = za_error ("'%s': truncated: header says data ends at byte %" PRIu64
                           ", file has %" PRIu64 " bytes", path,
                           data_start + expected, file_size);
        else
        if (data_end < file_size)
            rc = za_error ("'%s': %" PRIu64 " stray bytes after the data, which ends at byte %"
                           PRIu64, path, file_size - data_end, data_end);
    }
    uint64_t *begins = NULL;
    if (rc == 0) {
        self->tensors = calloc (entry_count + 1, sizeof (za_ckpt_tensor_t));
        begins = calloc (entry_count + 1, sizeof (uint64_t));
        if (!self->tensors || !begins)
            rc = za_error ("'%s': out of memory parsing the header", path);
    }
    if (rc == 0) {
        for (size_t i = 0; i < entry_count; i++) {
            self->tensors [i] = entries [i].tensor;
            begins [i] = entries [i].begin;
        }
        *begins_p = begins;
        begins = NULL;
        self->tensor_count = (int) entry_count;
        self->data_size = (size_t) expected;
    }
    free (begins);
    free (entries);
    return rc;
}

//  Reads, parses and verifies; fills self. fd is open on path.
static int
s_load_file (za_checkpoint_t *self, const char *path, int fd, int with_data)
{
    struct stat st;
    if (fstat (fd, &st) != 0)
        return za_error ("'%s': cannot stat: %s", path, strerror (errno));
    if (!S_ISREG (st.st_mode))
        return za_error ("'%s': not a regular file", path);
    uint64_t file_size = (uint64_t) st.st_size;
    if (file_size < CKPT_LEN_PREFIX_BYTES)
        return za_error ("'%s': truncated: file has %" PRIu64 " bytes, fewer than the "
                         "%d-byte header length", path, file_size, CKPT_LEN_PREFIX_BYTES);

    uint8_t prefix [CKPT_LEN_PREFIX_BYTES];
    if (s_read_at (fd, prefix, sizeof prefix, 0))
        return za_error ("'%s': cannot read: %s", path,
                         errno ? strerror (errno) : "file shrank while reading");
    uint64_t header_size = 0;
    for (int i = 0; i < CKPT_LEN_PREFIX_BYTES; i++)
        header_size |= (uint64_t) prefix [i] << (8 * i);
    if (header_size == 0)
        return za_error ("'%s': header length is 0", path);
    if (header_size > ZA_CKPT_MAX_HEADER_BYTES)
        return za_error ("'%s': header length %" PRIu64 " exceeds the %u-byte limit",
                         path, header_size, ZA_CKPT_MAX_HEADER_BYTES);
    uint64_t data_start = CKPT_LEN_PREFIX_BYTES + header_size;
    if (data_start > file_size)
        return za_error ("'%s': truncated: header says it ends at byte %" PRIu64
                         ", file has %" PRIu64 " bytes", path, data_start, file_size);

    char *header_text = malloc ((size_t) header_size);
    if (!header_text)
        return za_error ("'%s': out of memory reading a %" PRIu64 "-byte header",
                         path, header_size);
    if (s_read_at (fd, header_text, (size_t) header_size, CKPT_LEN_PREFIX_BYTES)) {
        int read_errno = errno;
        free (header_text);
        return za_error ("'%s': cannot read the header: %s", path,
                         read_errno ? strerror (read_errno) : "file shrank while reading");
    }
    json_error_t json_error;
    self->header = json_loadb (header_text, (size_t) header_size, 0, &json_error);
    free (header_text);
    if (!self->header)
        return za_error ("'%s': header is not valid JSON (line %d column %d: %s)",
                         path, json_error.line, json_error.column, json_error.text);
    if (!json_is_object (self->header))
        return za_error ("'%s': header is not a JSON object", path);

    uint32_t stored_crc = 0;
    if (s_metadata_check (self, path, &stored_crc))
        return -1;
    uint64_t *begins = NULL;
    if (s_tensors_parse (self, path, data_start, file_size, &begins))
        return -1;
    if (!with_data) {
        free (begins);
        return 0;
    }

    int rc = 0;
    self->data = za_alloc (self->data_size);
    if (!self->data)
        rc = -1;
    else
    if (s_read_at (fd, self->data, self->data_size, data_start))
        rc = za_error ("'%s': cannot read the data: %s", path,
                       errno ? strerror (errno) : "file shrank while reading");
    if (rc == 0) {
        uint32_t computed_crc = za_checkpoint_crc32_update ((uint32_t) crc32 (0L, Z_NULL, 0),
                                                            self->data, self->data_size);
        if (computed_crc != stored_crc)
            rc = za_error ("'%s': CRC32 mismatch (stored %08" PRIx32 ", computed %08" PRIx32 ")",
                           path, stored_crc, computed_crc);
    }
    if (rc == 0)
        for (int i = 0; i < self->tensor_count; i++)
            self->tensors [i].data = self->data + begins [i];
    free (begins);
    return rc;
}

//  The file at path, with its data (verified) or its header alone.
static za_checkpoint_t *
s_load (const char *path, int with_data)
{
    if (!path) {
        za_error ("za_checkpoint_load: path is NULL");
        return NULL;
    }
    za_checkpoint_t *self = calloc (1, sizeof (za_checkpoint_t));
    if (!self) {
        za_error ("'%s': out of memory loading", path);
        return NULL;
    }
    self->filename = strdup (path);
    if (!self->filename) {
        za_error ("'%s': out of memory loading", path);
        za_checkpoint_destroy (&self);
        return NULL;
    }
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        za_error ("'%s': cannot open: %s", path, strerror (errno));
        za_checkpoint_destroy (&self);
        return NULL;
    }
    int rc = s_load_file (self, path, fd, with_data);
    close (fd);
    if (rc != 0)
        za_checkpoint_destroy (&self);
    return self;
}

za_checkpoint_t *
za_checkpoint_load (const char *path)
{
    return s_load (path, 1);
}

za_checkpoint_t *
za_checkpoint_load_step (const char *model_dir, int64_t step)
{
    char *path = za_checkpoint_path (model_dir, step);
    if (!path)
        return NULL;
    za_checkpoint_t *self = za_checkpoint_load (path);
    if (self && self->step != step) {
        za_error ("'%s': metadata says global_step %" PRId64 ", the name says %" PRId64, path,
                  self->step, step);
        za_checkpoint_destroy (&self);
    }
    free (path);
    return self;
}

za_checkpoint_t *
za_checkpoint_load_newest (const char *model_dir, int *found_any)
{
    if (found_any)
        *found_any = 0;
    za_error_clear ();
    int64_t *steps = NULL;
    int count = za_checkpoint_list (model_dir, &steps);
    if (count <= 0)
        return NULL;
    if (found_any)
        *found_any = 1;

    za_checkpoint_t *self = NULL;
    for (int i = count - 1; i >= 0 && !self; i--)
        self = za_checkpoint_load_step (model_dir, steps [i]);
    if (!self)
        za_error ("'%s': none of the %d checkpoints is intact", model_dir, count);
    free (steps);
    return self;
}


//  --------------------------------------------------------------------------
//  Accessors

int64_t
za_checkpoint_step (const za_checkpoint_t *self)
{
    return self->step;
}

int64_t
za_checkpoint_examples_done (const za_checkpoint_t *self)
{
    return za_checkpoint_examples_text (za_checkpoint_meta (self, ZA_CKPT_META_EXAMPLES));
}

int64_t
za_checkpoint_examples_text (const char *text)
{
    int64_t examples = 0;
    return text && s_parse_step_value (text, &examples) == 0? examples: 0;
}

char *
za_checkpoint_newest_meta (const char *model_dir, const char *key, int64_t *step)
{
    za_checkpoint_t *newest = za_checkpoint_load_newest (model_dir, NULL);
    const char *value = newest? za_checkpoint_meta (newest, key): NULL;
    char *copy = value? strdup (value): NULL;
    if (step)
        *step = newest? newest->step: -1;
    za_checkpoint_destroy (&newest);
    return copy;
}

int
za_checkpoint_tensor_count (const za_checkpoint_t *self)
{
    return self->tensor_count;
}

const za_ckpt_tensor_t *
za_checkpoint_tensor (const za_checkpoint_t *self, int i)
{
    if (i < 0 || i >= self->tensor_count)
        return NULL;
    return &self->tensors [i];
}

const za_ckpt_tensor_t *
za_checkpoint_find (const za_checkpoint_t *self, const char *name)
{
    for (int i = 0; i < self->tensor_count; i++)
        if (strcmp (self->tensors [i].name, name) == 0)
            return &self->tensors [i];
    return NULL;
}

const char *
za_checkpoint_meta (const za_checkpoint_t *self, const char *key)
{
    return json_string_value (json_object_get (self->metadata, key));
}

const char *
za_checkpoint_filename (const za_checkpoint_t *self)
{
    return self->filename;
}

void
za_checkpoint_destroy (za_checkpoint_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_checkpoint_t *self = *self_p;
    za_free (self->data);
    free (self->tensors);
    json_decref (self->header);
    free (self->filename);
    free (self);
    *self_p = NULL;
}
