"""ferry._core reads every C API call's ctypes signature from worker/c_api.h, the C API's
one declaration: every declared function is found with the types the header gives, and a
type the reader does not know is refused by name instead of guessed."""

import ctypes
import os
import subprocess
import sys

import pytest

from conftest import FERRY_PYTHONPATH, REPO

import ferry._core as core  # noqa: E402  (conftest put the built package on sys.path)

HEADER = REPO / "worker" / "c_api.h"


def test_every_function_of_the_header_has_its_signature():
    sigs = core.signatures(str(HEADER))
    declared = {line.split("(")[0].split()[-1] for line in HEADER.read_text().splitlines()
                if line.startswith(("int ", "int64_t ", "const char* ")) and "ferry_" in line}
    assert declared and declared <= set(sigs), declared - set(sigs)
    assert sigs["ferry_init"] == (ctypes.c_int, [])
    assert sigs["ferry_wait_for"] == (ctypes.c_int, [ctypes.c_int64, ctypes.c_int64])
    restype, args = sigs["ferry_push_pull_async"]
    assert restype is ctypes.c_int64
    assert args == [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                    ctypes.c_uint64, ctypes.c_int, ctypes.c_int32]
    restype, args = sigs["ferry_scheduling"]
    assert args[:3] == [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                        ctypes.POINTER(ctypes.c_double)]
    assert sigs["ferry_last_error"] == (ctypes.c_char_p, [])
    # The library the package loads has them all, with the header beside it.
    assert (FERRY_PYTHONPATH / "ferry" / "c_api.h").read_text() == HEADER.read_text()


def test_an_unknown_type_is_refused_by_name(tmp_path):
    header = tmp_path / "c_api.h"
    header.write_text("/* a comment: int ferry_fake(void); */\n"
                      "int ferry_ok(int64_t handle);\n"
                      "int ferry_odd(struct thing* t);\n")
    with pytest.raises(ImportError, match="struct thing"):
        core.signatures(str(header))
    header.write_text("// nothing declared\n")
    with pytest.raises(ImportError, match="no ferry_"):
        core.signatures(str(header))


CALL_BEFORE_INIT = r"""
import ferry._core as core
results = []
for args in [("push_pull_async", "t", 8, 16, core.FLOAT32, 1, True, None),
             ("push_pull_rows_async", "t", 8, 1, 16, 24, core.FLOAT32, False, 3),
             ("reduce_async", "t", 8, 16, core.FLOAT32, 1, core.REDUCE_MAX, None)]:
    try:
        core.call(*args)
        results.append("ran")
    except core.FerryError as e:
        results.append((e.code_name, str(e)))
try:
    core.call("push_pull_async", "t", 8, 16, core.FLOAT32, 1, True, "high")
except Exception as e:  # ctypes refuses what it cannot convert, before the core runs
    results.append(type(e).__name__)
print(results)
"""


def test_call_converts_by_the_headers_types():
    # Through the generic call: a name as str, None for "no priority", an int address for
    # an int64_t* (the rows): each reaches the core, which answers "not initialised"
    # (a conversion ctypes refused would raise ArgumentError instead).
    env = dict(os.environ, PYTHONPATH=str(FERRY_PYTHONPATH))
    out = subprocess.run([sys.executable, "-c", CALL_BEFORE_INIT], env=env, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    results = eval(out)  # noqa: S307 - the child's repr of a list of tuples and strings
    assert len(results) == 4, results
    for code_name, message in results[:3]:
        assert code_name == "invalid argument" and "not initialised" in message, results
    assert results[3] == "ArgumentError", results
