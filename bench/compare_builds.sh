#!/usr/bin/env bash
#  Two builds of zactor against each other (before and after a change): the
#  single-process training speed of bench_train (what bench/train_vs_torch.sh
#  measures) and the asynchronous cluster's global steps/sec and per-step time
#  of bench/ps_vs_workers.sh, the two builds alternating round by round (the
#  machine's speed drifts), medians and the ratio NEW / OLD.
#  Usage: bench/compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
old=${1:?old build dir}
new=${2:?new build dir}
rounds=${3:-5}
steps=${4:-150}
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
field () { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
echo "host: $(nproc) cores; env OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
echo "old: $old"
echo "new: $new"

printf '\nsingle process, seed CNN (bench_train speed BATCH THREADS %s), images/sec:\n' "$steps"
printf '%-6s %-7s %10s %10s %8s\n' batch threads old new new/old
for config in "64 1" "64 2" "128 2"; do
    set -- $config
    a=(); b=()
    for ((r = 0; r < rounds; r++)); do
        a+=("$("$old/bench_train" speed "$1" "$2" "$steps" 20 | field images_per_sec)")
        b+=("$("$new/bench_train" speed "$1" "$2" "$steps" 20 | field images_per_sec)")
    done
    am=$(printf '%s\n' "${a[@]}" | median)
    bm=$(printf '%s\n' "${b[@]}" | median)
    printf '%-6s %-7s %10.0f %10.0f %7.3fx\n' "$1" "$2" "$am" "$bm" "$(echo "$bm / $am" | bc -l)"
done

printf '\ncluster (bench/ps_vs_workers.sh, 400 steps, 1 round each, %s rounds alternating):\n' \
    "$rounds"
for ((r = 0; r < rounds; r++)); do
    for side in old new; do
        dir=$([ "$side" = old ] && echo "$old" || echo "$new")
        "$here/ps_vs_workers.sh" "$dir" 400 1 2>/dev/null \
            | awk -v side="$side" '/^[12] +[12] +chief 0 /{print side, $0}' \
            >> "${TMPDIR:-/tmp}/compare_builds.$$"
    done
done
printf '%-4s %-7s %-3s %18s %18s %14s\n' side workers ps "steps/s (metrics)" "chief step ms" \
    "other %"
for side in old new; do
    for w in 1 2; do
        for p in 1 2; do
            rows=$(awk -v s="$side" -v w="$w" -v p="$p" '$1 == s && $2 == w && $3 == p' \
                   "${TMPDIR:-/tmp}/compare_builds.$$")
            sps=$(awk '{print $6}' <<<"$rows" | median)
            ms=$(awk '{print $8}' <<<"$rows" | median)
            oth=$(awk '{print $NF}' <<<"$rows" | tr -d '%' | median)
            printf '%-4s %-7s %-3s %18s %18s %14s\n' "$side" "$w" "$p" "$sps" "$ms" "$oth"
        done
    done
done
rm -f "${TMPDIR:-/tmp}/compare_builds.$$"
