"""Where a sweep's wall time goes: the share inside its timed windows, and what the rest went
to, phase by phase (each record's ``wall_breakdown``, ``scaling.execute.wall``).

Runs each sweep into a fresh folder through the command line, as a user would, times it from
the command's start to its end, and reports the windows' share of that, the phases' totals,
and each cell's share. Three sweeps: the quickstart (``configs/quickstart.yaml``), the same
with every cell in processes of its own (``share_processes: false``, as before shared process
trees), and one over PyTorch, TensorFlow and JAX (ResNet-50 at 32 px, batch 8, 1 and 2 CPU
devices of one thread, each point twice, as the quickstart does).

    python bench/cell_cost.py --output bench/results/cell_cost.json
    python bench/cell_cost.py --sweeps quickstart --output FILE
"""

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml
from benchlib import machine

from scaling.execute.store import ResultStore
from scaling.execute.wall import window_share

ROOT = Path(__file__).resolve().parents[1]
THREE_FRAMEWORKS = {
    "name": "three-frameworks", "device_type": "cpu",
    "frameworks": {"torch": {"launchers": ["torchrun"]},
                   "tensorflow": {"launchers": ["tf-mirrored"]},
                   "jax": {"launchers": ["jax"]}},
    "workloads": ["resnet50"], "devices": [1, 2], "batch_sizes": [8], "image_size": 32,
    "threads_per_device": 1, "steps": 10, "warmup": 3, "min_time_s": 6, "repeats": 2,
    "timeout_s": 600,
}


def sweep_file(name: str, scratch: Path) -> Path:
    """``quickstart``, ``quickstart_fresh`` (the same with ``share_processes: false``: every
    cell starts its own processes) or ``three_frameworks``."""
    if name == "quickstart":
        return ROOT / "configs" / "quickstart.yaml"
    spec = THREE_FRAMEWORKS
    if name == "quickstart_fresh":
        spec = {**yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text()),
                "share_processes": False}
    path = scratch / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def one_sweep(name: str, scratch: Path) -> dict:
    """Run sweep ``name`` into ``scratch/name``; where its wall time went."""
    out = scratch / name
    if out.exists():
        raise SystemExit(f"{out} exists: choose another --scratch")
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scaling", "sweep", str(sweep_file(name, scratch)),
                    "--out", str(out)], check=False, stdout=subprocess.DEVNULL)
    sweep_s = time.perf_counter() - started
    records = ResultStore(out).records()
    share = window_share(records)
    phases = Counter()
    for record in records:
        phases.update({key: value for key, value in (record.get("wall_breakdown") or {}).items()
                       if key != "total"})
    return {
        "sweep_s": sweep_s, "cells": len(records),
        "statuses": dict(Counter(record["status"] for record in records)),
        "windows_s": share["window_s"], "cells_wall_s": share["wall_s"],
        "window_share_of_sweep": share["window_s"] / sweep_s,
        "window_share_of_cells": share["share"],
        "outside_cells_s": sweep_s - share["wall_s"],
        "phases_s": dict(phases.most_common()),
        "per_cell": [{"framework": r["framework"], "launcher": r["launcher"],
                      "workload": r["workload"], "devices": r["total_devices"],
                      "repeat": r["repeat"], "references": r.get("references"),
                      "noisy": r.get("noisy"), "process_tree": r.get("process_tree"),
                      "wall_breakdown": r.get("wall_breakdown")}
                     for r in records],
    }


def table(results: dict) -> str:
    lines = ["| sweep | cells | sweep s | windows s | in windows | largest other phases (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, found in results.items():
        others = ", ".join(f"{phase} {seconds:.0f}" for phase, seconds in
                           list((k, v) for k, v in found["phases_s"].items()
                                if k != "window")[:4])
        lines.append(f"| {name} | {found['cells']} | {found['sweep_s']:.0f} | "
                     f"{found['windows_s']:.0f} | {found['window_share_of_sweep']:.0%} | "
                     f"{others} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", default="quickstart,quickstart_fresh,three_frameworks",
                        help="comma-separated: quickstart, quickstart_fresh, three_frameworks")
    parser.add_argument("--scratch", type=Path, default=ROOT / "runs" / "cell-cost")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = {}
    for name in args.sweeps.split(","):
        results[name] = one_sweep(name, args.scratch)
        print(f"{name}: {results[name]['sweep_s']:.0f} s, "
              f"{results[name]['window_share_of_sweep']:.0%} in windows", flush=True)
    print(table(results))
    if args.output:
        args.output.write_text(json.dumps({"benchmark": "cell_cost", "machine": machine(),
                                           "sweeps": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
