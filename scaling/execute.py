"""Run one cell under its launcher and turn what its ranks report into a result record.

The record is written to the cell's folder (``cells/CELL/record.json``) and added to the
sweep's ``results.jsonl`` index.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Dict, Optional

import scaling
from scaling import hardware
from scaling.aggregate import summarize
from scaling.cell import Cell
from scaling.frameworks import get_framework, missing_framework
from scaling.launchers import get_launcher
from scaling.placement import Placement, local_placement
from scaling.processes import run_process_tree
from scaling.store import ResultStore
from scaling.workers.common import write_json_atomically

PROJECT_ROOT = Path(scaling.__file__).resolve().parents[1]


def _read_reports(cell_dir: Path):
    reports = []
    for path in sorted(cell_dir.glob("rank*.json")):
        with open(path) as report:
            reports.append(json.load(report))
    return reports


def memory_cap_env(cell: Cell) -> Dict[str, str]:
    """Under a CPU memory cap, make the heap's peak repeatable.

    glibc moves its mmap threshold with the allocation history, so the same batch can fit once
    and fail the next time. A fixed threshold serves every large buffer with its own mapping,
    returned to the system when freed, so the peak depends on the batch alone.
    """
    if cell.memory_limit is None:
        return {}
    return {"MALLOC_MMAP_THRESHOLD_": "65536"}


def provenance() -> Dict:
    return {
        "host": socket.gethostname(),
        "cpu_model": hardware.cpu_model(),
        "cpu_cores": hardware.cpu_cores(),
        "harness_version": scaling.__version__,
    }


def run_cell(cell: Cell, out_dir, python: Optional[str] = None,
             extra_env: Optional[Dict[str, str]] = None,
             placement: Optional[Placement] = None) -> Dict:
    """Run this node's part of ``cell`` in a fresh process tree under its timeout and return
    its result record. ``placement`` defaults to every rank on this machine.

    The cell's files (spec, rank reports, launcher log, record) live in ``OUT/cells/CELL_ID/``.
    """
    cell_dir = Path(out_dir) / "cells" / cell.cell_id
    if cell_dir.exists():
        shutil.rmtree(cell_dir)
    cell_dir.mkdir(parents=True)
    (cell_dir / "cell.json").write_text(json.dumps(cell.to_dict(), indent=2))
    launcher = get_launcher(cell.launcher)
    framework = get_framework(cell.framework)
    python = python or framework.default_python()
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    missing = missing_framework(cell.framework, python)
    if missing is not None:
        return _record(cell, cell_dir, {"status": "env_error", "error": missing}, [],
                       started_at, 0.0, token=None)
    placement = placement or local_placement(launcher.ranks_per_node(cell))
    argv = launcher.command(cell, placement, str(cell_dir), python)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT),
                                                    os.environ.get("PYTHONPATH")])),
        **framework.env,
        **launcher.env(cell, placement),
        **memory_cap_env(cell),
        **(extra_env or {}),
    }
    token = uuid.uuid4().hex
    returncode, timed_out, wall_s = run_process_tree(
        argv, env, token, str(cell_dir / "launcher.log"), cell.timeout_s,
    )
    reports = _read_reports(cell_dir)
    outcome = summarize(reports, launcher.processes(cell), returncode, timed_out, cell.timeout_s)
    return _record(cell, cell_dir, outcome, reports, started_at, wall_s, token)


def _record(cell: Cell, cell_dir: Path, outcome: Dict, reports, started_at: str, wall_s: float,
            token: Optional[str]) -> Dict:
    first = min(reports, key=lambda r: r["rank"]) if reports else {}
    record = {
        "cell": cell.cell_id,
        **cell.to_dict(),
        "total_devices": cell.total_devices,
        "global_batch_size": cell.global_batch_size,
        "params": first.get("params"),
        "images_per_sec": None,
        "step_time_median_s": None,
        "step_time_p95_s": None,
        "peak_memory_bytes": None,
        **outcome,
        "versions": first.get("versions"),
        "device_name": first.get("device_name"),
        "layout": first.get("layout"),
        "hosts": sorted({r["host"] for r in reports if "host" in r}),
        **provenance(),
        "started_at": started_at,
        "wall_s": round(wall_s, 3),
        "log": str(cell_dir / "launcher.log"),
        "process_token": token,
    }
    write_json_atomically(cell_dir / "record.json", record)
    return record


def run_and_record(cell: Cell, out_dir, **kwargs) -> Dict:
    record = run_cell(cell, out_dir, **kwargs)
    ResultStore(out_dir).append(record)
    return record
