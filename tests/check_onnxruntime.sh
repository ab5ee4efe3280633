#!/usr/bin/env bash
#  check_onnxruntime.sh: bench/onnx_interop.sh's three checks (the seed CNN
#  and VGG16 exported, in onnxruntime; torchvision's VGG16 into zactor) as a
#  test, with ZA_LONG=1, bench/venv.sh's onnxruntime and Debian's
#  python3-torchvision made beforehand; skipped (77) with a message saying
#  which is missing. It never downloads anything.
#  Usage: tests/check_onnxruntime.sh SOURCE_DIR BUILD_DIR
source_dir=$1 build_dir=$2
venv=${ZA_BENCH_VENV:-$HOME/.cache/zactor/bench-venv}
if [ "${ZA_LONG:-0}" != 1 ]; then
    echo "check_onnxruntime: skipped: set ZA_LONG=1 (it takes minutes, onnxruntime from PyPI" \
         "and python3-torchvision)"
    exit 77
fi
if ! "$venv/bin/python" -c "import onnxruntime, PIL" 2>/dev/null; then
    echo "check_onnxruntime: skipped: no onnxruntime in $venv; make it with $source_dir/bench/venv.sh"
    exit 77
fi
if ! /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
    echo "check_onnxruntime: skipped: apt-get install python3-torchvision (Debian's PyTorch)"
    exit 77
fi
work=$(mktemp -d /tmp/za_check_onnxruntime.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$source_dir/bench/onnx_interop.sh" "$build_dir" "$work"
