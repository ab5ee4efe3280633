#!/usr/bin/env python3
"""tf_write_tfrecords.py: Fashion-MNIST as TensorFlow's own tools write it.

Encodes the first N training and M test images of Fashion-MNIST as JPEG with
tf.io.encode_jpeg and writes them twice: as tf.train.Example records
("image/encoded" bytes, "image/class/label" int64, as build_image_data.py
names them) in SHARDS shards by tf.io.TFRecordWriter, plain and GZIP; and,
the very same JPEG bytes, as an image folder (OUT/folder/{train,test}/CLASS/).

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/tf_write_tfrecords.py OUT [N] [M] [SHARDS]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from fashion_mnist import raw_split  # noqa: E402


def example(jpeg, label):
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    })).SerializeToString()


def write(out, split, images, labels, shards):
    jpegs = [tf.io.encode_jpeg(image[..., None], quality=95).numpy() for image in images]
    for kind, options in (("plain", None), ("gzip", "GZIP")):
        os.makedirs(os.path.join(out, kind), exist_ok=True)
        for s in range(shards):
            path = os.path.join(out, kind, "%s-%05d-of-%05d.tfrecord" % (split, s, shards))
            with tf.io.TFRecordWriter(path, options=options) as writer:
                for i in range(s, len(jpegs), shards):
                    writer.write(example(jpegs[i], int(labels[i])))
    for i, (jpeg, label) in enumerate(zip(jpegs, labels)):
        folder = os.path.join(out, "folder", split, str(label))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "%05d.jpg" % i), "wb") as f:
            f.write(jpeg)
    return len(jpegs)


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12000
    m = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    shards = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    for split, name, count in (("train", "train", n), ("test", "t10k", m)):
        images, labels = raw_split(name, count)
        written = write(out, split, images, labels, shards)
        print("%s: %d images as JPEG, %d shards plain and GZIP (tf.io.TFRecordWriter, "
              "TensorFlow %s), and the same bytes as class folders" % (split, written, shards,
                                                                      tf.__version__))


if __name__ == "__main__":
    main()
