"""The ``ferry`` backend of torch.distributed: ``dist.init_process_group("ferry")``.

Importing ``ferry.torch`` registers it. Every collective of the process group becomes
ferry.torch operations, so a plain ``DistributedDataParallel`` program trains over Ferry's
servers with priority scheduling and nothing else changed:

    import ferry.torch                       # registers the backend
    dist.init_process_group("ferry")         # in a Ferry cluster (ferry-launch, local-cluster)
    model = DistributedDataParallel(model)   # unchanged

The process group joins the Ferry cluster (``ferry.torch.init()``) if the program has not,
and checks that torch.distributed's rank and world size are Ferry's. Under a plain torchrun
launch (torchrun's variables, no DMLC_*), it first starts what scripts/ferry-run would
(torchrun.py: the scheduler beside RANK 0, a server beside each node's LOCAL_RANK 0).

Gradient compression: ``compression_hook(ferry.torch.Compression.topk(0.01))`` is a DDP
communication hook; the backend's allreduces follow FERRY_COMPRESSION otherwise.

Operations (each returns at once; ``Work.wait()`` or its future waits):
  allreduce (SUM, AVG, MIN, MAX, PRODUCT), allreduce_coalesced, broadcast, allgather,
  _allgather_base, reduce_scatter, _reduce_scatter_base, reduce, gather, scatter, barrier,
  send, recv (ferry.torch's point-to-point: in order per source, destination and tag).
Groups over a subset of the ranks (``dist.new_group(ranks)``) are Ferry process sets: their
allreduce, broadcast, barrier, send and recv run among their members. Refused with an error
naming the call: alltoall, recv from any source, bitwise reductions, and a subgroup's
gathers and scatters.

Names: Ferry needs every worker to name an operation alike. The n-th call of a kind, dtype
and shape in a process group is named ``dist.<group>.<kind>.<dtype>.<shape>``: one name per
kind, dtype and shape, so a training loop declares each of its tensors (DDP's buckets) once.
A call whose name is still in flight (an earlier call of the same kind, dtype and shape not
yet complete) waits for it first. Priorities follow first use: a name used later is more
urgent, so DDP's buckets nearest the input (allreduced last in backward, needed first by the
next forward) go first.

Completion: one thread per process ("ferry-dist") waits for the operations in call order
(ferry.torch's synchronize: the results in place, the name free again), then hands each
future to a notifier thread that completes it: a future's callbacks may start and wait for
further collectives (DDP's PowerSGD hook does), which the "ferry-dist" thread must stay free
to complete. A failed operation fails its work's future (DDP and `work.get_future()` raise
its error), and a call made with async_op=False (dist.all_reduce(t)) waits and raises it.
"""

import collections
import os
import sys
import threading

import torch
import torch.distributed as dist

from . import _checks, _push_pull, _runtime, ops, torchrun

try:  # torch 1.13 and 2.x
    from torch._C._distributed_c10d import _create_work_from_future
except ImportError:  # pragma: no cover - depends on torch
    _create_work_from_future = None

BACKEND = "ferry"
_C10D_FILE = os.path.join("torch", "distributed", "distributed_c10d.py")

_REDUCE = {
    dist.ReduceOp.SUM: None,
    dist.ReduceOp.MIN: ops._core.REDUCE_MIN,
    dist.ReduceOp.MAX: ops._core.REDUCE_MAX,
    dist.ReduceOp.PRODUCT: ops._core.REDUCE_PRODUCT,
}


def _distinct(names):
    """The names of one call's tensors, a repeated one suffixed with its occurrence (two
    tensors of one shape in one coalesced call are two Ferry tensors)."""
    seen = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else "%s#%d" % (n, k))
    return out


def _unwrap(outcome):
    value, error = outcome.value()
    if error is not None:
        raise error
    return value


def _caller_waits():
    """True when torch.distributed's function that called the group was told to wait
    (async_op=False). Then the group waits itself and raises the operation's error: torch
    1.13's Work made from a future returns from wait() even when the future failed."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_C10D_FILE):
            return frame.f_locals.get("async_op") is False
        frame = frame.f_back
    return False


def _op_name(op):
    for name in ("SUM", "AVG", "MIN", "MAX", "PRODUCT", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if hasattr(dist.ReduceOp, name) and op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


class _Notifier(object):
    """Completes futures on daemon threads of its own, never on the completer's: a future's
    callbacks run inside set_result, and one may start another collective and wait for it
    (PowerSGD's hook does), which needs the completer free. A thread is added whenever
    every thread is busy (such a callback blocks one), so nesting cannot deadlock."""

    def __init__(self):
        self._queue = collections.deque()
        self._cv = threading.Condition()
        self._idle = 0

    def complete(self, future, value, error):
        """Sets `future`'s result to (value, error) on a thread of the notifier."""
        with self._cv:
            self._queue.append((future, value, error))
            if self._idle == 0:
                threading.Thread(target=self._run, name="ferry-dist-notify", daemon=True).start()
            else:
                self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                self._idle += 1
                while not self._queue:
                    self._cv.wait()
                self._idle -= 1
                future, value, error = self._queue.popleft()
            future.set_result((value, error))


_notifier = _Notifier()


class _Completion(object):
    """One operation for the completer (a _runtime._Runner): `wait()` returns its value or
    raises; the notifier then completes `future` with (value, error)."""

    def __init__(self, wait, future):
        self.wait, self.future = wait, future

    def execute(self):
        try:
            value = self.wait()
        except BaseException as e:  # noqa: BLE001 - handed to the waiter
            _notifier.complete(self.future, None, e)
        else:
            _notifier.complete(self.future, value, None)


_completer = _runtime._Runner("ferry-dist")  # waits for the operations in call order


class ProcessGroupFerry(dist.ProcessGroup):
    """torch.distributed's process group over Ferry (see the module docstring)."""

    _created = 0

    def __init__(self, rank, size, group_id, ranks=None, process_set=None):
        super().__init__(rank, size)
        self._id = group_id
        self._ranks = ranks or list(range(size))  # global worker rank of each group rank
        self._set = process_set  # a subgroup's ferry.torch ProcessSet; None: every worker
        self._busy = {}        # name -> Event set once its operation completed
        self._first_use = {}   # name -> order of first use (its priority)
        self._lock = threading.Lock()

    def getBackendName(self):  # noqa: N802 - torch's name
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def __repr__(self):
        return "ProcessGroupFerry(group %d, rank %d of %d)" % (self._id, self.rank(), self.size())

    # ----------------------------------------------------------------- plumbing

    def _name(self, kind, tensor):
        shape = "x".join(str(d) for d in tensor.shape) or "scalar"
        return "dist.%d.%s.%s.%s" % (self._id, kind, str(tensor.dtype).replace("torch.", ""),
                                     shape)

    def _take(self, name):
        """Waits until `name` is free, takes it; returns (done event, priority)."""
        while True:
            with self._lock:
                busy = self._busy.get(name)
                if busy is None or busy.is_set():
                    done = threading.Event()
                    self._busy[name] = done
                    priority = self._first_use.setdefault(name, len(self._first_use))
                    return done, priority
            busy.wait()

    def _start(self, start, finish, names):
        """Takes every name of `names`, runs `start(priorities)` (returns ferry.torch
        handles), and has the completer synchronize them and call `finish(results)`."""
        # Taken in one global order (no two calls on two threads can wait for each other).
        taken = {n: self._take(n) for n in sorted(set(names))}
        taken = [taken[n] for n in names]
        try:
            handles = start([p for _, p in taken])
        except BaseException:
            for done, _ in taken:
                done.set()
            raise
        outcome = torch.futures.Future()  # (value, error), set by the notifier

        def wait():
            try:
                results = []
                error = None
                for h in handles:  # every handle, even after a failure: names stay usable
                    try:
                        results.append(ops.synchronize(h))
                    except BaseException as e:  # noqa: BLE001 - re-raised below
                        error = error or e
                if error is not None:
                    raise error
                return finish(results)
            finally:
                for done, _ in taken:
                    done.set()
        _completer.submit(_Completion(wait, outcome))
        if _caller_waits():
            value, error = outcome.wait()
            if error is not None:
                raise error
        # The work's future fails with the operation's error (a then-callback that raises
        # marks it failed in C++ too, where DDP reads it).
        return _create_work_from_future(outcome.then(_unwrap))

    @staticmethod
    def _refuse(call, why):
        raise RuntimeError("ferry backend of torch.distributed: %s is not supported: %s"
                           % (call, why))

    def _reduce_op(self, call, op):
        if op == dist.ReduceOp.AVG:
            return True, None
        if op in _REDUCE:
            return False, _REDUCE[op]
        self._refuse("%s with ReduceOp.%s" % (call, _op_name(op)),
                     "Ferry reduces by SUM, AVG, MIN, MAX and PRODUCT")

    def _allreduce_start(self, tensors, average, reduce, kind="allreduce", compression=""):
        for t in tensors:
            _checks._check_tensor(t, "tensor of %s" % kind)
        names = _distinct([self._name(kind, t) for t in tensors])

        def start(priorities):
            return [_push_pull._push_pull_async(t, t, average, n, p, reduce=reduce,
                                                compression=compression, process_set=self._set)
                    for t, n, p in zip(tensors, names, priorities)]
        return start, names

    def _subgroup_refuses(self, call):
        if self._set is not None:
            self._refuse("%s in a group over a subset of the ranks" % call,
                         "a subgroup runs allreduce, broadcast, barrier, send and recv")

    def compressed_allreduce(self, tensor, compression):
        """The average of `tensor` over the group, compressed by the core with
        `compression` (its text): compression_hook's work."""
        start, names = self._allreduce_start([tensor], True, None, "compressed", compression)
        return self._start(start, lambda results: [tensor], names)

    # ----------------------------------------------------------------- collectives

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        average, reduce = self._reduce_op("allreduce", op)
        start, names = self._allreduce_start(list(tensors), average, reduce)
        return self._start(start, lambda results: list(tensors), names)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        names = _distinct([self._name("broadcast", t) for t in tensors])

        def start(priorities):
            return [ops.broadcast_async_(t, self._ranks[root], n, self._set)
                    for t, n in zip(tensors, names)]
        return self._start(start, lambda results: list(tensors), names)

    def _gathered(self, tensor, kind):
        """Starts an allgather of `tensor` (every rank's, stacked on a new dim 0)."""
        self._subgroup_refuses(kind)
        row = tensor.reshape((1,) + tuple(tensor.shape))
        name = self._name(kind, tensor)
        return (lambda priorities: [ops.allgather_async(row, name)]), [name]

    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1:
            self._refuse("allgather of %d tensors per rank" % len(input_tensors), "one per rank")
        start, names = self._gathered(input_tensors[0], "allgather")

        def finish(results):
            for out, row in zip(output_tensors[0], results[0]):
                out.copy_(row)
            return output_tensors
        return self._start(start, finish, names)

    def _allgather_base(self, output, input, opts=None):
        start, names = self._gathered(input, "allgather_base")

        def finish(results):
            output.copy_(results[0].reshape(output.shape))
            return [output]
        return self._start(start, finish, names)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        self._refuse("allgather_coalesced", "call allgather per tensor")

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        start, names = self._gathered(input_tensors[0], "gather")

        def finish(results):
            if self.rank() == root:
                for out, row in zip(output_tensors[0], results[0]):
                    out.copy_(row)
            return output_tensors
        return self._start(start, finish, names)

    def scatter(self, output_tensors, input_tensors, opts=None):
        self._subgroup_refuses("scatter")
        root = opts.rootRank if opts is not None else 0
        out = output_tensors[0]
        if self.rank() == root:
            stacked = torch.stack([t.to(out.device) for t in input_tensors[0]])
        else:
            stacked = torch.zeros((self.size(),) + tuple(out.shape), dtype=out.dtype,
                                  device=out.device)
        name = self._name("scatter", stacked)

        def start(priorities):
            return [ops.broadcast_async_(stacked, root, name)]

        def finish(results):
            out.copy_(stacked[self.rank()])
            return output_tensors
        return self._start(start, finish, [name])

    def reduce(self, tensors, opts=None):
        self._subgroup_refuses("reduce")
        root = opts.rootRank if opts is not None else 0
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        average, reduce = self._reduce_op("reduce", op)
        copies = [t.clone() for t in tensors]
        start, names = self._allreduce_start(copies, average, reduce, kind="reduce")

        def finish(results):
            if self.rank() == root:
                for t, c in zip(tensors, copies):
                    t.copy_(c)
            return list(tensors)
        return self._start(start, finish, names)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        self._subgroup_refuses("reduce_scatter")
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        average, reduce = self._reduce_op("reduce_scatter", op)
        out = output_tensors[0]
        stacked = torch.stack([t.to(out.device) for t in input_tensors[0]])
        start, names = self._allreduce_start([stacked], average, reduce, kind="reduce_scatter")

        def finish(results):
            out.copy_(stacked[self.rank()])
            return output_tensors
        return self._start(start, finish, names)

    def _reduce_scatter_base(self, output, input, opts=None):
        self._subgroup_refuses("_reduce_scatter_base")
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        average, reduce = self._reduce_op("_reduce_scatter_base", op)
        flat = input.clone()
        start, names = self._allreduce_start([flat], average, reduce, kind="reduce_scatter_base")

        def finish(results):
            n = output.numel()
            output.copy_(flat.reshape(-1)[self.rank() * n:(self.rank() + 1) * n]
                         .reshape(output.shape))
            return [output]
        return self._start(start, finish, names)

    def barrier(self, opts=None):
        # A sum of one element over every rank: done when every rank has called it.
        token = torch.ones(1, dtype=torch.int32)
        start, names = self._allreduce_start([token], False, None, kind="barrier")
        return self._start(start, lambda results: [], names)

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)

    def alltoall(self, *args, **kwargs):
        self._refuse("alltoall", "every collective of Ferry goes through its servers")

    def alltoall_base(self, *args, **kwargs):
        self._refuse("alltoall_base", "every collective of Ferry goes through its servers")

    def send(self, tensors, dst, tag=0):
        peer = self._ranks[dst]
        return self._start(lambda priorities: [ops.isend(t, peer, tag) for t in tensors],
                           lambda results: list(tensors), [])

    def recv(self, tensors, src, tag=0):
        peer = self._ranks[src]
        return self._start(lambda priorities: [ops.irecv(t, peer, tag) for t in tensors],
                           lambda results: list(tensors), [])

    def recv_anysource(self, *args, **kwargs):
        self._refuse("recv_anysource", "a receive names its source rank")


def _create(store, rank, world_size, timeout):
    """torch.distributed's constructor of the backend (init_process_group, new_group)."""
    if not ops.is_initialized():
        torchrun.start_cluster()  # a plain torchrun launch: start what ferry-run would
    ops.init()
    group_id = ProcessGroupFerry._created
    ProcessGroupFerry._created += 1
    if world_size < ops.size() and _c10d_group_count() > 1:  # dist.new_group(ranks)
        return _subgroup(store, rank, world_size, group_id)
    if world_size != ops.size():
        raise RuntimeError(
            "ferry backend of torch.distributed: a group of %d ranks, but the Ferry job has %d "
            "workers: init_process_group's world_size must be the number of Ferry workers"
            % (world_size, ops.size()))
    if rank != ops.rank():
        raise RuntimeError(
            "ferry backend of torch.distributed: this process is rank %d to torch.distributed "
            "but worker %d to Ferry: launch with ferry-launch or scripts/local-cluster, or pass "
            "rank=ferry.torch.rank() to init_process_group" % (rank, ops.rank()))
    return ProcessGroupFerry(rank, world_size, group_id)


def _c10d_group_count():
    """torch.distributed's count of groups made so far (every rank counts every new_group
    call, members or not)."""
    c10d = dist.distributed_c10d
    world = getattr(c10d, "_world", None)
    return getattr(world, "group_count", None) if world is not None else c10d._group_count


def _subgroup(store, rank, size, group_id):
    """A group over a subset of the ranks: a Ferry process set under a named id that every
    member computes alike (torch's group count), its global ranks learned through the
    group's store."""
    store.set("ferry.rank.%d" % rank, str(ops.rank()))
    ranks = [int(store.get("ferry.rank.%d" % r)) for r in range(size)]
    set_id = 127 + _c10d_group_count()
    if set_id > 255:
        raise RuntimeError("ferry backend of torch.distributed: at most 128 groups over a subset "
                           "of the ranks per job")
    from ferry.torch import _horovod
    return ProcessGroupFerry(rank, size, group_id, ranks,
                             _horovod._add_named_process_set(ranks, set_id))


def compression_hook(compression):
    """A DDP communication hook that averages each gradient bucket over the ``ferry``
    backend with the core's gradient compression (docs/compression.md):

        ddp.register_comm_hook(None, ferry.torch.distributed.compression_hook(
            ferry.torch.Compression.topk(0.01)))

    `compression`: a ferry.torch Compression (fp16, bf16, onebit, topk(r), randomk(r),
    dither(s), custom(text)) or its text. Error feedback's residual is kept per bucket by
    the core. DDP's process group must be the ``ferry`` backend's."""
    text = compression if isinstance(compression, str) else getattr(compression, "core", None)
    if not text:
        raise ValueError("ferry compression_hook: %r is not a compressor the core runs; use "
                         "ferry.torch.Compression.onebit, topk(r), randomk(r), dither(s), fp16, "
                         "bf16 or custom(text)" % (compression,))

    def hook(state, bucket):
        group = state if isinstance(state, ProcessGroupFerry) else None
        if group is None:
            from torch.distributed.distributed_c10d import _get_default_group
            group = _get_default_group()
        if not isinstance(group, ProcessGroupFerry):
            raise RuntimeError("ferry compression_hook: DDP's process group is %r, not the "
                               "ferry backend's" % (group,))
        tensor = bucket.buffer()
        return group.compressed_allreduce(tensor, text).get_future().then(
            lambda fut: fut.value()[0])
    return hook


def register():
    """Registers the ``ferry`` backend with torch.distributed (idempotent)."""
    if not dist.is_available() or _create_work_from_future is None:
        return False
    if not hasattr(dist.Backend, BACKEND.upper()):
        dist.Backend.register_backend(BACKEND, _create)
    return True
