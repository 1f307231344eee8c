"""How a worker names a failure: ``oom`` only on evidence that memory ran out, ``error`` for
anything else, and the evidence goes into the rank report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from scaling.workers.common import classify_failure, parse_fault

GIB = 2**30
UNDER_CAP = {"capped_memory_peak_bytes": int(1.93 * GIB), "memory_capacity_bytes": 2 * GIB}
"""The estimated data-segment peak and the cap that ResNet-50 at 64x64, batch 104, left when
oneDNN failed under a 2 GiB heap cap."""


def test_cpu_allocator_failure_is_oom():
    error = RuntimeError("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't "
                         "allocate memory: you tried to allocate 134217728 bytes.")
    status, reason, evidence = classify_failure(error)
    assert status == "oom"
    assert reason.startswith("RuntimeError: [enforce fail")
    assert evidence == f"framework error: {reason}"


def test_cuda_out_of_memory_is_oom():
    # A stand-in for CUDA, which this machine does not have: torch's real exception type with
    # the message text that the CUDA caching allocator raises.
    error = torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
        "of which 1.12 GiB is free.")
    reason = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
              "total capacity of 79.10 GiB of which 1.12 GiB is free.")
    assert classify_failure(error) == ("oom", reason, f"framework error: {reason}")


def test_python_memory_error_is_oom():
    assert classify_failure(MemoryError())[0] == "oom"


def test_other_errors_are_not_oom():
    assert classify_failure(ValueError("shapes (2,3) and (4,5) not aligned\nmore")) == (
        "error", "ValueError: shapes (2,3) and (4,5) not aligned", None)


def test_a_header_line_gives_way_to_the_error_it_introduces():
    error = RuntimeError("in user code:\n\n    File \"x.py\", line 3\n\n"
                         "    LookupError: gradient registry has no entry for: ResizeArea")
    assert classify_failure(error) == (
        "error", "RuntimeError: LookupError: gradient registry has no entry for: ResizeArea", None)


def test_a_failure_in_other_words_is_oom_after_an_allocation_failed_under_the_cap():
    error = RuntimeError("could not execute a primitive")
    assert classify_failure(error, UNDER_CAP, allocation_failed=True) == (
        "oom", "RuntimeError: could not execute a primitive",
        "an allocation failed (ENOMEM) under the 2 GiB cap, peak 1.93 GiB")


def test_a_failure_in_other_words_is_oom_when_the_peak_reached_the_cap():
    at_cap = {**UNDER_CAP, "capped_memory_peak_bytes": int(1.99 * GIB)}
    assert classify_failure(RuntimeError("could not execute a primitive"), at_cap)[::2] == (
        "oom", "peak 1.99 GiB reached the 2 GiB cap")


@pytest.mark.parametrize("memory, allocation_failed", [
    (UNDER_CAP, False),  # under the cap, but no allocation failed and the peak stopped short
    ({}, True),  # no cap: ENOMEM alone is no evidence of the cell running out
])
def test_without_evidence_a_failure_in_other_words_stays_an_error(memory, allocation_failed):
    assert classify_failure(RuntimeError("could not execute a primitive"), memory,
                            allocation_failed) == (
        "error", "RuntimeError: could not execute a primitive", None)


FAILING_RANK = """
import ctypes, sys
from scaling.workers import common
common.apply_memory_limit(2**30)
malloc = ctypes.CDLL(None).malloc
malloc.restype = ctypes.c_void_p
with common.reporting(sys.argv[1], 0):
    if sys.argv[2] == "allocate":
        assert malloc(ctypes.c_size_t(2**31)) is None
    raise RuntimeError("could not execute a primitive")
"""


@pytest.mark.parametrize("before, status", [("allocate", "oom"), ("nothing", "error")])
def test_the_rank_report_carries_the_evidence(tmp_path, before, status):
    subprocess.run([sys.executable, "-c", FAILING_RANK, str(tmp_path), before], check=False)
    report = json.loads((tmp_path / "rank0.json").read_text())
    assert (report["status"], report["error"]) == (
        status, "RuntimeError: could not execute a primitive")
    assert report["memory_capacity_bytes"] == 2**30
    if status == "oom":
        assert report["oom_evidence"].startswith("an allocation failed (ENOMEM) under the 1 GiB")
    else:
        assert report["oom_evidence"] is None


LARGE_PARENT = """
import subprocess, sys
held = bytearray(int(1.2 * 2**30))
held[::4096] = b"x" * len(held[::4096])  # resident, not only reserved
subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], check=False)
"""


def test_a_rank_started_by_a_large_parent_does_not_take_its_peak_for_its_own(tmp_path):
    """Linux keeps ru_maxrss across exec: a rank started by a parent with 1.2 GiB resident
    would read a peak beyond its own 1 GiB cap and call any failure out of memory."""
    subprocess.run([sys.executable, "-c", LARGE_PARENT, FAILING_RANK, str(tmp_path), "nothing"],
                   check=False)
    report = json.loads((tmp_path / "rank0.json").read_text())
    assert (report["status"], report["oom_evidence"]) == ("error", None)
    assert report["capped_memory_peak_bytes"] < 2**30 / 4


def test_fault_switch_is_parsed_or_refused():
    assert parse_fault("crash@1:3") == ("crash", 1, 3, None)
    assert parse_fault("error@0:2:8") == ("error", 0, 2, 8)
    assert parse_fault(None) is None
    with pytest.raises(ValueError, match="KIND@RANK:STEP"):
        parse_fault("explode@1:3")
