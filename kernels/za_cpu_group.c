/*  za_cpu_group.c: cpu-staged's groups of processes (za_kernels.h's group_*
    slots): what NCCL is between processes on GPUs, here a segment of shared
    memory on this host, so that the all-reduce strategy's path through a
    group runs, and fails, where there is no GPU. The id names the segment
    (/dev/shm/za-group-HEX). A sum: each rank writes its buffer into its
    slot of one of two sets (the sum's number's parity) and counts itself
    in; once every rank has, each sums the slots in rank order (the same
    bits everywhere). A rank cannot start sum k + 2, which overwrites sum
    k's set, before every rank has come to sum k + 1, so after each has
    read sum k's. ZA_STAGED_GROUP (za_kernels.h) makes it fail.            */
#include "za_cpu_group.h"
#include "za/za_kernels.h"
#include "za/za_util.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_PREFIX "za-group-"
#define S_HEX_CHARS 32
#define S_HEADER_BYTES 64

typedef struct {
    _Atomic uint32_t attached;      //  ranks that opened it
    _Atomic uint64_t arrived;       //  ranks counted in, over all sums
} s_header_t;

typedef struct {
    char name [1 + sizeof S_PREFIX + S_HEX_CHARS];
    int fd;
    int rank, size;
    void *map;
    size_t map_bytes;
    int opened;                     //  every rank attached
    uint64_t sums;                  //  sums this rank started
    float *buf;                     //  the sum under way's, NULL when none
    size_t floats;
    long fail_at;                   //  ZA_STAGED_GROUP=fail-sum: this sum fails (0: none)
} s_group_t;

static s_header_t *
s_header (s_group_t *self)
{
    return (s_header_t *) self->map;
}

//  ZA_STAGED_GROUP, or "" when unset.
static const char *
s_setting (void)
{
    const char *setting = getenv ("ZA_STAGED_GROUP");
    return setting? setting: "";
}

int
za_cpu_group_id (unsigned char *id)
{
    if (strcmp (s_setting (), "0") == 0)
        return za_error ("cpu-staged: no groups of processes (ZA_STAGED_GROUP=0)");
    unsigned char random [S_HEX_CHARS / 2];
    if (getrandom (random, sizeof random, 0) != (ssize_t) sizeof random)
        return za_error ("cpu-staged: no random bytes for a group's id");
    memset (id, 0, ZA_GROUP_ID_BYTES);
    char *text = (char *) id;
    int at = snprintf (text, ZA_GROUP_ID_BYTES, S_PREFIX);
    for (size_t i = 0; i < sizeof random; i++)
        at += snprintf (text + at, ZA_GROUP_ID_BYTES - at, "%02x", random [i]);
    return 0;
}

//  The segment's name from an id, where the id is one of ours. 0 or -1.
static int
s_name (const unsigned char *id, char *name, size_t size)
{
    const char *text = (const char *) id;
    if (memchr (text, 0, ZA_GROUP_ID_BYTES) == NULL
        || strncmp (text, S_PREFIX, strlen (S_PREFIX)) != 0
        || strlen (text) != strlen (S_PREFIX) + S_HEX_CHARS
        || strspn (text + strlen (S_PREFIX), "0123456789abcdef") != S_HEX_CHARS)
        return za_error ("cpu-staged: not a group's id");
    snprintf (name, size, "/%s", text);
    return 0;
}

//  The segment mapped with room for `bytes` (grown where smaller: every
//  rank grows it alike). 0 or -1.
static int
s_map (s_group_t *self, size_t bytes)
{
    if (self->map && self->map_bytes >= bytes)
        return 0;
    struct stat st;
    if (fstat (self->fd, &st) || ((size_t) st.st_size < bytes && ftruncate (self->fd, bytes)))
        return za_error ("cpu-staged: group segment %s: no room for %zu bytes", self->name,
                         bytes);
    void *map = mmap (NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, 0);
    if (map == MAP_FAILED)
        return za_error ("cpu-staged: group segment %s does not map", self->name);
    if (self->map)
        munmap (self->map, self->map_bytes);
    self->map = map;
    self->map_bytes = bytes;
    return 0;
}

void
za_cpu_group_close (void *group)
{
    s_group_t *self = (s_group_t *) group;
    if (!self)
        return;
    if (self->map)
        munmap (self->map, self->map_bytes);
    if (self->fd >= 0)
        close (self->fd);
    shm_unlink (self->name);
    free (self);
}

void *
za_cpu_group_open (const unsigned char *id, int rank, int size)
{
    if (rank < 0 || size < 1 || rank >= size) {
        za_error ("cpu-staged: rank %d of a group of %d", rank, size);
        return NULL;
    }
    int fail_rank;
    if (strcmp (s_setting (), "fail") == 0
        || (sscanf (s_setting (), "fail-open:%d", &fail_rank) == 1 && fail_rank == rank)) {
        za_error ("cpu-staged: the group does not start (ZA_STAGED_GROUP=%s)", s_setting ());
        return NULL;
    }
    s_group_t *self = (s_group_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("cpu-staged: out of memory");
        return NULL;
    }
    self->fd = -1;
    self->rank = rank;
    self->size = size;
    long fail_at;
    if (sscanf (s_setting (), "fail-sum:%d:%ld", &fail_rank, &fail_at) == 2 && fail_rank == rank)
        self->fail_at = fail_at;
    if (s_name (id, self->name, sizeof self->name)) {
        free (self);
        return NULL;
    }
    self->fd = shm_open (self->name, O_CREAT | O_RDWR, 0600);
    if (self->fd < 0 || s_map (self, S_HEADER_BYTES)) {
        za_error ("cpu-staged: group segment %s does not open", self->name);
        za_cpu_group_close (self);
        return NULL;
    }
    atomic_fetch_add_explicit (&s_header (self)->attached, 1, memory_order_acq_rel);
    return self;
}

//  Where rank r's slot of sum k's set is.
static float *
s_slot (s_group_t *self, uint64_t k, int r)
{
    size_t slot = (size_t) ((k - 1) % 2) * self->size + r;
    return (float *) ((char *) self->map + S_HEADER_BYTES) + slot * self->floats;
}

int
za_cpu_group_sum (void *group, float *buf, size_t floats)
{
    s_group_t *self = (s_group_t *) group;
    if (!self->opened || self->buf)
        return za_error ("cpu-staged: the group is not ready for a sum");
    if (self->fail_at && (long) self->sums + 1 == self->fail_at)
        return za_error ("cpu-staged: rank %d's sum %ld fails (ZA_STAGED_GROUP)", self->rank,
                         self->fail_at);
    if (self->sums > 0 && floats != self->floats)
        return za_error ("cpu-staged: a group sums %zu floats, then %zu", self->floats, floats);
    self->floats = floats;
    if (s_map (self, S_HEADER_BYTES + 2 * (size_t) self->size * floats * sizeof (float)))
        return -1;
    self->sums++;
    memcpy (s_slot (self, self->sums, self->rank), buf, floats * sizeof (float));
    atomic_fetch_add_explicit (&s_header (self)->arrived, 1, memory_order_acq_rel);
    self->buf = buf;
    return 0;
}

int
za_cpu_group_poll (void *group)
{
    s_group_t *self = (s_group_t *) group;
    s_header_t *header = s_header (self);
    if (!self->opened) {
        if (atomic_load_explicit (&header->attached, memory_order_acquire)
            < (uint32_t) self->size)
            return 0;
        self->opened = 1;
        if (self->rank == 0)
            shm_unlink (self->name);        //  every rank has it: no name needed
        return 1;
    }
    if (!self->buf)
        return 1;
    if (atomic_load_explicit (&header->arrived, memory_order_acquire)
        < self->sums * (uint64_t) self->size)
        return 0;
    memcpy (self->buf, s_slot (self, self->sums, 0), self->floats * sizeof (float));
    for (int r = 1; r < self->size; r++) {
        const float *slot = s_slot (self, self->sums, r);
        for (size_t i = 0; i < self->floats; i++)
            self->buf [i] += slot [i];
    }
    self->buf = NULL;
    return 1;
}
