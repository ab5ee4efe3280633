#!/usr/bin/python3
"""transfer_torch.py: the PyTorch side of bench/transfer.sh. torchvision's
VGG16 base (`vgg16().features`, the same 13 convolutions and 5 pools as
zactor's `vgg16`), a global average pool and a 10-way linear head, Adam,
on the first 2,048 Fashion-MNIST images nearest-upscaled to SIDE x SIDE x 3
(as bench_train model does). With --frozen the base's parameters are
requires_grad_(False): PyTorch then computes no weight gradient for them,
and autograd stops below the first layer that needs one.

Usage: transfer_torch.py SIDE BATCH THREADS STEPS WARMUP [--frozen] [--cuda] [--bf16]
(--cuda: on the GPU, each batch copied there inside the timed loop;
--no-tf32: cuDNN's convolutions in plain fp32, not PyTorch's default TF32;
--bf16: forward and loss under torch.autocast(bfloat16)).
Prints "torch images_per_sec=F ...".
"""
import sys
import time

import torch
try:
    import torchvision
except ImportError:                     # PyPI's torch alone (bench/venv.sh): the same layers
    torchvision = None

from fashion_mnist import upscaled

COUNT = 2048


def images(side):
    return torch.from_numpy(upscaled(side, COUNT).transpose(0, 3, 1, 2).copy())


def vgg16_features():
    """torchvision's vgg16().features, or the same 13 convolutions and 5 pools."""
    if torchvision is not None:
        return torchvision.models.vgg16(weights=None).features
    layers, channels = [], 3
    for width in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                  512, 512, 512, "M"):
        if width == "M":
            layers.append(torch.nn.MaxPool2d(2, 2))
        else:
            layers += [torch.nn.Conv2d(channels, width, 3, padding=1), torch.nn.ReLU(True)]
            channels = width
    return torch.nn.Sequential(*layers)


def main():
    side, batch, threads, steps, warmup = (int(a) for a in sys.argv[1:6])
    frozen = "--frozen" in sys.argv
    bf16 = "--bf16" in sys.argv
    device = torch.device("cuda" if "--cuda" in sys.argv else "cpu")
    if "--no-tf32" in sys.argv:
        torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(threads)
    torch.manual_seed(42)
    data = images(side)
    labels = torch.randint(0, 10, (COUNT,))
    base = vgg16_features()
    if frozen:
        base.requires_grad_(False)
    model = torch.nn.Sequential(base, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(512, 10)).to(device)
    if device.type == "cuda":
        data, labels = data.pin_memory(), labels.pin_memory()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.monotonic()
        at = (step * batch) % (COUNT - batch)
        optimizer.zero_grad()
        x = data[at:at + batch].to(device, non_blocking=True)
        y = labels[at:at + batch].to(device, non_blocking=True)
        if bf16:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - start
    print("torch images_per_sec=%.1f batch=%d threads=%d steps=%d seconds=%.4f frozen=%d device=%s tf32=%d"
          % (steps * batch / seconds, batch, threads, steps, seconds, frozen, device.type,
             torch.backends.cudnn.allow_tf32))


if __name__ == "__main__":
    main()
