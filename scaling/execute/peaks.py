"""Dense peak TFLOP/s of GPUs by precision, each with its source, and the compute facts of a
record: achieved TFLOP/s, the peak it is measured against, and MFU.

``fp32`` cells on GPUs with tensor cores for TF32 are held against the TF32 peak: cuDNN runs
their convolutions in TF32 by default in torch and TensorFlow. On CPUs the peak is the
matrix-product ceiling of one device at the cell's threads, measured on the node alone before
the cells (:mod:`scaling.execute.ceiling`), since no spec peak is reachable there.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

GPU_PEAKS: List[Tuple[str, Dict[str, float], str]] = [
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
     "NVIDIA H100 Tensor Core GPU datasheet, PCIe column, dense (half the sparsity figures)"),
    ("H100", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "NVIDIA H100 Tensor Core GPU datasheet, SXM column, dense (half the sparsity figures)"),
    ("H200", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "NVIDIA H200 Tensor Core GPU datasheet, SXM column, dense (half the sparsity figures)"),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
     "NVIDIA A100 Tensor Core GPU datasheet, dense (half the sparsity figures)"),
    ("A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
     "NVIDIA A10 Tensor Core GPU datasheet, dense"),
    ("L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
     "NVIDIA L4 Tensor Core GPU datasheet, dense (half the sparsity figures)"),
    ("V100", {"fp32": 15.7, "fp16": 125.0},
     "NVIDIA V100 Tensor Core GPU datasheet, SXM2 column (fp16: tensor cores)"),
    ("T4", {"fp32": 8.1, "fp16": 65.0}, "NVIDIA T4 Tensor Core GPU datasheet"),
]
"""(a name the device's own name contains, peaks by precision, source), most specific first."""


COMPUTE_FIELDS = ("flops_per_image", "gradient_bytes", "precision", "achieved_tflops",
                  "achieved_tflops_per_device", "matmul_probe_tflops", "matmul_ceiling_tflops",
                  "matmul_ceiling_tflops_ci95", "matmul_ceiling_source", "peak_tflops",
                  "peak_source", "mfu", "matmul_ceiling_fraction")
"""The record fields of :func:`compute_facts`: null in any record that is not an ok sweep
cell."""


def gpu_peak(device_name: str, precision: str) -> Optional[Tuple[float, str]]:
    """(dense peak TFLOP/s, source) of one GPU at ``precision``; None for a GPU not in the
    table. ``fp32`` uses the TF32 peak where the GPU has one."""
    for name, peaks, source in GPU_PEAKS:
        if name.lower() in device_name.lower():
            key = "tf32" if precision == "fp32" and "tf32" in peaks else precision
            return (peaks[key], f"{key} dense, {source}") if key in peaks else None
    return None


def ceiling_facts(record: Dict, probe: Optional[float], node_ceiling: Optional[Dict]) -> Dict:
    """The matmul ceiling of one device with its interval and source: on CPU the node's,
    measured alone (``node_ceiling``, from :func:`scaling.execute.ceiling.record_ceiling`);
    on GPU the slowest rank's ``probe``."""
    if record["device_type"] == "cpu":
        found = node_ceiling or {}
        return {"matmul_ceiling_tflops": found.get("tflops"),
                "matmul_ceiling_tflops_ci95": found.get("ci95"),
                "matmul_ceiling_source": found.get("source")}
    return {"matmul_ceiling_tflops": probe, "matmul_ceiling_tflops_ci95": None,
            "matmul_ceiling_source": "the slowest rank's matrix products before its warm-up"
            if probe else None}


def compute_facts(record: Dict, reports: List[Dict], flops_per_image: Optional[float],
                  node_ceiling: Optional[Dict] = None) -> Dict:
    """``achieved_tflops`` (total and per device), ``peak_tflops`` per device with its
    ``peak_source``, ``mfu``, the matmul ceiling and ``matmul_ceiling_fraction`` for an ok
    record; ``node_ceiling`` is a CPU record's ceiling measured alone on its node."""
    facts = {"flops_per_image": flops_per_image,
             "gradient_bytes": reports[0].get("gradient_bytes"),
             "precision": reports[0].get("precision")}
    probes = [r["matmul_probe_tflops"] for r in reports if r.get("matmul_probe_tflops")]
    probe = min(probes) if probes else None
    facts.update(matmul_probe_tflops=probe, **ceiling_facts(record, probe, node_ceiling))
    ceiling = facts["matmul_ceiling_tflops"]
    achieved = (flops_per_image * record["images_per_sec"] / 1e12 if flops_per_image
                else None)
    per_device = achieved / record["total_devices"] if achieved is not None else None
    peak = source = None
    if record["device_type"] == "gpu" and facts["precision"]:
        found = gpu_peak(record["device_name"] or "", facts["precision"])
        peak, source = found if found else (None, None)
    elif ceiling:
        peak, source = ceiling, facts["matmul_ceiling_source"]
    facts.update(
        achieved_tflops=achieved, achieved_tflops_per_device=per_device,
        peak_tflops=peak, peak_source=source,
        mfu=per_device / peak if per_device is not None and peak else None,
        matmul_ceiling_fraction=per_device / ceiling if per_device is not None and ceiling
        else None)
    return facts
