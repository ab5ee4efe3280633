/*  za_images.c: images as a data set: the source (a folder of class folders,
    a pattern of images, TFRecord files) listed into paths, offsets and
    labels (no image decoded), the split and the shard kept, and the loader
    that decodes an example when it is needed.                              */
#define _GNU_SOURCE                     //  pread
#include "za/za_images.h"
#include "za/za_cache.h"
#include "za_listing.h"
#include "za/za_tfrecord.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TFRECORD_PREFIX "tfrecord:"
//  ZA_IMAGES_TRACE=PREFIX: every process writes the images it reads, one a
//  line (FILE, or FILE@OFFSET for a record), to PREFIX.PID.
#define TRACE_ENV "ZA_IMAGES_TRACE"
#define MESSAGE_MAX 1024

typedef enum { SOURCE_FOLDER, SOURCE_PATTERN, SOURCE_TFRECORD } s_kind_t;

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
//  Classes

//  The class names given as "a,b,c": their count (names in *names), or -1.
static int
s_classes_given (const char *text, char ***names)
{
    char *copy = strdup (text);
    char **list = calloc (ZA_IMAGES_MAX_CLASSES + 1, sizeof *list);
    int count = 0;
    *names = list;
    if (!copy || !list) {
        free (copy);
        return za_error ("out of memory");
    }
    for (char *save = NULL, *name = strtok_r (copy, ",", &save); name;
         name = strtok_r (NULL, ",", &save))
        if (count < ZA_IMAGES_MAX_CLASSES && !(list [count++] = strdup (name)))
            count = -1;
    free (copy);
    return count < 0? za_error ("out of memory"): count;
}

//  A class name and its label, for looking names up.
typedef struct {
    const char *name;
    int32_t label;
} s_class_t;

static int
s_compare_classes (const void *a, const void *b)
{
    return strcmp (((const s_class_t *) a)->name, ((const s_class_t *) b)->name);
}

static int
s_compare_names (const void *a, const void *b)
{
    return strcmp (*(char *const *) a, *(char *const *) b);
}

//  "a,b,c" of names (malloc'd) into *joined, when joined is not NULL.
static void
s_join_names (char **names, int count, char **joined)
{
    if (!joined || count <= 0)
        return;
    size_t size = 1;
    for (int c = 0; c < count; c++)
        size += strlen (names [c]) + 1;
    if (!(*joined = malloc (size)))
        return;
    char *at = *joined;
    for (int c = 0; c < count; c++)
        at += sprintf (at, "%s%s", c? ",": "", names [c]);
}

// ---------------------------------------------------------------------------
//  Listing a folder of class folders

static int
s_list_folder (const za_images_config_t *config, za_listing_t *list, int *n_classes, int warn,
               char **joined)
{
    char **names;
    int classes = config->class_names? s_classes_given (config->class_names, &names)
                                     : za_listing_subfolders (config->source, &names);
    int rc = classes < 0? -1: 0;
    if (classes == 0)
        rc = za_error ("%s has no class folders: put each class's images in a folder of "
                       "its own (%s/CLASS/IMAGE.jpg)", config->source, config->source);
    char path [ZA_LISTING_PATH_MAX];
    for (int c = 0; c < classes && !rc; c++) {
        snprintf (path, sizeof path, "%s/%s", config->source, names [c]);
        int64_t before = list->count;
        struct stat st;
        if (stat (path, &st) || !S_ISDIR (st.st_mode))
            rc = za_error ("class '%s' has no folder %s", names [c], path);
        else
        if (!(rc = za_listing_walk (list, path, c)) && list->count == before && warn)
            za_info ("warning: class %d ('%s') has no images in %s: it keeps its label", c,
                     names [c], path);
    }
    s_join_names (names, classes, joined);
    za_listing_free_names (names, classes);
    if (!rc && list->count == 0)
        rc = za_error ("%s has no images (.jpg, .jpeg or .png) in its class folders",
                       config->source);
    *n_classes = classes;
    return rc;
}

// ---------------------------------------------------------------------------
//  Listing a pattern of images: the label from the parent folder's name

//  The parent folder's name of path, into name.
static void
s_parent_name (const char *path, char *name, size_t size)
{
    const char *end = strrchr (path, '/');
    const char *start = end;
    while (start && start > path && start [-1] != '/')
        start--;
    size_t length = end? (size_t) (end - start): 0;
    if (length >= size)
        length = size - 1;
    memcpy (name, end? start: "", length);
    name [length] = 0;
}

static int
s_label_parents (const za_images_config_t *config, const char *pattern, za_listing_t *list,
                 int *n_classes, int warn, char **joined)
{
    char **names = NULL;
    int classes = 0;
    char parent [ZA_LISTING_PATH_MAX];
    if (config->class_names)
        classes = s_classes_given (config->class_names, &names);
    else {                              //  the parents' names, sorted, once each
        names = calloc (ZA_IMAGES_MAX_CLASSES + 1, sizeof *names);
        s_class_t *seen = calloc (ZA_IMAGES_MAX_CLASSES + 1, sizeof *seen);
        for (int64_t i = 0; names && seen && i < list->count && classes >= 0; i++) {
            s_parent_name (za_listing_path (list, i), parent, sizeof parent);
            s_class_t key = {.name = parent};
            if (bsearch (&key, seen, (size_t) classes, sizeof *seen, s_compare_classes))
                continue;
            if (classes == ZA_IMAGES_MAX_CLASSES)
                classes = za_error ("%s: more than %d parent folders (classes)", pattern,
                                    ZA_IMAGES_MAX_CLASSES);
            else
            if (!(names [classes] = strdup (parent)))
                classes = za_error ("out of memory");
            else {
                seen [classes].name = names [classes];
                classes++;
                qsort (seen, (size_t) classes, sizeof *seen, s_compare_classes);
            }
        }
        free (seen);
        if (!names)
            classes = za_error ("out of memory");
        else
        if (classes > 0)
            qsort (names, (size_t) classes, sizeof *names, s_compare_names);
    }
    s_class_t *table = classes > 0? calloc ((size_t) classes, sizeof *table): NULL;
    int64_t kept = 0, other = 0;
    for (int c = 0; table && c < classes; c++)
        table [c] = (s_class_t) {.name = names [c], .label = c};
    if (table)
        qsort (table, (size_t) classes, sizeof *table, s_compare_classes);
    for (int64_t i = 0; table && i < list->count; i++) {
        s_parent_name (za_listing_path (list, i), parent, sizeof parent);
        s_class_t key = {.name = parent};
        const s_class_t *found = bsearch (&key, table, (size_t) classes, sizeof *table,
                                          s_compare_classes);
        if (!found)
            other++;
        else {
            list->items [kept] = list->items [i];
            list->items [kept++].label = found->label;
        }
    }
    list->count = kept;
    if (other && warn)
        za_info ("warning: %s: %lld images are in folders that are not among the %d "
                 "classes: they are left out", pattern, (long long) other, classes);
    free (table);
    s_join_names (names, classes, joined);
    za_listing_free_names (names, classes > 0? classes: ZA_IMAGES_MAX_CLASSES);
    *n_classes = classes;
    if (classes >= 0 && kept == 0)
        return za_error ("%s: no image of the classes matches", pattern);
    return classes < 0? -1: 0;
}

// ---------------------------------------------------------------------------
//  Listing TFRecord files: every record's CRCs and label, no image decoded

typedef struct {
    const za_images_config_t *config;
    const char *image_key, *label_key;
    int warn;
    int spill;                          //  where GZIP files' records go, or -1
    int64_t spill_size;
    int named;                          //  the classes given, or 0
    int64_t max_label;
    int count_only;                     //  1: the records counted, not read
} s_scan_t;

//  Copies a GZIP file's record (data, size bytes and its CRC) into the
//  spill, framed as in a file. Its offset there, or -1 with an error.
static int64_t
s_spill (s_scan_t *scan, const uint8_t *data, size_t size)
{
    uint8_t head [ZA_TFRECORD_HEAD_BYTES];
    za_tfrecord_head (head, size);
    int64_t at = scan->spill_size;
    if (pwrite (scan->spill, head, sizeof head, at) != (ssize_t) sizeof head
    ||  pwrite (scan->spill, data, size + ZA_TFRECORD_CRC_BYTES, at + (int64_t) sizeof head)
        != (ssize_t) (size + ZA_TFRECORD_CRC_BYTES))
        return za_error ("cannot keep a GZIP file's records uncompressed in the temp folder "
                         "($TMPDIR): %s", strerror (errno));
    scan->spill_size += (int64_t) (sizeof head + size + ZA_TFRECORD_CRC_BYTES);
    return at;
}

//  The record's label, or a reason it has none (returned as -1, why in why).
static int
s_record_label (const s_scan_t *scan, const uint8_t *data, size_t size, int64_t *label,
                const char **why)
{
    za_feature_t feature;
    const uint8_t *image;
    size_t image_size;
    if (za_example_feature (data, size, scan->label_key, &feature) != 1
    ||  za_feature_int64 (&feature, label))
        *why = "no int64 label under the label key";
    else
    if (za_example_feature (data, size, scan->image_key, &feature) != 1
    ||  za_feature_bytes (&feature, &image, &image_size))
        *why = "no image bytes under the image key";
    else
        return 0;
    return -1;
}

static int
s_scan_file (s_scan_t *scan, za_listing_t *list, const char *path)
{
    za_tfrecord_reader_t *reader = za_tfrecord_reader_new (path);
    int64_t at = reader? za_listing_text (list, path): -1;
    if (at < 0) {
        za_tfrecord_reader_destroy (&reader);
        return -1;
    }
    const uint8_t *data;
    size_t size;
    uint64_t offset;
    int rc = 0;
    za_tfrecord_status_t status;
    //  Only counting (the classes are given): the heads, no data.
    while (!rc && scan->count_only
           && (status = za_tfrecord_skip (reader, &size, &offset)) != ZA_TFRECORD_END) {
        if (status == ZA_TFRECORD_OK)
            rc = za_listing_add (list, (za_listing_item_t) {
                .at = at, .offset = (int64_t) offset, .spill_at = -1});
        else
            break;
    }
    while (!rc && !scan->count_only
           && (status = za_tfrecord_next (reader, &data, &size, &offset))
              != ZA_TFRECORD_END) {
        if (status != ZA_TFRECORD_OK) {
            if (scan->warn)
                za_info ("warning: %s", za_tfrecord_error (reader));
            if (status == ZA_TFRECORD_BROKEN)
                break;
            continue;
        }
        int64_t label;
        const char *why;
        if (s_record_label (scan, data, size, &label, &why)
        &&  !(scan->config->unlabeled && strstr (why, "label"))) {
            if (scan->warn)
                za_info ("warning: %s: the record at offset %llu has %s ('%s', '%s'): it "
                         "is skipped", path, (unsigned long long) offset, why,
                         scan->image_key, scan->label_key);
            continue;
        }
        int64_t classes = scan->named? scan->named: ZA_IMAGES_MAX_CLASSES;
        if (scan->config->unlabeled)
            label = scan->config->label_base;
        else
        if (label - scan->config->label_base < 0
        ||  label - scan->config->label_base >= classes) {
            rc = za_error ("%s: the record at offset %llu has label %lld, outside %d..%lld%s%s",
                           path, (unsigned long long) offset, (long long) label,
                           scan->config->label_base,
                           (long long) (classes - 1 + scan->config->label_base),
                           scan->config->label_base? "": " (labels that start at 1, as "
                           "build_image_data.py writes them: --label-base 1)",
                           scan->named? " (the classes given)": "");
            break;
        }
        label -= scan->config->label_base;
        int64_t spill_at = -1;
        if (scan->spill >= 0 && za_tfrecord_compressed (reader)
        &&  (spill_at = s_spill (scan, data, size)) < 0)
            rc = -1;
        else
            rc = za_listing_add (list, (za_listing_item_t) {
                .at = at, .offset = (int64_t) offset, .spill_at = spill_at,
                .label = (int32_t) label});
        if (label > scan->max_label)
            scan->max_label = label;
    }
    za_tfrecord_reader_destroy (&reader);
    return rc;
}

//  Lists the records of the files of pattern. With *shards > 1 and at
//  least as many files, and no split that needs every record, only this
//  shard's files are opened (file i of the sorted list when i mod n =
//  shard), and *shards becomes 1: what is listed is the shard.
static int
s_list_tfrecord (const za_images_config_t *config, const char *pattern, za_listing_t *list,
                 int *n_classes, int warn, int spill, int *shards)
{
    za_listing_t files = {0};
    struct stat st;
    int rc = strpbrk (pattern, "*?[")? za_listing_glob (&files, pattern)
           : stat (pattern, &st)? za_error ("%s: cannot read: %s", pattern, strerror (errno))
           : za_listing_add_file (&files, pattern, -1);
    if (!rc && files.count == 0)
        rc = za_error ("%s: no file matches", pattern);
    //  What the source holds, when the classes are given, is a count: the
    //  records' heads, no data read (the load reads and checks them all).
    s_scan_t scan = {
        .config = config, .warn = warn, .spill = spill, .max_label = -1,
        .count_only = !warn && spill < 0 && config->class_names && !config->unlabeled,
        .image_key = config->image_key? config->image_key: ZA_IMAGES_IMAGE_KEY,
        .label_key = config->label_key? config->label_key: ZA_IMAGES_LABEL_KEY,
    };
    char **names = NULL;
    if (!rc && config->class_names && (scan.named = s_classes_given (config->class_names,
                                                                     &names)) < 0)
        rc = -1;
    za_listing_free_names (names, scan.named);
    int file_shards = 1;
    if (*shards > 1 && files.count >= *shards && config->validation_split == 0)
        file_shards = *shards, *shards = 1;
    for (int64_t f = 0; f < files.count && !rc; f++)
        if (file_shards == 1 || f % file_shards == config->shard_index)
            rc = s_scan_file (&scan, list, za_listing_path (&files, f));
    if (!rc && list->count == 0)
        rc = za_error ("%s: no record with an image and a label ('%s', '%s') in %lld "
                       "file%s", pattern, scan.image_key, scan.label_key,
                       (long long) files.count, files.count == 1? "": "s");
    za_listing_free (&files);
    *n_classes = scan.named? scan.named: (int) scan.max_label + 1;
    return rc;
}

// ---------------------------------------------------------------------------
//  The source, its split and its shard

//  What config->source names, and the pattern to list (the source itself,
//  or what follows "tfrecord:").
static s_kind_t
s_kind (const za_images_config_t *config, const char **pattern)
{
    *pattern = config->source;
    if (!strncmp (config->source, TFRECORD_PREFIX, strlen (TFRECORD_PREFIX))) {
        *pattern += strlen (TFRECORD_PREFIX);
        return SOURCE_TFRECORD;
    }
    struct stat st;
    if (stat (config->source, &st) == 0)
        return S_ISDIR (st.st_mode)? SOURCE_FOLDER
             : za_listing_is_image (config->source)? SOURCE_PATTERN: SOURCE_TFRECORD;
    return SOURCE_PATTERN;              //  images or TFRecords: the files tell
}

//  Keras's split (shuffled with the seed, training the first part), then
//  the shard's examples (i mod shards).
static void
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
    s_kind_t kind = s_kind (config, &pattern);
    int shards = config->num_shards > 0? config->num_shards: 1;
    int rc = 0;
    if (kind == SOURCE_PATTERN) {
        if (!strpbrk (pattern, "*?[") && access (pattern, F_OK))
            rc = za_error ("%s: cannot read: %s", pattern, strerror (errno));
        else
        if (!(rc = za_listing_glob (list, pattern)) && list->count == 0)
            rc = za_error ("%s: no file matches", pattern);
        int images = 1;
        for (int64_t i = 0; !rc && images && i < list->count; i++)
            images = za_listing_is_image (za_listing_path (list, i));
        if (!rc && !images)
            kind = SOURCE_TFRECORD, za_listing_free (list);
    }
    if (rc)
        ;
    else
    if (config->unlabeled && kind == SOURCE_FOLDER) {
        //  Every image below, in the folder's order; no class needed.
        if (!(rc = za_listing_walk (list, config->source, 0)) && list->count == 0)
            rc = za_error ("%s has no images (.jpg, .jpeg or .png)", config->source);
        *n_classes = 1;
    }
    else
    if (config->unlabeled && kind == SOURCE_PATTERN) {
        for (int64_t i = 0; i < list->count; i++)
            list->items [i].label = 0;
        *n_classes = 1;
    }
    else
    if (kind == SOURCE_FOLDER)
        rc = s_list_folder (config, list, n_classes, warn, joined);
    else
    if (kind == SOURCE_PATTERN)
        rc = s_label_parents (config, pattern, list, n_classes, warn, joined);
    else {
        rc = s_list_tfrecord (config, pattern, list, n_classes, warn, spill, &shards);
        if (!rc && joined && config->class_names)
            *joined = strdup (config->class_names);
    }
    if (rc) {
        za_listing_free (list);
        return -1;
    }
    s_select (config, list, shards);
    return 0;
}

int
za_images_info (const za_images_config_t *config, za_dataset_info_t *info)
{
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
    s_source_t *source = calloc (1, sizeof *source);
    int classes;
    if (!source) {
        za_error ("out of memory");
        return NULL;
    }
    source->spill = -1;
    const char *pattern;
    if (s_kind (config, &pattern) != SOURCE_FOLDER && (source->spill = s_spill_new ()) < 0) {
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
