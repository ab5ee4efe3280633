/*  za_cuda_nccl.h: the collectives over one process's GPUs through NCCL
    (--device cuda:all), for the CUDA back end's devices_sum and
    devices_broadcast (za_kernels.h). Internal to kernels/; not installed.  */
#ifndef ZA_CUDA_NCCL_H_INCLUDED
#define ZA_CUDA_NCCL_H_INCLUDED

#include <stddef.h>

//  As devices_sum / devices_broadcast: 0, or -1 with *why filled when
//  nothing was written (NCCL not built in, ZA_NCCL=0, or its communicators
//  do not start: the caller copies instead, and so from then on). A failure
//  after the collective started is kept for the next sync.
#ifdef ZA_HAVE_NCCL
int za_cuda_nccl_sum (float *const *bufs, const int *devices, int count, size_t floats,
                      char *why, size_t why_size);
int za_cuda_nccl_broadcast (float *const *bufs, const int *devices, int count, size_t floats,
                            char *why, size_t why_size);
//  The back end's group_* slots (za_kernels.h): NCCL between processes, a
//  communicator per process on the calling thread's GPU, non-blocking (its
//  start and its sums are polled, and aborted where a rank does not come).
//  Errors as devices_sum's: -1 / NULL with *why filled.
int za_cuda_nccl_group_id (unsigned char *id, char *why, size_t why_size);
void *za_cuda_nccl_group_open (const unsigned char *id, int rank, int size, char *why,
                               size_t why_size);
int za_cuda_nccl_group_sum (void *group, float *buf, size_t floats, char *why,
                            size_t why_size);
int za_cuda_nccl_group_poll (void *group, char *why, size_t why_size);
void za_cuda_nccl_group_close (void *group);
#else
#include <stdio.h>
static inline int
za_cuda_nccl_group_id (unsigned char *, char *why, size_t why_size)
{
    snprintf (why, why_size, "cuda: built without NCCL (-DZA_NCCL)");
    return -1;
}
static inline void *
za_cuda_nccl_group_open (const unsigned char *, int, int, char *why, size_t why_size)
{
    snprintf (why, why_size, "cuda: built without NCCL (-DZA_NCCL)");
    return NULL;
}
static inline int
za_cuda_nccl_group_sum (void *, float *, size_t, char *why, size_t why_size)
{
    snprintf (why, why_size, "cuda: built without NCCL (-DZA_NCCL)");
    return -1;
}
static inline int
za_cuda_nccl_group_poll (void *, char *why, size_t why_size)
{
    snprintf (why, why_size, "cuda: built without NCCL (-DZA_NCCL)");
    return -1;
}
static inline void
za_cuda_nccl_group_close (void *)
{
}
static inline int
za_cuda_nccl_sum (float *const *, const int *, int, size_t, char *why, size_t why_size)
{
    snprintf (why, why_size, "cuda: built without NCCL (-DZA_NCCL)");
    return -1;
}
static inline int
za_cuda_nccl_broadcast (float *const *, const int *, int, size_t, char *why, size_t why_size)
{
    snprintf (why, why_size, "cuda: built without NCCL (-DZA_NCCL)");
    return -1;
}
#endif

#endif
