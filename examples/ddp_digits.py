#!/usr/bin/python3
"""A plain PyTorch DDP program: the digits CNN of digits.py (train_digits.py's) under
DistributedDataParallel, its backend chosen by --backend alone (gloo, or ferry: Ferry's
servers with priority scheduling). Nothing else in it knows about Ferry.

    scripts/ferry-run --standalone --nproc-per-node 2 examples/ddp_digits.py --backend ferry
    scripts/ferry-run --standalone --nproc-per-node 2 examples/ddp_digits.py --backend gloo

ferry-run sets torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and imports
ferry.torch before the script runs, which registers the `ferry` backend.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits import DigitsCNN, epoch_batches, load_data, shard_indices  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="gloo", help="torch.distributed backend (gloo, ferry)")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--min-accuracy", type=float, default=0.0)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data()
    shard = shard_indices(len(y_train), rank, size)
    model = torch.nn.parallel.DistributedDataParallel(DigitsCNN())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    if rank == 0:
        print("DDP over %s: %d processes, batch %d per process" % (dist.get_backend(), size,
                                                                   args.batch_size), flush=True)
    start = time.time()
    for epoch in range(args.epochs):
        total = torch.zeros(2, dtype=torch.float64)
        for idx in epoch_batches(shard, args.batch_size, epoch, args.seed):
            opt.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item() * len(idx), len(idx)], dtype=torch.float64)
        dist.all_reduce(total)
        if rank == 0:
            print("epoch %2d  loss %.4f" % (epoch + 1, total[0] / total[1]), flush=True)
    model.eval()
    test = torch.arange(rank, len(y_test), size)
    with torch.no_grad():
        pred = model(x_test[test]).argmax(1)
    counts = torch.tensor([int((pred == y_test[test]).sum()), len(test)], dtype=torch.int64)
    dist.all_reduce(counts)
    accuracy = counts[0].item() / counts[1].item()
    if rank == 0:
        print("test accuracy %.4f (%d of %d) after %d epochs, %.1f s, backend %s"
              % (accuracy, counts[0], counts[1], args.epochs, time.time() - start,
                 dist.get_backend()), flush=True)
    dist.destroy_process_group()
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
