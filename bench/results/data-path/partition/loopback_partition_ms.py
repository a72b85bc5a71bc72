#!/usr/bin/python3
"""Loopback cost of FERRY_PARTITION_MS=4: ferry-perf 1-64 MiB on the core cluster, 0 and 4 interleaved, 3 repeats."""
import os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "bench"))
import core_bench as cb
res = {}
for rep in range(3):
    for ms in ("0", "4"):
        bw = cb.run_ferry(("1M", "64M"), 8, 3, {"FERRY_PARTITION_MS": ms})
        for b, v in bw.items():
            res.setdefault((ms, b), []).append(v)
        print(rep, ms, {b: round(v, 3) for b, v in bw.items()}, flush=True)
for (ms, b), v in sorted(res.items()):
    print("FERRY_PARTITION_MS=%s" % ms, b, "%.3f [%.3f-%.3f]" % (statistics.median(v), min(v), max(v)))
