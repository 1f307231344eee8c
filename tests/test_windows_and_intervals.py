"""Timed windows long enough to mean something, synchronized only between chunks, and every
figure with its 95% interval; suspect figures are marked with the reason."""

from __future__ import annotations

import csv
import math

import pytest
from conftest import (check_images_per_sec, rank_reports, read_records, recorded_cell,
                      scaling_cli, scaling_cli_ok, write_records)
from pages import grids_of
from scipy import stats

from scaling.report.tables import with_scaling
from scaling.uncertainty import throughput_interval
from scaling.workers.window_plan import (MAX_WINDOWS, calibration_steps_more, chunk_length,
                                         planned_steps, warmup_steps)

TINY = ("--workload", "cifar10", "--image-size", "16", "--batch-size", "4")
MIN_TIME_S = 1.5


def t_interval(images_per_sec: float, chunks) -> list:
    """The 95% interval of ``images_per_sec`` computed here from the chunks' step times: the
    mean step time m +- t(0.975, n - 1) s / sqrt(n) as a throughput interval, open above
    (infinite) when the half-width reaches m, as a few noisy chunks can give."""
    means = [chunk["seconds"] / chunk["steps"] for chunk in chunks]
    mean = sum(means) / len(means)
    sd = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1))
    half = stats.t.ppf(0.975, len(means) - 1) * sd / math.sqrt(len(means))
    high = images_per_sec * mean / (mean - half) if half < mean else math.inf
    return [images_per_sec * mean / (mean + half), high]


@pytest.mark.slow
@pytest.mark.parametrize("framework, launcher, mode, min_time_s", [
    ("torch", "torchrun", "train", 2 * MIN_TIME_S),
    ("tensorflow", "tf-mirrored", "forward", MIN_TIME_S),
    ("tensorflow", "tf-multiworker", "forward", MIN_TIME_S),
    ("mxnet", "mxnet-kvstore", "forward", MIN_TIME_S),
])
def test_min_time_plans_whole_chunks_before_the_window_and_it_holds_only_steps(
        out_dir, framework, launcher, mode, min_time_s):
    """Twenty tiny steps take a fraction of ``min_time_s`` even on a loaded machine (up to 0.1 s
    a training step). Each rank plans the whole chunks more that fill it at its warm-up's pace,
    the ranks time the largest plan, and between the window's barriers no collective of the
    harness runs: under torchrun's training, only the gradients' allreduce communicates."""
    scaling_cli_ok("run", "--framework", framework, "--launcher", launcher, *TINY,
                   "--warmup", 6, "--mode", mode, "--devices", 2, "--steps", 20,
                   "--min-time", min_time_s, "--out", out_dir)
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    assert record["min_time_s"] == min_time_s and record["timed_window_s"] >= min_time_s
    assert record["steps_timed"] > 20 and record["steps_timed"] % chunk_length(20) == 0
    reports = rank_reports(record)
    cell = {"steps": 20, "min_time_s": min_time_s}
    for report in reports:
        assert report["window_collectives"] == 0 and 1 <= report["windows"] <= MAX_WINDOWS
        assert report["steps_planned"] == planned_steps(cell, report["calibration_step_s"])
        assert report["steps_timed"] == record["steps_timed"]
        assert {chunk["steps"] for chunk in report["chunks"]} == {chunk_length(20)}
        assert sum(chunk["steps"] for chunk in report["chunks"]) == report["steps_timed"]
        assert min_time_s <= sum(chunk["seconds"] for chunk in report["chunks"]) \
            <= report["window_s"]
    assert record["steps_planned"] == max(report["steps_planned"] for report in reports) \
        == record["steps_timed"]
    check_images_per_sec(record, 4 * 2 * record["steps_timed"])
    slowest = max(reports, key=lambda report: report["window_s"])
    assert record["images_per_sec_ci95"] == pytest.approx(
        t_interval(record["images_per_sec"], slowest["chunks"]))


def test_the_plan_adds_whole_chunks_to_the_asked_steps_after_a_warm_up_that_calibrates():
    cell = {"steps": 25, "min_time_s": 2.0}
    assert [warmup_steps({**cell, "warmup": warmup}) for warmup in (0, 1, 4, 5)] == [4, 4, 4, 5]
    assert warmup_steps({**cell, "warmup": 0, "min_time_s": 0.0}) == 0
    assert planned_steps({**cell, "min_time_s": 0.0}, None) == 25
    assert planned_steps(cell, 1.0) == 25  # the asked steps already last longer
    # 1.2 x 2 s at 0.01 s a step: 240 steps, 215 beyond the asked 25, in chunks of 2: 216.
    assert planned_steps(cell, 0.01) == 25 + 216
    # Three calibration steps of 0.01 s: 17 more, so that the 20 last a tenth of 2 s.
    assert calibration_steps_more(cell, 0.03, 3) == 17
    assert calibration_steps_more(cell, 0.3, 3) == 0


def test_a_window_on_real_data_outlasts_what_its_loader_workers_hold_ready():
    """Twelve workers hold 24 batches ready: the window times ten times that, in whole chunks,
    so that the batches made during the warm-up are not most of what it measures."""
    cell = {"steps": 30, "data": "/images", "loader_workers": 12}
    assert planned_steps(cell, None) == 240
    assert planned_steps({**cell, "loader_workers": 0}, None) == 30  # nothing is made ahead
    assert planned_steps({**cell, "data": None}, None) == 30
    assert planned_steps({**cell, "min_time_s": 10.0}, 0.03) == 30 + 3 * 124  # 400 to fill 12 s


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict:
    """One rank, 25 steps, no minimum time."""
    out = tmp_path_factory.mktemp("plain") / "out"
    scaling_cli_ok("run", *TINY, "--warmup", 1, "--steps", 25, "--out", out)
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    return record


@pytest.mark.slow
def test_without_min_time_the_window_is_the_asked_steps_in_chunks(plain):
    [report] = rank_reports(plain)
    assert plain["steps_timed"] == 25
    assert [chunk["steps"] for chunk in report["chunks"]] == [2] * 12 + [1]
    check_images_per_sec(plain, 4 * 25)


@pytest.mark.slow
def test_every_ok_record_has_the_t_interval_of_its_chunk_times(plain):
    [report] = rank_reports(plain)
    low, high = plain["images_per_sec_ci95"]
    assert low < plain["images_per_sec"] < high
    assert [low, high] == pytest.approx(t_interval(plain["images_per_sec"], report["chunks"]))


def test_interval_from_chunk_times():
    steady = [{"steps": 2, "seconds": 0.2}] * 10
    assert throughput_interval(100.0, steady) == pytest.approx([100.0, 100.0])
    # Chunk means 0.09 and 0.11 s, five each: mean 0.1, t(9) 2.262, sd 0.01054 -> +-7.54%.
    uneven = [{"steps": 1, "seconds": s} for s in [0.09, 0.11] * 5]
    low, high = throughput_interval(100.0, uneven)
    assert (low, high) == pytest.approx((100 / 1.0754, 100 / 0.9246), rel=1e-3)
    # The same step times in chunks of two steps and of one: the means are per step.
    mixed = [{"steps": 2, "seconds": 0.18}, {"steps": 1, "seconds": 0.11}] * 5
    assert throughput_interval(100.0, mixed) == pytest.approx((low, high))
    assert throughput_interval(100.0, steady[:1]) is None


def interval(ips, width):
    return [ips * (1 - width / 2), ips * (1 + width / 2)]


def test_speedup_carries_the_combined_interval_and_suspects_say_why():
    rows = with_scaling([
        {**recorded_cell(1, 100.0), "images_per_sec_ci95": interval(100.0, 0.06)},
        {**recorded_cell(2, 190.0), "images_per_sec_ci95": interval(190.0, 0.08)},
        {**recorded_cell(4, 440.0), "images_per_sec_ci95": interval(440.0, 0.02)},
        {**recorded_cell(8, 700.0), "images_per_sec_ci95": interval(700.0, 0.20)},
    ])
    two, four, eight = rows[1:]
    # Relative half widths 3% and 4% combine to 5%.
    assert (two["speedup_low"], two["speedup_high"]) == pytest.approx((1.9 * 0.95, 1.9 * 1.05))
    assert two["efficiency_low"] == pytest.approx(1.9 * 0.95 / 2)
    assert two["suspect"] is None
    assert four["suspect"] == "efficiency 110% is beyond linear scaling"
    assert eight["suspect"] == "the 95% interval spans 20% of the figure"


def test_tables_print_plus_minus_and_mark_suspects_and_the_csv_has_the_bounds(tmp_path):
    folder = write_records(tmp_path / "out", [
        {**recorded_cell(1, 100.0), "images_per_sec_ci95": interval(100.0, 0.06)},
        {**recorded_cell(2, 190.0), "images_per_sec_ci95": interval(190.0, 0.10)},
        {**recorded_cell(4, 440.0), "images_per_sec_ci95": interval(440.0, 0.02)},
    ])
    result = scaling_cli("report", folder, "--html")
    assert result.returncode == 0, result.stderr
    # Relative half widths: 3% (baseline), 5% and 1%; combined 5.83% and 3.16%. The terminal
    # has the curve at its largest device count; the page's grid has every point.
    assert "440.0 ± 4.4 (4.40x ± 0.14, 110%) ?" in result.stdout
    assert "? resnet50, torch 2.14.1 / torchrun, batch 32, 4 GPU: efficiency 110% is beyond " \
           "linear scaling" in result.stdout
    [grid] = grids_of((folder / "report.html").read_text()).values()
    assert grid[32, 1][1].startswith("100.0 ± 3.0 (1.00x, 100%)")
    assert grid[32, 2][1].startswith("190.0 ± 9.5 (1.90x ± 0.11, 95%)")
    with open(folder / "results.csv") as table:
        rows = list(csv.DictReader(table))
    assert float(rows[1]["images_per_sec_low"]) == pytest.approx(180.5)
    assert float(rows[1]["speedup_high"]) == pytest.approx(1.9 * (1 + 0.0583), rel=1e-3)
    assert rows[0]["speedup_low"] == ""
    assert rows[2]["suspect"] == "efficiency 110% is beyond linear scaling"
    assert rows[0]["suspect"] == ""
