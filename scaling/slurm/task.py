"""One array task: its cell, on every node of the allocation, through the same core as a local
run (the same launchers, workers and record).

``srun`` starts this once per node. Each node builds the placement from Slurm's environment:
the nodes' addresses (``NodeAddr``) in node order, this node's rank (``SLURM_NODEID``) and a
rendezvous on the first node, on a port fixed by the job and task ids, so every node computes
the same one and no random choice is involved. Before its ranks start, each node measures its
own CPU matmul ceiling where the folder has none for the cell's key
(``scaling.execute.ceiling``, under a per-host lock: concurrent tasks on one node measure
once). Node 0 makes the record, adds the job's provenance (each node's facts, written to
``cells/CELL/nodeN.json``) and appends it once: a requeued task whose cell is already recorded
does nothing. Node 0 also looks for other jobs on the task's nodes before and after the cell
(none, unless it was submitted ``--shared``): any marks the record noisy, beside what the CPU
watch saw.
"""

from __future__ import annotations

import json
import os
import re
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
from scaling.workers.common import write_json_atomically

_ADDR = re.compile(r"\bNodeName=(\S+).*?\bNodeAddr=(\S+)")


def node_addresses(nodelist: str) -> List[str]:
    """The address of each node of ``nodelist`` (Slurm's compressed form), in its order."""
    names = controller.call(["scontrol", "show", "hostnames", nodelist]).split()
    out = controller.call(["scontrol", "show", "node", "-o", ",".join(names)])
    addresses = dict(_ADDR.findall(out))
    return [addresses.get(name, name) for name in names]


def rendezvous_port(job_id: str, task_id: str) -> int:
    """A port in 20000-49999 that every node of the task derives alike."""
    return 20000 + (int(job_id) * 131 + int(task_id) * 17) % 30000


def slurm_placement(cell: Cell, env=os.environ) -> Placement:
    hosts = node_addresses(env["SLURM_JOB_NODELIST"])
    job_id = env.get("SLURM_ARRAY_JOB_ID", env["SLURM_JOB_ID"])
    return Placement(len(hosts), tuple(hosts), get_launcher(cell.launcher).ranks_per_node(cell),
                     int(env.get("SLURM_NODEID", "0")), hosts[0],
                     rendezvous_port(job_id, env.get("SLURM_ARRAY_TASK_ID", "0")))


def node_facts(env=os.environ) -> Dict:
    """What this node is: its Slurm name, host, CPU and GPUs."""
    return {"node": env.get("SLURMD_NODENAME"), **provenance(),
            "gpus": [gpu.get("name") for gpu in hardware.query_gpus()]}


def other_jobs(env=os.environ) -> List[str]:
    """The jobs other than this array task running on its nodes."""
    own = (f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
           if "SLURM_ARRAY_JOB_ID" in env else env["SLURM_JOB_ID"])
    return [job for job in controller.running_jobs(env["SLURM_JOB_NODELIST"]) if job != own]


def flag_other_jobs(record: Dict, others: List[str]) -> None:
    """Mark ``record`` noisy when other Slurm jobs ran on its nodes."""
    if others:
        record["noisy"] = True
        record["noise"] = "; ".join(filter(None, [
            record.get("noise"), f"other Slurm jobs ran on its nodes: {', '.join(others)}"]))


def run_command(argv: List[str], env=os.environ) -> int:
    """A submitted ``scaling`` command, on the allocation's first node only."""
    if env.get("SLURM_NODEID", "0") != "0":
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
    placement = slurm_placement(cell, env)
    before = other_jobs(env) if placement.node_rank == 0 else []
    cell_dir = Path(out_dir) / "cells" / cell.cell_id
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
    record["slurm"] = {
        "job_id": env.get("SLURM_ARRAY_JOB_ID", env.get("SLURM_JOB_ID")),
        "array_task_id": index, "node_list": env.get("SLURM_JOB_NODELIST"),
        "nodes": [json.loads(path.read_text())
                  for path in sorted(cell_dir.glob("node*.json"))],
        "restart_count": int(env.get("SLURM_RESTART_COUNT", "0")),
        "exclusive": group.get("exclusive", False), "other_jobs": others,
    }
    write_json_atomically(cell_dir / "record.json", record)
    store.append_once(record)
    return record
