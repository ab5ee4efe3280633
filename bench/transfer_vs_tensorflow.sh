#!/usr/bin/env bash
#  Transfer learning speed against TensorFlow 2 (Keras 3) and PyTorch 2 from
#  PyPI (bench/venv.sh): VGG16's base at SIDE x SIDE x 3 with a 10-way head,
#  trained with the base frozen and whole, in fp32 (BF16=1: each in its bf16
#  setting: zactor mixed_bfloat16, Keras's mixed_bfloat16 policy,
#  torch.autocast(bfloat16)), zactor (bench_train
#  model, --freeze conv2d), Keras (base.trainable = False, model.fit) and
#  PyTorch 2 eager (requires_grad_(False)), alternating; images per second,
#  medians, ratios. bench/transfer.sh is the same against Debian's PyTorch.
#  Usage: bench/transfer_vs_tensorflow.sh [BUILD_DIR] [SIDE] [ROUNDS] [STEPS]
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
py=$("$here/venv.sh")
export TF_CPP_MIN_LOG_LEVEL=2
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | xargs)"
echo "peers: TensorFlow $("$py" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)," \
     "PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "VGG16 base + head, ${side}x${side}x3, batch $batch, $threads threads, $steps steps after $warmup"
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
rate () { sed -n -E 's/.*images_per_sec=([0-9.]+).*/\1/p' | tail -1; }
model="vgg16 globalavgpool dense(10)"
bf16=(); zprecision=fp32
if [ "${BF16:-0}" = 1 ]; then bf16=(--bf16); zprecision=mixed_bfloat16; fi
echo "precision: $zprecision (and the peers' own bf16 settings when BF16=1)"
export ZA_BENCH_PRECISION=$zprecision
runs=(zactor_frozen keras_frozen torch_frozen zactor_whole keras_whole torch_whole)
declare -A all
for ((r = 0; r < rounds; r++)); do
    for run in "${runs[@]}"; do
        frozen=(); [[ $run == *frozen ]] && frozen=(--frozen)
        case $run in
            zactor_frozen) line=$("$build/bench_train" model "$model" "$side" "$batch" "$threads" "$steps" "$warmup" conv2d) ;;
            zactor_whole) line=$("$build/bench_train" model "$model" "$side" "$batch" "$threads" "$steps" "$warmup") ;;
            keras_*) line=$("$py" "$here/transfer_keras.py" "$side" "$batch" "$threads" "$steps" "$warmup" "${frozen[@]}" "${bf16[@]}" 2>/dev/null) ;;
            torch_*) line=$(OPENBLAS_NUM_THREADS=1 "$py" "$here/transfer_torch.py" "$side" "$batch" "$threads" "$steps" "$warmup" "${frozen[@]}" "${bf16[@]}" 2>/dev/null) ;;
        esac
        all[$run]+="$(rate <<<"$line") "
    done
done
printf '\n%-14s %12s\n' run "images/s"
declare -A m
for run in "${runs[@]}"; do
    m[$run]=$(tr ' ' '\n' <<<"${all[$run]}" | grep . | median)
    printf '%-14s %12.2f\n' "$run" "${m[$run]}"
done
awk -v zf="${m[zactor_frozen]}" -v kf="${m[keras_frozen]}" -v tf="${m[torch_frozen]}" \
    -v zw="${m[zactor_whole]}" -v kw="${m[keras_whole]}" -v tw="${m[torch_whole]}" 'BEGIN {
        printf "frozen base: zactor / keras %.2fx, zactor / torch %.2fx\n", zf / kf, zf / tf
        printf "the whole net: zactor / keras %.2fx, zactor / torch %.2fx\n", zw / kw, zw / tw }'
