#!/usr/bin/python3
"""An elastic training script in Horovod Elastic's documented PyTorch style (its
pytorch_mnist_elastic.py), on scikit-learn's bundled 8x8 digits (no download). It is a
Horovod program: to run it on Ferry, change its import line to `import ferry.torch as hvd`,
nothing else, and set FERRY_ELASTIC=1 on every node (the tests do exactly that,
tests/python/test_examples.py):

    sed 's/^import horovod.torch as hvd$/import ferry.torch as hvd/' examples/horovod_elastic_digits.py > /tmp/h.py
    FERRY_ELASTIC=1 PYTHONPATH=build/python:examples scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 /tmp/h.py

The data and the model are examples/digits.py's (on PYTHONPATH for a copy elsewhere, as
above).
"""

import torch
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data

import digits
import horovod.torch as hvd

parser = digits.argument_parser("Horovod-Elastic-style digits example")
parser.add_argument("--batches-per-commit", type=int, default=5)
args = parser.parse_args()

hvd.init()
train_dataset, test_dataset = digits.load_datasets(args.seed)

# Horovod: use an ElasticSampler to partition the data among the workers that remain.
train_sampler = hvd.elastic.ElasticSampler(train_dataset, shuffle=True, seed=args.seed)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                           sampler=train_sampler)

model = digits.DigitsCNN()
# Horovod: scale the learning rate by the number of workers.
lr_scaler = hvd.size()
optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def train(state):
    # Horovod: the data left in the epoch is split over the current workers.
    for state.epoch in range(state.epoch, args.epochs):
        model.train()
        steps_remaining = len(train_loader) - state.batch
        for state.batch, (data, target) in enumerate(train_loader):
            if state.batch >= steps_remaining:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            state.train_sampler.record_batch(state.batch, args.batch_size)
            if state.batch % args.batches_per_commit == 0:
                state.commit()
        if hvd.rank() == 0:
            print("epoch %d loss %.4f workers %d" % (state.epoch + 1, loss.item(), hvd.size()),
                  flush=True)
        state.batch = 0
        state.train_sampler.set_epoch(state.epoch + 1)
        state.commit()


def on_state_reset():
    # Horovod: adjust the learning rate to the new number of workers.
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()


@hvd.elastic.run
def run(state):
    train(state)


state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])
run(state)

# Evaluate on every worker's share of the test set; sum the counts.
model.eval()
shard = torch.arange(hvd.rank(), len(test_dataset), hvd.size())
with torch.no_grad():
    x, y = test_dataset[shard]
    correct = torch.tensor([float((model(x).argmax(1) == y).sum()), float(len(shard))])
counts = hvd.allreduce(correct, op=hvd.Sum, name="test_counts")
if hvd.rank() == 0:
    print("test accuracy %.4f" % (counts[0] / counts[1]).item(), flush=True)
