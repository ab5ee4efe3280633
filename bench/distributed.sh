#!/usr/bin/env bash
#  The distributed benchmark in one run: global steps/sec and the per-step
#  time split (compute, push+reply, other) for 1-2 workers x 1-2 ps as
#  processes, then push+reply bytes/sec against raw ZeroMQ for the same
#  message sizes. Usage: bench/distributed.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
"$here/ps_vs_workers.sh" "$build"
echo
echo "push+reply through a ps against a raw ZeroMQ echo of the same frames (tcp loopback):"
# The roles run with these malloc thresholds (zactor-run sets them); so does this run.
MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=268435456 "$build/bench_wire" 2>/dev/null
