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
from ferry.torch.ops import *  # noqa: F401,F403 - every operation: ops.__all__
from ferry.torch.ops import FerryError
from ferry.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                   broadcast_parameters)
from ferry.torch.optimizer import DistributedOptimizer
from ferry.torch.cross_barrier import CrossBarrier
from ferry.torch.sync_batch_norm import SyncBatchNorm
from ferry.torch import elastic, ops
from ferry.torch import distributed
from ferry.torch.ddp import ddp

# torch.distributed's "ferry" backend: dist.init_process_group("ferry").
distributed.register()

# Horovod programs catch this name (elastic training, failure handling): Ferry's errors.
HorovodInternalError = FerryError

# The operations (ops.__all__), then what this package adds to them.
__all__ = list(ops.__all__) + [
    "Compression", "Compressor", "HorovodInternalError",
    "allgather_object", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "DistributedOptimizer", "CrossBarrier", "SyncBatchNorm", "elastic", "distributed", "ddp",
]
