/*  za_tensor.h: the tensor descriptor every format shares: the element types
    (dtypes) a tensor may have and the byte size of a shape. The wire codec
    and the checkpoint files both speak these; neither depends on the other. */
#ifndef ZA_TENSOR_H_INCLUDED
#define ZA_TENSOR_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZA_DTYPE_F32 = 0, ZA_DTYPE_I64 = 1 } za_dtype_t;

//  Bytes of one element: 4 for F32, 8 for I64.
static inline size_t
za_dtype_size (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32? 4: 8;
}

//  Bytes of a tensor: product (shape) * dtype size into *bytes_p. Returns 0,
//  or -1 (no error recorded) when a dim is negative or the product overflows
//  a signed 64-bit integer.
int za_tensor_bytes (za_dtype_t dtype, int ndim, const int64_t *shape, uint64_t *bytes_p);

#ifdef __cplusplus
}
#endif
#endif
