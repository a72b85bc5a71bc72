"""What ferry.torch checks of a tensor before the core sees it (type, device, layout, dtype,
a root rank), where its data travels (the core's device path or the host), and its
declaration to the core (name, dtype and shape, in one order on every worker)."""

import os

import torch

from ferry import _core
from ferry.torch._runtime import _compressions, _declared, _order

# What ops.py (and so ferry.torch) exports of this module: an operation added here is
# public once named here.
__all__ = [
    "declare",
]


# torch dtype -> the core's dtype code (worker/c_api.h).
_DTYPES = {
    torch.float32: _core.FLOAT32,
    torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16,
    torch.float64: _core.FLOAT64,
    torch.int32: _core.INT32,
    torch.int64: _core.INT64,
}
# The core's broadcast also carries these, widened to int32 (it copies values exactly).
_WIDENED_FOR_BROADCAST = (torch.bool, torch.uint8, torch.int8, torch.int16)


def _dtype_code(tensor, what):
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise TypeError(
            "ferry.torch: %s has dtype %s; push_pull supports float32, float16, bfloat16, "
            "float64, int32 and int64" % (what, tensor.dtype))
    return code


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("ferry.torch: %s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type == "cuda":
        if not _core.CUDA:
            raise ValueError(
                "ferry.torch: %s is a CUDA tensor (%s), but this Ferry was built without its "
                "CUDA data path (no nvcc was found when it was built: ferry._core.CUDA is "
                "False); build Ferry where the CUDA toolkit is installed, or move the tensor to "
                "the CPU with .cpu()" % (what, tensor.device))
    elif tensor.device.type != "cpu":
        raise ValueError("ferry.torch: %s is on device %s; only CPU and CUDA tensors are "
                         "supported" % (what, tensor.device))
    if tensor.layout != torch.strided:
        raise ValueError("ferry.torch: %s has layout %s; only dense (strided) tensors are supported"
                         % (what, tensor.layout))


def _check_same_device(what, **tensors):
    """Raises ValueError unless every tensor of one operation is on one device."""
    devices = {}
    for label, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            continue  # _check_tensor names it
        devices.setdefault(tensor.device, []).append(label)
    if len(devices) > 1:
        raise ValueError("ferry.torch: %s: the tensors of one operation must be on one device, "
                         "but %s" % (what, "; ".join(
                             "%s on %s" % (" and ".join(labels), device)
                             for device, labels in devices.items())))


# FERRY_DEVICE_API=fake (the device path's tests without a GPU): CPU tensors take it too.
_FAKE_DEVICE = os.environ.get("FERRY_DEVICE_API", "") == "fake"


def _device_path(tensor):
    """(device index, torch's current stream there as a cudaStream_t) if `tensor` takes the
    core's device path, else None."""
    if tensor.is_cuda:
        return tensor.device.index, torch.cuda.current_stream(tensor.device).cuda_stream
    if _FAKE_DEVICE:
        return 0, 0
    return None


def _on_host(tensor):
    """`tensor` itself if on the CPU, else a host copy (after torch's queued work on it)."""
    return tensor if tensor.device.type == "cpu" else tensor.cpu()


def _declare(name, code, shape, compression=""):
    """Declares `name` unless it is declared alike, and sets its core compression
    (Compressor.core: "onebit+ef", "none"...; "": FERRY_COMPRESSION decides) where it
    differs from what the core has."""
    shape = tuple(int(d) for d in shape)
    if _declared.get(name) != (code, shape):
        _order.wait_turn()  # background operations started earlier declare first
        _core.declare(name, code, list(shape))  # raises FerryError on a conflicting redeclaration
        _declared[name] = (code, shape)
        _compressions.pop(name, None)  # a new declaration follows FERRY_COMPRESSION
    if _compressions.get(name, "") != compression:
        _core.call("set_compression", name, compression)
        _compressions[name] = compression


def declare(name, tensor):
    """Declares a tensor to the core ahead of use (name, dtype and shape), so its id and
    default priority follow the declaration order. Call in the same order on every worker."""
    _check_tensor(tensor, "tensor '%s'" % name)
    _declare(name, _dtype_code(tensor, "tensor '%s'" % name), tensor.shape)


def _check_root(root_rank):
    n = _core.size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError("ferry.torch: root_rank %r is not a worker rank (0..%d)" % (root_rank, n - 1))
