#!/usr/bin/env bash
#  `zactor-run serve` under load (issue 47): requests/s, images/s and the
#  latency's p50, p90 and p99 at 1, 8 and 64 concurrent clients, each
#  posting one Fashion-MNIST image per request (TF Serving's row format),
#  then 8 clients posting 32 images each. The seed CNN, trained 300 steps.
#  The server and bench_serve share this machine's cores: on 2 cores the
#  client's own time is in the figures.
#  Usage: bench/serve.sh [BUILD_DIR] [SECONDS] [SERVE FLAGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
seconds=${2:-10}
shift $(( $# > 2 ? 2 : $# ))
work=$(mktemp -d /tmp/za_serve_bench.XXXXXX)
trap 'kill $server 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' | xargs)"
"$build/zactor-run" --max-steps 300 --model-dir "$work/fmnist" >/dev/null 2>&1
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/zactor-run" serve --model-dir "$work/fmnist" --port "$port" "$@" 2>"$work/serve.log" &
server=$!
until grep -q serving "$work/serve.log" 2>/dev/null; do sleep 0.1; done
echo "server: zactor-run serve $*"
for clients in 1 8 64; do
    "$build/bench_serve" "$port" /v1/models/fmnist:predict "$clients" "$seconds" 1
done
"$build/bench_serve" "$port" /v1/models/fmnist:predict 8 "$seconds" 32
python3 - "$port" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen("http://localhost:%s/metrics" % sys.argv[1]).read().decode()
value = lambda name: float(re.search(r"^%s\{[^}]*\} (\S+)" % name, text, re.M).group(1))
batches, images = value("zactor_serve_batches_total"), value("zactor_serve_batch_instances_total")
print("batches: %d, %.1f images each on average" % (batches, images / batches))
PY
