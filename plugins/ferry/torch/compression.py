"""Gradient compression for push_pull (names as in horovod.torch / byteps.torch).

A compressor with ``core`` set is done by the Ferry core, below the plugin
(docs/compression.md): each partition is compressed when it is sent, with error feedback
and momentum kept per partition, and the servers sum the decompressed pushes and compress
the sum. DistributedOptimizer, push_pull and allreduce hand it to the core; its
compress()/decompress() stay for programs that call them directly (Horovod's API).
A compressor without ``core`` runs in Python around the push_pull.
"""

import torch


class Compressor(object):
    """Compresses a tensor before push_pull and decompresses the result."""

    core = None
    """The core's compressor text ("onebit+ef"; docs/compression.md), or None."""

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
    """Floating-point tensors travel as float16 (halves the bytes); others unchanged.

    In the core: each push is rounded to float16 on the wire, the servers sum in the
    tensor's own dtype and round the sum to float16 once. compress()/decompress() (called
    directly) cast as Horovod's does."""

    core = "fp16"
    wire_dtype = torch.float16

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class BF16Compressor(FP16Compressor):
    """Floating-point tensors travel as bfloat16 (halves the bytes, float32's range)."""

    core = "bf16"
    wire_dtype = torch.bfloat16


class CoreCompressor(NoneCompressor):
    """A compressor the core runs (onebit, top-k, random-k, dithering): push_pull hands the
    tensor to the core unchanged, so compress() and decompress() are NoneCompressor's
    identities here."""


def _core(text, doc):
    return type("CoreCompressor(%s)" % text, (CoreCompressor,), {"core": text, "__doc__": doc})


def _options(error_feedback, momentum):
    text = "+ef" if error_feedback else ""
    if momentum:
        text += "+momentum:%r" % float(momentum)
    return text


class Compression(object):
    """Gradient compression for DistributedOptimizer, push_pull and allreduce.

    ``none`` (the default) leaves FERRY_COMPRESSION in force; any other choice wins over it
    for the tensors it is given for. Error feedback (what compression lost, added to the
    next step's gradient) is on in onebit, topk, randomk and dither unless asked off;
    momentum: Nesterov momentum applied before compression (then train with an optimizer
    without momentum)."""

    none = NoneCompressor
    """No compression of its own: FERRY_COMPRESSION decides (by default: none)."""

    fp16 = FP16Compressor
    """Floating-point tensors travel as float16."""

    bf16 = BF16Compressor
    """Floating-point tensors travel as bfloat16."""

    onebit = _core("onebit+ef", "The sign of each element and one scale per partition "
                                "(32x fewer bytes), with error feedback.")

    @staticmethod
    def topk(ratio=0.01, error_feedback=True, momentum=0.0):
        """The `ratio` of elements of largest magnitude, with their indices."""
        return _core("topk:%r%s" % (float(ratio), _options(error_feedback, momentum)),
                     Compression.topk.__doc__)

    @staticmethod
    def randomk(ratio=0.01, error_feedback=True, momentum=0.0):
        """A `ratio` of elements at indices every worker draws alike (no index travels)."""
        return _core("randomk:%r%s" % (float(ratio), _options(error_feedback, momentum)),
                     Compression.randomk.__doc__)

    @staticmethod
    def dither(levels=32, linear=False, error_feedback=True, momentum=0.0):
        """Each element stochastically rounded to one of `levels` levels of the largest
        magnitude (natural levels 1, 1/2, 1/4...; or evenly spaced with linear=True)."""
        return _core("dither:%d%s%s" % (int(levels), ":linear" if linear else "",
                                        _options(error_feedback, momentum)),
                     Compression.dither.__doc__)

    @staticmethod
    def custom(text):
        """Any compressor the core accepts, as FERRY_COMPRESSION's text
        ("topk:0.001+ef+momentum:0.9"; docs/compression.md)."""
        return _core(str(text), "The core's compressor %s." % text)
