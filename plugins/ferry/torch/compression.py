"""Gradient compression for push_pull (names as in horovod.torch / byteps.torch)."""

import torch


class Compressor(object):
    """Compresses a tensor before push_pull and decompresses the result."""

    @staticmethod
    def compress(tensor):
        """Returns (compressed tensor, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor restored from its compressed form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (halves the bytes); others unchanged.

    The servers sum float16 through float32 with round-to-nearest-even, so the
    precision lost is that of the cast, not of the summation."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.to(torch.float16), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class Compression(object):
    """Optional gradient compression used by DistributedOptimizer."""

    none = NoneCompressor
    """No compression."""

    fp16 = FP16Compressor
    """Floating-point tensors travel as float16."""
