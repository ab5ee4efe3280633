#!/usr/bin/env bash
#  Image input speed (issue 23): decode + resize to 224x224 gray of JPEGs of the
#  Retinal OCT set's size (512x496 gray, quality 75: about the set's mean file
#  size, 5.8 GB / 84,495 = 69 KB; made of Fashion-MNIST's real pixels), one
#  epoch of a folder of class folders, images per second on ONE core (taskset),
#  alternating zactor's input pipeline (bench_decode) with:
#    torch  torchvision ImageFolder + DataLoader(num_workers=0), PIL transforms
#    pil    a tf.data-style PIL map function with no workers
#  and the ratio of medians (target: zactor >= 2x torch per core). Then the
#  share of a training step spent waiting for input, from zactor-run's own
#  per-step account, with --input-threads at its default (target < 2%).
#  Needs python3-torchvision and python3-pil (benchmarks only) and a build with
#  -DZA_BUILD_BENCH=ON.
#  Usage: bench/images.sh [BUILD_DIR] [IMAGES] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
images=${2:-1000}
rounds=${3:-3}
decode="$build/bench_decode"
[ -x "$decode" ] || { echo "build with -DZA_BUILD_BENCH=ON first: $decode is missing" >&2; exit 1; }
/usr/bin/python3 -c 'import torchvision, PIL' 2>/dev/null \
    || { echo "apt-get install python3-torchvision python3-pil" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/za_bench_images.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|sse4_2)$' | xargs)"
"$decode" make "$work/oct" "$images"
echo "files: $(du -sk "$work/oct" | cut -f1) KiB"
core=$(( $(nproc) - 1 ))
median () { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }
rate () { sed -E 's/.*images\/s ([0-9.]+).*/\1/'; }
declare -A all
for ((r = 0; r < rounds; r++)); do
    for who in zactor zactor_bilinear torch pil; do
        case $who in
            zactor) line=$(taskset -c "$core" "$decode" run "$work/oct" 224 area 1) ;;
            zactor_bilinear) line=$(taskset -c "$core" "$decode" run "$work/oct" 224 bilinear 1) ;;
            *) line=$(OMP_NUM_THREADS=1 taskset -c "$core" /usr/bin/python3 \
                      "$here/images_peers.py" "$who" "$work/oct" 224) ;;
        esac
        echo "round $((r + 1)) $who: $line"
        all[$who]+="$(rate <<<"$line") "
    done
done
printf '\n%-16s %12s\n' "one core" "images/s"
declare -A med
for who in zactor zactor_bilinear torch pil; do
    med[$who]=$(tr ' ' '\n' <<<"${all[$who]}" | grep . | median)
    printf '%-16s %12.1f\n' "$who" "${med[$who]}"
done
awk -v z="${med[zactor]}" -v t="${med[torch]}" -v p="${med[pil]}" \
    'BEGIN {printf "zactor / torch %.2fx, zactor / pil %.2fx\n", z / t, z / p}'

#  Waiting for input in training: the README's OCT model at 224x224, one
#  process (--local, no other worker, no evaluator), default --input-threads.
echo
echo "training from the folder, --input-threads default, batch 32:"
"$build/zactor-run" --local --workers 0 --evaluators 0 --no-eval --train-data "$work/oct" \
    --image-size 224 --channels 1 --batch-size 32 --max-steps "${ZA_BENCH_STEPS:-20}" \
    --model "conv2d(32,3,relu) maxpool(2) conv2d(64,3,relu) maxpool(2) conv2d(64,3,relu) globalavgpool dense(4)" \
    --model-dir "$work/model" > "$work/run.out" 2>&1 || { cat "$work/run.out" >&2; exit 1; }
grep -h "per step" "$work/model/logs/"chief-*.log
