"""A worker process for the Python tests: `ferry_worker.py MODE OUT_FILE [options]`.

Started by conftest.Cluster with its DMLC_* environment; it runs one MODE, writes what
it saw to OUT_FILE (torch.save of a dict) and exits 0. The tests make their assertions
on those results, so a failing check names the worker and the values.
"""

import argparse
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import ferry.torch as bps
from ferry import _core
from backup_modes import mode_backup, mode_backup_sit_out  # noqa: F401
from compression_modes import mode_compression, mode_compression_ddp  # noqa: F401
from point_to_point_modes import (mode_p2p, mode_p2p_errors, mode_p2p_missing,  # noqa: F401
                                  mode_process_sets, mode_sends_switch_transport)
from parity_modes import (mode_hvd_api, mode_hvd_laggard, mode_hvd_programs,  # noqa: F401
                          mode_hvd_reinit, mode_hvd_stall)  # (run by name)

# FERRY_TEST_TENSOR_DEVICE=cuda: mode "ops" makes its tensors there (each worker on
# cuda:LOCAL_RANK % device_count); the results are saved on the CPU.
TENSOR_DEVICE = os.environ.get("FERRY_TEST_TENSOR_DEVICE", "cpu")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64]
SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 7), (1031,), (257, 129), (0,)]


def values(shape, dtype, rank):
    """Small integers (exact in every dtype, sums included), different on every rank."""
    n = 1
    for d in shape:
        n *= d
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + 5) % 101 - 50
    return v.reshape(shape).to(dtype).to(_device())


def outcome_of(fn):
    """None if fn() returns, else (the exception's type name, its message)."""
    try:
        fn()
        return None
    except Exception as e:  # noqa: BLE001 - recorded for the test
        return (type(e).__name__, str(e))


def _device():
    if TENSOR_DEVICE != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", bps.local_rank() % torch.cuda.device_count())


def to_cpu(value):
    """`value` with every tensor in it on the CPU (dicts, lists and tuples walked)."""
    if torch.is_tensor(value):
        return value.cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def mode_ops(args, out):
    rank, size = bps.rank(), bps.size()
    out.update(rank=rank, size=size, local_rank=bps.local_rank(), local_size=bps.local_size(),
               num_servers=bps.num_servers())
    sums, avgs, inplace, asyncs, strided = {}, {}, {}, {}, {}
    for dtype in DTYPES:
        for shape in SHAPES:
            key = (str(dtype), shape)
            t = values(shape, dtype, rank)
            before = t.clone()
            sums[key] = bps.push_pull(t, average=False, name="sum.%s.%s" % key)
            assert torch.equal(t, before), "push_pull modified its input"
            avgs[key] = bps.push_pull(t, average=True, name="avg.%s.%s" % key)
            u = t.clone()
            bps.push_pull_inplace(u, average=False, name="inplace.%s.%s" % key)
            inplace[key] = u
        # Several tensors in flight at once, waited for in reverse order.
        handles = [(shape, bps.push_pull_async(values(shape, dtype, rank), average=False,
                                               name="async.%s.%s" % (dtype, shape),
                                               priority=i))
                   for i, shape in enumerate(SHAPES)]
        for shape, h in reversed(handles):
            while not bps.poll(h):
                time.sleep(0.001)
            asyncs[(str(dtype), shape)] = bps.synchronize(h)
        # Non-contiguous input, out of place and in place.
        base = values((9, 6), dtype, rank)
        view = base.t()[1:, ::2]
        strided[(str(dtype), "out")] = bps.push_pull(view, average=False, name="strided.out.%s" % dtype)
        bps.push_pull_inplace(view, average=False, name="strided.in.%s" % dtype)
        strided[(str(dtype), "in")] = base.clone()
    out.update(sums=sums, avgs=avgs, inplace=inplace, asyncs=asyncs, strided=strided)

    # wait_any: every operation comes back once, whatever order the sums arrive in.
    anys, order = {}, []
    pending = {bps.push_pull_async(values(shape, torch.float32, rank), average=False,
                                   name="any.%s" % (shape,)): shape for shape in SHAPES}
    assert bps.wait_any([], 0) is None
    while pending:
        h = bps.wait_any(list(pending), 10000)
        assert h in pending, "wait_any returned %r, not one of %r" % (h, list(pending))
        order.append(h)
        anys[pending.pop(h)] = bps.synchronize(h)
    out.update(anys=anys, any_order=order)

    # Unnamed calls (names derived from dtype and shape) and the Horovod aliases.
    out["noname"] = bps.push_pull(values((4, 4), torch.float32, rank), average=False)
    out["allreduce_sum"] = bps.allreduce(values((5,), torch.int64, rank), op=bps.Sum, name="ar")
    out["allreduce_avg"] = bps.allreduce(values((5,), torch.float32, rank), name="ar.avg")
    for op in ("Min", "Max", "Product"):
        out["allreduce_" + op.lower()] = bps.allreduce(values((5,), torch.float32, rank),
                                                       op=getattr(bps, op), name="ar." + op)
    out["allreduce_scaled"] = bps.allreduce(values((5,), torch.float32, rank), op=bps.Sum,
                                            prescale_factor=0.5, postscale_factor=4.0,
                                            name="ar.scaled")

    # Autograd: the gradient of push_pull is the push_pull of the gradient.
    x = values((6,), torch.float32, rank).requires_grad_()
    y = bps.push_pull(x, average=False, name="autograd")
    (y * (rank + 1.0)).sum().backward()
    out["autograd_value"], out["autograd_grad"] = y.detach(), x.grad

    # broadcast_parameters: every worker starts from its own random weights.
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    model.register_buffer("steps", torch.tensor(rank * 3 + 1))
    model.register_buffer("mask", torch.tensor([rank % 2 == 0, True, False]))
    out["model_before"] = {k: v.clone() for k, v in model.state_dict().items()}
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    out["model_after"] = {k: v.clone() for k, v in model.state_dict().items()}
    bps.broadcast_parameters(list(model.named_parameters()), root_rank=1)
    out["model_after_root1"] = {k: v.clone() for k, v in model.named_parameters()}

    # broadcast and broadcast_object from rank 1.
    out["broadcast"] = bps.broadcast(values((3, 3), torch.float64, rank), root_rank=1, name="b")
    obj = {"rank": rank, "payload": list(range(rank * 1000)), "text": "from %d" % rank}
    out["object"] = bps.broadcast_object(obj, root_rank=1)

    # broadcast_optimizer_state: rank 0 has Adam state (and its own lr), the others none.
    torch.manual_seed(7)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(net.parameters(), lr=0.01 if rank == 0 else 0.5)
    if rank == 0:
        net(torch.ones(3, 4)).sum().backward()
        opt.step()
    bps.broadcast_optimizer_state(opt, root_rank=0)
    sd = opt.state_dict()
    out["opt_state"] = {pid: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
                        for pid, s in sd["state"].items()}
    out["opt_lr"] = sd["param_groups"][0]["lr"]

    # Refusals, with messages, after init.
    errors = {}
    for what, fn in [
        ("uint8", lambda: bps.push_pull(torch.zeros(3, dtype=torch.uint8), name="u8")),
        ("complex", lambda: bps.push_pull(torch.zeros(3, dtype=torch.complex64), name="c64")),
        ("meta", lambda: bps.push_pull(torch.zeros(3, device="meta"), name="meta")),
        ("rows_devices", lambda: bps.push_pull_rows(
            torch.zeros(2, 3), torch.zeros(2, dtype=torch.int64, device="meta"), "rows.devices",
            num_rows=4)),
        ("root", lambda: bps.broadcast(torch.zeros(2), root_rank=size, name="badroot")),
        # Ferry's own namespace (worker/reserved_tensor_names.h).
        ("reserved", lambda: bps.push_pull(torch.zeros(2), name="__ferry__/broadcast/w")),
        ("reserved_broadcast", lambda: bps.broadcast(torch.zeros(2), root_rank=0, name="__ferry__/x")),
    ]:
        errors[what] = outcome_of(fn)
    out["errors"] = errors

    # CrossBarrier refuses a parameter read outside the forward of its module.
    class Outside(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)

        def forward(self, x):
            # b's weight is read before any module forward (b's own never runs).
            return self.a(F.linear(x, self.b.weight))

    m = Outside()
    cb = bps.CrossBarrier(m, torch.optim.SGD(m.parameters(), lr=0.1),
                          named_parameters=[("outside." + k, v) for k, v in m.named_parameters()])
    outcome = None
    for _ in range(2):
        cb.zero_grad()
        try:
            m(torch.ones(2, 3)).sum().backward()
        except RuntimeError as e:
            outcome = (type(e).__name__, str(e))
            break
        cb.step()
    out["cross_barrier_outside"] = outcome
    out["stats"] = _core.stats()
    bps.barrier()


class SmallCNN(torch.nn.Module):
    """A convolution, a pooling and two linear layers (with biases): mode "collectives"."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = torch.nn.Linear(4 * 4 * 4, 16)
        self.fc2 = torch.nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def mode_collectives(args, out):
    """Allgather, in-place broadcast, broadcast of a model and its optimizer state, and one
    DistributedOptimizer step's averaged gradients beside DDP-gloo's on the same model and
    data (in the same processes: FERRY_TEST_DDP_PORT), on TENSOR_DEVICE."""
    import torch.distributed as dist
    rank, size = bps.rank(), bps.size()
    device = _device()
    # Allgather: rank r sends r + 1 rows (and an int64 vector of r + 2).
    out["allgather"] = bps.allgather(values((rank + 1, 3), torch.float32, rank), name="ag")
    out["allgather_int"] = bps.allgather(values((rank + 2,), torch.int64, rank), name="ag.int")
    out["allgather_device"] = str(out["allgather"].device)
    b = values((4, 5), torch.float64, rank)
    bps.broadcast_(b, root_rank=1, name="bc")
    out["broadcast_"] = b
    # A model and Adam state from rank 0.
    torch.manual_seed(50 + rank)
    model = SmallCNN().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if rank == 0:
        model(torch.ones(2, 1, 8, 8, device=device)).sum().backward()
        opt.step()
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    bps.broadcast_optimizer_state(opt, root_rank=0)
    out["model"] = {k: v.clone() for k, v in model.state_dict().items()}
    out["adam"] = {pid: {k: v.clone() for k, v in st.items() if torch.is_tensor(v)}
                   for pid, st in opt.state_dict()["state"].items()}
    out["adam_devices"] = sorted({str(v.device) for st in opt.state.values() for v in st.values()
                                  if torch.is_tensor(v) and v.dim() > 0})

    # One step's averaged gradients: Ferry's DistributedOptimizer and DDP with gloo.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["FERRY_TEST_DDP_PORT"],
                            rank=rank, world_size=size)
    torch.manual_seed(7)
    ferry_model, ddp_base = SmallCNN().to(device), SmallCNN().to(device)
    ddp_base.load_state_dict(ferry_model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(
        ddp_base, device_ids=[device] if device.type == "cuda" else None)
    dopt = bps.DistributedOptimizer(torch.optim.SGD(ferry_model.parameters(), lr=0.1),
                                    named_parameters=ferry_model.named_parameters())
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(6, 1, 8, 8, generator=g).to(device)
    y = torch.randint(0, 5, (6,), generator=g).to(device)
    F.cross_entropy(ferry_model(x), y).backward()
    dopt.synchronize()
    F.cross_entropy(ddp(x), y).backward()
    out["grads_ferry"] = {k: p.grad.clone() for k, p in ferry_model.named_parameters()}
    out["grads_ddp"] = {k: p.grad.clone() for k, p in ddp_base.named_parameters()}
    with dopt.skip_synchronize():
        dopt.step()
    dist.destroy_process_group()
    out["stats"] = _core.stats()


class DdpNet(torch.nn.Module):
    """Convolution, BatchNorm (buffers: DDP broadcasts them every forward), two linear
    layers, and a branch unused when `skip` is set (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc1 = torch.nn.Linear(4 * 4 * 4, 16)
        self.fc2 = torch.nn.Linear(16, 5)
        self.extra = torch.nn.Linear(16, 5)

    def forward(self, x, skip=False):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        h = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(h) if skip else self.fc2(h) + self.extra(h)


def ddp_steps(model, group, device, rank, steps, accumulate, skip, hook=None, static=False):
    """Trains `model` under DDP over `group`: `steps` steps of SGD with momentum, each over
    `accumulate` micro-batches (the first ones under no_sync()), with communication hook
    `hook` ("fp16", "bf16", "powersgd") and static_graph=`static`. Returns the parameters
    and buffers after each step."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    kwargs = {"static_graph": True} if static else {}
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, process_group=group, find_unused_parameters=skip,
        device_ids=[device] if device.type == "cuda" else None, **kwargs)
    if hook == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                            start_powerSGD_iter=2, random_seed=0)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(500 + rank)
    after = []
    for _ in range(steps):
        opt.zero_grad()
        for m in range(accumulate):
            x = torch.randn(6, 1, 8, 8, generator=g).to(device)
            y = torch.randint(0, 5, (6,), generator=g).to(device)
            if m < accumulate - 1:
                with ddp.no_sync():
                    F.cross_entropy(ddp(x, skip), y).backward()
            else:
                F.cross_entropy(ddp(x, skip), y).backward()
        opt.step()
        after.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return after


def opt_state(opt, model):
    """The model's state once every pending update of a CrossBarrier is applied."""
    opt.synchronize()
    return model.state_dict()


def dist_point_to_point(rank):
    """send/recv through the backend, and a group over a subset of the ranks (new_group: a
    Ferry process set)."""
    import torch.distributed as dist
    got = {}
    if rank == 0:
        dist.send(torch.arange(6.0).reshape(2, 3), dst=1, tag=4)
        dist.isend(torch.full((5,), 7, dtype=torch.int64), dst=1).wait()
    else:
        a = torch.empty(2, 3)
        dist.recv(a, src=0, tag=4)
        b = torch.empty(5, dtype=torch.int64)
        dist.irecv(b, src=0).wait()
        got["recv"], got["irecv"] = a, b
    sub = dist.new_group([1], backend="ferry")  # every rank calls it; only rank 1 is in it
    if rank == 1:
        t = torch.full((3,), 5.0)
        dist.all_reduce(t, group=sub)
        dist.broadcast(t, src=1, group=sub)
        dist.barrier(group=sub)
        got["subgroup_sum"] = t
        got["subgroup_gather"] = outcome_of(
            lambda: dist.all_gather([torch.zeros(1)], torch.zeros(1), group=sub))
    dist.barrier()
    return got


def mode_dist_mismatch(args, out):
    """Over the ferry backend, rank 0 allreduces 4 elements where rank 1 allreduces 3 (then
    6 and 5, asynchronously): the servers refuse both, every rank raises; then an agreeing
    call works."""
    import torch.distributed as dist
    rank, size = bps.rank(), bps.size()
    dist.init_process_group("ferry", init_method="tcp://127.0.0.1:%s" % os.environ["FERRY_TEST_DDP_PORT"],
                            rank=rank, world_size=size)
    dist.all_reduce(torch.ones(2))  # everyone gets going together
    start = time.time()
    try:
        dist.all_reduce(torch.ones(4 if rank == 0 else 3))
        out["error"] = None
    except Exception as e:  # noqa: BLE001 - recorded for the test
        out["error"] = (type(e).__name__, str(e))
    # Asynchronous: the work's future raises it.
    work = dist.all_reduce(torch.ones(6 if rank == 0 else 5), async_op=True)
    try:
        work.get_future().wait()
        out["async_error"] = None
    except Exception as e:  # noqa: BLE001 - recorded for the test
        out["async_error"] = (type(e).__name__, str(e))
    # The group goes on: an agreeing call after the failed ones.
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    out["after"] = t
    out["seconds"] = time.time() - start


def mode_dist(args, out):
    """torch.distributed over the ferry backend beside gloo, in the same processes: every
    collective for every dtype, errors, and DDP trained over both."""
    import torch.distributed as dist
    rank, size = bps.rank(), bps.size()
    device = _device()
    dist.init_process_group("ferry", init_method="tcp://127.0.0.1:%s" % os.environ["FERRY_TEST_DDP_PORT"],
                            rank=rank, world_size=size)
    gloo = dist.new_group(backend="gloo")
    out["backend"] = dist.get_backend()
    got = {}

    def both(key, fn):
        """fn(group) -> result, on ferry and gloo (gloo's error text if it refuses)."""
        got[key] = {"ferry": to_cpu(fn(None))}
        try:
            got[key]["gloo"] = to_cpu(fn(gloo))
        except RuntimeError as e:
            got[key]["gloo_error"] = str(e)

    for dtype in DTYPES:
        d = str(dtype)
        for op in ("SUM", "MIN", "MAX", "PRODUCT"):
            def allreduce(group, op=op, dtype=dtype):
                t = values((3, 5), dtype, rank)
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=group)
                return t
            both((d, "all_reduce", op), allreduce)

        def avg(group, dtype=dtype):
            t = values((7,), dtype, rank)
            dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
            return t
        both((d, "all_reduce", "AVG"), avg)

        def broadcast(group, dtype=dtype):
            t = values((4, 3), dtype, rank)
            dist.broadcast(t, src=1, group=group)
            return t
        both((d, "broadcast"), broadcast)

        def all_gather(group, dtype=dtype):
            parts = [torch.empty((2, 3), dtype=dtype, device=device) for _ in range(size)]
            dist.all_gather(parts, values((2, 3), dtype, rank), group=group)
            return parts
        both((d, "all_gather"), all_gather)

        def all_gather_base(group, dtype=dtype):
            whole = torch.empty((2 * size, 3), dtype=dtype, device=device)
            dist._all_gather_base(whole, values((2, 3), dtype, rank), group=group)
            return whole
        both((d, "_all_gather_base"), all_gather_base)

        def reduce(group, dtype=dtype):
            t = values((5,), dtype, rank)
            dist.reduce(t, dst=1, group=group)
            return t if rank == 1 else None  # elsewhere torch leaves it unspecified
        both((d, "reduce"), reduce)

        def gather(group, dtype=dtype):
            parts = [torch.empty((3,), dtype=dtype, device=device) for _ in range(size)] \
                if rank == 0 else None
            dist.gather(values((3,), dtype, rank), parts, dst=0, group=group)
            return parts
        both((d, "gather"), gather)

        def scatter(group, dtype=dtype):
            t = torch.empty((2, 2), dtype=dtype, device=device)
            parts = [values((2, 2), dtype, 10 + r) for r in range(size)] if rank == 0 else None
            dist.scatter(t, parts, src=0, group=group)
            return t
        both((d, "scatter"), scatter)

        def reduce_scatter(group, dtype=dtype):
            t = torch.empty((3,), dtype=dtype, device=device)
            dist.reduce_scatter(t, [values((3,), dtype, rank * size + r) for r in range(size)],
                                group=group)
            return t
        both((d, "reduce_scatter"), reduce_scatter)

    # Asynchronous calls, waited for in reverse order, and a barrier.
    works = []
    for i in range(4):
        t = values((9,), torch.float32, rank + i)
        works.append((t, dist.all_reduce(t, async_op=True)))
    for t, w in reversed(works):
        w.wait()
    got["async"] = [to_cpu(t) for t, _ in works]
    # Coalesced, two of the tensors of one shape and dtype (two Ferry tensors).
    coalesced = [values((4,), torch.float32, rank), values((4,), torch.float32, rank + 5),
                 values((2, 2), torch.float32, rank)]
    dist.all_reduce_coalesced(coalesced)
    got["coalesced"] = to_cpu(coalesced)
    dist.barrier()

    errors = {}
    for what, fn in [
        ("alltoall", lambda: dist.all_to_all([torch.zeros(1)] * size, [torch.zeros(1)] * size)),
        ("recv_anysource", lambda: dist.recv(torch.zeros(1))),
        ("band", lambda: dist.all_reduce(torch.zeros(1, dtype=torch.int32), op=dist.ReduceOp.BAND)),
        # What init_process_group hands the backend (a rank other than Ferry's), called
        # directly.
        ("wrong_rank", lambda: bps.distributed._create(None, (rank + 1) % size, size, None)),
    ]:
        errors[what] = outcome_of(fn)
    out["errors"] = errors
    out["collectives"] = got
    out["p2p"] = dist_point_to_point(rank)

    # DDP over ferry and over gloo: the same model, data and steps.
    runs = {}
    for name, group in (("ferry", None), ("gloo", gloo)):
        torch.manual_seed(3)
        runs[name] = {
            "plain": ddp_steps(DdpNet().to(device), group, device, rank, 3, 1, False),
            "no_sync_unused": ddp_steps(DdpNet().to(device), group, device, rank, 3, 2, True),
        }
        # torch refuses its bf16 hook without CUDA and NCCL (whatever the backend).
        for hook in ("fp16", "powersgd") + (("bf16",) if device.type == "cuda" else ()):
            torch.manual_seed(3)
            runs[name][hook] = ddp_steps(DdpNet().to(device), group, device, rank, 3, 1, False,
                                         hook=hook)
        torch.manual_seed(3)
        runs[name]["static_graph"] = ddp_steps(DdpNet().to(device), group, device, rank, 3, 1,
                                               False, static=True)
    # ferry.torch.ddp: DDP's reducer idle, Ferry's per-parameter push_pulls and updates.
    torch.manual_seed(3)
    model = DdpNet().to(device)
    wrapped = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device] if device.type == "cuda" else None)
    opt = bps.ddp(wrapped, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    g = torch.Generator().manual_seed(500 + rank)
    overlapped = []
    for _ in range(3):
        opt.zero_grad()
        x = torch.randn(6, 1, 8, 8, generator=g).to(device)
        y = torch.randint(0, 5, (6,), generator=g).to(device)
        F.cross_entropy(wrapped(x), y).backward()
        opt.step()
        overlapped.append({k: v.detach().clone() for k, v in opt_state(opt, model).items()})
    runs["ferry"]["overlapped"] = overlapped
    out["ddp"] = to_cpu(runs)
    out["stats"] = _core.stats()
    dist.destroy_process_group()


def train_batches(shard, batch_size, steps, seed):
    sys.path.insert(0, os.environ["FERRY_EXAMPLES"])
    from digits import epoch_batches
    batches, epoch = [], 0
    while len(batches) < steps:
        batches += epoch_batches(shard, batch_size, epoch, seed)
        epoch += 1
    return batches[:steps]


def mode_train(args, out):
    sys.path.insert(0, os.environ["FERRY_EXAMPLES"])
    from digits import DigitsCNN, load_data, make_optimizer, shard_indices
    torch.set_num_threads(1)
    rank, size = bps.rank(), bps.size()
    x, y, _, _ = load_data()
    shard = shard_indices(len(y), rank, size)
    results = {}
    for config in args.configs.split(","):
        name, _, flavour = config.partition("+")
        torch.manual_seed(args.seed)
        model = DigitsCNN()
        lr = 0.002 if name == "adam" else 0.05
        passes = 2 if flavour == "bpps2" else 1   # backward passes per step
        compression = bps.Compression.fp16 if flavour == "fp16" else bps.Compression.none
        # Each configuration its own gradient names (fp16 declares them as float16).
        opt = bps.DistributedOptimizer(make_optimizer(name, model.parameters(), lr),
                                       named_parameters=[("%s.%s" % (config, k), v)
                                                         for k, v in model.named_parameters()],
                                       compression=compression, backward_passes_per_step=passes)
        bps.broadcast_parameters(model.state_dict(), root_rank=0)
        if flavour == "cb":
            opt = bps.CrossBarrier(model, opt)
        used = []
        batches = train_batches(shard, args.batch_size, args.steps, args.seed)
        for i, idx in enumerate(batches):
            assert all(int(j) % size == rank for j in idx), "a batch left this worker's shard"
            used.append(idx.clone())
            if i % passes == 0:
                opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            if i % passes == passes - 1:
                opt.step()
        if flavour == "cb":
            opt.synchronize()
            opt.remove()
        results[config] = {"params": {k: v.detach().clone() for k, v in model.state_dict().items()},
                           "indices": used, "shard": shard.clone()}
    out["results"] = results


def mode_scheduling(args, out):
    """Changes partition size and credit between push_pulls (every worker at the same
    point) and back; every sum must stay exact."""
    rank, size = bps.rank(), bps.size()
    out["before"] = bps.scheduling()
    sums, seen = [], []
    for step, partition in enumerate([None, 8192, 65536, 8192]):
        if partition is not None:
            bps.set_scheduling(partition, 4 * partition)
        seen.append(bps.scheduling())
        t = torch.arange(50000, dtype=torch.float32) + rank + step
        sums.append(bps.push_pull(t, average=False, name="scheduling.t"))
        bps.step_boundary()
    out["sums"], out["seen"] = sums, seen
    from ferry import _core
    out["stats"] = _core.stats()


def mode_mismatch(args, out):
    rank = bps.rank()
    outcomes = {}
    # Same element count, different shape (the tensor hash differs).
    shape = (3, 4) if rank == 0 else (4, 3)
    # Different element count.
    count = (5,) if rank == 0 else (6,)
    for what, t in [("shape", torch.ones(shape)), ("count", torch.ones(count))]:
        t0 = time.time()
        try:
            bps.push_pull(t, average=False, name="mismatch." + what)
            outcomes[what] = None
        except bps.FerryError as e:
            outcomes[what] = ("FerryError", str(e), getattr(e, "code_name", None), time.time() - t0)
        except Exception as e:  # noqa: BLE001
            outcomes[what] = (type(e).__name__, str(e), None, time.time() - t0)
    out["outcomes"] = outcomes
    # The job itself is healthy: a good tensor still works.
    out["after"] = bps.push_pull(torch.ones(3), average=False, name="after.mismatch")


def mode_join(args, out):
    """Uneven data: rank r has 2 + 2r batches, pushes a gradient-like tensor per batch
    (sum and average), then joins; after the join everyone pushes once more."""
    rank, size = bps.rank(), bps.size()
    batches = lambda r: 2 + 2 * r  # noqa: E731
    sums, avgs = [], []
    for step in range(batches(rank)):
        t = torch.full((1000,), float(rank + 1))
        sums.append(bps.push_pull(t, average=False, name="join.sum"))
        avgs.append(bps.push_pull(t, average=True, name="join.avg"))
    out["last_joined"] = bps.join()
    out["sums"], out["avgs"] = sums, avgs
    out["after"] = bps.push_pull(torch.full((10,), float(rank + 1)), average=False, name="join.after")
    out["batches"] = batches(rank)


def mode_kill(args, out):
    sys.path.insert(0, os.environ["FERRY_EXAMPLES"])
    from digits import DigitsCNN, load_data
    torch.set_num_threads(1)
    x, y, _, _ = load_data()
    model = DigitsCNN()
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    big = torch.ones(1 << 18)
    ready = args.ready
    steps = 0
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            opt.zero_grad()
            F.cross_entropy(model(x[:16]), y[:16]).backward()
            opt.step()
            bps.push_pull_inplace(big, average=True, name="big")
            steps += 1
            if steps == 3:
                open(ready, "w").close()
        out["raised"] = None
    except bps.FerryError as e:
        out["raised"] = ("FerryError", str(e), time.time())
    except Exception as e:  # noqa: BLE001
        out["raised"] = (type(e).__name__, str(e), time.time())
    out["steps"] = steps


def mode_local(args, out):
    """Run by ferry-launch --local-size 2 on each "machine": size() counts processes; exact
    push_pull sums and averages, a broadcast from the last rank, DistributedOptimizer."""
    from ferry import _core
    rank, size = bps.rank(), bps.size()
    out.update(size=size, local_rank=bps.local_rank(), local_size=bps.local_size(), pid=os.getpid(),
               core_local=(_core.local_rank(), _core.local_size()))
    out["sums"] = {str(dtype): bps.push_pull(values((1031,), dtype, rank), average=False,
                                             name="local.sum.%s" % dtype)
                   for dtype in (torch.float32, torch.float16, torch.int64)}
    out["avg"] = bps.push_pull(values((257,), torch.float32, rank), average=True, name="local.avg")
    out["bcast"] = bps.broadcast(torch.full((5,), float(rank)), root_rank=size - 1, name="local.bcast")
    torch.manual_seed(rank)   # different weights on every rank until broadcast_parameters
    model = torch.nn.Linear(4, 1, bias=False)
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    bps.broadcast_parameters(model.state_dict(), root_rank=size - 1)
    out["w0"] = model.weight.detach().clone()
    for step in range(3):
        opt.zero_grad()
        model(torch.full((1, 4), float(rank + 1 + step))).sum().backward()   # grad = rank+1+step
        opt.step()
    out["w"] = model.weight.detach().clone()
    try:
        bps.join()
    except bps.FerryError as e:
        out["join_error"] = str(e)
    try:
        bps.push_pull_rows(torch.ones(1, 4), torch.tensor([0]), "local.rows", num_rows=10)
    except bps.FerryError as e:
        out["rows_error"] = str(e)
    if bps.local_rank() != 0:
        try:
            bps.set_scheduling(65536, 262144)
        except bps.FerryError as e:
            out["scheduling_error"] = str(e)
    bps.barrier()


ROWS_TOTAL, ROWS_DIM, ROWS_ROUNDS = 5000, 4, 4


def rows_of(rank, rnd):
    """Worker `rank`'s row ids in round `rnd`: shared, own, spread and duplicate rows
    (rank 1 pushes none in round 2)."""
    if rank == 1 and rnd == 2:
        return torch.zeros(0, dtype=torch.int64)
    shared = [(i * 5 + rnd) % 32 for i in range(20)]
    own = [2500 + rank * 500 + rnd * 40 + i for i in range(30)]
    spread = [(i * 7919 + rnd * 31 + rank * 13) % ROWS_TOTAL for i in range(100)]
    ids = shared + own + spread + [ROWS_TOTAL - 1, shared[3], own[0]]
    return torch.tensor(ids, dtype=torch.int64)


def row_values(ids, rank, rnd, dtype):
    """Small integers per (row, column, rank, round): exact in float16 sums too."""
    cols = torch.arange(ROWS_DIM, dtype=torch.int64)
    v = (ids.unsqueeze(1) * 3 + cols * 5 + rank * 7 + rnd * 11) % 16 + 1
    return v.to(dtype)


def mode_rows(args, out):
    rank = bps.rank()
    weight = torch.zeros(ROWS_TOTAL, ROWS_DIM)
    bps.declare("emb", weight)                 # declared with the weight's full shape
    results = {}
    for rnd in range(ROWS_ROUNDS):
        ids = rows_of(rank, rnd)
        results[("emb", rnd)] = bps.push_pull_rows(row_values(ids, rank, rnd, torch.float32),
                                                   ids, "emb")
        results[("emb16", rnd)] = bps.push_pull_rows(row_values(ids, rank, rnd, torch.float16),
                                                     ids, "emb16", num_rows=ROWS_TOTAL)
        h = bps.push_pull_rows_async(row_values(ids, rank, rnd, torch.float32), ids, "emb.avg",
                                     average=True, num_rows=ROWS_TOTAL)
        results[("avg", rnd)] = bps.synchronize(h)
    errors = {}
    for what, fn in [
        ("out_of_range", lambda: bps.push_pull_rows(torch.ones(1, ROWS_DIM),
                                                    torch.tensor([ROWS_TOTAL]), "emb")),
        ("int32_ids", lambda: bps.push_pull_rows(torch.ones(1, ROWS_DIM),
                                                 torch.tensor([1], dtype=torch.int32), "emb")),
        ("undeclared", lambda: bps.push_pull_rows(torch.ones(1, ROWS_DIM),
                                                  torch.tensor([1]), "never.declared")),
    ]:
        try:
            fn()
            errors[what] = None
        except Exception as e:  # noqa: BLE001 - recorded for the test
            errors[what] = (type(e).__name__, str(e))
    # The tensor keeps serving after the refusals.
    ids = rows_of(rank, ROWS_ROUNDS)
    results[("emb", ROWS_ROUNDS)] = bps.push_pull_rows(
        row_values(ids, rank, ROWS_ROUNDS, torch.float32), ids, "emb")
    out.update(rows=results, errors=errors, stats=_core.stats())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("out")
    p.add_argument("rest", nargs="*", help="the mode's own arguments")
    p.add_argument("--configs", default="sgd")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ready", default="")
    args = p.parse_args()
    # ferry-launch --local-size starts several copies with one command line.
    args.out = args.out.replace("%LOCAL_RANK%", os.environ.get("FERRY_LOCAL_RANK", "0"))
    out = {}
    bps.init()
    out["rank"] = bps.rank()
    try:
        globals()["mode_" + args.mode](args, out)
    except Exception:  # noqa: BLE001
        out["traceback"] = traceback.format_exc()
        raise
    finally:
        torch.save(to_cpu(out), args.out)
    try:
        bps.shutdown()
    except bps.FerryError as e:
        if args.mode not in ("kill", "hvd_stall"):
            raise
        print("shutdown after the failure: %s" % e, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
