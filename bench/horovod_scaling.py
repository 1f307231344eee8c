"""Horovod against each framework's own data parallelism, and the harness's Horovod cell
against a plain hand-written Horovod loop, on the same configuration.

Pairs, each run alternately ``--runs`` times per workload (cifar10 32x32 and resnet50 64x64 by
default), 2 CPU ranks of one thread:

- torch: horovod vs torchrun (DDP), both in the main environment;
- tensorflow: horovod vs tf-multiworker, both under TensorFlow 2.15.1 (``.venv-tf215``);
- mxnet: horovod vs mxnet-kvstore, both in ``.venv-mxnet``;
- plain: the harness's torch horovod cell vs ``plain_horovod.py`` under horovodrun.
  Target: harness / plain >= 0.97.

Reports each side's median images/sec and the ratio of medians (first / second). With an
existing ``--output``, the pairs run replace their earlier entries and the others are kept.

    python bench/horovod_scaling.py --runs 5 --output bench/results/horovod.json
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from benchlib import alternating, harness_record, machine
from scaling.launchers import default_python

HERE = Path(__file__).resolve().parent
PAIRS = {
    "torch": (("torch", "horovod"), ("torch", "torchrun")),
    "tensorflow": (("tensorflow", "horovod"), ("tensorflow", "tf-multiworker")),
    "mxnet": (("mxnet", "horovod"), ("mxnet", "mxnet-kvstore")),
    "plain": (("torch", "horovod"), ("plain", "horovod")),
}
SHAPES = {"cifar10": {"image_size": 32, "batch_size": 32, "steps": 40},
          "resnet50": {"image_size": 64, "batch_size": 8, "steps": 24},
          "alexnet": {"image_size": 224, "batch_size": 8, "steps": 12}}
"""The default workloads; ``alexnet`` (about 244 MB of gradients a step, where the allreduce
dominates) runs when asked for with ``--workloads``."""


def plain_run(workload: str, shape: dict, warmup: int, devices: int, scratch: Path) -> float:
    out = scratch / "plain.json"
    python = default_python("torch", "horovod")
    argv = [python, "-m", "horovod.runner.launch", "--gloo", "-np", str(devices),
            "-H", f"localhost:{devices}", python, str(HERE / "plain_horovod.py"), workload,
            str(shape["batch_size"]), str(shape["image_size"]), str(shape["steps"]),
            str(warmup), "1", str(out)]
    subprocess.run(argv, check=True, capture_output=True, env={
        **os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": "1"})
    return json.loads(out.read_text())["images_per_sec"]


def one_run(side, workload: str, shape: dict, warmup: int, devices: int, repeat: int,
            scratch: Path) -> float:
    framework, launcher = side
    if framework == "plain":
        return plain_run(workload, shape, warmup, devices, scratch)
    return harness_record(
        scratch / f"{framework}-{launcher}", framework=framework, launcher=launcher,
        workload=workload, devices=devices, threads_per_device=1, warmup=warmup,
        repeat=repeat, python=default_python(framework, "horovod"), **shape)["images_per_sec"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=",".join(PAIRS),
                        help=f"comma-separated, from {', '.join(PAIRS)}")
    parser.add_argument("--workloads", default="cifar10,resnet50",
                        help=f"comma-separated, from {', '.join(SHAPES)}")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for workload in args.workloads.split(","):
            for pair in args.pairs.split(","):
                first, second = PAIRS[pair]
                figures = alternating(args.runs, (first, second), lambda side, repeat: one_run(
                    side, workload, SHAPES[workload], args.warmup, args.devices, repeat,
                    Path(scratch)), label=f"{workload} {pair}")
                medians = {side: statistics.median(values) for side, values in figures.items()}
                results.append({
                    "workload": workload, **SHAPES[workload], "pair": pair,
                    "first": "/".join(first), "second": "/".join(second),
                    "first_images_per_sec": figures[first],
                    "second_images_per_sec": figures[second],
                    "first_median": medians[first], "second_median": medians[second],
                    "ratio_of_medians": medians[first] / medians[second],
                })
                print(f"{workload} {pair}: {results[-1]['first']} {medians[first]:.1f} / "
                      f"{results[-1]['second']} {medians[second]:.1f} = "
                      f"{results[-1]['ratio_of_medians']:.3f}", flush=True)
    if not args.output:
        return
    ran = {(entry["workload"], entry["pair"]) for entry in results}
    earlier = json.loads(args.output.read_text())["results"] if args.output.exists() else []
    output = {
        "benchmark": "horovod vs each framework's own data parallelism; harness vs plain loop",
        "config": {"devices": args.devices, "threads_per_device": 1, "warmup": args.warmup,
                   "runs": args.runs, "device_type": "cpu"},
        "machine": machine(),
        "results": [entry for entry in earlier if (entry["workload"], entry["pair"]) not in ran]
        + results,
    }
    args.output.write_text(json.dumps(output, indent=2) + "\n")


if __name__ == "__main__":
    main()
