#!/usr/bin/python3
"""What live metrics cost (FERRY_METRICS_PORT), in one interleaved run.

For each of --repeats rounds, metrics off then on (each "on" run scraped every second:
/metrics and /api/status, as Prometheus and an open status page would):
  1. an idle cluster (1 scheduler, 2 servers, 2 ferry-perf --idle_seconds workers): CPU
     seconds of every process over --idle-seconds, from /proc/<pid>/stat;
  2. ferry-perf on the same cluster shape: 4 KiB to 256 KiB (x4) with --small-iters timed
     iterations, then 1 MiB to 64 MiB with --large-iters (a size measured over a few
     milliseconds only would be mostly noise).
Reported: the idle cluster's CPU as % of one core (median, min-max), and ferry-perf's
algorithm bandwidth per size with metrics on over off (median and min-max of the per-round
ratios).

Usage: /usr/bin/python3 bench/metrics_cost.py [--repeats 3] [--idle-seconds 30]
                                              [--out bench/results/live-metrics/metrics_cost.md]
"""

import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_bench  # noqa: E402  (the cluster runner and ferry-perf parser)


class Scraper:
    """GETs /metrics and /api/status every second until stopped; counts the answers."""

    def __init__(self, port):
        self.port, self.ok, self.failed = port, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(1.0):
            for path in ("/metrics", "/api/status"):
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=2) as r:
                        r.read()
                        self.ok += 1
                except OSError:
                    self.failed += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def metrics_env(on):
    if not on:
        return {}, None
    port = core_bench.free_port()
    return {"FERRY_METRICS_PORT": str(port)}, port


def idle_cpu(seconds, on):
    env, port = metrics_env(on)
    samples = {}

    def on_started(pids):
        time.sleep(3)  # registration
        start = {n: core_bench.proc_cpu_seconds(p) for n, p in pids.items()}
        if on:
            with Scraper(port) as s:
                time.sleep(seconds)
            assert s.ok > 0, "the scraper got no answer"
        else:
            time.sleep(seconds)
        end = {n: core_bench.proc_cpu_seconds(p) for n, p in pids.items()}
        samples.update({n: end[n] - start[n] for n in pids})

    core_bench.run_cluster(["--idle_seconds", str(seconds + 5)], timeout=seconds + 120, extra_env=env,
                           on_started=on_started)
    return 100.0 * sum(samples.values()) / seconds


def perf(args, on, scrape=True):
    env, port = metrics_env(on)
    result = {}

    def run():
        result.update(core_bench.run_ferry(("4K", "256K"), args.small_iters, 20, extra_env=env))
        result.update(core_bench.run_ferry(("1M", "64M"), args.large_iters, 2, extra_env=env))

    if on and scrape:
        t = threading.Thread(target=run)
        t.start()
        time.sleep(1)
        with Scraper(port):
            t.join()
    else:
        run()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--idle-seconds", type=int, default=30, help="0: no idle measurement")
    ap.add_argument("--small-iters", type=int, default=500)
    ap.add_argument("--large-iters", type=int, default=10)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    idle = {False: [], True: []}
    modes = {"off": (False, False), "on": (True, False), "on+scraped": (True, True)}
    bw = {m: [] for m in modes}
    for r in range(args.repeats):
        for on in (False, True) if args.idle_seconds > 0 else ():
            idle[on].append(idle_cpu(args.idle_seconds, on))
            print(f"[metrics_cost] round {r + 1} metrics {'on ' if on else 'off'}: idle cluster "
                  f"{idle[on][-1]:.3f}% of a core", flush=True)
        for name, (on, scrape) in modes.items():
            bw[name].append(perf(args, on, scrape))
            print(f"[metrics_cost] round {r + 1} metrics {name}: ferry-perf done", flush=True)
    fr = core_bench.fmt_range
    lines = [f"# Live metrics: what they cost ({args.repeats} rounds, interleaved, 2 servers + 2 workers on loopback)",
             ""]
    if args.idle_seconds > 0:
        lines += [f"Idle cluster CPU over {args.idle_seconds} s, % of one core (all 5 processes): metrics off "
                  f"{fr(idle[False])}, on and scraped every second {fr(idle[True])}.", ""]
    lines += [f"ferry-perf algbw GB/s, {args.small_iters} timed iterations up to 256 KiB, {args.large_iters} "
              "above; on = metrics on (heartbeats carry them), on+scraped = also /metrics and /api/status "
              "fetched every second by a Python client on the same 2 cores:",
              "",
              "| bytes | off | on | on+scraped | on/off | on+scraped/off |",
              "|---|---|---|---|---|---|"]

    def ratios(mode, size):
        return [a[size] / b[size] for a, b in zip(bw[mode], bw["off"]) if size in a and size in b and b[size] > 0]

    for size in sorted(bw["off"][0]):
        cells = [fr([b[size] for b in bw[m] if size in b]) for m in modes]
        lines.append(f"| {size} | " + " | ".join(cells) + f" | {fr(ratios('on', size), 2)} | "
                     f"{fr(ratios('on+scraped', size), 2)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
