#!/usr/bin/python3
"""hybrid_bench: a pipeline + data-parallel job's traffic on an emulated cluster, under each
scheduling policy, against the iteration's lower bound (docs/benchmarks.md, "Hybrid
parallel training").

    FERRY_BIN=build/bin bench/hybrid_bench.py --pipeline bench/workloads/vgg16_pipeline.json \\
        --hosts 4 --rate 1gbit --policies fifo,credit,trirace --repeats 5 > out.txt

The job is described by a pipeline file (the format ferry-sim --pipeline reads too,
docs/simulation.md): S stages, each with its forward and backward time per micro-batch and
its gradient tensors' bytes; M micro-batches; the activation's bytes; weight stashing or not.
--hosts workers, one per host (scripts/netns-cluster, every link shaped to --rate both ways),
each with a colocated server (scripts/ferry-run). Rank r is stage r // R, replica r % R
(R = hosts / S). Every iteration each stage runs 1F1B: F(k) waits for activation k from the
stage before, computes (sleeps) and sends its activation on (ferry.torch.isend, priority -k);
B(k) waits for gradient k from the stage after, computes and sends it back. After its last
backward every worker pushes the rows of each stage's embedding table ("sparse_rows": K
random row ids, values zeros, push_pull_rows_async; a global operation, so the workers of
other stages call it with no rows; as urgent as the table's stage's first tensor), then the
stage averages every tensor in its process set (allreduce_async_, process_set). An
iteration ends when its sends were received and, with stashing (PipeDream-2BW), the
previous iteration's averages and rows are back (otherwise its own). No real model runs:
the compute is a sleep, the tensors are zeros, so the figures are the network's and Ferry's.

Each repeat runs one job per policy, the policies' order rotating per repeat (interleaved),
--warmup untimed and --iterations timed iterations each; a job's figure is worker 0's median
iteration. Printed: every job, then per policy the median [min - max] over repeats, the ratio
to fifo, and the lower bound (the critical path with each link busy only for its own bytes:
the 1F1B schedule with every send at the link's rate and nothing else on it, and the busiest
link's bytes per iteration, partitions and rows spread evenly over the servers); with --sim,
ferry-sim's prediction of each policy and its own bound beside them.

Needs root and `ip netns` (netns-cluster exits 2 otherwise). The hosts share this machine's
CPUs: keep the links slow enough that the network, not the CPU, decides.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
NETNS = os.path.join(ROOT, "scripts", "netns-cluster")
FERRY_RUN = os.path.join(ROOT, "scripts", "ferry-run")


def load(path):
    with open(path) as f:
        spec = json.load(f)
    for key in ("micro_batches", "activation_bytes", "stash", "stages"):
        if key not in spec:
            raise SystemExit("hybrid_bench: %s has no '%s'" % (path, key))
    return spec


# ----------------------------------------------------------------------------- a worker

def row_words(table, byte_scale):
    """Float32 values per row of a table after --byte-scale (as ferry-sim scales them)."""
    return max(1, int(table["row_bytes"] * byte_scale) // 4)


def tables_of(spec):
    """(stage, sparse_rows) of every stage with an embedding table, in stage order."""
    return [(t, st["sparse_rows"]) for t, st in enumerate(spec["stages"]) if "sparse_rows" in st]


def worker(args):
    """One rank of the job (under ferry-run): prints its iteration times as JSON."""
    import torch
    import ferry.torch as hvd
    spec = load(args.pipeline)
    hvd.init()
    stages, m = spec["stages"], spec["micro_batches"]
    n = len(stages)
    rank, size = hvd.rank(), hvd.size()
    replicas = size // n
    s = rank // replicas
    sets = [hvd.add_process_set(list(range(t * replicas, (t + 1) * replicas))) for t in range(n)]
    stage = stages[s]
    words = max(1, int(spec["activation_bytes"] * args.byte_scale) // 4)
    act_out = [torch.zeros(words) for _ in range(m)]
    act_in = [torch.empty(words) for _ in range(m)]
    grad_out = [torch.zeros(words) for _ in range(m)]
    grad_in = [torch.empty(words) for _ in range(m)]
    # Two versions of the gradients: with stashing, an iteration's averages are in flight
    # while the next one's start.
    versions = [[torch.zeros(max(1, int(b * args.byte_scale) // 4)) for b in stage["tensors"]]
                for _ in range(2)]
    # Every table, on every worker (push_pull_rows has no process sets): this stage's with
    # its rows, the others' with none; each as urgent as its stage's first tensor, whose
    # priority is the catalog's default, -id, with ids from ProcessSetFirstId(set) = set << 24
    # (worker/tensor_catalog.h). Two names per table, as the gradients have two versions:
    # with stashing, an iteration's rows may still be on their way when the next one's go.
    rng = torch.Generator().manual_seed(rank)
    tables = [("stage%d.rows" % t, table["table_rows"],
               torch.zeros(table["rows"] if t == s else 0, row_words(table, args.byte_scale)),
               -(sets[t].process_set_id << 24)) for t, table in tables_of(spec)]

    def push_rows(it):
        return [hvd.push_pull_rows_async(
                    values, torch.randint(table_rows, (values.shape[0],), generator=rng),
                    "%s.v%d" % (name, it % 2), num_rows=table_rows, priority=priority)
                for name, table_rows, values, priority in tables]

    forward_s = stage["forward_ms"] * args.compute_scale / 1000.0
    backward_s = stage["backward_ms"] * args.compute_scale / 1000.0
    prev, nxt = rank - replicas, rank + replicas

    def iteration(it, pending):
        recv_act = [hvd.irecv(act_in[k], prev, tag=k) for k in range(m)] if s > 0 else None
        recv_grad = [hvd.irecv(grad_in[k], nxt, tag=m + k) for k in range(m)] if s < n - 1 else None
        sends = []

        def forward(k):
            if recv_act:
                hvd.synchronize(recv_act[k])
            time.sleep(forward_s)
            if s < n - 1:
                sends.append(hvd.isend(act_out[k], nxt, tag=k, priority=-k))

        def backward(k):
            if recv_grad:
                hvd.synchronize(recv_grad[k])
            time.sleep(backward_s)
            if s > 0:
                sends.append(hvd.isend(grad_out[k], prev, tag=m + k, priority=-k))

        warm = min(n - 1 - s, m)
        for k in range(warm):
            forward(k)
        for k in range(warm, m):
            forward(k)
            backward(k - warm)
        for k in range(m - warm, m):
            backward(k)
        # the tables' rows first; tensors declared in forward order: the first most urgent
        # (each version in turn)
        handles = push_rows(it) + [
            hvd.allreduce_async_(t, name="stage%d.t%d.v%d" % (s, i, it % 2), process_set=sets[s])
            for i, t in enumerate(versions[it % 2])]
        for h in sends:
            hvd.synchronize(h)
        waited = pending if spec["stash"] else handles
        for h in waited:
            hvd.synchronize(h)
        return handles if spec["stash"] else []

    times, pending = [], []
    for it in range(args.warmup + args.iterations):
        start = time.perf_counter()
        pending = iteration(it, pending)
        if args.step_boundary:
            hvd.step_boundary()  # as DistributedOptimizer.step does
        if it >= args.warmup:
            times.append((time.perf_counter() - start) * 1000.0)
    for h in pending:
        hvd.synchronize(h)
    stats = hvd.ops._stats()
    counters = {k: stats.get(k, 0) for k in ("van_link_flows", "van_link_held", "sender_thread_batches")}
    print("HYBRID " + json.dumps({"rank": rank, "iterations_ms": times, "counters": counters,
                                  "scheduling": hvd.scheduling()}), flush=True)
    hvd.shutdown()


# ----------------------------------------------------------------------------- the bound

def pipe_time(spec, rate_bps, byte_scale, compute_scale, latency_s=0.0):
    """The 1F1B schedule's length with every send at the link's rate and nothing else on
    the links: when the last compute or send of any stage ends."""
    stages, m = spec["stages"], spec["micro_batches"]
    n = len(stages)
    transfer = spec["activation_bytes"] * byte_scale * 8 / rate_bps + latency_s
    ops = []
    for s in range(n):
        warm = min(n - 1 - s, m)
        order = [("F", k) for k in range(warm)]
        for k in range(warm, m):
            order += [("F", k), ("B", k - warm)]
        order += [("B", k) for k in range(m - warm, m)]
        ops.append(order)
    end = {}
    free = [0.0] * n
    position = [0] * n
    last = 0.0
    while any(position[s] < len(ops[s]) for s in range(n)):
        progressed = False
        for s in range(n):
            while position[s] < len(ops[s]):
                kind, k = ops[s][position[s]]
                if kind == "F":
                    dep = (s - 1, "F", k) if s > 0 else None
                    compute = stages[s]["forward_ms"]
                else:
                    dep = (s + 1, "B", k) if s < n - 1 else None
                    compute = stages[s]["backward_ms"]
                if dep is not None and dep not in end:
                    break
                ready = end[dep] + transfer if dep is not None else 0.0
                start = max(free[s], ready)
                end[(s, kind, k)] = start + compute * compute_scale / 1000.0
                free[s] = end[(s, kind, k)]
                sends = (kind == "F" and s < n - 1) or (kind == "B" and s > 0)
                last = max(last, free[s] + (transfer if sends else 0.0))
                position[s] += 1
                progressed = True
        if not progressed:
            raise SystemExit("hybrid_bench: the schedule deadlocks (a bug)")
    return last


def rows_bytes(spec, hosts, byte_scale, h):
    """Host h's (up, down) bytes per iteration of the tables' push_pull_rows: its worker's
    rows (ids and values) to the other hosts' servers and their sums back, its server's
    sums to and rows from the other hosts' workers of each table's stage; the rows spread
    evenly over the `hosts` colocated servers."""
    replicas = hosts // len(spec["stages"])
    up = down = 0.0
    for t, table in tables_of(spec):
        width = row_words(table, byte_scale) * 4
        push, answer = table["rows"] * (8 + width), table["rows"] * width
        own = h // replicas == t
        others = replicas - 1 if own else replicas  # the stage's workers on other hosts
        up += (push * (hosts - 1) / hosts if own else 0) + answer / hosts * others
        down += (answer * (hosts - 1) / hosts if own else 0) + push / hosts * others
    return up, down


def link_seconds(spec, hosts, rate_bps, byte_scale):
    """The busiest link's bytes per iteration over its rate (each direction; sends plus
    pushes to and sums from the other hosts' servers, every set's bytes spread evenly over
    the `hosts` colocated servers, plus the tables' rows), and the push_pulls' and rows'
    alone."""
    stages, m = spec["stages"], spec["micro_batches"]
    n, act = len(stages), spec["activation_bytes"] * byte_scale
    replicas = hosts // n
    set_bytes = [sum(st["tensors"]) * byte_scale for st in stages]
    busiest = grads = 0.0
    for h in range(hosts):
        s = h // replicas
        sends_out = m * act * ((s < n - 1) + (s > 0))
        own = set_bytes[s]
        # pushes to the other servers + this server's sums to the other members of every set
        share = [b / hosts for b in set_bytes]
        gradient = own * (hosts - 1) / hosts + share[s] * (replicas - 1) + sum(
            share[t] * replicas for t in range(n) if t != s)
        rows = max(rows_bytes(spec, hosts, byte_scale, h))
        busiest = max(busiest, sends_out + gradient + rows)
        grads = max(grads, gradient + rows)
    return busiest * 8 / rate_bps, grads * 8 / rate_bps


def lower_bound(spec, hosts, rate_bps, byte_scale, compute_scale):
    pipe = pipe_time(spec, rate_bps, byte_scale, compute_scale)
    busiest, grads = link_seconds(spec, hosts, rate_bps, byte_scale)
    # Without stashing the averages follow the pipeline; pipe + grads would not be a bound
    # (a stage's averages may start while another stage still computes), the larger is.
    return max(pipe, busiest) if spec["stash"] else max(pipe, grads)


def rate_bps(rate):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * factor
    raise SystemExit("hybrid_bench: --rate %r: expected e.g. 1gbit, 200mbit" % rate)


# ----------------------------------------------------------------------------- the driver

def job(args, policy):
    """One job on the emulated hosts under `policy`: worker 0's iteration times (ms)."""
    procs = []
    common = ["--nnodes", str(args.hosts), "--servers-per-node", "1", "--master-addr",
              "198.18.1.1", "--master-port", "29400"]
    for node in range(args.hosts):
        cmd = [NETNS, "exec", "worker%d" % node, "--", sys.executable, FERRY_RUN] + common + [
            "--node-rank", str(node), "--nproc-per-node", "1", os.path.abspath(__file__),
            "--worker", "--pipeline", args.pipeline, "--iterations", str(args.iterations),
            "--warmup", str(args.warmup), "--byte-scale", str(args.byte_scale),
            "--compute-scale", str(args.compute_scale)] + (
            ["--step-boundary"] if args.step_boundary else [])
        env = dict(os.environ, FERRY_LOG_LEVEL="WARNING", DMLC_NODE_HOST="198.18.1.%d" % (node + 1))
        env.pop("FERRY_SCHEDULING_POLICY", None)
        if policy != "default":
            env["FERRY_SCHEDULING_POLICY"] = policy
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=args.job_timeout)[0] for p in procs]
    codes = [p.returncode for p in procs]
    if args.keep_logs:
        for node, out in enumerate(outputs):
            with open(os.path.join(args.keep_logs, "%s-node%d.log" % (policy, node)), "a") as f:
                f.write(out)
    if any(codes):
        sys.stderr.write("\n".join(outputs))
        raise SystemExit("hybrid_bench: a job under %s failed (exit codes %s)" % (policy, codes))
    for line in outputs[0].splitlines():
        if "HYBRID " in line:
            result = json.loads(line.split("HYBRID ", 1)[1])
            return result["iterations_ms"], result["scheduling"]
    raise SystemExit("hybrid_bench: worker 0 printed no result:\n" + outputs[0][-3000:])


def simulate(args, policy):
    """ferry-sim's prediction and bound for `policy` (ms), or None where it cannot."""
    sim = os.path.join(os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin")), "ferry-sim")
    cmd = [sim, "--pipeline", args.pipeline, "--workers", str(args.hosts), "--colocate",
           "--rate", args.rate, "--format", "json", "--byte-scale", str(args.byte_scale),
           "--compute-scale", str(args.compute_scale), "--iterations", str(args.iterations),
           "--warmup", str(args.warmup)] + (["--step-boundary"] if args.step_boundary else [])
    if policy != "default":
        cmd += ["--env", "FERRY_SCHEDULING_POLICY=" + policy]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def inner(args):
    policies = args.policies.split(",")
    runs = {p: [] for p in policies}
    for repeat in range(args.repeats):
        order = policies[repeat % len(policies):] + policies[:repeat % len(policies)]
        for policy in order:
            times, scheduling = job(args, policy)
            runs[policy].append(statistics.median(times))
            print("repeat %d %-8s median %.1f ms  (%s)  ran as %s, frames %d" % (
                repeat, policy, runs[policy][-1], ", ".join("%.0f" % t for t in times),
                scheduling["policy"], scheduling["frame_bytes"]), flush=True)
    spec = load(args.pipeline)
    bound = lower_bound(spec, args.hosts, rate_bps(args.rate), args.byte_scale, args.compute_scale) * 1000
    print("\nlower bound: %.1f ms (1F1B at the link's rate: %.1f ms; busiest link: %.1f ms)"
          % (bound, pipe_time(spec, rate_bps(args.rate), args.byte_scale, args.compute_scale) * 1000,
             link_seconds(spec, args.hosts, rate_bps(args.rate), args.byte_scale)[0] * 1000))
    reference = statistics.median(runs[policies[0]])
    print("| policy | iteration ms, median [min - max] | %s / policy | policy / bound |%s"
          % (policies[0], " ferry-sim ms | sim / measured |" if args.sim else ""))
    print("|---|---|---|---|%s" % ("---|---|" if args.sim else ""))
    for policy in policies:
        med = statistics.median(runs[policy])
        row = "| %s | %.1f [%.1f - %.1f] | %.3f | %.3f |" % (
            policy, med, min(runs[policy]), max(runs[policy]), reference / med, med / bound)
        if args.sim:
            sim = simulate(args, policy)
            # the mean: with stashing the iterations may alternate (docs/simulation.md)
            row += (" %.1f | %.3f |" % (sim["mean_ms"], sim["mean_ms"] / med)
                    if sim and "mean_ms" in sim else " - | - |")
        print(row, flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pipeline", default=os.path.join(ROOT, "bench", "workloads", "vgg16_pipeline.json"))
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--rate", default="1gbit", help="every host's link, tc syntax")
    p.add_argument("--policies", default="fifo,credit,trirace",
                   help="FERRY_SCHEDULING_POLICY values, comma-separated, the first the "
                        "reference; 'default': the variable unset")
    p.add_argument("--step-boundary", action="store_true",
                   help="every worker calls step_boundary after each iteration, as "
                        "DistributedOptimizer.step does (partitions sized by the link at the "
                        "third; the default policy takes trirace's frames there)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--byte-scale", type=float, default=0.125,
                   help="every tensor's and the activation's bytes, and a table's rows' width, "
                        "times this")
    p.add_argument("--compute-scale", type=float, default=1.0)
    p.add_argument("--tcp-limit-output-bytes", type=int, default=0,
                   help="net.ipv4.tcp_limit_output_bytes on every host (netns-cluster's; 0: the "
                        "kernel's): a host's queue as short as a NIC's byte queue limits keep it")
    p.add_argument("--keep-logs", default="", help="a folder: every job's output, per policy and node")
    p.add_argument("--sim", action="store_true", help="print ferry-sim's predictions beside")
    p.add_argument("--job-timeout", type=int, default=600)
    p.add_argument("--timeout", type=int, default=5400)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args()
    if rest:
        p.error("unknown arguments: %s" % " ".join(rest))
    args.pipeline = os.path.abspath(args.pipeline)
    if args.worker:
        return worker(args)
    spec = load(args.pipeline)
    if args.hosts % len(spec["stages"]):
        p.error("--hosts %d is not a multiple of the %d stages" % (args.hosts, len(spec["stages"])))
    if args.inner:
        return inner(args)
    cmd = [NETNS, "run", "--timeout", str(args.timeout), "--workers", str(args.hosts),
           "--servers", "0", "--rate", args.rate] + (
               ["--tcp-limit-output-bytes", str(args.tcp_limit_output_bytes)]
               if args.tcp_limit_output_bytes else []) + [
           "--", sys.executable, os.path.abspath(__file__),
           "--inner"] + [a for a in sys.argv[1:]]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
