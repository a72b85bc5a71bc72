"""Horovod's names in ferry.torch: the reduction ops and how the allreduce family's
`average` / `op` arguments map to the core's, process sets (only the global one), and the
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


class _ProcessSet(object):
    """Horovod's process sets: Ferry has only the global one (every worker)."""

    def __init__(self, ranks=None):
        self.ranks = ranks
        self.process_set_id = 0

    def size(self):
        return _core.size()

    def rank(self):
        return _core.rank()

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
