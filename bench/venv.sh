#!/usr/bin/env bash
#  bench/venv.sh: the Python peers of bench/ (TensorFlow 2 with Keras 3 and
#  TensorBoard; onnxruntime; PyTorch 2) in a virtual environment of their
#  own, from PyPI.
#  PyPI's torch wheel brings NVIDIA's CUDA libraries (about 4 GB; it runs on
#  the CPU without a GPU); ZA_BENCH_TORCH=0 leaves PyTorch out. Never
#  needed by the README's two commands or .ci/run: only bench/ scripts, and
#  the ZA_LONG=1 checks, use it. Prints the environment's python.
#  Usage: bench/venv.sh            (ZA_BENCH_VENV: where; default
#                                   ~/.cache/zactor/bench-venv)
set -euo pipefail
venv=${ZA_BENCH_VENV:-$HOME/.cache/zactor/bench-venv}
tf=${ZA_TF_VERSION:-2.21.0}
torch=${ZA_TORCH_VERSION:-2.15.0}
python=${ZA_BENCH_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
    echo "bench/venv.sh: making $venv (tensorflow-cpu $tf and torch $torch from PyPI)" >&2
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import tensorflow, tensorboard, PIL, onnxruntime" 2>/dev/null; then
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$venv/bin/python" -m pip install -q "tensorflow-cpu==$tf" tensorboard pillow onnx \
        onnxruntime >&2
fi
if [ "${ZA_BENCH_TORCH:-1}" != 0 ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    "$venv/bin/python" -m pip install -q "torch==$torch" >&2
fi
echo "$venv/bin/python"
