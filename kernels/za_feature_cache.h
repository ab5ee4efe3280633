/*  za_feature_cache.h: what a frozen base made of an example, kept (as
    bf16) by a hash of the example's input, shared by every thread's state
    of one model (the stack spec is its owner). The stack's --cache-frozen:
    Keras users' "feature extraction", as a flag. Private to kernels/.      */
#ifndef ZA_FEATURE_CACHE_H_INCLUDED
#define ZA_FEATURE_CACHE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

typedef struct za_feature_cache_t za_feature_cache_t;

//  The cache of `owner` for outputs of `floats` values, made on the first
//  call (at most max_bytes of them), shared after: each call takes a
//  reference. NULL with an error when out of memory.
za_feature_cache_t *za_feature_cache_take (const void *owner, size_t floats, size_t max_bytes);
//  Gives a reference back; the last frees the cache.
void za_feature_cache_give (za_feature_cache_t **self_p);

//  The hash of an example's input (nonzero).
uint64_t za_feature_cache_key (const float *input, size_t floats);

//  1 and the output of `key` into out; 0 when it is not kept. Lock-free.
int za_feature_cache_get (za_feature_cache_t *self, uint64_t key, float *out);
//  Keeps the output of `key` (nothing when full or already kept).
void za_feature_cache_put (za_feature_cache_t *self, uint64_t key, const float *output);

//  How many gets found their output, and how many outputs are kept.
void za_feature_cache_stats (const za_feature_cache_t *self, uint64_t *hits,
                             uint64_t *entries);

#endif
