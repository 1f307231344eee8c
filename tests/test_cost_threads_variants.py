"""Cost from given prices, CPU threads as an axis, two environments of one framework, and the
device type as an axis."""

from __future__ import annotations

import csv
import sys

import pytest
import yaml
from conftest import (read_records, recorded_cell, scaling_cli_ok, scaling_in_process,
                      write_records, write_sweep)

from scaling.cli.options import parse_prices
from scaling.errors import ScalingError
from scaling.report.cost import with_costs
from scaling.report.curves import series_key
from scaling.report.tables import with_scaling
from scaling.sweep import expand, parse_sweep


def priced_rows(prices):
    gpu = {**recorded_cell(1, 1000.0), "device_name": "NVIDIA H100"}
    gpu_pair = {**recorded_cell(2, 1800.0), "device_name": "NVIDIA H100"}
    cpu = {**recorded_cell(2, 100.0, framework="tensorflow", launcher="tf-mirrored"),
           "device_type": "cpu", "device_name": "/cpu:0"}
    return with_costs(with_scaling([gpu, gpu_pair, cpu]), prices)


def test_cost_per_million_images_and_relative_to_the_fastest_gpu_cell():
    one, two, cpu = priced_rows({"gpu": 2.0, "cpu": 0.1})
    assert one["price_per_hour"] == 2.0 and two["price_per_hour"] == 4.0
    assert one["cost_per_million_images"] == pytest.approx(2.0 * 1e6 / (1000 * 3600))
    assert one["time_to_million_images_s"] == pytest.approx(1000.0)
    # The reference is the fastest GPU cell: two GPUs at 1800 images/sec.
    assert two["cost_relative"] == 1.0 and two["time_relative"] == 1.0
    assert cpu["price_per_hour"] == pytest.approx(0.2)
    assert cpu["cost_relative"] == pytest.approx(
        (0.2 / 100) / (4.0 / 1800))
    assert cpu["time_relative"] == pytest.approx(18.0)


def test_a_device_name_or_an_instance_price_wins_and_no_price_means_no_cost():
    one, _, cpu = priced_rows({"gpu": 2.0, "NVIDIA H100": 3.0})
    assert one["price_per_hour"] == 3.0
    assert cpu["price_per_hour"] is None and cpu["cost_per_million_images"] is None
    assert cpu["cost_relative"] is None and cpu["time_relative"] == pytest.approx(18.0)
    one, _, _ = priced_rows({"instance": 12.0})
    assert one["price_per_hour"] == 12.0


def test_report_prices_from_the_sweep_and_the_command_line(tmp_path):
    folder = write_records(tmp_path / "out", [recorded_cell(1, 1000.0), recorded_cell(2, 1800.0)])
    (folder / "sweep.yaml").write_text(yaml.safe_dump({"prices": {"gpu": 2.0}}))
    scaling_cli_ok("report", folder, "--html")
    assert '<table class="costs">' in (folder / "report.html").read_text()
    with open(folder / "results.csv") as table:
        rows = list(csv.DictReader(table))
    assert float(rows[0]["price_per_hour"]) == 2.0
    scaling_cli_ok("report", folder, "--price", "gpu=4")
    with open(folder / "results.csv") as table:
        assert float(next(csv.DictReader(table))["price_per_hour"]) == 4.0


def test_without_prices_the_cost_columns_stay_empty(tmp_path):
    folder = write_records(tmp_path / "out", [recorded_cell(1, 1000.0)])
    scaling_cli_ok("report", folder, "--html")
    assert '<table class="costs">' not in (folder / "report.html").read_text()
    with open(folder / "results.csv") as table:
        row = next(csv.DictReader(table))
    assert row["price_per_hour"] == row["cost_per_million_images"] == ""
    assert float(row["time_to_million_images_s"]) == pytest.approx(1000.0)


@pytest.mark.parametrize("pair", ["gpu", "gpu=cheap", "=3", "gpu=-1"])
def test_a_bad_price_is_a_one_line_error(pair):
    with pytest.raises(ScalingError, match="--price takes KEY=USD_PER_HOUR"):
        parse_prices([pair])
    assert parse_prices(["NVIDIA H100=3.5"]) == {"NVIDIA H100": 3.5}


@pytest.mark.slow
def test_a_threads_axis_gives_a_curve_per_thread_count(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", threads_per_device=[1, 2])
    out = tmp_path / "out"
    scaling_cli_ok("sweep", sweep, "--out", out, "--html")
    records = read_records(out)
    assert sorted(r["threads_per_device"] for r in records) == [1, 2]
    assert all(r["status"] == "ok" for r in records)
    assert len({series_key(r) for r in with_scaling(records)}) == 2
    page = (out / "report.html").read_text()
    assert '<table class="threads">' in page
    assert "<th>1 thread</th>" in page and "<th>2 threads</th>" in page


@pytest.mark.slow
def test_two_environments_of_one_framework_are_two_curves(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks={
        "torch": {"launchers": ["torchrun"]},
        "torch@second": {"framework": "torch", "python": sys.executable,
                         "launchers": ["torchrun"]}})
    out = tmp_path / "out"
    result = scaling_cli_ok("sweep", sweep, "--out", out)
    records = read_records(out)
    assert sorted((r["framework"], r["variant"], r["status"]) for r in records) == [
        ("torch", "", "ok"), ("torch", "torch@second", "ok")]
    version = records[0]["versions"]["torch"]
    assert f"torch {version} / torchrun" in result.stdout
    assert f"torch@second {version} / torchrun" in result.stdout


def test_a_variant_must_name_its_framework(tmp_path):
    result = scaling_in_process("sweep", write_sweep(tmp_path / "sweep.yaml", frameworks={
        "tensorflow@tf215": {"launchers": ["tf-mirrored"]}}), "--out", tmp_path / "out")
    assert result.returncode == 2
    assert "unknown framework 'tensorflow@tf215'" in result.stderr
    assert "names its framework: framework: ..." in result.stderr


def test_device_type_is_an_axis():
    spec = parse_sweep({"frameworks": {"torch": {"launchers": ["torchrun"]}},
                        "workloads": ["cifar10"], "batch_sizes": [4], "devices": [1],
                        "device_type": ["cpu", "gpu"]})
    assert spec.device_types() == ["cpu", "gpu"]
    with pytest.raises(ScalingError, match="1 GPUs requested but this machine has 0"):
        expand(spec)
    spec.device_type = ["cpu"]
    assert [(cell.launcher, cell.device_type) for cell in expand(spec)] == [
        ("single", "cpu"), ("torchrun", "cpu"), ("single", "cpu")]
