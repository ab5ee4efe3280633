#!/bin/bash
#  bench/ps_loss.sh [BUILD] [PAIRS] [zactor-run flags...]
#
#  What a lost ps costs (issue 29), not in CI. PAIRS times, alternating: the
#  default `zactor-run --local` job (seed CNN, chief + 2 workers + 1 ps,
#  10 epochs) undisturbed, then the same job with the ps SIGKILLed three times:
#  at a third of the run, right after the chief was killed and came back, and
#  at two thirds. For every ps loss it prints the job's global step just before
#  the kill (from the broker: at most the true one) and the step the chief went
#  on from (its log's "going on from step N (no rewind)", or a checkpoint's
#  "reloading step N"), and at the end both final test accuracies, their
#  medians and the difference. Prints the CPU it ran on. Needs python3.
set -euo pipefail
build=${1:-build}
pairs=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
run=$build/zactor-run
top=$build/zactor-top
tmp=${TMPDIR:-/tmp}/zactor-ps-loss
rm -rf "$tmp"; mkdir -p "$tmp"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores;" \
     "flags: $(grep -m1 -o -w -E 'avx512f|avx512_bf16|amx_bf16|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-} flags: $*"

accuracy () { grep -o 'test accuracy [0-9.]*' "$1" | awk '{print $3}'; }
field () {
    "$top" --broker "$broker" --once --json --timeout 3 2>/dev/null \
        | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2>/dev/null || true
}
wait_step () { until [ "$(field "s['global_step'] >= $1")" = "True" ]; do sleep 0.5; done; }
pid_of () { field "[r['pid'] for r in s['roles'] if r['role']=='$1' and r['index']==0][0]"; }
live () { [ "$(field "[r['state'] for r in s['roles'] if r['role']=='$1' and r['index']==0][0]")" = running ]; }
#  The job's max_steps: given, or its epochs of the 60,000 training examples.
max_steps=$("$run" --local --print-settings "$@" 2>/dev/null | python3 -c "import json,sys
s = json.load(sys.stdin)
print(s['max_steps'] or s['epochs'] * 60000 // s['batch_size'])")

kill_ps () {
    local before pid
    before=$(field 's["global_step"]')
    pid=$(pid_of ps)
    kill -9 "$pid"
    until [ "$(field "[r['restarts'] for r in s['roles'] if r['role']=='ps'][0] >= $1")" = True ] \
          && live ps; do sleep 0.5; done
    sleep 2
    local went
    went=$(grep -o -E 'going on from step [0-9]+ \(no rewind\)|reloading step [0-9]+' \
           "$dir/logs/chief-0.log" | tail -1 | grep -o -E '[0-9]+' | head -1)
    echo "   ps loss $1: global step $before before the kill, training went on from $went" \
         "(back $(( before - went )))"
}

undisturbed=(); disturbed=()
for (( p = 1; p <= pairs; p++ )); do
    dir=$tmp/undisturbed-$p
    "$run" --local --model-dir "$dir" "$@" > "$dir.out" 2>&1
    undisturbed+=("$(accuracy "$dir.out")")
    echo "pair $p: undisturbed test accuracy ${undisturbed[-1]}"
    dir=$tmp/ps-lost-$p
    "$run" --local --model-dir "$dir" "$@" > "$dir.out" 2>&1 &
    launcher=$!
    broker=
    while [ -z "$broker" ]; do sleep 0.2; broker=$(grep -o 'tcp://127.0.0.1:[0-9]*' "$dir.out" | head -1 || true); done
    wait_step $(( max_steps / 3 ))
    kill_ps 1
    kill -9 "$(pid_of chief)"
    until [ "$(field "[r['restarts'] for r in s['roles'] if r['role']=='chief'][0] >= 1")" = True ] \
          && live chief; do sleep 0.2; done
    kill_ps 2
    wait_step $(( 2 * max_steps / 3 ))
    kill_ps 3
    wait "$launcher"
    disturbed+=("$(accuracy "$dir.out")")
    echo "pair $p: with 3 ps losses, test accuracy ${disturbed[-1]}"
done
median () { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2)}'; }
mu=$(median "${undisturbed[@]}"); md=$(median "${disturbed[@]}")
echo "median test accuracy: undisturbed $mu, with ps losses $md, difference $(python3 -c "print(round(($md-$mu)*100, 2))") points"
