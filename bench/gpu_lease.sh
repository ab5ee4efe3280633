#!/usr/bin/env bash
#  One call of a lent GPU machine (GPU.md's list and issue 48's figures), in
#  the order that matters most, within a time budget, its logs tarred into
#  $OUT after each check (what a call returns even if it is cut short):
#
#    here:   bench/gpu_carry.sh pack build-rel .gpu     (a CUDA build)
#    there:  BUDGET=500 bench/gpu_lease.sh .gpu          (carry .gpu)
#
#  1. cuda_layers three ways (gpu.sh check 1) and cuda_replay (CUDA graphs
#     against none; fed steps that do not wait for their end, with graphs
#     and without, against steps that wait), the CPU's reference training
#     of check 5 beside them;
#  5. the seed CNN's 5 epochs on the GPU against it, in mixed_bfloat16 and
#     mixed_float16, and with ZA_CUDA_GRAPHS=0; 8. VGG16 at 224x224 against
#  PyTorch; 2. the seed CNN's images/s and busy share; then a second round
#  of 8 and 2 while the budget lasts, each started only with the seconds it
#  needs left (150 each).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-.gpu}
budget=${BUDGET:-500}
out=${OUT:-/tmp/zactor-lease}
logs=/tmp/zactor-lease-logs
mkdir -p "$out" "$logs"
start=$(date +%s)
left () { echo $(( budget - ($(date +%s) - start) )); }
save () { tar czf "$out/logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null; }
say () { echo "=== [$(( $(date +%s) - start ))s] $*"; }
# shellcheck source=/dev/null
source "$here/gpu_carry.sh" unpack "$dir" || exit 1
build=$(cd "$dir" && pwd)
threads=$(( $(nproc) < 8? $(nproc): 8 ))
rm -rf /tmp/zactor-lease-cpu
( timeout 300 "$build/zactor-run" --model-dir /tmp/zactor-lease-cpu --epochs 5 --seed 1 \
      --device cpu --threads "$threads" >"$logs/accuracy_cpu.txt" 2>&1
  echo "rc=$?" >>"$logs/accuracy_cpu.txt" ) &
cpu=$!
say "1. cuda_layers (the CPU's reference training beside it)"
ONLY=1 bash "$here/gpu.sh" "$build" "$logs/1"
say "cuda_replay: replayed steps and steps that do not wait against steps run as they come"
timeout 120 "$build/cuda_replay" 2>&1 | tee "$logs/cuda_replay.txt"
save
say "5. the seed CNN, 5 epochs, seed 1, on the GPU"
rm -rf /tmp/zactor-lease-cuda
timeout 200 "$build/zactor-run" --model-dir /tmp/zactor-lease-cuda --epochs 5 --seed 1 \
    --device cuda --threads "$threads" >"$logs/accuracy_cuda.txt" 2>&1
echo "rc=$?" >>"$logs/accuracy_cuda.txt"
#  The same in bf16 and fp16 (cuDNN's half paths in a whole training), and
#  with each step's calls launched one by one rather than replayed as a
#  CUDA graph (the same kernels in the same order).
for p in mixed_bfloat16 mixed_float16 nographs; do
    rm -rf "/tmp/zactor-lease-$p"
    if [ $p = nographs ]; then set -- --precision fp32; g=0; else set -- --precision $p; g=1; fi
    ZA_CUDA_GRAPHS=$g timeout 200 "$build/zactor-run" --model-dir "/tmp/zactor-lease-$p" \
        --epochs 5 --seed 1 --device cuda --threads "$threads" "$@" >"$logs/accuracy_$p.txt" 2>&1
    echo "rc=$?" >>"$logs/accuracy_$p.txt"
done
wait $cpu
for d in cpu cuda mixed_bfloat16 mixed_float16 nographs; do
    echo "$d: $(grep -E 'test accuracy|trained to|rc=|rror|CUDA graphs' "$logs/accuracy_$d.txt" | tr '\n' ' ')"
done
save
for round in 1 2; do
    for check in 8 2; do
        need=150                   #  seconds a check needs (2 has a column more now)
        [ "$(left)" -gt "$need" ] || { say "$check (round $round): skipped, $(left) s left"; continue; }
        say "$check (round $round)"
        ONLY=$check bash "$here/gpu.sh" "$build" "$logs/$check-$round" 5 1
        save
    done
done
say "done"
save
