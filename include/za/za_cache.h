/*  za_cache.h: a data set's examples kept once made (tf.data's cache()): as
    bytes at the model's input size, in memory for this run, or in a file
    that the next run reuses (tf.data's cache(filename)) for every example
    whose source has not changed since. For sources that decode on demand
    (images): the first epoch decodes, the next ones copy.                  */
#ifndef ZA_CACHE_H_INCLUDED
#define ZA_CACHE_H_INCLUDED

#include "za/za_dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZA_CACHE_NONE = 0,
    ZA_CACHE_MEMORY,                    //  this process's memory (not swapped in
                                        //  until an example is made)
    ZA_CACHE_DISK                       //  a file, reused by the next run
} za_cache_kind_t;

//  Names "none", "memory", "disk" (-1: none of them).
int za_cache_parse (const char *name);

//  Makes dataset (one whose loader makes examples) keep each example once
//  made. With ZA_CACHE_DISK the file at path (its folder made) is reused
//  when it holds this data set's shape and count, each example checked
//  against its source's identity (a file's path, size and time), made again
//  when that changed; a file of another shape, or not a cache, is made
//  anew (with a warning). 0, or -1 with an error (the data set unchanged):
//  out of memory, a file that cannot be made.
int za_dataset_cache (za_dataset_t *dataset, za_cache_kind_t kind, const char *path);

//  The source `loader` makes dataset's examples from, cached or not; NULL
//  when another loader makes them.
void *za_cache_source (const za_dataset_t *dataset, const za_dataset_loader_t *loader);

//  Examples of dataset its cache gave so far (0: none, or no cache).
int64_t za_dataset_cache_hits (const za_dataset_t *dataset);

#ifdef __cplusplus
}
#endif
#endif
