"""Collective operations of ferry.torch: init, push_pull, broadcast, and friends.

Every tensor operation goes through the native worker (ferry._core, a wrapper of the
C++ ferry::Worker). Tensors cross as raw addresses; this module keeps every tensor the
core reads or writes alive (in ``_pending``) until the operation is waited for, and
after a failure for the rest of the process, since ZeroMQ may still hold the memory.
"""

import atexit
import hashlib
import itertools
import socket
import sys
import threading

import torch

try:
    from ferry import _core
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "ferry.torch needs the native extension ferry._core, which is built by CMake into "
        "<build>/python/ferry (cmake -S . -B build && cmake --build build); put <build>/python "
        "on PYTHONPATH and use the interpreter the build used (/usr/bin/python3 on Debian). "
        "Import error: %s" % e) from e

FerryError = _core.FerryError
FerryError.__doc__ = ("An operation failed in the Ferry core (a dead node, a mismatched tensor, "
                      "a timeout). The message is the core's; .code / .code_name name the kind.")
FerryError.__module__ = "ferry.torch"

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

Average = "average"
Sum = "sum"

_lock = threading.Lock()   # guards the module state below
_pending = {}              # handle -> _Pending: tensors the core uses until wait()
_keepalive = []            # tensors of failed operations: ZeroMQ may still read them
_declared = {}             # name -> (dtype code, shape) declared to the core
_local = None              # (local_rank, local_size), found at init()
_finished_handles = itertools.count(-1, -1)  # handles of operations done when started
_atexit_registered = False


class _Pending(object):
    __slots__ = ("name", "tensors", "result", "finish")

    def __init__(self, name, tensors, result, finish=None):
        self.name = name          # for error messages
        self.tensors = tensors    # every tensor whose memory the core reads or writes
        self.result = result      # what synchronize() returns
        self.finish = finish      # callable run after a successful wait (copy-back)


def _finished(name, result):
    """A handle for an operation the core already finished (a broadcast): synchronize()
    returns `result` without waiting."""
    handle = next(_finished_handles)
    with _lock:
        _pending[handle] = _Pending(name, (), result)
    return handle


# ----------------------------------------------------------------------------- cluster

def init():
    """Joins the Ferry cluster as a worker (reads DMLC_* / FERRY_* from the environment).

    Blocks until every node registered. Idempotent. Raises FerryError on a bad
    configuration or an unreachable scheduler, with the core's message."""
    global _local, _atexit_registered
    if _core.is_initialized():
        return
    _core.init()
    with _lock:
        _declared.clear()
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
    _local = _find_local_rank()


def shutdown():
    """Waits for this worker's operations and leaves the job; once every worker did,
    the servers and the scheduler exit. Idempotent. Raises FerryError if the job failed."""
    global _local
    try:
        _core.shutdown()
    finally:
        # The worker is gone: ZeroMQ holds no tensor memory any more.
        with _lock:
            _pending.clear()
            del _keepalive[:]
            _declared.clear()
        _local = None


def _shutdown_at_exit():
    if not _core.is_initialized():
        return
    try:
        shutdown()
    except Exception as e:  # the job failed; the process is ending anyway
        sys.stderr.write("ferry.torch: shutdown at exit: %s\n" % e)


def is_initialized():
    """True between init() and shutdown()."""
    return _core.is_initialized()


def rank():
    """This worker's rank, 0..size()-1."""
    return _core.rank()


def size():
    """The number of workers."""
    return _core.size()


def local_rank():
    """This worker's rank among the workers on its machine.

    The core's (FERRY_LOCAL_RANK / BYTEPS_LOCAL_RANK) when the launcher set
    FERRY_LOCAL_SIZE / BYTEPS_LOCAL_SIZE, else computed at init() from every worker's
    host name."""
    return _local_pair()[0]


def local_size():
    """The number of workers on this machine: the core's (FERRY_LOCAL_SIZE /
    BYTEPS_LOCAL_SIZE) when the launcher set it, else computed at init() from every
    worker's host name."""
    return _local_pair()[1]


def _local_pair():
    local = _local
    if local is None:  # not initialised (the core raises its error), or init() under way
        return _core.local_rank(), _core.local_size()
    return local


def num_servers():
    """The number of summation servers."""
    return _core.num_servers()


def barrier():
    """Blocks until every worker called barrier()."""
    _core.barrier()


def join():
    """Uneven data (Horovod's join): this worker has no more batches.

    Its pending operations finish first; from then on the servers stop waiting for it,
    so the other workers' sums cover only the workers still pushing and their averages
    divide by that number. Blocks until every worker has called join() (deadline
    FERRY_JOIN_TIMEOUT_MS); then every worker may train on (the next epoch). Returns None
    (Horovod returns the last rank to join; Ferry does not track it).
    """
    _core.join()


def step_boundary():
    """The end of a training iteration: call it once per iteration on every worker
    (DistributedOptimizer.step() and CrossBarrier.step() do). It times iterations, drives
    FERRY_AUTOTUNE (which may switch partition size and credit here, on every worker at
    once) and marks the FERRY_TRACE_DIR timeline."""
    _core.step_boundary()


def set_scheduling(partition_bytes, credit_bytes):
    """Partition size and credit, in bytes, from the next push_pull on. Waits for this
    worker's operations. Call it on every worker at the same point, between iterations."""
    _core.set_scheduling(int(partition_bytes), int(credit_bytes))


def scheduling():
    """{'policy', 'partition_bytes', 'credit_bytes', 'window_gain', 'frame_bytes'}: what new
    push_pulls use. window_gain > 0: the credit follows the measured window (FERRY_WINDOW=bdp),
    starting from credit_bytes; 0: the credit is fixed. frame_bytes 0: whole partitions."""
    return _core.scheduling()


def _find_local_rank():
    # Gather every worker's host id: each writes its slot, the sum fills them all. Every
    # worker takes part, whatever its environment says, so the collective always matches.
    host = hashlib.sha1(socket.gethostname().encode()).digest()
    host_id = int.from_bytes(host[:7], "little") + 1
    ids = torch.zeros(size(), dtype=torch.int64)
    ids[rank()] = host_id
    synchronize(push_pull_async_inplace(ids, average=False, name=_core.HOST_IDS_TENSOR))
    same = (ids == host_id)
    # A launcher's word wins (ferry-launch --local-size, bpslaunch): the core read and
    # checked FERRY_LOCAL_RANK / FERRY_LOCAL_SIZE (or the BYTEPS_ names) at init.
    if _core.local_size_from_environment():
        return _core.local_rank(), _core.local_size()
    return int(same[:rank()].sum()), int(same.sum())


# ----------------------------------------------------------------------------- checks

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
    if tensor.device.type != "cpu":
        if tensor.device.type == "cuda":
            raise ValueError(
                "ferry.torch: %s is a CUDA tensor (%s), but this Ferry build has no CUDA data "
                "path (ferry._core.CUDA=%s, torch.cuda.is_available()=%s); move it to the CPU "
                "with .cpu() first" % (what, tensor.device, _core.CUDA, torch.cuda.is_available()))
        raise ValueError("ferry.torch: %s is on device %s; only CPU tensors are supported"
                         % (what, tensor.device))
    if tensor.layout != torch.strided:
        raise ValueError("ferry.torch: %s has layout %s; only dense (strided) tensors are supported"
                         % (what, tensor.layout))


def _auto_name(prefix, tensor):
    # Bounded: one core tensor per (dtype, shape), and operations on one name run in
    # call order on every worker, so unnamed calls made in the same order agree.
    return "%s.noname.%s.%s" % (prefix, str(tensor.dtype).replace("torch.", ""),
                                "x".join(str(d) for d in tensor.shape) or "scalar")


def _declare(name, code, shape):
    shape = tuple(int(d) for d in shape)
    if _declared.get(name) == (code, shape):
        return
    _core.declare(name, code, list(shape))  # raises FerryError on a conflicting redeclaration
    _declared[name] = (code, shape)


def declare(name, tensor):
    """Declares a tensor to the core ahead of use (name, dtype and shape), so its id and
    default priority follow the declaration order. Call in the same order on every worker."""
    _check_tensor(tensor, "tensor '%s'" % name)
    _declare(name, _dtype_code(tensor, "tensor '%s'" % name), tensor.shape)


# ----------------------------------------------------------------------------- push_pull

def _start(tensor, output, average, name, priority, result=None, finish=None, keep=()):
    """Starts a push_pull of contiguous `tensor` into contiguous `output`."""
    code = _dtype_code(tensor, "tensor '%s'" % name)
    if priority is not None:
        priority = int(priority)
    _declare(name, code, tensor.shape)
    handle = _core.push_pull_async(name, tensor.data_ptr(), output.data_ptr(), code,
                                   tensor.numel(), bool(average), priority)
    with _lock:
        _pending[handle] = _Pending(name, (tensor, output) + tuple(keep),
                                    output if result is None else result, finish)
    return handle


def _push_pull_async(tensor, output, average, name, priority):
    """push_pull of `tensor` into `output` (which may be `tensor`); handles
    non-contiguous tensors with contiguous copies."""
    inp = tensor if tensor.is_contiguous() else tensor.contiguous()
    if output is tensor:
        if inp is tensor:
            return _start(inp, inp, average, name, priority)
        # Sum into the contiguous copy, then copy back into the caller's strided tensor.
        return _start(inp, inp, average, name, priority, result=tensor,
                      finish=lambda: tensor.copy_(inp))
    return _start(inp, output, average, name, priority)


def push_pull_async(tensor, average=True, name=None, priority=None):
    """Starts summing (average=True: averaging) `tensor` over all workers into a new
    tensor; `tensor` is not modified. Returns a handle for poll() and synchronize(),
    which returns the result.

    name: identifies the tensor across workers (default: derived from dtype and shape;
    give names to run different tensors of one shape concurrently). priority: larger
    goes first; default -(declaration index), so tensors declared first are most urgent."""
    name = name or _auto_name("push_pull", tensor)
    _check_tensor(tensor, "tensor '%s'" % name)
    output = torch.empty(tensor.shape, dtype=tensor.dtype)
    return _push_pull_async(tensor, output, average, name, priority)


def push_pull_async_inplace(tensor, average=True, name=None, priority=None):
    """As push_pull_async, but the result is written into `tensor`."""
    name = name or _auto_name("push_pull", tensor)
    _check_tensor(tensor, "tensor '%s'" % name)
    return _push_pull_async(tensor, tensor, average, name, priority)


def poll(handle):
    """True once the operation of `handle` finished (then synchronize() does not block)."""
    if handle not in _pending:
        raise ValueError("ferry.torch: unknown handle %r (already synchronized?)" % (handle,))
    return handle < 0 or _core.poll(handle)


def wait_any(handles, timeout_ms=0):
    """The first handle in `handles` whose operation finished, waiting at most
    `timeout_ms` (in C++, without the GIL); None if none finished in time. Synchronize it
    next (that raises its error, if it failed)."""
    for h in handles:
        if h not in _pending:
            raise ValueError("ferry.torch: unknown handle %r (already synchronized?)" % (h,))
        if h < 0:
            return h
    if not handles:
        return None
    return _core.wait_any(list(handles), int(timeout_ms)) or None


def synchronize(handle):
    """Waits for the operation of `handle` and returns its result tensor. Raises
    FerryError with the core's message if it failed (a dead node, a mismatch, a timeout)."""
    with _lock:
        entry = _pending.pop(handle, None)
    if entry is None:
        raise ValueError("ferry.torch: unknown handle %r (already synchronized?)" % (handle,))
    try:
        # Wait in slices so that Ctrl-C (KeyboardInterrupt) is noticed between them.
        while handle > 0 and not _core.wait_for(handle, 200):
            pass
    except BaseException:
        # The core may have given up before ZeroMQ let go of the input: keep it alive.
        with _lock:
            _keepalive.append(entry.tensors)
        raise
    if entry.finish is not None:
        entry.finish()
    return entry.result


class _PushPull(torch.autograd.Function):
    """push_pull as a differentiable op: the gradient is the push_pull of the gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, priority):
        ctx.average, ctx.name, ctx.priority = average, name, priority
        return synchronize(push_pull_async(tensor, average, name, priority))

    @staticmethod
    def backward(ctx, grad_output):
        name = ctx.name + ".grad" if ctx.name else None
        grad = synchronize(push_pull_async(grad_output, ctx.average, name, ctx.priority))
        return grad, None, None, None


def push_pull(tensor, average=True, name=None, priority=None, compression=None):
    """Sums (average=True: averages) `tensor` over all workers and returns the result as
    a new tensor; `tensor` is not modified. Differentiable. See push_pull_async."""
    if compression is not None:
        compressed, ctx = compression.compress(tensor)
        return compression.decompress(_PushPull.apply(compressed, average, name, priority), ctx)
    return _PushPull.apply(tensor, average, name, priority)


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
    vals = values.contiguous()
    ids = row_ids.contiguous()
    output = torch.empty(values.shape, dtype=values.dtype)
    handle = _core.push_pull_rows_async(name, ids.data_ptr(), ids.numel(), vals.data_ptr(),
                                        output.data_ptr(), code, bool(average), priority)
    with _lock:
        _pending[handle] = _Pending(name, (vals, ids, output), output, None)
    return handle


def push_pull_rows(values, row_ids, name, average=False, num_rows=None, priority=None):
    """push_pull_rows_async + synchronize: returns the summed rows (see there)."""
    return synchronize(push_pull_rows_async(values, row_ids, name, average, num_rows, priority))


# Horovod names (op=Average or Sum; average=... is accepted too).
def _average(average, op):
    if op is not None and average is not None:
        raise ValueError("give either average= or op=, not both")
    if op is not None:
        if op not in (Average, Sum):
            raise ValueError("op must be ferry.torch.Average or ferry.torch.Sum")
        return op == Average
    return True if average is None else bool(average)


def allreduce(tensor, average=None, name=None, compression=None, op=None):
    """horovod.torch.allreduce: push_pull returning a new tensor."""
    return push_pull(tensor, _average(average, op), name, compression=compression)


def allreduce_async(tensor, average=None, name=None, op=None):
    return push_pull_async(tensor, _average(average, op), name)


def allreduce_(tensor, average=None, name=None, op=None):
    return push_pull_inplace(tensor, _average(average, op), name)


def allreduce_async_(tensor, average=None, name=None, op=None):
    return push_pull_async_inplace(tensor, _average(average, op), name)


# ----------------------------------------------------------------------------- broadcast

def _check_root(root_rank):
    n = size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError("ferry.torch: root_rank %r is not a worker rank (0..%d)" % (root_rank, n - 1))


def broadcast_async_(tensor, root_rank, name=None):
    """Replaces `tensor` on every worker by root_rank's; returns a handle for synchronize(),
    which returns `tensor`.

    The core's broadcast (LocalGroup::Broadcast: a sum to which every worker but the root
    contributes zeros, exact for every dtype) has finished when this returns, so the
    handle is already done. bool and 8/16-bit integer tensors travel widened to int32."""
    name = name or _auto_name("broadcast", tensor)
    _check_tensor(tensor, "tensor '%s'" % name)
    _check_root(root_rank)
    if tensor.dtype in _WIDENED_FOR_BROADCAST:
        buf = tensor.to(torch.int32)
    else:
        buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    code = _dtype_code(buf, "tensor '%s'" % name)
    _core.broadcast(name, buf.data_ptr(), code, buf.numel(), root_rank)
    if buf is not tensor:
        tensor.copy_(buf)
    return _finished(name, tensor)


def broadcast_(tensor, root_rank, name=None):
    """Replaces `tensor` on every worker by root_rank's, in place; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


def broadcast_async(tensor, root_rank, name=None):
    """Starts a broadcast into a new tensor (`tensor` is not modified); returns a handle."""
    return broadcast_async_(tensor.detach().clone(), root_rank, name)


def broadcast(tensor, root_rank, name=None):
    """Returns root_rank's `tensor` on every worker, as a new tensor."""
    return synchronize(broadcast_async(tensor, root_rank, name))


def _stats():
    """The core's counters for this worker (operations, partitions, bytes)."""
    return _core.stats()

