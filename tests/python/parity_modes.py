"""Worker modes for test_parity.py: horovod.torch / byteps.torch semantics, run by
ferry_worker.py (`ferry_worker.py hvd_api OUT`). Each records what it saw in `out`; the
tests assert on the values."""

import os
import time

import torch

import ferry.torch as hvd


def _outcome(fn):
    """(exception type name, message) of fn(), or ("ok", result)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - recorded for the test
        return (type(e).__name__, str(e))


def _names_in_flight(rank, out):
    t = torch.full((4,), float(rank + 1))
    h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
    out["dup_second"] = _outcome(lambda: hvd.allreduce_async(t, name="dup", op=hvd.Sum))
    out["dup_first"] = hvd.synchronize(h)
    # Free again once synchronized.
    out["dup_again"] = hvd.allreduce(t, name="dup", op=hvd.Sum)
    # A broadcast may use the name of an allreduce in flight (another kind), as in Horovod.
    h = hvd.allreduce_async(t, name="shared", op=hvd.Sum)
    out["other_kind"] = _outcome(lambda: hvd.broadcast(t, root_rank=0, name="shared"))
    hvd.synchronize(h)
    # Unnamed operations of one shape in flight together get names of their own.
    a = hvd.allreduce_async(torch.full((3,), float(rank)), op=hvd.Sum)
    b = hvd.allreduce_async(torch.full((3,), 10.0 * rank), op=hvd.Sum)
    out["noname"] = (hvd.synchronize(b), hvd.synchronize(a))


def _scaling(rank, out):
    size = hvd.size()
    x = torch.full((5,), float(rank + 1))
    out["scaled_sum"] = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    out["scaled_avg"] = hvd.allreduce(x, prescale_factor=3.0, postscale_factor=float(size))
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, name="scaled.inplace")
    out["scaled_inplace"] = y
    h = hvd.allreduce_async(x, op=hvd.Sum, postscale_factor=-1.0, name="scaled.async")
    out["scaled_async"] = hvd.synchronize(h)
    z = torch.full((4,), rank + 1, dtype=torch.int32)
    out["scaled_int"] = hvd.allreduce(z, op=hvd.Sum, prescale_factor=3.0, name="scaled.int")
    # Both forms of the op.
    out["op_and_average"] = _outcome(lambda: hvd.allreduce(x, average=True, op=hvd.Sum))
    # Autograd: the gradient is the allreduce of the gradient with the same factors.
    w = torch.ones(3, requires_grad=True)
    (hvd.allreduce(w, op=hvd.Sum, prescale_factor=2.0, name="scaled.grad") * (rank + 1)).sum().backward()
    out["scaled_grad"] = w.grad


def _reductions(rank, out):
    # Min, Max and Product: a server operation beside the sum, every dtype.
    x = torch.tensor([rank + 1.0, -(rank + 1.0), 2.0 * rank, 0.5])
    out["min"] = hvd.allreduce(x, op=hvd.Min, name="min")
    out["max"] = hvd.allreduce(x, op=hvd.Max, name="max")
    out["product"] = hvd.allreduce(x, op=hvd.Product, name="product")
    out["max_int"] = hvd.allreduce(torch.tensor([rank, -rank, 7], dtype=torch.int32), op=hvd.Max)
    out["product_int64"] = hvd.allreduce(torch.tensor([rank + 2, -1], dtype=torch.int64),
                                         op=hvd.Product)
    out["min_half"] = hvd.allreduce(torch.tensor([rank - 1.5, 3.0], dtype=torch.float16),
                                    op=hvd.Min)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Max, prescale_factor=2.0, name="max.inplace")
    out["max_inplace_scaled"] = y
    h = hvd.allreduce_async(torch.full((3,), rank + 1.0), op=hvd.Product, name="product.async")
    out["product_async"] = hvd.synchronize(h)
    # Workers that disagree on the op all fail, naming it.
    op = hvd.Min if rank == 0 else hvd.Max
    out["op_mismatch"] = _outcome(lambda: hvd.allreduce(torch.ones(3), op=op, name="badop"))
    out["op_after_mismatch"] = hvd.allreduce(torch.full((2,), float(rank)), op=hvd.Max,
                                             name="goodop")


def _broadcasts(rank, out):
    x = torch.arange(4, dtype=torch.float32) + 10 * rank
    x.requires_grad_()
    y = hvd.broadcast(x, root_rank=1, name="bgrad")
    (y * (rank + 1)).sum().backward()
    out["broadcast_value"], out["broadcast_grad"] = y.detach(), x.grad
    out["object_default_root"] = hvd.broadcast_object({"from": rank})
    # Disagreements fail on every worker, naming them.
    out["root_mismatch"] = _outcome(
        lambda: hvd.broadcast_(torch.ones(3), root_rank=0 if rank == 0 else 1, name="badroot"))
    dtype = torch.float32 if rank == 0 else torch.float64
    out["dtype_mismatch"] = _outcome(
        lambda: hvd.broadcast_(torch.ones(3, dtype=dtype), root_rank=0, name="baddtype"))
    out["after_mismatch"] = hvd.broadcast(torch.full((2,), float(rank)), root_rank=2,
                                          name="good")


def _allgathers(rank, out):
    size = hvd.size()
    t = torch.arange((rank + 1) * 3, dtype=torch.float32).reshape(rank + 1, 3) + 100 * rank
    out["gathered"] = hvd.allgather(t, name="g")
    out["gathered_int8"] = hvd.allgather(torch.full((rank + 1,), rank - 1, dtype=torch.int8))
    out["gathered_bool"] = hvd.allgather(torch.tensor([rank % 2 == 0]))
    h = hvd.allgather_async(torch.full((2, 2), rank, dtype=torch.int64), name="g.async")
    out["gathered_async"] = hvd.synchronize(h)
    out["gathered_empty"] = hvd.allgather(torch.zeros(0 if rank == 0 else 1, 2), name="g.empty")
    out["objects"] = hvd.allgather_object({"rank": rank, "text": "x" * rank})
    # Autograd: this worker's slice of the average of the gradients.
    x = torch.ones(rank + 1, 2, requires_grad=True)
    (hvd.allgather(x, name="g.grad") * (rank + 1)).sum().backward()
    out["gather_grad"] = x.grad
    out["gather_mismatch"] = _outcome(
        lambda: hvd.allgather(torch.zeros(2, 3 if rank == size - 1 else 4), name="g.bad"))
    out["gather_scalar"] = _outcome(lambda: hvd.allgather(torch.tensor(1.0), name="g.scalar"))


def _refusals(rank, out):
    refused = {}
    for what, fn in [
        ("alltoall", lambda: hvd.alltoall(torch.ones(3))),
        ("reducescatter", lambda: hvd.reducescatter(torch.ones(3))),
        ("grouped_allreduce", lambda: hvd.grouped_allreduce([torch.ones(3)])),
        ("op_min_push_pull", lambda: hvd.DistributedOptimizer(
            torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0), op=hvd.Min)),
        ("op_adasum", lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum)),
        ("broadcast_object_process_set",
         lambda: hvd.broadcast_object(1, process_set=hvd.ProcessSet([0]))),
        ("sync_batch_norm", lambda: hvd.SyncBatchNorm(4)),
        ("start_timeline", lambda: hvd.start_timeline("/tmp/x.json")),
        ("mpi_threads_supported", lambda: hvd.mpi_threads_supported()),
    ]:
        refused[what] = _outcome(fn)
    out["refused"] = refused
    out["predicates"] = dict(
        cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(),
        is_homogeneous=hvd.is_homogeneous(), mpi_enabled=hvd.mpi_enabled(),
        mpi_built=hvd.mpi_built(), gloo_enabled=hvd.gloo_enabled(), gloo_built=hvd.gloo_built(),
        nccl_built=hvd.nccl_built(), ddl_built=hvd.ddl_built(), ccl_built=hvd.ccl_built(),
        cuda_built=hvd.cuda_built(), rocm_built=hvd.rocm_built(),
        global_set_size=hvd.global_process_set.size())
    # The global process set is accepted everywhere.
    out["global_set"] = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="gs",
                                      process_set=hvd.global_process_set)
    hvd.barrier(process_set=hvd.global_process_set)


def _optimizers(rank, out):
    size = hvd.size()

    def one_step(name, **kwargs):
        model = torch.nn.Linear(3, 1, bias=False)
        torch.nn.init.zeros_(model.weight)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=[(name, model.weight)], **kwargs)
        # Every worker's gradient is (rank + 1) everywhere.
        (model(torch.ones(1, 3)).sum() * (rank + 1)).backward()
        opt.step()
        return -model.weight.detach().clone()  # = the averaged (or summed) gradient

    out["opt_average"] = one_step("w.avg")
    out["opt_sum"] = one_step("w.sum", op=hvd.Sum)
    out["opt_predivide"] = one_step("w.pre", gradient_predivide_factor=2.0)
    out["opt_groups"] = one_step("w.groups", groups=2)
    out["opt_num_groups"] = one_step("w.numgroups", num_groups=1)
    out["opt_bad_groups"] = _outcome(lambda: one_step("w.badgroups", groups=-1))
    out["opt_predivide_sum"] = _outcome(
        lambda: one_step("w.badpre", op=hvd.Sum, gradient_predivide_factor=2.0))
    out["opt_adasum"] = _outcome(lambda: one_step("w.adasum", op=hvd.Adasum))
    # Sparse gradients (nn.Embedding(sparse=True)) come back sparse, summed as dense.
    emb = torch.nn.Embedding(5, 2, sparse=True)
    torch.nn.init.zeros_(emb.weight)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=[("emb", emb.weight)], sparse_as_dense=False)
    emb(torch.tensor([rank, 4])).sum().backward()
    opt.step()
    out["sparse_weight"] = emb.weight.detach().clone()
    out["size"] = size


def _redeclarations(rank, out):
    # A name used again with another shape or dtype once its operations completed.
    layouts = [((3,), torch.float32), ((5, 2), torch.float32), ((3,), torch.float64),
               ((2,), torch.int32), ((3,), torch.float32)]
    out["redeclared"] = [hvd.allreduce(torch.full(shape, rank + 1, dtype=dtype), op=hvd.Sum,
                                       name="again")
                         for shape, dtype in layouts]

    # A model built again with the same parameter names and other shapes.
    def train(width):
        model = torch.nn.Linear(width, 1, bias=False)
        torch.nn.init.zeros_(model.weight)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=model.named_parameters())
        (model(torch.ones(1, width)).sum() * (rank + 1)).backward()
        opt.step()
        return -model.weight.detach().clone()  # = the averaged gradient

    out["rebuilt"] = [train(3), train(5), train(3)]
    # Optimizer state of another shape under the same names.
    states = {}
    for width in (4, 6):
        torch.manual_seed(width)
        net = torch.nn.Linear(width, 2)
        opt = torch.optim.Adam(net.parameters(), lr=0.01)
        if rank == 0:
            net(torch.ones(1, width)).sum().backward()
            opt.step()
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        states[width] = {k: v.clone() for k, v in opt.state_dict()["state"][0].items()}
    out["rebuilt_opt_state"] = states
    # allgather and broadcast under one name with another first dimension each time.
    out["regathered"] = [hvd.allgather(torch.full((rank + n, 2), float(rank)), name="ag")
                         for n in (1, 2)]
    out["rebroadcast"] = [hvd.broadcast(torch.full((n,), float(rank)), root_rank=1, name="bc")
                          for n in (2, 5)]
    # Ranks that disagree on a shape under one name: every rank raises, and the job goes on.
    out["disagree"] = _outcome(lambda: hvd.allreduce(torch.ones(3 + rank), op=hvd.Sum,
                                                     name="disagree"))
    out["after_disagree"] = hvd.allreduce(torch.full((7,), float(rank + 1)), op=hvd.Sum,
                                          name="after.disagree")


def _byteps_names(rank, out):
    import ferry.torch.cross_barrier as cb
    out["cross_barrier_api"] = dict(rank=cb.rank(), size=cb.size(),
                                    has=[n for n in ("init", "push_pull", "broadcast_parameters",
                                                     "DistributedOptimizer", "declare")
                                         if hasattr(cb, n)])
    model = torch.nn.Linear(2, 2)
    barrier = cb.CrossBarrier(model, torch.optim.SGD(model.parameters(), lr=0.1), num_steps=2)
    for _ in range(2):
        barrier.zero_grad()
        model(torch.ones(1, 2)).sum().backward()
        barrier.step()
    out["cross_barrier_pending_after_last_step"] = len(barrier._pending)
    barrier.remove()


def mode_hvd_api(args, out):
    rank = hvd.rank()
    out["size"] = hvd.size()
    for part in (_names_in_flight, _scaling, _reductions, _broadcasts, _allgathers, _refusals, _optimizers,
                 _redeclarations, _byteps_names):
        part(rank, out)


def mode_hvd_reinit(args, out):
    """init(), shutdown(), init() in one process, three times, with other shapes under the
    same names and a DistributedOptimizer each time."""
    rank = hvd.rank()
    sessions = []
    for session in range(3):
        record = {"rank": hvd.rank(), "size": hvd.size(), "initialized": hvd.is_initialized()}
        record["sum"] = hvd.allreduce(torch.full((3 + session,), rank + 1.0), op=hvd.Sum, name="r")
        model = torch.nn.Linear(2 + session, 1, bias=False)
        torch.nn.init.zeros_(model.weight)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        (model(torch.ones(1, 2 + session)).sum() * (rank + 1)).backward()
        opt.step()
        record["weight"] = model.weight.detach().clone()
        hvd.shutdown()
        record["after_shutdown"] = hvd.is_initialized()
        record["call_after_shutdown"] = _outcome(lambda: hvd.allreduce(torch.ones(2), name="r"))
        hvd.shutdown()  # idempotent
        hvd.init()
        sessions.append(record)
    out["sessions"] = sessions
    out["initialized_at_end"] = hvd.is_initialized()


def mode_hvd_laggard(args, out):
    """Rank 0 uses 'x' with a new size while rank 1 still uses the old one: rank 1 is told
    at once; rank 0 waits, names rank 1 in the stall check, and completes once rank 1 caught
    up after 3 s."""
    rank = hvd.rank()
    out["old"] = hvd.allreduce(torch.full((10,), rank + 1.0), op=hvd.Sum, name="x")
    if rank == 1:
        out["refused"] = _outcome(lambda: hvd.allreduce(torch.ones(10), op=hvd.Sum, name="x"))
        time.sleep(3)
    start = time.time()
    out["new"] = hvd.allreduce(torch.full((20,), rank + 1.0), op=hvd.Sum, name="x")
    out["waited"] = time.time() - start


def mode_hvd_stall(args, out):
    """Rank size-1 never issues push_pull 'skipped': it goes to a barrier instead, where
    the others never come. The stall check names both on the waiting workers, then ends
    the job (FERRY_STALL_SHUTDOWN_MS)."""
    rank, size = hvd.rank(), hvd.size()
    hvd.allreduce(torch.ones(2), name="before")  # everyone gets going together
    start = time.time()
    if rank == size - 1:
        out["error"] = _outcome(lambda: hvd.barrier())
    else:
        out["error"] = _outcome(lambda: hvd.allreduce(torch.ones(3), name="skipped"))
    out["seconds"] = time.time() - start


# ----------------------------------------------------------------------------- Horovod programs
# The patterns Horovod users write, each as Horovod runs it (mode_hvd_programs).

def _signal(args, name):
    """A file beside the results: what one worker tells the others without Ferry."""
    open(os.path.join(os.path.dirname(args.out), name), "w").close()


def _await_signal(args, name, timeout=120):
    path = os.path.join(os.path.dirname(args.out), name)
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError("no signal %s from the other workers within %d s" % (name, timeout))
        time.sleep(0.01)


def _error_kind(fn):
    """(type name, is a RuntimeError, message) of what fn() raised; ("ok", False, result)."""
    try:
        return ("ok", False, fn())
    except Exception as e:  # noqa: BLE001 - recorded for the test
        return (type(e).__name__, isinstance(e, RuntimeError), str(e))


def _async_collectives(rank, args, out):
    """allgather_async and broadcast_async return at once: the last rank issues its calls
    only once the others have polled theirs, and everyone then waits in a barrier before
    synchronizing (Horovod's pattern that a blocking call deadlocks)."""
    size = hvd.size()
    last = size - 1
    x = torch.full((rank + 1, 2), float(rank))
    if rank != last:
        g = hvd.allgather_async(x, name="late.gather")
        b = hvd.broadcast_async(torch.full((3,), float(rank)), root_rank=last, name="late.bcast")
        out["polled_early"] = (hvd.poll(g), hvd.poll(b))
        _signal(args, "polled.%d" % rank)
    else:
        for r in range(last):
            _await_signal(args, "polled.%d" % r)
        g = hvd.allgather_async(x, name="late.gather")
        b = hvd.broadcast_async(torch.full((3,), float(rank)), root_rank=last, name="late.bcast")
    hvd.barrier()
    out["late_gathered"] = hvd.synchronize(g)
    out["late_bcast"] = hvd.synchronize(b)
    h = hvd.allgather_async(torch.full((1,), float(rank)), name="wait_any.gather")
    out["wait_any"] = hvd.wait_any([h], 60000) == h
    out["wait_any_gathered"] = hvd.synchronize(h)


def _duplicate_names(rank, out):
    """The same name twice in flight: ValueError at the second call on every rank, for
    allgather and broadcast as for allreduce; the first still completes."""
    x = torch.full((2,), float(rank + 1))
    g = hvd.allgather_async(x, name="twice.gather")
    out["twice_gather"] = _error_kind(lambda: hvd.allgather_async(x, name="twice.gather"))
    b = hvd.broadcast_async(x, root_rank=0, name="twice.bcast")
    out["twice_bcast"] = _error_kind(lambda: hvd.broadcast_async(x, root_rank=0, name="twice.bcast"))
    out["twice_gather_first"] = hvd.synchronize(g)
    out["twice_bcast_first"] = hvd.synchronize(b)
    out["twice_gather_again"] = hvd.allgather(x, name="twice.gather")


def _join_with_new_tensors(rank, out):
    """Rank 0 runs out of data first; the others allreduce tensors it never used (named,
    unnamed, of new shapes), and try an allgather and a broadcast, before they join too.
    Afterwards every worker uses those names."""
    if rank == 0:
        out["join_last"] = hvd.join()
    else:
        value = float(rank + 1)
        out["joined_avg"] = hvd.allreduce(torch.full((3,), value), name="fresh.avg")
        out["joined_sum"] = hvd.allreduce(torch.full((2, 4), value), op=hvd.Sum, name="fresh.sum")
        out["joined_noname"] = hvd.allreduce(torch.full((5,), value), op=hvd.Sum)
        out["joined_gather"] = _error_kind(lambda: hvd.allgather(torch.ones(1), name="joined.g"))
        out["joined_bcast"] = _error_kind(
            lambda: hvd.broadcast(torch.ones(2), root_rank=1, name="joined.b"))
        out["join_last"] = hvd.join()
    value = float(rank + 1)
    out["after_avg"] = hvd.allreduce(torch.full((3,), value), name="fresh.avg")
    out["after_sum"] = hvd.allreduce(torch.full((2, 4), value), op=hvd.Sum, name="fresh.sum")
    out["after_new"] = hvd.allreduce(torch.full((4,), value), op=hvd.Sum, name="after.join")
    out["after_gather"] = hvd.allgather(torch.full((1,), value), name="joined.g")


def _sparse_adam(rank, out):
    """nn.Embedding(sparse=True) with SparseAdam through DistributedOptimizer, with
    sparse_as_dense False and True: gradients stay sparse and the weights train."""
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(
            torch.optim.SparseAdam(emb.parameters(), lr=0.1),
            named_parameters=[("emb.%s.weight" % sparse_as_dense, emb.weight)],
            sparse_as_dense=sparse_as_dense)
        grads = []
        for step in range(2):
            opt.zero_grad()
            ids = torch.tensor([rank, rank + 1 + step, 7, 7])
            (emb(ids) * (rank + 1)).sum().backward()
            opt.step()
            grads.append(emb.weight.grad.clone())
        out["sparse_adam.%s" % sparse_as_dense] = (emb.weight.detach().clone(), grads)


_HALF = torch.float16


def _float16_scaling(rank, out):
    """float16 with scale factors, scaled in float32 and rounded once (Horovod's way)."""
    x = torch.tensor([3.0, 7.0, 1000.0, 250.0], dtype=_HALF)
    out["half_pre_sum"] = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.1, name="half.pre")
    out["half_post_sum"] = hvd.allreduce(x, op=hvd.Sum, postscale_factor=0.1, name="half.post")
    out["half_post_avg"] = hvd.allreduce(x, postscale_factor=3.3, name="half.avg")


def mode_hvd_programs(args, out):
    rank = hvd.rank()
    _async_collectives(rank, args, out)
    _duplicate_names(rank, out)
    _join_with_new_tensors(rank, out)
    _sparse_adam(rank, out)
    _float16_scaling(rank, out)
