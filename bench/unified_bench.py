#!/usr/bin/python3
"""unified_bench: BytePS's unified architecture measured on an emulated network.

n worker hosts (default 4), each with a colocated server, plus k CPU-only server hosts
(k from --ks, default 0,1,2,4); every host's link shaped to the same rate B both ways
(scripts/netns-cluster). With M bytes per worker, the best a parameter server can do is

    T_opt(k) = 2 n (n - 1) M / ((n^2 + k n - 2k) B)

(BytePS, OSDI'20): 1.5 M/B at k = 0 for n = 4 (the ring all-reduce figure), 1.2 M/B at
k = 2, 1.0 M/B at k = 4. For each k this runs ferry-perf (one M-byte tensor, push_pull
timed on worker 0) and, on the same 4 hosts, torch's gloo ring allreduce of the same
bytes (bench/gloo_allreduce.py --rank). Reports each time, time / T_opt, and gloo / Ferry,
with the busiest core's use (the emulated hosts share this machine's CPUs: a busiest core
near 100% means the CPU, not the network, decided). Repeats are interleaved.

  bench/unified_bench.py --out results.json                  # the full run
  bench/unified_bench.py --bytes 8M --iters 2 --repeats 1 --ks 0,2 --out /tmp/smoke.json

Needs root and `ip netns` (exits 2 otherwise). Writes JSON, and with --plot a PNG.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ferry_netns  # noqa: E402
from link_probe import LinkProbe  # noqa: E402
from train_sim_bench import CpuSampler, Run, parse_env, say  # noqa: E402

GLOO = os.path.join(ROOT, "bench", "gloo_allreduce.py")
GLOO_PORT = 29600


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def t_opt_s(n, k, nbytes, rate_bytes_per_s):
    return 2.0 * n * (n - 1) * nbytes / ((n * n + k * n - 2 * k) * rate_bytes_per_s)


class PerfRun(Run):
    """A cluster of n worker hosts with colocated servers and k CPU-only server hosts,
    running ferry-perf on every worker, then gloo on the same worker hosts."""

    def __init__(self, args, k, knobs, name):
        cluster = SimpleNamespace(workers=args.workers, servers=0, colocate=True, extra_servers=k,
                                  log_level=args.log_level, bin=args.bin,
                                  tcp_limit_output_bytes=args.tcp_limit_output_bytes)
        # Ferry's defaults unless asked: FERRY_PARTITION_BYTES set would stand the default
        # FERRY_PARTITION_MS aside (docs/configuration.md).
        env = dict({"FERRY_PARTITION_BYTES": str(args.partition_bytes)} if args.partition_bytes
                   else {}, **knobs)
        super().__init__(cluster, "perf", args.rate, 1.0, env, name)
        self.bench, self.k = args, k

    def perf_argv(self):
        b = self.bench
        return [os.path.join(b.bin, "ferry-perf"), "-b", str(b.nbytes), "-e", str(b.nbytes), "-f", "2",
                "-n", str(b.iters), "-w", str(b.warmup), "--format", "csv"]

    def ferry(self):
        """Seconds per push_pull (median over the timed iterations, worker 0) and CPU use."""
        self.up()
        bin_ = self.bench.bin
        self.start_scheduler_and_servers(bin_)
        ports = [h for h in self.hosts if h != "scheduler"]
        self.probe = LinkProbe(self.name + "-bridge", ports) if self.bench.probe_links else None
        with CpuSampler() as cpu, (self.probe or contextlib.nullcontext()):
            for i in range(self.args.workers):
                self.start("worker%d" % i, "worker%d" % i, self.perf_argv(), "worker",
                           self.hosts["worker%d" % i], {"DMLC_WORKER_ID": str(i)})
            outputs = self.wait_all(self.bench.timeout)
        rows = [line.split(",") for line in outputs["worker0"][1].splitlines()
                if line and line[0].isdigit()]
        if len(rows) != 1 or int(rows[0][3]) != 0:
            raise RuntimeError("ferry-perf printed %s (expected one row without errors)" % rows)
        return float(rows[0][1]) / 1e6, cpu.result

    def gloo(self):
        """Seconds per allreduce (median, slowest rank) among the worker hosts, and CPU use."""
        master = "%s:%d" % (self.hosts["worker0"], GLOO_PORT)
        with CpuSampler() as cpu:
            for i in range(self.args.workers):
                argv = ["/usr/bin/python3", GLOO, "--rank", str(i), "--nproc", str(self.args.workers),
                        "--master", master, "--sizes", str(self.bench.nbytes), "-n", str(self.bench.iters),
                        "-w", str(self.bench.warmup), "--format", "csv", "--timeout", "300"]
                self.start("gloo%d" % i, "worker%d" % i, argv, "worker", self.hosts["worker%d" % i],
                           {"GLOO_SOCKET_IFNAME": "eth0"})
            outputs = self.wait_all(self.bench.timeout)
        rows = [line.split(",") for line in outputs["gloo0"][1].splitlines() if line and line[0].isdigit()]
        if len(rows) != 1:
            raise RuntimeError("gloo printed %s" % rows)
        return float(rows[0][1]) / 1e6, cpu.result


def run_all(args):
    rate_bps = ferry_netns.rate_bits(args.rate) / 8.0
    runs = []
    for rep in range(args.repeats):
        for c, k in [(c, k) for c in range(len(args.configs)) for k in args.ks]:
            knobs = args.configs[c]
            run = PerfRun(args, k, knobs, "ub%d" % os.getpid())
            record = {"k": k, "env": knobs, "repeat": rep,
                      "t_opt_s": t_opt_s(args.workers, k, args.nbytes, rate_bps)}
            try:
                record["ferry_s"], record["ferry_cpu"] = run.ferry()
                record["transport"] = run.transport_stats()
                if run.probe:
                    record["links"] = links = run.probe.summary(rate_bps)
                    record["link_timeline"] = run.probe.timeline(rate_bps)
                    say("  links over %s s (uplinks idle %s s in gaps, %s s in steady traffic): %s" % (
                        links.get("span_s"), links.get("idle_s_gaps"), links.get("idle_s_steady"), "; ".join(
                            "%s up %.0f%% down %.0f%% queue p50/max %d/%d KB" % (
                                h, 100 * v["up_busy"], 100 * v["down_busy"], v["backlog_p50"] // 1000,
                                v["backlog_max"] // 1000) for h, v in links.items() if isinstance(v, dict))))
                if c == 0 and k == args.ks[0]:  # gloo depends on neither: once per repeat, same hosts
                    run.procs.clear()  # Ferry's processes have all ended
                    record["gloo_s"], record["gloo_cpu"] = run.gloo()
                t = record["transport"]
                say("repeat %d k=%d %s: Ferry %.2f s (T_opt %.2f s, ratio %.3f)%s, busiest core %.0f%%, "
                    "ack delay p50/p99 %s/%s us, window %s bytes (%s MB/s x %s us)" % (
                        rep + 1, k, knobs or "", record["ferry_s"], record["t_opt_s"], record["ferry_s"] / record["t_opt_s"],
                        ", gloo %.2f s" % record["gloo_s"] if "gloo_s" in record else "",
                        record["ferry_cpu"]["busiest_core_pct"], t.get("ack_delay_us_p50", "-"),
                        t.get("ack_delay_us_p99", "-"), t.get("window.bytes", "-"),
                        t.get("window.rate_bytes_per_s", 0) // 1000000, t.get("window.min_rtt_us", "-")))
            except (RuntimeError, subprocess.SubprocessError, ValueError) as e:
                record["error"] = str(e)
                say("repeat %d k=%d %s failed: %s" % (rep + 1, k, knobs or "", e))
            finally:
                run.cleanup()
            runs.append(record)
    return runs


def summarize(args, runs):
    gloo = [r["gloo_s"] for r in runs if "gloo_s" in r]
    gloo_med = statistics.median(gloo) if gloo else None
    rows = []
    for knobs, k in [(c, k) for c in args.configs for k in args.ks]:
        rs = [r for r in runs if r["k"] == k and r["env"] == knobs and "ferry_s" in r]
        if not rs:
            continue
        f = [r["ferry_s"] for r in rs]
        med = statistics.median(f)
        delays = {name: statistics.median([r["transport"][name] for r in rs if name in r["transport"]] or [0])
                  for name in ("ack_delay_us_p50", "ack_delay_us_p99")}
        rows.append({"k": k, "env": knobs, "repeats": len(rs), **delays, "t_opt_s": rs[0]["t_opt_s"], "ferry_median_s": med,
                     "ferry_min_s": min(f), "ferry_max_s": max(f), "ferry_over_t_opt": med / rs[0]["t_opt_s"],
                     "gloo_median_s": gloo_med, "gloo_over_ferry": gloo_med / med if gloo_med else None,
                     "predicted_gloo_over_ferry": (t_opt_s(args.workers, 0, 1, 1) /
                                                   t_opt_s(args.workers, k, 1, 1)),
                     "busiest_core_pct": max(r["ferry_cpu"]["busiest_core_pct"] for r in rs)})
    return rows


def table(rows, args):
    lines = ["| knobs | k | T_opt (s) | Ferry median (min-max) (s) | Ferry / T_opt | gloo (s) | gloo / Ferry "
             "| predicted | busiest core | ack delay p50 / p99 (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %d | %.2f | %.2f (%.2f-%.2f) | %.3f | %s | %s | %.2f | %.0f%% | %.1f / %.1f |" % (
            " ".join("%s=%s" % kv for kv in sorted(r["env"].items())) or "defaults", r["k"], r["t_opt_s"], r["ferry_median_s"], r["ferry_min_s"], r["ferry_max_s"],
            r["ferry_over_t_opt"], "%.2f" % r["gloo_median_s"] if r["gloo_median_s"] else "-",
            "%.2f" % r["gloo_over_ferry"] if r["gloo_over_ferry"] else "-",
            r["predicted_gloo_over_ferry"], r["busiest_core_pct"], r["ack_delay_us_p50"] / 1000.0,
            r["ack_delay_us_p99"] / 1000.0))
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    first = [r for r in rows if r["env"] == rows[0]["env"]]
    ax.plot([r["k"] for r in first], [r["t_opt_s"] for r in first], "k--", label="T_opt (BytePS)")
    for knobs in {json.dumps(r["env"], sort_keys=True) for r in rows}:
        rs = [r for r in rows if json.dumps(r["env"], sort_keys=True) == knobs]
        label = " ".join("%s=%s" % kv for kv in sorted(json.loads(knobs).items()))
        ax.errorbar([r["k"] for r in rs], [r["ferry_median_s"] for r in rs],
                    yerr=[[r["ferry_median_s"] - r["ferry_min_s"] for r in rs],
                          [r["ferry_max_s"] - r["ferry_median_s"] for r in rs]], fmt="o-",
                    label="Ferry" + (" " + label if label else ""))
    if rows[0]["gloo_median_s"]:
        ax.axhline(rows[0]["gloo_median_s"], color="tab:red", label="gloo ring allreduce")
    ax.set_xlabel("CPU-only server hosts k (n = 4 worker hosts with colocated servers)")
    ax.set_ylabel("seconds per push_pull")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description="BytePS's unified architecture on an emulated network")
    p.add_argument("--workers", type=int, default=4, help="worker hosts n, each with a colocated server")
    p.add_argument("--ks", default="0,1,2,4", help="CPU-only server hosts, comma-separated")
    p.add_argument("--rate", default="200mbit", help="every host's link, each way (tc syntax)")
    p.add_argument("--bytes", default="100M", help="bytes per worker (K, M, G: powers of 1024)")
    p.add_argument("--partition-bytes", type=int, default=0,
                   help="FERRY_PARTITION_BYTES for every run (default: unset, Ferry's default: "
                        "partitions sized by the path, FERRY_PARTITION_MS)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=V1[,V2...]",
                   help="an environment knob for every Ferry process and its values (repeatable: "
                        "the runs cover the product, interleaved within each repeat)")
    p.add_argument("--tcp-limit-output-bytes", type=int, default=0,
                   help="TSQ: the most bytes one socket may have in each emulated host's qdisc "
                        "(net.ipv4.tcp_limit_output_bytes; 0: the kernel's)")
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--probe-links", action="store_true",
                   help="sample every host's link use and downlink queue (bench/link_probe.py); "
                        "adds 'links' and 'link_timeline' to each record")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--bin", default=os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin")))
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--plot", help="a PNG to draw")
    args = p.parse_args()
    args.ks = [int(k) for k in args.ks.split(",")]
    args.configs = parse_env(args.env)  # [{}] without --env; each NAME=V1,V2 is an axis
    args.nbytes = parse_bytes(args.bytes)
    args.bin = os.path.abspath(args.bin)
    why = ferry_netns.unavailable_reason()
    if why:
        say("cannot make network namespaces: %s" % why)
        return 2
    started = time.time()
    runs = run_all(args)
    rows = summarize(args, runs)
    with open(args.out, "w") as f:
        json.dump({"program": "unified_bench", "args": vars(args), "seconds": round(time.time() - started, 1),
                   "loadavg_at_end": os.getloadavg(), "summary": rows, "runs": runs}, f, indent=1)
    print(table(rows, args))
    if args.plot and rows:
        plot(rows, args.plot)
    return 0 if rows and all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
