"""Real torchrun runs of real models on CPU workers, at tiny sizes."""

from __future__ import annotations

import json

import pytest

from conftest import check_images_per_sec, rank_reports, read_records, scaling_cli
from scaling.cell import make_cell
from scaling.execute import fingerprint
from scaling.execute.aggregate import STRAGGLER_SKEW
from scaling.schema import RANK_REPORT_FIELDS, RECORD_FIELDS

CIFAR10 = ("run", "--workload", "cifar10", "--batch-size", 4, "--steps", 3, "--warmup", 1,
           "--device-type", "cpu", "--timeout", 300)
"""CIFAR-10 without --image-size: at its nominal size, which its parameter count depends on."""


def run_one(out_dir, workload, batch, size, steps):
    result = scaling_cli(
        "run", "--workload", workload, "--batch-size", batch, "--image-size", size,
        "--steps", steps, "--warmup", 1, "--device-type", "cpu", "--timeout", 300,
        "--out", out_dir,
    )
    assert result.returncode == 0, result.stderr
    return read_records(out_dir)[-1]


@pytest.fixture(scope="module", params=[1, 2], ids=["1-device", "2-devices"])
def cifar10(request, tmp_path_factory):
    """``CIFAR10`` on one and on two CPU workers: its output folder and its record."""
    out = tmp_path_factory.mktemp("cifar10") / "out"
    result = scaling_cli(*CIFAR10, "--devices", request.param, "--out", out)
    assert result.returncode == 0, result.stderr
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    return out, record


@pytest.mark.slow
def test_cifar10_under_torchrun_reports_global_throughput(cifar10):
    _, record = cifar10
    devices = record["devices"]
    assert record["total_devices"] == devices
    assert record["global_batch_size"] == 4 * devices
    assert record["params"] == 1_756_426
    assert record["threads_per_device"] == max(1, record["cpu_cores"] // devices)

    reports = rank_reports(record)
    assert sorted(r["rank"] for r in reports) == list(range(devices))
    check_images_per_sec(record, 4 * devices * 3)
    assert 0 < record["step_time_median_s"] <= record["step_time_p95_s"]
    assert record["peak_memory_bytes"] == max(r["peak_memory_bytes"] for r in reports)
    assert record["versions"]["torch"]
    for key in ("host", "cpu_model", "harness_version", "started_at", "device_name"):
        assert record[key]
    assert set(record) == set(RECORD_FIELDS) - {"slurm", "ray"}  # under their backends only
    for report in reports:
        assert set(report) <= set(RANK_REPORT_FIELDS)


@pytest.mark.slow
def test_each_record_names_its_node_fingerprint_and_each_rank_step_time(cifar10):
    out, record = cifar10
    [name] = record["fingerprint"]
    stored = json.loads((out / "fingerprints" / f"{name}.json").read_text())
    assert stored["host"] == record["host"]
    assert fingerprint.digest(stored) == name
    assert stored["libraries"]["python"] and stored["cpu"]["logical_cpus"]
    assert [path.name for path in (out / "fingerprints").iterdir()] == [f"{name}.json"]
    assert len(record["rank_step_s"]) == record["devices"]
    if record["devices"] > 1:  # one device under torchrun times no local step
        assert len(record["rank_local_step_s"]) == record["devices"]
        assert record["straggler_host"] == record["host"] and record["rank_skew"] >= 1
        assert (record["straggler"] is None) == (record["rank_skew"] < STRAGGLER_SKEW)


@pytest.mark.slow
def test_image_size_defaults_to_the_nominal_input(cifar10):
    _, record = cifar10
    assert record["image_size"] == 32


@pytest.mark.slow
def test_a_recorded_cell_is_not_run_twice(cifar10):
    out, record = cifar10
    result = scaling_cli(*CIFAR10, "--devices", record["devices"], "--out", out)
    assert "already recorded" in result.stdout
    assert [r["cell"] for r in read_records(out)] == [record["cell"]]


@pytest.mark.slow
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


@pytest.mark.slow
def test_ddp_knobs_are_recorded_in_the_cell_id_and_in_effect_in_every_rank(out_dir):
    knobs = {"bucket_cap_mb": 0.5, "gradient_as_bucket_view": True, "static_graph": True,
             "broadcast_buffers": False, "comm_hook": "bf16"}
    result = scaling_cli(*CIFAR10, "--image-size", 16, "--devices", 2, "--threads-per-device", 1,
                         *[arg for key, value in knobs.items()
                           for arg in ("--option", f"{key}={str(value).lower()}")],
                         "--out", out_dir)
    assert result.returncode == 0, result.stderr
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    assert record["options"] == knobs
    cell = dict(framework="torch", launcher="torchrun", workload="cifar10", devices=2,
                batch_size=4, image_size=16, steps=3, warmup=1, device_type="cpu",
                threads_per_device=1, timeout_s=300)
    assert make_cell(**cell, options=knobs).cell_id == record["cell"]
    assert make_cell(**cell).cell_id != record["cell"]
    for report in rank_reports(record):
        assert report["communication_in_effect"] == {**knobs, "comm_hook": "bf16_compress_hook"}
