#!/usr/bin/python3
"""sim_validate: ferry-sim's predictions beside measurements of the emulated cluster.

Reads the JSON that bench/train_sim_bench.py and bench/unified_bench.py write, runs
ferry-sim once for every measured cell with the same workload, cluster, link rate,
iterations and FERRY_* knobs, and prints a Markdown table (measured median, predicted,
error) and, with --png, a scatter plot of predicted against measured. A cell whose every
run had its busiest core above --cpu-limit percent (the 70% rule: there the machine's CPUs,
not the network, decided) is kept in the table but marked, and left out of the summary.
The unified benchmark's gloo all-reduce times are set beside the ring model.

  bench/sim_validate.py --trainsim bench/results/simulator/matrix-*.json \\
      --unified bench/results/simulator/unified.json --png docs/images/sim_validation.png

The model's constants come from ferry-sim's defaults (docs/simulation.md, "Calibration");
--sim-arg passes others (repeatable: --sim-arg=--tcp-efficiency=0.95).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
GOAL = 0.10  # within 10% of the measured median


def load(paths):
    out = []
    for path in paths:
        with open(path) as f:
            out.append(json.load(f))
    return out


def simulate(binary, args, extra):
    cmd = [binary] + args + extra + ["--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), done.stderr.strip()))
    return json.loads(done.stdout)


def env_args(env):
    args = []
    for name, value in sorted(env.items()):
        args += ["--env", "%s=%s" % (name, value)]
    return args


def trainsim_cells(result, cpu_limit):
    """{key: cell} over one train_sim_bench.py result: runs grouped by their configuration."""
    a = result["args"]
    cells = {}
    for r in result["runs"]:
        if "error" in r:
            continue
        key = (r["model"], r["rate"], r["compute_scale"], tuple(sorted(r["env"].items())))
        cell = cells.setdefault(key, {"runs": [], "cpu": []})
        cell["runs"].append(r["median_ms"])
        cell["cpu"].append(r["cpu"]["busiest_core_pct"])
    out = []
    for (model, rate, scale, env), cell in sorted(cells.items()):
        kept = [ms for ms, cpu in zip(cell["runs"], cell["cpu"]) if cpu <= cpu_limit]
        cluster = ["--workers", str(a["workers"])]
        if a.get("colocate"):
            cluster += ["--colocate"]
        else:
            cluster += ["--servers", str(a["servers"])]
        cluster += ["--cpu-servers", str(a.get("extra_servers", 0))]
        out.append({
            "bench": "train-sim",
            "label": "%s x%g %s" % (model, scale, " ".join("%s=%s" % kv for kv in env) or "default"),
            "policy": dict(env).get("FERRY_SCHEDULING_POLICY", "credit"),
            "measured_ms": statistics.median(kept or cell["runs"]),
            "cpu_excluded": not kept,
            "busiest_core": max(cell["cpu"]),
            "runs": len(cell["runs"]),
            "sim_args": ["--workload", model, "--byte-scale", str(a["byte_scale"]),
                         "--compute-scale", str(scale), "--rate", rate,
                         "--iterations", str(a["iterations"]), "--warmup", str(a["warmup"])]
                        + cluster + env_args(dict(env)),
        })
    return out


def unified_cells(result, cpu_limit):
    a = result["args"]
    cells = {}
    for r in result["runs"]:
        if "ferry_s" not in r:
            continue
        key = (r["k"], tuple(sorted(r["env"].items())))
        cell = cells.setdefault(key, {"ms": [], "cpu": [], "gloo": []})
        cell["ms"].append(r["ferry_s"] * 1000)
        cell["cpu"].append(r["ferry_cpu"]["busiest_core_pct"])
        if "gloo_s" in r:
            cell["gloo"].append(r["gloo_s"] * 1000)
    out = []
    for (k, env), cell in sorted(cells.items()):
        kept = [ms for ms, cpu in zip(cell["ms"], cell["cpu"]) if cpu <= cpu_limit]
        out.append({
            "bench": "unified",
            "label": "unified k=%d %s" % (k, " ".join("%s=%s" % kv for kv in env) or "default"),
            "policy": dict(env).get("FERRY_SCHEDULING_POLICY", "credit"),
            "measured_ms": statistics.median(kept or cell["ms"]),
            "cpu_excluded": not kept,
            "busiest_core": max(cell["cpu"]),
            "runs": len(cell["ms"]),
            "gloo_ms": statistics.median(cell["gloo"]) if cell["gloo"] else None,
            "sim_args": ["--workload", "pushpull:%d" % a["nbytes"], "--workers", str(a["workers"]),
                         "--colocate", "--cpu-servers", str(k), "--rate", a["rate"],
                         "--iterations", str(a["iters"]), "--warmup", str(a["warmup"])]
                        + env_args(dict(env)),
        })
    return out


def run(cells, binary, extra):
    for c in cells:
        j = simulate(binary, c["sim_args"], extra)
        c["predicted_ms"] = j["iteration_ms"]
        c["ring_ms"] = j["allreduce_ms"]
        c["error"] = c["predicted_ms"] / c["measured_ms"] - 1


def markdown(cells):
    lines = ["| cell | measured (ms) | ferry-sim (ms) | error | busiest core | runs |",
             "|---|---:|---:|---:|---:|---:|"]
    for c in cells:
        mark = " (CPU > limit: not counted)" if c["cpu_excluded"] else ""
        miss = "" if abs(c["error"]) <= GOAL else " **miss**"
        lines.append("| %s%s | %.1f | %.1f | %+.1f%%%s | %.0f%% | %d |" % (
            c["label"], mark, c["measured_ms"], c["predicted_ms"], 100 * c["error"], miss,
            c["busiest_core"], c["runs"]))
    gloo = [c for c in cells if c.get("gloo_ms")]
    if gloo:
        lines += ["", "| ring all-reduce, unified hosts | gloo measured (ms) | ring model (ms) | error |",
                  "|---|---:|---:|---:|"]
        for c in gloo:
            lines.append("| %s | %.1f | %.1f | %+.1f%% |" % (
                c["label"], c["gloo_ms"], c["ring_ms"], 100 * (c["ring_ms"] / c["gloo_ms"] - 1)))
    counted = [c for c in cells if not c["cpu_excluded"]]
    within = [c for c in counted if abs(c["error"]) <= GOAL]
    errors = sorted(abs(c["error"]) for c in counted)
    if errors:
        lines += ["", "%d of %d counted cells within %d%%; median |error| %.1f%%, largest %.1f%%; "
                  "%d cells not counted (CPU)." % (
                      len(within), len(counted), 100 * GOAL, 100 * statistics.median(errors),
                      100 * errors[-1], len(cells) - len(counted))]
    return "\n".join(lines)


def plot(cells, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 5.5))
    markers = {"train-sim": "o", "unified": "s"}
    policies = sorted({c["policy"] for c in cells})
    colors = dict(zip(policies, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for c in cells:
        face = "none" if c["cpu_excluded"] else colors[c["policy"]]
        ax.scatter(c["measured_ms"], c["predicted_ms"], marker=markers[c["bench"]],
                   facecolors=face, edgecolors=colors[c["policy"]], s=36)
    lo = min(min(c["measured_ms"], c["predicted_ms"]) for c in cells) * 0.8
    hi = max(max(c["measured_ms"], c["predicted_ms"]) for c in cells) * 1.2
    xs = [lo, hi]
    ax.plot(xs, xs, color="grey", lw=0.8)
    ax.plot(xs, [x * (1 + GOAL) for x in xs], color="grey", lw=0.8, ls="--")
    ax.plot(xs, [x * (1 - GOAL) for x in xs], color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured on the emulated cluster (ms, median)")
    ax.set_ylabel("ferry-sim (ms)")
    for p in policies:
        ax.scatter([], [], color=colors[p], label=p)
    ax.scatter([], [], marker="o", color="k", label="train-sim matrix")
    ax.scatter([], [], marker="s", color="k", label="unified push_pull")
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="k", label="busiest core > 70%")
    ax.legend(fontsize=7)
    ax.set_title("ferry-sim against the emulated cluster (dashed: +-10%)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainsim", nargs="*", default=[], help="train_sim_bench.py results")
    p.add_argument("--unified", nargs="*", default=[], help="unified_bench.py results")
    p.add_argument("--bin", default=os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin")))
    p.add_argument("--cpu-limit", type=float, default=70)
    p.add_argument("--sim-arg", action="append", default=[], help="passed to ferry-sim")
    p.add_argument("--json", help="write every cell, measured and predicted, here")
    p.add_argument("--png", help="write the scatter plot here")
    args = p.parse_args()
    cells = []
    for result in load(args.trainsim):
        cells += trainsim_cells(result, args.cpu_limit)
    for result in load(args.unified):
        cells += unified_cells(result, args.cpu_limit)
    if not cells:
        sys.exit("sim_validate: no measured cells (give --trainsim or --unified)")
    run(cells, os.path.join(args.bin, "ferry-sim"), args.sim_arg)
    print(markdown(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cells": cells, "sim_args": args.sim_arg}, f, indent=1)
    if args.png:
        plot(cells, args.png)


if __name__ == "__main__":
    main()
