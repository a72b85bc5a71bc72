#!/usr/bin/env python3
"""The train-sim matrix of the profiled policies (usbyte, prophet) against credit, p3
and fifo on the emulated cluster: median iteration / LB1 (min-max over repeats) per model,
ratio and policy, each policy's median over credit's, and the busiest core.
Usage: summary.py matrix-*.json"""
import collections
import json
import statistics
import sys

RATIOS = {"vgg16": {0.33: 0.5, 0.66: 1, 1.32: 2}, "resnet50": {0.46: 0.5, 0.92: 1, 1.84: 2},
          "bert_base": {0.855: 0.5, 1.71: 1, 3.42: 2}}
POLICIES = ("credit", "usbyte", "prophet", "p3", "fifo")

runs = collections.defaultdict(list)  # (model, ratio, policy) -> [(x LB1, busiest core, ms)]
for path in sys.argv[1:]:
    for r in json.load(open(path))["runs"]:
        if "error" in r:
            print("ERR", r["error"])
            continue
        key = (r["model"], RATIOS[r["model"]][r["compute_scale"]], r["env"]["FERRY_SCHEDULING_POLICY"])
        runs[key].append((r["median_over_lb1"], r["cpu"]["busiest_core_pct"], r["median_ms"]))

print("| model | ratio | " + " | ".join(POLICIES) + " | usbyte / credit | prophet / credit | busiest core |")
print("|---|---|" + "---:|" * (len(POLICIES) + 3))
for model in RATIOS:
    for ratio in (0.5, 1, 2):
        if not runs[(model, ratio, "credit")]:
            continue
        cells = []
        for p in POLICIES:
            v = [x for x, _, _ in runs[(model, ratio, p)]]
            cells.append("%.3f (%.3f-%.3f)" % (statistics.median(v), min(v), max(v)) if v else "-")
        cpu = [c for p in POLICIES for _, c, _ in runs[(model, ratio, p)]]
        ms = {p: statistics.median([t for _, _, t in runs[(model, ratio, p)]] or [float("nan")]) for p in POLICIES}
        print("| %s | %s | %s | %.3f | %.3f | %d-%d%% |" % (
            model, ratio, " | ".join(cells), ms["usbyte"] / ms["credit"], ms["prophet"] / ms["credit"],
            min(cpu), max(cpu)))
