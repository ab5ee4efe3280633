#!/usr/bin/env bash
#  TensorFlow's own files, read and written, against zactor (issue 45's four
#  interoperability checks), with TensorFlow 2, Keras 3 and TensorBoard from
#  PyPI (bench/venv.sh makes the environment once):
#   1. TF_CONFIG: TensorFlow's TFConfigClusterResolver answers the cases of
#      bench/tf_config_answers.py as tests/data/tf_config_answers.json
#      recorded them, and zactor derives the same (test_cluster);
#   2. TensorBoard: EventAccumulator and summary_iterator read zactor's event
#      files (training's and the evaluator's) as metrics.jsonl says;
#   3. TFRecord: shards tf.io.TFRecordWriter wrote (JPEG, int64 labels, plain
#      and GZIP) train zactor as the image folder of the same JPEG bytes does;
#   4. Keras: a zactor checkpoint in Keras gives zactor's logits on the
#      10,000 test images; Keras's VGG16 saved by Keras warm-starts zactor's.
#  Each prints what it compared. Exit 0 when all four hold.
#  Usage: bench/tf_interop.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
work=${2:-$(mktemp -d /tmp/za_tf_interop.XXXXXX)}
mkdir -p "$work"
zactor="$build/zactor-run"
py=$("$here/venv.sh")
quiet () { grep -v -E '^(I0000|W0000|WARNING: All log|WARNING:tensorflow|To enable the|Instructions for|Use eager|`tf.data)' || true; }
export TF_CPP_MIN_LOG_LEVEL=2
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "TensorFlow $("$py" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)," \
     "Keras $("$py" -c 'import keras; print(keras.__version__)' 2>/dev/null)," \
     "TensorBoard $("$py" -c 'import tensorboard; print(tensorboard.__version__)' 2>/dev/null)"
failed=()

echo; echo "1. TF_CONFIG as TensorFlow's TFConfigClusterResolver reads it"
"$py" "$here/tf_config_answers.py" "$work/tf_config_answers.json" 2>&1 | quiet | tail -1
if "$py" - "$work/tf_config_answers.json" "$here/../tests/data/tf_config_answers.json" <<'PY'
import json, sys
now, kept = (json.load(open(p))["cases"] for p in sys.argv[1:])
same = [a == b for a, b in zip(now, kept)]
print("   TensorFlow answers %d of %d cases as the recorded table says" % (sum(same), len(kept)))
sys.exit(0 if all(same) and len(now) == len(kept) else 1)
PY
then :; else failed+=("TF_CONFIG: TensorFlow's answers changed; run bench/tf_config_answers.py"); fi
if out=$("$build/test_cluster" --filter 'cluster/tf_config*' 2>&1); then
    echo "   zactor: $(grep -o 'Tested: .*' <<<"$out" | head -1) (test_cluster's tf_config_as_tensorflow_reads_it)"
else echo "$out" | tail -5; failed+=("TF_CONFIG: zactor differs"); fi

echo; echo "2. zactor's event files as TensorBoard reads them"
rm -rf "$work/tb"
"$zactor" --model-dir "$work/tb" --max-steps 300 --save-summary-steps 50 \
    --save-checkpoints-steps 100 --threads 2 --no-eval >/dev/null 2>&1
"$zactor" --role evaluator --replay --model-dir "$work/tb" --threads 2 \
    --eval-metrics "precision recall auc confusion_matrix" >/dev/null 2>&1
"$py" "$here/tensorboard_reads.py" "$work/tb" 2>&1 | quiet | sed 's/^/   /' \
    || failed+=("TensorBoard")
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("TensorBoard")

echo; echo "3. TFRecord shards written by tf.io.TFRecordWriter"
rm -rf "$work/tfr"
"$py" "$here/tf_write_tfrecords.py" "$work/tfr" 12000 2000 4 2>&1 | quiet | sed 's/^/   /'
declare -A acc
for src in folder plain gzip; do
    if [ $src = folder ]; then tr=$work/tfr/folder/train; te=$work/tfr/folder/test
    else tr="$work/tfr/$src/train-*.tfrecord"; te="$work/tfr/$src/test-*.tfrecord"; fi
    rm -rf "$work/tfr-$src"
    acc[$src]=$("$zactor" --train-data "$tr" --eval-data "$te" --image-size 28 --channels 1 \
        --epochs 2 --seed 1 --threads 2 --model-dir "$work/tfr-$src" 2>&1 \
        | sed -n -E 's/^test accuracy ([0-9.]+) .*/\1/p')
    #  The folder's model on this source's test images: the same pixels?
    "$zactor" --role evaluator --replay --model-dir "$work/tfr-folder" --train-data \
        "$work/tfr/folder/train" --eval-data "$te" --image-size 28 --channels 1 \
        --eval-name "$src" --threads 2 >/dev/null 2>&1
done
printf '   %-7s %-24s %s\n' source "trained on it: accuracy" "the folder's model on its test set"
for src in folder plain gzip; do
    printf '   %-7s %-24s %s\n' $src "${acc[$src]}" \
        "$(tail -1 "$work/tfr-folder/eval_$src/metrics.jsonl" | "$py" -c \
           'import json,sys; r=json.load(sys.stdin); print("accuracy %.4f loss %.6f" % (r["accuracy"], r["loss"]))')"
done
"$py" - "$work" "${acc[folder]}" "${acc[plain]}" "${acc[gzip]}" <<'PY' || failed+=("TFRecord")
import json, sys
work, folder, plain, gz = sys.argv[1], *map(float, sys.argv[2:])
evals = [json.loads(open("%s/tfr-folder/eval_%s/metrics.jsonl" % (work, s)).readlines()[-1])
         for s in ("folder", "plain", "gzip")]
same_pixels = all(e["accuracy"] == evals[0]["accuracy"] and abs(e["loss"] - evals[0]["loss"]) < 1e-5
                  for e in evals)
ok = same_pixels and plain == gz and abs(plain - folder) <= 0.02
print("   the same pixels from all three: %s; TFRecord plain = GZIP: %s; |TFRecord - folder| "
      "accuracy %.4f (<= 0.02: another order of the same examples)"
      % (same_pixels, plain == gz, abs(plain - folder)))
sys.exit(0 if ok else 1)
PY

echo; echo "4. Keras models and zactor checkpoints, both ways"
"$zactor" predict --model-dir "$work/tb" --logits --output "$work/tb/predictions.jsonl" \
    >/dev/null 2>&1
"$py" "$here/keras_loads_zactor.py" "$work/tb" "$work/tb/predictions.jsonl" 2>&1 | quiet \
    | sed 's/^/   /'
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("Keras loads zactor")
"$py" "$here/zactor_loads_keras.py" "$zactor" "$work/keras" 2>&1 | quiet \
    | grep zactor_loads_keras | sed 's/^/   /'
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("zactor loads Keras")

echo
if [ ${#failed[@]} = 0 ]; then echo "tf_interop: all four checks hold (work in $work)"
else printf 'tf_interop: FAILED: %s\n' "${failed[@]}"; exit 1; fi
