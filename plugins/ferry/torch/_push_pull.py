"""push_pull and its Horovod names (allreduce), dense and as sparse rows.

CUDA tensors: a push_pull (allreduce, the optimizer's gradients) goes through the core's
device path (worker/device/device_binding.h), ordered on torch's current stream: its
partitions are copied to pinned memory after the work queued there before the call, each
sent as soon as it landed, and the sums copied back; after synchronize() the work queued on
that stream sees them, and the Python thread never waits for the GPU. Sparse rows travel
through host copies of the tensors (they are few: that is their point).
With FERRY_DEVICE_API=fake, CPU tensors take the device path over the core's fake device
(host memory standing in for device memory): the device path's tests on machines without
a GPU.
"""

import torch

from ferry import _core
from ferry.torch._checks import (_check_same_device, _check_tensor, _declare, _device_path,
                                 _dtype_code, _on_host)
from ferry.torch._horovod import (_factors, _is_global, _reduction, _set_name,
                                  global_process_set)
from ferry.torch._runtime import (_Pending, _claim, _declared, _lock, _name_or_free, _pending,
                                  _release, synchronize)

# What ops.py (and so ferry.torch) exports of this module: an operation added here is
# public once named here.
__all__ = [
    "push_pull", "push_pull_async", "push_pull_inplace", "push_pull_async_inplace",
    "push_pull_rows", "push_pull_rows_async", "allreduce", "allreduce_async", "allreduce_",
    "allreduce_async_",
]


# ----------------------------------------------------------------------------- push_pull

def _start(tensor, output, average, name, priority, claim, result=None, finish=None, keep=(),
           reduce=None, compression=""):
    """Starts a push_pull of contiguous `tensor` into contiguous `output` (with `reduce`, a
    core REDUCE_* code: combined by min, max or product instead; `compression`: the core's
    compressor for it, "" for FERRY_COMPRESSION's)."""
    code = _dtype_code(tensor, "tensor '%s'" % name)
    if priority is not None:
        priority = int(priority)
    _declare(name, code, tensor.shape, compression)
    device = _device_path(tensor)
    if device is not None:
        handle = _core.call("push_pull_device_async", name, tensor.data_ptr(),
                            output.data_ptr(), code, tensor.numel(), bool(average),
                            _core.REDUCE_SUM if reduce is None else reduce, priority, device[0],
                            device[1])
    elif reduce is None:
        handle = _core.call("push_pull_async", name, tensor.data_ptr(), output.data_ptr(), code,
                            tensor.numel(), bool(average), priority)
    else:
        handle = _core.call("reduce_async", name, tensor.data_ptr(), output.data_ptr(), code,
                            tensor.numel(), reduce, priority)
    with _lock:
        _pending[handle] = _Pending(name, (tensor, output) + tuple(keep),
                                    output if result is None else result, finish, claim)
    return handle


def _pull_average_async(output, name):
    """Backup workers: the average of the next round of `name` into contiguous CPU `output`,
    without contributing to it (Worker::PullAverageAsync)."""
    claim = _claim("push_pull", name)
    try:
        code = _dtype_code(output, "tensor '%s'" % name)
        _declare(name, code, output.shape, "")
        handle = _core.call("pull_average_async", name, output.data_ptr(), code, output.numel())
    except BaseException:
        _release(claim)
        raise
    with _lock:
        _pending[handle] = _Pending(name, (output,), output, None, claim)
    return handle


def _scale(tensor, factor):
    """tensor * factor in tensor's dtype, rounded once: float16 and bfloat16 are scaled in
    float32 (as Horovod scales them), integers in float64 (truncated)."""
    if factor == 1.0:
        return tensor
    if tensor.dtype in (torch.float16, torch.bfloat16):
        return (tensor.float() * factor).to(tensor.dtype)
    if tensor.dtype.is_floating_point:
        return tensor * factor
    return (tensor.to(torch.float64) * factor).to(tensor.dtype)


def _scale_(tensor, factor):
    if factor != 1.0:
        tensor.copy_(_scale(tensor, factor))
    return tensor


def _push_pull_async(tensor, output, average, name, priority, prescale=1.0, postscale=1.0,
                     reduce=None, compression="", process_set=None):
    """push_pull of `tensor` times `prescale` into `output` (which may be `tensor`), the
    result times `postscale`. A non-contiguous or prescaled input travels as a copy (in
    place: copied back into `tensor` at synchronize()). An average with a postscale
    factor is a sum scaled once by postscale / size() (floating dtypes; as Horovod folds
    them), so float16 rounds once."""
    name = _set_name(process_set, name, _dtype_code(tensor, "tensor '%s'" % name), tensor.shape)
    if average and postscale != 1.0 and reduce is None and tensor.dtype.is_floating_point:
        average, postscale = False, postscale / (process_set or global_process_set).size()
    claim = _claim("push_pull", name)
    try:
        inp = _scale(tensor if tensor.is_contiguous() else tensor.contiguous(), prescale)
        scale_output = (lambda: _scale_(output, postscale)) if postscale != 1.0 else None
        if output is not tensor:
            return _start(inp, output, average, name, priority, claim, finish=scale_output,
                          reduce=reduce, compression=compression)
        if inp is tensor:
            return _start(inp, inp, average, name, priority, claim, finish=scale_output,
                          reduce=reduce, compression=compression)
        return _start(inp, inp, average, name, priority, claim, result=tensor,
                      finish=lambda: tensor.copy_(_scale(inp, postscale)), reduce=reduce,
                      compression=compression)
    except BaseException:
        _release(claim)
        raise


def push_pull_async(tensor, average=True, name=None, priority=None):
    """Starts summing (average=True: averaging) `tensor` over all workers into a new
    tensor; `tensor` is not modified. Returns a handle for poll() and synchronize(),
    which returns the result.

    name: identifies the tensor across workers (default: derived from dtype and shape);
    two operations in flight (not yet synchronized) under one name raise ValueError.
    priority: larger goes first; default -(declaration index), so tensors declared first
    are most urgent."""
    return _submit(tensor, False, average, name, priority)


def push_pull_async_inplace(tensor, average=True, name=None, priority=None):
    """As push_pull_async, but the result is written into `tensor`."""
    return _submit(tensor, True, average, name, priority)


def _submit(tensor, in_place, average, name, priority, prescale=1.0, postscale=1.0, reduce=None,
            compression="", process_set=None):
    """Checks `tensor`, names the call (_name_or_free) and starts its push_pull into
    `tensor` itself or into a new tensor."""
    _check_tensor(tensor, "tensor '%s'" % name)
    name = _name_or_free("push_pull", name, tensor)
    output = tensor if in_place else torch.empty(tensor.shape, dtype=tensor.dtype,
                                                 device=tensor.device)
    return _push_pull_async(tensor, output, average, name, priority, prescale, postscale, reduce,
                            compression, process_set)


class _PushPull(torch.autograd.Function):
    """push_pull as a differentiable op: the gradient is the push_pull of the gradient,
    with the same average and scale factors (as Horovod's allreduce)."""

    @staticmethod
    def forward(ctx, tensor, average, name, priority, prescale, postscale, reduce, compression):
        ctx.average, ctx.name, ctx.priority = average, name, priority
        ctx.prescale, ctx.postscale, ctx.reduce = prescale, postscale, reduce
        ctx.compression = compression
        return _sync_push_pull(tensor, average, name, priority, prescale, postscale, reduce,
                               compression)

    @staticmethod
    def backward(ctx, grad_output):
        name = ctx.name + ".grad" if ctx.name else None
        grad = _sync_push_pull(grad_output, ctx.average, name, ctx.priority, ctx.prescale,
                               ctx.postscale, ctx.reduce, ctx.compression)
        return grad, None, None, None, None, None, None, None


def _sync_push_pull(tensor, average, name, priority, prescale=1.0, postscale=1.0, reduce=None,
                    compression="", process_set=None):
    return synchronize(_submit(tensor, False, average, name, priority, prescale, postscale, reduce,
                               compression, process_set))


def push_pull(tensor, average=True, name=None, priority=None, compression=None):
    """Sums (average=True: averages) `tensor` over all workers and returns the result as
    a new tensor; `tensor` is not modified. Differentiable. See push_pull_async."""
    return _compressed_push_pull(tensor, average, name, priority, compression)


def _compressed_push_pull(tensor, average, name, priority, compression, prescale=1.0,
                          postscale=1.0, reduce=None):
    """A compressor with a `core` text goes to the core (compression.py); another one runs
    here around the push_pull; None or Compression.none: FERRY_COMPRESSION decides."""
    core = getattr(compression, "core", None)
    if compression is not None and core is None:
        compressed, ctx = compression.compress(tensor)
        return compression.decompress(
            _PushPull.apply(compressed, average, name, priority, prescale, postscale, reduce,
                            ""), ctx)
    return _PushPull.apply(tensor, average, name, priority, prescale, postscale, reduce,
                           core or "")


def push_pull_inplace(tensor, average=True, name=None, priority=None):
    """Sums (average=True: averages) `tensor` over all workers in place; returns it."""
    return synchronize(push_pull_async_inplace(tensor, average, name, priority))


# ----------------------------------------------------------------------------- sparse rows

def push_pull_rows_async(values, row_ids, name, average=False, num_rows=None, priority=None):
    """Starts a sparse-rows push_pull of tensor `name` (an embedding-style [R, ...]
    tensor): only the listed rows travel. `row_ids`: 1-D int64 CPU tensor of row ids in
    [0, R), any order, duplicates allowed; `values`: one row per id ([len(row_ids), ...],
    the tensor's row shape and dtype). Returns a handle; synchronize() returns a new
    tensor shaped like `values` whose row j is the sum over all workers' pushes of this
    round of row row_ids[j] (a duplicate id counts each time; average=True divides by the
    number of workers). Every worker calls it once per round, possibly with no rows.

    The tensor must be declared with its full shape: declare(name, weight) beforehand,
    or num_rows=R here (shape [R] + values.shape[1:]). See docs/servers.md, Sparse rows."""
    _check_same_device("push_pull_rows of '%s'" % name, values=values, row_ids=row_ids)
    _check_tensor(values, "values of '%s'" % name)
    _check_tensor(row_ids, "row_ids of '%s'" % name)
    if row_ids.dtype != torch.int64 or row_ids.dim() != 1:
        raise TypeError("ferry.torch: row_ids of '%s' must be a 1-D int64 tensor, got %s of "
                        "shape %s" % (name, row_ids.dtype, tuple(row_ids.shape)))
    if values.dim() < 1 or values.shape[0] != row_ids.numel():
        raise ValueError("ferry.torch: values of '%s' must hold one row per row id: %d ids "
                         "but values of shape %s" % (name, row_ids.numel(), tuple(values.shape)))
    code = _dtype_code(values, "values of '%s'" % name)
    if num_rows is not None:
        _declare(name, code, (int(num_rows),) + tuple(values.shape[1:]))
    elif name not in _declared:
        raise ValueError("ferry.torch: push_pull_rows of '%s': declare the tensor first "
                         "(ferry.torch.declare(name, weight)) or pass num_rows=" % name)
    if priority is not None:
        priority = int(priority)
    # Device tensors travel through host copies (the rows are few: that is their point).
    vals = _on_host(values).contiguous()
    ids = _on_host(row_ids).contiguous()
    output = torch.empty(values.shape, dtype=values.dtype)
    result, finish = output, None
    if values.device.type != "cpu":
        result = torch.empty(values.shape, dtype=values.dtype, device=values.device)
        finish = lambda: result.copy_(output)  # noqa: E731
    claim = _claim("push_pull_rows", name)
    try:
        handle = _core.call("push_pull_rows_async", name, ids.data_ptr(), ids.numel(),
                            vals.data_ptr(), output.data_ptr(), code, bool(average), priority)
    except BaseException:
        _release(claim)
        raise
    with _lock:
        _pending[handle] = _Pending(name, (vals, ids, output), result, finish, claim)
    return handle


def push_pull_rows(values, row_ids, name, average=False, num_rows=None, priority=None):
    """push_pull_rows_async + synchronize: returns the summed rows (see there)."""
    return synchronize(push_pull_rows_async(values, row_ids, name, average, num_rows, priority))


# ----------------------------------------------------------------------------- allreduce

def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """horovod.torch.allreduce: a new tensor, postscale * reduce(prescale * tensor) (Average
    divides by size() too). Differentiable: the gradient is the allreduce of the gradient
    with the same op and factors (over every worker; with a process_set not differentiable)."""
    if not _is_global(process_set):
        return synchronize(_allreduce_async(tensor, False, average, name, op, prescale_factor,
                                            postscale_factor, process_set))
    pre, post = _factors(prescale_factor, postscale_factor)
    avg, reduce = _reduction(average, op)
    return _compressed_push_pull(tensor, avg, name, None, compression, pre, post, reduce)


def _allreduce_async(tensor, in_place, average, name, op, prescale_factor, postscale_factor,
                     process_set):
    pre, post = _factors(prescale_factor, postscale_factor)
    avg, reduce = _reduction(average, op)
    return _submit(tensor, in_place, avg, name, None, pre, post, reduce, process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    """horovod.torch.allreduce_async: a handle; synchronize() returns a new tensor."""
    return _allreduce_async(tensor, False, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    """horovod.torch.allreduce_: in place; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    """horovod.torch.allreduce_async_: in place; returns a handle."""
    return _allreduce_async(tensor, True, average, name, op, prescale_factor, postscale_factor,
                            process_set)
