"""Validate the CUDA paths on one real GPU and measure them, through the real command line.

    PYTHONPATH=. python3 bench/gpu_validation.py --out runs/gpu --output bench/results/gpu-h100.json

Steps, each a real ``scaling`` command:
1. ``scaling devices``: the GPU with the nvidia-smi fields;
2. ResNet-50 at 224 under torchrun on one GPU, batch 64 and 128 (the timed window between
   barriers, CUDA events for step times);
3. a batch that cannot fit, in a sweep with cells after it: it must end ``oom`` and the next
   cells must still run;
4. ``scaling maxbatch`` on the GPU's real memory, then, outside the finder, the answer b run again
   (must be ``ok``) and b + 1 (must be ``oom``).
The records and the checks go to ``--output`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

RECORD_KEYS = ("workload", "image_size", "batch_size", "total_devices", "status", "error",
               "images_per_sec", "step_time_median_s", "step_time_p95_s", "peak_memory_bytes",
               "capped_memory_peak_bytes", "memory_capacity_bytes", "device_name", "versions",
               "timed_window_s", "wall_s", "options")


def scaling(*args, check_codes=(0,)) -> subprocess.CompletedProcess:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "scaling", *map(str, args)],
                            capture_output=True, text=True)
    print(f"$ scaling {' '.join(map(str, args))}  [{time.monotonic() - started:.0f} s, "
          f"exit {result.returncode}]\n{result.stdout[-3000:]}{result.stderr[-2000:]}",
          flush=True)
    if result.returncode not in check_codes:
        raise SystemExit(f"scaling {args[0]} exited {result.returncode}")
    return result


def records(out_dir: Path) -> list:
    lines = (out_dir / "results.jsonl").read_text().splitlines()
    return [{k: r.get(k) for k in RECORD_KEYS} for r in map(json.loads, lines)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/gpu"))
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--oom-batch", type=int, default=4096)
    parser.add_argument("--maxbatch-min", type=int, default=256)
    args = parser.parse_args()
    results = {"devices": scaling("devices").stdout}

    throughput_dir = args.out / "resnet50"
    sweep = args.out / "resnet50.yaml"
    args.out.mkdir(parents=True, exist_ok=True)
    sweep.write_text(yaml.safe_dump({
        "name": "gpu-resnet50", "device_type": "gpu",
        "frameworks": {"torch": {"launchers": ["torchrun"]}}, "workloads": ["resnet50"],
        "devices": [1], "batch_sizes": [args.oom_batch, 64, 128], "image_size": 224,
        "steps": args.steps, "warmup": args.warmup, "timeout_s": 300,
    }))
    scaling("sweep", sweep, "--out", throughput_dir, "--resume")
    results["resnet50_fp32"] = records(throughput_dir)

    search_dir = args.out / "maxbatch"
    scaling("maxbatch", "--workload", "resnet50", "--image-size", 224, "--devices", 1,
            "--device-type", "gpu", "--min", args.maxbatch_min, "--multiple-of", 1,
            "--out", search_dir)
    found = [json.loads(line) for line in (search_dir / "results.jsonl").read_text().splitlines()]
    results["maxbatch_trials"] = [{k: r.get(k) for k in ("batch_size", "status", "wall_s",
                                                        "capped_memory_peak_bytes")}
                                  for r in found]
    import csv

    with open(search_dir / "maxbatch.csv") as table:
        answer = next(csv.DictReader(table))
    results["maxbatch"] = answer
    best = int(answer["max_batch"])
    check_dir = args.out / "maxbatch-check"
    for batch in (best, best + 1):
        scaling("run", "--workload", "resnet50", "--image-size", 224, "--devices", 1,
                "--device-type", "gpu", "--batch-size", batch, "--steps", 3, "--warmup", 1,
                "--out", check_dir, check_codes=(0, 1))
    results["maxbatch_check"] = records(check_dir)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
