"""ferry._core: the native half of the ``ferry`` package (ferry.torch is the other).

libferry's C API (worker/c_api.h) through ctypes: one ``libferry.so``, found next to this
file (or at ``FERRY_LIBRARY``), serves every Python version and every torch, since
nothing here is compiled against either. Every call's signature is read from the header
(``c_api.h``, next to the library or to this file), the C API's one declaration. Tensors cross as raw addresses
(``tensor.data_ptr()``) plus a dtype code and an element count; ferry/torch/*.py keeps the
tensors alive while the core uses their memory.

Errors: a negative return of the C API becomes ``FerryError`` (a RuntimeError) carrying the
core's message and its code (``.code``, ``.code_name``); ``MembershipChangedError`` (a
FerryError) is elastic training's recoverable one. ctypes releases the GIL during every
call into the library, so a call that blocks (init, wait, broadcast, barrier, shutdown)
lets other Python threads, and the autograd engine's hooks, run.
"""

import ctypes
import os
import re

# Dtype codes (worker/c_api.h): ferry.torch maps torch dtypes to these.
FLOAT32, FLOAT16, BFLOAT16, FLOAT64, INT32, INT64 = range(6)
# Reduce ops (common/reduce/reduce.h): 0 is the sum.
REDUCE_SUM, REDUCE_MIN, REDUCE_MAX, REDUCE_PRODUCT = range(4)
# Error codes (common/util/error.h) the Python side uses itself.
MISMATCH = 4
MEMBERSHIP_CHANGED = 9
# The C API's "no priority given" (the default: -(declaration index)).
_NO_PRIORITY = -(2 ** 31)


class FerryError(RuntimeError):
    """An error of the Ferry core: ``code`` (common/util/error.h) and ``code_name``."""

    code = 0
    code_name = ""


class MembershipChangedError(FerryError):
    """Elastic training: the job's membership changed; reset() and go on."""


def _library_path():
    path = os.environ.get("FERRY_LIBRARY")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libferry.so")


# The C types of worker/c_api.h's declarations (without const), as ctypes types.
_C_TYPES = {
    "void": None, "int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "uintptr_t": ctypes.c_size_t,
    "double": ctypes.c_double, "char*": ctypes.c_char_p, "void*": ctypes.c_void_p,
    "int64_t*": ctypes.POINTER(ctypes.c_int64), "int32_t*": ctypes.POINTER(ctypes.c_int32),
    "double*": ctypes.POINTER(ctypes.c_double),
}


def _c_type(declaration, header):
    """The ctypes type of a C type such as "const int64_t*" (a parameter's name removed)."""
    words = declaration.replace("const", " ").replace("*", " * ").split()
    name = "".join(words)
    if name not in _C_TYPES:
        raise ImportError("ferry._core: %s declares a type ctypes is not told about here: %r"
                          % (header, declaration.strip()))
    return _C_TYPES[name]


def signatures(header):
    """{function: (restype, argtypes)} of every ferry_* function declared in the C API
    header `header` (worker/c_api.h, copied next to libferry.so): the header is the one
    declaration of the C API, so a call's signature here cannot drift from it."""
    with open(header) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*|^\s*#[^\n]*", " ", text, flags=re.M)
    found = {}
    for m in re.finditer(r"([A-Za-z_][\w\s\*]*?)\s*\b(ferry_\w+)\s*\(([^)]*)\)\s*;", text):
        restype, name, params = m.group(1), m.group(2), m.group(3).strip()
        argtypes = []
        for param in ([] if params in ("", "void") else params.split(",")):
            words = param.replace("*", " * ").split()
            argtypes.append(_c_type(" ".join(words[:-1]), header))  # the last word: its name
        found[name] = (_c_type(restype, header), argtypes)
    if not found:
        raise ImportError("ferry._core: no ferry_* function declared in %s" % header)
    return found


def _header_path(library):
    for folder in (os.path.dirname(os.path.abspath(library)),
                   os.path.dirname(os.path.abspath(__file__))):
        path = os.path.join(folder, "c_api.h")
        if os.path.exists(path):
            return path
    raise ImportError("ferry._core: the C API's header c_api.h is neither next to %s nor "
                      "next to %s (the build copies worker/c_api.h there)" % (library, __file__))


def _load():
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            "ferry._core: cannot load libferry (%s): %s. It is built by CMake into "
            "build/python/ferry/ (scripts/build); FERRY_LIBRARY may name it elsewhere"
            % (path, e)) from None
    header = _header_path(path)
    for name, (restype, argtypes) in signatures(header).items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError("ferry._core: %s declares %s, which %s does not have (a header "
                              "and a library of different builds?)" % (header, name, path)) from None
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lib = _load()

# The ferry.torch tensor that carries each worker's host id (a reserved name).
HOST_IDS_TENSOR = _lib.ferry_host_ids_tensor_name().decode()
# Whether this libferry has the CUDA data path (built where nvcc was found), GPU or not.
CUDA = bool(_lib.ferry_cuda_built())


def _error(code, message):
    cls = MembershipChangedError if code == MEMBERSHIP_CHANGED else FerryError
    error = cls(message)
    error.code = code
    error.code_name = _lib.ferry_error_code_name(code).decode()
    return error


def _check(result):
    """`result` of a C API call, or its FerryError (the thread's last error)."""
    if result < 0:
        raise _error(-result, _lib.ferry_last_error().decode(errors="replace"))
    return result


def _name(name):
    return name.encode()


def fail(code, message):
    """Raises FerryError(message) with `code`: errors the Python side finds itself."""
    raise _error(int(code), message)


def init():
    """Reads the environment (DMLC_*, FERRY_*) and joins the cluster as a worker; after
    shutdown(final=False) joins it again under the same rank. Idempotent; raises
    FerryError (code kShutdown) after a final shutdown."""
    _check(_lib.ferry_init())


def is_initialized():
    return bool(_lib.ferry_is_initialized())


def shutdown(final=True):
    """Waits for this worker's operations and leaves the job (final: for good; the job ends
    once every worker has). Not final: init() may join again (worker/binding_core.h).
    Idempotent; raises FerryError if the job failed."""
    _check(_lib.ferry_shutdown() if final else _lib.ferry_suspend())


def require_initialized():
    """Raises FerryError unless initialised (before init(): not initialised; after
    shutdown(): shut down)."""
    _check(_lib.ferry_rank())


def rank():
    return _check(_lib.ferry_rank())


def size():
    return _check(_lib.ferry_size())


def num_servers():
    return _check(_lib.ferry_num_servers())


def local_rank():
    return _check(_lib.ferry_local_rank())


def local_size():
    return _check(_lib.ferry_local_size())


def local_size_from_environment():
    """True if the launcher set FERRY_LOCAL_SIZE / BYTEPS_LOCAL_SIZE: then local_rank()
    and local_size() are its word (checked by the core's configuration)."""
    return bool(_check(_lib.ferry_local_size_from_environment()))


def declare(name, dtype, shape):
    """Declares a tensor (forward order, identically on every worker); returns its id."""
    dims = (ctypes.c_int64 * max(1, len(shape)))(*[int(d) for d in shape])
    return _check(_lib.ferry_declare_tensor(_name(name), int(dtype), dims, len(shape)))


def call(function, *args):
    """Calls the C API's ``ferry_<function>`` (an operation: push_pull_async, reduce_async,
    push_pull_rows_async, push_pull_device_async, broadcast...) with `args` in the header's
    order, and returns its result, or raises its FerryError. The arguments convert by the
    header's types: a str for a ``const char*`` (a tensor's name) is encoded, None for an
    ``int32_t`` is the C API's "not given" (INT32_MIN: a priority left to the core), an
    int for a pointer is an address (``tensor.data_ptr()``). An operation added to the C
    API is reachable from here with no code of its own (docs/architecture.md, "Adding an
    operation")."""
    fn = getattr(_lib, "ferry_" + function)
    converted = []
    for arg, argtype in zip(args, fn.argtypes):
        if isinstance(arg, str) and argtype is ctypes.c_char_p:
            arg = arg.encode()
        elif arg is None and argtype is ctypes.c_int32:
            arg = _NO_PRIORITY
        elif isinstance(arg, int) and hasattr(argtype, "contents"):
            arg = ctypes.cast(arg, argtype)
        converted.append(arg)
    return _check(fn(*converted))


def poll(handle):
    return bool(_check(_lib.ferry_poll(handle)))


def wait(handle):
    """Blocks until the operation finished; raises FerryError if it failed."""
    _check(_lib.ferry_wait(handle))


def wait_for(handle, timeout_ms):
    """Waits at most timeout_ms: True once finished (raises FerryError if it failed), False
    if still running."""
    return bool(_check(_lib.ferry_wait_for(handle, int(timeout_ms))))


def wait_any(handles, timeout_ms):
    """Waits at most timeout_ms for any of the handles: the first finished one in the list
    (wait on it next: it raises its error), or 0 if none finished in time."""
    array = (ctypes.c_int64 * max(1, len(handles)))(*handles)
    return _check(_lib.ferry_wait_any(array, len(handles), int(timeout_ms)))


def barrier():
    _check(_lib.ferry_barrier())


def reset():
    """Elastic training: takes the job's new membership after MembershipChangedError
    (Worker::Reset); rank() and size() may change. ferry.torch.elastic.run calls it."""
    _check(_lib.ferry_reset())


def epoch():
    """The membership epoch of this worker's operations (elastic training; 0 otherwise)."""
    return _check(_lib.ferry_epoch())


def hosts_updated():
    """Elastic training, at a commit on every worker: whether workers wait to join (then
    raise HostsUpdatedInterrupt and reset(); Worker::HostsUpdated)."""
    return bool(_check(_lib.ferry_hosts_updated()))


def join():
    """Uneven data: this worker has no more batches; returns once every worker joined, with
    the rank that joined last."""
    return _check(_lib.ferry_join())


def step_boundary():
    """The end of a training iteration (Worker::StepBoundary): times it, drives
    FERRY_AUTOTUNE and marks FERRY_TRACE_DIR's timeline."""
    _check(_lib.ferry_step_boundary())


def contributors(name=None):
    """Backup workers (FERRY_BACKUP_WORKERS): the ranks whose pushes are in the last
    completed push_pull of `name`, or, with no name, in every sum of the last step (between
    the last two step boundaries); every rank where no round closed without one."""
    n = size()
    ranks = (ctypes.c_int32 * max(n, 1))()
    count = _check(_lib.ferry_contributors(_name(name or ""), ranks, n))
    return [int(ranks[i]) for i in range(count)]


def trace_compute(tensor, backward, begin_us, end_us):
    """A span of compute for FERRY_TRACE_DIR's timeline (Worker::TraceCompute): [begin_us,
    end_us] of now_us(), the forward or backward compute of `tensor`. A no-op without
    FERRY_TRACE_DIR."""
    _check(_lib.ferry_trace_compute(_name(tensor), int(bool(backward)), int(begin_us),
                                    int(end_us)))


def now_us():
    """Microseconds on the core's clock (the steady clock): the times of trace_compute."""
    return _lib.ferry_now_us()


def set_scheduling(partition_bytes, credit_bytes):
    """Partition size and credit (bytes) from the next push_pull on; waits for this
    worker's operations. Call on every worker at the same point, between iterations."""
    _check(_lib.ferry_set_scheduling(int(partition_bytes), int(credit_bytes)))


def scheduling():
    partition, credit, frame = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    gain = ctypes.c_double()
    policy = ctypes.create_string_buffer(64)
    _check(_lib.ferry_scheduling(ctypes.byref(partition), ctypes.byref(credit),
                                 ctypes.byref(gain), ctypes.byref(frame), policy,
                                 len(policy)))
    return {"policy": policy.value.decode(), "partition_bytes": partition.value,
            "credit_bytes": credit.value,
            "window_gain": gain.value,  # 0: the credit is fixed (FERRY_WINDOW)
            "frame_bytes": frame.value}  # 0: whole partitions


def stats():
    """Every counter of the worker's registry (Worker::Counters), "van.x" as "van_x"."""
    size = 1 << 16
    while True:
        text = ctypes.create_string_buffer(size)
        needed = _check(_lib.ferry_counters(text, size))
        if needed < size:
            break
        size = needed + 1
    out = {}
    for line in text.value.decode().splitlines():
        name, value = line.rsplit(" ", 1)
        out[name.replace(".", "_")] = int(value)
    return out
