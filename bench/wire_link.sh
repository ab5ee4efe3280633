#!/usr/bin/env bash
#  The all-reduce ring across a link slower than memory: two network
#  namespaces joined by a veth pair whose both ends are shaped to RATE by
#  tc's token bucket (a two-host stand-in this machine can run; needs root,
#  iproute2), one bench_ring rank in each, over tcp. fp32 and --wire-dtype
#  bf16 alternate, ROUNDS rounds; medians of the per-round medians, us per
#  all-reduce, at 365 KiB and 16 MiB. Then the ps's push+reply round trip
#  (bench_wire: a ps actor and a worker-like client) in a third namespace
#  whose loopback is shaped to RATE: a push and its reply go one after the
#  other, so one shaped device stands for the link both ways (ZA_SHM_DISABLE:
#  on one host the two would share memory and leave the link unused).
#  The token buckets' size depends on the message: 128kb for the seed
#  CNN's 365 KiB (above lo's 64 KiB packets, below the message, so each
#  message is paced as a link paces it: a bucket of megabytes would let it
#  through at memory speed, and its row would measure loopback), 4mb for
#  16 MiB (a small bucket does not sustain the rate: about 85% of it here).
#  BURST_SMALL and BURST_LARGE in the environment set them.
#  Usage: bench/wire_link.sh [BUILD] [RATE] [ROUNDS] [ITERS]   (RATE: 10gbit)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rate=${2:-10gbit}
rounds=${3:-3}
iters=${4:-40}
burst_small=${BURST_SMALL:-128kb}
burst_large=${BURST_LARGE:-4mb}
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns, tc)" >&2; exit 1; }
a=zaw$$a b=zaw$$b c=zaw$$c
cleanup () { for n in "$a" "$b" "$c"; do ip netns del "$n" 2>/dev/null || true; done; }
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"; ip netns add "$c"
ip -n "$c" link set lo up
ip link add "v$$a" type veth peer name "v$$b"
ip link set "v$$a" netns "$a"; ip link set "v$$b" netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev "v$$a"; ip -n "$b" addr add 10.77.0.2/24 dev "v$$b"
for n in "$a" "$b"; do ip -n "$n" link set lo up; done
ip -n "$a" link set "v$$a" up; ip -n "$b" link set "v$$b" up
#  Every shaped device's bucket, for the messages to come.
shape () {
    tc -n "$c" qdisc replace dev lo root tbf rate "$rate" burst "$1" latency 50ms
    tc -n "$a" qdisc replace dev "v$$a" root tbf rate "$rate" burst "$1" latency 50ms
    tc -n "$b" qdisc replace dev "v$$b" root tbf rate "$rate" burst "$1" latency 50ms
}
bucket () { if [ "$1" -ge 4194304 ]; then echo "$burst_large"; else echo "$burst_small"; fi; }
ends="tcp://10.77.0.1:5601,tcp://10.77.0.2:5602"
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
ring () {
    ip netns exec "$b" env ZA_WIRE_DTYPE="$1" ZA_RING_ENDPOINTS="$ends" ZA_RING_RANK=1 \
        "$build/bench_ring" "$2" "$3" 2 tcp >/dev/null &
    local other=$!
    ip netns exec "$a" env ZA_WIRE_DTYPE="$1" ZA_RING_ENDPOINTS="$ends" ZA_RING_RANK=0 \
        "$build/bench_ring" "$2" "$3" 2 tcp | sed -nE 's/.*median_us=([0-9.]+).*/\1/p'
    wait "$other"
}
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); link $rate (tc tbf on a veth pair; buckets $burst_small / $burst_large)"
printf '%-10s %12s %12s %10s\n' bytes fp32_us bf16_us bf16/fp32
for bytes in 373760 16777216; do
    shape "$(bucket "$bytes")"
    n=$iters; [ "$bytes" -ge 4194304 ] && n=$((iters / 4 > 5? iters / 4: 5))
    f=(); g=()
    for ((r = 0; r < rounds; r++)); do
        f+=("$(ring fp32 "$bytes" "$n")")
        g+=("$(ring bf16 "$bytes" "$n")")
    done
    fm=$(printf '%s\n' "${f[@]}" | median); gm=$(printf '%s\n' "${g[@]}" | median)
    printf '%-10s %12s %12s %10.2f\n' "$bytes" "$fm" "$gm" "$(echo "$gm / $fm" | bc -l)"
done
printf '%-10s %12s %12s %10s\n' ps_push fp32_us bf16_us bf16/fp32
ps_rt () {
    ip netns exec "$c" env ZA_WIRE_DTYPE="$1" ZA_SHM_DISABLE=1 "$build/bench_wire" 3 0.3 "$2" 2>/dev/null \
        | grep '^wire' | sed -nE 's/.*zactor_rt_s=([0-9.]+).*/\1/p' | head -1 \
        | awk '{printf "%.1f\n", 1e6 / $1}'
}
for size in cnn 16m; do
    if [ "$size" = cnn ]; then shape "$burst_small"; else shape "$burst_large"; fi
    f=(); g=()
    for ((r = 0; r < rounds; r++)); do
        f+=("$(ps_rt fp32 "$size")")
        g+=("$(ps_rt bf16 "$size")")
    done
    fm=$(printf '%s\n' "${f[@]}" | median); gm=$(printf '%s\n' "${g[@]}" | median)
    printf '%-10s %12s %12s %10.2f\n' "$size" "$fm" "$gm" "$(echo "$gm / $fm" | bc -l)"
done
