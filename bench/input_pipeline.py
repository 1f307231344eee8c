"""Real input against synthetic: where decoding stops being the bound on this machine.

For each framework (its single launcher, one CPU device with every core): ResNet-50 at a small
size on real JPEGs with 0, 1 and 2 loader workers. Each real-data cell also times, in the same
process, the same steps on a synthetic batch and its input pipeline alone; the runs of one
framework alternate the worker counts. Reports per worker count the medians of the three
figures over the runs, real / synthetic with its interval, and the verdicts.

    python bench/input_pipeline.py --runs 3 --output bench/results/input_pipeline.json
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import alternating, harness_record, machine
from scaling import hardware
from scaling.launchers import default_python
from scaling.report.input import verdict
from scaling.uncertainty import repeats_interval

FRAMEWORKS = ("torch", "tensorflow", "mxnet", "jax")
WORKERS = (0, 1, 2)
SHAPE = {"workload": "resnet50", "image_size": 64, "batch_size": 16, "steps": 8, "warmup": 2}
DATA = {"images": 256, "size": 256, "classes": 4}


def make_data(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "scaling", "make-data", str(folder),
                    *(f"--{key}={value}" for key, value in DATA.items())], check=True)
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        data = make_data(Path(scratch) / "data")
        for framework in args.frameworks.split(","):
            records = {}

            def measure(workers, repeat):
                record = harness_record(
                    Path(scratch) / f"{framework}-{workers}-{repeat}", framework=framework,
                    launcher="single", devices=1, threads_per_device=hardware.cpu_cores(),
                    repeat=repeat, data=str(data), loader_workers=workers,
                    python=default_python(framework, "single"), **SHAPE)
                records.setdefault(workers, []).append(record)
                return record["images_per_sec"]

            alternating(args.runs, WORKERS, measure, framework)
            for workers in WORKERS:
                runs = records[workers]
                shares = [r["images_per_sec"] / r["synthetic_images_per_sec"] for r in runs]
                verdicts = [verdict(r) for r in runs]
                results.append({
                    "framework": framework, "loader_workers": workers,
                    **{f"{name}_median": statistics.median(r[name] for r in runs) for name in (
                        "images_per_sec", "synthetic_images_per_sec", "loader_images_per_sec")},
                    "real_over_synthetic_median": statistics.median(shares),
                    "real_over_synthetic_ci95": repeats_interval(shares),
                    "input_bound": [v["input_bound"] for v in verdicts],
                    "loader_workers_needed": [v["loader_workers_needed"] for v in verdicts],
                    "runs": [{key: r[key] for key in (
                        "images_per_sec", "synthetic_images_per_sec", "loader_images_per_sec")}
                        for r in runs]})
                line = results[-1]
                print(f"{framework}, {workers} workers: real {line['images_per_sec_median']:.1f}"
                      f", synthetic {line['synthetic_images_per_sec_median']:.1f}, pipeline "
                      f"alone {line['loader_images_per_sec_median']:.1f} img/s; real/synthetic "
                      f"{line['real_over_synthetic_median']:.2f}; input-bound "
                      f"{line['input_bound']}", flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "real input against synthetic, by loader workers", "config": {
                **SHAPE, "data": DATA, "launcher": "single", "devices": 1,
                "threads_per_device": hardware.cpu_cores(), "runs": args.runs,
                "device_type": "cpu"},
            "machine": machine(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
