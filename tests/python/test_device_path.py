"""Collectives and training through ferry.torch's device path, on 2 workers and 2 servers.

Each case runs on the host path, on the device path over the core's fake device
(FERRY_DEVICE_API=fake: CPU tensors copied to pinned buffers on simulated streams, released
partition by partition, their sums copied back, as CUDA tensors are), and with CUDA tensors
where torch has a GPU (skipped elsewhere; scripts/gpu-checks requires it). The
DistributedOptimizer's averaged gradients must equal DDP-gloo's bit for bit: with 2 workers
a sum of two floats does not depend on its order, and halving is exact."""

import re

import pytest
import torch

from conftest import DEVICE_PATHS, free_port, require_gpu, run_on_path
from ferry_worker import values
from test_examples import local_cluster, EXAMPLES

WORKERS = 2


@pytest.fixture(scope="module", params=DEVICE_PATHS)
def results(module_cluster, request):
    return run_on_path(module_cluster, request.param, "collectives",
                       {"FERRY_PARTITION_BYTES": "1024", "FERRY_TEST_DDP_PORT": str(free_port())})


def test_allgather_concatenates_in_rank_order_on_the_callers_device(results):
    want = torch.cat([values((r + 1, 3), torch.float32, r) for r in range(WORKERS)])
    want_int = torch.cat([values((r + 2,), torch.int64, r) for r in range(WORKERS)])
    for r in results:
        assert torch.equal(r["allgather"], want), (r["rank"], r["allgather"])
        assert torch.equal(r["allgather_int"], want_int), (r["rank"], r["allgather_int"])
        assert r["allgather_device"].startswith("cuda" if r["path"] == "cuda" else "cpu")


def test_broadcast_in_place_and_of_a_model_and_its_optimizer_state(results):
    for r in results:
        assert torch.equal(r["broadcast_"], values((4, 5), torch.float64, 1))
    root = results[0]
    assert root["adam"], "rank 0 took an Adam step: it has state"
    for r in results[1:]:
        for k, v in root["model"].items():
            assert torch.equal(r["model"][k], v), (r["rank"], k)
        assert r["adam"].keys() == root["adam"].keys()
        for pid, state in root["adam"].items():
            for k, v in state.items():
                assert torch.equal(r["adam"][pid][k], v), (r["rank"], pid, k)
    for r in results:  # the state lives where the parameters do
        assert r["adam_devices"] == ["cuda:0" if r["path"] == "cuda" else "cpu"], r["adam_devices"]


def test_averaged_gradients_equal_ddp_gloo_bit_for_bit(results):
    for r in results:
        assert r["grads_ferry"].keys() == r["grads_ddp"].keys()
        for k, ferry in r["grads_ferry"].items():
            ddp = r["grads_ddp"][k]
            assert torch.equal(ferry, ddp), "worker %d %s: Ferry %s, DDP %s (max diff %g)" % (
                r["rank"], k, ferry.flatten()[:4], ddp.flatten()[:4], (ferry - ddp).abs().max())
        # Every worker got the same average.
        for k, v in results[0]["grads_ferry"].items():
            assert torch.equal(r["grads_ferry"][k], v)


def test_the_device_path_carried_the_gradients(results):
    for r in results:
        staged = r["stats"]["partitions_staged"]
        assert (staged == 0) == (r["path"] == "host"), (r["path"], staged)


@pytest.mark.parametrize("path", ["fake-device", "cuda"])
def test_train_digits_through_the_device_path(path):
    """The example through the device path: on the fake device, 4 epochs (learning shown);
    on a GPU (--device cuda, 2 workers sharing it), to its 95% accuracy bar."""
    env = {"FERRY_DEVICE_API": "fake"} if path == "fake-device" else {}
    args = [str(EXAMPLES / "train_digits.py")]
    if path == "cuda":
        require_gpu("train_digits.py --device cuda")
        args += ["--device", "cuda", "--min-accuracy", "0.95"]
    else:
        args += ["--epochs", "4", "--min-accuracy", "0.85"]
    r = local_cluster(args, timeout=240, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    m = re.search(r"test accuracy ([0-9.]+)", r.stdout)
    assert m, r.stdout
    assert ("(cuda:0)" in r.stdout) == (path == "cuda"), r.stdout[:400]
