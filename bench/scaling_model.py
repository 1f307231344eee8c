"""The scaling model against measurement: 2-device cells predicted from their single cell and
their own gradient allreduce.

For each launcher (torch torchrun and horovod, tensorflow tf-multiworker), each run measures
the ``single`` cell and the launcher's 2-device cell (CPU, 1 thread per device, profiled so
that the overlap is measured), alternating the two within the run, and applies the report's
model (``scaling.report.model``) to them, with the contention timed in both cells and, for
comparison, without it. Then the same for a torchrun cell over two nodes of
a private Slurm cluster on this machine (one device per node), submitted as a sweep with its
single cell. Reports each run's measured / predicted ratio, their median and the t interval of
their mean; the target is within 10% (0.9 to 1.1).

    python bench/scaling_model.py --runs 3 --output bench/results/scaling_model.json
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchlib import harness_record, machine
from scaling.execute.store import ResultStore
from scaling.launchers import default_python
from scaling.report.model import with_predictions
from scaling.report.tables import with_scaling
from scaling.uncertainty import repeats_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from slurmcluster import SlurmCluster  # noqa: E402  (a test helper, found through tests/)

LAUNCHERS = (("torch", "torchrun"), ("torch", "horovod"), ("tensorflow", "tf-multiworker"))
SHAPE = {"workload": "resnet50", "image_size": 64, "batch_size": 8, "steps": 12, "warmup": 3}


def one_run(framework: str, launcher: str, repeat: int, scratch: Path) -> dict:
    """The single cell and the 2-device cell, in an order that alternates with ``repeat``,
    and the model's fields for the 2-device cell."""
    python = default_python(framework, launcher)
    sides = [("single", 1), (launcher, 2)]
    records = [harness_record(scratch / f"{framework}-{launcher}-{repeat}", framework=framework,
                              launcher=name, devices=devices, threads_per_device=1,
                              repeat=repeat, profile=name != "single", python=python,
                              **SHAPE)
               for name, devices in (sides if repeat % 2 == 0 else sides[::-1])]
    return model_fields(records)


def model_fields(records) -> dict:
    """The model's inputs and fields for the 2-device record of ``records``, and its ratio
    had the contention not been timed."""
    [two] = [row for row in with_predictions(with_scaling(records))
             if row["total_devices"] == 2]
    untimed = [{**record, "local_step_s": None} for record in records]
    [blind] = [row for row in with_predictions(with_scaling(untimed))
               if row["total_devices"] == 2]
    return {**{key: two[key] for key in (
        "images_per_sec", "baseline_images_per_sec", "allreduce_time_s", "gradient_bytes",
        "step_breakdown", "local_step_s", "baseline_local_step_s", "contention_s",
        "predicted_images_per_sec", "predicted_images_per_sec_low",
        "predicted_images_per_sec_high", "prediction_ratio", "loss_term")},
        "prediction_ratio_without_contention": blind["prediction_ratio"]}


def two_node_runs(runs: int, scratch: Path) -> list:
    """Each run: a sweep of the single cell and a torchrun cell over two Slurm nodes, one
    device each, under a private cluster; the model's fields for the two-node cell."""
    results = []
    with SlurmCluster(scratch / "slurm") as cluster:
        for repeat in range(runs):
            sweep = scratch / f"two-nodes-{repeat}.yaml"
            sweep.write_text(yaml.safe_dump({
                "name": "two-nodes", "device_type": "cpu", "workloads": [SHAPE["workload"]],
                "frameworks": {"torch": {"launchers": ["torchrun"]}}, "devices": [1],
                "nodes": [2], "batch_sizes": [SHAPE["batch_size"]],
                "image_size": SHAPE["image_size"], "steps": SHAPE["steps"],
                "warmup": SHAPE["warmup"], "threads_per_device": 1, "profile": True}))
            out = scratch / f"two-nodes-{repeat}"
            swept = subprocess.run([sys.executable, "-m", "scaling", "sweep", str(sweep),
                                    "--out", str(out), "--backend", "slurm", "--wait"],
                                   env=cluster.env, capture_output=True, text=True)
            records = ResultStore(out).records()
            failed = [r["error"] for r in records if r["status"] != "ok"]
            if swept.returncode:
                raise SystemExit(f"two-node sweep exited {swept.returncode}: "
                                 f"{failed or swept.stderr.strip()}")
            results.append(model_fields(records))
    return results


def summary(framework: str, launcher: str, runs: list) -> dict:
    ratios = [run["prediction_ratio"] for run in runs]
    blind = [run["prediction_ratio_without_contention"] for run in runs]
    print(f"{framework}/{launcher}: measured / predicted {statistics.median(ratios):.3f} "
          f"(runs {', '.join(f'{r:.3f}' for r in ratios)}); without the contention "
          f"{statistics.median(blind):.3f}", flush=True)
    return {"framework": framework, "launcher": launcher, "runs": runs,
            "prediction_ratios": ratios, "median_ratio": statistics.median(ratios),
            "ratio_ci95": repeats_interval(ratios),
            "median_ratio_without_contention": statistics.median(blind),
            "ratio_without_contention_ci95": repeats_interval(blind)}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--no-slurm", dest="slurm", action="store_false",
                        help="leave out the two-node cell (it needs Slurm installed)")
    parser.add_argument("--launchers", default=",".join(name for _, name in LAUNCHERS),
                        help="the single-node launchers to measure, comma-separated")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for framework, launcher in LAUNCHERS:
            if launcher not in args.launchers.split(","):
                continue
            runs = [one_run(framework, launcher, repeat, Path(scratch))
                    for repeat in range(args.runs)]
            results.append(summary(framework, launcher, runs))
            write(args, results)
        if args.slurm:
            results.append(summary("torch", "torchrun over 2 Slurm nodes",
                                   two_node_runs(args.runs, Path(scratch))))
            write(args, results)


def write(args, results) -> None:
    """The results so far, after each launcher: a run stopped part-way keeps what it measured."""
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "the scaling model against 2-device cells", "config": {
                **SHAPE, "devices": 2, "threads_per_device": 1, "runs": args.runs,
                "device_type": "cpu", "profile": True},
            "machine": machine(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
