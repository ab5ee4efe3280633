#!/bin/bash
#  bench/preempt.sh [BUILD] [PREEMPTIONS] [SEED] [zactor-run flags...]
#
#  Issue 46's preemption benchmark, not in CI. Trains the default
#  `zactor-run --local` job (seed CNN on Fashion-MNIST, chief + 2 workers +
#  1 ps + evaluator, 10 epochs; add --strategy allreduce --ps 0 and so on)
#  twice with the same seed: once undisturbed, once preempted PREEMPTIONS
#  (10) times: SIGTERM to the launcher at a random moment (4-12 s after the
#  job starts training again), as Slurm or Kubernetes would, and the same
#  command run again each time it exits 75, until it ends with 0. Prints
#  each preemption (the step the job stopped at, the step it resumed from),
#  both final test accuracies and their difference, the total times, and
#  the CPU it ran on.
set -euo pipefail
build=${1:-build}
preemptions=${2:-10}
seed=${3:-42}
shift $(( $# < 3 ? $# : 3 ))
run=$build/zactor-run
base=${TMPDIR:-/tmp}/zactor-preempt-base
hit=${TMPDIR:-/tmp}/zactor-preempt
rm -rf "$base" "$hit"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' \
               | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | xargs)"

accuracy () { grep -o 'test accuracy [0-9.]*' "$1" | tail -1 | awk '{print $3}'; }

echo "== undisturbed run (seed $seed)"
start=$(date +%s)
"$run" --local --model-dir "$base" --seed "$seed" "$@" > "$base.out" 2>&1
base_secs=$(( $(date +%s) - start ))
base_acc=$(accuracy "$base.out")
echo "   test accuracy $base_acc in $base_secs s"

echo "== the same run, preempted $preemptions times"
RANDOM=$seed
start=$(date +%s)
done_preemptions=0
code=75
while [ "$code" = 75 ]; do
    : > "$hit.out"
    "$run" --local --model-dir "$hit" --seed "$seed" "$@" >> "$hit.out" 2>&1 &
    launcher=$!
    if (( done_preemptions < preemptions )); then
        #  Training again: the chief's log says where it went on from.
        until grep -q 'going from step\|going on from there\|restored step\|initialised at' \
                  "$hit/logs/chief-0.log" 2>/dev/null || ! kill -0 $launcher 2>/dev/null; do
            sleep 0.2
        done
        sleep $(( 4 + RANDOM % 9 ))
        kill -TERM $launcher 2>/dev/null || true
    fi
    code=0
    wait $launcher || code=$?
    if [ "$code" = 75 ]; then
        done_preemptions=$(( done_preemptions + 1 ))
        stopped=$(grep -o 'preempted at step [0-9]*' "$hit.out" | awk '{print $4}')
        echo "   preemption $done_preemptions: stopped at step $stopped (exit 75); run again"
        rm -f "$hit/logs/chief-0.log"
    elif [ "$code" != 0 ]; then
        echo "   the job failed (exit $code): see $hit.out" >&2
        exit 1
    fi
done
hit_secs=$(( $(date +%s) - start ))
hit_acc=$(accuracy "$hit.out")
echo "   test accuracy $hit_acc in $hit_secs s"
awk -v a="$base_acc" -v b="$hit_acc" -v n="$done_preemptions" 'BEGIN {
    printf "preempted %d times: %.4f against %.4f undisturbed (%+.2f points)\n",
           n, b, a, 100 * (b - a) }'
