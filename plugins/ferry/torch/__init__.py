"""ferry.torch: the PyTorch plugin of Ferry, a drop-in for byteps.torch / horovod.torch.

    import ferry.torch as bps          # was: import byteps.torch as bps
    bps.init()
    optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    bps.broadcast_optimizer_state(optimizer, root_rank=0)

Optional cross-iteration overlap: optimizer = bps.CrossBarrier(model, optimizer).
CPU tensors of dtype float32, float16, bfloat16, float64, int32 and int64.
Errors raise FerryError (a RuntimeError) with the core's message. See docs/pytorch.md.
"""

from ferry.torch.compression import Compression, Compressor
from ferry.torch.ops import (
    FerryError,
    Average,
    Sum,
    init,
    shutdown,
    is_initialized,
    rank,
    size,
    local_rank,
    local_size,
    num_servers,
    barrier,
    join,
    step_boundary,
    set_scheduling,
    scheduling,
    declare,
    push_pull,
    push_pull_async,
    push_pull_inplace,
    push_pull_async_inplace,
    push_pull_rows,
    push_pull_rows_async,
    poll,
    wait_any,
    synchronize,
    allreduce,
    allreduce_async,
    allreduce_,
    allreduce_async_,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
)
from ferry.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from ferry.torch.optimizer import DistributedOptimizer
from ferry.torch.cross_barrier import CrossBarrier


__all__ = [
    "Compression", "Compressor", "FerryError", "Average", "Sum",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "num_servers", "barrier", "join", "step_boundary", "set_scheduling", "scheduling", "declare",
    "push_pull", "push_pull_async", "push_pull_inplace", "push_pull_async_inplace",
    "push_pull_rows", "push_pull_rows_async",
    "poll", "wait_any", "synchronize",
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "DistributedOptimizer", "CrossBarrier",
]
