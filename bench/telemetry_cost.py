"""What sampling costs: the same harness cell with telemetry on and off, alternating.

With telemetry on, a thread of the harness samples the cell's processes (and GPUs) every half
second; off, nothing samples the cell. Reports the median images/sec of each and their ratio
(on / off). Target: the ratio stays above 0.99.

    python bench/telemetry_cost.py --output bench/results/telemetry_cost.json
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import harness_record, machine

from scaling.execute.monitor import SAMPLE_S, WatchSettings


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", default="torch")
    parser.add_argument("--workload", default="cifar10")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    runs = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.runs):
            order = ("on", "off") if repeat % 2 == 0 else ("off", "on")
            for name in order:
                record = harness_record(
                    Path(scratch), framework=args.framework, launcher=None,
                    workload=args.workload, devices=args.devices, batch_size=args.batch_size,
                    image_size=args.image_size, steps=args.steps, warmup=5, repeat=repeat,
                    watch=WatchSettings(telemetry=name == "on"))
                runs[name].append(record["images_per_sec"])
            print(f"run {repeat}: on {runs['on'][-1]:.1f} img/s, off {runs['off'][-1]:.1f} img/s",
                  flush=True)
    medians = {name: statistics.median(values) for name, values in runs.items()}
    result = {
        "benchmark": "telemetry sampling on vs off, same harness cell, alternating",
        "config": {**vars(args), "output": None, "sample_s": SAMPLE_S, "device_type": "cpu"},
        "machine": machine(),
        "images_per_sec": runs, "median_images_per_sec": medians,
        "ratio_on_to_off": medians["on"] / medians["off"],
    }
    print(f"median on {medians['on']:.1f}, off {medians['off']:.1f}, "
          f"ratio {result['ratio_on_to_off']:.3f}")
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
