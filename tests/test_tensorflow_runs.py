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
                      rank_reports, read_records, scaling_cli, scaling_in_process, swept_records,
                      write_sweep)
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


# Timed steps of the launcher sweep's cells, after one of warm-up.
SWEEP_STEPS = 2


@pytest.fixture(scope="module")
def launcher_sweep(tmp_path_factory):
    """One sweep of CIFAR-10 at 32x32 (its nominal size), batch 8, 2 steps, on 1 and 2 devices
    under both TensorFlow launchers, and beside them one PyTorch cell (under ``single``, the
    cheapest launcher: what it shows is a PyTorch row in the same report), with no references
    (nothing here reads them): its result and its records by (launcher, devices)."""
    folder = tmp_path_factory.mktemp("launchers")
    config = write_sweep(folder / "mixed.yaml", frameworks={
        "torch": {"launchers": ["single"]},
        "tensorflow": {"launchers": LAUNCHERS},
    }, devices=[1, 2], batch_sizes=[8], image_size=32, steps=SWEEP_STEPS, warmup=1,
        references="none", timeout_s=300)
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
    check_images_per_sec(record, 8 * SWEEP_STEPS * devices)


@pytest.mark.slow
def test_mixed_sweep_reports_torch_and_tensorflow_side_by_side(launcher_sweep):
    result, _, records = launcher_sweep
    assert sorted((r["framework"], r["launcher"], r["devices"]) for r in records) == [
        ("tensorflow", "tf-mirrored", 1), ("tensorflow", "tf-mirrored", 2),
        ("tensorflow", "tf-multiworker", 1), ("tensorflow", "tf-multiworker", 2),
        ("torch", "single", 1)]
    assert all(r["status"] == "ok" for r in records)
    table_rows = [line for line in result.stdout.splitlines() if "│" in line]
    assert any("torch" in line and "single" in line for line in table_rows)
    assert any("tensorflow" in line and "tf-mirrored" in line for line in table_rows)
    assert any("tensorflow" in line and "tf-multiworker" in line for line in table_rows)


def sweep_records(folder, sweeps, cpu_group=None) -> list:
    """Run each sweep of ``sweeps`` (a name -> its ``write_sweep`` overrides) into its own
    folder under ``folder`` (in ``cpu_group``, where given): every record. Each sweep exits 0
    when its every cell is ok, else 1."""
    return [record for name, overrides in sweeps.items()
            for record in swept_records(write_sweep(folder / f"{name}.yaml", **overrides),
                                        folder / name, cpu_group=cpu_group)]


IMAGENET_SIZES = {"alexnet": 63, "googlenet": 32, "resnet50": 32, "inception_v3": 75}


@pytest.fixture(scope="module")
def imagenet_records(tmp_path_factory):
    """Each ImageNet workload trained at a small size, batch 2, one step after one of warm-up:
    one sweep per size (GoogLeNet and ResNet-50 share one), under ``single`` (the network is
    what is tested, not the strategy) with no references; the records by workload."""
    sizes = sorted(set(IMAGENET_SIZES.values()))
    records = sweep_records(tmp_path_factory.mktemp("imagenet"), {
        f"size{size}": dict(
            frameworks={"tensorflow": {"launchers": ["single"]}}, batch_sizes=[2],
            workloads=[w for w, s in IMAGENET_SIZES.items() if s == size], image_size=size,
            steps=1, warmup=1, references="none", timeout_s=300)
        for size in sizes})
    return {record["workload"]: record for record in records}


@pytest.mark.slow
@pytest.mark.parametrize("workload, size", IMAGENET_SIZES.items())
def test_each_imagenet_workload_trains_at_a_small_size(imagenet_records, workload, size):
    record = imagenet_records[workload]
    assert record["status"] == "ok", record["error"]
    assert record["image_size"] == size
    # A train step keeps no gradients: no second program is compiled to sum them.
    assert "gradient_sums" not in rank_reports(record)[0]


@pytest.mark.slow
def test_a_cpu_device_of_one_thread_keeps_to_one_core(tmp_path):
    # GoogLeNet's inception branches give TensorFlow ops to run side by side: with two inter-op
    # threads this cell used 1.6 cores. The cell runs in a CPU group ahead of the neighbouring
    # tests (where one can be made), so that it gets every core it asks for. A one-cell sweep
    # with no references: its warm-up and window are what the telemetry samples.
    with contextlib.ExitStack() as stack:
        try:
            group = stack.enter_context(cpu_group(f"scaling-ahead-{os.getpid()}-tf-threads",
                                                  shares=AHEAD_SHARES))
        except pytest.skip.Exception:
            group = None
        [record] = sweep_records(tmp_path, {"threads": dict(
            frameworks={"tensorflow": {"launchers": ["single"]}}, workloads=["googlenet"],
            batch_sizes=[8], image_size=32, steps=1, warmup=1, threads_per_device=1,
            min_time_s=1.5, references="none", timeout_s=300)}, cpu_group=group)
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


@pytest.fixture(scope="module")
def capped_records(tmp_path_factory):
    """One sweep of a cell over two devices under each launcher with 128 MiB per device, which
    holds the model but not the activations of 256 images per replica (the first
    convolution's output alone is 64 MiB): the records by launcher."""
    records = sweep_records(tmp_path_factory.mktemp("capped"), {"capped": dict(
        frameworks={"tensorflow": {"launchers": LAUNCHERS}}, devices=[2], batch_sizes=[256],
        image_size=32, steps=1, warmup=1, memory_limit="128MiB", references="none",
        timeout_s=300)})
    return {record["launcher"]: record for record in records}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_allocation_over_the_memory_cap_is_oom(capped_records, launcher):
    record = capped_records[launcher]
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


OPTION_CELLS = {"xla": {"xla": True}, "mixed_precision": {"mixed_precision": True},
                "both": {"xla": True, "mixed_precision": True}}


@pytest.fixture(scope="module")
def option_records(tmp_path_factory):
    """One sweep of a tiny cell under each of OPTION_CELLS' options, a variant of TensorFlow
    each, under ``single`` (the options are TensorFlow's, not a launcher's) with no
    references: the records by variant."""
    records = sweep_records(tmp_path_factory.mktemp("options"), {"options": dict(
        frameworks={f"tensorflow@{name}": {"framework": "tensorflow", "launchers": ["single"],
                                           "options": options}
                    for name, options in OPTION_CELLS.items()},
        batch_sizes=[2], image_size=16, steps=1, warmup=1, references="none", timeout_s=300)})
    return {record["variant"].partition("@")[2]: record for record in records}


@pytest.mark.slow
@pytest.mark.parametrize("option", ["xla", "mixed_precision"])
def test_xla_and_mixed_precision_are_recorded(option_records, option):
    record = option_records[option]
    assert record["status"] == "ok", record["error"]
    assert record["options"] == {option: True}
    [report] = rank_reports(record)
    assert (report["xla"], report["mixed_precision"]) == (option == "xla",
                                                          option == "mixed_precision")


@pytest.mark.slow
def test_xla_with_mixed_precision_on_cpu_is_an_error_with_the_reason(option_records):
    record = option_records["both"]
    assert record["options"] == {"xla": True, "mixed_precision": True}
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
