#!/usr/bin/env bash
#  Parameter-server training speed (ps-async unless ZA_STRATEGY; ZA_WIRE_DTYPE=bf16 for
#  --wire-dtype bf16): global steps/sec of the seed CNN
#  (batch 64 per worker, Adam 1e-3, --threads 1 in every process) for 1 and 2
#  workers (1 = the chief alone, 2 = chief + 1 worker) x 1 and 2 ps, each role a
#  real zactor-run process on tcp loopback. The configurations alternate,
#  ROUNDS times, and medians are quoted:
#    steps/sec (metrics): the chief's metrics.jsonl steps_per_sec, written every
#                         100 global steps (median over all those lines);
#    steps/sec (wall):    MAX_STEPS / (chief start .. chief exit), which also
#                         counts process start, data loading, init and the
#                         final checkpoint;
#    per step:            each training process's own exit line: compute,
#                         push+reply (send, the ps's apply, the values back),
#                         other (input, copying values in, logs) and other's share.
#  Usage: bench/ps_vs_workers.sh [BUILD_DIR] [MAX_STEPS] [ROUNDS]
#  Environment: CONFIGS ("1 1,1 2,2 1,2 2": workers ps, comma-separated) picks
#  configurations; ZA_CERTS=DIR runs every process with --certs DIR (CURVE);
#  ZA_STRATEGY=ps-sync trains synchronously (default ps-async).
set -euo pipefail
shopt -s nullglob
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
max_steps=${2:-400}
rounds=${3:-5}
run="$build/zactor-run"
[ -x "$run" ] || { echo "build first: $run is missing" >&2; exit 1; }
work=$(mktemp -d /tmp/zactor-ps-vs-workers-XXXXXX)
port () { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median () { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
list () { local n=$1 out="" i; for ((i = 0; i < n; i++)); do out+="${out:+, }\"127.0.0.1:$(port)\""; done; echo "$out"; }

echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)} (every process)"
echo "${ZA_STRATEGY:-ps-async}, seed CNN, batch 64 per worker, Adam 1e-3, --threads 1 per process, --max-steps $max_steps," \
     "$rounds rounds per configuration (alternating), tcp://127.0.0.1"
echo "note: on $(nproc) cores, 2 workers (each 1 thread) plus the ps share the cores:" \
     "steps/sec scaling is bounded by the cores, not by the runtime"

#  One run: workers, ps, round. Leaves its logs and metrics under $work/wW-pP-rR.
one () {
    local workers=$1 ps=$2 r=$3
    local dir="$work/w$workers-p$ps-r$r"
    mkdir -p "$dir"
    #  A job with no tasks is left out (an empty list is refused).
    local extra=""
    [ "$workers" -gt 1 ] && extra="\"worker\": [$(list $((workers - 1)))], "
    cat > "$dir/cluster.json" <<JSON
{"cluster": {"chief": [$(list 1)], $extra"ps": [$(list "$ps")]}}
JSON
    local common=(--cluster "$dir/cluster.json" --model cnn --batch-size 64 --optimizer adam
                  --learning-rate 0.001 --threads 1 --max-steps "$max_steps" --no-eval
                  --save-checkpoints-steps 100000 --save-summary-steps 100
                  --log-step-count-steps 0 --model-dir "$dir/run" --seed 42
                  --strategy "${ZA_STRATEGY:-ps-async}" ${ZA_CERTS:+--certs "$ZA_CERTS"}
                  ${ZA_WIRE_DTYPE:+--wire-dtype "$ZA_WIRE_DTYPE"})
    local pids=() i status=0
    for ((i = 0; i < ps; i++)); do
        "$run" "${common[@]}" --role ps --index "$i" 2> "$dir/ps$i.log" & pids+=($!)
    done
    for ((i = 0; i < workers - 1; i++)); do
        "$run" "${common[@]}" --role worker --index "$i" 2> "$dir/worker$i.log" & pids+=($!)
    done
    local start end
    start=$(date +%s.%N)
    "$run" "${common[@]}" --role chief --index 0 > "$dir/chief.out" 2> "$dir/chief.log" || status=$?
    end=$(date +%s.%N)
    for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
    if [ "$status" != 0 ]; then
        echo "run workers=$workers ps=$ps round=$r failed (exit $status); logs in $dir:" >&2
        tail -n 5 "$dir"/*.log >&2
        exit 1
    fi
    echo "$max_steps / ($end - $start)" | bc -l > "$dir/wall_steps_per_sec"
}

IFS=, read -r -a configs <<< "${CONFIGS:-1 1,1 2,2 1,2 2}"
for ((r = 1; r <= rounds; r++)); do
    for c in "${configs[@]}"; do
        one $c "$r"
        printf '.' >&2
    done
done
echo >&2

#  "zactor: chief 0: per step X ms: compute C ms, push+reply T ms, other O ms (P%)"
field () {      # field TASK_PATTERN N FILES...: median of the Nth number after "per step"
    local pattern=$1 n=$2; shift 2
    grep -h "$pattern: per step" "$@" \
        | sed -E 's/.*per step ([0-9.]+) ms: compute ([0-9.]+) ms, push\+reply ([0-9.]+) ms, other ([-0-9.]+) ms \(([-0-9.]+)%\).*/\1 \2 \3 \4 \5/' \
        | awk -v n="$n" '{print $n}' | median
}

printf '\n%-7s %-3s %-9s %14s %11s %9s %9s %11s %9s %7s\n' workers ps task "steps/s(metr)" \
    "steps/s(wall)" "step ms" "compute" "push+reply" "other" "other%"
for c in "${configs[@]}"; do
    read -r workers ps <<<"$c"
    dirs=("$work"/w$workers-p$ps-r*)
    metrics=$(for d in "${dirs[@]}"; do
                  sed -E 's/.*"steps_per_sec": ([0-9.]+).*/\1/' "$d/run/metrics.jsonl"
              done | median)
    wall=$(cat "${dirs[@]/%//wall_steps_per_sec}" | median)
    tasks=("chief 0")
    for ((i = 0; i < workers - 1; i++)); do tasks+=("worker $i"); done
    for task in "${tasks[@]}"; do
        logs=()
        for d in "${dirs[@]}"; do logs+=("$d"/chief.log "$d"/worker*.log); done
        if [ "$task" = "chief 0" ]; then m=$metrics; w=$wall; else m=""; w=""; fi
        printf '%-7s %-3s %-9s %14s %11s %9.3f %9.3f %11.3f %9.3f %6.2f%%\n' "$workers" "$ps" \
            "$task" "${m:+$(printf '%.1f' "$m")}" "${w:+$(printf '%.1f' "$w")}" \
            "$(field "$task" 1 "${logs[@]}")" "$(field "$task" 2 "${logs[@]}")" \
            "$(field "$task" 3 "${logs[@]}")" "$(field "$task" 4 "${logs[@]}")" \
            "$(field "$task" 5 "${logs[@]}")"
    done
done
echo
echo "steps/s(metr): median of the chief's metrics.jsonl steps_per_sec (every 100 global steps,"
echo "  all runs); steps/s(wall): median of $max_steps / (chief start .. chief exit), which also"
echo "  counts process start, data loading, init and the final checkpoint"
echo "per step: medians over $rounds runs of each process's exit line; other% = other / step"
echo "  (goal: other < 5% of a step). logs and metrics: $work"
