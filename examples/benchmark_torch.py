#!/usr/bin/python3
"""Synthetic training benchmark for ferry.torch (like BytePS's benchmark_byteps.py).

Trains a model on random data and reports samples/s per worker. Backends:

  ferry  ferry.torch.DistributedOptimizer (optionally --cross-barrier, --fp16); run it
         on a cluster:  scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 examples/benchmark_torch.py
  ddp    torch.nn.parallel.DistributedDataParallel, gloo backend; run under torchrun-style
         variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
  none   no communication at all (the compute-only ceiling)

--compare N runs everything itself, N interleaved repeats of: Ferry (2 workers,
2 servers, via scripts/local-cluster), Ferry with CrossBarrier, DDP-gloo (2 processes),
and compute only (2 independent processes, same CPU contention), then prints the
median [min-max] of each and Ferry / DDP:

    PYTHONPATH=build/python /usr/bin/python3 examples/benchmark_torch.py --compare 5 --model mlp
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import timeit

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_model(args):
    if args.model == "mlp":
        layers, width = [], args.mlp_input
        for _ in range(args.mlp_layers):
            layers += [nn.Linear(width, args.mlp_width), nn.ReLU()]
            width = args.mlp_width
        layers.append(nn.Linear(width, args.num_classes))
        return nn.Sequential(*layers)
    if args.model == "resnet18":
        try:
            import torchvision
        except ImportError:
            sys.exit("--model resnet18 needs torchvision (apt-get install python3-torchvision)")
        return torchvision.models.resnet18(num_classes=args.num_classes)
    raise ValueError(args.model)


def synthetic_batch(args):
    if args.model == "mlp":
        data = torch.randn(args.batch_size, args.mlp_input)
    else:
        data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))
    return data, target


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rank, size, label = 0, 1, args.backend
    finish = lambda: None  # noqa: E731
    if args.backend == "ferry":
        import ferry.torch as bps
        bps.init()
        rank, size = bps.rank(), bps.size()
        compression = bps.Compression.fp16 if args.fp16 else bps.Compression.none
        optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        bps.broadcast_parameters(model.state_dict(), root_rank=0)
        bps.broadcast_optimizer_state(optimizer, root_rank=0)
        if args.cross_barrier:
            optimizer = bps.CrossBarrier(model, optimizer)
            label = "ferry+crossbarrier"
        finish = bps.shutdown
    elif args.backend == "ddp":
        import datetime
        import torch.distributed as dist
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
        rank, size = dist.get_rank(), dist.get_world_size()
        model = nn.parallel.DistributedDataParallel(model)
        finish = dist.destroy_process_group
    else:
        rank = int(os.environ.get("RANK", 0))

    data, target = synthetic_batch(args)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(s):
        if rank == 0:
            print(s, flush=True)

    params = sum(p.numel() for p in model.parameters())
    log("model %s: %.2fM parameters (%.1f MB of float32 gradients), batch %d per worker, "
        "%d worker(s), backend %s, %d torch thread(s)"
        % (args.model, params / 1e6, params * 4 / 1e6, args.batch_size, size, label, args.threads))
    timeit.timeit(step, number=args.num_warmup)
    rates = []
    for i in range(args.num_iters):
        t = timeit.timeit(step, number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / t
        rates.append(rate)
        log("iter #%d: %.1f samples/s per worker" % (i, rate))
    if args.backend == "ferry" and args.cross_barrier:
        optimizer.synchronize()
    mean = statistics.mean(rates)
    conf = 1.96 * statistics.stdev(rates) if len(rates) > 1 else 0.0
    log("samples/s per worker: %.1f +-%.1f" % (mean, conf))
    log("total samples/s on %d worker(s): %.1f +-%.1f" % (size, size * mean, size * conf))
    log("RESULT backend=%s samples_per_s=%.3f" % (label, mean))
    finish()


# ----------------------------------------------------------------------------- --compare

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_args(args):
    out = ["--model", args.model, "--batch-size", str(args.batch_size),
           "--num-warmup", str(args.num_warmup), "--num-iters", str(args.num_iters),
           "--num-batches-per-iter", str(args.num_batches_per_iter), "--threads", str(args.threads),
           "--image-size", str(args.image_size), "--mlp-width", str(args.mlp_width),
           "--mlp-layers", str(args.mlp_layers), "--mlp-input", str(args.mlp_input)]
    return out + (["--fp16"] if args.fp16 else [])


RESULT = re.compile(r"RESULT backend=(\S+) samples_per_s=([0-9.]+)")


def run_ferry(args, cross_barrier):
    env = dict(os.environ, FERRY_LOG_LEVEL=os.environ.get("FERRY_LOG_LEVEL", "WARNING"))
    cmd = [os.path.join(ROOT, "scripts", "local-cluster"), "-s", str(args.servers), "-w",
           str(args.workers), "--", sys.executable, os.path.abspath(__file__), "--backend", "ferry"]
    cmd += child_args(args) + (["--cross-barrier"] if cross_barrier else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    m = RESULT.search(r.stdout)
    if r.returncode != 0 or not m:
        sys.exit("ferry run failed (exit %d):\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return float(m.group(2))


def run_group(args, backend):
    """`workers` processes of `backend` (ddp or none); returns rank 0's samples/s."""
    port = free_port()
    procs = []
    for rank in range(args.workers):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.workers), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--backend", backend]
                                      + child_args(args), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=args.run_timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    m = RESULT.search(outs[0])
    if any(p.returncode for p in procs) or not m:
        sys.exit("%s run failed:\n%s" % (backend, "\n".join(o[-3000:] for o in outs)))
    return float(m.group(2))


def compare(args):
    configs = [("Ferry", lambda: run_ferry(args, False)),
               ("Ferry + CrossBarrier", lambda: run_ferry(args, True)),
               ("DDP (gloo)", lambda: run_group(args, "ddp")),
               ("compute only (no communication)", lambda: run_group(args, "none"))]
    results = {name: [] for name, _ in configs}
    print("compare: model %s, batch %d per worker, %d workers, %d servers (Ferry), %d repeats, "
          "interleaved; %d x %d timed batches per run after %d warm-up"
          % (args.model, args.batch_size, args.workers, args.servers, args.compare, args.num_iters,
             args.num_batches_per_iter, args.num_warmup), flush=True)
    for rep in range(args.compare):
        for name, run in configs:
            t0 = time.time()
            rate = run()
            results[name].append(rate)
            print("repeat %d  %-32s %8.1f samples/s per worker  (%.0f s)"
                  % (rep + 1, name, rate, time.time() - t0), flush=True)
    ddp = statistics.median(results["DDP (gloo)"])
    print("\n| configuration | samples/s per worker: median [min - max] | vs DDP-gloo |")
    print("|---|---|---|")
    for name, _ in configs:
        v = results[name]
        print("| %s | %.1f [%.1f - %.1f] | %.2fx |" % (name, statistics.median(v), min(v), max(v),
                                                   statistics.median(v) / ddp))
    per_rep = [f / d for f, d in zip(results["Ferry"], results["DDP (gloo)"])]
    print("\nFerry / DDP-gloo per repeat: %s" % " ".join("%.2f" % r for r in per_rep))
    print("raw: %r" % results)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--backend", choices=("ferry", "ddp", "none"), default="ferry")
    p.add_argument("--model", choices=("mlp", "resnet18"), default="mlp")
    p.add_argument("--batch-size", type=int, default=32, help="per worker (default 32)")
    p.add_argument("--num-warmup", type=int, default=5, help="warm-up batches (default 5)")
    p.add_argument("--num-iters", type=int, default=5, help="timed iterations (default 5)")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="batches per iteration (default 5)")
    p.add_argument("--cross-barrier", action="store_true", help="ferry: use CrossBarrier")
    p.add_argument("--fp16", action="store_true", help="ferry: push gradients as float16")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    p.add_argument("--image-size", type=int, default=64, help="resnet18 input size (default 64)")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--mlp-input", type=int, default=1024)
    p.add_argument("--mlp-width", type=int, default=2048)
    p.add_argument("--mlp-layers", type=int, default=3)
    p.add_argument("--compare", type=int, default=0, metavar="N",
                   help="run N interleaved repeats of Ferry, Ferry+CrossBarrier, DDP-gloo and "
                        "compute only, and print the comparison")
    p.add_argument("--workers", type=int, default=2, help="--compare: workers (default 2)")
    p.add_argument("--servers", type=int, default=2, help="--compare: Ferry servers (default 2)")
    p.add_argument("--run-timeout", type=float, default=600, help="--compare: seconds per run")
    args = p.parse_args(argv)
    if args.compare:
        compare(args)
    else:
        train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
