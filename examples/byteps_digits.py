#!/usr/bin/python3
"""A training script in BytePS's PyTorch style (its train_mnist_byteps.py, with the
cross-barrier module), on scikit-learn's bundled 8x8 digits (no download). It is a BytePS
program: to run it on Ferry, change its import line to
`import ferry.torch.cross_barrier as bps`, nothing else (the tests do exactly that,
tests/python/test_examples.py):

    sed 's/^import byteps.torch.cross_barrier as bps$/import ferry.torch.cross_barrier as bps/' \\
        examples/byteps_digits.py > /tmp/b.py
    PYTHONPATH=build/python scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 /tmp/b.py
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from sklearn.datasets import load_digits

import byteps.torch.cross_barrier as bps

parser = argparse.ArgumentParser(description="BytePS-style digits example")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-pushpull", action="store_true", default=False)
args = parser.parse_args()

# BytePS: initialize library.
bps.init()
torch.manual_seed(args.seed)
torch.set_num_threads(1)

digits = load_digits()
images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
labels = torch.tensor(digits.target, dtype=torch.int64)
order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
test_idx, train_idx = order[:360], order[360:]
train_dataset = torch.utils.data.TensorDataset(images[train_idx], labels[train_idx])
test_dataset = torch.utils.data.TensorDataset(images[test_idx], labels[test_idx])

# BytePS: use DistributedSampler to partition the training data.
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_dataset, num_replicas=bps.size(), rank=bps.rank())
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                           sampler=train_sampler)
test_sampler = torch.utils.data.distributed.DistributedSampler(
    test_dataset, num_replicas=bps.size(), rank=bps.rank(), shuffle=False)
test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=64, sampler=test_sampler)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


model = Net()

# BytePS: scale learning rate by the number of workers.
optimizer = optim.SGD(model.parameters(), lr=args.lr * bps.size(), momentum=args.momentum)

# BytePS: (optional) compression algorithm.
compression = bps.Compression.fp16 if args.fp16_pushpull else bps.Compression.none

# BytePS: wrap the optimizer with the cross-iteration barrier: each layer's update is
# applied as soon as its own sum arrives, overlapping the next forward.
optimizer = bps.CrossBarrier(model, optimizer, named_parameters=model.named_parameters(),
                             compression=compression,
                             num_steps=args.epochs * len(train_loader))

# BytePS: broadcast parameters & optimizer state.
bps.broadcast_parameters(model.state_dict(), root_rank=0)
bps.broadcast_optimizer_state(optimizer, root_rank=0)


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    if bps.rank() == 0:
        print("epoch %d: last loss %.4f" % (epoch, loss.item()), flush=True)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = bps.push_pull(tensor, name=name)
    return avg_tensor.item()


def test():
    model.eval()
    test_loss = 0.
    test_accuracy = 0.
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    # BytePS: average metric values across workers.
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(test_accuracy, "avg_accuracy")
    if bps.rank() == 0:
        print("test set: average loss %.4f, test accuracy %.4f" % (test_loss, test_accuracy),
              flush=True)


for epoch in range(1, args.epochs + 1):
    train(epoch)
test()
