"""Collective operations of ferry.torch: init, push_pull, broadcast, and friends.

Every tensor operation goes through the native worker (ferry._core, libferry's C API).
Tensors cross as raw addresses; this module keeps every tensor the core reads or writes
alive (in ``_pending``) until the operation is waited for, and after a failure for the rest
of the process, since ZeroMQ may still hold the memory.

CUDA tensors: a push_pull (allreduce, the optimizer's gradients) goes through the core's
device path (worker/device/device_binding.h), ordered on torch's current stream: its
partitions are copied to pinned memory after the work queued there before the call, each
sent as soon as it landed, and the sums copied back; after synchronize() the work queued on
that stream sees them, and the Python thread never waits for the GPU. Broadcast, allgather
and sparse rows travel through host copies of the tensors (they are rare, or small).
With FERRY_DEVICE_API=fake, CPU tensors take the device path over the core's fake device
(host memory standing in for device memory): the device path's tests on machines without
a GPU.

Names in flight (as Horovod): an operation's name is taken from its call until its
synchronize(); a second operation of the same kind under a taken name raises ValueError
at the call, on every rank that makes it. Unnamed operations get the lowest free
"<kind>.noname.<dtype>.<shape>.<k>", the same on every rank that makes the same calls.

Background operations: allgather and broadcast are several core steps each (a vote or a
shape exchange, then the data), so their *_async calls hand them to one background thread
(_Runner) and return at once, as Horovod's do; poll() is False until every worker took
part. The runner runs them one at a time, in call order. Invariant (declaration order):
every worker declares tensors in the same order, because a tensor's id (and so its keys)
is its declaration index; a background operation declares its tensors when its exchange
completes, so a declaration of a new name on any other thread first waits until every
background operation started before it has declared its own (_DeclarationOrder).
"""

import atexit
import hashlib
import itertools
import os
import socket
import sys
import threading
import weakref

import torch

try:
    from ferry import _core
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "ferry.torch needs ferry._core and libferry.so, which CMake builds into "
        "<build>/python/ferry (scripts/build); put <build>/python on PYTHONPATH. "
        "Import error: %s" % e) from e

FerryError = _core.FerryError
FerryError.__doc__ = ("An operation failed in the Ferry core (a dead node, a mismatched tensor, "
                      "a timeout). The message is the core's; .code / .code_name name the kind.")
FerryError.__module__ = "ferry.torch"
MembershipChangedError = _core.MembershipChangedError
MembershipChangedError.__doc__ = (
    "Elastic training (FERRY_ELASTIC=1): the job's membership changed (a node died) and the "
    "operation was abandoned. A FerryError (so Horovod's HorovodInternalError): restore the "
    "last commit and call reset(); ferry.torch.elastic.run does both.")
MembershipChangedError.__module__ = "ferry.torch"


def reset():
    """Elastic training: takes the job's new membership after MembershipChangedError
    (rank() and size() may change). ferry.torch.elastic.run calls it."""
    _core.reset()
    _runner.abandon_queued()
    for optimizer in list(_optimizers):
        optimizer._reset_pending()  # the step that failed starts over
    with _lock:
        # Every operation in flight failed with the change: their names are free again, and
        # their tensors stay alive (ZeroMQ may still read an input queued for a dead server).
        _keepalive.extend(p.tensors for p in _pending.values())
        _pending.clear()
        _in_flight.clear()

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

# Reduction operations (Horovod's names). Average and Sum are summed by the servers, Min,
# Max and Product combined by them (allreduce family only); Adasum is refused.
Average = "average"
Sum = "sum"
Adasum = "adasum"
Min = "min"
Max = "max"
Product = "product"

_lock = threading.Lock()   # guards the module state below
_pending = {}              # handle -> _Pending: tensors the core uses until wait()
_keepalive = []            # tensors of failed operations: ZeroMQ may still read them
_declared = {}             # name -> (dtype code, shape) declared to the core
_in_flight = set()         # (kind, name) of operations started and not yet synchronized
_optimizers = weakref.WeakSet()  # DistributedOptimizers: reset() forgets their failed step
_local = None              # (local_rank, local_size), found at init()
_task_handles = itertools.count(-1, -1)  # handles of background operations (_Task)
_atexit_registered = False


class _Pending(object):
    __slots__ = ("name", "tensors", "result", "finish", "claim", "task")

    def __init__(self, name, tensors, result, finish=None, claim=None, task=None):
        self.name = name          # for error messages
        self.tensors = tensors    # every tensor whose memory the core reads or writes
        self.result = result      # what synchronize() returns
        self.finish = finish      # callable run after a successful wait (copy-back, scaling)
        self.claim = claim        # (kind, name) in _in_flight until synchronize()
        self.task = task          # a background operation (_Task): its handle is negative


class _DeclarationOrder(object):
    """Keeps declarations in call order across the caller's threads and the runner (see
    the module docstring). Background operations are numbered as they are started; each
    reports when it has declared what it needs (or ended). A declaration from outside the
    runner waits until every operation started before it has."""

    def __init__(self):
        self._cv = threading.Condition()
        self._started = 0   # background operations started
        self._passed = 0    # of those, the first _passed have declared (the runner is FIFO)

    def start(self):
        with self._cv:
            self._started += 1
            return self._started

    def passed(self, seq):
        with self._cv:
            self._passed = max(self._passed, seq)
            self._cv.notify_all()

    def wait_turn(self):
        """Blocks until every background operation started so far has declared. Bounded:
        each one either declares or fails by its own deadline (FERRY_OP_TIMEOUT_MS)."""
        if threading.current_thread() is _runner.thread:
            return
        with self._cv:
            target = self._started
            while self._passed < target:
                self._cv.wait(0.2)


class _Task(object):
    """A background operation: `run(task)` on the runner thread; it calls task.declared()
    once its tensors are declared. done is set when it ended, with result or error."""

    def __init__(self, run):
        self.run = run
        self.generation = _runner.generation
        self.seq = _order.start()
        self.done = threading.Event()
        self.result = None
        self.error = None

    def declared(self):
        _order.passed(self.seq)

    def execute(self):
        try:
            if self.generation != _runner.generation:
                raise FerryError("ferry.torch: a background allgather or broadcast started "
                                 "before reset() or shutdown() was abandoned by it")
            self.result = self.run(self)
        except BaseException as e:  # raised again by synchronize() on the caller's thread
            self.error = e
        finally:
            self.declared()
            self.done.set()


class _Runner(object):
    """One daemon thread named `name` running tasks (objects with execute()) in call order
    (started at first use, and again in a process forked after it). ferry.torch's
    background operations run on one; the torch.distributed backend completes its
    operations on another."""

    def __init__(self, name="ferry-collectives"):
        self._name = name
        self._queue = []
        self._cv = threading.Condition()
        self.thread = None
        # One more at each reset() and shutdown(): operations queued before it are abandoned
        # (the other workers will not run them), so they cannot hold up later ones.
        self.generation = 0

    def abandon_queued(self):
        with self._cv:
            self.generation += 1

    def submit(self, task):
        with self._cv:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self.thread.start()
            self._queue.append(task)
            self._cv.notify()

    def _loop(self):
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                task = self._queue.pop(0)
            task.execute()


_order = _DeclarationOrder()
_runner = _Runner()


def _background(name, claim, run, tensors=()):
    """Starts `run` on the runner; returns its handle. `tensors`: memory the core may use."""
    task = _Task(run)
    handle = next(_task_handles)
    with _lock:
        _pending[handle] = _Pending(name, tuple(tensors), None, claim=claim, task=task)
    _runner.submit(task)
    return handle


def _claim(kind, name):
    """Takes `name` for an operation of `kind` until its synchronize(); ValueError (with
    Horovod's wording) if an earlier one still holds it."""
    with _lock:
        if (kind, name) in _in_flight:
            raise ValueError(
                "Requested to %s a tensor with the same name as another tensor that is currently "
                "being processed ('%s': started and not yet synchronized).  If you want to request "
                "another tensor, use a different tensor name." % (kind, name))
        _in_flight.add((kind, name))
    return (kind, name)


def _release(claim):
    if claim is not None:
        with _lock:
            _in_flight.discard(claim)


def _name_or_free(kind, name, tensor):
    """`name`, or for an unnamed call the lowest free auto name of the tensor's dtype and
    shape: deterministic, so every rank making the same calls picks the same one."""
    if name:
        return name
    # An allgather's first dimension may differ between ranks: not part of its name.
    shape = tensor.shape[1:] if kind == "allgather" else tensor.shape
    base = "%s.noname.%s.%s" % (kind, str(tensor.dtype).replace("torch.", ""),
                                "x".join(str(d) for d in shape) or "scalar")
    with _lock:
        k = 0
        while (kind, "%s.%d" % (base, k)) in _in_flight:
            k += 1
    return "%s.%d" % (base, k)


# ----------------------------------------------------------------------------- cluster

def init():
    """Joins the Ferry cluster as a worker (reads DMLC_* / FERRY_* from the environment).

    Blocks until every node registered. Idempotent. After shutdown() it joins the job again
    under the same rank, with every name free to be declared anew. Raises FerryError on a
    bad configuration or an unreachable scheduler, with the core's message."""
    global _local, _atexit_registered
    if _core.is_initialized():
        return
    _core.init()
    with _lock:
        _declared.clear()
        _in_flight.clear()
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
    _local = _find_local_rank()


def shutdown():
    """Waits for this worker's operations and leaves the job. init() may join it again,
    under the same rank, as in Horovod; the job ends once every worker has shut down and
    at least one for good (its process exited). Idempotent. Raises FerryError if the job
    failed."""
    _shutdown(final=False)


def _shutdown(final):
    global _local
    _runner.abandon_queued()
    try:
        _core.shutdown(final)
    finally:
        # Once it left (even failing), ZeroMQ holds no tensor memory any more; if it failed
        # before leaving (a suspension past its deadline), operations may still run.
        if not _core.is_initialized():
            with _lock:
                _pending.clear()
                del _keepalive[:]
                _declared.clear()
                _in_flight.clear()
            _local = None


def _shutdown_at_exit():
    try:
        _shutdown(final=True)  # also after shutdown(): this worker will not come back
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
    return local[:2]


def _cross():
    local = _local
    if local is None:  # not initialised: the core raises its error; or init() under way
        _core.require_initialized()
        return 0, 1, True
    return local[2:]


def cross_rank():
    """The index of this worker's machine among the job's machines (machines ordered by
    their lowest worker rank), as Horovod's cross_rank()."""
    return _cross()[0]


def cross_size():
    """The number of machines the workers run on, as Horovod's cross_size()."""
    return _cross()[1]


def is_homogeneous():
    """True if every machine runs the same number of workers."""
    return _cross()[2]


def num_servers():
    """The number of summation servers."""
    return _core.num_servers()


def barrier(process_set=None):
    """Blocks until every worker called barrier()."""
    _check_process_set(process_set)
    _core.barrier()


def join(device=-1):
    """Uneven data (Horovod's join): this worker has no more batches. Returns the rank of
    the worker that joined last.

    Its pending operations finish first; from then on the servers stop waiting for it: the
    other workers' sums count it as zeros, and averages still divide by size(), as in
    Horovod, also for tensors first used meanwhile (the joined workers take their
    declarations at the next join); a broadcast or allgather meanwhile raises FerryError, as
    in Horovod. Blocks until every worker has called join() (deadline
    FERRY_JOIN_TIMEOUT_MS); then every worker may train on (the next epoch). `device` is
    Horovod's (the GPU for its zero tensors): accepted and unused."""
    if not isinstance(device, int):
        raise TypeError("join(device=...) takes an int, got %s" % type(device).__name__)
    return _core.join()


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
    if _core.epoch() > 0:
        # A worker that joined a running elastic job: the others run no collective now.
        # It counts as a machine of its own (unless a launcher said otherwise).
        if _core.local_size_from_environment():
            return (_core.local_rank(), _core.local_size(), rank(), size(), True)
        return (0, 1, rank(), size(), True)
    # Gather every worker's host id: each writes its slot, the sum fills them all. Every
    # worker takes part, whatever its environment says, so the collective always matches.
    host = hashlib.sha1(socket.gethostname().encode()).digest()
    host_id = int.from_bytes(host[:7], "little") + 1
    ids = torch.zeros(size(), dtype=torch.int64)
    ids[rank()] = host_id
    synchronize(push_pull_async_inplace(ids, average=False, name=_core.HOST_IDS_TENSOR))
    same = (ids == host_id)
    # Machines in the order of their lowest rank: Horovod's cross_rank / cross_size.
    hosts = []
    for h in ids.tolist():
        if h not in hosts:
            hosts.append(h)
    counts = [ids.tolist().count(h) for h in hosts]
    cross = (hosts.index(host_id), len(hosts), len(set(counts)) == 1)
    # A launcher's word wins (ferry-launch --local-size, bpslaunch): the core read and
    # checked FERRY_LOCAL_RANK / FERRY_LOCAL_SIZE (or the BYTEPS_ names) at init.
    if _core.local_size_from_environment():
        return (_core.local_rank(), _core.local_size()) + cross
    return (int(same[:rank()].sum()), int(same.sum())) + cross


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


def _declare(name, code, shape):
    shape = tuple(int(d) for d in shape)
    if _declared.get(name) == (code, shape):
        return
    _order.wait_turn()  # background operations started earlier declare first
    _core.declare(name, code, list(shape))  # raises FerryError on a conflicting redeclaration
    _declared[name] = (code, shape)


def declare(name, tensor):
    """Declares a tensor to the core ahead of use (name, dtype and shape), so its id and
    default priority follow the declaration order. Call in the same order on every worker."""
    _check_tensor(tensor, "tensor '%s'" % name)
    _declare(name, _dtype_code(tensor, "tensor '%s'" % name), tensor.shape)


class _ProcessSet(object):
    """Horovod's process sets: Ferry has only the global one (every worker)."""

    def __init__(self, ranks=None):
        self.ranks = ranks
        self.process_set_id = 0

    def size(self):
        return size()

    def rank(self):
        return rank()

    def included(self):
        return True

    def __repr__(self):
        return "ProcessSet(global)"


global_process_set = _ProcessSet()


def ProcessSet(ranks_or_comm):  # noqa: N802 - Horovod's name
    raise NotImplementedError(
        "ferry.torch: process sets (horovod.torch.ProcessSet) are not supported; every "
        "collective runs over all workers (global_process_set)")


def add_process_set(process_set):
    ProcessSet(process_set)


def remove_process_set(process_set):
    ProcessSet(process_set)


def _check_process_set(process_set):
    if process_set is not None and process_set is not global_process_set:
        ProcessSet(process_set)


# ----------------------------------------------------------------------------- push_pull

def _start(tensor, output, average, name, priority, claim, result=None, finish=None, keep=(),
           reduce=None):
    """Starts a push_pull of contiguous `tensor` into contiguous `output` (with `reduce`, a
    core REDUCE_* code: combined by min, max or product instead)."""
    code = _dtype_code(tensor, "tensor '%s'" % name)
    if priority is not None:
        priority = int(priority)
    _declare(name, code, tensor.shape)
    device = _device_path(tensor)
    if device is not None:
        handle = _core.push_pull_device_async(
            name, tensor.data_ptr(), output.data_ptr(), code, tensor.numel(), bool(average),
            _core.REDUCE_SUM if reduce is None else reduce, priority, device[0], device[1])
    elif reduce is None:
        handle = _core.push_pull_async(name, tensor.data_ptr(), output.data_ptr(), code,
                                       tensor.numel(), bool(average), priority)
    else:
        handle = _core.reduce_async(name, tensor.data_ptr(), output.data_ptr(), code,
                                    tensor.numel(), reduce, priority)
    with _lock:
        _pending[handle] = _Pending(name, (tensor, output) + tuple(keep),
                                    output if result is None else result, finish, claim)
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
                     reduce=None):
    """push_pull of `tensor` times `prescale` into `output` (which may be `tensor`), the
    result times `postscale`. A non-contiguous or prescaled input travels as a copy (in
    place: copied back into `tensor` at synchronize()). An average with a postscale
    factor is a sum scaled once by postscale / size() (floating dtypes; as Horovod folds
    them), so float16 rounds once."""
    if average and postscale != 1.0 and reduce is None and tensor.dtype.is_floating_point:
        average, postscale = False, postscale / size()
    claim = _claim("push_pull", name)
    try:
        inp = _scale(tensor if tensor.is_contiguous() else tensor.contiguous(), prescale)
        scale_output = (lambda: _scale_(output, postscale)) if postscale != 1.0 else None
        if output is not tensor:
            return _start(inp, output, average, name, priority, claim, finish=scale_output,
                          reduce=reduce)
        if inp is tensor:
            return _start(inp, inp, average, name, priority, claim, finish=scale_output,
                          reduce=reduce)
        return _start(inp, inp, average, name, priority, claim, result=tensor,
                      finish=lambda: tensor.copy_(_scale(inp, postscale)), reduce=reduce)
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


def _submit(tensor, in_place, average, name, priority, prescale=1.0, postscale=1.0, reduce=None):
    """Checks `tensor`, names the call (_name_or_free) and starts its push_pull into
    `tensor` itself or into a new tensor."""
    _check_tensor(tensor, "tensor '%s'" % name)
    name = _name_or_free("push_pull", name, tensor)
    output = tensor if in_place else torch.empty(tensor.shape, dtype=tensor.dtype,
                                                 device=tensor.device)
    return _push_pull_async(tensor, output, average, name, priority, prescale, postscale, reduce)


def _entry(handle):
    entry = _pending.get(handle)
    if entry is None:
        raise ValueError("ferry.torch: unknown handle %r (already synchronized?)" % (handle,))
    return entry


def poll(handle):
    """True once the operation of `handle` finished (then synchronize() does not block)."""
    entry = _entry(handle)
    return entry.task.done.is_set() if entry.task is not None else _core.poll(handle)


def wait_any(handles, timeout_ms=0):
    """The first handle in `handles` whose operation finished, waiting at most
    `timeout_ms` (in C++, without the GIL); None if none finished in time. Synchronize it
    next (that raises its error, if it failed)."""
    handles = list(handles)
    background = [h for h in handles if _entry(h).task is not None]
    for h in background:
        if poll(h):
            return h
    core = [h for h in handles if h not in background]
    if not background:
        return (_core.wait_any(core, int(timeout_ms)) or None) if core else None
    # Mixed: the core's handles in short waits between looks at the background ones.
    deadline = _core.now_us() + int(timeout_ms) * 1000
    while True:
        slice_ms = max(0, min(5, (deadline - _core.now_us()) // 1000))
        if core:
            h = _core.wait_any(core, int(slice_ms))
            if h:
                return h
        else:
            _entry(background[0]).task.done.wait(slice_ms / 1000.0)
        for h in background:
            if poll(h):
                return h
        if _core.now_us() >= deadline:
            return None


def synchronize(handle):
    """Waits for the operation of `handle` and returns its result tensor. Raises
    FerryError with the core's message if it failed (a dead node, a mismatch, a timeout).
    The operation's name is free again afterwards."""
    with _lock:
        entry = _pending.pop(handle, None)
    if entry is None:
        raise ValueError("ferry.torch: unknown handle %r (already synchronized?)" % (handle,))
    try:
        # Wait in slices so that Ctrl-C (KeyboardInterrupt) is noticed between them.
        if entry.task is not None:
            while not entry.task.done.wait(0.2):
                pass
            if entry.task.error is not None:
                raise entry.task.error
            entry.result = entry.task.result
        else:
            while not _core.wait_for(handle, 200):
                pass
    except BaseException:
        # The core may have given up before ZeroMQ let go of the input: keep it alive.
        with _lock:
            _keepalive.append(entry.tensors)
        _release(entry.claim)
        raise
    _release(entry.claim)
    if entry.finish is not None:
        entry.finish()
    return entry.result


class _PushPull(torch.autograd.Function):
    """push_pull as a differentiable op: the gradient is the push_pull of the gradient,
    with the same average and scale factors (as Horovod's allreduce)."""

    @staticmethod
    def forward(ctx, tensor, average, name, priority, prescale, postscale, reduce):
        ctx.average, ctx.name, ctx.priority = average, name, priority
        ctx.prescale, ctx.postscale, ctx.reduce = prescale, postscale, reduce
        return _sync_push_pull(tensor, average, name, priority, prescale, postscale, reduce)

    @staticmethod
    def backward(ctx, grad_output):
        name = ctx.name + ".grad" if ctx.name else None
        grad = _sync_push_pull(grad_output, ctx.average, name, ctx.priority, ctx.prescale,
                               ctx.postscale, ctx.reduce)
        return grad, None, None, None, None, None, None


def _sync_push_pull(tensor, average, name, priority, prescale=1.0, postscale=1.0, reduce=None):
    return synchronize(_submit(tensor, False, average, name, priority, prescale, postscale, reduce))


def push_pull(tensor, average=True, name=None, priority=None, compression=None):
    """Sums (average=True: averages) `tensor` over all workers and returns the result as
    a new tensor; `tensor` is not modified. Differentiable. See push_pull_async."""
    return _compressed_push_pull(tensor, average, name, priority, compression)


def _compressed_push_pull(tensor, average, name, priority, compression, prescale=1.0,
                          postscale=1.0, reduce=None):
    if compression is not None:
        compressed, ctx = compression.compress(tensor)
        return compression.decompress(
            _PushPull.apply(compressed, average, name, priority, prescale, postscale, reduce),
            ctx)
    return _PushPull.apply(tensor, average, name, priority, prescale, postscale, reduce)


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
        handle = _core.push_pull_rows_async(name, ids.data_ptr(), ids.numel(), vals.data_ptr(),
                                            output.data_ptr(), code, bool(average), priority)
    except BaseException:
        _release(claim)
        raise
    with _lock:
        _pending[handle] = _Pending(name, (vals, ids, output), result, finish, claim)
    return handle


def push_pull_rows(values, row_ids, name, average=False, num_rows=None, priority=None):
    """push_pull_rows_async + synchronize: returns the summed rows (see there)."""
    return synchronize(push_pull_rows_async(values, row_ids, name, average, num_rows, priority))


# ----------------------------------------------------------------------------- Horovod names

_REDUCE_CODES = {Min: _core.REDUCE_MIN, Max: _core.REDUCE_MAX, Product: _core.REDUCE_PRODUCT}


def _reduction(average, op):
    """Horovod's `average` / `op` arguments of the allreduce family -> (average, reduce):
    reduce is the core's code for Min, Max and Product, None for a sum."""
    if op in _REDUCE_CODES:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of "
                             "them.")
        return False, _REDUCE_CODES[op]
    return _average(average, op), None


def _average(average, op):
    """Horovod's `average` / `op` arguments -> average (bool), for the summing calls."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        return True if average is None else bool(average)
    if op in (Min, Max, Product):
        raise NotImplementedError(
            "ferry.torch: op=%s is for allreduce (allreduce, allreduce_, allreduce_async, "
            "allreduce_async_); this call sums (op=Average or op=Sum)" % op.capitalize())
    if op == Adasum:
        raise NotImplementedError("ferry.torch: op=Adasum is not supported; use op=Average or "
                                  "op=Sum")
    if op not in (Average, Sum):
        raise ValueError("ferry.torch: op must be one of ferry.torch.Average, Sum, Min, Max, "
                         "Product or Adasum, got %r" % (op,))
    return op == Average


def _factors(prescale_factor, postscale_factor):
    return float(prescale_factor), float(postscale_factor)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """horovod.torch.allreduce: a new tensor, postscale * reduce(prescale * tensor) (Average
    divides by size() too). Differentiable: the gradient is the allreduce of the gradient
    with the same op and factors."""
    _check_process_set(process_set)
    pre, post = _factors(prescale_factor, postscale_factor)
    avg, reduce = _reduction(average, op)
    return _compressed_push_pull(tensor, avg, name, None, compression, pre, post, reduce)


def _allreduce_async(tensor, in_place, average, name, op, prescale_factor, postscale_factor,
                     process_set):
    _check_process_set(process_set)
    pre, post = _factors(prescale_factor, postscale_factor)
    avg, reduce = _reduction(average, op)
    return _submit(tensor, in_place, avg, name, None, pre, post, reduce)


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


# ----------------------------------------------------------------------------- broadcast

def _check_root(root_rank):
    n = size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError("ferry.torch: root_rank %r is not a worker rank (0..%d)" % (root_rank, n - 1))


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
    _core.broadcast(name, buf.data_ptr(), code, buf.numel(), root_rank)
    if buf is not tensor:
        tensor.copy_(buf)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Replaces `tensor` on every worker by root_rank's; returns a handle for poll() and
    synchronize(), which returns `tensor`.

    Runs in the background (the module docstring): poll() is False until every worker
    has called it. bool and 8/16-bit integer tensors travel widened to int32. Workers that
    disagree on the root, dtype or shape, or all of them while a worker has joined, raise
    FerryError at synchronize(), naming why."""
    _check_process_set(process_set)
    _check_tensor(tensor, "tensor '%s'" % name)
    name = _name_or_free("broadcast", name, tensor)
    _check_root(root_rank)
    claim = _claim("broadcast", name)

    def run(task):
        _broadcast_into(tensor, root_rank, name)
        return tensor
    return _background(name, claim, run, (tensor,))


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
        grad = _sync_push_pull(grad_output.contiguous(), True, name, None)
        if rank() != ctx.root_rank:
            grad = torch.zeros_like(grad)
        return grad, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Returns root_rank's `tensor` on every worker, as a new tensor. Differentiable."""
    _check_process_set(process_set)
    _check_tensor(tensor, "tensor '%s'" % name)
    _check_root(root_rank)
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


def _gather_shapes(tensor, name):
    """Every worker's (ndim, dtype, shape) of its allgather input, exchanged and checked
    to agree but for dim 0; otherwise every worker raises the same FerryError (as Horovod's
    coordinator fails the operation on every rank). A worker's row is ndim + 1 first, so
    a row of zeros is a worker that took no part: it has joined. Returns the first dims in
    rank order."""
    meta = torch.zeros(size(), 2 + _MAX_GATHER_DIMS, dtype=torch.int64)
    meta[rank(), 0] = tensor.dim() + 1
    meta[rank(), 1] = _GATHER_DTYPES.index(tensor.dtype)
    meta[rank(), 2:2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    meta = _sync_push_pull(meta, False, "allgather.%s.shapes" % name, None)
    joined = [r for r in range(size()) if int(meta[r, 0]) == 0]
    if joined:
        _core.fail(_core.MISMATCH,
                   "allgather of '%s': rank(s) %s have joined (join()); allgather is not "
                   "supported while a worker has joined (as in Horovod): every worker must "
                   "take part" % (name, ", ".join(str(r) for r in joined)))
    for r in range(size()):
        if int(meta[r, 0]) == 1:
            _core.fail(_core.MISMATCH,
                       "allgather of '%s': rank %d sent a rank-zero tensor, which has no "
                       "dimension 0 to concatenate along (Horovod refuses it too)" % (name, r))
    for r in range(1, size()):
        a, b = meta[0], meta[r]
        if a[0] != b[0] or a[1] != b[1] or not torch.equal(a[3:], b[3:]):
            _core.fail(_core.MISMATCH,
                       "allgather of '%s': the workers disagree: rank 0 sent %s, rank %d sent "
                       "%s; every worker must send the same dtype and the same dimensions but "
                       "the first" % (name, _describe_meta(a), r, _describe_meta(b)))
    return [int(d) for d in meta[:, 2]]


def _bucket(n):
    return 1 << max(n - 1, 0).bit_length()


def _allgather(tensor, name, task=None):
    """The gathered tensor: every worker's `tensor` concatenated along dim 0, in rank order
    (a sum in which each worker fills its own rows: exact for every dtype). `task`: the
    background operation running it, told once the data tensor is declared."""
    firsts = _gather_shapes(tensor, name)
    rest = tuple(tensor.shape[1:])
    row = 1
    for d in rest:
        row *= d
    total = sum(firsts)
    offset = sum(firsts[:rank()]) * row
    wide = torch.int32 if tensor.dtype in _WIDENED_FOR_BROADCAST else tensor.dtype
    elements = total * row
    # A few sizes per name only: one core tensor per power of two.
    flat = torch.zeros(_bucket(elements), dtype=wide, device=tensor.device)
    flat[offset:offset + tensor.numel()] = tensor.reshape(-1).to(wide)
    handle = _submit(flat, True, False, "allgather.%s.%d" % (name, flat.numel()), None)
    if task is not None:
        task.declared()
    flat = synchronize(handle)
    return flat[:elements].reshape((total,) + rest).to(tensor.dtype)


def allgather_async(tensor, name=None, process_set=None):
    """horovod.torch.allgather_async: a handle; synchronize() returns every worker's
    `tensor` concatenated along dim 0 in rank order (dim 0 may differ between workers; the
    other dimensions and the dtype must agree, or every worker raises FerryError at
    synchronize()). Runs in the background (the module docstring): poll() is False until
    every worker has called it."""
    _check_process_set(process_set)
    _check_tensor(tensor, "tensor '%s'" % name)
    _check_gather_input(tensor, name)
    name = _name_or_free("allgather", name, tensor)
    claim = _claim("allgather", name)
    source = tensor.detach()
    return _background(name, claim, lambda task: _allgather(source, name, task), (source,))


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
        grad = _sync_push_pull(grad_output.contiguous(), True, name, None)
        firsts = torch.zeros(size(), dtype=torch.int64)
        firsts[rank()] = ctx.first
        firsts = _sync_push_pull(firsts, False, (ctx.name or "allgather") + ".grad.firsts", None)
        offset = int(firsts[:rank()].sum())
        return grad.narrow(0, offset, ctx.first), None


def allgather(tensor, name=None, process_set=None):
    """horovod.torch.allgather: every worker's `tensor` concatenated along dim 0, in rank
    order, as a new tensor. Differentiable."""
    _check_process_set(process_set)
    _check_tensor(tensor, "tensor '%s'" % name)
    return _Allgather.apply(tensor, name)


# ----------------------------------------------------------------------------- not offered

def _not_offered(feature, hint=""):
    def refuse(*args, **kwargs):
        raise NotImplementedError("ferry.torch: %s is not supported%s" % (feature, hint))
    refuse.__name__ = feature.split("(")[0].strip()
    refuse.__doc__ = "Not supported by Ferry: raises NotImplementedError."
    return refuse


alltoall = _not_offered("alltoall")
alltoall_async = _not_offered("alltoall_async")
reducescatter = _not_offered("reducescatter")
reducescatter_async = _not_offered("reducescatter_async")
grouped_allreduce = _not_offered("grouped_allreduce", "; call allreduce on each tensor (Ferry "
                                  "fuses small tensors by itself)")
grouped_allreduce_async = _not_offered("grouped_allreduce_async", "; call allreduce_async on "
                                        "each tensor")
grouped_allreduce_ = _not_offered("grouped_allreduce_", "; call allreduce_ on each tensor")
grouped_allreduce_async_ = _not_offered("grouped_allreduce_async_", "; call allreduce_async_ on "
                                         "each tensor")
grouped_allgather = _not_offered("grouped_allgather", "; call allgather on each tensor")
grouped_allgather_async = _not_offered("grouped_allgather_async")
grouped_reducescatter = _not_offered("grouped_reducescatter")
grouped_reducescatter_async = _not_offered("grouped_reducescatter_async")
sparse_allreduce_async = _not_offered("sparse_allreduce_async", "; use push_pull_rows (sparse "
                                      "rows) or a dense allreduce")


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline: Ferry writes Chrome traces for the whole run when
    FERRY_TRACE_DIR is set; starting one at run time is not supported."""
    raise NotImplementedError("ferry.torch: start_timeline is not supported; set "
                              "FERRY_TRACE_DIR=<dir> before init() for a Chrome trace per worker")


def stop_timeline():
    raise NotImplementedError("ferry.torch: stop_timeline is not supported; see start_timeline")


# Build and runtime predicates (Horovod's): Ferry's transport is ZeroMQ (no MPI, no gloo);
# its torch data path is CPU-only.
def mpi_threads_supported():
    raise ValueError("Horovod MPI is not enabled; Ferry runs without MPI (mpi_enabled() is "
                     "False)")


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """0: ferry.torch moves CPU tensors only (Horovod returns the NCCL version code)."""
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return bool(_core.CUDA)


def rocm_built():
    return False


def _stats():
    """The core's counters for this worker (operations, partitions, bytes)."""
    return _core.stats()
