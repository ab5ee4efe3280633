#!/usr/bin/env python3
"""keras_loads_zactor.py: a zactor checkpoint in Keras gives zactor's logits.

Converts MODEL_DIR's newest checkpoint with tools/zactor_to_keras.py, saves
and loads it back as a .keras file, runs Keras's model.predict on the 10,000
Fashion-MNIST test images (value / 255, as zactor reads IDX files) and
compares every logit with what `zactor-run predict --logits` wrote
(PREDICTIONS, JSONL, in the test set's order).

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/keras_loads_zactor.py MODEL_DIR PREDICTIONS.jsonl [TOLERANCE]
Prints the count and the largest difference; exit 1 beyond TOLERANCE (1e-4).
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import zactor_to_keras  # noqa: E402

from fashion_mnist import split  # noqa: E402


def main():
    model_dir, predictions = sys.argv[1], sys.argv[2]
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    import keras
    checkpoint = zactor_to_keras.newest_checkpoint(model_dir)
    model, meta = zactor_to_keras.convert(checkpoint, (28, 28, 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        model = keras.models.load_model(path)
    x, _ = split("t10k")
    keras_logits = model.predict(x, batch_size=500, verbose=0)
    with open(predictions) as f:
        zactor_logits = np.array([json.loads(line)["logits"] for line in f], dtype=np.float64)
    if zactor_logits.shape != keras_logits.shape:
        sys.exit("keras_loads_zactor: zactor wrote %s logits, Keras %s"
                 % (zactor_logits.shape, keras_logits.shape))
    diff = np.abs(keras_logits.astype(np.float64) - zactor_logits)
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    same_class = int(np.sum(np.argmax(keras_logits, 1) == np.argmax(zactor_logits, 1)))
    print("keras_loads_zactor: %s (step %s) as a .keras file, Keras %s: %d images x %d "
          "logits; largest difference %.3g (image %d, class %d); the same class for %d of %d"
          % (os.path.basename(checkpoint), meta.get("global_step"), keras.__version__,
             diff.shape[0], diff.shape[1], diff.max(), worst[0], worst[1], same_class,
             diff.shape[0]))
    sys.exit(0 if diff.max() <= tolerance else 1)


if __name__ == "__main__":
    main()
