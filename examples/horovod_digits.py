#!/usr/bin/python3
"""A training script in Horovod's documented PyTorch style (its pytorch_mnist.py), on
scikit-learn's bundled 8x8 digits (no download). It is a Horovod program: to run it on
Ferry, change its import line to `import ferry.torch as hvd`, nothing else (the tests do
exactly that, tests/python/test_examples.py):

    sed 's/^import horovod.torch as hvd$/import ferry.torch as hvd/' examples/horovod_digits.py > /tmp/h.py
    PYTHONPATH=build/python:examples scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 /tmp/h.py

The data, the model and the loops are examples/digits.py's (on PYTHONPATH for a copy
elsewhere, as above).
"""

import torch
import torch.optim as optim

import digits
import horovod.torch as hvd

parser = digits.argument_parser("Horovod-style digits example")
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
args = parser.parse_args()

# Horovod: initialize library.
hvd.init()
train_dataset, test_dataset = digits.load_datasets(args.seed)

# Horovod: use DistributedSampler to partition the training data.
train_sampler, train_loader, test_sampler, test_loader = digits.distributed_loaders(
    train_dataset, test_dataset, args.batch_size, num_replicas=hvd.size(), rank=hvd.rank())

model = digits.DigitsCNN()

# Horovod: scale learning rate by the number of workers.
optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)

# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Horovod: (optional) compression algorithm.
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer,
                                     named_parameters=model.named_parameters(),
                                     compression=compression,
                                     op=hvd.Average,
                                     gradient_predivide_factor=args.gradient_predivide_factor)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


# Horovod: the training sampler is shuffled for each epoch (set_epoch).
digits.train(args.epochs, model, optimizer, train_sampler, train_loader, hvd.rank())
# Horovod: average metric values across workers.
test_loss, test_accuracy = digits.evaluate(model, test_sampler, test_loader, metric_average)
# Every worker's sample count, gathered (allgather_object), for the report.
counts = hvd.allgather_object(len(test_sampler))
if hvd.rank() == 0:
    print("test set: average loss %.4f, test accuracy %.4f (samples per worker %s)"
          % (test_loss, test_accuracy, counts), flush=True)
