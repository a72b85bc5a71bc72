"""ferry-sim as a user runs it (docs/simulation.md): the README's command, JSON output with
the fields users read, the same seed giving the same run, and errors that name the flag or
the line (exit 2)."""

import json

from deploy_support import FERRY_BIN, REPO, need_binaries, run

SIM = FERRY_BIN / "ferry-sim"


def sim(*args, timeout=120):
    need_binaries("ferry-sim")
    return run([SIM] + [str(a) for a in args], timeout)


def sim_json(*args):
    code, out = sim(*args, "--format", "json")
    assert code == 0, out
    return json.loads(out)


def test_the_readme_command_runs():
    # The README's example, scaled down in bytes so that it takes a second.
    readme = (REPO / "README.md").read_text()
    assert "build/bin/ferry-sim --workload vgg16 --workers 64 --colocate --rate 25gbit" in readme
    code, out = sim("--workload", "vgg16", "--workers", "64", "--colocate", "--rate", "25gbit",
                    "--byte-scale", "0.02", "--iterations", "2")
    assert code == 0, out
    assert "64 workers, 64 colocated servers" in out and "median" in out and "LB1" in out


def test_json_carries_the_predictions_and_every_host():
    j = sim_json("--workload", "bert_large", "--byte-scale", "0.01", "--workers", "4",
                 "--colocate", "--cpu-servers", "2", "--rate", "10gbit", "--iterations", "3",
                 "--env", "FERRY_SCHEDULING_POLICY=p3")
    assert j["model"] == "bert_large" and j["policy"] == "p3"
    assert j["iteration_ms"] >= j["lb1_ms"] > 0
    assert j["t_opt_ms"] > 0 and j["allreduce_ms"] > 0
    assert len(j["iterations_ms"]) == 3 * 4
    assert [h["name"] for h in j["hosts"]] == [
        "worker 0 + server 0", "worker 1 + server 1", "worker 2 + server 2",
        "worker 3 + server 3", "server 4 (cpu)", "server 5 (cpu)"]
    assert all(0 < h["up"] <= 1 and 0 < h["down"] <= 1 for h in j["hosts"])


def test_the_same_seed_gives_the_same_run():
    args = ("--workload", "resnet50", "--byte-scale", "0.05", "--workers", "3", "--jitter", "0.05",
            "--iterations", "3")
    a = sim_json(*args, "--seed", "5")
    b = sim_json(*args, "--seed", "5")
    c = sim_json(*args, "--seed", "6")
    assert a["iterations_ms"] == b["iterations_ms"]
    assert a["iterations_ms"] != c["iterations_ms"]


def test_errors_name_the_flag_or_the_line(tmp_path):
    code, out = sim("--workers", "two")
    assert code == 2 and "--workers: 'two' is not a number" in out
    code, out = sim("--env", "FERRY_AUTOTUNE=1")
    assert code == 2 and "FERRY_AUTOTUNE: ferry-sim cannot model it" in out
    bad = tmp_path / "mine_layers.csv"
    bad.write_text("row,name,params,bytes,ntensors,fwd_ms,bwd_ms\n1,fc,1,4,1,0.1,0.1\n"
                   "2,conv,1,6,1,0.1,0.1\n")
    code, out = sim("--workload", bad)
    assert code == 2 and "mine_layers.csv:3: bytes 6 is not a positive multiple of 4" in out
    code, out = sim("--help")
    assert code == 0 and "--workload" in out and "--env NAME=VALUE" in out


def test_a_pipeline_job_reports_its_shape_and_bound(tmp_path):
    # The hybrid job of docs/simulation.md ("Pipeline and hybrid jobs"), scaled down in bytes.
    pipeline = REPO / "bench" / "workloads" / "vgg16_pipeline.json"
    j = sim_json("--pipeline", pipeline, "--workers", "4", "--colocate", "--rate", "1gbit",
                 "--byte-scale", "0.05", "--iterations", "3",
                 "--env", "FERRY_SCHEDULING_POLICY=trirace")
    assert j["pipeline"] == "vgg16_pipeline" and j["policy"] == "trirace"
    assert (j["stages"], j["replicas"], j["micro_batches"], j["stash"]) == (2, 2, 8, True)
    assert j["activation_bytes"] == 80280  # 1605632 x 0.05, whole float32 elements
    assert j["bound_ms"] >= j["t_pipe_ms"] > 0 and j["t_link_ms"] > 0
    assert j["mean_ms"] >= j["bound_ms"] and j["over_bound"] >= 1
    assert len(j["iterations_ms"]) == 3 * 4 and j["sends"] == 5 * 8 * 4
    assert j["link_flows"] > 0
    code, out = sim("--pipeline", pipeline, "--workers", "3")
    assert code == 2 and "--workers: 3 is not a multiple of the 2 stages" in out
    bad = tmp_path / "mine.json"
    bad.write_text('{"micro_batches": 2, "activation_bytes": 8, "stash": true, '
                   '"stages": [{"forward_ms": 1, "backward_ms": 1, "tensors": [5]}]}')
    code, out = sim("--pipeline", bad)
    assert code == 2 and "mine.json: stages[0].tensors[0]: 5 is not a positive multiple of 4" in out
    code, out = sim("--pipeline", pipeline, "--workload", "vgg16")
    assert code == 2 and "not with --workload" in out


def test_a_pipeline_job_with_sparse_rows(tmp_path):
    # The hybrid job with an embedding table on stage 0 (vgg16_pipeline_rows.json): every
    # worker calls push_pull_rows once per iteration, stage 0's replicas with 8192 rows.
    pipeline = REPO / "bench" / "workloads" / "vgg16_pipeline_rows.json"
    j = sim_json("--pipeline", pipeline, "--workers", "4", "--colocate", "--rate", "1gbit",
                 "--byte-scale", "0.05", "--iterations", "3")
    assert j["pipeline"] == "vgg16_pipeline_rows"
    assert j["stage_list"][0]["sparse_rows"] == {"table_rows": 1000000, "row_bytes": 48,
                                                 "rows": 8192}
    assert "sparse_rows" not in j["stage_list"][1]
    assert j["rows_calls"] == 4 * 5  # every worker, every iteration (warm-up included)
    assert j["rows_pushed_bytes"] == 5 * 2 * 8192 * (8 + 48)
    assert j["rows_answered_bytes"] == 5 * 2 * 8192 * 48
    assert j["rows_ms_p99"] >= j["rows_ms_p50"] > 0
    assert j["mean_ms"] >= j["bound_ms"] > 0
    bad = tmp_path / "rows.json"
    bad.write_text('{"micro_batches": 2, "activation_bytes": 8, "stash": true, "stages": '
                   '[{"forward_ms": 1, "backward_ms": 1, "tensors": [4], '
                   '"sparse_rows": {"table_rows": 10, "row_bytes": 6, "rows": 2}}]}')
    code, out = sim("--pipeline", bad)
    assert code == 2 and ("rows.json: stages[0].sparse_rows.row_bytes: 6 is not a positive "
                          "multiple of 4") in out
