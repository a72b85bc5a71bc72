"""Fixtures for the ferry.torch tests: real scheduler, server and worker processes.

Where things are (environment variables, with defaults for a `scripts/build` tree):
  FERRY_BIN         ferry-scheduler and ferry-server          (default: build/bin)
  FERRY_PYTHONPATH  the built package: ferry/libferry.so       (default: build/python)
  FERRY_PYTHON      the interpreter with torch for workers    (default: /usr/bin/python3)

Every cluster runs on loopback with a free port, FERRY_LOG_LEVEL=WARNING, and is killed
in the fixture's teardown whatever happened; every wait has a deadline.
"""

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FERRY_BIN = Path(os.environ.get("FERRY_BIN", REPO / "build" / "bin")).resolve()
FERRY_PYTHONPATH = Path(os.environ.get("FERRY_PYTHONPATH", REPO / "build" / "python")).resolve()
PYTHON = os.environ.get("FERRY_PYTHON") or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                                             else sys.executable)
EXAMPLES = REPO / "examples"
WORKER = Path(__file__).resolve().parent / "ferry_worker.py"

# In-process tests import ferry.torch and the example's model from here.
sys.path.insert(0, str(FERRY_PYTHONPATH))
sys.path.insert(0, str(EXAMPLES))


def free_port():
    """A free port below the kernel's ephemeral range, so that no process binding port 0
    (servers and workers do) can take it between this check and the scheduler's bind."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        high = 0
    rng = random.Random()
    for _ in range(200 if high - 10000 >= 1000 else 0):
        port = rng.randint(10000, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "FERRY_", "BYTEPS_"))}
    env.update({
        "FERRY_LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join([str(FERRY_PYTHONPATH), str(EXAMPLES)]),
        "FERRY_EXAMPLES": str(EXAMPLES),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


class Cluster(object):
    """1 scheduler, `servers` servers and `workers` workers, each worker running
    `python ferry_worker.py MODE OUT ARGS...`. Output goes to files in `tmp`."""

    def __init__(self, tmp, workers=2, servers=2, env=None):
        for b in ("ferry-scheduler", "ferry-server"):
            if not (FERRY_BIN / b).is_file():
                pytest.fail("%s not found in FERRY_BIN=%s: build first (scripts/build)" % (b, FERRY_BIN))
        if not (FERRY_PYTHONPATH / "ferry" / "libferry.so").is_file():
            pytest.fail("ferry/libferry.so not found in FERRY_PYTHONPATH=%s: build first "
                        "(FERRY_BUILD_PLUGINS=OFF?)" % FERRY_PYTHONPATH)
        self.tmp = Path(tmp)
        self.workers, self.servers = workers, servers
        self.env = base_env(env)
        self.env.update({
            "DMLC_NUM_WORKER": str(workers), "DMLC_NUM_SERVER": str(servers),
            "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NODE_HOST": "127.0.0.1",
        })
        self.procs = {}   # name -> Popen
        self._files = []

    def _spawn(self, name, argv, role, extra=None):
        env = dict(self.env, DMLC_ROLE=role, **(extra or {}))
        log = open(self.tmp / ("%s.log" % name.replace(" ", "_")), "wb")
        self._files.append(log)
        self.procs[name] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def start(self, mode, *args):
        self._spawn("scheduler", [str(FERRY_BIN / "ferry-scheduler")], "scheduler")
        for i in range(self.servers):
            self._spawn("server %d" % i, [str(FERRY_BIN / "ferry-server")], "server")
        self.outs = []
        for i in range(self.workers):
            out = self.tmp / ("worker%d.pt" % i)
            self.outs.append(out)
            self._spawn("worker %d" % i, [PYTHON, str(WORKER), mode, str(out)] + [str(a) for a in args],
                        "worker", {"DMLC_WORKER_ID": str(i)})
        return self

    def log(self, name):
        path = self.tmp / ("%s.log" % name.replace(" ", "_"))
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self):
        return "\n".join("---- %s ----\n%s" % (n, self.log(n)[-4000:]) for n in self.procs)

    def wait_workers(self, timeout):
        """Waits for every worker; returns their results (the dicts they saved)."""
        import torch
        deadline = time.time() + timeout
        for i in range(self.workers):
            p = self.procs["worker %d" % i]
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pytest.fail("worker %d still running after %.0f s\n%s" % (i, timeout, self.logs()))
        codes = [self.procs["worker %d" % i].returncode for i in range(self.workers)]
        if any(codes):
            pytest.fail("worker exit codes %s\n%s" % (codes, self.logs()))
        return [torch.load(out) for out in self.outs]

    def kill(self, name, sig=signal.SIGKILL):
        self.procs[name].send_signal(sig)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for f in self._files:
            f.close()


@pytest.fixture
def cluster(tmp_path):
    """cluster(workers=2, servers=2, env={...}) -> a Cluster to .start(); killed at teardown."""
    made = []

    def make(workers=2, servers=2, env=None, tmp=None):
        c = Cluster(tmp or tmp_path, workers, servers, env)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory):
    """As `cluster`, for module-scoped runs whose results several tests check."""
    made = []

    def make(workers=2, servers=2, env=None):
        c = Cluster(tmp_path_factory.mktemp("cluster"), workers, servers, env)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def require_gpu(what):
    """Skips the calling test unless torch sees a CUDA GPU; with FERRY_REQUIRE_GPU=1
    (scripts/gpu-checks) fails it instead."""
    import torch
    if torch.cuda.is_available():
        return
    if os.environ.get("FERRY_REQUIRE_GPU") == "1":
        pytest.fail("%s: no CUDA GPU visible to torch (torch %s, CUDA %s)"
                    % (what, torch.__version__, torch.version.cuda))
    pytest.skip("%s: needs a CUDA GPU" % what)


# The paths of ferry.torch's data the tests run a mode on: host memory, the device path
# over the fake device (CPU tensors through pinned buffers on simulated streams), CUDA.
DEVICE_PATHS = ["host", "fake-device", "cuda"]


def run_on_path(make_cluster, path, mode, env=None, timeout=150):
    """Runs worker `mode` on 2 workers and 2 servers on `path` (skipped, or failed with
    FERRY_REQUIRE_GPU=1, for cuda without a GPU); returns the results by rank, each marked
    with its path."""
    env = dict(env or {})
    if path == "fake-device":
        env["FERRY_DEVICE_API"] = "fake"
    if path == "cuda":
        require_gpu("CUDA tensors through ferry.torch")
        env["FERRY_TEST_TENSOR_DEVICE"] = "cuda"
    c = make_cluster(workers=2, servers=2, env=env)
    c.start(mode)
    res = c.wait_workers(timeout=timeout)
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        r["path"] = path
    return sorted(res, key=lambda r: r["rank"])

