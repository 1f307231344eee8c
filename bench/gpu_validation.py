"""Validate the CUDA paths on one real GPU and measure them, through the real command line.

    PYTHONPATH=. python3 bench/gpu_validation.py --part throughput --output bench/results/gpu-h100.json
    PYTHONPATH=. python3 bench/gpu_validation.py --part maxbatch --output bench/results/gpu-h100.json

``throughput``:
1. ``scaling devices``: the GPU with the nvidia-smi fields;
2. a sweep of ResNet-50 at 224 under torchrun on one GPU whose first batch cannot fit: it must
   end ``oom`` and the cells after it (batch 64 and 128, fp32) must still run;
3. the same batches with ``amp`` + ``channels_last``, then with ``cudnn_benchmark`` too, then
   batch 128 with ``compile`` as well;
4. AlexNet at 224, batch 128: ``forward``, ``forward_backward`` and ``train`` seconds per batch.

``maxbatch``: ``scaling maxbatch`` on the GPU's real memory, then, outside the finder, the answer
b run again (must be ``ok``) and b + 1 (must be ``oom``).

Each part adds its records and checks to the ``--output`` JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

RECORD_KEYS = ("workload", "mode", "image_size", "batch_size", "total_devices", "options",
               "status", "error", "images_per_sec", "step_time_median_s", "step_time_p95_s",
               "peak_memory_bytes", "capped_memory_peak_bytes", "memory_capacity_bytes",
               "device_name", "versions", "timed_window_s", "wall_s")
RESNET = ("--workload", "resnet50", "--image-size", 224, "--devices", 1, "--device-type", "gpu")
AMP_CL = ("--option", "amp=true", "--option", "channels_last=true")


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


def throughput(args) -> dict:
    results = {"devices": scaling("devices").stdout}
    sweep = args.out / "resnet50.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "gpu-resnet50", "device_type": "gpu",
        "frameworks": {"torch": {"launchers": ["torchrun"]}}, "workloads": ["resnet50"],
        "devices": [1], "batch_sizes": [args.oom_batch, 64, 128], "image_size": 224,
        "steps": args.steps, "warmup": args.warmup, "timeout_s": 300,
    }))
    cells = args.out / "cells"
    scaling("sweep", sweep, "--out", cells, "--resume", check_codes=(0, 1))  # oom_batch: oom
    timed = ("--steps", args.steps, "--warmup", args.warmup, "--out", cells)
    for batch in (64, 128):
        scaling("run", *RESNET, "--batch-size", batch, *AMP_CL, *timed)
        scaling("run", *RESNET, "--batch-size", batch, *AMP_CL,
                "--option", "cudnn_benchmark=true", *timed)
    scaling("run", *RESNET, "--batch-size", 128, *AMP_CL, "--option", "cudnn_benchmark=true",
            "--option", "compile=true", "--timeout", 600, *timed)
    for mode in ("forward", "forward_backward", "train"):
        scaling("run", "--workload", "alexnet", "--devices", 1, "--device-type", "gpu",
                "--batch-size", 128, "--mode", mode, *timed)
    results["cells"] = records(cells)
    return results


def maxbatch(args) -> dict:
    search = args.out / "maxbatch"
    scaling("maxbatch", *RESNET, "--min", args.maxbatch_min, "--multiple-of", 1,
            "--out", search)
    with open(search / "maxbatch.csv") as table:
        answer = next(csv.DictReader(table))
    best = int(answer["max_batch"])
    check = args.out / "maxbatch-check"
    for batch in (best, best + 1):
        scaling("run", *RESNET, "--batch-size", batch, "--steps", 3, "--warmup", 1,
                "--out", check, check_codes=(0, 1))
    return {"maxbatch": answer,
            "maxbatch_trials": [{k: r[k] for k in ("batch_size", "status", "wall_s",
                                                   "capped_memory_peak_bytes")}
                                for r in records(search)],
            "maxbatch_check": records(check)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("throughput", "maxbatch"), required=True)
    parser.add_argument("--out", type=Path, default=Path("runs/gpu"))
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--oom-batch", type=int, default=4096)
    parser.add_argument("--maxbatch-min", type=int, default=256)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = json.loads(args.output.read_text()) if args.output.exists() else {}
    results[args.part] = (throughput if args.part == "throughput" else maxbatch)(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
