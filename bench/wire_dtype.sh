#!/usr/bin/env bash
#  --wire-dtype bf16 against fp32 on one host: the ps's push+reply round trip
#  (build/bench_wire: a ps actor and a worker-like client over tcp loopback,
#  the cast and the widening timed as a worker does them) and the all-reduce
#  ring's time for 2 processes (build/bench_ring, over tcp and over ipc), at
#  the seed CNN's size (365 KiB) and 16 MiB, the two dtypes alternating
#  round by round; medians of the rounds, and bf16 / fp32 (target <= 0.6).
#  Usage: bench/wire_dtype.sh [BUILD] [ROUNDS] [ITERS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
iters=${3:-200}
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
field () { sed -nE "s/.*$1=([0-9.]+).*/\1/p" | head -1; }
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-28s %12s %12s %8s\n' "what" "fp32" "bf16" "bf16/fp32"
row () {
    local name=$1; shift
    local f=() b=()
    for ((r = 0; r < rounds; r++)); do
        f+=("$(ZA_WIRE_DTYPE=fp32 "$@")")
        b+=("$(ZA_WIRE_DTYPE=bf16 "$@")")
    done
    local fm bm
    fm=$(printf '%s\n' "${f[@]}" | median)
    bm=$(printf '%s\n' "${b[@]}" | median)
    printf '%-28s %12.1f %12.1f %8.2f\n' "$name" "$fm" "$bm" "$(echo "$bm / $fm" | bc -l)"
}
ps_rt () { "$build/bench_wire" 3 0.3 "$1" 2>/dev/null | grep '^wire' | field zactor_rt_s \
           | awk '{printf "%.1f\n", 1e6 / $1}'; }
ring () { "$build/bench_ring" "$1" "$2" 2 "$3" | field median_us; }
row "ps push+reply cnn (us)" ps_rt cnn
row "ps push+reply 16 MiB (us)" ps_rt 16m
for t in tcp ipc; do
    row "ring $t 365 KiB (us)" ring 373760 "$iters" "$t"
    row "ring $t 16 MiB (us)" ring 16777216 $((iters / 4)) "$t"
done
