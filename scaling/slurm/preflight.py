"""``scaling preflight --backend slurm``: every node of one allocation checked, then each pair.

One job holds the nodes; ``srun`` starts :func:`run_preflight_task` once on each. Every node
measures itself alone (:func:`scaling.execute.preflight.measure_node`, named by its Slurm node
name) into ``OUT/preflight-nodes/NODE.json``. Then the nodes time an allreduce between pairs:
every pair up to ``ALL_PAIRS_UP_TO`` nodes, beyond that each node with the next in a ring, so
that the work stays linear in the nodes. Each node walks the same list of pairs in the same
order and runs those it belongs to, so a pair starts once both of its nodes reach it and pairs
without a common node run at once. A node's ``pair_busbw_GBps`` is the median over its pairs.
Node 0 waits for every node's file, judges the fleet and writes ``OUT/preflight.json``.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from scaling.execute import preflight as check
from scaling.execute.run import run_cell
from scaling.placement import Placement
from scaling.slurm import queue
from scaling.slurm.environment import JobEnvironment, hostnames, node_addresses
from scaling.slurm.submit import submit_array
from scaling.sweep import SlurmSection
from scaling.atomic import write_json_atomically

NODES_DIR = "preflight-nodes"
PAIRS_DIR = "preflight-pairs"
ALL_PAIRS_UP_TO = 8
WAIT_S = 1800.0


def pairs(count: int) -> List[Tuple[int, int]]:
    """The node pairs whose allreduce is timed: every pair up to ``ALL_PAIRS_UP_TO`` nodes,
    else a ring (each node and the next)."""
    if count < 2:
        return []
    if count <= ALL_PAIRS_UP_TO:
        return list(itertools.combinations(range(count), 2))
    return [tuple(sorted((index, (index + 1) % count))) for index in range(count)]


def time_pair(out_dir: Path, spec: Dict, pair: Tuple[int, int], index: int,
              hosts: List[str], job: JobEnvironment) -> Optional[Dict]:
    """This node's part of the allreduce between ``pair`` (one device on each node); the
    record on the pair's first node, None on its second."""
    cell = check.allreduce_cell(spec["device_type"], 1, spec["threads"], nodes=2)
    first, second = pair
    placement = Placement(2, (hosts[first], hosts[second]), 1, 0 if job.node_rank == first else 1,
                          hosts[first], job.rendezvous_port(str(1000 + index)))
    record = run_cell(cell, out_dir / PAIRS_DIR / f"{first}-{second}", placement=placement)
    return None if "node_rank" in record else record


def pair_figures(results: Dict[Tuple[int, int], Dict], names: List[str]) -> Dict[str, Dict]:
    """Node name -> its ``pair_busbw_GBps`` figure: the median over its pairs that ended ok."""
    found: Dict[str, List[float]] = {}
    for (first, second), record in results.items():
        if record["status"] == "ok":
            for node in (first, second):
                found.setdefault(names[node], []).append(record["allreduce"][0]["busbw_GBps"])
    return {name: {"value": statistics.median(values), "ci95": None, "per_pair": values}
            for name, values in found.items()}


def wait_for(paths: List[Path], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            missing = [path.name for path in paths if not path.exists()]
            raise TimeoutError(f"no preflight from {', '.join(missing)} in {timeout_s:g} s")
        time.sleep(1.0)


def run_preflight_task(out_dir, spec: Dict, env=os.environ) -> Dict:
    """This node's preflight; on node 0, also the fleet's verdict in ``OUT/preflight.json``."""
    out_dir = Path(out_dir)
    job = JobEnvironment.read(env)
    nodelist, node, job_id = job.job_nodelist, job.node_rank, job.job_id
    names = hostnames(nodelist)
    hosts = node_addresses(nodelist)
    measured = check.measure_node(out_dir / "nodes" / names[node], spec["device_type"],
                                  spec["devices"], spec["threads"], spec["repeats"],
                                  host=names[node])
    (out_dir / NODES_DIR).mkdir(exist_ok=True)
    results = {}
    for index, pair in enumerate(pairs(len(names))):
        if node in pair:
            record = time_pair(out_dir, spec, pair, index, hosts, job)
            if record is not None:
                results[pair] = record
    write_json_atomically(out_dir / NODES_DIR / f"{names[node]}.json",
                          {"node": measured, "pairs": {f"{a}-{b}": r for (a, b), r
                                                       in results.items()}})
    if node != 0:
        return {"cell": "preflight", "status": "ok"}
    files = [out_dir / NODES_DIR / f"{name}.json" for name in names]
    wait_for(files)
    parts = [json.loads(path.read_text()) for path in files]
    all_pairs = {tuple(map(int, key.split("-"))): record
                 for part in parts for key, record in part["pairs"].items()}
    nodes = [part["node"] for part in parts]
    for found in nodes:
        pair = pair_figures(all_pairs, names).get(found["host"])
        if pair is not None:
            found["figures"]["pair_busbw_GBps"] = pair
    baseline = check.read_baseline(spec["baseline"]) if spec.get("baseline") else None
    verdict = check.judge(nodes, spec["threshold"], baseline, spec.get("baseline"))
    verdict["slurm"] = {"job_id": job_id, "node_list": nodelist}
    check.write_preflight(verdict, out_dir / check.PREFLIGHT_FILE)
    return {"cell": "preflight", "status": "ok"}


def submit_preflight(spec: Dict, out_dir, section: SlurmSection, nodes: Optional[int],
                     nodelist: Optional[str], wait: bool, console) -> Optional[Dict]:
    """Submit the preflight of ``nodes`` nodes (or of ``nodelist``) as one job; with ``wait``,
    its verdict once the job ended ({} when it wrote none), else None."""
    nodes = nodes or (len(hostnames(nodelist)) if nodelist else 1)
    out = Path(out_dir).resolve()
    (out / check.PREFLIGHT_FILE).unlink(missing_ok=True)
    job = submit_array(out, "preflight", {"preflight": spec}, {"cells": []}, section, tasks=1,
                       nodes=nodes, gpus_per_node=spec["devices"]
                       if spec["device_type"] == "gpu" else None,
                       cpus_per_task=section.cpus_per_task or spec["devices"] * spec["threads"],
                       nodelist=nodelist)
    console.print(f"preflight of {nodes} node(s) submitted as Slurm job {job['job_id']}")
    if not wait:
        return None
    state = queue.wait_for_job(job["job_id"], queue.POLL_S)
    console.print(f"job {job['job_id']} ended {state['JobState'] if state else 'unknown'}")
    return check.read_preflight(out) or {}
