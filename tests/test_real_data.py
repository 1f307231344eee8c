"""Real images through each framework's own input pipeline, and whether the input is the bound.

A cell given ``--data DIR`` decodes and augments the JPEGs of an ImageFolder tree in its timed
window. After the window it times its pipeline alone and the same steps on a synthetic batch;
the report says from the three figures whether the input is the bound.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from conftest import (read_records, recorded_cell, scaling_cli, scaling_cli_ok,
                      scaling_in_process, write_records, write_sweep)
from cpugroup import AHEAD_SHARES, cpu_group

from scaling.cli import cli
from scaling.report.input import input_lines, verdict, with_input_verdicts
from scaling.report.tables import with_scaling
from scaling.sweep import expand, parse_sweep

FRAMEWORK_LAUNCHERS = {"torch": ["torchrun"], "tensorflow": ["tf-mirrored"],
                       "mxnet": ["mxnet-kvstore"], "jax": ["jax", "jax-distributed"]}
"""The launchers of each framework that train on real images here, on one and two devices."""


def make_data(out, *args) -> None:
    """``scaling make-data OUT ARGS`` in this process (it starts no other)."""
    made = scaling_in_process("make-data", out, *args)
    assert made.returncode == 0, made.output


@pytest.fixture(scope="module")
def small_images(tmp_path_factory):
    """24 JPEGs of 96 px in 3 classes."""
    data = tmp_path_factory.mktemp("data") / "small"
    make_data(data, "--images", 24, "--size", 96, "--classes", 3)
    return data


@pytest.fixture(scope="module")
def real_images(small_images, tmp_path_factory):
    """One sweep of tiny CIFAR-10 cells on ``small_images``, one loader worker each: every
    launcher of ``FRAMEWORK_LAUNCHERS`` on one and on two devices of one thread, ended by its
    report with the HTML page. Its output folder, the page, and each record by (framework,
    launcher, devices)."""
    folder = tmp_path_factory.mktemp("real")
    sweep = write_sweep(folder / "sweep.yaml",
                        frameworks={name: {"launchers": launchers}
                                    for name, launchers in FRAMEWORK_LAUNCHERS.items()},
                        devices=[1, 2], image_size=32, steps=4, warmup=2, threads_per_device=1,
                        data=str(small_images), loader_workers=1, timeout_s=600,
                        share_processes=False)  # each cell in its own processes, as a run's
    out = folder / "out"
    swept = scaling_cli("sweep", sweep, "--html", "--out", out, timeout=1800)
    assert (out / "report.html").exists(), swept.stderr  # it ends with the report, ok or not
    records = {(record["framework"], record["launcher"], record["devices"]): record
               for record in read_records(out)}
    return out, (out / "report.html").read_text(), records


def input_rows(page: str, record) -> list:
    """The rows of the page's real-data table that show ``record``'s device count and its
    three figures side by side."""
    table = page.split('<table class="input">')[1].split("</table>")[0]
    figures = (f"<td>{record['devices']}</td><td>{record['images_per_sec']:,.1f}</td>"
               f"<td>{record['synthetic_images_per_sec']:,.1f}</td>"
               f"<td>{record['loader_images_per_sec']:,.1f}</td>")
    return [row for row in table.split("<tr>") if figures in row]


@pytest.mark.slow
@pytest.mark.parametrize("framework, launcher", [
    (framework, launcher) for framework, launchers in FRAMEWORK_LAUNCHERS.items()
    for launcher in launchers])
@pytest.mark.parametrize("devices", [1, 2])
def test_each_framework_trains_on_real_images_on_one_and_two_devices(
        real_images, small_images, framework, launcher, devices):
    out, page, records = real_images
    record = records[framework, launcher, devices]
    assert record["status"] == "ok", record["error"]
    assert record["data"] == str(small_images) and record["loader_workers"] == 1
    assert record["steps_timed"] >= 20  # ten times the two batches its one worker holds ready
    assert record["timed_images"] == 4 * devices * record["steps_timed"]
    assert record["loader_images_per_sec"] > 0 and record["synthetic_images_per_sec"] > 0
    assert "Real data: the cell against the same steps on a synthetic batch" in page
    # Its own row, under its curve's label, in the page's real-data table.
    assert any(f" / {launcher}, batch 4" in row for row in input_rows(page, record))
    csv_header = (out / "results.csv").read_text().splitlines()[0].split(",")
    for field in ("data", "loader_workers", "loader_images_per_sec",
                  "synthetic_images_per_sec", "input_bound"):
        assert field in csv_header


@pytest.fixture
def ahead(tmp_path):
    """A CPU group ahead of the neighbouring tests' processes."""
    with cpu_group(f"scaling-ahead-{os.getpid()}-{tmp_path.name}",
                   shares=AHEAD_SHARES) as group:
        yield group


def verdict_of(tmp_path, data, group, *args):
    """The record and CSV row of one single-threaded cell on ``data``, run in ``group``. Its
    verdict compares figures timed one after another: sharing a core with a neighbouring test
    halves the cell's pace, and whether it shares one changes as the scheduler moves the
    processes, by more than the verdict's margins between two figures."""
    scaling_cli_ok("run", *args, "--device-type", "cpu", "--threads-per-device", 1,
                   "--data", data, "--out", tmp_path, cpu_group=group)
    reported = scaling_in_process("report", tmp_path)  # reads the record: no pace of its own
    assert reported.returncode == 0, reported.output
    [row] = [line for line in (tmp_path / "results.csv").read_text().splitlines()[1:]]
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    return read_records(tmp_path)[0], dict(zip(header, row.split(",")))


@pytest.mark.slow
def test_a_small_model_decoding_large_images_in_its_own_process_is_input_bound(tmp_path,
                                                                               ahead):
    data = tmp_path / "large"
    make_data(data, "--images", 16, "--size", 2048, "--classes", 2)
    # Both phases decode in this process, so they run at nearly one pace (the pipeline alone
    # within 2% of the cell on a quiet machine): twelve steps each average over seconds.
    record, row = verdict_of(tmp_path / "run", data, ahead, "--workload", "mnist_mlp",
                             "--batch-size", 8, "--steps", 12, "--warmup", 2,
                             "--loader-workers", 0)
    assert record["images_per_sec"] < 0.95 * record["synthetic_images_per_sec"]
    assert row["input_bound"] == "True"
    assert int(row["loader_workers_needed"]) >= 2


@pytest.mark.slow
def test_the_same_model_at_a_large_size_fed_fast_enough_is_not_input_bound(tmp_path,
                                                                             small_images,
                                                                             ahead):
    record, row = verdict_of(tmp_path, small_images, ahead, "--workload", "mnist_mlp",
                             "--image-size", 224, "--batch-size", 8, "--steps", 6,
                             "--warmup", 2, "--loader-workers", 1)
    assert record["loader_images_per_sec"] > 1.5 * record["images_per_sec"]
    assert row["input_bound"] == "False" and row["loader_workers_needed"] == ""


def test_a_data_folder_missing_here_is_a_one_line_error_before_anything_runs(tmp_path):
    """Locally the folder is checked before the cell starts; under Slurm each node checks it
    (tests/test_slurm.py)."""
    result = CliRunner().invoke(cli, ["run", "--workload", "cifar10", "--batch-size", "4",
                                      "--device-type", "cpu", "--data", str(tmp_path / "none"),
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert f"data folder {tmp_path}/none is not readable on this node" in result.output
    assert not (tmp_path / "run" / "results.jsonl").exists()


@pytest.fixture(scope="module")
def too_small_shards(small_images, tmp_path_factory):
    """One sweep of a torch and a JAX cell on ``small_images`` (24 images) with batches of
    32, each in one process: its exit status, and each record by framework."""
    folder = tmp_path_factory.mktemp("shard")
    sweep = write_sweep(folder / "sweep.yaml",
                        frameworks={"torch": {"launchers": ["single"]},
                                    "jax": {"launchers": ["jax"]}},
                        batch_sizes=[32], image_size=32, steps=2, warmup=1,
                        data=str(small_images), references="none", timeout_s=300,
                        share_processes=False)
    swept = scaling_cli("sweep", sweep, "--out", folder / "out")
    assert (folder / "out" / "results.jsonl").exists(), swept.stderr
    return swept.returncode, {record["framework"]: record
                              for record in read_records(folder / "out")}


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_shard_smaller_than_one_batch_is_an_error_not_an_endless_wait(too_small_shards,
                                                                        framework):
    returncode, records = too_small_shards
    assert returncode == 1
    record = records[framework]
    assert record["status"] == "error"
    assert "the shard holds fewer images than one batch" in record["error"]


def real(status="ok", **fields):
    return {**recorded_cell(1, fields.pop("ips"), status=status), "data": "/data",
            "loader_workers": 1, **fields}


@pytest.mark.parametrize("row, bound, needed", [
    # Below synthetic, and the pipeline alone hardly faster: the model waits for images. The
    # one worker gives 110 images/sec; 400 need four.
    (real(ips=100.0, synthetic_images_per_sec=400.0, loader_images_per_sec=110.0), True, 4),
    (real(ips=100.0, synthetic_images_per_sec=400.0, loader_images_per_sec=140.0), True, 3),
    # Below synthetic, but the pipeline alone is clearly (1.5x) faster: something else is lost.
    (real(ips=100.0, synthetic_images_per_sec=400.0, loader_images_per_sec=160.0), False,
     None),
    # Within 5% of synthetic: not bound, whatever the pipeline does alone.
    (real(ips=96.0, synthetic_images_per_sec=100.0, loader_images_per_sec=96.0), False, None),
    # At 0 workers the training process is the one worker.
    (real(ips=50.0, synthetic_images_per_sec=200.0, loader_images_per_sec=50.0,
          loader_workers=0), True, 4),
])
def test_the_verdict_reads_the_cell_against_synthetic_and_the_pipeline_alone(row, bound,
                                                                              needed):
    assert verdict(row) == {"input_bound": bound, "loader_workers_needed": needed}


def test_synthetic_cells_and_failed_ones_have_no_verdict():
    assert verdict(recorded_cell(1, 100.0))["input_bound"] is None
    failed = real(ips=100.0, status="oom", synthetic_images_per_sec=None,
                  loader_images_per_sec=None)
    assert verdict(failed) == {"input_bound": None, "loader_workers_needed": None}


def test_the_verdict_table_shows_the_three_figures_side_by_side():
    # The table of the HTML page (the terminal prints each curve at its largest count only).
    rows = with_input_verdicts(with_scaling([
        real(ips=100.0, synthetic_images_per_sec=400.0, loader_images_per_sec=110.0)]))
    [line] = input_lines(rows, lambda row: "curve")
    assert line[2:] == ("1", "100.0", "400.0", "110.0", "yes", "about 4")


def test_the_html_report_has_the_real_data_table(tmp_path):
    out = write_records(tmp_path / "out", [
        real(ips=100.0, synthetic_images_per_sec=400.0, loader_images_per_sec=110.0)])
    assert CliRunner().invoke(cli, ["report", str(out), "--html"]).exit_code == 0
    page = (out / "report.html").read_text()
    table = page.split('<table class="input">')[1].split("</table>")[0]
    for shown in ("Real data: the cell against", "input-bound", "100.0", "400.0", "110.0",
                  "<td>yes</td>", "about 4"):
        assert shown in table


def test_a_sweep_over_loader_workers_makes_one_real_data_curve_per_count(tmp_path):
    config = parse_sweep({"frameworks": {"torch": {"launchers": ["torchrun"]}},
                          "workloads": ["cifar10"], "batch_sizes": [8], "devices": [1, 2],
                          "device_type": "cpu", "data": str(tmp_path),
                          "loader_workers": [0, 2]}, "test")
    cells = [cell for cell in expand(config, cores=2) if cell.launcher == "torchrun"]
    assert sorted((cell.devices, cell.loader_workers) for cell in cells) == [
        (1, 0), (1, 2), (2, 0), (2, 2)]
    assert {cell.data for cell in cells} == {str(tmp_path)}


def test_loader_workers_without_data_or_below_zero_are_refused():
    for args, message in ((("--loader-workers", "2"), "give --data DIR as well"),
                          (("--data", "/d", "--loader-workers", "-1"), "non-negative")):
        result = CliRunner().invoke(cli, ["run", "--workload", "cifar10", "--batch-size", "4",
                                          "--device-type", "cpu", *args])
        assert result.exit_code == 2 and message in result.output
