"""Real torchrun runs of real models on CPU workers, at tiny sizes."""

from __future__ import annotations

import pytest

from conftest import images_per_sec_from_reports, rank_reports, read_records, scaling_cli
from scaling.schema import RANK_REPORT_FIELDS, RECORD_FIELDS


def run_one(out_dir, workload, devices=1, batch=4, size=16, steps=3, extra=()):
    result = scaling_cli(
        "run", "--workload", workload, "--devices", devices, "--batch-size", batch,
        "--image-size", size, "--steps", steps, "--warmup", 1, "--device-type", "cpu",
        "--timeout", 300, "--out", out_dir, *extra,
    )
    assert result.returncode == 0, result.stderr
    return read_records(out_dir)[-1]


@pytest.mark.parametrize("devices", [1, 2])
def test_cifar10_under_torchrun_reports_global_throughput(out_dir, devices):
    record = run_one(out_dir, "cifar10", devices=devices, batch=8, size=32, steps=5)
    assert record["status"] == "ok", record["error"]
    assert (record["devices"], record["total_devices"]) == (devices, devices)
    assert record["global_batch_size"] == 8 * devices
    assert record["params"] == 1_756_426
    assert record["threads_per_device"] == max(1, record["cpu_cores"] // devices)

    reports = rank_reports(record)
    assert sorted(r["rank"] for r in reports) == list(range(devices))
    assert sum(r["images"] for r in reports) == 8 * 5 * devices
    assert record["images_per_sec"] == pytest.approx(images_per_sec_from_reports(reports))
    assert record["timed_window_s"] == max(r["window_s"] for r in reports)
    assert 0 < record["step_time_median_s"] <= record["step_time_p95_s"]
    assert record["peak_memory_bytes"] == max(r["peak_memory_bytes"] for r in reports)
    assert record["versions"]["torch"]
    for key in ("host", "cpu_model", "harness_version", "started_at", "device_name"):
        assert record[key]
    assert set(record) == set(RECORD_FIELDS) - {"slurm"}  # slurm: under --backend slurm only
    for report in reports:
        assert set(report) <= set(RANK_REPORT_FIELDS)


@pytest.mark.parametrize("workload, size, params", [
    ("alexnet", 63, 61_100_840),
    ("googlenet", 32, 6_624_904),
    ("resnet50", 32, 25_557_032),
    ("inception_v3", 75, 23_834_568),
])
def test_each_imagenet_workload_trains_at_a_small_size(out_dir, workload, size, params):
    record = run_one(out_dir, workload, batch=2, size=size, steps=2)
    assert record["status"] == "ok", record["error"]
    assert record["image_size"] == size
    assert record["params"] == params
    assert record["images_per_sec"] > 0


def test_image_size_defaults_to_the_nominal_input(out_dir):
    result = scaling_cli("run", "--workload", "cifar10", "--batch-size", 2, "--steps", 1,
                         "--warmup", 0, "--device-type", "cpu", "--out", out_dir)
    assert result.returncode == 0, result.stderr
    assert read_records(out_dir)[0]["image_size"] == 32


def test_a_recorded_cell_is_not_run_twice(out_dir):
    first = run_one(out_dir, "cifar10", steps=1)
    result = scaling_cli("run", "--workload", "cifar10", "--batch-size", 4, "--image-size", 16,
                         "--steps", 1, "--warmup", 1, "--device-type", "cpu", "--timeout", 300,
                         "--out", out_dir)
    assert "already recorded" in result.stdout
    assert [r["cell"] for r in read_records(out_dir)] == [first["cell"]]
