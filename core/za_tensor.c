/*  za_tensor.c: tensor sizes, checked for overflow, for every format that
    carries tensors (the wire, checkpoints), and the casts between fp32 and
    bf16 (the wire's --wire-dtype bf16, mixed_bfloat16's inputs).           */
#include "za/za_tensor.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined (__x86_64__) && defined (__AVX2__)
#include <immintrin.h>
#endif

int
za_tensor_bytes (za_dtype_t dtype, int ndim, const int64_t *shape, uint64_t *bytes_p)
{
    uint64_t count = 1;
    for (int dim = 0; dim < ndim; dim++) {
        if (shape [dim] < 0)
            return -1;
        if (__builtin_mul_overflow (count, (uint64_t) shape [dim], &count))
            return -1;
    }
    if (__builtin_mul_overflow (count, (uint64_t) za_dtype_size (dtype), &count))
        return -1;
    if (count > (uint64_t) INT64_MAX)
        return -1;
    *bytes_p = count;
    return 0;
}

//  One float's bf16: round to nearest even on the bits; a NaN is kept a
//  (quiet) NaN rather than rounded into an infinity.
static inline uint16_t
s_bf16_of (const float *from)
{
    uint32_t u;
    memcpy (&u, from, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t) ((u & 0x7fffffffu) > 0x7f800000u? quiet: rounded);
}

#if defined (__x86_64__) && defined (__AVX2__)
//  The vector casts give the bits s_bf16_of gives, value for value: the
//  ring's ranks must round alike whatever CPU each one runs on.
//  AVX512-BF16's vcvtneps2bf16 rounds the same way except that it takes a
//  subnormal input as zero: a block of 16 that holds one goes value by value.
__attribute__ ((target ("avx512f,avx512vl,avx512bf16")))
static size_t
s_to_bf16_avx512 (const float *from, uint16_t *to, size_t n)
{
    const __m512i exponent = _mm512_set1_epi32 (0x7f800000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps (from + i);
        if (_mm512_testn_epi32_mask (_mm512_castps_si512 (x), exponent)
            & _mm512_test_epi32_mask (_mm512_castps_si512 (x), _mm512_set1_epi32 (0x7fffff))) {
            for (size_t k = i; k < i + 16; k++)
                to [k] = s_bf16_of (from + k);
            continue;
        }
        __m256bh low = _mm512_cvtneps_pbh (x);
        memcpy (to + i, &low, sizeof low);
    }
    return i;
}

//  AVX2: the scalar formula 8 lanes at a time, two vectors packed to 16.
static size_t
s_to_bf16_avx2 (const float *from, uint16_t *to, size_t n)
{
    const __m256i bias = _mm256_set1_epi32 (0x7fff), one = _mm256_set1_epi32 (1);
    const __m256i magnitude = _mm256_set1_epi32 (0x7fffffff);
    const __m256i infinity = _mm256_set1_epi32 (0x7f800000), quiet = _mm256_set1_epi32 (0x40);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i half [2];
        for (int k = 0; k < 2; k++) {
            __m256i u = _mm256_loadu_si256 ((const __m256i *) (from + i + 8 * k));
            __m256i high = _mm256_srli_epi32 (u, 16);
            __m256i rounded = _mm256_srli_epi32 (
                _mm256_add_epi32 (_mm256_add_epi32 (u, bias), _mm256_and_si256 (high, one)), 16);
            __m256i nan = _mm256_cmpgt_epi32 (_mm256_and_si256 (u, magnitude), infinity);
            half [k] = _mm256_blendv_epi8 (rounded, _mm256_or_si256 (high, quiet), nan);
        }
        //  packus works within 128-bit lanes: put the quarters back in order.
        __m256i packed = _mm256_permute4x64_epi64 (_mm256_packus_epi32 (half [0], half [1]), 0xd8);
        _mm256_storeu_si256 ((__m256i *) (to + i), packed);
    }
    return i;
}

#endif

//  What ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) allows, as oneDNN reads
//  it: ALL, or a name at or above the level (AVX512_CORE_BF16, AMX_BF16,
//  AVX10_1_512, ...). Unset is ALL.
static int
s_isa_allows (za_isa_t isa)
{
    const char *env = getenv ("ONEDNN_MAX_CPU_ISA");
    if (!env || !*env)
        env = getenv ("DNNL_MAX_CPU_ISA");
    if (!env || !*env)
        return 1;
    char name [64];
    snprintf (name, sizeof name, "%s", env);
    for (char *c = name; *c; c++)
        *c = (char) toupper ((unsigned char) *c);
    if (strcmp (name, "ALL") == 0 || strstr (name, "AMX") || strncmp (name, "AVX10", 5) == 0)
        return 1;
    if (isa == ZA_ISA_AVX512_BF16)
        return strstr (name, "BF16") || strstr (name, "FP16");
    return strncmp (name, "AVX512", 6) == 0;
}

int
za_cpu_has (za_isa_t isa)
{
    static int answer [2] = {-1, -1};
    int known = __atomic_load_n (&answer [isa], __ATOMIC_RELAXED);
    if (known >= 0)
        return known;
    known = 0;
#if defined (__x86_64__)
    if (s_isa_allows (isa))
        known = isa == ZA_ISA_AVX512_BF16? __builtin_cpu_supports ("avx512bf16") != 0
                                         : __builtin_cpu_supports ("avx512f") != 0;
#endif
    __atomic_store_n (&answer [isa], known, __ATOMIC_RELAXED);
    return known;
}

void
za_f32_to_bf16 (const float *from, uint16_t *to, size_t n)
{
    size_t i = 0;
#if defined (__x86_64__) && defined (__AVX2__)
    i = za_cpu_has (ZA_ISA_AVX512_BF16)? s_to_bf16_avx512 (from, to, n): s_to_bf16_avx2 (from, to, n);
#endif
    for (; i < n; i++)
        to [i] = s_bf16_of (from + i);
}

void
za_bf16_to_f32 (const void *from, float *to, size_t n)
{
    const unsigned char *bytes = (const unsigned char *) from;
    for (size_t i = 0; i < n; i++)
        to [i] = za_bf16_load (bytes + 2 * i);
}

#define S_ROUND_BLOCK 1024

void
za_bf16_round (float *data, size_t n)
{
    uint16_t half [S_ROUND_BLOCK];
    for (size_t at = 0; at < n; at += S_ROUND_BLOCK) {
        size_t len = n - at < S_ROUND_BLOCK? n - at: S_ROUND_BLOCK;
        za_f32_to_bf16 (data + at, half, len);
        za_bf16_to_f32 (half, data + at, len);
    }
}
