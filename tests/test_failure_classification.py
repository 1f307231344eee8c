"""How a worker names a failure: allocator failures are ``oom``, anything else ``error``."""

from __future__ import annotations

import pytest
import torch

from scaling.workers.common import classify_failure, parse_fault


def test_cpu_allocator_failure_is_oom():
    error = RuntimeError("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't "
                         "allocate memory: you tried to allocate 134217728 bytes.")
    status, reason = classify_failure(error)
    assert status == "oom"
    assert reason.startswith("RuntimeError: [enforce fail")


def test_cuda_out_of_memory_is_oom():
    # A stand-in for CUDA, which this machine does not have: torch's real exception type with
    # the message text that the CUDA caching allocator raises.
    error = torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
        "of which 1.12 GiB is free.")
    assert classify_failure(error) == (
        "oom", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
               "total capacity of 79.10 GiB of which 1.12 GiB is free.")


def test_python_memory_error_is_oom():
    assert classify_failure(MemoryError())[0] == "oom"


def test_other_errors_are_not_oom():
    status, reason = classify_failure(ValueError("shapes (2,3) and (4,5) not aligned\nmore"))
    assert (status, reason) == ("error", "ValueError: shapes (2,3) and (4,5) not aligned")


def test_a_header_line_gives_way_to_the_error_it_introduces():
    error = RuntimeError("in user code:\n\n    File \"x.py\", line 3\n\n"
                         "    LookupError: gradient registry has no entry for: ResizeArea")
    assert classify_failure(error) == (
        "error", "RuntimeError: LookupError: gradient registry has no entry for: ResizeArea")


def test_fault_switch_is_parsed_or_refused():
    assert parse_fault("crash@1:3") == ("crash", 1, 3)
    assert parse_fault(None) is None
    with pytest.raises(ValueError, match="KIND@RANK:STEP"):
        parse_fault("explode@1:3")
