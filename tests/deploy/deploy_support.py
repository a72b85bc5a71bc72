"""Helpers for the deployment tests: where things are, running commands with deadlines,
reading ferry-perf's table.

  FERRY_BIN  ferry-scheduler, ferry-server, ferry-perf (default: build/bin); its parent
             is the build folder (libferry in lib/, the Python package in python/).

Every process is started in its own session and killed, with everything in its
session, when a test ends or a deadline passes.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FERRY_BIN = Path(os.environ.get("FERRY_BIN", REPO / "build" / "bin")).resolve()
BUILD = FERRY_BIN.parent
PYTHON = "/usr/bin/python3"
SCRIPTS = REPO / "scripts"


def need_binaries(*names):
    names = names or ("ferry-scheduler", "ferry-server", "ferry-perf")
    for n in names:
        if not (FERRY_BIN / n).is_file():
            pytest.fail("%s not found in FERRY_BIN=%s: build first (scripts/build)" % (n, FERRY_BIN))


def need_compose():
    if not shutil.which("docker-compose"):
        pytest.skip("docker-compose is not installed (Debian's docker-compose; scripts/install-deps --test)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra=None):
    """This environment without any Ferry/BytePS/DMLC variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "FERRY_", "BYTEPS_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def kill_session(proc):
    """SIGKILL to the process's whole session (started with start_new_session)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run(argv, timeout, env=None, cwd=None):
    """Runs argv to its end (or kills it at the deadline); returns (code, output)."""
    p = subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(p)
        out, _ = p.communicate()
        pytest.fail("%s did not finish within %d s; output:\n%s"
                    % (" ".join(map(str, argv)), timeout, out.decode(errors="replace")[-6000:]))
    finally:
        kill_session(p)   # anything it left behind in its session
    return p.returncode, out.decode(errors="replace")


class Procs:
    """Background processes of one test, each in its own session, output to a file;
    all killed (with their sessions) on exit."""

    def __init__(self, tmp):
        self.tmp = Path(tmp)
        self.procs = {}
        self.files = []

    def start(self, name, argv, env):
        log = open(self.tmp / (name.replace(" ", "_") + ".log"), "wb")
        self.files.append(log)
        self.procs[name] = subprocess.Popen([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        return self.procs[name]

    def output(self, name):
        return (self.tmp / (name.replace(" ", "_") + ".log")).read_text(errors="replace")

    def wait_all(self, timeout):
        """Exit codes of every process, 128 + N for death by signal N (as a shell says);
        fails the test at the deadline."""
        deadline = time.monotonic() + timeout
        codes = {}
        for name, p in self.procs.items():
            try:
                code = p.wait(timeout=max(0.1, deadline - time.monotonic()))
                codes[name] = 128 - code if code < 0 else code
            except subprocess.TimeoutExpired:
                pytest.fail("%s still runs after %d s; outputs:\n%s" % (name, timeout, self.dump()))
        return codes

    def dump(self):
        return "\n".join("--- %s\n%s" % (n, self.output(n)[-3000:]) for n in self.procs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs.values():
            kill_session(p)
        for f in self.files:
            f.close()


ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")


def perf_rows(output):
    """ferry-perf's table rows, from output lines that may carry a prefix ('[worker 0] ',
    'worker-0  | '): a list of (bytes, errors)."""
    rows = []
    for line in output.splitlines():
        line = re.sub(r"^(\[[^\]]*\]|[\w.-]+\s*\|)\s?", "", line)
        m = ROW.match(line)
        if m:
            rows.append((int(m.group(1)), int(m.group(4))))
    return rows


def sizes(begin, end, factor=2):
    out, s = [], begin
    while s <= end:
        out.append(s)
        s *= factor
    return out


def assert_exact_perf(output, begin=4096, end=4 << 20, factor=2, tables=1):
    """Every size from begin to end measured, every value exact (errors 0), `tables`
    times (ferry-perf prints its table on worker 0 only)."""
    rows = perf_rows(output)
    expected = sizes(begin, end, factor) * tables
    assert sorted(b for b, _ in rows) == sorted(expected), \
        "ferry-perf rows %s, expected sizes %s; output:\n%s" % (rows, expected, output[-6000:])
    assert all(e == 0 for _, e in rows), "ferry-perf found wrong values: %s" % rows


def netns_list():
    r = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def is_root():
    return os.geteuid() == 0


def need_netns():
    """Skips the test, with netns-cluster's reason, where network namespaces cannot be
    made (not root, no capabilities, no `ip netns`)."""
    r = subprocess.run([str(SCRIPTS / "netns-cluster"), "check"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=30)
    if r.returncode == 2:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout
