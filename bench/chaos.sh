#!/bin/bash
#  bench/chaos.sh [BUILD] [FAULTS] [SEED] [zactor-run flags...]
#
#  The chaos run of issue 5, not in CI. Trains the default `zactor-run --local`
#  job (seed CNN on Fashion-MNIST, chief + 2 workers + 1 ps + evaluator,
#  10 epochs) twice with the same seed: once undisturbed, once with FAULTS
#  (10) random faults across every role and the broker (each is hit in turn,
#  in a shuffled order): SIGKILL, or SIGSTOP
#  for 1-8 s then SIGCONT (a stop longer than ivl x liveness = 3 s is seen as
#  a hang: the supervisor kills and restarts the task). Prints each fault,
#  both final test accuracies and the difference, and the restarts the
#  broker recorded. Needs python3 (to read zactor-top's JSON).
set -euo pipefail
build=${1:-build}
faults=${2:-10}
seed=${3:-42}
shift $(( $# < 3 ? $# : 3 ))
run=$build/zactor-run
top=$build/zactor-top
base=${TMPDIR:-/tmp}/zactor-chaos-base
chaos=${TMPDIR:-/tmp}/zactor-chaos
rm -rf "$base" "$chaos"

accuracy () { grep -o 'test accuracy [0-9.]*' "$1" | awk '{print $3}'; }

#  state KEY...: one zactor-top snapshot, then a python expression on it.
field () {
    "$top" --broker "$broker" --once --json --timeout 3 2>/dev/null \
        | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2>/dev/null || true
}

echo "== undisturbed run (seed $seed)"
start=$(date +%s)
"$run" --local --model-dir "$base" --seed "$seed" "$@" > "$base.out" 2>&1
base_secs=$(( $(date +%s) - start ))
base_acc=$(accuracy "$base.out")
echo "   test accuracy $base_acc in $base_secs s"

echo "== the same run with $faults faults"
start=$(date +%s)
"$run" --local --model-dir "$chaos" --seed "$seed" "$@" > "$chaos.out" 2>&1 &
launcher=$!
broker=
while [ -z "$broker" ]; do
    sleep 0.2
    broker=$(grep -o 'tcp://127.0.0.1:[0-9]*' "$chaos.out" | head -1 || true)
done
#  Let training start before the first fault.
until [ "$(field 's["global_step"] > 300')" = "True" ]; do sleep 1; done
RANDOM=$seed
#  Every role is hit: the targets go round in a shuffled order.
targets=($(printf '%s\n' chief:0 worker:0 worker:1 ps:0 evaluator:0 broker:0 \
           | awk -v seed="$seed" 'BEGIN {srand(seed)} {print rand() "\t" $0}' | sort \
           | cut -f2))
injected=0
for (( f = 1; f <= faults; f++ )); do
    sleep $(( 4 + RANDOM % 5 ))
    kill -0 $launcher 2>/dev/null || break
    target=${targets[$(( (f - 1) % ${#targets[@]} ))]}
    role=${target%:*}; index=${target#*:}
    if [ "$role" = broker ]; then
        pid=$(field 's["broker"]["pid"]')
    else
        pid=$(field "[r['pid'] for r in s['roles'] if r['role']=='$role' and r['index']==$index][0]")
    fi
    step=$(field 's["global_step"]')
    if [ -z "$pid" ] || [ "$pid" -le 1 ]; then
        echo "   fault $f: $role $index has no process now; skipped"
        continue
    fi
    if (( RANDOM % 2 )); then
        echo "   fault $f: SIGKILL $role $index (pid $pid) at step $step"
        kill -KILL "$pid" 2>/dev/null || true
    else
        secs=$(( 1 + RANDOM % 8 ))
        echo "   fault $f: SIGSTOP $role $index (pid $pid) for $secs s at step $step"
        kill -STOP "$pid" 2>/dev/null || true
        ( sleep "$secs"; kill -CONT "$pid" 2>/dev/null || true ) &
    fi
    injected=$(( injected + 1 ))
done
wait $launcher
chaos_secs=$(( $(date +%s) - start ))
chaos_acc=$(accuracy "$chaos.out")
echo "   test accuracy $chaos_acc in $chaos_secs s after $injected faults"
echo "== restarts and their causes ($chaos/events.jsonl)"
python3 - "$chaos/events.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] in ("failed", "killed", "restarted", "gave_up") and e["role"] != "broker" \
       or (e["role"] == "broker" and e["event"] == "restarted"):
        print("   %-9s %d  %-9s %s" % (e["role"], e["index"], e["event"], e["cause"]))
PY
echo
printf "%-28s %s\n" "run" "test accuracy"
printf "%-28s %s (%d s)\n" "undisturbed, seed $seed" "$base_acc" "$base_secs"
printf "%-28s %s (%d s)\n" "$injected faults, seed $seed" "$chaos_acc" "$chaos_secs"
python3 -c "print('difference %+.2f points' % (100 * ($chaos_acc - $base_acc)))"
