#!/usr/bin/python3
"""sim_predict: ferry-sim's predictions over a grid of models, cluster sizes, link rates,
policies and CPU-only servers, with plots (docs/simulation.md, "Predictions").

Every cell runs ferry-sim --seeds times with --jitter (a symmetric simulation at scale is
chaotic: order at equal times decides; jitter and seeds turn that into a spread) and keeps
the median iteration with its min-max. Scaling efficiency is the compute-only iteration
(C_f + C_b, one worker with nothing to send) over the predicted iteration; Ferry against the
ring all-reduce model is ring / Ferry (> 1: Ferry is faster).

  bench/sim_predict.py --models vgg16,resnet50,bert_base,bert_large \\
      --workers 8,16,32,64,128,256,512,1024 --rates 10gbit,25gbit,100gbit \\
      --policies credit,p3,fifo --out predictions.json --png predictions.png
  bench/sim_predict.py --models vgg16 --workers 8,64 --rates 25gbit --cpu-servers 0,0.25,0.5 \\
      --out unified.json      # k CPU-only servers as a fraction of the workers
  bench/sim_predict.py --from predictions.json --from more.json --png all.png   # plot only

Runs --jobs simulations at once (default: the CPUs).
"""

import argparse
import concurrent.futures
import csv
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def compute_ms(model):
    path = os.path.join(ROOT, "bench", "workloads", model + "_layers.csv")
    lines = [line for line in open(path) if not line.startswith("#")]
    return sum(float(r["fwd_ms"]) + float(r["bwd_ms"]) for r in csv.DictReader(lines))


def simulate(binary, args):
    done = subprocess.run([binary] + args + ["--format", "json"], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip()}
    return json.loads(done.stdout)


def cells(a):
    for model in a.models.split(","):
        for workers in [int(w) for w in a.workers.split(",")]:
            for rate in a.rates.split(","):
                for policy in a.policies.split(","):
                    for fraction in [float(k) for k in a.cpu_servers.split(",")]:
                        yield {"model": model, "workers": workers, "rate": rate, "policy": policy,
                               "cpu_servers": int(round(fraction * workers))}


def run_cell(a, cell):
    args = ["--workload", cell["model"], "--workers", str(cell["workers"]), "--colocate",
            "--cpu-servers", str(cell["cpu_servers"]), "--rate", cell["rate"],
            "--iterations", str(a.iterations), "--warmup", str(a.warmup), "--jitter", str(a.jitter),
            "--env", "FERRY_SCHEDULING_POLICY=" + cell["policy"]] + a.sim_arg
    runs = []
    started = time.time()
    for seed in range(1, a.seeds + 1):
        j = simulate(os.path.join(a.bin, "ferry-sim"), args + ["--seed", str(seed)])
        if "error" in j:
            return dict(cell, error=j["error"])
        runs.append(j)
    ms = [r["iteration_ms"] for r in runs]
    compute = compute_ms(cell["model"])
    median = statistics.median(ms)
    return dict(cell, iteration_ms=median, min_ms=min(ms), max_ms=max(ms),
                lb1_ms=runs[0]["lb1_ms"], t_opt_ms=runs[0]["t_opt_ms"],
                ring_ms=runs[0]["allreduce_ms"], compute_ms=compute,
                efficiency=compute / median, ring_over_ferry=runs[0]["allreduce_ms"] / median,
                partition_bytes=runs[0]["partition_bytes"], wall_s=time.time() - started)


def plot(results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in results if "error" not in r and r["cpu_servers"] == 0]
    models = sorted({r["model"] for r in ok})
    rates = sorted({r["rate"] for r in ok}, key=lambda s: float(s.rstrip("gbit")))
    fig, axes = plt.subplots(len(models), len(rates), figsize=(4 * len(rates), 3.2 * len(models)),
                             sharex=True, sharey=True, squeeze=False)
    for i, model in enumerate(models):
        for j, rate in enumerate(rates):
            ax = axes[i][j]
            for policy in sorted({r["policy"] for r in ok}):
                pts = sorted((r["workers"], r) for r in ok
                             if r["model"] == model and r["rate"] == rate and r["policy"] == policy)
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                ys = [p[1]["efficiency"] for p in pts]
                lo = [y - p[1]["compute_ms"] / p[1]["max_ms"] for y, p in zip(ys, pts)]
                hi = [p[1]["compute_ms"] / p[1]["min_ms"] - y for y, p in zip(ys, pts)]
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=policy)
            ring = sorted((r["workers"], r["compute_ms"] / r["ring_ms"]) for r in ok
                          if r["model"] == model and r["rate"] == rate and r["policy"] == "credit")
            if ring:
                ax.plot([p[0] for p in ring], [p[1] for p in ring], "k--", lw=1, label="ring model")
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1.05)
            ax.set_title("%s, %s" % (model, rate), fontsize=9)
            if j == 0:
                ax.set_ylabel("scaling efficiency")
            if i == len(models) - 1:
                ax.set_xlabel("workers (one colocated server each)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="vgg16,resnet50,bert_base,bert_large")
    p.add_argument("--workers", default="8,16,32,64,128,256,512,1024")
    p.add_argument("--rates", default="10gbit,25gbit,100gbit")
    p.add_argument("--policies", default="credit")
    p.add_argument("--cpu-servers", default="0", help="fractions of the workers, comma-separated")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jitter", type=float, default=0.02)
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--sim-arg", action="append", default=[])
    p.add_argument("--bin", default=os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin")))
    p.add_argument("--out", help="the JSON file to write (not with --from)")
    p.add_argument("--png")
    p.add_argument("--from", dest="sources", action="append", default=[], metavar="JSON",
                   help="plot the results of earlier runs instead of simulating (repeatable: "
                        "merged); needs --png")
    a = p.parse_args()
    if a.sources:
        if not a.png:
            p.error("--from needs --png")
        results = []
        for path in a.sources:
            with open(path) as f:
                results += json.load(f)["results"]
        plot(results, a.png)
        return
    if not a.out:
        p.error("--out is required")
    todo = list(cells(a))
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for r in pool.map(lambda c: run_cell(a, c), todo):
            results.append(r)
            if "error" in r:
                print("sim_predict: %s" % r, file=sys.stderr, flush=True)
            else:
                print("sim_predict: %-10s %5d workers %-8s %-11s k=%-4d %9.1f ms [%.1f-%.1f] "
                      "efficiency %.2f ring/Ferry %.2f (%.0f s)" % (
                          r["model"], r["workers"], r["rate"], r["policy"], r["cpu_servers"],
                          r["iteration_ms"], r["min_ms"], r["max_ms"], r["efficiency"],
                          r["ring_over_ferry"], r["wall_s"]), file=sys.stderr, flush=True)
    with open(a.out, "w") as f:
        json.dump({"args": vars(a), "results": results}, f, indent=1)
    if a.png:
        plot(results, a.png)


if __name__ == "__main__":
    main()
