"""The ferry.torch API in this process, without a cluster: names, refusals, errors."""

import pytest
import torch

import ferry.torch as bps


def test_horovod_byteps_names_exist():
    for name in ["init", "shutdown", "rank", "size", "local_rank", "local_size", "push_pull",
                 "push_pull_async", "poll", "synchronize", "broadcast_parameters",
                 "broadcast_optimizer_state", "broadcast_object", "DistributedOptimizer",
                 "CrossBarrier", "Compression", "allreduce", "allreduce_async", "broadcast"]:
        assert hasattr(bps, name), name
    assert bps.Compression.none is not None and bps.Compression.fp16 is not None


def test_join_is_exposed():
    assert callable(bps.join)


def test_ferry_error_is_a_runtime_error():
    assert issubclass(bps.FerryError, RuntimeError)


def test_calls_before_init_raise():
    assert not bps.is_initialized()
    with pytest.raises(bps.FerryError, match="not initialised"):
        bps.rank()
    with pytest.raises(bps.FerryError, match="not initialised"):
        bps.push_pull(torch.ones(3), name="x")
    with pytest.raises(bps.FerryError, match="not initialised"):
        bps.local_rank()
    with pytest.raises(bps.FerryError, match="not initialised"):
        bps.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.bool,
                                   torch.complex64])
def test_unsupported_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match="supports float32, float16, bfloat16, float64, int32 and int64"):
        bps.push_pull_async(torch.zeros(4, dtype=dtype), name="x")


def test_tensors_neither_on_cpu_nor_cuda_are_refused():
    with pytest.raises(ValueError, match="on device meta; only CPU and CUDA tensors"):
        bps.push_pull_async(torch.zeros(4, device="meta"), name="x")


def test_sparse_tensors_are_refused():
    with pytest.raises(ValueError, match="dense"):
        bps.push_pull_async(torch.zeros(4).to_sparse(), name="x")


def test_compression_fp16_round_trip():
    t = torch.tensor([1.5, -2.25, 3.0], dtype=torch.float32)
    c, ctx = bps.Compression.fp16.compress(t)
    assert c.dtype == torch.float16
    assert torch.equal(bps.Compression.fp16.decompress(c, ctx), t)
    i = torch.arange(3)
    assert bps.Compression.fp16.compress(i)[0].dtype == torch.int64
