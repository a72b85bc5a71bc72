#!/usr/bin/env python3
"""The data path's closing train-sim matrix (5 interleaved repeats, every policy with its defaults):
median iteration / LB1 (min-max) per model, ratio and policy, the busiest core, and
fifo / default at each ratio. Usage: summary.py matrix-*.json"""
import collections
import json
import statistics
import sys

RATIOS = {"vgg16": {0.33: 0.5, 0.66: 1, 1.32: 2}, "resnet50": {0.46: 0.5, 0.92: 1, 1.84: 2},
          "bert_base": {0.855: 0.5, 1.71: 1, 3.42: 2}}
POLICIES = ("credit", "p3", "mercury", "fifo")

runs = collections.defaultdict(list)  # (model, ratio, policy) -> [(x LB1, busiest core, ms)]
for path in sys.argv[1:]:
    for r in json.load(open(path))["runs"]:
        if "error" in r:
            print("ERR", r["error"])
            continue
        w = r["workers"][0]
        ms = statistics.median(w["iterations_ms"])
        key = (r["model"], RATIOS[r["model"]][r["compute_scale"]], r["env"]["FERRY_SCHEDULING_POLICY"])
        runs[key].append((ms / w["lb"]["lb1_ms"], r["cpu"]["busiest_core_pct"], ms))

print("| model | ratio | " + " | ".join(p if p != "credit" else "**default** (credit)" for p in POLICIES)
      + " | busiest core (default) | fifo / default |")
print("|---|---|" + "---:|" * (len(POLICIES) + 2))
for model in RATIOS:
    for ratio in (0.5, 1, 2):
        cells = []
        for p in POLICIES:
            v = [x for x, _, _ in runs[(model, ratio, p)]]
            cells.append("%.3f (%.3f-%.3f)" % (statistics.median(v), min(v), max(v)) if v else "-")
        cpu = [c for _, c, _ in runs[(model, ratio, "credit")]]
        ms = {p: statistics.median([t for _, _, t in runs[(model, ratio, p)]] or [0]) for p in POLICIES}
        print("| %s | %s | %s | %d-%d%% | %.3f |" % (model, ratio, " | ".join(cells), min(cpu), max(cpu),
                                                   ms["fifo"] / ms["credit"]))
