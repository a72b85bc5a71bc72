"""Worker mode for test_backup_workers.py, run by ferry_worker.py (`ferry_worker.py backup
OUT`): ROUNDS averaged push_pulls of one float32 tensor, the rank named by
FERRY_TEST_SLOW_RANK sleeping SLOW_S before each, then a plain sum. Each round's output and
contributors (by name, and of the step: a step boundary follows every round) go into `out`;
the test asserts."""

import os
import time

import torch

import ferry.torch as bps

ROUNDS = 6
N = 1000
SLOW_S = 0.3  # the slow rank's delay before each push: far longer than a round takes


def backup_values(rank, rnd, n=N):
    """Multiples of 1/8 below 7 in magnitude, different for every rank and round: any sum
    of three is exact in float32, whatever order the server adds them in."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + rnd * 5) % 101 - 50
    return v.to(torch.float32) / 8


def mode_backup(args, out):
    rank = bps.rank()
    slow = int(os.environ.get("FERRY_TEST_SLOW_RANK", "-1"))
    rounds = []
    for rnd in range(ROUNDS):
        if rank == slow:
            time.sleep(SLOW_S)
        avg = bps.push_pull(backup_values(rank, rnd), average=True, name="avg")
        named = bps.contributors("avg")
        bps.step_boundary()
        rounds.append({"avg": avg, "contributors": named, "step": bps.contributors()})
    out["rounds"] = rounds
    if rank == slow:
        time.sleep(SLOW_S)
    # Not averaged: waits for every worker, backup workers or not.
    out["sum"] = bps.push_pull(backup_values(rank, ROUNDS), average=False, name="sum")
    out["sum_contributors"] = bps.contributors("sum")


STEPS = 8


def mode_backup_sit_out(args, out):
    """A small model trained with DistributedOptimizer (SGD with momentum); the slow rank
    sleeps before each step it computes, and sits out (optimizer.sit_out()) a step after one
    whose every gradient the sums left out (optimizer.left_out()). `out`: the parameters at the end, the steps sat out."""
    rank = bps.rank()
    slow = int(os.environ.get("FERRY_TEST_SLOW_RANK", "-1"))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    sat_out, sat_last = 0, False
    for step in range(STEPS):
        opt.zero_grad()
        if opt.left_out() and not sat_last:
            opt.sit_out()
            sat_out, sat_last = sat_out + 1, True
        else:
            sat_last = False
            if rank == slow:
                time.sleep(SLOW_S)
            x = backup_values(rank, step, 8 * 16).reshape(8, 16)
            model(x).pow(2).mean().backward()
        opt.step()
    out["params"] = torch.cat([p.detach().flatten() for p in model.parameters()])
    out["sat_out"] = sat_out
