"""Worker mode for test_compression.py, run by ferry_worker.py (`ferry_worker.py
compression OUT`) with FERRY_COMPRESSION=topk:0.1 on every role: what the core compresses
and what it leaves exact, from Python. Each result goes into `out`; the test asserts."""

import torch

import ferry.torch as bps
from ferry import _core

N = 100000  # 400 KB of float32: over FERRY_COMPRESSION_MIN_BYTES


def _values(n, rank, dtype=torch.float32):
    """Small integers, exact in float16 and their sums too."""
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + 5) % 101 - 50).to(dtype)


def _outcome(fn):
    try:
        fn()
        return None
    except Exception as e:  # noqa: BLE001 - recorded for the test
        return (type(e).__name__, str(e))


def mode_compression(args, out):
    rank = bps.rank()
    # FERRY_COMPRESSION (topk:0.1) decides: a sparse result, the same on every worker.
    out["env"] = bps.push_pull(_values(N, rank), average=False, name="env")
    # A tensor's own compressor wins over it; "none" travels raw.
    out["fp16"] = bps.push_pull(_values(N, rank), average=False, name="fp16",
                                compression=bps.Compression.fp16)
    out["raw"] = bps.push_pull(_values(N, rank), average=False, name="raw",
                               compression=bps.Compression.custom("none"))
    # Never compressed: integers, tensors under the minimum, allgather, broadcast.
    out["int"] = bps.push_pull(_values(N, rank, torch.int32), average=False, name="int")
    out["small"] = bps.push_pull(_values(1000, rank), average=False, name="small")
    out["gathered"] = bps.allgather(_values(N, rank), name="gathered")
    out["broadcast"] = bps.broadcast(_values(N, rank), root_rank=1, name="broadcast")
    # DistributedOptimizer with onebit: the averaged gradient of a compressed layer has one
    # magnitude (the server's scale), and is the same on every worker.
    torch.manual_seed(0)
    model = torch.nn.Linear(200, 100)  # an 80 KB weight: compressed; the bias is not
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=bps.Compression.onebit)
    x = torch.randn(8, 200, generator=torch.Generator().manual_seed(rank))
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.synchronize()
    out["onebit_weight_grad"] = model.weight.grad.clone()
    out["onebit_bias_grad"] = model.bias.grad.clone()
    # A bad compressor is refused by the core, naming it.
    out["bad"] = _outcome(lambda: bps.push_pull(_values(N, rank), name="bad",
                                                compression=bps.Compression.custom("zip")))
    out["stats"] = _core.stats()


def mode_compression_ddp(args, out):
    """Plain DDP over the ferry backend with compression_hook(topk(0.25)): the replicas stay
    equal, the loss falls, and the buckets went compressed (FERRY_COMPRESSION_MIN_BYTES=0)."""
    import os
    import torch.distributed as dist
    import torch.nn.functional as F
    from ferry.torch.distributed import compression_hook
    rank, size = bps.rank(), bps.size()
    dist.init_process_group("ferry", init_method="tcp://127.0.0.1:%s"
                            % os.environ["FERRY_TEST_DDP_PORT"], rank=rank, world_size=size)
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(None, compression_hook(bps.Compression.topk(0.25)))
    out["bad_hook"] = _outcome(lambda: compression_hook(bps.Compression.none))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 32, generator=g)
    y = (x[:, :4].argmax(1))
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["losses"] = losses
    out["params"] = [p.detach().clone() for p in model.parameters()]
    out["stats"] = _core.stats()
