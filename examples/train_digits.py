#!/usr/bin/python3
"""Data-parallel training of a small CNN on scikit-learn's digits with ferry.torch.

The 8x8 digits (1797 images, bundled with scikit-learn: no download) are split into a
fixed train and test set; each worker trains on its own shard of the training set
(rank r takes every size-th sample starting at r) and the gradients are averaged by
Ferry's servers. Run it on a local cluster of 2 servers and 2 workers:

    PYTHONPATH=build/python scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 examples/train_digits.py

It prints the loss and throughput per epoch and ends with the test accuracy (every
worker evaluates its shard of the test set; the counts are summed with push_pull).
Switching from BytePS or Horovod is the import line: `import ferry.torch as bps`.

--elastic (with FERRY_ELASTIC=1 on every node) trains through ferry.torch.elastic, as a
Horovod Elastic script does: the state (model, optimizer, data sampler, epoch, batch) is
committed every --commit-every batches; when a server or worker dies, every worker rolls
back to the last commit, takes the new membership and rank 0's state, and goes on; the
data left in the epoch is split over the workers that remain. Each worker prints the time
each membership change cost it: from its last step completed before the change to its
first step completed after.

--device cuda trains on the GPU (each worker on cuda:LOCAL_RANK % the GPUs it sees): the
gradients are CUDA tensors, which Ferry copies to the host partition by partition as
backward makes them, and the averages come back to the GPU without the Python thread
waiting for it.

--slow-rank R --slow-factor F make rank R a straggler: after each step's forward and
backward it sleeps F - 1 times as long as they took, so its steps compute F times as long.
With backup workers (FERRY_BACKUP_WORKERS=b on every node) a round of averaged gradients
closes without the last b workers to push; rank 0 then prints, per epoch, the steps whose
averages went without each rank (ferry.torch.contributors()).
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when run by ferry-run
from digits import (DigitsCNN, distribute, epoch_batches, load_data,  # noqa: E402
                    make_optimizer, pick_device, shard_indices)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per worker (default 32)")
    p.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default="momentum")
    p.add_argument("--lr", type=float, default=None, help="default: 0.05 (sgd/momentum), 0.002 (adam)")
    p.add_argument("--cross-barrier", action="store_true", help="use ferry.torch.CrossBarrier")
    p.add_argument("--fp16", action="store_true", help="push gradients as float16")
    p.add_argument("--compression", default=None, metavar="NAME",
                   help="the core's gradient compression, as FERRY_COMPRESSION: onebit+ef, "
                        "topk:0.01+ef, randomk:0.01+ef, dither:32+ef, fp16, ... "
                        "(docs/compression.md); gradients of at least "
                        "FERRY_COMPRESSION_MIN_BYTES (64 KiB; 0: every one)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to train (cuda: cuda:LOCAL_RANK %% the GPUs seen; default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit 1 if the test accuracy ends below this")
    p.add_argument("--elastic", action="store_true",
                   default=os.environ.get("FERRY_ELASTIC", "0").lower() in ("1", "true", "yes", "on"),
                   help="elastic training (ferry.torch.elastic; default: on when FERRY_ELASTIC=1)")
    p.add_argument("--commit-every", type=int, default=5, help="--elastic: batches per commit")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep after each step (stretches a run, for failure tests)")
    p.add_argument("--slow-rank", type=int, default=None, metavar="R",
                   help="make rank R a straggler, --slow-factor times slower (default: none)")
    p.add_argument("--slow-factor", type=float, default=1.0, metavar="F",
                   help="--slow-rank's steps compute F times as long: after each forward and "
                        "backward it sleeps F - 1 times their time (default 1: not slowed)")
    args = p.parse_args(argv)
    if args.slow_factor < 1.0:
        p.error("--slow-factor must be at least 1, got %g" % args.slow_factor)
    lr = args.lr if args.lr is not None else (0.002 if args.optimizer == "adam" else 0.05)

    import ferry.torch as bps  # was: import byteps.torch as bps / horovod.torch as hvd

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    bps.init()
    device = pick_device(args.device, bps.local_rank())
    x_train, y_train, x_test, y_test = (t.to(device) for t in load_data())
    if args.elastic:
        return train_elastic(args, bps, lr, x_train, y_train, x_test, y_test)
    rank, size = bps.rank(), bps.size()
    shard = shard_indices(len(y_train), rank, size)

    model = DigitsCNN().to(device)
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr * size)
    # Every worker starts from rank 0's weights and optimizer state.
    optimizer = distribute(bps, model, optimizer, args.fp16, args.cross_barrier,
                           args.compression)

    if rank == 0:
        print("training DigitsCNN on %d workers (%s), %d servers: %d training images, %d per "
              "worker, batch %d per worker, %s lr %.3g%s%s%s"
              % (size, device, bps.num_servers(), len(y_train), len(shard), args.batch_size,
                 args.optimizer, lr * size, ", cross-barrier" if args.cross_barrier else "",
                 ", fp16 gradients" if args.fp16 else "",
                 ", compression " + args.compression if args.compression else ""), flush=True)
    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        t0, total_loss, samples = time.time(), 0.0, 0
        left_out = {}  # rank -> the steps of this epoch whose averages went without it
        for idx in epoch_batches(shard, args.batch_size, epoch, args.seed):
            optimizer.zero_grad()
            c0 = time.perf_counter()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            straggle(args, rank, c0, device)
            optimizer.step()
            note_left_out(bps, size, left_out)
            total_loss += loss.item() * len(idx)
            samples += len(idx)
        # The mean loss over every worker's samples.
        stats = bps.push_pull(torch.tensor([total_loss, float(samples)], dtype=torch.float64),
                              average=False, name="train_loss")
        if rank == 0:
            dt = time.time() - t0
            print("epoch %2d  loss %.4f  %.0f samples/s per worker%s"
                  % (epoch + 1, stats[0] / stats[1], samples / dt, left_out_text(left_out)),
                  flush=True)

    if args.cross_barrier:
        optimizer.synchronize()
    return evaluate(args, bps, model, x_test, y_test, start)


def straggle(args, rank, since, device):
    """--slow-rank: that rank sleeps (--slow-factor - 1) times the step's compute time, from
    `since` (time.perf_counter()) to now (on a GPU: to when its kernels are done)."""
    if rank != args.slow_rank or args.slow_factor <= 1.0:
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    time.sleep((args.slow_factor - 1.0) * (time.perf_counter() - since))


def note_left_out(bps, size, left_out):
    """Counts, for each rank not in every sum of the step just taken (backup workers: a
    round closed without it), one more step without it."""
    contributors = bps.contributors()
    if len(contributors) < size:
        for r in set(range(size)) - set(contributors):
            left_out[r] = left_out.get(r, 0) + 1


def left_out_text(left_out):
    """', steps without rank 3: 5' (rank 0's epoch line); '' when every step had every rank."""
    if not left_out:
        return ""
    counts = ("rank %d: %d" % (r, n) for r, n in sorted(left_out.items()))
    return ", steps without " + ", ".join(counts)


def evaluate(args, bps, model, x_test, y_test, start):
    """Each worker its shard of the test set; the counts are summed. Shuts down."""
    rank, size = bps.rank(), bps.size()
    model.eval()
    test_shard = torch.arange(rank, len(y_test), size, device=y_test.device)
    with torch.no_grad():
        pred = model(x_test[test_shard]).argmax(1)
    counts = torch.tensor([int((pred == y_test[test_shard]).sum()), len(test_shard)],
                          dtype=torch.int64)
    counts = bps.push_pull(counts, average=False, name="test_counts")
    accuracy = counts[0].item() / counts[1].item()
    if rank == 0:
        print("test accuracy %.4f (%d of %d) after %d epochs, %.1f s"
              % (accuracy, counts[0], counts[1], args.epochs, time.time() - start), flush=True)
    bps.shutdown()
    if accuracy < args.min_accuracy:
        print("worker %d: test accuracy %.4f is below --min-accuracy %.2f"
              % (rank, accuracy, args.min_accuracy), file=sys.stderr)
        return 1
    return 0


def train_elastic(args, bps, lr, x_train, y_train, x_test, y_test):
    """--elastic: the training loop of a Horovod Elastic script (see the module comment)."""
    model = DigitsCNN().to(x_train.device)
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr * bps.size())
    optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = bps.elastic.ElasticSampler(range(len(y_train)), shuffle=True, seed=args.seed)
    state = bps.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    clock = {"last_step": None, "changed_after": None}

    def on_reset():
        # The learning rate follows the number of workers; the clock notes the change.
        for group in optimizer.param_groups:
            group["lr"] = lr * bps.size()
        clock["changed_after"] = clock["last_step"]
        print("worker %d of %d after a membership change (resumes at epoch %d, batch %d)"
              % (bps.rank(), bps.size(), state.epoch + 1, state.batch), flush=True)

    state.register_reset_callbacks([on_reset])

    @bps.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            if state.batch == 0:
                sampler.set_epoch(state.epoch)
            model.train()
            mine = list(sampler)  # what is left of the epoch for this worker
            batches = [mine[i:i + args.batch_size]
                       for i in range(0, len(mine) - args.batch_size + 1, args.batch_size)]
            t0, total_loss, samples = time.time(), 0.0, 0
            for idx in batches:
                optimizer.zero_grad()
                c0 = time.perf_counter()
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                loss.backward()
                straggle(args, bps.rank(), c0, x_train.device)
                optimizer.step()
                clock["last_step"] = time.monotonic()
                if clock["changed_after"] is not None:
                    print("time lost to the membership change: %.2f s (last step before it to "
                          "the first after; first step after at unix time %.3f)"
                          % (clock["last_step"] - clock["changed_after"], time.time()), flush=True)
                    clock["changed_after"] = None
                total_loss += loss.item() * len(idx)
                samples += len(idx)
                state.batch += 1
                sampler.record_batch(state.batch, args.batch_size)
                if state.batch % args.commit_every == 0:
                    state.commit()
                if args.step_sleep:
                    time.sleep(args.step_sleep)
            stats = bps.push_pull(torch.tensor([total_loss, float(max(samples, 1))],
                                               dtype=torch.float64),
                                  average=False, name="train_loss")
            if bps.rank() == 0:
                print("epoch %2d  loss %.4f  %d workers  %.0f samples/s per worker"
                      % (state.epoch + 1, stats[0] / stats[1], bps.size(),
                         samples / (time.time() - t0)), flush=True)
            state.epoch += 1
            state.batch = 0
            state.commit()

    if bps.rank() == 0:
        print("elastic training of DigitsCNN: %d workers, %d servers, commit every %d batches"
              % (bps.size(), bps.num_servers(), args.commit_every), flush=True)
    start = time.time()
    train(state)
    return evaluate(args, bps, model, x_test, y_test, start)


if __name__ == "__main__":
    sys.exit(main())
