#!/usr/bin/python3
"""images_peers.py: the peers of bench/images.sh, one epoch of a folder of
class folders decoded and resized to SIZE x SIZE gray, as their users write it.

  torch  torchvision's ImageFolder + DataLoader (batch 32, num_workers 0),
         transforms Grayscale(1), Resize((SIZE, SIZE)) (PIL, bilinear with
         antialiasing), ToTensor()
  pil    tf.data-style map function with no workers: PIL open, convert("L"),
         resize((SIZE, SIZE), BILINEAR), numpy float32 / 255, batched by 32

Usage: images_peers.py torch|pil DIR [SIZE]; prints "images/s X".
"""
import os
import sys
import time

import numpy as np
from PIL import Image

BATCH = 32


def run_torch(folder, size):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    transform = transforms.Compose([transforms.Grayscale(1), transforms.Resize((size, size)),
                                    transforms.ToTensor()])
    loader = DataLoader(datasets.ImageFolder(folder, transform=transform), batch_size=BATCH,
                        shuffle=True, num_workers=0)
    images, checksum = 0, 0.0
    for features, _ in loader:
        images += features.shape[0]
        checksum += float(features[0, 0, 0, 0])
    return images, checksum


def run_pil(folder, size):
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    files = [(os.path.join(folder, c, f), label) for label, c in enumerate(classes)
             for f in sorted(os.listdir(os.path.join(folder, c)))]
    images, checksum = 0, 0.0
    for start in range(0, len(files), BATCH):
        batch = []
        for path, _ in files[start:start + BATCH]:
            with Image.open(path) as image:
                pixels = image.convert("L").resize((size, size), Image.BILINEAR)
                batch.append(np.asarray(pixels, dtype=np.float32) / 255.0)
        features = np.stack(batch)
        images += features.shape[0]
        checksum += float(features[0, 0, 0])
    return images, checksum


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("torch", "pil"):
        sys.exit("usage: images_peers.py torch|pil DIR [SIZE]")
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 224
    if sys.argv[1] == "torch":          # imported before the clock starts
        import torch
        import torchvision  # noqa: F401
        torch.set_num_threads(1)
    start = time.monotonic()
    images, checksum = (run_torch if sys.argv[1] == "torch" else run_pil)(sys.argv[2], size)
    seconds = time.monotonic() - start
    print("images/s %.1f (%d images in %.2f s, %s; checksum %.3f)"
          % (images / seconds, images, seconds, sys.argv[1], checksum))


if __name__ == "__main__":
    main()
