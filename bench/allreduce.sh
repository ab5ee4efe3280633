#!/usr/bin/env bash
#  The all-reduce alone, 2 processes on this machine: zactor's ring
#  (build/bench_ring: through shared memory, the default between processes
#  of one host; over ipc with ZA_SHM_DISABLE=1; over tcp, on a connection of
#  the ring's own, as between hosts) against Open MPI's MPI_Allreduce and
#  torch.distributed's gloo back end, at 4 KiB, 365 KiB (the seed CNN's
#  gradients), 4 MiB and 16 MiB, the peers alternating round by round;
#  medians of the per-round medians, in microseconds per all-reduce (mean).
#  ZA_WIRE_DTYPE=bf16: zactor's chunks travel as bf16 (--wire-dtype bf16; the
#  peers stay f32); bench/wire_dtype.sh sets zactor's two dtypes side by side.
#  Usage: bench/allreduce.sh [BUILD] [ROUNDS] [ITERS]
#  Needs: openmpi-bin libopenmpi-dev python3-torch (Debian).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
iters=${3:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$here/peers/mpi_allreduce.c"
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
field () { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
mpi () { mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none \
             --mca btl self,vader,tcp "$work/mpi_allreduce" "$1" "$2"; }
gloo () { /usr/bin/python3 "$here/peers/gloo_allreduce.py" "$1" "$2" 2 2>/dev/null | grep '^gloo'; }
echo "host: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)," \
     "$(grep -o -w -E 'amx_bf16|avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "2 processes; $iters all-reduces per round, $rounds rounds"
printf '%-10s %12s %12s %12s %12s %12s %10s %10s\n' bytes ring_shm_us ring_ipc_us ring_tcp_us \
    mpi_us gloo_us shm/mpi shm/gloo
for bytes in 4096 373760 4194304 16777216; do
    n=$iters
    [ "$bytes" -ge 4194304 ] && n=$((iters / 4))
    shm=(); tcp=(); ipc=(); m=(); g=()
    for ((r = 0; r < rounds; r++)); do
        shm+=("$("$build/bench_ring" "$bytes" "$n" 2 ipc | field median_us)")
        ipc+=("$(ZA_SHM_DISABLE=1 "$build/bench_ring" "$bytes" "$n" 2 ipc | field median_us)")
        tcp+=("$("$build/bench_ring" "$bytes" "$n" 2 tcp | field median_us)")
        m+=("$(mpi "$bytes" "$n" | field median_us)")
        g+=("$(gloo "$bytes" "$n" | field median_us)")
    done
    s=$(printf '%s\n' "${shm[@]}" | median)
    t=$(printf '%s\n' "${tcp[@]}" | median)
    i=$(printf '%s\n' "${ipc[@]}" | median)
    mm=$(printf '%s\n' "${m[@]}" | median)
    gg=$(printf '%s\n' "${g[@]}" | median)
    printf '%-10s %12s %12s %12s %12s %12s %10.2f %10.2f\n' "$bytes" "$s" "$i" "$t" "$mm" "$gg" \
        "$(awk -v a="$s" -v b="$mm" 'BEGIN {print a / b}')" \
        "$(awk -v a="$s" -v b="$gg" 'BEGIN {print a / b}')"
done
