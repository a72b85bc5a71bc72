#!/usr/bin/python3
"""flow_shares: how a worker's connections to the servers shared its link in one push_pull.

For each worker and each remote server: the bytes the worker pushed there in one timed
iteration, when the last of them was acknowledged (relative to the iteration's first
push), and that connection's rate; then the spread of those rates within the worker (the
fastest over the slowest connection). Reads a measured run's Chrome traces
(FERRY_TRACE_DIR: ferry-worker-<rank>.json) or ferry-sim --parts-out files (worker 0).

  bench/flow_shares.py --trace-dir /tmp/t            # measured (ferry-perf), every worker
  bench/flow_shares.py --sim-parts /tmp/parts.json     # the model's worker 0
  bench/flow_shares.py --stages --trace-dir /tmp/t     # a training run (ferry-train-sim)

The server on a worker's own host (shared memory: pushes acknowledged at once) is left out.
One push_pull (ferry-perf's loop): the iteration taken is the second-last (the last may be
cut). --stages, for training runs whose pushes spread over backward: per connection, the
mean time from a partition's hand-over to the transport to its acknowledgement ("push")
and from there to its sum ("server": waiting for the other workers), over the last two
timed iterations (the trace's step marks; the model's iteration numbers).
"""

import argparse
import collections
import glob
import json
import os
import statistics


def measured(path):
    events = json.load(open(path))["traceEvents"]
    parts, ends = {}, collections.defaultdict(dict)
    for e in events:
        if e.get("cat") != "partition":
            continue
        if e["ph"] == "b" and "args" in e:
            parts[e["id"]] = {"server": e["args"]["server"], "bytes": e["args"]["bytes"],
                              "ready": e["ts"]}
        elif e["ph"] == "e" and e["name"] in ("queue", "push", "server"):
            ends[e["id"]][e["name"]] = e["ts"]
    out = []
    for i, p in parts.items():
        if "server" in ends[i]:
            out.append(dict(p, sent=ends[i]["queue"], acked=ends[i]["push"],
                            result=ends[i]["server"]))
    return out


def simulated(path):
    return [{"server": p["server"], "bytes": p["bytes"], "ready": p["ready_us"],
             "sent": p["sent_us"], "acked": p["acked_us"], "result": p["result_us"],
             "iteration": p["iteration"]}
            for p in json.load(open(path))["parts"]]


def iteration(parts):
    """The second-last group of partitions made ready together (one push_pull)."""
    parts = sorted(parts, key=lambda p: p["ready"])
    groups = [[parts[0]]]
    for p in parts[1:]:
        if p["ready"] - groups[-1][-1]["ready"] > 200000:
            groups.append([])
        groups[-1].append(p)
    return groups[-2] if len(groups) > 1 else groups[-1]


def shares(parts):
    """{server: (MB, last ack s, MB/s)} for the remote servers of one iteration."""
    g = iteration(parts)
    t0 = min(p["ready"] for p in g)
    by = collections.defaultdict(list)
    for p in g:
        by[p["server"]].append(p)
    out = {}
    for s, ps in by.items():
        last = max(p["acked"] for p in ps) - t0
        if last < 50000:  # acknowledged at once: the worker's own host (shared memory)
            continue
        mb = sum(p["bytes"] for p in ps) / 1e6
        out[s] = (mb, last / 1e6, mb / (last / 1e6))
    end = (max(p["result"] for p in g) - t0) / 1e6
    return out, end


def report(name, parts):
    flows, end = shares(parts)
    rates = [r for _, _, r in flows.values()]
    spread = max(rates) / min(rates)
    cells = "  ".join(f"s{s}: {mb:.1f} MB by {t:.2f} s = {r:.1f} MB/s"
                      for s, (mb, t, r) in sorted(flows.items()))
    print(f"{name}: iteration {end:.2f} s; connections {cells}; fastest/slowest {spread:.2f}")
    return {"name": name, "iteration_s": end, "spread": spread,
            "flows": {str(s): {"mb": mb, "last_ack_s": t, "mb_per_s": r}
                      for s, (mb, t, r) in flows.items()}}


def steps(path):
    return sorted(e["ts"] for e in json.load(open(path))["traceEvents"]
                  if e.get("ph") == "i" and e["name"].startswith("step"))


def report_stages(name, parts):
    by = collections.defaultdict(list)
    for p in parts:
        by[p["server"]].append(p)
    push = {s: statistics.mean(p["acked"] - p["sent"] for p in ps) / 1e3 for s, ps in by.items()}
    wait = {s: statistics.mean(p["result"] - p["acked"] for p in ps) / 1e3 for s, ps in by.items()}
    # The own host's connection (shared memory: acknowledged at once) left out.
    med = statistics.median(push.values())
    remote = [v for v in push.values() if v > 0.1 * med]
    spread = max(remote) / min(remote)
    print(f"{name}: push ms by server " + " ".join(f"{push[s]:.0f}" for s in sorted(push)) +
          f"; slowest/fastest connection {spread:.2f}; server wait ms " +
          " ".join(f"{wait[s]:.0f}" for s in sorted(wait)))
    return {"name": name, "spread": spread, "push_ms": {str(s): v for s, v in push.items()},
            "server_wait_ms": {str(s): v for s, v in wait.items()}}


def stages_rows(a):
    rows = []
    for d in a.trace_dir:
        for path in sorted(glob.glob(os.path.join(d, "ferry-worker-*.json"))):
            st = steps(path)
            lo, hi = st[-3], st[-1]
            rows.append(report_stages(path, [p for p in measured(path) if lo <= p["ready"] < hi]))
    for path in a.sim_parts:
        parts = simulated(path)
        last = max(p["iteration"] for p in parts)
        rows.append(report_stages(path, [p for p in parts if p["iteration"] >= last - 2]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace-dir", action="append", default=[])
    p.add_argument("--sim-parts", action="append", default=[])
    p.add_argument("--stages", action="store_true", help="a training run: per-connection stages")
    p.add_argument("--json", help="write the figures here too")
    a = p.parse_args()
    if a.stages:
        rows = stages_rows(a)
        print(f"median slowest/fastest: {statistics.median(r['spread'] for r in rows):.2f}")
        if a.json:
            json.dump(rows, open(a.json, "w"), indent=1)
        return
    rows = []
    for d in a.trace_dir:
        for path in sorted(glob.glob(os.path.join(d, "ferry-worker-*.json"))):
            rows.append(report(path, measured(path)))
    for path in a.sim_parts:
        rows.append(report(path, simulated(path)))
    if rows:
        print(f"median fastest/slowest: {statistics.median(r['spread'] for r in rows):.2f}")
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
