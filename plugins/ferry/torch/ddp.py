"""ferry.torch.ddp: a DistributedDataParallel model whose iterations overlap.

Under plain DDP, backward waits for every gradient bucket's allreduce, so the order in
which buckets travel cannot shorten an iteration. With

    model = DistributedDataParallel(model)          # over any backend; "ferry" for buffers too
    optimizer = ferry.torch.ddp(model, optimizer)    # the optimizer to step

DDP's own gradient synchronisation stays idle, and each gradient goes to Ferry's servers as
soon as backward makes it (DistributedOptimizer: priorities in forward order, the layers the
next forward needs first), while step() returns at once: each parameter is updated when its
own average is here, at the latest right before the forward of its module (CrossBarrier).
So the next iteration's forward starts while the last layers' sums are still travelling.
DDP still broadcasts rank 0's buffers (BatchNorm's statistics) before every forward, as it
does by default. The parameters after every step are those of plain DDP (the update of each
parameter is the optimizer's own; the averages are Ferry's).

Gradient accumulation: pass backward_passes_per_step (not DDP's no_sync(), which this
optimizer does not see). Read parameters outside forward (evaluation, saving) after
optimizer.synchronize(); state_dict() does that itself.
"""

import torch

from ferry.torch.compression import Compression
from ferry.torch.cross_barrier import CrossBarrier
from ferry.torch.optimizer import DistributedOptimizer


def ddp(model, optimizer, compression=Compression.none, backward_passes_per_step=1):
    """Returns the optimizer to step for `model`, a DistributedDataParallel module, with its
    gradients averaged by Ferry and its iterations overlapped (see the module docstring)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError("ferry.torch.ddp: model must be a DistributedDataParallel module, got %s"
                        % type(model).__name__)
    # DDP's reducer stays idle: no allreduce of buckets, no wait for them in backward.
    model.require_backward_grad_sync = False

    def sync_buffers_too(module, inputs):
        # DDP broadcasts buffers only in a forward that also syncs gradients: ask for it.
        module.require_forward_param_sync = True
    model.register_forward_pre_hook(sync_buffers_too)
    named = [("ddp." + name, p) for name, p in model.module.named_parameters()]
    distributed = DistributedOptimizer(optimizer, named_parameters=named,
                                       compression=compression,
                                       backward_passes_per_step=backward_passes_per_step)
    return CrossBarrier(model, distributed)
