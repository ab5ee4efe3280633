"""gloo_allreduce.py: torch.distributed's gloo back end, all_reduce (sum, then
the mean) of a float32 tensor, the peer of bench_ring. Two processes:
    python3 gloo_allreduce.py BYTES [ITERS] [RANKS]
(or one rank alone: GLOO_RANK, GLOO_MASTER, see the end); rank 0 prints
    gloo bytes=B ranks=N median_us=M mean_us=A min_us=L busbw_gbps=G"""
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WARMUP = 20


def run(rank, ranks, port, floats, iters, host="127.0.0.1"):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                            rank=rank, world_size=ranks)
    data = (torch.arange(floats, dtype=torch.float32) % 1000) * 0.001 * (rank + 1)
    times = []
    for r in range(WARMUP + iters):
        start = time.perf_counter()
        dist.all_reduce(data)
        data /= ranks
        if r >= WARMUP:
            times.append(time.perf_counter() - start)
    if rank == 0:
        median = statistics.median(times)
        nbytes = floats * 4
        print(f"gloo bytes={nbytes} ranks={ranks} median_us={median * 1e6:.1f} "
              f"mean_us={statistics.mean(times) * 1e6:.1f} min_us={min(times) * 1e6:.1f} "
              f"busbw_gbps={2 * (ranks - 1) / ranks * nbytes / median / 1e9:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    floats = int(sys.argv[1]) // 4
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    ranks = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    # One rank alone, for rings across network namespaces (bench/allreduce_netns.sh):
    # GLOO_RANK=R GLOO_MASTER=HOST:PORT (rank 0's address), GLOO_SOCKET_IFNAME set too.
    if "GLOO_RANK" in os.environ:
        host, port = os.environ["GLOO_MASTER"].rsplit(":", 1)
        run(int(os.environ["GLOO_RANK"]), ranks, int(port), floats, iters, host)
        sys.exit(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(ranks, port, floats, iters), nprocs=ranks)
