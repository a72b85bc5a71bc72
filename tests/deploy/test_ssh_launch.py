"""scripts/ferry-ssh-launch, with an ssh stand-in that runs the remote command on this
machine: every node of the host files starts with its environment, the job ends with
exact results, a failure stops every node, and the secret stays off command lines."""

import re
import signal
import subprocess
import time

import pytest

from deploy_support import (FERRY_BIN, SCRIPTS, Procs, assert_exact_perf, clean_env, free_port,
                            need_binaries, run)

SSH_LAUNCH = SCRIPTS / "ferry-ssh-launch"
FAKE_SSH = """#!/bin/bash
# ssh stand-in: [options...] HOST COMMAND -> runs COMMAND here; logs the host and argv.
echo "$*" >> "%s"
exec bash -c "${!#}"
"""


@pytest.fixture
def hosts(tmp_path):
    (tmp_path / "workers").write_text("# worker machines\n127.0.0.1\n127.0.0.1\n127.0.0.1\n")
    (tmp_path / "servers").write_text("127.0.0.1\n127.0.0.1:0   # any free port\n")
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH % (tmp_path / "ssh.log"))
    ssh.chmod(0o755)
    return tmp_path


def ssh_launch(hosts, command, extra=(), timeout=90, env=None):
    argv = [SSH_LAUNCH, "-WH", hosts / "workers", "-SH", hosts / "servers", "--scheduler", "127.0.0.1",
            "--scheduler-port", free_port(), "--ssh", hosts / "ssh", "--launcher", SCRIPTS / "ferry-launch",
            "--grace", "3"] + list(extra) + ["--"] + list(command)
    return run(argv, timeout=timeout, env=clean_env(dict({"FERRY_BIN": str(FERRY_BIN),
                                                          "FERRY_LOG_LEVEL": "WARNING"}, **(env or {}))))


def test_a_job_from_host_files_runs_to_exact_results(hosts):
    need_binaries()
    secret = "s3cret-for-the-ssh-test-0123456789"
    code, out = ssh_launch(hosts, [FERRY_BIN / "ferry-perf", "-b", "4K", "-e", "1M", "-n", "2", "-w", "1"],
                              env={"FERRY_SECRET": secret})
    assert code == 0, out[-6000:]
    assert "scheduler on 127.0.0.1:" in out and "2 server(s), 3 worker machine(s) x 1" in out
    assert "every node finished cleanly" in out
    assert_exact_perf(out, end=1 << 20)
    ssh_log = (hosts / "ssh.log").read_text()
    assert len(ssh_log.splitlines()) == 6           # scheduler, 2 servers, 3 workers
    assert secret not in ssh_log, "the secret must not travel on ssh's command line"
    assert all(line.endswith("127.0.0.1 bash -s") for line in ssh_log.splitlines()), ssh_log


def test_a_failing_node_stops_the_job_with_its_exit_code(hosts):
    need_binaries()
    script = ("if [ $DMLC_WORKER_ID = 2 ]; then sleep 1; exit 3; fi; "
              "exec %s -b 4K -e 4K -n 100000000 -w 1" % (FERRY_BIN / "ferry-perf"))
    code, out = ssh_launch(hosts, ["sh", "-c", script], timeout=60)
    assert code == 3, out[-4000:]
    assert "worker 2 127.0.0.1 exited with code 3; stopping the job" in out


def test_dry_run_shows_each_nodes_environment_with_the_secret_masked(hosts):
    code, out = ssh_launch(hosts, ["python3", "train.py"], extra=["--dry-run", "--local-size", "2",
                                                                     "--env", "FERRY_PARTITION_BYTES=65536"],
                              env={"FERRY_SECRET": "do-not-print-me-0123456789"})
    assert code == 0, out
    assert "do-not-print-me" not in out and "export FERRY_SECRET='***'" in out
    nodes = re.split(r"^### ", out, flags=re.M)[1:]
    assert len(nodes) == 6
    roles = [re.search(r"export DMLC_ROLE=(\w+)", n).group(1) for n in nodes]
    assert roles == ["scheduler", "server", "server", "worker", "worker", "worker"]
    for n in nodes:
        assert "export DMLC_NUM_WORKER=3" in n            # 3 machines (of 2 local workers each)
        assert "export DMLC_NUM_SERVER=2" in n
        assert "export DMLC_PS_ROOT_URI=127.0.0.1" in n
        assert "export DMLC_NODE_HOST=127.0.0.1" in n
        assert "export FERRY_PARTITION_BYTES=65536" in n
    assert "export DMLC_PORT=0" in nodes[2] and "DMLC_PORT" not in nodes[1]
    assert [re.search(r"export DMLC_WORKER_ID=(\d+)", n).group(1) for n in nodes[3:]] == ["0", "1", "2"]
    assert all("export FERRY_LOCAL_SIZE=2" in n for n in nodes[3:])
    assert "ferry-launch python3 train.py" in nodes[3] and "train.py" not in nodes[0]


def test_a_bad_host_file_is_refused(hosts):
    (hosts / "servers").write_text("host:port:extra\n")
    code, out = ssh_launch(hosts, ["true"])
    assert code != 0 and "expected host or host:port" in out, out


def test_sigterm_to_the_launcher_stops_every_remote_node(hosts, tmp_path):
    need_binaries()
    marker = "100000007"          # an iteration count no other process uses
    argv = [SSH_LAUNCH, "-WH", hosts / "workers", "-SH", hosts / "servers", "--scheduler", "127.0.0.1",
            "--scheduler-port", free_port(), "--ssh", hosts / "ssh", "--launcher", SCRIPTS / "ferry-launch",
            "--grace", "5", "--", FERRY_BIN / "ferry-perf", "-b", "4K", "-e", "4K", "-n", marker, "-w", "1"]
    env = clean_env({"FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING"})
    with Procs(tmp_path) as procs:
        p = procs.start("launcher", argv, env)
        deadline = time.monotonic() + 60
        while "bytes" not in procs.output("launcher"):      # worker 0's table header: running
            assert p.poll() is None and time.monotonic() < deadline, procs.output("launcher")
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        code = procs.wait_all(timeout=30)["launcher"]
    assert code == 128 + signal.SIGTERM, procs.output("launcher")
    assert "interrupted; stopping the job" in procs.output("launcher")
    ps = subprocess.run(["ps", "-eo", "args"], stdout=subprocess.PIPE, text=True).stdout
    assert "-n %s" % marker not in ps, "remote nodes still run:\n" + ps
