/*  za_feature_cache.c: an open-addressing table of hashes to bf16 outputs;
    puts under a mutex, gets without one (a slot's state is written last).  */
#include "za_feature_cache.h"
#include "za/za_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_EMPTY 0u
#define SLOT_READY 2u

typedef struct {
    uint64_t key;
    uint32_t state;                     //  SLOT_*, stored last (release)
    uint32_t entry;                     //  its output's place in `outputs`
} s_slot_t;

struct za_feature_cache_t {
    const void *owner;
    int references;
    size_t floats;
    size_t capacity;                    //  slots, a power of two
    uint64_t entries_max, entries, hits;
    s_slot_t *slots;
    uint16_t *outputs;                  //  [entries_max, floats] bf16
    za_feature_cache_t *next;           //  the caches of other owners
};

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static za_feature_cache_t *s_caches;

za_feature_cache_t *
za_feature_cache_take (const void *owner, size_t floats, size_t max_bytes)
{
    pthread_mutex_lock (&s_lock);
    za_feature_cache_t *self = s_caches;
    while (self && (self->owner != owner || self->floats != floats))
        self = self->next;
    if (self) {
        self->references++;
        pthread_mutex_unlock (&s_lock);
        return self;
    }
    self = calloc (1, sizeof *self);
    uint64_t entries = floats? max_bytes / (floats * sizeof (uint16_t)): 0;
    if (entries > UINT32_MAX)
        entries = UINT32_MAX;
    size_t capacity = 1024;
    while (capacity < 2 * entries)
        capacity *= 2;
    if (self) {
        self->slots = calloc (capacity, sizeof *self->slots);
        self->outputs = malloc ((size_t) entries * floats * sizeof (uint16_t) + 1);
    }
    if (!self || !self->slots || !self->outputs) {
        if (self)
            free (self->slots), free (self->outputs);
        free (self);
        pthread_mutex_unlock (&s_lock);
        za_error ("--cache-frozen: out of memory for %llu outputs of %zu values",
                  (unsigned long long) entries, floats);
        return NULL;
    }
    self->owner = owner;
    self->references = 1;
    self->floats = floats;
    self->capacity = capacity;
    self->entries_max = entries;
    self->next = s_caches;
    s_caches = self;
    pthread_mutex_unlock (&s_lock);
    return self;
}

void
za_feature_cache_give (za_feature_cache_t **self_p)
{
    za_feature_cache_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    pthread_mutex_lock (&s_lock);
    if (--self->references == 0) {
        if (self->entries)
            za_info ("--cache-frozen: the frozen layers' output kept for %llu examples, "
                     "taken from there %llu times", (unsigned long long) self->entries,
                     (unsigned long long) self->hits);
        za_feature_cache_t **at = &s_caches;
        while (*at != self)
            at = &(*at)->next;
        *at = self->next;
        free (self->slots);
        free (self->outputs);
        free (self);
    }
    pthread_mutex_unlock (&s_lock);
}

uint64_t
za_feature_cache_key (const float *input, size_t floats)
{
    const uint8_t *bytes = (const uint8_t *) input;
    size_t size = floats * sizeof (float), words = size / 8;
    uint64_t hash = 0x9e3779b97f4a7c15ull ^ size;
    for (size_t w = 0; w < words; w++) {
        uint64_t word;
        memcpy (&word, bytes + 8 * w, sizeof word);
        hash = (hash ^ word) * 0x100000001b3ull;
        hash ^= hash >> 29;
    }
    for (size_t b = 8 * words; b < size; b++)
        hash = (hash ^ bytes [b]) * 0x100000001b3ull;
    return hash? hash: 1;
}

//  The slot of key, or the empty one where it would go (SIZE_MAX: full).
static size_t
s_find (const za_feature_cache_t *self, uint64_t key)
{
    size_t mask = self->capacity - 1;
    for (size_t probe = 0, at = (size_t) key & mask; probe < self->capacity;
         probe++, at = (at + 1) & mask) {
        const s_slot_t *slot = &self->slots [at];
        uint32_t state = __atomic_load_n (&slot->state, __ATOMIC_ACQUIRE);
        if (state == SLOT_EMPTY || __atomic_load_n (&slot->key, __ATOMIC_RELAXED) == key)
            return at;
    }
    return SIZE_MAX;
}

int
za_feature_cache_get (za_feature_cache_t *self, uint64_t key, float *out)
{
    size_t at = s_find (self, key);
    if (at == SIZE_MAX)
        return 0;
    const s_slot_t *slot = &self->slots [at];
    if (__atomic_load_n (&slot->state, __ATOMIC_ACQUIRE) != SLOT_READY
        || __atomic_load_n (&slot->key, __ATOMIC_RELAXED) != key)
        return 0;
    const uint16_t *kept = self->outputs + (size_t) slot->entry * self->floats;
    for (size_t i = 0; i < self->floats; i++) {
        uint32_t bits = (uint32_t) kept [i] << 16;
        memcpy (&out [i], &bits, sizeof bits);
    }
    __atomic_add_fetch (&self->hits, 1, __ATOMIC_RELAXED);
    return 1;
}

void
za_feature_cache_put (za_feature_cache_t *self, uint64_t key, const float *output)
{
    pthread_mutex_lock (&s_lock);
    size_t at = s_find (self, key);
    if (at != SIZE_MAX && self->slots [at].state == SLOT_EMPTY
        && self->entries < self->entries_max) {
        s_slot_t *slot = &self->slots [at];
        uint32_t entry = (uint32_t) self->entries++;
        uint16_t *kept = self->outputs + (size_t) entry * self->floats;
        for (size_t i = 0; i < self->floats; i++) {
            uint32_t bits;
            memcpy (&bits, &output [i], sizeof bits);
            //  Rounded to the nearest bf16, ties to even.
            kept [i] = (uint16_t) ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        }
        __atomic_store_n (&slot->key, key, __ATOMIC_RELAXED);
        slot->entry = entry;
        __atomic_store_n (&slot->state, SLOT_READY, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock (&s_lock);
}

void
za_feature_cache_stats (const za_feature_cache_t *self, uint64_t *hits, uint64_t *entries)
{
    *hits = __atomic_load_n (&self->hits, __ATOMIC_RELAXED);
    *entries = __atomic_load_n (&self->entries, __ATOMIC_RELAXED);
}
