"""``scaling allreduce``: a real collective under each launcher, timed per size, with bandwidths
in nccl-tests' convention."""

from __future__ import annotations

import json
import traceback

import pytest
from click.testing import CliRunner
from conftest import read_records, scaling_in_process

from scaling.cli import cli
from scaling.execute.aggregate import bus_factor
from scaling.execute.allreduce import DEFAULT_SIZES, marks, parse_sizes
from scaling.report.html import allreduce_section
from scaling.schema import ALLREDUCE_FIELDS, RECORD_FIELDS
from scaling.uncertainty import median_interval

SIZES = [4 * 2**10, 256 * 2**10, 4 * 2**20]


def allreduce_ok(*args):
    """``scaling allreduce ARGS``, which must succeed, run in this process (click's
    CliRunner): its workers start in processes of their own as from the command line, while
    the marks of its table and figure (every workload's gradients, from its torch model) are
    built once here rather than in a fresh process, which imports torch, each time."""
    result = CliRunner().invoke(cli, ["allreduce", *map(str, args)], prog_name="scaling")
    raised = "" if result.exc_info is None or isinstance(result.exception, SystemExit) else \
        "".join(traceback.format_exception(*result.exc_info))
    assert result.exit_code == 0, result.output + raised
    return result


def read_lines(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_sizes(record, devices: int) -> None:
    """Every size measured, in order, with bandwidths that follow from its median time."""
    assert record["status"] == "ok", record["error"]
    assert record["allreduce_devices"] == devices
    assert [size["bytes"] for size in record["allreduce"]] == SIZES
    for size in record["allreduce"]:
        low, high = size["time_s_ci95"]
        assert 0 < low <= size["time_s"] <= high
        assert size["algbw_GBps"] == pytest.approx(size["bytes"] / size["time_s"] / 1e9,
                                                   rel=1e-12)
        assert size["busbw_GBps"] / size["algbw_GBps"] == pytest.approx(
            2 * (devices - 1) / devices, rel=1e-12)


@pytest.mark.slow
def test_torchrun_on_two_cpu_devices_writes_one_line_per_size(out_dir):
    result = allreduce_ok("--devices", 2, "--device-type", "cpu", "--sizes", "4KiB,256KiB,4MiB",
                          "--out", out_dir)
    [record] = read_records(out_dir)
    assert record["purpose"] == "allreduce" and record["sizes"] == SIZES
    assert set(ALLREDUCE_FIELDS) <= set(record) <= set(RECORD_FIELDS) | set(ALLREDUCE_FIELDS)
    assert record["images_per_sec"] is None and record["flops_per_image"] is None
    check_sizes(record, 2)
    lines = read_lines(out_dir / "allreduce.jsonl")
    assert [line["bytes"] for line in lines] == SIZES
    assert all(line["cell"] == record["cell"] and line["launcher"] == "torchrun"
               for line in lines)
    assert "busbw" in result.stdout and "4.00 MiB" in result.stdout
    assert (out_dir / "allreduce.png").stat().st_size > 0
    assert "<svg" in allreduce_section(read_records(out_dir))
    again = allreduce_ok("--devices", 2, "--device-type", "cpu", "--sizes", "4KiB,256KiB,4MiB",
                         "--out", out_dir)
    assert "already measured" in again.stdout and len(read_records(out_dir)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("framework,launcher", [
    ("torch", "horovod"), ("tensorflow", "tf-mirrored"), ("tensorflow", "tf-multiworker"),
    ("tensorflow", "horovod"), ("mxnet", "mxnet-kvstore"), ("mxnet", "horovod"),
    ("jax", "jax"), ("jax", "jax-distributed")])
def test_each_launchers_own_collective_sums_over_two_devices(out_dir, framework, launcher):
    allreduce_ok("--framework", framework, "--launcher", launcher, "--devices", 2,
                 "--device-type", "cpu", "--sizes", "4KiB,256KiB,4MiB", "--out", out_dir)
    [record] = read_records(out_dir)
    check_sizes(record, 2)


@pytest.mark.slow
def test_the_bus_factor_over_four_devices_of_one_kvstore_process(out_dir):
    allreduce_ok("--framework", "mxnet", "--devices", 4, "--device-type", "cpu",
                 "--threads-per-device", 1, "--allow-oversubscribe",
                 "--sizes", "4KiB,256KiB,4MiB", "--out", out_dir)
    [record] = read_records(out_dir)
    check_sizes(record, 4)
    assert bus_factor(4) == 1.5


def test_sizes_default_to_4kib_to_256mib_in_steps_of_4x_and_bad_ones_are_refused(out_dir):
    assert DEFAULT_SIZES[0] == 4096 and DEFAULT_SIZES[-1] == 256 * 2**20
    assert all(b == 4 * a for a, b in zip(DEFAULT_SIZES, DEFAULT_SIZES[1:]))
    assert parse_sizes("1MiB,4KiB") == [4096, 2**20]
    for bad in ("4KiB,6", "none", ""):
        result = scaling_in_process("allreduce", "--device-type", "cpu", "--sizes", bad,
                                    "--out", out_dir)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) <= 3
    result = scaling_in_process("allreduce", "--launcher", "single", "--device-type", "cpu",
                                "--out", out_dir)
    assert result.returncode == 2 and "single has no collective" in result.stderr


def test_marks_name_each_workloads_gradients_and_the_launchers_bucket():
    found = marks("torchrun", ["resnet50", "cifar10"])
    assert found["resnet50 gradients"] == 4 * 25_557_032
    assert found["cifar10 gradients"] == 4 * 1_756_426
    assert found["torchrun bucket"] == 25 * 2**20
    assert "tf-mirrored bucket" not in marks("tf-mirrored", ["cifar10"])


def test_the_median_interval_comes_from_order_statistics():
    assert median_interval(list(range(1, 11))) == (2, 9)
    assert median_interval([3, 1, 2, 6, 5, 4]) == (1, 6)
    assert median_interval([1, 2, 3, 4, 5]) is None  # five samples cannot give 95%
