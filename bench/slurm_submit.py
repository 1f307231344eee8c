"""Slurm submission cost and the scheduler's overhead per cell, on a private two-node cluster
started on this machine (tests/slurmcluster.py).

1. A 500-cell sweep (two resource groups: 1 and 2 nodes) is submitted held (``--hold``, so
   nothing runs) with ``scaling sweep --backend slurm``; reports the command's wall time and
   the number of sbatch calls (job arrays). Target: one sbatch per group, under 5 s.
2. One small cell, alternately through ``scaling run --backend slurm --wait`` and a local
   ``scaling run``: median wall time of each, and the difference.

    python bench/slurm_submit.py --output bench/results/slurm_submit.json
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchlib import machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from slurmcluster import SlurmCluster  # noqa: E402  (a test helper, found through tests/)

CELL = ["--workload", "cifar10", "--image-size", "16", "--batch-size", "4", "--steps", "3",
        "--warmup", "1"]


def scaling(env, *args) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scaling", *map(str, args)], check=True, env=env,
                   capture_output=True, text=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, SlurmCluster(Path(scratch) / "slurm") as cluster:
        scratch = Path(scratch)
        sweep = scratch / "sweep.yaml"
        sweep.write_text(yaml.safe_dump({
            "name": "five-hundred", "device_type": "cpu", "workloads": ["cifar10"],
            "frameworks": {"torch": {"launchers": ["torchrun"]}}, "devices": [1],
            "nodes": [1, 2], "batch_sizes": list(range(1, 51)), "repeats": 5,
            "image_size": 16, "steps": 3, "warmup": 1}))
        submit_s = scaling(cluster.env, "sweep", sweep, "--out", scratch / "held", "--backend",
                           "slurm", "--sbatch-arg=--hold")
        arrays = len(list((scratch / "held" / "slurm").glob("*.sbatch")))
        cells = sum(len(json.loads(p.read_text())["cells"])
                    for p in (scratch / "held" / "slurm").glob("*.json"))
        subprocess.run(["scancel", "--user=root"], env=cluster.env, check=True)
        print(f"{cells} cells submitted in {arrays} sbatch calls, {submit_s:.2f} s")
        walls = {"slurm": [], "local": []}
        for run in range(args.runs):
            for name in (("slurm", "local") if run % 2 == 0 else ("local", "slurm")):
                extra = ["--backend", "slurm", "--wait"] if name == "slurm" else []
                walls[name].append(scaling(cluster.env, "run", *CELL, "--out",
                                           scratch / f"{name}-{run}", *extra))
            print(f"run {run}: slurm {walls['slurm'][-1]:.1f} s, local {walls['local'][-1]:.1f} s",
                  flush=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    result = {
        "benchmark": "Slurm: submitting a 500-cell sweep, and one cell under Slurm vs locally",
        "machine": machine(),
        "submission": {"cells": cells, "sbatch_calls": arrays, "wall_s": submit_s},
        "one_cell_wall_s": walls, "median_wall_s": medians,
        "slurm_overhead_s": medians["slurm"] - medians["local"],
    }
    print(f"one cell: slurm {medians['slurm']:.1f} s, local {medians['local']:.1f} s")
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
