#!/usr/bin/env bash
#  A worker's push and the ps's answer, one worker and one ps on this machine
#  over tcp://127.0.0.1: zactor (build/bench_wire: its push+reply round trip
#  at the seed CNN, 10 tensors of 373,288 bytes in all, and one 4 MiB tensor;
#  the ps in the worker's process, its tensors through shared memory unless
#  ZA_SHM_DISABLE=1, which the zactor_tcp column sets) against dmlc/ps-lite
#  (bench/peers/pslite_bench.cc: scheduler, server and worker as three
#  processes; one key of the same bytes of floats, the server summing pushes),
#  ZPush then ZPull (two round trips) and, fused, ZPushPull (one), the peers
#  alternating round by round; medians of the per-round medians, in
#  microseconds per round trip. ratio: zactor / ps-lite ZPush+ZPull; fused_ratio:
#  zactor / ps-lite ZPushPull, the like for like (one message each way).
#  Usage: bench/ps_lite.sh PSLITE_DIR [BUILD] [ROUNDS] [SECONDS]
#  Needs: libzmq3-dev libprotobuf-dev protobuf-compiler (Debian). ps-lite is not
#  a Debian package: git clone https://github.com/dmlc/ps-lite PSLITE_DIR, then
#  in it `make ps DEPS_PATH=/usr` (the system ZeroMQ and protobuf; without
#  DEPS_PATH its Makefile downloads and builds its own into deps/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pslite=${1:?usage: $0 PSLITE_DIR [BUILD] [ROUNDS] [SECONDS]}
build=${2:-$here/../build}
rounds=${3:-3}
secs=${4:-0.4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++11 -O3 -I"$pslite/include" -o "$work/pslite_bench" "$here/peers/pslite_bench.cc" \
    "$pslite/build/libps.a" -lzmq -lprotobuf -pthread
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
field () { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
#  zactor's round trip per size, "cnn" then "4m", from bench_wire's "#" lines
zactor () { "$build/bench_wire" 3 "$secs" cnn,4m 2>/dev/null \
                | sed -n -E 's/.*round trip \(median.*zactor ([0-9.]+) us.*/\1/p'; }
pslite () {
    local port=$((20000 + RANDOM % 20000))
    export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 \
           DMLC_PS_ROOT_PORT=$port DMLC_NODE_HOST=127.0.0.1
    DMLC_ROLE=scheduler "$work/pslite_bench" "$secs" "$@" &
    local sched=$!
    DMLC_ROLE=server "$work/pslite_bench" "$secs" "$@" &
    local server=$!
    DMLC_ROLE=worker timeout 300 "$work/pslite_bench" "$secs" "$@" | grep '^pslite'
    wait "$sched" "$server"
}
echo "host: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1);" \
     "ps-lite $(git -C "$pslite" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "1 worker, 1 ps, tcp://127.0.0.1; $rounds rounds, about $secs s per size and side"
sizes=(373288 4194304)
declare -A z zt p f
for ((r = 0; r < rounds; r++)); do
    mapfile -t zs < <(zactor)
    mapfile -t zts < <(ZA_SHM_DISABLE=1 zactor)
    out=$(pslite "${sizes[@]}")
    for i in 0 1; do
        b=${sizes[$i]}
        z[$b]+="${zs[$i]} "; zt[$b]+="${zts[$i]} "
        p[$b]+="$(grep "bytes=$b " <<<"$out" | field push_pull_us) "
        f[$b]+="$(grep "bytes=$b " <<<"$out" | field fused_us) "
    done
done
printf '%-10s %10s %14s %16s %8s %16s %12s\n' bytes zactor_us zactor_tcp_us \
    pslite_push_pull ratio pslite_fused_us fused_ratio
for b in "${sizes[@]}"; do
    zz=$(tr ' ' '\n' <<<"${z[$b]}" | grep . | median)
    tt=$(tr ' ' '\n' <<<"${zt[$b]}" | grep . | median)
    pp=$(tr ' ' '\n' <<<"${p[$b]}" | grep . | median)
    ff=$(tr ' ' '\n' <<<"${f[$b]}" | grep . | median)
    printf '%-10s %10s %14s %16s %8.2f %16s %12.2f\n' "$b" "$zz" "$tt" "$pp" \
        "$(awk -v a="$zz" -v b="$pp" 'BEGIN {print a / b}')" "$ff" \
        "$(awk -v a="$zz" -v b="$ff" 'BEGIN {print a / b}')"
done
