#!/usr/bin/env python3
"""zactor_to_keras.py: a zactor checkpoint as a Keras model.

Reads a zactor checkpoint (model.ckpt-STEP.safetensors, or the newest in a
model_dir), builds the Keras model its layer stack names (the "model" in the
checkpoint's metadata: conv2d, maxpool, relu, dropout, flatten,
globalavgpool, dense; vgg16 as its 13 convolutions), gives every layer the
checkpoint's weights by name (zactor names variables as Keras does, and keeps
Keras's layouts: conv kernels HWIO, dense kernels [in, out]) and saves it as
a .keras file. The model's input is what zactor trains on: H x W x C pixels,
channels last, scaled as --preprocess says (none: value / 255); its output
the logits (add a Softmax for probabilities). Dropout is left out: it is
the identity at inference.

Usage (TensorFlow 2 / Keras 3, e.g. bench/venv.sh's environment):
  zactor_to_keras.py CHECKPOINT_OR_MODEL_DIR [-o model.keras] [--input-shape 28,28,1]
The input shape defaults to input.json's (a model trained on images) or
Fashion-MNIST's 28,28,1.
"""
import argparse
import json
import os
import re
import struct
import sys
import zlib

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64,
          "I32": np.int32}
VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
         512, 512, 512, "M"]


def read_safetensors(path):
    """The tensors of a safetensors file (float32 as numpy) and its metadata.
    A file cut short, or whose data is not what its metadata's crc32 says
    (as zactor checks it), raises ValueError."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("shorter than its header's length")
        size = struct.unpack("<Q", head)[0]
        header = json.loads(f.read(size))
        data = f.read()
    expected = max([info["data_offsets"][1] for name, info in header.items()
                    if name != "__metadata__"] + [0])
    crc = header.get("__metadata__", {}).get("crc32")
    if len(data) < expected:
        raise ValueError("cut short: %d of %d bytes of data" % (len(data), expected))
    if crc is None or zlib.crc32(data[:expected]) & 0xffffffff != int(crc, 16):
        raise ValueError("its data is not what its crc32 (%s) says" % crc)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"])
    return tensors, header.get("__metadata__", {})


def newest_checkpoint(path):
    """path itself, or the newest intact checkpoint of a model_dir (a damaged
    one is passed over, as zactor's restore does)."""
    if os.path.isfile(path):
        return path
    steps = [(int(m.group(1)), name) for name in os.listdir(path)
             for m in [re.match(r"model\.ckpt-(\d+)\.safetensors$", name)] if m]
    if not steps:
        sys.exit("zactor_to_keras: no model.ckpt-STEP.safetensors in %s" % path)
    for step, name in sorted(steps, reverse=True):
        checkpoint = os.path.join(path, name)
        try:
            _, meta = read_safetensors(checkpoint)
            if meta.get("global_step") != str(step):
                raise ValueError("its metadata says step %s" % meta.get("global_step"))
            return checkpoint
        except (OSError, ValueError, KeyError, struct.error) as error:
            print("zactor_to_keras: %s is not intact (%s): taking the one before"
                  % (checkpoint, error), file=sys.stderr)
    sys.exit("zactor_to_keras: none of the %d checkpoints in %s is intact"
             % (len(steps), path))


def tokens(stack):
    """("name", [positional args], {named args}) for each layer of the text."""
    for m in re.finditer(r"([A-Za-z0-9_]+)(?:\(([^)]*)\))?", stack):
        name, text = m.group(1).lower(), m.group(2) or ""
        args, named = [], {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" in part:
                key, value = part.split("=", 1)
                named[key.strip()] = value.strip()
            else:
                args.append(part)
        yield name, args, named


def keras_model(stack, input_shape):
    import keras
    from keras import layers
    counts = {}

    def name(kind):
        n = counts.get(kind, 0)
        counts[kind] = n + 1
        return kind if n == 0 else "%s_%d" % (kind, n)

    def act(args, named):
        return "relu" if "relu" in args or named.get("activation") == "relu" else None

    out = []
    flat = False                            # the tensor is [batch, features]
    for kind, args, named in tokens(stack):
        numbers = [a for a in args if re.match(r"^[0-9.]+$", a)]
        if kind == "conv2d":
            stride = int(named.get("stride", numbers[2] if len(numbers) > 2 else 1))
            padding = "same" if "same" in args or named.get("padding") == "same" else "valid"
            out.append(layers.Conv2D(int(numbers[0]), int(numbers[1]), strides=stride,
                                     padding=padding, activation=act(args, named),
                                     name=name("conv2d")))
        elif kind in ("maxpool", "maxpooling2d"):
            pool = int(numbers[0])
            stride = int(named.get("stride", numbers[1] if len(numbers) > 1 else pool))
            out.append(layers.MaxPooling2D(pool, strides=stride, name=name("max_pooling2d")))
        elif kind == "vgg16":
            for width in VGG16:
                out.append(layers.MaxPooling2D(2, name=name("max_pooling2d")) if width == "M"
                           else layers.Conv2D(width, 3, padding="same", activation="relu",
                                              name=name("conv2d")))
        elif kind == "relu":
            out.append(layers.ReLU(name=name("re_lu")))
        elif kind == "dropout":
            name("dropout")                 # the identity at inference
        elif kind == "flatten":
            out.append(layers.Flatten(name=name("flatten")))
        elif kind in ("globalavgpool", "globalaveragepooling2d"):
            out.append(layers.GlobalAveragePooling2D(name=name("global_average_pooling2d")))
        elif kind == "dense":
            # zactor's dense flattens an image itself; Keras's acts on the
            # last axis alone.
            if not flat:
                out.append(layers.Flatten(name=name("flatten")))
            out.append(layers.Dense(int(numbers[0]), activation=act(args, named),
                                    name=name("dense")))
        else:
            sys.exit("zactor_to_keras: layer '%s' has no Keras counterpart here" % kind)
        if kind in ("flatten", "globalavgpool", "globalaveragepooling2d", "dense"):
            flat = True
        elif kind in ("conv2d", "maxpool", "maxpooling2d", "vgg16"):
            flat = False
    return keras.Sequential([keras.Input(input_shape)] + out, name="zactor")


def convert(checkpoint, input_shape):
    """The Keras model of a zactor checkpoint, with its weights."""
    try:
        tensors, meta = read_safetensors(checkpoint)
    except (OSError, ValueError, KeyError, struct.error) as error:
        sys.exit("zactor_to_keras: %s: %s" % (checkpoint, error))
    stack = meta.get("model")
    if not stack:
        sys.exit("zactor_to_keras: %s names no layer stack (a model_fn of its own?)"
                 % checkpoint)
    model = keras_model(stack, input_shape)
    for layer in model.layers:
        if not layer.weights:
            continue
        kernel, bias = tensors[layer.name + "/kernel"], tensors[layer.name + "/bias"]
        layer.set_weights([kernel.astype(np.float32), bias.astype(np.float32)])
    return model, meta


def input_shape_of(path, given):
    if given:
        return tuple(int(v) for v in given.split(","))
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    try:
        with open(os.path.join(folder, "input.json")) as f:
            info = json.load(f)
        size = [int(v) for v in str(info["image_size"]).split(",")]
        return (size[0], size[-1], int(info["channels"]))
    except (OSError, KeyError, ValueError):
        return (28, 28, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="a checkpoint, or a model_dir (its newest)")
    ap.add_argument("-o", "--output", default="model.keras")
    ap.add_argument("--input-shape", help="H,W,C (default: input.json's, or 28,28,1)")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    checkpoint = newest_checkpoint(args.source)
    model, meta = convert(checkpoint, input_shape_of(args.source, args.input_shape))
    model.save(args.output)
    print("%s (step %s, %s) -> %s: %d weights" % (checkpoint, meta.get("global_step", "?"),
                                                 meta.get("model"), args.output,
                                                 len(model.weights)))


if __name__ == "__main__":
    main()
