#!/usr/bin/env bash
#  The long asynchronous run of issue 3 (not in CI): chief + 2 workers + 1 ps
#  as separate zactor-run processes on this machine, the seed CNN on the real
#  Fashion-MNIST, batch 64 per worker, Adam 1e-3; the chief evaluates the final
#  checkpoint on the 10,000 test images. Prints accuracy and wall time.
#  Usage: bench/async_fmnist.sh [BUILD_DIR] [MAX_STEPS] [MODEL_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
max_steps=${2:-6000}
model_dir=${3:-$(mktemp -d /tmp/zactor-async-XXXXXX)}
run="$build/zactor-run"
port () { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cluster="$model_dir/cluster.json"
mkdir -p "$model_dir"
cat > "$cluster" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(port)"], "worker": ["127.0.0.1:$(port)", "127.0.0.1:$(port)"],
             "ps": ["127.0.0.1:$(port)"]}}
JSON
common=(--cluster "$cluster" --model cnn --batch-size 64 --optimizer adam --learning-rate 0.001
        --max-steps "$max_steps" --save-checkpoints-steps 1000 --model-dir "$model_dir/run"
        --log-step-count-steps 500 --seed 42)
start=$(date +%s.%N)
"$run" "${common[@]}" --role ps --index 0 2> "$model_dir/ps0.log" & ps0=$!
"$run" "${common[@]}" --role worker --index 0 2> "$model_dir/worker0.log" & w0=$!
"$run" "${common[@]}" --role worker --index 1 2> "$model_dir/worker1.log" & w1=$!
"$run" "${common[@]}" --role chief --index 0 > "$model_dir/chief.out" 2> "$model_dir/chief.log" & chief=$!
status=0
for pid in $chief $w0 $w1 $ps0; do wait "$pid" || status=$?; done
end=$(date +%s.%N)
echo "exit status of the four processes: $status (0 = all exited 0)"
grep -h "per step" "$model_dir"/*.log || true
cat "$model_dir/chief.out"
printf 'wall time %.1f s for %s global steps (chief + 2 workers + 1 ps, %s cores)\n' \
    "$(echo "$end - $start" | bc -l)" "$max_steps" "$(nproc)"
echo "logs and checkpoints: $model_dir"
exit "$status"
