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

A second test runs real Ferry workers (scripts/ferry-run on both hosts, a server colocated
on each) under trirace: worker 0 sends activations to worker 1 while both average a
gradient whose partitions go to both servers; every sum is exact and worker 0's counters show
that its sends held the gradient's frames back on its uplink.

Needs root and `ip netns`; skips with a message otherwise. The cluster is removed at the end.
"""

import json
import os
import subprocess
import sys

import pytest

from deploy_support import FERRY_BIN, REPO, SCRIPTS, Procs, need_binaries, need_netns, run

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


WORKER = r"""
import json, sys, torch
import ferry.torch as hvd
hvd.init()
rank = hvd.rank()
grad = torch.full((16 << 20,), float(rank + 1))  # 64 MiB
activation = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB
for step in range(3):
    handle = hvd.allreduce_async(grad, average=False, name="grad")
    for k in range(4):  # each rank sends to the other (one of them pushes to the other host)
        sent = hvd.isend(activation + k + 10 * rank, 1 - rank, tag=k)
        got = hvd.recv(torch.empty(1 << 20), 1 - rank, tag=k)
        assert torch.equal(got, activation + k + 10 * (1 - rank)), (step, k)
        hvd.synchronize(sent)
    total = hvd.synchronize(handle)
    assert torch.equal(total, torch.full((16 << 20,), 3.0)), (step, total[:4])
stats = hvd.ops._stats()
print("STATS " + json.dumps({k: stats[k] for k in ("van_link_flows", "van_link_held")}), flush=True)
hvd.shutdown()
"""


def test_real_workers_sums_stay_exact_while_sends_hold_the_gradient_back(cluster, tmp_path):
    """Both ranks send to each other while they average; whichever pushes partitions to the
    other host's server holds them back while its sends cross (the counters), and every sum
    and every send arrives exact (the script asserts)."""
    need_binaries("ferry-scheduler", "ferry-server")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    common = ["--nnodes", "2", "--servers-per-node", "1", "--master-addr", "198.18.1.1",
              "--master-port", "29400"]
    with Procs(tmp_path) as procs:
        for node in range(2):
            env = dict(os.environ, FERRY_SCHEDULING_POLICY="trirace", FERRY_LOG_LEVEL="WARNING",
                       DMLC_NODE_HOST="198.18.1.%d" % (node + 1), FERRY_BIN=str(FERRY_BIN))
            procs.start("node%d" % node, [NETNS_CLUSTER, "exec", "--name", cluster,
                                          "worker%d" % node, "--", sys.executable,
                                          REPO / "scripts" / "ferry-run"] + common +
                        ["--node-rank", str(node), script], env)
        assert procs.wait_all(240) == {"node0": 0, "node1": 0}, procs.dump()
        outputs = procs.output("node0") + procs.output("node1")
    stats = [json.loads(l.split("STATS ", 1)[1]) for l in outputs.splitlines() if "STATS " in l]
    assert len(stats) == 2, outputs
    assert all(s["van_link_flows"] >= 4 for s in stats), stats
    assert sum(s["van_link_held"] for s in stats) >= 1, stats
