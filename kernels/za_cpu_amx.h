/*  za_cpu_amx.h: zactor's own loops on AMX's tiles (Intel's matrix units:
    bf16 products summed in fp32), where they measure faster than oneDNN's
    primitives. Internal to kernels/; not installed.                        */
#ifndef ZA_CPU_AMX_H_INCLUDED
#define ZA_CPU_AMX_H_INCLUDED

#include "za/za_kernels.h"

//  The bytes of scratch za_cpu_amx_conv2d_backward takes for this geometry
//  where it computes it on this thread, else 0: oneDNN is on and
//  multiplies bf16 on AMX here (DNNL_MAX_CPU_ISA can lower it), Linux lets
//  the process use the tiles, ZA_AMX is not 0 in the environment; a stride
//  of 1, channels and filters in multiples of 32, and the copies its kernel
//  gradient sweeps within a core's L2 (2 MiB).
size_t za_cpu_amx_conv2d_scratch (const za_conv2d_dims_t *d);

//  A convolution's backward where za_cpu_amx_conv2d_scratch is not 0: dkernel
//  (HWIO) += the kernel's gradient, and din (NHWC) = the input's where din
//  is not NULL, from the input (NHWC), the kernel and the output's gradient
//  (NHWC, masked by the activation already), all rounded to bf16 into
//  `scratch` (that many bytes, 64-byte aligned), the products
//  summed in fp32.
void za_cpu_amx_conv2d_backward (const za_conv2d_dims_t *d, const float *in,
                                 const float *kernel, const float *dout, float *dkernel,
                                 float *din, void *scratch);

#endif
