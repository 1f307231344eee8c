"""Cells that crash, hang, run out of memory or raise: each is recorded and the sweep goes on."""

from __future__ import annotations

import os

import pytest
from conftest import (leftover_cell_processes, rank_reports, read_records, scaling_cli,
                      write_sweep)

HANG_TIMEOUT_S = 30
"""The timeout of the cell whose rank hangs: several times what its ranks take to reach the
hang."""


def run_with_fault(out_dir, fault, devices=2, timeout=300):
    env = {**os.environ, "SCALING_FAULT": fault}
    result = scaling_cli(
        "run", "--workload", "cifar10", "--devices", devices, "--batch-size", 4,
        "--image-size", 16, "--steps", 5, "--warmup", 1, "--device-type", "cpu",
        "--timeout", timeout, "--out", out_dir, env=env,
    )
    assert result.returncode == 1, result.stderr  # the cell is not ok
    [record] = read_records(out_dir)
    return record


@pytest.mark.slow
def test_rank_that_dies_mid_run_is_recorded_as_crashed(out_dir):
    """The crash ends the cell; the harness does not wait for the timeout."""
    record = run_with_fault(out_dir, "crash@1:3", timeout=300)
    assert record["status"] == "crashed"
    assert record["error"] == "rank 1 killed by SIGKILL"
    assert record["images_per_sec"] is None
    assert record["wall_s"] < 300
    assert leftover_cell_processes(record) == []


@pytest.mark.slow
def test_rank_that_hangs_is_killed_at_the_timeout_with_nothing_left_behind(out_dir):
    """The harness waits the whole timeout, then stops every rank it finds still running."""
    record = run_with_fault(out_dir, "hang@1:3", timeout=HANG_TIMEOUT_S)
    assert record["status"] == "timeout"
    assert record["error"] == f"no result within {HANG_TIMEOUT_S} s (ranks [0, 1] still " \
                              "running); process tree killed"
    assert record["wall_s"] >= HANG_TIMEOUT_S
    # Rank 1 sleeps in its hang and stops on SIGTERM; rank 0, blocked in a collective, may not.
    reports = {report["rank"]: report for report in rank_reports(record)}
    assert reports[1]["status"] == "terminated"
    assert "params" in reports[1] and "window_s" not in reports[1]  # built, then hung
    assert {report["status"] for report in reports.values()} == {"terminated"}
    assert leftover_cell_processes(record) == []


@pytest.mark.slow
def test_rank_that_raises_is_recorded_as_error_with_its_reason(out_dir):
    record = run_with_fault(out_dir, "error@0:2")
    assert record["status"] == "error"
    assert record["error"] == "rank 0: RuntimeError: injected fault at rank 0, step 2"
    assert leftover_cell_processes(record) == []


@pytest.mark.slow
def test_oom_cell_is_recorded_and_sweep_continues(tmp_path, out_dir):
    config = write_sweep(tmp_path / "oom.yaml", batch_sizes=[1024, 4], image_size=32,
                         memory_limit="1GiB")
    result = scaling_cli("sweep", config, "--out", out_dir)
    assert result.returncode == 1, result.stderr  # every cell has its record; one is not ok
    assert "2 cells: 1 oom, 1 ok" in result.stdout or "2 cells: 1 ok, 1 oom" in result.stdout
    by_batch = {r["batch_size"]: r for r in read_records(out_dir)}
    assert by_batch[1024]["status"] == "oom"
    assert "can't allocate memory" in by_batch[1024]["error"]
    assert by_batch[1024]["memory_limit"] == 2**30
    assert by_batch[4]["status"] == "ok"
    assert "OOM" in result.stdout
