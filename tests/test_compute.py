"""Compute facts: FLOPs per image from each framework's own counter, the measured matmul
ceiling, achieved TFLOP/s and MFU against the right peak."""

from __future__ import annotations

import pytest
from conftest import fresh_process_value, read_records, scaling_cli_ok

from scaling.peaks import compute_facts, gpu_peak
from scaling.workers.compute import torch_flops_per_image
from workloads import get_workload

SMALL_CELL = ("--workload", "cifar10", "--batch-size", 4, "--steps", 2, "--warmup", 1,
              "--device-type", "cpu")


def run_one(out_dir, framework, *args) -> dict:
    scaling_cli_ok("run", "--framework", framework, "--launcher", "single", *args,
                   "--out", out_dir / framework)
    [record] = read_records(out_dir / framework)
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


COUNT = """
import json
import sys
from scaling.workers.compute import tensorflow_flops_per_image, torch_flops_per_image
from workloads import get_workload

framework, workload, size = sys.argv[1], get_workload(sys.argv[2]), int(sys.argv[3])
if framework == "torch":
    flops = torch_flops_per_image("workloads.torch_models", workload, size, "train")
else:
    import tensorflow as tf

    flops = tensorflow_flops_per_image(
        tf, lambda: workload.builder("workloads.keras_models")(size, workload.classes),
        workload, size, "train")
print(json.dumps(flops))
"""


def count(framework, workload_name, image_size) -> float:
    """One image's train FLOPs from the framework's own counter, as its worker counts them, in
    a fresh process."""
    return fresh_process_value(COUNT, framework, workload_name, image_size)


@pytest.mark.slow
def test_resnet50_at_224_counts_20_to_29_gflops_in_train_and_tensorflow_agrees():
    torch_count = count("torch", "resnet50", 224)
    assert 20e9 <= torch_count <= 29e9
    assert count("tensorflow", "resnet50", 224) == pytest.approx(torch_count,
                                                                                rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_cell_records_its_frameworks_count_and_the_figures_that_follow(out_dir, framework):
    record = run_one(out_dir, framework, *SMALL_CELL)
    assert record["flops_per_image"] == count(framework, "cifar10", 32)
    assert record["gradient_bytes"] == 4 * record["params"]
    check_facts(record)


@pytest.mark.slow
def test_mxnet_counts_with_torch_on_the_same_architecture(out_dir):
    record = run_one(out_dir, "mxnet", *SMALL_CELL)
    assert record["flops_per_image"] == count("torch", "cifar10", 32)
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
                "matmul_ceiling_tflops": 700.0}]
    facts = compute_facts(record, reports, 24.3e9)
    assert facts["achieved_tflops"] == pytest.approx(72.9)
    assert facts["peak_tflops"] == 989.4
    assert facts["mfu"] == pytest.approx(72.9 / 989.4)
    assert facts["matmul_ceiling_fraction"] == pytest.approx(72.9 / 700.0)
