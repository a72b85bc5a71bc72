"""Elastic training through ferry.torch.elastic: examples/train_digits.py --elastic on a
real cluster (FERRY_ELASTIC=1) survives kill -9 of a server and, later, of a worker, and
goes on learning with the nodes left."""

import re
import subprocess
import time

from conftest import EXAMPLES, FERRY_BIN, PYTHON, REPO, base_env

HEARTBEAT = {"FERRY_HEARTBEAT_INTERVAL_MS": "200", "FERRY_HEARTBEAT_TIMEOUT_MS": "3000"}


def wait_for(cluster, name, pattern, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, cluster.log(name))
        if m:
            return m
        assert cluster.procs[name].poll() is None, "%s exited\n%s" % (name, cluster.logs())
        time.sleep(0.05)
    raise AssertionError("%s never printed %r\n%s" % (name, pattern, cluster.logs()))


def test_train_digits_survives_a_killed_server_and_a_killed_worker(cluster):
    c = cluster(workers=3, servers=2, env=dict(HEARTBEAT, FERRY_ELASTIC="1"))
    c._spawn("scheduler", [str(FERRY_BIN / "ferry-scheduler")], "scheduler")
    for i in range(2):
        c._spawn("server %d" % i, [str(FERRY_BIN / "ferry-server")], "server")
    for i in range(3):
        c._spawn("worker %d" % i,
                 [PYTHON, str(EXAMPLES / "train_digits.py"), "--elastic", "--epochs", "6",
                  "--min-accuracy", "0.9", "--step-sleep", "0.01"],
                 "worker", {"DMLC_WORKER_ID": str(i)})
    wait_for(c, "worker 0", r"epoch  1 ", 120)
    server_killed_at = time.time()
    c.kill("server 1")
    wait_for(c, "worker 0", r"time lost to the membership change", 60)
    wait_for(c, "worker 0", r"epoch  3 ", 120)
    worker_killed_at = time.time()
    c.kill("worker 2")
    for i in range(2):
        p = c.procs["worker %d" % i]
        p.wait(180)
        assert p.returncode == 0, c.logs()
    out = c.log("worker 0")
    m = re.search(r"test accuracy ([0-9.]+)", out)
    assert m and float(m.group(1)) >= 0.9, out
    # Two membership changes, each followed by training on: 2 servers -> 1, 3 workers -> 2.
    firsts = [float(t) for t in re.findall(r"first step after at unix time ([0-9.]+)", out)]
    assert len(firsts) == 2, out
    assert "worker 0 of 2 after a membership change" in out, out
    assert re.search(r"epoch  6  loss [0-9.]+  2 workers", out), out
    for what, killed, first in (("server", server_killed_at, firsts[0]),
                                ("worker", worker_killed_at, firsts[1])):
        print("\n%s killed: first step completed %.2f s later (heartbeat timeout 3 s)"
              % (what, first - killed))
    for name in ("scheduler", "server 0"):
        p = c.procs[name]
        p.wait(30)
        assert p.returncode == 0, c.logs()


def test_local_cluster_goes_on_when_an_elastic_worker_dies():
    # Worker 2 kills itself (kill -9) 3 s after it connected to the job (its registration: a
    # death before it would fail the job's start, as it should), which is during training;
    # the others finish it. A fixed delay from the start was too short for a loaded machine.
    # (A death during the first broadcast_parameters can leave the survivors' tensor
    # catalogs one declaration apart: a known fault, not what this test is about.)
    command = ('[ "$DMLC_WORKER_ID" = 2 ] && (for i in $(seq 300); do '
               'ss -Htnp 2>/dev/null | grep -q "pid=$$," && break; sleep 0.1; done; '
               'sleep 3; kill -9 $$) & exec %s %s --elastic '
               '--epochs 8 --min-accuracy 0.95 --step-sleep 0.01'
               % (PYTHON, EXAMPLES / "train_digits.py"))
    env = base_env(dict(HEARTBEAT, FERRY_BIN=str(FERRY_BIN), FERRY_ELASTIC="1"))
    r = subprocess.run([str(REPO / "scripts" / "local-cluster"), "-s", "2", "-w", "3", "--",
                        "bash", "-c", command], env=env, capture_output=True, text=True,
                       timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "worker 2 exited with code 137; elastic job (FERRY_ELASTIC=1): the others go on" in out, \
        out[-6000:]
    assert "the job finished; lost on the way: worker 2" in out, out[-6000:]
    m = re.search(r"test accuracy ([0-9.]+)", out)
    assert m and float(m.group(1)) >= 0.95, out[-6000:]


def test_a_worker_started_mid_run_joins_at_the_next_commit(cluster):
    # 2 workers train; a third worker process with the job's environment (and no
    # DMLC_WORKER_ID) starts mid-run, is admitted at the next commit (every worker's
    # commit() raises HostsUpdatedInterrupt), takes rank 0's state and trains on.
    c = cluster(workers=2, servers=2, env=dict(HEARTBEAT, FERRY_ELASTIC="1",
                                              FERRY_MAX_WORKERS="3"))
    c._spawn("scheduler", [str(FERRY_BIN / "ferry-scheduler")], "scheduler")
    for i in range(2):
        c._spawn("server %d" % i, [str(FERRY_BIN / "ferry-server")], "server")
    argv = [PYTHON, str(EXAMPLES / "train_digits.py"), "--elastic", "--epochs", "12",
            "--min-accuracy", "0.95", "--step-sleep", "0.01"]
    for i in range(2):
        c._spawn("worker %d" % i, argv, "worker", {"DMLC_WORKER_ID": str(i)})
    wait_for(c, "worker 0", r"epoch  3 ", 120)
    c._spawn("joiner", argv, "worker")
    for name in ("worker 0", "worker 1", "joiner", "scheduler", "server 0", "server 1"):
        p = c.procs[name]
        p.wait(180)
        assert p.returncode == 0, "%s exited %s\n%s" % (name, p.returncode, c.logs())
    out = c.log("worker 0")
    m = re.search(r"test accuracy ([0-9.]+)", out)
    assert m and float(m.group(1)) >= 0.95, out
    assert re.search(r"epoch 12  loss [0-9.]+  3 workers", out), out
    print("\nwith a worker joined mid-run: test accuracy %s" % m.group(1))
    assert "worker 0 of 3 after a membership change" in out, out
