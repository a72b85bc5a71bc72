"""Point-to-point: send and receive between workers by rank and tag (worker/point_to_point.h):
what pipeline stages exchange (activations forward, their gradients back).

A send is matched with the receiver's receive of the same (source, tag), in call order per
(source, destination, tag). Both name the same dtype and element count, or both raise,
naming the other's. Tensors of the core's six dtypes travel as they are; any other dtype
(bool, uint8, int8, int16, complex...) travels as its bytes, so there only the byte count is
checked. CUDA tensors go through host copies.

Scheduling: under every scheduling policy but fifo and fifo-bucket, a send is the most urgent
traffic of its worker: it goes before the worker's gradients on every link it shares with
them (they are held back while it crosses), and `priority` orders a worker's sends to one
peer that wait in the transport's queue together (larger first: pass the micro-batch's
urgency, e.g. -micro_batch so the oldest goes first). Without a priority, a send takes the
order its receiver taught: the order in which the receiver first asked (recv/irecv) for each
tag from this worker, learned from the earlier sends on the same (peer, tag).
"""

import torch

from ferry import _core
from ferry.torch._checks import _DTYPES, _check_tensor
from ferry.torch._runtime import _Pending, _lock, _pending, synchronize

# What ops.py (and so ferry.torch) exports of this module.
__all__ = ["send", "recv", "isend", "irecv"]


def _direct(tensor):
    """True if the core may read or write `tensor`'s own memory."""
    return tensor.device.type == "cpu" and tensor.is_contiguous() and tensor.dtype in _DTYPES


def _as_words(tensor):
    """`tensor`'s bytes as a contiguous int32 host tensor, zero-padded to whole words."""
    data = tensor.detach().cpu().contiguous().view(-1).view(torch.uint8)
    words = torch.zeros((data.numel() + 3) // 4, dtype=torch.int32)
    words.view(torch.uint8)[:data.numel()].copy_(data)
    return words


def _check(tensor, peer, tag, what):
    _check_tensor(tensor, "the tensor to %s" % what)
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise TypeError("ferry.torch: %s: the rank must be an int, got %r" % (what, peer))
    if not isinstance(tag, int) or isinstance(tag, bool) or not -2**31 <= tag < 2**31:
        raise TypeError("ferry.torch: %s: the tag must be a 32-bit int, got %r" % (what, tag))


# The core's "no priority: the learned order" (INT32_MIN, worker/point_to_point.h).
_LEARNED = -2**31


def isend(tensor, dst, tag=0, priority=None):
    """Starts sending `tensor` to rank `dst` for its matching irecv/recv(src=this rank, tag).
    Returns a handle; synchronize(handle) returns `tensor` once the receiver took it, and
    until then `tensor` must not change. `priority` (an int above -2**31 and below 2**31,
    larger first) orders this worker's sends among themselves; None: the order the receiver
    taught (see the module's text)."""
    _check(tensor, dst, tag, "send")
    if priority is None:
        priority = _LEARNED
    elif (not isinstance(priority, int) or isinstance(priority, bool) or
          not -2**31 < priority < 2**31):
        raise TypeError("ferry.torch: send: the priority must be None or an int above -2**31 "
                        "and below 2**31, got %r" % (priority,))
    if _direct(tensor):
        wire, code = tensor, _DTYPES[tensor.dtype]
    elif tensor.dtype in _DTYPES:
        wire, code = tensor.detach().cpu().contiguous(), _DTYPES[tensor.dtype]
    else:
        wire, code = _as_words(tensor), _core.INT32
    handle = _core.call("send_async", wire.data_ptr(), wire.numel(), code, dst, tag, priority)
    with _lock:
        _pending[handle] = _Pending("send to rank %d" % dst, (tensor, wire), tensor)
    return handle


def irecv(tensor, src, tag=0):
    """Starts receiving rank `src`'s next send under `tag` into `tensor` (same dtype and
    element count as the send's). Returns a handle; synchronize(handle) returns `tensor`,
    filled."""
    _check(tensor, src, tag, "recv")
    finish = None
    if _direct(tensor):
        wire, code = tensor, _DTYPES[tensor.dtype]
    else:
        if tensor.dtype in _DTYPES:
            wire, code = torch.empty(tensor.numel(), dtype=tensor.dtype), _DTYPES[tensor.dtype]
            data = wire
        else:
            nbytes = tensor.numel() * tensor.element_size()
            wire, code = torch.empty((nbytes + 3) // 4, dtype=torch.int32), _core.INT32
            data = wire.view(torch.uint8)[:nbytes].view(tensor.dtype)

        def finish():
            with torch.no_grad():
                tensor.copy_(data.view(tensor.shape))
    handle = _core.call("recv_async", wire.data_ptr(), wire.numel(), code, src, tag)
    with _lock:
        _pending[handle] = _Pending("recv from rank %d" % src, (tensor, wire), tensor, finish)
    return handle


def send(tensor, dst, tag=0, priority=None):
    """Sends `tensor` to rank `dst` (isend + synchronize): returns once the receiver took it
    and `tensor` may be changed again."""
    return synchronize(isend(tensor, dst, tag, priority))


def recv(tensor, src, tag=0):
    """Receives rank `src`'s next send under `tag` into `tensor` and returns it."""
    return synchronize(irecv(tensor, src, tag))
