/*  za_source.h: the sources a data set is read from, one file and one
    table row each, as a layer is: IDX files (za_source_idx.c), TFRecord
    files (za_source_tfrecord.c), a folder of class folders
    (za_source_folder.c), a pattern of images labelled by their folders
    (za_source_pattern.c). za_images.c asks the rows in that order which
    takes a source. A row of images lists the examples (paths, or records'
    offsets, and labels; no image decoded), which za_images.c's loader
    decodes when they are needed; a row of small files (IDX) reads them
    whole instead. Private to io/.                                          */
#ifndef ZA_SOURCE_H_INCLUDED
#define ZA_SOURCE_H_INCLUDED

#include "za/za_images.h"
#include "za_listing.h"

//  What a listing is asked for beside the config.
typedef struct {
    int warn;                   //  say what is left out, and why
    int spill;                  //  an unlinked file for GZIP files' records, or -1
    int shards;                 //  in: the shards asked; out: what is left to
                                //  split (1 when the listing is the shard)
    char **joined;              //  NULL, or where "a,b,c" of the class names goes
} za_source_ask_t;

typedef struct {
    const char *name;
    int spills;                 //  1: GZIP files' records go to a spill file
    //  1 when it takes config->source, with *pattern what it lists (the
    //  source, or what follows a prefix such as "tfrecord:").
    int (*takes) (const za_images_config_t *config, const char **pattern);
    //  Lists pattern's examples into list (empty) and how many classes
    //  there are. 0, or -1 with an error (list then freed by the caller).
    int (*list) (const za_images_config_t *config, const char *pattern, za_listing_t *list,
                 int *n_classes, za_source_ask_t *ask);
    //  Or, for files read whole (list NULL): what pattern holds for config
    //  (0, or -1 with an error), and its data set (the shard's), or NULL
    //  with an error.
    int (*info) (const za_images_config_t *config, const char *pattern,
                 za_dataset_info_t *info);
    za_dataset_t *(*load) (const za_images_config_t *config, const char *pattern);
} za_source_t;

extern const za_source_t za_source_idx;
extern const za_source_t za_source_tfrecord;
extern const za_source_t za_source_folder;
extern const za_source_t za_source_pattern;

//  What the rows share (za_images.c): the class names given as "a,b,c":
//  their count (names in *names, freed with za_listing_free_names), or -1;
//  and "a,b,c" of names (malloc'd) into *joined, when joined is not NULL:
//  -1 with an error for a name with a comma (a folder's), which no list of
//  names could hold.
int za_source_classes_given (const char *text, char ***names);
int za_source_join_names (char **names, int count, char **joined);

#endif
