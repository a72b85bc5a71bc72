"""The operations of ferry.torch. This module holds the cluster calls (init, shutdown,
reset, rank, size, local and cross ranks, barrier, join, scheduling) and exports every
public operation of the package's other modules (each module's ``__all__``), so that
``ferry.torch.ops.<name>`` is each public one:

  _runtime.py              what is in flight, the background runner (allgather, broadcast),
                           the handles: poll, wait_any, synchronize
  _checks.py               tensor checks, the device path, declare
  _push_pull.py            push_pull, push_pull_rows, allreduce
  _broadcast_allgather.py  broadcast, allgather
  _horovod.py              Horovod's op names, process sets, the calls Ferry does not offer
"""

import atexit
import hashlib
import socket
import sys

import torch

try:
    from ferry import _core
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "ferry.torch needs ferry._core and libferry.so, which CMake builds into "
        "<build>/python/ferry (scripts/build); put <build>/python on PYTHONPATH. "
        "Import error: %s" % e) from e

from ferry.torch import (_broadcast_allgather, _checks, _horovod, _point_to_point, _push_pull,
                         _runtime)
from ferry.torch._broadcast_allgather import *  # noqa: F401,F403 - their __all__
from ferry.torch._checks import *  # noqa: F401,F403
from ferry.torch._horovod import *  # noqa: F401,F403
from ferry.torch._point_to_point import *  # noqa: F401,F403
from ferry.torch._push_pull import *  # noqa: F401,F403
from ferry.torch._runtime import *  # noqa: F401,F403
from ferry.torch._runtime import (_declared, _in_flight, _keepalive, _lock, _optimizers,
                                  _pending, _runner)

# This module's own calls, then every public name of the modules above (each module's
# __all__: an operation is added in one module, and named there).
__all__ = [
    "FerryError", "MembershipChangedError", "reset",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous",
    "num_servers", "barrier", "join", "step_boundary", "contributors", "set_scheduling",
    "scheduling",
] + (_runtime.__all__ + _checks.__all__ + _push_pull.__all__ + _broadcast_allgather.__all__ +
     _horovod.__all__ + _point_to_point.__all__)

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


# (local rank, local size, cross rank, cross size, homogeneous), found at init().
_local = None
_atexit_registered = False


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
        if _core.is_initialized():
            _horovod._remove_all_process_sets()  # a re-initialised job adds them again
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
    """Blocks until every worker (with a process_set: every member) called barrier()."""
    if _horovod._is_global(process_set):
        _core.barrier()
        return
    token = torch.ones(1, dtype=torch.int32)
    _push_pull._sync_push_pull(token, False, "barrier", None, compression="none",
                               process_set=process_set)


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


def contributors(name=None):
    """Backup workers (FERRY_BACKUP_WORKERS=b): the ranks whose gradients are in the last
    completed sum of tensor `name` (a name given to push_pull / allreduce), or, with no
    name, in every sum of the last optimizer step. A round of averaged float push_pulls
    closes once all but b workers pushed; the sum is averaged over its contributors. Every
    rank without backup workers."""
    return _core.contributors(name)


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


def _stats():
    """The core's counters for this worker (operations, partitions, bytes)."""
    return _core.stats()
