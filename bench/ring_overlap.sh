#!/usr/bin/env bash
#  The all-reduce overlapped with backward: --strategy allreduce from the
#  tutorial's TF_CONFIG (2 workers on this machine, batch 32 each, one thread
#  each) with --bucket-kib 0 (the default: one bucket, reduced after
#  backward), 16 and 64 (buckets go round as backward makes them), and with one
#  bucket over ipc instead of shared memory (ZA_SHM_DISABLE=1), against one
#  process at batch 64 with 2 threads. The configurations alternate, ROUNDS
#  times; medians are quoted:
#    images/s: 64 x the chief's metrics.jsonl steps_per_sec (a line every
#              100 global steps, the first of each run left out: start-up);
#    per step: worker 0's exit line: the step, compute (backward included,
#              and whatever ring work ran beside it), the all-reduce left
#              after backward, and the part of it spent waiting.
#  Usage: bench/ring_overlap.sh [BUILD] [STEPS] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
steps=${2:-1000}
rounds=${3:-3}
run="$build/zactor-run"
[ -x "$run" ] || { echo "build first: $run is missing" >&2; exit 1; }
work=$(mktemp -d /tmp/zactor-ring-overlap-XXXXXX)
port () { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median () { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
common=(--model cnn --max-steps "$steps" --no-eval --save-checkpoints-steps 100000
        --save-summary-steps 100 --log-step-count-steps 0 --seed 42)

single () {     #  DIR
    "$run" "${common[@]}" --batch-size 64 --threads 2 --model-dir "$1" 2> "$1.err" > /dev/null
}

ring () {       #  DIR BUCKET_KIB [ENV=VALUE]
    local port0 port1 i pids=() env=${3:-ZA_SHM_DISABLE=0}
    port0=$(port); port1=$(port)
    for i in 0 1; do
        env "$env" TF_CONFIG='{"cluster": {"worker": ["localhost:'$port0'", "localhost:'$port1'"]}, "task": {"type": "worker", "index": '$i'}}' \
            "$run" "${common[@]}" --strategy allreduce --batch-size 32 --threads 1 \
            --bucket-kib "$2" --model-dir "$1" > /dev/null 2> "$1.w$i.err" & pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
}

configs=("single" "ring 0" "ipc 0" "ring 16" "ring 64")
for ((r = 1; r <= rounds; r++)); do
    for c in "${configs[@]}"; do
        set -- $c
        dir="$work/$1${2:+-$2}-r$r"
        case $1 in
            single) single "$dir";;
            ipc) ring "$dir" "$2" ZA_SHM_DISABLE=1;;
            *) ring "$dir" "$2";;
        esac
        printf '.' >&2
    done
done
echo >&2

echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "seed CNN, $steps global steps of 64 examples, $rounds rounds (alternating)"
printf '%-36s %9s %9s %9s %11s %10s\n' run images/s "step ms" compute "reduce left" "ring waits"
for c in "${configs[@]}"; do
    set -- $c
    name="$1${2:+-$2}"
    images=$(for d in "$work/$name"-r*/; do
                 tail -n +2 "${d}metrics.jsonl" | sed -E 's/.*"steps_per_sec": ([0-9.]+).*/\1/'
             done | median | awk '{print 64 * $1}')
    if [ "$1" = single ]; then
        printf '%-36s %9.0f\n' "one process, batch 64, 2 threads" "$images"
        continue
    fi
    #  "per step X ms: compute C ms, all-reduce left after it A ms (ring waits W ms), ..."
    field () {
        grep -h 'per step' "$work/$name"-r*.w0.err \
            | sed -E 's/.*per step ([0-9.]+) ms: compute ([0-9.]+) ms, all-reduce left after it ([0-9.]+) ms \(ring waits ([0-9.]+) ms\).*/\1 \2 \3 \4/' \
            | awk -v n="$1" '{print $n}' | median
    }
    label="allreduce 2 x 32, --bucket-kib $2"
    [ "$1" = ipc ] && label="allreduce 2 x 32, one bucket, ipc"
    printf '%-36s %9.0f %9.3f %9.3f %11.3f %10.3f\n' "$label" "$images" \
        "$(field 1)" "$(field 2)" "$(field 3)" "$(field 4)"
done
echo "logs: $work"
