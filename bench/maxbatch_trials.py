"""Trials and wall time to the exact largest batch: the model-guided search against plain
doubling-then-bisection started from the same size, on the same workload and memory cap.

    python bench/maxbatch_trials.py --output bench/results/maxbatch_trials.json
"""

import argparse
import json
import tempfile
from pathlib import Path

from scaling import hardware
from scaling.maxbatch.search import TrialRunner, find_max_batches, trial_factory
from scaling.units import parse_bytes

CASES = [
    # workload, image size, memory caps
    ("cifar10", 32, ["1.25GiB", "1.5GiB"]),
    ("resnet50", 32, ["1.75GiB", "2.25GiB"]),
]


def search(workload, size, cap, strategy, start, scratch):
    make_trial = trial_factory(framework="torch", launcher="torchrun", workload=workload,
                               image_size=size, steps=2, warmup=1, device_type="cpu",
                               memory_limit=parse_bytes(cap), timeout_s=600)
    [found] = find_max_batches(make_trial, [1], 1, start, None,
                               TrialRunner(Path(scratch) / f"{workload}-{cap}-{strategy}"),
                               strategy, confirm=strategy == "model")
    return {"max_batch": found.max_batch, "min_oom_batch": found.min_oom_batch,
            "trials": found.trials, "seconds": found.seconds, "status": found.status,
            "error": found.error}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=int, default=4)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for workload, size, caps in CASES:
            for cap in caps:
                model = search(workload, size, cap, "model", args.start, scratch)
                doubling = search(workload, size, cap, "doubling", args.start, scratch)
                row = {"workload": workload, "image_size": size, "memory_limit": cap,
                       "model": model, "doubling": doubling,
                       "same_answer": model["max_batch"] == doubling["max_batch"],
                       "trial_ratio": model["trials"] / doubling["trials"],
                       "time_ratio": model["seconds"] / doubling["seconds"]}
                rows.append(row)
                print(f"{workload} {cap}: max batch {model['max_batch']} "
                      f"(doubling {doubling['max_batch']}), trials {model['trials']} vs "
                      f"{doubling['trials']} ({row['trial_ratio']:.0%}), seconds "
                      f"{model['seconds']:.0f} vs {doubling['seconds']:.0f}", flush=True)
    result = {
        "benchmark": "max-batch search: model-guided vs doubling-then-bisection",
        "config": {"start": args.start, "granularity": 1, "devices": 1, "steps": 2,
                   "warmup": 1, "confirmation_runs": "model only: the smallest OOM once "
                                                     "more, the answer by at least two plain "
                                                     "cells; the baseline stops at its answer"},
        "machine": {"cpu_model": hardware.cpu_model(), "cores": hardware.cpu_cores()},
        "cases": rows,
    }
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
