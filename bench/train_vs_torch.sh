#!/usr/bin/env bash
#  Seed CNN training speed, zactor against PyTorch (Debian python3-torch) on the
#  identical model, batch and thread count, alternating the two programs
#  (the machine's speed drifts) and quoting the ratio of medians.
#  zactor's GFLOP/s counts 3 forward passes per image (forward + backward) and
#  is compared with cblas_sgemm's peak (n=1536) measured in the same run.
#  Usage: bench/train_vs_torch.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
steps=${3:-150}
warmup=20
bench="$build/bench_train"
[ -x "$bench" ] || { echo "build first: $bench is missing" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null \
    || { echo "PyTorch missing: apt-get install python3-torch" >&2; exit 1; }
# PyTorch's best setting on this machine (torch.set_num_threads(2), OPENBLAS_NUM_THREADS=1, glibc malloc thresholds raised: ~35% faster than out of the box).
torch_env=(env OPENBLAS_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=1073741824
           MALLOC_TRIM_THRESHOLD_=4294967296)
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)} (both programs)"
declare -A peak
for t in 1 2; do
    line=$("$bench" peak "$t")
    echo "$line"
    peak[$t]=$(sed -E 's/.*gflops=([0-9.]+).*/\1/' <<<"$line")
done
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
printf '\n%-6s %-7s %14s %14s %7s %12s %8s\n' batch threads "zactor img/s" "torch img/s" ratio \
    "zactor GF/s" "of peak"
for batch in 32 64 128; do
    for threads in 1 2; do
        z=(); p=(); g=()
        for ((r = 0; r < rounds; r++)); do
            line=$("$bench" speed "$batch" "$threads" "$steps" "$warmup")
            z+=("$(sed -E 's/.*images_per_sec=([0-9.]+).*/\1/' <<<"$line")")
            g+=("$(sed -E 's/.*gflops=([0-9.]+).*/\1/' <<<"$line")")
            line=$("${torch_env[@]}" /usr/bin/python3 "$here/torch_fmnist.py" --mode speed \
                   --batch "$batch" --threads "$threads" --steps "$steps" --warmup "$warmup" 2>/dev/null)
            p+=("$(sed -E 's/.*images_per_sec=([0-9.]+).*/\1/' <<<"$line")")
        done
        zm=$(printf '%s\n' "${z[@]}" | median)
        pm=$(printf '%s\n' "${p[@]}" | median)
        gm=$(printf '%s\n' "${g[@]}" | median)
        printf '%-6s %-7s %14.0f %14.0f %6.2fx %12.1f %7.0f%%\n' "$batch" "$threads" "$zm" "$pm" \
            "$(echo "$zm / $pm" | bc -l)" "$gm" "$(echo "100 * $gm / ${peak[$threads]}" | bc -l)"
    done
done
