#!/usr/bin/env bash
#  check_tensorflow.sh: bench/tf_interop.sh's four checks against TensorFlow
#  itself, as a test, with ZA_LONG=1 and bench/venv.sh's environment made
#  beforehand; skipped (77) with a message saying which is missing. It never
#  downloads anything.
#  Usage: tests/check_tensorflow.sh SOURCE_DIR BUILD_DIR
source_dir=$1 build_dir=$2
venv=${ZA_BENCH_VENV:-$HOME/.cache/zactor/bench-venv}
if [ "${ZA_LONG:-0}" != 1 ]; then
    echo "check_tensorflow: skipped: set ZA_LONG=1 (it takes a minute and TensorFlow from PyPI)"
    exit 77
fi
if ! "$venv/bin/python" -c "import tensorflow, tensorboard, keras" 2>/dev/null; then
    echo "check_tensorflow: skipped: no TensorFlow in $venv; make it with $source_dir/bench/venv.sh"
    exit 77
fi
work=$(mktemp -d /tmp/za_check_tensorflow.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$source_dir/bench/tf_interop.sh" "$build_dir" "$work"
