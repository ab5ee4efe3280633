/*  bench_ring.c: the all-reduce ring alone, N processes on this machine.

    bench_ring BYTES [ITERS] [RANKS] [TRANSPORT] [CHUNK_FLOATS]
    forks RANKS (2) processes that all-reduce (mean) a block of BYTES
    floats ITERS (200) times after 20 warm-up rounds, over TRANSPORT
    (tcp on 127.0.0.1, as between hosts: a tcp connection of the link's own
    unless ZA_SHM_DISABLE=1, the line says tcp-direct when it did; or ipc:
    what the ring takes for a loopback neighbour by default, which turns to
    shared memory unless ZA_SHM_DISABLE=1: the line says shm), in chunks of
    CHUNK_FLOATS (0: the ring's default), and prints from rank 0
      ring bytes=B ranks=N transport=T dtype=D median_us=M mean_us=A min_us=L busbw_gbps=G
    bus bandwidth as NCCL counts it: 2 (N-1)/N x bytes / time (BYTES are the
    f32 block's whatever the dtype). ZA_WIRE_DTYPE=bf16: the chunks travel as
    bf16 (--wire-dtype bf16). ZA_RING_RANK=R with ZA_RING_ENDPOINTS=E0,E1,..
    runs rank R alone, for rings across hosts or network namespaces
    (bench/wire_link.sh).
    bench/allreduce.sh runs it against Open MPI and torch.distributed gloo.  */
#include "za/za_ring.h"
#include "za/za_util.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 8
#define WARMUP 20

static int
s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || bind (fd, (struct sockaddr *) &addr, sizeof addr)
        || getsockname (fd, (struct sockaddr *) &addr, &len))
        exit (1);
    close (fd);
    return ntohs (addr.sin_port);
}

static int
s_compare (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static size_t s_chunk_floats;
static int s_tcp_only;
static za_dtype_t s_dtype;          //  ZA_WIRE_DTYPE=bf16: the chunks in bf16

static int
s_rank (int rank, int ranks, char endpoints [][64], size_t floats, int iters)
{
    za_ring_config_t config = {
        .rank = rank, .size = ranks, .bind = endpoints [rank],
        .right = endpoints [(rank + 1) % ranks], .timeout_secs = 30,
        .chunk_floats = s_chunk_floats, .tcp_only = s_tcp_only, .wire_dtype = s_dtype,
    };
    za_ring_t *ring = za_ring_new (&config);
    float *data = (float *) malloc ((floats + 1) * sizeof (float));
    double *times = (double *) malloc ((size_t) iters * sizeof (double));
    if (!ring || !data || !times)
        return 1;
    for (size_t i = 0; i < floats; i++)
        data [i] = (float) (rank + 1) * 0.001f * (float) (i % 1000);
    for (int r = 0; r < WARMUP + iters; r++) {
        double start = za_clock_mono ();
        if (za_ring_allreduce_mean (ring, data, floats, r + 1)) {
            fprintf (stderr, "rank %d: %s\n", rank, za_last_error ());
            return 1;
        }
        if (r >= WARMUP)
            times [r - WARMUP] = za_clock_mono () - start;
    }
    if (rank == 0) {
        double sum = 0;
        for (int i = 0; i < iters; i++)
            sum += times [i];
        qsort (times, (size_t) iters, sizeof times [0], s_compare);
        double median = times [iters / 2];
        double bytes = (double) floats * sizeof (float);
        int direct = za_ring_direct_links (ring) == 2;
        printf ("ring bytes=%.0f ranks=%d transport=%s dtype=%s median_us=%.1f mean_us=%.1f "
                "min_us=%.1f busbw_gbps=%.3f\n", bytes, ranks,
                s_tcp_only? (direct? "tcp-direct": "tcp"): direct? "shm": "ipc",
                s_dtype == ZA_DTYPE_BF16? "bf16": "f32", median * 1e6,
                sum / iters * 1e6, times [0] * 1e6,
                2.0 * (ranks - 1) / ranks * bytes / median / 1e9);
    }
    za_ring_destroy (&ring);
    free (data);
    free (times);
    return 0;
}

int
main (int argc, char **argv)
{
    if (argc < 2) {
        fprintf (stderr, "usage: bench_ring BYTES [ITERS] [RANKS] [tcp|ipc] [CHUNK_FLOATS]\n");
        return 2;
    }
    size_t floats = (size_t) atol (argv [1]) / sizeof (float);
    int iters = argc > 2? atoi (argv [2]): 200;
    int ranks = argc > 3? atoi (argv [3]): 2;
    //  tcp: over tcp (the ring would take ipc for 127.0.0.1); ipc: the
    //  ring's own choice for a loopback neighbour (ipc://@zactor-ring-PORT).
    int ipc = argc > 4 && streq (argv [4], "ipc");
    s_tcp_only = !ipc;
    s_chunk_floats = argc > 5? (size_t) atol (argv [5]): 0;
    const char *dtype = getenv ("ZA_WIRE_DTYPE");
    s_dtype = dtype && streq (dtype, "bf16")? ZA_DTYPE_BF16: ZA_DTYPE_F32;
    if (ranks < 1 || ranks > MAX_RANKS || iters < 1)
        return 2;
    char endpoints [MAX_RANKS][64];
    //  One rank of a ring across hosts (or network namespaces): ZA_RING_RANK
    //  and ZA_RING_ENDPOINTS (every rank's, comma-separated) run just it.
    const char *list = getenv ("ZA_RING_ENDPOINTS"), *one = getenv ("ZA_RING_RANK");
    if (list && one) {
        int count = 0;
        for (const char *at = list; *at && count < MAX_RANKS; count++) {
            size_t len = strcspn (at, ",");
            snprintf (endpoints [count], sizeof endpoints [count], "%.*s", (int) len, at);
            at += len + (at [len] == ',');
        }
        int rank = atoi (one);
        if (count != ranks || rank < 0 || rank >= ranks) {
            fprintf (stderr, "bench_ring: ZA_RING_ENDPOINTS names %d ranks, RANKS is %d\n",
                     count, ranks);
            return 2;
        }
        return s_rank (rank, ranks, endpoints, floats, iters);
    }
    for (int r = 0; r < ranks; r++) {
        snprintf (endpoints [r], sizeof endpoints [r], "tcp://127.0.0.1:%d", s_free_port ());
    }
    //  Fork before any ZeroMQ context exists.
    pid_t pids [MAX_RANKS];
    for (int r = 1; r < ranks; r++) {
        pids [r] = fork ();
        if (pids [r] == 0)
            return s_rank (r, ranks, endpoints, floats, iters);
    }
    int rc = s_rank (0, ranks, endpoints, floats, iters);
    for (int r = 1; r < ranks; r++) {
        int status;
        waitpid (pids [r], &status, 0);
        if (!WIFEXITED (status) || WEXITSTATUS (status))
            rc = 1;
    }
    return rc;
}
