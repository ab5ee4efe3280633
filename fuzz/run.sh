#!/usr/bin/env bash
#  Builds the libFuzzer harnesses (clang, -DZA_FUZZ=ON, in build-fuzz/) and runs
#  one for SECONDS (default 600) on its seed corpus, with AddressSanitizer and
#  UBSan. A crash leaves crash-* in the current directory: make it a test.
#  Usage: fuzz/run.sh [HARNESS] [SECONDS]
#  HARNESS: fuzz_broker, fuzz_wire, fuzz_tfconfig, fuzz_job, fuzz_stack, fuzz_shm, fuzz_shm_link,
#  fuzz_checkpoint, fuzz_onnx, fuzz_idx, fuzz_tfrecord or fuzz_image (each fuzz/fuzz_*.c; its seeds in
#  fuzz/corpus/NAME).
#  ctest replays every seed corpus with 300 fixed variants per file
#  (fuzz/replay.c, any compiler): the brief run CI does.
#  Needs Debian's clang and libclang-rt-14-dev (libFuzzer).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
harness=${1:-fuzz_broker}
seconds=${2:-600}
build="$here/../build-fuzz"
CC=clang cmake -S "$here/.." -B "$build" -DZA_FUZZ=ON -DZA_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$build" -j2 --target "$harness" > /dev/null
corpus="$build/corpus-${harness#fuzz_}"
mkdir -p "$corpus"
cp -n "$here/corpus/${harness#fuzz_}"/* "$corpus"/ 2>/dev/null || true
#  -close_fd_mask=2: the broker's log lines would drown the fuzzer's own.
#  -malloc_limit_mb: one allocation above it is a finding (a header that
#  declares more than the limits must be refused before anything is allocated).
"$build/$harness" -max_total_time="$seconds" -close_fd_mask=2 -print_final_stats=1 \
    -malloc_limit_mb="${ZA_FUZZ_MALLOC_MB:-256}" -rss_limit_mb=2048 "$corpus"
