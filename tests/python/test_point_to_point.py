"""Point-to-point from Python (docs/pytorch.md, "Point-to-point"): exact delivery in order for
every dtype and sizes from 1 element to 64 MiB, under 1% message drops and with FERRY_SECRET;
bad input named on both ends; a receive that never gets its message named by the stall check
and its deadline."""

import pytest
import torch

from point_to_point_modes import DTYPES, SIZES

HEARTBEAT = {"FERRY_HEARTBEAT_INTERVAL_MS": "200", "FERRY_HEARTBEAT_TIMEOUT_MS": "5000"}


def raised(outcome, kind, *parts):
    return outcome is not None and outcome[0] == kind and all(p in outcome[1] for p in parts)


def run(cluster, mode, workers, env=None, timeout=240, args=()):
    c = cluster(workers=workers, servers=1, env=env)
    c.start(mode, *args)
    res = sorted(c.wait_workers(timeout=timeout), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
    return c, res


def check_ring(res, sizes):
    size = len(res)
    for r in res:
        prev = (r["rank"] - 1) % size
        for dtype in DTYPES:
            for n in sizes if dtype == torch.float32 else SIZES[:4]:
                assert r["received"][(str(dtype), n)]["ok"], (r["rank"], dtype, n)
        assert torch.equal(r["blocking"], torch.full((5, 4), float(prev)))
        assert torch.equal(r["transposed"], torch.arange(12.0).reshape(3, 4).t() + prev)


@pytest.mark.parametrize("env", [
    {},
    {"FERRY_TEST_DROP_PERCENT": "1", "FERRY_RESEND_TIMEOUT_MS": "200"},
    {"FERRY_SECRET": "point-to-point test secret"},
], ids=["plain", "drops", "secret"])
def test_every_dtype_and_size_arrives_exactly_and_in_order(cluster, env):
    # Up to 16 MiB here (64 MiB: the shared-memory test below, on TCP in its first half).
    sizes = SIZES[:-1]
    c, res = run(cluster, "p2p", 3, env, args=[max(sizes)])
    check_ring(res, sizes)
    for r in res:
        assert r["stats"]["p2p_sends"] == r["stats"]["p2p_receives"]
    if env.get("FERRY_TEST_DROP_PERCENT"):
        assert sum(r["stats"]["p2p_resends"] for r in res) > 0


def test_over_the_shared_memory_lane(cluster):
    c, res = run(cluster, "p2p", 2, {"FERRY_SHM": "1"}, args=[SIZES[-1]])
    check_ring(res, SIZES)
    assert sum(r["stats"]["van_shm_sent"] for r in res) > 0


def test_bad_input_is_named_on_both_ends(cluster):
    c, res = run(cluster, "p2p_errors", 2)
    for r in res:
        assert raised(r["no_such_rank"], "FerryError", "send to rank 7", "not another worker's rank")
        assert raised(r["self"], "FerryError", "send to rank %d" % r["rank"], "not another")
    # The receiver names what it expected and what came; the sender learns the same.
    assert raised(res[1]["dtype"], "FerryError", "recv from rank 0 (tag 3", "expects int32[4]",
                  "rank 0 sent float32[4]")
    assert raised(res[0]["dtype"], "FerryError", "send to rank 1 (tag 3", "expects int32[4]")
    assert raised(res[1]["size"], "FerryError", "recv from rank 0 (tag 4", "expects float32[5]",
                  "sent float32[4]")
    assert raised(res[0]["size"], "FerryError", "send to rank 1 (tag 4", "float32[5]")
    assert torch.equal(res[1]["after"], torch.full((3,), 42.0))


def test_a_missing_send_is_named_by_the_stall_check_and_the_deadline(cluster):
    env = dict(HEARTBEAT, FERRY_STALL_WARNING_MS="1000", FERRY_OP_TIMEOUT_MS="5000")
    c, res = run(cluster, "p2p_missing", 2, env, args=["7"])
    assert raised(res[1]["missing"], "FerryError", "recv from rank 0 (tag 9, message 1",
                  "rank 0 never sent it")
    log = c.log("worker 1")
    assert ("stall: point-to-point from rank 0 to rank 1, tag 9 (message 1 under this name) "
            "has waited") in log, log
    assert "for rank 0, which has not sent it" in log, log


def test_process_sets_of_every_shape_sum_over_their_members(cluster):
    from point_to_point_modes import SETS
    c, res = run(cluster, "process_sets", 4, timeout=120)
    for r in res:
        assert r["ids"] == [1, 2, 3, 4, 5]
        for ranks in SETS:
            if r["rank"] not in ranks:
                assert tuple(ranks) not in r["sums"]
                continue
            key = tuple(ranks)
            expect = sum(torch.arange(1000, dtype=torch.float32) + 1000 * m for m in ranks)
            assert torch.equal(r["sums"][key], expect), (r["rank"], ranks)
            assert torch.equal(r["averages"][key], torch.full((7,), sum(ranks) / len(ranks)))
            assert torch.equal(r["broadcasts"][key],
                               torch.full((3,), float(ranks[-1]), dtype=torch.float64))
            assert torch.equal(r["gathers"][key], torch.cat(
                [torch.full((m + 1, 2), m, dtype=torch.int16) for m in ranks]))
        assert torch.equal(r["global"], torch.full((3,), 4.0))
        assert raised(r["outsider"], "ValueError", "rank %d is not a member" % r["rank"])
        # SGD with lr 1: -(the average of the members' (rank + 1)).
        members = [0, 1] if r["rank"] in (0, 1) else [2, 3]
        assert torch.equal(r["weight"], torch.full((4,), -sum(m + 1 for m in members) / 2.0))
        # 1.2 MB in the set: 2 partitions of 1 MiB, then 19 of 64 KiB; exact sums both times.
        assert r["recut"] == [(2, True), (19, True)], r["recut"]


@pytest.mark.parametrize("sends,policy", [("send", None), ("nosend", None), ("send", "credit")],
                         ids=["sends", "no-sends", "credit-set"])
def test_the_default_policy_takes_trirace_transport_once_a_worker_sends(cluster, sends, policy):
    # FERRY_PARTITION_MS set: the sizing boundary decides on loopback too; no shared-memory
    # lane, so that the pushes take TCP (the order queues).
    env = {"FERRY_PARTITION_MS": "2", "FERRY_SHM": "0"}
    if policy:
        env["FERRY_SCHEDULING_POLICY"] = policy
    c, res = run(cluster, "sends_switch_transport", 2, env=env, timeout=120, args=(sends,))
    switched = sends == "send" and policy is None
    for r in res:
        assert r["sums_exact"] == [True] * 5, r["rank"]
        assert r["before"]["policy"] == "credit" and r["before"]["frame_bytes"] == 0
        assert r["after"]["frame_bytes"] == (262144 if switched else 0), r["after"]
        assert r["after"]["policy"] == ("trirace" if switched else "credit")
    assert sends == "nosend" or res[1]["received"]
    # The watermark is the sender's own, from its send on: its pushes go through the order
    # queues beside the send; the receiver's do not (it sent nothing).
    assert (res[0]["data_queued"] > 1) == switched, res[0]["data_queued"]
    assert res[1]["data_queued"] == 0
