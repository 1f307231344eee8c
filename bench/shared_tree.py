"""Does a cell measure the same in a shared process tree? The same cell alone (its own
processes, as ``share_processes: false`` runs it) and right after another cell in the same
tree (``scaling.execute.trees``), alternating, for each kind of cell that shares a tree.

Each pair runs the two sides back to back, the order reversed in every other pair. The cell
is the quickstart's small step (cifar10, 32 px, batch 16, one thread per device, a window of
at least ``--min-time`` s, no references); in its tree, ResNet-50 at the same size and batch
runs first. Reports each side's median images/sec with the 95% interval of its mean, and the
ratio after / alone: the mean of the pairs' ratios with its t interval.

    python bench/shared_tree.py --runs 6 --output bench/results/shared_tree.json
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import alternating, machine

from scaling.cell import make_cell
from scaling.execute.run import run_cell
from scaling.execute.trees import SHARED, SharedTrees
from scaling.uncertainty import repeats_interval

KINDS = {"torch single": ("torch", "single", 1), "torch torchrun x2": ("torch", "torchrun", 2)}


def cell(framework: str, launcher: str, devices: int, workload: str, min_time_s: float):
    return make_cell(framework=framework, launcher=launcher, workload=workload, devices=devices,
                     batch_size=16, image_size=32, steps=10, warmup=3, min_time_s=min_time_s,
                     device_type="cpu", threads_per_device=1, references=False)


def measure(kind: str, side: str, scratch: Path, min_time_s: float) -> float:
    """The cell's images/sec alone, or after ResNet-50 in its tree."""
    framework, launcher, devices = KINDS[kind]
    target = cell(framework, launcher, devices, "cifar10", min_time_s)
    folder = scratch / f"{kind}-{side}".replace(" ", "-")
    if side == "alone":
        record = run_cell(target, folder)
    else:
        with SharedTrees(folder) as trees:
            run_cell(cell(framework, launcher, devices, "resnet50", min_time_s), folder,
                     trees=trees)
            record = run_cell(target, folder, trees=trees)
        if (record["process_tree"] or {}).get("position") != 2:
            raise SystemExit(f"{kind}: the cell did not run second in its tree")
    if record["status"] != "ok":
        raise SystemExit(f"{kind} {side}: {record['status']}: {record['error']}")
    return record["images_per_sec"]


def compare(kind: str, runs: int, scratch: Path, min_time_s: float) -> dict:
    figures = alternating(runs, ("alone", "after"),
                          lambda side, _: measure(kind, side, scratch, min_time_s), label=kind)
    ratios = [after / alone for alone, after in zip(figures["alone"], figures["after"])]
    return {"kind": kind, "alone_images_per_sec": figures["alone"],
            "after_images_per_sec": figures["after"],
            "alone_median": statistics.median(figures["alone"]),
            "after_median": statistics.median(figures["after"]),
            "alone_ci95": repeats_interval(figures["alone"]),
            "after_ci95": repeats_interval(figures["after"]),
            "ratio_mean": statistics.fmean(ratios), "ratio_ci95": repeats_interval(ratios)}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " +
                        ", ".join(KINDS))
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--min-time", type=float, default=4.0)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for kind in args.kinds.split(","):
            results.append(compare(kind, args.runs, Path(scratch), args.min_time))
            low, high = results[-1]["ratio_ci95"] or (None, None)
            print(f"{kind}: after / alone {results[-1]['ratio_mean']:.3f} [{low:.3f}, "
                  f"{high:.3f}]", flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "a cell alone against the same cell second in a shared tree",
            "config": {"cell": "cifar10 32 px batch 16, 1 thread per device, no references",
                       "before_it": "resnet50 32 px batch 16", "min_time_s": args.min_time,
                       "runs": args.runs, "shared": {k: list(v) for k, v in SHARED.items()}},
            "machine": machine(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
