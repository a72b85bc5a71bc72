#!/usr/bin/python3
"""uneven_links_bench: training steps on an emulated cluster whose links differ (one worker
behind a slower link), with partitions sized as today (one size for every link) and sized
per link (docs/benchmarks.md, "Uneven links").

ferry-train-sim replays a model's training step on every worker host of a fresh
netns-cluster (train_sim_bench.py's Run). Every link runs at --rate both ways but the one
of worker --slow-rank, which runs at --slow-rate (netns-cluster --worker-rates). Each
configuration is a set of FERRY_* variables (--configs NAME=VAR=V;VAR=V, or the defaults
below), run on the uneven links and on even ones (every link at --rate), interleaved: every
run once per repeat, in turn.

The cluster's lower bound is LB1 (sim/lower_bound.h) at its slowest link's rate: every sum
holds the slow worker's push, and every worker's step waits for it, so no step can be
shorter than the slow worker's. A run's step is its slowest worker's median iteration. The
table prints medians [min-max] over repeats of the step, of step / LB1, and of each
configuration's ratio to `today` in the same repeat on the same links.

  bench/uneven_links_bench.py --models vgg16:0.1:0.66,resnet50:0.5:0.92 --repeats 5 \\
      --out bench/results/uneven_links/4w4s_1gbit_250mbit.json

Needs root and `ip netns`, as train_sim_bench.py does.
"""

import argparse
import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import train_sim_bench as tsb  # noqa: E402

# name -> FERRY_* variables; `today` is the reference (the defaults: one size for every
# link, FERRY_PARTITION_MS's by the mean rate).
DEFAULT_CONFIGS = "today=;per-link=FERRY_PARTITION_PER_LINK=1"


class UnevenRun(tsb.Run):
    """train_sim_bench's run on links with a rate per worker host; LB1 at the slowest."""

    def __init__(self, args, model, compute_scale, env, name, worker_rates):
        super().__init__(args, model, args.rate, compute_scale, env, name)
        self.worker_rates = worker_rates

    def up_args(self):
        return ["--worker-rates", ",".join(self.worker_rates)]

    def changed_hosts(self):
        """--slow-rate-change reshapes the slow worker's link only (train_sim_bench's timer,
        started with the workers)."""
        return ["worker%d" % self.args.slow_rank]

    def record(self, outputs, cpu):
        """train_sim_bench's record, with each worker's pieces and the servers' recut frames."""
        r = super().record(outputs, cpu)
        r["pieces"] = []
        for i in range(self.args.workers):
            with open(os.path.join(self.logs.name, "worker-%d.json" % i)) as f:
                c = json.load(f)["counters"]
            r["pieces"].append({k: c.get("scheduling." + k) for k in
                                ("link_piece_bytes_min", "link_piece_bytes_max", "link_decisions",
                                 "layer_decisions", "layers_cut", "credit_bytes")})
        r["frames_recut"] = 0
        for name in os.listdir(self.logs.name):
            if name.startswith("server") and name.endswith(".json"):
                with open(os.path.join(self.logs.name, name)) as f:
                    r["frames_recut"] += json.load(f)["counters"].get("frames_recut", 0)
        return r

    def sim_argv(self):
        argv = super().sim_argv()
        slowest = min(tsb.ferry_netns.rate_bits(r) for r in self.worker_rates + [self.rate])
        argv[argv.index("--rate_gbps") + 1] = str(slowest / 1e9)
        return argv


def parser():
    p = argparse.ArgumentParser(description="one worker behind a slower link")
    p.add_argument("--models", default="vgg16:0.1:0.66,resnet50:0.5:0.92",
                   help="MODEL:BYTE_SCALE:COMPUTE_SCALE, comma-separated")
    p.add_argument("--rate", default="1gbit", help="every link's rate but the slow one")
    p.add_argument("--slow-rate", default="250mbit", help="the slow worker's link")
    p.add_argument("--slow-rank", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help="NAME=VAR=V,VAR=V;... (the first is the reference)")
    p.add_argument("--links", default="uneven,even", help="uneven, even or both")
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--slow-rate-change", type=tsb.rate_change, metavar="S:RATE",
                   help="reshape the slow worker's link to RATE S seconds after the start")
    p.add_argument("--check", action="store_true", help="check every sum (costs CPU)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--bin", default=os.environ.get("FERRY_BIN", os.path.join(tsb.ROOT, "build", "bin")))
    p.add_argument("--out", required=True)
    return p


def parse_configs(text):
    """[(name, {VAR: value})] from 'today=;per-link=FERRY_X=1,FERRY_Y=2'."""
    out = []
    for item in text.split(";"):
        name, _, rest = item.partition("=")
        env = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
        out.append((name, env))
    return out


def base_args(args):
    b = tsb.parser().parse_args(["--out", args.out])
    for k in ("workers", "servers", "iterations", "warmup", "timeout", "bin", "rate", "check"):
        setattr(b, k, getattr(args, k))
    b.bin = os.path.abspath(b.bin)
    b.slow_rank, b.slow_rate_change = args.slow_rank, args.slow_rate_change
    return b


def run_once(base, model, byte_scale, compute_scale, env, worker_rates):
    args = copy.copy(base)
    args.byte_scale = byte_scale
    args.slow_rank, args.rate_change = base.slow_rank, base.slow_rate_change
    run = UnevenRun(args, model, compute_scale, env, "ulb%d" % os.getpid(), worker_rates)
    try:
        try:
            r = run.execute()
        except (RuntimeError, OSError, ValueError):
            kept = tempfile.mkdtemp(prefix="uneven_links_bench.failed.")
            shutil.copytree(run.logs.name, kept, dirs_exist_ok=True)
            tsb.say("  the run's logs: %s" % kept)
            raise
        return {"step_ms": r["median_ms"], "lb1_ms": r["lb1_ms"],
                "workers_ms": [w["median_ms"] for w in r["workers"]],
                "pieces": r["pieces"], "frames_recut": r["frames_recut"],
                "wrong_values": r["wrong_values"], "checked_values": r["checked_values"],
                "partition_bytes": r["transport"].get("scheduling.partition_bytes"),
                "busiest_core_pct": r["cpu"]["busiest_core_pct"]}
    finally:
        run.cleanup()


def fmt(values, digits=3):
    return "%.*f [%.*f-%.*f]" % (digits, statistics.median(values), digits, min(values), digits,
                                 max(values))


def main():
    args = parser().parse_args()
    why = tsb.ferry_netns.unavailable_reason()
    if why:
        tsb.say("cannot make network namespaces: %s" % why)
        return 2
    base = base_args(args)
    models = [(m, float(b), float(c)) for m, b, c in (x.split(":") for x in args.models.split(","))]
    configs = parse_configs(args.configs)
    rates = {"even": [args.rate] * args.workers,
             "uneven": [args.slow_rate if i == args.slow_rank else args.rate
                        for i in range(args.workers)]}
    links = args.links.split(",")
    runs, started = [], time.time()
    for rep in range(args.repeats):
        for model, byte_scale, compute_scale in models:
            for link in links:
                for name, env in configs:
                    tsb.say("repeat %d/%d: %s, %s links, %s" % (rep + 1, args.repeats, model, link, name))
                    rec = {"repeat": rep, "model": model, "links": link, "config": name}
                    try:
                        rec.update(run_once(base, model, byte_scale, compute_scale, env, rates[link]))
                        tsb.say("  step %.1f ms = %.3f x LB1 %.1f ms (workers %s), partitions %s B, "
                                "pieces %s, %d frames recut" % (
                                    rec["step_ms"], rec["step_ms"] / rec["lb1_ms"], rec["lb1_ms"],
                                    ", ".join("%.0f" % w for w in rec["workers_ms"]),
                                    rec["partition_bytes"],
                                    ", ".join("%s-%s" % (p["link_piece_bytes_min"], p["link_piece_bytes_max"])
                                              for p in rec["pieces"]), rec["frames_recut"]))
                    except (RuntimeError, OSError, ValueError) as e:
                        rec["error"] = str(e)
                        tsb.say("  failed: %s" % e)
                    runs.append(rec)
    summary = summarize(runs, models, links, configs)
    print("# uneven_links_bench: %d workers, %d servers, %s links, worker %d at %s; %d repeats, "
          "interleaved; %.0f s" % (args.workers, args.servers, args.rate, args.slow_rank,
                                   args.slow_rate, args.repeats, time.time() - started))
    print("| model | links | configuration | step ms | LB1 ms | step / LB1 | %s / step |" % configs[0][0])
    print("|---|---|---|---:|---:|---:|---:|")
    for row in summary:
        print("| %s | %s | %s | %s | %.1f | %s | %s |" % (
            row["model"], row["links"], row["config"], fmt(row["step_ms"], 0),
            statistics.median(row["lb1_ms"]), fmt(row["over_lb1"]), fmt(row["speedup"])))
    with open(args.out, "w") as f:
        json.dump({"program": "uneven_links_bench", "args": vars(args), "summary": summary,
                   "runs": runs}, f, indent=1)
    return 1 if any("error" in r for r in runs) else 0


def summarize(runs, models, links, configs):
    """Per model, links and configuration: steps, step / LB1, and the reference's step over
    this one's in the same repeat (> 1: faster than the reference)."""
    ok = [r for r in runs if "error" not in r]
    ref = {(r["model"], r["links"], r["repeat"]): r["step_ms"] for r in ok
           if r["config"] == configs[0][0]}
    out = []
    for model, _, _ in models:
        for link in links:
            for name, _ in configs:
                rs = [r for r in ok if (r["model"], r["links"], r["config"]) == (model, link, name)]
                speedups = [ref[(model, link, r["repeat"])] / r["step_ms"] for r in rs
                            if (model, link, r["repeat"]) in ref]
                if rs and speedups:
                    out.append({"model": model, "links": link, "config": name,
                                "step_ms": [r["step_ms"] for r in rs],
                                "lb1_ms": [r["lb1_ms"] for r in rs],
                                "over_lb1": [r["step_ms"] / r["lb1_ms"] for r in rs],
                                "speedup": speedups})
    return out


if __name__ == "__main__":
    sys.exit(main())
