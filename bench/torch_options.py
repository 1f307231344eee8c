"""What each torch option does to images/sec on CPU: harness cells, alternating runs, medians.

For each workload it runs the plain cell and one cell per option (``amp`` = bf16 autocast on
CPU, ``channels_last``, ``compile``) in turn, ``--runs`` times, rotating the order every run,
and reports each option's median images/sec and its ratio to the plain cell's median.
``cudnn_benchmark`` is left out: it changes nothing on CPU.

    python bench/torch_options.py --output bench/results/torch_options.json
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import harness_record, machine

VARIANTS = {"plain": {}, "amp": {"amp": True}, "channels_last": {"channels_last": True},
            "compile": {"compile": True}}
# workload, image size, batch, timed steps, warm-up steps
WORKLOADS = [("resnet50", 64, 8, 8, 2), ("cifar10", 32, 32, 30, 5)]


def measure(workload, size, batch, steps, warmup, options, repeat, scratch: Path) -> dict:
    record = harness_record(scratch, framework="torch", launcher="torchrun", workload=workload,
                            devices=1, batch_size=batch, image_size=size, steps=steps,
                            warmup=warmup, options=options, repeat=repeat, timeout_s=1800)
    report = json.loads((Path(record["log"]).parent / "rank0.json").read_text())
    return {"images_per_sec": record["images_per_sec"], "compile_s": report.get("compile_s")}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for workload, size, batch, steps, warmup in WORKLOADS:
            runs = {name: [] for name in VARIANTS}
            for repeat in range(args.runs):
                order = list(VARIANTS)[repeat % len(VARIANTS):] + \
                    list(VARIANTS)[:repeat % len(VARIANTS)]
                for name in order:
                    runs[name].append(measure(workload, size, batch, steps, warmup,
                                              VARIANTS[name], repeat, Path(scratch)))
                    print(f"{workload} run {repeat} {name}: "
                          f"{runs[name][-1]['images_per_sec']:.1f} img/s", flush=True)
            medians = {name: statistics.median(r["images_per_sec"] for r in runs[name])
                       for name in VARIANTS}
            results[workload] = {
                "image_size": size, "batch_size": batch, "steps": steps, "warmup": warmup,
                "runs": runs, "median_images_per_sec": medians,
                "ratio_to_plain": {name: medians[name] / medians["plain"] for name in VARIANTS},
            }
            print(workload, {name: f"{ratio:.3f}"
                             for name, ratio in results[workload]["ratio_to_plain"].items()})
    output = {
        "benchmark": "torch options on CPU, one device, harness cells",
        "machine": machine(),
        "runs": args.runs, "workloads": results,
    }
    if args.output:
        args.output.write_text(json.dumps(output, indent=2) + "\n")


if __name__ == "__main__":
    main()
