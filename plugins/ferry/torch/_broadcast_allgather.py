"""broadcast and allgather: each several core steps (a vote or a shape exchange, then the
data), run in the background by ferry.torch._runtime's runner, so that their *_async calls
return at once, as Horovod's do (see there: the declaration order). Device tensors travel
through host copies (these operations are rare, or small).
"""

import torch

from ferry import _core
from ferry._core import rank, size  # this worker's rank, the number of workers (ops')
from ferry.torch import _push_pull
from ferry.torch._checks import (_DTYPES, _WIDENED_FOR_BROADCAST, _check_root, _check_tensor,
                                 _dtype_code, _on_host)
from ferry.torch._horovod import _is_global
from ferry.torch._push_pull import _submit, _sync_push_pull
from ferry.torch._runtime import (_background, _claim, _lock, _name_or_free, _pending,
                                  synchronize)

# What ops.py (and so ferry.torch) exports of this module: an operation added here is
# public once named here.
__all__ = [
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_",
]


# ----------------------------------------------------------------------------- broadcast

def _broadcast_into(tensor, root_rank, name):
    """The core's broadcast of `tensor` in place (LocalGroup::Broadcast: a sum to which
    every worker but the root contributes zeros, exact for every dtype, checked by a vote
    that every worker named the same root, dtype and shape). A device tensor travels
    through a host copy."""
    if tensor.dtype in _WIDENED_FOR_BROADCAST:
        buf = _on_host(tensor).to(torch.int32)
    else:
        buf = _on_host(tensor)
        buf = buf if buf.is_contiguous() else buf.contiguous()
    code = _dtype_code(buf, "tensor '%s'" % name)
    _core.call("broadcast", name, buf.data_ptr(), code, buf.numel(), root_rank)
    if buf is not tensor:
        tensor.copy_(buf)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Replaces `tensor` on every worker by root_rank's; returns a handle for poll() and
    synchronize(), which returns `tensor`.

    Runs in the background (ferry.torch._runtime): poll() is False until every worker
    has called it. bool and 8/16-bit integer tensors travel widened to int32. Workers that
    disagree on the root, dtype or shape, or all of them while a worker has joined, raise
    FerryError at synchronize(), naming why. With a process_set (root_rank: a global rank in
    it): a sum over its members to which all but the root contribute zeros."""
    _check_tensor(tensor, "tensor '%s'" % name)
    name = _name_or_free("broadcast", name, tensor)
    _check_root(root_rank)
    if not _is_global(process_set):
        return _broadcast_in_set(tensor, root_rank, name, process_set)
    claim = _claim("broadcast", name)

    def run(task):
        _broadcast_into(tensor, root_rank, name)
        return tensor
    return _background(name, claim, run, (tensor,))


def _broadcast_in_set(tensor, root_rank, name, process_set):
    if root_rank not in process_set.ranks:
        raise ValueError("ferry.torch: broadcast of '%s': root rank %d is not a member of %r"
                         % (name, root_rank, process_set))
    wide = tensor.dtype in _WIDENED_FOR_BROADCAST or tensor.dtype not in _DTYPES
    buf = _on_host(tensor).to(torch.int32 if wide else tensor.dtype).contiguous().clone()
    if rank() != root_rank:
        buf.zero_()
    handle = _push_pull._push_pull_async(buf, buf, False, "broadcast." + name, None,
                                         process_set=process_set)
    with _lock:
        entry = _pending[handle]
        entry.result, entry.tensors = tensor, entry.tensors + (tensor,)
        entry.finish = lambda: tensor.copy_(buf.view(tensor.shape))
    return handle


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Replaces `tensor` on every worker by root_rank's, in place; returns it. Not
    differentiable (as Horovod's)."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    """Starts a broadcast into a new tensor (`tensor` is not modified); returns a handle."""
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


class _Broadcast(torch.autograd.Function):
    """broadcast as a differentiable op (Horovod's): the gradient flows back to the root,
    averaged over the workers; the other workers' inputs get zeros."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank, ctx.name = root_rank, name
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        name = ctx.name + ".grad" if ctx.name else None
        grad = _sync_push_pull(grad_output.contiguous(), True, name, None, compression="none")
        if rank() != ctx.root_rank:
            grad = torch.zeros_like(grad)
        return grad, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Returns root_rank's `tensor` on every worker, as a new tensor. Differentiable (over
    every worker; with a process_set not differentiable)."""
    _check_tensor(tensor, "tensor '%s'" % name)
    _check_root(root_rank)
    if not _is_global(process_set):
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))
    return _Broadcast.apply(tensor, root_rank, name)


# ----------------------------------------------------------------------------- allgather

# Dimensions an allgather's metadata carries (a tensor of more is refused).
_MAX_GATHER_DIMS = 16
_GATHER_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                  torch.int64, torch.bool, torch.uint8, torch.int8, torch.int16]


def _describe_meta(row):
    ndim, code = int(row[0]) - 1, int(row[1])
    dtype = _GATHER_DTYPES[code] if 0 <= code < len(_GATHER_DTYPES) else "?"
    return "%s%s" % (str(dtype).replace("torch.", ""), list(int(d) for d in row[2:2 + ndim]))


def _check_gather_input(tensor, name):
    """What this worker alone can refuse, at the call (as Horovod's argument checks)."""
    if tensor.dim() > _MAX_GATHER_DIMS:
        raise ValueError("ferry.torch: allgather of '%s': at most %d dimensions"
                         % (name, _MAX_GATHER_DIMS))
    if tensor.dtype not in _GATHER_DTYPES:
        raise TypeError("ferry.torch: allgather of '%s': dtype %s is not supported"
                        % (name, tensor.dtype))


def _members(process_set):
    """(the gathering ranks' global ranks in order, this worker's index among them)."""
    if _is_global(process_set):
        return list(range(size())), rank()
    if process_set.process_set_id is None or not process_set.included():
        raise ValueError("ferry.torch: allgather: rank %d is not a member of %r (or it is not "
                         "registered); only its members call its collectives"
                         % (rank(), process_set))
    return process_set.ranks, process_set.rank()


def _gather_shapes(tensor, name, process_set=None):
    """Every worker's (ndim, dtype, shape) of its allgather input, exchanged and checked
    to agree but for dim 0; otherwise every worker raises the same FerryError (as Horovod's
    coordinator fails the operation on every rank). A worker's row is ndim + 1 first, so
    a row of zeros is a worker that took no part: it has joined. Returns the first dims in
    rank order (of the process set's members, with one)."""
    ranks, me = _members(process_set)
    meta = torch.zeros(len(ranks), 2 + _MAX_GATHER_DIMS, dtype=torch.int64)
    meta[me, 0] = tensor.dim() + 1
    meta[me, 1] = _GATHER_DTYPES.index(tensor.dtype)
    meta[me, 2:2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    meta = _sync_push_pull(meta, False, "allgather.%s.shapes" % name, None, compression="none",
                           process_set=process_set)
    joined = [r for r in range(len(ranks)) if int(meta[r, 0]) == 0]
    if joined:
        _core.fail(_core.MISMATCH,
                   "allgather of '%s': rank(s) %s have joined (join()); allgather is not "
                   "supported while a worker has joined (as in Horovod): every worker must "
                   "take part" % (name, ", ".join(str(r) for r in joined)))
    for r in range(len(ranks)):
        if int(meta[r, 0]) == 1:
            _core.fail(_core.MISMATCH,
                       "allgather of '%s': rank %d sent a rank-zero tensor, which has no "
                       "dimension 0 to concatenate along (Horovod refuses it too)"
                       % (name, ranks[r]))
    for r in range(1, len(ranks)):
        a, b = meta[0], meta[r]
        if a[0] != b[0] or a[1] != b[1] or not torch.equal(a[3:], b[3:]):
            _core.fail(_core.MISMATCH,
                       "allgather of '%s': the workers disagree: rank %d sent %s, rank %d sent "
                       "%s; every worker must send the same dtype and the same dimensions but "
                       "the first" % (name, ranks[0], _describe_meta(a), ranks[r],
                                      _describe_meta(b)))
    return [int(d) for d in meta[:, 2]]


def _bucket(n):
    return 1 << max(n - 1, 0).bit_length()


def _allgather(tensor, name, task=None, process_set=None):
    """The gathered tensor: every worker's `tensor` concatenated along dim 0, in rank order
    (a sum in which each worker fills its own rows: exact for every dtype). `task`: the
    background operation running it, told once the data tensor is declared."""
    firsts = _gather_shapes(tensor, name, process_set)
    rest = tuple(tensor.shape[1:])
    row = 1
    for d in rest:
        row *= d
    total = sum(firsts)
    offset = sum(firsts[:_members(process_set)[1]]) * row
    wide = torch.int32 if tensor.dtype in _WIDENED_FOR_BROADCAST else tensor.dtype
    elements = total * row
    # A few sizes per name only: one core tensor per power of two.
    flat = torch.zeros(_bucket(elements), dtype=wide, device=tensor.device)
    flat[offset:offset + tensor.numel()] = tensor.reshape(-1).to(wide)
    handle = _submit(flat, True, False, "allgather.%s.%d" % (name, flat.numel()), None,
                     compression="none", process_set=process_set)  # values travel exact
    if task is not None:
        task.declared()
    flat = synchronize(handle)
    return flat[:elements].reshape((total,) + rest).to(tensor.dtype)


def allgather_async(tensor, name=None, process_set=None):
    """horovod.torch.allgather_async: a handle; synchronize() returns every worker's
    `tensor` concatenated along dim 0 in rank order (dim 0 may differ between workers; the
    other dimensions and the dtype must agree, or every worker raises FerryError at
    synchronize()). Runs in the background (ferry.torch._runtime): poll() is False until
    every worker has called it. With a process_set: its members' tensors, in their order."""
    _check_tensor(tensor, "tensor '%s'" % name)
    _check_gather_input(tensor, name)
    _members(process_set)  # a member of a registered set, or the global one
    name = _name_or_free("allgather", name, tensor)
    claim = _claim("allgather", name)
    source = tensor.detach()
    return _background(name, claim, lambda task: _allgather(source, name, task, process_set),
                       (source,))


class _Allgather(torch.autograd.Function):
    """allgather as a differentiable op (Horovod's): the gradient is this worker's slice
    of the average of every worker's gradient."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.name, ctx.first = name, tensor.shape[0] if tensor.dim() else 0
        return synchronize(allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad_output):
        name = ctx.name + ".grad" if ctx.name else None
        grad = _sync_push_pull(grad_output.contiguous(), True, name, None, compression="none")
        firsts = torch.zeros(size(), dtype=torch.int64)
        firsts[rank()] = ctx.first
        firsts = _sync_push_pull(firsts, False, (ctx.name or "allgather") + ".grad.firsts", None,
                                 compression="none")
        offset = int(firsts[:rank()].sum())
        return grad.narrow(0, offset, ctx.first), None


def allgather(tensor, name=None, process_set=None):
    """horovod.torch.allgather: every worker's `tensor` concatenated along dim 0, in rank
    order, as a new tensor. Differentiable (over every worker; with a process_set not
    differentiable)."""
    _check_tensor(tensor, "tensor '%s'" % name)
    if not _is_global(process_set):
        return synchronize(allgather_async(tensor, name, process_set))
    return _Allgather.apply(tensor, name)
