#!/usr/bin/python3
"""Synthetic training benchmark for ferry.torch (like BytePS's benchmark_byteps.py).

Trains a model on random data and reports samples/s per worker. Backends:

  ferry  ferry.torch.DistributedOptimizer (optionally --cross-barrier, --fp16); run it
         on a cluster:  scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 examples/benchmark_torch.py
  ddp    torch.nn.parallel.DistributedDataParallel, gloo backend; run under torchrun-style
         variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
  none   no communication at all (the compute-only ceiling)

--compare N starts a local cluster (2 workers, 2 servers, scripts/local-cluster) whose
workers hold every configuration at once, each on its own copy of the model: Ferry
(DistributedOptimizer), Ferry + CrossBarrier, DDP-gloo (torch.distributed in the same
processes), DDP over the ferry backend, ferry.torch.ddp (DDP's reducer idle, Ferry's
overlapped updates) and compute only (no communication, same CPU contention). It times them in
alternating blocks of --num-batches-per-iter batches, N rounds, and prints the median
[min - max] of each and the ratios to DDP-gloo:

    PYTHONPATH=build/python FERRY_BIN=build/bin \
        /usr/bin/python3 examples/benchmark_torch.py --compare 7 --model mlp

--device cuda trains on the GPU (each worker on cuda:LOCAL_RANK % the GPUs it sees; DDP
with gloo then allreduces CUDA tensors through the host as well); every timed block ends
with a torch.cuda.synchronize(), so the time counts the GPU's work.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when run by ferry-run
from digits import distribute, pick_device  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_model(args):
    if args.model == "mlp":
        layers, width = [], args.mlp_input
        for _ in range(args.mlp_layers):
            layers += [nn.Linear(width, args.mlp_width), nn.ReLU()]
            width = args.mlp_width
        layers.append(nn.Linear(width, args.num_classes))
        return nn.Sequential(*layers)
    if args.model == "vgg":
        # VGG-like and small enough for a CPU: four convolution blocks, then wide fully
        # connected layers that hold most of the parameters (communication about equal to
        # computation on a 1 Gbit/s link).
        layers, channels = [], 3
        for width in (32, 64, 128, 128):
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            channels = width
        side = args.image_size // 16
        layers += [nn.Flatten(), nn.Linear(channels * side * side, args.mlp_width), nn.ReLU(),
                   nn.Linear(args.mlp_width, args.mlp_width), nn.ReLU(),
                   nn.Linear(args.mlp_width, args.num_classes)]
        return nn.Sequential(*layers)
    if args.model in ("resnet18", "resnet50"):
        try:
            import torchvision
        except ImportError:
            sys.exit("--model %s needs torchvision (apt-get install python3-torchvision)"
                     % args.model)
        return getattr(torchvision.models, args.model)(num_classes=args.num_classes)
    raise ValueError(args.model)


def synthetic_batch(args, device):
    if args.model == "mlp":
        data = torch.randn(args.batch_size, args.mlp_input)
    elif args.model == "vgg":
        data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    else:
        data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))
    return data.to(device), target.to(device)


def synchronize(device):
    """Waits for the device's queued work (a timed block ends with it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rank, size, label = 0, 1, args.backend
    finish = lambda: None  # noqa: E731
    if args.backend == "ferry":
        import ferry.torch as bps
        bps.init()
        device = pick_device(args.device, bps.local_rank())
    else:
        device = pick_device(args.device, int(os.environ.get("LOCAL_RANK", 0)))
    model = build_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.backend == "ferry":
        rank, size = bps.rank(), bps.size()
        optimizer = distribute(bps, model, optimizer, args.fp16, args.cross_barrier)
        if args.cross_barrier:
            label = "ferry+crossbarrier"
        finish = bps.shutdown
    elif args.backend == "ddp":
        import datetime
        import torch.distributed as dist
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if args.ddp_backend == "ferry":
            import ferry.torch  # noqa: F401 - registers the backend
        dist.init_process_group(args.ddp_backend, timeout=datetime.timedelta(seconds=120))
        label = "ddp-" + args.ddp_backend
        rank, size = dist.get_rank(), dist.get_world_size()
        model = nn.parallel.DistributedDataParallel(model)
        finish = dist.destroy_process_group
    else:
        rank = int(os.environ.get("RANK", 0))

    data, target = synthetic_batch(args, device)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def timed(batches):
        t0 = time.perf_counter()
        for _ in range(batches):
            step()
        synchronize(device)
        return time.perf_counter() - t0

    def log(s):
        if rank == 0:
            print(s, flush=True)

    params = sum(p.numel() for p in model.parameters())
    log("model %s: %.2fM parameters (%.1f MB of float32 gradients), batch %d per worker, "
        "%d worker(s), backend %s, %d torch thread(s), on %s"
        % (args.model, params / 1e6, params * 4 / 1e6, args.batch_size, size, label, args.threads,
           device))
    timed(args.num_warmup)
    rates = []
    for i in range(args.num_iters):
        t = timed(args.num_batches_per_iter)
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

def interleave(args):
    """One set of worker processes, every backend in it: Ferry (DistributedOptimizer),
    Ferry + CrossBarrier, DDP-gloo and compute only, each on its own copy of the model,
    timed in alternating blocks, so every repeat of every configuration sees the same
    machine (a shared VM's speed drifts by more than the differences measured here)."""
    import datetime
    import torch.distributed as dist
    import ferry.torch as bps

    torch.set_num_threads(args.threads)
    bps.init()
    rank, size = bps.rank(), bps.size()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # --compare's cluster gives a port on this machine; under scripts/ferry-run (several
    # hosts), torchrun's MASTER_ADDR and MASTER_PORT.
    port = os.environ.get("FERRY_BENCH_DDP_PORT")
    init = "tcp://127.0.0.1:%s" % port if port else "env://"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=300))
    device = pick_device(args.device, bps.local_rank())
    data, target = synthetic_batch(args, device)

    def sgd(model):
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    configs = []
    torch.manual_seed(0)
    m = build_model(args).to(device)
    opt = bps.DistributedOptimizer(sgd(m), named_parameters=m.named_parameters())
    bps.broadcast_parameters(m.state_dict(), root_rank=0)
    configs.append(("Ferry", m, opt))
    torch.manual_seed(0)
    m = build_model(args).to(device)
    opt = bps.DistributedOptimizer(sgd(m), named_parameters=[("cb." + k, v) for k, v in m.named_parameters()])
    bps.broadcast_parameters(m.state_dict(), root_rank=0)
    configs.append(("Ferry + CrossBarrier", m, bps.CrossBarrier(m, opt)))
    ids = [device] if device.type == "cuda" else None
    torch.manual_seed(0)
    m = nn.parallel.DistributedDataParallel(build_model(args).to(device), device_ids=ids)
    configs.append(("DDP (gloo)", m, sgd(m)))
    ferry_group = dist.new_group(backend="ferry")
    torch.manual_seed(0)
    m = nn.parallel.DistributedDataParallel(build_model(args).to(device), device_ids=ids,
                                            process_group=ferry_group)
    configs.append(("DDP (ferry)", m, sgd(m)))
    torch.manual_seed(0)
    m = nn.parallel.DistributedDataParallel(build_model(args).to(device), device_ids=ids,
                                            process_group=ferry_group)
    configs.append(("ferry.torch.ddp", m, bps.ddp(m, sgd(m.module))))
    torch.manual_seed(0)
    m = build_model(args).to(device)
    configs.append(("compute only (no communication)", m, sgd(m)))

    phases = {name: [0.0, 0.0, 0.0] for name, _, _ in configs}  # forward, backward, step (s)

    def run(model, optimizer, batches, phase=None):
        clock = time.perf_counter
        for _ in range(batches):
            t0 = clock()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            t1 = clock()
            loss.backward()
            t2 = clock()
            optimizer.step()
            if phase is not None:
                phase[0] += t1 - t0
                phase[1] += t2 - t1
                phase[2] += clock() - t2
        if isinstance(optimizer, bps.CrossBarrier):  # CrossBarrier, ferry.torch.ddp
            t0 = clock()
            optimizer.synchronize()  # the block ends with every update applied
            if phase is not None:
                phase[2] += clock() - t0
        synchronize(device)

    params = sum(p.numel() for p in configs[0][1].parameters())
    if rank == 0:
        print("compare: model %s (%.2fM parameters, %.1f MB of float32 gradients), batch %d per "
              "worker, %d workers, %d Ferry servers, %d torch thread(s) per worker; %d interleaved "
              "repeats of %d timed batches per configuration after %d warm-up, on %s"
              % (args.model, params / 1e6, params * 4 / 1e6, args.batch_size, size, bps.num_servers(),
                 args.threads, args.compare, args.num_batches_per_iter, args.num_warmup, device),
              flush=True)
    for _, model, optimizer in configs:
        run(model, optimizer, args.num_warmup)
    results = {name: [] for name, _, _ in configs}
    for rep in range(args.compare):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]  # rotate the order
        for name, model, optimizer in order:
            dist.barrier()
            t0 = time.perf_counter()
            run(model, optimizer, args.num_batches_per_iter, phases[name])
            dt = time.perf_counter() - t0
            # The slower worker's rate: the job goes at its pace.
            r = torch.tensor([dt])
            dist.all_reduce(r, op=dist.ReduceOp.MAX)
            rate = args.batch_size * args.num_batches_per_iter / r.item()
            results[name].append(rate)
            if rank == 0:
                print("repeat %d  %-32s %8.1f samples/s per worker" % (rep + 1, name, rate), flush=True)
    if rank == 0:
        ddp = statistics.median(results["DDP (gloo)"])
        print("\n| configuration | samples/s per worker: median [min - max] | vs DDP-gloo |")
        print("|---|---|---|")
        for name, _, _ in configs:
            v = results[name]
            print("| %s | %.1f [%.1f - %.1f] | %.2fx |" % (name, statistics.median(v), min(v), max(v),
                                                       statistics.median(v) / ddp))
        n = args.compare * args.num_batches_per_iter
        print("\nwhere the time goes, worker 0, ms per batch (mean over every timed batch): "
              "forward (for CrossBarrier: with the waits for each layer's update) | backward "
              "(for DDP: with its allreduce waits) | step (Ferry: the wait for the sums and the "
              "update; CrossBarrier: starting the missing pushes)")
        for name, _, _ in configs:
            f, b, st = (1000 * x / n for x in phases[name])
            print("  %-32s forward %7.1f  backward %7.1f  step %7.1f  total %7.1f"
                  % (name, f, b, st, f + b + st))
        print("Ferry core counters, worker 0: %s" % bps.ops._stats())
        for name in ("Ferry", "Ferry + CrossBarrier", "DDP (ferry)", "ferry.torch.ddp"):
            ratios = [f / d for f, d in zip(results[name], results["DDP (gloo)"])]
            print("%s / DDP-gloo per repeat: %s (median %.2f)"
                  % (name, " ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
        print("RAW %r" % results, flush=True)
    dist.destroy_process_group()
    bps.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compare(args, argv):
    """Starts a local cluster (scripts/local-cluster) whose workers run interleave()."""
    env = dict(os.environ, FERRY_LOG_LEVEL=os.environ.get("FERRY_LOG_LEVEL", "WARNING"),
               FERRY_BENCH_DDP_PORT=str(free_port()))
    cmd = [os.path.join(ROOT, "scripts", "local-cluster"), "-s", str(args.servers), "-w",
           str(args.workers), "--", sys.executable, os.path.abspath(__file__), "--interleave"] + argv
    return subprocess.call(cmd, env=env)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--backend", choices=("ferry", "ddp", "none"), default="ferry")
    p.add_argument("--model", choices=("mlp", "vgg", "resnet18", "resnet50"), default="mlp")
    p.add_argument("--ddp-backend", choices=("gloo", "ferry"), default="gloo",
                   help="--backend ddp: torch.distributed's backend (default gloo)")
    p.add_argument("--batch-size", type=int, default=32, help="per worker (default 32)")
    p.add_argument("--num-warmup", type=int, default=5, help="warm-up batches (default 5)")
    p.add_argument("--num-iters", type=int, default=5, help="timed iterations (default 5)")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="batches per iteration (default 5)")
    p.add_argument("--cross-barrier", action="store_true", help="ferry: use CrossBarrier")
    p.add_argument("--fp16", action="store_true", help="ferry: push gradients as float16")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to train (cuda: cuda:LOCAL_RANK %% the GPUs seen; default cpu)")
    p.add_argument("--image-size", type=int, default=64, help="resnet input size (default 64)")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--mlp-input", type=int, default=1024)
    p.add_argument("--mlp-width", type=int, default=2048)
    p.add_argument("--mlp-layers", type=int, default=3)
    p.add_argument("--compare", type=int, default=0, metavar="N",
                   help="start a local cluster and run N interleaved repeats of Ferry, "
                        "Ferry + CrossBarrier, DDP-gloo and compute only (each repeat: "
                        "--num-batches-per-iter timed batches of each), then print the comparison")
    p.add_argument("--workers", type=int, default=2, help="--compare: workers (default 2)")
    p.add_argument("--servers", type=int, default=2, help="--compare: Ferry servers (default 2)")
    p.add_argument("--interleave", action="store_true", help=argparse.SUPPRESS)  # a --compare worker
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.interleave:
        interleave(args)
    elif args.compare:
        return compare(args, argv)
    else:
        train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
