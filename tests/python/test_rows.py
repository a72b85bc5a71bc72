"""Sparse rows (ferry.torch.push_pull_rows) on 2 workers and 2 servers: every returned
row equals the sum over both workers' pushes of that row (overlapping, disjoint and
duplicate ids, an empty push), in float32 and float16, summed and averaged; bad calls
are refused by name and the tensor keeps serving."""

import pytest
import torch

from ferry_worker import ROWS_ROUNDS, ROWS_TOTAL, row_values, rows_of

WORKERS = 2


@pytest.fixture(scope="module")
def results(module_cluster):
    c = module_cluster(workers=WORKERS, servers=2, env={"FERRY_PARTITION_BYTES": "4096"})
    c.start("rows")
    res = c.wait_workers(timeout=150)
    for r in res:
        assert "traceback" not in r, r.get("traceback")
    return sorted(res, key=lambda r: r["rank"])


def expected(ids, rnd, dtype, average=False):
    """Per-row totals over every worker's every occurrence, computed in int64."""
    totals = {}
    for r in range(WORKERS):
        mine = rows_of(r, rnd)
        vals = row_values(mine, r, rnd, torch.int64)
        for j, row in enumerate(mine.tolist()):
            totals[row] = totals.get(row, 0) + vals[j]
    want = torch.stack([totals[row] for row in ids.tolist()]) if len(ids) else \
        torch.zeros(0, vals.shape[1], dtype=torch.int64)
    if average:
        return (want.to(torch.float64) / WORKERS).to(dtype)
    return want.to(dtype)


@pytest.mark.parametrize("name,dtype,average", [("emb", torch.float32, False),
                                                 ("emb16", torch.float16, False),
                                                 ("avg", torch.float32, True)])
def test_rows_exact(results, name, dtype, average):
    for r in results:
        for rnd in range(ROWS_ROUNDS):
            ids = rows_of(r["rank"], rnd)
            got = r["rows"][(name, rnd)]
            want = expected(ids, rnd, dtype, average)
            assert got.dtype == dtype and tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
            assert torch.equal(got, want), "worker %d %s round %d" % (r["rank"], name, rnd)


def test_rows_keep_serving_after_refusals(results):
    for r in results:
        ids = rows_of(r["rank"], ROWS_ROUNDS)
        assert torch.equal(r["rows"][("emb", ROWS_ROUNDS)], expected(ids, ROWS_ROUNDS, torch.float32))


def test_rows_refusals_name_the_problem(results):
    for r in results:
        e = r["errors"]
        assert e["out_of_range"][0] == "FerryError"
        assert "'emb'" in e["out_of_range"][1] and "row id %d" % ROWS_TOTAL in e["out_of_range"][1]
        assert e["int32_ids"][0] == "TypeError" and "int64" in e["int32_ids"][1]
        assert e["undeclared"][0] == "ValueError" and "never.declared" in e["undeclared"][1]


def test_rows_stats(results):
    for r in results:
        s = r["stats"]
        assert s["rows_operations"] == 3 * ROWS_ROUNDS + 1
        assert s["rows_bytes_pushed"] > 0 and s["rows_bytes_received"] > 0
