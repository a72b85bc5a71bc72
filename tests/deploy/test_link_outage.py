"""A transient network failure: one worker host's link goes down and comes back.

Two network namespaces (hosts A and B) joined by a bridge in a third one, addresses from
198.18.0.0/15 that exist only inside them. Host A runs the scheduler, the server and
worker 0; host B runs worker 1. While both train, B's switch port goes down:

- for 4 s, longer than FERRY_LINK_TIMEOUT_MS (1.5 s): ZeroMQ gives the connections up,
  and what they carried is lost (TCP does not hide this outage); it reconnects once the
  link is back, and Ferry's resends (FERRY_RESEND_TIMEOUT_MS) replace what was lost;
- for 2 s, shorter than the link timeout (5 s): TCP keeps the connections and delivers
  everything late, including the resends Ferry sent meanwhile, which the server must
  recognise as duplicates and not add twice.

Every sum must stay exact (ferry-test-worker checks each element), the server must
count exactly one accepted push per worker and round, and Ferry's own counters must show
the resends (and, in the second case, the duplicates dropped).

Needs root and `ip netns`; skips with a message otherwise. Everything it makes is
removed, also when it fails.
"""

import os
import re
import subprocess
import time

import pytest

from deploy_support import FERRY_BIN, Procs, clean_env, is_root, need_binaries, netns_list

ROUNDS = 60


def ip(*args):
    subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def netns_works():
    if not is_root():
        return False
    probe = "ferryprobe%d" % os.getpid()
    ok = subprocess.run(["ip", "netns", "add", probe], stderr=subprocess.DEVNULL).returncode == 0
    subprocess.run(["ip", "netns", "del", probe], stderr=subprocess.DEVNULL)
    return ok


class TwoHosts:
    """Hosts a (198.18.200.1) and b (198.18.200.2) on a bridge in its own namespace."""

    def __init__(self):
        self.tag = "fo%d" % os.getpid()
        self.bridge_ns = self.tag + "br"
        self.hosts = {"a": "198.18.200.1", "b": "198.18.200.2"}

    def ns(self, host):
        return self.tag + host

    def port(self, host):  # the bridge-side end of the host's cable
        return "p" + host

    def up(self):
        ip("netns", "add", self.bridge_ns)
        ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for host, address in self.hosts.items():
            ns = self.ns(host)
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", self.port(host),
               "netns", self.bridge_ns)
            ip("-n", ns, "addr", "add", address + "/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", self.bridge_ns, "link", "set", self.port(host), "master", "br0")
            ip("-n", self.bridge_ns, "link", "set", self.port(host), "up")

    def set_link(self, host, state):
        ip("-n", self.bridge_ns, "link", "set", self.port(host), state)

    def down(self):
        for ns in [self.ns(h) for h in self.hosts] + [self.bridge_ns]:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()


def counter(text, label):
    """The sum of every '<n> <label>' in text."""
    return sum(int(n) for n in re.findall(r"(\d+) " + re.escape(label), text))


def wait_for(procs, name, mark, timeout):
    deadline = time.monotonic() + timeout
    while mark not in procs.output(name):
        if time.monotonic() > deadline:
            pytest.fail("%s never printed %r; outputs:\n%s" % (name, mark, procs.dump()))
        time.sleep(0.05)


@pytest.mark.skipif(not netns_works(), reason="needs root and `ip netns` (network namespaces)")
@pytest.mark.parametrize("outage_s,link_timeout_ms,expect_duplicates",
                         [(4.0, 1500, False), (2.0, 5000, True)],
                         ids=["connections-lost", "tcp-delivers-late"])
def test_link_down_and_up_loses_no_sum_and_counts_no_push_twice(
        tmp_path, outage_s, link_timeout_ms, expect_duplicates):
    need_binaries("ferry-scheduler", "ferry-server", "ferry-test-worker")
    with TwoHosts() as net, Procs(tmp_path) as procs:
        root = net.hosts["a"]
        base = {
            "DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": root,
            "DMLC_PS_ROOT_PORT": "9300",
            # The outage is shorter than failure detection, longer than a link timeout.
            "FERRY_HEARTBEAT_TIMEOUT_MS": "30000", "FERRY_LINK_TIMEOUT_MS": str(link_timeout_ms),
            "FERRY_RESEND_TIMEOUT_MS": "300",
        }

        def start(name, host, program, extra):
            env = clean_env(dict(base, DMLC_NODE_HOST=net.hosts[host], **extra))
            argv = ["ip", "netns", "exec", net.ns(host), str(FERRY_BIN / program)]
            if program == "ferry-test-worker":
                argv += ["--mode=loop", "--loop_rounds=%d" % ROUNDS, "--loop_sleep_ms=20"]
            procs.start(name, argv, env)

        start("scheduler", "a", "ferry-scheduler", {"DMLC_ROLE": "scheduler"})
        start("server", "a", "ferry-server", {"DMLC_ROLE": "server"})
        start("worker0", "a", "ferry-test-worker", {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": "0"})
        start("worker1", "b", "ferry-test-worker", {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": "1"})

        wait_for(procs, "worker1", "round 5\n", 60)
        net.set_link("b", "down")
        time.sleep(outage_s)
        net.set_link("b", "up")

        codes = procs.wait_all(120)
        assert all(c == 0 for c in codes.values()), "exit codes %s\n%s" % (codes, procs.dump())
        for w in ("worker0", "worker1"):
            assert "OK loop rounds=%d" % ROUNDS in procs.output(w), procs.dump()
        worker1, server = procs.output("worker1"), procs.output("server")
        resends = counter(worker1, "pushes sent again") + counter(worker1, "pulls")
        duplicates = counter(server, "duplicates dropped")  # resent pushes not added again
        pushes, rejected = counter(server, "pushes,"), counter(server, "rejected")
        print("link outage %.1f s: worker 1 resent %d times; the server received %d pushes, "
              "dropped or answered %d duplicates" % (outage_s, resends, pushes, duplicates))
        assert resends > 0, "no resend during the outage?\n" + procs.dump()
        assert counter(server, "rounds,") == ROUNDS, procs.output("server")
        assert pushes - duplicates - rejected == 2 * ROUNDS, \
            "a push was counted twice or lost:\n" + procs.output("server")
        if expect_duplicates:
            assert duplicates > 0, "no duplicate reached the server?\n" + procs.dump()
    assert not [ns for ns in netns_list() if ns.startswith(net.tag)], "namespaces left behind"
