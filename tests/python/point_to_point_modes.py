"""Worker modes for test_point_to_point.py, run by ferry_worker.py (`ferry_worker.py MODE OUT`):
point-to-point sends and receives between workers, and process sets, from Python. Each
result goes into `out`; the test asserts."""

import torch

import ferry.torch as bps
from ferry import _core
from compression_modes import _outcome  # a call's error, recorded for the test

# Element counts from 1 to 64 MiB of float32 (16 Mi elements).
SIZES = [1, 3, 1000, 65536 + 7, 1 << 22, 1 << 24]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
          torch.uint8, torch.int8, torch.int16, torch.bool]


def values(n, src, tag, dtype):
    """What rank `src` sends under `tag`: distinct per (n, src, tag), exact in every dtype."""
    v = (torch.arange(n, dtype=torch.int64) * 31 + src * 7 + tag * 3) % 97
    return (v % 2).to(torch.bool) if dtype == torch.bool else v.to(dtype)


def mode_p2p(args, out):
    """Ring: every rank sends to the next and receives from the previous, every dtype and
    size up to args[0] elements, several messages per tag in flight at once (order), then
    blocking calls."""
    rank, size = bps.rank(), bps.size()
    largest = int(args.rest[0])
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    received = {}
    for dtype in DTYPES:
        for n in [s for s in SIZES if s <= largest] if dtype == torch.float32 else SIZES[:4]:
            sends = [bps.isend(values(n, rank, tag, dtype), nxt, tag=tag) for tag in (0, 1)]
            # Three messages under one tag, received in order.
            more = [bps.isend(values(n, rank, 10 + k, dtype), nxt, tag=2) for k in range(3)]
            bufs = {tag: torch.empty(n, dtype=dtype) for tag in (1, 0)}
            recvs = [bps.irecv(bufs[tag], prev, tag=tag) for tag in (1, 0)]  # other order
            ordered = [bps.irecv(torch.empty(n, dtype=dtype), prev, tag=2) for _ in range(3)]
            for h in sends + more + recvs:
                bps.synchronize(h)
            got = [bps.synchronize(h) for h in ordered]
            key = (str(dtype), n)
            received[key] = {"ok": all(torch.equal(bufs[t], values(n, prev, t, dtype)) for t in (0, 1))
                             and all(torch.equal(got[k], values(n, prev, 10 + k, dtype))
                                     for k in range(3))}
    out["received"] = received
    # Blocking calls: even ranks send first, odd ranks receive first.
    x = torch.full((5, 4), float(rank))
    y = torch.empty(5, 4)
    if rank % 2 == 0:
        bps.send(x, nxt, tag=7)
        bps.recv(y, prev, tag=7)
    else:
        bps.recv(y, prev, tag=7)
        bps.send(x, nxt, tag=7)
    out["blocking"] = y
    # A non-contiguous tensor and a view.
    z = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() + rank
    zr = torch.empty(4, 3)
    h = bps.isend(z, nxt, tag=8)
    bps.recv(zr, prev, tag=8)
    bps.synchronize(h)
    out["transposed"] = zr
    out["stats"] = _core.stats()


def mode_p2p_errors(args, out):
    """Bad input: a rank that does not exist, this rank itself, and a dtype and a size that
    differ between sender and receiver: both ends raise, naming rank, tag and tensor."""
    rank, size = bps.rank(), bps.size()
    out["no_such_rank"] = _outcome(lambda: bps.send(torch.ones(3), size + 5))
    out["self"] = _outcome(lambda: bps.send(torch.ones(3), rank))
    peer = 1 - rank
    if rank == 0:
        out["dtype"] = _outcome(lambda: bps.send(torch.ones(4), peer, tag=3))
        out["size"] = _outcome(lambda: bps.send(torch.ones(4), peer, tag=4))
    else:
        out["dtype"] = _outcome(lambda: bps.recv(torch.empty(4, dtype=torch.int32), peer, tag=3))
        out["size"] = _outcome(lambda: bps.recv(torch.empty(5), peer, tag=4))
    # After the errors the pair still works.
    if rank == 0:
        bps.send(torch.full((3,), 42.0), peer, tag=5)
    else:
        out["after"] = bps.recv(torch.empty(3), peer, tag=5)
    bps.barrier()


def mode_p2p_missing(args, out):
    """Rank 1 waits for a send rank 0 never makes: its receive fails at the deadline, naming
    rank 0; the stall check names rank 0 in the logs before."""
    if bps.rank() == 1:
        out["missing"] = _outcome(lambda: bps.recv(torch.empty(3), 0, tag=9))
    else:
        import time
        time.sleep(float(args.rest[0]))
    bps.barrier()


SETS = [[0, 1], [2, 3], [0, 1, 2], [1, 2, 3], [3]]


def mode_process_sets(args, out):
    """Sets of every shape (disjoint, overlapping, one rank) added on every rank in one order;
    each member sums, averages and broadcasts within its sets; a rank outside a set that calls
    its collective is told."""
    rank = bps.rank()
    sets = [bps.add_process_set(ranks) for ranks in SETS]
    out["ids"] = [ps.process_set_id for ps in sets]
    out["sums"], out["averages"], out["broadcasts"] = {}, {}, {}
    for ps in sets:
        if not ps.included():
            continue
        key = tuple(ps.ranks)
        x = torch.arange(1000, dtype=torch.float32) + 1000 * rank
        out["sums"][key] = bps.allreduce(x, op=bps.Sum, name="x", process_set=ps)
        out["averages"][key] = bps.synchronize(
            bps.allreduce_async(torch.full((7,), float(rank)), name="avg", process_set=ps))
        b = torch.full((3,), float(rank), dtype=torch.float64)
        bps.broadcast_(b, root_rank=ps.ranks[-1], name="b", process_set=ps)
        out["broadcasts"][key] = b
        bps.barrier(process_set=ps)
        out.setdefault("gathers", {})[key] = bps.allgather(
            torch.full((rank + 1, 2), rank, dtype=torch.int16), name="g", process_set=ps)
    # Every set's name "x" is its own tensor; the global set's too.
    out["global"] = bps.allreduce(torch.ones(3), op=bps.Sum, name="x")
    outsider = next(ps for ps in sets if not ps.included())
    out["outsider"] = _outcome(lambda: bps.allreduce(torch.ones(3), name="y", process_set=outsider))
    # DistributedOptimizer within a set: the gradient is averaged over its members.
    mine = sets[0] if rank in (0, 1) else sets[1]
    w = torch.nn.Parameter(torch.zeros(4))
    opt = bps.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)],
                                   process_set=mine)
    (w * (rank + 1)).sum().backward()
    opt.step()
    out["weight"] = w.detach().clone()
    # A set's tensors follow the global set's partition size: set_scheduling re-cuts both.
    x = torch.arange(300000, dtype=torch.float32)  # 1.2 MB
    recut = []
    for partition in (None, 65536):
        if partition:
            bps.set_scheduling(partition, 4 * partition)
        before = _core.stats()["partitions_pushed"]
        total = bps.allreduce(x, op=bps.Sum, name="big", process_set=mine)
        recut.append((_core.stats()["partitions_pushed"] - before,
                      torch.equal(total, 2 * torch.arange(300000, dtype=torch.float32))))
    out["recut"] = recut
    for ps in sets:
        bps.remove_process_set(ps)


def mode_sends_switch_transport(args, out):
    """Rank 0 sends rank 1 one message (unless the argument is "nosend"), then both push_pull a
    1.2 MB tensor over 4 iterations with step boundaries: under the default policy, every
    worker takes trirace's frames at the third boundary when any worker sent."""
    rank = bps.rank()
    if args.rest[0] == "send":
        if rank == 0:
            bps.send(torch.arange(1000, dtype=torch.float32), 1, tag=5)
        else:
            got = bps.recv(torch.empty(1000), 0, tag=5)
            out["received"] = torch.equal(got, torch.arange(1000, dtype=torch.float32))
    out["before"] = bps.scheduling()
    out["sums_exact"] = []
    for it in range(4):
        x = torch.arange(300000, dtype=torch.float32) + rank + it
        s = bps.allreduce(x, op=bps.Sum, name="g")
        out["sums_exact"].append(torch.equal(s, 2 * torch.arange(300000, dtype=torch.float32)
                                             + 1 + 2 * it))
        bps.ops.step_boundary()
    out["after"] = bps.scheduling()
    x = torch.full((300000,), float(rank + 1))
    out["sums_exact"].append(torch.equal(bps.allreduce(x, op=bps.Sum, name="g"),
                                         torch.full((300000,), 3.0)))
    out["data_queued"] = bps.ops._stats().get("van_data_queued", 0)
