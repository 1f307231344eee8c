"""``scaling preflight``: each node's health, measured alone, and a verdict against the fleet.

A degraded GPU, a throttled clock or a noisy neighbour does not fail a cell: it bends the
curve. So before numbers are trusted, each node measures, alone and device by device:

- ``matmul_tflops``: the matrix-product ceiling of one device (the median of repeats);
- ``triad_GBps``: its memory bandwidth, a STREAM triad (the median of repeats);
- ``cell_images_per_sec``: a short ``single`` cell of a small workload;
- ``allreduce_busbw_GBps``: the allreduce bus bandwidth across the node's devices.

A node's figure is its weakest device's. Each figure is compared with the fleet's median
(the median over the nodes measured together), or with a saved baseline's figure for the same
host (its fleet median for a host it did not measure): a figure more than ``threshold_pct``
below its reference flags the node. ``preflight.json`` keeps every figure, flag and verdict.
"""

from __future__ import annotations

import json
import socket
import statistics
from pathlib import Path
from typing import Callable, Dict, List, Optional

from scaling.cell import make_cell
from scaling.errors import ScalingError
from scaling.execute.processes import WorkerFailed, run_json_worker, worker_env
from scaling.execute.run import run_cell
from scaling.launchers import default_python, thread_env
from scaling.uncertainty import median_interval

PREFLIGHT_FILE = "preflight.json"
FIGURES = {
    "matmul_tflops": "matmul ceiling per device, TFLOP/s",
    "triad_GBps": "memory bandwidth per device (STREAM triad), GB/s",
    "cell_images_per_sec": "a short single cell per device, images/sec",
    "allreduce_busbw_GBps": "allreduce bus bandwidth across the node's devices, GB/s",
    "pair_busbw_GBps": "allreduce bus bandwidth between this node and each other, the median "
                       "over its pairs, GB/s (several nodes)",
}
"""Every figure of a node, each higher-is-better, with what it is."""
REPEATS = 6
SOLO_CELL = {"framework": "torch", "launcher": "single", "workload": "cifar10",
             "image_size": 32, "batch_size": 32, "steps": 10, "warmup": 3}
ALLREDUCE_BYTES = {"cpu": 4 << 20, "gpu": 256 << 20}
TIMEOUT_S = 300.0


def probe_devices(device_type: str, devices: int, threads: int, repeats: int,
                  python: str) -> List[Dict[str, List[float]]]:
    """Each device's matmul and triad repeats (:mod:`scaling.workers.node_probe_worker`), one
    device at a time. A CPU node's devices are shares of the same cores: one stands for all."""
    indices = range(devices) if device_type == "gpu" else range(1)
    env = worker_env(thread_env(threads))
    return [run_json_worker(python, "scaling.workers.node_probe_worker",
                            {"device_type": device_type, "device_index": index,
                             "threads": threads, "repeats": repeats}, env, TIMEOUT_S)
            for index in indices]


def solo_cells(out_dir, device_type: str, devices: int, threads: int) -> List[Dict]:
    """The short ``single`` cell on each device (each GPU made the only visible one), alone;
    its records, which stay in ``OUT/cells`` and out of the results. The check reads their
    windows only, so they time no references."""
    cell = make_cell(devices=1, device_type=device_type, threads_per_device=threads,
                     purpose="preflight", timeout_s=TIMEOUT_S, references=False, **SOLO_CELL)
    indices = range(devices) if device_type == "gpu" else range(1)
    return [run_cell(cell, out_dir, extra_env={"CUDA_VISIBLE_DEVICES": str(index)}
                     if device_type == "gpu" else None) for index in indices]


def allreduce_cell(device_type: str, devices: int, threads: int, nodes: int = 1):
    """One torchrun allreduce of ``ALLREDUCE_BYTES`` over ``devices`` per node on ``nodes``."""
    return make_cell(framework="torch", launcher="torchrun", workload=SOLO_CELL["workload"],
                     devices=devices, nodes=nodes, batch_size=1, steps=1, warmup=0,
                     purpose="allreduce", device_type=device_type, threads_per_device=threads,
                     timeout_s=TIMEOUT_S, sizes=[ALLREDUCE_BYTES[device_type]])


def node_allreduce(out_dir, device_type: str, devices: int, threads: int) -> Optional[Dict]:
    """The record of one allreduce over the node's devices through torchrun; None on one."""
    if devices < 2:
        return None
    return run_cell(allreduce_cell(device_type, devices, threads), out_dir)


def figure(values: List[float]) -> Dict:
    """The weakest device's median, its interval, and every device's median."""
    medians = [statistics.median(v) for v in values]
    weakest = values[medians.index(min(medians))]
    interval = median_interval(weakest)
    return {"value": min(medians), "ci95": list(interval) if interval else None,
            "per_device": medians}


def measure_node(out_dir, device_type: str, devices: int, threads: int,
                 repeats: int = REPEATS, say: Callable[[str], None] = lambda _: None,
                 host: Optional[str] = None) -> Dict:
    """This node's figures, measured one after another so that each runs alone; a figure that
    could not be measured is None, with the reason in ``errors``. ``host`` names the node
    (its host name by default; its scheduler's name for it under Slurm)."""
    python = default_python("torch", "single")
    node: Dict = {"host": host or socket.gethostname(), "device_type": device_type,
                  "devices": devices,
                  "threads_per_device": threads, "figures": {}, "errors": {}}
    say("matmul ceiling and memory bandwidth per device")
    try:
        probes = probe_devices(device_type, devices, threads, repeats, python)
        for name in ("matmul_tflops", "triad_GBps"):
            node["figures"][name] = figure([probe[name] for probe in probes])
    except WorkerFailed as failed:
        node["errors"]["matmul_tflops"] = node["errors"]["triad_GBps"] = str(failed)
    say("a short single cell per device")
    records = solo_cells(out_dir, device_type, devices, threads)
    if all(r["status"] == "ok" for r in records):
        node["figures"]["cell_images_per_sec"] = figure([[r["images_per_sec"]] for r in records])
    else:
        node["errors"]["cell_images_per_sec"] = next(
            f"{r['status']}: {r['error']}" for r in records if r["status"] != "ok")
    say("allreduce across the node's devices")
    record = node_allreduce(out_dir, device_type, devices, threads)
    if record is not None and record["status"] == "ok":
        [size] = record["allreduce"]
        node["figures"]["allreduce_busbw_GBps"] = {"value": size["busbw_GBps"], "ci95": None,
                                                   "bytes": size["bytes"]}
    elif record is not None:
        node["errors"]["allreduce_busbw_GBps"] = f"{record['status']}: {record['error']}"
    return node


def references(nodes: List[Dict], baseline: Optional[Dict]) -> Dict[str, Dict[str, float]]:
    """Host -> figure -> the value it is judged against: the baseline's figure for that host,
    else the baseline's fleet median, else this fleet's median."""
    def medians(of: List[Dict]) -> Dict[str, float]:
        found: Dict[str, List[float]] = {}
        for node in of:
            for name, measured in node["figures"].items():
                found.setdefault(name, []).append(measured["value"])
        return {name: statistics.median(values) for name, values in found.items()}

    fleet = medians(baseline["nodes"] if baseline else nodes)
    by_host = {node["host"]: node for node in baseline["nodes"]} if baseline else {}
    return {node["host"]: {**fleet, **({name: m["value"] for name, m in
                                         by_host[node["host"]]["figures"].items()}
                                        if node["host"] in by_host else {})}
            for node in nodes}


def judge(nodes: List[Dict], threshold_pct: float, baseline: Optional[Dict] = None,
          baseline_name: Optional[str] = None) -> Dict:
    """The verdict: each node with its ``flags`` (figure -> why), the good and the flagged
    hosts, and the strings for ``--nodelist`` and ``--exclude``."""
    against = f"the baseline {baseline_name}" if baseline else "the fleet median"
    refs = references(nodes, baseline)
    for node in nodes:
        node["flags"] = {}
        for name, measured in node["figures"].items():
            reference = refs[node["host"]].get(name)
            if reference and measured["value"] < (1 - threshold_pct / 100) * reference:
                below = 100 * (1 - measured["value"] / reference)
                node["flags"][name] = (f"{measured['value']:.4g} is {below:.0f}% below "
                                       f"{against} ({reference:.4g})")
            node.setdefault("references", {})[name] = reference
    good = [node["host"] for node in nodes if not node["flags"]]
    bad = [node["host"] for node in nodes if node["flags"]]
    return {"threshold_pct": threshold_pct, "against": against, "nodes": nodes,
            "good": good, "flagged": bad, "nodelist": ",".join(good), "exclude": ",".join(bad)}


def read_baseline(path) -> Dict:
    """A preflight saved with ``--save-baseline``; a one-line error for anything else."""
    try:
        baseline = json.loads(Path(path).read_text())
        if not all("host" in n and "figures" in n for n in baseline["nodes"]):
            raise KeyError("nodes")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ScalingError(f"--baseline {path} is not a readable preflight file: "
                           f"{type(error).__name__}: {error}") from None
    return baseline


def write_preflight(verdict: Dict, path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")
    return path


def read_preflight(out_dir) -> Optional[Dict]:
    path = Path(out_dir) / PREFLIGHT_FILE
    return json.loads(path.read_text()) if path.exists() else None
