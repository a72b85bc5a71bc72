#!/usr/bin/python3
"""Sparse rows vs dense: time and bytes of ferry.torch.push_pull_rows of a fraction of an
embedding's rows beside a dense push_pull of the whole embedding, on loopback.

Starts 1 scheduler, --servers servers and --workers Python workers (this file with
--worker). Each worker declares the [rows, dim] float32 tensor, then per iteration:
  dense: push_pull of the whole tensor (rows x dim x 4 bytes);
  rows:  push_pull_rows of --fraction of the rows (distinct ids, a fresh random set per
         iteration and worker, so workers overlap by chance), checked exactly: every
         worker pushes 1.0 per listed row, so each returned row holds the number of
         workers that listed it.
Reported per case: median and min milliseconds per call over --iters timed calls
(after 2 warm-up calls; workers meet at a barrier before each), and the bytes worker 0's
transport sent per call (VanStats.bytes_sent, envelopes included).

Usage: FERRY_BIN=build/bin FERRY_PYTHONPATH=build/python /usr/bin/python3 bench/rows_bench.py \
           [--rows 1000000] [--dim 16] [--fraction 0.01] [--iters 10]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin"))
PYTHONPATH = os.environ.get("FERRY_PYTHONPATH", os.path.join(ROOT, "build", "python"))

sys.path.insert(0, os.path.join(ROOT, "bench"))
from core_bench import free_port  # noqa: E402


def worker(args):
    sys.path.insert(0, PYTHONPATH)
    import torch
    import ferry.torch as bps
    from ferry import _core

    bps.init()
    rank, size = bps.rank(), bps.size()
    weight = torch.zeros(args.rows, args.dim)
    bps.declare("emb", weight)
    bps.declare("emb.dense", weight)
    # Every worker's generator, so each can compute every other worker's rows.
    gens = [torch.Generator().manual_seed(1000 + r) for r in range(size)]
    count = max(1, int(args.rows * args.fraction))
    results = {}
    for case in ("dense", "rows"):
        times, sent = [], []
        for it in range(args.iters + 2):
            if case == "rows":
                every = [torch.randperm(args.rows, generator=g)[:count] for g in gens]
                ids = every[rank]
                values = torch.ones(count, args.dim)
            bps.barrier()
            before = _core.stats()["van_bytes_sent"]
            start = time.perf_counter()
            if case == "dense":
                out = bps.push_pull(weight, average=False, name="emb.dense")
            else:
                out = bps.push_pull_rows(values, ids, "emb")
            elapsed = time.perf_counter() - start
            after = _core.stats()["van_bytes_sent"]
            if case == "rows":
                listed = torch.zeros(args.rows)
                for theirs in every:
                    listed[theirs] += 1
                want = listed[ids].unsqueeze(1).expand(count, args.dim)
                assert torch.equal(out, want), "wrong row sums"
            if it >= 2:
                times.append(elapsed * 1000)
                sent.append(after - before)
        results[case] = {"median_ms": statistics.median(times), "min_ms": min(times),
                         "bytes_sent": int(statistics.median(sent))}
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(results, f)
    bps.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1000000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    port = free_port()
    out = tempfile.mktemp(suffix=".json")

    def env(role, extra=None):
        e = dict(os.environ)
        e.update({"DMLC_ROLE": role, "DMLC_NUM_WORKER": str(args.workers),
                  "DMLC_NUM_SERVER": str(args.servers), "DMLC_PS_ROOT_URI": "127.0.0.1",
                  "DMLC_PS_ROOT_PORT": str(port), "DMLC_NODE_HOST": "127.0.0.1",
                  "FERRY_LOG_LEVEL": "WARNING", "OMP_NUM_THREADS": "1"})
        e.update(extra or {})
        return e

    procs = [subprocess.Popen([os.path.join(BIN, "ferry-scheduler")], env=env("scheduler"))]
    procs += [subprocess.Popen([os.path.join(BIN, "ferry-server")], env=env("server"))
              for _ in range(args.servers)]
    forward = ["--rows", str(args.rows), "--dim", str(args.dim), "--fraction", str(args.fraction),
               "--iters", str(args.iters), "--out", out, "--worker"]
    workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + forward,
                                env=env("worker", {"DMLC_WORKER_ID": str(w)}))
               for w in range(args.workers)]
    try:
        for w in workers:
            if w.wait(timeout=900) != 0:
                raise SystemExit("a worker failed")
        for q in procs:
            q.wait(timeout=60)
    finally:
        for q in procs + workers:
            if q.poll() is None:
                q.kill()
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    dense_bytes = args.rows * args.dim * 4
    count = max(1, int(args.rows * args.fraction))
    print(f"tensor [{args.rows}, {args.dim}] float32 ({dense_bytes / 2**20:.0f} MiB), "
          f"{args.workers} workers x {args.servers} servers, loopback; rows: {count} "
          f"({args.fraction:.2%}) per worker per call")
    print("| operation | median ms | min ms | bytes sent by a worker per call |")
    print("|---|---|---|---|")
    print(f"| dense push_pull of the whole tensor | {r['dense']['median_ms']:.1f} | "
          f"{r['dense']['min_ms']:.1f} | {r['dense']['bytes_sent']} |")
    print(f"| push_pull_rows of {args.fraction:.0%} of the rows | {r['rows']['median_ms']:.1f} | "
          f"{r['rows']['min_ms']:.1f} | {r['rows']['bytes_sent']} |")
    print(f"speed-up {r['dense']['median_ms'] / r['rows']['median_ms']:.1f}x, "
          f"bytes {r['dense']['bytes_sent'] / r['rows']['bytes_sent']:.0f}x fewer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
