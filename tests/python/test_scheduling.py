"""Scheduling through ferry.torch: DistributedOptimizer.step() marks iteration boundaries
(Worker::StepBoundary), so FERRY_AUTOTUNE switches partition size and credit during
training, on every worker at once, and FERRY_TRACE_DIR gets a Chrome-trace timeline per
worker; set_scheduling() re-partitions between push_pulls. Training stays exact."""

import json
import re

import pytest
import torch

from test_equivalence import BATCH, SEED, WORKERS, errors, reference

STEPS = 12
# 2 sizes x 2 credits, 2 iterations each: the choice comes at the 9th step of 12.
AUTOTUNE = {"FERRY_AUTOTUNE": "1", "FERRY_AUTOTUNE_PARTITION_BYTES": "4096,65536",
            "FERRY_AUTOTUNE_CREDITS": "1,4", "FERRY_AUTOTUNE_STEPS": "2"}


@pytest.fixture(scope="module")
def tuned(module_cluster, tmp_path_factory):
    trace_dir = tmp_path_factory.mktemp("trace")
    env = dict(AUTOTUNE, FERRY_TRACE_DIR=str(trace_dir), FERRY_LOG_LEVEL="INFO")
    c = module_cluster(workers=WORKERS, servers=2, env=env)
    c.start("train", "--configs", "momentum", "--steps", STEPS, "--batch-size", BATCH, "--seed", SEED)
    res = c.wait_workers(timeout=200)
    for r in res:
        assert "traceback" not in r, r.get("traceback")
    logs = [c.log("worker %d" % i) for i in range(WORKERS)]
    return sorted(res, key=lambda r: r["rank"]), logs, trace_dir


def test_autotune_keeps_training_exact(tuned):
    res, _, _ = tuned
    per_worker = [r["results"]["momentum"] for r in res]
    batches = [torch.cat([w["indices"][s] for w in per_worker]) for s in range(STEPS)]
    want = reference("momentum", batches)
    for w in per_worker:
        for name, v in want.items():
            _, used = errors(w["params"][name], v, 1e-5, 1e-6)
            assert used <= 1.0, name


def test_autotune_every_worker_chooses_the_same(tuned):
    _, logs, _ = tuned
    chosen = []
    for log in logs:
        m = re.search(r"autotune: chose (partition \d+ bytes, credit \d+ bytes) \(candidate \d of 4\) "
                      r"after 9 iterations", log)
        assert m, log[-3000:]
        chosen.append(m.group(1))
    assert chosen[0] == chosen[1]


def test_trace_is_a_chrome_trace_of_every_gradient(tuned):
    _, _, trace_dir = tuned
    for rank in range(WORKERS):
        with open(trace_dir / ("ferry-worker-%d.json" % rank)) as f:
            trace = json.load(f)  # valid JSON, closed by shutdown
        events = trace["traceEvents"]
        assert events[0] == {"ph": "M", "name": "process_name", "pid": rank,
                             "args": {"name": "worker %d" % rank}}
        steps = [e["name"] for e in events if e["ph"] == "i" and e["name"].startswith("step ")]
        assert steps == ["step %d" % (i + 1) for i in range(STEPS)]
        # The autotune's 4 candidates and its choice.
        switches = [e["args"] for e in events if e["ph"] == "i" and e["name"] == "scheduling"]
        assert len(switches) == 5, switches
        assert {s["partition_bytes"] for s in switches} == {4096, 65536}
        slices = [e for e in events if e.get("cat") == "partition"]
        grads = [e for e in slices if e["ph"] == "b" and e["name"].startswith("Gradient.momentum.")]
        # Every step pushed every gradient of the model (8 parameters) at least once.
        assert len({e["name"].split("[")[0] for e in grads}) == 8
        assert len(grads) >= 8 * STEPS
        balance = {}
        for e in slices:
            balance[e["id"]] = balance.get(e["id"], 0) + (1 if e["ph"] == "b" else -1)
            assert e["ts"] >= 0
        assert set(balance.values()) == {0}
        stages = {e["name"] for e in slices if e["ph"] == "b" and "[" not in e["name"]}
        assert {"queue", "push", "return"} <= stages


@pytest.mark.parametrize("policy", ["credit", "p3", "fifo-bucket"])
def test_set_scheduling_between_push_pulls(cluster, policy):
    c = cluster(workers=2, servers=2, env={"FERRY_SCHEDULING_POLICY": policy,
                                           "FERRY_P3_SLICE_BYTES": "16384"})
    c.start("scheduling")
    res = sorted(c.wait_workers(timeout=120), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        assert r["before"]["policy"] == policy
        first = 16384 if policy == "p3" else 1048576  # FERRY_PARTITION_BYTES default
        assert [s["partition_bytes"] for s in r["seen"]] == [first, 8192, 65536, 8192]
        assert [s["credit_bytes"] for s in r["seen"]][1:] == [32768, 262144, 32768]
        for step, got in enumerate(r["sums"]):
            want = 2 * torch.arange(50000, dtype=torch.float32) + 1 + 2 * step
            assert torch.equal(got, want), step
        assert [s["window_gain"] for s in r["seen"]] == [0.0] * 4  # FERRY_WINDOW=fixed default


def test_set_scheduling_fixes_the_window_and_keeps_the_frames(cluster):
    c = cluster(workers=2, servers=2, env={"FERRY_WINDOW": "bdp", "FERRY_FRAME_BYTES": "16384"})
    c.start("scheduling")
    res = sorted(c.wait_workers(timeout=120), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        assert r["before"]["window_gain"] == 2.0 and r["before"]["frame_bytes"] == 16384
        # set_scheduling's credit is fixed; the frame size stays.
        assert [s["window_gain"] for s in r["seen"]] == [2.0, 0.0, 0.0, 0.0]
        assert [s["frame_bytes"] for s in r["seen"]] == [16384] * 4
        for step, got in enumerate(r["sums"]):
            want = 2 * torch.arange(50000, dtype=torch.float32) + 1 + 2 * step
            assert torch.equal(got, want), step
        assert r["stats"]["window_on"] == 0 and r["stats"]["window_samples"] > 0
        assert r["stats"]["frames_pushed"] > 0
