"""Framework options and step modes: each runs for real on CPU, is recorded, and is checked."""

from __future__ import annotations

import csv

import pytest

from conftest import rank_reports, read_records, scaling_cli_ok, scaling_in_process, write_sweep

OPTIONS = {"plain": (), "amp": ("--option", "amp=true"),
           "channels_last": ("--option", "channels_last=true")}
"""The torch cells that the option tests read, by name: their command-line options."""


def run_torch(out_dir, *extra, workload="cifar10", size=16, batch=4, steps=3):
    scaling_cli_ok("run", "--workload", workload, "--image-size", size, "--batch-size", batch,
                   "--devices", 1, "--device-type", "cpu", "--steps", steps, "--warmup", 1,
                   "--timeout", 600, "--out", out_dir, *extra)
    record = read_records(out_dir)[-1]
    assert record["status"] == "ok", record["error"]
    return record, rank_reports(record)[0]


@pytest.fixture(scope="module")
def option_runs(tmp_path_factory):
    """One folder with a one-step cell of each of :data:`OPTIONS`: the folder, and each cell's
    record and rank report by name."""
    out_dir = tmp_path_factory.mktemp("options") / "out"
    return out_dir, {name: run_torch(out_dir, *extra, steps=1) for name, extra in OPTIONS.items()}


@pytest.mark.slow
def test_torch_amp_on_cpu_autocasts_to_bf16(option_runs):
    record, report = option_runs[1]["amp"]
    assert record["options"] == {"amp": True}
    assert report["amp_dtype"] == "bfloat16"


@pytest.mark.slow
def test_torch_channels_last_is_recorded_as_nhwc(option_runs):
    record, report = option_runs[1]["channels_last"]
    assert record["options"] == {"channels_last": True}
    assert report["layout"] == "NHWC"


@pytest.mark.slow
def test_options_are_part_of_the_cell_identity(option_runs):
    out_dir, runs = option_runs
    assert runs["plain"][0]["options"] == {}
    assert len({record["cell"] for record, _ in runs.values()}) == len(OPTIONS)
    assert len(read_records(out_dir)) == len(OPTIONS)


@pytest.mark.slow
def test_torch_compile_time_stays_out_of_the_window(out_dir):
    record, report = run_torch(out_dir, "--option", "compile=true")
    assert record["options"] == {"compile": True}
    assert report["compile_s"] > 0
    assert report["compile_s"] > record["timed_window_s"]


@pytest.mark.parametrize("option, message", [
    ("fast=true", "unknown option 'fast' for torch under torchrun; valid options: "
                  "amp, broadcast_buffers, bucket_cap_mb, channels_last, comm_hook, compile, "
                  "cudnn_benchmark, gradient_as_bucket_view, static_graph"),
    ("amp=fp8", "option amp takes one of true, false, fp16, bf16; got 'fp8'"),
    ("channels_last=3", "option channels_last takes a bool, got 3"),
])
def test_unknown_options_and_values_are_refused_with_the_valid_ones(out_dir, option, message):
    result = scaling_in_process("run", "--workload", "cifar10", "--batch-size", 2,
                                "--option", option, "--out", out_dir)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (out_dir / "results.jsonl").exists()


@pytest.fixture(scope="module")
def modes_sweep(tmp_path_factory):
    """A sweep of the CIFAR-10 network at 16x16, batch 2, 3 steps, over the three modes: its
    folder and the report command's output."""
    folder = tmp_path_factory.mktemp("modes")
    config = write_sweep(folder / "modes.yaml", batch_sizes=[2], timeout_s=600,
                         modes=["forward", "forward_backward", "train"])
    scaling_cli_ok("sweep", config, "--out", folder / "out")
    return folder / "out", scaling_cli_ok("report", folder / "out")


@pytest.mark.slow
def test_modes_are_a_sweep_axis_in_records_csv_and_report(modes_sweep):
    out_dir, report = modes_sweep
    modes = ["forward", "forward_backward", "train"]
    assert sorted(r["mode"] for r in read_records(out_dir)) == modes
    assert "forward" in report.stdout
    assert "s/batch" in report.stdout
    with open(out_dir / "results.csv") as table:
        assert sorted(row["mode"] for row in csv.DictReader(table)) == modes


@pytest.mark.slow
def test_modes_with_a_backward_pass_report_gradients_and_forward_does_not(modes_sweep):
    out_dir, _ = modes_sweep
    reports = {record["mode"]: rank_reports(record)[0] for record in read_records(out_dir)}
    assert "gradient_sums" not in reports["forward"]
    for mode in ("forward_backward", "train"):
        [gradient_sum] = reports[mode]["gradient_sums"]
        assert gradient_sum != 0
    assert len({tuple(report["data_sums"]) for report in reports.values()}) == 1
