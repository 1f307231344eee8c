"""``scaling compare BASE NEW``: regressions beyond the threshold fail the command, noise does not."""

from __future__ import annotations

import csv

import pytest
from conftest import (recorded_cell, scaling_cli, scaling_cli_ok, scaling_in_process,
                      write_records, write_sweep)

from scaling.report.baseline import figure_interval
from scaling.report.compare import Figure, compare, parse_threshold, verdict


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A real sweep of two cells."""
    root = tmp_path_factory.mktemp("measured")
    scaling_cli_ok("sweep", write_sweep(root / "sweep.yaml", devices=[1, 2]),
                   "--out", root / "base")
    return root / "base"


def slowed(records, factor):
    return [{**record, "images_per_sec": record["images_per_sec"] * factor} for record in records]


@pytest.mark.slow
def test_identical_results_exit_0(measured):
    result = scaling_cli("compare", measured, measured)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 cells compared: 0 regression, 0 improvement, 0 within noise, 2 same" in \
        result.stdout


RECORDED = [recorded_cell(1, 100.0), recorded_cell(2, 190.0), recorded_cell(4, 0, status="oom")]


def test_a_30_percent_slowdown_exits_1(tmp_path):
    base = write_records(tmp_path / "base", RECORDED)
    new = write_records(tmp_path / "new", slowed(RECORDED[:2], 0.7) + RECORDED[2:])
    result = scaling_cli("compare", base, new, "--csv", tmp_path / "compare.csv")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("-30.0%") == 2
    assert "2 regression" in result.stdout and "1 still failing" in result.stdout
    with open(tmp_path / "compare.csv") as table:
        rows = list(csv.DictReader(table))
    assert [(row["total_devices"], row["verdict"]) for row in rows] == \
        [("1", "regression"), ("2", "regression"), ("4", "still failing")]
    assert float(rows[0]["change"]) == pytest.approx(-0.3)


def test_a_slowdown_within_the_threshold_is_the_same(tmp_path):
    base = write_records(tmp_path / "base", RECORDED)
    new = write_records(tmp_path / "new", slowed(RECORDED[:2], 0.97) + RECORDED[2:])
    assert scaling_cli("compare", base, new).returncode == 0
    assert scaling_cli("compare", base, new, "--threshold", "2%").returncode == 1


def test_verdicts():
    base = Figure("ok", 100.0, 100.0, 100.0)
    assert verdict(base, Figure("ok", 120.0, 120.0, 120.0), 0.05) == \
        (pytest.approx(0.2), "improvement")
    assert verdict(base, Figure("ok", 104.0, 104.0, 104.0), 0.05)[1] == "same"
    assert verdict(Figure("ok", 100.0, 80.0, 120.0), Figure("ok", 90.0, 85.0, 95.0), 0.05)[1] \
        == "within noise"
    assert verdict(base, Figure("oom"), 0.05) == (None, "regression")
    assert verdict(Figure("timeout"), base, 0.05) == (None, "improvement")
    assert verdict(Figure("oom"), Figure("timeout"), 0.05) == (None, "still failing")


def test_repeats_give_the_interval_and_a_new_version_is_matched_to_the_old():
    base = [recorded_cell(1, ips, repeat=repeat, version="2.13.0")
            for repeat, ips in enumerate((90.0, 100.0, 110.0))]
    new = [recorded_cell(1, ips, repeat=repeat, version="2.14.1")
           for repeat, ips in enumerate((84.0, 93.0, 96.0))]
    comparison = compare(base, new, 0.05)
    [row] = comparison.rows
    # the median, +- 1.96 standard errors of the repeats' mean (10 / sqrt 3; their windows
    # have no interval here)
    assert (row["base"].images_per_sec, row["base"].low, row["base"].high) == \
        pytest.approx((100.0, 88.68, 111.32), abs=0.01)
    assert (row["new"].images_per_sec, row["new"].low) == pytest.approx((93.0, 85.93), abs=0.01)
    assert row["verdict"] == "within noise"
    assert row["base"].text() == "100.0 ± 11.3"


def test_the_interval_over_repeats_combines_their_spread_with_their_windows():
    """1.96 standard errors between repeats (5 / sqrt 3: 5.66%) and the windows' own half
    widths (median 12%) add in quadrature: 13.27%, around the median."""
    rows = [{**recorded_cell(1, ips, repeat=repeat), "images_per_sec_ci95": window}
            for repeat, (ips, window) in enumerate(((95.0, [85.5, 104.5]), (100.0, [88, 112]),
                                                    (105.0, [92.4, 117.6])))]
    low, high = figure_interval(rows)
    assert (low, high) == pytest.approx((86.73, 113.27), abs=0.01)


def test_a_record_interval_from_its_chunk_times_separates_noise():
    base = [{**recorded_cell(1, 100.0), "images_per_sec_ci95": [95.0, 105.0]}]
    assert compare(base, [{**recorded_cell(1, 92.0), "images_per_sec_ci95": [88.0, 96.0]}],
                   0.05).rows[0]["verdict"] == "within noise"
    assert compare(base, [{**recorded_cell(1, 92.0), "images_per_sec_ci95": [91.0, 93.0]}],
                   0.05).rows[0]["verdict"] == "regression"


def test_cells_in_one_folder_only_are_counted_not_compared(tmp_path):
    base = write_records(tmp_path / "base", [recorded_cell(1, 100.0), recorded_cell(2, 180.0)])
    new = write_records(tmp_path / "new", [recorded_cell(1, 100.0),
                                            recorded_cell(4, 300.0)])
    result = scaling_cli("compare", base, new)
    assert result.returncode == 0
    assert "1 cells compared" in result.stdout
    assert "; 1 only in base, 1 only in new" in result.stdout


def test_a_cell_that_now_runs_out_of_memory_is_a_regression(tmp_path):
    base = write_records(tmp_path / "base", [recorded_cell(2, 180.0)])
    new = write_records(tmp_path / "new", [recorded_cell(2, 0, status="oom")])
    result = scaling_cli("compare", base, new)
    assert result.returncode == 1
    assert "OOM" in result.stdout and "1 regression" in result.stdout


@pytest.mark.parametrize("text", ["five", "150%", "-1"])
def test_a_bad_threshold_is_a_one_line_error(tmp_path, text):
    folder = write_records(tmp_path / "base", [recorded_cell(1, 100.0)])
    result = scaling_in_process("compare", folder, folder, "--threshold", text)
    assert result.returncode == 2
    assert f"--threshold takes a percentage such as 5% or a fraction such as 0.05, got " \
           f"{text!r}" in result.stderr


def test_threshold_reads_percent_or_fraction():
    assert parse_threshold("5%") == pytest.approx(0.05)
    assert parse_threshold("0.1") == pytest.approx(0.1)


def test_a_folder_without_results_is_a_one_line_error(tmp_path):
    folder = write_records(tmp_path / "base", [recorded_cell(1, 100.0)])
    (tmp_path / "empty").mkdir()
    result = scaling_in_process("compare", folder, tmp_path / "empty")
    assert result.returncode == 2
    assert "holds no results" in result.stderr
