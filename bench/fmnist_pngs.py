#!/usr/bin/env python3
"""fmnist_pngs.py: Fashion-MNIST images as PNG class folders of another size
and 3 channels, for models whose input is not 28 x 28 x 1 (VGG16's).

Each 28 x 28 image is padded with black to SIDE x SIDE when 28 <= SIDE < 56
(every pixel kept, none interpolated), else scaled to SIDE by Pillow's
nearest neighbour; its channels are three different functions of
its gray (R = g, G = 255 - g, B = g / 2), so that a wrong channel order
shows.

Usage: python3 bench/fmnist_pngs.py SPLIT COUNT SIDE OUT_DIR
  SPLIT train or t10k; OUT_DIR/<label>/<index>.png
"""
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import raw_split  # noqa: E402


def main():
    split, count, side, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    x, y = raw_split(split, count)
    for i, (image, label) in enumerate(zip(x, y)):
        if side >= 28 and side < 56:
            gray = np.zeros((side, side), np.uint8)
            at = (side - 28) // 2
            gray[at:at + 28, at:at + 28] = image
        else:
            gray = np.asarray(Image.fromarray(image).resize((side, side), Image.NEAREST))
        g = gray.astype(np.int32)
        rgb = np.stack([g, 255 - g, g // 2], axis=-1).astype(np.uint8)
        folder = os.path.join(out, str(label))
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(rgb, "RGB").save(os.path.join(folder, "%05d.png" % i))
    print("fmnist_pngs: %d %s images as %dx%dx3 PNGs in %s" % (len(x), split, side, side, out))


if __name__ == "__main__":
    main()
