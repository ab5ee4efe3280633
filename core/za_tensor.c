/*  za_tensor.c: tensor sizes, checked for overflow, for every format that
    carries tensors (the wire, checkpoints).                                */
#include "za/za_tensor.h"

#include <string.h>

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

void
za_f32_to_bf16 (const float *from, uint16_t *to, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy (&u, from + i, sizeof u);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t quiet = (u >> 16) | 0x40u;
        to [i] = (uint16_t) ((u & 0x7fffffffu) > 0x7f800000u? quiet: rounded);
    }
}

void
za_bf16_to_f32 (const void *from, float *to, size_t n)
{
    const unsigned char *bytes = (const unsigned char *) from;
    for (size_t i = 0; i < n; i++)
        to [i] = za_bf16_load (bytes + 2 * i);
}
