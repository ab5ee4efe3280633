#!/usr/bin/env bash
#  --wire-dtype bf16 against fp32: the seed CNN trained by a --local cluster of
#  2 workers (the chief included) and 1 ps, in each strategy, EPOCHS epochs,
#  same seed; the test accuracy of each and the difference (the issue's
#  target: within 0.3 points). ps-async is not deterministic (the pushes
#  interleave as they come), so its difference holds run-to-run noise too:
#  SEEDS several seeds give its spread.
#  Usage: bench/wire_accuracy.sh [BUILD] [EPOCHS] [SEEDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
epochs=${2:-2}
seeds=${3:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-10s %5s %9s %9s %8s\n' strategy seed fp32 bf16 points
for strategy in ps-async ps-sync allreduce; do
    for ((seed = 1; seed <= seeds; seed++)); do
        declare -A acc
        for dtype in fp32 bf16; do
            dir="$work/$strategy-$dtype-$seed"
            "$build/zactor-run" --local --workers 2 --strategy "$strategy" --wire-dtype "$dtype" \
                --epochs "$epochs" --seed "$seed" --threads 1 --log-step-count-steps 0 \
                --model-dir "$dir" >"$dir.log" 2>&1 || { echo "$strategy $dtype failed:"; tail -5 "$dir.log"; exit 1; }
            acc[$dtype]=$(sed -nE 's/.*test accuracy ([0-9.]+).*/\1/p' "$dir.log" | tail -1)
        done
        printf '%-10s %5s %9s %9s %+8.2f\n' "$strategy" "$seed" "${acc[fp32]}" "${acc[bf16]}" \
            "$(echo "100 * (${acc[bf16]} - ${acc[fp32]})" | bc -l)"
    done
done
