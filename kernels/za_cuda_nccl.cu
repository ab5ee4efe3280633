/*  za_cuda_nccl.cu: the collectives over one process's GPUs through NCCL
    (--device cuda:all): the replicas' gradients reduced to the first GPU,
    and its values broadcast to the others, in place of copies through the
    first GPU's memory. One communicator per GPU (ncclCommInitAll), made on
    first use; each collective on a stream of its own per GPU, after the
    calling thread's work there, and waited for before it returns (the
    replicas' threads read and write the same buffers next). NCCL is opened
    on first use (dlopen): a machine without it goes by copies.          */
#include "za_cuda_nccl.h"
#include "za_cuda_util.h"

#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The NCCL calls this file makes, looked up in the library once opened.
#define S_NCCL_CALLS(X) \
    X (ncclCommInitAll) X (ncclCommDestroy) X (ncclGetErrorString) X (ncclGroupStart) \
    X (ncclGroupEnd) X (ncclReduce) X (ncclBroadcast)

static struct {
#define S_FIELD(call) decltype (&::call) call;
    S_NCCL_CALLS (S_FIELD)
#undef S_FIELD
} s_nccl;

#ifndef ZA_NCCL_PATH
#   define ZA_NCCL_PATH "libnccl.so.2"
#endif

//  Opens NCCL: the build's library, else the loader's libnccl.so.2. 0, or
//  -1 with why in `why`.
static int
s_nccl_open (char *why, size_t size)
{
    const char *paths [] = {ZA_NCCL_PATH, "libnccl.so.2"};
    void *library = NULL;
    for (int i = 0; i < 2 && !library; i++)
        library = dlopen (paths [i], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf (why, size, "cuda: NCCL does not open: %s", dlerror ());
        return -1;
    }
#define S_LOOK_UP(call)                                                                 \
    if (!(*(void **) &s_nccl.call = dlsym (library, #call))) {                          \
        snprintf (why, size, "cuda: libnccl has no %s", #call);                         \
        return -1;                                                                      \
    }
    S_NCCL_CALLS (S_LOOK_UP)
#undef S_LOOK_UP
    return 0;
}

static pthread_mutex_t s_mutex = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t s_comms [ZA_DEVICE_MAX];
static cudaStream_t s_streams [ZA_DEVICE_MAX];
static cudaEvent_t s_ready [ZA_DEVICE_MAX];
static int s_devices [ZA_DEVICE_MAX];
static int s_count;
static char s_broken [ZA_ERROR_MAX_CHARS];     //  why NCCL cannot start here: not again

static void
s_comms_free (void)
{
    for (int i = 0; i < s_count; i++) {
        cudaSetDevice (s_devices [i]);
        s_nccl.ncclCommDestroy (s_comms [i]);
        cudaStreamDestroy (s_streams [i]);
        cudaEventDestroy (s_ready [i]);
    }
    s_count = 0;
}

//  The communicators, streams and events for these devices (rank i on
//  devices [i]). 0, or -1 with s_broken said.
static int
s_comms_for (const int *devices, int count)
{
    if (s_count == count && memcmp (s_devices, devices, count * sizeof (int)) == 0)
        return 0;
    if (s_broken [0])
        return -1;
    const char *on = getenv ("ZA_NCCL");
    if (on && strcmp (on, "0") == 0) {
        snprintf (s_broken, sizeof s_broken, "cuda: NCCL is off (ZA_NCCL=0)");
        return -1;
    }
    if (!s_nccl.ncclCommInitAll && s_nccl_open (s_broken, sizeof s_broken))
        return -1;
    s_comms_free ();
    ncclResult_t rc = s_nccl.ncclCommInitAll (s_comms, count, devices);
    if (rc != ncclSuccess) {
        snprintf (s_broken, sizeof s_broken, "cuda: NCCL does not start over %d GPUs: %s",
                  count, s_nccl.ncclGetErrorString (rc));
        return -1;
    }
    for (int i = 0; i < count; i++) {
        s_devices [i] = devices [i];
        s_streams [i] = NULL;
        cudaError_t made = cudaSetDevice (devices [i]);
        if (made == cudaSuccess)
            made = cudaStreamCreateWithFlags (&s_streams [i], cudaStreamNonBlocking);
        if (made == cudaSuccess)
            made = cudaEventCreateWithFlags (&s_ready [i], cudaEventDisableTiming);
        if (made != cudaSuccess) {
            if (s_streams [i])
                cudaStreamDestroy (s_streams [i]);
            snprintf (s_broken, sizeof s_broken, "cuda:%d: no stream for NCCL: %s", devices [i],
                      cudaGetErrorString (made));
            for (int j = i; j < count; j++)
                s_nccl.ncclCommDestroy (s_comms [j]);
            s_count = i;
            s_comms_free ();
            return -1;
        }
        s_count = i + 1;
    }
    return 0;
}

//  Runs one collective per device: `op` (ncclReduce or ncclBroadcast to
//  rank 0) after the calling thread's work on each, then waits for them.
//  0, or -1 with *why when nothing was written.
template <typename Op>
static int
s_collective (const int *devices, int count, char *why, size_t why_size, const char *what,
              Op op)
{
    pthread_mutex_lock (&s_mutex);
    int home = za_cuda_self.device;
    if (s_comms_for (devices, count)) {
        snprintf (why, why_size, "%s", s_broken);
        cudaSetDevice (home);
        pthread_mutex_unlock (&s_mutex);
        return -1;
    }
    //  Each after this thread's work on its device; where that cannot be
    //  ordered, no collective (the error kept fails the step).
    int ordered = 1;
    for (int i = 0; i < count && ordered; i++)
        ordered = za_cuda_ok (cudaSetDevice (devices [i]), "cudaSetDevice")
               && za_cuda_ok (cudaEventRecord (s_ready [i], cudaStreamPerThread),
                              "cudaEventRecord")
               && za_cuda_ok (cudaStreamWaitEvent (s_streams [i], s_ready [i], 0),
                              "cudaStreamWaitEvent");
    if (!ordered) {
        cudaSetDevice (home);
        pthread_mutex_unlock (&s_mutex);
        return 0;
    }
    ncclResult_t rc = s_nccl.ncclGroupStart ();
    for (int i = 0; i < count && rc == ncclSuccess; i++)
        rc = op (i, s_comms [i], s_streams [i]);
    ncclResult_t end = s_nccl.ncclGroupEnd ();
    if (rc == ncclSuccess)
        rc = end;
    if (rc != ncclSuccess)
        za_cuda_fail (what, s_nccl.ncclGetErrorString (rc));
    for (int i = 0; i < count; i++)
        if (za_cuda_ok (cudaSetDevice (devices [i]), "cudaSetDevice"))
            za_cuda_ok (cudaStreamSynchronize (s_streams [i]), what);
    cudaSetDevice (home);
    pthread_mutex_unlock (&s_mutex);
    return 0;
}

int
za_cuda_nccl_sum (float *const *bufs, const int *devices, int count, size_t floats, char *why,
                  size_t why_size)
{
    return s_collective (devices, count, why, why_size, "ncclReduce",
                         [&] (int i, ncclComm_t comm, cudaStream_t stream) {
                             return s_nccl.ncclReduce (bufs [i], bufs [i], floats, ncclFloat, ncclSum,
                                                0, comm, stream);
                         });
}

int
za_cuda_nccl_broadcast (float *const *bufs, const int *devices, int count, size_t floats,
                        char *why, size_t why_size)
{
    return s_collective (devices, count, why, why_size, "ncclBroadcast",
                         [&] (int i, ncclComm_t comm, cudaStream_t stream) {
                             //  The source counts on rank 0 alone (in place there).
                             return s_nccl.ncclBroadcast (bufs [i], bufs [i], floats,
                                                          ncclFloat, 0, comm, stream);
                         });
}
