"""Point-to-point sends on a link a gradient fills (common/transport/van.h, "Links").

Two emulated hosts (scripts/netns-cluster) at 500 Mbit/s. On host B, ferry-flow-order's
receiver stands for a server (it takes a 256 MiB gradient as 1024 frames) and for a worker
(it takes point-to-point sends), and counts, in one order, the gradient frames that arrived
before each send. On host A, a worker's Van sends the gradient and, once 64 frames left it,
an 8 MiB point-to-point send to B.

Order, never time: with link scheduling (every policy but fifo and fifo-bucket) the send
arrives before every gradient frame still in the Van when it was made (at most the frames the
kernel already held arrive before it), the held frames go once it arrived, and the gradient
is whole. Without it, TCP shares the link, and gradient frames the Van still held when the
send was made arrive before it.

Needs root and `ip netns`; skips with a message otherwise. The cluster is removed at the end.
"""

import json
import os
import subprocess

import pytest

from deploy_support import FERRY_BIN, SCRIPTS, Procs, need_binaries, need_netns, run

NETNS_CLUSTER = SCRIPTS / "netns-cluster"
RECEIVER = "198.18.1.2"  # worker1's address (netns-cluster's layout)
# Frames the kernel may hold beyond the Van's release count when a send is made: the
# unsent share (FERRY_TCP_NOTSENT_LOWAT, half a frame) and a frame in flight.
KERNEL_FRAMES = 4


@pytest.fixture
def cluster():
    need_netns()
    need_binaries("ferry-flow-order")
    name = "ls%d%s" % (os.getpid(), os.urandom(2).hex())
    code, out = run([NETNS_CLUSTER, "up", "--name", name, "--workers", "2", "--servers", "0",
                     "--rate", "500mbit"], timeout=60)
    assert code == 0, out
    yield name
    subprocess.run([str(NETNS_CLUSTER), "down", "--name", name], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)


def flow_order(cluster, tmp_path, link_scheduling):
    """(sender's JSON, receiver's JSON) of one ferry-flow-order run."""
    probe = FERRY_BIN / "ferry-flow-order"
    with Procs(tmp_path / ("on" if link_scheduling else "off")) as procs:
        (tmp_path / ("on" if link_scheduling else "off")).mkdir(exist_ok=True)
        receiver = procs.start("receiver", [NETNS_CLUSTER, "exec", "--name", cluster, "worker1", "--",
                                            probe, "--role=recv", "--host", RECEIVER,
                                            "--timeout_ms", "90000"], env=os.environ.copy())
        ports = None
        for _ in range(300):
            lines = procs.output("receiver").split("\n")
            if len(lines) > 1 and lines[0].split() and all(p.isdigit() for p in lines[0].split()):
                ports = lines[0].split()
                break
            assert receiver.poll() is None, procs.dump()
            subprocess.run(["sleep", "0.1"])
        assert ports, "the receiver never printed its ports:\n" + procs.dump()
        code, out = run([NETNS_CLUSTER, "exec", "--name", cluster, "worker0", "--", probe,
                         "--role=send", "--server", "%s:%s" % (RECEIVER, ports[0]),
                         "--peer", "%s:%s" % (RECEIVER, ports[1]), "--sends", "1",
                         "--send_bytes", str(8 << 20), "--after_frames", "64",
                         "--link_scheduling=%d" % link_scheduling, "--timeout_ms", "90000"],
                        timeout=120)
        assert code == 0, out + procs.dump()
        assert procs.wait_all(30) == {"receiver": 0}, procs.dump()
        sent = json.loads(out.strip().splitlines()[-1])
        received = json.loads(procs.output("receiver").strip().splitlines()[-1])
    return sent, received


def test_a_send_overtakes_the_gradient_frames_its_worker_still_held(cluster, tmp_path):
    on_sent, on_received = flow_order(cluster, tmp_path, True)
    off_sent, off_received = flow_order(cluster, tmp_path, False)
    for received in (on_received, off_received):
        assert received["frames"] == 1024, received  # every held frame went after all

    released = on_sent["released_before"][0]
    before = on_received["frames_before"][0]
    # Only frames already in the kernel came first; every frame the Van held came after.
    assert before <= released + KERNEL_FRAMES, (on_sent, on_received)
    assert before < 1024
    assert on_sent["link_flows"] >= 1 and on_sent["link_held"] >= 1, on_sent

    # Without link scheduling the gradient's connection keeps its share of the link.
    assert off_sent["link_flows"] == 0 and off_sent["link_held"] == 0, off_sent
    off_before = off_received["frames_before"][0] - off_sent["released_before"][0]
    assert off_before > before - released, (off_sent, off_received, on_sent, on_received)
