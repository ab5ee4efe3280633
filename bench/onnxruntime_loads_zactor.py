#!/usr/bin/env python3
"""onnxruntime_loads_zactor.py: a model zactor exported as ONNX gives zactor's
answers in onnxruntime, a runtime nobody here wrote.

Runs MODEL.onnx (`zactor-ckpt export`) in onnxruntime on the 10,000
Fashion-MNIST test images (the raw pixels 0 .. 255: the graph scales them) and
compares its probabilities and classes with what `zactor-run predict --logits`
wrote (PREDICTIONS, JSONL). Predictions of the IDX test set (zactor names
each image by its number) are checked on its raw pixels; predictions of image
files (a folder of PNGs of the model's input size) on those files' pixels,
read with Pillow, RGB or gray as the model's input has 3 channels or 1.

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/onnxruntime_loads_zactor.py MODEL.onnx PREDICTIONS.jsonl [TOLERANCE]
Prints the count, the largest differences and the classes that agree; exit 1
when a probability differs by more than TOLERANCE (1e-5) or a class differs.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fashion_mnist import raw_split  # noqa: E402


def main():
    model, predictions = sys.argv[1], sys.argv[2]
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime_loads_zactor: skipped: no onnxruntime here "
              "(bench/venv.sh installs it from PyPI)")
        sys.exit(77)
    with open(predictions) as f:
        lines = [json.loads(line) for line in f]
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    if os.path.exists(lines[0]["file"]):
        from PIL import Image
        channels = session.get_inputs()[0].shape[3]
        x = np.stack([np.asarray(Image.open(line["file"]).convert("RGB" if channels == 3
                                                                   else "L"))
                      for line in lines]).astype(np.float32).reshape(len(lines), -1)
        x = x.reshape((len(lines),) + tuple(session.get_inputs()[0].shape[1:]))
    else:
        images, _ = raw_split("t10k")
        x = images[[int(line["file"]) for line in lines]].astype(np.float32)[..., None]
    logits, probabilities = [], []
    for start in range(0, len(x), 500):
        out = session.run(["logits", "probabilities"], {"pixels": x[start:start + 500]})
        logits.append(out[0])
        probabilities.append(out[1])
    logits = np.concatenate(logits).astype(np.float64)
    probabilities = np.concatenate(probabilities).astype(np.float64)
    zactor_logits = np.array([line["logits"] for line in lines], dtype=np.float64)
    names = list(lines[0]["probabilities"].keys())
    zactor_p = np.array([[line["probabilities"][k] for k in names] for line in lines])
    if zactor_logits.shape != logits.shape:
        sys.exit("onnxruntime_loads_zactor: zactor wrote %s logits, onnxruntime %s"
                 % (zactor_logits.shape, logits.shape))
    #  zactor's probabilities are written to 6 digits: the softmax of its
    #  logits (9 digits) is the exact side to hold onnxruntime's against.
    shifted = np.exp(zactor_logits - zactor_logits.max(1, keepdims=True))
    exact_p = shifted / shifted.sum(1, keepdims=True)
    p_diff = np.abs(probabilities - exact_p).max()
    logit_diff = np.abs(logits - zactor_logits).max()
    written_diff = np.abs(probabilities - zactor_p).max()
    same = int(np.sum(np.argmax(logits, 1) == np.argmax(zactor_logits, 1)))
    print("onnxruntime_loads_zactor: %s in onnxruntime %s: %d images; largest probability "
          "difference %.3g (%.3g from the 6 digits written), largest logit difference %.3g; "
          "the same class for %d of %d"
          % (os.path.basename(model), ort.__version__, len(logits), p_diff, written_diff,
             logit_diff, same, len(logits)))
    sys.exit(0 if p_diff <= tolerance and same == len(logits) else 1)


if __name__ == "__main__":
    main()
