"""scripts/ferry-launch: DMLC_ROLE decides; exit codes; local size; DMLC_INTERFACE;
signals forwarded; SIGTERM to a node's ferry-launch ends the whole cluster promptly."""

import re
import signal
import subprocess
import time

import pytest

from deploy_support import FERRY_BIN, PYTHON, SCRIPTS, Procs, clean_env, free_port, need_binaries, run

LAUNCH = SCRIPTS / "ferry-launch"
CLUSTER = {"DMLC_NUM_WORKER": "4", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
           "DMLC_PS_ROOT_PORT": "9000"}


def launch(args, timeout=30, **env):
    return run([LAUNCH] + list(args), timeout=timeout, env=clean_env(env))


@pytest.mark.parametrize("missing", ["DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
                                     "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"])
def test_a_missing_variable_is_exit_code_2_naming_it(missing):
    env = dict(CLUSTER, DMLC_ROLE="worker")
    del env[missing]
    code, out = launch(["true"], **env)
    assert code == 2, out
    assert "ferry-launch: %s must be set" % missing in out


def test_a_bad_role_or_no_worker_command_is_exit_code_2():
    code, out = launch([], DMLC_ROLE="trainer", **CLUSTER)
    assert code == 2 and "DMLC_ROLE='trainer': expected scheduler, server or worker" in out, out
    code, out = launch([], DMLC_ROLE="worker", **CLUSTER)
    assert code == 2 and "needs the training command" in out, out


@pytest.fixture
def stub_bin(tmp_path):
    """A FERRY_BIN whose ferry-scheduler and ferry-server print their pid and role."""
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("ferry-scheduler", "ferry-server"):
        f = d / name
        f.write_text("#!/bin/sh\necho \"%s pid=$$ role=$DMLC_ROLE\"\nexit 5\n" % name)
        f.chmod(0o755)
    return d


@pytest.mark.parametrize("role", ["scheduler", "server"])
def test_scheduler_and_server_replace_the_launcher(stub_bin, role):
    p = subprocess.Popen([str(LAUNCH)], env=clean_env(dict(CLUSTER, DMLC_ROLE=role, FERRY_BIN=str(stub_bin))),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.communicate(timeout=30)[0].decode()
    # exec: the program has the launcher's pid, and its exit code is the launcher's.
    assert out.strip() == "ferry-%s pid=%d role=%s" % (role, p.pid, role), out
    assert p.returncode == 5


def test_the_real_programs_are_found_and_check_the_environment():
    need_binaries()
    code, out = launch([], DMLC_ROLE="server", FERRY_BIN=str(FERRY_BIN),
                       **dict(CLUSTER, DMLC_NUM_SERVER="zero"))
    assert code == 2 and "DMLC_NUM_SERVER='zero'" in out, out


def test_a_worker_runs_the_command_with_its_exit_code():
    code, out = launch(["sh", "-c", "echo rank=$FERRY_LOCAL_RANK size=$FERRY_LOCAL_SIZE; exit 7"],
                       DMLC_ROLE="worker", **CLUSTER)
    assert code == 7 and out.strip() == "rank=0 size=1", out
    code, out = launch(["no-such-command-ferry"], DMLC_ROLE="worker", **CLUSTER)
    assert code == 127, out


def test_local_size_starts_one_worker_per_local_rank():
    # BytePS's convention: DMLC_NUM_WORKER counts machines, every local process keeps the
    # machine's DMLC_WORKER_ID, and the copies share one local group socket.
    script = ("echo rank=$FERRY_LOCAL_RANK/$FERRY_LOCAL_SIZE id=$DMLC_WORKER_ID "
              "bps=$BYTEPS_LOCAL_RANK/$BYTEPS_LOCAL_SIZE socket=$FERRY_LOCAL_SOCKET")
    code, out = launch(["--local-size", "3", "sh", "-c", script], DMLC_ROLE="worker", DMLC_WORKER_ID="1",
                       **dict(CLUSTER, DMLC_NUM_WORKER="2"))
    assert code == 0, out
    lines = sorted(out.split("\n")[:-1])
    sockets = {line.split("socket=")[1] for line in lines}
    assert len(sockets) == 1 and re.fullmatch(r"ferry-local-\d+-\d+", sockets.pop()), out
    assert [line.split(" socket=")[0] for line in lines] == [
        "rank=%d/3 id=1 bps=%d/3" % (i, i) for i in range(3)]
    # A local size above DMLC_NUM_WORKER is fine (1 machine of 5 processes); a socket
    # name already set is kept.
    code, out = launch(["sh", "-c", "echo $FERRY_LOCAL_RANK $FERRY_LOCAL_SOCKET"], DMLC_ROLE="worker",
                       FERRY_LOCAL_SIZE="5", FERRY_LOCAL_SOCKET="mine", **dict(CLUSTER, DMLC_NUM_WORKER="1"))
    assert code == 0 and sorted(out.split("\n")[:-1]) == ["%d mine" % i for i in range(5)], out
    # FERRY_LOCAL_SIZE does the same; without DMLC_WORKER_ID the machines join in any order.
    code, out = launch(["sh", "-c", "echo id=${DMLC_WORKER_ID:-none}"], DMLC_ROLE="worker",
                       FERRY_LOCAL_SIZE="2", **CLUSTER)
    assert code == 0 and out.split() == ["id=none", "id=none"], out
    # 'gpus': one per visible GPU.
    code, out = launch(["--local-size", "gpus", "sh", "-c", "echo $FERRY_LOCAL_RANK"], DMLC_ROLE="worker",
                       CUDA_VISIBLE_DEVICES="0,1", **CLUSTER)
    assert code == 0 and sorted(out.split()) == ["0", "1"], out


@pytest.mark.parametrize("args,env,message", [
    (["--local-size", "0"], {}, "--local-size='0': expected a number"),
    (["--local-size", "x"], {}, "--local-size='x': expected a number"),
    (["--local-size", "2"], {"DMLC_WORKER_ID": "4"},
     "DMLC_WORKER_ID=4, but DMLC_NUM_WORKER=4; DMLC_NUM_WORKER counts worker machines"),
    ([], {"FERRY_LOCAL_SIZE": "2", "DMLC_WORKER_ID": "x"}, "DMLC_WORKER_ID='x': expected an integer"),
    (["--local-size", "gpus"], {"CUDA_VISIBLE_DEVICES": ""}, "no GPU found"),   # CUDA sees none
])
def test_bad_local_sizes_are_exit_code_2(args, env, message):
    code, out = launch(args + ["true"], DMLC_ROLE="worker", **dict(CLUSTER, **env))
    assert code == 2 and message in out, out


def test_one_failing_local_worker_stops_the_others():
    script = "if [ $FERRY_LOCAL_RANK = 1 ]; then exit 4; fi; exec sleep 30"
    start = time.monotonic()
    code, out = launch(["--local-size", "3", "sh", "-c", script], DMLC_ROLE="worker", **CLUSTER)
    assert code == 4, out
    assert "exited with code 4; stopping the other 2" in out
    assert time.monotonic() - start < 10


def test_dmlc_interface_becomes_dmlc_node_host():
    code, out = launch(["sh", "-c", "echo $DMLC_NODE_HOST"], DMLC_ROLE="worker", DMLC_INTERFACE="lo", **CLUSTER)
    assert code == 0 and out.strip() == "127.0.0.1", out
    code, out = launch(["sh", "-c", "echo $DMLC_NODE_HOST"], DMLC_ROLE="worker", DMLC_INTERFACE="lo",
                       DMLC_NODE_HOST="10.1.2.3", **CLUSTER)
    assert code == 0 and out.strip() == "10.1.2.3", out
    code, out = launch(["true"], DMLC_ROLE="worker", DMLC_INTERFACE="nosuchif0", **CLUSTER)
    assert code == 2 and "DMLC_INTERFACE='nosuchif0'" in out, out


# A worker that records the signals it gets, then exits 128 + signal (as by default).
RECORDER = r"""
import os, signal, sys, time
out = sys.argv[1]
def on(sig, frame):
    with open("%s.%s" % (out, os.environ["FERRY_LOCAL_RANK"]), "w") as f:
        f.write(signal.Signals(sig).name)
    os._exit(128 + sig)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on)
open("%s.ready.%s" % (out, os.environ["FERRY_LOCAL_RANK"]), "w").close()
time.sleep(60)
sys.exit(0)
"""


@pytest.mark.parametrize("local_size", [1, 3])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_reach_every_local_worker_and_the_exit_code_follows(tmp_path, local_size, sig):
    (tmp_path / "w.py").write_text(RECORDER)
    mark = tmp_path / "got"
    with Procs(tmp_path) as procs:
        # Under nohup every child starts with SIGHUP ignored, and a background job of a
        # shell without job control with SIGINT ignored; a shell cannot trap a signal
        # ignored at its start (the launcher then rightly ignores it): give the launcher the
        # default dispositions a terminal session would.
        previous = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGHUP, signal.SIGINT)}
        try:
            p = procs.start("launch", [LAUNCH, "--local-size", local_size, PYTHON, tmp_path / "w.py", mark],
                            clean_env(dict(CLUSTER, DMLC_ROLE="worker")))
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("got.ready.*"))) < local_size:
            assert p.poll() is None and time.monotonic() < deadline, procs.output("launch")
            time.sleep(0.05)
        p.send_signal(sig)
        code = p.wait(timeout=20)
    got = sorted(f.read_text() for f in tmp_path.glob("got.[0-9]*"))
    assert got == [sig.name] * local_size, (got, procs.output("launch"))
    assert code == 128 + sig


def cluster_env(port, **extra):
    env = clean_env({"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
                     "DMLC_PS_ROOT_PORT": str(port), "DMLC_NODE_HOST": "127.0.0.1",
                     "FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING",
                     "FERRY_HEARTBEAT_INTERVAL_MS": "100", "FERRY_HEARTBEAT_TIMEOUT_MS": "1000",
                     "FERRY_CONNECT_TIMEOUT_MS": "20000"})
    env.update(extra)
    return env


def start_cluster(procs, tmp_path):
    """scheduler, server and 2 workers, each through ferry-launch; the workers run
    ferry-perf for far longer than the test."""
    port = free_port()
    procs.start("scheduler", [LAUNCH], cluster_env(port, DMLC_ROLE="scheduler"))
    procs.start("server", [LAUNCH], cluster_env(port, DMLC_ROLE="server"))
    perf = [FERRY_BIN / "ferry-perf", "-b", "4K", "-e", "4K", "-n", "100000000", "-w", "1"]
    for i in range(2):
        procs.start("worker %d" % i, [LAUNCH] + perf, cluster_env(port, DMLC_ROLE="worker", DMLC_WORKER_ID=str(i)))
    deadline = time.monotonic() + 60
    while "bytes" not in procs.output("worker 0"):   # the table's header: the job runs
        for name, p in procs.procs.items():
            assert p.poll() is None, "%s exited early:\n%s" % (name, procs.dump())
        assert time.monotonic() < deadline, procs.dump()
        time.sleep(0.1)
    time.sleep(0.5)


def test_sigterm_to_a_workers_launcher_stops_it_and_the_cluster_ends(tmp_path):
    need_binaries()
    with Procs(tmp_path) as procs:
        start_cluster(procs, tmp_path)
        procs.procs["worker 1"].send_signal(signal.SIGTERM)
        start = time.monotonic()
        codes = procs.wait_all(timeout=20)
        took = time.monotonic() - start
        # The worker stopped at once; every other node learned it within the heartbeat
        # timeout (1 s here), named it, and exited 1: nothing hangs, nothing is left.
        assert codes == {"worker 1": 128 + signal.SIGTERM, "scheduler": 1, "server": 1, "worker 0": 1}, \
            (codes, procs.dump())
        assert took < 10, took
        for name in ("scheduler", "server", "worker 0"):
            assert "worker 1 (127.0.0.1" in procs.output(name) and "presumed dead" in procs.output(name), \
                procs.dump()


def test_sigterm_to_every_launcher_ends_every_node_at_once(tmp_path):
    """What docker compose down / kubectl delete do: SIGTERM to each node's PID 1 chain."""
    need_binaries()
    with Procs(tmp_path) as procs:
        start_cluster(procs, tmp_path)
        for p in procs.procs.values():
            p.send_signal(signal.SIGTERM)
        codes = procs.wait_all(timeout=10)
        assert set(codes.values()) <= {128 + signal.SIGTERM, 1}, (codes, procs.dump())
