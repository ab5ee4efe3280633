/*  za_source_pattern.c: a pattern of images as a data source (the shell's
    '*', '?' and '[..]', and '**' for any folders; or one image file): each
    file an example, labelled by the name of the folder it is in (the
    classes: those names, sorted, or --class-names).                        */
#include "za_source.h"
#include "za/za_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

//  What no row before it took: a pattern (or a file) of images.
static int
s_takes (const za_images_config_t *config, const char **pattern)
{
    *pattern = config->source;
    return 1;
}

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
        classes = za_source_classes_given (config->class_names, &names);
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
    int joined_rc = classes > 0? za_source_join_names (names, classes, joined): 0;
    za_listing_free_names (names, classes > 0? classes: ZA_IMAGES_MAX_CLASSES);
    classes = joined_rc? -1: classes;
    *n_classes = classes;
    if (classes >= 0 && kept == 0)
        return za_error ("%s: no image of the classes matches", pattern);
    return classes < 0? -1: 0;
}


static int
s_list (const za_images_config_t *config, const char *pattern, za_listing_t *list,
        int *n_classes, za_source_ask_t *ask)
{
    if (!strpbrk (pattern, "*?[") && access (pattern, F_OK))
        return za_error ("%s: cannot read: %s", pattern, strerror (errno));
    if (za_listing_glob (list, pattern))
        return -1;
    if (list->count == 0)
        return za_error ("%s: no file matches", pattern);
    //  Only the images (by their names' extensions, as Keras takes them).
    int64_t kept = 0;
    for (int64_t i = 0; i < list->count; i++)
        if (za_listing_is_image (za_listing_path (list, i)))
            list->items [kept++] = list->items [i];
    if (kept < list->count && ask->warn)
        za_info ("%s: %lld files that are not images (by their extension) are left out",
                 pattern, (long long) (list->count - kept));
    list->count = kept;
    if (kept == 0)
        return za_error ("%s: no image matches", pattern);
    if (!config->unlabeled)
        return s_label_parents (config, pattern, list, n_classes, ask->warn, ask->joined);
    for (int64_t i = 0; i < list->count; i++)
        list->items [i].label = 0;
    *n_classes = 1;
    return 0;
}

const za_source_t za_source_pattern = {
    .name = "pattern", .spills = 0, .takes = s_takes, .list = s_list,
};
