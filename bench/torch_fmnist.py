#!/usr/bin/python3
"""PyTorch peer for the zactor Fashion-MNIST benchmark.

Same model, loss, optimiser and initialisation as zactor's seed CNN (Keras
semantics, 'valid' padding). Run with Debian's /usr/bin/python3 (torch 1.13).

The caller sets the environment (OPENBLAS_NUM_THREADS=1, MALLOC_* ...); this
script never sets thread-related environment variables, it only reports them
on stderr.

  --mode speed    --batch B --threads T --steps S --warmup W
      prints: torch images_per_sec=<f> batch=<B> threads=<T> steps=<S> seconds=<f>
      --device cuda: the model on the GPU, each batch copied there from pinned
      host memory inside the timed loop (zactor uploads each batch too);
      --no-tf32: convolutions in plain fp32 (PyTorch's default lets cuDNN
      use TF32 tensor cores for them; zactor's fp32 does not)
      --bf16: forward and loss under torch.autocast(bfloat16), PyTorch's mixed
      precision (zactor's --precision mixed_bfloat16)
  --mode accuracy --epochs E --batch 64 --seed K --threads T
      prints per epoch: torch epoch=<e> test_accuracy=<f> test_loss=<f> seconds=<f>
      (seconds = wall time of that epoch's training, evaluation excluded)
"""

import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Parse a gzip'd IDX file (magic 0x00 0x00 <type> <ndim>, big-endian dims)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError("%s: bad IDX magic" % path)
    dtype_code, ndim = raw[2], raw[3]
    if dtype_code != 0x08:
        raise ValueError("%s: expected unsigned byte data (0x08), got 0x%02x"
                         % (path, dtype_code))
    hdr = 4 + 4 * ndim
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    n = int(np.prod(dims)) if dims else 0
    if len(raw) - hdr != n:
        raise ValueError("%s: header says %d bytes of data, file has %d"
                         % (path, n, len(raw) - hdr))
    return np.frombuffer(raw, dtype=np.uint8, count=n, offset=hdr).reshape(dims)


def load_split(name):
    images = read_idx(os.path.join(DATA_DIR, "%s-images-idx3-ubyte.gz" % name))
    labels = read_idx(os.path.join(DATA_DIR, "%s-labels-idx1-ubyte.gz" % name))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise ValueError("%s: inconsistent shapes %s / %s"
                         % (name, images.shape, labels.shape))
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0))
    x = x.unsqueeze(1).contiguous()  # N x 1 x 28 x 28 (NCHW)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def make_model():
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(576, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )
    # Keras defaults: glorot_uniform kernels, zero biases.
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


LEARNING_RATE = 1e-3  # --lr


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, eps=1e-7)


AUTOCAST = None  # --bf16: the device type autocast computes bf16 on


def train_step(model, opt, loss_fn, xb, yb):
    opt.zero_grad(set_to_none=True)
    if AUTOCAST:
        with torch.autocast(device_type=AUTOCAST, dtype=torch.bfloat16):
            loss = loss_fn(model(xb), yb)
    else:
        loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss


def evaluate(model, loss_fn, x, y, batch=1000):
    model.eval()
    correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            xb, yb = x[i:i + batch], y[i:i + batch]
            out = model(xb)
            loss_sum += float(loss_fn(out, yb)) * xb.shape[0]
            correct += int((out.argmax(1) == yb).sum())
    model.train()
    n = x.shape[0]
    return correct / n, loss_sum / n


def mode_speed(args):
    x, y = load_split("train")
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    model = make_model().to(dev)
    opt = make_optimizer(model)
    if args.compile:                    # PyTorch 2: forward and backward compiled
        model = torch.compile(model)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    if args.batch > n:
        sys.exit("batch larger than the training set")
    # Pre-draw the batch start offsets so nothing but the step is timed.
    g = torch.Generator().manual_seed(args.seed)
    total = args.warmup + args.steps
    starts = torch.randint(0, n - args.batch + 1, (total,), generator=g).tolist()
    batches = [(x[s:s + args.batch], y[s:s + args.batch]) for s in starts]
    if dev.type == "cuda":
        batches = [(xb.pin_memory(), yb.pin_memory()) for xb, yb in batches]

    def step(i):
        xb, yb = batches[i]
        train_step(model, opt, loss_fn, xb.to(dev, non_blocking=True),
                   yb.to(dev, non_blocking=True))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    for i in range(args.warmup):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(args.warmup, total):
        step(i)
    sync()
    secs = time.perf_counter() - t0
    ips = args.steps * args.batch / secs if secs > 0 else float("inf")
    print("torch images_per_sec=%.3f batch=%d threads=%d steps=%d seconds=%.6f device=%s tf32=%d"
          " bf16=%d compile=%d" % (ips, args.batch, args.threads, args.steps, secs, args.device,
                                   torch.backends.cudnn.allow_tf32, AUTOCAST is not None,
                                   args.compile), flush=True)


def mode_accuracy(args):
    x, y = load_split("train")
    xt, yt = load_split("t10k")
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    model = make_model()
    opt = make_optimizer(model)
    # --cosine-steps D: TensorFlow's cosine_decay (alpha 0) of the step count
    # before each update, as zactor's --lr-schedule "cosine_decay(decay_steps=D)";
    # --lr-warmup-steps W: zactor's linear warm-up in front (update s + 1 of the
    # first W at (s + 1) / W of the schedule's rate at step W)
    sched = None
    d, w = float(args.cosine_steps), args.lr_warmup_steps

    def factor(step):
        decay = (lambda t: 0.5 * (1 + math.cos(math.pi * min(t, d) / d))) if d > 0 \
            else (lambda t: 1.0)
        return decay(w) * (step + 1) / w if step < w else decay(step)
    if d > 0 or w > 0:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    model.train()
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(n, generator=g)
        t0 = time.perf_counter()
        for i in range(0, n, args.batch):  # last partial batch kept (Keras does too)
            idx = perm[i:i + args.batch]
            train_step(model, opt, loss_fn, x[idx], y[idx])
            if sched:
                sched.step()
        secs = time.perf_counter() - t0
        acc, loss = evaluate(model, loss_fn, xt, yt)
        print("torch epoch=%d test_accuracy=%.6f test_loss=%.6f seconds=%.3f"
              % (epoch, acc, loss, secs), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["speed", "accuracy"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (speed mode)")
    p.add_argument("--no-tf32", action="store_true", help="cuDNN convolutions in plain fp32")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    p.add_argument("--cosine-steps", type=int, default=0,
                   help="accuracy mode: cosine decay of the rate over this many steps")
    p.add_argument("--lr-warmup-steps", type=int, default=0,
                   help="accuracy mode: a linear warm-up over this many steps first")
    p.add_argument("--bf16", action="store_true",
                   help="torch.autocast to bfloat16 around forward and loss (mixed precision)")
    p.add_argument("--compile", action="store_true",
                   help="speed mode, PyTorch 2: torch.compile the model (its first steps, "
                   "the warm-up, compile it)")
    args = p.parse_args()
    if args.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
    if args.bf16:
        global AUTOCAST
        AUTOCAST = torch.device(args.device).type
    global LEARNING_RATE
    LEARNING_RATE = args.lr
    if args.batch < 1 or args.threads < 1 or args.steps < 1 or args.warmup < 0 \
            or args.epochs < 1:
        p.error("batch, threads, steps, epochs must be >= 1 and warmup >= 0")

    torch.set_num_threads(args.threads)
    print("torch_env torch=%s num_threads=%d OPENBLAS_NUM_THREADS=%s "
          "OPENBLAS_CORETYPE=%s MALLOC_MMAP_THRESHOLD_=%s MALLOC_TRIM_THRESHOLD_=%s"
          % (torch.__version__, torch.get_num_threads(),
             os.environ.get("OPENBLAS_NUM_THREADS", "<unset>"),
             os.environ.get("OPENBLAS_CORETYPE", "<unset>"),
             os.environ.get("MALLOC_MMAP_THRESHOLD_", "<unset>"),
             os.environ.get("MALLOC_TRIM_THRESHOLD_", "<unset>")),
          file=sys.stderr, flush=True)

    if args.mode == "speed":
        mode_speed(args)
    else:
        mode_accuracy(args)


if __name__ == "__main__":
    main()
