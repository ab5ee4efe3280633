#!/usr/bin/env bash
#  What --trace costs (issue 49: at most 2% of images/s): the seed CNN's
#  --local job (chief, 2 workers, ps, evaluator) of STEPS steps, run
#  alternately without and with --trace, ROUNDS times each; each run's
#  images/s is the mean of its metrics.jsonl summaries after the first (the
#  job's examples per second); medians and their ratio.
#  Usage: bench/trace_cost.sh [BUILD_DIR] [ROUNDS] [STEPS] [MORE FLAGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
rounds=${2:-5}
steps=${3:-3000}
shift $(( $# > 3 ? 3 : $# ))
work=$(mktemp -d /tmp/za_trace_cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' | xargs)"
rate () {
    python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])][1:]
print("%.1f" % (sum(r["examples_per_sec"] for r in rows) / len(rows)))
PY
}
plain=() traced=()
for round in $(seq "$rounds"); do
    for side in plain traced; do
        rm -rf "$work/run"
        flags=()
        [ "$side" = traced ] && flags=(--trace "$work/trace.json")
        "$build/zactor-run" --local --max-steps "$steps" --model-dir "$work/run" "${flags[@]}" "$@" \
            >/dev/null 2>&1
        value=$(rate "$work/run")
        if [ "$side" = plain ]; then plain+=("$value"); else traced+=("$value"); fi
        echo "round $round $side: $value images/s"
    done
done
python3 - "${plain[*]}" "${traced[*]}" <<'PY'
import statistics, sys
plain, traced = ([float(v) for v in a.split()] for a in sys.argv[1:3])
p, t = statistics.median(plain), statistics.median(traced)
print("without --trace %.0f images/s, with %.0f (medians): %.3fx, tracing costs %.1f%%"
      % (p, t, t / p, 100 * (1 - t / p)))
PY
