/*  za_source_folder.c: a folder of class folders as a data source, as
    Keras's image_dataset_from_directory and torchvision's ImageFolder read
    one: the classes are its sorted sub-folders (or --class-names), each
    image below a class folder one example of that class.                   */
#include "za_source.h"
#include "za/za_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int
s_takes (const za_images_config_t *config, const char **pattern)
{
    struct stat st;
    *pattern = config->source;
    return stat (config->source, &st) == 0 && S_ISDIR (st.st_mode);
}

static int
s_list_classes (const za_images_config_t *config, za_listing_t *list, int *n_classes, int warn,
                char **joined)
{
    char **names;
    int classes = config->class_names? za_source_classes_given (config->class_names, &names)
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
    if (!rc && za_source_join_names (names, classes, joined))
        rc = -1;
    za_listing_free_names (names, classes);
    if (!rc && list->count == 0)
        rc = za_error ("%s has no images (.jpg, .jpeg or .png) in its class folders",
                       config->source);
    *n_classes = classes;
    return rc;
}


static int
s_list (const za_images_config_t *config, const char *pattern, za_listing_t *list,
        int *n_classes, za_source_ask_t *ask)
{
    (void) pattern;
    if (!config->unlabeled)
        return s_list_classes (config, list, n_classes, ask->warn, ask->joined);
    //  Every image below, in the folder's order; no class needed.
    *n_classes = 1;
    if (za_listing_walk (list, config->source, 0))
        return -1;
    return list->count? 0: za_error ("%s has no images (.jpg, .jpeg or .png)", config->source);
}

const za_source_t za_source_folder = {
    .name = "folder", .spills = 0, .takes = s_takes, .list = s_list,
};
