"""``scaling allreduce``: the bandwidth of each launcher's own collective, by message size.

A cell of purpose ``allreduce`` starts the launcher's processes like any cell, here or through
Slurm, but trains nothing: each process sums float32 buffers over the cell's devices through the
mechanism its training would use (``scaling.workers.collective``). Its record, in
``results.jsonl`` with the training cells, lists per size the median time of one allreduce with
its interval, and the bandwidths in nccl-tests' convention: ``algbw`` = bytes / time and
``busbw`` = algbw x 2(n-1)/n. ``OUT/allreduce.jsonl`` holds one line per (cell, size), written
again from the records after every run.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Dict, List, Optional

from scaling.errors import ScalingError
from scaling.launchers import get_launcher
from scaling.units import parse_bytes
from workloads import WORKLOADS, get_workload

DEFAULT_SIZES = [4 * 2**10 * 4**step for step in range(9)]
"""4 KiB to 256 MiB in steps of 4x."""
ALLREDUCE_FILE = "allreduce.jsonl"


def parse_sizes(text: Optional[str]) -> List[int]:
    """``"4KiB,1MiB"`` -> [4096, 1048576]; each a positive multiple of 4 bytes (float32)."""
    if text is None:
        return list(DEFAULT_SIZES)
    try:
        sizes = sorted({parse_bytes(part.strip()) for part in text.split(",") if part.strip()})
    except ScalingError:
        sizes = []
    if not sizes or any(size % 4 for size in sizes):
        raise ScalingError(f"--sizes takes byte sizes that are multiples of 4 (float32), such "
                           f"as 4KiB,1MiB,64MiB; got {text!r}")
    return sizes


@functools.lru_cache(maxsize=None)
def gradient_bytes(workload: str, image_size: Optional[int] = None) -> Optional[int]:
    """The float32 gradients of one replica of ``workload`` (its torch model's trainable
    parameters x 4 bytes); None without torch."""
    try:
        import torch  # noqa: F401  (the count builds the torch model)
    except ImportError:
        return None
    spec = get_workload(workload)
    model = spec.builder("workloads.torch_models")(image_size or spec.input_size, spec.classes)
    return 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)


def marks(launcher: str, workloads: Optional[List[str]] = None) -> Dict[str, int]:
    """Sizes worth marking on a bandwidth curve: each workload's gradients at its nominal
    input, and the launcher's gradient bucket where it has one."""
    found = {f"{name} gradients": gradient_bytes(name) for name in workloads or WORKLOADS.names()}
    bucket = get_launcher(launcher).gradient_bucket_bytes()
    if bucket:
        found[f"{launcher} bucket"] = bucket
    return {label: size for label, size in found.items() if size}


def allreduce_rows(records: List[Dict]) -> List[Dict]:
    """One row per (allreduce cell, size), from the records of purpose ``allreduce``."""
    rows = []
    for record in records:
        if record.get("purpose") != "allreduce":
            continue
        cell = {key: record[key] for key in ("cell", "framework", "launcher", "devices", "nodes",
                                             "device_type", "threads_per_device", "status",
                                             "started_at")}
        if record["status"] != "ok":
            rows.append({**cell, "error": record["error"]})
            continue
        for size in record["allreduce"]:
            rows.append({**cell, "total_devices": record["allreduce_devices"], **size})
    return rows


def write_allreduce_jsonl(records: List[Dict], out_dir) -> Path:
    """``OUT/allreduce.jsonl`` from the store's records, replaced whole."""
    path = Path(out_dir) / ALLREDUCE_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as out:
        for row in allreduce_rows(records):
            out.write(json.dumps(row, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def read_allreduce_rows(out_dir) -> List[Dict]:
    path = Path(out_dir) / ALLREDUCE_FILE
    if not path.exists():
        return []
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]

