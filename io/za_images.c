/*  za_images.c: images as a data set: its source (one of za_source.h's rows:
    IDX files, TFRecord files, a folder of class folders, a pattern of
    images) listed into paths, offsets and labels (no image decoded), the
    split and the shard kept, and the loader that decodes an example when it
    is needed; or, for a row that reads its files whole, what that row
    reads.                                                                  */
#define _GNU_SOURCE                     //  pread
#include "za/za_images.h"
#include "za/za_cache.h"
#include "za_listing.h"
#include "za_source.h"
#include "za/za_tfrecord.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  ZA_IMAGES_TRACE=PREFIX: every process writes the images it reads, one a
//  line (FILE, or FILE@OFFSET for a record), to PREFIX.PID.
#define TRACE_ENV "ZA_IMAGES_TRACE"
#define MESSAGE_MAX 1024

//  The sources, asked in this order which takes a spec.
static const za_source_t *s_sources [] = {
    &za_source_idx, &za_source_tfrecord, &za_source_folder, &za_source_pattern,
};

//  What the loader decodes from.
typedef struct {
    za_listing_t list;
    za_image_spec_t image;
    const char *image_key;
    int spill;                          //  GZIP files' records, uncompressed
                                        //  (an unlinked temp file), or -1
    uint8_t *bad;                       //  per example: 1 once it failed to decode
    int64_t bad_count;
    FILE *trace;                        //  ZA_IMAGES_TRACE's: what is opened, or NULL
} s_source_t;

//  A loading thread's own: a decoder and a record's buffer.
typedef struct {
    za_image_decoder_t *decoder;
    uint8_t *record;
    size_t capacity;
    char error [MESSAGE_MAX];
} s_scratch_t;

// ---------------------------------------------------------------------------
//  Classes, as the sources share them

int
za_source_classes_given (const char *text, char ***names)
{
    char *copy = strdup (text);
    char **list = calloc (ZA_IMAGES_MAX_CLASSES + 1, sizeof *list);
    int count = 0;
    *names = list;
    if (!copy || !list) {
        free (copy);
        return za_error ("out of memory");
    }
    for (char *save = NULL, *name = strtok_r (copy, ",", &save); name && count >= 0;
         name = strtok_r (NULL, ",", &save))
        if (count == ZA_IMAGES_MAX_CLASSES)
            count = -2;
        else
        if (!(list [count++] = strdup (name)))
            count = -1;
    free (copy);
    if (count >= 0)
        return count;
    for (int c = 0; list [c]; c++)
        free (list [c]);
    free (list);
    *names = NULL;
    if (count == -2)
        return za_error ("--class-names: more than %d classes", ZA_IMAGES_MAX_CLASSES);
    return za_error ("out of memory");
}


int
za_source_join_names (char **names, int count, char **joined)
{
    size_t size = 1;
    for (int c = 0; c < count; c++) {
        if (strchr (names [c], ','))
            return za_error ("the class folder '%s' has a comma in its name: class names "
                             "are listed with commas (--class-names, input.json); rename "
                             "the folder", names [c]);
        size += strlen (names [c]) + 1;
    }
    if (!joined || count <= 0)
        return 0;
    if (!(*joined = malloc (size)))
        return za_error ("out of memory");
    char *at = *joined;
    for (int c = 0; c < count; c++)
        at += sprintf (at, "%s%s", c? ",": "", names [c]);
    return 0;
}

// ---------------------------------------------------------------------------
//  The source, its split and its shard

//  The row that takes config->source, and the pattern it lists.
static const za_source_t *
s_source_of (const za_images_config_t *config, const char **pattern)
{
    size_t count = sizeof s_sources / sizeof s_sources [0];
    for (size_t s = 0; s < count - 1; s++)
        if (s_sources [s]->takes (config, pattern))
            return s_sources [s];
    s_sources [count - 1]->takes (config, pattern);
    return s_sources [count - 1];
}

//  Keras's split (shuffled with the seed, training the first part), then
//  the shard's examples (i mod shards). 0, or -1 when the split leaves
//  either part empty.
static int
s_select (const za_images_config_t *config, za_listing_t *list, int shards)
{
    int64_t keep_from = 0, keep_to = list->count;
    if (config->validation_split > 0 && config->subset != ZA_SUBSET_ALL) {
        za_rng_t rng;
        za_rng_seed (&rng, config->seed);
        for (int64_t i = list->count - 1; i > 0; i--) {
            int64_t j = (int64_t) za_rng_below (&rng, (uint32_t) (i + 1));
            za_listing_item_t item = list->items [i];
            list->items [i] = list->items [j];
            list->items [j] = item;
        }
        int64_t validation = (int64_t) (config->validation_split * (double) list->count);
        if (validation == 0 || validation == list->count)
            return za_error ("--validation-split %g of %lld examples leaves the %s empty: "
                             "give a %s split, or more examples", config->validation_split,
                             (long long) list->count, validation? "training": "validation",
                             validation? "smaller": "larger");
        if (config->subset == ZA_SUBSET_TRAINING)
            keep_to = list->count - validation;
        else
            keep_from = list->count - validation;
    }
    int64_t kept = 0;
    for (int64_t i = keep_from; i < keep_to; i++)
        if (shards <= 1 || (i - keep_from) % shards == config->shard_index)
            list->items [kept++] = list->items [i];
    list->count = kept;
    return 0;
}

//  Lists config's examples (of its subset and shard); with `warn`, says
//  what is left out and why; GZIP records go to `spill` (-1: nowhere).
static int
s_list (const za_images_config_t *config, za_listing_t *list, int *n_classes, int warn,
        int spill, char **joined)
{
    memset (list, 0, sizeof *list);
    if (!(config->validation_split >= 0 && config->validation_split < 1))
        return za_error ("validation split %g: give 0 <= F < 1", config->validation_split);
    if (config->label_base != 0 && config->label_base != 1)
        return za_error ("label base %d: give 0, or 1 for labels that start at 1",
                         config->label_base);
    const char *pattern;
    const za_source_t *source = s_source_of (config, &pattern);
    if (!source->list)
        return za_error ("%s: %s files are read whole, not listed", pattern, source->name);
    za_source_ask_t ask = {.warn = warn, .spill = spill, .joined = joined,
                           .shards = config->num_shards > 0? config->num_shards: 1};
    if (source->list (config, pattern, list, n_classes, &ask)) {
        za_listing_free (list);
        return -1;
    }
    if (s_select (config, list, ask.shards)) {
        za_listing_free (list);
        return -1;
    }
    return 0;
}


int
za_images_info (const za_images_config_t *config, za_dataset_info_t *info)
{
    const char *pattern;
    const za_source_t *source = s_source_of (config, &pattern);
    if (source->info)
        return source->info (config, pattern, info);
    za_listing_t list;
    int classes;
    if (s_list (config, &list, &classes, 0, -1, NULL))
        return -1;
    info->count = list.count;
    info->height = config->image.height;
    info->width = config->image.width;
    info->channels = config->image.channels;
    info->n_classes = classes;
    za_listing_free (&list);
    return 0;
}

// ---------------------------------------------------------------------------
//  The loader

//  Reads the TFRecord record of item into the scratch's buffer and finds
//  its image's bytes. 0, or -1 with why in scratch->error.
static int
s_read_record (const s_source_t *self, const za_listing_item_t *item, s_scratch_t *scratch,
               const uint8_t **image, size_t *image_size)
{
    const char *path = self->list.text + item->at;
    int fd = item->spill_at >= 0? self->spill: open (path, O_RDONLY | O_CLOEXEC);
    uint64_t at = (uint64_t) (item->spill_at >= 0? item->spill_at: item->offset);
    size_t size = 0;
    const char *why = fd < 0? strerror (errno)
                    : za_tfrecord_read_at (fd, at, &scratch->record, &scratch->capacity, &size);
    za_feature_t feature;
    if (!why && (za_example_feature (scratch->record, size, self->image_key, &feature) != 1
             ||  za_feature_bytes (&feature, image, image_size)))
        why = "no image bytes under the image key (the file changed)";
    if (fd >= 0 && item->spill_at < 0)
        close (fd);
    if (why)
        snprintf (scratch->error, sizeof scratch->error, "%s: the record at offset %lld: %s",
                  path, (long long) item->offset, why);
    return why? -1: 0;
}

static int
s_load (void *arg, int64_t index, void *scratch_arg, uint8_t *out)
{
    s_source_t *self = (s_source_t *) arg;
    s_scratch_t *scratch = (s_scratch_t *) scratch_arg;
    if (__atomic_load_n (&self->bad [index], __ATOMIC_RELAXED))
        return -1;
    const za_listing_item_t *item = &self->list.items [index];
    const char *path = self->list.text + item->at;
    const char *why = scratch->error;
    const uint8_t *image;
    size_t image_size;
    int rc;
    if (self->trace && item->offset < 0)
        fprintf (self->trace, "%s\n", path);
    else
    if (self->trace)
        fprintf (self->trace, "%s@%lld\n", path, (long long) item->offset);
    if (item->offset < 0) {
        rc = za_image_load (scratch->decoder, path, &self->image, out);
        why = za_image_error (scratch->decoder);
    }
    else
    if (!(rc = s_read_record (self, item, scratch, &image, &image_size))
    &&  (rc = za_image_decode (scratch->decoder, image, image_size, &self->image, out)))
        snprintf (scratch->error, sizeof scratch->error, "%s: the record at offset %lld: %s",
                  path, (long long) item->offset, za_image_error (scratch->decoder));
    if (rc == 0)
        return 0;
    if (__atomic_exchange_n (&self->bad [index], 1, __ATOMIC_RELAXED) == 0) {
        int64_t bad = __atomic_add_fetch (&self->bad_count, 1, __ATOMIC_RELAXED);
        za_info ("warning: skipping an image that cannot be decoded (%lld so far): %s",
                 (long long) bad, why);
    }
    return -1;
}

static void
s_scratch_destroy (void **scratch_p)
{
    s_scratch_t *self = (s_scratch_t *) *scratch_p;
    if (!self)
        return;
    za_image_decoder_destroy (&self->decoder);
    free (self->record);
    free (self);
    *scratch_p = NULL;
}

static void *
s_scratch_new (void *arg)
{
    (void) arg;
    s_scratch_t *self = calloc (1, sizeof *self);
    if (self && !(self->decoder = za_image_decoder_new ())) {
        void *gone = self;
        s_scratch_destroy (&gone);
        return NULL;
    }
    return self;
}

static void
s_source_destroy (void **source_p)
{
    s_source_t *self = (s_source_t *) *source_p;
    if (!self)
        return;
    za_listing_free (&self->list);
    if (self->spill >= 0)
        close (self->spill);
    if (self->trace)
        fclose (self->trace);
    free (self->bad);
    free (self);
    *source_p = NULL;
}

static int64_t
s_bad (void *arg)
{
    return __atomic_load_n (&((s_source_t *) arg)->bad_count, __ATOMIC_RELAXED);
}

//  FNV-1a over text (and a separator), from hash.
#define FNV_BASIS 14695981039346656037ull

static uint64_t
s_hash_text (uint64_t hash, const char *text)
{
    for (const char *p = text? text: "(null)"; *p; p++)
        hash = (hash ^ (uint8_t) *p) * 1099511628211ull;
    return (hash ^ 0xff) * 1099511628211ull;
}

//  FNV-1a over the path and the offset: the example's key; its file's size
//  and time: its version.
static int
s_identity (void *arg, int64_t index, uint64_t *key, uint64_t *version)
{
    const s_source_t *self = (const s_source_t *) arg;
    const za_listing_item_t *item = &self->list.items [index];
    const char *path = self->list.text + item->at;
    uint64_t hash = (s_hash_text (FNV_BASIS, path) ^ (uint64_t) item->offset)
                  * 1099511628211ull;
    struct stat st;
    if (stat (path, &st))
        return -1;
    *key = hash;
    *version = ((uint64_t) st.st_mtim.tv_sec * 1000000000ull + (uint64_t) st.st_mtim.tv_nsec)
             ^ ((uint64_t) st.st_size << 1);
    return 0;
}

static const za_dataset_loader_t s_loader = {
    .load = s_load,
    .scratch_new = s_scratch_new,
    .scratch_destroy = s_scratch_destroy,
    .destroy = s_source_destroy,
    .bad = s_bad,
    .identity = s_identity,
};

//  An unlinked file in $TMPDIR (or /tmp) for GZIP files' records, or -1.
static int
s_spill_new (void)
{
    const char *tmp = getenv ("TMPDIR");
    int fd = open (tmp && *tmp? tmp: "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        za_error ("cannot make a temp file for GZIP records in %s: %s",
                  tmp && *tmp? tmp: "/tmp", strerror (errno));
    return fd;
}

uint64_t
za_images_config_hash (const za_images_config_t *c)
{
    char numbers [256];
    snprintf (numbers, sizeof numbers, "%d %d %d %d %d %.17g %d %llu %d %d %d %d",
              c->image.height, c->image.width, c->image.channels, (int) c->image.resize,
              c->image.crop_to_aspect_ratio, c->validation_split, (int) c->subset,
              (unsigned long long) c->seed, c->num_shards, c->shard_index, c->label_base,
              c->unlabeled);
    uint64_t hash = s_hash_text (FNV_BASIS, c->source);
    hash = s_hash_text (hash, c->class_names);
    hash = s_hash_text (hash, c->image_key);
    hash = s_hash_text (hash, c->label_key);
    return s_hash_text (hash, numbers);
}

char *
za_images_class_names (const za_images_config_t *config)
{
    const char *pattern;
    if (!s_source_of (config, &pattern)->list)
        return NULL;                    //  IDX files name no classes
    za_listing_t list;
    int classes;
    char *joined = NULL;
    if (s_list (config, &list, &classes, 0, -1, &joined))
        return NULL;
    za_listing_free (&list);
    return joined;
}

za_dataset_t *
za_images_load (const za_images_config_t *config)
{
    const char *pattern;
    const za_source_t *row = s_source_of (config, &pattern);
    if (row->load)
        return row->load (config, pattern);
    s_source_t *source = calloc (1, sizeof *source);
    int classes;
    if (!source) {
        za_error ("out of memory");
        return NULL;
    }
    source->spill = -1;
    if (row->spills && (source->spill = s_spill_new ()) < 0) {
        free (source);
        return NULL;
    }
    void *gone = source;
    if (s_list (config, &source->list, &classes, 1, source->spill, NULL)) {
        s_source_destroy (&gone);
        return NULL;
    }
    const char *trace = getenv (TRACE_ENV);
    if (trace && *trace) {
        char path [ZA_LISTING_PATH_MAX];
        snprintf (path, sizeof path, "%s.%d", trace, (int) getpid ());
        if ((source->trace = fopen (path, "a")))
            setvbuf (source->trace, NULL, _IOLBF, 0);
        else
            za_info ("warning: %s=%s: cannot write %s: %s", TRACE_ENV, trace, path,
                     strerror (errno));
    }
    source->image = config->image;
    source->image_key = config->image_key? config->image_key: ZA_IMAGES_IMAGE_KEY;
    source->bad = calloc ((size_t) source->list.count + 1, 1);
    if (!source->bad) {
        s_source_destroy (&gone);
        za_error ("out of memory");
        return NULL;
    }
    int64_t count = source->list.count;
    const za_listing_item_t *items = source->list.items;
    za_dataset_t *dataset = za_dataset_new_loaded (count, config->image.height,
                                                   config->image.width,
                                                   config->image.channels, &s_loader, source);
    if (!dataset)
        return NULL;
    for (int64_t i = 0; i < count; i++)
        dataset->labels [i] = items [i].label;
    dataset->n_classes = classes;
    return dataset;
}

const char *
za_images_path (const za_dataset_t *dataset, int64_t index)
{
    const s_source_t *source = za_cache_source (dataset, &s_loader);
    if (!source || index < 0 || index >= dataset->count)
        return NULL;
    return za_listing_path (&source->list, index);
}

int64_t
za_images_offset (const za_dataset_t *dataset, int64_t index)
{
    const s_source_t *source = za_cache_source (dataset, &s_loader);
    if (!source || index < 0 || index >= dataset->count)
        return -1;
    return source->list.items [index].offset;
}

int64_t
za_images_bad (const za_dataset_t *dataset)
{
    void *source = za_cache_source (dataset, &s_loader);
    return source? s_bad (source): 0;
}
