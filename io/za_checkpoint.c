/*  za_checkpoint.c: safetensors checkpoints written atomically (temp file, fsync,
    rename, directory fsync), indexed TensorFlow-style, retained and verified.   */
#define _GNU_SOURCE                     //  asprintf, open_memstream
#include "za/za_checkpoint.h"
#include "za/za_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_PREFIX "model.ckpt-"
#define CKPT_SUFFIX ".safetensors"
#define CKPT_INDEX_NAME "checkpoint"
#define CKPT_TMP_SUFFIX ".tmp"
#define CKPT_LEN_PREFIX_BYTES 8
#define CKPT_HEADER_ALIGN_BYTES 8
#define CKPT_CRC_HEX_DIGITS 8
#define CKPT_MAX_STEP_DIGITS 19         //  INT64_MAX has 19 digits
#define CKPT_CRC_CHUNK_BYTES (1u << 30) //  zlib's crc32 takes a uInt length

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

//  One piece of a file to write.
typedef struct {
    const void *data;
    size_t size;
} s_chunk_t;

//  A tensor's place in the data section while parsing a header.
typedef struct {
    za_ckpt_tensor_t tensor;
    uint64_t begin;
    uint64_t end;
    size_t order;                       //  position in the JSON header
} s_entry_t;


//  --------------------------------------------------------------------------
//  Small helpers

static const char *
s_dtype_name (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32 ? "F32" : "I64";
}

static uint32_t
s_crc32_update (uint32_t crc, const uint8_t *data, size_t size)
{
    while (size > 0) {
        uInt piece = size > CKPT_CRC_CHUNK_BYTES ? CKPT_CRC_CHUNK_BYTES : (uInt) size;
        crc = (uint32_t) crc32 (crc, data, piece);
        data += piece;
        size -= piece;
    }
    return crc;
}

//  Parses "model.ckpt-<digits>.safetensors" (canonical decimal, no leading
//  zeros, so the name round-trips through za_checkpoint_path). Returns 0 or -1.
static int
s_parse_step_name (const char *name, int64_t *step_p)
{
    size_t prefix_len = strlen (CKPT_PREFIX);
    size_t suffix_len = strlen (CKPT_SUFFIX);
    size_t name_len = strlen (name);
    if (name_len <= prefix_len + suffix_len
    ||  strncmp (name, CKPT_PREFIX, prefix_len) != 0
    ||  strcmp (name + name_len - suffix_len, CKPT_SUFFIX) != 0)
        return -1;
    const char *digits = name + prefix_len;
    size_t digit_count = name_len - prefix_len - suffix_len;
    if (digit_count > CKPT_MAX_STEP_DIGITS || (digits [0] == '0' && digit_count > 1))
        return -1;
    int64_t step = 0;
    for (size_t i = 0; i < digit_count; i++) {
        if (digits [i] < '0' || digits [i] > '9')
            return -1;
        if (__builtin_mul_overflow (step, 10, &step)
        ||  __builtin_add_overflow (step, digits [i] - '0', &step))
            return -1;
    }
    *step_p = step;
    return 0;
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

static char *
s_path_join (const char *dir, const char *name)
{
    char *path = NULL;
    if (asprintf (&path, "%s/%s", dir, name) < 0) {
        za_error ("out of memory building a path in '%s'", dir);
        return NULL;
    }
    return path;
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
//  Directories and atomic files

//  Makes renames and unlinks in dir durable.
static int
s_fsync_dir (const char *dir)
{
    int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return za_error ("'%s': cannot open directory to fsync: %s", dir, strerror (errno));
    int rc = 0;
    //  EINVAL: the file system does not support syncing directories.
    if (fsync (fd) != 0 && errno != EINVAL)
        rc = za_error ("'%s': directory fsync failed: %s", dir, strerror (errno));
    close (fd);
    return rc;
}

//  The errno of this thread's last write that the disk failed (za_checkpoint.h).
static __thread int s_disk_errno;

//  Keeps errno when it says the disk is full or failing.
static void
s_disk_errno_keep (void)
{
    if (errno == ENOSPC || errno == EDQUOT || errno == EIO || errno == EFBIG || errno == EROFS)
        s_disk_errno = errno;
}

int
za_checkpoint_disk_errno (void)
{
    return s_disk_errno;
}

void
za_checkpoint_disk_errno_clear (void)
{
    s_disk_errno = 0;
}

//  Writes the chunks to "<path>.tmp", fsyncs it, renames it to path and fsyncs
//  dir. On failure removes the temp file: path is either the old file or the
//  complete new one.
static int
s_write_atomic (const char *dir, const char *path, const s_chunk_t *chunks, int chunk_count)
{
    char *tmp_path = NULL;
    if (asprintf (&tmp_path, "%s%s", path, CKPT_TMP_SUFFIX) < 0)
        return za_error ("out of memory writing '%s'", path);

    int rc = -1;
    //  "e": O_CLOEXEC, so a role that spawns processes leaks no descriptor.
    FILE *file = fopen (tmp_path, "wbe");
    if (!file) {
        s_disk_errno_keep ();
        za_error ("'%s': cannot create: %s", tmp_path, strerror (errno));
        goto done;
    }
    for (int i = 0; i < chunk_count; i++) {
        if (chunks [i].size > 0
        &&  fwrite (chunks [i].data, 1, chunks [i].size, file) != chunks [i].size) {
            s_disk_errno_keep ();
            za_error ("'%s': write failed: %s", tmp_path, strerror (errno));
            goto done;
        }
    }
    if (fflush (file) != 0) {
        s_disk_errno_keep ();
        za_error ("'%s': write failed: %s", tmp_path, strerror (errno));
        goto done;
    }
    if (fsync (fileno (file)) != 0) {
        s_disk_errno_keep ();
        za_error ("'%s': fsync failed: %s", tmp_path, strerror (errno));
        goto done;
    }
    int close_rc = fclose (file);
    file = NULL;
    if (close_rc != 0) {
        s_disk_errno_keep ();
        za_error ("'%s': close failed: %s", tmp_path, strerror (errno));
        goto done;
    }
    if (rename (tmp_path, path) != 0) {
        s_disk_errno_keep ();
        za_error ("'%s': cannot rename to '%s': %s", tmp_path, path, strerror (errno));
        goto done;
    }
    rc = s_fsync_dir (dir);

done:
    if (file)
        fclose (file);
    if (rc != 0)
        unlink (tmp_path);          //  may already be gone (renamed)
    free (tmp_path);
    return rc;
}


//  --------------------------------------------------------------------------
//  Writing

//  Checks the caller's tensors and metadata; sums the data section's size.
static int
s_check_write_args (const char *model_dir, int64_t global_step,
                    const za_ckpt_tensor_t *tensors, int tensor_count,
                    const za_ckpt_meta_t *meta, int meta_count, uint64_t *data_size_p)
{
    if (!model_dir || !*model_dir)
        return za_error ("za_checkpoint_write_atomic: model_dir is empty");
    if (global_step < 0)
        return za_error ("'%s': global_step %" PRId64 " is negative", model_dir, global_step);
    if (tensor_count < 0 || (tensor_count > 0 && !tensors))
        return za_error ("'%s': bad tensor list (count %d)", model_dir, tensor_count);
    if (meta_count < 0 || (meta_count > 0 && !meta))
        return za_error ("'%s': bad metadata list (count %d)", model_dir, meta_count);

    uint64_t data_size = 0;
    for (int i = 0; i < tensor_count; i++) {
        const za_ckpt_tensor_t *tensor = &tensors [i];
        if (!tensor->name)
            return za_error ("'%s': tensor %d has no name", model_dir, i);
        if (strcmp (tensor->name, "__metadata__") == 0)
            return za_error ("'%s': tensor name '__metadata__' is reserved", model_dir);
        if (tensor->dtype != ZA_DTYPE_F32 && tensor->dtype != ZA_DTYPE_I64)
            return za_error ("'%s': tensor '%s': unknown dtype %d",
                             model_dir, tensor->name, (int) tensor->dtype);
        if (tensor->ndim < 0 || tensor->ndim > ZA_CKPT_MAX_DIMS)
            return za_error ("'%s': tensor '%s': ndim %d outside 0..%d",
                             model_dir, tensor->name, tensor->ndim, ZA_CKPT_MAX_DIMS);
        uint64_t bytes;
        if (za_tensor_bytes (tensor->dtype, tensor->ndim, tensor->shape, &bytes) != 0)
            return za_error ("'%s': tensor '%s': shape has a negative dimension or is too large",
                             model_dir, tensor->name);
        if (bytes > 0 && !tensor->data)
            return za_error ("'%s': tensor '%s': data is NULL", model_dir, tensor->name);
        if (__builtin_add_overflow (data_size, bytes, &data_size) || data_size > (uint64_t) INT64_MAX)
            return za_error ("'%s': tensors total more than 2^63 bytes", model_dir);
    }
    for (int i = 0; i < meta_count; i++) {
        if (!meta [i].key || !meta [i].value)
            return za_error ("'%s': metadata entry %d has a NULL key or value", model_dir, i);
        if (strcmp (meta [i].key, "format") == 0
        ||  strcmp (meta [i].key, "global_step") == 0
        ||  strcmp (meta [i].key, "crc32") == 0)
            return za_error ("'%s': metadata key '%s' is reserved (the writer sets it)",
                             model_dir, meta [i].key);
    }
    *data_size_p = data_size;
    return 0;
}

//  Adds key: value to object; fails on invalid UTF-8, a NULL value or a key
//  that is already there.
static int
s_json_add (json_t *object, const char *key, json_t *value, const char *model_dir, const char *what)
{
    if (!value)
        return za_error ("'%s': %s '%s': value is not valid UTF-8 or out of memory",
                         model_dir, what, key);
    if (json_object_get (object, key)) {
        json_decref (value);
        return za_error ("'%s': duplicate %s '%s'", model_dir, what, key);
    }
    if (json_object_set_new (object, key, value) != 0)
        return za_error ("'%s': %s '%s': name is not valid UTF-8 or out of memory",
                         model_dir, what, key);
    return 0;
}

//  Builds the JSON header, padded with spaces to a multiple of 8 bytes.
static char *
s_header_build (const char *model_dir, int64_t global_step, uint32_t crc,
                const za_ckpt_tensor_t *tensors, int tensor_count,
                const za_ckpt_meta_t *meta, int meta_count, size_t *size_p)
{
    char step_text [32];
    char crc_text [CKPT_CRC_HEX_DIGITS + 1];
    snprintf (step_text, sizeof step_text, "%" PRId64, global_step);
    snprintf (crc_text, sizeof crc_text, "%08" PRIx32, crc);

    json_t *root = json_object ();
    json_t *metadata = json_object ();
    char *text = NULL;
    char *padded = NULL;
    if (!root || !metadata) {
        za_error ("'%s': out of memory building the header", model_dir);
        goto done;
    }
    if (s_json_add (metadata, "format", json_string (ZA_CKPT_FORMAT), model_dir, "metadata key")
    ||  s_json_add (metadata, "global_step", json_string (step_text), model_dir, "metadata key")
    ||  s_json_add (metadata, "crc32", json_string (crc_text), model_dir, "metadata key"))
        goto done;
    for (int i = 0; i < meta_count; i++)
        if (s_json_add (metadata, meta [i].key, json_string (meta [i].value),
                        model_dir, "metadata key"))
            goto done;
    int metadata_rc = json_object_set (root, "__metadata__", metadata);
    if (metadata_rc != 0) {
        za_error ("'%s': out of memory building the header", model_dir);
        goto done;
    }

    uint64_t offset = 0;
    for (int i = 0; i < tensor_count; i++) {
        const za_ckpt_tensor_t *tensor = &tensors [i];
        uint64_t bytes = 0;
        za_tensor_bytes (tensor->dtype, tensor->ndim, tensor->shape, &bytes);
        json_t *entry = json_object ();
        json_t *shape = json_array ();
        json_t *offsets = json_array ();
        int rc = (entry && shape && offsets) ? 0 : -1;
        for (int dim = 0; dim < tensor->ndim && rc == 0; dim++)
            rc = json_array_append_new (shape, json_integer (tensor->shape [dim]));
        if (rc == 0)
            rc = json_array_append_new (offsets, json_integer ((json_int_t) offset));
        if (rc == 0)
            rc = json_array_append_new (offsets, json_integer ((json_int_t) (offset + bytes)));
        if (rc == 0)
            rc = json_object_set_new (entry, "dtype", json_string (s_dtype_name (tensor->dtype)));
        if (rc == 0)
            rc = json_object_set (entry, "shape", shape);
        if (rc == 0)
            rc = json_object_set (entry, "data_offsets", offsets);
        json_decref (shape);
        json_decref (offsets);
        if (rc != 0) {
            json_decref (entry);
            za_error ("'%s': out of memory building the header", model_dir);
            goto done;
        }
        if (s_json_add (root, tensor->name, entry, model_dir, "tensor name"))
            goto done;
        offset += bytes;
    }

    text = json_dumps (root, JSON_COMPACT);
    if (!text) {
        za_error ("'%s': out of memory serialising the header", model_dir);
        goto done;
    }
    size_t text_len = strlen (text);
    size_t padded_len = (text_len + CKPT_HEADER_ALIGN_BYTES - 1)
                      / CKPT_HEADER_ALIGN_BYTES * CKPT_HEADER_ALIGN_BYTES;
    if (padded_len > ZA_CKPT_MAX_HEADER_BYTES) {
        za_error ("'%s': header would be %zu bytes, over the %u-byte limit",
                  model_dir, padded_len, ZA_CKPT_MAX_HEADER_BYTES);
        goto done;
    }
    padded = malloc (padded_len);
    if (!padded) {
        za_error ("'%s': out of memory serialising the header", model_dir);
        goto done;
    }
    memcpy (padded, text, text_len);
    memset (padded + text_len, ' ', padded_len - text_len);
    *size_p = padded_len;

done:
    free (text);
    json_decref (metadata);
    json_decref (root);
    return padded;
}

//  The index text: survivors ascending, the highest step as the current one.
static char *
s_index_build (const char *model_dir, const int64_t *steps, const bool *deleted,
               int count, size_t *size_p)
{
    char *text = NULL;
    size_t size = 0;
    FILE *stream = open_memstream (&text, &size);
    if (!stream) {
        za_error ("'%s': out of memory building the checkpoint index", model_dir);
        return NULL;
    }
    int newest = -1;
    for (int i = 0; i < count; i++)
        if (!deleted [i])
            newest = i;
    if (newest >= 0)
        fprintf (stream, "model_checkpoint_path: \"" CKPT_PREFIX "%" PRId64 CKPT_SUFFIX "\"\n",
                 steps [newest]);
    for (int i = 0; i < count; i++)
        if (!deleted [i])
            fprintf (stream, "all_model_checkpoint_paths: \"" CKPT_PREFIX "%" PRId64
                     CKPT_SUFFIX "\"\n", steps [i]);
    if (ferror (stream)) {
        fclose (stream);
        free (text);
        za_error ("'%s': out of memory building the checkpoint index", model_dir);
        return NULL;
    }
    fclose (stream);
    *size_p = size;
    return text;
}

//  Chooses what retention deletes, writes the index naming the rest, then
//  deletes, so the index never names a file that is gone.
static int
s_index_and_retain (const char *model_dir, int64_t written_step, int keep_max)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (model_dir, &steps);
    if (count < 0)
        return -1;
    bool *deleted = calloc ((size_t) count + 1, sizeof (bool));
    if (!deleted) {
        free (steps);
        return za_error ("'%s': out of memory applying retention", model_dir);
    }
    int excess = keep_max > 0 && count > keep_max ? count - keep_max : 0;
    for (int i = 0; i < count && excess > 0; i++) {
        if (steps [i] == written_step)
            continue;
        deleted [i] = true;
        excess--;
    }

    int rc = -1;
    char *index_path = s_path_join (model_dir, CKPT_INDEX_NAME);
    size_t index_size = 0;
    char *index_text = s_index_build (model_dir, steps, deleted, count, &index_size);
    if (index_path && index_text) {
        s_chunk_t chunk = { index_text, index_size };
        rc = s_write_atomic (model_dir, index_path, &chunk, 1);
    }
    int removed = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        if (!deleted [i])
            continue;
        char *path = za_checkpoint_path (model_dir, steps [i]);
        if (!path)
            rc = -1;
        else
        if (unlink (path) != 0 && errno != ENOENT)
            rc = za_error ("'%s': cannot delete old checkpoint: %s", path, strerror (errno));
        else
            removed++;
        free (path);
    }
    if (rc == 0 && removed > 0)
        rc = s_fsync_dir (model_dir);

    free (index_text);
    free (index_path);
    free (deleted);
    free (steps);
    return rc;
}

int
za_checkpoint_write_atomic (const char *model_dir, int64_t global_step,
                            const za_ckpt_tensor_t *tensors, int tensor_count,
                            const za_ckpt_meta_t *meta, int meta_count,
                            int keep_max)
{
    uint64_t data_size = 0;
    s_disk_errno = 0;
    if (s_check_write_args (model_dir, global_step, tensors, tensor_count,
                            meta, meta_count, &data_size))
        return -1;

    uint32_t crc = (uint32_t) crc32 (0L, Z_NULL, 0);
    for (int i = 0; i < tensor_count; i++) {
        uint64_t bytes = 0;
        za_tensor_bytes (tensors [i].dtype, tensors [i].ndim, tensors [i].shape, &bytes);
        if (bytes > 0)
            crc = s_crc32_update (crc, tensors [i].data, (size_t) bytes);
    }

    int rc = -1;
    char *path = NULL;
    s_chunk_t *chunks = NULL;
    size_t header_size = 0;
    char *header = s_header_build (model_dir, global_step, crc, tensors, tensor_count,
                                   meta, meta_count, &header_size);
    if (!header)
        goto done;
    path = za_checkpoint_path (model_dir, global_step);
    chunks = calloc ((size_t) tensor_count + 2, sizeof (s_chunk_t));
    if (!path || !chunks) {
        za_error ("'%s': out of memory writing a checkpoint", model_dir);
        goto done;
    }
    uint8_t length_prefix [CKPT_LEN_PREFIX_BYTES];
    for (int i = 0; i < CKPT_LEN_PREFIX_BYTES; i++)
        length_prefix [i] = (uint8_t) ((uint64_t) header_size >> (8 * i));
    chunks [0] = (s_chunk_t) { length_prefix, sizeof length_prefix };
    chunks [1] = (s_chunk_t) { header, header_size };
    for (int i = 0; i < tensor_count; i++) {
        uint64_t bytes = 0;
        za_tensor_bytes (tensors [i].dtype, tensors [i].ndim, tensors [i].shape, &bytes);
        chunks [i + 2] = (s_chunk_t) { tensors [i].data, (size_t) bytes };
    }

    if (za_mkdirs (model_dir))
        goto done;
    if (s_write_atomic (model_dir, path, chunks, tensor_count + 2))
        goto done;
    rc = s_index_and_retain (model_dir, global_step, keep_max);

done:
    free (chunks);
    free (path);
    free (header);
    return rc;
}


//  --------------------------------------------------------------------------
//  Listing

static int
s_step_compare (const void *a, const void *b)
{
    int64_t left = *(const int64_t *) a;
    int64_t right = *(const int64_t *) b;
    return (left > right) - (left < right);
}

int
za_checkpoint_list (const char *model_dir, int64_t **steps_p)
{
    if (!steps_p)
        return za_error ("za_checkpoint_list: steps_p is NULL");
    *steps_p = NULL;
    if (!model_dir)
        return za_error ("za_checkpoint_list: model_dir is NULL");
    DIR *dir = opendir (model_dir);
    if (!dir) {
        if (errno == ENOENT)
            return 0;
        return za_error ("'%s': cannot open directory: %s", model_dir, strerror (errno));
    }
    int64_t *steps = NULL;
    int count = 0;
    int capacity = 0;
    int rc = 0;
    while (true) {
        errno = 0;
        struct dirent *entry = readdir (dir);
        if (!entry) {
            if (errno != 0)
                rc = za_error ("'%s': cannot read directory: %s", model_dir, strerror (errno));
            break;
        }
        int64_t step;
        if (s_parse_step_name (entry->d_name, &step))
            continue;
        struct stat st;
        if (fstatat (dirfd (dir), entry->d_name, &st, 0) != 0 || !S_ISREG (st.st_mode))
            continue;               //  vanished meanwhile, or not a file
        if (count == capacity) {
            if (capacity > INT32_MAX / 2) {
                rc = za_error ("'%s': too many checkpoints", model_dir);
                break;
            }
            int new_capacity = capacity ? capacity * 2 : 16;
            int64_t *grown = realloc (steps, (size_t) new_capacity * sizeof (int64_t));
            if (!grown) {
                rc = za_error ("'%s': out of memory listing checkpoints", model_dir);
                break;
            }
            steps = grown;
            capacity = new_capacity;
        }
        steps [count++] = step;
    }
    closedir (dir);
    if (rc != 0 || count == 0) {
        free (steps);
        return rc;
    }
    qsort (steps, (size_t) count, sizeof (int64_t), s_step_compare);
    *steps_p = steps;
    return count;
}

char *
za_checkpoint_path (const char *model_dir, int64_t step)
{
    if (!model_dir) {
        za_error ("za_checkpoint_path: model_dir is NULL");
        return NULL;
    }
    char *path = NULL;
    if (asprintf (&path, "%s/" CKPT_PREFIX "%" PRId64 CKPT_SUFFIX, model_dir, step) < 0) {
        za_error ("out of memory building a checkpoint path in '%s'", model_dir);
        return NULL;
    }
    return path;
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
s_load_file (za_checkpoint_t *self, const char *path, int fd)
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

    int rc = 0;
    self->data = za_alloc (self->data_size);
    if (!self->data)
        rc = -1;
    else
    if (s_read_at (fd, self->data, self->data_size, data_start))
        rc = za_error ("'%s': cannot read the data: %s", path,
                       errno ? strerror (errno) : "file shrank while reading");
    if (rc == 0) {
        uint32_t computed_crc = s_crc32_update ((uint32_t) crc32 (0L, Z_NULL, 0),
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

za_checkpoint_t *
za_checkpoint_load (const char *path)
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
    int rc = s_load_file (self, path, fd);
    close (fd);
    if (rc != 0)
        za_checkpoint_destroy (&self);
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
    for (int i = count - 1; i >= 0 && !self; i--) {
        char *path = za_checkpoint_path (model_dir, steps [i]);
        if (!path)
            break;
        self = za_checkpoint_load (path);
        //  A file renamed from another step would restore the wrong state.
        if (self && self->step != steps [i]) {
            za_error ("'%s': metadata says global_step %" PRId64 ", the name says %" PRId64,
                      path, self->step, steps [i]);
            za_checkpoint_destroy (&self);
        }
        free (path);
    }
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

