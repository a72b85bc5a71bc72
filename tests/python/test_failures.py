"""Errors reach Python as FerryError with the core's message: never a hang or a crash."""

import subprocess
import time

import torch

from conftest import PYTHON, base_env, free_port

HEARTBEAT = {"FERRY_HEARTBEAT_INTERVAL_MS": "200", "FERRY_HEARTBEAT_TIMEOUT_MS": "3000"}
HEARTBEAT_TIMEOUT_S = 3.0


def test_mismatched_shapes_raise_on_every_worker(cluster):
    c = cluster(workers=2, servers=2, env=dict(HEARTBEAT, FERRY_OP_TIMEOUT_MS="20000"))
    c.start("mismatch")
    res = sorted(c.wait_workers(timeout=60), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        for what in ("shape", "count"):
            outcome = r["outcomes"][what]
            assert outcome is not None, "worker %d: mismatched %s did not raise" % (r["rank"], what)
            kind, message, code, seconds = outcome
            assert kind == "FerryError", "worker %d: %s: %s" % (r["rank"], kind, message)
            assert "workers disagree" in message and "'mismatch.%s'" % what in message, message
            assert code == "mismatch", code
            assert seconds < 10, "worker %d waited %.1f s for the mismatch error" % (r["rank"], seconds)
        # The cluster stays usable for well-formed tensors.
        assert torch.equal(r["after"], torch.full((3,), 2.0))


def test_killed_server_raises_on_every_worker(cluster, tmp_path):
    c = cluster(workers=2, servers=2, env=HEARTBEAT)
    ready = tmp_path / "ready"
    c.start("kill", "--ready", ready)
    deadline = time.time() + 60
    while not ready.exists():
        assert time.time() < deadline, "workers never got going\n" + c.logs()
        for i in range(2):
            assert c.procs["worker %d" % i].poll() is None, "worker %d exited early\n%s" % (i, c.logs())
        time.sleep(0.05)
    killed_at = time.time()
    c.kill("server 1")
    res = c.wait_workers(timeout=HEARTBEAT_TIMEOUT_S + 30)
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        assert r["raised"] is not None, "worker %d trained on after the server died" % r["rank"]
        kind, message, at = r["raised"]
        assert kind == "FerryError", "worker %d raised %s: %s" % (r["rank"], kind, message)
        assert "server" in message and "presumed dead" in message, message
        # The scheduler declares the server dead after the heartbeat timeout; the worker
        # hears it one message later. Allow 2 s for that and for Python.
        assert at - killed_at < HEARTBEAT_TIMEOUT_S + 2.0, \
            "worker %d raised %.1f s after the kill: %s" % (r["rank"], at - killed_at, message)
        print("\nworker %d raised %.2f s after the kill: %s" % (r["rank"], at - killed_at, message))


def run_alone(code, env, timeout=30):
    """Runs `code` in a fresh interpreter with the package on the path."""
    return subprocess.run([PYTHON, "-c", code], env=base_env(env), capture_output=True, text=True,
                          timeout=timeout)


INIT_AND_REPORT = """
import time, ferry.torch as bps
t0 = time.time()
try:
    bps.init()
    print("OK")
except bps.FerryError as e:
    print("FerryError after %.1f s: %s" % (time.time() - t0, e))
"""


def test_bad_configuration_raises():
    r = run_alone(INIT_AND_REPORT, {"DMLC_NUM_WORKER": "two", "DMLC_NUM_SERVER": "1",
                                    "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9"})
    assert r.returncode == 0, r.stderr
    assert "FerryError" in r.stdout and "DMLC_NUM_WORKER" in r.stdout and "'two'" in r.stdout, r.stdout


def test_missing_scheduler_raises_within_the_connect_timeout():
    r = run_alone(INIT_AND_REPORT, {"DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
                                    "DMLC_PS_ROOT_URI": "127.0.0.1",
                                    "DMLC_PS_ROOT_PORT": str(free_port()),
                                    "FERRY_CONNECT_TIMEOUT_MS": "1000"})
    assert r.returncode == 0, r.stderr
    assert "FerryError" in r.stdout and "scheduler" in r.stdout, r.stdout + r.stderr


def test_wrong_role_raises():
    r = run_alone(INIT_AND_REPORT, {"DMLC_ROLE": "server", "DMLC_NUM_WORKER": "1",
                                    "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
                                    "DMLC_PS_ROOT_PORT": "9"})
    assert r.returncode == 0, r.stderr
    assert "FerryError" in r.stdout and "DMLC_ROLE" in r.stdout, r.stdout



def test_join_with_uneven_data(cluster):
    c = cluster(workers=3, servers=2)
    c.start("join")
    res = sorted(c.wait_workers(timeout=120), key=lambda r: r["rank"])
    batches = [2 + 2 * r for r in range(3)]
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        assert r["batches"] == batches[r["rank"]]
        assert r["last_joined"] == 2, r["last_joined"]  # the one with the most batches
        for step, (s, a) in enumerate(zip(r["sums"], r["avgs"])):
            active = [w for w in range(3) if batches[w] > step]
            total = float(sum(w + 1 for w in active))
            assert torch.equal(s, torch.full((1000,), total)), (r["rank"], step, s[:3])
            # As Horovod: joined workers count as zeros, averages divide by size().
            expected = torch.full((1000,), total) * torch.tensor(1.0 / 3, dtype=torch.float32)
            assert torch.equal(a, expected), (r["rank"], step, a[:3])
        # After everyone joined, the next epoch includes every worker again.
        assert torch.equal(r["after"], torch.full((10,), 6.0))
