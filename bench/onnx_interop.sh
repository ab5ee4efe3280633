#!/usr/bin/env bash
#  ONNX both ways, against runtimes nobody here wrote (issue 47's checks):
#   1. the seed CNN, trained 1,500 steps, exported by `zactor-ckpt export`:
#      onnxruntime (PyPI, bench/venv.sh) on the 10,000 Fashion-MNIST test
#      images gives `zactor-run predict --logits`'s probabilities within
#      1e-5 and the same class for every image;
#   2. VGG16 (`vgg16 globalavgpool dense(10)`, caffe preprocessing), trained
#      40 steps on 32x32 RGB PNGs of Fashion-MNIST: the same on the 10,000
#      test images as PNGs;
#   3. torchvision's VGG16 (random weights; Debian's python3-torch and
#      python3-torchvision) exported by torch.onnx.export warm-starts
#      zactor's `vgg16` (--warm-start-layout torch): zactor's forward of 16
#      224x224 images matches PyTorch's within 1e-4.
#  Each prints what it compared. Exit 0 when all three hold.
#  Usage: bench/onnx_interop.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
work=${2:-$(mktemp -d /tmp/za_onnx_interop.XXXXXX)}
mkdir -p "$work"
zactor="$build/zactor-run"
ckpt="$build/zactor-ckpt"
py=$("$here/venv.sh")
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' | xargs)"
echo "onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)')," \
     "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
failed=()

echo; echo "1. the seed CNN in onnxruntime"
"$zactor" --max-steps 1500 --model-dir "$work/cnn" >/dev/null 2>&1
"$ckpt" export "$work/cnn" -o "$work/cnn.onnx" | sed 's/^/   /'
"$zactor" predict --model-dir "$work/cnn" --logits --output "$work/cnn.jsonl" >/dev/null 2>&1
"$py" "$here/onnxruntime_loads_zactor.py" "$work/cnn.onnx" "$work/cnn.jsonl" | sed 's/^/   /'
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("seed CNN in onnxruntime")

echo; echo "2. VGG16 in onnxruntime"
[ -d "$work/png32-test" ] || {
    "$py" "$here/fmnist_pngs.py" train 2000 32 "$work/png32-train" >/dev/null
    "$py" "$here/fmnist_pngs.py" t10k 10000 32 "$work/png32-test" >/dev/null; }
"$zactor" --model 'vgg16 globalavgpool dense(10)' --train-data "$work/png32-train" \
    --eval-data "$work/png32-test" --image-size 32 --channels 3 --preprocess caffe \
    --batch-size 32 --learning-rate 1e-4 --max-steps 40 --model-dir "$work/vgg16" \
    >/dev/null 2>&1
"$ckpt" export "$work/vgg16" -o "$work/vgg16.onnx" | sed 's/^/   /'
"$zactor" predict --model-dir "$work/vgg16" --data "$work/png32-test" --logits \
    --output "$work/vgg16.jsonl" >/dev/null 2>&1
"$py" "$here/onnxruntime_loads_zactor.py" "$work/vgg16.onnx" "$work/vgg16.jsonl" \
    | sed 's/^/   /'
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("VGG16 in onnxruntime")

echo; echo "3. torchvision's VGG16 through torch.onnx.export into zactor"
if /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
    [ -d "$work/png224" ] || /usr/bin/python3 "$here/fmnist_pngs.py" t10k 16 224 "$work/png224" >/dev/null
    rename=$(/usr/bin/python3 "$here/torch_vgg16_onnx.py" export "$work" 2> >(sed 's/^/   /' >&2))
    rm -rf "$work/warm"
    #  One step with every variable frozen: the checkpoint holds the ONNX
    #  file's convolutions and a random head, unchanged.
    "$zactor" --model 'vgg16 globalavgpool dense(10)' --train-data "$work/png224" \
        --eval-data "$work/png224" --image-size 224 --channels 3 --preprocess torch \
        --batch-size 4 --max-steps 1 --freeze '.*' --model-dir "$work/warm" \
        --warm-start-from "$work/torchvision_vgg16.onnx" --warm-start-layout torch \
        --warm-start-vars conv2d --warm-start-rename "$rename" >"$work/warm.log" 2>&1 \
        || { cat "$work/warm.log"; failed+=("the warm start"); }
    "$zactor" predict --model-dir "$work/warm" --data "$work/png224" --logits \
        --output "$work/warm.jsonl" >/dev/null 2>&1
    /usr/bin/python3 "$here/torch_vgg16_onnx.py" compare "$work" "$work/warm.jsonl" "$work/warm" \
        | sed 's/^/   /'
    [ "${PIPESTATUS[0]}" = 0 ] || failed+=("torchvision's VGG16 in zactor")
else
    echo "   skipped: apt-get install python3-torchvision (Debian's PyTorch)"
fi

echo
if [ ${#failed[@]} -eq 0 ]; then
    echo "onnx_interop: all three hold"
else
    printf 'onnx_interop: FAILED: %s\n' "${failed[@]}"
    exit 1
fi
