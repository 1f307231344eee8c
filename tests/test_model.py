"""The scaling model: the single step, plus contention, plus the allreduce the launcher does not
hide, beside every curve, and extrapolated to device counts never measured."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from conftest import recorded_cell, write_records

from scaling.cli import cli
from scaling.report.figures import scaling_figure
from scaling.report.model import (extrapolate, model_lines, predicted_curves, prediction,
                                  ring_allreduce_s, step_band)
from scaling.report.tables import series_key, with_scaling


def test_the_ring_allreduce_moves_2_n_minus_1_over_n_of_the_bytes():
    assert ring_allreduce_s(1e9, 2, 1.0) == pytest.approx(1.0)
    assert ring_allreduce_s(1e9, 8, 1.0) == pytest.approx(1.75)
    assert ring_allreduce_s(1e9, 1, 1.0) == 0.0


def test_the_band_runs_from_full_overlap_of_the_backward_pass_to_none():
    # 0.3 s of compute, of which 0.2 s backward; a 0.25 s allreduce: 0.05 s outlasts backward.
    assert step_band(0.3, 0.25) == pytest.approx((0.35, 0.55))
    assert step_band(0.3, 0.1) == pytest.approx((0.3, 0.4))  # hidden entirely at best
    assert step_band(0.3, 0.25, exposed_s=0.1) == pytest.approx((0.4, 0.4))


def row(devices, ips, **fields):
    """A sweep row after with_scaling: batch 8, single at 40 images/sec (0.2 s a step)."""
    return {**recorded_cell(devices, ips, batch=8), "baseline_images_per_sec": 40.0,
            "allreduce_time_s": 0.1, **fields}


def test_a_point_is_predicted_from_the_single_step_and_its_measured_allreduce():
    found = prediction(row(2, 60.0))
    # Band: 0.2 + max(0, 0.1 - 2/3 x 0.2) = 0.2 s to 0.3 s for 16 images.
    assert found["predicted_images_per_sec_high"] == pytest.approx(80.0)
    assert found["predicted_images_per_sec_low"] == pytest.approx(16 / 0.3)
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.25)
    assert found["prediction_ratio"] == pytest.approx(60.0 / 64.0)
    # Measured 0.2667 s: 0.05 s of communication (the band's middle), 0.0167 s of the rest.
    assert found["loss_term"] == "exposed communication"


def test_the_band_widens_with_the_intervals_of_the_single_figure_and_the_allreduce():
    found = prediction(row(2, 60.0, baseline_ci95=[32.0, 50.0],
                           allreduce_time_s_ci95=[0.05, 0.2]))
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.25)  # as without them
    # Shortest: 8 / 50 = 0.16 s of compute hides all of 0.05 s; longest: 0.25 s + 0.2 s.
    assert found["predicted_images_per_sec_high"] == pytest.approx(16 / 0.16)
    assert found["predicted_images_per_sec_low"] == pytest.approx(16 / 0.45)


def test_an_open_interval_of_the_single_figure_leaves_that_end_of_the_band_open():
    # Two noisy chunks: the single figure's interval runs from 20 images/sec to unbounded.
    found = prediction(row(2, 60.0, baseline_ci95=[20.0, math.inf]))
    assert found["predicted_images_per_sec_high"] is None
    assert found["predicted_images_per_sec_low"] == pytest.approx(16 / 0.5)
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.25)
    repeats = prediction(row(2, 60.0, baseline_ci95=[-4.0, 50.0]))
    assert repeats["predicted_images_per_sec_low"] is None
    assert repeats["predicted_images_per_sec_high"] == pytest.approx(16 / 0.16)
    # The table prints the open end as "...".
    rows = [{**row(2, 60.0), **found}, {**row(2, 60.0), **repeats}]
    bands = [line[4] for line in model_lines(rows, label=lambda _: "torchrun")]
    assert bands == ["64.0 (32.0-...)", "64.0 (...-100.0)"]


def test_a_profiled_point_uses_its_exposed_communication():
    profiled = prediction(row(2, 40.0, step_breakdown={"compute": 0.6, "communication": 0.1,
                                                       "idle": 0.3}))
    # Measured 0.4 s, of which 0.04 s exposed: predicted 0.24 s, and the rest dominates.
    assert profiled["predicted_images_per_sec"] == pytest.approx(16 / 0.24)
    assert profiled["loss_term"] == "the rest"


def test_contention_is_the_slower_compute_with_every_device_busy():
    # The single cell's forward and backward alone took 0.15 s, the cell's own with both of its
    # devices busy 0.21 s: 0.06 s of contention is added to the profiled 0.04 s exposed.
    profiled = {"compute": 0.6, "communication": 0.1, "idle": 0.3}
    found = prediction(row(2, 40.0, step_breakdown=profiled, local_step_s=0.21,
                           baseline_local_step_s=0.15))
    assert found["contention_s"] == pytest.approx(0.06)
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.30)
    # Measured 0.4 s: 0.06 s contention, 0.04 s exposed, 0.1 s the rest.
    assert found["loss_term"] == "the rest"
    contended = prediction(row(2, 40.0, step_breakdown=profiled, local_step_s=0.35,
                               baseline_local_step_s=0.15))
    assert contended["loss_term"] == "contention"
    # Faster than alone, or not timed on either side: no contention.
    for fields in ({"local_step_s": 0.1, "baseline_local_step_s": 0.15},
                   {"local_step_s": 0.21}, {"baseline_local_step_s": 0.15}):
        assert prediction(row(2, 40.0, step_breakdown=profiled, **fields))["contention_s"] == 0


def test_one_device_and_forward_need_no_allreduce_and_missing_inputs_give_none():
    assert prediction(row(1, 38.0, allreduce_time_s=None))["predicted_images_per_sec"] == \
        pytest.approx(40.0)
    assert prediction(row(2, 70.0, mode="forward", allreduce_time_s=None))[
        "predicted_images_per_sec"] == pytest.approx(80.0)
    assert prediction(row(2, 60.0, allreduce_time_s=None))["predicted_images_per_sec"] is None
    assert prediction(row(2, 60.0, baseline_images_per_sec=None))["prediction_ratio"] is None


def test_extrapolation_switches_to_the_inter_node_bandwidth_beyond_a_node():
    lines = extrapolate(0.2, 8, 1e8, [4, 8, 16], 10.0, devices_per_node=8,
                        inter_node_busbw_GBps=1.0)
    assert [line["busbw_GBps"] for line in lines] == [10.0, 10.0, 1.0]
    assert lines[2]["allreduce_s"] == pytest.approx(2 * 15 / 16 * 0.1)
    for line in lines:
        assert line["images_per_sec_low"] <= line["images_per_sec_high"] <= 8 * line["devices"] / 0.2
        assert 0 < line["efficiency_low"] <= line["efficiency_high"] <= 1


def two_point_curve(tmp_path):
    """Records of a curve at 1 and 2 devices with gradient bytes and a measured bandwidth, and
    the folder they were written to."""
    records = [{**recorded_cell(devices, ips, batch=8), "gradient_bytes": 4e8,
                "allreduce_busbw_GBps": busbw}
               for devices, ips, busbw in ((1, 40.0, None), (2, 70.0, 5.0))]
    return records, write_records(tmp_path / "out", records)


def test_predict_prints_each_curve_at_the_asked_counts(tmp_path):
    _, out = two_point_curve(tmp_path)
    result = CliRunner().invoke(cli, ["predict", str(out), "--devices", "2,8,64"])
    assert result.exit_code == 0, result.output
    assert "Predicted images/sec" in result.output
    lines = (out / "predictions.csv").read_text().splitlines()
    assert len(lines) == 4 and lines[0].startswith("curve,devices,busbw_GBps")
    given = CliRunner().invoke(cli, ["predict", str(out), "--devices", "8",
                                     "--busbw-GBps", "100"])
    assert given.exit_code == 0 and "given" in (out / "predictions.csv").read_text()


def test_predict_without_what_the_model_needs_is_a_one_line_error(tmp_path):
    out = write_records(tmp_path / "out", [recorded_cell(1, 40.0), recorded_cell(2, 70.0)])
    result = CliRunner().invoke(cli, ["predict", str(out)])
    assert result.exit_code == 2 and "no curve in" in result.output
    result = CliRunner().invoke(cli, ["predict", str(out), "--devices-per-node", "8"])
    assert result.exit_code == 2 and "go together" in result.output


def test_the_throughput_plot_draws_the_prediction_dashed_beyond_the_measured_points(tmp_path):
    records, _ = two_point_curve(tmp_path)
    rows = with_scaling(records)
    figure = scaling_figure(rows, "cifar10", predicted_curves(rows, series_key))
    throughput = figure.axes[0]
    dashed = [line for line in throughput.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1
    # From the last measured point (2 devices, 70 images/sec) to 2, 4 and 8 times it.
    assert list(dashed[0].get_xdata()) == [2, 4, 8, 16]
    assert dashed[0].get_ydata()[0] == pytest.approx(70.0)
    assert [tick.get_text() for tick in throughput.get_xticklabels()] == ["1", "2", "4", "8",
                                                                          "16"]


def test_predict_redraws_the_report_with_its_counts(tmp_path):
    _, out = two_point_curve(tmp_path)
    assert CliRunner().invoke(cli, ["report", str(out), "--html"]).exit_code == 0
    assert "Throughput (dashed: predicted)" in (out / "report.html").read_text()
    result = CliRunner().invoke(cli, ["predict", str(out), "--devices", "64"])
    assert result.exit_code == 0 and "predicted curves dashed" in result.output
    page = (out / "report.html").read_text()
    assert "Throughput (dashed: predicted)" in page and "<!-- 64 -->" in page
