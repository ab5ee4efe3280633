#!/usr/bin/env bash
#  The seed CNN's final test accuracy with a recipe (issue 26's convergence
#  target: >= 0.915 at 12 epochs, >= 0.91 at 5), for each number of EPOCHS
#  and each SEED, in one process and as a --local cluster (1 ps, 1 worker
#  and the chief, ps-async, 2 threads each). The recipe: Adam, TensorFlow's
#  cosine_decay over the whole run (decay_steps = the run's global steps,
#  938 an epoch at batch 64), batch 64; its peak rate by the run's length:
#  up to 6 epochs 0.004 after a linear warm-up of 500 steps, longer 0.002
#  from the first step (a short run needs the higher rate; 0.004 costs a
#  long one: 0.9138 at 12 epochs, seed 1). EXTRA (say "--augment flip") is
#  added to every run. PyTorch's run of it: bench/torch_fmnist.py --mode
#  accuracy --epochs E --lr R [--lr-warmup-steps 500] --cosine-steps 938E
#  --seed S --threads 2.
#  Usage: bench/convergence.sh [BUILD] [EPOCHS...] (env SEEDS="1 2 42", MODES="single local", EXTRA)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
epochs_list=${*:-5 12}
seeds=${SEEDS:-1 2 42}
modes=${MODES:-single local}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "recipe: --optimizer adam --lr-schedule cosine_decay(decay_steps=938 x epochs) --batch-size 64, up to 6 epochs --learning-rate 0.004 --lr-warmup-steps 500, longer --learning-rate 0.002 ${EXTRA:-}"
#  The peak rate (and warm-up) for a run of $1 epochs.
rate () { if [ "$1" -le 6 ]; then echo "--learning-rate 0.004 --lr-warmup-steps 500"
          else echo "--learning-rate 0.002"; fi; }
printf '%-7s %-7s %5s %9s %8s\n' mode epochs seed accuracy seconds
for mode in $modes; do
    for epochs in $epochs_list; do
        for seed in $seeds; do
            dir="$work/$mode-$epochs-$seed"
            local_flags=(); [ "$mode" = local ] && local_flags=(--local --workers 1 --evaluators 0)
            start=$(date +%s.%N)
            "$build/zactor-run" "${local_flags[@]}" --model cnn --optimizer adam \
                $(rate "$epochs") --batch-size 64 --epochs "$epochs" --seed "$seed" \
                --threads 2 --lr-schedule "cosine_decay(decay_steps=$((938 * epochs)))" \
                --log-step-count-steps 0 ${EXTRA:-} --model-dir "$dir" >"$dir.log" 2>&1 \
                || { echo "$mode $epochs $seed failed:"; tail -5 "$dir.log"; exit 1; }
            secs=$(echo "$(date +%s.%N) - $start" | bc -l)
            acc=$(sed -nE 's/.*test accuracy ([0-9.]+).*/\1/p' "$dir.log" | tail -1)
            printf '%-7s %-7s %5s %9s %8.0f\n' "$mode" "$epochs" "$seed" "$acc" "$secs"
        done
    done
done
