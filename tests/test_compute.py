"""Compute facts: FLOPs per image from each framework's own counter, the measured matmul
ceiling, achieved TFLOP/s and MFU against the right peak."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path

import pytest
from conftest import read_records, scaling_cli_ok, write_sweep

from scaling.execute.ceiling import (CEILINGS_ENV, CEILINGS_FILE, REPEATS, ceiling_key,
                                     record_ceiling)
from scaling.execute.store import locked_append
from scaling.frameworks import get_framework
from scaling.hardware import cpu_cores
from scaling.execute.peaks import compute_facts, gpu_peak
from scaling.workers.pytorch.flops import flops_per_image as torch_flops_per_image
from workloads import WORKLOADS, get_workload

REPO = Path(__file__).resolve().parents[1]
SMALL_CELL = dict(workloads=["cifar10"], image_size=WORKLOADS["cifar10"].input_size,
                  batch_sizes=[4], steps=2, warmup=1, device_type="cpu")
"""A cell of the CIFAR-10 network at its own side, which the counts below count at."""


def run_one(out_dir, framework) -> dict:
    """The ``single`` cell of SMALL_CELL under ``framework``, run as a sweep of one cell that
    times no references after its window (no test here reads the scaling model's fields)."""
    folder = out_dir / framework
    folder.mkdir(parents=True)
    sweep = write_sweep(folder / "sweep.yaml", frameworks={framework: {"launchers": ["single"]}},
                        references="none", **SMALL_CELL)
    scaling_cli_ok("sweep", sweep, "--out", folder / "out")
    [record] = read_records(folder / "out")
    assert record["status"] == "ok", record["error"]
    return record


def check_facts(record) -> None:
    """The figures that follow from the counted FLOPs and the measured ceiling."""
    assert record["achieved_tflops"] == pytest.approx(
        record["flops_per_image"] * record["images_per_sec"] / 1e12, rel=1e-12)
    assert record["achieved_tflops_per_device"] == pytest.approx(
        record["achieved_tflops"] / record["total_devices"], rel=1e-12)
    assert record["peak_tflops"] == record["matmul_ceiling_tflops"] > 0  # CPU: the ceiling
    assert 0 < record["mfu"] == record["matmul_ceiling_fraction"] < 1
    assert record["peak_source"].startswith("measured fp32 matrix-product ceiling")


COUNTERS = {
    "torch": """
from scaling.workers.pytorch.flops import flops_per_image as torch_flops_per_image

def count(workload, size, mode):
    return torch_flops_per_image("workloads.torch_models", workload, size, mode)
""",
    "tensorflow": """
import tensorflow as tf
from scaling.workers.tensorflow.flops import flops_per_image

def count(workload, size, mode):
    return flops_per_image(
        tf, lambda: workload.builder("workloads.keras_models")(size, workload.classes),
        workload, size, mode)
""",
    "mxnet": """
import mxnet as mx
from scaling.workers.mxnet.flops import flops_per_image

def count(workload, size, mode):
    net = workload.builder("workloads.gluon_models")(size, workload.classes)
    return flops_per_image(mx, net, (workload.channels, size, size), mode)
""",
    "jax": """
import functools
import jax
from flax import nnx
from scaling.workers.jax.flops import flops_per_image

@functools.cache
def model(workload, size):
    return nnx.eval_shape(lambda: workload.builder("workloads.flax_models")(size,
                                                                            workload.classes))

def count(workload, size, mode):
    model(workload, size).eval() if mode == "forward" else model(workload, size).train()
    graph, *state = nnx.split(model(workload, size), nnx.Param, nnx.BatchStat, ...)
    return flops_per_image(jax, nnx, graph, state, (size, size, workload.channels), mode)
""",
}
"""Each framework's count of one image, as its worker counts it."""

COUNT = """
import json
import sys
from workloads import get_workload

modes, counts = sys.argv[1].split(","), {}
for name, size in (item.split(":") for item in sys.argv[2:]):
    for mode in modes:
        counts[f"{name} {mode}"] = count(get_workload(name), int(size), mode)
print(json.dumps(counts))
"""


def start_counting(framework, modes, *sizes) -> subprocess.Popen:
    """A fresh process of the framework's interpreter that counts one image's FLOPs of each
    "workload:size" in ``sizes`` in each mode, as the framework's worker counts them."""
    return subprocess.Popen(
        [get_framework(framework).default_python(), "-c", COUNTERS[framework] + COUNT,
         ",".join(modes), *sizes], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)})


def counted(process: subprocess.Popen) -> dict:
    """What a counting process found, by "workload mode"."""
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def counts() -> dict:
    """Each framework's count of one image of every workload at its nominal size, ``forward``
    and ``train``, by framework and then by "workload mode": one counting process a framework,
    the four at once."""
    sizes = [f"{w.name}:{w.input_size}" for w in WORKLOADS.values()]
    processes = {framework: start_counting(framework, ("forward", "train"), *sizes)
                 for framework in COUNTERS}
    return {framework: counted(process) for framework, process in processes.items()}


@pytest.mark.slow
def test_every_framework_counts_torchs_flops_for_every_workload_and_mode(counts):
    """Each framework counts its own network: a network that drifts from the others (a stride
    moved, a layer resized) changes its count. Every counter counts ``forward_backward`` as
    ``train``."""
    counts = dict(counts)
    torch_counts = counts.pop("torch")
    assert len(torch_counts) == 2 * len(WORKLOADS)
    for framework, framework_counts in counts.items():
        assert framework_counts.keys() == torch_counts.keys()
        for key, flops in torch_counts.items():
            assert framework_counts[key] == pytest.approx(flops, rel=0.01), (framework, key)
    assert 8.0e9 < torch_counts["resnet50 forward"] < 8.4e9  # 4.1 G multiply-adds
    assert 20e9 <= torch_counts["resnet50 train"] <= 29e9


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax"])
def test_a_cell_records_its_frameworks_count_and_the_figures_that_follow(out_dir, framework,
                                                                       monkeypatch, counts):
    # The cell's own folder keeps its ceiling, measured just before it: the run's shared one
    # was measured at whatever load the machine had when a test first needed it.
    monkeypatch.delenv(CEILINGS_ENV)
    record = run_one(out_dir, framework)
    assert record["image_size"] == 32 and record["mode"] == "train"
    assert record["flops_per_image"] == counts[framework]["cifar10 train"]
    assert record["gradient_bytes"] == 4 * record["params"]
    check_facts(record)


@pytest.mark.slow
def test_mxnet_records_its_own_count(out_dir, counts):
    record = run_one(out_dir, "mxnet")
    assert record["image_size"] == 32 and record["mode"] == "train"
    assert record["flops_per_image"] == counts["mxnet"]["cifar10 train"]
    assert record["gradient_bytes"] == 4 * record["params"]
    assert record["achieved_tflops"] > 0 and record["precision"] == "fp32"


def test_forward_counts_a_third_of_forward_and_backward():
    resnet50 = get_workload("resnet50")
    forward = torch_flops_per_image("workloads.torch_models", resnet50, 224, "forward")
    train = torch_flops_per_image("workloads.torch_models", resnet50, 224, "train")
    assert 8.0e9 < forward < 8.4e9  # 4.1 G multiply-adds
    assert 2.8 < train / forward < 3.1
    assert train == torch_flops_per_image("workloads.torch_models", resnet50, 224,
                                          "forward_backward")


def test_gpu_peaks_come_from_the_table_with_their_source():
    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16")[0] == 989.4
    value, source = gpu_peak("NVIDIA H100 80GB HBM3", "fp32")
    assert value == 494.7 and source.startswith("tf32 dense, NVIDIA H100")
    assert gpu_peak("NVIDIA H100 PCIe", "bf16")[0] == 756.0
    assert gpu_peak("NVIDIA A100-SXM4-80GB", "fp16")[0] == 312.0
    assert gpu_peak("Tesla V100-SXM2-16GB", "fp32")[0] == 15.7  # no TF32 before Ampere
    assert gpu_peak("Tesla V100-SXM2-16GB", "bf16") is None
    assert gpu_peak("Radeon VII", "fp32") is None


def test_mfu_of_a_gpu_record_divides_by_the_tables_peak():
    # A recorded H100 cell (no GPU here): 3000 images/sec of 24.3 GFLOPs on one device in bf16.
    record = {"images_per_sec": 3000.0, "total_devices": 1, "device_type": "gpu",
              "device_name": "NVIDIA H100 80GB HBM3", "threads_per_device": 1}
    reports = [{"gradient_bytes": 102_228_128, "precision": "bf16",
                "matmul_probe_tflops": 700.0}]
    facts = compute_facts(record, reports, 24.3e9)
    assert facts["achieved_tflops"] == pytest.approx(72.9)
    assert facts["peak_tflops"] == 989.4
    assert facts["mfu"] == pytest.approx(72.9 / 989.4)
    assert facts["matmul_ceiling_fraction"] == pytest.approx(72.9 / 700.0)


@pytest.fixture(scope="module")
def shared_cores_curve(tmp_path_factory):
    """torchrun at 1 and 2 CPU devices of all the cores each, in one folder that keeps its own
    ceilings (no references after the windows: the tests read throughput, probes and
    ceilings). Returns the folder, the sweep's output and the records by device count."""
    tmp = tmp_path_factory.mktemp("ceiling")
    env = {name: value for name, value in os.environ.items() if name != CEILINGS_ENV}
    sweep = write_sweep(tmp / "sweep.yaml", devices=[1, 2], threads_per_device=cpu_cores(),
                        allow_oversubscribe=True, image_size=32, batch_sizes=[8],
                        references="none")
    result = scaling_cli_ok("sweep", sweep, "--out", tmp / "out", env=env)
    return tmp / "out", result, {r["devices"]: r for r in read_records(tmp / "out")}


@pytest.mark.slow
def test_mfu_follows_the_per_device_throughput_against_one_ceiling(shared_cores_curve):
    # Whether two devices sharing the cores run slower each is the machine's answer, and a
    # neighbour's load can turn it over; that both divide by the same ceiling is the harness's.
    _, _, records = shared_cores_curve
    one, two = records[1], records[2]
    assert two["mfu"] / one["mfu"] == pytest.approx(
        two["achieved_tflops_per_device"] / one["achieved_tflops_per_device"], rel=1e-9)
    assert one["peak_tflops"] == one["matmul_ceiling_tflops"] == two["matmul_ceiling_tflops"]
    # Each rank's probe stays, apart from the ceiling: a sentinel of the machine's speed.
    assert one["matmul_probe_tflops"] > 0 and two["matmul_probe_tflops"] > 0


@pytest.mark.slow
def test_the_ceiling_is_measured_once_alone_before_the_cells(shared_cores_curve):
    out, result, records = shared_cores_curve
    [entry] = [json.loads(line) for line in (out / CEILINGS_FILE).read_text().splitlines()]
    assert {k: entry[k] for k in ("host", "framework", "device_type", "threads_per_device",
                                  "dtype")} == {
        "host": records[1]["host"], "framework": "torch", "device_type": "cpu",
        "threads_per_device": cpu_cores(), "dtype": "float32"}
    assert len(entry["tflops_all"]) == REPEATS
    assert entry["tflops"] == statistics.median(entry["tflops_all"])
    assert entry["tflops_ci95"] == [min(entry["tflops_all"]), max(entry["tflops_all"])]
    assert all(entry["measured_at"] <= record["started_at"] for record in records.values())
    assert result.stderr.count("matmul ceiling of one CPU device") == 1
    for record in records.values():
        assert record["matmul_ceiling_tflops"] == entry["tflops"]
        assert record["matmul_ceiling_tflops_ci95"] == entry["tflops_ci95"]
        assert record["matmul_ceiling_source"].startswith(
            f"measured fp32 matrix-product ceiling of one device at {cpu_cores()} threads, "
            f"alone before the cells on {entry['host']}")


def test_cpu_mfu_divides_by_the_nodes_ceiling_not_the_ranks_probe():
    record = {"images_per_sec": 40.0, "total_devices": 2, "device_type": "cpu",
              "device_name": "cpu", "threads_per_device": 1, "framework": "torch",
              "hosts": ["a", "b"], "host": "a"}
    reports = [{"precision": "fp32", "matmul_probe_tflops": probe} for probe in (0.03, 0.02)]
    ceiling = {"tflops": 0.05, "ci95": [0.04, 0.06], "source": "measured alone"}
    facts = compute_facts(record, reports, 1e9, ceiling)
    assert facts["matmul_probe_tflops"] == 0.02
    assert (facts["peak_tflops"], facts["matmul_ceiling_tflops_ci95"]) == (0.05, [0.04, 0.06])
    assert facts["mfu"] == facts["matmul_ceiling_fraction"] == pytest.approx(0.02 / 0.05)
    assert compute_facts(record, reports, 1e9)["mfu"] is None  # no ceiling measured alone


def test_a_record_over_two_nodes_divides_by_the_mean_of_their_ceilings(tmp_path, monkeypatch):
    monkeypatch.delenv(CEILINGS_ENV, raising=False)
    for host, tflops in (("a", 0.04), ("b", 0.06), ("c", 1.0)):
        locked_append(tmp_path / CEILINGS_FILE, {
            **ceiling_key("torch", 2, "fp32", host), "tflops": tflops,
            "tflops_ci95": [tflops - 0.01, tflops + 0.01], "tflops_all": [tflops] * REPEATS,
            "measured_at": "2025-01-01T00:00:00+00:00", "measure_s": 3.0})
    record = {"device_type": "cpu", "framework": "torch", "threads_per_device": 2,
              "hosts": ["a", "b"], "host": "a"}
    ceiling = record_ceiling(tmp_path, record, "fp32")
    assert ceiling["tflops"] == pytest.approx(0.05)
    assert ceiling["ci95"] == pytest.approx([0.04, 0.06])
    assert "on 2 nodes (a, b)" in ceiling["source"]
    assert record_ceiling(tmp_path, record, "bf16") is None  # measured at fp32 only
    assert record_ceiling(tmp_path, {**record, "device_type": "gpu"}, "fp32") is None
