"""What going parallel costs at one device: each framework's ``single`` cell (one process, no
data-parallel wrapper) against each of its launchers at one device, on the same cell.

Runs alternate (single first in even runs, the launcher first in odd ones), ``--runs`` times per
pair, one CPU device of ``--threads`` threads. Reports each side's median images/sec with the
95% interval of its mean, and ``parallel_overhead`` = 1 - launcher / single (ratio of medians)
with an interval from the two (relative half widths in quadrature).

    python bench/baseline.py --runs 5 --output bench/results/baseline.json
    python bench/baseline.py --frameworks jax --runs 3 --output bench/results/baseline_jax.json
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

SHAPE = {"workload": "resnet50", "image_size": 64, "batch_size": 8, "steps": 20, "warmup": 5}


def one_run(framework: str, launcher: str, python: str, threads: int, repeat: int,
            scratch: Path) -> float:
    return harness_record(
        scratch / f"{framework}-{launcher}", framework=framework, launcher=launcher, devices=1,
        threads_per_device=threads, repeat=repeat, python=python, **SHAPE)["images_per_sec"]


def pair(framework: str, launcher: str, runs: int, threads: int, scratch: Path) -> dict:
    """Both sides on the launcher's interpreter (Horovod's TensorFlow is its own), so they
    differ only in the launcher."""
    python = default_python(framework, launcher)
    figures = alternating(runs, ("single", launcher), lambda side, repeat: one_run(
        framework, side, python, threads, repeat, scratch), label=framework)
    single, wrapped = (statistics.median(figures[side]) for side in ("single", launcher))
    single_ci, wrapped_ci = (repeats_interval(figures[side]) for side in ("single", launcher))
    ratio = wrapped / single
    bounds = ratio_interval(ratio, wrapped_ci, wrapped, single_ci, single)
    return {"framework": framework, "launcher": launcher, "python": python,
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
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for framework in args.frameworks.split(","):
            for launcher in launchers_of(framework):
                if launcher != "single":
                    results.append(pair(framework, launcher, args.runs, args.threads,
                                        Path(scratch)))
                    entry = results[-1]
                    print(f"{framework} {launcher}: overhead "
                          f"{entry['parallel_overhead']:+.1%} {entry['parallel_overhead_ci95']}",
                          flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "single against each launcher at one device",
            "config": {**SHAPE, "threads_per_device": args.threads, "runs": args.runs,
                       "device_type": "cpu"},
            "machine": machine(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
