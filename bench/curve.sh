#!/usr/bin/env bash
#  What CURVE (--certs) costs, in one run, plain and CURVE alternating:
#   1. push+reply round trip through a ps at the seed CNN's 365 KiB and at
#      16 MiB (bench_wire: the ps in-process, tcp://127.0.0.1), and a raw
#      ZeroMQ echo of the same frames, each with every socket plain, then
#      every socket under CURVE (ZA_BENCH_CERTS);
#   2. global steps/sec of bench/distributed.sh's 2 workers x 1 ps (the
#      seed CNN, each role a process: ps_vs_workers.sh) without and with
#      --certs on every process.
#  The peer, TensorFlow's gRPC cluster, has no authentication and no
#  encryption to switch on, so there is no figure of its own to set beside.
#  Usage: bench/curve.sh [BUILD_DIR] [ROUNDS] [MAX_STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
max_steps=${3:-400}
[ -x "$build/bench_wire" ] || { echo "build first: $build/bench_wire is missing" >&2; exit 1; }
work=$(mktemp -d /tmp/zactor-curve-XXXXXX)
"$build/zactor-run" keygen "$work/certs" > /dev/null
median () { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }

echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "$rounds rounds, plain and CURVE alternating; logs in $work"
for ((r = 1; r <= rounds; r++)); do
    for mode in plain curve; do
        certs=""
        [ "$mode" = curve ] && certs="$work/certs"
        MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=268435456 \
            ZA_BENCH_CERTS=$certs "$build/bench_wire" 3 0.4 cnn,16m 2>/dev/null \
            > "$work/wire-$mode-$r.txt"
        CONFIGS="2 1" ZA_CERTS=$certs "$here/ps_vs_workers.sh" "$build" "$max_steps" 1 \
            > "$work/steps-$mode-$r.txt" 2>/dev/null
        printf '.' >&2
    done
done
echo >&2

#  bench_wire's machine line: "wire size=N zactor_mb_s=.. raw_mb_s=.. ratio=.. zactor_rt_s=R raw_rt_s=R"
rt () {     # rt MODE SIZE_INDEX FIELD: median microseconds per round trip
    for f in "$work"/wire-"$1"-*.txt; do
        grep '^wire ' "$f" | sed -n "$2p" | tr ' ' '\n' | grep "^$3=" | cut -d= -f2
    done | awk '{print 1e6 / $1}' | median
}
printf '\n%-26s %12s %12s %9s\n' "push+reply round trip" "plain us" "CURVE us" "CURVE/plain"
for i in 1 2; do
    size=$(grep '^wire ' "$work/wire-plain-1.txt" | sed -n "${i}p" | sed -E 's/.*size=([0-9]+).*/\1/')
    for field in zactor_rt_s raw_rt_s; do
        p=$(rt plain "$i" "$field")
        c=$(rt curve "$i" "$field")
        label="$( [ "$field" = zactor_rt_s ] && echo "zactor ps" || echo "raw ZeroMQ echo")"
        printf '%-26s %12.1f %12.1f %9.2fx\n' "$label, $((size / 1024)) KiB" "$p" "$c" \
            "$(echo "$c / $p" | bc -l)"
    done
done

#  ps_vs_workers.sh's row: "2 1 chief 0 STEPS_METRICS STEPS_WALL ..."
steps () {  # steps MODE COLUMN: median
    for f in "$work"/steps-"$1"-*.txt; do
        awk -v c="$2" '$1 == "2" && $2 == "1" && $3 == "chief" {print $c}' "$f"
    done | median
}
printf '\n%-40s %10s %10s %9s\n' "2 workers x 1 ps, seed CNN, batch 64" "plain" "CURVE" "CURVE/plain"
for pair in "5 steps/sec (metrics)" "6 steps/sec (wall)"; do
    read -r column label <<< "$pair"
    p=$(steps plain "$column")
    c=$(steps curve "$column")
    printf '%-40s %10.1f %10.1f %9.3fx\n' "$label" "$p" "$c" "$(echo "$c / $p" | bc -l)"
done
