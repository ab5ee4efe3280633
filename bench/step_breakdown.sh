#!/usr/bin/env bash
#  Where a training step of the seed CNN goes, by oneDNN primitive: each
#  convolution's and matmul's milliseconds per step, its share of the step
#  and its GFLOP/s, the reorders, and what is left for zactor's own code
#  (pooling, ReLU masks, bias, casts, the optimizer, the input). For the
#  bf16 peak's target (precision.md): which passes run on which ISA (AMX's
#  brgconv, AVX512-BF16's jit) and at what rate. DNNL_VERBOSE=1 prints every
#  primitive's time; two runs of STEPS and 2 x STEPS steps are subtracted,
#  so start-up and warm-up fall out. Printing costs a little: the step time
#  here is a few percent above bench/train_vs_torch.sh's. Then the same
#  step by layer (bench_train's ZA_BENCH_PROFILE): a layer's time less its
#  primitives' is zactor's code around them. On a CPU with AMX, bf16 runs
#  again with DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 (the same code without AMX)
#  and with ZA_MICRO_BATCH=BATCH (one product per layer and thread a step,
#  where the default splits a thread's examples into micro-batches of 16).
#  Usage: bench/step_breakdown.sh [BUILD] [BATCH] [THREADS] [STEPS] [PRECISIONS]
#  (PRECISIONS: "fp32 mixed_bfloat16", the default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
batch=${2:-64}
threads=${3:-1}
steps=${4:-40}
precisions=${5:-fp32 mixed_bfloat16}
#  On AMX, bf16 again without it (oneDNN's and zactor's AVX512-BF16 code):
#  what AMX changes, in the convolutions and in the code around them.
if [ -z "${DNNL_MAX_CPU_ISA:-}${ONEDNN_MAX_CPU_ISA:-}" ] && grep -q -w amx_bf16 /proc/cpuinfo \
   && [[ " $precisions " == *" mixed_bfloat16 "* ]]; then
    again=1
fi
bench="$build/bench_train"
[ -x "$bench" ] || { echo "build first: $bench is missing" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "cpu flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | xargs)"
#  One run: the summed milliseconds per primitive (kind, implementation,
#  pass, shape) into $2, the run's line into $2.line.
run () {
    local precision=$1 out=$2 n=$3
    ZA_BENCH_PRECISION=$precision DNNL_VERBOSE=1 "$bench" speed "$batch" "$threads" "$n" 10 \
        >"$out.raw" 2>&1
    grep -m1 '^zactor ' "$out.raw" >"$out.line"
    grep -E '^(onednn|dnnl)_verbose,exec' "$out.raw" \
        | awk -F, '{k = $4 "," $5 "," $6 "," $(NF - 1); t[k] += $NF; c[k]++}
                   END {for (k in t) printf "%s\t%.6f\t%d\n", k, t[k], c[k]}' >"$out"
}
for precision in $precisions; do
    if ! run "$precision" "$work/a" "$steps" || ! run "$precision" "$work/b" $((2 * steps)); then
        echo "$precision: bench_train failed:"; tail -3 "$work/a.raw" "$work/b.raw"; continue
    fi
    seconds=$(sed -nE 's/.* seconds=([0-9.]+).*/\1/p' "$work/b.line")
    echo
    echo "$precision, batch $batch, $threads thread(s): $(cut -d' ' -f2 "$work/b.line")"
    awk -F'\t' -v steps="$steps" -v seconds="$seconds" -v total_steps=$((2 * steps)) '
        function flops(kind, shape,   key, n, i, f, part, x, y) {
            if (kind == "convolution") {
                #  mb16_ic32oc64_ih13oh11kh3sh1dh0ph0_iw13ow11kw3sw1dw0pw0
                f = 2
                n = split("mb ic oc oh ow kh kw", key, " ")
                for (i = 1; i <= n; i++)
                    if (match(shape, key[i] "[0-9]+"))
                        f *= substr(shape, RSTART + length(key[i]), RLENGTH - length(key[i]))
                return f
            }
            if (kind == "matmul" && split(shape, part, ":") == 3) {
                split(part[1], x, "x"); split(part[2], y, "x")
                return 2 * x[1] * x[2] * y[2]
            }
            return 0
        }
        FNR == NR {ta[$1] = $2; ca[$1] = $3; next}
        {
            ms = ($2 - ta[$1]) / steps
            if (ms <= 0)
                next
            calls = ($3 - ca[$1]) / steps
            split($1, f, ",")
            g = flops(f[1], f[4])
            row[$1] = ms; rate[$1] = g? sprintf("%.1f", g * calls / (ms * 1e6)): "-"
            sum += ms
        }
        END {
            step = 1000 * seconds / total_steps
            printf "step %.3f ms; oneDNN %.3f ms (%.0f%%), the rest %.3f ms (%.0f%%)\n",
                   step, sum, 100 * sum / step, step - sum, 100 * (step - sum) / step
            printf "%9s %6s %8s  %s\n", "ms/step", "share", "GFLOP/s",
                   "primitive,implementation,pass,shape"
            fflush ()
            for (k in row)
                printf "%9.3f %5.1f%% %8s  %s\n", row[k], 100 * row[k] / step, rate[k], k \
                    | "sort -rn"
        }' "$work/a" "$work/b"
    #  The same step by layer (wall time, oneDNN's calls and zactor's code
    #  around them together; without DNNL_VERBOSE's printing): a layer's
    #  time less its primitives' above is zactor's own code in that layer.
    echo "by layer (ms/step; conv2d+maxpool: the first pair, as one):"
    ZA_BENCH_PROFILE=1 ZA_BENCH_PRECISION=$precision "$bench" speed "$batch" "$threads" \
        $((2 * steps)) 10 2>/dev/null \
        | awk -v threads="$threads" '/^profile row=/ {
                   for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                   printf "  %-5s %-15s forward %7s  backward %7s\n", v["row"], v["name"],
                          v["forward_ms"], v["backward_ms"]
               }
               /^profile step_ms=/ {
                   for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                   if (threads == 1)
                       printf "  step %s ms: layers and loss %s, outside them %s " \
                              "(optimizer, input, hand-offs)\n",
                              v["step_ms"], v["layers_ms"], v["outside_ms"]
                   else
                       printf "  step %s ms; layers and loss %s ms summed over %d " \
                              "threads\n", v["step_ms"], v["layers_ms"], threads
               }' || echo "  (the profiled run failed)"
done
if [ "${again:-0}" = 1 ]; then
    echo
    echo "== again with DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 (no AMX)"
    DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 bash "$0" "$build" "$batch" "$threads" "$steps" \
        mixed_bfloat16 || echo "(failed)"
    echo
    echo "== again on AMX, each thread's examples one micro-batch (ZA_MICRO_BATCH=$batch)"
    ZA_MICRO_BATCH=$batch DNNL_MAX_CPU_ISA=ALL bash "$0" "$build" "$batch" "$threads" "$steps" \
        mixed_bfloat16 || echo "(failed)"
fi
