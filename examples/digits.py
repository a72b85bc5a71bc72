"""What the examples share: scikit-learn's bundled 8x8 digits (1797 images, no download),
the small CNN they train on them, the data split, loaders and loops, and the setup of a
training process (its device; the optimizer wrapped and broadcast by ferry.torch, which
benchmark_torch.py does too).

The examples import it by name (`import digits`): a script's own folder is on sys.path, so
this works from any directory. A copy of an example elsewhere (the Horovod and BytePS
programs with their import line changed) needs this folder on PYTHONPATH.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data.distributed


class DigitsCNN(nn.Module):
    """Two convolutions and two linear layers; no batch norm or dropout. Returns logits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def load_data(seed=0, test_fraction=0.2, n_test=None):
    """Returns (x_train, y_train, x_test, y_test): float32 images [N,1,8,8] in [0,1]. The
    images are shuffled with `seed` (the same split on every worker); the first n_test
    (default: test_fraction of them) are the test set."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=g)
    if n_test is None:
        n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def load_datasets(seed, n_test=360):
    """Seeds torch with `seed` (the model's initial weights) for one thread, and returns
    the (train, test) TensorDatasets of load_data's split, n_test images for the test set."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_data(n_test=n_test)
    return (torch.utils.data.TensorDataset(x_train, y_train),
            torch.utils.data.TensorDataset(x_test, y_test))


def distributed_loaders(train_dataset, test_dataset, batch_size, num_replicas, rank):
    """(train_sampler, train_loader, test_sampler, test_loader): DistributedSamplers give
    each of num_replicas workers its partition of the data (the test set unshuffled)."""
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=num_replicas, rank=rank)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size,
                                               sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=num_replicas, rank=rank, shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=64, sampler=test_sampler)
    return train_sampler, train_loader, test_sampler, test_loader


def argument_parser(description):
    """The options of the Horovod- and BytePS-style examples; each adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    return parser


def train(epochs, model, optimizer, sampler, loader, rank):
    """`epochs` passes over `loader` (its DistributedSampler `sampler` shuffled anew for
    each); rank 0 prints each epoch's last loss."""
    for epoch in range(1, epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print("epoch %d: last loss %.4f" % (epoch, loss.item()), flush=True)


def evaluate(model, sampler, loader, average):
    """(mean loss, accuracy) on the test set: each worker's over its partition of it
    (`sampler`'s samples), averaged over the workers by `average(value, name)`."""
    model.eval()
    test_loss = 0.
    test_accuracy = 0.
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
    # The number of examples in this worker's partition.
    test_loss /= len(sampler)
    test_accuracy /= len(sampler)
    return average(test_loss, "avg_loss"), average(test_accuracy, "avg_accuracy")


def shard_indices(n, rank, size):
    """This rank's sample indices: every size-th of the first n - n % size samples, so
    every shard has the same length (and every worker the same number of steps)."""
    usable = n - n % size
    return torch.arange(rank, usable, size)


def epoch_batches(shard, batch_size, epoch, seed):
    """The shard shuffled for this epoch (same seed on every worker), cut into full
    batches: a list of index tensors into the training set."""
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    perm = shard[torch.randperm(len(shard), generator=g)]
    steps = len(perm) // batch_size
    return [perm[i * batch_size:(i + 1) * batch_size] for i in range(steps)]


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError("unknown optimizer %r" % name)


def pick_device(name, local_rank):
    """The torch device to train on: the CPU, or this worker's GPU (cuda:local_rank % the
    number of GPUs seen, so the workers of a machine spread over its GPUs)."""
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU (torch %s, built with CUDA %s)"
                         % (torch.__version__, torch.version.cuda))
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def distribute(bps, model, optimizer, fp16=False, cross_barrier=False, compression=None):
    """`optimizer` wrapped for data-parallel training by ferry.torch (`bps`): a
    DistributedOptimizer (fp16: gradients pushed as float16; `compression`: the core's
    compressor text, as FERRY_COMPRESSION's), every worker starting from rank 0's weights
    and optimizer state, and with cross_barrier a CrossBarrier over it."""
    if compression and compression != "none":
        compression = bps.Compression.custom(compression)
    else:
        compression = bps.Compression.fp16 if fp16 else bps.Compression.none
    optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    bps.broadcast_optimizer_state(optimizer, root_rank=0)
    if cross_barrier:
        optimizer = bps.CrossBarrier(model, optimizer)
    return optimizer
