"""push_pull, broadcast and friends on 2 workers and 2 servers: exact results for every
dtype and odd shapes, several partitions per tensor (FERRY_PARTITION_BYTES=4096).

Each test runs on the host path; on the device path over the core's fake device
(FERRY_DEVICE_API=fake: the CPU tensors are copied to pinned buffers on simulated streams,
released partition by partition, and their sums copied back, as CUDA tensors are); and
with CUDA tensors where torch has a GPU (skipped elsewhere; scripts/gpu-checks requires it)."""

import pytest
import torch

from conftest import DEVICE_PATHS, run_on_path
from ferry_worker import DTYPES, SHAPES, values

WORKERS = 2


@pytest.fixture(scope="module", params=DEVICE_PATHS)
def results(module_cluster, request):
    return run_on_path(module_cluster, request.param, "ops", {"FERRY_PARTITION_BYTES": "4096"})


def test_each_path_is_the_one_taken(results):
    for r in results:
        staged = r["stats"]["partitions_staged"]
        if r["path"] == "host":
            assert staged == 0, "worker %d: %d partitions went through the device path" % (
                r["rank"], staged)
        else:  # every push_pull and allreduce: hundreds of partitions
            assert staged > 300, "worker %d: only %d partitions staged" % (r["rank"], staged)


def expected_sum(shape, dtype):
    return sum(values(shape, torch.int64, r) for r in range(WORKERS)).to(dtype)


def expected_avg(shape, dtype):
    total = sum(values(shape, torch.int64, r) for r in range(WORKERS))
    if dtype.is_floating_point:
        return (total.to(torch.float64) / WORKERS).to(dtype)   # halves: exact in every float dtype
    return torch.div(total, WORKERS, rounding_mode="trunc").to(dtype)  # the core truncates


def check(got, want, what):
    assert got.dtype == want.dtype, "%s: dtype %s, want %s" % (what, got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape), "%s: shape %s, want %s" % (what, got.shape, want.shape)
    assert torch.equal(got, want), "%s: got %s, want %s" % (what, got, want)


def test_wait_any_returns_each_finished_operation_once(results):
    for r in results:
        assert len(r["any_order"]) == len(set(r["any_order"])) == len(SHAPES)
        for shape in SHAPES:
            check(r["anys"][shape], expected_sum(shape, torch.float32),
                  "worker %d wait_any sum %s" % (r["rank"], shape))


def test_rank_size_local(results):
    assert [r["rank"] for r in results] == list(range(WORKERS))
    for r in results:
        assert r["size"] == WORKERS and r["num_servers"] == 2
        assert r["local_size"] == WORKERS          # one machine
        assert r["local_rank"] == r["rank"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_push_pull_sum_exact(results, dtype):
    for r in results:
        for shape in SHAPES:
            want = expected_sum(shape, dtype)
            key = (str(dtype), shape)
            check(r["sums"][key], want, "worker %d sum %s" % (r["rank"], key))
            check(r["inplace"][key], want, "worker %d in-place sum %s" % (r["rank"], key))
            check(r["asyncs"][key], want, "worker %d async sum %s" % (r["rank"], key))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_push_pull_average_exact(results, dtype):
    for r in results:
        for shape in SHAPES:
            key = (str(dtype), shape)
            check(r["avgs"][key], expected_avg(shape, dtype), "worker %d average %s" % (r["rank"], key))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous(results, dtype):
    bases = [values((9, 6), dtype, rank) for rank in range(WORKERS)]
    want_view = sum(b.to(torch.int64).t()[1:, ::2] for b in bases).to(dtype)
    for r in results:
        check(r["strided"][(str(dtype), "out")], want_view, "worker %d strided out" % r["rank"])
        # In place: the strided elements hold the sum, the others are untouched.
        mine = bases[r["rank"]].clone()
        mine.t()[1:, ::2] = want_view
        check(r["strided"][(str(dtype), "in")], mine, "worker %d strided in place" % r["rank"])


def test_unnamed_and_horovod_aliases(results):
    for r in results:
        check(r["noname"], expected_sum((4, 4), torch.float32), "unnamed")
        check(r["allreduce_sum"], expected_sum((5,), torch.int64), "allreduce op=Sum")
        check(r["allreduce_avg"], expected_avg((5,), torch.float32), "allreduce average")
        each = [values((5,), torch.float32, rank) for rank in range(WORKERS)]
        check(r["allreduce_min"], torch.minimum(*each), "allreduce op=Min")
        check(r["allreduce_max"], torch.maximum(*each), "allreduce op=Max")
        check(r["allreduce_product"], each[0] * each[1], "allreduce op=Product")
        check(r["allreduce_scaled"], (each[0] * 0.5 + each[1] * 0.5) * 4.0,
              "allreduce prescale 0.5, postscale 4")


def test_autograd(results):
    # y = sum_r x_r; loss_r = (r + 1) * sum(y); d loss / d x = push_pull of the grads = 1 + 2.
    for r in results:
        check(r["autograd_value"], expected_sum((6,), torch.float32), "push_pull value")
        check(r["autograd_grad"], torch.full((6,), 3.0), "push_pull gradient")


def test_broadcast_parameters(results):
    root0 = results[0]["model_before"]
    for r in results:
        for k, v in root0.items():
            check(r["model_after"][k], v, "worker %d '%s' after broadcast from 0" % (r["rank"], k))
    assert not torch.equal(results[0]["model_before"]["0.weight"], results[1]["model_before"]["0.weight"])
    for r in results:
        for k, v in results[1]["model_after_root1"].items():
            check(r["model_after_root1"][k], v, "worker %d '%s' after broadcast from 1" % (r["rank"], k))


def test_broadcast_and_object(results):
    for r in results:
        check(r["broadcast"], values((3, 3), torch.float64, 1), "broadcast from 1")
        assert r["object"] == {"rank": 1, "payload": list(range(1000)), "text": "from 1"}


def test_broadcast_optimizer_state(results):
    root = results[0]
    assert root["opt_state"], "rank 0 had no optimizer state"
    for r in results:
        assert r["opt_lr"] == 0.01
        assert r["opt_state"].keys() == root["opt_state"].keys()
        for pid, state in root["opt_state"].items():
            for k, v in state.items():
                got = r["opt_state"][pid][k]
                if torch.is_tensor(v):
                    check(got, v, "worker %d state %s.%s" % (r["rank"], pid, k))
                else:
                    assert got == v


def test_refusals_have_clear_messages(results):
    for r in results:
        e = r["errors"]
        assert e["uint8"][0] == "TypeError" and "torch.uint8" in e["uint8"][1]
        assert e["complex"][0] == "TypeError" and "float32, float16, bfloat16" in e["complex"][1]
        assert e["meta"][0] == "ValueError" and "only CPU and CUDA tensors" in e["meta"][1]
        kind, message = e["rows_devices"]
        assert kind == "ValueError" and "must be on one device" in message, e["rows_devices"]
        assert "values on cpu" in message and "row_ids on meta" in message, message
        assert e["root"][0] == "ValueError" and "root_rank" in e["root"][1]
        for what, name in [("reserved", "__ferry__/broadcast/w"), ("reserved_broadcast", "__ferry__/x")]:
            assert e[what][0] == "FerryError", e[what]
            assert "'%s'" % name in e[what][1] and "reserved for Ferry's own tensors" in e[what][1], e[what]


def test_cross_barrier_refuses_a_parameter_used_outside_its_module(results):
    for r in results:
        outcome = r["cross_barrier_outside"]
        assert outcome is not None, "worker %d trained on a stale weight" % r["rank"]
        assert "outside.b.weight" in outcome[1] and "CrossBarrier" in outcome[1], outcome
