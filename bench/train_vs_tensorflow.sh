#!/usr/bin/env bash
#  The seed CNN's training speed: zactor against Keras 3 on TensorFlow 2 and
#  against PyTorch 2 (eager and torch.compile), all from PyPI (bench/venv.sh),
#  on the same model, optimizer (Adam), batch and thread count, each in fp32
#  and in its bf16 setting (zactor --precision mixed_bfloat16, Keras's
#  mixed_bfloat16 policy, torch.autocast(bfloat16)). The programs alternate
#  round by round (the machine's speed drifts); the table holds medians and
#  the ratios zactor / the peer's faster setting. Every program leaves its
#  first WARMUP steps out (TensorFlow's tracing, torch.compile's compiling).
#  Usage: bench/train_vs_tensorflow.sh [BUILD_DIR] [ROUNDS] [STEPS]
#         (env BATCHES="32 64 128", THREADS="1 2")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
steps=${3:-150}
warmup=20
bench="$build/bench_train"
[ -x "$bench" ] || { echo "build first: $bench is missing" >&2; exit 1; }
py=$("$here/venv.sh")
torch_env=(env OPENBLAS_NUM_THREADS=1)
export TF_CPP_MIN_LOG_LEVEL=2
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "cpu flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | xargs)"
echo "peers: TensorFlow $("$py" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)" \
     "Keras $("$py" -c 'import keras; print(keras.__version__)' 2>/dev/null)" \
     "PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
bf16=1
ZA_BENCH_PRECISION=mixed_bfloat16 "$bench" speed 32 1 2 0 >/dev/null 2>&1 || bf16=0
[ $bf16 = 1 ] || echo "zactor refuses mixed_bfloat16 here (no bf16 instructions): its bf16 column is -"
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
rate () { sed -n -E 's/.*images_per_sec=([0-9.]+).*/\1/p' | tail -1; }
calc () { awk "BEGIN {print $1}"; }
run () {   #  program batch threads: images/sec
    local b=$2 t=$3
    case $1 in
        zactor) "$bench" speed "$b" "$t" "$steps" "$warmup" | rate ;;
        zactor_bf16) if [ $bf16 = 1 ]; then ZA_BENCH_PRECISION=mixed_bfloat16 "$bench" speed \
                         "$b" "$t" "$steps" "$warmup" | rate; else echo 0; fi ;;
        keras) "$py" "$here/keras_fmnist.py" --batch "$b" --threads "$t" --steps "$steps" \
                   --warmup "$warmup" 2>/dev/null | rate ;;
        keras_bf16) "$py" "$here/keras_fmnist.py" --batch "$b" --threads "$t" --steps "$steps" \
                        --warmup "$warmup" --bf16 2>/dev/null | rate ;;
        torch*) local flags=()
                [[ $1 == *bf16* ]] && flags+=(--bf16)
                [[ $1 == *compile* ]] && flags+=(--compile)
                "${torch_env[@]}" "$py" "$here/torch_fmnist.py" --mode speed --batch "$b" \
                    --threads "$t" --steps "$steps" --warmup "$warmup" "${flags[@]}" \
                    2>/dev/null | rate ;;
    esac
}
programs=(zactor zactor_bf16 keras keras_bf16 torch torch_bf16 torch_compile torch_compile_bf16)
printf '\nimages/sec, medians of %d rounds of %d steps\n' "$rounds" "$steps"
printf '%-5s %-3s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s\n' batch thr "zactor" "zactor" \
    "keras" "keras" "torch" "torch" "compile" "compile" "zactor/" "zactor/"
printf '%-5s %-3s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s\n' "" "" fp32 bf16 fp32 bf16 fp32 \
    bf16 fp32 bf16 "keras" "torch"
for batch in ${BATCHES:-32 64 128}; do
    for threads in ${THREADS:-1 2}; do
        declare -A all=()
        for ((r = 0; r < rounds; r++)); do
            for p in "${programs[@]}"; do
                all[$p]+="$(run "$p" "$batch" "$threads") "
            done
        done
        declare -A m=()
        for p in "${programs[@]}"; do
            m[$p]=$(printf '%s\n' ${all[$p]} | median)
        done
        zbest=$(calc "(${m[zactor]} > ${m[zactor_bf16]})? ${m[zactor]}: ${m[zactor_bf16]}")
        kbest=$(calc "(${m[keras]} > ${m[keras_bf16]})? ${m[keras]}: ${m[keras_bf16]}")
        tbest=${m[torch]}
        for p in torch_bf16 torch_compile torch_compile_bf16; do
            tbest=$(calc "(${m[$p]} > $tbest)? ${m[$p]}: $tbest")
        done
        printf '%-5s %-3s %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.2fx %8.2fx\n' \
            "$batch" "$threads" "${m[zactor]}" "${m[zactor_bf16]}" "${m[keras]}" \
            "${m[keras_bf16]}" "${m[torch]}" "${m[torch_bf16]}" "${m[torch_compile]}" \
            "${m[torch_compile_bf16]}" "$(calc "$zbest / $kbest")" "$(calc "$zbest / $tbest")"
        unset all m
    done
done
echo "zactor/keras, zactor/torch: zactor's faster setting over the peer's fastest one"
