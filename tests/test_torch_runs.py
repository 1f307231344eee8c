"""Real torchrun runs of real models on CPU workers, at tiny sizes."""

from __future__ import annotations

import json

import pytest

from conftest import (check_images_per_sec, rank_reports, read_records, scaling_cli,
                      scaling_in_process, write_sweep)
from scaling.cell import make_cell
from scaling.execute import fingerprint
from scaling.execute.aggregate import STRAGGLER_SKEW
from scaling.schema import RANK_REPORT_FIELDS, RECORD_FIELDS

CIFAR10 = ("run", "--workload", "cifar10", "--batch-size", 4, "--steps", 3, "--warmup", 1,
           "--device-type", "cpu", "--timeout", 300)
"""CIFAR-10 without --image-size: at its nominal size, which its parameter count depends on."""

DDP_KNOBS = {"bucket_cap_mb": 0.5, "gradient_as_bucket_view": True, "static_graph": True,
             "broadcast_buffers": False, "comm_hook": "bf16"}
"""DistributedDataParallel's communication knobs, each away from its default: the two-device
cell sets them."""

IMAGENET = [("alexnet", 63, 61_100_840), ("googlenet", 32, 6_624_904),
            ("resnet50", 32, 25_557_032), ("inception_v3", 75, 23_834_568)]
"""Each ImageNet workload, the smallest input it takes, and its parameter count."""


def run_cifar10(tmp_path_factory, devices: int, options=None):
    """``CIFAR10`` on ``devices`` CPU workers with ``options`` (--option KEY=VALUE each): the
    command's arguments, its output folder and its record."""
    argv = [*CIFAR10, "--devices", devices,
            *[arg for key, value in (options or {}).items()
              for arg in ("--option", f"{key}={str(value).lower()}")]]
    out = tmp_path_factory.mktemp("cifar10") / "out"
    result = scaling_cli(*argv, "--out", out)
    assert result.returncode == 0, result.stderr
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    return argv, out, record


@pytest.fixture(scope="module")
def on_one_device(tmp_path_factory):
    """``CIFAR10`` on one CPU worker."""
    return run_cifar10(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def on_two_devices(tmp_path_factory):
    """``CIFAR10`` on two CPU workers, with ``DDP_KNOBS`` set."""
    return run_cifar10(tmp_path_factory, 2, DDP_KNOBS)


@pytest.fixture(scope="module", params=["on_one_device", "on_two_devices"],
                ids=["1-device", "2-devices"])
def cifar10(request):
    """``CIFAR10`` on one and on two CPU workers: its arguments, output folder and record."""
    return request.getfixturevalue(request.param)


@pytest.mark.slow
def test_cifar10_under_torchrun_reports_global_throughput(cifar10):
    _, _, record = cifar10
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
    _, out, record = cifar10
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
    _, _, record = cifar10
    assert record["image_size"] == 32


@pytest.mark.slow
def test_a_recorded_cell_is_not_run_twice(cifar10):
    """The same command again, in this process: it finds the cell before starting any."""
    argv, out, record = cifar10
    result = scaling_in_process(*argv, "--out", out)
    assert "already recorded" in result.stdout
    assert [r["cell"] for r in read_records(out)] == [record["cell"]]


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """Each workload of ``IMAGENET`` trained at its size, two steps of batch 2 on one CPU
    worker under ``single``: one sweep per size, whose cells run one after another in one
    process. The records by workload."""
    records = {}
    for size in sorted({size for _, size, _ in IMAGENET}):
        folder = tmp_path_factory.mktemp(f"imagenet-{size}")
        sweep = write_sweep(folder / "sweep.yaml", frameworks={"torch": {"launchers": ["single"]}},
                            workloads=[name for name, at, _ in IMAGENET if at == size],
                            batch_sizes=[2], image_size=size, steps=2, warmup=1,
                            timeout_s=300, references="none")
        swept = scaling_cli("sweep", sweep, "--out", folder / "out")
        assert (folder / "out" / "results.jsonl").exists(), swept.stderr
        records.update((record["workload"], record) for record in read_records(folder / "out"))
    return records


@pytest.mark.slow
@pytest.mark.parametrize("workload, size, params", IMAGENET)
def test_each_imagenet_workload_trains_at_a_small_size(imagenet, workload, size, params):
    record = imagenet[workload]
    assert record["status"] == "ok", record["error"]
    assert record["image_size"] == size
    assert record["params"] == params
    assert record["images_per_sec"] > 0


@pytest.mark.slow
def test_ddp_knobs_are_recorded_in_the_cell_id_and_in_effect_in_every_rank(on_two_devices):
    _, _, record = on_two_devices
    assert record["options"] == DDP_KNOBS
    cell = dict(framework="torch", launcher="torchrun", workload="cifar10", devices=2,
                batch_size=4, steps=3, warmup=1, device_type="cpu", timeout_s=300)
    assert make_cell(**cell, options=DDP_KNOBS).cell_id == record["cell"]
    assert make_cell(**cell).cell_id != record["cell"]
    for report in rank_reports(record):
        assert report["communication_in_effect"] == {**DDP_KNOBS,
                                                     "comm_hook": "bf16_compress_hook"}
