#!/usr/bin/env python3
"""torch_vgg16_onnx.py: torchvision's VGG16 in zactor through ONNX.

  export WORK   torchvision.models.vgg16() (random weights, seed 0: no
                download) exported by torch.onnx.export to
                WORK/torchvision_vgg16.onnx;
                prints the --warm-start-rename that maps zactor's 13
                convolutions to its `features` block
  compare WORK PREDICTIONS.jsonl MODEL_DIR
                PyTorch's forward of the same PNGs (RGB, /255, ImageNet's
                mean and std: zactor's --preprocess torch) through the same
                VGG16 base, a global average pool and the dense layer of
                zactor's checkpoint in MODEL_DIR (its head: random, frozen),
                against zactor's logits; exit 1 beyond TOLERANCE (1e-4)

Run with Debian's python3-torch and python3-torchvision (/usr/bin/python3).
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torchvision

TOLERANCE = 1e-4
#  The Conv2d layers of torchvision's VGG16 `features`, in order.
CONVS = [0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28]


def model():
    torch.manual_seed(0)
    m = torchvision.models.vgg16().eval()
    #  torchvision starts every bias at 0, and torch.onnx.export keeps one
    #  initializer for tensors that are equal: random biases keep each
    #  layer's under its own name, as trained weights have them.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.1, 0.1)
    return m


def export(work):
    m = model()
    path = os.path.join(work, "torchvision_vgg16.onnx")
    torch.onnx.export(m, (torch.zeros(1, 3, 224, 224),), path, input_names=["input"],
                      output_names=["logits"], opset_version=13)
    rename = ",".join("conv2d%s/%s=features.%d.%s" % ("_%d" % i if i else "", ours, layer, theirs)
                      for i, layer in enumerate(CONVS)
                      for ours, theirs in (("kernel", "weight"), ("bias", "bias")))
    print(rename)
    print("torch_vgg16_onnx: %s (%.0f MB) from torch %s, torchvision %s"
          % (path, os.path.getsize(path) / 1e6, torch.__version__, torchvision.__version__),
          file=sys.stderr)


def checkpoint_tensor(model_dir, name):
    with open(os.path.join(model_dir, "checkpoint")) as f:
        newest = [line.split('"')[1] for line in f if line.startswith("model_checkpoint_path")][0]
    with open(os.path.join(model_dir, newest), "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    entry = json.loads(raw[8:8 + size])[name]
    begin, end = entry["data_offsets"]
    return np.frombuffer(raw[8 + size + begin:8 + size + end], np.float32).reshape(entry["shape"])


def compare(work, predictions, model_dir):
    from PIL import Image
    with open(predictions) as f:
        lines = [json.loads(line) for line in f]
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    x = np.stack([(np.asarray(Image.open(line["file"]).convert("RGB"), np.float32) / 255 - mean)
                  / std for line in lines]).transpose(0, 3, 1, 2)
    kernel = torch.from_numpy(checkpoint_tensor(model_dir, "dense/kernel").copy())
    bias = torch.from_numpy(checkpoint_tensor(model_dir, "dense/bias").copy())
    with torch.no_grad():
        features = model().features(torch.from_numpy(np.ascontiguousarray(x)))
        logits = (features.mean(dim=(2, 3)) @ kernel + bias).numpy().astype(np.float64)
    zactor = np.array([line["logits"] for line in lines], np.float64)
    diff = np.abs(logits - zactor).max()
    print("torch_vgg16_onnx: torchvision's VGG16 (torch %s) warm-started zactor through ONNX: "
          "%d images of %dx%d, logits up to %.3g; largest difference from PyTorch's %.3g; the "
          "same class for %d of %d"
          % (torch.__version__, len(lines), x.shape[2], x.shape[3], np.abs(logits).max(), diff,
             int(np.sum(np.argmax(logits, 1) == np.argmax(zactor, 1))), len(lines)))
    sys.exit(0 if diff <= TOLERANCE else 1)


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2])
    else:
        compare(sys.argv[2], sys.argv[3], sys.argv[4])
