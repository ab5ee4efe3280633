/*  za_cpu_dnnl.h: the CPU's convolutions through oneDNN where it is built
    in (-DZA_DNNL, Debian's libdnnl-dev), in fp32 or bf16 (`precision`: the
    inputs' type, FP32 or BF16, FP16 declined; results and gradients are
    fp32 either way), and bf16 matmuls. Internal to kernels/.               */
#ifndef ZA_CPU_DNNL_H_INCLUDED
#define ZA_CPU_DNNL_H_INCLUDED

#include "za/za_kernels.h"

//  out = act (conv (in, kernel) + bias), NHWC in and out, HWIO kernel, on
//  the calling thread alone. Returns 0, or -1 when oneDNN is not built in,
//  is switched off (ZA_DNNL=0 in the environment), or cannot do this
//  geometry: then nothing was promised about out and the caller computes it.
int za_cpu_dnnl_conv2d_forward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                                const float *bias, za_act_t act, float *out,
                                za_precision_t precision);

//  dkernel += the kernel's gradient for dout (already masked by the ReLU)
//  when dkernel is not NULL, and din = the input's gradient when din is not
//  NULL. 0, or -1 as above, before dkernel changed (din may hold part: the
//  caller computes it again).
int za_cpu_dnnl_conv2d_backward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                                 za_act_t act, const float *dout, float *dkernel, float *din,
                                 za_precision_t precision);

//  c [m, n] = (or += with accumulate) op (a) [m, k] @ op (b) [k, n], where
//  op (a) is a as stored (row-major [m, k]) or, with ta, its transpose
//  (a stored [k, m]); b alike. BF16 only (a and b cast, c fp32). 0, or -1
//  as above, before c changed.
int za_cpu_dnnl_matmul (int m, int k, int n, const float *a, int ta, const float *b, int tb,
                        int accumulate, float *c, za_precision_t precision);

//  za_cpu_dnnl_matmul in bf16 with each of a and b given in fp32 (cast
//  here; its *16 NULL) or already in bf16 (a16, b16).
int za_cpu_dnnl_matmul_mixed (int m, int k, int n, const float *a, const uint16_t *a16, int ta,
                              const float *b, const uint16_t *b16, int tb, int accumulate,
                              float *c);

//  1 where oneDNN multiplies bf16 on AMX's tiles (DNNL_MAX_CPU_ISA can lower it).
int za_cpu_dnnl_amx (void);

//  1 where oneDNN computes bf16 with this CPU's own instructions
//  (AVX512-BF16 or AMX; DNNL_MAX_CPU_ISA in the environment can lower it).
int za_cpu_dnnl_bf16_native (void);

//  1 when this thread computes convolutions through oneDNN.
int za_cpu_dnnl_on (void);

#endif
