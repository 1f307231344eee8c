"""What going parallel costs at one device: each framework's ``single`` cell (one process, no
data-parallel wrapper) against each of its launchers at one device, on the same cell.

Runs alternate (single first in even runs, the launcher first in odd ones), ``--runs`` times per
pair, one CPU device of ``--threads`` threads. Reports each side's median images/sec with the
95% interval of its mean, and ``parallel_overhead`` = 1 - launcher / single (ratio of medians)
with an interval from the two (relative half widths in quadrature).

    python bench/baseline.py --runs 5 --output bench/results/baseline.json
    python bench/baseline.py --frameworks jax --runs 3 --output bench/results/baseline_jax.json
    python bench/baseline.py --shapes cifar10,resnet50 --launchers torchrun,jax --runs 5

``--shapes``: ``resnet50`` (64 px, batch 8) and ``cifar10`` (32 px, batch 16, the quickstart's
small step); ``--launchers`` keeps those launchers only (default: every one of each framework).
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import alternating, harness_record, machine

from scaling.frameworks import FRAMEWORKS
from scaling.launchers import default_python, launchers_of
from scaling.uncertainty import ratio_interval, repeats_interval

SHAPES = {"resnet50": {"workload": "resnet50", "image_size": 64, "batch_size": 8, "steps": 20,
                        "warmup": 5},
          "cifar10": {"workload": "cifar10", "image_size": 32, "batch_size": 16, "steps": 40,
                      "warmup": 5, "min_time_s": 3}}


def one_run(framework: str, launcher: str, python: str, threads: int, repeat: int,
            scratch: Path, shape: dict) -> float:
    return harness_record(
        scratch / f"{framework}-{launcher}", framework=framework, launcher=launcher, devices=1,
        threads_per_device=threads, repeat=repeat, python=python, **shape)["images_per_sec"]


def pair(framework: str, launcher: str, runs: int, threads: int, scratch: Path,
         shape: str = "resnet50") -> dict:
    """Both sides on the launcher's interpreter (Horovod's TensorFlow is its own), so they
    differ only in the launcher."""
    python = default_python(framework, launcher)
    figures = alternating(runs, ("single", launcher), lambda side, repeat: one_run(
        framework, side, python, threads, repeat, scratch, SHAPES[shape]),
        label=f"{framework} {shape}")
    single, wrapped = (statistics.median(figures[side]) for side in ("single", launcher))
    single_ci, wrapped_ci = (repeats_interval(figures[side]) for side in ("single", launcher))
    ratio = wrapped / single
    bounds = ratio_interval(ratio, wrapped_ci, wrapped, single_ci, single)
    return {"framework": framework, "launcher": launcher, "shape": SHAPES[shape],
            "python": python,
            "single_images_per_sec": figures["single"],
            "launcher_images_per_sec": figures[launcher],
            "single_median": single, "launcher_median": wrapped,
            "single_ci95": single_ci, "launcher_ci95": wrapped_ci,
            "parallel_overhead": 1 - ratio,
            "parallel_overhead_ci95": [1 - bounds[1], 1 - bounds[0]] if bounds else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                        help="comma-separated (default: every registered framework)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shapes", default="resnet50",
                        help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--launchers", help="comma-separated (default: every one)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    chosen = args.launchers.split(",") if args.launchers else None
    with tempfile.TemporaryDirectory() as scratch:
        for shape in args.shapes.split(","):
            for framework in args.frameworks.split(","):
                for launcher in launchers_of(framework):
                    if launcher == "single" or (chosen and launcher not in chosen):
                        continue
                    results.append(pair(framework, launcher, args.runs, args.threads,
                                        Path(scratch), shape))
                    entry = results[-1]
                    print(f"{framework} {launcher} {shape}: overhead "
                          f"{entry['parallel_overhead']:+.1%} "
                          f"{entry['parallel_overhead_ci95']}", flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "single against each launcher at one device",
            "config": {"shapes": {name: SHAPES[name] for name in args.shapes.split(",")},
                       "threads_per_device": args.threads, "runs": args.runs,
                       "device_type": "cpu"},
            "machine": machine(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
