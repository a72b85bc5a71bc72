#!/usr/bin/env python3
"""Tables and plots from train_sim_bench.py results (the train-sim figures of docs/benchmarks.md).

    train_sim_report.py table  RESULTS.json... [--by ENV_NAME,...] [--cpu-limit 70]
    train_sim_report.py matrix RESULTS.json... --png OUT.png   (policy x compute ratio per model)
    train_sim_report.py sweep  RESULTS.json... --png OUT.png   (partition x credit per model)

Every figure is over repeats: the median of the runs' median/LB1 with its min-max, and the
median of their p90/LB1. A run whose busiest core passed --cpu-limit percent (default 70: above
that a run measures the CPU) is left out and counted in the `left out` column: there the machine, not the
network, decided. Matplotlib comes from Debian's python3-matplotlib (/usr/bin/python3).
"""
import argparse
import json
import statistics
import sys

# compute_scale of each model's ratio ~1 configuration (docs/benchmarks.md): the ratio of a
# run is its compute_scale over this.
RATIO_ONE = {"vgg16": 0.66, "resnet50": 0.92, "bert_base": 1.71}


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            runs.extend(json.load(f)["runs"])
    return runs


def ratio_of(run):
    base = RATIO_ONE.get(run["model"])
    return round(run["compute_scale"] / base, 2) if base else run["compute_scale"]


def group(runs, by, cpu_limit):
    """{(model, ratio, (env values...)): {"kept": [...], "left_out": n, "failed": n}}."""
    groups = {}
    for r in runs:
        key = (r["model"], ratio_of(r), tuple(r["env"].get(name, "default") for name in by))
        g = groups.setdefault(key, {"kept": [], "left_out": 0, "failed": 0})
        if "error" in r:
            g["failed"] += 1
        elif r["cpu"]["busiest_core_pct"] > cpu_limit:
            g["left_out"] += 1
        else:
            g["kept"].append(r)
    return groups


def figures(g):
    """median, min, max of median/LB1; median of p90/LB1; median iteration ms; LB1 ms."""
    kept = g["kept"]
    if not kept:
        return None
    ratios = [r["median_over_lb1"] for r in kept]
    return {"ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "p90": statistics.median(r["p90_over_lb1"] for r in kept),
            "ms": statistics.median(r["median_ms"] for r in kept),
            "lb1": statistics.median(r["lb1_ms"] for r in kept),
            "cpu": max(r["cpu"]["busiest_core_pct"] for r in kept), "n": len(kept)}


def table(runs, by, cpu_limit):
    head = ["model", "ratio"] + by + ["iteration (ms)", "LB1 (ms)", "iteration / LB1 (min-max)",
                                      "p90 / LB1", "busiest core", "runs kept", "left out (CPU)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, g in sorted(group(runs, by, cpu_limit).items()):
        model, ratio, values = key
        f = figures(g)
        cells = [model, "%g" % ratio] + list(values)
        if f:
            cells += ["%.1f" % f["ms"], "%.1f" % f["lb1"],
                      "%.2f (%.2f-%.2f)" % (f["ratio"], f["min"], f["max"]), "%.2f" % f["p90"],
                      "%.0f%%" % f["cpu"], str(f["n"])]
        else:
            cells += ["-"] * 5 + ["0"]
        cells.append(str(g["left_out"] + g["failed"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_matrix(runs, cpu_limit, png):
    plt = pyplot()
    groups = group(runs, ["FERRY_SCHEDULING_POLICY"], cpu_limit)
    models = sorted({k[0] for k in groups})
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), sharey=True)
    for ax, model in zip(axes if len(models) > 1 else [axes], models):
        policies = sorted({k[2][0] for k in groups if k[0] == model})
        for policy in policies:
            pts = sorted((k[1], figures(g)) for k, g in groups.items()
                         if k[0] == model and k[2][0] == policy and figures(g))
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1]["ratio"] for p in pts]
            err = [[y - p[1]["min"] for y, p in zip(ys, pts)], [p[1]["max"] - y for y, p in zip(ys, pts)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=policy)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(1.15, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks([0.5, 1, 2])
        ax.set_xticklabels(["0.5", "1", "2"])
        ax.set_title(model)
        ax.set_xlabel("compute / communication")
    (axes[0] if len(models) > 1 else axes).set_ylabel("iteration / LB1 (median, min-max)")
    (axes[-1] if len(models) > 1 else axes).legend(fontsize=8)
    fig.suptitle("2 workers x 2 servers, 1 Gbit/s links (dashed: the 1.15 goal)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def plot_sweep(runs, cpu_limit, png):
    plt = pyplot()
    by = ["FERRY_PARTITION_BYTES", "FERRY_SCHEDULING_CREDIT"]
    groups = group(runs, by, cpu_limit)
    models = sorted({k[0] for k in groups})
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.8))
    for ax, model in zip(axes if len(models) > 1 else [axes], models):
        parts = sorted({int(k[2][0]) for k in groups if k[0] == model})
        credits = sorted({int(k[2][1]) for k in groups if k[0] == model})
        grid = [[None] * len(credits) for _ in parts]
        for (m, _, (p, c)), g in groups.items():
            f = figures(g)
            if m == model and f:
                grid[parts.index(int(p))][credits.index(int(c))] = f["ratio"]
        values = [[v if v is not None else float("nan") for v in row] for row in grid]
        ax.imshow(values, cmap="viridis_r", vmin=1.0, vmax=1.6)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, "%.2f" % v if v is not None else "CPU", ha="center", va="center",
                        color="white" if v is None or v > 1.3 else "black", fontsize=9)
        ax.set_xticks(range(len(credits)))
        ax.set_xticklabels([str(c) for c in credits])
        ax.set_yticks(range(len(parts)))
        ax.set_yticklabels(["%d KiB" % (p // 1024) for p in parts])
        ax.set_xlabel("credit (partitions)")
        ax.set_ylabel("partition")
        ax.set_title("%s: iteration / LB1" % model)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["table", "matrix", "sweep"])
    p.add_argument("results", nargs="+")
    p.add_argument("--by", default="", help="environment knobs to group by, comma-separated")
    p.add_argument("--cpu-limit", type=float, default=70.0)
    p.add_argument("--png")
    args = p.parse_args()
    runs = load(args.results)
    if args.what == "table":
        print(table(runs, [b for b in args.by.split(",") if b], args.cpu_limit))
    elif not args.png:
        sys.exit("train_sim_report: %s needs --png" % args.what)
    elif args.what == "matrix":
        plot_matrix(runs, args.cpu_limit, args.png)
    else:
        plot_sweep(runs, args.cpu_limit, args.png)


if __name__ == "__main__":
    main()
