/*  za_images.c: a folder of class folders listed into paths and labels (no
    image read), and the loader that decodes an example when it is needed. */
#include "za/za_images.h"
#include "za/za_util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_CHARS_MAX 4096

//  The files found: paths (NUL-separated in one buffer) and labels.
typedef struct {
    char *text;
    size_t used, capacity;
    int64_t *at;                        //  each path's offset in text
    int32_t *label;
    int64_t count, slots;
} s_list_t;

//  What the loader decodes from.
typedef struct {
    s_list_t list;
    za_image_spec_t image;
    uint8_t *bad;                       //  per example: 1 once it failed to decode
    int64_t bad_count;
} s_source_t;

static void
s_list_free (s_list_t *list)
{
    free (list->text);
    free (list->at);
    free (list->label);
    memset (list, 0, sizeof *list);
}

static int
s_list_add (s_list_t *list, const char *path, int32_t label)
{
    size_t length = strlen (path) + 1;
    if (list->used + length > list->capacity) {
        size_t capacity = list->capacity? list->capacity * 2: 1 << 16;
        while (capacity < list->used + length)
            capacity *= 2;
        char *text = realloc (list->text, capacity);
        if (!text)
            return za_error ("listing images: out of memory");
        list->text = text;
        list->capacity = capacity;
    }
    if (list->count == list->slots) {
        int64_t slots = list->slots? list->slots * 2: 1024;
        int64_t *at = realloc (list->at, (size_t) slots * sizeof *at);
        if (at)
            list->at = at;
        int32_t *label = at? realloc (list->label, (size_t) slots * sizeof *label): NULL;
        if (!label)
            return za_error ("listing images: out of memory");
        list->label = label;
        list->slots = slots;
    }
    memcpy (list->text + list->used, path, length);
    list->at [list->count] = (int64_t) list->used;
    list->label [list->count++] = label;
    list->used += length;
    return 0;
}


static int
s_is_image_name (const char *name)
{
    const char *dot = strrchr (name, '.');
    if (!dot)
        return 0;
    char ext [8];
    size_t n = 0;
    for (const char *p = dot + 1; *p && n + 1 < sizeof ext; p++)
        ext [n++] = (char) tolower ((unsigned char) *p);
    ext [n] = 0;
    return strlen (dot + 1) < sizeof ext
        && (!strcmp (ext, "jpg") || !strcmp (ext, "jpeg") || !strcmp (ext, "png"));
}

//  1 when path (named `name` in its folder, entry type `type`) is a folder.
static int
s_is_dir (const char *path, unsigned char type)
{
    if (type == DT_DIR)
        return 1;
    if (type != DT_UNKNOWN && type != DT_LNK)
        return 0;
    struct stat st;
    return stat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

//  The entries of a folder, sorted; *count of them, each malloc'd in one
//  block with its type. NULL with an error when it cannot be read.
typedef struct {
    unsigned char type;
    char name [];
} s_entry_t;

static int
s_compare_entries (const void *a, const void *b)
{
    return strcmp ((*(s_entry_t *const *) a)->name, (*(s_entry_t *const *) b)->name);
}

static s_entry_t **
s_read_dir (const char *path, int *count)
{
    DIR *dir = opendir (path);
    if (!dir) {
        za_error ("%s: cannot read the folder: %s", path, strerror (errno));
        return NULL;
    }
    s_entry_t **entries = NULL;
    int n = 0, slots = 0;
    struct dirent *d;
    while ((d = readdir (dir))) {
        if (d->d_name [0] == '.')
            continue;               //  ., .. and hidden files, as Keras skips them
        if (n == slots) {
            slots = slots? slots * 2: 64;
            s_entry_t **grown = realloc (entries, (size_t) slots * sizeof *grown);
            if (!grown)
                break;
            entries = grown;
        }
        s_entry_t *entry = malloc (sizeof *entry + strlen (d->d_name) + 1);
        if (!entry)
            break;
        entry->type = d->d_type;
        strcpy (entry->name, d->d_name);
        entries [n++] = entry;
    }
    closedir (dir);
    if (n)
        qsort (entries, (size_t) n, sizeof *entries, s_compare_entries);
    *count = n;
    if (!entries)
        entries = malloc (sizeof *entries);
    return entries;
}

static void
s_free_entries (s_entry_t **entries, int count)
{
    for (int i = 0; i < count; i++)
        free (entries [i]);
    free (entries);
}

//  Adds the images under path, its files first (sorted), then its folders.
static int
s_walk (s_list_t *list, const char *path, int32_t label, int depth)
{
    int count = 0;
    s_entry_t **entries = s_read_dir (path, &count);
    if (!entries)
        return -1;
    int rc = 0;
    char child [PATH_CHARS_MAX];
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < count && !rc; i++) {
            if (snprintf (child, sizeof child, "%s/%s", path, entries [i]->name)
                >= (int) sizeof child) {
                za_info ("skipping %s/%s: the path is too long", path, entries [i]->name);
                continue;
            }
            int is_dir = s_is_dir (child, entries [i]->type);
            if (pass == 0 && !is_dir && s_is_image_name (entries [i]->name))
                rc = s_list_add (list, child, label);
            else
            if (pass == 1 && is_dir && depth < 64)
                rc = s_walk (list, child, label, depth + 1);
        }
    s_free_entries (entries, count);
    return rc;
}

//  The class names: given, or the sorted sub-folders of dir. Returns the
//  count (and the names in *names, one block), or -1 with an error.
static int
s_classes (const za_images_config_t *config, char ***names)
{
    int count = 0;
    *names = NULL;
    if (config->class_names) {
        char *copy = strdup (config->class_names);
        char **list = calloc (ZA_IMAGES_MAX_CLASSES, sizeof *list);
        if (!copy || !list) {
            free (copy), free (list);
            return za_error ("out of memory");
        }
        for (char *save = NULL, *name = strtok_r (copy, ",", &save); name;
             name = strtok_r (NULL, ",", &save))
            if (count < ZA_IMAGES_MAX_CLASSES)
                list [count++] = strdup (name);
        free (copy);
        *names = list;
        return count;
    }
    s_entry_t **entries = s_read_dir (config->dir, &count);
    if (!entries)
        return -1;
    char **list = calloc ((size_t) count + 1, sizeof *list);
    int classes = 0;
    char path [PATH_CHARS_MAX];
    for (int i = 0; list && i < count; i++) {
        snprintf (path, sizeof path, "%s/%s", config->dir, entries [i]->name);
        if (s_is_dir (path, entries [i]->type) && classes < ZA_IMAGES_MAX_CLASSES)
            list [classes++] = strdup (entries [i]->name);
    }
    s_free_entries (entries, count);
    *names = list;
    return list? classes: za_error ("out of memory");
}

static void
s_free_names (char **names, int count)
{
    for (int i = 0; names && i < count; i++)
        free (names [i]);
    free (names);
}

//  Lists the folder (every file), then keeps config's subset and shard;
//  with `warn`, says which class folders are empty.
static int
s_list (const za_images_config_t *config, s_list_t *list, int *n_classes, int warn)
{
    memset (list, 0, sizeof *list);
    if (!(config->validation_split >= 0 && config->validation_split < 1))
        return za_error ("validation split %g: give 0 <= F < 1", config->validation_split);
    char **names;
    int classes = s_classes (config, &names);
    if (classes < 0)
        return -1;
    if (classes == 0) {
        s_free_names (names, classes);
        return za_error ("%s has no class folders: put each class's images in a folder of "
                         "its own (%s/CLASS/IMAGE.jpg)", config->dir, config->dir);
    }
    int rc = 0;
    char path [PATH_CHARS_MAX];
    for (int c = 0; c < classes && !rc; c++) {
        snprintf (path, sizeof path, "%s/%s", config->dir, names [c]);
        int64_t before = list->count;
        struct stat st;
        if (stat (path, &st) || !S_ISDIR (st.st_mode))
            rc = za_error ("class '%s' has no folder %s", names [c], path);
        else
        if (!(rc = s_walk (list, path, c, 0)) && list->count == before && warn)
            za_info ("class %d ('%s') has no images in %s: it keeps its label", c, names [c],
                     path);
    }
    s_free_names (names, classes);
    if (!rc && list->count == 0)
        rc = za_error ("%s has no images (.jpg, .jpeg or .png) in its class folders",
                       config->dir);
    if (rc) {
        s_list_free (list);
        return -1;
    }
    *n_classes = classes;
    //  The split, as Keras's: shuffled with the seed, training the first part.
    int64_t keep_from = 0, keep_to = list->count;
    if (config->validation_split > 0 && config->subset != ZA_SUBSET_ALL) {
        za_rng_t rng;
        za_rng_seed (&rng, config->seed);
        for (int64_t i = list->count - 1; i > 0; i--) {
            int64_t j = (int64_t) za_rng_below (&rng, (uint32_t) (i + 1));
            int64_t at = list->at [i];
            int32_t label = list->label [i];
            list->at [i] = list->at [j], list->label [i] = list->label [j];
            list->at [j] = at, list->label [j] = label;
        }
        int64_t validation = (int64_t) (config->validation_split * (double) list->count);
        if (config->subset == ZA_SUBSET_TRAINING)
            keep_to = list->count - validation;
        else
            keep_from = list->count - validation;
    }
    int shards = config->num_shards > 0? config->num_shards: 1;
    int64_t kept = 0;
    for (int64_t i = keep_from; i < keep_to; i++)
        if ((i - keep_from) % shards == config->shard_index) {
            list->at [kept] = list->at [i];
            list->label [kept++] = list->label [i];
        }
    list->count = kept;
    return 0;
}

int
za_images_info (const za_images_config_t *config, za_dataset_info_t *info)
{
    s_list_t list;
    int classes;
    if (s_list (config, &list, &classes, 0))
        return -1;
    info->count = list.count;
    info->height = config->image.height;
    info->width = config->image.width;
    info->channels = config->image.channels;
    info->n_classes = classes;
    s_list_free (&list);
    return 0;
}

// ---------------------------------------------------------------------------
//  The loader

static int
s_load (void *arg, int64_t index, void *scratch, uint8_t *out)
{
    s_source_t *self = (s_source_t *) arg;
    if (__atomic_load_n (&self->bad [index], __ATOMIC_RELAXED))
        return -1;
    const char *path = self->list.text + self->list.at [index];
    za_image_decoder_t *decoder = (za_image_decoder_t *) scratch;
    if (za_image_load (decoder, path, &self->image, out) == 0)
        return 0;
    if (__atomic_exchange_n (&self->bad [index], 1, __ATOMIC_RELAXED) == 0) {
        int64_t bad = __atomic_add_fetch (&self->bad_count, 1, __ATOMIC_RELAXED);
        za_info ("warning: skipping an image that cannot be decoded (%lld so far): %s",
                 (long long) bad, za_image_error (decoder));
    }
    return -1;
}

static void *
s_scratch_new (void *arg)
{
    (void) arg;
    return za_image_decoder_new ();
}

static void
s_scratch_destroy (void **scratch_p)
{
    za_image_decoder_destroy ((za_image_decoder_t **) scratch_p);
}

static void
s_source_destroy (void **source_p)
{
    s_source_t *self = (s_source_t *) *source_p;
    if (!self)
        return;
    s_list_free (&self->list);
    free (self->bad);
    free (self);
    *source_p = NULL;
}

static const za_dataset_loader_t s_loader = {
    .load = s_load,
    .scratch_new = s_scratch_new,
    .scratch_destroy = s_scratch_destroy,
    .destroy = s_source_destroy,
};

za_dataset_t *
za_images_load (const za_images_config_t *config)
{
    s_source_t *source = calloc (1, sizeof *source);
    int classes;
    if (!source) {
        za_error ("out of memory");
        return NULL;
    }
    if (s_list (config, &source->list, &classes, 1)) {
        free (source);
        return NULL;
    }
    source->image = config->image;
    source->bad = calloc ((size_t) source->list.count + 1, 1);
    if (!source->bad) {
        void *gone = source;
        s_source_destroy (&gone);
        za_error ("out of memory");
        return NULL;
    }
    const s_list_t *list = &source->list;
    int64_t count = list->count;
    int32_t *labels = list->label;
    za_dataset_t *dataset = za_dataset_new_loaded (count, config->image.height,
                                                   config->image.width,
                                                   config->image.channels, &s_loader, source);
    if (!dataset)
        return NULL;
    memcpy (dataset->labels, labels, (size_t) count * sizeof (int32_t));
    dataset->n_classes = classes;
    return dataset;
}

const char *
za_images_path (const za_dataset_t *dataset, int64_t index)
{
    if (!dataset || dataset->loader != &s_loader || index < 0 || index >= dataset->count)
        return NULL;
    const s_source_t *source = (const s_source_t *) dataset->source;
    return source->list.text + source->list.at [index];
}

int64_t
za_images_bad (const za_dataset_t *dataset)
{
    if (!dataset || dataset->loader != &s_loader)
        return 0;
    return __atomic_load_n (&((s_source_t *) dataset->source)->bad_count, __ATOMIC_RELAXED);
}
