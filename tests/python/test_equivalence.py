"""Training with ferry.torch equals training on one process with plain torch.

2 workers train the digits CNN (examples/digits.py, train_digits.py's: convolutions and
linear layers, no batch norm or dropout) for 50 steps, each on its own shard; one process
trains the same model with plain torch on the global batches (the two workers' batches of
each step, concatenated). The parameters must agree within rtol 1e-5, atol 1e-6 (float32),
for SGD, SGD with momentum and Adam, with DistributedOptimizer and with CrossBarrier,
and with backward_passes_per_step=2. With fp16 compression, within 1e-2 / 1e-3.
"""

import pytest
import torch
import torch.nn.functional as F

from digits import DigitsCNN, load_data, make_optimizer

WORKERS = 2
STEPS = 50
BATCH = 16          # per worker
SEED = 1
RTOL, ATOL = 1e-5, 1e-6
CONFIGS = ["sgd", "momentum", "adam", "momentum+cb", "adam+cb", "momentum+bpps2", "sgd+fp16"]
# float16 gradients cannot match float32 training to 1e-5: a looser bound that still
# catches a wrong average or a lost update.
TOLERANCE = {"sgd+fp16": (1e-2, 1e-3)}


@pytest.fixture(scope="module")
def trained(module_cluster):
    c = module_cluster(workers=WORKERS, servers=2)
    c.start("train", "--configs", ",".join(CONFIGS), "--steps", STEPS, "--batch-size", BATCH,
            "--seed", SEED)
    res = c.wait_workers(timeout=200)
    for r in res:
        assert "traceback" not in r, r.get("traceback")
    return sorted(res, key=lambda r: r["rank"])


def reference(optimizer, batches, passes=1):
    """Plain torch, one process, the global batch of every step (with passes > 1: the
    gradients of `passes` global batches summed, then one step, as Horovod does)."""
    torch.set_num_threads(1)
    x, y, _, _ = load_data()
    torch.manual_seed(SEED)
    model = DigitsCNN()
    lr = 0.002 if optimizer == "adam" else 0.05
    opt = make_optimizer(optimizer, model.parameters(), lr)
    for i, idx in enumerate(batches):
        if i % passes == 0:
            opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        if i % passes == passes - 1:
            opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def errors(got, want, rtol, atol):
    """(max |got - want|, max |got - want| / (atol + rtol |want|)): the second is the
    share of the tolerance used (1.0 = at the limit)."""
    diff = (got.double() - want.double()).abs()
    return diff.max().item(), (diff / (atol + rtol * want.double().abs())).max().item()


@pytest.mark.parametrize("config", CONFIGS)
def test_same_parameters_as_one_process(trained, config):
    per_worker = [r["results"][config] for r in trained]
    # Each worker saw only its own shard, and the shards are disjoint.
    for rank, w in enumerate(per_worker):
        shard = set(w["shard"].tolist())
        assert all(set(idx.tolist()) <= shard for idx in w["indices"]), "worker %d left its shard" % rank
        assert all(int(i) % WORKERS == rank for i in shard)
    assert not set(per_worker[0]["shard"].tolist()) & set(per_worker[1]["shard"].tolist())
    assert len(per_worker[0]["indices"]) == STEPS
    # The global batch of step s: worker 0's then worker 1's samples.
    batches = [torch.cat([w["indices"][s] for w in per_worker]) for s in range(STEPS)]
    want = reference(config.split("+")[0], batches, passes=2 if config.endswith("+bpps2") else 1)
    rtol, atol = TOLERANCE.get(config, (RTOL, ATOL))
    worst = (0.0, 0.0)
    for rank, w in enumerate(per_worker):
        for name, v in want.items():
            got = w["params"][name]
            torch.testing.assert_close(got, v, rtol=rtol, atol=atol,
                                       msg=lambda m: "worker %d, %s, %s: %s" % (rank, config, name, m))
            e = errors(got, v, rtol, atol)
            worst = (max(worst[0], e[0]), max(worst[1], e[1]))
    # Both workers hold exactly the same parameters.
    for name in want:
        assert torch.equal(per_worker[0]["params"][name], per_worker[1]["params"][name]), name
    print("\n%s: max abs error %.3g, %.3f of the tolerance (rtol %g, atol %g), %d batches"
          % (config, worst[0], worst[1], rtol, atol, STEPS))
