#!/usr/bin/python3
"""write_tfrecord.py: an independent writer of TFRecord shards of
tf.train.Example, for tests/test_images.c. It shares no code with zactor's
reader: the Example messages come from Python protobuf classes that protoc
generates at run time from a .proto with Example's field numbers
(tensorflow/core/example/example.proto, feature.proto); the framing and its
masked CRC32Cs are read_events.py's, written in Python.

Usage: write_tfrecord.py FOLDER OUT SHARDS [--gzip K] [--label-base B] [--image-key KEY]

Reads FOLDER as Keras's image_dataset_from_directory would (class folders,
sorted; their files, sorted) and writes its images' bytes, unchanged, as
OUT-0000k-of-0000n (as TensorFlow's build_image_data.py names them), shard k
holding the k-th contiguous part, so that the shards in name order give the
folder's order. Each Example holds image/encoded (or KEY: the file's bytes),
image/class/label (the class's index + B), image/format and image/filename.
Shard K (if given) is GZIP-compressed. Exit 0, or 2 when protobuf or protoc
is missing.
"""
import gzip
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_events import compile_proto, fail, masked_crc32c  # noqa: E402

EXAMPLE_PROTO = """\
syntax = "proto3";
package tensorflow;
message BytesList { repeated bytes value = 1; }
message FloatList { repeated float value = 1 [packed = true]; }
message Int64List { repeated int64 value = 1 [packed = true]; }
message Feature {
  oneof kind {
    BytesList bytes_list = 1;
    FloatList float_list = 2;
    Int64List int64_list = 3;
  }
}
message Features { map<string, Feature> feature = 1; }
message Example { Features features = 1; }
"""


def folder_files(folder):
    """(path, label) in Keras's order."""
    classes = sorted(name for name in os.listdir(folder)
                     if os.path.isdir(os.path.join(folder, name)) and not name.startswith("."))
    files = []
    for label, name in enumerate(classes):
        for root, dirs, names in os.walk(os.path.join(folder, name)):
            dirs.sort()
            for file_name in sorted(names):
                if file_name.lower().endswith((".jpg", ".jpeg", ".png")):
                    files.append((os.path.join(root, file_name), label))
    return files


def record(data):
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data
            + struct.pack("<I", masked_crc32c(data)))


def main():
    args = sys.argv[1:]
    gzip_shard, label_base, image_key = -1, 0, "image/encoded"
    usage = ("usage: write_tfrecord.py FOLDER OUT SHARDS [--gzip K] [--label-base B] "
             "[--image-key KEY]")
    while len(args) > 3:
        if args[-2] == "--gzip":
            gzip_shard = int(args[-1])
        elif args[-2] == "--label-base":
            label_base = int(args[-1])
        elif args[-2] == "--image-key":
            image_key = args[-1]
        else:
            fail(usage)
        args = args[:-2]
    if len(args) != 3:
        fail(usage)
    folder, out, shards = args[0], args[1], int(args[2])
    example_pb2 = compile_proto(tempfile.mkdtemp(prefix="za_write_tfrecord_"), "example",
                                EXAMPLE_PROTO)
    files = folder_files(folder)
    for shard in range(shards):
        part = files[shard * len(files) // shards:(shard + 1) * len(files) // shards]
        blob = b""
        for path, label in part:
            example = example_pb2.Example()
            feature = example.features.feature
            with open(path, "rb") as f:
                feature[image_key].bytes_list.value.append(f.read())
            feature["image/class/label"].int64_list.value.append(label + label_base)
            feature["image/format"].bytes_list.value.append(
                b"PNG" if path.lower().endswith(".png") else b"JPEG")
            feature["image/filename"].bytes_list.value.append(os.path.basename(path).encode())
            blob += record(example.SerializeToString())
        name = "%s-%05d-of-%05d" % (out, shard, shards)
        with (gzip.open(name, "wb") if shard == gzip_shard else open(name, "wb")) as f:
            f.write(blob)
        print("%s %d" % (name, len(part)))


if __name__ == "__main__":
    main()
