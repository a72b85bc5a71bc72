"""docker-compose.yml works: scripts/compose-local runs its rendered services as local
processes, each in its own network namespace, and the cluster runs to the end."""

import os
import re
import signal
import subprocess
import time

import pytest

from deploy_support import (BUILD, REPO, SCRIPTS, assert_exact_perf, clean_env, is_root,
                            kill_session, need_binaries, need_compose, netns_list, run)

COMPOSE = REPO / "docker-compose.yml"
PERF = REPO / "docker" / "compose.perf.yml"
PERF_ARGS = ["-b", "4K", "-e", "4M", "-n", "3", "-w", "1"]


def override(tmp_path, commands):
    """A compose override giving services new commands, as a user would write one."""
    lines = ["services:"]
    for service, argv in commands.items():
        lines += ["  %s:" % service, "    command: [%s]" % ", ".join('"%s"' % a for a in argv)]
    f = tmp_path / "override.yml"
    f.write_text("\n".join(lines) + "\n")
    return f


def small_perf(tmp_path):
    argv = ["ferry-launch", "ferry-perf"] + PERF_ARGS
    return override(tmp_path, {"worker-0": argv, "worker-1": argv})


def compose_local(*files, extra=(), timeout=150, env=None, wrap=()):
    argv = list(wrap) + [SCRIPTS / "compose-local", "--build", BUILD, "--timeout", str(timeout - 30)]
    for f in files:
        argv += ["-f", f]
    return run(argv + list(extra), timeout=timeout, env=clean_env(env), cwd=REPO)


def assert_cleaned_up(output):
    """Nothing this run made is left: namespaces, /etc/netns entries, the installed tree
    and any process running from it."""
    m = re.search(r"network: a namespace per service, (ferry-cl\d+)-<service>", output)
    if m:
        tag = m.group(1) + "-"
        assert not [ns for ns in netns_list() if ns.startswith(tag)], "namespaces left behind"
        netns = os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else []
        assert not [d for d in netns if d.startswith(tag)], "/etc/netns entries left behind"
    m = re.search(r"into (\S+) \(the image's /usr/local\)", output)
    assert m, output[-3000:]
    assert not os.path.exists(m.group(1)), "%s left behind" % m.group(1)
    ps = subprocess.run(["ps", "-eo", "pid,args"], stdout=subprocess.PIPE, text=True).stdout
    assert m.group(1) not in ps, "processes of the run still run:\n" + ps


def test_compose_local_runs_the_perf_cluster_in_namespaces(tmp_path):
    need_compose()
    need_binaries()
    code, out = compose_local(COMPOSE, PERF, small_perf(tmp_path))
    assert code == 0, out[-8000:]
    if is_root():
        assert "on 198.18.0.0/24" in out, out[-4000:]
        # The nodes reached each other at their own addresses, found by service name.
        assert "scheduler listening on 198.18.0.10:9000" in out, out[-4000:]
    else:
        assert "falling back to loopback" in out
    assert "scheduler is healthy" in out   # and only then did the others start
    assert "every service exited with code 0" in out
    assert_exact_perf(out)
    assert_cleaned_up(out)


def test_compose_local_trains_the_example(tmp_path):
    need_compose()
    need_binaries()
    if not (REPO / "examples" / "train_digits.py").is_file():
        pytest.skip("examples/train_digits.py does not exist yet (the PyTorch example)")
    if not (BUILD / "python" / "ferry" / "libferry.so").is_file():
        pytest.skip("the Python package was not built in %s/python (FERRY_BUILD_PLUGINS=OFF?)" % BUILD)
    argv = ["ferry-launch", "python3", "/usr/local/share/ferry/examples/train_digits.py",
            "--epochs", "2", "--min-accuracy", "0.5"]
    code, out = compose_local(COMPOSE, override(tmp_path, {"worker-0": argv, "worker-1": argv}),
                              timeout=170)
    assert code == 0, out[-8000:]
    assert "training DigitsCNN on 2 workers (cpu), 2 servers" in out, out[-4000:]
    assert "epoch  2" in out and "test accuracy" in out, out[-4000:]
    assert "every service exited with code 0" in out
    assert_cleaned_up(out)


def test_compose_local_without_namespace_rights_falls_back_to_loopback(tmp_path):
    need_compose()
    need_binaries()
    wrap = []
    if is_root():
        # Root without capabilities, as in an unprivileged container: namespaces fail.
        if not os.path.exists("/usr/bin/setpriv"):
            pytest.skip("setpriv (util-linux) is needed to drop capabilities")
        wrap = ["/usr/bin/setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
    code, out = compose_local(COMPOSE, PERF, small_perf(tmp_path), wrap=wrap)
    assert code == 0, out[-8000:]
    assert "no rights for network namespaces" in out and "falling back to loopback" in out, out[-3000:]
    assert "scheduler listening on 127.0.0.1:" in out
    assert_exact_perf(out)
    assert_cleaned_up(out)


def test_compose_local_stops_everything_when_a_service_fails(tmp_path):
    need_compose()
    need_binaries()
    fail = override(tmp_path, {"worker-1": ["ferry-launch", "sh", "-c", "sleep 1; exit 3"]})
    code, out = compose_local(COMPOSE, PERF, fail, extra=["--grace", "2"], timeout=90)
    assert code == 3, out[-6000:]
    assert "worker-1 exited with code 3" in out
    assert "stopping" in out
    assert_cleaned_up(out)


def ferry_server_of(service):
    """The pid of the ferry-server that compose-local runs for `service` (its HOSTNAME)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() != "ferry-server":
                    continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                if b"HOSTNAME=%s\0" % service.encode() in f.read():
                    return int(pid)
        except OSError:
            continue
    return None


def test_compose_local_restarts_a_killed_server_of_an_elastic_job(tmp_path):
    """FERRY_ELASTIC=1: server-1 killed mid-training; its restart policy (on-failure:3)
    starts it again, it registers as a spare and takes its slot back, and the training
    finishes."""
    need_compose()
    need_binaries()
    if not (BUILD / "python" / "ferry" / "libferry.so").is_file():
        pytest.skip("the Python package was not built in %s/python (FERRY_BUILD_PLUGINS=OFF?)" % BUILD)
    argv = ["ferry-launch", "python3", "/usr/local/share/ferry/examples/train_digits.py",
            "--epochs", "10", "--step-sleep", "0.02", "--min-accuracy", "0.9"]
    files = [COMPOSE, override(tmp_path, {"worker-0": argv, "worker-1": argv})]
    cmd = [str(SCRIPTS / "compose-local"), "--build", str(BUILD), "--timeout", "200"]
    for f in files:
        cmd += ["-f", str(f)]
    p = subprocess.Popen(cmd, env=clean_env({"FERRY_ELASTIC": "1"}), cwd=REPO,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    lines = []
    try:
        killed = False
        deadline = time.time() + 230
        for raw in iter(p.stdout.readline, b""):
            lines.append(raw.decode(errors="replace"))
            if not killed and "epoch  3 " in lines[-1]:
                pid = ferry_server_of("server-1")
                assert pid, "no ferry-server of server-1 found\n" + "".join(lines[-200:])
                os.kill(pid, signal.SIGKILL)
                killed = True
            assert time.time() < deadline, "compose-local ran too long\n" + "".join(lines[-200:])
        p.wait(30)
    finally:
        kill_session(p)
    out = "".join(lines)
    assert killed, out[-6000:]
    assert p.returncode == 0, out[-8000:]
    assert "server-1 exited with code 137" in out, out[-6000:]
    assert "restarting server-1 (restart: on-failure:3; restart 1)" in out, out[-6000:]
    assert "waiting as a spare" in out, out[-6000:]
    assert "a spare took the slot of server" in out, out[-6000:]
    assert "time lost to the membership change" in out, out[-6000:]
    m = re.search(r"test accuracy ([0-9.]+)", out)
    assert m and float(m.group(1)) >= 0.9, out[-6000:]
    assert_cleaned_up(out)


def test_compose_local_cleans_up_on_sigterm(tmp_path):
    need_compose()
    need_binaries()
    slow = ["ferry-launch", "ferry-perf", "-b", "4K", "-e", "4K", "-n", "100000", "-w", "1"]
    files = [COMPOSE, override(tmp_path, {"worker-0": slow, "worker-1": slow})]
    argv = [str(SCRIPTS / "compose-local"), "--build", str(BUILD), "--grace", "2"]
    for f in files:
        argv += ["-f", str(f)]
    log = open(tmp_path / "out.log", "wb")
    p = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "started worker-1" not in (tmp_path / "out.log").read_text() and time.monotonic() < deadline:
            assert p.poll() is None, (tmp_path / "out.log").read_text()
            time.sleep(0.2)
        time.sleep(1)
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=30)
    finally:
        kill_session(p)
        log.close()
    out = (tmp_path / "out.log").read_text()
    assert code == 128 + signal.SIGTERM, out[-4000:]
    assert "interrupted by SIGTERM" in out
    assert_cleaned_up(out)
