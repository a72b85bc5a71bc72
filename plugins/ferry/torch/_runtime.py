"""The bookkeeping of ferry.torch's operations: what is in flight, the background runner,
and the handles (poll, wait_any, synchronize).

Every tensor operation goes through the native worker (ferry._core, libferry's C API).
Tensors cross as raw addresses; this module keeps every tensor the core reads or writes
alive (in ``_pending``) until the operation is waited for, and after a failure for the rest
of the process, since ZeroMQ may still hold the memory.

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

The state below has this one home. It is changed in place (never rebound), so the other
modules may import its objects by name; ops.reset() and ops.shutdown() clear it.
"""

import itertools
import threading
import weakref

from ferry import _core

# What ops.py (and so ferry.torch) exports of this module: an operation added here is
# public once named here.
__all__ = [
    "poll", "wait_any", "synchronize",
]


FerryError = _core.FerryError

_lock = threading.Lock()   # guards the module state below
_pending = {}              # handle -> _Pending: tensors the core uses until wait()
_keepalive = []            # tensors of failed operations: ZeroMQ may still read them
_declared = {}             # name -> (dtype code, shape) declared to the core
_compressions = {}         # name -> the core compression set for it ("" or absent: FERRY_COMPRESSION)
_in_flight = set()         # (kind, name) of operations started and not yet synchronized
_optimizers = weakref.WeakSet()  # DistributedOptimizers: reset() forgets their failed step
_task_handles = itertools.count(-1, -1)  # handles of background operations (_Task)


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


# ----------------------------------------------------------------------------- handles

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
