"""Gradient compression from Python (docs/compression.md): FERRY_COMPRESSION on every role,
per-tensor compressors that win over it, what is never compressed (integers, small
tensors, allgather, broadcast), DistributedOptimizer with onebit, the counters, a bad
compressor's error; and training: train_digits reaches 0.96 with onebit and top-k."""

import subprocess

import pytest
import torch

from conftest import EXAMPLES, FERRY_BIN, PYTHON, REPO, base_env
from compression_modes import N, _values

WORKERS = 2


@pytest.fixture(scope="module")
def results(module_cluster):
    c = module_cluster(workers=WORKERS, servers=2, env={"FERRY_COMPRESSION": "topk:0.1"})
    c.start("compression")
    res = sorted(c.wait_workers(timeout=150), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
    return res


def exact_sum(n, dtype=torch.float32):
    return sum(_values(n, r, dtype) for r in range(WORKERS))


def test_the_environments_compressor_applies_and_every_worker_gets_the_same(results):
    for r in results:
        nonzero = int(torch.count_nonzero(r["env"]))
        assert 0 < nonzero <= N // 10, nonzero  # the server's top 10% of the sum
        assert torch.equal(r["env"], results[0]["env"])
        # The values kept are sums of the pushes' kept values: never above the exact sum's
        # largest magnitude.
        assert r["env"].abs().max() <= exact_sum(N).abs().max()


def test_a_tensors_own_compressor_wins_and_none_travels_raw(results):
    for r in results:
        assert torch.equal(r["fp16"], exact_sum(N))  # small integers: exact in float16
        assert torch.equal(r["raw"], exact_sum(N))


def test_integers_small_tensors_allgather_and_broadcast_stay_exact(results):
    for r in results:
        assert torch.equal(r["int"], exact_sum(N, torch.int32))
        assert torch.equal(r["small"], exact_sum(1000))
        assert torch.equal(r["gathered"], torch.cat([_values(N, k) for k in range(WORKERS)]))
        assert torch.equal(r["broadcast"], _values(N, 1))


def test_distributed_optimizer_with_onebit(results):
    for r in results:
        w = r["onebit_weight_grad"]
        assert torch.equal(w, results[0]["onebit_weight_grad"])
        assert len(torch.unique(w.abs())) == 1, torch.unique(w.abs())  # one scale
        assert len(torch.unique(r["onebit_bias_grad"].abs())) > 1  # 400 bytes: raw


def test_the_counters_show_fewer_bytes_on_the_wire(results):
    for r in results:
        raw, wire = r["stats"]["compression_raw_bytes"], r["stats"]["compression_wire_bytes"]
        assert raw > 0 and 0 < wire < raw / 2, (raw, wire)


def test_a_bad_compressor_is_refused_naming_it(results):
    for r in results:
        kind, message = r["bad"]
        assert kind == "FerryError" and "'zip'" in message and "accepted" in message, message


@pytest.mark.parametrize("compression", ["onebit+ef", "topk:0.01+ef"])
def test_train_digits_reaches_096_compressed(compression):
    # The uncompressed run reaches 0.98 (test_examples); gradients of at least
    # FERRY_COMPRESSION_MIN_BYTES (64 KiB: the first linear layer, 92% of the bytes) go
    # compressed.
    env = base_env(dict(FERRY_BIN=str(FERRY_BIN)))
    r = subprocess.run([str(REPO / "scripts" / "local-cluster"), "-s", "1", "-w", "2", "--",
                        PYTHON, str(EXAMPLES / "train_digits.py"), "--compression", compression,
                        "--min-accuracy", "0.96"],
                       env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "compression " + compression in r.stdout, r.stdout[-2000:]


def test_ddp_with_the_ferry_backends_compression_hook(cluster):
    from conftest import free_port
    c = cluster(workers=WORKERS, servers=1,
                env={"FERRY_TEST_DDP_PORT": str(free_port()), "FERRY_COMPRESSION_MIN_BYTES": "0"})
    c.start("compression_ddp")
    res = sorted(c.wait_workers(timeout=120), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        kind, message = r["bad_hook"]
        assert kind == "ValueError" and "not a compressor the core runs" in message, message
        for mine, first in zip(r["params"], res[0]["params"]):
            assert torch.equal(mine, first), "the replicas differ"
        assert r["losses"][-1] < 0.8 * r["losses"][0], r["losses"]
        raw, wire = r["stats"]["compression_raw_bytes"], r["stats"]["compression_wire_bytes"]
        assert raw > 0 and wire < raw, (raw, wire)
