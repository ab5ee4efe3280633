#!/usr/bin/env python3
"""write_torch_onnx.py: the PyTorch side of test_onnx's import test, run once
to make its fixture (the files are in tests/data; CI reads them, it runs no
PyTorch).

A small CNN in PyTorch (random weights, seed 7) exported by torch.onnx.export
to tests/data/torch_small.onnx, and PyTorch's logits for the first 8
Fashion-MNIST test images (value / 255) in tests/data/torch_small.json. In
zactor the same net is
  conv2d(8,3,relu) conv2d(16,3,relu,same) globalavgpool dense(10)
warm-started with --warm-start-layout torch and the renames the JSON lists.

Usage: /usr/bin/python3 tests/write_torch_onnx.py   (Debian's python3-torch)
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
from fashion_mnist import split  # noqa: E402


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.mean(dim=(2, 3)))


def main():
    torch.manual_seed(7)
    model = Small().eval()
    x, _ = split("t10k", 8)
    batch = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    with torch.no_grad():
        logits = model(batch).numpy()
    out = os.path.join(HERE, "data", "torch_small.onnx")
    torch.onnx.export(model, (batch,), out, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}}, opset_version=13)
    rename = {"conv2d/kernel": "conv1.weight", "conv2d/bias": "conv1.bias",
              "conv2d_1/kernel": "conv2.weight", "conv2d_1/bias": "conv2.bias",
              "dense/kernel": "fc.weight", "dense/bias": "fc.bias"}
    with open(os.path.join(HERE, "data", "torch_small.json"), "w") as f:
        json.dump({"torch": torch.__version__, "images": 8,
                   "model": "conv2d(8,3,relu) conv2d(16,3,relu,same) globalavgpool dense(10)",
                   "rename": ",".join("%s=%s" % kv for kv in rename.items()),
                   "logits": [[float(v) for v in row] for row in logits]}, f, indent=1)
    print("write_torch_onnx: %s (%d bytes) from torch %s" % (out, os.path.getsize(out),
                                                             torch.__version__))


if __name__ == "__main__":
    main()
