#!/usr/bin/env bash
#  The README's transfer-learning workflow end to end, on a small set made of
#  real pixels laid out as the OCT set is (train/ and test/, one folder per
#  class, JPEG): four Fashion-MNIST classes upscaled to SIDE x SIDE gray.
#  VGG16's weights come from torchvision in PyTorch's layout, written to a
#  safetensors file as the docs' conversion command writes it (by hand here:
#  Debian has no safetensors package), then the README's command runs as one
#  process, as a --local cluster (ps-async) and as --local all-reduce, each
#  with --cache-frozen. Prints each run's test accuracy and time.
#
#  Offline, torchvision gives VGG16 its random initialisation, not ImageNet's
#  weights: the figures show the workflow and its speed, not what ImageNet
#  features reach (WEIGHTS=IMAGENET1K_V1 where the network is reachable).
#  Usage: bench/oct_small.sh [BUILD_DIR] [PER_CLASS] [SIDE] [EPOCHS]
#  KEEP=1 keeps the set and the runs' logs; CLUSTERS_ONLY=1 skips the
#  single process.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
per_class=${2:-100}
side=${3:-224}
epochs=${4:-5}
[ -x "$build/zactor-run" ] || { echo "build first: $build/zactor-run is missing" >&2; exit 1; }
/usr/bin/python3 -c 'import torchvision, PIL, numpy' 2>/dev/null \
    || { echo "apt-get install python3-torchvision python3-pil" >&2; exit 1; }
work=$(mktemp -d /tmp/zactor-oct-XXXXXX)
[ -n "${KEEP:-}" ] && echo "keeping $work" || trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

/usr/bin/python3 - "$work" "$per_class" "$side" "${WEIGHTS:-}" <<'PY'
import gzip, json, os, struct, sys
import numpy as np
import torch, torchvision
from PIL import Image

work, per_class, side, weights = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = "/usr/share/datasets/fashion-mnist"
classes = ["tshirt", "trouser", "pullover", "dress"]

def idx(name):
    with gzip.open(os.path.join(data, name)) as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)

for split, prefix, count in (("train", "train", per_class), ("test", "t10k", max(per_class // 4, 10))):
    images, labels = idx(prefix + "-images-idx3-ubyte.gz"), idx(prefix + "-labels-idx1-ubyte.gz")
    for label, name in enumerate(classes):
        folder = os.path.join(work, "oct", split, name)
        os.makedirs(folder)
        for i, at in enumerate(np.flatnonzero(labels == label)[:count]):
            Image.fromarray(images[at]).resize((side, side), Image.BILINEAR).save(
                os.path.join(folder, "%s-%d.jpeg" % (name, i)), quality=90)

model = torchvision.models.vgg16(weights=weights or None)
convs = [l for l in model.features if isinstance(l, torch.nn.Conv2d)]
tensors = {}
for i, conv in enumerate(convs):
    base = "conv2d" if i == 0 else "conv2d_%d" % i
    tensors[base + "/kernel"] = conv.weight.detach().numpy().astype("<f4")
    tensors[base + "/bias"] = conv.bias.detach().numpy().astype("<f4")
header, offset, blobs = {}, 0, []
for name, array in tensors.items():
    blob = np.ascontiguousarray(array).tobytes()
    header[name] = {"dtype": "F32", "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(blob)]}
    offset += len(blob)
    blobs.append(blob)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(work, "vgg16-torch.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
print("set: %d training and %d test JPEGs of %dx%d in 4 classes; VGG16 weights: %s"
      % (4 * per_class, 4 * max(per_class // 4, 10), side, side, weights or "random (offline)"))
PY

run () {
    local name=$1; shift
    local start=$SECONDS
    "$build/zactor-run" --train-data "$work/oct/train" --eval-data "$work/oct/test" \
        --image-size "$side" --preprocess torch \
        --model "vgg16(trainable=false) globalavgpool dense(256,relu) dropout(0.5) dense(4)" \
        --warm-start-from "$work/vgg16-torch.safetensors" --warm-start-layout torch \
        --warm-start-vars conv2d --cache-frozen --epochs "$epochs" --batch-size 32 \
        --model-dir "$work/$name" "$@" >"$work/$name.log" 2>&1 || { tail -5 "$work/$name.log"; return 1; }
    echo "$name: $(grep -E 'test accuracy' "$work/$name.log" | tail -1 | sed -E 's/ *on [0-9]+ examples.*//') in $((SECONDS - start)) s"
}
[ -n "${CLUSTERS_ONLY:-}" ] || run single
run local --local --workers 1 --throttle-secs 3600
run allreduce --local --strategy allreduce --workers 1 --throttle-secs 3600
