#!/usr/bin/env python3
"""tensorboard_reads.py: zactor's event files as TensorBoard itself reads them.

Reads every events.out.tfevents.* file of a model_dir (training's, and the
evaluator's under eval*/) with TensorBoard's own EventAccumulator, and with
TensorFlow's tf.compat.v1.train.summary_iterator, and compares what they
find with the metrics.jsonl zactor wrote beside them: every scalar of every
step (zactor writes float32; the JSON has six decimals), the step numbers,
and the confusion matrix image (a PNG whose size is the classes').

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/tensorboard_reads.py MODEL_DIR
Prints what it compared; exit 0 when everything matched, 1 when not.
"""
import glob
import io
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402


#  TensorFlow's names for the rates (the Estimator's), and metrics.jsonl's.
JSON_KEY = {"global_step/sec": "steps_per_sec", "examples/sec": "examples_per_sec"}


def jsonl(path):
    rows = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line, parse_float=str)   # as written: its decimals
            rows[row["global_step"]] = row
    return rows


def compare_dir(directory, failures):
    rows = jsonl(os.path.join(directory, "metrics.jsonl"))
    acc = event_accumulator.EventAccumulator(directory, size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    compared, largest = 0, 0.0
    for tag in tags["scalars"]:
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        if len(set(steps)) != len(steps):
            failures.append("%s: tag %s has a step twice" % (directory, tag))
        key = JSON_KEY.get(tag, tag)
        for e in events:
            row = rows.get(e.step)
            if row is None or key not in row:
                failures.append("%s: %s at step %d is not in metrics.jsonl" % (directory, tag, e.step))
                continue
            text = str(row[key])
            want = float(text)
            #  What the JSON's decimals round away, and a float32's rounding.
            decimals = len(text.split(".")[1]) if "." in text else 0
            allowed = 0.5 * 10.0 ** -decimals + 2e-7 * abs(want)
            diff = abs(e.value - want)
            largest = max(largest, diff / allowed)
            if diff > allowed:
                failures.append("%s: %s at step %d: TensorBoard %r, metrics.jsonl %r"
                                % (directory, tag, e.step, e.value, want))
            compared += 1
        missing = [s for s, row in rows.items() if key in row and s not in steps]
        if missing:
            failures.append("%s: %s has no event at steps %s" % (directory, tag, missing))
    images = 0
    for tag in tags["images"]:
        for e in acc.Images(tag):
            from PIL import Image
            picture = Image.open(io.BytesIO(e.encoded_image_string))
            picture.load()
            if (picture.width, picture.height) != (e.width, e.height) or e.step not in rows:
                failures.append("%s: image %s at step %d: %dx%d, header %dx%d"
                                % (directory, tag, e.step, picture.width, picture.height,
                                   e.width, e.height))
            images += 1
            last = "%s %dx%d at step %d" % (tag, e.width, e.height, e.step)
    print("%s: %d scalar tags (%s), %d values compared with metrics.jsonl over %d steps, "
          "largest difference %.2f of what the JSON's decimals allow; %d images%s"
          % (directory, len(tags["scalars"]), " ".join(sorted(tags["scalars"])), compared,
             len(rows), largest, images, " (last: %s)" % last if images else ""))
    return compared, images


def summary_iterator_count(directory):
    import tensorflow as tf
    count = 0
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            count += len(event.summary.value)
    return count


def main():
    model_dir = sys.argv[1]
    failures = []
    dirs = [d for d in [model_dir] + sorted(glob.glob(os.path.join(model_dir, "eval*")))
            if glob.glob(os.path.join(d, "events.out.tfevents.*"))]
    if not dirs:
        sys.exit("tensorboard_reads.py: no event files under %s" % model_dir)
    images = 0
    for d in dirs:
        compared, found = compare_dir(d, failures)
        images += found
        values = summary_iterator_count(d)
        print("%s: tf.compat.v1.train.summary_iterator read %d summary values" % (d, values))
        if values < compared + found:
            failures.append("%s: summary_iterator read %d values, EventAccumulator %d"
                            % (d, values, compared + found))
    for failure in failures:
        print("MISMATCH " + failure)
    print("tensorboard_reads: %s" % ("every value and step matched" if not failures
                                      else "%d mismatches" % len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
