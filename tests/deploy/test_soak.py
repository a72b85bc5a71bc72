"""The short soak CI runs: scripts/soak --rounds 500 (2 workers x 2 servers, 50 keys, every
sum exact; no process's RSS more than 5% above its value after warm-up; no descriptor
growth). The full 20,000-round soak is `scripts/soak` (docs/reliability.md)."""

from deploy_support import FERRY_BIN, SCRIPTS, need_binaries, run


def test_short_soak_holds_memory_and_descriptors_flat():
    need_binaries("ferry-scheduler", "ferry-server", "ferry-test-worker")
    code, out = run([SCRIPTS / "soak", "--rounds", "500", "--bin", FERRY_BIN], timeout=600)
    assert code == 0, out[-6000:]
    assert "every sum exact" in out, out[-6000:]
    rows = [line for line in out.splitlines() if line.startswith("| ") and "KiB" not in line]
    assert len(rows) == 5, out   # scheduler, 2 servers, 2 workers
    assert "FAIL" not in out, out
