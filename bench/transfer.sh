#!/usr/bin/env bash
#  Transfer learning speed (issue 24): VGG16's base at SIDE x SIDE x 3 (64 by
#  default: 224 is too heavy for 2 cores; also run 224 for a few steps) with a
#  10-way head, trained with the base frozen and not, zactor (bench_train
#  model, --freeze conv2d) against PyTorch (requires_grad_(False) on the same
#  layers), alternating, images per second, medians and ratios.
#  Usage: bench/transfer.sh [BUILD_DIR] [SIDE] [ROUNDS] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
side=${2:-64}
rounds=${3:-3}
steps=${4:-10}
batch=16
warmup=2
threads=$(nproc)
[ -x "$build/bench_train" ] || { echo "build first: $build/bench_train is missing" >&2; exit 1; }
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null \
    || { echo "apt-get install python3-torchvision" >&2; exit 1; }
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | xargs)"
echo "VGG16 base + head, ${side}x${side}x3, batch $batch, $threads threads, $steps steps after $warmup"
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
rate () { sed -E 's/.*images_per_sec=([0-9.]+).*/\1/'; }
model="vgg16 globalavgpool dense(10)"
declare -A all
for ((r = 0; r < rounds; r++)); do
    for run in zactor_frozen torch_frozen zactor_trained torch_trained zactor_cached; do
        case $run in
            zactor_cached) line=$("$build/bench_train" model "$model" "$side" "$batch" "$threads" "$steps" "$warmup" conv2d cache) ;;
            zactor_frozen) line=$("$build/bench_train" model "$model" "$side" "$batch" "$threads" "$steps" "$warmup" conv2d) ;;
            zactor_trained) line=$("$build/bench_train" model "$model" "$side" "$batch" "$threads" "$steps" "$warmup") ;;
            torch_frozen) line=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/transfer_torch.py" "$side" "$batch" "$threads" "$steps" "$warmup" --frozen) ;;
            torch_trained) line=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/transfer_torch.py" "$side" "$batch" "$threads" "$steps" "$warmup") ;;
        esac
        echo "round $((r + 1)) $run: $line"
        all[$run]+="$(rate <<<"$line") "
    done
done
printf '\n%-16s %12s\n' run "images/s"
declare -A med
for run in zactor_frozen torch_frozen zactor_trained torch_trained zactor_cached; do
    med[$run]=$(tr ' ' '\n' <<<"${all[$run]}" | grep . | median)
    printf '%-16s %12.1f\n' "$run" "${med[$run]}"
done
awk -v zf="${med[zactor_frozen]}" -v tf="${med[torch_frozen]}" -v zt="${med[zactor_trained]}" \
    -v tt="${med[torch_trained]}" -v zc="${med[zactor_cached]}" 'BEGIN {
        printf "--cache-frozen after its first epoch: zactor / torch frozen %.2fx\n", zc / tf
        printf "frozen base: zactor / torch %.2fx; the whole net: zactor / torch %.2fx\n", zf / tf, zt / tt
        printf "freezing the base speeds a step up: zactor %.2fx, torch %.2fx\n", zf / zt, tf / tt }'
