#!/usr/bin/env python3
"""Summarises FERRY_TRACE_DIR timelines (worker/trace.h): how long partitions spent in
each stage (queue, push, server, return), for all partitions and for the most urgent
ones (the top --urgent share by priority), per worker.

    bench/trace_summary.py /tmp/trace [--urgent 0.1] [--skip-steps 1]

The queue stage of urgent partitions is what the scheduling policy decides (how long a
newly ready urgent partition waits for its turn); their push stage is the transport's
share (how much data already handed to ZeroMQ and the sockets it waits behind: at most
about one credit under the credit policy)."""

import argparse
import glob
import json
import os
import sys


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def partitions(events, skip_steps):
    """[(priority, {stage: duration_us})] for every partition after the first
    `skip_steps` iteration boundaries."""
    steps = sorted(e["ts"] for e in events if e["ph"] == "i" and e["name"].startswith("step "))
    start = steps[skip_steps - 1] if 0 < skip_steps <= len(steps) else float("-inf")
    open_at, parts = {}, {}
    for e in events:
        if e.get("cat") != "partition":
            continue
        key = (e["id"], e["name"])
        if e["ph"] == "b":
            open_at[key] = e["ts"]
            if "args" in e:
                parts[e["id"]] = {"priority": e["args"]["priority"], "start": e["ts"], "stages": {}}
        elif key in open_at and e["id"] in parts and "[" not in e["name"]:
            parts[e["id"]]["stages"][e["name"]] = e["ts"] - open_at.pop(key)
    return [(p["priority"], p["stages"]) for p in parts.values() if p["start"] >= start]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir")
    ap.add_argument("--urgent", type=float, default=0.1, help="share of partitions, by priority")
    ap.add_argument("--skip-steps", type=int, default=1, help="iteration boundaries to skip (warm-up)")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.trace_dir, "ferry-worker-*.json")))
    if not files:
        sys.exit("no ferry-worker-*.json in %s" % args.trace_dir)
    print("%-20s %-8s %6s %10s %10s %10s" % ("worker", "stage", "n", "p50 us", "p90 us", "max us"))
    for path in files:
        with open(path) as f:
            parts = partitions(json.load(f)["traceEvents"], args.skip_steps)
        parts.sort(key=lambda p: -p[0])
        urgent = parts[:max(1, int(len(parts) * args.urgent))]
        for label, group in (("all", parts), ("urgent", urgent)):
            for stage in ("queue", "push", "server", "return"):
                d = [s[stage] for _, s in group if stage in s]
                print("%-20s %-8s %6d %10.0f %10.0f %10.0f" % (
                    "%s %s" % (os.path.basename(path)[len("ferry-"):-len(".json")], label), stage,
                    len(d), percentile(d, 0.5), percentile(d, 0.9), max(d) if d else float("nan")))


if __name__ == "__main__":
    main()
