"""Run one cell under its launcher and turn what its ranks report into a result record.

The record is written to the cell's folder (``cells/CELL/record.json``) and added to the
sweep's ``results.jsonl`` index.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Optional

import scaling
from scaling import hardware
from scaling.cell import Cell
from scaling.execute import fingerprint
from scaling.execute.aggregate import summarize
from scaling.execute.ceiling import ensure_cell_ceiling, record_ceiling
from scaling.execute.monitor import (CellMonitor, WatchSettings, gpu_indices, look_before,
                                     summarize_watch, window_on_this_host)
from scaling.execute.processes import run_process_tree, worker_env
from scaling.execute.store import ResultStore
from scaling.execute.trees import MAX_TREES, Launch, SharedTrees, shareable
from scaling.execute.wall import wall_breakdown
from scaling.frameworks import get_framework, missing_framework
from scaling.launchers import default_python, get_launcher
from scaling.execute.peaks import COMPUTE_FIELDS, compute_facts
from scaling.placement import Placement, local_placement
from scaling.workers import collective_env
from scaling.atomic import write_json_atomically

COMPUTE_CACHE = "compute-cache.json"
"""The run's matmul probes, measured once (``scaling.workers.compute``)."""
REPORT_GRACE_S = 30.0
"""How long node 0 waits for the other nodes' rank reports after its own ranks ended."""


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
             placement: Optional[Placement] = None,
             watch: WatchSettings = WatchSettings(),
             on_busy: Optional[Callable[[float], None]] = None,
             gather: Optional[Callable[[Path], None]] = None,
             trees: Optional[SharedTrees] = None) -> Dict:
    """Run this node's part of ``cell`` in a fresh process tree (or its kind's shared tree)
    under its timeout and return its result record. ``placement`` defaults to every rank on
    this machine; ``watch`` says whether to wait for quiet first and whether to keep telemetry
    (noise is always watched); ``on_busy`` gets the cores other processes used at each look
    after which the wait for quiet goes on.

    The cell's files (spec, rank reports, launcher log, record) live in ``OUT/cells/CELL_ID/``.
    Over several nodes that folder is shared (the same OUT on a shared file system): node 0
    removes what an earlier attempt left, waits for every rank's report and makes the record;
    the other nodes run their ranks and return a record of their part only, marked with
    ``node_rank``, which is not stored. Without a shared folder, ``gather(cell_dir)`` brings the
    other nodes' rank reports into node 0's, once its own ranks ended. With ``trees``, a cell
    that may share a process tree runs in its kind's (:mod:`scaling.execute.trees`).
    """
    cell_start = time.time()
    launcher = get_launcher(cell.launcher)
    placement = placement or local_placement(launcher.ranks_per_node(cell))
    shared = trees is not None and shareable(cell, placement)
    cell_dir = prepare_cell_dir(cell, out_dir, placement, shared)
    python = python or default_python(cell.framework, cell.launcher)
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    node = fingerprint.take(out_dir, cell_dir, placement.node_rank, python, cell.collective_env)
    missing = (missing_framework(cell.framework, python)
               or launcher.missing(cell.framework, python)
               or fingerprint.mig_refusal(node, gpu_indices(cell.device_type, cell.devices),
                                          cell.total_devices))
    if missing is not None:
        return make_record(cell, cell_dir, {"status": "env_error", "error": missing}, [],
                           started_at, 0.0, token=None)
    ensure_cell_ceiling(out_dir, cell, python)
    launch = tree_launch(cell, placement, python, extra_env)
    token = uuid.uuid4().hex
    log = "launcher.log" if placement.node_rank == 0 else f"launcher-node{placement.node_rank}.log"
    waited_s, before_cores = look_before(watch, on_busy)
    monitor = CellMonitor(gpu_indices(cell.device_type, cell.devices), watch.telemetry)
    tree_start, process_tree = time.time(), None
    try:
        if shared:
            returncode, timed_out, wall_s, process_tree = trees.run(
                launch, cell_dir, cell_dir / log, cell.timeout_s, monitor.start,
                alone=cell.device_type == "gpu")
            token = process_tree.pop("token")
        else:
            returncode, timed_out, wall_s = run_process_tree(
                launch.command(str(cell_dir)), launch.env, token, str(cell_dir / log),
                cell.timeout_s, on_start=monitor.start)
    finally:
        monitor.stop()
    tree_end = time.time()
    if placement.node_rank > 0:
        mine = range(placement.first_rank, placement.first_rank + placement.ranks_per_host)
        reports = [r for r in _read_reports(cell_dir) if r["rank"] in mine]
        outcome = summarize(reports, placement.ranks_per_host, returncode, timed_out,
                            cell.timeout_s, first_rank=placement.first_rank)
        return {"cell": cell.cell_id, "node_rank": placement.node_rank, **outcome}
    expected = launcher.processes(cell)
    if gather is not None:
        gather(cell_dir)
    elif placement.nodes > 1 and not timed_out:
        wait_for_reports(cell_dir, expected, REPORT_GRACE_S)
    reports = _read_reports(cell_dir)
    outcome = summarize(reports, expected, returncode, timed_out, cell.timeout_s)
    if outcome["status"] == "ok":
        outcome.update(summarize_watch(
            monitor, window_on_this_host(reports, socket.gethostname()), before_cores,
            waited_s, cell_dir))
        outcome["images_per_joule"] = images_per_joule(outcome, cell.nodes)
    first = min(reports, key=lambda r: r["rank"]) if reports else None
    outcome["wall_breakdown"] = wall_breakdown(cell_start, tree_start, tree_end, time.time(),
                                               first)
    outcome["process_tree"] = process_tree
    return make_record(cell, cell_dir, outcome, reports, started_at, wall_s, token)


def images_per_joule(outcome: Dict, nodes: int) -> Optional[float]:
    """The timed images over the energy of the cell's GPUs in the window (node 0's, times the
    nodes); None without an energy reading."""
    energy = (outcome.get("telemetry") or {}).get("energy_j")
    return outcome["timed_images"] / (energy * nodes) if energy else None


def worker_spec(cell: Cell) -> Dict:
    """What every worker process reads from ``cell.json``: the cell, the module of its
    framework's models, and the devices each process drives (the launcher decides how many
    processes share the node's devices)."""
    return {**cell.to_dict(), "models": get_framework(cell.framework).models,
            "local_devices": cell.devices // get_launcher(cell.launcher).ranks_per_node(cell)}


def tree_launch(cell: Cell, placement: Placement, python: str,
                extra_env: Optional[Dict[str, str]] = None) -> Launch:
    """How ``cell``'s process tree starts: its launcher's command and the workers'
    environment; its ``key``, what cells that share a tree have in common, is that launch
    apart from the folder and the rendezvous port."""
    launcher = get_launcher(cell.launcher)
    env = collective_env.exactly(
        worker_env(get_framework(cell.framework).env, launcher.env(cell, placement),
                   memory_cap_env(cell), extra_env or {}), cell.collective_env)
    key = launcher.command(cell, dataclasses.replace(placement, rendezvous_port=0), "", python)
    return Launch(key=(tuple(key), tuple(sorted(env.items()))),
                  command=lambda folder: launcher.command(cell, placement, folder, python),
                  env=env, ranks=launcher.processes(cell))


def first_launches(cells: List[Cell], pythons: Dict[str, str]) -> List[Launch]:
    """The launches of the shared trees that ``cells`` (a local sweep's, in order) start on
    CPUs, each kind once, in the order of its first cell, the first :data:`MAX_TREES` kinds
    only (:meth:`SharedTrees.plan`): the rest of a long sweep is not looked at."""
    launches: Dict[tuple, Launch] = {}
    for cell in cells:
        if len(launches) == MAX_TREES:
            break
        placement = local_placement(get_launcher(cell.launcher).ranks_per_node(cell))
        if cell.device_type == "cpu" and shareable(cell, placement):
            python = pythons.get(cell.environment) or default_python(cell.framework,
                                                                     cell.launcher)
            launch = tree_launch(cell, placement, python)
            launches.setdefault(launch.key, launch)
    return list(launches.values())


def prepare_cell_dir(cell: Cell, out_dir, placement: Placement, shared: bool = False) -> Path:
    cell_dir = Path(out_dir) / "cells" / cell.cell_id
    if placement.nodes == 1 and cell_dir.exists():
        shutil.rmtree(cell_dir)
    cell_dir.mkdir(parents=True, exist_ok=True)
    if placement.node_rank == 0:
        for stale in [*cell_dir.glob("rank*.json"), cell_dir / "record.json"]:
            stale.unlink(missing_ok=True)
    write_json_atomically(cell_dir / "cell.json", {
        **worker_spec(cell), "compute_cache": str(Path(out_dir).resolve() / COMPUTE_CACHE),
        "shared_tree": shared})
    return cell_dir


def wait_for_reports(cell_dir: Path, expected: int, grace_s: float) -> None:
    """Give the other nodes' ranks, which end at the same barrier, time to write reports."""
    deadline = time.monotonic() + grace_s
    while len(list(cell_dir.glob("rank*.json"))) < expected and time.monotonic() < deadline:
        time.sleep(0.2)


def make_record(cell: Cell, cell_dir: Path, outcome: Dict, reports, started_at: Optional[str],
                wall_s: float, token: Optional[str]) -> Dict:
    """The cell's record from its outcome and rank reports, also written to
    ``cell_dir/record.json``."""
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
        **dict.fromkeys(COMPUTE_FIELDS),
        "allreduce_time_s": None, "allreduce_time_s_ci95": None, "allreduce_busbw_GBps": None,
        "local_step_s": None,
        "images_per_joule": None,
        "fingerprint": fingerprint.noted(cell_dir, cell.nodes),
        "process_tree": None,
        **outcome,
        "versions": first.get("versions"),
        "device_name": first.get("device_name"),
        "layout": first.get("layout"),
        "hosts": sorted({r["host"] for r in reports if "host" in r}),
        "node_names": sorted({r["node"] for r in reports if r.get("node")}),
        **provenance(),
        "started_at": started_at,
        "wall_s": round(wall_s, 3),
        "log": str(cell_dir / "launcher.log"),
        "process_token": token,
    }
    if record["status"] == "ok" and cell.purpose == "sweep":
        record.update(compute_facts(record, reports, first.get("flops_per_image"),
                                    record_ceiling(cell_dir.parent.parent, record,
                                                   first.get("precision"))))
    write_json_atomically(cell_dir / "record.json", record)
    return record


def run_and_record(cell: Cell, out_dir, **kwargs) -> Dict:
    """Run the cell; the node that makes its record (node 0) adds it to the store, unless an
    earlier attempt at the cell already did."""
    record = run_cell(cell, out_dir, **kwargs)
    if "node_rank" not in record:
        ResultStore(out_dir).append_once(record)
    return record
