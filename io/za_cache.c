/*  za_cache.c: a loader that keeps what the loader it wraps makes, in an
    anonymous mapping or in a file mapped shared.

    File: a header page, then one entry per example, then the examples'
    bytes. An example's entry is written after its bytes, its state last
    (release), so a run that stops half way leaves either a whole example
    or an entry that says none.                                             */
#define _GNU_SOURCE
#include "za/za_cache.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "ZACACHE1"
#define CACHE_PAGE 4096
#define ENTRY_EMPTY 0u
#define ENTRY_MADE 1u

typedef struct {
    char magic [8];
    uint64_t count;
    uint64_t example_size;
} s_header_t;

typedef struct {
    uint64_t key;
    uint64_t version;
    uint32_t state;                     //  ENTRY_*, stored last
    uint32_t reserved;
} s_entry_t;

typedef struct {
    const za_dataset_loader_t *inner;
    void *inner_source;
    int64_t count;
    size_t example_size;
    uint8_t *map;
    size_t map_size;
    s_entry_t *entries;
    uint8_t *examples;
    int64_t hits;
} s_cache_t;

int
za_cache_parse (const char *name)
{
    return !strcmp (name, "none")? ZA_CACHE_NONE: !strcmp (name, "memory")? ZA_CACHE_MEMORY
         : !strcmp (name, "disk")? ZA_CACHE_DISK: -1;
}

static size_t
s_round_up (size_t size)
{
    return (size + CACHE_PAGE - 1) / CACHE_PAGE * CACHE_PAGE;
}

static int
s_identity (const s_cache_t *self, int64_t index, uint64_t *key, uint64_t *version)
{
    if (!self->inner->identity) {
        *key = (uint64_t) index;
        *version = 0;
        return 0;
    }
    return self->inner->identity (self->inner_source, index, key, version);
}

//  A thread's scratch: the inner loader's, and whose it is.
typedef struct {
    s_cache_t *cache;
    void *inner;
} s_scratch_t;

static int
s_load (void *arg, int64_t index, void *scratch_arg, uint8_t *out)
{
    s_cache_t *self = (s_cache_t *) arg;
    void *scratch = ((s_scratch_t *) scratch_arg)->inner;
    s_entry_t *entry = &self->entries [index];
    uint8_t *kept = self->examples + (size_t) index * self->example_size;
    uint64_t key, version;
    int known = s_identity (self, index, &key, &version) == 0;
    if (known && __atomic_load_n (&entry->state, __ATOMIC_ACQUIRE) == ENTRY_MADE
    &&  entry->key == key && entry->version == version) {
        memcpy (out, kept, self->example_size);
        __atomic_add_fetch (&self->hits, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (self->inner->load (self->inner_source, index, scratch, out))
        return -1;
    if (known) {
        __atomic_store_n (&entry->state, ENTRY_EMPTY, __ATOMIC_RELEASE);
        memcpy (kept, out, self->example_size);
        entry->key = key;
        entry->version = version;
        __atomic_store_n (&entry->state, ENTRY_MADE, __ATOMIC_RELEASE);
    }
    return 0;
}

static void
s_scratch_destroy (void **scratch_p)
{
    s_scratch_t *scratch = (s_scratch_t *) *scratch_p;
    if (!scratch)
        return;
    scratch->cache->inner->scratch_destroy (&scratch->inner);
    free (scratch);
    *scratch_p = NULL;
}

static void *
s_scratch_new (void *arg)
{
    s_cache_t *self = (s_cache_t *) arg;
    s_scratch_t *scratch = calloc (1, sizeof *scratch);
    if (scratch) {
        scratch->cache = self;
        scratch->inner = self->inner->scratch_new (self->inner_source);
    }
    if (scratch && !scratch->inner) {
        free (scratch);
        scratch = NULL;
    }
    return scratch;
}

static int64_t
s_bad (void *arg)
{
    s_cache_t *self = (s_cache_t *) arg;
    return self->inner->bad? self->inner->bad (self->inner_source): 0;
}

static void
s_destroy (void **source_p)
{
    s_cache_t *self = (s_cache_t *) *source_p;
    if (!self)
        return;
    if (self->map)
        munmap (self->map, self->map_size);
    if (self->inner)
        self->inner->destroy (&self->inner_source);
    free (self);
    *source_p = NULL;
}

static const za_dataset_loader_t s_cache_loader = {
    .load = s_load,
    .scratch_new = s_scratch_new,
    .scratch_destroy = s_scratch_destroy,
    .destroy = s_destroy,
    .bad = s_bad,
};

//  Maps the cache file at path, reusing what it holds when its header is
//  this data set's. The mapping, or MAP_FAILED with an error.
static uint8_t *
s_map_file (const char *path, const s_header_t *header, size_t size)
{
    char *dir = strdup (path);
    char *slash = dir? strrchr (dir, '/'): NULL;
    if (slash) {
        *slash = 0;
        za_mkdirs (dir);
    }
    free (dir);
    int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        za_error ("cache %s: cannot open: %s", path, strerror (errno));
        return MAP_FAILED;
    }
    s_header_t found;
    struct stat st;
    int reuse = fstat (fd, &st) == 0 && (size_t) st.st_size == size
             && pread (fd, &found, sizeof found, 0) == (ssize_t) sizeof found
             && !memcmp (&found, header, sizeof found);
    if (!reuse && st.st_size > 0)
        za_info ("warning: cache %s holds another data set (or is not a cache): made anew",
                 path);
    //  A new file's blocks reserved now: a sparse file's pages are written
    //  through the map, and a full disk then stops the process with SIGBUS.
    //  (fallocate itself, not posix_fallocate: glibc's stand-in where the
    //  file system has none writes a byte a block, under other processes'
    //  maps; such a file system goes on unreserved.)
    uint8_t *map = MAP_FAILED;
    if (!reuse && (ftruncate (fd, 0) || ftruncate (fd, (off_t) size)))
        za_error ("cache %s: cannot make it %zu bytes: %s", path, size, strerror (errno));
    else
    if (!reuse && fallocate (fd, 0, 0, (off_t) size) && errno != EOPNOTSUPP) {
        za_error ("cache %s: cannot reserve %zu bytes on its disk: %s", path, size,
                  strerror (errno));
        if (ftruncate (fd, 0) == 0)
            unlink (path);
    }
    else
    if ((map = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        za_error ("cache %s: cannot map it: %s", path, strerror (errno));
    else
    if (!reuse)
        memcpy (map, header, sizeof *header);
    close (fd);
    return map;
}

int
za_dataset_cache (za_dataset_t *dataset, za_cache_kind_t kind, const char *path)
{
    if (kind == ZA_CACHE_NONE || !dataset->loader)
        return 0;                       //  nothing to keep: in memory already
    s_cache_t *self = calloc (1, sizeof *self);
    if (!self)
        return za_error ("cache: out of memory");
    self->count = dataset->count;
    self->example_size = (size_t) dataset->feature_size;
    size_t entries = s_round_up ((size_t) self->count * sizeof (s_entry_t));
    self->map_size = CACHE_PAGE + entries + s_round_up ((size_t) self->count
                                                        * self->example_size);
    s_header_t header = {.count = (uint64_t) self->count,
                         .example_size = (uint64_t) self->example_size};
    memcpy (header.magic, CACHE_MAGIC, sizeof header.magic);
    if (kind == ZA_CACHE_DISK)
        self->map = s_map_file (path, &header, self->map_size);
    else
    if ((self->map = mmap (NULL, self->map_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)) == MAP_FAILED)
        za_error ("cache: cannot reserve %zu bytes of memory: %s", self->map_size,
                  strerror (errno));
    if (self->map == MAP_FAILED) {
        free (self);
        return -1;
    }
    self->entries = (s_entry_t *) (self->map + CACHE_PAGE);
    self->examples = self->map + CACHE_PAGE + entries;
    self->inner = dataset->loader;
    self->inner_source = dataset->source;
    dataset->loader = &s_cache_loader;
    dataset->source = self;
    return 0;
}

void *
za_cache_source (const za_dataset_t *dataset, const za_dataset_loader_t *loader)
{
    if (!dataset || !dataset->loader)
        return NULL;
    if (dataset->loader == loader)
        return dataset->source;
    const s_cache_t *self = (const s_cache_t *) dataset->source;
    return dataset->loader == &s_cache_loader && self->inner == loader? self->inner_source: NULL;
}

int64_t
za_dataset_cache_hits (const za_dataset_t *dataset)
{
    if (!dataset || dataset->loader != &s_cache_loader)
        return 0;
    return __atomic_load_n (&((s_cache_t *) dataset->source)->hits, __ATOMIC_RELAXED);
}
