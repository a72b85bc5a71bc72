#!/usr/bin/python3
"""Pipeline-parallel and data-parallel training of the digits CNN with ferry.torch.

DigitsCNN (examples/digits.py) is cut into 2 stages: stage 0 is the two convolutions (to
the flattened 512-wide activation), stage 1 the two linear layers and the loss. With 2R
workers there are R pipeline replicas: ranks 0..R-1 run stage 0 and ranks R..2R-1 stage 1;
rank r's replica is r % R, its stage r // R, and its pipeline peer r + R (stage 0) or
r - R (stage 1). Each stage's replicas form a process set ({0, 1} and {2, 3} with 4
workers) that averages that stage's gradients; each replica trains on its own shard of
the training set (both stages of a replica load the data, so labels do not travel). Run
it on a local cluster of 2 servers and 4 workers (2 replicas of the 2-stage pipeline):

    PYTHONPATH=build/python scripts/local-cluster -s 2 -w 4 -- /usr/bin/python3 examples/pipeline_digits.py

Each iteration takes --batch-size images per replica, cut into --micro-batches (M)
micro-batches, in a 1F1B schedule: stage 0 runs one forward ahead (warm-up), then one
forward and one backward by turns, then the last backward (cool-down). Activations go
stage 0 -> stage 1 (hvd.isend / hvd.irecv, tag j for micro-batch j of the iteration), their
gradients come back (tag M + j; the test set's activations: tag 2M); a transfer overlaps
the next micro-batch's compute. The pipeline runs on across iterations, and drains at each
epoch's end.

Weight stashing as in PipeDream-2BW: the optimizer updates a stage's weights once per
iteration (the stage's gradients accumulated over the M micro-batches, each loss divided
by M, then averaged over the stage's replicas by DistributedOptimizer(process_set=...)). Every micro-batch of
iteration t runs forward and backward on the same stashed version, W(t-1), the weights as
they were before iteration t-1's update; the update applies to the current weights W(t):
W(t+1) = W(t) - lr * grad f(W(t-1)), on both stages. Stage 0 already runs iteration t+1's
first forward before iteration t's last backward, so at most two versions are stashed at
once (double buffering): the one of the iteration in flight and the next. The optimizer is Adam:
SGD with momentum 0.9 (train_digits.py's) diverges on these one-step-stale gradients.

At the end every worker prints the test accuracy: stage 0 sends the activations of its
replica's shard of the test set to its peer, which counts the right answers; the counts
are summed over all workers. A worker exits 1 if it is below --min-accuracy.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when run by ferry-run
from digits import DigitsCNN, epoch_batches, load_data, shard_indices  # noqa: E402

STAGE_LAYERS = (("conv1", "conv2"), ("fc1", "fc2"))  # DigitsCNN's layers of each stage
HIDDEN = 32 * 4 * 4  # the width of the activation stage 0 sends


def stage0_forward(w, x):
    """Stage 0 with weights w (conv1.weight, conv1.bias, conv2.weight, conv2.bias)."""
    x = F.relu(F.conv2d(x, w[0], w[1], padding=1))
    return F.max_pool2d(F.relu(F.conv2d(x, w[2], w[3], padding=1)), 2).flatten(1)


def stage1_forward(w, h):
    """Stage 1 with weights w (fc1.weight, fc1.bias, fc2.weight, fc2.bias): logits."""
    return F.linear(F.relu(F.linear(h, w[0], w[1])), w[2], w[3])


class Stash(object):
    """The weight versions of a stage (PipeDream-2BW): version(t), the weights iteration t
    runs forward and backward on, is a copy of the current weights taken before the update
    of iteration t-1 (at that update, or at iteration t's first forward if that came
    first); the gradients of iteration t accumulate in its tensors' .grad."""

    def __init__(self, params):
        self.params, self.versions = params, {}

    def version(self, t):
        if t not in self.versions:
            self.versions[t] = [p.detach().clone().requires_grad_() for p in self.params]
            assert len(self.versions) <= 2, "more than two weight versions live"
        return self.versions[t]

    def update(self, t, optimizer):
        """Iteration t's backwards are done: its gradients update the current weights."""
        self.version(t + 1)  # iteration t+1 runs on the weights from before this update
        for p, v in zip(self.params, self.versions.pop(t)):
            p.grad = v.grad
        optimizer.step()  # averages the gradients over the stage's process set


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per replica (default 32)")
    p.add_argument("--micro-batches", type=int, default=4, help="per iteration (default 4)")
    p.add_argument("--lr", type=float, default=0.0025,
                   help="Adam's, times the number of replicas (default 0.0025)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--min-accuracy", type=float, default=0.9,
                   help="exit 1 if the test accuracy ends below this (default 0.9)")
    args = p.parse_args(argv)
    m = args.micro_batches
    if m < 1 or args.batch_size % m:
        p.error("--batch-size %d must be a multiple of --micro-batches %d" % (args.batch_size, m))

    import ferry.torch as hvd

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if size < 2 or size % 2:
        raise SystemExit("pipeline_digits.py: needs an even number of workers (2 stages times "
                         "the replicas: 4 for 2 replicas), got %d" % size)
    replicas = size // 2
    stage, replica = rank // replicas, rank % replicas
    peer = rank + replicas if stage == 0 else rank - replicas
    # Every worker adds both sets, in the same order; each uses its own stage's.
    stage_sets = [hvd.add_process_set(list(range(s * replicas, (s + 1) * replicas)))
                  for s in (0, 1)]
    my_set = stage_sets[stage]

    x_train, y_train, x_test, y_test = load_data()
    shard = shard_indices(len(y_train), replica, replicas)
    model = DigitsCNN()
    named = [("stage%d.%s" % (stage, n), q) for n, q in model.named_parameters()
             if n.split(".")[0] in STAGE_LAYERS[stage]]
    params = [q for _, q in named]
    hvd.broadcast_parameters(named, root_rank=stage * replicas, process_set=my_set)
    optimizer = torch.optim.Adam(params, lr=args.lr * replicas)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=named, process_set=my_set)
    stash = Stash(params)

    if rank == 0:
        print("training DigitsCNN in 2 stages x %d replicas: %d training images, %d per "
              "replica, batch %d per replica in %d micro-batches, Adam lr %.3g"
              % (replicas, len(y_train), len(shard), args.batch_size, m,
                 args.lr * replicas), flush=True)
    start, it = time.time(), 0  # it: the global iteration number (over the epochs)
    for epoch in range(args.epochs):
        t0 = time.time()
        batches = epoch_batches(shard, args.batch_size, epoch, args.seed)
        micro = [mb for b in batches for mb in b.chunk(m)]
        if stage == 0:
            train_stage0(hvd, stash, optimizer, x_train, micro, m, it, peer)
        else:
            loss = train_stage1(hvd, stash, optimizer, y_train, micro, m, it, peer)
            samples = len(micro) * len(micro[0])
            stats = hvd.allreduce(torch.tensor([loss, float(samples)], dtype=torch.float64),
                                  op=hvd.Sum, name="train_loss", process_set=my_set)
            if rank == replicas:  # stage 1's first
                print("epoch %2d  loss %.4f  %.0f samples/s per replica"
                      % (epoch + 1, stats[0] / stats[1], samples / (time.time() - t0)),
                      flush=True)
        it += len(batches)
    return evaluate(args, hvd, stage, replica, replicas, peer, params, x_test, y_test, start)


def train_stage0(hvd, stash, optimizer, x_train, micro, m, it0, peer):
    """One epoch of stage 0: F(0), then F(k+1) B(k) for each k, then B(last)."""
    flight = {}  # micro-batch -> (activation with its graph, send handle, gradient handle)

    def forward(k):
        t, j = it0 + k // m, k % m
        act = stage0_forward(stash.version(t), x_train[micro[k]])
        # priority: the earlier micro-batch goes first (a dependency the program declares)
        sent = hvd.isend(act.detach(), peer, tag=j, priority=-j)
        grad = hvd.irecv(torch.empty(act.shape), peer, tag=m + j)
        flight[k] = (act, sent, grad)

    def backward(k):
        act, sent, grad = flight.pop(k)
        hvd.synchronize(sent)
        act.backward(hvd.synchronize(grad))
        if k % m == m - 1:
            stash.update(it0 + k // m, optimizer)

    forward(0)  # warm-up: one forward ahead (pipeline depth - 1)
    for k in range(len(micro)):
        if k + 1 < len(micro):
            forward(k + 1)  # overlaps the gradient of micro-batch k coming back
        backward(k)


def train_stage1(hvd, stash, optimizer, y_train, micro, m, it0, peer):
    """One epoch of stage 1: for each micro-batch, forward, loss and backward at once.
    Returns the summed loss."""
    def receive(k):
        return hvd.irecv(torch.empty(len(micro[k]), HIDDEN), peer, tag=k % m)

    total, sent = 0.0, None
    incoming = receive(0)
    for k in range(len(micro)):
        t, j = it0 + k // m, k % m
        h = hvd.synchronize(incoming).requires_grad_()
        if k + 1 < len(micro):
            incoming = receive(k + 1)  # overlaps this micro-batch's compute
        loss = F.cross_entropy(stage1_forward(stash.version(t), h), y_train[micro[k]])
        (loss / m).backward()  # the iteration's gradient: the mean over its M micro-batches
        total += loss.item() * len(micro[k])
        if sent is not None:
            hvd.synchronize(sent)
        sent = hvd.isend(h.grad, peer, tag=m + j, priority=-j)
        if j == m - 1:
            stash.update(t, optimizer)
    hvd.synchronize(sent)
    return total


def evaluate(args, hvd, stage, replica, replicas, peer, params, x_test, y_test, start):
    """The test set through the pipeline with the final weights: each replica its shard;
    the counts are summed over all workers. Shuts down."""
    eval_tag = 2 * args.micro_batches
    shard = torch.arange(replica, len(y_test), replicas)
    counts = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        if stage == 0:
            hvd.send(stage0_forward(params, x_test[shard]), peer, tag=eval_tag)
        else:
            h = hvd.recv(torch.empty(len(shard), HIDDEN), peer, tag=eval_tag)
            pred = stage1_forward(params, h).argmax(1)
            counts[0], counts[1] = int((pred == y_test[shard]).sum()), len(shard)
    counts = hvd.allreduce(counts, op=hvd.Sum, name="test_counts")
    accuracy = (counts[0] / counts[1]).item()
    print("test accuracy %.4f (%d of %d) after %d epochs, %.1f s"
          % (accuracy, counts[0], counts[1], args.epochs, time.time() - start), flush=True)
    hvd.shutdown()
    if accuracy < args.min_accuracy:
        print("worker %d: test accuracy %.4f is below --min-accuracy %g"
              % (stage * replicas + replica, accuracy, args.min_accuracy), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
