#!/usr/bin/python3
"""train_sim_bench: ferry-train-sim on an emulated cluster (scripts/netns-cluster), over a
matrix of models, link rates, compute scales and environment knobs; writes JSON.

Every run gets a fresh cluster: one scheduler host, W worker hosts, S server hosts (or,
with --colocate, one server in each worker host) and K extra server hosts, every link
shaped to the run's rate both ways. The scheduler, the servers and one ferry-train-sim
per worker host run in their namespaces; the run records each worker's iteration times
and iteration / LB1, and the CPU use of this machine's cores (from /proc/stat) while the
workers run: the emulated cluster shares this machine's CPUs, so a busiest core near
100% means the figures say more about the CPU than about the schedule.

Repeats are interleaved (every configuration once, then every configuration again), so
slow drift of the machine spreads over all configurations alike.

  bench/train_sim_bench.py --models resnet50 --byte-scale 0.05 --workers 2 --servers 2 \\
      --rates 1gbit --iterations 3 --warmup 1 --repeats 1 --out /tmp/smoke.json
  bench/train_sim_bench.py --models resnet50,vgg16 --rates 1gbit,10gbit --compute-scales 1,0.25 \\
      --env FERRY_SCHEDULING_CREDIT=4,16 --repeats 5 --out results.json

A change mid-run (the drift tests of the profiled policies, usbyte and prophet):
--rate-change S:RATE reshapes every link to RATE S seconds after the workers start, and
--compute-change N:X multiplies every compute time by X from iteration N on (counting the
warm-up); each run then also records `after_change` (the median of the iterations that
start --settle iterations or more after the change, over every worker, and their count),
and the summary `after_change_ms` (its median over repeats).

  bench/train_sim_bench.py --models vgg16 --byte-scale 0.1 --rates 1gbit --rate-change 8:500mbit \
      --env FERRY_SCHEDULING_POLICY=credit,prophet --iterations 20 --out drift.json

Needs root and `ip netns` (exits 2 otherwise, as netns-cluster does).
"""

import argparse
import itertools
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
NETNS_CLUSTER = os.path.join(ROOT, "scripts", "netns-cluster")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ferry_netns  # noqa: E402

SCHEDULER_PORT = 9000
CPU_SAMPLE_S = 0.25
STOP_GRACE_S = 5


def say(text):
    print("train_sim_bench: " + text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ CPU sampling
def cpu_times():
    """{cpu index: (busy, total)} jiffies from /proc/stat (busy without niced time)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0].startswith("cpu") and parts[0] != "cpu":
                v = [int(x) for x in parts[1:]]
                # Busy: user, system, irq, softirq, steal. Niced time is left out: the
                # benchmark runs at normal priority, and a background job at nice 19 (a
                # build) yields the CPU to it whenever both want it.
                busy = v[0] + v[2] + v[5] + v[6] + v[7]
                out[int(parts[0][3:])] = (busy, sum(v[:8]))
    return out


def busy_percent(before, after):
    """{cpu: % busy} between two cpu_times() samples."""
    pct = {}
    for cpu, (busy1, total1) in after.items():
        busy0, total0 = before.get(cpu, (busy1, total1))
        pct[cpu] = 100.0 * (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
    return pct


class CpuSampler:
    """Samples /proc/stat every CPU_SAMPLE_S in a thread: per-core use over the whole
    window and the busiest core of the busiest interval."""

    def __init__(self):
        self.stop_event = threading.Event()
        self.peak = 0.0
        self.first = None
        self.thread = threading.Thread(target=self.loop, name="cpu-sampler", daemon=True)

    def __enter__(self):
        self.first = cpu_times()
        self.thread.start()
        return self

    def loop(self):
        prev = self.first
        while not self.stop_event.wait(CPU_SAMPLE_S):
            now = cpu_times()
            self.peak = max([self.peak] + list(busy_percent(prev, now).values()))
            prev = now

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=5)
        per_core = busy_percent(self.first, cpu_times())
        self.result = {"per_core_pct": [round(per_core[c], 1) for c in sorted(per_core)],
                       "busiest_core_pct": round(max(per_core.values()), 1),
                       "busiest_core_peak_interval_pct": round(self.peak, 1),
                       "interval_s": CPU_SAMPLE_S}


# ------------------------------------------------------------------- one run
class Run:
    """One configuration on a fresh cluster; every process it starts ends with it."""

    def __init__(self, args, model, rate, compute_scale, env, name):
        self.args, self.model, self.rate = args, model, rate
        self.compute_scale, self.env, self.name = compute_scale, env, name
        self.procs = {}      # label -> Popen (each in its own session)
        self.logs = tempfile.TemporaryDirectory(prefix="train_sim_bench.")

    def start(self, label, host, argv, role, address, extra_env=None):
        env = dict(os.environ, DMLC_ROLE=role, DMLC_NUM_WORKER=str(self.args.workers),
                   DMLC_NUM_SERVER=str(self.num_servers()), DMLC_PS_ROOT_URI="198.18.0.1",
                   DMLC_PS_ROOT_PORT=str(SCHEDULER_PORT), DMLC_NODE_HOST=address,
                   FERRY_LOG_LEVEL=self.args.log_level,
                   FERRY_STATS_FILE=os.path.join(self.logs.name, "%r.json"), **self.env, **(extra_env or {}))
        cmd = [NETNS_CLUSTER, "exec", "--name", self.name, host, "--"] + argv
        # Files, not pipes: nobody has to read while waiting for another process.
        with open(self.log(label, "out"), "w") as out, open(self.log(label, "err"), "w") as err:
            self.procs[label] = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                                 stderr=err, start_new_session=True)

    def log(self, label, stream):
        return os.path.join(self.logs.name, "%s.%s" % (label, stream))

    def read(self, label, stream):
        with open(self.log(label, stream), errors="replace") as f:
            return f.read()

    def transport_stats(self):
        """The workers' reply delays and the Van's unreleased bytes, from the counters every
        node writes at exit (FERRY_STATS_FILE): the worst worker's figure of each."""
        out = {}
        for i in range(self.args.workers):
            path = os.path.join(self.logs.name, "worker-%d.json" % i)
            if not os.path.exists(path):
                continue
            with open(path) as f:
                counters = json.load(f)["counters"]
            for name in ("ack_delay_us_p50", "ack_delay_us_p99", "ack_delay_us_max", "sum_delay_us_p50",
                         "sum_delay_us_p99", "van.unreleased_bytes_max", "window.bytes",
                         "window.rate_bytes_per_s", "window.min_rtt_us", "scheduling.partition_bytes",
                         "van.shm_bytes_sent"):
                if name in counters:
                    out[name] = max(out.get(name, 0), counters[name])
            # The servers each worker reached through the shared-memory lane (its own host's).
            out.setdefault("shm_lanes_per_worker", []).append(counters.get("van.shm_lanes", 0))
        return out

    def net_stats(self):
        """What the emulated links did, summed over the cluster's namespaces: TCP segments
        retransmitted (each host's /proc/net/snmp) and packets the links' queues dropped
        (tc -s: the hosts' uplinks and the bridge's ports, the downlinks)."""
        retrans, drops = 0, 0
        for ns in ["%s-%s" % (self.name, h) for h in self.hosts] + ["%s-bridge" % self.name]:
            snmp = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  timeout=60).stdout.splitlines()
            tcp = [line.split()[1:] for line in snmp if line.startswith("Tcp:")]
            if len(tcp) == 2 and "RetransSegs" in tcp[0]:
                retrans += int(tcp[1][tcp[0].index("RetransSegs")])
            qdisc = subprocess.run(["tc", "-n", ns, "-s", "qdisc", "show"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, timeout=60).stdout
            drops += sum(int(n) for n in re.findall(r"dropped (\d+)", qdisc))
        return {"tcp_retrans_segs": retrans, "qdisc_drops": drops}

    def num_servers(self):
        return (self.args.workers if self.args.colocate else self.args.servers) + self.args.extra_servers

    def server_hosts(self):
        hosts = ["worker%d" % i if self.args.colocate else "server%d" % i
                 for i in range(self.args.workers if self.args.colocate else self.args.servers)]
        return hosts + ["extra%d" % i for i in range(self.args.extra_servers)]

    def up(self):
        cmd = [NETNS_CLUSTER, "up", "--name", self.name, "--workers", str(self.args.workers),
               "--servers", str(0 if self.args.colocate else self.args.servers),
               "--extra-servers", str(self.args.extra_servers), "--rate", self.rate]
        if self.args.tcp_limit_output_bytes:
            cmd += ["--tcp-limit-output-bytes", str(self.args.tcp_limit_output_bytes)]
        cmd += self.up_args()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("netns-cluster up failed (exit %d): %s" % (r.returncode, r.stdout.strip()))
        out = subprocess.run([NETNS_CLUSTER, "hosts", "--name", self.name, "--json"], check=True,
                             stdout=subprocess.PIPE, text=True, timeout=60).stdout
        self.hosts = {h: v["address"] for h, v in json.loads(out).items()}

    def up_args(self):
        """More `netns-cluster up` options (a subclass's: a rate per host)."""
        return []

    def sim_argv(self):
        gbps = ferry_netns.rate_bits(self.rate) / 1e9 if self.rate != "none" else 0
        workload = os.path.join(ROOT, "bench", "workloads", "%s_layers.csv" % self.model)
        argv = [os.path.join(self.args.bin, "ferry-train-sim"), "--workload", workload, "--json",
                "--iterations", str(self.args.iterations), "--warmup", str(self.args.warmup),
                "--compute_scale", str(self.compute_scale), "--byte_scale", str(self.args.byte_scale),
                "--rate_gbps", str(gbps)]
        if self.args.compute_change:
            at, scale = self.args.compute_change
            argv += ["--change_at", str(at), "--change_compute_scale", str(scale)]
        return argv + (["--check"] if self.args.check else [])

    def start_scheduler_and_servers(self, bin_):
        """The job's scheduler and servers, each on its host, from the programs in `bin_`."""
        self.start("scheduler", "scheduler", [os.path.join(bin_, "ferry-scheduler")], "scheduler",
                   self.hosts["scheduler"])
        for i, host in enumerate(self.server_hosts()):
            self.start("server%d" % i, host, [os.path.join(bin_, "ferry-server")], "server", self.hosts[host])

    def execute(self):
        """Runs the job; returns the record of the run."""
        self.up()
        bin_ = self.args.bin
        self.start_scheduler_and_servers(bin_)
        self.change_unix_ms = None
        timer = None
        with CpuSampler() as cpu:
            for i in range(self.args.workers):
                self.start("worker%d" % i, "worker%d" % i, self.sim_argv(), "worker",
                           self.hosts["worker%d" % i], {"DMLC_WORKER_ID": str(i)})
            if self.args.rate_change:
                timer = threading.Timer(self.args.rate_change[0], self.change_rate)
                timer.start()
            try:
                outputs = self.wait_all(self.args.timeout)
            finally:
                if timer:
                    timer.cancel()
        return self.record(outputs, cpu.result)

    def changed_hosts(self):
        """The hosts --rate-change reshapes (none named: every one but the scheduler)."""
        return []

    def change_rate(self):
        rate = self.args.rate_change[1]
        r = subprocess.run([NETNS_CLUSTER, "rate", "--name", self.name, "--rate", rate]
                           + self.changed_hosts(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if r.returncode == 0:
            self.change_unix_ms = time.time() * 1000
        say("  links reshaped to %s%s" % (rate, "" if r.returncode == 0 else ": " + r.stdout.strip()))

    def after_change(self, workers):
        """The median (and count) of the iterations starting --settle or more iterations
        after the change, over every worker; None without a change."""
        settle = self.args.settle
        ms = []
        for w in workers:
            if self.args.compute_change:
                first = self.args.compute_change[0] - self.args.warmup
            elif self.change_unix_ms is not None:
                starts = w["starts_unix_ms"]
                first = next((i for i, s in enumerate(starts) if s >= self.change_unix_ms), len(starts))
            else:
                return None
            ms += w["iterations_ms"][max(0, first + settle):]
        return {"settle": settle, "median_ms": statistics.median(ms) if ms else None, "count": len(ms)}

    def wait_all(self, timeout):
        """{label: (exit code, stdout, stderr)} once every process ended; raises at the deadline."""
        deadline = time.monotonic() + timeout
        outputs = {}
        for label, p in self.procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError("%s still runs after %g s" % (label, timeout))
            outputs[label] = (p.returncode, self.read(label, "out"), self.read(label, "err"))
        failed = {k: v for k, v in outputs.items() if v[0] != 0}
        if failed:
            raise RuntimeError("; ".join("%s exited %d: %s" % (k, v[0], v[2].strip()[-1500:])
                                         for k, v in failed.items()))
        return outputs

    def record(self, outputs, cpu):
        workers = [json.loads(outputs["worker%d" % i][1].strip().splitlines()[-1])
                   for i in range(self.args.workers)]
        slowest = max(workers, key=lambda w: w["median_ms"])
        lb1 = slowest["lb"]["lb1_ms"] if slowest["lb"] else None
        return {"model": self.model, "rate": self.rate, "compute_scale": self.compute_scale,
                "env": self.env, "cluster": self.name, "median_ms": slowest["median_ms"],
                "p90_ms": max(w["p90_ms"] for w in workers), "lb1_ms": lb1,
                "median_over_lb1": slowest["median_ms"] / lb1 if lb1 else None,
                "p90_over_lb1": max(w["p90_ms"] for w in workers) / lb1 if lb1 else None,
                "wrong_values": sum(w["wrong_values"] for w in workers),
                "checked_values": sum(w["checked_values"] for w in workers),
                "cpu": cpu, "transport": self.transport_stats(), "net": self.net_stats(),
                "workers": workers,
                "after_change": self.after_change(workers)}

    def cleanup(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + STOP_GRACE_S
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        subprocess.run([NETNS_CLUSTER, "down", "--name", self.name], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
        self.logs.cleanup()


# ------------------------------------------------------------------ the matrix
def rate_change(text):
    seconds, _, rate = text.partition(":")
    try:
        ferry_netns.rate_bits(rate)
        return float(seconds), rate
    except ValueError as e:
        raise argparse.ArgumentTypeError("'%s': expected SECONDS:RATE, e.g. 8:500mbit (%s)" % (text, e))


def compute_change(text):
    at, _, scale = text.partition(":")
    try:
        if int(at) < 0 or float(scale) <= 0:
            raise ValueError
        return int(at), float(scale)
    except ValueError:
        raise argparse.ArgumentTypeError("'%s': expected ITERATION:SCALE, e.g. 6:1.5" % text)


def parse_env(items):
    """['A=1,2', 'B=x'] -> [{'A': '1', 'B': 'x'}, {'A': '2', 'B': 'x'}]."""
    axes = []
    for item in items:
        key, _, values = item.partition("=")
        if not key or not values:
            raise SystemExit("--env '%s': expected NAME=VALUE[,VALUE...]" % item)
        axes.append([(key, v) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)]


def matrix(args):
    return list(itertools.product(args.models.split(","), args.rates.split(","),
                                  [float(x) for x in args.compute_scales.split(",")],
                                  parse_env(args.env)))


def summarize(runs):
    """Per configuration: the median over repeats of each run's figures."""
    groups = {}
    for r in runs:
        if "error" in r:
            continue
        key = json.dumps([r["model"], r["rate"], r["compute_scale"], r["env"]], sort_keys=True)
        groups.setdefault(key, []).append(r)
    out = []
    for rs in groups.values():
        row = {k: rs[0][k] for k in ("model", "rate", "compute_scale", "env")}
        row["repeats"] = len(rs)
        for k in ("median_ms", "p90_ms", "lb1_ms", "median_over_lb1", "p90_over_lb1"):
            vals = [r[k] for r in rs if r[k] is not None]
            row[k] = statistics.median(vals) if vals else None
        row["busiest_core_pct"] = max(r["cpu"]["busiest_core_pct"] for r in rs)
        after = [r["after_change"]["median_ms"] for r in rs
                 if r.get("after_change") and r["after_change"]["median_ms"] is not None]
        row["after_change_ms"] = statistics.median(after) if after else None
        for k in ("ack_delay_us_p50", "ack_delay_us_p99"):
            vals = [r["transport"][k] for r in rs if k in r.get("transport", {})]
            row[k] = statistics.median(vals) if vals else None
        out.append(row)
    return out


def run_all(args):
    runs = []
    configs = matrix(args)
    for rep in range(args.repeats):
        for model, rate, scale, env in configs:
            name = "tsb%d" % os.getpid()
            say("repeat %d/%d: %s at %s, compute x%g, %s" % (rep + 1, args.repeats, model, rate, scale,
                                                             env or "default knobs"))
            run = Run(args, model, rate, scale, env, name)
            try:
                record = dict(run.execute(), repeat=rep)
                t = record["transport"]
                say("  median %.1f ms, p90 %.1f ms, median/LB1 %s, busiest core %.0f%%, "
                    "ack delay p50/p99 %s/%s us, window %s bytes (%s MB/s x %s us), "
                    "%d TCP segments resent, %d packets dropped by the links" % (
                        record["median_ms"], record["p90_ms"],
                        "%.3f" % record["median_over_lb1"] if record["median_over_lb1"] else "-",
                        record["cpu"]["busiest_core_pct"], t.get("ack_delay_us_p50", "-"),
                        t.get("ack_delay_us_p99", "-"), t.get("window.bytes", "-"),
                        t.get("window.rate_bytes_per_s", 0) // 1000000, t.get("window.min_rtt_us", "-"),
                        record["net"]["tcp_retrans_segs"], record["net"]["qdisc_drops"]))
            except (RuntimeError, subprocess.SubprocessError, ValueError) as e:
                record = {"model": model, "rate": rate, "compute_scale": scale, "env": env,
                          "cluster": name, "repeat": rep, "error": str(e)}
                say("  failed: %s" % e)
            finally:
                run.cleanup()
            runs.append(record)
    return runs


def parser():
    p = argparse.ArgumentParser(description="ferry-train-sim on an emulated cluster (see the file's header)")
    p.add_argument("--models", default="resnet50", help="comma-separated: vgg16, resnet50, bert_base")
    p.add_argument("--rates", default="1gbit", help="comma-separated link rates (tc syntax) or none")
    p.add_argument("--compute-scales", default="1.0", help="comma-separated")
    p.add_argument("--byte-scale", type=float, default=1.0)
    p.add_argument("--env", action="append", default=[], metavar="NAME=V1[,V2...]",
                   help="an environment knob and its values (repeatable: the matrix is the product)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--extra-servers", type=int, default=0, help="CPU-only server hosts besides")
    p.add_argument("--colocate", action="store_true", help="one server in each worker host instead of --servers")
    p.add_argument("--tcp-limit-output-bytes", type=int, default=0,
                   help="net.ipv4.tcp_limit_output_bytes in every emulated host (0: the kernel's)")
    p.add_argument("--rate-change", type=rate_change, metavar="S:RATE",
                   help="reshape every link to RATE S seconds after the workers start")
    p.add_argument("--compute-change", type=compute_change, metavar="N:X",
                   help="compute times x X from iteration N on (0: the first warm-up iteration)")
    p.add_argument("--settle", type=int, default=3,
                   help="iterations after a change that after_change_ms leaves out")
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check", action="store_true", help="check every sum (costs CPU)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--bin", default=os.environ.get("FERRY_BIN", os.path.join(ROOT, "build", "bin")))
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--out", required=True, help="the JSON file to write")
    return p


def main():
    args = parser().parse_args()
    args.bin = os.path.abspath(args.bin)
    why = ferry_netns.unavailable_reason()
    if why:
        say("cannot make network namespaces: %s" % why)
        return 2
    for b in ("ferry-scheduler", "ferry-server", "ferry-train-sim"):
        if not os.access(os.path.join(args.bin, b), os.X_OK):
            say("%s not found in %s: build it (--bin or FERRY_BIN)" % (b, args.bin))
            return 2
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))   # finally-blocks clean up
    started = time.time()
    runs = run_all(args)
    result = {"program": "train_sim_bench", "args": vars(args), "started": started,
              "seconds": round(time.time() - started, 1),
              "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                          "loadavg_at_end": os.getloadavg()},
              "summary": summarize(runs), "runs": runs}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    failed = sum("error" in r for r in runs)
    wrong = sum(r.get("wrong_values", 0) for r in runs)
    say("%d runs (%d failed, %d wrong sums) -> %s" % (len(runs), failed, wrong, args.out))
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
