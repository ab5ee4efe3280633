#!/usr/bin/python3
"""write_safetensors.py: an independent writer of safetensors files in other
frameworks' layouts, for tests/test_warm_start.c. It shares no code with
zactor: it reads a zactor checkpoint (a safetensors file) with its own
parser and numpy, and writes the format by hand (8-byte header length, the
JSON header, the data).

Usage: write_safetensors.py IN OUT LAYOUT DTYPE [OLD=NEW ...]
  LAYOUT  torch: 4-dim kernels HWIO -> OIHW, 2-dim [in, out] -> [out, in];
          zactor: as they are
  DTYPE   F32, F16 or BF16 (BF16: the float32's top 16 bits, rounded to
          nearest even)
  OLD=NEW renames a tensor. Only the model's variables are written (no
  optimizer slot, no global_step).
"""
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    data = blob[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] != "F32":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
    return tensors


def to_bf16(array):
    bits = array.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    source, out, layout, dtype = sys.argv[1:5]
    renames = dict(arg.split("=", 1) for arg in sys.argv[5:] if "=" in arg)
    header, chunks, offset = {}, [], 0
    for name, array in sorted(read(source).items()):
        if "/" not in name or name.count("/") > 1:
            continue                    # slots are VAR/SLOT_NAME/...: 2 slashes or more
        if layout == "torch" and array.ndim == 4:
            array = array.transpose(3, 2, 0, 1)
        elif layout == "torch" and array.ndim == 2:
            array = array.T
        if dtype == "F32":
            raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        elif dtype == "F16":
            raw = np.ascontiguousarray(array, dtype="<f2").tobytes()
        else:
            raw = np.ascontiguousarray(to_bf16(array)).tobytes()
        header[renames.get(name, name)] = {"dtype": dtype, "shape": list(array.shape),
                                           "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    print("%s: %d tensors, %s, %s" % (out, len(chunks), layout, dtype))


if __name__ == "__main__":
    main()
