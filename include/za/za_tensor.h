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

//  BF16 (bfloat16: a float's upper 16 bits) travels on the wire alone
//  (--wire-dtype bf16); checkpoints hold F32 and I64.
typedef enum { ZA_DTYPE_F32 = 0, ZA_DTYPE_I64 = 1, ZA_DTYPE_BF16 = 2 } za_dtype_t;

//  Bytes of one element: 4 for F32, 8 for I64, 2 for BF16.
static inline size_t
za_dtype_size (za_dtype_t dtype)
{
    return dtype == ZA_DTYPE_F32? 4: dtype == ZA_DTYPE_BF16? 2: 8;
}

//  n floats to bfloat16, rounded to nearest even (a NaN stays a NaN), and
//  back (exact). `from` of za_bf16_to_f32 may be unaligned (a received frame).
void za_f32_to_bf16 (const float *from, uint16_t *to, size_t n);
void za_bf16_to_f32 (const void *from, float *to, size_t n);

//  The vector instructions zactor's own loops may use here: what the CPU
//  has, lowered by ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) as oneDNN is
//  (AVX512_CORE: no bf16; AVX2: neither), so that one setting makes this
//  CPU answer as a smaller one for oneDNN and zactor alike, and the tests
//  reach the narrower loops. Asked once a process: 1 yes, 0 no.
typedef enum { ZA_ISA_AVX512 = 0, ZA_ISA_AVX512_BF16 = 1 } za_isa_t;
int za_cpu_has (za_isa_t isa);

//  Rounds n floats in place to their nearest bf16 (the cast and back).
void za_bf16_round (float *data, size_t n);

//  The float of the bf16 at `at` (maybe unaligned), for loops that use each
//  value once (a sum) rather than widen a block first.
static inline float
za_bf16_load (const void *at)
{
    uint16_t half;
    __builtin_memcpy (&half, at, sizeof half);
    uint32_t bits = (uint32_t) half << 16;
    float value;
    __builtin_memcpy (&value, &bits, sizeof value);
    return value;
}

//  Bytes of a tensor: product (shape) * dtype size into *bytes_p. Returns 0,
//  or -1 (no error recorded) when a dim is negative or the product overflows
//  a signed 64-bit integer.
int za_tensor_bytes (za_dtype_t dtype, int ndim, const int64_t *shape, uint64_t *bytes_p);

#ifdef __cplusplus
}
#endif
#endif
