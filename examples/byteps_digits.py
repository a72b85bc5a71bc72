#!/usr/bin/python3
"""A training script in BytePS's PyTorch style (its train_mnist_byteps.py, with the
cross-barrier module), on scikit-learn's bundled 8x8 digits (no download). It is a BytePS
program: to run it on Ferry, change its import line to
`import ferry.torch.cross_barrier as bps`, nothing else (the tests do exactly that,
tests/python/test_examples.py):

    sed 's/^import byteps.torch.cross_barrier as bps$/import ferry.torch.cross_barrier as bps/' \\
        examples/byteps_digits.py > /tmp/b.py
    PYTHONPATH=build/python:examples scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 /tmp/b.py

The data, the model and the loops are examples/digits.py's (on PYTHONPATH for a copy
elsewhere, as above).
"""

import torch
import torch.optim as optim

import byteps.torch.cross_barrier as bps
import digits

parser = digits.argument_parser("BytePS-style digits example")
parser.add_argument("--fp16-pushpull", action="store_true", default=False)
args = parser.parse_args()

# BytePS: initialize library.
bps.init()
train_dataset, test_dataset = digits.load_datasets(args.seed)

# BytePS: use DistributedSampler to partition the training data.
train_sampler, train_loader, test_sampler, test_loader = digits.distributed_loaders(
    train_dataset, test_dataset, args.batch_size, num_replicas=bps.size(), rank=bps.rank())

model = digits.DigitsCNN()

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


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = bps.push_pull(tensor, name=name)
    return avg_tensor.item()


digits.train(args.epochs, model, optimizer, train_sampler, train_loader, bps.rank())
# BytePS: average metric values across workers.
test_loss, test_accuracy = digits.evaluate(model, test_sampler, test_loader, metric_average)
if bps.rank() == 0:
    print("test set: average loss %.4f, test accuracy %.4f" % (test_loss, test_accuracy),
          flush=True)
