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
//  ... and for groups of processes (NCCL 2.14 and later): looked up apart,
//  so that an older library still serves the GPUs of one process.
#define S_NCCL_GROUP_CALLS(X) \
    X (ncclGetUniqueId) X (ncclCommInitRankConfig) X (ncclCommGetAsyncError)              \
    X (ncclAllReduce) X (ncclCommAbort)

static struct {
#define S_FIELD(call) decltype (&::call) call;
    S_NCCL_CALLS (S_FIELD)
    S_NCCL_GROUP_CALLS (S_FIELD)
#undef S_FIELD
} s_nccl;
static void *s_library;
static char s_group_broken [ZA_ERROR_MAX_CHARS];   //  why there are no groups: not again

#ifndef ZA_NCCL_PATH
#   define ZA_NCCL_PATH "libnccl.so.2"
#endif

//  Opens NCCL: the build's library, else the loader's libnccl.so.2. 0, or
//  -1 with why in `why`.
static int
s_nccl_open (char *why, size_t size)
{
    const char *paths [] = {ZA_NCCL_PATH, "libnccl.so.2"};
    for (int i = 0; i < 2 && !s_library; i++)
        s_library = dlopen (paths [i], RTLD_NOW | RTLD_LOCAL);
    if (!s_library) {
        snprintf (why, size, "cuda: NCCL does not open: %s", dlerror ());
        return -1;
    }
#define S_LOOK_UP(call)                                                                 \
    if (!(*(void **) &s_nccl.call = dlsym (s_library, #call))) {                        \
        snprintf (why, size, "cuda: libnccl has no %s", #call);                         \
        s_nccl.ncclCommInitAll = NULL;                                                  \
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

// ---------------------------------------------------------------------------
//  Groups of processes (the back end's group_* slots): a communicator per
//  process, non-blocking, so that its start and its sums are polled (the
//  caller watches its ring meanwhile) and aborted where a rank does not come.

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;            //  the sums', after the caller's work
    cudaEvent_t ready, done;
    int device;
    int opened;                     //  the communicator is up
    int summing;                    //  1: a sum asked, not yet queued; 2: queued
} s_group_t;

//  NCCL's calls for groups, looked up once (a failure is kept: not again),
//  unless ZA_NCCL=0. 0, or -1 with why.
static int
s_nccl_ready (char *why, size_t why_size)
{
    pthread_mutex_lock (&s_mutex);
    const char *on = getenv ("ZA_NCCL");
    if (on && strcmp (on, "0") == 0)
        snprintf (s_group_broken, sizeof s_group_broken, "cuda: NCCL is off (ZA_NCCL=0)");
    if (!s_group_broken [0] && !s_nccl.ncclCommInitRankConfig
        && (s_nccl.ncclCommInitAll || s_nccl_open (s_group_broken, sizeof s_group_broken) == 0)) {
#define S_LOOK_UP(call)                                                                 \
        if (!s_group_broken [0]                                                         \
            && !(*(void **) &s_nccl.call = dlsym (s_library, #call)))                   \
            snprintf (s_group_broken, sizeof s_group_broken,                            \
                      "cuda: libnccl has no %s (groups of processes need NCCL 2.14 or later)", \
                      #call);
        S_NCCL_GROUP_CALLS (S_LOOK_UP)
#undef S_LOOK_UP
        if (s_group_broken [0])
            s_nccl.ncclCommInitRankConfig = NULL;
    }
    int rc = 0;
    if (s_group_broken [0]) {
        snprintf (why, why_size, "%s", s_group_broken);
        rc = -1;
    }
    pthread_mutex_unlock (&s_mutex);
    return rc;
}

int
za_cuda_nccl_group_id (unsigned char *id, char *why, size_t why_size)
{
    if (s_nccl_ready (why, why_size))
        return -1;
    ncclUniqueId unique;
    ncclResult_t rc = s_nccl.ncclGetUniqueId (&unique);
    if (rc != ncclSuccess) {
        snprintf (why, why_size, "cuda: NCCL has no id for a group: %s",
                  s_nccl.ncclGetErrorString (rc));
        return -1;
    }
    static_assert (sizeof unique == ZA_GROUP_ID_BYTES, "NCCL's id is ZA_GROUP_ID_BYTES");
    memcpy (id, &unique, sizeof unique);
    return 0;
}

void
za_cuda_nccl_group_close (void *group)
{
    s_group_t *self = (s_group_t *) group;
    if (!self)
        return;
    cudaSetDevice (self->device);
    if (self->comm)
        s_nccl.ncclCommAbort (self->comm);     //  ends what runs; frees it
    if (self->stream)
        cudaStreamDestroy (self->stream);
    if (self->ready)
        cudaEventDestroy (self->ready);
    if (self->done)
        cudaEventDestroy (self->done);
    free (self);
}

void *
za_cuda_nccl_group_open (const unsigned char *id, int rank, int size, char *why,
                         size_t why_size)
{
    if (s_nccl_ready (why, why_size))
        return NULL;
    s_group_t *self = (s_group_t *) calloc (1, sizeof *self);
    if (!self) {
        snprintf (why, why_size, "cuda: out of memory");
        return NULL;
    }
    self->device = za_cuda_self.device;
    cudaError_t made = cudaSetDevice (self->device);
    if (made == cudaSuccess)
        made = cudaStreamCreateWithFlags (&self->stream, cudaStreamNonBlocking);
    if (made == cudaSuccess)
        made = cudaEventCreateWithFlags (&self->ready, cudaEventDisableTiming);
    if (made == cudaSuccess)
        made = cudaEventCreateWithFlags (&self->done, cudaEventDisableTiming);
    if (made != cudaSuccess) {
        snprintf (why, why_size, "cuda:%d: no stream for NCCL: %s", self->device,
                  cudaGetErrorString (made));
        za_cuda_nccl_group_close (self);
        return NULL;
    }
    ncclUniqueId unique;
    memcpy (&unique, id, sizeof unique);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = s_nccl.ncclCommInitRankConfig (&self->comm, size, unique, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        snprintf (why, why_size, "cuda:%d: NCCL does not start rank %d of %d: %s", self->device,
                  rank, size, s_nccl.ncclGetErrorString (rc));
        za_cuda_nccl_group_close (self);
        return NULL;
    }
    return self;
}

int
za_cuda_nccl_group_sum (void *group, float *buf, size_t floats, char *why, size_t why_size)
{
    s_group_t *self = (s_group_t *) group;
    if (!self->opened || self->summing) {
        snprintf (why, why_size, "cuda: the group is not ready for a sum");
        return -1;
    }
    cudaError_t ordered = cudaEventRecord (self->ready, cudaStreamPerThread);
    if (ordered == cudaSuccess)
        ordered = cudaStreamWaitEvent (self->stream, self->ready, 0);
    if (ordered != cudaSuccess) {
        snprintf (why, why_size, "cuda:%d: the group's sum cannot follow the step: %s",
                  self->device, cudaGetErrorString (ordered));
        return -1;
    }
    ncclResult_t rc = s_nccl.ncclAllReduce (buf, buf, floats, ncclFloat, ncclSum, self->comm,
                                            self->stream);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        snprintf (why, why_size, "cuda:%d: ncclAllReduce: %s", self->device,
                  s_nccl.ncclGetErrorString (rc));
        return -1;
    }
    self->summing = 1;
    return 0;
}

int
za_cuda_nccl_group_poll (void *group, char *why, size_t why_size)
{
    s_group_t *self = (s_group_t *) group;
    ncclResult_t state;
    ncclResult_t rc = s_nccl.ncclCommGetAsyncError (self->comm, &state);
    if (rc == ncclSuccess && state == ncclInProgress)
        return 0;
    if (rc != ncclSuccess || state != ncclSuccess) {
        snprintf (why, why_size, "cuda:%d: NCCL's group failed: %s", self->device,
                  s_nccl.ncclGetErrorString (rc != ncclSuccess? rc: state));
        return -1;
    }
    self->opened = 1;
    if (self->summing == 1) {
        //  Queued now: its end is the event's.
        cudaError_t recorded = cudaEventRecord (self->done, self->stream);
        if (recorded != cudaSuccess) {
            snprintf (why, why_size, "cuda:%d: cudaEventRecord: %s", self->device,
                      cudaGetErrorString (recorded));
            return -1;
        }
        self->summing = 2;
    }
    if (self->summing == 2) {
        cudaError_t done = cudaEventQuery (self->done);
        if (done == cudaErrorNotReady)
            return 0;
        if (done != cudaSuccess) {
            snprintf (why, why_size, "cuda:%d: the group's sum failed: %s", self->device,
                      cudaGetErrorString (done));
            return -1;
        }
        self->summing = 0;
    }
    return 1;
}
