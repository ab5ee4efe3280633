/*  za_listing.c: paths and labels of a data set's files, folders read in
    sorted order, file patterns with "**".                                  */
#define _GNU_SOURCE                     //  qsort_r
#include "za_listing.h"
#include "za/za_util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LISTING_DEPTH_MAX 64

void
za_listing_free (za_listing_t *self)
{
    free (self->text);
    free (self->items);
    memset (self, 0, sizeof *self);
}

int64_t
za_listing_text (za_listing_t *self, const char *path)
{
    size_t length = strlen (path) + 1;
    if (self->used + length > self->capacity) {
        size_t capacity = self->capacity? self->capacity * 2: (size_t) 1 << 16;
        while (capacity < self->used + length)
            capacity *= 2;
        char *text = realloc (self->text, capacity);
        if (!text)
            return za_error ("listing images: out of memory");
        self->text = text;
        self->capacity = capacity;
    }
    memcpy (self->text + self->used, path, length);
    self->used += length;
    return (int64_t) (self->used - length);
}

int
za_listing_add (za_listing_t *self, za_listing_item_t item)
{
    if (self->count == self->slots) {
        int64_t slots = self->slots? self->slots * 2: 1024;
        za_listing_item_t *items = realloc (self->items, (size_t) slots * sizeof *items);
        if (!items)
            return za_error ("listing images: out of memory");
        self->items = items;
        self->slots = slots;
    }
    self->items [self->count++] = item;
    return 0;
}

int
za_listing_add_file (za_listing_t *self, const char *path, int32_t label)
{
    int64_t at = za_listing_text (self, path);
    if (at < 0)
        return -1;
    return za_listing_add (self, (za_listing_item_t) {
        .at = at, .offset = -1, .spill_at = -1, .label = label});
}

const char *
za_listing_path (const za_listing_t *self, int64_t index)
{
    return self->text + self->items [index].at;
}

int
za_listing_is_image (const char *name)
{
    const char *dot = strrchr (name, '.');
    if (!dot || strlen (dot + 1) > 4)
        return 0;
    char ext [8];
    size_t n = 0;
    for (const char *p = dot + 1; *p; p++)
        ext [n++] = (char) tolower ((unsigned char) *p);
    ext [n] = 0;
    return !strcmp (ext, "jpg") || !strcmp (ext, "jpeg") || !strcmp (ext, "png");
}

//  1 when path (an entry of type `type`) is a folder.
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

//  A folder's entry: its type and name, in one block.
typedef struct {
    unsigned char type;
    char name [];
} s_entry_t;

static int
s_compare_entries (const void *a, const void *b)
{
    return strcmp ((*(s_entry_t *const *) a)->name, (*(s_entry_t *const *) b)->name);
}

//  The entries of a folder, sorted (hidden ones too, when `hidden`); *count
//  of them. NULL with an error when it cannot be read.
static s_entry_t **
s_read_dir (const char *path, int hidden, int *count)
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
        if (!strcmp (d->d_name, ".") || !strcmp (d->d_name, "..")
        ||  (d->d_name [0] == '.' && !hidden))
            continue;
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

//  dir/name into path; 0, or -1 (said) when it is too long.
static int
s_join (char *path, const char *dir, const char *name)
{
    size_t length = strlen (dir);
    const char *separator = length && dir [length - 1] != '/'? "/": "";
    if (snprintf (path, ZA_LISTING_PATH_MAX, "%s%s%s", dir, separator, name)
        < ZA_LISTING_PATH_MAX)
        return 0;
    za_info ("skipping %s/%s: the path is too long", dir, name);
    return -1;
}

int
za_listing_subfolders (const char *dir, char ***names)
{
    int count = 0, folders = 0;
    s_entry_t **entries = s_read_dir (dir, 0, &count);
    *names = NULL;
    if (!entries)
        return -1;
    char **list = calloc ((size_t) count + 1, sizeof *list);
    char path [ZA_LISTING_PATH_MAX];
    for (int i = 0; list && i < count; i++)
        if (s_join (path, dir, entries [i]->name) == 0 && s_is_dir (path, entries [i]->type))
            list [folders++] = strdup (entries [i]->name);
    s_free_entries (entries, count);
    *names = list;
    return list? folders: za_error ("out of memory");
}

void
za_listing_free_names (char **names, int count)
{
    for (int i = 0; names && i < count; i++)
        free (names [i]);
    free (names);
}

//  A folder's identity, to tell a link back to a folder above (a loop).
typedef struct {
    dev_t dev;
    ino_t ino;
} s_folder_t;

//  `above` holds the folders from the walk's start to dir's parent (depth
//  of them): dir is walked unless it is one of them, through a link.
static int
s_walk (za_listing_t *self, const char *dir, int32_t label, int depth, s_folder_t *above)
{
    struct stat st;
    if (stat (dir, &st) == 0) {
        for (int d = 0; d < depth; d++)
            if (above [d].dev == st.st_dev && above [d].ino == st.st_ino) {
                za_info ("warning: skipping %s: a link back to a folder above it (a loop)",
                         dir);
                return 0;
            }
        above [depth] = (s_folder_t) {st.st_dev, st.st_ino};
    }
    else
        above [depth] = (s_folder_t) {0, 0};
    int count = 0;
    s_entry_t **entries = s_read_dir (dir, 0, &count);
    if (!entries)
        return -1;
    int rc = 0;
    char child [ZA_LISTING_PATH_MAX];
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < count && !rc; i++) {
            if (s_join (child, dir, entries [i]->name))
                continue;
            int is_dir = s_is_dir (child, entries [i]->type);
            if (pass == 0 && !is_dir && za_listing_is_image (entries [i]->name))
                rc = za_listing_add_file (self, child, label);
            else
            if (pass == 1 && is_dir && depth < LISTING_DEPTH_MAX)
                rc = s_walk (self, child, label, depth + 1, above);
        }
    s_free_entries (entries, count);
    return rc;
}

int
za_listing_walk (za_listing_t *self, const char *dir, int32_t label)
{
    s_folder_t above [LISTING_DEPTH_MAX + 1];
    return s_walk (self, dir, label, 0, above);
}

//  --------------------------------------------------------------------------
//  Patterns

//  Matches parts [i..n) under dir (which exists and is a folder).
static int
s_glob (za_listing_t *self, const char *dir, char **parts, int n, int i, int depth)
{
    const char *part = parts [i];
    int last = i == n - 1, rc = 0;
    char path [ZA_LISTING_PATH_MAX];
    struct stat st;
    if (!strcmp (part, "**")) {
        if (last)                       //  "dir/**": every file below
            part = "*";
        else
        if ((rc = s_glob (self, dir, parts, n, i + 1, depth)))
            return rc;                  //  no folder at all
    }
    if (!strpbrk (part, "*?[")) {       //  a plain name: no need to read dir
        if (s_join (path, dir, part) || stat (path, &st))
            return 0;
        if (last && S_ISREG (st.st_mode))
            return za_listing_add_file (self, path, -1);
        if (!last && S_ISDIR (st.st_mode) && depth < LISTING_DEPTH_MAX)
            return s_glob (self, path, parts, n, i + 1, depth + 1);
        return 0;
    }
    int count = 0;
    s_entry_t **entries = s_read_dir (*dir? dir: ".", part [0] == '.', &count);
    if (!entries)
        return -1;
    int any_folder = !strcmp (parts [i], "**");
    for (int e = 0; e < count && !rc; e++) {
        if (s_join (path, dir, entries [e]->name))
            continue;
        int is_dir = s_is_dir (path, entries [e]->type);
        if (any_folder && is_dir && depth < LISTING_DEPTH_MAX)
            rc = s_glob (self, path, parts, n, i, depth + 1);
        else
        if (fnmatch (part, entries [e]->name, FNM_PERIOD) != 0)
            continue;
        else
        if (last && !is_dir)
            rc = za_listing_add_file (self, path, -1);
        else
        if (!last && is_dir && !any_folder && depth < LISTING_DEPTH_MAX)
            rc = s_glob (self, path, parts, n, i + 1, depth + 1);
    }
    s_free_entries (entries, count);
    return rc;
}

static int
s_compare_paths (const void *a, const void *b, void *text)
{
    const za_listing_item_t *x = a, *y = b;
    return strcmp ((const char *) text + x->at, (const char *) text + y->at);
}

int
za_listing_glob (za_listing_t *self, const char *pattern)
{
    char *copy = strdup (pattern);
    char **parts = calloc (strlen (pattern) + 1, sizeof *parts);
    if (!copy || !parts) {
        free (copy), free (parts);
        return za_error ("out of memory");
    }
    int n = 0;
    for (char *save = NULL, *part = strtok_r (copy, "/", &save); part;
         part = strtok_r (NULL, "/", &save))
        if (strcmp (part, "."))
            parts [n++] = part;
    int64_t before = self->count;
    int rc = n? s_glob (self, pattern [0] == '/'? "/": "", parts, n, 0, 0): 0;
    free (parts), free (copy);
    if (!rc && self->count > before) {
        qsort_r (self->items + before, (size_t) (self->count - before), sizeof *self->items,
                 s_compare_paths, self->text);
        //  Once each: two "**" reach a file by two ways ("d/**/**/*.jpg"
        //  finds d/s/x.jpg with either taking s), and an example is a file.
        int64_t kept = before + 1;
        for (int64_t i = before + 1; i < self->count; i++)
            if (s_compare_paths (&self->items [i], &self->items [kept - 1], self->text))
                self->items [kept++] = self->items [i];
        self->count = kept;
    }
    return rc;
}
