"""The quickstart, run several times back to back: do numbers that compare different cells
hold from one run to the next?

Runs ``configs/quickstart.yaml`` RUNS times, each into its own folder, and for every point of
every curve reports each run's efficiency with its interval, and for each launcher its
``parallel_overhead``. Checks, as a newcomer would read them:

- every point's efficiency intervals overlap across the runs;
- no efficiency is above 100% beyond its interval;
- each launcher's ``parallel_overhead`` has one sign in every run whose interval leaves out 0;
- the model: each multi-device point's measured / predicted ratio (the report's
  ``prediction_ratio``, the median of its repeats), and its median over the runs, within 10%.

    python bench/quickstart_repeat.py --runs 3 --output bench/results/quickstart_repeat.json
"""

import argparse
import json
import subprocess
import sys
import statistics
import time
from pathlib import Path

from benchlib import machine
from scaling.execute.store import ResultStore
from scaling.execute.wall import window_share
from scaling.report.model import with_predictions
from scaling.report.curves import series_key
from scaling.report.tables import cell_summary, with_scaling

ROOT = Path(__file__).resolve().parents[1]
TERMS = ("repeat", "images_per_sec", "baseline_images_per_sec", "launcher_s", "contention_s",
         "interference_s", "allreduce_time_s", "predicted_images_per_sec", "prediction_ratio",
         "loss_term")
"""Each multi-device repeat's inputs and terms of the model, as the record has them."""


def one_run(out: Path) -> dict:
    """Run the quickstart into ``out``; its points (efficiency, interval) and overheads."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scaling", "sweep", str(ROOT / "configs" /
                                                                  "quickstart.yaml"),
                    "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    rows = with_predictions(with_scaling(ResultStore(out).records()))
    groups = {}
    for row in rows:
        if row["launcher"] != "single":
            groups.setdefault((row["workload"], row["batch_size"], row["launcher"],
                               row["total_devices"]), []).append(row)
    points = {}
    for (workload, batch, launcher, devices), group in sorted(groups.items()):
        summary = cell_summary(group)
        ratios = [row["prediction_ratio"] for row in group
                  if devices > 1 and row.get("prediction_ratio") is not None]
        points[f"{workload} b{batch} {launcher} x{devices}"] = {
            "images_per_sec": summary["images_per_sec"],
            "efficiency": summary["efficiency"],
            "efficiency_interval": [summary["efficiency_low"], summary["efficiency_high"]],
            "baseline_drift": group[0]["baseline_drift"],
            "marks": [name for name in ("suspect", "noisy", "drifted") if summary[name]],
            "parallel_overhead": group[0]["parallel_overhead"],
            "parallel_overhead_interval": [group[0]["parallel_overhead_low"],
                                           group[0]["parallel_overhead_high"]],
            "prediction_ratio": statistics.median(ratios) if ratios else None,
            "model_terms": [{name: row.get(name) for name in TERMS} for row in group
                            if devices > 1],
        }
    sweep_s = time.perf_counter() - started
    share = window_share(ResultStore(out).records())
    return {"folder": str(out), "sweep_s": sweep_s, "windows_s": share["window_s"],
            "window_share_of_sweep": share["window_s"] / sweep_s,
            "curves": len({series_key(row) for row in rows}), "points": points}


def checks(runs: list) -> dict:
    """The three checks over ``runs``, each with the points that fail it."""
    names = sorted(set.intersection(*(set(run["points"]) for run in runs)))
    disjoint, above, flipped = [], [], []
    for name in names:
        intervals = [run["points"][name]["efficiency_interval"] for run in runs]
        if None in (end for interval in intervals for end in interval):
            disjoint.append(f"{name}: no interval")
        elif max(low for low, _ in intervals) > min(high for _, high in intervals):
            disjoint.append(name)
        above += [name for low, _ in intervals if low is not None and low > 1]
        overheads = [(run["points"][name]["parallel_overhead"],
                      run["points"][name]["parallel_overhead_interval"]) for run in runs]
        if name.endswith("x1") and None not in (value for value, _ in overheads):
            # A run's sign counts where its interval leaves out 0; one that holds 0 agrees
            # with either.
            signs = {value > 0 for value, (low, high) in overheads
                     if low is None or not low <= 0 <= high}
            if len(signs) > 1:
                flipped.append(name)
    ratios = {name: statistics.median(run["points"][name]["prediction_ratio"] for run in runs)
              for name in names if all(run["points"][name]["prediction_ratio"] is not None
                                       for run in runs)}
    return {"points": len(names), "intervals_disjoint": disjoint,
            "prediction_ratio_median": ratios,
            "model_outside_10pct": sorted(name for name, ratio in ratios.items()
                                          if abs(ratio - 1) > 0.1),
            "efficiency_above_100_beyond_interval": sorted(set(above)),
            "parallel_overhead_sign_flips": flipped}


def table(runs: list) -> str:
    """The runs side by side, as the closing note and bench/README.md give them."""
    lines = ["| point | " + " | ".join(f"run {index + 1}" for index in range(len(runs)))
             + " |", "| --- |" + " --- |" * len(runs)]
    for name in sorted(runs[0]["points"]):
        cells = []
        for run in runs:
            point = run["points"].get(name)
            if point is None or point["efficiency"] is None:
                cells.append("-")
                continue
            low, high = point["efficiency_interval"]
            text = f"{point['efficiency']:.0%} [{low:.0%}, {high:.0%}]" if low is not None \
                else f"{point['efficiency']:.0%}"
            if name.endswith("x1") and point["parallel_overhead"] is not None:
                text += f", overhead {point['parallel_overhead']:+.1%}"
            if point["prediction_ratio"] is not None:
                text += f", measured/predicted {point['prediction_ratio']:.2f}"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scratch", type=Path, default=ROOT / "runs" / "quickstart-repeat")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    runs = []
    for index in range(args.runs):
        out = args.scratch / f"run{index + 1}"
        if out.exists():
            raise SystemExit(f"{out} exists: choose another --scratch")
        runs.append(one_run(out))
        print(f"run {index + 1}: {runs[-1]['sweep_s']:.0f} s, "
              f"{runs[-1]['window_share_of_sweep']:.0%} in windows", flush=True)
    result = {"benchmark": "quickstart_repeat", "machine": machine(),
              "config": (ROOT / "configs" / "quickstart.yaml").read_text(), "runs": runs,
              "checks": checks(runs)}
    print(table(runs))
    print(json.dumps(result["checks"], indent=1))
    if args.output:
        args.output.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
