#!/usr/bin/python3
"""compare_builds: the same benchmarks on two builds of Ferry, interleaved, side by side.

Two source roots, each with its own build (<root>/build/bin, <root>/build/python) and its
own scripts: BEFORE (--before-root) and AFTER (--after-root). For each of --repeats rounds,
every selected benchmark runs on BEFORE then on AFTER (perf, torch, trainsim, latency4k), so
slow drift of the machine hits both builds alike:

  perf      ferry-perf push_pull on <root>/scripts/local-cluster (2 servers + 2 workers,
            loopback), 4 KiB, 64 KiB, 1 MiB (--perf-small-iters timed iterations) and
            16 MiB, 256 MiB (--perf-large-iters): algorithm bandwidth per size (GB = 1e9 B).
  gloo      the reference of the shared-memory lane's bandwidth goal: bench/gloo_allreduce.py, torch.distributed's gloo
            allreduce between 2 local processes at 16 MiB and 256 MiB (--perf-large-iters); it
            does not use Ferry and runs beside each build only to sample the machine alike.
  torch     <root>/examples/benchmark_torch.py --compare N (2 workers x 2 servers, Ferry,
            Ferry + CrossBarrier, DDP-gloo and compute only in the same processes):
            median samples/s per worker and the median per-repeat Ferry/DDP-gloo ratio.
            DDP-gloo and compute only do not use Ferry: they are controls for the machine.
  trainsim  ferry-train-sim on an emulated cluster of network namespaces
            (<root>/bench/train_sim_bench.py: needs root and `ip netns`), --trainsim-model (resnet50),
            2 workers, 2 servers, 1gbit links: the slowest worker's median iteration time
            and median / LB1. With --trainsim-mode loopback: on <root>/scripts/local-cluster
            instead, the slowest worker's mean iteration time.
  latency4k the latency goal: a 4 KiB push_pull on loopback TCP, 2 workers x 2 servers,
            within 3x a raw ZeroMQ 4 KiB round trip measured in the same run. Per repeat and
            build: ferry-perf -b 4K -e 4K -n --latency-perf-iters (20 warm-up) on
            <root>/scripts/local-cluster -s 2 -w 2, its time per push_pull (the mean over the
            timed ones, as ferry-perf prints it: time_us), twice: each push_pull after a
            barrier (which adds the barrier's release skew between the workers), and back to
            back (--nobarrier, as a training loop runs them; the goal's figure; skipped on a
            build whose ferry-perf has no --barrier flag), then
            <root>/build/bin/ferry-zmq-stream --pingpong --message_bytes 4096 --messages
            --latency-round-trips (its own 20 warm-up): the raw round trip's p50 and p99, and
            Ferry's time / the raw p50 (the goal: <= 3). The header says, per build, whether the
            median ratio meets the goal. Needs ferry-zmq-stream built besides ferry-perf.
            Also the raw round trip over ipc:// (a Unix socket) and Ferry's time / its p50:
            the goal for the shared-memory lane (<= 3).

--before-env / --after-env NAME=VALUE set the environment of one side's every run: with the
same root on both sides they compare a knob within one build (FERRY_SHM=0 against the lane).

Per metric it prints the median and [min-max] over the repeats of each build, after/before
(of the medians) and a verdict: "within 5%" if |after/before - 1| <= 0.05, else "ranges
overlap" if the two min-max ranges overlap, else "DIFFERS". The Markdown table goes to
stdout and to --out.

  /usr/bin/python3 bench/compare_builds.py --before-root /work/wt-before --after-root /work/main \\
      --repeats 5 --out bench/results/compare_builds.md
  /usr/bin/python3 bench/compare_builds.py --repeats 1 --only perf,trainsim --out /tmp/cmp.md

One build alone (e.g. latency4k's goal for the tree at hand): give the same root as both; each
repeat then measures it twice, and after/before only shows the noise between the two runs.

  /usr/bin/python3 bench/compare_builds.py --before-root /work/main --after-root /work/main \\
      --repeats 3 --only latency4k --out /tmp/latency4k.md
"""

import argparse
import ast
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = ("perf", "gloo", "torch", "trainsim", "latency4k")
# The programs in <root>/build/bin each benchmark needs.
PROGRAMS = {"perf": ("ferry-scheduler", "ferry-server", "ferry-perf"),
            "torch": ("ferry-scheduler", "ferry-server"),
            "trainsim": ("ferry-scheduler", "ferry-server", "ferry-train-sim"),
            "latency4k": ("ferry-scheduler", "ferry-server", "ferry-perf", "ferry-zmq-stream"),
            "gloo": ()}
LATENCY4K_GOAL = 3.0    # Ferry's 4 KiB push_pull within 3x a raw ZeroMQ round trip
LATENCY4K_RATIO = "Ferry push_pull mean, back to back / raw ZeroMQ round trip p50 (goal <= 3, lower is better)"
LATENCY4K_BARRIER_RATIO = "Ferry push_pull mean, each after a barrier / raw ZeroMQ round trip p50 (lower is better)"
LATENCY4K_IPC_RATIO = ("Ferry push_pull mean, back to back / raw ZeroMQ ipc:// round trip p50 "
                       "(goal <= 3 on the shared-memory lane, lower is better)")
PY = "/usr/bin/python3"

# ferry-perf sizes: 4 KiB .. 256 MiB by factors of 16, in two runs so the small sizes get
# enough iterations and the large ones stay short.
PERF_SMALL = ("4K", "1M")       # 4 KiB, 64 KiB, 1 MiB
PERF_LARGE = ("16M", "256M")    # 16 MiB, 256 MiB
PERF_FACTOR = "16"


def say(text):
    print("[compare_builds] " + text, file=sys.stderr, flush=True)


class Build:
    def __init__(self, label, root, extra_env=None):
        self.label = label
        self.root = os.path.abspath(root)
        self.extra_env = dict(extra_env or {})  # --before-env / --after-env: every run's
        self.bin = os.path.join(self.root, "build", "bin")
        self.python = os.path.join(self.root, "build", "python")

    def head(self):
        r = subprocess.run(["git", "-C", self.root, "rev-parse", "--short", "HEAD"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return r.stdout.strip() or "?"

    def fingerprint(self):
        """HEAD and the modification times of the programs used: changes if someone rebuilds."""
        files = [os.path.join(self.bin, b) for b in ("ferry-scheduler", "ferry-server", "ferry-perf",
                                                     "ferry-train-sim", "ferry-zmq-stream")]
        files += [os.path.join(self.python, "ferry", f) for f in sorted(os.listdir(os.path.join(self.python, "ferry")))
                  if f.endswith(".so")] if os.path.isdir(os.path.join(self.python, "ferry")) else []
        return (self.head(), tuple((f, os.path.getmtime(f) if os.path.exists(f) else None) for f in files))

    def env(self, extra=None):
        env = dict(os.environ, FERRY_BIN=self.bin, FERRY_LOG_LEVEL="WARNING")
        env.update(self.extra_env)
        env.update(extra or {})
        return env


def run_cmd(cmd, env, timeout, cwd=None):
    """Runs cmd in its own session; returns its stdout+stderr; raises on failure or timeout."""
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 15)
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.communicate()
        raise RuntimeError("timed out after %g s: %s" % (timeout, " ".join(map(str, cmd))))
    if p.returncode != 0:
        raise RuntimeError("exit %d: %s\n%s" % (p.returncode, " ".join(map(str, cmd)), out[-3000:]))
    return out


# ------------------------------------------------------------------ benchmarks
# Each returns {metric name: value}; metric names carry their unit and direction.

def size_name(b):
    return "%d MiB" % (b >> 20) if b >= 1 << 20 else "%d KiB" % (b >> 10)


def bench_perf(build, args):
    res = {}
    for (lo, hi), n, w in ((PERF_SMALL, args.perf_small_iters, 5), (PERF_LARGE, args.perf_large_iters, 1)):
        cmd = [os.path.join(build.root, "scripts", "local-cluster"), "-s", "2", "-w", "2", "--",
               os.path.join(build.bin, "ferry-perf"), "-b", lo, "-e", hi, "-f", PERF_FACTOR, "-n", str(n),
               "-w", str(w), "--format=csv"]
        out = run_cmd(cmd, build.env(), timeout=args.timeout)
        rows = re.findall(r"^\[worker 0\] (\d+),([\d.]+),([\d.]+),(\d+)\s*$", out, re.M)
        if not rows:
            raise RuntimeError("no ferry-perf rows in the output:\n" + out[-2000:])
        for b, _us, gbps, errors in rows:
            if int(errors):
                raise RuntimeError("ferry-perf: %s wrong values at %s bytes" % (errors, b))
            res["push_pull %s: algbw GB/s (higher is better)" % size_name(int(b))] = float(gbps)
    return res


def bench_gloo(build, args):
    """The reference of the shared-memory lane's bandwidth goal: torch.distributed's gloo allreduce of 2 local
    processes over loopback at ferry-perf's large sizes. It does not use Ferry: it runs with
    each build only to sample the machine in the same interleaving."""
    cmd = [PY, os.path.join(build.root, "bench", "gloo_allreduce.py"), "--sizes", "16777216,268435456",
           "-n", str(args.perf_large_iters), "-w", "1", "--format=csv"]
    out = run_cmd(cmd, build.env(), timeout=args.timeout)
    res = {}
    for b, _us, gbps in re.findall(r"^(\d+),([\d.]+),([\d.]+)\s*$", out, re.M):
        res["gloo allreduce %s: algbw GB/s (higher is better)" % size_name(int(b))] = float(gbps)
    if not res:
        raise RuntimeError("no gloo_allreduce rows in the output:\n" + out[-2000:])
    return res


def bench_torch(build, args):
    cmd = [PY, os.path.join(build.root, "examples", "benchmark_torch.py"), "--compare", str(args.torch_compare)]
    cmd += args.torch_args.split()
    out = run_cmd(cmd, build.env({"PYTHONPATH": build.python}), timeout=args.timeout, cwd=build.root)
    m = re.search(r"^\[worker 0\] RAW (\{.*\})\s*$", out, re.M)
    if not m:
        raise RuntimeError("no RAW line in benchmark_torch.py's output:\n" + out[-2000:])
    raw = ast.literal_eval(m.group(1))
    med = {k: statistics.median(v) for k, v in raw.items()}
    ddp = raw["DDP (gloo)"]
    ratio = lambda name: statistics.median([f / d for f, d in zip(raw[name], ddp)])  # noqa: E731
    return {"Ferry: samples/s per worker (higher is better)": med["Ferry"],
            "Ferry / DDP-gloo (higher is better)": ratio("Ferry"),
            "Ferry + CrossBarrier: samples/s per worker (higher is better)": med["Ferry + CrossBarrier"],
            "Ferry + CrossBarrier / DDP-gloo (higher is better)": ratio("Ferry + CrossBarrier"),
            "control, no Ferry: DDP-gloo samples/s per worker": med["DDP (gloo)"],
            "control, no Ferry: compute only samples/s per worker": med["compute only (no communication)"]}


def trainsim_label(args):
    return ("%s x%g bytes, x%g compute, 2 workers + 2 servers" % (args.trainsim_model, args.trainsim_byte_scale,
                                                                 args.trainsim_compute_scale)
            + (", 1gbit links (netns)" if args.trainsim_mode == "netns" else ", loopback"))


def bench_trainsim(build, args):
    label = args.trainsim_model + " " + ("1gbit netns" if args.trainsim_mode == "netns" else "loopback")
    if args.trainsim_mode == "netns":
        with tempfile.NamedTemporaryFile(prefix="compare_builds.", suffix=".json") as f:
            cmd = [PY, os.path.join(build.root, "bench", "train_sim_bench.py"), "--models", args.trainsim_model,
                   "--byte-scale", str(args.trainsim_byte_scale), "--compute-scales", str(args.trainsim_compute_scale),
                   "--workers", "2", "--servers", "2", "--rates", "1gbit", "--iterations", str(args.trainsim_iterations),
                   "--warmup", "1", "--repeats", "1", "--timeout", str(args.timeout), "--bin", build.bin,
                   "--out", f.name]
            run_cmd(cmd, build.env(), timeout=args.timeout + 60)
            with open(f.name) as fh:
                result = json.load(fh)
        [s] = result["summary"]
        return {"%s: median iteration ms (lower is better)" % label: s["median_ms"],
                "%s: median iteration / LB1 (lower is better)" % label: s["median_over_lb1"]}
    workload = os.path.join(build.root, "bench", "workloads", args.trainsim_model + "_layers.csv")
    cmd = [os.path.join(build.root, "scripts", "local-cluster"), "-s", "2", "-w", "2", "--",
           os.path.join(build.bin, "ferry-train-sim"), "--workload", workload, "--json",
           "--iterations", str(args.trainsim_iterations), "--warmup", "1",
           "--byte_scale", str(args.trainsim_byte_scale), "--compute_scale", str(args.trainsim_compute_scale)]
    out = run_cmd(cmd, build.env(), timeout=args.timeout)
    reports = [json.loads(m) for m in re.findall(r"^\[worker \d+\] (\{.*\})\s*$", out, re.M)]
    if len(reports) != 2:
        raise RuntimeError("expected 2 ferry-train-sim reports:\n" + out[-2000:])
    return {"%s: mean iteration ms, slowest worker (lower is better)" % label:
            max(statistics.mean(r["iterations_ms"]) for r in reports)}


def perf_4k_us(build, args, barrier):
    """ferry-perf's mean time per 4 KiB push_pull; None where this build's ferry-perf has no
    --barrier flag (a build before it) and back to back was asked."""
    cmd = [os.path.join(build.root, "scripts", "local-cluster"), "-s", "2", "-w", "2", "--",
           os.path.join(build.bin, "ferry-perf"), "-b", "4K", "-e", "4K", "-n", str(args.latency_perf_iters),
           "-w", "20", "--format=csv"] + ([] if barrier else ["--nobarrier"])
    try:
        out = run_cmd(cmd, build.env(), timeout=args.timeout)
    except RuntimeError as e:
        if not barrier and "unknown command line flag" in str(e):
            return None
        raise
    rows = re.findall(r"^\[worker 0\] (\d+),([\d.]+),([\d.]+),(\d+)\s*$", out, re.M)
    if len(rows) != 1 or int(rows[0][0]) != 4096:
        raise RuntimeError("expected one ferry-perf row of 4096 bytes in the output:\n" + out[-2000:])
    if int(rows[0][3]):
        raise RuntimeError("ferry-perf: %s wrong values at 4096 bytes" % rows[0][3])
    return float(rows[0][1])


def bench_latency4k(build, args):
    """Ferry's 4 KiB push_pull (each after a barrier, and back to back) beside a raw ZeroMQ
    4 KiB round trip, one right after the other."""
    barrier_us = perf_4k_us(build, args, True)
    loop_us = perf_4k_us(build, args, False)
    # --port 0: an ephemeral port, so two runs (or another developer's) never collide.
    cmd = [os.path.join(build.bin, "ferry-zmq-stream"), "--pingpong", "--message_bytes", "4096",
           "--messages", str(args.latency_round_trips), "--warmup", "20", "--port", "0", "--format=csv"]
    out = run_cmd(cmd, build.env(), timeout=args.timeout)
    m = re.search(r"^4096,(\d+),([\d.]+),([\d.]+),([\d.]+),([\d.]+)\s*$", out, re.M)
    if not m:
        raise RuntimeError("no ferry-zmq-stream --pingpong row in the output:\n" + out[-2000:])
    p50, p99 = float(m.group(2)), float(m.group(3))
    # The same over ipc:// (a Unix socket: what a same-host transport costs without TCP).
    ipc = cmd + ["--endpoint", "ipc://@ferry-bench-%d-%d" % (os.getpid(), int(time.time() * 1e6))]
    out = run_cmd(ipc, build.env(), timeout=args.timeout)
    m = re.search(r"^4096,(\d+),([\d.]+),([\d.]+),([\d.]+),([\d.]+)\s*$", out, re.M)
    if not m:
        raise RuntimeError("no ferry-zmq-stream --pingpong ipc:// row in the output:\n" + out[-2000:])
    ipc_p50 = float(m.group(2))
    result = {"raw ZeroMQ ipc:// 4 KiB round trip p50 us (lower is better)": ipc_p50,"Ferry 4 KiB push_pull us, mean, each after a barrier (lower is better)": barrier_us,
              "raw ZeroMQ 4 KiB round trip p50 us (lower is better)": p50,
              "raw ZeroMQ 4 KiB round trip p99 us (lower is better)": p99,
              LATENCY4K_BARRIER_RATIO: barrier_us / p50}
    if loop_us is not None:
        result["Ferry 4 KiB push_pull us, mean, back to back (lower is better)"] = loop_us
        result[LATENCY4K_RATIO] = loop_us / p50
        result[LATENCY4K_IPC_RATIO] = loop_us / ipc_p50
    return result


RUNNERS = {"perf": bench_perf, "gloo": bench_gloo, "torch": bench_torch, "trainsim": bench_trainsim,
           "latency4k": bench_latency4k}


# ------------------------------------------------------------------ the table
def verdict(b, a):
    ratio = statistics.median(a) / statistics.median(b) if statistics.median(b) else float("inf")
    if abs(ratio - 1) <= 0.05:
        return ratio, "within 5%"
    if max(min(a), min(b)) <= min(max(a), max(b)):
        return ratio, "ranges overlap"
    return ratio, "DIFFERS"


def fmt(values):
    if not values:
        return "-"
    g = lambda x: "%.4g" % x  # noqa: E731
    return "%s [%s-%s]" % (g(statistics.median(values)), g(min(values)), g(max(values)))


def table(results, order):
    """results: {bench: {metric: {label: [values]}}}."""
    lines = ["| benchmark | metric | before: median [min-max] | after: median [min-max] | after/before | verdict |",
             "|---|---|---:|---:|---:|---|"]
    for bench in order:
        for metric, by in results.get(bench, {}).items():
            b, a = by.get("before", []), by.get("after", [])
            if b and a:
                ratio, v = verdict(b, a)
                rs = "%.3f" % ratio
            else:
                rs, v = "-", "missing runs"
            lines.append("| %s | %s | %s | %s | %s | %s |" % (bench, metric, fmt(b), fmt(a), rs, v))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-root", default="/work/wt-before")
    ap.add_argument("--after-root", default=ROOT)
    ap.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of every run of BEFORE (repeatable): e.g. FERRY_SHM=0 with the "
                         "same root on both sides compares a knob within one build")
    ap.add_argument("--after-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of every run of AFTER (repeatable)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=",".join(BENCHMARKS), help="comma list of " + ",".join(BENCHMARKS))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "compare_builds.md"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per benchmark run")
    ap.add_argument("--perf-small-iters", type=int, default=50, help="timed push_pulls at 4 KiB-1 MiB")
    ap.add_argument("--perf-large-iters", type=int, default=5, help="timed push_pulls at 16 MiB and 256 MiB")
    ap.add_argument("--torch-compare", type=int, default=3, help="benchmark_torch.py --compare N")
    ap.add_argument("--torch-args", default="--model mlp", help="more benchmark_torch.py arguments")
    ap.add_argument("--trainsim-mode", choices=("netns", "loopback"), default="netns")
    ap.add_argument("--trainsim-model", default="resnet50", help="vgg16, resnet50 or bert_base")
    ap.add_argument("--trainsim-byte-scale", type=float, default=0.05)
    ap.add_argument("--trainsim-compute-scale", type=float, default=1.0)
    ap.add_argument("--trainsim-iterations", type=int, default=5)
    ap.add_argument("--latency-perf-iters", type=int, default=1000,
                    help="latency4k: timed 4 KiB push_pulls of ferry-perf")
    ap.add_argument("--latency-round-trips", type=int, default=10000,
                    help="latency4k: timed 4 KiB round trips of ferry-zmq-stream --pingpong")
    args = ap.parse_args()

    only = [b.strip() for b in args.only.split(",") if b.strip()]
    bad = [b for b in only if b not in BENCHMARKS]
    if bad or not only:
        ap.error("--only: expected a comma list of %s, got %r" % (",".join(BENCHMARKS), args.only))
    order = [b for b in BENCHMARKS if b in only]
    def env_of(pairs, flag):
        bad = [p for p in pairs if "=" not in p]
        if bad:
            ap.error("%s: expected NAME=VALUE, got %r" % (flag, bad[0]))
        return dict(p.split("=", 1) for p in pairs)
    builds = [Build("before", args.before_root, env_of(args.before_env, "--before-env")),
              Build("after", args.after_root, env_of(args.after_env, "--after-env"))]
    needed = sorted({prog for bench in order for prog in PROGRAMS[bench]})
    for build in builds:
        for prog in needed:
            if not os.access(os.path.join(build.bin, prog), os.X_OK):
                say("%s not found in %s: build %s first" % (prog, build.bin, build.root))
                return 2
    start_prints = {b.label: b.fingerprint() for b in builds}
    started = time.time()
    load_start = os.getloadavg()

    results = {}          # bench -> metric -> label -> [values]
    seconds = {}          # bench -> [wall seconds per run]
    failures = []
    for rep in range(args.repeats):
        for bench in order:
            for build in builds:
                say("repeat %d/%d: %s on %s (%s)" % (rep + 1, args.repeats, bench, build.label, build.root))
                t0 = time.time()
                try:
                    metrics = RUNNERS[bench](build, args)
                except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
                    failures.append("repeat %d, %s on %s: %s" % (rep + 1, bench, build.label, str(e)[-1500:]))
                    say("  failed: %s" % str(e)[-1500:])
                    continue
                dt = time.time() - t0
                seconds.setdefault(bench, []).append(dt)
                say("  %.1f s: %s" % (dt, ", ".join("%s = %.4g" % kv for kv in metrics.items())))
                for metric, value in metrics.items():
                    results.setdefault(bench, {}).setdefault(metric, {}).setdefault(build.label, []).append(value)

    end_prints = {b.label: b.fingerprint() for b in builds}
    goal = []             # latency4k: whether each build meets the latency goal
    for b in builds:
        ratios = results.get("latency4k", {}).get(LATENCY4K_RATIO, {}).get(b.label)
        if ratios:
            r = statistics.median(ratios)
            goal.append("- latency4k goal (Ferry's 4 KiB push_pull <= %g x the raw ZeroMQ round trip p50) on %s: "
                        "median ratio %.2f, %s" % (LATENCY4K_GOAL, b.label, r,
                                                   "met" if r <= LATENCY4K_GOAL else "NOT met"))
    head = ["# compare_builds: before vs after",
            "",
            "- date: %s (%.0f s)" % (time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(started)), time.time() - started)]
    for b in builds:
        head.append("- %s: %s/build (`git -C %s rev-parse --short HEAD`: %s)%s" % (
            b.label, b.root, b.root, start_prints[b.label][0],
            " with " + " ".join("%s=%s" % kv for kv in sorted(b.extra_env.items())) if b.extra_env else ""))
    head += ["- repeats: %d, interleaved (each benchmark on before, then after, every repeat)" % args.repeats,
             "- machine: nproc %d, load average %.2f at start, %.2f at end" % (os.cpu_count(), load_start[0],
                                                                             os.getloadavg()[0]),
             "- perf: ferry-perf on scripts/local-cluster -s 2 -w 2 (loopback), %d timed push_pulls (5 warm-up) "
             "at 4 KiB-1 MiB, %d (1 warm-up) at 16-256 MiB" % (args.perf_small_iters, args.perf_large_iters),
             "- torch: examples/benchmark_torch.py --compare %d %s" % (args.torch_compare, args.torch_args),
             "- trainsim: %s, %d iterations + 1 warm-up" % (trainsim_label(args), args.trainsim_iterations),
             "- latency4k: ferry-perf -b 4K -e 4K on scripts/local-cluster -s 2 -w 2 (loopback), %d timed "
             "push_pulls (20 warm-up), mean time per push_pull, each after a barrier and back to back "
             "(the goal's figure); ferry-zmq-stream --pingpong --message_bytes 4096, "
             "%d timed round trips (20 warm-up)" % (args.latency_perf_iters, args.latency_round_trips),
             "- seconds per run (one build, one repeat): " + (", ".join(
                 "%s %.0f" % (k, statistics.median(v)) for k, v in seconds.items()) or "-")]
    head += goal + [""]
    for b in builds:
        if start_prints[b.label] != end_prints[b.label]:
            head.append("WARNING: %s changed during the comparison (HEAD or programs rebuilt): %s -> %s"
                        % (b.label, start_prints[b.label][0], end_prints[b.label][0]))
    if failures:
        head.append("FAILED RUNS (left out of the table):")
        head += ["- " + f.replace("\n", " ")[-600:] for f in failures]
    if head[-1] != "":
        head.append("")
    text = "\n".join(head + table(results, order)) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
