"""torch.distributed's "ferry" backend on 2 workers and 2 servers: every collective for
every dtype against gloo's result in the same processes (or, where gloo refuses one, against
the exact expectation), asynchronous calls, the refusals, and DDP trained over ferry equal,
parameter for parameter and bit for bit, to DDP over gloo (plain; with no_sync() gradient
accumulation and an unused branch). On the host path, the fake device path and CUDA."""

import pytest
import torch

from conftest import DEVICE_PATHS, free_port, run_on_path
from ferry_worker import DTYPES, values

WORKERS = 2


@pytest.fixture(scope="module", params=DEVICE_PATHS)
def results(module_cluster, request):
    return run_on_path(module_cluster, request.param, "dist",
                       {"FERRY_PARTITION_BYTES": "1024", "FERRY_TEST_DDP_PORT": str(free_port())},
                       timeout=200)


def each(shape, dtype, ranks=range(WORKERS)):
    return [values(shape, dtype, r) for r in ranks]


def expected(key, rank):
    """The exact result of collective `key` on `rank` (as values() fills the inputs)."""
    d, kind = key[0], key[1]
    dtype = getattr(torch, d.replace("torch.", ""))
    wide = lambda ts: [t.to(torch.float64) for t in ts]  # noqa: E731
    if kind == "all_reduce":
        xs = each((3, 5), dtype) if key[2] != "AVG" else each((7,), dtype)
        if key[2] == "SUM":
            return sum(wide(xs)).to(dtype)
        if key[2] == "AVG":
            total = sum(x.to(torch.int64) for x in xs)
            if dtype.is_floating_point:
                return (total.to(torch.float64) / WORKERS).to(dtype)
            return torch.div(total, WORKERS, rounding_mode="trunc").to(dtype)
        if key[2] == "MIN":
            return torch.minimum(*xs)
        if key[2] == "MAX":
            return torch.maximum(*xs)
        return (wide(xs)[0] * wide(xs)[1]).to(dtype)
    if kind == "broadcast":
        return values((4, 3), dtype, 1)
    if kind == "all_gather":
        return each((2, 3), dtype)
    if kind == "_all_gather_base":
        return torch.cat(each((2, 3), dtype))
    if kind == "reduce":
        return sum(wide(each((5,), dtype))).to(dtype) if rank == 1 else None
    if kind == "gather":
        return each((3,), dtype) if rank == 0 else None
    if kind == "scatter":
        return values((2, 2), dtype, 10 + rank)
    if kind == "reduce_scatter":
        return sum(wide([values((3,), dtype, r * WORKERS + rank) for r in range(WORKERS)])).to(dtype)
    raise KeyError(key)


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_the_backend_is_ferry(results):
    for r in results:
        assert r["backend"] == "ferry"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_collective_equals_gloo_or_the_exact_result(results, dtype):
    compared = 0
    for r in results:
        for key, outcome in r["collectives"].items():
            if key in ("async", "coalesced") or key[0] != str(dtype):
                continue
            want = expected(key, r["rank"])
            assert same(outcome["ferry"], want), (r["rank"], key, outcome["ferry"], want)
            if "gloo" in outcome:
                assert same(outcome["ferry"], outcome["gloo"]), (r["rank"], key, outcome)
                compared += 1
    assert compared > 0 or dtype == torch.bfloat16, "gloo ran none of the %s collectives" % dtype


def test_coalesced_allreduce_of_tensors_of_one_shape(results):
    for r in results:
        got = r["collectives"]["coalesced"]
        want = [sum(values((4,), torch.float32, k) for k in range(WORKERS)),
                sum(values((4,), torch.float32, k + 5) for k in range(WORKERS)),
                sum(values((2, 2), torch.float32, k) for k in range(WORKERS))]
        for g, w in zip(got, want):
            assert torch.equal(g, w), (r["rank"], g, w)


def test_asynchronous_calls_complete_in_any_order_of_waits(results):
    for r in results:
        for i, got in enumerate(r["collectives"]["async"]):
            want = sum(values((9,), torch.float32, k + i) for k in range(WORKERS))
            assert torch.equal(got, want), (r["rank"], i)


def test_refusals_name_the_call(results):
    for r in results:
        e = r["errors"]
        assert e["alltoall"][0] == "RuntimeError" and "alltoall" in e["alltoall"][1], e["alltoall"]
        assert "recv_anysource is not supported" in e["recv_anysource"][1], e["recv_anysource"]
        assert "BAND" in e["band"][1] and "SUM, AVG, MIN, MAX and PRODUCT" in e["band"][1]
        assert "to torch.distributed but worker %d to Ferry" % r["rank"] in e["wrong_rank"][1]


def test_send_recv_and_a_subgroup_run_on_ferry(results):
    got = results[1]["p2p"]
    assert torch.equal(got["recv"], torch.arange(6.0).reshape(2, 3))
    assert torch.equal(got["irecv"], torch.full((5,), 7, dtype=torch.int64))
    assert torch.equal(got["subgroup_sum"], torch.full((3,), 5.0))  # a set of one rank
    assert "all_gather" in got["subgroup_gather"][1] or "allgather" in got["subgroup_gather"][1]


def test_ddp_over_ferry_equals_ddp_over_gloo_bit_for_bit(results):
    """Plain; no_sync() accumulation with an unused branch; DDP's fp16, PowerSGD (and with
    CUDA, bf16) communication hooks; static_graph."""
    runs = {"plain", "no_sync_unused", "fp16", "powersgd", "static_graph"}
    if results[0]["path"] == "cuda":
        runs.add("bf16")  # torch refuses its bf16 hook without CUDA and NCCL
    for r in results:
        assert set(r["ddp"]["gloo"]) == runs, sorted(r["ddp"]["gloo"])
        for run in sorted(runs):
            check_ddp_run(r, results, run)


def check_ddp_run(r, results, run):
    """Worker r's DDP over ferry equals its DDP over gloo after every step of `run`, and its
    parameters equal rank 0's (DDP keeps the replicas equal; BatchNorm's running statistics
    are each rank's own after its last forward, as under gloo)."""
    ferry, gloo = r["ddp"]["ferry"][run], r["ddp"]["gloo"][run]
    assert len(ferry) == len(gloo) == 3
    for step, (a, b) in enumerate(zip(ferry, gloo)):
        for k in b:
            assert torch.equal(a[k], b[k]), "worker %d, %s, step %d, %s: ferry %s, gloo %s" % (
                r["rank"], run, step + 1, k, a[k].flatten()[:3], b[k].flatten()[:3])
    for k, v in results[0]["ddp"]["ferry"][run][-1].items():
        if "running_" not in k and "num_batches" not in k:
            assert torch.equal(ferry[-1][k], v), (r["rank"], run, k)


def test_shapes_that_differ_across_ranks_raise_on_every_rank(cluster):
    c = cluster(workers=WORKERS, servers=2, env={"FERRY_TEST_DDP_PORT": str(free_port())})
    c.start("dist_mismatch")
    for r in sorted(c.wait_workers(timeout=90), key=lambda r: r["rank"]):
        assert "traceback" not in r, r.get("traceback")
        for key, mine in (("error", 4 if r["rank"] == 0 else 3),
                          ("async_error", 6 if r["rank"] == 0 else 5)):
            assert r[key] is not None, "rank %d: the mismatched all_reduce returned" % r["rank"]
            name = "dist.0.allreduce.float32.%d" % mine
            assert "workers disagree" in r[key][1] and name in r[key][1], r[key]
        assert torch.equal(r["after"], torch.full((3,), 3.0)), r["after"]
        assert r["seconds"] < 40, r["seconds"]


def test_ferry_torch_ddp_equals_plain_ddp_step_for_step(results):
    """ferry.torch.ddp (DDP's reducer idle, per-parameter updates gated on their own sums)
    against plain DDP over gloo on the same model and data: bit for bit after every step."""
    for r in results:
        ours, plain = r["ddp"]["ferry"]["overlapped"], r["ddp"]["gloo"]["plain"]
        for step, (a, b) in enumerate(zip(ours, plain)):
            for k in b:
                assert torch.equal(a[k], b[k]), "worker %d, step %d, %s: %s against %s" % (
                    r["rank"], step + 1, k, a[k].flatten()[:3], b[k].flatten()[:3])


def test_the_device_path_carried_the_fake_and_cuda_runs(results):
    for r in results:
        staged = r["stats"]["partitions_staged"]
        assert (staged == 0) == (r["path"] == "host"), (r["path"], staged)


# ----------------------------------------------------------------------------- ferry-run

def ferry_run(args, timeout=240, env=None):
    import subprocess
    from conftest import FERRY_BIN, PYTHON, REPO, base_env
    cmd = [PYTHON, str(REPO / "scripts" / "ferry-run")] + list(args)
    return subprocess.run(cmd, env=base_env(dict({"FERRY_BIN": str(FERRY_BIN)}, **(env or {}))),
                          capture_output=True, text=True, timeout=timeout)


def accuracy(stdout):
    import re
    m = re.search(r"test accuracy ([0-9.]+) .* backend (\w+)", stdout)
    assert m, stdout[-3000:]
    return float(m.group(1)), m.group(2)


def test_a_plain_ddp_program_trains_alike_on_ferry_and_gloo():
    """examples/ddp_digits.py, launched by ferry-run --standalone, its backend by flag alone:
    the same accuracy (the same training: DDP's averages are exact with 2 processes)."""
    from conftest import EXAMPLES
    got = {}
    for backend in ("ferry", "gloo"):
        r = ferry_run(["--standalone", "--nproc-per-node", "2", str(EXAMPLES / "ddp_digits.py"),
                       "--backend", backend, "--epochs", "3", "--min-accuracy", "0.85"])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        got[backend] = accuracy(r.stdout)
    assert got["ferry"][1] == "ferry" and got["gloo"][1] == "gloo"
    assert got["ferry"][0] == got["gloo"][0], got


def test_ferry_run_two_nodes_on_one_machine(tmp_path):
    """--nnodes 2: two ferry-run processes (node ranks 0 and 1) on loopback, options written
    both ways (--opt V, --opt=V, underscores), a module run with -m."""
    from conftest import EXAMPLES
    import subprocess
    from conftest import FERRY_BIN, PYTHON, REPO, base_env
    port = free_port()
    common = ["--nnodes=2", "--nproc_per_node", "1", "--master-addr", "127.0.0.1",
              "--master-port=%d" % port, "--servers-per-node", "1"]
    env = base_env({"FERRY_BIN": str(FERRY_BIN), "DMLC_NODE_HOST": "127.0.0.1",
                    "PYTHONPATH": str(EXAMPLES) + ":" + base_env()["PYTHONPATH"]})
    procs = [subprocess.Popen([PYTHON, str(REPO / "scripts" / "ferry-run")] + common +
                              ["--node-rank", str(n), "-m", "ddp_digits", "--backend", "ferry",
                               "--epochs", "2"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for n in (0, 1)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for n, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "node %d:\n%s" % (n, out[-3000:])
    assert "DDP over ferry: 2 processes" in outs[0], outs[0][-2000:]
    assert "node 1 of 2: 1 worker(s), 1 server(s); ddp_digits" in outs[1], outs[1][-2000:]
    assert "the scheduler at" in outs[0] and "the scheduler at" not in outs[1]


def test_ferry_run_with_a_cpu_only_server_host(tmp_path):
    """--cpu-servers 1 on the node and --cpu-server on a second ferry-run (a CPU-only server
    host): the job has 2 servers, and a sum over them is exact; both ferry-runs end cleanly."""
    import subprocess
    from conftest import FERRY_BIN, PYTHON, REPO, base_env
    script = tmp_path / "sums.py"
    script.write_text("import torch, torch.distributed as dist\n"
                      "import ferry.torch as bps\n"
                      "dist.init_process_group('ferry')\n"
                      "t = torch.arange(100000, dtype=torch.float64) * (dist.get_rank() + 1)\n"
                      "dist.all_reduce(t)\n"
                      "ok = torch.equal(t, torch.arange(100000, dtype=torch.float64) * 3)\n"
                      "print('servers', bps.num_servers(), 'exact', ok, flush=True)\n")
    port = free_port()
    common = ["--master-port", str(port), "--cpu-servers", "1"]
    env = base_env({"FERRY_BIN": str(FERRY_BIN), "FERRY_PARTITION_BYTES": "65536"})
    run = [PYTHON, str(REPO / "scripts" / "ferry-run")]
    server = subprocess.Popen(run + ["--cpu-server"] + common, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    node = subprocess.Popen(run + ["--nproc-per-node", "2"] + common + [str(script)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = node.communicate(timeout=120)[0]
    server_out = server.communicate(timeout=60)[0]
    assert node.returncode == 0, out[-3000:]
    assert out.count("servers 2 exact True") == 2, out[-3000:]
    assert server.returncode == 0 and "the server finished cleanly" in server_out, server_out


def test_ferry_run_stops_every_process_and_names_the_one_that_failed(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    sys.exit(3)\n"
                      "time.sleep(120)\n")
    r = ferry_run(["--standalone", "--nproc-per-node", "2", str(script)], timeout=60)
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert "rank 1 exited with code 3; stopping every process" in r.stdout, r.stdout[-2000:]


def test_ferry_run_refuses_bad_options():
    for args, words in [(["--nnodes", "two", "x.py"], "--nnodes: 'two' is not a valid value"),
                        (["--node-rank", "3", "--nnodes", "2", "x.py"], "is not a node of"),
                        (["--frobnicate", "x.py"], "unknown option --frobnicate"),
                        (["--standalone"], "no script given"),
                        (["--cpu-server"], "--cpu-server: a CPU-only server host of a job with")]:
        r = ferry_run(args, timeout=30)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)


def test_a_plain_torchrun_launch_starts_ferry_itself(tmp_path):
    """torchrun's variables alone (as torchrun sets them; torch 1.13's torchrun itself fails on
    Python 3.11): the backend starts the scheduler beside RANK 0 and a server beside
    LOCAL_RANK 0, which end with the job."""
    import subprocess
    from conftest import FERRY_BIN, PYTHON, base_env
    script = tmp_path / "plain.py"
    script.write_text("import os, torch, torch.distributed as dist\n"
                      "import ferry.torch\n"
                      "dist.init_process_group('ferry')\n"
                      "t = torch.full((4,), float(dist.get_rank() + 1))\n"
                      "dist.all_reduce(t)\n"
                      "print('rank', dist.get_rank(), 'sum', t.tolist(), flush=True)\n"
                      "dist.destroy_process_group()\n"
                      "ferry.torch.shutdown()\n")
    port = free_port()
    procs = []
    for rank in range(2):
        env = base_env({"FERRY_BIN": str(FERRY_BIN), "RANK": str(rank), "LOCAL_RANK": str(rank),
                        "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)})
        procs.append(subprocess.Popen([PYTHON, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d:\n%s" % (rank, out[-3000:])
        assert "rank %d sum [3.0, 3.0, 3.0, 3.0]" % rank in out, out[-3000:]
    # Nothing left behind: the scheduler and servers were children of the ranks (they end
    # with the job, or with their parent at the latest).
    import time
    deadline = time.time() + 15
    while True:
        mine = [pid for pid in subprocess.run(["pgrep", "-f", "ferry-(scheduler|server)$"],
                                              capture_output=True, text=True).stdout.split()
                if "DMLC_PS_ROOT_PORT=%d" % (port + 1) in environ_of(pid)]
        if not mine or time.time() > deadline:
            break
        time.sleep(0.2)
    assert not mine, "left running: %s" % mine


def environ_of(pid):
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""  # gone meanwhile
