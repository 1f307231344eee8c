"""An outside check of the harness's images/sec.

Times whole harness runs of the same cell from outside, at N and at 2N timed steps, alternating.
The extra images of the longer run over its extra wall time is a throughput that start-up,
model building, warm-up and shut-down cannot touch, since both runs pay them. It must agree with
the harness's own figure: target within 2% on a quiet machine. Reports, per framework, the
median of (outside / harness) over the pairs with its 95% interval.

    python bench/outside_check.py --output bench/results/outside_check.json
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchlib import harness_record, machine
from scaling.uncertainty import repeats_interval

SETUPS = {"torch": {"steps": 150, "batch_size": 32},
          "tensorflow": {"steps": 300, "batch_size": 32}}


def timed(scratch: Path, framework: str, steps: int, batch_size: int, repeat: int):
    started = time.perf_counter()
    record = harness_record(scratch, framework=framework, launcher=None, workload="cifar10",
                            devices=2, batch_size=batch_size, image_size=32, steps=steps,
                            warmup=5, repeat=repeat)
    return time.perf_counter() - started, record


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default="torch,tensorflow")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for framework in args.frameworks.split(","):
            setup = SETUPS[framework]
            pairs = []
            for repeat in range(args.pairs):
                lengths = (1, 2) if repeat % 2 == 0 else (2, 1)
                runs = {n: timed(Path(scratch), framework, setup["steps"] * n,
                                 setup["batch_size"], repeat) for n in lengths}
                (short_s, short), (long_s, long) = runs[1], runs[2]
                extra = long["timed_images"] - short["timed_images"]
                outside = extra / (long_s - short_s)
                harness = statistics.fmean([short["images_per_sec"], long["images_per_sec"]])
                pairs.append({"outside_images_per_sec": outside,
                              "harness_images_per_sec": harness, "ratio": outside / harness,
                              "wall_s": [short_s, long_s]})
                print(f"{framework} pair {repeat}: outside {outside:.1f}, harness {harness:.1f}, "
                      f"ratio {outside / harness:.3f}", flush=True)
            ratios = [pair["ratio"] for pair in pairs]
            results[framework] = {**setup, "pairs": pairs,
                                  "median_ratio": statistics.median(ratios),
                                  "ratio_ci95": repeats_interval(ratios)}
            print(f"{framework}: median ratio {results[framework]['median_ratio']:.3f}, "
                  f"95% interval {results[framework]['ratio_ci95']}")
    output = {"benchmark": "outside check: (extra images / extra wall time) over the harness "
                           "figure, cifar10 32x32, 2 CPU devices",
              "machine": machine(), "results": results}
    if args.output:
        args.output.write_text(json.dumps(output, indent=2) + "\n")


if __name__ == "__main__":
    main()
