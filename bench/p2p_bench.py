#!/usr/bin/python3
"""Point-to-point between two workers against a raw ZeroMQ stream between two processes on
the same host, interleaved, medians with min-max (docs/benchmarks.md, "Point-to-point").

    FERRY_BIN=build/bin FERRY_PYTHONPATH=build/python bench/p2p_bench.py [--repeats 5]

Each repeat runs, in turn:
  zmq      ferry-zmq-stream: a DEALER streams the messages to a ROUTER (no acks), and a
           4 KiB ping-pong: the reference (as in bench/core_bench.py)
  tcp      Ferry's send/recv between two workers with FERRY_SHM=0 (loopback TCP), the sender
           keeping `--window` sends in flight, and a 4 KiB send/recv ping-pong
  shm      the same over the shared-memory lane (FERRY_SHM=1)
Bandwidth counts payload bytes from the first send to the last one's completion. Prints
each repeat and the ratios: tcp / zmq and shm / tcp bandwidth, tcp / zmq 4 KiB round trip.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
PY = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- raw ZeroMQ

def run_zmq(size, count, pings):
    """The reference: ferry-zmq-stream's raw stream of `count` messages (one DEALER to a
    ROUTER, malloc tuned as Ferry's processes) and its 4 KiB ping-pong (median round trip)."""
    from conftest import FERRY_BIN
    tool = str(FERRY_BIN / "ferry-zmq-stream")
    stream = subprocess.run([tool, "--sizes=%d" % size, "--messages=%d" % count, "--tune_malloc",
                             "--format=csv", "--port=%d" % free_port()], capture_output=True,
                            text=True, timeout=600, check=True).stdout.strip().splitlines()
    pong = subprocess.run([tool, "--pingpong", "--message_bytes=4096", "--messages=%d" % pings,
                           "--format=csv", "--port=%d" % free_port()], capture_output=True,
                          text=True, timeout=600, check=True).stdout.strip().splitlines()
    return {"gbps": float(stream[-1].split(",")[3]), "rtt_us": float(pong[-1].split(",")[2])}


# ----------------------------------------------------------------------------- Ferry

def ferry_worker(size, count, pings, window):
    """A Ferry worker of the measured job: rank 0 sends, rank 1 receives."""
    import torch
    import ferry.torch as bps
    bps.init()
    rank = bps.rank()
    data = torch.zeros(size // 4, dtype=torch.float32)
    ping = torch.zeros(1024, dtype=torch.float32)  # 4 KiB
    result = None
    bps.barrier()
    if rank == 0:
        bps.send(data, 1)  # connects
        start = time.perf_counter()
        handles = []
        for _ in range(count - 1):
            handles.append(bps.isend(data, 1))
            if len(handles) >= window:
                bps.synchronize(handles.pop(0))
        for h in handles:
            bps.synchronize(h)
        seconds = time.perf_counter() - start
        rtts = []
        for _ in range(pings):
            t = time.perf_counter()
            bps.send(ping, 1, tag=1)
            bps.recv(ping, 1, tag=1)
            rtts.append(time.perf_counter() - t)
        result = {"gbps": size * (count - 1) / seconds / 1e9,
                  "rtt_us": statistics.median(rtts) * 1e6}
    else:
        bufs = [torch.empty_like(data) for _ in range(window)]
        handles = []
        for i in range(count):
            handles.append(bps.irecv(bufs[i % window], 0))
            if len(handles) >= window:
                bps.synchronize(handles.pop(0))
        for h in handles:
            bps.synchronize(h)
        for _ in range(pings):
            bps.recv(ping, 0, tag=1)
            bps.send(ping, 0, tag=1)
    bps.barrier()
    bps.shutdown()
    if result:
        print(json.dumps(result), flush=True)


def run_ferry(size, count, pings, window, shm):
    from conftest import FERRY_BIN, base_env
    env = base_env({"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1",
                    "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
                    "DMLC_NODE_HOST": "127.0.0.1", "FERRY_SHM": "1" if shm else "0"})
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        def spawn(argv, role, extra=None):
            log = open(os.path.join(tmp, "%s%d.log" % (role, len(procs))), "w")
            procs.append(subprocess.Popen(argv, env=dict(env, DMLC_ROLE=role, **(extra or {})),
                                          stdout=log if role != "worker" else subprocess.PIPE,
                                          stderr=log, text=True))
            return procs[-1]
        spawn([str(FERRY_BIN / "ferry-scheduler")], "scheduler")
        spawn([str(FERRY_BIN / "ferry-server")], "server")
        args = [PY, __file__, "--ferry-worker", str(size), str(count), str(pings), str(window)]
        sender = spawn(args, "worker", {"DMLC_WORKER_ID": "0"})
        spawn(args, "worker", {"DMLC_WORKER_ID": "1"})
        out, _ = sender.communicate(timeout=300)
        for p in procs:
            p.wait(60)
        return json.loads(out.strip().splitlines()[-1])


def summary(values):
    return "%.3g (%.3g-%.3g)" % (statistics.median(values), min(values), max(values))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--ferry-worker":
        ferry_worker(*(int(a) for a in sys.argv[2:6]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--size", type=int, default=4 << 20, help="bytes per message (default 4 MiB)")
    p.add_argument("--count", type=int, default=200, help="messages per bandwidth run")
    p.add_argument("--pings", type=int, default=500, help="4 KiB round trips per run")
    p.add_argument("--window", type=int, default=8, help="Ferry sends in flight")
    a = p.parse_args()
    runs = {"zmq": [], "tcp": [], "shm": []}
    for i in range(a.repeats):
        runs["zmq"].append(run_zmq(a.size, a.count, a.pings))
        runs["tcp"].append(run_ferry(a.size, a.count, a.pings, a.window, shm=False))
        runs["shm"].append(run_ferry(a.size, a.count, a.pings, a.window, shm=True))
        print("repeat %d: %s" % (i + 1, "  ".join(
            "%s %.2f GB/s %.0f us" % (k, v[-1]["gbps"], v[-1]["rtt_us"]) for k, v in runs.items())),
            flush=True)
    ratio = lambda a_, b_, k: [x[k] / y[k] for x, y in zip(runs[a_], runs[b_])]  # noqa: E731
    for k in runs:
        print("%-4s bandwidth GB/s %s   4 KiB round trip us %s" % (
            k, summary([r["gbps"] for r in runs[k]]), summary([r["rtt_us"] for r in runs[k]])))
    print("ferry tcp / raw zmq bandwidth:      %s (goal >= 0.8)" % summary(ratio("tcp", "zmq", "gbps")))
    print("ferry shm / ferry tcp bandwidth:    %s (goal >= 1.5)" % summary(ratio("shm", "tcp", "gbps")))
    print("ferry tcp / raw zmq 4 KiB round trip: %s (goal <= 2)" % summary(ratio("tcp", "zmq", "rtt_us")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
