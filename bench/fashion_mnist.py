"""fashion_mnist.py: what the Python peers of bench/ share: Debian's
Fashion-MNIST IDX files read with numpy, the pixels as zactor reads them
(value / 255), and the seed CNN as Keras writes it. numpy only at import
(Keras is passed in), so Debian's python3 and bench/venv.sh's both use it.
"""
import gzip
import os

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzipped or not) as a uint8 array of its dimensions."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def raw_split(name, count=None):
    """The uint8 images and int32 labels of split "train" or "t10k"."""
    x = read_idx(os.path.join(DATA_DIR, "%s-images-idx3-ubyte.gz" % name))[:count]
    y = read_idx(os.path.join(DATA_DIR, "%s-labels-idx1-ubyte.gz" % name))[:count]
    return x, y.astype(np.int32)


def split(name, count=None):
    """Images N x 28 x 28 x 1 as zactor reads IDX files (value / 255), labels."""
    x, y = raw_split(name, count)
    return (x.astype(np.float32) / 255.0)[..., None], y


def upscaled(side, count):
    """The first `count` training images nearest-upscaled to side x side x 3
    (as bench_train model does): float32, channels last."""
    x, _ = split("train", count)
    index = np.arange(side) * 28 // side
    return np.repeat(x[:, index][:, :, index], 3, axis=3)


def seed_cnn(keras, logits_dtype=None):
    """The tutorial's seed CNN: 'valid' 3x3 convolutions 32/64/64, 2x2 pools,
    dense 64 and 10 logits (in logits_dtype under a mixed policy)."""
    from keras import layers
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, activation="relu"), layers.Flatten(),
        layers.Dense(64, activation="relu"), layers.Dense(10, dtype=logits_dtype),
    ])


def timed_fit(keras, model, x, y, batch, warmup, steps, shuffle):
    """Keras's model.fit over warmup + steps batches of x, y (which hold that
    many); the seconds from the end of batch `warmup` to the last one's."""
    import time
    total = warmup + steps
    marks = {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if step + 1 in (warmup, total):
                marks[step + 1] = time.perf_counter()

    model.fit(x, y, batch_size=batch, epochs=1, shuffle=shuffle, verbose=0, callbacks=[Clock()])
    return marks[total] - marks[warmup]
