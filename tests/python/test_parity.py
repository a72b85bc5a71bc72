"""horovod.torch / byteps.torch semantics of ferry.torch, with real worker processes
(parity_modes.py), and the stall check naming a rank that skipped a tensor."""

import os
import shutil

import pytest
import torch

# cuda_built() is true in every build with the CUDA data path: where CMake found nvcc.
NVCC_FOUND = bool(shutil.which("nvcc")) or os.path.exists("/usr/local/cuda/bin/nvcc")

HEARTBEAT = {"FERRY_HEARTBEAT_INTERVAL_MS": "200", "FERRY_HEARTBEAT_TIMEOUT_MS": "5000"}
WORKERS = 3


def full(shape, value, dtype=torch.float32):
    return torch.full(shape, value, dtype=dtype)


def raised(outcome, kind, *parts):
    """The outcome (type name, message) is exception `kind` whose message has `parts`."""
    assert outcome[0] == kind, outcome
    for part in parts:
        assert part in outcome[1], (part, outcome[1])
    return True


def test_horovod_and_byteps_semantics(module_cluster):
    c = module_cluster(workers=WORKERS, servers=2, env=dict(HEARTBEAT, FERRY_OP_TIMEOUT_MS="30000"))
    c.start("hvd_api")
    res = sorted(c.wait_workers(timeout=180), key=lambda r: r["rank"])
    for r in res:
        rank = r["rank"]
        assert "traceback" not in r, r.get("traceback")
        # Same name twice in flight: ValueError at the second call; free after synchronize.
        assert raised(r["dup_second"], "ValueError", "same name as another tensor that is "
                      "currently being processed", "'dup'")
        assert torch.equal(r["dup_first"], full((4,), 6.0))
        assert torch.equal(r["dup_again"], full((4,), 6.0))
        assert r["other_kind"][0] == "ok" and torch.equal(r["other_kind"][1], full((4,), 1.0))
        later, earlier = r["noname"]
        assert torch.equal(later, full((3,), 30.0)) and torch.equal(earlier, full((3,), 3.0))
        # postscale * reduce(prescale * x); Average divides by size() too.
        assert torch.equal(r["scaled_sum"], full((5,), 3.0))
        assert torch.equal(r["scaled_avg"], full((5,), 18.0))
        assert torch.equal(r["scaled_inplace"], full((5,), 12.0))
        assert torch.equal(r["scaled_async"], full((5,), -6.0))
        assert torch.equal(r["scaled_int"], full((4,), 18, torch.int32))
        assert raised(r["op_and_average"], "ValueError", "supersedes average")
        assert torch.equal(r["scaled_grad"], full((3,), 12.0))
        # Min, Max, Product on the servers; disagreeing ops fail on every worker.
        ranks = range(WORKERS)
        assert torch.equal(r["min"], torch.tensor([1.0, -3.0, 0.0, 0.5]))
        assert torch.equal(r["max"], torch.tensor([3.0, -1.0, 4.0, 0.5]))
        assert torch.equal(r["product"], torch.tensor([6.0, -6.0, 0.0, 0.125]))
        assert torch.equal(r["max_int"], torch.tensor([2, 0, 7], dtype=torch.int32))
        assert torch.equal(r["product_int64"], torch.tensor([24, -1], dtype=torch.int64))
        assert torch.equal(r["min_half"], torch.tensor([-1.5, 3.0], dtype=torch.float16))
        assert torch.equal(r["max_inplace_scaled"], torch.tensor([6.0, -2.0, 8.0, 1.0]))
        assert torch.equal(r["product_async"], full((3,), float(1 * 2 * 3)))
        assert raised(r["op_mismatch"], "FerryError", "'badop'", "disagree on how to combine")
        assert torch.equal(r["op_after_mismatch"], full((2,), float(max(ranks))))
        # broadcast is differentiable: the root gets the average gradient, the others zeros.
        assert torch.equal(r["broadcast_value"], torch.arange(4, dtype=torch.float32) + 10)
        assert torch.equal(r["broadcast_grad"], full((4,), 2.0 if rank == 1 else 0.0))
        assert r["object_default_root"] == {"from": 0}
        assert raised(r["root_mismatch"], "FerryError", "'badroot'", "disagree",
                      "rank 0: root 0, float32[3]", "rank 1: root 1, float32[3]")
        assert raised(r["dtype_mismatch"], "FerryError", "'baddtype'", "disagree",
                      "float32[3]", "float64[3]")
        assert torch.equal(r["after_mismatch"], full((2,), 2.0))
        # allgather: dim 0 in rank order, any dtype; autograd; objects.
        expected = torch.cat([torch.arange((w + 1) * 3, dtype=torch.float32).reshape(w + 1, 3)
                              + 100 * w for w in range(WORKERS)])
        assert torch.equal(r["gathered"], expected)
        assert torch.equal(r["gathered_int8"],
                           torch.tensor([-1, 0, 0, 1, 1, 1], dtype=torch.int8))
        assert torch.equal(r["gathered_bool"], torch.tensor([True, False, True]))
        assert torch.equal(r["gathered_async"],
                           torch.cat([torch.full((2, 2), w, dtype=torch.int64)
                                      for w in range(WORKERS)]))
        assert torch.equal(r["gathered_empty"], torch.zeros(2, 2))
        assert r["objects"] == [{"rank": w, "text": "x" * w} for w in range(WORKERS)]
        assert torch.equal(r["gather_grad"], full((rank + 1, 2), 2.0))
        assert raised(r["gather_mismatch"], "FerryError", "'g.bad'", "disagree",
                      "rank 0 sent float32[2, 4]", "rank 2 sent float32[2, 3]")
        assert raised(r["gather_scalar"], "FerryError", "rank 0 sent a rank-zero tensor")
        # What Ferry does not offer says so.
        for what, outcome in r["refused"].items():
            kind = "ValueError" if what == "mpi_threads_supported" else "NotImplementedError"
            assert outcome[0] == kind, (what, outcome)
        assert "not supported" in r["refused"]["alltoall"][1]
        assert "op=Min is for allreduce" in r["refused"]["op_min_push_pull"][1]
        assert "FERRY_TRACE_DIR" in r["refused"]["start_timeline"][1]
        assert r["predicates"] == dict(
            cross_rank=0, cross_size=1, is_homogeneous=True, mpi_enabled=False, mpi_built=False,
            gloo_enabled=False, gloo_built=False, nccl_built=0, ddl_built=False, ccl_built=False,
            cuda_built=NVCC_FOUND, rocm_built=False, global_set_size=WORKERS)
        assert torch.equal(r["global_set"], full((2,), 3.0))
        # DistributedOptimizer: op, gradient_predivide_factor, groups, sparse gradients.
        assert torch.equal(r["opt_average"], full((1, 3), 2.0))
        assert torch.equal(r["opt_sum"], full((1, 3), 6.0))
        assert torch.equal(r["opt_predivide"], full((1, 3), 2.0))
        assert torch.equal(r["opt_groups"], full((1, 3), 2.0))
        assert torch.equal(r["opt_num_groups"], full((1, 3), 2.0))
        assert raised(r["opt_bad_groups"], "ValueError", "groups should be a non-negative integer")
        assert raised(r["opt_predivide_sum"], "ValueError", "op != Average")
        assert raised(r["opt_adasum"], "NotImplementedError", "Adasum")
        sparse = torch.zeros(5, 2)
        sparse[0:3] = -1.0 / 3
        sparse[4] = -1.0
        assert torch.allclose(r["sparse_weight"], sparse, atol=1e-7), r["sparse_weight"]
        # A name declared anew with another shape or dtype (worker/tensor_catalog.h).
        n = WORKERS * (WORKERS + 1) // 2
        expected = [full((3,), n), full((5, 2), n), full((3,), n, torch.float64),
                    full((2,), n, torch.int32), full((3,), n)]
        assert all(torch.equal(a, b) for a, b in zip(r["redeclared"], expected)), r["redeclared"]
        assert [tuple(w.shape) for w in r["rebuilt"]] == [(1, 3), (1, 5), (1, 3)]
        assert all(torch.equal(w, full(w.shape, 2.0)) for w in r["rebuilt"]), r["rebuilt"]
        states = r["rebuilt_opt_state"]
        root_states = res[0]["rebuilt_opt_state"]
        for width in (4, 6):
            assert tuple(states[width]["exp_avg"].shape) == (2, width)
            for k, v in states[width].items():
                assert torch.equal(v, root_states[width][k]), (width, k)
            assert states[width]["exp_avg"].abs().sum() > 0  # rank 0 stepped
        for n_, gathered in zip((1, 2), r["regathered"]):
            assert torch.equal(gathered, torch.cat([full((k + n_, 2), float(k))
                                                    for k in range(WORKERS)]))
        assert [t.tolist() for t in r["rebroadcast"]] == [[1.0] * 2, [1.0] * 5]
        assert raised(r["disagree"], "FerryError", "workers disagree on")
        assert torch.equal(r["after_disagree"], full((7,), float(n)))
        # byteps.torch.cross_barrier carries the whole API; CrossBarrier takes num_steps.
        assert r["cross_barrier_api"] == dict(rank=rank, size=WORKERS,
                                              has=["init", "push_pull", "broadcast_parameters",
                                                   "DistributedOptimizer", "declare"])
        assert r["cross_barrier_pending_after_last_step"] == 0


def test_init_shutdown_init_rejoins_under_the_same_rank(cluster):
    c = cluster(workers=2, servers=2, env=HEARTBEAT)
    c.start("hvd_reinit")
    res = sorted(c.wait_workers(timeout=120), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        assert r["initialized_at_end"]
        for session, s in enumerate(r["sessions"]):
            assert (s["rank"], s["size"], s["initialized"]) == (r["rank"], 2, True)
            assert torch.equal(s["sum"], full((3 + session,), 3.0))
            assert torch.equal(s["weight"], full((1, 2 + session), -1.5))  # the average gradient
            assert s["after_shutdown"] is False
            assert raised(s["call_after_shutdown"], "FerryError", "ferry was shut down",
                          "call ferry.torch.init() to join the job again")
    # The workers exited (their final shutdown at exit): the job ended cleanly at once.
    for name in ["scheduler", "server 0", "server 1"]:
        assert c.procs[name].wait(30) == 0, c.logs()


def test_a_worker_still_on_an_old_declaration_is_told_and_named(cluster):
    c = cluster(workers=2, servers=2, env=dict(HEARTBEAT, FERRY_STALL_WARNING_MS="1000"))
    c.start("hvd_laggard")
    res = sorted(c.wait_workers(timeout=90), key=lambda r: r["rank"])
    for r in res:
        assert "traceback" not in r, r.get("traceback")
        assert torch.equal(r["old"], full((10,), 3.0))
        assert torch.equal(r["new"], full((20,), 3.0))
    assert raised(res[1]["refused"], "FerryError", "tensor 'x'",
                  "worker(s) 0 declared the name of tensor", "anew", "the old declaration")
    assert res[0]["waited"] > 2.0
    # The refused operation does not count as submitted: rank 0 names rank 1 meanwhile.
    assert ("stall: push_pull of 'x' (operation 2 under this name) has waited"
            in c.log("worker 0")), c.log("worker 0")
    assert "on rank 0 for rank 1, which has not submitted it" in c.log("worker 0")


def test_a_stall_is_named_on_every_waiting_worker(cluster):
    c = cluster(workers=WORKERS, servers=2,
                env=dict(HEARTBEAT, FERRY_STALL_WARNING_MS="1000", FERRY_STALL_SHUTDOWN_MS="4000",
                         FERRY_OP_TIMEOUT_MS="60000"))
    c.start("hvd_stall")
    res = sorted(c.wait_workers(timeout=90), key=lambda r: r["rank"])
    skipper = WORKERS - 1
    for r in res:
        rank = r["rank"]
        assert "traceback" not in r, r.get("traceback")
        log = c.log("worker %d" % rank)
        if rank == skipper:
            # It waits in a barrier the others never reach: named too.
            assert "stall: barrier (operation 1 under this name) has waited" in log, log
            assert "on rank %d for ranks 0, 1, which have not submitted it" % skipper in log, log
            assert "push_pull of 'skipped'" not in log.split("ending the job")[0], log
        else:
            assert "stall: push_pull of 'skipped' (operation 1 under this name) has waited" in log, log
            assert "on ranks 0, 1 for rank %d, which has not submitted it" % skipper in log, log
        # FERRY_STALL_SHUTDOWN_MS ended the job with both stalls, on every worker.
        assert raised(r["error"], "FerryError", "ending the job (FERRY_STALL_SHUTDOWN_MS=4000)",
                      "push_pull of 'skipped'", "barrier")
        assert 3.5 < r["seconds"] < 40, r["seconds"]
    assert "stall: push_pull of 'skipped'" in c.log("scheduler")


def _half_scaled(t, factor):
    """Horovod's float16 scaling: in float32, rounded once."""
    return (t.float() * factor).half()


def _sparse_adam_reference(size):
    """The weights and sparse gradients _sparse_adam's workers must end with: one process
    stepping SparseAdam with the average of their gradients, over the rows any touched."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.1)
    grads = []
    for step in range(2):
        dense = torch.zeros(10, 3)
        for r in range(size):
            for i in (r, r + 1 + step, 7, 7):
                dense[i] += float(r + 1)
        rows = sorted({i for r in range(size) for i in (r, r + 1 + step, 7)})
        index = torch.tensor([rows])
        grad = torch.sparse_coo_tensor(index, dense[rows] / size, (10, 3)).coalesce()
        emb.weight.grad = grad
        opt.step()
        grads.append(grad)
    return emb.weight.detach(), grads


@pytest.mark.parametrize("workers", [2, 3])
def test_horovod_programs_run_as_under_horovod(cluster, workers):
    c = cluster(workers=workers, servers=2,
                env=dict(HEARTBEAT, FERRY_OP_TIMEOUT_MS="60000", FERRY_LOG_LEVEL="INFO"))
    c.start("hvd_programs")
    res = sorted(c.wait_workers(timeout=180), key=lambda r: r["rank"])
    last = workers - 1
    everyone = float(sum(w + 1 for w in range(workers)))
    without_0 = everyone - 1.0
    third = torch.tensor(1.0 / workers, dtype=torch.float32)  # averages: the sum times 1/size
    weights, grads = _sparse_adam_reference(workers)
    x = torch.tensor([3.0, 7.0, 1000.0, 250.0], dtype=torch.float16)
    pre = _half_scaled(x, 0.1)
    for r in res:
        rank = r["rank"]
        assert "traceback" not in r, r.get("traceback")
        # allgather_async / broadcast_async return at once: not done before the last rank
        # has called them; the barrier-then-synchronize pattern completes.
        if rank != last:
            assert r["polled_early"] == (False, False)
        assert torch.equal(r["late_gathered"],
                           torch.cat([full((w + 1, 2), float(w)) for w in range(workers)]))
        assert torch.equal(r["late_bcast"], full((3,), float(last)))
        assert r["wait_any"] is True
        assert torch.equal(r["wait_any_gathered"], torch.arange(workers, dtype=torch.float32))
        # The same name twice in flight: ValueError on every rank; the first completes.
        for key in ("twice_gather", "twice_bcast"):
            assert r[key][0] == "ValueError" and "same name as another tensor" in r[key][2], r[key]
        gathered = torch.cat([full((2,), float(w + 1)) for w in range(workers)])
        assert torch.equal(r["twice_gather_first"], gathered)
        assert torch.equal(r["twice_gather_again"], gathered)
        assert torch.equal(r["twice_bcast_first"], full((2,), 1.0))
        # join(): tensors first used while rank 0 had joined sum with it as zeros;
        # allgather and broadcast meanwhile raise a RuntimeError (FerryError), as Horovod's.
        assert r["join_last"] == res[0]["join_last"] and r["join_last"] in range(1, workers)
        if rank > 0:
            assert torch.equal(r["joined_avg"], full((3,), without_0) * third)
            assert torch.equal(r["joined_sum"], full((2, 4), without_0))
            assert torch.equal(r["joined_noname"], full((5,), without_0))
            for key in ("joined_gather", "joined_bcast"):
                kind, is_runtime_error, message = r[key]
                assert (kind, is_runtime_error) == ("FerryError", True), r[key]
                assert "rank(s) 0 have joined" in message, message
        assert torch.equal(r["after_avg"], full((3,), everyone) * third)
        assert torch.equal(r["after_sum"], full((2, 4), everyone))
        assert torch.equal(r["after_new"], full((4,), everyone))
        assert torch.equal(r["after_gather"], torch.arange(1, workers + 1, dtype=torch.float32))
        # Sparse gradients stay sparse, over the rows any worker touched: SparseAdam trains.
        for sparse_as_dense in (False, True):
            w, gs = r["sparse_adam.%s" % sparse_as_dense]
            assert torch.allclose(w, weights, atol=1e-6), (sparse_as_dense, w, weights)
            for got, want in zip(gs, grads):
                assert got.is_sparse and torch.equal(got.coalesce().indices(), want.indices())
                assert torch.allclose(got.coalesce().values(), want.values(), atol=1e-6)
        # float16 scale factors: applied in float32 and rounded once.
        total = pre
        for _ in range(workers - 1):
            total = (total.float() + pre.float()).half()
        assert torch.equal(r["half_pre_sum"], total), (r["half_pre_sum"], total)
        assert torch.equal(r["half_post_sum"], _half_scaled(x * workers, 0.1))
        assert torch.equal(r["half_post_avg"], _half_scaled(x * workers, 3.3 / workers))
        # Ferry's own tensors (a broadcast's vote and data) stay out of the INFO log.
        assert "__ferry__" not in c.log("worker %d" % rank), c.log("worker %d" % rank)
