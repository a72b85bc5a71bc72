"""Every variable in docs/configuration.md, given an invalid value, stops a Ferry program
with exit code 2 and a message naming the variable (configuration abuse).

The list of variables comes from the documentation itself, so a variable documented
without a bad-value case here fails this test; variables that accept any value (a
secret, a directory) say why."""

import re

import pytest

from deploy_support import FERRY_BIN, REPO, clean_env, free_port, need_binaries, run

# variable -> an invalid value for it
INVALID = {
    "DMLC_ROLE": "boss",
    "DMLC_NUM_WORKER": "zero",
    "DMLC_NUM_SERVER": "0",
    "DMLC_PS_ROOT_URI": "no-such-host.invalid",
    "DMLC_PS_ROOT_PORT": "70000",
    "DMLC_WORKER_ID": "7",
    "DMLC_NODE_HOST": "no-such-host.invalid",
    "DMLC_PORT": "-1",
    "FERRY_BIND_ADDR": "no-such-host.invalid",
    "FERRY_CONNECT_TIMEOUT_MS": "soon",
    "FERRY_DETERMINISTIC": "maybe",
    "FERRY_BACKUP_WORKERS": "2",  # not below DMLC_NUM_WORKER
    "FERRY_ENABLE_ASYNC": "maybe",
    "FERRY_HEARTBEAT_INTERVAL_MS": "5",
    "FERRY_HEARTBEAT_TIMEOUT_MS": "1",
    "FERRY_SCHEDULER_TIMEOUT_MS": "5000",  # below the heartbeat timeout (10000)
    "FERRY_SCHEDULERS": "127.0.0.1:1,127.0.0.1:2",  # the first is not DMLC_PS_ROOT_*
    "FERRY_JOIN_TIMEOUT_MS": "-3",
    "FERRY_STALL_WARNING_MS": "50",
    "FERRY_STALL_SHUTDOWN_MS": "later",
    "FERRY_LINK_TIMEOUT_MS": "100",
    "FERRY_HANDSHAKE_TIMEOUT_MS": "50",
    "FERRY_CONTROL_LANE": "maybe",
    "FERRY_TCP_NOTSENT_LOWAT": "100",
    "FERRY_TRANSPORT_WATERMARK_BYTES": "-1",
    "FERRY_FRAME_BYTES": "4100",
    "FERRY_SHM": "sometimes",
    "FERRY_SHM_BYTES": "1000",
    "FERRY_LOG_LEVEL": "LOUD",
    "FERRY_MAX_MESSAGE_BYTES": "1000",
    "FERRY_NODE_KIND": "gpu",
    "FERRY_OP_TIMEOUT_MS": "0",
    "FERRY_PARTITION_BYTES": "12abc",
    "FERRY_RESEND_TIMEOUT_MS": "-1",
    "FERRY_SCHEDULING_CREDIT": "0",
    "FERRY_SCHEDULING_CREDIT_BYTES": "-5",
    "FERRY_SECRET": "",
    "FERRY_SECRET_FILE": "/no/such/secret/file",
    "FERRY_SERVER_ENGINE_THREADS": "0",
    "FERRY_SERVER_SPLIT_BYTES": "-1",
    "FERRY_SERVER_INLINE_BYTES": "-1",
    "FERRY_SERVER_DEVICE": "tpu",
    "FERRY_SERVER_GPU_STREAMS": "0",
    "FERRY_DEVICE_API": "opencl",
    "FERRY_TEST_DELAY_MS": "forever",
    "FERRY_TEST_DROP_PERCENT": "150",
    "FERRY_SCHEDULING_POLICY": "random",
    "FERRY_FUSION_BYTES": "-1",
    "FERRY_P3_SLICE_BYTES": "10",
    "FERRY_BUCKET_BYTES": "1",
    "FERRY_BUCKET_TIMEOUT_MS": "-5",
    "FERRY_AUTOTUNE": "perhaps",
    "FERRY_AUTOTUNE_STEPS": "1",
    "FERRY_AUTOTUNE_PARTITION_BYTES": "1M,2M",
    "FERRY_AUTOTUNE_CREDITS": "0",
    "FERRY_AUTOTUNE_WINDOW_GAINS": "0",
    "FERRY_AUTOTUNE_FRAME_BYTES": "100",
    "FERRY_WINDOW": "bbr",
    "FERRY_WINDOW_GAIN": "-1",
    "FERRY_PARTITION_MS": "-2",
    "FERRY_PARTITION_PER_LINK": "maybe",
    "FERRY_REPARTITION_THRESHOLD": "0",
    "FERRY_DECOMPOSE": "per-tensor",
    "FERRY_WINDOW_MIN_BYTES": "1",
    "FERRY_WINDOW_MAX_BYTES": "1",
    "FERRY_LOCAL_SIZE": "0",
    "FERRY_LOCAL_RANK": "3",           # with FERRY_LOCAL_SIZE unset (1): 0 only
    "FERRY_LOCAL_SOCKET": "has space",
    "FERRY_ELASTIC": "maybe",
    "FERRY_SPARE": "sometimes",
    "FERRY_MIN_WORKERS": "0",
    "FERRY_MIN_WORKERS_TIMEOUT_MS": "soon",
    "FERRY_MAX_WORKERS": "0",          # fewer than DMLC_NUM_WORKER
    "FERRY_METRICS_PORT": "70000",
    "FERRY_METRICS_BIND": "localhost",  # an IPv4 address, not a name
    "FERRY_METRICS_LINGER_MS": "-1",
    "FERRY_COMPRESSION": "topk:1.5",
    "FERRY_COMPRESSION_MIN_BYTES": "-1",
}

# Documented variables the programs do not read, or that accept any value.
NOT_READ_BY_THE_PROGRAMS = {
    "DMLC_INTERFACE": "read by ferry-launch (tests/deploy/test_launcher.py)",
    "FERRY_STATS_FILE": "any path: a node that cannot write its counters there logs the error "
                        "at exit and ends as it would have",
    "FERRY_TRACE_DIR": "any directory, created if missing: a worker that cannot make it one "
                       "or write its trace there stops with exit 2 naming it "
                       "(tests/worker/trace_test.cc)",
}


def documented_variables():
    text = (REPO / "docs" / "configuration.md").read_text()
    return sorted(set(re.findall(r"^\| `((?:DMLC|FERRY|BYTEPS)_[A-Z0-9_]+)`", text, re.M)))


def test_every_documented_variable_has_a_bad_value_case():
    missing = [v for v in documented_variables() if v not in INVALID and v not in NOT_READ_BY_THE_PROGRAMS]
    assert not missing, "documented variables without a bad-value case in this test: %s" % missing


@pytest.mark.parametrize("variable", sorted(INVALID))
def test_invalid_value_exits_2_naming_the_variable(variable):
    need_binaries("ferry-server")
    env = clean_env({"DMLC_ROLE": "server", "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
                     "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
                     "FERRY_CONNECT_TIMEOUT_MS": "300"})
    env[variable] = INVALID[variable]
    code, out = run([FERRY_BIN / "ferry-server"], timeout=30, env=env)
    assert code == 2, "%s=%r: exit %d\n%s" % (variable, INVALID[variable], code, out[-2000:])
    assert variable in out, "%s=%r: the message does not name it\n%s" % (variable, INVALID[variable], out[-2000:])
