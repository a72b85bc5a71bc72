"""Several workers and servers on one host do not collide: every port is per job and per
node (Ferry uses no fixed port, shared-memory or socket names), so 3 servers and 3
workers share a machine, and so do two such jobs at once; results are exact."""


from deploy_support import (FERRY_BIN, SCRIPTS, Procs, assert_exact_perf, clean_env, free_port,
                            need_binaries, run)

PERF = ["-b", "4K", "-e", "2M", "-n", "3", "-w", "1"]


def test_three_servers_and_three_workers_on_loopback(tmp_path):
    need_binaries()
    code, out = run([SCRIPTS / "local-cluster", "-s", "3", "-w", "3", "--", FERRY_BIN / "ferry-perf"] + PERF,
                    timeout=120, env=clean_env({"FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING"}))
    assert code == 0, out[-6000:]
    assert "3 workers, 3 servers" in out
    assert_exact_perf(out, end=2 << 20)


def test_two_jobs_of_three_plus_three_at_once(tmp_path):
    """Two jobs on one machine at the same time, each 3 servers and 1 worker machine of 3
    processes (one ferry-launch --local-size 3: a local group of its own per job)."""
    need_binaries()
    launch = SCRIPTS / "ferry-launch"
    with Procs(tmp_path) as procs:
        for job in ("a", "b"):
            env = clean_env({"DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "3", "DMLC_PS_ROOT_URI": "127.0.0.1",
                             "DMLC_PS_ROOT_PORT": str(free_port()), "DMLC_NODE_HOST": "127.0.0.1",
                             "FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING",
                             "FERRY_CONNECT_TIMEOUT_MS": "60000"})
            procs.start("%s scheduler" % job, [launch], dict(env, DMLC_ROLE="scheduler"))
            for i in range(3):
                procs.start("%s server %d" % (job, i), [launch], dict(env, DMLC_ROLE="server"))
            procs.start("%s workers" % job, [launch, "--local-size", "3", FERRY_BIN / "ferry-perf"] + PERF,
                        dict(env, DMLC_ROLE="worker", DMLC_WORKER_ID="0"))
        codes = procs.wait_all(timeout=150)
        assert set(codes.values()) == {0}, (codes, procs.dump())
        for job in ("a", "b"):
            out = procs.output("%s workers" % job)
            assert "3 workers, 3 servers" in out, out
            assert_exact_perf(out, end=2 << 20)


def test_local_cluster_stops_everything_when_a_worker_fails(tmp_path):
    """A failing worker command (exit 3) stops the whole local cluster: the other
    processes are ended and local-cluster exits non-zero, naming the failed process."""
    need_binaries()
    script = tmp_path / "fail_on_rank_1.sh"
    script.write_text('#!/bin/sh\n'
                      'if [ "$DMLC_WORKER_ID" = 1 ]; then exit 3; fi\n'
                      'exec "$FERRY_BIN/ferry-perf" -b 4K -e 4K -n 1000000 -w 0\n')
    script.chmod(0o755)
    code, out = run([SCRIPTS / "local-cluster", "-s", "1", "-w", "2", "--", script], timeout=60,
                    env=clean_env({"FERRY_BIN": str(FERRY_BIN), "FERRY_LOG_LEVEL": "WARNING",
                                   "FERRY_CONNECT_TIMEOUT_MS": "5000"}))
    assert code == 3, out[-4000:]
    assert "[local-cluster] worker 1 exited with code 3; stopping the cluster" in out, out[-4000:]
