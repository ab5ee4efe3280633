#!/usr/bin/env python3
"""Keras (TensorFlow 2) peer for the zactor Fashion-MNIST benchmark.

The tutorial's seed CNN as Keras writes it (Conv2D 32/64/64 3x3 relu 'valid',
MaxPooling2D 2, Flatten, Dense 64 relu, Dense 10 logits), Adam 1e-3,
SparseCategoricalCrossentropy(from_logits=True), trained with model.fit on
the Fashion-MNIST training set held in memory (pixels / 255), the batches
shuffled. Run in bench/venv.sh's environment.

  --batch B --threads T --steps S --warmup W [--bf16]
      prints: keras images_per_sec=<f> batch=<B> threads=<T> steps=<S>
              seconds=<f> policy=<p> jit=<j> tf=<version>
      The time runs from the end of batch W to the end of batch W + S (the
      trace, the compilation and the first steps left out, as zactor's
      bench_train leaves its warm-up out). --threads sets TensorFlow's intra-op
      threads (inter-op 1). --bf16: Keras's mixed_bfloat16 policy (the
      logits in float32).
"""
import argparse
import gzip
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()

    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    from keras import layers
    policy = "mixed_bfloat16" if args.bf16 else "float32"
    keras.mixed_precision.set_global_policy(policy)

    x = read_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz")).astype(np.int32)
    x = (x.astype(np.float32) / 255.0)[..., None]
    total = args.warmup + args.steps
    need = total * args.batch
    x, y = np.resize(x, (need,) + x.shape[1:]), np.resize(y, need)

    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, activation="relu"), layers.Flatten(),
        layers.Dense(64, activation="relu"), layers.Dense(10, dtype="float32"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    marks = {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 in (args.warmup, total):
                marks[batch + 1] = time.perf_counter()

    model.fit(x, y, batch_size=args.batch, epochs=1, shuffle=True, verbose=0,
              callbacks=[Clock()])
    seconds = marks[total] - marks[args.warmup]
    print("keras images_per_sec=%.1f batch=%d threads=%d steps=%d seconds=%.4f policy=%s "
          "jit=%s tf=%s" % (args.steps * args.batch / seconds, args.batch, args.threads,
                            args.steps, seconds, policy, model.jit_compile, tf.__version__))


if __name__ == "__main__":
    sys.exit(main())
