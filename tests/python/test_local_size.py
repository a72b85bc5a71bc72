"""Intra-machine reduction through the torch plugin: 2 "machines" on loopback, each
`ferry-launch --local-size 2` (so 4 processes, 2 of which register with the scheduler),
2 servers. size() counts processes; sums, averages, broadcast and DistributedOptimizer
are exact; no shared memory segment is left behind."""

import os
import time

import pytest
import torch

from conftest import FERRY_BIN, PYTHON, REPO, WORKER
from ferry_worker import values

LAUNCH = REPO / "scripts" / "ferry-launch"
MACHINES, LOCAL = 2, 2


def test_two_machines_of_two_local_processes(cluster, tmp_path):
    c = cluster(workers=MACHINES, servers=2, env={"FERRY_LOG_LEVEL": "INFO", "FERRY_BIN": str(FERRY_BIN)})
    c._spawn("scheduler", [str(FERRY_BIN / "ferry-scheduler")], "scheduler")
    for i in range(2):
        c._spawn("server %d" % i, [str(FERRY_BIN / "ferry-server")], "server")
    for m in range(MACHINES):
        out = str(tmp_path / ("m%d.%%LOCAL_RANK%%.pt" % m))
        c._spawn("worker %d" % m, [str(LAUNCH), "--local-size", str(LOCAL), PYTHON, str(WORKER), "local", out],
                 "worker", {"DMLC_WORKER_ID": str(m)})
    deadline = time.time() + 240
    for m in range(MACHINES):
        p = c.procs["worker %d" % m]
        p.wait(max(0.1, deadline - time.time()))
        assert p.returncode == 0, "machine %d exited %s\n%s" % (m, p.returncode, c.logs())
    res = {}
    for m in range(MACHINES):
        for lr in range(LOCAL):
            r = torch.load(tmp_path / ("m%d.%d.pt" % (m, lr)))
            assert r["rank"] == m * LOCAL + lr, r          # DMLC_WORKER_ID x local size + local rank
            assert (r["size"], r["local_rank"], r["local_size"]) == (4, lr, 2), r
            assert r["core_local"] == (lr, 2), r
            res[r["rank"]] = r
    assert sorted(res) == [0, 1, 2, 3]
    size = 4
    for rank, r in res.items():
        for dtype in (torch.float32, torch.float16, torch.int64):
            want = sum(values((1031,), dtype, k) for k in range(size))
            assert torch.equal(r["sums"][str(dtype)], want), (rank, dtype)
        want = sum(values((257,), torch.float32, k) for k in range(size)) / size
        assert torch.equal(r["avg"], want), rank
        assert torch.equal(r["bcast"], torch.full((5,), 3.0)), (rank, r["bcast"])
        assert torch.equal(r["w0"], res[3]["w0"]), rank         # broadcast_parameters from rank 3
        w = r["w0"].clone()
        for step in range(3):
            mean = sum(k + 1 + step for k in range(size)) / size   # the averaged gradient
            w.add_(torch.full((1, 4), mean), alpha=-0.5)
        assert torch.equal(r["w"], w), (rank, r["w"], w)
        assert "Join (uneven data) is not supported with FERRY_LOCAL_SIZE=2" in r["join_error"], r
        assert ("push_pull_rows of 'local.rows' is not supported with FERRY_LOCAL_SIZE=2"
                in r["rows_error"]), r
        if r["local_rank"] != 0:   # only the local root partitions tensors
            assert ("SetScheduling is not available on local rank 1 (FERRY_LOCAL_SIZE=2)"
                    in r["scheduling_error"]), r
    sched = c.log("scheduler")
    assert "all 2 servers and 2 workers registered" in sched, sched[-3000:]
    left = [n for n in os.listdir("/dev/shm") for r in res.values() if n.startswith("ferry-%d-" % r["pid"])]
    assert left == []
