/*  za_cuda_util.cu: the CUDA back end's per-thread state and the checks that
    keep its first error until the step's sync reports it.                 */
#include "za_cuda_util.h"

#include <stdio.h>

//  cuBLAS's workspace per handle (NVIDIA suggests 32 MiB on Hopper; it is
//  never freed, as the handle is not).
#define BLAS_WORKSPACE_BYTES ((size_t) 32 << 20)

thread_local za_cuda_thread_t za_cuda_self;
int za_cuda_tf32 = 1;

void
za_cuda_fail (const char *what, const char *why)
{
    if (!za_cuda_self.error [0])
        snprintf (za_cuda_self.error, sizeof za_cuda_self.error, "cuda:%d: %s failed: %s",
                  za_cuda_self.device, what, why);
}

int
za_cuda_ok (cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return 1;
    za_cuda_fail (what, cudaGetErrorString (rc));
    return 0;
}

void
za_cuda_blas_ok (cublasStatus_t rc, const char *what)
{
    if (rc != CUBLAS_STATUS_SUCCESS) {
        char why [64];
        snprintf (why, sizeof why, "cuBLAS status %d", (int) rc);
        za_cuda_fail (what, why);
    }
}

void
za_cuda_launched (const char *what)
{
    za_cuda_ok (cudaGetLastError (), what);
}

cublasHandle_t
za_cuda_blas (void)
{
    za_cuda_thread_t *self = &za_cuda_self;
    int device = self->device;
    if (!self->blas [device]) {
        cublasStatus_t status = cublasCreate (&self->blas [device]);
        if (status != CUBLAS_STATUS_SUCCESS) {
            self->blas [device] = NULL;
            za_cuda_blas_ok (status, "cublasCreate");
            return NULL;
        }
        cublasSetStream (self->blas [device], cudaStreamPerThread);
        //  cuBLAS works in a workspace of its handle's, made here: never
        //  inside a CUDA graph's recording (as PyTorch gives each handle one).
        void *workspace = NULL;
        if (cudaMalloc (&workspace, BLAS_WORKSPACE_BYTES) == cudaSuccess)
            cublasSetWorkspace (self->blas [device], workspace, BLAS_WORKSPACE_BYTES);
        cudaGetLastError ();
    }
    return self->blas [device];
}

unsigned
za_cuda_blocks (size_t count)
{
    size_t blocks = (count + BLOCK_THREADS - 1) / BLOCK_THREADS;
    return (unsigned) (blocks < 1? 1: blocks > GRID_BLOCKS_MAX? GRID_BLOCKS_MAX: blocks);
}

void *
za_cuda_room (void **buffer, size_t *have, size_t bytes, const char *what)
{
    if (bytes <= *have)
        return *buffer;
    if (za_cuda_self.recording) {
        za_cuda_fail ("a CUDA graph's recording", "a scratch buffer had to grow");
        return NULL;
    }
    void *bigger = NULL;
    cudaError_t rc = cudaMalloc (&bigger, bytes);
    if (rc != cudaSuccess) {
        cudaGetLastError ();
        if (what)
            za_cuda_fail (what, cudaGetErrorString (rc));
        return NULL;
    }
    cudaFree (*buffer);
    *buffer = bigger;
    *have = bytes;
    za_cuda_self.scratch_generation++;
    return bigger;
}

__global__ void
za_cuda_cast_down (za_precision_t q, size_t count, const float *x, void *y)
{
    FOR_EACH (i, count)
        za_cuda_store (q, y, i, x [i]);
}

__global__ void
za_cuda_cast_up (za_precision_t q, size_t count, const void *y, float *x)
{
    FOR_EACH (i, count)
        x [i] = za_cuda_load (q, y, i);
}
