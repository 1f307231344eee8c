"""Real TensorFlow runs under tf.distribute on logical CPU devices and worker processes."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
from pathlib import Path

import pytest

from conftest import (check_images_per_sec, fresh_process_value, leftover_cell_processes,
                      rank_reports, read_records, scaling_cli, scaling_in_process, write_sweep)
from cpugroup import AHEAD_SHARES, cpu_group
from scaling.execute.monitor import TELEMETRY_FILE
from workloads import WORKLOADS

LAUNCHERS = ["tf-mirrored", "tf-multiworker"]


def run_tf(out_dir, launcher, workload="cifar10", devices=1, batch=8, size=32, steps=3,
           warmup=2, extra=(), env=None, timeout=300, cpu_group=None):
    result = scaling_cli(
        "run", "--framework", "tensorflow", "--launcher", launcher, "--workload", workload,
        "--devices", devices, "--batch-size", batch, "--image-size", size, "--steps", steps,
        "--warmup", warmup, "--device-type", "cpu", "--timeout", timeout, "--out", out_dir,
        *extra, env=env, cpu_group=cpu_group,
    )
    assert result.returncode in (0, 1), result.stderr
    record = read_records(out_dir)[-1]
    assert result.returncode == (0 if record["status"] == "ok" else 1)
    return record


@pytest.fixture(scope="module")
def launcher_sweep(tmp_path_factory):
    """One sweep of CIFAR-10 at 32x32 (its nominal size), batch 8, 4 steps, on 1 and 2 devices
    under torchrun and both TensorFlow launchers: its result and its records by (launcher,
    devices)."""
    folder = tmp_path_factory.mktemp("launchers")
    config = write_sweep(folder / "mixed.yaml", frameworks={
        "torch": {"launchers": ["torchrun"]},
        "tensorflow": {"launchers": LAUNCHERS},
    }, devices=[1, 2], batch_sizes=[8], image_size=32, steps=4, warmup=2, timeout_s=300)
    result = scaling_cli("sweep", config, "--out", folder / "out")
    assert result.returncode == 0, result.stderr
    records = read_records(folder / "out")
    return result, {(r["launcher"], r["devices"]): r for r in records}, records


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("devices", [1, 2])
def test_cifar10_under_each_launcher(launcher_sweep, launcher, devices):
    record = launcher_sweep[1][launcher, devices]
    assert record["status"] == "ok", record["error"]
    assert record["global_batch_size"] == 8 * devices
    assert record["layout"] == "NHWC"
    assert record["params"] == 1_756_426
    assert record["versions"]["tensorflow"]
    reports = rank_reports(record)
    assert len(reports) == (1 if launcher == "tf-mirrored" else devices)
    assert sum(r["replicas"] for r in reports[:1]) == devices
    check_images_per_sec(record, 8 * 4 * devices)


@pytest.mark.slow
def test_mixed_sweep_reports_torch_and_tensorflow_side_by_side(launcher_sweep):
    result, _, records = launcher_sweep
    assert sorted((r["framework"], r["launcher"], r["devices"]) for r in records) == [
        ("tensorflow", "tf-mirrored", 1), ("tensorflow", "tf-mirrored", 2),
        ("tensorflow", "tf-multiworker", 1), ("tensorflow", "tf-multiworker", 2),
        ("torch", "torchrun", 1), ("torch", "torchrun", 2)]
    assert all(r["status"] == "ok" for r in records)
    table_rows = [line for line in result.stdout.splitlines() if "│" in line]
    assert any("torch" in line and "torchrun" in line for line in table_rows)
    assert any("tensorflow" in line and "tf-mirrored" in line for line in table_rows)
    assert any("tensorflow" in line and "tf-multiworker" in line for line in table_rows)


@pytest.mark.slow
@pytest.mark.parametrize("workload, size", [
    ("alexnet", 63), ("googlenet", 32), ("resnet50", 32), ("inception_v3", 75),
])
def test_each_imagenet_workload_trains_at_a_small_size(out_dir, workload, size):
    record = run_tf(out_dir, "tf-mirrored", workload=workload, batch=2, size=size, steps=1,
                    warmup=1)
    assert record["status"] == "ok", record["error"]
    assert record["image_size"] == size


@pytest.mark.slow
def test_a_cpu_device_of_one_thread_keeps_to_one_core(out_dir):
    # GoogLeNet's inception branches give TensorFlow ops to run side by side: with two inter-op
    # threads this cell used 1.6 cores. The cell runs in a CPU group ahead of the neighbouring
    # tests (where one can be made), so that it gets every core it asks for.
    with contextlib.ExitStack() as stack:
        try:
            group = stack.enter_context(cpu_group(f"scaling-ahead-{os.getpid()}-tf-threads",
                                                  shares=AHEAD_SHARES))
        except pytest.skip.Exception:
            group = None
        record = run_tf(out_dir, "single", workload="googlenet", size=32, steps=1, warmup=1,
                        extra=("--threads-per-device", 1, "--min-time", 1.5), cpu_group=group)
    assert record["status"] == "ok", record["error"]
    assert record["threads_per_device"] == 1
    [report] = rank_reports(record)
    assert (report["threads"]["intra_op"], report["threads"]["inter_op"]) == (1, 1)
    series = Path(record["log"]).with_name(TELEMETRY_FILE).read_text().splitlines()
    cores = [json.loads(point)["cell_cores"] for point in series]
    assert len(cores) >= 2
    assert statistics.fmean(cores) <= 1.1, cores


@functools.lru_cache(maxsize=None)
def trainable_parameters(framework: str) -> dict:
    """Each workload's trainable parameter count at its nominal size, in a fresh process;
    counted once per test session."""
    script = f"""
import json
from scaling.frameworks import get_framework
from workloads import WORKLOADS
counts = {{}}
for w in WORKLOADS.values():
    model = w.builder(get_framework({framework!r}).models)(w.input_size, w.classes)
    if {framework!r} == "torch":
        counts[w.name] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    else:
        counts[w.name] = int(sum(v.numpy().size for v in model.trainable_variables))
print(json.dumps(counts))
"""
    return fresh_process_value(script)


@pytest.mark.slow
def test_keras_workloads_match_pytorch_parameter_counts_within_one_percent():
    torch_counts, keras_counts = trainable_parameters("torch"), trainable_parameters("tensorflow")
    assert set(keras_counts) == set(WORKLOADS)
    for name, count in torch_counts.items():
        assert abs(keras_counts[name] - count) / count < 0.01, name
    assert keras_counts["alexnet"] == torch_counts["alexnet"] == 61_100_840
    assert keras_counts["googlenet"] == torch_counts["googlenet"]
    assert keras_counts["resnet50"] == torch_counts["resnet50"] == 25_557_032
    assert keras_counts["cifar10"] == torch_counts["cifar10"]
    assert keras_counts["mnist_mlp"] == torch_counts["mnist_mlp"] == 2_797_010


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_allocation_over_the_memory_cap_is_oom(out_dir, launcher):
    # 128 MiB per device holds the model but not the activations of 256 images per replica
    # (the first convolution's output alone is 64 MiB).
    record = run_tf(out_dir, launcher, devices=2, batch=256, steps=1, warmup=1,
                    extra=("--memory-limit", "128MiB"))
    assert record["status"] == "oom"
    assert "ResourceExhaustedError" in record["error"]
    assert "OOM when allocating tensor" in record["error"]


@pytest.mark.slow
def test_killed_multiworker_rank_is_recorded_as_crashed_without_leftovers(out_dir):
    # Rank 1 dies by SIGKILL at its first timed step, while rank 0 waits for it in the step's
    # collective. The rank's watcher reports the signal, so the cell is crashed (which wins
    # over a timeout), and the spawner stops rank 0 at once rather than at the timeout.
    env = {**os.environ, "SCALING_FAULT": "crash@1:2"}
    record = run_tf(out_dir, "tf-multiworker", devices=2, steps=2, env=env, timeout=90)
    assert (record["status"], record["error"]) == ("crashed", "rank 1 killed by SIGKILL")
    assert record["wall_s"] < 90
    assert leftover_cell_processes(record) == []


@pytest.mark.slow
@pytest.mark.parametrize("option", ["xla", "mixed_precision"])
def test_xla_and_mixed_precision_are_recorded(out_dir, option):
    record = run_tf(out_dir, "tf-mirrored", batch=2, size=16, steps=1, warmup=1,
                    extra=("--option", f"{option}=true"))
    assert record["status"] == "ok", record["error"]
    assert record["options"] == {option: True}
    [report] = rank_reports(record)
    assert (report["xla"], report["mixed_precision"]) == (option == "xla",
                                                          option == "mixed_precision")


@pytest.mark.slow
def test_xla_with_mixed_precision_on_cpu_is_an_error_with_the_reason(out_dir):
    record = run_tf(out_dir, "tf-mirrored", batch=2, size=16, steps=1, warmup=1,
                    extra=("--option", "xla=true", "--option", "mixed_precision=true"))
    assert record["status"] == "error"
    assert "xla and mixed_precision together do not run on CPU" in record["error"]


def test_unknown_option_is_refused(out_dir):
    result = scaling_in_process("run", "--framework", "tensorflow", "--launcher", "tf-mirrored",
                                "--workload", "cifar10", "--batch-size", 2,
                                "--option", "fast=true", "--out", out_dir)
    assert result.returncode == 2
    assert ("unknown option 'fast' for tensorflow under tf-mirrored; valid options: "
            "cross_device_ops, mixed_precision, xla") in result.stderr


def test_keras_adaptive_pooling_averages_torch_windows():
    script = """
import json
import numpy as np
from workloads.keras_models import AdaptiveAveragePooling
x = np.arange(2 * 5 * 7, dtype="float32").reshape(1, 5, 7, 2)
out = AdaptiveAveragePooling(6)(x).numpy()
print(json.dumps([list(out.shape), float(out[0, 0, 0, 0]), float(out[0, 5, 5, 1])]))
"""
    # x[0, h, w, c] = (7h + w) * 2 + c.
    # Row 0 covers input row 0, column 0 covers columns 0..1: mean(0, 2) = 1.
    # Row 5 covers input row 4, column 5 covers columns 5..6: mean(67, 69) = 68.
    assert fresh_process_value(script) == [[1, 6, 6, 2], 1.0, 68.0]
