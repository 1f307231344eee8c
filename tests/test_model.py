"""The scaling model: the single step plus the allreduce the launcher does not hide, beside every
curve, and extrapolated to device counts never measured."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import recorded_cell, write_records

from scaling.cli import cli
from scaling.report.model import extrapolate, prediction, ring_allreduce_s, step_band


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


def test_a_profiled_point_uses_its_exposed_communication():
    profiled = prediction(row(2, 40.0, step_breakdown={"compute": 0.6, "communication": 0.1,
                                                       "idle": 0.3}))
    # Measured 0.4 s, of which 0.04 s exposed: predicted 0.24 s, and the rest dominates.
    assert profiled["predicted_images_per_sec"] == pytest.approx(16 / 0.24)
    assert profiled["loss_term"] == "the rest"


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


def test_predict_prints_each_curve_at_the_asked_counts(tmp_path):
    records = [{**recorded_cell(devices, ips, batch=8), "gradient_bytes": 4e8,
                "allreduce_busbw_GBps": busbw}
               for devices, ips, busbw in ((1, 40.0, None), (2, 70.0, 5.0))]
    out = write_records(tmp_path / "out", records)
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
