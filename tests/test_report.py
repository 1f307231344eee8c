"""Speedup and efficiency from known records (weak scaling against a measured baseline)."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import recorded_cell as record
from conftest import scaling_cli, scaling_in_process

from scaling.report.curves import series_key
from scaling.report.tables import speedup_vs_linear, with_scaling
from scaling.report.columns import CSV_COLUMNS


def test_speedup_is_throughput_over_the_one_device_baseline():
    assert speedup_vs_linear(350.0, 100.0, 4) == (3.5, 0.875)
    assert speedup_vs_linear(None, 100.0, 4) == (None, None)
    assert speedup_vs_linear(350.0, None, 4) == (None, None)


def test_rows_gain_speedup_and_efficiency_per_curve():
    rows = with_scaling([
        record(1, 100.0), record(2, 190.0), record(4, 360.0), record(8, 0, status="oom"),
        record(1, 50.0, batch=64), record(2, 99.0, batch=64),
    ])
    got = {(r["batch_size"], r["devices"]): (r["speedup"], r["efficiency"]) for r in rows}
    assert got[(32, 1)] == (1.0, 1.0)
    assert got[(32, 2)] == pytest.approx((1.9, 0.95))
    assert got[(32, 4)] == pytest.approx((3.6, 0.9))
    assert got[(32, 8)] == (None, None)
    assert got[(64, 2)] == pytest.approx((1.98, 0.99))


def test_baseline_is_the_median_of_repeats():
    rows = with_scaling([record(1, 90.0), record(1, 100.0, repeat=1), record(1, 130.0, repeat=2),
                         record(2, 150.0)])
    assert rows[-1]["speedup"] == pytest.approx(1.5)


def test_missing_baseline_gives_no_speedup_rather_than_zero():
    rows = with_scaling([record(1, 0, status="oom"), record(2, 190.0)])
    assert [(r["speedup"], r["efficiency"]) for r in rows] == [(None, None), (None, None)]


def test_max_batch_trials_never_enter_a_baseline():
    rows = with_scaling([record(1, 100.0), record(1, 50.0, purpose="maxbatch"),
                         record(2, 180.0)])
    assert [r["purpose"] for r in rows] == ["sweep", "sweep"]
    assert rows[-1]["baseline_images_per_sec"] == 100.0
    assert rows[-1]["speedup"] == pytest.approx(1.8)


def test_two_option_sets_or_versions_stay_two_curves():
    rows = with_scaling([record(1, 100.0), record(2, 180.0),
                         record(1, 200.0, options={"xla": True}),
                         record(2, 300.0, options={"xla": True}),
                         record(1, 50.0, version="2.15.0"), record(2, 95.0, version="2.15.0")])
    assert len({series_key(r) for r in rows}) == 3
    assert [r["speedup"] for r in rows if r["devices"] == 2] == pytest.approx([1.8, 1.5, 1.9])


def test_real_data_cells_with_other_loader_workers_never_share_a_baseline():
    """A loader-bound cell of 12 workers is not a speedup over one of 4 (as on an H100:
    366, 1,067 and 2,447 img/s with 0, 4 and 12 workers)."""
    cells = []
    for workers, ips in ((0, 366.0), (4, 1067.0), (12, 2447.0)):
        for launcher, share in (("single", 1.0), ("torchrun", 0.95)):
            cells.append({**record(1, ips * share, launcher=launcher), "data": "/images",
                          "loader_workers": workers})
    rows = with_scaling(cells)
    assert {row["baseline_images_per_sec"] for row in rows if row["launcher"] == "torchrun"} \
        == {366.0, 1067.0, 2447.0}
    assert [row["speedup"] for row in rows] == pytest.approx([1.0, 0.95] * 3)


def test_a_cell_without_versions_joins_its_curve():
    rows = with_scaling([record(1, 100.0), record(2, 0, status="crashed")])
    assert len({series_key(r) for r in rows}) == 1
    assert rows[1]["framework_version"] == "2.14.1"


def test_report_table_keeps_option_sets_apart(tmp_path):
    records = [record(1, 100.0), record(1, 200.0, options={"xla": True})]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = scaling_cli("report", tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines()
            if "torchrun" in line and "images/sec" not in line and "(1.00x, 100%)" in line]
    assert len(rows) == 2 and any('{"xla": true}' in line for line in rows)


def test_csv_columns_are_the_schema_columns(tmp_path):
    (tmp_path / "results.jsonl").write_text(json.dumps(record(1, 100.0)) + "\n")
    scaling_cli("report", tmp_path)
    with open(tmp_path / "results.csv") as table:
        assert next(csv.reader(table)) == CSV_COLUMNS


def test_report_command_writes_csv_and_marks_failures(tmp_path):
    records = [record(1, 100.0), record(2, 180.0), record(4, 0, status="oom"),
               record(2, 40.0, workload="alexnet")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = scaling_cli("report", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "180.0 (1.80x, 90%)" in result.stdout
    assert "OOM" in result.stdout
    assert "40.0 (no baseline)" in result.stdout
    with open(tmp_path / "results.csv") as table:
        rows = list(csv.DictReader(table))
    assert [(r["workload"], r["devices"], r["status"], r["speedup"], r["efficiency"])
            for r in rows] == [
        ("resnet50", "1", "ok", "1.0", "1.0"),
        ("resnet50", "2", "ok", "1.8", "0.9"),
        ("resnet50", "4", "oom", "", ""),
        ("alexnet", "2", "ok", "", ""),
    ]


def test_report_of_an_empty_folder_is_a_one_line_error(tmp_path):
    result = scaling_in_process("report", tmp_path)
    assert result.returncode == 2
    assert "no results in" in result.stderr


def test_report_plot_draws_one_figure_per_workload(tmp_path):
    records = [record(1, 100.0), record(2, 180.0), record(4, 330.0),
               record(1, 40.0, workload="alexnet"), record(2, 0, status="oom",
                                                            workload="alexnet")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = scaling_cli("report", tmp_path, "--plot")
    assert result.returncode == 0, result.stderr
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["scaling-alexnet-224-gpu.png", "scaling-resnet50-224-gpu.png"]
    for name in pngs:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_draw_each_points_interval_as_error_bars():
    from matplotlib.container import ErrorbarContainer

    from scaling.report.figures import scaling_figure

    records = [record(1, 100.0), record(2, 180.0)]
    records[0]["images_per_sec_ci95"] = [90.0, 110.0]
    records[1]["images_per_sec_ci95"] = [170.0, 200.0]
    figure = scaling_figure(with_scaling(records), "resnet50")
    throughput = figure.axes[0]
    [bars] = [c for c in throughput.containers if isinstance(c, ErrorbarContainer)]
    segments = bars.lines[2][0].get_segments()
    assert [(s[0][1], s[1][1]) for s in segments] == [(90.0, 110.0), (170.0, 200.0)]
    speedup = figure.axes[1]
    assert [c for c in speedup.containers if isinstance(c, ErrorbarContainer)]


def test_each_framework_draws_in_its_registered_colour_and_no_two_share_one():
    from matplotlib.colors import to_hex

    from scaling.frameworks import FRAMEWORKS
    from scaling.report.figures import scaling_figure

    colours = {name: FRAMEWORKS.get(name).colour for name in FRAMEWORKS}
    assert len(set(colours.values())) == len(colours)
    records = [record(devices, 100.0 * devices, framework=framework, launcher=launcher)
               for framework, launcher in (("torch", "torchrun"), ("jax", "jax"))
               for devices in (1, 2)]
    throughput = scaling_figure(with_scaling(records), "resnet50").axes[0]
    drawn = {curve.get_label().split()[0]: to_hex(curve.lines[0].get_color())
             for curve in throughput.containers}
    assert drawn == {"torch": colours["torch"], "jax": colours["jax"]}


def test_the_details_table_leaves_out_columns_that_no_record_has():
    from scaling.report.html import measured_details

    cpu = record(1, 100.0)
    cpu.update(device_type="cpu", telemetry={"cpu_util_mean": 93.0,
                                             "rss_max_bytes_per_rank": [2**30]})
    details = measured_details(with_scaling([cpu]))
    assert details["headers"] == ["CPU use", "RSS per rank (max)"]
    assert details["lines"][0][4:] == ["93%", "1.00 GiB"]
