#!/usr/bin/python3
"""scheduler_failover_bench: what a job pays when its scheduler dies (docs/benchmarks.md,
"Scheduler failover").

    FERRY_BIN=build/bin bench/scheduler_failover_bench.py --repeats 5 > out.txt

Real processes on loopback: ferry-scheduler, one ferry-server, two ferry-test-workers
(the test build's worker, which checks every sum exactly). Three figures, each over
--repeats repeats, printed as median [min - max]:

- Throughput without a scheduler: one job of workers push_pulling a 256 KiB tensor in a
  loop. Windows alternate: --window seconds with the scheduler, the scheduler killed
  (SIGKILL), --window seconds without it, the scheduler restarted (the window starts once it
  adopted the job). A window's figure is worker 0's rounds per second; the ratio is
  without / with, per repeat (interleaved), then the median.
- A barrier waiting across a restart: rank 0 waits in a barrier, the scheduler is killed,
  rank 1 reaches the barrier while none runs, the scheduler is restarted 1 s later; the
  figure is from the restarted process's start to rank 0's release.
- A standby taking over: the leader killed, the figure is from the kill to the standby's
  "adopted the running job".

FERRY_HEARTBEAT_INTERVAL_MS and FERRY_HEARTBEAT_TIMEOUT_MS are --interval-ms and
--timeout-ms on every node; the goals are stated against them.
"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Proc:
    """A process whose output lines are kept with their arrival times."""

    def __init__(self, argv, env):
        self.lines = []  # (monotonic time, line)
        self.started = time.monotonic()
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, text, timeout=60.0, after=0.0):
        """The time of the first line after `after` containing `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if t >= after and text in line:
                    return t
            if self.p.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.005)
        tail = "\n".join(line for _, line in self.lines[-20:])
        raise RuntimeError(f"no line with {text!r} within {timeout} s; last lines:\n{tail}")

    def count(self, text, start, end):
        return sum(1 for t, line in list(self.lines) if start <= t < end and line.startswith(text))

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)


class Job:
    def __init__(self, args, worker_args, standby=False):
        self.bin = args.bin
        self.port = free_port()
        self.standby_port = free_port() if standby else None
        self.env = dict(os.environ)
        self.env.update({
            "DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1",
            "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(self.port),
            "DMLC_NODE_HOST": "127.0.0.1",
            "FERRY_HEARTBEAT_INTERVAL_MS": str(args.interval_ms),
            "FERRY_HEARTBEAT_TIMEOUT_MS": str(args.timeout_ms),
            "FERRY_SCHEDULER_TIMEOUT_MS": "600000",
        })
        if standby:
            self.env["FERRY_SCHEDULERS"] = f"127.0.0.1:{self.port},127.0.0.1:{self.standby_port}"
        self.procs = []
        self.scheduler = self.start_scheduler()
        self.standby = self.start_scheduler(self.standby_port) if standby else None
        self.server = self.spawn("server", ["ferry-server"])
        self.workers = [self.spawn("worker", ["ferry-test-worker"] + worker_args,
                                   {"DMLC_WORKER_ID": str(r)}) for r in range(2)]

    def spawn(self, role, argv, extra=None):
        env = dict(self.env, DMLC_ROLE=role, **(extra or {}))
        p = Proc([os.path.join(self.bin, argv[0])] + argv[1:], env)
        self.procs.append(p)
        return p

    def start_scheduler(self, port=None):
        return self.spawn("scheduler", ["ferry-scheduler"], {"DMLC_PORT": str(port)} if port else None)

    def close(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.p.wait()


def median_range(values, fmt="{:.1f}"):
    return (f"{fmt.format(statistics.median(values))} "
            f"[{fmt.format(min(values))} - {fmt.format(max(values))}]")


def throughput(args):
    job = Job(args, ["--mode=loop", "--loop_sleep_ms=0"])
    ratios, with_rates, without_rates = [], [], []
    try:
        w0 = job.workers[0]
        start = w0.wait_for("round 20") + 0.3
        for r in range(args.repeats):
            end = start + args.window
            time.sleep(max(0.0, end - time.monotonic()))
            with_rate = w0.count("round ", start, end) / args.window
            job.scheduler.kill()
            start = time.monotonic() + 0.3
            end = start + args.window
            time.sleep(max(0.0, end - time.monotonic()))
            without_rate = w0.count("round ", start, end) / args.window
            job.scheduler = job.start_scheduler()
            start = job.scheduler.wait_for("adopted the running job") + 0.3
            with_rates.append(with_rate)
            without_rates.append(without_rate)
            ratios.append(without_rate / with_rate)
            print(f"  repeat {r}: {with_rate:.0f} rounds/s with the scheduler, "
                  f"{without_rate:.0f} without: {without_rate / with_rate:.3f}x", flush=True)
    finally:
        job.close()
    print(f"throughput without a scheduler / with: {median_range(ratios, '{:.3f}')}x "
          f"(rounds/s with {median_range(with_rates, '{:.0f}')}, "
          f"without {median_range(without_rates, '{:.0f}')}; goal >= 0.95x)")


def barrier(args):
    latencies = []
    for r in range(args.repeats):
        job = Job(args, ["--mode=barriers", "--rounds=4", "--slow_barrier=2",
                         "--barrier_sleep_ms=1000"])
        try:
            job.workers[0].wait_for("barrier 1 waited")
            job.scheduler.kill()
            time.sleep(2.0)  # rank 1 reaches barrier 2 at about 1 s, while no scheduler runs
            job.scheduler = job.start_scheduler()
            restarted = job.scheduler.started
            released = job.workers[0].wait_for("barrier 2 waited", after=restarted)
            latencies.append((released - restarted) * 1000)
            print(f"  repeat {r}: released {latencies[-1]:.0f} ms after the restart", flush=True)
            job.workers[0].wait_for("OK barriers=4")
        finally:
            job.close()
    print(f"barrier waiting across a restart, released after the new scheduler started: "
          f"{median_range(latencies, '{:.0f}')} ms (goal <= 1000 ms)")


def standby(args):
    takeovers = []
    for r in range(args.repeats):
        job = Job(args, ["--mode=loop", "--loop_sleep_ms=5"], standby=True)
        try:
            job.workers[0].wait_for("round 20")
            killed = time.monotonic()
            job.scheduler.kill()
            adopted = job.standby.wait_for("adopted the running job", after=killed)
            takeovers.append((adopted - killed) * 1000)
            print(f"  repeat {r}: the standby adopted the job {takeovers[-1]:.0f} ms after the "
                  "leader was killed", flush=True)
        finally:
            job.close()
    print(f"standby takeover after the leader's death: {median_range(takeovers, '{:.0f}')} ms "
          f"(goal <= heartbeat timeout + 1 s = {args.timeout_ms + 1000} ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default=os.environ.get("FERRY_BIN", "build/bin"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--interval-ms", type=int, default=200)
    parser.add_argument("--timeout-ms", type=int, default=2000)
    parser.add_argument("--only", choices=["throughput", "barrier", "standby"])
    args = parser.parse_args()
    for name, run in (("throughput", throughput), ("barrier", barrier), ("standby", standby)):
        if args.only in (None, name):
            print(f"# {name}", flush=True)
            run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
