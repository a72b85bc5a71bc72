"""A Ferry cluster for a process that a plain torchrun started.

torchrun gives each process RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, but starts no Ferry scheduler or server. When the `ferry` backend is created in
such a process (no DMLC_* in the environment), `start_cluster()` does what scripts/ferry-run
would have done: the process of RANK 0 starts the scheduler at MASTER_PORT + 1, each node's
LOCAL_RANK 0 starts one server (colocated), as child processes that end with this process
(the kernel signals them when it exits), and every process gets Ferry's variables
(DMLC_NUM_WORKER = WORLD_SIZE, DMLC_NUM_SERVER = the number of nodes, DMLC_WORKER_ID = RANK).

The programs come from FERRY_BIN, else beside the package: build/bin of a source tree
(build/python/ferry), or PREFIX/bin of an installed tree (PREFIX/lib/ferry/python/ferry).
"""

import ctypes
import os
import signal
import subprocess

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../ferry
_TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_children = []


def launched_by_torchrun():
    """True in a process of a plain torchrun launch: its variables set, Ferry's not."""
    env = os.environ
    return all(k in env for k in _TORCHRUN) and "DMLC_PS_ROOT_URI" not in env


def _find(program):
    here = os.path.dirname(_PACKAGE)  # build/python or PREFIX/lib/ferry/python
    for folder in (os.environ.get("FERRY_BIN"), os.path.join(here, "..", "bin"),
                   os.path.join(here, "..", "..", "..", "bin")):
        if folder and os.access(os.path.join(folder, program), os.X_OK):
            return os.path.normpath(os.path.join(folder, program))
    raise RuntimeError("ferry backend under torchrun: cannot find %s to start (set FERRY_BIN to "
                       "the folder holding ferry-scheduler and ferry-server, or launch with "
                       "scripts/ferry-run)" % program)


def _die_with_parent():
    # In the child, before exec: SIGTERM when the process that started it exits.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _start(role, program, env):
    child = subprocess.Popen([_find(program)], env=dict(env, DMLC_ROLE=role),
                             preexec_fn=_die_with_parent, stdin=subprocess.DEVNULL)
    _children.append(child)


def start_cluster():
    """Sets Ferry's variables from torchrun's and starts this process's share of the
    cluster (see the module docstring). Does nothing outside a plain torchrun launch."""
    if not launched_by_torchrun():
        return False
    env = os.environ
    try:
        rank, local_rank = int(env["RANK"]), int(env["LOCAL_RANK"])
        world = int(env["WORLD_SIZE"])
        per_node = int(env.get("LOCAL_WORLD_SIZE", world))
        port = int(env["MASTER_PORT"]) + 1
    except ValueError as e:
        raise RuntimeError("ferry backend under torchrun: a malformed torchrun variable (%s)"
                           % e) from None
    env.update({
        "DMLC_NUM_WORKER": str(world),
        "DMLC_NUM_SERVER": str(max(1, world // max(1, per_node))),
        "DMLC_PS_ROOT_URI": env["MASTER_ADDR"],
        "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_WORKER_ID": str(rank),
    })
    base = {k: v for k, v in env.items() if k not in ("DMLC_ROLE", "DMLC_WORKER_ID")}
    if rank == 0:
        _start("scheduler", "ferry-scheduler", base)
    if local_rank == 0:
        _start("server", "ferry-server", base)
    return True
