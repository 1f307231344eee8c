"""`single` beside a launcher at one device, path by path: what each cell's rank process is
while its window runs, seen from outside, and where the two cells' paces part.

Each run alternates the two cells (the order reversed every other run) on the quickstart's
small step (cifar10 at 32 px, batch 16, one CPU device of one thread). While a cell runs, a
thread looks at every process that carries the cell's token every 0.2 s and keeps, for the
training rank (the process of the cell that ran longest on the CPU), its thread count, its
core affinity, and the environment names that steer threads and memory (OpenMP, MKL, the
allocator's, ``LD_PRELOAD``). After the cell, the rank's report gives its window's chunks: their
spread within the window (what a window's interval covers) against the spread of the windows'
figures between runs (what only repeats show).

    python bench/baseline_paths.py --launcher torchrun --runs 4 --output bench/results/baseline_paths.json
"""

import argparse
import json
import statistics
import tempfile
import threading
from pathlib import Path

import psutil
from benchlib import alternating, harness_record, machine

from scaling.execute.processes import TOKEN_ENV

SHAPE = {"workload": "cifar10", "image_size": 32, "batch_size": 16, "steps": 40, "warmup": 5,
         "min_time_s": 3}
STEERING = ("OMP_", "MKL_", "KMP_", "GOMP_", "MALLOC_", "LD_PRELOAD", "TORCH_", "PYTORCH_")


def steering_env(environ: dict) -> dict:
    return {key: value for key, value in sorted(environ.items())
            if key.startswith(STEERING)}


class Observer:
    """Every process of the cell (any process carrying a harness token, while this cell is
    the only one running), looked at until stopped."""

    def __init__(self):
        self.seen, self.done = {}, threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self):
        while not self.done.wait(0.2):
            for proc in psutil.process_iter(["pid", "cmdline"]):
                try:
                    environ = proc.environ()
                    if TOKEN_ENV not in environ:
                        continue
                    with proc.oneshot():
                        cpu = proc.cpu_times()
                        self.seen[proc.pid] = {
                            "cmdline": " ".join(proc.info["cmdline"] or [])[-120:],
                            "cpu_s": cpu.user + cpu.system,
                            "threads": max(proc.num_threads(),
                                           self.seen.get(proc.pid, {}).get("threads", 0)),
                            "affinity": sorted(proc.cpu_affinity()),
                            "environment": steering_env(environ)}
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def rank(self) -> dict:
        """The process that ran longest on the CPU: the training rank."""
        return max(self.seen.values(), key=lambda seen: seen["cpu_s"])


def run_side(launcher: str, repeat: int, scratch: Path, facts: dict) -> float:
    with Observer() as observer:
        record = harness_record(scratch / launcher, framework="torch", launcher=launcher,
                                devices=1, threads_per_device=1, repeat=repeat, **SHAPE)
    [report] = [json.loads(path.read_text())
                for path in Path(record["log"]).parent.glob("rank*.json")]
    chunk_rates = [chunk["steps"] / chunk["seconds"] for chunk in report["chunks"]]
    facts.setdefault(launcher, []).append({
        "images_per_sec": record["images_per_sec"], "processes": len(observer.seen),
        "rank": observer.rank(),
        "window_chunks": len(chunk_rates),
        "chunk_cv": statistics.stdev(chunk_rates) / statistics.fmean(chunk_rates)})
    return record["images_per_sec"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launcher", default="torchrun")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    facts: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        figures = alternating(args.runs, ("single", args.launcher), lambda side, repeat: run_side(
            side, repeat, Path(scratch), facts), label="torch cifar10")
    summary = {}
    for side, runs in facts.items():
        rates = figures[side]
        summary[side] = {
            "median_images_per_sec": statistics.median(rates),
            "between_runs_cv": statistics.stdev(rates) / statistics.fmean(rates),
            "within_window_chunk_cv_median": statistics.median(r["chunk_cv"] for r in runs),
            "rank_threads": sorted({r["rank"]["threads"] for r in runs}),
            "rank_affinity": sorted({tuple(r["rank"]["affinity"]) for r in runs}),
            "rank_environment": [dict(e) for e in {tuple(r["rank"]["environment"].items())
                                                   for r in runs}]}
    result = {"benchmark": "single beside a launcher at one device, path by path",
              "shape": SHAPE, "threads_per_device": 1, "runs": args.runs,
              "machine": machine(), "summary": summary, "runs_seen": facts}
    print(json.dumps(summary, indent=2))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
