"""ferry-train-sim replays a model's training step on a real cluster, checking every sum:
on loopback (scripts/local-cluster), and on an emulated cluster of network namespaces
with shaped links (bench/train_sim_bench.py on scripts/netns-cluster)."""

import csv
import json
import re

import pytest

from deploy_support import (FERRY_BIN, REPO, SCRIPTS, clean_env, need_binaries, need_netns,
                            netns_list, run)

WORKLOAD = REPO / "bench" / "workloads" / "resnet50_layers.csv"
BYTE_SCALE = 0.01
COMPUTE_SCALE = 0.05


def scaled_elements():
    """Float32 elements per iteration of the scaled workload, as ferry-train-sim rounds them."""
    lines = [line for line in WORKLOAD.read_text().splitlines() if not line.startswith("#")]
    return sum(max(1, round(int(r["bytes"]) // 4 * BYTE_SCALE)) for r in csv.DictReader(lines))


def compute_ms():
    lines = [line for line in WORKLOAD.read_text().splitlines() if not line.startswith("#")]
    return sum((float(r["fwd_ms"]) + float(r["bwd_ms"])) * COMPUTE_SCALE for r in csv.DictReader(lines))


def sim_args(iterations, warmup):
    return ["--workload", WORKLOAD, "--byte_scale", str(BYTE_SCALE), "--compute_scale", str(COMPUTE_SCALE),
            "--iterations", str(iterations), "--warmup", str(warmup), "--check", "--json", "--rate_gbps", "1"]


def assert_exact(report, workers, servers, iterations, warmup):
    assert report["workers"] == workers and report["servers"] == servers, report
    assert report["layers"] == 54 and report["bytes"] == 4 * scaled_elements(), report
    assert len(report["iterations_ms"]) == iterations, report
    # Every sum of every layer of every iteration was checked, and all were exact.
    assert report["checked_values"] == scaled_elements() * (iterations + warmup), report
    assert report["wrong_values"] == 0, report
    # An iteration cannot beat its own compute, nor LB1 (which includes it).
    assert report["lb"]["cf_ms"] + report["lb"]["cb_ms"] == pytest.approx(compute_ms(), rel=1e-6)
    assert min(report["iterations_ms"]) >= 0.99 * report["lb"]["lb1_ms"], report


def test_train_sim_on_loopback_sums_exactly():
    need_binaries("ferry-scheduler", "ferry-server", "ferry-train-sim")
    code, out = run([SCRIPTS / "local-cluster", "-s", "2", "-w", "2", "--", FERRY_BIN / "ferry-train-sim"]
                    + sim_args(iterations=4, warmup=1), timeout=120,
                    env=clean_env({"FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING"}))
    assert code == 0, out[-6000:]
    reports = [json.loads(m.group(1)) for m in re.finditer(r"^\[worker \d\] (\{.*\})$", out, re.M)]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-6000:]
    for r in reports:
        assert_exact(r, workers=2, servers=2, iterations=4, warmup=1)


def test_train_sim_on_a_netns_cluster_sums_exactly_and_cleans_up(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-train-sim")
    need_netns()
    out_file = tmp_path / "result.json"
    code, out = run(["/usr/bin/python3", REPO / "bench" / "train_sim_bench.py", "--models", "resnet50",
                     "--rates", "1gbit", "--compute-scales", str(COMPUTE_SCALE), "--byte-scale", str(BYTE_SCALE),
                     "--workers", "2", "--servers", "1", "--iterations", "2", "--warmup", "0", "--repeats", "1",
                     "--check", "--timeout", "60", "--bin", FERRY_BIN, "--out", out_file],
                    timeout=120, env=clean_env())
    assert code == 0, out[-6000:]
    result = json.loads(out_file.read_text())
    [record] = result["runs"]
    assert "error" not in record, record
    assert record["wrong_values"] == 0 and record["checked_values"] == 2 * 2 * scaled_elements()
    assert len(record["workers"]) == 2
    for r in record["workers"]:
        assert_exact(r, workers=2, servers=1, iterations=2, warmup=0)
        assert r["lb"]["rate_gbps"] == 1 and r["lb"]["b_eff_gbps"] == 0.5   # 1 server for 2 workers
    assert 0 < record["cpu"]["busiest_core_pct"] <= 100
    assert [ns for ns in netns_list() if ns.startswith(record["cluster"] + "-")] == []


def test_unified_bench_times_ferry_and_gloo_on_a_netns_cluster_and_cleans_up(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-perf")
    need_netns()
    out_file = tmp_path / "unified.json"
    code, out = run(["/usr/bin/python3", REPO / "bench" / "unified_bench.py", "--workers", "2", "--ks", "1",
                     "--rate", "1gbit", "--bytes", "1M", "--iters", "2", "--warmup", "0", "--repeats", "1",
                     "--timeout", "120", "--bin", FERRY_BIN, "--out", out_file], timeout=300, env=clean_env())
    assert code == 0, out[-6000:]
    result = json.loads(out_file.read_text())
    [record] = result["runs"]
    assert "error" not in record, record
    assert record["ferry_s"] > 0 and record["gloo_s"] > 0, record
    # T_opt for n = 2, k = 1: 2 n (n - 1) M / ((n^2 + k n - 2k) B) = 4 M / (4 B).
    assert record["t_opt_s"] == pytest.approx((1 << 20) / (1e9 / 8), rel=1e-6), record
    # Nothing beats the network's bound (bytes cross a shaped link at most at its rate).
    assert record["ferry_s"] >= 0.9 * record["t_opt_s"], record
    # The workers' counters came back, the window's among them.
    assert record["transport"]["window.bytes"] >= 1 << 20, record["transport"]
    [row] = result["summary"]
    assert row["gloo_over_ferry"] == pytest.approx(record["gloo_s"] / record["ferry_s"], rel=1e-6)
    assert [ns for ns in netns_list() if ns.startswith("ub")] == []
