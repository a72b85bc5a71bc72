"""A scheduler that dies mid-job is started again at the job's address and adopts it:
scripts/local-cluster -r and scripts/compose-local (the compose file's restart policy)
restart a scheduler killed with SIGKILL, the servers and workers train on meanwhile and
rejoin the new one, and the job ends as it would have: exit 0, exact sums, the example's
accuracy. The scheduler is killed twice, each time once the one before has adopted the job.

Every process runs in the test's session and is killed with it, also when a test fails.
"""

import os
import re
import signal
import subprocess
import threading
import time

import pytest

from deploy_support import (BUILD, FERRY_BIN, REPO, SCRIPTS, assert_exact_perf, clean_env,
                            free_port, kill_session, need_binaries, need_compose)

ADOPTED = "adopted the running job"
# What a node says when it gives up on the job: none of it may appear.
GIVING_UP = ("no scheduler answered", "presumed dead", "refused this node", "is not in membership epoch")


def schedulers(port=None, hostname=None, stage=None):
    """Pids of the ferry-scheduler processes whose environment has DMLC_PS_ROOT_PORT=port
    (local-cluster), or HOSTNAME=hostname (compose-local's service name) and a PATH through
    `stage` (that run's installed tree)."""
    if port is not None:
        want = [b"\0DMLC_PS_ROOT_PORT=%d\0" % port]
    else:
        want = [b"\0HOSTNAME=%s\0" % hostname.encode(), b"\0PATH=%s/" % stage.encode()]
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() != "ferry-scheduler":
                    continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                environ = b"\0" + f.read()
                if all(w in environ for w in want):
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


class Run:
    """A command in its own session whose output is collected by a thread, so that waiting
    for a line never blocks past a deadline."""

    def __init__(self, argv, env, deadline_s):
        self.deadline = time.monotonic() + deadline_s
        self.lines = []
        self.lock = threading.Lock()
        self.p = subprocess.Popen([str(a) for a in argv], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in iter(self.p.stdout.readline, b""):
            with self.lock:
                self.lines.append(raw.decode(errors="replace"))

    def text(self):
        with self.lock:
            return "".join(self.lines)

    def wait_for(self, what, count=1):
        """Until `what` (a regular expression) has appeared `count` times in the output."""
        while len(re.findall(what, self.text(), re.M)) < count:
            if self.p.poll() is not None:
                self.reader.join(5)
                if len(re.findall(what, self.text(), re.M)) >= count:
                    return
                pytest.fail("the run ended (code %s) before %r appeared %d time(s):\n%s"
                            % (self.p.returncode, what, count, self.text()[-8000:]))
            if time.monotonic() > self.deadline:
                pytest.fail("no %r (%d time(s)) in time:\n%s" % (what, count, self.text()[-8000:]))
            time.sleep(0.1)

    def finish(self):
        try:
            self.p.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail("still running at the deadline:\n" + self.text()[-8000:])
        self.reader.join(5)
        return self.p.returncode, self.text()

    def close(self):
        kill_session(self.p)
        self.reader.join(5)


def kill_scheduler(run, find, before):
    """SIGKILLs the one scheduler `find` returns (not one of `before`); returns its pid."""
    pids = find()
    assert len(pids) == 1 and pids[0] not in before, \
        "expected one new ferry-scheduler, found %s (killed before: %s)\n%s" % (pids, before, run.text()[-4000:])
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def kill_twice(run, find, progress):
    """Kills the scheduler at the first `progress` line, waits for the restarted one to
    adopt the job, kills it at the next `progress` line, waits for the next adoption."""
    killed = []
    run.wait_for(progress)
    killed.append(kill_scheduler(run, find, killed))
    run.wait_for(ADOPTED, 1)
    seen = len(re.findall(progress, run.text(), re.M))
    run.wait_for(progress, seen + 1)    # the job went on under the new scheduler
    killed.append(kill_scheduler(run, find, killed))
    run.wait_for(ADOPTED, 2)
    return killed


def assert_survived(out):
    for phrase in GIVING_UP:
        assert phrase not in out, "a node gave up (%r):\n%s" % (phrase, out[-8000:])
    assert out.count(ADOPTED) == 2, out[-8000:]


def local_cluster(port, command, env=None):
    argv = [SCRIPTS / "local-cluster", "-r", "-p", str(port), "-s", "2", "-w", "2", "--"] + command
    return Run(argv, clean_env(dict({"FERRY_BIN": str(FERRY_BIN)}, **(env or {}))), deadline_s=240)


def assert_restarted_twice(out, port):
    for n in (1, 2):
        line = ("[local-cluster] the scheduler exited with code 137; restarting it at port %d "
                "(restart %d of 5)" % (port, n))
        assert line in out, out[-8000:]
    assert "[local-cluster] every process finished cleanly" in out, out[-8000:]


def test_local_cluster_restarts_a_killed_scheduler_and_the_sums_stay_exact():
    """ferry-perf meets at a scheduler barrier before every push_pull: the barriers waiting
    when the scheduler dies complete under the new one, and every sum is exact."""
    need_binaries("ferry-scheduler", "ferry-server", "ferry-perf")
    port = free_port()
    run = local_cluster(port, [FERRY_BIN / "ferry-perf", "-b", "4K", "-e", "16K", "-n", "2500", "-w", "1"])
    try:
        killed = kill_twice(run, lambda: schedulers(port=port), r"^\[worker 0\]\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s*$")
        code, out = run.finish()
    finally:
        run.close()
    assert code == 0, out[-8000:]
    assert_restarted_twice(out, port)
    assert_survived(out)
    assert_exact_perf(out, begin=4096, end=16384)
    assert not schedulers(port=port) and not any(os.path.exists("/proc/%d" % p) for p in killed)


EPOCHS = 40


def test_local_cluster_trains_the_example_through_two_scheduler_deaths():
    need_binaries("ferry-scheduler", "ferry-server")
    if not (BUILD / "python" / "ferry" / "libferry.so").is_file():
        pytest.skip("the Python package was not built in %s/python (FERRY_BUILD_PLUGINS=OFF?)" % BUILD)
    port = free_port()
    # The example's 95% bar; 40 epochs rather than its 12 (about 0.25 s each here, and
    # --step-sleep stretches only --elastic runs), so that both deaths and adoptions fall
    # well inside the training.
    run = local_cluster(port, ["/usr/bin/python3", REPO / "examples" / "train_digits.py",
                               "--epochs", str(EPOCHS), "--min-accuracy", "0.95"],
                        env={"PYTHONPATH": str(BUILD / "python")})
    try:
        kill_twice(run, lambda: schedulers(port=port), r"^\[worker 0\] epoch +\d+ ")
        code, out = run.finish()
    finally:
        run.close()
    assert code == 0, out[-8000:]
    assert_restarted_twice(out, port)
    assert_survived(out)
    assert "epoch %2d " % EPOCHS in out, out[-6000:]
    # Both deaths fell in the training: each adoption came before its last epoch.
    adoptions = [m.start() for m in re.finditer(ADOPTED, out)]
    assert adoptions[-1] < out.index("epoch %2d " % EPOCHS), out[-8000:]
    m = re.search(r"test accuracy ([0-9.]+)", out)
    assert m and float(m.group(1)) >= 0.95, out[-6000:]
    assert not schedulers(port=port)


def test_local_cluster_without_r_still_stops_when_the_scheduler_dies():
    need_binaries("ferry-scheduler", "ferry-server", "ferry-perf")
    port = free_port()
    argv = [SCRIPTS / "local-cluster", "-p", str(port), "-s", "1", "-w", "1", "--",
            FERRY_BIN / "ferry-perf", "-b", "4K", "-e", "4K", "-n", "100000", "-w", "0"]
    run = Run(argv, clean_env({"FERRY_BIN": str(FERRY_BIN)}), deadline_s=60)
    try:
        run.wait_for(r"^\[worker 0\] .*bytes")
        kill_scheduler(run, lambda: schedulers(port=port), [])
        code, out = run.finish()
    finally:
        run.close()
    assert code == 137, out[-6000:]
    assert "[local-cluster] scheduler exited with code 137; stopping the cluster" in out, out[-6000:]
    assert "restarting it" not in out


def test_compose_local_restarts_a_killed_scheduler(tmp_path):
    """The compose file's scheduler restart policy, as compose-local runs it: the scheduler
    service killed twice while the perf cluster (docker/compose.perf.yml) runs."""
    need_compose()
    need_binaries("ferry-scheduler", "ferry-server", "ferry-perf")
    argv = ["ferry-launch", "ferry-perf", "-b", "4K", "-e", "16K", "-n", "2500", "-w", "1"]
    override = tmp_path / "override.yml"
    override.write_text("services:\n" + "".join(
        "  %s:\n    command: [%s]\n" % (w, ", ".join('"%s"' % a for a in argv)) for w in ("worker-0", "worker-1")))
    cmd = [SCRIPTS / "compose-local", "--build", BUILD, "--timeout", "200",
           "-f", REPO / "docker-compose.yml", "-f", REPO / "docker" / "compose.perf.yml", "-f", override]
    run = Run(cmd, clean_env(), deadline_s=240)
    try:
        run.wait_for(r"into \S+ \(the image's /usr/local\)")
        stage = re.search(r"into (\S+) \(the image's /usr/local\)", run.text()).group(1)
        kill_twice(run, lambda: schedulers(hostname="scheduler", stage=stage),
                   r"^worker-0\s*\|\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s*$")
        code, out = run.finish()
    finally:
        run.close()
    assert code == 0, out[-8000:]
    assert out.count("scheduler exited with code 137") == 2, out[-8000:]
    for n in (1, 2):
        assert "restarting scheduler (restart: on-failure:5; restart %d)" % n in out, out[-8000:]
    assert_survived(out)
    assert_exact_perf(out, begin=4096, end=16384)
    assert "every service exited with code 0" in out, out[-6000:]
    assert not schedulers(hostname="scheduler", stage=stage)


def test_compose_local_does_not_wait_for_a_restarted_scheduler_without_a_job(tmp_path):
    """A scheduler restarted after a failure that still runs 10 s after the last worker
    exited has no job left (after a failed job it would wait for registrations): the run
    ends with the code that made it restart. Stand-in commands, no Ferry processes."""
    need_compose()
    need_binaries("ferry-scheduler", "ferry-server")
    marker = tmp_path / "failed-once"
    quick = '    entrypoint: ["sh", "-c", "sleep 3"]\n'
    healthy = '    healthcheck:\n      test: ["CMD", "true"]\n'
    override = tmp_path / "override.yml"
    override.write_text(
        "services:\n"
        "  scheduler:\n"
        '    entrypoint: ["sh", "-c", "if [ -e %s ]; then sleep 100; else touch %s; exit 1; fi"]\n'
        % (marker, marker) + healthy +
        "".join("  %s:\n" % s + quick + (healthy if s.startswith("server") else "")
                for s in ("server-0", "server-1", "worker-0", "worker-1")))
    cmd = [SCRIPTS / "compose-local", "--build", BUILD, "--loopback", "--timeout", "60", "--grace", "2",
           "-f", REPO / "docker-compose.yml", "-f", override]
    run = Run(cmd, clean_env(), deadline_s=90)
    try:
        code, out = run.finish()
    finally:
        run.close()
    assert code == 1, out[-4000:]
    assert "restarting scheduler (restart: on-failure:5; restart 1)" in out, out[-4000:]
    assert "scheduler, restarted after exit code 1, still runs 10 s after the last worker exited" in out, out[-4000:]
    assert "timed out" not in out, out[-4000:]
