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
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

from fashion_mnist import seed_cnn, split, timed_fit  # noqa: E402


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
    policy = "mixed_bfloat16" if args.bf16 else "float32"
    keras.mixed_precision.set_global_policy(policy)

    x, y = split("train")
    total = args.warmup + args.steps
    need = total * args.batch
    x, y = np.resize(x, (need,) + x.shape[1:]), np.resize(y, need)

    model = seed_cnn(keras, logits_dtype="float32")
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    seconds = timed_fit(keras, model, x, y, args.batch, args.warmup, args.steps, True)
    print("keras images_per_sec=%.1f batch=%d threads=%d steps=%d seconds=%.4f policy=%s "
          "jit=%s tf=%s" % (args.steps * args.batch / seconds, args.batch, args.threads,
                            args.steps, seconds, policy, model.jit_compile, tf.__version__))


if __name__ == "__main__":
    sys.exit(main())
