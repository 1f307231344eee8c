"""The matmul ceiling of one CPU device on each node: what ``mfu`` divides by on CPU.

A rank that timed its own products while the other ranks of its cell did the same would see the
cores shared, and more so the more ranks there are. So each node measures the ceiling alone,
before the cells that divide by it: a process of its own at the cell's threads and precision
(``scaling.workers.ceiling_worker``) makes a fresh matrix for each of ``REPEATS`` repeats and
keeps each repeat's best product over at least 0.25 s. The repeats' median, with its 95%
interval, is the ceiling of every cell of that (framework, threads per device, precision) on
that host. ``OUT/ceilings.jsonl`` keeps one line per (host, framework, device type, threads,
dtype), measured once and reused by every later cell in the folder; a per-host lock makes
concurrent array tasks on one node measure once, one after another. ``SCALING_CEILINGS`` names
another file to keep them in, which several folders then share.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from scaling.cell import Cell
from scaling.execute.processes import WorkerFailed, run_json_worker, worker_env
from scaling.execute.store import locked, locked_append
from scaling.frameworks import get_framework, missing_framework
from scaling.launchers import default_python, thread_env
from scaling.uncertainty import median_interval
from scaling.workers.compute import DTYPES
from scaling.workers.matmul_worker import KERNELS

CEILINGS_FILE = "ceilings.jsonl"
CEILINGS_ENV = "SCALING_CEILINGS"
REPEATS = 6
"""The fewest repeats whose median has a 95% interval (their smallest and largest)."""
TIMEOUT_S = 300.0

log = logging.getLogger("scaling")


def cpu_precision(options: Dict) -> str:
    """The precision a CPU cell's worker computes in, from its options: ``amp`` (bf16 unless
    it names fp16) or TensorFlow's ``mixed_precision`` (fp16); fp32 otherwise."""
    if options.get("mixed_precision"):
        return "fp16"
    amp = options.get("amp", False)
    return "fp16" if amp == "fp16" else "bf16" if amp else "fp32"


def ceiling_key(framework: str, threads: int, precision: str, host: Optional[str] = None
                ) -> Dict:
    """What one ceiling is of: a CPU device of ``threads`` threads on ``host`` (this one by
    default) in ``framework``'s kernel at ``precision``'s dtype."""
    return {"host": host or socket.gethostname(), "framework": framework, "device_type": "cpu",
            "threads_per_device": threads, "dtype": DTYPES[precision]}


def cell_key(cell: Cell) -> Optional[Dict]:
    """The ceiling a cell's mfu divides by on this host; None where it needs none (a GPU cell,
    a max-batch trial, a framework without a matrix kernel)."""
    if cell.purpose != "sweep" or cell.device_type != "cpu" or cell.framework not in KERNELS:
        return None
    return ceiling_key(cell.framework, cell.threads_per_device, cpu_precision(cell.options))


def ceilings_path(out_dir) -> Path:
    """Where ``out_dir``'s ceilings are kept: ``SCALING_CEILINGS``, or its own file."""
    return Path(os.environ.get(CEILINGS_ENV) or Path(out_dir) / CEILINGS_FILE)


def read_ceilings(out_dir) -> List[Dict]:
    """The ceilings measured for ``out_dir``, in the order they were measured."""
    path = ceilings_path(out_dir)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True)
            if line.endswith("\n")]


def find_ceiling(entries: Iterable[Dict], key: Dict) -> Optional[Dict]:
    """The first entry measured for ``key``, or None."""
    return next((entry for entry in entries if all(entry[k] == v for k, v in key.items())),
                None)


def measure_ceiling(key: Dict, python: str) -> Optional[Dict]:
    """The ceiling of ``key`` (on this host), measured now in a worker of ``python``, as a
    ``ceilings.jsonl`` entry; None where ``python`` lacks the framework (its cells end
    ``env_error``), and None with a warning when the worker gave no result."""
    framework, threads = key["framework"], key["threads_per_device"]
    if missing_framework(framework, python):
        return None
    env = worker_env({"TF_CPP_MIN_LOG_LEVEL": "2"}, get_framework(framework).env,
                     thread_env(threads))
    spec = {"framework": framework, "threads": threads, "dtype": key["dtype"],
            "repeats": REPEATS}
    measured_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    started = time.monotonic()
    try:
        tflops = run_json_worker(python, "scaling.workers.ceiling_worker", spec, env, TIMEOUT_S)
    except WorkerFailed as failed:
        log.warning("no matmul ceiling for %s: %s", describe_key(key), failed)
        return None
    interval = median_interval(tflops)
    return {**key, "tflops": statistics.median(tflops),
            "tflops_ci95": list(interval) if interval else None, "tflops_all": tflops,
            "measured_at": measured_at, "measure_s": round(time.monotonic() - started, 3)}


def describe_key(key: Dict) -> str:
    return (f"{key['framework']} {key['dtype']} at {key['threads_per_device']} threads on "
            f"{key['host']}")


def ensure_ceiling(out_dir, key: Dict, python: str) -> Optional[Dict]:
    """Measure the ceiling of ``key`` unless ``out_dir`` has it; the entry measured now, or
    None. Call it before the ranks of a cell start, so that the measurement runs alone."""
    path = ceilings_path(out_dir)
    with locked(path.with_name(f"{path.name}.{key['host']}")):
        if find_ceiling(read_ceilings(out_dir), key) is not None:
            return None
        measured = measure_ceiling(key, python)
        if measured is not None:
            locked_append(path, measured)
        return measured


def ensure_cell_ceiling(out_dir, cell: Cell, python: Optional[str]) -> Optional[Dict]:
    """:func:`ensure_ceiling` for the ceiling that ``cell`` divides by on this host, if
    any."""
    key = cell_key(cell)
    if key is None:
        return None
    return ensure_ceiling(out_dir, key, python or default_python(cell.framework, cell.launcher))


def ensure_cells_ceilings(out_dir, cells: List[Cell], pythons: Dict[str, str]) -> List[Dict]:
    """Every ceiling that ``cells`` divide by on this host, measured before the first of them
    runs; the entries measured now."""
    measured = (ensure_cell_ceiling(out_dir, cell, pythons.get(cell.environment))
                for cell in cells)
    return [entry for entry in measured if entry is not None]


def describe_ceiling(entry: Dict) -> str:
    """One line: what was measured, its median and interval, and what it cost."""
    low, high = entry["tflops_ci95"] or (None, None)
    interval = f" [{low:.4g}, {high:.4g}]" if low is not None else ""
    return (f"matmul ceiling of one CPU device, {describe_key(entry)}: "
            f"{entry['tflops']:.4g} TFLOP/s{interval}, measured alone in "
            f"{entry['measure_s']:.1f} s")


def record_ceiling(out_dir, record: Dict, precision: Optional[str]) -> Optional[Dict]:
    """The ceiling an ok CPU record's mfu divides by: the ceiling of its hosts (the mean over
    them on several nodes) at its framework, threads and ``precision``, with its interval and
    source; None where none was measured."""
    if record["device_type"] != "cpu" or precision not in DTYPES:
        return None
    entries = read_ceilings(out_dir)
    found = [entry for entry in (
        find_ceiling(entries, ceiling_key(record["framework"], record["threads_per_device"],
                                          precision, host))
        for host in record["hosts"] or [record["host"]]) if entry is not None]
    if not found:
        return None
    intervals = [entry["tflops_ci95"] for entry in found]
    where = (f"on {found[0]['host']} at {found[0]['measured_at']}" if len(found) == 1
             else f"on {len(found)} nodes ({', '.join(e['host'] for e in found)}), their mean")
    return {"tflops": statistics.fmean(entry["tflops"] for entry in found),
            "ci95": ([statistics.fmean(i[0] for i in intervals),
                      statistics.fmean(i[1] for i in intervals)] if all(intervals) else None),
            "source": f"measured {precision} matrix-product ceiling of one device at "
                      f"{record['threads_per_device']} threads, alone before the cells "
                      f"{where}: the median of {len(found[0]['tflops_all'])} repeats"}
