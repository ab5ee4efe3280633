#!/usr/bin/env bash
#  The all-reduce across a link between two hosts' stand-ins: two network
#  namespaces joined by a veth pair (no shaping), one rank in each, over
#  tcp: zactor's ring (build/bench_ring: each link on a tcp connection of
#  its own; ZA_SHM_DISABLE=1 in the environment: ZeroMQ's) against
#  torch.distributed's gloo,
#  each rank in its namespace, at 4 KiB, 365 KiB, 4 MiB and 16 MiB, the
#  peers alternating round by round; medians of the per-round medians, us
#  per all-reduce (mean). Open MPI cannot run here: its launcher (PMIx)
#  reaches its processes over the loopback of its own namespace only. So
#  both rings are also timed over tcp on this namespace's loopback, where
#  Open MPI restricted to tcp (--mca btl self,tcp) runs: the ring against
#  Open MPI on the same path. Needs root (ip netns), iproute2, openmpi-bin,
#  libopenmpi-dev, python3-torch (Debian).
#  Usage: bench/allreduce_netns.sh [BUILD] [ROUNDS] [ITERS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
iters=${3:-200}
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)" >&2; exit 1; }
work=$(mktemp -d)
a=zan$$a b=zan$$b
cleanup () { for n in "$a" "$b"; do ip netns del "$n" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "v$$a" type veth peer name "v$$b"
ip link set "v$$a" netns "$a"; ip link set "v$$b" netns "$b"
ip -n "$a" addr add 10.79.0.1/24 dev "v$$a"; ip -n "$b" addr add 10.79.0.2/24 dev "v$$b"
for n in "$a" "$b"; do ip -n "$n" link set lo up; done
ip -n "$a" link set "v$$a" up; ip -n "$b" link set "v$$b" up
mpicc -O2 -o "$work/mpi_allreduce" "$here/peers/mpi_allreduce.c"
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
field () { sed -nE "s/.*$1=([0-9.]+).*/\1/p"; }
ends="tcp://10.79.0.1:5611,tcp://10.79.0.2:5612"
ring_veth () {
    ip netns exec "$b" env ZA_RING_ENDPOINTS="$ends" ZA_RING_RANK=1 \
        "$build/bench_ring" "$1" "$2" 2 tcp > /dev/null &
    local other=$!
    ip netns exec "$a" env ZA_RING_ENDPOINTS="$ends" ZA_RING_RANK=0 \
        "$build/bench_ring" "$1" "$2" 2 tcp | field median_us
    wait "$other"
}
gloo_veth () {
    ip netns exec "$b" env GLOO_RANK=1 GLOO_MASTER=10.79.0.1:5613 GLOO_SOCKET_IFNAME="v$$b" \
        /usr/bin/python3 "$here/peers/gloo_allreduce.py" "$1" "$2" 2 > /dev/null 2>&1 &
    local other=$!
    ip netns exec "$a" env GLOO_RANK=0 GLOO_MASTER=10.79.0.1:5613 GLOO_SOCKET_IFNAME="v$$a" \
        /usr/bin/python3 "$here/peers/gloo_allreduce.py" "$1" "$2" 2 2>/dev/null | field median_us
    wait "$other"
}
ring_lo () { "$build/bench_ring" "$1" "$2" 2 tcp | field median_us; }
mpi_lo () { mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none \
                --mca btl self,tcp "$work/mpi_allreduce" "$1" "$2" | field median_us; }
echo "host: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)," \
     "$(grep -o -w -E 'amx_bf16|avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "2 ranks; $iters all-reduces per round, $rounds rounds; veth: 2 namespaces, lo: tcp on loopback"
printf '%-10s %12s %12s %12s %12s %12s %12s\n' bytes ring_veth_us gloo_veth_us ring_lo_us \
    mpi_lo_us veth/mpi_lo lo/mpi_lo
for bytes in 4096 373760 4194304 16777216; do
    n=$iters
    [ "$bytes" -ge 4194304 ] && n=$((iters / 4))
    rv=(); gv=(); rl=(); ml=()
    for ((r = 0; r < rounds; r++)); do
        rv+=("$(ring_veth "$bytes" "$n")")
        gv+=("$(gloo_veth "$bytes" "$n")")
        rl+=("$(ring_lo "$bytes" "$n")")
        ml+=("$(mpi_lo "$bytes" "$n")")
    done
    v=$(printf '%s\n' "${rv[@]}" | median); g=$(printf '%s\n' "${gv[@]}" | median)
    l=$(printf '%s\n' "${rl[@]}" | median); m=$(printf '%s\n' "${ml[@]}" | median)
    printf '%-10s %12s %12s %12s %12s %12.2f %12.2f\n' "$bytes" "$v" "$g" "$l" "$m" \
        "$(awk -v a="$v" -v b="$m" 'BEGIN {print a / b}')" \
        "$(awk -v a="$l" -v b="$m" 'BEGIN {print a / b}')"
done
