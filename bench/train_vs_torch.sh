#!/usr/bin/env bash
#  Seed CNN training speed, zactor against PyTorch (Debian python3-torch) on the
#  identical model, batch and thread count, in fp32 and in mixed precision
#  (zactor --precision mixed_bfloat16, PyTorch torch.autocast(bfloat16)),
#  alternating the four programs (the machine's speed drifts) and quoting
#  ratios of medians: zactor fp32 / PyTorch fp32, and zactor bf16 / PyTorch's
#  faster setting (fp32 or bf16, whichever was faster at that batch and
#  thread count). zactor's GFLOP/s counts 3 forward passes per image
#  (forward + backward) and is compared with the peaks measured in the same
#  run: cblas_sgemm's (n=1536) for fp32, oneDNN's bf16 matmul for bf16.
#  On a CPU without bf16 instructions the bf16 columns say "-".
#  Usage: bench/train_vs_torch.sh [BUILD_DIR] [ROUNDS] [STEPS]   (env PYTHON, BATCHES="32 64 128")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
steps=${3:-150}
warmup=20
bench="$build/bench_train"
python=${PYTHON:-/usr/bin/python3}     #  PYTHON: another with torch (a device machine's)
[ -x "$bench" ] || { echo "build first: $bench is missing" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null \
    || { echo "PyTorch missing: apt-get install python3-torch" >&2; exit 1; }
# PyTorch's best setting on this machine (torch.set_num_threads(2), OPENBLAS_NUM_THREADS=1, glibc malloc thresholds raised: ~35% faster than out of the box).
torch_env=(env OPENBLAS_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=1073741824
           MALLOC_TRIM_THRESHOLD_=4294967296)
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "cpu flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | xargs)"
echo "torch: $("$python" -c 'import torch; print(torch.__version__)')"
echo "env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)} (both programs)"
declare -A peak bpeak
bf16=1
ZA_BENCH_PRECISION=mixed_bfloat16 "$bench" speed 32 1 2 0 >/dev/null 2>&1 || bf16=0
for t in 1 2; do
    line=$("$bench" peak "$t")
    echo "$line"
    peak[$t]=$(sed -E 's/.*gflops=([0-9.]+).*/\1/' <<<"$line")
    bpeak[$t]=0
    if [ $bf16 = 1 ] && line=$("$bench" peak_bf16 "$t"); then
        echo "$line"
        bpeak[$t]=$(sed -E 's/.*gflops=([0-9.]+).*/\1/' <<<"$line")
    fi
done
[ $bf16 = 1 ] || echo "zactor refuses mixed_bfloat16 here (no bf16 instructions): bf16 columns are -"
#  Arithmetic in awk (bc is not on every machine).
calc () { awk "BEGIN {print $1}"; }
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
rate () { sed -E 's/.*images_per_sec=([0-9.]+).*/\1/'; }
gflops () { sed -E 's/.*gflops=([0-9.]+).*/\1/'; }
torch_run () {
    "${torch_env[@]}" "$python" "$here/torch_fmnist.py" --mode speed --batch "$1" \
        --threads "$2" --steps "$steps" --warmup "$warmup" "${@:3}" 2>/dev/null | rate
}
printf '\n%-5s %-7s %10s %10s %10s %10s %8s %8s %8s %8s\n' batch threads "zactor" "zactor" \
    "torch" "torch" "fp32" "bf16 vs" "zactor" "zactor"
printf '%-5s %-7s %10s %10s %10s %10s %8s %8s %8s %8s\n' "" "" "fp32 i/s" "bf16 i/s" \
    "fp32 i/s" "bf16 i/s" "ratio" "faster" "fp32 pk" "bf16 pk"
for batch in ${BATCHES:-32 64 128}; do
    for threads in 1 2; do
        z=(); zb=(); p=(); pb=(); g=(); gb=()
        for ((r = 0; r < rounds; r++)); do
            line=$("$bench" speed "$batch" "$threads" "$steps" "$warmup")
            z+=("$(rate <<<"$line")"); g+=("$(gflops <<<"$line")")
            p+=("$(torch_run "$batch" "$threads")")
            if [ $bf16 = 1 ]; then
                line=$(ZA_BENCH_PRECISION=mixed_bfloat16 "$bench" speed "$batch" "$threads" \
                       "$steps" "$warmup")
                zb+=("$(rate <<<"$line")"); gb+=("$(gflops <<<"$line")")
            fi
            pb+=("$(torch_run "$batch" "$threads" --bf16)")
        done
        zm=$(printf '%s\n' "${z[@]}" | median)
        pm=$(printf '%s\n' "${p[@]}" | median)
        pbm=$(printf '%s\n' "${pb[@]}" | median)
        gm=$(printf '%s\n' "${g[@]}" | median)
        best=$(calc "($pm > $pbm)? $pm: $pbm")
        if [ $bf16 = 1 ]; then
            zbm=$(printf '%s\n' "${zb[@]}" | median)
            gbm=$(printf '%s\n' "${gb[@]}" | median)
            printf '%-5s %-7s %10.0f %10.0f %10.0f %10.0f %7.2fx %7.2fx %7.0f%% %7.0f%%\n' \
                "$batch" "$threads" "$zm" "$zbm" "$pm" "$pbm" "$(calc "$zm / $pm")" \
                "$(calc "$zbm / $best")" "$(calc "100 * $gm / ${peak[$threads]}")" \
                "$(calc "100 * $gbm / ${bpeak[$threads]}")"
        else
            printf '%-5s %-7s %10.0f %10s %10.0f %10.0f %7.2fx %8s %7.0f%% %8s\n' \
                "$batch" "$threads" "$zm" - "$pm" "$pbm" "$(calc "$zm / $pm")" - \
                "$(calc "100 * $gm / ${peak[$threads]}")" -
        fi
    done
done
