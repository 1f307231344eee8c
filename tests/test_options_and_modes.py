"""Framework options and step modes: each runs for real on CPU, is recorded, and is checked."""

from __future__ import annotations

import csv

import pytest

from conftest import rank_reports, read_records, scaling_cli, scaling_cli_ok, write_sweep


def run_torch(out_dir, *extra, workload="cifar10", size=16, batch=4, steps=3):
    scaling_cli_ok("run", "--workload", workload, "--image-size", size, "--batch-size", batch,
                   "--devices", 1, "--device-type", "cpu", "--steps", steps, "--warmup", 1,
                   "--timeout", 600, "--out", out_dir, *extra)
    record = read_records(out_dir)[-1]
    assert record["status"] == "ok", record["error"]
    return record, rank_reports(record)[0]


def test_torch_amp_on_cpu_autocasts_to_bf16(out_dir):
    record, report = run_torch(out_dir, "--option", "amp=true")
    assert record["options"] == {"amp": True}
    assert report["amp_dtype"] == "bfloat16"


def test_torch_channels_last_is_recorded_as_nhwc(out_dir):
    record, report = run_torch(out_dir, "--option", "channels_last=true")
    assert record["options"] == {"channels_last": True}
    assert report["layout"] == "NHWC"


def test_torch_compile_time_stays_out_of_the_window(out_dir):
    record, report = run_torch(out_dir, "--option", "compile=true")
    assert record["options"] == {"compile": True}
    assert report["compile_s"] > 0
    assert report["compile_s"] > record["timed_window_s"]


def test_options_are_part_of_the_cell_identity(out_dir):
    plain, _ = run_torch(out_dir, steps=1)
    fast, _ = run_torch(out_dir, "--option", "channels_last=true", steps=1)
    assert plain["cell"] != fast["cell"]
    assert len(read_records(out_dir)) == 2


@pytest.mark.parametrize("option, message", [
    ("fast=true", "unknown option 'fast' for torch under torchrun; valid options: "
                  "amp, channels_last, compile, cudnn_benchmark"),
    ("amp=fp8", "option amp takes one of true, false, fp16, bf16; got 'fp8'"),
    ("channels_last=3", "option channels_last takes a bool, got 3"),
])
def test_unknown_options_and_values_are_refused_with_the_valid_ones(out_dir, option, message):
    result = scaling_cli("run", "--workload", "cifar10", "--batch-size", 2, "--option", option,
                         "--out", out_dir)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (out_dir / "results.jsonl").exists()


def test_forward_is_faster_than_forward_backward_which_is_faster_than_train(out_dir):
    step_times = {}
    for mode in ("forward", "forward_backward", "train"):
        record, _ = run_torch(out_dir, "--mode", mode, workload="alexnet", size=63, batch=2,
                              steps=8)
        assert record["mode"] == mode
        step_times[mode] = record["step_time_median_s"]
    assert step_times["forward"] < step_times["forward_backward"] < step_times["train"]


def test_modes_are_a_sweep_axis_in_records_csv_and_report(tmp_path, out_dir):
    config = write_sweep(tmp_path / "modes.yaml", modes=["forward", "train"])
    scaling_cli_ok("sweep", config, "--out", out_dir)
    assert sorted(r["mode"] for r in read_records(out_dir)) == ["forward", "train"]

    result = scaling_cli_ok("report", out_dir)
    assert "forward" in result.stdout
    assert "s/batch" in result.stdout
    with open(out_dir / "results.csv") as table:
        assert sorted(row["mode"] for row in csv.DictReader(table)) == ["forward", "train"]
