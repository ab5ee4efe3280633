#!/usr/bin/env python3
"""check_onnx.py: an ONNX model zactor exported, checked by Debian's
python3-onnx and by a plain numpy evaluation of its graph.

  - onnx.checker.check_model(full_check=True) and strict shape inference
    pass, and the outputs are [batch, classes];
  - every tensor of the checkpoint is an initializer of the same name, shape
    and bytes (the checkpoint is a safetensors file, read here with numpy);
  - the graph, evaluated node by node in numpy (float64) on PIXELS (N x H x
    W x C float32, raw), gives LOGITS (N x classes float32, what zactor's
    model_fn computed from the same pixels) within TOLERANCE, and their
    softmax as the probabilities.

Usage: /usr/bin/python3 tests/check_onnx.py MODEL.onnx CHECKPOINT PIXELS LOGITS N H W C
Prints one line; exit 1 on a failure, with what failed.
"""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

TOLERANCE = 1e-4


def checkpoint_tensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    data = raw[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], tuple(entry["shape"]), data[begin:end])
    return tensors


def conv(x, w, b, strides, pads):
    n, c, _, _ = x.shape
    o, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    sh, sw = strides
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    cols = np.empty((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
    out = np.tensordot(cols, w, axes=([1, 2, 3], [1, 2, 3]))       # n, oh, ow, o
    return out.transpose(0, 3, 1, 2) + b.reshape(1, o, 1, 1)


def maxpool(x, kernel, strides):
    n, c, h, w = x.shape
    oh, ow = (h - kernel[0]) // strides[0] + 1, (w - kernel[1]) // strides[1] + 1
    out = np.full((n, c, oh, ow), -np.inf)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            out = np.maximum(out, x[:, :, i:i + strides[0] * (oh - 1) + 1:strides[0],
                                    j:j + strides[1] * (ow - 1) + 1:strides[1]])
    return out


def evaluate(model, pixels):
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values = {k: v.astype(np.float64) if v.dtype == np.float32 else v
              for k, v in values.items()}
    values["pixels"] = pixels.astype(np.float64)
    for node in model.graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
        x = [values[name] for name in node.input]
        op = node.op_type
        if op == "Div":
            y = x[0] / x[1]
        elif op == "Mul":
            y = x[0] * x[1]
        elif op == "Add":
            y = x[0] + x[1]
        elif op == "Gather":
            y = np.take(x[0], x[1], axis=a.get("axis", 0))
        elif op == "Transpose":
            y = x[0].transpose(a["perm"])
        elif op == "Conv":
            assert a.get("group", 1) == 1 and list(a["kernel_shape"]) == list(x[1].shape[2:])
            y = conv(x[0], x[1], x[2], a.get("strides", [1, 1]), a.get("pads", [0] * 4))
        elif op == "Relu":
            y = np.maximum(x[0], 0)
        elif op == "MaxPool":
            assert not any(a.get("pads", [0])) and not a.get("ceil_mode", 0)
            y = maxpool(x[0], a["kernel_shape"], a.get("strides", [1, 1]))
        elif op == "GlobalAveragePool":
            y = x[0].mean(axis=(2, 3), keepdims=True)
        elif op == "Flatten":
            y = x[0].reshape(x[0].shape[0], -1)
        elif op == "Gemm":
            assert not a.get("transA") and not a.get("transB")
            y = x[0] @ x[1] + x[2]
        elif op == "Identity":
            y = x[0]
        elif op == "Softmax":
            e = np.exp(x[0] - x[0].max(axis=a["axis"], keepdims=True))
            y = e / e.sum(axis=a["axis"], keepdims=True)
        else:
            raise AssertionError("an op zactor does not export: " + op)
        values[node.output[0]] = y
    return values


def main():
    path, ckpt, pixels_path, logits_path = sys.argv[1:5]
    n, h, w, c = (int(v) for v in sys.argv[5:9])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    failures = []
    outputs = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
               for o in inferred.graph.output}
    inits = {i.name: i for i in model.graph.initializer}
    tensors = checkpoint_tensors(ckpt)
    for name, (dtype, shape, data) in tensors.items():
        init = inits.get(name)
        if init is None:
            failures.append("no initializer %s" % name)
            continue
        array = numpy_helper.to_array(init)
        if dtype != "F32" or array.dtype != np.float32 or array.shape != shape \
                or array.tobytes() != data:
            failures.append("initializer %s is not the checkpoint's bit for bit" % name)
    pixels = np.fromfile(pixels_path, dtype=np.float32).reshape(n, h, w, c)
    expected = np.fromfile(logits_path, dtype=np.float32).reshape(n, -1).astype(np.float64)
    classes = expected.shape[1]
    for name in ("logits", "probabilities"):
        if outputs.get(name) != ["batch", classes]:
            failures.append("output %s is %s, not [batch, %d]" % (name, outputs.get(name),
                                                                   classes))
    values = evaluate(model, pixels)
    scale = max(1.0, np.abs(expected).max())
    logit_diff = np.abs(values["logits"] - expected).max()
    e = np.exp(expected - expected.max(1, keepdims=True))
    p_diff = np.abs(values["probabilities"] - e / e.sum(1, keepdims=True)).max()
    if logit_diff > TOLERANCE * scale or p_diff > TOLERANCE:
        failures.append("logits differ by %.3g, probabilities by %.3g" % (logit_diff, p_diff))
    print("check_onnx: %s: onnx %s checker (full) and strict shape inference pass; %d nodes, "
          "%d initializers (%d the checkpoint's, bit for bit); numpy's logits of %d images "
          "within %.3g of zactor's (probabilities %.3g)%s"
          % (path.rsplit("/", 1)[-1], onnx.__version__, len(model.graph.node), len(inits),
             len(tensors), n, logit_diff, p_diff,
             "; FAILED: " + "; ".join(failures) if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
