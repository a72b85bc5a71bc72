#!/usr/bin/python3
"""cpu_per_gb: CPU seconds per GB of tensor bytes pushed and pulled, two settings interleaved.

Runs ferry-perf on scripts/local-cluster (2 servers + 2 workers, loopback) at each size under
setting A, then under setting B, --repeats times, and reads the CPU time (user + system) of the
whole cluster (every process the launcher started: scheduler, servers, workers) from
/usr/bin/time. The tensor bytes are what every worker pushed and pulled: iterations (timed and
warm-up) x workers x 2 x size. ferry-perf runs with --nocheck (it fills its input once and checks
nothing: that work is the benchmark's, not Ferry's, and was 50% of the samples). Prints per size and setting the median [min-max] CPU seconds per
GB (1e9 B) and the push_pull's algorithm bandwidth, and B / A of the medians.

  /usr/bin/python3 bench/cpu_per_gb.py --a FERRY_SHM=0 --b FERRY_SHM=1 --repeats 5
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = 2


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def run_once(env_extra, size, iters, warmup, bin_dir, timeout):
    env = dict(os.environ, FERRY_BIN=bin_dir, FERRY_LOG_LEVEL="WARNING", **env_extra)
    cmd = ["/usr/bin/time", "-f", "CPU %U %S %e", os.path.join(ROOT, "scripts", "local-cluster"), "-s", "2",
           "-w", str(WORKERS), "--", os.path.join(bin_dir, "ferry-perf"), "-b", str(size), "-e", str(size),
           "-n", str(iters), "-w", str(warmup), "--format=csv", "--nocheck"]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout, errors="replace").stdout
    cpu = re.findall(r"^CPU ([\d.]+) ([\d.]+) ([\d.]+)\s*$", out, re.M)
    row = re.findall(r"^\[worker 0\] (\d+),([\d.]+),([\d.]+),(\d+)\s*$", out, re.M)
    if not cpu or not row or int(row[0][3]) != 0:
        raise RuntimeError("no CPU time or ferry-perf row (or wrong values):\n" + out[-3000:])
    seconds = float(cpu[-1][0]) + float(cpu[-1][1])
    tensor_gb = (iters + warmup) * WORKERS * 2 * size / 1e9
    return seconds / tensor_gb, float(row[0][2])


def fmt(values):
    return "%.3g [%.3g-%.3g]" % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", action="append", default=[], metavar="NAME=VALUE", help="setting A (repeatable)")
    ap.add_argument("--b", action="append", default=[], metavar="NAME=VALUE", help="setting B (repeatable)")
    ap.add_argument("--sizes", default="16M,256M")
    ap.add_argument("--iters", type=int, default=10, help="timed push_pulls per run")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-gib", type=float, default=1.0,
                    help="at least this many GiB pushed per worker and run (more iterations at small "
                         "sizes, so the cluster's start-up stays a small part of the CPU time)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    settings = [("A", dict(p.split("=", 1) for p in args.a)), ("B", dict(p.split("=", 1) for p in args.b))]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    results = {}  # (size, label) -> ([cpu per GB], [GB/s])
    for rep in range(args.repeats):
        for size in sizes:
            for label, env in settings:
                iters = max(args.iters, int(args.min_gib * (1 << 30) / size))
                cpu, gbps = run_once(env, size, iters, args.warmup, args.bin, args.timeout)
                print("repeat %d size %d %s: %.3f CPU s/GB, %.3f GB/s" % (rep + 1, size, label, cpu, gbps),
                      file=sys.stderr, flush=True)
                r = results.setdefault((size, label), ([], []))
                r[0].append(cpu)
                r[1].append(gbps)
    print("# cpu_per_gb: A = %s, B = %s; %d repeats interleaved; per run max(%d, %g GiB / size) timed + %d "
          "warm-up push_pulls (ferry-perf --nocheck), 2 workers x 2 servers on loopback"
          % (" ".join(args.a) or "defaults", " ".join(args.b) or "defaults", args.repeats, args.iters,
             args.min_gib, args.warmup))
    print("| size | A: CPU s per GB | B: CPU s per GB | B / A | A: algbw GB/s | B: algbw GB/s | B / A |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        a, b = results[(size, "A")], results[(size, "B")]
        print("| %d MiB | %s | %s | %.2f | %s | %s | %.2f |" % (
            size >> 20, fmt(a[0]), fmt(b[0]), statistics.median(b[0]) / statistics.median(a[0]), fmt(a[1]),
            fmt(b[1]), statistics.median(b[1]) / statistics.median(a[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
