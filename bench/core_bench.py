#!/usr/bin/python3
"""The core benchmark: Ferry's push_pull beside raw ZeroMQ and torch gloo, in one run.

For each of --repeats rounds, interleaved (so drifts of the machine hit all equally):
  1. ferry-perf on a local cluster of 2 servers + 2 workers (loopback), every size;
  2. torch.distributed gloo allreduce between 2 processes, the same sizes;
  3. ferry-zmq-stream: one raw ZeroMQ stream of 4 MiB messages between two processes.
Then, once: CPU seconds per GB moved (ferry-perf at 64 MiB without checking, CPU time
of every process of the cluster from wait4), and the CPU an idle cluster uses over
--idle-seconds (every role up, no traffic).

Reported per size: median and min-max over the repeats of Ferry's and gloo's algorithm
bandwidth (bytes / time per call, GB = 1e9 B), Ferry/gloo, and Ferry's bytes through
sockets per second (every byte sent by every process: W pushes + W sums of B bytes,
so 2*W*algbw) over the raw ZeroMQ stream. On one machine a PS moves twice the bytes of a
2-rank ring allreduce, so parity per byte moved is Ferry/gloo = 0.5.

Usage: /usr/bin/python3 bench/core_bench.py [--repeats 5] [--out bench/results/core.md]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin"))
WORKERS, SERVERS = 2, 2


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cluster_env(role, port, extra=None):
    env = dict(os.environ)
    env.update({"DMLC_ROLE": role, "DMLC_NUM_WORKER": str(WORKERS), "DMLC_NUM_SERVER": str(SERVERS),
                "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
                "DMLC_NODE_HOST": "127.0.0.1", "FERRY_LOG_LEVEL": "WARNING"})
    env.update(extra or {})
    return env


def run_cluster(worker_args, timeout, extra_env=None, on_started=None):
    """Runs 1 scheduler + SERVERS servers + WORKERS ferry-perf workers.
    Returns (stdout of worker 0, {name: cpu seconds}, {name: pid})."""
    port = free_port()
    procs = {}
    procs["scheduler"] = subprocess.Popen([os.path.join(BIN, "ferry-scheduler")],
                                          env=cluster_env("scheduler", port, extra_env),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for s in range(SERVERS):
        procs[f"server{s}"] = subprocess.Popen([os.path.join(BIN, "ferry-server")],
                                               env=cluster_env("server", port, extra_env),
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for w in range(WORKERS):
        env = cluster_env("worker", port, extra_env)
        env["DMLC_WORKER_ID"] = str(w)
        procs[f"worker{w}"] = subprocess.Popen([os.path.join(BIN, "ferry-perf")] + worker_args, env=env,
                                               stdout=subprocess.PIPE if w == 0 else subprocess.DEVNULL,
                                               stderr=subprocess.PIPE)
    if on_started:
        on_started({n: p.pid for n, p in procs.items()})
    cpu = {}
    deadline = time.time() + timeout
    out = ""
    by_pid = {p.pid: n for n, p in procs.items()}
    out = procs["worker0"].stdout.read().decode() if procs["worker0"].stdout else ""
    while by_pid:
        if time.time() > deadline:
            for p in procs.values():
                p.kill()
            raise RuntimeError("cluster run timed out")
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.05)
            continue
        name = by_pid.pop(pid, None)
        if name is None:
            continue
        cpu[name] = usage.ru_utime + usage.ru_stime
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err = procs[name].stderr.read().decode()[-3000:]
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
            raise RuntimeError(f"{name} exited {code}:\n{err}")
    return out, cpu


def parse_csv(text, key_col="bytes"):
    lines = [l for l in text.strip().splitlines() if l and not l.startswith("#")]
    header = lines[0].split(",")
    rows = [dict(zip(header, l.split(","))) for l in lines[1:]]
    return {int(r[key_col]): r for r in rows}


def run_ferry(sizes_arg, iters, warmup, extra_env=None):
    out, _ = run_cluster(["-b", sizes_arg[0], "-e", sizes_arg[1], "-f", "4", "-n", str(iters), "-w", str(warmup),
                          "--format=csv"], timeout=1800, extra_env=extra_env)
    return {b: float(r["algbw_GBps"]) for b, r in parse_csv(out).items() if int(r["errors"]) == 0}


def run_gloo(sizes, iters, warmup):
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "gloo_allreduce.py"),
                          "--sizes", ",".join(map(str, sizes)), "-n", str(iters), "-w", str(warmup),
                          "--format", "csv"], capture_output=True, text=True, timeout=1800, check=True).stdout
    return {b: float(r["algbw_GBps"]) for b, r in parse_csv(out).items()}


def run_zmq():
    # --tune_malloc: the same glibc setting Ferry's processes use (KeepLargeBuffersInHeap),
    # so both receive paths avoid page-faulting fresh pages for every message.
    out = subprocess.run([os.path.join(BIN, "ferry-zmq-stream"), "--sizes=4194304", "--messages=300",
                          "--tune_malloc", "--format=csv", f"--port={free_port()}"], capture_output=True, text=True,
                         timeout=600, check=True).stdout
    return float(list(parse_csv(out, "message_bytes").values())[0]["GBps"])


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_idle(seconds):
    samples = {}

    def on_started(pids):
        time.sleep(3)  # let registration finish
        start = {n: proc_cpu_seconds(p) for n, p in pids.items()}
        time.sleep(seconds)
        end = {n: proc_cpu_seconds(p) for n, p in pids.items()}
        samples.update({n: end[n] - start[n] for n in pids})

    run_cluster(["--idle_seconds", str(seconds + 5)], timeout=seconds + 120, on_started=on_started)
    return samples


def fmt_range(values, digits=3):
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
            if values else "-")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min", default="4K")
    ap.add_argument("--max", default="256M")
    ap.add_argument("-n", type=int, default=10, help="timed iterations per size")
    ap.add_argument("-w", type=int, default=2, help="warm-up iterations per size")
    ap.add_argument("--idle-seconds", type=int, default=60, help="0 skips the idle measurement")
    ap.add_argument("--skip-cpu", action="store_true", help="skip the CPU-per-GB runs")
    ap.add_argument("--skip-secure", action="store_true", help="skip the FERRY_SECRET runs")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "core.md"))
    args = ap.parse_args()

    ferry, gloo, zmq, secure = [], [], [], []
    for r in range(args.repeats):
        print(f"[core_bench] repeat {r + 1}/{args.repeats}: ferry-perf", flush=True)
        ferry.append(run_ferry((args.min, args.max), args.n, args.w))
        sizes = sorted(ferry[-1])
        print(f"[core_bench] repeat {r + 1}/{args.repeats}: gloo allreduce", flush=True)
        gloo.append(run_gloo(sizes, args.n, args.w))
        print(f"[core_bench] repeat {r + 1}/{args.repeats}: raw ZeroMQ stream", flush=True)
        zmq.append(run_zmq())
        if not args.skip_secure:
            print(f"[core_bench] repeat {r + 1}/{args.repeats}: ferry-perf with FERRY_SECRET (CURVE)", flush=True)
            secure.append(run_ferry(("1M", "64M"), args.n, args.w,
                                    {"FERRY_SECRET": "benchmark-secret-not-for-production"}))

    print("[core_bench] CPU per GB (64 MiB, unchecked)", flush=True)
    cpu_runs = []
    for _ in range(0 if args.skip_cpu else 3):
        n = 30
        t0 = time.time()
        _, cpu = run_cluster(["-b", "64M", "-e", "64M", "-n", str(n), "-w", "2", "--check=false"], timeout=900)
        moved = (n + 2) * 2 * WORKERS * (64 << 20)  # every byte sent by every process
        cpu_runs.append((sum(cpu.values()) / (moved / 1e9), cpu, time.time() - t0))
    print(f"[core_bench] idle cluster for {args.idle_seconds} s", flush=True)
    idle = measure_idle(args.idle_seconds) if args.idle_seconds > 0 else {}

    sizes = sorted(set.intersection(*[set(f) for f in ferry]))
    lines = ["| bytes | Ferry algbw GB/s | gloo algbw GB/s | Ferry/gloo (parity 0.5) | Ferry socket GB/s | socket / raw ZeroMQ |",
             "|---:|---:|---:|---:|---:|---:|"]
    for b in sizes:
        f = [run[b] for run in ferry]
        g = [run[b] for run in gloo if b in run]
        ratio = [run_f[b] / run_g[b] for run_f, run_g in zip(ferry, gloo) if b in run_g and run_g[b] > 0]
        sock = [2 * WORKERS * x for x in f]
        sock_ratio = [2 * WORKERS * run_f[b] / z for run_f, z in zip(ferry, zmq)]
        lines.append(f"| {b} | {fmt_range(f)} | {fmt_range(g)} | {fmt_range(ratio, 2)} | {fmt_range(sock)} | "
                     f"{fmt_range(sock_ratio, 2)} |")
    lines.append("")
    if secure:
        lines.append("Encryption (FERRY_SECRET, CURVE) beside plain, same repeats:")
        lines.append("")
        lines.append("| bytes | plain algbw GB/s | CURVE algbw GB/s | CURVE / plain |")
        lines.append("|---:|---:|---:|---:|")
    for b in (sorted(set.intersection(*[set(x) for x in secure])) if secure else []):
        plain = [run[b] for run in ferry if b in run]
        enc = [run[b] for run in secure]
        ratio = [e / p for e, p in zip(enc, plain)]
        lines.append(f"| {b} | {fmt_range(plain)} | {fmt_range(enc)} | {fmt_range(ratio, 2)} |")
    lines.append("")
    lines.append(f"Raw ZeroMQ stream, 4 MiB messages: {fmt_range(zmq)} GB/s over {args.repeats} repeats.")
    if cpu_runs:
        per_gb = [c[0] for c in cpu_runs]
        lines.append(f"CPU seconds per GB through sockets (64 MiB push_pulls, all 5 processes): {fmt_range(per_gb, 2)}.")
        lines.append("CPU by process in the last run: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(cpu_runs[-1][1].items())))
    if idle:
        idle_total = sum(idle.values())
        lines.append(f"Idle cluster over {args.idle_seconds} s: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(idle.items())) +
                     f"; total {idle_total:.2f} CPU s = {100 * idle_total / args.idle_seconds:.2f}% of one core.")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"<!-- bench/core_bench.py --repeats {args.repeats}, {time.strftime('%Y-%m-%d %H:%M')} -->\n" + text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
