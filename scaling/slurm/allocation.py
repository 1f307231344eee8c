"""One allocation per sweep (``slurm: {allocation: one}``, ``scaling sweep --one-allocation``):
one job that holds the sweep's largest node count and runs every cell inside it, one after
another, each as an ``srun`` step on a fixed subset of its nodes (``scaling.slurm.steps``).

The job is submitted as an array of one task, under the same ledger, names and batch-script
rendering as the job arrays, so ``scaling status``, ``scaling cancel``, ``--resume`` and the
outage handling read it as they read an array (``scaling.slurm.queue`` gives its cells their
states). Its time limit is the section's ``time`` (per cell) times the cells it runs, plus one
for a preflight.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Dict, Optional, Sequence

from scaling.cell import Cell
from scaling.errors import ScalingError
from scaling.execute.monitor import WatchSettings
from scaling.slurm.submit import SLURM_DIR, submit_array, widest
from scaling.sweep import SlurmSection

TEMPLATE = Path(__file__).with_name("allocation.sbatch")
"""The allocation's batch script, package data like the array's."""

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
UNLIMITED = ("INFINITE", "UNLIMITED")


def slurm_seconds(text: str) -> int:
    """Seconds of a Slurm time limit: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M`` or
    ``D-H:M:S``."""
    match = _TIME.match(str(text).strip())
    if match is None:
        raise ScalingError(f"slurm time {text!r} is not a Slurm time limit (M, M:S, H:M:S, "
                           "D-H, D-H:M or D-H:M:S)")
    days, first, second, third = (int(part) if part else None for part in match.groups())
    if days is None:
        if third is not None:
            return (first * 60 + second) * 60 + third
        return first * 60 + (second or 0)
    return days * 86400 + first * 3600 + (second or 0) * 60 + (third or 0)


def allocation_time(per_cell: str, steps: int) -> str:
    """The allocation's time limit: ``per_cell`` times ``steps``, as ``D-HH:MM:SS``."""
    if str(per_cell).upper() in UNLIMITED:
        return str(per_cell)
    total = slurm_seconds(per_cell) * steps
    days, rest = divmod(total, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def submit_allocation(cells: Sequence[Cell], out_dir, section: SlurmSection, label: str,
                      pythons: Optional[Dict[str, str]] = None,
                      watch: WatchSettings = WatchSettings(),
                      preflight: Optional[Dict] = None) -> Dict:
    """Submit ``cells``, in their order, as one allocation of the most nodes any of them needs,
    first checking its nodes with ``preflight`` (a preflight spec) where given; returns the
    ledger entry, with ``nodes``."""
    nodes, gpus, cpus = widest(cells, section)
    group = {"cells": [cell.to_dict() for cell in cells], "pythons": pythons or {},
             "watch": asdict(watch), "exclusive": not section.shared, "allocation": "one"}
    if preflight is not None:
        group["preflight_group"] = str(write_preflight_group(out_dir, label, preflight))
        cpus = max(cpus, preflight["devices"] * preflight["threads"])
        if preflight["device_type"] == "gpu":
            gpus = max(gpus or 0, preflight["devices"])
    timed = dataclasses.replace(section, time=allocation_time(
        section.time, len(cells) + (preflight is not None)))
    entry = submit_array(out_dir, label, group,
                         {"cells": [cell.cell_id for cell in cells], "allocation": "one"}, timed,
                         tasks=1, nodes=nodes, gpus_per_node=gpus,
                         cpus_per_task=section.cpus_per_task or cpus, template=TEMPLATE)
    return {**entry, "nodes": nodes}


def write_preflight_group(out_dir, label: str, spec: Dict) -> Path:
    """The group file of the allocation's preflight step (what ``scaling slurm-task`` runs)."""
    slurm_dir = Path(out_dir).resolve() / SLURM_DIR
    slurm_dir.mkdir(parents=True, exist_ok=True)
    path = slurm_dir / f"scaling-{label}-preflight-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps({"preflight": spec}, indent=1))
    return path
