/*  za_listing.h: the files (or records) a data set of images is made of:
    their paths in one block of text, and an offset and a label each;
    folders read in sorted order; file patterns with "**". Private to io/.  */
#ifndef ZA_LISTING_H_INCLUDED
#define ZA_LISTING_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#define ZA_LISTING_PATH_MAX 4096

typedef struct {
    int64_t at;                         //  the path's offset in text
    int64_t offset;                     //  a record's offset in its file; -1:
                                        //  the whole file is the example
    int64_t spill_at;                   //  the record's offset in the spill (a
                                        //  GZIP file's records, uncompressed);
                                        //  -1: read it from its file
    int32_t label;
} za_listing_item_t;

typedef struct {
    char *text;                         //  NUL-terminated paths
    size_t used, capacity;
    za_listing_item_t *items;
    int64_t count, slots;
} za_listing_t;

void za_listing_free (za_listing_t *self);

//  Keeps a copy of path: its offset in text, or -1 with an error.
int64_t za_listing_text (za_listing_t *self, const char *path);
//  Adds an item. 0, or -1 with an error (out of memory).
int za_listing_add (za_listing_t *self, za_listing_item_t item);
//  Adds the file at path as a whole, labelled. 0, or -1 with an error.
int za_listing_add_file (za_listing_t *self, const char *path, int32_t label);
const char *za_listing_path (const za_listing_t *self, int64_t index);

//  1 when name ends in .jpg, .jpeg or .png (any case).
int za_listing_is_image (const char *name);

//  The sub-folders of dir, sorted, not hidden: their count (names in
//  *names, each malloc'd, freed with za_listing_free_names), or -1 with an
//  error naming dir.
int za_listing_subfolders (const char *dir, char ***names);
void za_listing_free_names (char **names, int count);

//  Adds the images under dir with label: its files (sorted), then its
//  folders' (sorted, recursively). Hidden names are skipped, as Keras does.
int za_listing_walk (za_listing_t *self, const char *dir, int32_t label);

//  Adds every file that matches pattern, sorted by path, labels -1. In a
//  name, '*', '?' and '[...]' as the shell's; a name "**" is any number of
//  folders (none too). Hidden names match only a part that starts with '.'.
//  0 (perhaps nothing added), or -1 with an error.
int za_listing_glob (za_listing_t *self, const char *pattern);

#endif
