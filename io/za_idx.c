/*  za_idx.c: MNIST-format IDX files (gzipped or plain) as a data set: whole,
    one shard streamed from the file, or only what the headers say.         */
#include "za/za_idx.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_DTYPE_UINT8 0x08u
#define IDX_MAX_DIMS 3
//  The payload buffer grows as bytes arrive, so a header declaring gigabytes
//  costs nothing until the bytes are really there.
#define IDX_READ_START_BYTES (1u << 20)
//  gzread takes an unsigned int length; stay well under it.
#define IDX_READ_CHUNK_BYTES (1u << 30)
#define IDX_PATH_MAX_CHARS 4096

//  What an IDX file of one kind must look like.
typedef struct {
    uint32_t magic;
    int ndim;
    const char *kind;           //  "IDX image file", "IDX label file"
} s_idx_kind_t;

static const s_idx_kind_t s_idx_images = { IDX_MAGIC_IMAGES, 3, "IDX image file" };
static const s_idx_kind_t s_idx_labels = { IDX_MAGIC_LABELS, 1, "IDX label file" };

//  An IDX file read into memory: its dims and its uint8 payload.
typedef struct {
    uint32_t dims [IDX_MAX_DIMS];
    uint8_t *data;              //  malloc'd, dims product bytes
    size_t size;
} s_idx_t;


//  --------------------------------------------------------------------------
//  Reading

//  Reads up to `want` bytes; returns the count read (fewer at end of file) or
//  -1 after recording a read error.
static int64_t
s_gz_read (gzFile gz, const char *path, uint8_t *buf, size_t want)
{
    size_t got = 0;
    while (got < want) {
        size_t chunk = want - got;
        if (chunk > IDX_READ_CHUNK_BYTES)
            chunk = IDX_READ_CHUNK_BYTES;
        int n = gzread (gz, buf + got, (unsigned) chunk);
        if (n < 0) {
            int errnum = 0;
            const char *msg = gzerror (gz, &errnum);
            //  A gzip stream cut short reads as end of file, so the caller
            //  reports it as truncated with the byte count.
            if (errnum == Z_BUF_ERROR)
                break;
            if (errnum == Z_ERRNO)
                msg = strerror (errno);
            za_error ("'%s': read error: %s", path, msg);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t) n;
    }
    return (int64_t) got;
}

static uint32_t
s_be32 (const uint8_t *p)
{
    return (uint32_t) p [0] << 24 | (uint32_t) p [1] << 16
         | (uint32_t) p [2] << 8 | (uint32_t) p [3];
}

//  Reads and checks the header of an open IDX file of `kind`: idx->dims;
//  *total_p gets the payload's size in bytes.
static int
s_idx_read_header (gzFile gz, const char *path, const s_idx_kind_t *kind, s_idx_t *idx,
                   uint64_t *total_p)
{
    uint8_t header [4 + 4 * IDX_MAX_DIMS];
    int64_t got = s_gz_read (gz, path, header, 4);
    if (got < 0)
        return -1;
    if (got < 4)
        return za_error ("'%s': truncated: %lld bytes, too short for an IDX header",
                         path, (long long) got);
    uint32_t magic = s_be32 (header);
    if (magic != kind->magic) {
        if (magic >> 16 == 0 && (magic & 0xff) == (uint32_t) kind->ndim
        &&  (magic >> 8 & 0xff) != IDX_DTYPE_UINT8)
            return za_error ("'%s': unsupported data type 0x%02x in magic 0x%08x "
                             "(expected 0x%02x, unsigned byte, for an %s)",
                             path, magic >> 8 & 0xff, magic, IDX_DTYPE_UINT8, kind->kind);
        return za_error ("'%s': wrong magic 0x%08x (expected 0x%08x for an %s)",
                         path, magic, kind->magic, kind->kind);
    }
    size_t dims_bytes = 4 * (size_t) kind->ndim;
    got = s_gz_read (gz, path, header + 4, dims_bytes);
    if (got < 0)
        return -1;
    if ((size_t) got < dims_bytes)
        return za_error ("'%s': truncated: header ends after %lld of %zu bytes",
                         path, (long long) got + 4, dims_bytes + 4);

    uint64_t total = 1;
    for (int d = 0; d < kind->ndim; d++) {
        idx->dims [d] = s_be32 (header + 4 + 4 * d);
        if (idx->dims [d] == 0 || idx->dims [d] > INT32_MAX)
            return za_error ("'%s': dimension %d is %u (expected 1 to %d)",
                             path, d, idx->dims [d], INT32_MAX);
        if (__builtin_mul_overflow (total, (uint64_t) idx->dims [d], &total))
            return za_error ("'%s': header dimensions overflow", path);
    }
    //  The payload becomes floats: the float array must be addressable too.
    if (total > PTRDIFF_MAX / sizeof (float))
        return za_error ("'%s': header declares %llu bytes of data, too large",
                         path, (unsigned long long) total);
    *total_p = total;
    return 0;
}

//  The error for a payload that ends after `size` of `total` bytes.
static int
s_idx_truncated (const char *path, const s_idx_kind_t *kind, const s_idx_t *idx,
                 uint64_t total, size_t size)
{
    if (kind->magic == IDX_MAGIC_IMAGES)
        return za_error ("'%s': truncated: header declares %u images of %ux%u "
                         "(%llu bytes) but only %zu bytes follow",
                         path, idx->dims [0], idx->dims [1], idx->dims [2],
                         (unsigned long long) total, size);
    return za_error ("'%s': truncated: header declares %u labels "
                     "(%llu bytes) but only %zu bytes follow",
                     path, idx->dims [0], (unsigned long long) total, size);
}

//  Checks the header of an open IDX file and reads its payload.
static int
s_idx_read_open (gzFile gz, const char *path, const s_idx_kind_t *kind, s_idx_t *idx)
{
    uint64_t total;
    if (s_idx_read_header (gz, path, kind, idx, &total))
        return -1;
    size_t capacity = total < IDX_READ_START_BYTES? (size_t) total: IDX_READ_START_BYTES;
    size_t size = 0;
    uint8_t *data = malloc (capacity);
    if (!data)
        return za_error ("'%s': out of memory for %zu bytes", path, capacity);
    while (size < total) {
        if (size == capacity) {
            size_t grown = capacity * 2 < total? capacity * 2: (size_t) total;
            uint8_t *bigger = realloc (data, grown);
            if (!bigger) {
                free (data);
                return za_error ("'%s': out of memory for %zu bytes", path, grown);
            }
            data = bigger;
            capacity = grown;
        }
        int64_t got = s_gz_read (gz, path, data + size, capacity - size);
        if (got < 0) {
            free (data);
            return -1;
        }
        size += (size_t) got;
        if (size < capacity)
            break;              //  end of file
    }
    if (size < total) {
        s_idx_truncated (path, kind, idx, total, size);
        free (data);
        return -1;
    }
    idx->data = data;
    idx->size = size;
    return 0;
}

//  Streams the rows of an open IDX image file whose header is read: keeps
//  rows shard_index, shard_index + num_shards, ... into dst (row_bytes each),
//  reading a chunk of rows at a time, so a shard costs its own size only.
static int
s_idx_read_shard (gzFile gz, const char *path, const s_idx_t *idx, uint64_t total,
                  size_t row_bytes, int num_shards, int shard_index, uint8_t *dst)
{
    size_t chunk_rows = IDX_READ_START_BYTES / row_bytes + 1;
    uint8_t *chunk = malloc (chunk_rows * row_bytes);
    if (!chunk)
        return za_error ("'%s': out of memory for %zu bytes", path, chunk_rows * row_bytes);
    int64_t rows = (int64_t) idx->dims [0], row = 0;
    size_t size = 0;
    while (row < rows) {
        size_t want = (size_t) (rows - row) < chunk_rows? (size_t) (rows - row): chunk_rows;
        int64_t got = s_gz_read (gz, path, chunk, want * row_bytes);
        if (got < 0) {
            free (chunk);
            return -1;
        }
        size += (size_t) got;
        if ((size_t) got < want * row_bytes) {
            free (chunk);
            return s_idx_truncated (path, &s_idx_images, idx, total, size);
        }
        for (size_t r = 0; r < want; r++, row++)
            if (row % num_shards == shard_index) {
                memcpy (dst, chunk + r * row_bytes, row_bytes);
                dst += row_bytes;
            }
    }
    free (chunk);
    return 0;
}

//  Opens `path`, gzipped or plain (detected by content). NULL with an error.
static gzFile
s_idx_open (const char *path)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        za_error ("cannot open '%s': %s", path, strerror (errno));
        return NULL;
    }
    gzFile gz = gzdopen (fd, "rb");
    if (!gz) {
        close (fd);
        za_error ("cannot open '%s': out of memory for the zlib stream", path);
    }
    return gz;
}

//  Opens `path` and reads it as an IDX file of `kind`. On success idx->data
//  is the caller's to free.
static int
s_idx_read (const char *path, const s_idx_kind_t *kind, s_idx_t *idx)
{
    memset (idx, 0, sizeof *idx);
    gzFile gz = s_idx_open (path);
    if (!gz)
        return -1;
    int rc = s_idx_read_open (gz, path, kind, idx);
    gzclose (gz);
    return rc;
}



//  --------------------------------------------------------------------------
//  Data sets from IDX files

za_dataset_t *
za_idx_load (const char *images_path, const char *labels_path)
{
    if (!images_path || !labels_path) {
        za_error ("za_idx_load: images_path and labels_path are required");
        return NULL;
    }
    s_idx_t images, labels;
    if (s_idx_read (images_path, &s_idx_images, &images))
        return NULL;
    if (s_idx_read (labels_path, &s_idx_labels, &labels)) {
        free (images.data);
        return NULL;
    }
    za_dataset_t *self = NULL;
    if (images.dims [0] != labels.dims [0])
        za_error ("'%s' holds %u labels but '%s' holds %u images",
                  labels_path, labels.dims [0], images_path, images.dims [0]);
    else
        self = za_dataset_new (images.dims [0], (int) images.dims [1],
                                (int) images.dims [2], 1, 0);
    if (self) {
        for (size_t i = 0; i < images.size; i++)
            self->features [i] = (float) images.data [i] / ZA_DATASET_PIXEL_MAX;
        for (int64_t i = 0; i < self->count; i++)
            self->labels [i] = labels.data [i];
        za_dataset_count_classes (self);
    }
    free (images.data);
    free (labels.data);
    return self;
}

//  Writes "<dir>/<split>-<name>" into path, with ".gz" when that file exists
//  or when neither does (so the error names the usual file).
static int
s_dataset_path (char *path, size_t size, const char *dir, const char *split,
                const char *name)
{
    int n = snprintf (path, size, "%s/%s-%s.gz", dir, split, name);
    if (n < 0 || (size_t) n >= size)
        return za_error ("dataset path '%s/%s-%s.gz' is too long", dir, split, name);
    if (access (path, F_OK) == 0)
        return 0;
    char plain [IDX_PATH_MAX_CHARS];
    snprintf (plain, sizeof plain, "%s/%s-%s", dir, split, name);
    if (access (plain, F_OK) == 0)
        memcpy (path, plain, strlen (plain) + 1);
    return 0;
}

//  The image and label paths of a split; -1 with an error.
static int
s_split_paths (const char *dir, const char *split, char *images_path, char *labels_path,
               size_t size)
{
    if (!dir || !split)
        return za_error ("dataset: a directory and a split are required");
    if (strcmp (split, "train") != 0 && strcmp (split, "t10k") != 0)
        return za_error ("unknown split '%s' for '%s' (expected 'train' or 't10k')", split,
                         dir);
    if (s_dataset_path (images_path, size, dir, split, "images-idx3-ubyte")
    ||  s_dataset_path (labels_path, size, dir, split, "labels-idx1-ubyte"))
        return -1;
    return 0;
}

za_dataset_t *
za_idx_load_dir (const char *dir, const char *split)
{
    char images_path [IDX_PATH_MAX_CHARS];
    char labels_path [IDX_PATH_MAX_CHARS];
    if (s_split_paths (dir, split, images_path, labels_path, sizeof images_path))
        return NULL;
    return za_idx_load (images_path, labels_path);
}

//  Reads the labels of a split whole and the header of its images; checks
//  that they agree. On success labels->data is the caller's to free and the
//  image file is open at its first pixel in *gz_p (NULL: not wanted).
static int
s_split_open (const char *images_path, const char *labels_path, s_idx_t *images,
              uint64_t *image_bytes, s_idx_t *labels, gzFile *gz_p)
{
    memset (images, 0, sizeof *images);
    gzFile gz = s_idx_open (images_path);
    if (!gz || s_idx_read_header (gz, images_path, &s_idx_images, images, image_bytes)) {
        if (gz)
            gzclose (gz);
        return -1;
    }
    if (s_idx_read (labels_path, &s_idx_labels, labels)) {
        gzclose (gz);
        return -1;
    }
    if (images->dims [0] != labels->dims [0]) {
        za_error ("'%s' holds %u labels but '%s' holds %u images", labels_path,
                  labels->dims [0], images_path, images->dims [0]);
        gzclose (gz);
        free (labels->data);
        return -1;
    }
    if (gz_p)
        *gz_p = gz;
    else
        gzclose (gz);
    return 0;
}

static int
s_max_label (const s_idx_t *labels)
{
    int max_label = 0;
    for (size_t i = 0; i < labels->size; i++)
        if (labels->data [i] > max_label)
            max_label = labels->data [i];
    return max_label;
}

int
za_idx_info_dir (const char *dir, const char *split, za_dataset_info_t *info)
{
    memset (info, 0, sizeof *info);
    char images_path [IDX_PATH_MAX_CHARS];
    char labels_path [IDX_PATH_MAX_CHARS];
    s_idx_t images, labels;
    uint64_t image_bytes;
    if (s_split_paths (dir, split, images_path, labels_path, sizeof images_path)
    ||  s_split_open (images_path, labels_path, &images, &image_bytes, &labels, NULL))
        return -1;
    info->count = images.dims [0];
    info->height = (int) images.dims [1];
    info->width = (int) images.dims [2];
    info->channels = 1;
    info->n_classes = s_max_label (&labels) + 1;
    free (labels.data);
    return 0;
}

za_dataset_t *
za_idx_load_dir_shard (const char *dir, const char *split, int num_shards,
                           int shard_index)
{
    if (num_shards < 1 || shard_index < 0 || shard_index >= num_shards) {
        za_error ("dataset: shard %d of %d does not exist", shard_index, num_shards);
        return NULL;
    }
    char images_path [IDX_PATH_MAX_CHARS];
    char labels_path [IDX_PATH_MAX_CHARS];
    s_idx_t images, labels;
    uint64_t image_bytes;
    gzFile gz = NULL;
    if (s_split_paths (dir, split, images_path, labels_path, sizeof images_path)
    ||  s_split_open (images_path, labels_path, &images, &image_bytes, &labels, &gz))
        return NULL;
    int64_t total = images.dims [0];
    int64_t count = total > shard_index? (total - shard_index + num_shards - 1) / num_shards: 0;
    za_dataset_t *self = za_dataset_new (count, (int) images.dims [1], (int) images.dims [2],
                                          1, 1);
    if (self && s_idx_read_shard (gz, images_path, &images, image_bytes,
                                  (size_t) self->feature_size, num_shards, shard_index,
                                  self->pixels))
        za_dataset_destroy (&self);
    gzclose (gz);
    if (self) {
        for (int64_t i = 0; i < count; i++)
            self->labels [i] = labels.data [shard_index + i * num_shards];
        //  The classes of the whole split: a shard may miss the largest label.
        self->n_classes = s_max_label (&labels) + 1;
    }
    free (labels.data);
    return self;
}
