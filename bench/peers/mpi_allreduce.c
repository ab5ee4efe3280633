/*  mpi_allreduce.c: Open MPI's MPI_Allreduce (sum, then the mean) of a float
    block, the peer of bench_ring. Built by bench/allreduce.sh with mpicc.
    mpirun -np 2 mpi_allreduce BYTES [ITERS]; rank 0 prints
      mpi bytes=B ranks=N median_us=M mean_us=A min_us=L busbw_gbps=G         */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WARMUP 20

static int
s_compare (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int
main (int argc, char **argv)
{
    MPI_Init (&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank (MPI_COMM_WORLD, &rank);
    MPI_Comm_size (MPI_COMM_WORLD, &ranks);
    size_t floats = (size_t) atol (argv [1]) / sizeof (float);
    int iters = argc > 2? atoi (argv [2]): 200;
    float *data = malloc ((floats + 1) * sizeof (float));
    double *times = malloc ((size_t) iters * sizeof (double));
    for (size_t i = 0; i < floats; i++)
        data [i] = (float) (rank + 1) * 0.001f * (float) (i % 1000);
    for (int r = 0; r < WARMUP + iters; r++) {
        double start = MPI_Wtime ();
        MPI_Allreduce (MPI_IN_PLACE, data, (int) floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (size_t i = 0; i < floats; i++)
            data [i] /= (float) ranks;
        if (r >= WARMUP)
            times [r - WARMUP] = MPI_Wtime () - start;
    }
    if (rank == 0) {
        double sum = 0;
        for (int i = 0; i < iters; i++)
            sum += times [i];
        qsort (times, (size_t) iters, sizeof times [0], s_compare);
        double median = times [iters / 2], bytes = (double) floats * sizeof (float);
        printf ("mpi bytes=%.0f ranks=%d median_us=%.1f mean_us=%.1f min_us=%.1f "
                "busbw_gbps=%.3f\n", bytes, ranks, median * 1e6, sum / iters * 1e6,
                times [0] * 1e6, 2.0 * (ranks - 1) / ranks * bytes / median / 1e9);
    }
    free (data);
    free (times);
    MPI_Finalize ();
    return 0;
}
