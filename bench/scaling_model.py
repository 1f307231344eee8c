"""The scaling model against measurement: 2-device cells predicted from their single cell, the
launcher's own 1-device cell and their own measured terms, and a 4-device curve's largest point
predicted from its smaller ones (the leave-one-out check).

For each launcher (torch torchrun and horovod, tensorflow tf-multiworker, jax's jax launcher),
each run measures the ``single`` cell, the launcher's 1-device cell and its 2-device cell (CPU,
1 thread per device, the launcher's cells profiled so that the overlap is measured), in an
order that reverses every other run, and applies the report's model
(``scaling.report.model``) to them; for comparison, also without each of its measured terms
(the launcher's own cost, the contention, the communication beside the compute). Then the
same for torchrun over two nodes of a private Slurm cluster on this machine (one device per
node), submitted as a sweep with its single cell and its 1-node 1-device cell. Then a torchrun
curve at 1, 2 and 4 devices of 1 thread (oversubscribed beyond the cores), whose 4-device point
is predicted from the others alone (``prediction_error``). Reports each run's measured /
predicted ratio, their median and the t interval of their mean; the target is within 10%
(0.9 to 1.1).

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

LAUNCHERS = (("torch", "torchrun"), ("torch", "horovod"), ("tensorflow", "tf-multiworker"),
             ("jax", "jax"))
SHAPE = {"workload": "resnet50", "image_size": 64, "batch_size": 8, "steps": 12, "warmup": 3}
FIELDS = ("images_per_sec", "images_per_sec_ci95", "baseline_images_per_sec",
          "allreduce_time_s", "gradient_bytes", "step_breakdown", "local_step_s",
          "local_step_s_ci95", "baseline_local_step_s", "local_step_communicating_s",
          "parallel_overhead", "launcher_s", "launcher_s_low", "launcher_s_high",
          "contention_s", "contention_s_low", "contention_s_high", "interference_s",
          "interference_s_low", "interference_s_high", "predicted_images_per_sec",
          "predicted_images_per_sec_low", "predicted_images_per_sec_high",
          "prediction_ratio", "loss_term", "beside_share", "prediction_error",
          "prediction_error_low",
          "prediction_error_high", "prediction_error_from")
TWO_NODES = "torchrun over 2 Slurm nodes"
"""The two-node row's launcher label in the results."""
WITHOUT = {"contention": {"local_step_s": None},
           "communication beside compute": {"local_step_communicating_s": None}}
"""The model's measured terms left out, for comparison: the record fields that drop each (the
launcher's own cost drops with the launcher's 1-device record)."""


def one_run(framework: str, launcher: str, repeat: int, scratch: Path) -> dict:
    """The single cell, the launcher's 1-device cell and its 2-device cell, in an order that
    reverses with ``repeat``, and the model's fields for the 2-device cell."""
    records = alternated([("single", 1), (launcher, 1), (launcher, 2)], repeat,
                         scratch / f"{framework}-{launcher}-{repeat}", framework=framework,
                         python=default_python(framework, launcher))
    return model_fields(records, lambda row: row["total_devices"] == 2)


def alternated(sides, repeat: int, scratch: Path, **fields) -> list:
    """The records of ``sides`` (launcher, devices), 1 thread per device, in an order that
    reverses with ``repeat``; the launchers' cells profiled."""
    return [harness_record(scratch, launcher=name, devices=devices, threads_per_device=1,
                           repeat=repeat, profile=name != "single", **SHAPE, **fields)
            for name, devices in (sides if repeat % 2 == 0 else sides[::-1])]


def model_fields(records, chosen) -> dict:
    """The model's inputs and fields for the record that ``chosen`` picks, and its ratio with
    each measured term left out."""
    [row] = [row for row in with_predictions(with_scaling(records)) if chosen(row)]
    without = {name: [{**record, **fields} for record in records]
               for name, fields in WITHOUT.items()}
    without["the launcher"] = [record for record in records
                               if record["devices"] * record["nodes"] > 1
                               or record["launcher"] == "single"]
    ratios = {}
    for name, changed in without.items():
        [other] = [r for r in with_predictions(with_scaling(changed)) if chosen(r)]
        ratios[name] = other["prediction_ratio"]
    return {**{key: row.get(key) for key in FIELDS}, "prediction_ratio_without": ratios}


def two_node_runs(runs: int, scratch: Path) -> list:
    """Each run: a sweep of the single cell and torchrun at one device on one node and over two
    Slurm nodes, one device each, under a private cluster; the model's fields for the
    two-node cell."""
    results = []
    with SlurmCluster(scratch / "slurm") as cluster:
        for repeat in range(runs):
            records = swept(cluster, scratch, f"two-nodes-{repeat}", devices=[1], nodes=[1, 2])
            results.append(model_fields(records, lambda row: row["nodes"] == 2))
    return results


def swept(cluster, scratch: Path, name: str, **axes) -> list:
    """The records of a torchrun sweep of ``axes`` (with its single cells) under Slurm."""
    sweep = scratch / f"{name}.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": name, "device_type": "cpu", "workloads": [SHAPE["workload"]],
        "frameworks": {"torch": {"launchers": ["torchrun"]}},
        "batch_sizes": [SHAPE["batch_size"]], "image_size": SHAPE["image_size"],
        "steps": SHAPE["steps"], "warmup": SHAPE["warmup"], "threads_per_device": 1,
        "profile": True, **axes}))
    out = scratch / name
    done = subprocess.run([sys.executable, "-m", "scaling", "sweep", str(sweep), "--out",
                           str(out), "--backend", "slurm", "--wait"],
                          env=cluster.env, capture_output=True, text=True)
    records = ResultStore(out).records()
    if done.returncode:
        failed = [r["error"] for r in records if r["status"] != "ok"]
        raise SystemExit(f"{name} sweep exited {done.returncode}: "
                         f"{failed or done.stderr.strip()}")
    return records


def leave_one_out_run(repeat: int, scratch: Path) -> dict:
    """single and torchrun at 1, 2 and 4 devices of 1 thread, in an order that reverses with
    ``repeat``; the 4-device point's prediction from the others alone."""
    records = alternated([("single", 1), ("torchrun", 1), ("torchrun", 2), ("torchrun", 4)],
                         repeat, scratch / f"leave-one-out-{repeat}", framework="torch",
                         allow_oversubscribe=True)
    [four] = [row for row in with_predictions(with_scaling(records))
              if row["total_devices"] == 4]
    return {key: four.get(key) for key in FIELDS}


def summary(framework: str, launcher: str, runs: list) -> dict:
    ratios = [run["prediction_ratio"] for run in runs]
    without = {name: [run["prediction_ratio_without"][name] for run in runs]
               for name in runs[0]["prediction_ratio_without"]}
    print(f"{framework}/{launcher}: measured / predicted {statistics.median(ratios):.3f} "
          f"(runs {', '.join(f'{r:.3f}' for r in ratios)}); without " + ", ".join(
              f"{name} {median_or_none(values)}" for name, values in without.items()),
          flush=True)
    return {"framework": framework, "launcher": launcher, "runs": runs,
            "prediction_ratios": ratios, "median_ratio": statistics.median(ratios),
            "ratio_ci95": repeats_interval(ratios),
            "median_ratio_without": {name: median_or_none(values)
                                     for name, values in without.items()}}


def median_or_none(values):
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def leave_one_out_summary(runs: list) -> dict:
    errors = [run["prediction_error"] for run in runs]
    print("torch/torchrun at 1, 2, 4 devices: leave-one-out error of 4 devices "
          f"{statistics.median(errors):+.1%} (runs {', '.join(f'{e:+.1%}' for e in errors)})",
          flush=True)
    return {"framework": "torch", "launcher": "torchrun", "devices": [1, 2, 4],
            "allow_oversubscribe": True, "runs": runs, "prediction_errors": errors,
            "median_error": statistics.median(errors), "error_ci95": repeats_interval(errors)}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--no-slurm", dest="slurm", action="store_false",
                        help="leave out the two-node cell (it needs Slurm installed)")
    parser.add_argument("--no-leave-one-out", dest="leave_one_out", action="store_false",
                        help="leave out the 4-device curve")
    parser.add_argument("--launchers", default=",".join(name for _, name in LAUNCHERS),
                        help="the single-node launchers to measure, comma-separated")
    parser.add_argument("--merge", action="store_true",
                        help="keep what an existing --output holds of the rows this run does "
                             "not measure")
    args = parser.parse_args()
    results = kept(args)
    with tempfile.TemporaryDirectory() as scratch:
        for framework, launcher in LAUNCHERS:
            if launcher not in args.launchers.split(","):
                continue
            runs = [one_run(framework, launcher, repeat, Path(scratch))
                    for repeat in range(args.runs)]
            results["launchers"].append(summary(framework, launcher, runs))
            write(args, results)
        if args.slurm:
            results["launchers"].append(summary("torch", TWO_NODES,
                                                two_node_runs(args.runs, Path(scratch))))
            write(args, results)
        if args.leave_one_out:
            results["leave_one_out"] = leave_one_out_summary(
                [leave_one_out_run(repeat, Path(scratch)) for repeat in range(args.runs)])
            write(args, results)


def kept(args) -> dict:
    """With ``--merge``, the rows of an existing ``--output`` that this run does not measure
    again; otherwise none."""
    if not (args.merge and args.output and args.output.exists()):
        return {"launchers": []}
    before = json.loads(args.output.read_text())
    measured = set(args.launchers.split(","))
    if args.slurm:
        measured.add(TWO_NODES)
    results = {"launchers": [row for row in before["launchers"]
                             if row["launcher"] not in measured]}
    if not args.leave_one_out and "leave_one_out" in before:
        results["leave_one_out"] = before["leave_one_out"]
    return results


def write(args, results) -> None:
    """The results so far, after each launcher: a run stopped part-way keeps what it measured."""
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "the scaling model against 2-device cells, and a 4-device curve's "
                         "leave-one-out check", "config": {
                **SHAPE, "devices": [1, 2], "threads_per_device": 1, "runs": args.runs,
                "device_type": "cpu", "profile": True},
            "machine": machine(), **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
