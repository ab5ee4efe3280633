/*  za_dataset.c: loads IDX files (gzipped or plain) and caller arrays into a
    dataset, and streams it shard -> shuffle -> repeat -> batch -> prefetch.  */
#include "za/za_dataset.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_DTYPE_UINT8 0x08u
#define IDX_MAX_DIMS 3
#define IDX_PIXEL_MAX 255.0f
//  The payload buffer grows as bytes arrive, so a header declaring gigabytes
//  costs nothing until the bytes are really there.
#define IDX_READ_START_BYTES (1u << 20)
//  gzread takes an unsigned int length; stay well under it.
#define IDX_READ_CHUNK_BYTES (1u << 30)
#define DATASET_PATH_MAX_CHARS 4096

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
//  Datasets

//  Allocates an empty dataset of the given shape, its examples as floats, or
//  as bytes when `as_bytes`; NULL (with an error) when the sizes overflow or
//  memory runs out.
static za_dataset_t *
s_dataset_alloc (int64_t count, int height, int width, int channels, int as_bytes)
{
    int64_t feature_size, features;
    if (__builtin_mul_overflow ((int64_t) height, (int64_t) width, &feature_size)
    ||  __builtin_mul_overflow (feature_size, (int64_t) channels, &feature_size)
    ||  __builtin_mul_overflow (feature_size, count, &features)
    ||  features > (int64_t) (PTRDIFF_MAX / sizeof (float))) {
        za_error ("dataset of %lld examples of %dx%dx%d is too large",
                  (long long) count, height, width, channels);
        return NULL;
    }
    za_dataset_t *self = calloc (1, sizeof *self);
    if (!self) {
        za_error ("out of memory allocating a dataset");
        return NULL;
    }
    self->count = count;
    self->height = height;
    self->width = width;
    self->channels = channels;
    self->feature_size = feature_size;
    if (as_bytes)
        self->pixels = za_alloc ((size_t) (features > 0? features: 1));
    else
        self->features = za_alloc ((size_t) features * sizeof (float));
    self->labels = za_alloc ((size_t) (count > 0? count: 1) * sizeof (int32_t));
    if ((!self->features && !self->pixels) || !self->labels) {
        za_dataset_destroy (&self);
        return NULL;
    }
    return self;
}

static void
s_dataset_count_classes (za_dataset_t *self)
{
    int32_t max_label = 0;
    for (int64_t i = 0; i < self->count; i++)
        if (self->labels [i] > max_label)
            max_label = self->labels [i];
    self->n_classes = max_label + 1;
}

za_dataset_t *
za_dataset_load_idx (const char *images_path, const char *labels_path)
{
    if (!images_path || !labels_path) {
        za_error ("za_dataset_load_idx: images_path and labels_path are required");
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
        self = s_dataset_alloc (images.dims [0], (int) images.dims [1],
                                (int) images.dims [2], 1, 0);
    if (self) {
        for (size_t i = 0; i < images.size; i++)
            self->features [i] = (float) images.data [i] / IDX_PIXEL_MAX;
        for (int64_t i = 0; i < self->count; i++)
            self->labels [i] = labels.data [i];
        s_dataset_count_classes (self);
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
    char plain [DATASET_PATH_MAX_CHARS];
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
za_dataset_load_dir (const char *dir, const char *split)
{
    char images_path [DATASET_PATH_MAX_CHARS];
    char labels_path [DATASET_PATH_MAX_CHARS];
    if (s_split_paths (dir, split, images_path, labels_path, sizeof images_path))
        return NULL;
    return za_dataset_load_idx (images_path, labels_path);
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
za_dataset_info_dir (const char *dir, const char *split, za_dataset_info_t *info)
{
    memset (info, 0, sizeof *info);
    char images_path [DATASET_PATH_MAX_CHARS];
    char labels_path [DATASET_PATH_MAX_CHARS];
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
za_dataset_load_dir_shard (const char *dir, const char *split, int num_shards,
                           int shard_index)
{
    if (num_shards < 1 || shard_index < 0 || shard_index >= num_shards) {
        za_error ("dataset: shard %d of %d does not exist", shard_index, num_shards);
        return NULL;
    }
    char images_path [DATASET_PATH_MAX_CHARS];
    char labels_path [DATASET_PATH_MAX_CHARS];
    s_idx_t images, labels;
    uint64_t image_bytes;
    gzFile gz = NULL;
    if (s_split_paths (dir, split, images_path, labels_path, sizeof images_path)
    ||  s_split_open (images_path, labels_path, &images, &image_bytes, &labels, &gz))
        return NULL;
    int64_t total = images.dims [0];
    int64_t count = total > shard_index? (total - shard_index + num_shards - 1) / num_shards: 0;
    za_dataset_t *self = s_dataset_alloc (count, (int) images.dims [1], (int) images.dims [2],
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

za_dataset_t *
za_dataset_from_arrays (const float *features, const int32_t *labels,
                        int64_t count, int height, int width, int channels)
{
    if (!features || !labels) {
        za_error ("za_dataset_from_arrays: features and labels are required");
        return NULL;
    }
    if (count <= 0 || height <= 0 || width <= 0 || channels <= 0) {
        za_error ("za_dataset_from_arrays: count %lld and shape %dx%dx%d must be > 0",
                  (long long) count, height, width, channels);
        return NULL;
    }
    for (int64_t i = 0; i < count; i++)
        if (labels [i] < 0) {
            za_error ("za_dataset_from_arrays: label %lld is %d (must be >= 0)",
                      (long long) i, labels [i]);
            return NULL;
        }
    za_dataset_t *self = s_dataset_alloc (count, height, width, channels, 0);
    if (!self)
        return NULL;
    memcpy (self->features, features,
            (size_t) (count * self->feature_size) * sizeof (float));
    memcpy (self->labels, labels, (size_t) count * sizeof (int32_t));
    s_dataset_count_classes (self);
    return self;
}

void
za_dataset_destroy (za_dataset_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_dataset_t *self = *self_p;
    za_free (self->features);
    za_free (self->pixels);
    za_free (self->labels);
    free (self);
    *self_p = NULL;
}


//  --------------------------------------------------------------------------
//  Input pipeline

//  One batch's storage.
typedef struct {
    float *features;            //  [batch_size, feature_size], 64-byte aligned
    int32_t *labels;            //  [batch_size]
    int size;
} s_slot_t;

struct _za_input_t {
    const za_dataset_t *dataset;
    za_input_config_t config;
    int64_t shard_count;        //  examples per epoch in this shard

    //  The example stream; touched only by the producer (the prefetch thread,
    //  or the caller when prefetch is 0).
    za_rng_t rng;
    int64_t *shuffle;           //  the shuffle buffer (1 slot when not shuffling)
    int64_t shuffle_capacity;
    int64_t shuffle_fill;
    int64_t epoch_next;         //  next position in this epoch's shard
    int epochs_done;
    int in_epoch;
    int stream_ended;

    //  The batch ring: slots [head .. head + count) are ready; the consumer holds
    //  slots [head] between two calls of za_input_next while `held` is 1.
    s_slot_t *slots;
    int n_slots;
    int head, count;
    int held;
    int producer_done;
    int stop;
    int thread_started;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t ready;       //  a slot was filled, or the stream ended
    pthread_cond_t space;       //  a slot was freed, or stop was asked
};

#define SEED_STEP_MIX 0x9e3779b97f4a7c15ULL     //  2^64 / golden ratio

uint64_t
za_input_seed_at (uint64_t seed, int64_t step)
{
    return seed + SEED_STEP_MIX * (uint64_t) step;
}

za_input_config_t
za_input_config_default (void)
{
    za_input_config_t config = {
        .num_shards = 1,
        .shard_index = 0,
        .shuffle_buffer = 0,
        .seed = 0,
        .epochs = 1,
        .batch_size = 32,
        .drop_remainder = 0,
        .prefetch = 2,
        .replicas = 1,
        .replica = 0,
    };
    return config;
}

//  The next example of this epoch's shard, in order; 0 at the end of the epoch.
static int
s_input_shard_next (za_input_t *self, int64_t *index)
{
    if (self->epoch_next >= self->shard_count)
        return 0;
    *index = self->config.shard_index + self->epoch_next * self->config.num_shards;
    self->epoch_next++;
    return 1;
}

//  The next example index of the whole stream (shard, shuffle, repeat); 0 at
//  its end. The shuffle buffer is filled at the start of each epoch, hands out a
//  random slot and refills it from the shard, and drains at the end of the epoch.
static int
s_input_example_next (za_input_t *self, int64_t *index)
{
    while (!self->stream_ended) {
        if (!self->in_epoch) {
            if (self->config.epochs != -1 && self->epochs_done >= self->config.epochs) {
                self->stream_ended = 1;
                break;
            }
            if (self->shard_count == 0) {
                //  An empty shard repeated forever is still empty.
                self->stream_ended = 1;
                break;
            }
            self->epoch_next = 0;
            self->shuffle_fill = 0;
            while (self->shuffle_fill < self->shuffle_capacity
            &&     s_input_shard_next (self, &self->shuffle [self->shuffle_fill]))
                self->shuffle_fill++;
            self->in_epoch = 1;
        }
        if (self->shuffle_fill > 0) {
            int64_t slot = self->shuffle_fill > 1
                         ? (int64_t) za_rng_below (&self->rng, (uint32_t) self->shuffle_fill)
                         : 0;
            *index = self->shuffle [slot];
            if (!s_input_shard_next (self, &self->shuffle [slot]))
                self->shuffle [slot] = self->shuffle [--self->shuffle_fill];
            return 1;
        }
        self->in_epoch = 0;
        self->epochs_done++;
    }
    return 0;
}

//  Fills a slot with the next batch: the next global batch's slice when the
//  batches are split across replicas. Returns its size, 0 at the end of the
//  stream (including a final partial batch dropped by drop_remainder).
static int
s_input_produce (za_input_t *self, s_slot_t *slot)
{
    const za_dataset_t *dataset = self->dataset;
    size_t row = (size_t) dataset->feature_size;
    int batch = self->config.batch_size, replicas = self->config.replicas;
    int first = batch * self->config.replica;
    int size = 0, drawn = 0;
    int64_t index;
    while (drawn < batch * replicas && s_input_example_next (self, &index)) {
        int keep = drawn >= first && drawn < first + batch;
        drawn++;
        if (!keep)
            continue;
        float *out = slot->features + (size_t) size * row;
        if (dataset->features)
            memcpy (out, dataset->features + (size_t) index * row, row * sizeof (float));
        else {
            //  The same value the float loader stores, made here per batch.
            const uint8_t *in = dataset->pixels + (size_t) index * row;
            for (size_t k = 0; k < row; k++)
                out [k] = (float) in [k] / IDX_PIXEL_MAX;
        }
        slot->labels [size] = dataset->labels [index];
        size++;
    }
    if (drawn < batch * replicas && self->config.drop_remainder)
        size = 0;
    slot->size = size;
    return size;
}

static void *
s_input_producer (void *args)
{
    za_input_t *self = (za_input_t *) args;
    pthread_mutex_lock (&self->mutex);
    while (!self->stop) {
        if (self->count == self->n_slots) {
            pthread_cond_wait (&self->space, &self->mutex);
            continue;
        }
        //  Only this thread adds slots, and the consumer reads only ready ones,
        //  so the slot after the ready ones is ours to fill without the lock.
        s_slot_t *slot = &self->slots [(self->head + self->count) % self->n_slots];
        pthread_mutex_unlock (&self->mutex);
        int size = s_input_produce (self, slot);
        pthread_mutex_lock (&self->mutex);
        if (size == 0) {
            self->producer_done = 1;
            pthread_cond_broadcast (&self->ready);
            break;
        }
        self->count++;
        pthread_cond_broadcast (&self->ready);
    }
    pthread_mutex_unlock (&self->mutex);
    return NULL;
}

za_input_t *
za_input_new (const za_dataset_t *dataset, const za_input_config_t *config)
{
    if (!dataset || !config) {
        za_error ("za_input_new: dataset and config are required");
        return NULL;
    }
    if (dataset->count <= 0 || dataset->feature_size <= 0
    ||  (!dataset->features && !dataset->pixels) || !dataset->labels) {
        za_error ("za_input_new: dataset is empty or malformed");
        return NULL;
    }
    const za_input_config_t *c = config;
    if (c->batch_size <= 0) {
        za_error ("za_input_new: batch_size is %d (must be > 0)", c->batch_size);
        return NULL;
    }
    if (c->num_shards <= 0 || c->shard_index < 0 || c->shard_index >= c->num_shards) {
        za_error ("za_input_new: shard_index %d out of range for %d shards",
                  c->shard_index, c->num_shards);
        return NULL;
    }
    int replicas = c->replicas > 0? c->replicas: 1;
    if (c->replicas < 0 || c->replica < 0 || c->replica >= replicas) {
        za_error ("za_input_new: replica %d out of range for %d replicas", c->replica,
                  c->replicas);
        return NULL;
    }
    if ((int64_t) c->batch_size * replicas > INT_MAX) {
        za_error ("za_input_new: a global batch of %d x %d examples is too large",
                  c->batch_size, replicas);
        return NULL;
    }
    if (c->epochs == 0 || c->epochs < -1) {
        za_error ("za_input_new: epochs is %d (must be > 0, or -1 for forever)",
                  c->epochs);
        return NULL;
    }
    if (c->shuffle_buffer < 0 || c->prefetch < 0) {
        za_error ("za_input_new: shuffle_buffer %d and prefetch %d must be >= 0",
                  c->shuffle_buffer, c->prefetch);
        return NULL;
    }
    if (c->prefetch >= INT_MAX) {
        za_error ("za_input_new: prefetch %d is too large", c->prefetch);
        return NULL;
    }
    size_t batch_floats;
    if (__builtin_mul_overflow ((size_t) c->batch_size, (size_t) dataset->feature_size,
                                &batch_floats)
    ||  batch_floats > PTRDIFF_MAX / sizeof (float)) {
        za_error ("za_input_new: batch of %d examples of %lld features is too large",
                  c->batch_size, (long long) dataset->feature_size);
        return NULL;
    }

    za_input_t *self = calloc (1, sizeof *self);
    if (!self) {
        za_error ("za_input_new: out of memory");
        return NULL;
    }
    self->dataset = dataset;
    self->config = *c;
    self->config.drop_remainder = c->drop_remainder != 0;
    self->config.replicas = replicas;
    self->shard_count = dataset->count > c->shard_index
                      ? (dataset->count - c->shard_index + c->num_shards - 1) / c->num_shards
                      : 0;
    za_rng_seed (&self->rng, c->seed);
    //  The buffer never holds more than one epoch of the shard.
    self->shuffle_capacity = c->shuffle_buffer < self->shard_count
                           ? c->shuffle_buffer: self->shard_count;
    if (self->shuffle_capacity < 1)
        self->shuffle_capacity = 1;
    self->shuffle = malloc ((size_t) self->shuffle_capacity * sizeof (int64_t));
    self->n_slots = c->prefetch > 0? c->prefetch + 1: 1;
    self->slots = calloc ((size_t) self->n_slots, sizeof (s_slot_t));
    if (!self->shuffle || !self->slots) {
        za_error ("za_input_new: out of memory");
        za_input_destroy (&self);
        return NULL;
    }
    for (int i = 0; i < self->n_slots; i++) {
        self->slots [i].features = za_alloc (batch_floats * sizeof (float));
        self->slots [i].labels = za_alloc ((size_t) c->batch_size * sizeof (int32_t));
        if (!self->slots [i].features || !self->slots [i].labels) {
            za_input_destroy (&self);
            return NULL;
        }
    }
    if (c->prefetch > 0) {
        pthread_mutex_init (&self->mutex, NULL);
        pthread_cond_init (&self->ready, NULL);
        pthread_cond_init (&self->space, NULL);
        int rc = pthread_create (&self->thread, NULL, s_input_producer, self);
        if (rc != 0) {
            za_error ("za_input_new: cannot start the prefetch thread: %s", strerror (rc));
            pthread_cond_destroy (&self->space);
            pthread_cond_destroy (&self->ready);
            pthread_mutex_destroy (&self->mutex);
            za_input_destroy (&self);
            return NULL;
        }
        self->thread_started = 1;
    }
    return self;
}

int
za_input_next (za_input_t *self, za_batch_t *batch)
{
    if (!self || !batch) {
        za_error ("za_input_next: iterator and batch are required");
        return 0;
    }
    memset (batch, 0, sizeof *batch);
    s_slot_t *slot = NULL;
    if (!self->thread_started) {
        if (!self->producer_done && s_input_produce (self, &self->slots [0]) > 0)
            slot = &self->slots [0];
        else
            self->producer_done = 1;
    }
    else {
        pthread_mutex_lock (&self->mutex);
        if (self->held) {
            //  The caller is done with the batch it held: give its slot back.
            self->head = (self->head + 1) % self->n_slots;
            self->count--;
            self->held = 0;
            pthread_cond_signal (&self->space);
        }
        while (self->count == 0 && !self->producer_done)
            pthread_cond_wait (&self->ready, &self->mutex);
        if (self->count > 0) {
            slot = &self->slots [self->head];
            self->held = 1;
        }
        pthread_mutex_unlock (&self->mutex);
    }
    if (!slot)
        return 0;
    batch->features = slot->features;
    batch->labels = slot->labels;
    batch->size = slot->size;
    batch->feature_size = self->dataset->feature_size;
    return 1;
}

int64_t
za_input_shard_count (const za_input_t *self)
{
    return self? self->shard_count: 0;
}

void
za_input_destroy (za_input_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_input_t *self = *self_p;
    if (self->thread_started) {
        pthread_mutex_lock (&self->mutex);
        self->stop = 1;
        pthread_cond_broadcast (&self->space);
        pthread_mutex_unlock (&self->mutex);
        pthread_join (self->thread, NULL);
        pthread_cond_destroy (&self->space);
        pthread_cond_destroy (&self->ready);
        pthread_mutex_destroy (&self->mutex);
    }
    if (self->slots)
        for (int i = 0; i < self->n_slots; i++) {
            za_free (self->slots [i].features);
            za_free (self->slots [i].labels);
        }
    free (self->slots);
    free (self->shuffle);
    free (self);
    *self_p = NULL;
}
