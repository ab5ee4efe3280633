#!/usr/bin/env bash
#  Builds the libFuzzer harnesses (clang, -DZA_FUZZ=ON, in build-fuzz/) and runs
#  one for SECONDS (default 600) on its seed corpus, with AddressSanitizer and
#  UBSan. A crash leaves crash-* in the current directory: make it a test.
#  Usage: fuzz/run.sh [HARNESS] [SECONDS]     (HARNESS: fuzz_broker)
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
"$build/$harness" -max_total_time="$seconds" -close_fd_mask=2 -print_final_stats=1 "$corpus"
