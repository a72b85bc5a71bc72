"""ferry._core reads every C API call's ctypes signature from worker/c_api.h, the C API's
one declaration: every declared function is found with the types the header gives, and a
type the reader does not know is refused by name instead of guessed."""

import ctypes

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
