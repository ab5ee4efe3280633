#!/usr/bin/env bash
#  How long after a checkpoint is written its evaluation starts, with a
#  broker (zactor-run --local: 1 chief, 2 workers, 1 ps, 1 evaluator), for
#  each way the evaluator can hear of it, alternating, ROUNDS times each:
#    poll     looking at model_dir every 0.2 s (what the evaluator did before)
#    broker   the chief's "checkpoint" message through the broker
#    inotify  the kernel's note of the file renamed into model_dir
#    both     the default: whichever comes first
#  The delay of one evaluation is checkpoint_age_secs in eval/metrics.jsonl:
#  from the checkpoint file's last write to the evaluation's start. Prints
#  the median, p90 and count per way. TensorFlow's evaluator, for comparison,
#  looks for a new checkpoint once a second (checkpoints_iterator's default
#  polling), a median of about 0.5 s.
#  Usage: bench/eval_trigger.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
steps=${3:-1200}
work=$(mktemp -d /tmp/za-eval-trigger.XXXXXX)
trap 'rm -rf "$work"' EXIT
ways="poll broker inotify both"
for round in $(seq 1 "$rounds"); do
    for way in $ways; do
        dir="$work/$way-$round"
        wake=$way
        [ "$way" = both ] && wake=
        # Checkpoints every 100 steps, evaluations of one batch of 500 that end
        # well before the next checkpoint, no start delay and no throttle.
        if ! ZA_EVAL_WAKE=$wake "$build/zactor-run" --local --model-dir "$dir" \
                --max-steps "$steps" --save-checkpoints-steps 100 --eval-steps 1 \
                --start-delay-secs 0 --throttle-secs 0 >"$dir.log" 2>&1; then
            echo "round $round, $way: the run failed; see below" >&2
            tail -20 "$dir.log" >&2
            exit 1
        fi
        echo "round $round: $way done" >&2
    done
done
echo "checkpoint written -> evaluation started, $rounds rounds of $steps steps (ms):"
printf '%-8s %8s %8s %6s\n' way median p90 count
for way in $ways; do
    cat "$work/$way"-*/eval/metrics.jsonl | python3 -c '
import json, sys
ages = sorted(1000 * json.loads(line)["checkpoint_age_secs"] for line in sys.stdin if line.strip())
if not ages:
    sys.exit("no evaluation")
median = ages[len(ages) // 2] if len(ages) % 2 else (ages[len(ages) // 2 - 1] + ages[len(ages) // 2]) / 2
p90 = ages[min(len(ages) - 1, int(0.9 * len(ages)))]
print("%-8s %8.1f %8.1f %6d" % (sys.argv[1], median, p90, len(ages)))
' "$way"
done
echo "TensorFlow's evaluator: polls every 1 s (median about 500 ms, not measured here)"
