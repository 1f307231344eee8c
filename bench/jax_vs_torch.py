"""JAX beside PyTorch on the same cells: images/sec of each framework's default data-parallel
launcher (``jax``, one jitted step over a mesh of host devices; ``torchrun``, DDP over gloo)
and of its one-device ``single`` baseline, at 1 and 2 CPU devices of one thread each.

For each workload the four cells run alternately ``--runs`` times; the results give each cell's
median images/sec with its interval, the ratio jax / torch of the medians at each point, and
each framework's speedup at 2 devices over its own baseline.

    python bench/jax_vs_torch.py --runs 5 --output bench/results/jax_vs_torch.json
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import alternating, harness_record, machine
from scaling.uncertainty import repeats_interval

SHAPES = {"cifar10": {"image_size": 32, "batch_size": 32, "steps": 40},
          "resnet50": {"image_size": 64, "batch_size": 8, "steps": 16}}
CELLS = (("torch", "single", 1), ("torch", "torchrun", 2), ("jax", "single", 1), ("jax", "jax", 2))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(SHAPES))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for workload in args.workloads.split(","):
            def measure(cell, repeat):
                framework, launcher, devices = cell
                return harness_record(
                    Path(scratch) / f"{workload}-{framework}-{launcher}", framework=framework,
                    launcher=launcher, devices=devices, threads_per_device=1, repeat=repeat,
                    workload=workload, warmup=5, **SHAPES[workload])["images_per_sec"]

            figures = alternating(args.runs, CELLS, measure, workload)
            medians = {cell: statistics.median(values) for cell, values in figures.items()}
            results.append({
                "workload": workload, **SHAPES[workload],
                "cells": [{"framework": f, "launcher": l, "devices": d,
                           "images_per_sec": figures[(f, l, d)],
                           "median": medians[(f, l, d)],
                           "ci95": repeats_interval(figures[(f, l, d)])} for f, l, d in CELLS],
                "jax_over_torch": {
                    "1 device": medians[CELLS[2]] / medians[CELLS[0]],
                    "2 devices": medians[CELLS[3]] / medians[CELLS[1]]},
                "speedup_2_devices": {"torch": medians[CELLS[1]] / medians[CELLS[0]],
                                      "jax": medians[CELLS[3]] / medians[CELLS[2]]}})
            print(json.dumps(results[-1]["jax_over_torch"]), json.dumps(
                results[-1]["speedup_2_devices"]), flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "jax beside torch on the same cells", "machine": machine(),
            "config": {"runs": args.runs, "threads_per_device": 1, "device_type": "cpu"},
            "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
