"""One cell on every node of its ``srun`` step, through the same core as a local run (the same
launchers, workers and record): an array task's cell, or one step of a whole sweep's allocation
(``scaling.slurm.steps``).

``srun`` starts this once per node. Each node builds the placement from Slurm's environment:
the step's nodes' addresses (``NodeAddr``) in node order, this node's rank in the step
(``SLURM_NODEID``) and a rendezvous on the step's first node, on a port fixed by the job id and
the cell's index, so every node computes the same one and no random choice is involved. Before
its ranks start, each node measures its own CPU matmul ceiling where the folder has none for
the cell's key (``scaling.execute.ceiling``, under a per-host lock: concurrent tasks on one node
measure once). Node 0 makes the record, adds the job's provenance (each node's facts, written to
``cells/CELL/nodeN.json``) and appends it once: a requeued task whose cell is already recorded
does nothing. Node 0 also looks for other jobs on the step's nodes before and after the cell
(none, unless it was submitted ``--shared``): any marks the record noisy, beside what the CPU
watch saw. Asking the controller, for the nodes' addresses or the other jobs, waits out an
outage, however long, rather than lose the cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from scaling import hardware
from scaling.cell import Cell
from scaling.execute.monitor import WatchSettings
from scaling.execute.run import provenance, run_cell
from scaling.execute.store import ResultStore
from scaling.launchers import get_launcher
from scaling.placement import Placement
from scaling.slurm import controller
from scaling.slurm.environment import JobEnvironment, node_addresses
from scaling.slurm.queue import patiently
from scaling.atomic import write_json_atomically

STARTED = "step-started"
"""Written in the cell's folder when a step of a whole-sweep allocation starts its cell, so the
allocation tells a step that ran from one that Slurm never started."""
PATIENCE_POLL_S = 3.0
UNTIL_ANSWERED = float("inf")
"""A cell waits out any outage of the controller, within its job's time limit: its record is
worth more than the wait."""

def slurm_placement(cell: Cell, index: int, env=os.environ) -> Placement:
    job = JobEnvironment.read(env)
    hosts = patiently(lambda: node_addresses(job.step_nodelist), PATIENCE_POLL_S,
                      UNTIL_ANSWERED)
    return Placement(len(hosts), tuple(hosts), get_launcher(cell.launcher).ranks_per_node(cell),
                     job.node_rank, hosts[0], job.rendezvous_port(str(index)))


def node_facts(env=os.environ) -> Dict:
    """What this node is: its Slurm name, host, CPU and GPUs."""
    return {"node": JobEnvironment.read(env).node_name, **provenance(),
            "gpus": [gpu.get("name") for gpu in hardware.query_gpus()]}


def other_jobs(env=os.environ) -> List[str]:
    """The jobs other than this array task running on its step's nodes (asked again while the
    controller does not answer)."""
    job = JobEnvironment.read(env)
    running = patiently(lambda: controller.running_jobs(job.step_nodelist), PATIENCE_POLL_S,
                        UNTIL_ANSWERED)
    return [other for other in running if other != job.own_job]


def flag_other_jobs(record: Dict, others: List[str]) -> None:
    """Mark ``record`` noisy when other Slurm jobs ran on its nodes."""
    if others:
        record["noisy"] = True
        record["noise"] = "; ".join(filter(None, [
            record.get("noise"), f"other Slurm jobs ran on its nodes: {', '.join(others)}"]))


def run_command(argv: List[str], env=os.environ) -> int:
    """A submitted ``scaling`` command, on the allocation's first node only."""
    if JobEnvironment.read(env).node_rank != 0:
        return 0
    return subprocess.run([sys.executable, "-m", "scaling", *argv]).returncode


def run_task(out_dir: str, group_file: str, index: int, env=os.environ) -> Dict:
    group = json.loads(Path(group_file).read_text())
    if "preflight" in group:
        from scaling.slurm.preflight import run_preflight_task

        return run_preflight_task(out_dir, group["preflight"], env)
    if "command" in group:
        code = run_command(group["command"], env)
        return {"cell": "command", "status": "ok" if code == 0 else "error", "exit_code": code}
    cell = Cell(**group["cells"][index])
    store = ResultStore(out_dir)
    recorded = store.done().get(cell.cell_id)
    if recorded is not None:
        return recorded
    placement = slurm_placement(cell, index, env)
    cell_dir = Path(out_dir) / "cells" / cell.cell_id
    if placement.node_rank == 0 and group.get("allocation") == "one":
        cell_dir.mkdir(parents=True, exist_ok=True)
        (cell_dir / STARTED).touch()
    before = other_jobs(env) if placement.node_rank == 0 else []
    if placement.node_rank > 0:
        cell_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomically(cell_dir / f"node{placement.node_rank}.json", node_facts(env))
    record = run_cell(cell, out_dir, python=group["pythons"].get(cell.environment),
                      placement=placement, watch=WatchSettings(**group["watch"]))
    if placement.node_rank > 0:
        return record
    write_json_atomically(cell_dir / "node0.json", node_facts(env))
    others = sorted(set(before) | set(other_jobs(env)))
    flag_other_jobs(record, others)
    job = JobEnvironment.read(env)
    record["slurm"] = {
        "job_id": job.job_id, "array_task_id": int(job.array_task_id or index),
        "allocation": group.get("allocation", "array"), "step_id": job.step_id,
        "node_list": job.step_nodelist, "job_node_list": job.job_nodelist,
        "nodes": [json.loads(path.read_text())
                  for path in sorted(cell_dir.glob("node*.json"))],
        "restart_count": job.restart_count,
        "exclusive": group.get("exclusive", False), "other_jobs": others,
    }
    write_json_atomically(cell_dir / "record.json", record)
    store.append_once(record)
    return record
