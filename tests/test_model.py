"""The scaling model: the single step, plus the launcher's own cost, contention, communication
beside the compute and the allreduce the launcher does not hide, beside every curve; its
leave-one-out check, and the extrapolation to device counts never measured."""

from __future__ import annotations

import csv
import math

import pytest
from click.testing import CliRunner
from conftest import recorded_cell, write_records

from scaling.cli import cli
from scaling.report.extrapolation import (curve_model, extrapolate, line_at, predicted_curves,
                                          ring_allreduce_s, step_band)
from scaling.report.figures import scaling_figure
from scaling.report.model import model_lines, prediction, tells, with_predictions
from scaling.report.curves import series_key
from scaling.report.tables import with_scaling


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


def test_the_launchers_own_cost_at_one_device_is_a_term_of_its_own():
    # parallel_overhead 0.5 [0.4, 0.6]: the launcher's 1-device step is 0.4 s against the
    # single 0.2 s, so 0.2 s [0.133, 0.3] of it is the launcher's.
    found = prediction(row(2, 40.0, baseline_launcher="single", parallel_overhead=0.5,
                           parallel_overhead_low=0.4, parallel_overhead_high=0.6))
    assert (found["launcher_s"], found["launcher_s_low"], found["launcher_s_high"]) == \
        pytest.approx((0.2, 0.2 * 0.4 / 0.6, 0.3))
    # 0.4 s busy, a 0.1 s allreduce: band 0.4 s to 0.5 s; measured 0.4 s, most of it the launcher.
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.45)
    assert found["loss_term"] == "the launcher"
    # A curve measured against its own 1-device point has no separate launcher term.
    assert prediction(row(2, 40.0, baseline_launcher="torchrun",
                          parallel_overhead=0.5))["launcher_s"] is None


def test_the_launcher_term_comes_from_the_two_measured_one_device_cells():
    """single at 40 images/sec and torchrun at one device at 32: 0.25 - 0.2 = 0.05 s."""
    records = [{**recorded_cell(1, 40.0, batch=8, launcher="single"), "local_step_s": 0.2},
               recorded_cell(1, 32.0, batch=8),
               {**recorded_cell(2, 60.0, batch=8), "allreduce_time_s": 0.1}]
    rows = {(r["launcher"], r["total_devices"]): r
            for r in with_predictions(with_scaling(records))}
    assert rows["torchrun", 2]["launcher_s"] == pytest.approx(0.05)
    # The 1-device rows are inputs: no prediction, no ratio, and the table says so.
    for key, role in ((("single", 1), "the compute"), (("torchrun", 1), "the launcher")):
        assert rows[key]["model_input"] == role
        assert rows[key]["prediction_ratio"] is None
        assert rows[key]["predicted_images_per_sec"] is None
    lines = {line[1:3]: line for line in model_lines(list(rows.values()), lambda r: r["launcher"])}
    assert lines["torchrun", "1"][4:6] == ("input: the launcher", "-")
    assert lines["torchrun", "1"][6] == "+50.0"
    assert lines["single", "1"][4] == "input: the compute"
    assert lines["torchrun", "2"][5] == "1.12"  # 60 against 16 / (0.25 + 0.1 / 2)


def test_contention_keeps_its_sign_and_its_interval():
    profiled = {"compute": 0.6, "communication": 0.1, "idle": 0.3}
    found = prediction(row(2, 40.0, step_breakdown=profiled, local_step_s=0.21,
                           local_step_s_ci95=[0.20, 0.22], baseline_local_step_s=0.15),
                       alone_ci95=[0.14, 0.16])
    assert (found["contention_s"], found["contention_s_low"], found["contention_s_high"]) == \
        pytest.approx((0.06, 0.04, 0.08))
    # 0.06 s of contention beside the profiled 0.04 s exposed; measured 0.4 s, 0.1 s the rest.
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.30)
    assert found["loss_term"] == "the rest"
    # Faster than alone: a negative contention stays negative, and the prediction with it.
    faster = {**row(2, 40.0, step_breakdown=profiled, local_step_s=0.1,
                    baseline_local_step_s=0.15)}
    faster.update(prediction(faster, alone_ci95=[0.14, 0.16]))
    assert (faster["contention_s"], faster["contention_s_low"], faster["contention_s_high"]) \
        == pytest.approx((-0.05, -0.06, -0.04))
    assert faster["predicted_images_per_sec"] == pytest.approx(16 / (0.2 - 0.05 + 0.04))
    assert model_lines([faster], lambda _: "torchrun")[0][7] == "-50.0 [-60.0, -40.0]"
    # Not timed on either side: no contention term at all.
    for fields in ({"local_step_s": 0.21}, {"baseline_local_step_s": 0.15}):
        assert prediction(row(2, 40.0, **fields))["contention_s"] is None


def test_communication_beside_the_compute_is_measured_in_the_same_cell():
    found = prediction(row(2, 40.0, local_step_s=0.2, local_step_s_ci95=[0.19, 0.21],
                           local_step_communicating_s=0.3, baseline_local_step_s=0.2))
    assert (found["interference_s"], found["interference_s_low"]) == pytest.approx((0.1, 0.09))
    # 0.2 + 0.1 s busy hides the 0.1 s allreduce at best: 16 / 0.35 predicted, 16 / 0.4 measured.
    assert found["predicted_images_per_sec"] == pytest.approx(16 / 0.35)
    assert found["loss_term"] == "communication beside compute"


def test_communication_beside_the_compute_is_charged_only_for_the_share_that_runs_there():
    timed = {"local_step_s": 0.2, "local_step_communicating_s": 0.3,
             "baseline_local_step_s": 0.2}
    # The trace sees the collectives and none of them under a compute-only thread (as
    # tf.distribute runs them after the backward pass): paid once, as exposed communication.
    after = {"compute": 0.7, "communication": 0.25, "idle": 0.05, "communication_beside": 0.0}
    found = prediction(row(2, 40.0, step_breakdown=after, **timed))
    assert (found["beside_share"], found["interference_s"]) == (0.0, 0.0)
    assert found["predicted_images_per_sec"] == pytest.approx(16 / (0.2 + 0.25 * 0.4))
    # A quarter of them beside the compute: a quarter of the slowing.
    quarter = {**after, "communication_beside": 0.25 / 3}
    found = prediction(row(2, 40.0, step_breakdown=quarter, **timed))
    assert (found["beside_share"], found["interference_s"]) == pytest.approx((0.25, 0.025))
    # Collectives the trace cannot see (DDP's threads on CPU, timed by the worker): all of it.
    unseen = {"compute": 0.7, "communication": 0.25, "idle": 0.05}
    assert prediction(row(2, 40.0, step_breakdown=unseen, **timed))[
        "interference_s"] == pytest.approx(0.1)


def test_forward_needs_no_allreduce_and_missing_inputs_give_none():
    assert prediction(row(2, 70.0, mode="forward", allreduce_time_s=None))[
        "predicted_images_per_sec"] == pytest.approx(80.0)
    assert prediction(row(2, 60.0, allreduce_time_s=None))["predicted_images_per_sec"] is None
    assert prediction(row(2, 60.0, baseline_images_per_sec=None))["prediction_ratio"] is None


def cpu_curve(largest=4, ips_largest=90.0):
    """Records of single, and torchrun at 1, 2 and ``largest`` devices, on a 2-core host at one
    thread per device: compute 0.2 s, contention 0.02 s at 2 devices, a 0.1 s allreduce of
    10^8 bytes (1 GB/s) of which half is left exposed."""
    host = {"device_type": "cpu", "cpu_cores": 2, "threads_per_device": 1,
            "threads_default": False, "gradient_bytes": 1e8}
    two = {**recorded_cell(2, 64.0, batch=8), **host, "allreduce_time_s": 0.1,
           "allreduce_busbw_GBps": 1.0, "local_step_s": 0.22,
           "step_breakdown": {"compute": 0.8, "communication": 0.2}}
    return [{**recorded_cell(1, 40.0, batch=8, launcher="single"), **host, "local_step_s": 0.2},
            {**recorded_cell(1, 40.0, batch=8), **host}, two,
            {**recorded_cell(largest, ips_largest, batch=8), **host, "allreduce_time_s": 0.2,
             "allreduce_busbw_GBps": 1.0, "local_step_s": 0.5}]


def test_contention_is_fitted_through_the_measured_counts_and_time_shares_beyond_the_cores():
    rows = with_predictions(with_scaling(cpu_curve()[:3]))
    model = curve_model([r for r in rows if r["launcher"] == "torchrun"])
    # k = 0.02 s per other device; 3 devices on 2 cores run 2 at once, each 1.5 x as long.
    assert line_at(model, 2, 2, 1.0)["contention_s"] == pytest.approx(0.02)
    assert line_at(model, 3, 3, 1.0)["contention_s"] == pytest.approx(0.22 * 1.5 - 0.2)
    # One device per node: no contention from the node's own devices.
    assert line_at(model, 2, 1, 1.0)["contention_s"] == pytest.approx(0.0)


def test_the_largest_point_is_predicted_from_the_others_alone():
    rows = with_predictions(with_scaling(cpu_curve()))
    [four] = [r for r in rows if r["total_devices"] == 4]
    # At 4 on 2 cores: compute and contention (0.2 + 0.02) x 2 = 0.44 s, and half of the ring's
    # 1.5 x 10^8 bytes at 1 GB/s exposed: 0.515 s for 32 images, against 90 measured.
    assert four["prediction_error"] == pytest.approx(90.0 / (32 / 0.515) - 1)
    assert four["prediction_error_from"] == "1, 2 devices"
    assert "from 1, 2 devices" in model_lines([four], lambda _: "torchrun")[0][10]
    # Its own measurements do not enter: its local step (0.5 s) and allreduce are left out.
    changed = with_predictions(with_scaling([*cpu_curve()[:3], {
        **cpu_curve()[3], "local_step_s": 0.9, "allreduce_time_s": 0.9}]))
    assert [r["prediction_error"] for r in changed if r["total_devices"] == 4] == \
        pytest.approx([four["prediction_error"]])
    # One multi-device point is not enough to leave one out.
    assert all(r["prediction_error"] is None
               for r in with_predictions(with_scaling(cpu_curve()[:3])))


def test_extrapolation_switches_to_the_inter_node_bandwidth_beyond_a_node():
    rows = with_predictions(with_scaling(cpu_curve()[:3]))
    model = curve_model([r for r in rows if r["launcher"] == "torchrun"])
    lines = extrapolate(model, [2, 4], devices_per_node=2, inter_node_busbw_GBps=0.5)
    assert [line["busbw_GBps"] for line in lines] == [1.0, 0.5]
    assert lines[1]["allreduce_s"] == pytest.approx(1.5 * 1e8 / 0.5e9)
    # 4 devices, 2 per node: the contention of 2 busy devices, as measured.
    assert lines[1]["contention_s"] == pytest.approx(0.02)
    for line in lines:
        assert line["images_per_sec_low"] <= line["images_per_sec"] <= \
            line["images_per_sec_high"]


def two_point_curve(tmp_path):
    """Records of a curve at 1 and 2 devices with gradient bytes and a measured bandwidth, and
    the folder they were written to."""
    records = [{**recorded_cell(devices, ips, batch=8), "gradient_bytes": 4e8,
                "allreduce_busbw_GBps": busbw}
               for devices, ips, busbw in ((1, 40.0, None), (2, 70.0, 5.0))]
    return records, write_records(tmp_path / "out", records)


def test_predict_prints_the_measured_points_beside_its_predictions(tmp_path):
    _, out = two_point_curve(tmp_path)
    result = CliRunner().invoke(cli, ["predict", str(out)])
    assert result.exit_code == 0, result.output
    assert "beside the measured points" in result.output
    with open(out / "predictions.csv") as table:
        lines = list(csv.DictReader(table))
    # The measured 2 devices, then 2, 4 and 8 times it.
    assert [line["devices"] for line in lines] == ["2", "4", "8", "16"]
    measured = lines[0]
    # 0.2 s compute, 0.08 s ring allreduce at 5 GB/s: band 0.2 s to 0.28 s, 16 images.
    assert float(measured["measured"]) == 70.0
    assert float(measured["measured_over_predicted"]) == pytest.approx(70.0 / (16 / 0.24))
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
    rows = with_predictions(with_scaling(records))
    figure = scaling_figure(rows, "cifar10", predicted_curves(rows, series_key))
    throughput = figure.axes[0]
    dashed = [line for line in throughput.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1
    # From the last measured point (2 devices, 70 images/sec) to 2, 4 and 8 times it.
    assert list(dashed[0].get_xdata()) == [2, 4, 8, 16]
    assert dashed[0].get_ydata()[0] == pytest.approx(70.0)
    assert [tick.get_text() for tick in throughput.get_xticklabels()] == ["1", "2", "4", "8",
                                                                          "16"]
    # A baseline whose interval is open above leaves the band open at that end: still drawn.
    records[0]["images_per_sec_ci95"] = [20.0, math.inf]
    rows = with_predictions(with_scaling(records))
    assert scaling_figure(rows, "cifar10", predicted_curves(rows, series_key)) is not None


def test_predict_redraws_the_report_with_its_counts(tmp_path):
    _, out = two_point_curve(tmp_path)
    assert CliRunner().invoke(cli, ["report", str(out), "--html"]).exit_code == 0
    page = (out / "report.html").read_text()
    assert "Throughput (dashed: predicted)" in page and "input: the compute" in page
    result = CliRunner().invoke(cli, ["predict", str(out), "--devices", "64"])
    assert result.exit_code == 0 and "predicted curves dashed" in result.output
    page = (out / "report.html").read_text()
    assert "Throughput (dashed: predicted)" in page and "<!-- 64 -->" in page


def test_a_band_wider_than_a_quarter_of_the_prediction_cannot_tell():
    assert tells(100.0, 80.0, 125.0)
    assert not tells(100.0, 70.0, 110.0) and not tells(100.0, 90.0, 130.0)
    assert not tells(100.0, 90.0, None)  # an open end tells nothing
