"""The speedup's baseline: a ``single`` launcher for every framework, one process on one device
with no data-parallel wrapper, and curves measured against it where it ran."""

from __future__ import annotations

import csv
import statistics

import pytest
from conftest import read_records, recorded_cell, scaling_cli, scaling_cli_ok, write_sweep

from scaling.cell import make_cell
from scaling.errors import ScalingError
from scaling.hardware import cpu_cores
from scaling.launchers import launchers_of
from scaling.report.curves import series_key
from scaling.report.tables import with_scaling
from scaling.report.terminal import curve_ends_table
from scaling.sweep import expand, parse_sweep

TINY = ("--workload", "cifar10", "--batch-size", 4, "--image-size", 16, "--steps", 2,
        "--warmup", 1, "--device-type", "cpu", "--no-telemetry")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow", "mxnet"])
def test_single_runs_every_framework(framework, out_dir):
    scaling_cli_ok("run", "--framework", framework, "--launcher", "single", *TINY,
                   "--out", out_dir)
    [record] = read_records(out_dir)
    assert (record["status"], record["launcher"], record["data_parallel"]) == \
        ("ok", "single", "none")
    assert record["timed_images"] == 4 * record["steps_timed"]


def test_single_starts_every_framework_and_drives_one_device():
    assert all("single" in launchers_of(name) for name in ("torch", "tensorflow", "mxnet"))
    with pytest.raises(ScalingError, match="single drives at most 1 device"):
        make_cell(framework="torch", launcher="single", workload="cifar10", devices=2,
                  batch_size=4, device_type="cpu", allow_oversubscribe=True)


def test_a_curve_is_measured_against_its_single_cell():
    rows = with_scaling([recorded_cell(1, 90.0), recorded_cell(2, 180.0),
                         recorded_cell(1, 100.0, launcher="single")])
    curve = sorted((row for row in rows if row["launcher"] == "torchrun"),
                   key=lambda row: row["devices"])
    assert {row["baseline_launcher"] for row in curve} == {"single"}
    assert [row["speedup"] for row in curve] == [pytest.approx(0.9), pytest.approx(1.8)]
    assert curve[0]["parallel_overhead"] == pytest.approx(0.1)


def test_without_a_single_cell_the_curve_says_why():
    rows = with_scaling([recorded_cell(1, 100.0), recorded_cell(2, 180.0),
                         recorded_cell(1, 0, status="oom", launcher="single")])
    curve = sorted((row for row in rows if row["launcher"] == "torchrun"),
                   key=lambda row: row["devices"])
    assert {row["baseline_launcher"] for row in curve} == {"torchrun"}
    assert curve[0]["baseline_reason"].startswith("the single cell ended oom")
    assert [row["speedup"] for row in curve] == [1.0, pytest.approx(1.8)]


def test_a_sweep_that_lists_single_runs_it_at_one_device_only():
    spec = parse_sweep({"frameworks": {"torch": {"launchers": ["single", "torchrun"]}},
                        "workloads": ["cifar10"], "batch_sizes": [4], "devices": [1, 2],
                        "nodes": [1, 2], "device_type": "cpu"})
    points = sorted((cell.launcher, cell.devices, cell.nodes, cell.repeat)
                    for cell in expand(spec))
    assert points == [("single", 1, 1, 0), ("single", 1, 1, 1), ("torchrun", 1, 1, 0),
                      ("torchrun", 1, 2, 0), ("torchrun", 2, 1, 0), ("torchrun", 2, 2, 0)]


def test_a_sweep_brackets_its_curves_with_their_single_cell():
    spec = parse_sweep({"frameworks": {"torch": {"launchers": ["torchrun", "horovod"],
                                                 "options": {"channels_last": True}}},
                        "workloads": ["cifar10"], "batch_sizes": [4], "devices": [1, 2],
                        "device_type": "cpu"})
    cells = expand(spec)
    assert [(c.launcher, c.devices, c.repeat) for c in cells] == [
        ("single", 1, 0), ("torchrun", 1, 0), ("torchrun", 2, 0), ("horovod", 1, 0),
        ("horovod", 2, 0), ("single", 1, 1)]
    assert cells[0].options == {"channels_last": True}
    assert cells[0].data_parallel == "none"


def test_repeats_run_in_rounds_each_opened_by_the_baseline_and_alternating_in_order():
    """Two workloads, two repeats: each workload's cells run together; the baseline before
    each round and after the last, the second round in the opposite order."""
    spec = parse_sweep({"frameworks": {"torch": {"launchers": ["torchrun"]}},
                        "workloads": ["cifar10", "mnist_mlp"], "batch_sizes": [4],
                        "devices": [1, 2], "device_type": "cpu", "repeats": 2})
    order = [(c.workload, c.launcher, c.devices, c.repeat) for c in expand(spec)]
    for workload in ("cifar10", "mnist_mlp"):
        assert [point[1:] for point in order if point[0] == workload] == [
            ("single", 1, 0), ("torchrun", 1, 0), ("torchrun", 2, 0),
            ("single", 1, 1), ("torchrun", 2, 1), ("torchrun", 1, 1), ("single", 1, 2)]
    assert [point[0] for point in order] == ["cifar10"] * 7 + ["mnist_mlp"] * 7


def test_a_cpu_device_is_the_same_unit_at_every_point_of_a_curve():
    spec = parse_sweep({"frameworks": {"torch": {"launchers": ["torchrun"]}},
                        "workloads": ["cifar10"], "batch_sizes": [4], "devices": [1, 2],
                        "device_type": "cpu"})
    cells = expand(spec, cores=8)
    assert {c.threads_per_device for c in cells} == {4}
    assert all(c.threads_default for c in cells)
    assert {c.threads_per_device for c in expand(spec)} == {max(1, cpu_cores() // 2)}


@pytest.mark.slow
def test_a_cpu_sweep_measures_each_curve_against_single_with_one_device_unit(tmp_path):
    """devices [1, 2] naming no threads: every cell gets the cores over 2, the single cell runs
    before and after the curve, the CSV names the baseline, how far it drifted and what going
    parallel costs, and the HTML report shows that cost per launcher."""
    out = tmp_path / "out"
    result = scaling_cli_ok("sweep", write_sweep(tmp_path / "sweep.yaml", devices=[1, 2],
                                                 single_baseline=True), "--out", out, "--html")
    records = read_records(out)
    assert [(r["launcher"], r["devices"], r["repeat"]) for r in records] == [
        ("single", 1, 0), ("torchrun", 1, 0), ("torchrun", 2, 0), ("single", 1, 1)]
    assert {(r["threads_per_device"], r["threads_default"]) for r in records} == {
        (max(1, cpu_cores() // 2), True)}
    with open(out / "results.csv") as table:
        rows = {(row["launcher"], row["devices"], row["repeat"]): row
                for row in csv.DictReader(table)}
    singles = [float(rows["single", "1", repeat]["images_per_sec"]) for repeat in "01"]
    single = {"images_per_sec": statistics.median(singles), "local_step_s": statistics.median(
        float(rows["single", "1", repeat]["local_step_s"]) for repeat in "01")}
    rows = {key[:2]: row for key, row in rows.items() if key[0] != "single"}
    for key in (("torchrun", "1"), ("torchrun", "2")):
        assert rows[key]["baseline_launcher"] == "single"
        assert float(rows[key]["baseline_images_per_sec"]) == single["images_per_sec"]
        assert float(rows[key]["baseline_drift"]) == pytest.approx(
            (max(singles) - min(singles)) / statistics.median(singles))
        assert rows[key]["baseline_measurements"] == "2"
        assert float(rows[key]["baseline_gap_s"]) >= 0
    # The scaling model: the two-device cell timed its own gradient allreduce after its
    # window, and the CSV sets the prediction beside the measurement.
    [two] = [r for r in records if r["devices"] == 2]
    assert two["allreduce_time_s"] > 0 and two["allreduce_busbw_GBps"] > 0
    assert two["gradient_bytes"] == 4 * two["params"]
    # Its contention: the same forward and backward passes, nothing aggregated, on both ranks
    # at once, against the single cell's alone.
    assert two["local_step_s"] > 0 and single["local_step_s"]
    assert float(rows["torchrun", "2"]["contention_s"]) == pytest.approx(
        two["local_step_s"] - single["local_step_s"])
    predicted = float(rows["torchrun", "2"]["predicted_images_per_sec"])
    assert float(rows["torchrun", "2"]["prediction_ratio"]) == pytest.approx(
        float(rows["torchrun", "2"]["images_per_sec"]) / predicted)
    overhead = 1 - float(rows["torchrun", "1"]["images_per_sec"]) / float(
        single["images_per_sec"])
    assert float(rows["torchrun", "1"]["parallel_overhead"]) == pytest.approx(overhead)
    # The sweep prints its one table once, with --html too; the page has the model and the
    # overheads.
    assert result.stdout.count("Each curve at its largest device count") == 1
    html = (out / "report.html").read_text()
    assert '<table class="model">' in html
    assert '<table class="overheads">' in html and f"{overhead:+.1%}" in html
    # One reference pass per point: the second baseline took the first one's local steps.
    second = next(r for r in records if (r["launcher"], r["repeat"]) == ("single", 1))
    first = next(r for r in records if (r["launcher"], r["repeat"]) == ("single", 0))
    assert (first["references"], second["references"]) == (True, False)
    assert second["local_step_s"] is None and "local_steps" not in second["wall_breakdown"]
    with open(out / "results.csv") as table:
        shared = {row["cell"]: row for row in csv.DictReader(table)}[second["cell"]]
    assert shared["references_from"] == first["cell"]
    assert float(shared["local_step_s"]) == first["local_step_s"]
    # Where each cell's wall time went, and the windows' share in the summary.
    for record in records:
        phases = record["wall_breakdown"]
        assert phases["window"] == pytest.approx(record["timed_window_s"], abs=0.1)
        assert sum(v for k, v in phases.items() if k != "total") == pytest.approx(
            phases["total"], abs=0.01)
        assert phases["total"] >= record["wall_s"] and phases["start"] > 0
    assert {"allreduce", "local_steps", "communicating_steps"} <= set(two["wall_breakdown"])
    windows = sum(r["wall_breakdown"]["window"] for r in records)
    walls = sum(r["wall_breakdown"]["total"] for r in records)
    assert f"Windows: {windows:,.0f} s of the cells' {walls:,.0f} s of wall time " \
           f"({windows / walls:.0%})" in result.stdout
    assert "wall in window" in html


def test_points_of_different_device_units_never_join_one_curve():
    """Default threads from two sweeps of different largest device counts (1 x 2 threads,
    then 2 x 1 thread): two curves, and the 2-device point is not measured against the other
    unit's one-device point."""
    one = {**recorded_cell(1, 100.0), "device_type": "cpu", "threads_per_device": 2,
           "threads_default": True}
    two = {**recorded_cell(2, 120.0), "device_type": "cpu", "threads_per_device": 1,
           "threads_default": True}
    rows = with_scaling([one, two])
    assert len({series_key(row) for row in rows}) == 2
    [point] = [row for row in rows if row["devices"] == 2]
    assert point["speedup"] is None


@pytest.mark.slow
def test_a_run_into_a_folder_takes_its_curve_unit_or_is_refused(out_dir):
    """1 device by default (every core: 2 threads on 2 cores), then 2 devices by default: the
    folder's unit would need twice the cores, so the run is refused naming it; 2 devices of
    half the cores each, given explicitly, run, and the report keeps two curves."""
    cores = cpu_cores()
    scaling_cli_ok("run", *TINY, "--devices", 1, "--out", out_dir)
    refused = scaling_cli("run", *TINY, "--devices", 2, "--out", out_dir)
    assert refused.returncode == 2
    [line] = refused.stderr.splitlines()
    assert f"measures this curve with CPU devices of {cores} thread(s) each" in line
    scaling_cli_ok("run", *TINY, "--devices", 2, "--threads-per-device", cores // 2,
                   "--out", out_dir)
    rows = with_scaling(read_records(out_dir))
    assert sorted((row["devices"], row["threads_per_device"]) for row in rows) == [
        (1, cores), (2, cores // 2)]
    assert len({series_key(row) for row in rows}) == 2
    assert [row["speedup"] for row in rows if row["devices"] == 2] == [None]


def windowed(record: dict, half_width: float) -> dict:
    """``record`` with a window interval of +- ``half_width`` of its figure."""
    ips = record["images_per_sec"]
    return {**record, "images_per_sec_ci95": [ips * (1 - half_width), ips * (1 + half_width)]}


def test_a_launcher_at_one_device_has_speedup_bounds_against_single():
    rows = with_scaling([windowed(recorded_cell(1, 100.0, launcher="single"), 0.02),
                         windowed(recorded_cell(1, 94.0), 0.02)])
    [own] = [row for row in rows if row["launcher"] == "torchrun"]
    assert own["speedup"] == pytest.approx(0.94)
    assert own["speedup_low"] < 0.94 < own["speedup_high"]
    assert own["efficiency_low"] == own["speedup_low"]


def test_a_point_whose_baseline_moved_more_than_its_interval_is_marked_drifted():
    """The single cell measured at 100 and 120 images/sec (18% drift around its median 110):
    a point with a 4%-wide interval is drifted, and the speedup's interval is wider than the
    drift."""
    singles = [{**windowed(recorded_cell(1, ips, launcher="single", repeat=repeat), 0.02),
                "started_at": f"2026-01-01T00:0{2 * repeat}:00+00:00"}
               for repeat, ips in enumerate((100.0, 120.0))]
    point = {**windowed(recorded_cell(2, 200.0), 0.02),
             "started_at": "2026-01-01T00:01:30+00:00"}
    rows = with_scaling([*singles, point])
    [two] = [row for row in rows if row["devices"] == 2]
    assert two["baseline_measurements"] == 2
    assert two["baseline_drift"] == pytest.approx(20 / 110)
    assert two["baseline_gap_s"] == 30.0
    assert two["drifted"].startswith("the baseline moved 18% between its 2 measurements")
    assert (two["speedup_high"] - two["speedup_low"]) / two["speedup"] > two["baseline_drift"]
    assert all(row["drifted"] is None for row in rows if row["launcher"] == "single")
    _, notes = curve_ends_table(rows)
    assert any(note.startswith("~ ") and "the baseline moved 18%" in note for note in notes)
