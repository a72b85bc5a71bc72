"""ferry-train-sim replays a model's training step on a real cluster, checking every sum:
on loopback (scripts/local-cluster), and on an emulated cluster of network namespaces
with shaped links (bench/train_sim_bench.py on scripts/netns-cluster)."""

import csv
import json
import re
import sys

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


def worker_counters(stats_dir, workers):
    return [json.loads((stats_dir / ("worker-%d.json" % i)).read_text())["counters"] for i in range(workers)]


def test_train_sim_on_loopback_sums_exactly(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-train-sim")
    code, out = run([SCRIPTS / "local-cluster", "-s", "2", "-w", "2", "--", FERRY_BIN / "ferry-train-sim"]
                    + sim_args(iterations=4, warmup=1), timeout=120,
                    env=clean_env({"FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING",
                                   "FERRY_STATS_FILE": str(tmp_path / "%r.json")}))
    assert code == 0, out[-6000:]
    reports = [json.loads(m.group(1)) for m in re.finditer(r"^\[worker \d\] (\{.*\})$", out, re.M)]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-6000:]
    for r in reports:
        assert_exact(r, workers=2, servers=2, iterations=4, warmup=1)
    # Every server is on loopback: FERRY_PARTITION_MS's default stands aside (the rate
    # measured here is the CPU's), so partitions stay the configured 1 MiB past iteration 3.
    for counters in worker_counters(tmp_path, 2):
        assert counters["scheduling.partition_bytes"] == 1 << 20, counters
        assert counters["window.samples"] >= 8, counters


def test_train_sim_on_a_netns_cluster_sums_exactly_and_cleans_up(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-train-sim")
    need_netns()
    out_file = tmp_path / "result.json"
    code, out = run(["/usr/bin/python3", REPO / "bench" / "train_sim_bench.py", "--models", "resnet50",
                     "--rates", "1gbit", "--compute-scales", str(COMPUTE_SCALE), "--byte-scale", str(BYTE_SCALE),
                     "--workers", "2", "--servers", "1", "--iterations", "3", "--warmup", "1", "--repeats", "1",
                     "--check", "--timeout", "60", "--bin", FERRY_BIN, "--out", out_file],
                    timeout=120, env=clean_env())
    assert code == 0, out[-6000:]
    result = json.loads(out_file.read_text())
    [record] = result["runs"]
    assert "error" not in record, record
    assert record["wrong_values"] == 0 and record["checked_values"] == 2 * 4 * scaled_elements()
    assert len(record["workers"]) == 2
    for r in record["workers"]:
        assert_exact(r, workers=2, servers=1, iterations=3, warmup=1)
        assert r["lb"]["rate_gbps"] == 1 and r["lb"]["b_eff_gbps"] == 0.5   # 1 server for 2 workers
    assert 0 < record["cpu"]["busiest_core_pct"] <= 100
    # The server is another (emulated) host behind a 1 Gbit/s link: by default, at the third
    # iteration boundary, partitions shrank to what that link sends in FERRY_PARTITION_MS
    # (2 ms: at most 256 KiB at 1 Gbit/s, whatever share of it the workers measured).
    assert 128 << 10 <= record["transport"]["scheduling.partition_bytes"] <= 256 << 10, record["transport"]
    assert [ns for ns in netns_list() if ns.startswith(record["cluster"] + "-")] == []


def test_unified_bench_times_ferry_and_gloo_on_a_netns_cluster_and_cleans_up(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-perf")
    need_netns()
    out_file = tmp_path / "unified.json"
    code, out = run(["/usr/bin/python3", REPO / "bench" / "unified_bench.py", "--workers", "2", "--ks", "1",
                     "--rate", "1gbit", "--bytes", "1M", "--iters", "2", "--warmup", "0", "--repeats", "1",
                     "--timeout", "120", "--probe-links", "--bin", FERRY_BIN, "--out", out_file],
                    timeout=300, env=clean_env())
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
    # The shared-memory lane joins each worker to its colocated server only: never to the
    # other worker host's server nor to extra0 (each emulated host is its own namespace), so
    # it never bypasses a shaped link.
    # (Whether bytes took it depends on where the one 1 MiB partition was placed.)
    assert record["transport"]["shm_lanes_per_worker"] == [1, 1], record["transport"]
    # The links: the bridge forwards what it receives, so what the hosts sent is what they got
    # (give or take ARP); worker 0 sent at least the remote part of its pushes, 2 x 1 MiB
    # times the share off its own host (at least half with a CPU-only server beside it).
    links = record["links"]
    hosts = ["worker0", "worker1", "extra0"]
    sent, got = (sum(links[h][d] for h in hosts) for d in ("up_bytes", "down_bytes"))
    assert got == pytest.approx(sent, rel=0.02), links
    assert links["worker0"]["up_bytes"] >= 2 * (1 << 20) // 2, links
    assert 0 < links["worker0"]["up_busy"] <= 1.05, links
    [row] = result["summary"]
    assert row["gloo_over_ferry"] == pytest.approx(record["gloo_s"] / record["ferry_s"], rel=1e-6)
    assert [ns for ns in netns_list() if ns.startswith("ub")] == []


def test_link_probe_summary_reads_busy_shares_and_queue_depths_from_samples():
    sys.path.insert(0, str(REPO / "bench"))
    from link_probe import LinkProbe
    probe = LinkProbe("unused-bridge", ["a", "b"])
    rate = 1000.0  # bytes per second
    # Idle 0.2 s, then 1 s in which a sends at the full rate and receives half, b the reverse;
    # then idle again. Queue depths sampled on every other sample.
    samples, rx, tx = [], [0, 0], [0, 0]
    for i in range(15):
        t = i * 0.1
        if 2 <= i < 12:
            rx, tx = [rx[0] + 100, rx[1] + 50], [tx[0] + 50, tx[1] + 100]
        line = {"t": t, "rx": list(rx), "tx": list(tx)}
        if i % 2 == 0:
            line["backlog"] = [i * 10, 0]
        samples.append(line)
    probe.samples = samples
    s = probe.summary(rate)
    assert s["span_s"] == pytest.approx(1.0)
    assert s["a"]["up_bytes"] == 1000 and s["a"]["down_bytes"] == 500
    assert s["a"]["up_busy"] == pytest.approx(1.0) and s["a"]["down_busy"] == pytest.approx(0.5)
    assert s["b"]["up_busy"] == pytest.approx(0.5) and s["b"]["down_busy"] == pytest.approx(1.0)
    # Together the uplinks sent 75% of their rate all through the span: a quarter of it idle,
    # in bins of steady traffic (none below half the rate).
    assert s["idle_s_gaps"] == 0 and s["idle_s_steady"] == pytest.approx(0.25)
    # The span runs from the last idle sample (t = 0.1) to the last moving one (1.1); the
    # backlog samples inside it are t = 0.2, 0.4, ..., 1.0 -> 20, 40, ..., 100.
    assert s["a"]["backlog_max"] == 100 and s["a"]["backlog_p50"] == 60 and s["b"]["backlog_max"] == 0
    timeline = probe.timeline(rate, bin_s=0.5)
    # Whole bins only: [0, 0.5) and [0.5, 1.0); the samples end at 1.4.
    assert [round(t, 1) for t, _ in timeline] == [0.0, 0.5]
    assert timeline[0][1]["a"][:2] == (0.8, 0.4) and timeline[1][1]["a"][:2] == (1.0, 0.5)
    assert LinkProbe("x", ["a"]).summary(rate) == {}
    # One host: 0.5 s at the full rate, then 0.5 s at 20% (a gap: 80% of it lost).
    probe = LinkProbe("unused-bridge", ["a"])
    probe.samples = [{"t": i * 0.1, "rx": [sum(100 if k < 5 else 20 for k in range(i))], "tx": [0]}
                     for i in range(11)]
    split = probe.idle_split(rate, 0.0, 1.0)
    assert split["idle_s_gaps"] == pytest.approx(0.4) and split["idle_s_steady"] == pytest.approx(0.0)
