#!/usr/bin/env bash
#  Accuracy and speed of the seed CNN, 5 epochs of Fashion-MNIST in total:
#  one process at batch 64 (--threads 2) against --strategy allreduce with 2
#  workers at batch 32 each (one thread each) from the tutorial's TF_CONFIG,
#  the same seed; a second allreduce run, whose checkpoint must be the same
#  bytes; and --strategy ps-sync with 2 workers at batch 32 and one ps under
#  --local. Prints the test accuracy, the training time and images/sec, and
#  whether the synchronous runs wrote one process's final checkpoint bytes
#  (they split each global batch as one process splits it over its threads).
#  Usage: bench/allreduce_accuracy.sh [BUILD] [EPOCHS] [SEED]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
epochs=${2:-5}
seed=${3:-42}
run=$build/zactor-run
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model cnn --epochs "$epochs" --seed "$seed" --log-step-count-steps 0 --save-summary-steps 0)
field () { sed -E "s/.*$1 ([0-9.]+).*/\1/"; }

start=$(date +%s.%N)
single=$("$run" "${common[@]}" --batch-size 64 --threads 2 --model-dir "$work/single" 2> "$work/single.err")
single_s=$(grep -o 'trained to step [0-9]* in [0-9.]* s' "$work/single.err" | field in)
steps=$(grep -o 'trained to step [0-9]*' "$work/single.err" | field step)

allreduce () {     #  DIR: two workers, their stdout (the chief's accuracy) on stdout
    local port0 port1
    port0=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    port1=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    for i in 0 1; do
        TF_CONFIG='{"cluster": {"worker": ["localhost:'$port0'", "localhost:'$port1'"]}, "task": {"type": "worker", "index": '$i'}}' \
            "$run" "${common[@]}" --strategy allreduce --batch-size 32 --threads 1 \
            --model-dir "$1" > "$1.w$i.out" 2> "$1.w$i.err" &
    done
    wait
    cat "$1.w0.out"
}
ar=$(allreduce "$work/ar1")
ar_s=$(grep -o 'done at step [0-9]* in [0-9.]* s' "$work/ar1.w0.err" | field in)
crcs=$(grep -ho 'values crc32 [0-9a-f]*' "$work"/ar1.w*.err | sort -u | wc -l)
ar2=$(allreduce "$work/ar2")
newest () { ls "$1"/model.ckpt-*.safetensors | sort -t- -k2 -n | tail -1; }
same=no
cmp -s "$(newest "$work/ar1")" "$(newest "$work/ar2")" && same=yes
#  ps-sync: the chief and one worker at batch 32 each, one ps, under --local.
pssync=$("$run" "${common[@]}" --local --strategy ps-sync --workers 1 --evaluators 0 \
         --batch-size 32 --threads 1 --model-dir "$work/pssync" 2> "$work/pssync.err" \
         | grep 'test accuracy')
ps_s=$(grep -o 'done at step [0-9]* after [0-9]* own steps in [0-9.]* s' \
       "$work/pssync/logs/chief-0.log" | field in)
images=$(echo "$steps * 64" | bc)
echo "seed CNN, $epochs epochs ($steps global steps of 64 examples), seed $seed"
printf '%-44s %9s %8s %10s\n' run accuracy train_s images/s
printf '%-44s %9s %8s %10.0f\n' "one process, batch 64, 2 threads" \
    "$(echo "$single" | field accuracy)" "$single_s" "$(echo "$images / $single_s" | bc -l)"
printf '%-44s %9s %8s %10.0f\n' "allreduce, 2 workers x batch 32, 1 thread each" \
    "$(echo "$ar" | field accuracy)" "$ar_s" "$(echo "$images / $ar_s" | bc -l)"
printf '%-44s %9s\n' "allreduce again, same seed" "$(echo "$ar2" | field accuracy)"
printf '%-44s %9s %8s %10.0f\n' "ps-sync, 2 workers x batch 32, 1 ps (--local)" \
    "$(echo "$pssync" | field accuracy)" "$ps_s" "$(echo "$images / $ps_s" | bc -l)"
echo "workers' final values identical: $([ "$crcs" = 1 ] && echo yes || echo no);" \
     "second run's checkpoint the same bytes: $same"
for run in ar1 pssync; do
    cmp -s "$(newest "$work/single")" "$(newest "$work/$run")" && as=yes || as=no
    echo "$run's final checkpoint the same bytes as one process at batch 64: $as"
done
echo "allreduce / one process, images/sec: $(echo "$single_s / $ar_s" | bc -l | cut -c1-5)"
