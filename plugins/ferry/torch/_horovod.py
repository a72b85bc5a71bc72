"""Horovod's names in ferry.torch: the reduction ops and how the allreduce family's
`average` / `op` arguments map to the core's, process sets, and the
horovod.torch calls Ferry does not offer or answers with a constant (timeline, MPI, gloo,
NCCL and other build predicates)."""

from ferry import _core

# What ops.py (and so ferry.torch) exports of this module: an operation added here is
# public once named here.
__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "sparse_allreduce_async",
    "start_timeline", "stop_timeline", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built",
]


# Reduction operations (Horovod's names). Average and Sum are summed by the servers, Min,
# Max and Product combined by them (allreduce family only); Adasum is refused.
Average = "average"
Sum = "sum"
Adasum = "adasum"
Min = "min"
Max = "max"
Product = "product"


class ProcessSet(object):
    """Horovod's process set: worker ranks whose collectives run among themselves (their
    tensors summed over them, averages divided by their number). Register it with
    add_process_set() on every worker, in the same order; only its members call its
    collectives."""

    def __init__(self, ranks=None):
        self.ranks = sorted(int(r) for r in ranks) if ranks is not None else None
        self.process_set_id = 0 if ranks is None else None  # set by add_process_set

    def size(self):
        return _core.size() if self.ranks is None else len(self.ranks)

    def rank(self):
        """This worker's rank within the set; -1 if not a member."""
        if self.ranks is None:
            return _core.rank()
        return self.ranks.index(_core.rank()) if self.included() else -1

    def included(self):
        return self.ranks is None or _core.rank() in self.ranks

    def __repr__(self):
        if self.ranks is None:
            return "ProcessSet(global)"
        return "ProcessSet(%s, id=%s)" % (self.ranks, self.process_set_id)


global_process_set = ProcessSet()
_process_sets = {}  # id -> registered ProcessSet


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks) and returns it. Every worker adds the same
    sets in the same order, members or not."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.ranks is None or ps.process_set_id:
        raise ValueError("ferry.torch: %r is already registered" % (ps,))
    ranks = (_core.ctypes.c_int32 * len(ps.ranks))(*ps.ranks)
    ps.process_set_id = _core.call("add_process_set", _core.ctypes.addressof(ranks), len(ps.ranks),
                                   0)
    _process_sets[ps.process_set_id] = ps
    return ps


def _add_named_process_set(ranks, set_id):
    """Registers `ranks` under `set_id` (128..255) on this member only: a torch.distributed
    group, whose id every member computes alike (distributed.py)."""
    ps = ProcessSet(ranks)
    array = (_core.ctypes.c_int32 * len(ps.ranks))(*ps.ranks)
    ps.process_set_id = _core.call("add_process_set", _core.ctypes.addressof(array),
                                   len(ps.ranks), set_id)
    _process_sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Forgets a registered set (its operations must be synchronized). True if it was."""
    if not isinstance(process_set, ProcessSet) or process_set.process_set_id not in _process_sets:
        return False
    _core.call("remove_process_set", process_set.process_set_id)
    del _process_sets[process_set.process_set_id]
    process_set.process_set_id = None
    return True


def _remove_all_process_sets():
    for ps in list(_process_sets.values()):
        remove_process_set(ps)


def _is_global(process_set):
    if process_set is not None and not isinstance(process_set, ProcessSet):
        raise TypeError("ferry.torch: process_set must be a ProcessSet, got %s"
                        % type(process_set).__name__)
    return process_set is None or process_set.ranks is None


def _check_process_set(process_set, what="this operation"):
    """Raises unless `process_set` is the global set (None included): for the operations
    that run over every worker only."""
    if not _is_global(process_set):
        raise NotImplementedError("ferry.torch: %s runs over every worker; process_set= is "
                                  "supported by allreduce, push_pull, broadcast and "
                                  "DistributedOptimizer" % what)


def _set_name(process_set, name, code, shape):
    """The core's name of tensor `name` in `process_set` (declared there, on a member), or
    `name` itself for the global set."""
    if _is_global(process_set):
        return name
    if process_set.process_set_id not in _process_sets:
        raise ValueError("ferry.torch: %r is not registered (add_process_set)" % (process_set,))
    if not process_set.included():
        raise ValueError("ferry.torch: tensor '%s': rank %d is not a member of %r; only its "
                         "members call its collectives" % (name, _core.rank(), process_set))
    from ferry.torch._runtime import _declared
    core_name = "ps%d/%s" % (process_set.process_set_id, name)
    shape = tuple(int(d) for d in shape)
    if _declared.get(core_name) != (code, shape):
        dims = (_core.ctypes.c_int64 * max(1, len(shape)))(*shape)
        _core.call("declare_tensor_in_set", process_set.process_set_id, core_name, code,
                   _core.ctypes.addressof(dims), len(shape))
        _declared[core_name] = (code, shape)
    return core_name


# ----------------------------------------------------------------------------- op arguments

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
