"""Compute spans from ferry.torch (plugins/ferry/torch/compute_trace.py): with
FERRY_TRACE_DIR, a small CNN trained on a real cluster (2 workers, 2 servers) puts each
parameter's forward and backward compute in the worker's trace under its gradient's
name, and ferry-sim --workload <that dir> replays it."""

import json
import subprocess

from conftest import FERRY_BIN
from test_equivalence import BATCH, SEED, WORKERS

STEPS = 6
CONFIGS = ["momentum", "momentum+cb"]  # DistributedOptimizer, then with CrossBarrier
# DigitsCNN (examples/train_digits.py) in forward order.
PARAMS = ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
          "fc2.weight", "fc2.bias"]


def test_torch_reports_compute_per_parameter_and_ferry_sim_replays_it(cluster, tmp_path):
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    c = cluster(workers=WORKERS, servers=2, env={"FERRY_TRACE_DIR": str(trace_dir)})
    c.start("train", "--configs", ",".join(CONFIGS), "--steps", STEPS, "--batch-size", BATCH,
            "--seed", SEED)
    for r in c.wait_workers(timeout=200):
        assert "traceback" not in r, r.get("traceback")

    for rank in range(WORKERS):
        with open(trace_dir / ("ferry-worker-%d.json" % rank)) as f:
            events = json.load(f)["traceEvents"]
        compute = [e for e in events if e.get("cat") == "compute"]
        assert compute, "no compute spans in worker %d's trace" % rank
        for e in compute:
            assert e["ph"] == "X" and e["dur"] >= 0 and e["args"]["tensor"] == e["name"], e
        for config in CONFIGS:
            names = ["Gradient.%s.%s" % (config, p) for p in PARAMS]
            for name in names:
                for phase, count in (("backward", STEPS), ("forward", STEPS - 1)):
                    spans = [e for e in compute if e["name"] == name and e["args"]["phase"] == phase]
                    # Every backward; every forward but a module's first (untimed).
                    assert len(spans) == count, (name, phase, spans)
                    assert sum(e["dur"] for e in spans) > 0, (name, phase, spans)
            # In each pass, forward runs the layers input first and backward output first.
            forward = [e["name"] for e in compute
                       if e["name"] in names and e["args"]["phase"] == "forward"]
            assert forward == names * (STEPS - 1)
            backward = [e["name"] for e in sorted(compute, key=lambda e: e["ts"] + e["dur"])
                        if e["name"] in names and e["args"]["phase"] == "backward"]
            weights = [n for n in backward if n.endswith(".weight")]
            assert weights == [n for n in names[::-1] if n.endswith(".weight")] * STEPS

    sim = subprocess.run([str(FERRY_BIN / "ferry-sim"), "--workload", str(trace_dir), "--workers",
                          "2", "--servers", "2", "--rate", "1gbit", "--iterations", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert sim.returncode == 0, sim.stdout
    assert "ferry-sim: trace (16 layers" in sim.stdout, sim.stdout
    assert "iteration  median" in sim.stdout, sim.stdout
