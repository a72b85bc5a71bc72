#!/usr/bin/python3
"""Time lost to a failure in elastic training (FERRY_ELASTIC=1), measured as a user sees it.

Each run: 1 scheduler, 2 servers, 3 workers on loopback training examples/train_digits.py
--elastic; kill -9 of server 1 once worker 0 finished epoch 2, then of worker 2 once worker 0
finished epoch 6. For each kill: the seconds from the kill to the first training step
worker 0 completed after it (the example prints its unix time), against the goal of the
heartbeat timeout + 2 s. Prints, per heartbeat timeout, the median (min-max) over the runs,
and the test accuracy of each run.

    bench/elastic_recovery.py [--runs 3] [--timeouts 3000,10000]
      (FERRY_BIN / FERRY_PYTHONPATH: the build's bin and python folders; default build/)
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("FERRY_BIN", REPO / "build" / "bin"))
PYPATH = Path(os.environ.get("FERRY_PYTHONPATH", REPO / "build" / "python"))

sys.path.insert(0, str(REPO / "bench"))
from core_bench import free_port  # noqa: E402


def one_run(timeout_ms, tmp):
    env = dict(os.environ, DMLC_NUM_WORKER="3", DMLC_NUM_SERVER="2",
               DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
               DMLC_NODE_HOST="127.0.0.1", FERRY_ELASTIC="1", PYTHONPATH=str(PYPATH),
               FERRY_HEARTBEAT_INTERVAL_MS=str(max(100, timeout_ms // 15)),
               FERRY_HEARTBEAT_TIMEOUT_MS=str(timeout_ms))
    procs, logs = {}, {}

    def spawn(name, argv, role, extra=None):
        logs[name] = Path(tmp) / (name.replace(" ", "_") + ".log")
        procs[name] = subprocess.Popen(argv, env=dict(env, DMLC_ROLE=role, **(extra or {})),
                                       stdout=open(logs[name], "wb"), stderr=subprocess.STDOUT,
                                       start_new_session=True)

    def wait_for(name, pattern, limit=300):
        deadline = time.time() + limit
        while time.time() < deadline:
            if re.search(pattern, logs[name].read_text(errors="replace")):
                return
            if procs[name].poll() is not None:
                raise RuntimeError("%s exited:\n%s" % (name, logs[name].read_text()[-3000:]))
            time.sleep(0.02)
        raise RuntimeError("%s never printed %r" % (name, pattern))

    try:
        spawn("scheduler", [str(BIN / "ferry-scheduler")], "scheduler")
        for i in range(2):
            spawn("server %d" % i, [str(BIN / "ferry-server")], "server")
        for i in range(3):
            spawn("worker %d" % i, ["/usr/bin/python3", str(REPO / "examples" / "train_digits.py"),
                                    "--elastic", "--epochs", "12", "--step-sleep", "0.01"],
                  "worker", {"DMLC_WORKER_ID": str(i)})
        wait_for("worker 0", r"epoch  2 ")
        server_killed = time.time()
        procs["server 1"].send_signal(signal.SIGKILL)
        wait_for("worker 0", r"epoch  6 ")
        worker_killed = time.time()
        procs["worker 2"].send_signal(signal.SIGKILL)
        procs["worker 0"].wait(300)
        out = logs["worker 0"].read_text(errors="replace")
        firsts = [float(t) for t in re.findall(r"first step after at unix time ([0-9.]+)", out)]
        accuracy = float(re.search(r"test accuracy ([0-9.]+)", out).group(1))
        if len(firsts) != 2:
            raise RuntimeError("expected 2 recoveries:\n" + out[-3000:])
        return firsts[0] - server_killed, firsts[1] - worker_killed, accuracy
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeouts", default="3000,10000", help="FERRY_HEARTBEAT_TIMEOUT_MS values")
    args = ap.parse_args()
    timeouts = [int(t) for t in args.timeouts.split(",")]
    results = {t: [] for t in timeouts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            for t in timeouts:  # interleaved: the settings share the machine's state
                server, worker, accuracy = one_run(t, tmp)
                results[t].append((server, worker, accuracy))
                print("run %d timeout %5d ms: server kill -> first step %.2f s, worker kill -> "
                      "first step %.2f s, test accuracy %.4f" % (r + 1, t, server, worker, accuracy),
                      flush=True)
    print("\nheartbeat timeout | goal (timeout + 2 s) | server killed: s to first step | "
          "worker killed | test accuracy")
    for t in timeouts:
        rows = results[t]

        def cell(i):
            v = [row[i] for row in rows]
            return "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v))
        print("%d ms | %.1f s | %s | %s | %s" % (t, t / 1000 + 2, cell(0), cell(1),
                                                 ", ".join("%.3f" % row[2] for row in rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
