#!/usr/bin/python3
"""send_latency_bench: a point-to-point send's latency on a link a gradient fills, with the
Van's link scheduling and without, against the same send on the idle link
(docs/benchmarks.md, "Point-to-point sends on a busy link").

    FERRY_BIN=build/bin bench/send_latency_bench.py --rate 1gbit --repeats 5 > out.txt

Two emulated hosts (scripts/netns-cluster). ferry-flow-order (bench/flow_order.cc) sends a
--gradient-bytes gradient as frames of --frame-bytes from host A to a receiver on host B, and
during it --sends sends of --send-bytes to B, one after another, --gap-ms apart; before
the gradient, --idle-sends sends alone. A send's latency runs from the call to the receiver's
answer. Each repeat runs with link scheduling (the worker's default) and without (fifo),
in alternating order. Printed: every run's medians, then per mode the median over repeats
[min - max] of the idle and loaded medians, and the goal's terms: loaded - idle against two
frames' time on the link.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
NETNS = os.path.join(ROOT, "scripts", "netns-cluster")
RECEIVER = "198.18.1.2"


def probe():
    return os.path.join(os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin")),
                        "ferry-flow-order")


def one_run(args, link_scheduling):
    receiver = subprocess.Popen([NETNS, "exec", "worker1", "--", probe(), "--role=recv", "--host",
                                 RECEIVER, "--timeout_ms", "120000"],
                                stdout=subprocess.PIPE, text=True)
    ports = receiver.stdout.readline().split()
    sender = subprocess.run([NETNS, "exec", "worker0", "--", probe(), "--role=send",
                             "--server", "%s:%s" % (RECEIVER, ports[0]),
                             "--peer", "%s:%s" % (RECEIVER, ports[1]),
                             "--gradient_bytes", str(args.gradient_bytes),
                             "--frame_bytes", str(args.frame_bytes),
                             "--send_bytes", str(args.send_bytes), "--sends", str(args.sends),
                             "--idle_sends", str(args.idle_sends), "--gap_ms", str(args.gap_ms),
                             "--after_frames", "32", "--link_scheduling=%d" % link_scheduling,
                             "--timeout_ms", "120000"],
                            capture_output=True, text=True, timeout=300)
    received = receiver.communicate(timeout=60)[0]
    if sender.returncode != 0 or receiver.returncode != 0:
        raise SystemExit("send_latency_bench: a run failed:\n%s%s%s" % (sender.stdout, sender.stderr, received))
    sent = json.loads(sender.stdout.strip().splitlines()[-1])
    return statistics.median(sent["idle_ms"]), statistics.median(sent["loaded_ms"]), sent


def inner(args):
    modes = {"link scheduling": 1, "fifo": 0}
    runs = {m: [] for m in modes}
    for repeat in range(args.repeats):
        order = list(modes) if repeat % 2 == 0 else list(reversed(list(modes)))
        for mode in order:
            idle, loaded, sent = one_run(args, modes[mode])
            runs[mode].append((idle, loaded))
            print("repeat %d %-16s idle %.2f ms  loaded %.2f ms  (loaded: %s; link_held %d)"
                  % (repeat, mode, idle, loaded, ", ".join("%.1f" % x for x in sent["loaded_ms"]),
                     sent["link_held"]), flush=True)
    frame_ms = args.frame_bytes * 8 / rate_bps(args.rate) * 1000
    print("\nsend %d bytes, frames of %d bytes: one frame %.2f ms on the link"
          % (args.send_bytes, args.frame_bytes, frame_ms))
    print("| mode | idle ms | loaded ms | loaded - idle | goal: <= 2 frames (%.2f ms) |" % (2 * frame_ms))
    print("|---|---|---|---|---|")
    for mode, values in runs.items():
        idle = [v[0] for v in values]
        loaded = [v[1] for v in values]
        extra = statistics.median(loaded) - statistics.median(idle)
        print("| %s | %.2f [%.2f - %.2f] | %.2f [%.2f - %.2f] | %.2f | %s |" % (
            mode, statistics.median(idle), min(idle), max(idle), statistics.median(loaded),
            min(loaded), max(loaded), extra, "met" if extra <= 2 * frame_ms else "not met"))
    return 0


def rate_bps(rate):
    for unit, factor in (("kbit", 1e3), ("mbit", 1e6), ("gbit", 1e9)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * factor
    raise SystemExit("send_latency_bench: --rate %r: expected e.g. 1gbit" % rate)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--gradient-bytes", type=int, default=256 << 20)
    p.add_argument("--frame-bytes", type=int, default=262144)
    p.add_argument("--send-bytes", type=int, default=65536)
    p.add_argument("--sends", type=int, default=20)
    p.add_argument("--idle-sends", type=int, default=10)
    p.add_argument("--gap-ms", type=int, default=40)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        return inner(args)
    return subprocess.call([NETNS, "run", "--timeout", "3600", "--workers", "2", "--servers", "0",
                            "--rate", args.rate, "--", sys.executable, os.path.abspath(__file__),
                            "--inner"] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
