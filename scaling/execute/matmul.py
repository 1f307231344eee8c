"""``scaling matmul``: is the GPU worth it for a matrix product, and from which size on?

The reference benchmark: an n x n random matrix times its transpose, then summed, for n from
10 to 20000, on CPU and GPU. Each (framework, device type) runs in a fresh worker process
(``scaling.workers.matmul_worker``); start-up and allocation are not timed, the device is
synchronized, and a size's figure is the median of its repeats. Sizes that would not fit in
half the device's free memory are left out, and the output says so.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import json
import statistics
from pathlib import Path
from typing import Dict, List, Optional

import psutil

from scaling import hardware
from scaling.errors import InfrastructureError, ScalingError
from scaling.execute.processes import WorkerFailed, run_json_worker, worker_env
from scaling.execute.run import provenance
from scaling.execute.store import ResultStore
from scaling.frameworks import get_framework, missing_framework
from scaling.workers.matmul_worker import KERNELS

REFERENCE_SIZES = [10, 50, 100, *range(200, 1001, 100), *range(2000, 20001, 1000)]
FRAMEWORKS = tuple(KERNELS)
DTYPES = ("float32", "float64", "float16", "bfloat16")
MATMUL_FILE = "matmul.csv"
MATMUL_COLUMNS = ["framework", "device", "device_name", "n", "dtype", "seconds", "tflops",
                  "status", "error"]
BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def parse_sizes(text: Optional[str]) -> List[int]:
    if text is None:
        return list(REFERENCE_SIZES)
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] <= 0:
        raise ScalingError(f"--sizes takes positive matrix sides such as 10,100,1000, got {text!r}")
    return sizes


def free_memory(device_type: str) -> int:
    if device_type == "gpu":
        gpus = hardware.query_gpus()
        return (int(gpus[0]["memory_total_mib"]) - int(gpus[0]["memory_used_mib"])) * 2**20
    return psutil.virtual_memory().available


def fitting(sizes: List[int], device_type: str, dtype: str) -> List[int]:
    """The sizes whose A and A @ A.T (and the host's float64 copy) fit in half the free memory."""
    budget = free_memory(device_type) // 2
    return [n for n in sizes if n * n * (2 * BYTES[dtype] + 8) <= budget]


def run_worker(framework: str, device_type: str, sizes: List[int], dtype: str,
               repeats: int, timeout_s: float) -> List[Dict]:
    python = get_framework(framework).default_python()
    missing = missing_framework(framework, python)
    if missing:
        raise InfrastructureError(missing)
    spec = {"framework": framework, "device_type": device_type, "sizes": sizes,
            "dtype": dtype, "repeats": repeats}
    env = worker_env({"TF_CPP_MIN_LOG_LEVEL": "2"}, get_framework(framework).env)
    try:
        return run_json_worker(python, "scaling.workers.matmul_worker", spec, env, timeout_s)
    except WorkerFailed as failed:
        return [{"n": n, "status": failed.status, "error": str(failed)} for n in sizes]


def record_of(framework: str, device_type: str, dtype: str, repeats: int, row: Dict) -> Dict:
    key = json.dumps({"kind": "matmul", "framework": framework, "device_type": device_type,
                      "dtype": dtype, "n": row["n"], "repeats": repeats}, sort_keys=True)
    seconds = statistics.median(row["seconds_all"]) if row.get("seconds_all") else None
    return {
        "cell": hashlib.sha256(key.encode()).hexdigest()[:16], "kind": "matmul",
        "purpose": "matmul", "framework": framework, "device_type": device_type,
        "device_name": row.get("device_name"), "n": row["n"], "dtype": dtype,
        "repeats": repeats, "status": row["status"], "error": row.get("error"),
        "seconds": seconds, "seconds_all": row.get("seconds_all"),
        "tflops": 2 * row["n"] ** 3 / seconds / 1e12 if seconds else None,
        "versions": row.get("versions"), **provenance(),
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def matmul_records(records: List[Dict]) -> List[Dict]:
    return [record for record in records if record.get("kind") == "matmul"]


def write_matmul_csv(records: List[Dict], out_dir) -> Path:
    path = Path(out_dir) / MATMUL_FILE
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=MATMUL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for record in sorted(records, key=lambda r: (r["framework"], r["device_type"], r["n"])):
            writer.writerow({**record, "device": record["device_type"]})
    return path


def crossover(records: List[Dict], framework: str) -> Optional[int]:
    """The smallest n from which the GPU is faster than the CPU at every measured size; None
    without both devices or when the GPU never wins for good."""
    times = {device: {r["n"]: r["seconds"] for r in records if r["framework"] == framework
                      and r["device_type"] == device and r["status"] == "ok"}
             for device in ("cpu", "gpu")}
    shared = sorted(times["cpu"].keys() & times["gpu"].keys())
    winner = None
    for n in reversed(shared):
        if times["gpu"][n] >= times["cpu"][n]:
            break
        winner = n
    return winner


def run_matmul(out_dir, frameworks: List[str], device_types: List[str], sizes: List[int],
               dtype: str, repeats: int, timeout_s: float, on_row=None) -> List[Dict]:
    """Measure every (framework, device type) and append the records, once each."""
    store = ResultStore(out_dir)
    records = []
    for framework in frameworks:
        for device_type in device_types:
            kept = fitting(sizes, device_type, dtype)
            rows = run_worker(framework, device_type, kept, dtype, repeats, timeout_s) \
                if kept else []
            for row in rows:
                record = record_of(framework, device_type, dtype, repeats, row)
                store.append_once(record)
                records.append(record)
                if on_row:
                    on_row(record)
            if len(kept) < len(sizes):
                left = sorted(set(sizes) - set(kept))
                if on_row:
                    on_row({"framework": framework, "device_type": device_type,
                            "left_out": left})
    return records
