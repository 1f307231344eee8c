"""Exit status scripts can rely on: 0 done, 1 a cell failed, 2 bad input, 3 the environment or
infrastructure failed. Each with a real cause, none faked."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from conftest import scaling_cli

from scaling.cli import cli
from scaling.errors import InfrastructureError, exit_status
from scaling.placement import free_port_block

TINY = ("run", "--framework", "torch", "--workload", "mnist_mlp", "--batch-size", 2,
        "--steps", 1, "--warmup", 0, "--device-type", "cpu", "--no-telemetry")


@pytest.mark.slow
def test_an_ok_cell_exits_0_and_a_crashed_one_exits_1(tmp_path):
    ok = scaling_cli(*TINY, "--out", tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok:")
    crashed = scaling_cli(*TINY, "--out", tmp_path / "crash",
                          env={**os.environ, "SCALING_FAULT": "crash@0:0"})
    assert crashed.returncode == 1, crashed.stderr
    assert crashed.stdout.startswith("crashed: rank 0 killed by SIGKILL")


def test_several_cells_exit_with_their_worst_end():
    """``sweep``, ``status --wait`` and ``maxbatch`` end as their worst cell: a missing
    environment over a failed cell over ok. The commands themselves: tests/test_failures.py
    (a sweep with an oom cell exits 1), tests/test_maxbatch.py (a search that gave up, 1),
    tests/test_slurm.py (a cancelled cell, 1, for sweep and status --wait) and
    tests/test_mxnet_runs.py (a missing environment, 3)."""
    assert exit_status(["ok", "ok"]) == 0
    assert exit_status(["ok", "oom"]) == 1
    assert exit_status(["timeout", "ok", "cancelled"]) == 1
    assert exit_status(["crashed", "env_error", "ok"]) == 3
    assert exit_status([]) == 0


def test_bad_input_exits_2():
    result = CliRunner().invoke(cli, [*map(str, TINY), "--mode", "sideways"])
    assert result.exit_code == 2
    assert "Invalid value for '--mode'" in result.stderr


def test_a_missing_framework_environment_exits_3(tmp_path):
    result = CliRunner().invoke(cli, [*map(str, TINY), "--python", str(tmp_path / "python"),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    assert result.stdout.startswith("env_error: cannot run")


def test_slurm_without_its_commands_exits_3(tmp_path):
    result = CliRunner(env={"PATH": str(tmp_path)}).invoke(
        cli, [*map(str, TINY), "--backend", "slurm", "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: ") and "sbatch" in line


def test_no_free_port_is_an_infrastructure_error():
    """203.0.113.0/24 is reserved for documentation: no port can be bound on it here."""
    with pytest.raises(InfrastructureError, match="found no 2 free consecutive ports"):
        free_port_block(2, host="203.0.113.7", tries=3)
