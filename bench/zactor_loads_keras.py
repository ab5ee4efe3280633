#!/usr/bin/env python3
"""zactor_loads_keras.py: Keras's VGG16, saved by Keras, warm-starts zactor.

Builds keras.applications.VGG16(weights=None, include_top=False) on 64x64 RGB
with a GlobalAveragePooling2D and a Dense(10) (zactor's `--model vgg16`),
saves it with model.save and loads the .keras file back, writes its weights
to a safetensors file under zactor's (Keras's own) variable names, and
writes 64x64 RGB PNG images made of Fashion-MNIST pixels, two per class.
Then zactor-run warm-starts --model vgg16 from that file (--warm-start-layout
keras) for one step at a learning rate of 1e-30 (a step that changes no
float32 weight: zactor writes its checkpoint at the end of training), and
`zactor-run predict --logits` gives the logits of the images, which are
compared with Keras's model.predict on the same pixels.

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/zactor_loads_keras.py ZACTOR_RUN WORK_DIR [TOLERANCE]
Prints the count and the largest difference; exit 1 beyond TOLERANCE (1e-4).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

from fashion_mnist import raw_split  # noqa: E402

SIDE = 64


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def images(folder):
    """Two 64x64 RGB PNGs per class; their pixels as Keras will read them."""
    from PIL import Image
    x, y = raw_split("t10k")
    pixels = {}
    for c in range(10):
        os.makedirs(os.path.join(folder, str(c)), exist_ok=True)
        for n, i in enumerate(np.flatnonzero(y == c)[:2]):
            gray = np.kron(x[i], np.ones((3, 3), np.uint8))[:SIDE, :SIDE].astype(np.int32)
            gray = np.pad(gray, ((0, SIDE - gray.shape[0]), (0, SIDE - gray.shape[1])))
            rgb = np.stack([gray, 255 - gray, (gray // 2 + 40 * c) % 256], -1).astype(np.uint8)
            path = os.path.join(folder, str(c), "%d.png" % n)
            Image.fromarray(rgb).save(path)
            pixels[os.path.abspath(path)] = rgb.astype(np.float32) / 255.0
    return pixels


def main():
    zactor_run, work = sys.argv[1], os.path.abspath(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    import keras
    keras.utils.set_random_seed(1)
    base = keras.applications.VGG16(weights=None, include_top=False,
                                    input_shape=(SIDE, SIDE, 3))
    model = keras.Sequential([base, keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(10)])
    #  Glorot kernels and zero biases give logits near 1e-3: random biases
    #  and a larger last kernel make them near 1, so that 1e-4 means something.
    rng = np.random.default_rng(1)
    for layer in base.layers + [model.layers[-1]]:
        if layer.weights:
            kernel, bias = layer.get_weights()
            scale = 300.0 if layer is model.layers[-1] else 1.0
            layer.set_weights([kernel * scale, rng.normal(0, 0.05, bias.shape)])
    os.makedirs(work, exist_ok=True)
    saved = os.path.join(work, "vgg16.keras")
    model.save(saved)
    model = keras.models.load_model(saved)
    convs = [l for l in model.layers[0].layers if isinstance(l, keras.layers.Conv2D)]
    dense = model.layers[-1]
    tensors = {}
    for i, layer in enumerate(convs):
        name = "conv2d" if i == 0 else "conv2d_%d" % i
        tensors[name + "/kernel"], tensors[name + "/bias"] = layer.get_weights()
    tensors["dense/kernel"], tensors["dense/bias"] = dense.get_weights()
    weights = os.path.join(work, "vgg16-keras.safetensors")
    write_safetensors(weights, tensors)
    pixels = images(os.path.join(work, "images"))

    model_dir = os.path.join(work, "zactor")
    shutil.rmtree(model_dir, ignore_errors=True)    # a checkpoint there would be resumed
    common = ["--image-size", str(SIDE), "--channels", "3", "--threads", "2"]
    subprocess.run([zactor_run, "--model", "vgg16", "--train-data", os.path.join(work, "images"),
                    "--warm-start-from", weights, "--warm-start-layout", "keras",
                    "--max-steps", "1", "--learning-rate", "1e-30", "--batch-size", "2",
                    "--no-eval", "--model-dir", model_dir] + common,
                   check=True, stdout=subprocess.DEVNULL)
    out = os.path.join(work, "predictions.jsonl")
    subprocess.run([zactor_run, "predict", "--model-dir", model_dir, "--data",
                    os.path.join(work, "images"), "--logits", "--output", out] + common,
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        rows = [json.loads(line) for line in f]
    names = [os.path.abspath(r["file"]) for r in rows]
    zactor_logits = np.array([r["logits"] for r in rows], dtype=np.float64)
    keras_logits = model.predict(np.stack([pixels[n] for n in names]), verbose=0)
    diff = np.abs(keras_logits.astype(np.float64) - zactor_logits)
    print("zactor_loads_keras: Keras %s VGG16(weights=None) saved as %s, warm-started into "
          "zactor --model vgg16: %d images x %d logits (|logit| up to %.3g); largest "
          "difference %.3g" % (keras.__version__, os.path.basename(saved), diff.shape[0],
                               diff.shape[1], np.abs(keras_logits).max(), diff.max()))
    sys.exit(0 if diff.max() <= tolerance else 1)


if __name__ == "__main__":
    main()
