"""SyncBatchNorm (horovod.torch.SyncBatchNorm): not offered by Ferry."""

import torch


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Horovod's synchronised batch norm needs CUDA tensors and allgathers of statistics
    every forward; Ferry moves CPU tensors only, so it refuses it at construction."""

    def __init__(self, *args, **kwargs):  # noqa: D401 - refuses
        raise NotImplementedError(
            "ferry.torch: SyncBatchNorm is not supported (it needs CUDA tensors); use "
            "torch.nn.BatchNorm*d, whose statistics stay per worker")
