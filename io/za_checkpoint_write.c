/*  za_checkpoint_write.c: safetensors checkpoints written atomically (temp file,
    fsync, rename, directory fsync), indexed TensorFlow-style and retained.      */
#define _GNU_SOURCE                     //  asprintf, open_memstream
#include "za_checkpoint_private.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

//  One piece of a file to write.
typedef struct {
    const void *data;
    size_t size;
} s_chunk_t;


//  --------------------------------------------------------------------------
//  Small helpers

static const char *
s_dtype_name (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32 ? "F32" : "I64";
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

//  Adds each tensor's header entry to root: its dtype, its shape and its
//  data_offsets, the tensors laid end to end in the caller's order.
static int
s_header_tensors (json_t *root, const za_ckpt_tensor_t *tensors, int tensor_count,
                  const char *model_dir)
{
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
            return -1;
        }
        if (s_json_add (root, tensor->name, entry, model_dir, "tensor name"))
            return -1;
        offset += bytes;
    }
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

    if (s_header_tensors (root, tensors, tensor_count, model_dir))
        goto done;

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
            crc = za_checkpoint_crc32_update (crc, tensors [i].data, (size_t) bytes);
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
