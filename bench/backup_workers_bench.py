#!/usr/bin/python3
"""backup_workers_bench: one slow worker among several on an emulated cluster, with and
without backup workers (FERRY_BACKUP_WORKERS; docs/stragglers.md).

ferry-train-sim replays a model's training step on every worker host of a fresh
netns-cluster (train_sim_bench.py's Run: links shaped to --rate both ways). A slow worker
computes --slow-factor times longer: rank --slow-rank at every iteration (ferry-train-sim
--rank_compute_scale), or a moving one, rank i mod workers in iteration i
(--rotating_slow_factor). Configurations, interleaved (every one once per repeat, in turn):
  even        no slow worker, FERRY_BACKUP_WORKERS=0: the reference
  slow b=0    one worker slow at every iteration, no backup workers
  slow b=1    the same, FERRY_BACKUP_WORKERS=1
  moving b=0  a different worker slow at each iteration, no backup workers
  moving b=1  the same, FERRY_BACKUP_WORKERS=1
  ... no catch-up  b=1, but a late worker computes every step (ferry-train-sim
              --catch_up=false; by default it sits out the step after a late one)
  even b=1    no slow worker, FERRY_BACKUP_WORKERS=1 (what backup workers cost when nobody
              is slow)
A run's step is its slowest worker's mean iteration (the job moves at its pace). Each
configuration's ratio to `even` is taken within a repeat (the same minutes of the
machine); the table prints medians [min-max] over repeats.

  bench/backup_workers_bench.py --models vgg16:0.1:0.66,resnet50:0.5:0.92 --repeats 5 \\
      --out bench/results/backup_workers/4w_1gbit.json

MODEL:BYTE_SCALE:COMPUTE_SCALE per model (the defaults make compute and communication
about equal at 1 Gbit/s). Needs root and `ip netns`, as train_sim_bench.py does.
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

# (name, slowness: "" none, "fixed" or "moving", FERRY_BACKUP_WORKERS); "no catch-up": the
# late worker computes every step (ferry-train-sim --catch_up=false), as DistributedOptimizer
# does.
CONFIGS = [("even", "", "0"), ("slow b=0", "fixed", "0"), ("slow b=1", "fixed", "1"),
           ("slow b=1 no catch-up", "fixed", "1"), ("moving b=0", "moving", "0"),
           ("moving b=1", "moving", "1"), ("moving b=1 no catch-up", "moving", "1"),
           ("even b=1", "", "1")]


class SlowRun(tsb.Run):
    """train_sim_bench's run, with one worker's compute scaled."""

    def __init__(self, args, model, compute_scale, env, name, slow_args):
        super().__init__(args, model, args.rate, compute_scale, env, name)
        self.slow_args = slow_args

    def sim_argv(self):
        return super().sim_argv() + self.slow_args

    def record(self, outputs, cpu):
        r = super().record(outputs, cpu)
        r["late_pushes"] = 0  # the servers' backup.late_pushes, from their stats files
        for name in os.listdir(self.logs.name):
            if name.startswith("server") and name.endswith(".json"):
                with open(os.path.join(self.logs.name, name)) as f:
                    r["late_pushes"] += json.load(f)["counters"].get("backup.late_pushes", 0)
        return r


def parser():
    p = argparse.ArgumentParser(description="one slow worker, with and without backup workers")
    p.add_argument("--models", default="vgg16:0.1:0.66,resnet50:0.5:0.92",
                   help="MODEL:BYTE_SCALE:COMPUTE_SCALE, comma-separated")
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--slow-rank", type=int, default=3)
    p.add_argument("--slow-factor", type=float, default=2.0)
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                   help="which configurations, comma-separated (default: all)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--bin", default=os.environ.get("FERRY_BIN", os.path.join(tsb.ROOT, "build", "bin")))
    p.add_argument("--out", required=True)
    return p


def base_args(args):
    """The namespace train_sim_bench's Run reads, with this run's settings."""
    b = tsb.parser().parse_args(["--out", args.out])
    for k in ("workers", "servers", "iterations", "warmup", "timeout", "bin", "rate"):
        setattr(b, k, getattr(args, k))
    b.bin = os.path.abspath(b.bin)
    return b


def slow_args(args, slowness):
    """ferry-train-sim's arguments for `slowness`."""
    if slowness == "fixed":
        return ["--rank_compute_scale", "%d:%g" % (args.slow_rank, args.slow_factor)]
    if slowness == "moving":
        return ["--rotating_slow_factor", "%g" % args.slow_factor]
    return []


def run_once(base, model, byte_scale, compute_scale, backups, extra):
    args = copy.copy(base)
    args.byte_scale = byte_scale
    env = {"FERRY_BACKUP_WORKERS": backups}
    run = SlowRun(args, model, compute_scale, env, "bwb%d" % os.getpid(), extra)
    try:
        try:
            r = run.execute()
        except (RuntimeError, OSError, ValueError):
            kept = tempfile.mkdtemp(prefix="backup_workers_bench.failed.")
            shutil.copytree(run.logs.name, kept, dirs_exist_ok=True)
            tsb.say("  the run's logs: %s" % kept)
            raise
        # The job's pace: its slowest worker's mean iteration (a worker that sits steps out
        # alternates long and short ones, so a median would flatter it).
        return {"step_ms": max(w["mean_ms"] for w in r["workers"]), "lb1_ms": r["lb1_ms"],
                "workers_ms": [w["mean_ms"] for w in r["workers"]],
                "sat_out": [w.get("sat_out", 0) for w in r["workers"]],
                "busiest_core_pct": r["cpu"]["busiest_core_pct"], "late_pushes": r["late_pushes"]}
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
    runs = []
    started = time.time()
    for rep in range(args.repeats):
        for model, byte_scale, compute_scale in models:
            for name, slowness, backups in CONFIGS:
                if name not in args.configs.split(","):
                    continue
                tsb.say("repeat %d/%d: %s, %s" % (rep + 1, args.repeats, model, name))
                rec = {"repeat": rep, "model": model, "config": name}
                try:
                    extra = slow_args(args, slowness)
                    if name.endswith("no catch-up"):
                        extra.append("--catch_up=false")
                    rec.update(run_once(base, model, byte_scale, compute_scale, backups, extra))
                    tsb.say("  step %.1f ms (workers %s), %d late pushes, steps sat out %s, "
                            "busiest core %.0f%%" % (
                                rec["step_ms"], ", ".join("%.0f" % w for w in rec["workers_ms"]),
                                rec["late_pushes"], rec["sat_out"], rec["busiest_core_pct"]))
                except (RuntimeError, OSError, ValueError) as e:
                    rec["error"] = str(e)
                    tsb.say("  failed: %s" % e)
                runs.append(rec)
    summary = summarize(runs, models)
    print("# backup_workers_bench: %d workers, %d servers, %s links; slow: rank %d (or a "
          "moving one) computes %gx longer; %d repeats, interleaved; %.0f s" % (
              args.workers, args.servers, args.rate, args.slow_rank, args.slow_factor,
              args.repeats, time.time() - started))
    print("| model | configuration | step ms, median [min-max] | step / even, median [min-max] |")
    print("|---|---|---:|---:|")
    for row in summary:
        print("| %s | %s | %s | %s |" % (row["model"], row["config"], fmt(row["step_ms"], 0),
                                         fmt(row["ratio"])))
    with open(args.out, "w") as f:
        json.dump({"program": "backup_workers_bench", "args": vars(args), "summary": summary,
                   "runs": runs}, f, indent=1)
    return 1 if any("error" in r for r in runs) else 0


def summarize(runs, models):
    """Per model and configuration: steps, and ratios to `even` of the same repeat."""
    ok = [r for r in runs if "error" not in r]
    even = {(r["model"], r["repeat"]): r["step_ms"] for r in ok if r["config"] == "even"}
    out = []
    for model, _, _ in models:
        for name, _, _ in CONFIGS:
            rs = [r for r in ok if r["model"] == model and r["config"] == name]
            ratios = [r["step_ms"] / even[(model, r["repeat"])] for r in rs
                      if (model, r["repeat"]) in even]
            if rs and ratios:
                out.append({"model": model, "config": name, "step_ms": [r["step_ms"] for r in rs],
                            "ratio": ratios})
    return out


if __name__ == "__main__":
    sys.exit(main())
