#!/usr/bin/python3
"""Loopback cost of smaller partitions: ferry-perf on the core benchmark's cluster (2 workers,
2 servers, loopback) with FERRY_PARTITION_BYTES 256 KiB and 1 MiB, interleaved, 3 repeats:
algorithm bandwidth at 1-64 MiB and CPU seconds per GB moved (a 64 MiB unchecked run)."""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "bench"))
import core_bench as cb  # noqa: E402

res, cpu = {}, {}
for rep in range(3):
    for p in ("262144", "1048576"):
        bw = cb.run_ferry(("1M", "64M"), 8, 2, {"FERRY_PARTITION_BYTES": p})
        for b, v in bw.items():
            res.setdefault((p, b), []).append(v)
        out, c = cb.run_cluster(["-b", "64M", "-e", "64M", "-n", "8", "-w", "1", "--format=csv", "--check=false"],
                                600, {"FERRY_PARTITION_BYTES": p})
        gb = 8 * 64 * (1 << 20) * 2 * 2 / 1e9
        cpu.setdefault(p, []).append(sum(c.values()) / gb)
        print(rep, p, {b: round(v, 3) for b, v in bw.items()}, "cpu s/GB %.2f" % cpu[p][-1], flush=True)
for (p, b), v in sorted(res.items()):
    print(p, b, "%.3f [%.3f-%.3f]" % (statistics.median(v), min(v), max(v)))
for p, v in cpu.items():
    print(p, "cpu s/GB %.2f [%.2f-%.2f]" % (statistics.median(v), min(v), max(v)))
