/*  za_cpu_ways.h: what the files of the CPU's convolution share: one pass
    of a call as a way takes it, the ways of each file (za_cpu_direct.c,
    za_cpu_gemm.c; za_cpu_conv.c's tables order them), a thread's buffers
    and rounded copies, the mask of an activation's gradient, and the trace
    (za_cpu_ways.c; the mask is za_cpu_gemm.c's, dense's too).
    Internal to kernels/; not installed.                                    */
#ifndef ZA_CPU_WAYS_H_INCLUDED
#define ZA_CPU_WAYS_H_INCLUDED

#include "za/za_kernels.h"

//  One pass of one convolution, as a way takes it: the entry's arguments
//  and the precision of its products. Forward: in, kernel, bias, act, cols
//  (the im2col matrix, the way's to fill), out. Backward: also dout, dkernel
//  (+=), dbias (+=), dcols (scratch), din (NULL: not asked).
typedef struct {
    za_precision_t precision;
    const za_conv2d_dims_t *d;
    const float *in, *kernel, *bias, *out_values;   //  out_values: the forward's out
    za_act_t act;
    float *cols, *out;
    float *dout, *dkernel, *dbias, *dcols, *din;
} za_cpu_conv_t;

//  A way: 0 when it did the whole pass, -1 when it does not take this
//  geometry, precision or CPU (nothing written).
typedef int (za_cpu_conv_fn) (const za_cpu_conv_t *call);

//  The ways of other files, in the tables' order (za_cpu_conv.c has the
//  oneDNN and AMX ones):
//  za_cpu_direct.c: a 3x3 kernel on one channel, AVX-512 (fp32 and bf16;
//  backward where no input gradient is asked).
za_cpu_conv_fn za_cpu_direct_forward;
za_cpu_conv_fn za_cpu_direct_backward;
//  1 when those loops take d in precision (za_cpu_ways.c, for
//  za_cpu_gemm.c to know too): a 3x3 kernel on one channel, up to
//  DIRECT_OC_MAX output channels, DIRECT_LANES (one AVX-512 register of
//  floats) at a time.
#define DIRECT_LANES 16
#define DIRECT_OC_MAX 64
int za_cpu_direct_takes (const za_conv2d_dims_t *d, za_precision_t precision);
//  za_cpu_gemm.c, over the im2col matrix: patches of at most 32 values
//  (the small-K loops); any patch (one OpenBLAS sgemm); a bf16 backward on
//  planes of at most 16 outputs (oneDNN's matmuls); any mixed backward
//  (rounded inputs, fp32 products). Backward ways take dout masked.
za_cpu_conv_fn za_cpu_small_k_forward;
za_cpu_conv_fn za_cpu_im2col_forward;
za_cpu_conv_fn za_cpu_im2col_backward;
za_cpu_conv_fn za_cpu_small_plane_backward;
za_cpu_conv_fn za_cpu_rounded_im2col_backward;

//  ZA_CONV_TRACE=1: 1 when asked to say which way takes each layer's pass
//  (read once); and the saying, once per layer and pass: "conv2d
//  16x13x13x32 -> 64, 3x3, stride 1, bf16, backward: oneDNN".
int za_cpu_conv_tracing (void);
void za_cpu_conv_trace (const za_conv2d_dims_t *d, za_precision_t precision, int backward,
                        int input_gradient, const char *way);

//  This thread's buffer `slot` (0 to 3: 0 and 1 rounded inputs and
//  kernels, 2 and 3 the direct loops' plane and pairs), of n floats at
//  least, or NULL. Its own until the thread ends.
float *za_cpu_buffer (int slot, size_t n);

//  x rounded to the precision, in this thread's buffer `slot` (0 or 1);
//  x itself where no memory is left for the copy (then fp32 it is).
const float *za_cpu_rounded (int slot, const float *x, size_t n, za_precision_t precision);

//  Masks dout [rows, units] by the activation's derivative at out, then
//  dbias += its column sums.
void za_cpu_act_bias_backward (size_t rows, int units, const float *out, za_act_t act,
                               float *dout, float *dbias);

#endif
