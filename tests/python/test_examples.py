"""The examples, run the way the README runs them (scripts/local-cluster)."""

import re
import subprocess

from conftest import EXAMPLES, FERRY_BIN, PYTHON, REPO, base_env


def local_cluster(args, timeout, env=None, workers=2):
    env = base_env(dict({"FERRY_BIN": str(FERRY_BIN)}, **(env or {})))
    return subprocess.run([str(REPO / "scripts" / "local-cluster"), "-s", "2", "-w", str(workers),
                           "--", PYTHON]
                          + args, env=env, capture_output=True, text=True, timeout=timeout)


# The one test that trains the digits CNN to its accuracy bar (the example's defaults: 12
# epochs); the other examples train 3 epochs, enough to show that they learn.
def test_train_digits_reaches_95_percent():
    r = local_cluster([str(EXAMPLES / "train_digits.py"), "--min-accuracy", "0.95"], timeout=240)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    m = re.search(r"test accuracy ([0-9.]+)", r.stdout)
    assert m, r.stdout
    assert float(m.group(1)) >= 0.95
    assert "epoch  1" in r.stdout


def test_pipeline_digits_reaches_90_percent_on_every_worker_under_trirace_and_fifo():
    """2 stages x 2 replicas: activations and their gradients by send/recv, each stage's
    gradients averaged within its process set. Scheduling changes when bytes travel, never
    what arrives: trirace (sends first, frames) and fifo reach the same accuracy."""
    results = {}
    for policy in ("trirace", "fifo"):
        r = local_cluster([str(EXAMPLES / "pipeline_digits.py")], timeout=240, workers=4,
                          env={"FERRY_SCHEDULING_POLICY": policy})
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", r.stdout)]
        assert len(accuracies) == 4, r.stdout
        assert min(accuracies) >= 0.9 and len(set(accuracies)) == 1, (policy, accuracies)
        results[policy] = accuracies[0]
    assert results["trirace"] == results["fifo"], results


def test_benchmark_runs():
    r = local_cluster([str(EXAMPLES / "benchmark_torch.py"), "--model", "mlp", "--mlp-width", "256", "--batch-size", "8", "--num-warmup", "2",
                       "--num-iters", "3", "--num-batches-per-iter", "2"], timeout=240)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert re.search(r"samples/s per worker: [0-9.]+", r.stdout), r.stdout


SHORT = ["--epochs", "3"]


def run_with_import_changed(tmp_path, example, old, new, env=None, args=SHORT):
    """Runs an example written for Horovod or BytePS with only its import line changed
    (and its own command-line arguments: 3 epochs)."""
    source = (EXAMPLES / example).read_text()
    assert source.count(old + "\n") == 1, "%s must import %r exactly once" % (example, old)
    changed = source.replace(old + "\n", new + "\n")
    differing = [(a, b) for a, b in zip(source.splitlines(), changed.splitlines()) if a != b]
    assert differing == [(old, new)], differing
    script = tmp_path / example
    script.write_text(changed)
    r = local_cluster([str(script)] + list(args), timeout=240, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    m = re.search(r"test accuracy ([0-9.]+)", r.stdout)
    assert m, r.stdout
    return float(m.group(1)), r.stdout


def test_a_horovod_elastic_program_runs_with_only_its_import_changed(tmp_path):
    accuracy, out = run_with_import_changed(tmp_path, "horovod_elastic_digits.py",
                                            "import horovod.torch as hvd",
                                            "import ferry.torch as hvd", env={"FERRY_ELASTIC": "1"})
    assert accuracy >= 0.9, out
    assert "epoch 3 loss" in out and "workers 2" in out, out


def test_a_horovod_program_runs_with_only_its_import_changed(tmp_path):
    accuracy, out = run_with_import_changed(tmp_path, "horovod_digits.py",
                                            "import horovod.torch as hvd", "import ferry.torch as hvd")
    assert accuracy >= 0.9, out
    assert "samples per worker [180, 180]" in out, out


def test_a_byteps_program_runs_with_only_its_import_changed(tmp_path):
    accuracy, out = run_with_import_changed(tmp_path, "byteps_digits.py",
                                            "import byteps.torch.cross_barrier as bps",
                                            "import ferry.torch.cross_barrier as bps")
    assert accuracy >= 0.9, out
