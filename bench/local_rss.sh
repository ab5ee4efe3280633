#!/usr/bin/env bash
#  Peak resident memory of every process of `zactor-run --local` (launcher,
#  broker, chief, workers, ps, evaluator), read from /proc/PID/status (VmHWM)
#  every 0.1 s while the job runs, beside PyTorch training the same model in
#  one process (its peak RSS from /usr/bin/time). The issue's targets: a
#  worker under 80 MB, a ps under 40 MB for the seed CNN.
#  Usage: bench/local_rss.sh [BUILD_DIR] [MAX_STEPS] [PROGRAM]
#  (PROGRAM: zactor-run by default; any za_run_main program, e.g. custom_model_fn)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
max_steps=${2:-1500}
program=${3:-zactor-run}
exe="$build/$program"
[ -x "$exe" ] || { echo "build first: $exe is missing" >&2; exit 1; }
dir=$(mktemp -d /tmp/zactor-rss-XXXXXX)
trap 'rm -rf "$dir"' EXIT
declare -A peak

#  Every process whose ancestry leads to $1, the launcher included.
descendants () {
    local pids="$1" frontier="$1" next
    while [ -n "$frontier" ]; do
        next=$(for p in $frontier; do cat /proc/$p/task/*/children 2>/dev/null; done | xargs)
        pids="$pids $next"
        frontier=$next
    done
    echo "$pids"
}

#  "chief-0", "worker-1", "ps-0", "evaluator-0", "broker" or "launcher".
name_of () {
    local args
    args=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null) || return 1
    if [[ $args =~ --role\ broker ]]; then echo broker
    elif [[ $args =~ --role\ ([a-z]+)\ --index\ ([0-9]+) ]]; then
        echo "${BASH_REMATCH[1]}-${BASH_REMATCH[2]}"
    elif [[ $args =~ --local ]]; then echo launcher
    else return 1; fi
}

echo "host: $(nproc) cores; $program --local --max-steps $max_steps (seed CNN unless the program says otherwise)"
"$exe" --local --max-steps "$max_steps" --model-dir "$dir/run" > "$dir/out" 2>&1 &
launcher=$!
while kill -0 "$launcher" 2>/dev/null; do
    for pid in $(descendants "$launcher"); do
        name=$(name_of "$pid") || continue
        kb=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
        [ -n "$kb" ] || continue
        if [ -z "${peak[$name]:-}" ] || [ "$kb" -gt "${peak[$name]}" ]; then peak[$name]=$kb; fi
    done
    sleep 0.1
done
wait "$launcher" || { echo "the job failed:"; cat "$dir/out"; exit 1; }
grep -E "test accuracy" "$dir/out" || true
printf '\n%-14s %10s\n' process "peak RSS"
total=0
for name in $(printf '%s\n' "${!peak[@]}" | sort); do
    printf '%-14s %7.1f MB\n' "$name" "$(echo "${peak[$name]} / 1024" | bc -l)"
    total=$((total + peak[$name]))
done
printf '%-14s %7.1f MB\n' "all" "$(echo "$total / 1024" | bc -l)"
if /usr/bin/python3 -c 'import torch' 2>/dev/null && [ "$program" = zactor-run ]; then
    /usr/bin/time -f '%M' -o "$dir/torch_rss" env OPENBLAS_NUM_THREADS=1 \
        /usr/bin/python3 "$here/torch_fmnist.py" --mode accuracy --epochs 1 --batch 64 \
        --seed 1 --threads 2 > /dev/null 2>&1 || true
    [ -s "$dir/torch_rss" ] && printf '%-14s %7.1f MB   (PyTorch, the same CNN, 1 epoch in one process)\n' \
        torch "$(echo "$(tail -1 "$dir/torch_rss") / 1024" | bc -l)"
fi
