#!/usr/bin/env python3
"""transfer_keras.py: the Keras side of bench/transfer_vs_tensorflow.sh.
keras.applications.VGG16(weights=None, include_top=False) (the same 13
convolutions and 5 pools as zactor's `vgg16`), a GlobalAveragePooling2D and a
Dense(10) head, Adam, trained by model.fit on the first 2,048 Fashion-MNIST
images nearest-upscaled to SIDE x SIDE x 3 (as bench_train model and
transfer_torch.py do). --frozen: base.trainable = False, Keras's way.
--bf16: the mixed_bfloat16 policy.

Usage: transfer_keras.py SIDE BATCH THREADS STEPS WARMUP [--frozen] [--bf16]
Prints "keras images_per_sec=F ...".
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

from fashion_mnist import timed_fit, upscaled  # noqa: E402

COUNT = 2048


def main():
    side, batch, threads, steps, warmup = (int(a) for a in sys.argv[1:6])
    frozen, bf16 = "--frozen" in sys.argv, "--bf16" in sys.argv
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if bf16 else "float32")
    keras.utils.set_random_seed(42)
    base = keras.applications.VGG16(weights=None, include_top=False,
                                    input_shape=(side, side, 3))
    base.trainable = not frozen
    model = keras.Sequential([base, keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(10, dtype="float32")])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    total = warmup + steps
    x = np.resize(upscaled(side, COUNT), (total * batch, side, side, 3))
    y = np.random.default_rng(42).integers(0, 10, total * batch).astype(np.int32)
    seconds = timed_fit(keras, model, x, y, batch, warmup, steps, False)
    print("keras images_per_sec=%.2f batch=%d threads=%d steps=%d seconds=%.4f frozen=%d "
          "policy=%s" % (steps * batch / seconds, batch, threads, steps, seconds, frozen,
                         "mixed_bfloat16" if bf16 else "float32"))


if __name__ == "__main__":
    main()
