"""Partitions sized per link on an emulated cluster with one slow link
(bench/uneven_links_bench.py on scripts/netns-cluster --worker-rates): every sum is checked
(ferry-train-sim --check), the slow worker cuts its pushes in smaller pieces than the fast
ones, the servers sum the mixed cuts, and when the slow link speeds up mid-run the slow
worker decides its pieces again. The same with the per-layer decomposition."""

import json

from deploy_support import FERRY_BIN, REPO, clean_env, need_binaries, need_netns, run

BENCH = REPO / "bench" / "uneven_links_bench.py"


def run_bench(tmp_path, configs, extra=()):
    out_file = tmp_path / "result.json"
    code, out = run(["/usr/bin/python3", BENCH, "--models", "resnet50:0.02:0.05", "--workers", "3",
                     "--servers", "2", "--rate", "1gbit", "--slow-rate", "100mbit", "--slow-rank", "2",
                     "--links", "uneven", "--configs", configs, "--iterations", "30", "--warmup", "2",
                     "--repeats", "1", "--check", "--timeout", "120", "--bin", FERRY_BIN,
                     "--out", out_file] + list(extra), timeout=240, env=clean_env())
    assert code == 0, out[-6000:]
    runs = json.loads(out_file.read_text())["runs"]
    for r in runs:
        assert r["wrong_values"] == 0 and r["checked_values"] > 0, r
    return runs


def test_the_slow_worker_cuts_smaller_pieces_and_decides_again_when_its_link_speeds_up(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-train-sim")
    need_netns()
    # The slow link goes from 100 Mbit/s to 1 Gbit/s 2.5 s after the workers start (after the sizing boundary).
    [r] = run_bench(tmp_path, "per-link=FERRY_PARTITION_PER_LINK=1", ["--slow-rate-change", "2.5:1gbit"])
    fast, slow = r["pieces"][0], r["pieces"][2]
    assert all(p["link_decisions"] >= 1 for p in r["pieces"]), r["pieces"]
    # Decided again once the link sped up: its pieces are the fast workers' now.
    assert slow["link_decisions"] >= 2, r["pieces"]
    assert slow["link_piece_bytes_max"] == fast["link_piece_bytes_max"], r["pieces"]
    assert r["frames_recut"] > 0, r


def test_pieces_stay_small_on_a_slow_link_and_every_sum_is_exact(tmp_path):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-train-sim")
    need_netns()
    today, per_link, per_layer = run_bench(
        tmp_path, "today=;per-link=FERRY_PARTITION_PER_LINK=1;per-layer=FERRY_DECOMPOSE=per-layer")
    assert today["frames_recut"] == 0 and today["pieces"][2]["link_decisions"] == 0, today
    fast, slow = per_link["pieces"][0], per_link["pieces"][2]
    assert slow["link_piece_bytes_max"] < fast["link_piece_bytes_min"], per_link["pieces"]
    assert per_link["frames_recut"] > 0, per_link
    # Per layer: every worker decided its layers' pieces from what it measured.
    assert all(p["layer_decisions"] >= 1 for p in per_layer["pieces"]), per_layer["pieces"]
