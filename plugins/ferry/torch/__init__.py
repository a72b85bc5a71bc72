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
    MembershipChangedError,
    reset,
    Average,
    Sum,
    Adasum,
    Min,
    Max,
    Product,
    init,
    shutdown,
    is_initialized,
    rank,
    size,
    local_rank,
    local_size,
    cross_rank,
    cross_size,
    is_homogeneous,
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
    allgather,
    allgather_async,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    ProcessSet,
    global_process_set,
    add_process_set,
    remove_process_set,
    alltoall,
    alltoall_async,
    reducescatter,
    reducescatter_async,
    grouped_allreduce,
    grouped_allreduce_async,
    grouped_allreduce_,
    grouped_allreduce_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
    sparse_allreduce_async,
    start_timeline,
    stop_timeline,
    mpi_threads_supported,
    mpi_enabled,
    mpi_built,
    gloo_enabled,
    gloo_built,
    nccl_built,
    ddl_built,
    ccl_built,
    cuda_built,
    rocm_built,
)
from ferry.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                   broadcast_parameters)
from ferry.torch.optimizer import DistributedOptimizer
from ferry.torch.cross_barrier import CrossBarrier
from ferry.torch.sync_batch_norm import SyncBatchNorm
from ferry.torch import elastic
from ferry.torch import distributed
from ferry.torch.ddp import ddp

# torch.distributed's "ferry" backend: dist.init_process_group("ferry").
distributed.register()

# Horovod programs catch this name (elastic training, failure handling): Ferry's errors.
HorovodInternalError = FerryError

__all__ = [
    "Compression", "Compressor", "FerryError", "MembershipChangedError", "reset",
    "HorovodInternalError",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous",
    "num_servers", "barrier", "join", "step_boundary", "set_scheduling", "scheduling", "declare",
    "push_pull", "push_pull_async", "push_pull_inplace", "push_pull_async_inplace",
    "push_pull_rows", "push_pull_rows_async",
    "poll", "wait_any", "synchronize",
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "allgather", "allgather_async", "allgather_object",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "DistributedOptimizer", "CrossBarrier", "SyncBatchNorm", "elastic", "distributed", "ddp",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "sparse_allreduce_async",
    "start_timeline", "stop_timeline",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
]
