#!/usr/bin/python3
"""The wait a GPU's gradients add: from the end of backward to the end of the optimizer
step, with --mb megabytes of gradients as CUDA tensors beside the same gradients as CPU
tensors, in the same run.

Starts a local cluster (scripts/local-cluster: 1 scheduler, --servers servers, --workers
workers running this file with --worker). Each worker builds one MLP per device in
--devices (same weights: --mb MB of float32 parameters), each under its own
DistributedOptimizer, and times them in alternating blocks of --steps steps, --repeats
rounds: a step is zero_grad, forward, backward, then (timed) the step. CUDA work is
synchronized before both clocks are read, so the timed span is what the step adds: the
wait for the sums still travelling and the update. Printed: each device's median [min -
max] milliseconds per step, the ratio cuda / cpu per round and its median.

    PYTHONPATH=build/python FERRY_BIN=build/bin /usr/bin/python3 bench/device_step_bench.py \\
        --devices cpu,cuda --mb 25 --repeats 7

Without a GPU, --devices cpu times the host path alone; FERRY_DEVICE_API=fake in the
environment sends the CPU tensors through the device path over the simulated device.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_model(mb, device):
    import torch
    width = 1024
    layers = max(1, int(round(mb * 1e6 / 4 / (width * width + width))))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    return model.to(device), width


def worker(args):
    import torch
    import torch.nn.functional as F
    import ferry.torch as bps
    bps.init()
    rank = bps.rank()
    runs = {}
    for name in args.devices.split(","):
        if name == "cuda":
            device = torch.device("cuda", bps.local_rank() % torch.cuda.device_count())
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
        model, width = make_model(args.mb, device)
        opt = bps.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=1e-6),
            named_parameters=[("%s.%s" % (name, k), v) for k, v in model.named_parameters()])
        bps.broadcast_parameters(model.state_dict(), root_rank=0)
        x = torch.randn(args.batch, width, device=device)
        runs[name] = (device, model, opt, x)

    def sync(device):
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def block(name, steps):
        device, model, opt, x = runs[name]
        spans = []
        for _ in range(steps):
            opt.zero_grad()
            F.mse_loss(model(x), x).backward()
            sync(device)
            t0 = time.perf_counter()
            opt.step()
            sync(device)
            spans.append(time.perf_counter() - t0)
        return spans

    params = sum(p.numel() for p in runs[next(iter(runs))][1].parameters())
    if rank == 0:
        print("device_step_bench: %.1f MB of float32 gradients, %d workers, %d servers, batch %d, "
              "%d rounds of %d steps per device" % (params * 4 / 1e6, bps.size(), bps.num_servers(),
                                                     args.batch, args.repeats, args.steps),
              flush=True)
    for name in runs:
        block(name, 2)  # warm-up: pinned buffers, declarations
    results = {name: [] for name in runs}
    names = list(runs)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            bps.barrier()
            results[name].append(1000 * statistics.median(block(name, args.steps)))
    if rank == 0:
        for name, v in results.items():
            print("%-5s end of backward to end of step: %.2f ms [%.2f - %.2f]"
                  % (name, statistics.median(v), min(v), max(v)))
        if "cuda" in results and "cpu" in results:
            ratios = [c / h for c, h in zip(results["cuda"], results["cpu"])]
            print("cuda / cpu per round: %s (median %.2f; goal <= 1.2)"
                  % (" ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
        print("RAW %r" % results, flush=True)
    bps.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="cpu,cuda", help="comma-separated: cpu, cuda")
    p.add_argument("--mb", type=float, default=25.0, help="megabytes of gradients (default 25)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5, help="steps per timed block")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    cmd = [os.path.join(ROOT, "scripts", "local-cluster"), "-s", str(args.servers), "-w",
           str(args.workers), "--", sys.executable, os.path.abspath(__file__), "--worker"]
    cmd += sys.argv[1:]
    env = dict(os.environ, FERRY_LOG_LEVEL=os.environ.get("FERRY_LOG_LEVEL", "WARNING"))
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
