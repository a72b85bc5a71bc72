#!/usr/bin/python3
"""DDP over Ferry against DDP over gloo on an emulated cluster.

Four hosts (scripts/netns-cluster, each link shaped to --rate both ways), one worker and one
colocated Ferry server per host, started by scripts/ferry-run on every host (node 0 holds
the scheduler), plus --extra-servers CPU-only server hosts (ferry-run --cpu-server). The workers run examples/benchmark_torch.py's interleaved comparison:
Ferry's DistributedOptimizer, CrossBarrier, DDP over gloo, DDP over the ferry backend,
ferry.torch.ddp and compute alone, each on its own copy of the model, in alternating
blocks; worker 0 prints the table (median [min - max] samples/s per worker, ratio to
DDP-gloo) and every repeat's ratio.

    bench/ddp_netns_bench.py --model vgg --rate 1gbit --repeats 5 > out.txt

Needs root and `ip netns` (netns-cluster exits 2 otherwise). The hosts share this machine's
CPUs: the figures hold for links slow enough that the network, not the CPU, decides.
"""

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
NETNS = os.path.join(ROOT, "scripts", "netns-cluster")
FERRY_RUN = os.path.join(ROOT, "scripts", "ferry-run")
BENCH = os.path.join(ROOT, "examples", "benchmark_torch.py")


def inner(args, passthrough):
    """Inside `netns-cluster run`: ferry-run on every worker host, node i on worker i, and
    ferry-run --cpu-server on every extra host."""
    procs = []
    common = ["--nnodes", str(args.hosts), "--servers-per-node", "1", "--master-addr",
              "198.18.1.1", "--master-port", "29400", "--cpu-servers", str(args.extra_servers)]
    for extra in range(args.extra_servers):
        cmd = [NETNS, "exec", "extra%d" % extra, "--", sys.executable, FERRY_RUN,
               "--cpu-server"] + common
        env = dict(os.environ, FERRY_LOG_LEVEL="WARNING",
                   DMLC_NODE_HOST="198.18.3.%d" % (extra + 1))
        procs.append(subprocess.Popen(cmd, env=env))
    for node in range(args.hosts):
        cmd = [NETNS, "exec", "worker%d" % node, "--", sys.executable, FERRY_RUN] + common + [
               "--node-rank", str(node), "--nproc-per-node", "1", BENCH, "--interleave",
               "--compare", str(args.repeats), "--model", args.model] + passthrough
        env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", FERRY_LOG_LEVEL="WARNING",
                   DMLC_NODE_HOST="198.18.1.%d" % (node + 1))
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait() for p in procs]
    return max(codes)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--rate", default="1gbit", help="every host's link, tc syntax")
    p.add_argument("--extra-servers", type=int, default=0,
                   help="CPU-only server hosts beside the colocated servers (BytePS's k)")
    p.add_argument("--model", default="vgg")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout", type=int, default=1500)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args, passthrough = p.parse_known_args()
    if args.inner:
        return inner(args, passthrough)
    cmd = [NETNS, "run", "--timeout", str(args.timeout), "--workers", str(args.hosts),
           "--servers", "1", "--extra-servers", str(args.extra_servers), "--rate", args.rate,
           "--", sys.executable, os.path.abspath(__file__),
           "--inner", "--hosts", str(args.hosts), "--model", args.model,
           "--extra-servers", str(args.extra_servers),
           "--repeats", str(args.repeats)] + passthrough
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
