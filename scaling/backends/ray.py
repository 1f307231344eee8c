"""``--backend ray [--address ADDR]``: each cell's ranks in a Ray placement group, one bundle per
node with the cell's devices and cores, spread over distinct nodes for a cell over several.

Each bundle runs a Ray task that starts the launcher's per-node command, as a Slurm step does,
in a scratch folder of its own node: no file system is shared. The other nodes' tasks hand
their rank reports, logs, node facts and fingerprints to node 0's task through Ray, node 0
makes the record, and every file of the cell comes back to this machine through Ray, into
``OUT/cells/CELL/`` and ``OUT/fingerprints/``
(as on KubeRay, where the submitting pod shares nothing with the workers). The record names the
cluster's nodes that ran it (``ray``). The command drives the cells itself and waits for each:
Ctrl-C stops the cell under way, and ``--resume`` runs what did not finish.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from scaling import hardware
from scaling.atomic import write_json_atomically
from scaling.backends.base import Backend, register_backend
from scaling.cell import Cell
from scaling.errors import InfrastructureError
from scaling.execute.fingerprint import FINGERPRINTS_DIR
from scaling.execute.monitor import WatchSettings
from scaling.execute.run import make_record, provenance, run_cell
from scaling.execute.runner import pending_cells, run_cells
from scaling.execute.store import ResultStore
from scaling.launchers import get_launcher
from scaling.placement import Placement, free_port_block
from scaling.report.terminal import console
from scaling.sweep import expand, interpreters

SCRATCH = "scaling-ray"
"""The folder, under each node's temporary directory, where its tasks run their cells (one per
Ray node, so that two nodes on one machine share nothing either)."""
PROBE_S = 5.0
"""How long a named head is given to accept a connection before the command gives up."""
PLACEMENT_S = 600.0
"""How long a cell waits for the cluster to hold its bundles."""
REPORT_GRACE_S = 60.0
"""How long node 0's task waits for the other nodes' parts once its own ranks ended."""
FORWARDED = "SCALING_"
"""Environment variables with this prefix reach the cells' tasks (``SCALING_FAULT``...)."""


@register_backend
class Ray(Backend):
    name = "ray"
    help = ("ray: run each cell's ranks in a Ray placement group, one bundle per node, on the "
            "cluster at --address (default: RAY_ADDRESS, else the one Ray finds)")

    def __init__(self, flags: Optional[Dict] = None):
        super().__init__(flags)
        self.address = self.flags.get("address") or os.environ.get("RAY_ADDRESS") or "auto"
        self.ray = None

    def connect(self):
        """Ray, connected to the cluster once; an unreachable head is exit 3, before anything
        runs or is recorded."""
        if self.ray is not None:
            return self.ray
        import ray

        probe(self.address)
        env = {key: value for key, value in os.environ.items() if key.startswith(FORWARDED)}
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level="ERROR",
                     runtime_env={"env_vars": env})
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise InfrastructureError(f"could not reach the Ray cluster at {self.address}: "
                                      f"{error}") from None
        self.ray = ray
        return ray

    def cores(self, section=None) -> Optional[int]:
        """The CPUs of the cluster's smallest node that has any."""
        ray = self.connect()
        cpus = [node["Resources"].get("CPU", 0) for node in ray.nodes()
                if node["Alive"] and node["Resources"].get("CPU", 0) > 0]  # not a CPU-less head
        return int(min(cpus)) if cpus else None

    def run(self, cell, out_dir, pythons, watch, placement, wait) -> Optional[Dict]:
        self.connect()
        [record] = run_cells([cell], out_dir, pythons, watch=watch, run=self.run_and_record)
        return record

    def run_trial(self, cell, out_dir) -> Optional[Dict]:
        return self.run_and_record(cell, out_dir, watch=WatchSettings())

    def sweep(self, spec, out_dir, watch, wait):
        if spec.needs_max_batch():
            self.search_here("run that sweep")
        cells = expand(spec, cores=self.cores())
        todo = pending_cells(cells, out_dir)
        console.print(f"{spec.name}: {len(cells)} cells, {len(cells) - len(todo)} already "
                      f"recorded, output in {out_dir}, on the Ray cluster at {self.address}")
        run_cells(todo, out_dir, interpreters(spec), watch=watch, run=self.run_and_record)
        return cells, True

    def run_and_record(self, cell: Cell, out_dir, python: Optional[str] = None,
                       placement=None, watch: WatchSettings = WatchSettings(),
                       on_busy=None) -> Dict:
        """Run ``cell`` in a placement group of its own, bring its files here, and record it
        once."""
        ray = self.connect()
        from ray.util.placement_group import placement_group, remove_placement_group

        group = placement_group([bundle(cell)] * cell.nodes,
                                strategy="STRICT_SPREAD" if cell.nodes > 1 else "PACK")
        try:
            if not group.wait(timeout_seconds=PLACEMENT_S):
                raise InfrastructureError(
                    f"the Ray cluster at {self.address} did not hold {cell.nodes} node(s) of "
                    f"{bundle(cell)} within {PLACEMENT_S:g} s")
            record = self.run_in_group(ray, group, cell, out_dir, python, watch)
        finally:
            remove_placement_group(group)
        ResultStore(out_dir).append_once(record)
        return record

    def run_in_group(self, ray, group, cell: Cell, out_dir, python, watch) -> Dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        def on(index: int, function):
            return ray.remote(function).options(
                num_cpus=bundle(cell)["CPU"], num_gpus=bundle(cell).get("GPU", 0),
                max_retries=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=index))

        hosts = [ray.get(on(index, node_address).remote()) for index in range(cell.nodes)]
        port = ray.get(on(0, free_ports).remote(get_launcher(cell.launcher)
                                                .ranks_per_node(cell) * cell.nodes))
        started, scratch = time.time(), scratch_name(out_dir)
        part = (cell.to_dict(), hosts, port, python, dataclasses.asdict(watch), scratch)
        others = [on(index, node_part).remote(*part, index, []) for index in range(1, cell.nodes)]
        cell_dir = Path(out_dir) / "cells" / cell.cell_id
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        try:
            first = ray.get(on(0, node_part).remote(*part, 0, others))
        except ray.exceptions.RayError as error:
            cell_dir.mkdir(parents=True)
            return make_record(cell, cell_dir, {
                "status": "crashed", "error": f"node 0's Ray task ended: {one_line(error)}"},
                [], None, time.time() - started, None)
        write_files(cell_dir, first["files"])
        write_files(Path(out_dir) / FINGERPRINTS_DIR, first["fingerprints"], keep=True)
        record = {**first["record"], "log": str(cell_dir / "launcher.log")}
        record["ray"] = {"address": self.address, "placement_group": group.id.hex(),
                         "nodes": [json.loads((cell_dir / f"node{rank}.json").read_text())
                                   for rank in range(cell.nodes)
                                   if (cell_dir / f"node{rank}.json").exists()]}
        write_json_atomically(cell_dir / "record.json", record)
        return record


def probe(address: str) -> None:
    """Exit 3 at once where a named head does not accept a connection (Ray itself would retry
    for minutes)."""
    if address == "auto":
        return
    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except (OSError, ValueError) as error:
        raise InfrastructureError(f"could not reach the Ray cluster at {address}: "
                                  f"{one_line(error)}") from None


def bundle(cell: Cell) -> Dict[str, float]:
    """One node's share of a cell: its devices' cores (and GPUs)."""
    shares = {"CPU": float(cell.devices * max(cell.threads_per_device, 1))}
    if cell.device_type == "gpu":
        shares["GPU"] = float(cell.devices)
    return shares


def scratch_name(out_dir) -> str:
    """The nodes' scratch folder of ``out_dir``: one per results folder, so that its CPU
    ceilings and compute cache are measured once per node."""
    return hashlib.sha256(str(Path(out_dir).resolve()).encode()).hexdigest()[:16]


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


def node_address() -> str:
    """On a bundle's node: its address."""
    import ray

    return ray.util.get_node_ip_address()


def free_ports(count: int) -> int:
    """On node 0's bundle: the first of ``count`` consecutive ports free there."""
    return free_port_block(count, host=node_address())


def node_part(cell_fields: Dict, hosts: List[str], port: int, python: Optional[str],
              watch: Dict, scratch: str, node_rank: int, others: List) -> Dict:
    """On a bundle's node: its part of the cell, in the node's scratch folder; node 0 first
    brings in the other nodes' parts (``others``, their tasks) and makes the record. Returns the
    record and the cell folder's files."""
    import ray

    cell = Cell(**cell_fields)
    node_id = ray.get_runtime_context().get_node_id()
    out = Path(tempfile.gettempdir()) / SCRATCH / node_id[:16] / scratch
    placement = Placement(len(hosts), tuple(hosts),
                          get_launcher(cell.launcher).ranks_per_node(cell), node_rank, hosts[0],
                          port)
    cell_dir = out / "cells" / cell.cell_id
    if cell_dir.exists():
        shutil.rmtree(cell_dir)  # an earlier attempt's reports and logs

    def gather(into: Path) -> None:
        """The other nodes' parts into node 0's folder; a node whose task ended says so in
        its log (its ranks' reports are missing, and the record names them)."""
        ready, _ = ray.wait(others, num_returns=len(others), timeout=REPORT_GRACE_S)
        for rank, ref in enumerate(others, start=1):
            try:
                if ref not in ready:
                    raise TimeoutError(f"no part within {REPORT_GRACE_S:g} s of node 0's end")
                part = ray.get(ref)
            except (ray.exceptions.RayError, TimeoutError) as error:
                with open(into / f"launcher-node{rank}.log", "a") as log:
                    log.write(f"node {rank}'s Ray task ended: {one_line(error)}\n")
                continue
            write_files(into, part["files"], keep=True)
            write_files(out / FINGERPRINTS_DIR, part["fingerprints"], keep=True)

    record = run_cell(cell, out, python=python, placement=placement,
                      extra_env={"SCALING_NODE_NAME": f"ray-{node_id[:12]}"},
                      watch=WatchSettings(**watch), gather=gather if others else None)
    write_json_atomically(cell_dir / f"node{node_rank}.json", {
        "node_id": node_id, "address": hosts[node_rank],
        **provenance(), "gpus": [gpu.get("name") for gpu in hardware.query_gpus()]})
    return {"record": record, "files": read_files(cell_dir),
            "fingerprints": read_files(out / FINGERPRINTS_DIR)}


def read_files(folder: Path) -> Dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def write_files(folder: Path, files: Dict[str, bytes], keep: bool = False) -> None:
    """Write ``files`` under ``folder``; with ``keep``, leave those it already has."""
    for name, data in files.items():
        path = folder / name
        if keep and path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
