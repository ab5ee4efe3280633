/*  za_tensor.c: tensor sizes, checked for overflow, for every format that
    carries tensors (the wire, checkpoints).                                */
#include "za/za_tensor.h"

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
