"""Speedup and efficiency against a measured one-device baseline, as tables and CSV.

Scaling here is weak scaling: the per-device batch is fixed, so N devices process N times the
images per step. Speedup = images/sec on N devices / images/sec of the curve's baseline: the
``single`` cell (one device, no data-parallel wrapper) of the same framework and its version,
workload, per-device batch, image size, device type, options, threads and mode, or the
curve's own one-device point where that cell did not run (see ``scaling.report.baseline``).
Efficiency = speedup / N. Only sweep cells make curves and baselines (never max-batch trials).
A cell with no successful baseline has no speedup, and a failed cell shows its status; neither
is ever shown as 0.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from scaling.report.baseline import (Baseline, baselines, drift_reason, figure_interval,
                                     nearest_gap_s, started)
from scaling.report.curves import Row, baseline_key, curve_fields, reported_version
from scaling.report.cost import sweep_prices, with_costs
from scaling.report.input import with_input_verdicts
from scaling.report.model import with_predictions
from scaling.report.references import with_shared_references
from scaling.report.results_csv import write_csv
from scaling.uncertainty import ratio_interval

SUSPECT_EFFICIENCY = 1.05
"""Efficiency above this is beyond linear scaling: contention in the baseline, or noise."""
SUSPECT_WIDTH = 0.10
"""An interval wider than this fraction of its figure does not pin the figure down."""


def with_framework_versions(records: List[Dict]) -> List[Dict]:
    """Sweep records with ``framework_version``, as rows (:class:`Row`: each keeps its curve's
    fields, worked out once). A cell that failed before its workers said (a crash at start-up)
    takes the version of the other cells of its curve, where they agree."""
    sweep = [record for record in records if record.get("purpose", "sweep") == "sweep"]
    curves = [curve_fields(record) for record in sweep]
    reported = [reported_version(record) for record in sweep]
    seen = defaultdict(set)
    for curve, version in zip(curves, reported):
        if version:
            seen[curve].add(version)
    rows = []
    for record, curve, version in zip(sweep, curves, reported):
        versions = seen[curve]
        fallback = next(iter(versions)) if len(versions) == 1 else ""
        rows.append(Row(record, curve, framework_version=version or fallback))
    return rows


def suspect_reason(images_per_sec: float, interval: Optional[List[float]],
                   efficiency: Optional[float]) -> Optional[str]:
    """Why a figure should not be taken as it is, or None."""
    reasons = []
    if efficiency is not None and efficiency > SUSPECT_EFFICIENCY:
        reasons.append(f"efficiency {efficiency:.0%} is beyond linear scaling")
    if interval and (interval[1] - interval[0]) / images_per_sec > SUSPECT_WIDTH:
        reasons.append(f"the 95% interval spans {(interval[1] - interval[0]) / images_per_sec:.0%}"
                       f" of the figure")
    return "; ".join(reasons) or None


def speedup_vs_linear(images_per_sec: Optional[float], baseline: Optional[float],
                      devices: int) -> Tuple[Optional[float], Optional[float]]:
    """(speedup, efficiency); None for each when the cell failed or has no baseline."""
    if images_per_sec is None or baseline is None:
        return None, None
    speedup = images_per_sec / baseline
    return speedup, speedup / devices


def scaling_interval(speedup: Optional[float], interval: Optional[List[float]],
                     images_per_sec: Optional[float], baseline: Tuple, devices: int,
                     own_baseline: bool) -> Dict:
    """Speedup and efficiency bounds; None where either figure has no interval, and for the
    point that is its curve's own baseline (``own_baseline``), whose speedup is 1 by
    definition."""
    bounds = None
    if speedup is not None and not own_baseline:
        bounds = ratio_interval(speedup, interval, images_per_sec, baseline[1], baseline[0])
    low, high = bounds or (None, None)
    return {"speedup_low": low, "speedup_high": high,
            "efficiency_low": low / devices if bounds else None,
            "efficiency_high": high / devices if bounds else None}


def with_scaling(records: List[Dict]) -> List[Dict]:
    """Sweep records (never max-batch trials) with the columns of ``SCALING_FIELDS`` added:
    ``framework_version``, the references their point timed once, the baseline, speedup and efficiency, their intervals, and
    ``suspect``."""
    rows = with_shared_references(with_framework_versions(records))
    keys = [baseline_key(row) for row in rows]
    base = baselines(rows, baseline_key, keys)
    for row, key in zip(rows, keys):
        found = base.get(key)
        baseline = (found.images_per_sec, found.ci95) if found else (None, None)
        ips = row["images_per_sec"] if row["status"] == "ok" else None
        speedup, efficiency = speedup_vs_linear(ips, baseline[0], row["total_devices"])
        interval = row.get("images_per_sec_ci95") if ips is not None else None
        overhead = found.parallel_overhead_ci95 if found else None
        row.update(baseline_images_per_sec=baseline[0], speedup=speedup, efficiency=efficiency,
                   images_per_sec_low=interval[0] if interval else None,
                   images_per_sec_high=interval[1] if interval else None,
                   baseline_ci95=baseline[1],
                   baseline_launcher=found.launcher if found else None,
                   baseline_local_step_s=found.local_step_s if found else None,
                   baseline_reason=found.reason if found else None,
                   parallel_overhead=found.parallel_overhead if found else None,
                   parallel_overhead_low=overhead[0] if overhead else None,
                   parallel_overhead_high=overhead[1] if overhead else None,
                   suspect=suspect_reason(ips, interval, efficiency) if ips else None,
                   **drift_fields(row, found, ips, interval),
                   **scaling_interval(speedup, interval, ips, baseline, row["total_devices"],
                                      own_baseline(row, found.launcher if found else None)))
    return rows


def drift_fields(row: Dict, found: Optional[Baseline], images_per_sec: Optional[float],
                 interval: Optional[List[float]]) -> Dict:
    """How the row's baseline moved while its curve ran: ``baseline_drift``, its
    ``baseline_measurements``, ``baseline_gap_s`` (to the nearest of them), the hosts they
    ran on (``baseline_hosts``) and ``drifted``, the reason where the drift exceeds the
    point's own interval (never on a baseline's own measurements). Each is looked up in what
    the baseline worked out once (its starts, cells and hosts), never by scanning its
    measurements per row."""
    if not found:
        return dict.fromkeys(("baseline_drift", "baseline_measurements", "baseline_gap_s",
                              "baseline_hosts", "drifted"))
    measured = len(found.measurements)
    itself = row["cell"] in found.cells
    return {"baseline_drift": found.drift, "baseline_measurements": measured,
            "baseline_gap_s": None if itself else nearest_gap_s(started(row), found.starts),
            "baseline_hosts": list(found.hosts),
            "drifted": None if itself or images_per_sec is None else
            drift_reason(found.drift, measured, interval, images_per_sec)}


def own_baseline(row: Dict, baseline_launcher: Optional[str]) -> bool:
    """Whether the row is its curve's baseline: a one-device point measured against itself."""
    return row["total_devices"] == 1 and baseline_launcher in (None, row["launcher"])


def cell_summary(group: List[Dict]) -> Dict:
    """The repeats of one curve point as one cell of a table: its status (``ok`` if any repeat
    is), the median images/sec with its interval (``interval``, ``plus_minus``), speedup and
    efficiency with theirs, ``suspect``, ``noisy``, ``drifted`` and ``straggler`` (reasons or
    None), and the median seconds per batch for modes other than ``train`` (as the
    forward-only reference tables give them)."""
    ok = [row for row in group if row["status"] == "ok"]
    if not ok:
        return {"status": group[0]["status"], "error": group[0].get("error")}
    speedups = [row["speedup"] for row in ok if row["speedup"] is not None]
    speedup = statistics.median(speedups) if speedups else None
    devices = ok[0]["total_devices"]
    images_per_sec = statistics.median(row["images_per_sec"] for row in ok)
    interval = figure_interval(ok)
    baseline = (ok[0]["baseline_images_per_sec"], ok[0]["baseline_ci95"])
    efficiency = speedup / devices if speedup is not None else None
    itself = own_baseline(ok[0], ok[0]["baseline_launcher"])
    return {
        "status": "ok",
        "images_per_sec": images_per_sec,
        "interval": interval,
        "plus_minus": (interval[1] - interval[0]) / 2 if interval else None,
        "speedup": speedup,
        "efficiency": efficiency,
        **scaling_interval(speedup, interval, images_per_sec, baseline, devices, itself),
        "suspect": suspect_reason(images_per_sec, interval, efficiency),
        "drifted": None if itself else drift_reason(
            ok[0]["baseline_drift"], ok[0]["baseline_measurements"], interval, images_per_sec),
        "noisy": "; ".join(dict.fromkeys(row["noise"] for row in ok if row.get("noisy")))
        or None,
        "straggler": "; ".join(dict.fromkeys(row["straggler"] for row in ok
                                             if row.get("straggler"))) or None,
        "seconds_per_batch": statistics.median(row["step_time_median_s"] for row in ok)
        if ok[0].get("mode", "train") != "train" else None,
    }


def figure_text(summary: Dict) -> str:
    """``1,234.5 ± 12.3``: images/sec and half its interval (no ``±`` without one)."""
    text = f"{summary['images_per_sec']:,.1f}"
    return text + (f" ± {summary['plus_minus']:,.1f}" if summary["plus_minus"] else "")


def scaling_text(summary: Dict) -> str:
    """``(1.80x ± 0.05, 90%)``, or ``(no baseline)``."""
    if summary["speedup"] is None:
        return "(no baseline)"
    spread = ""
    if summary["speedup_low"] is not None:
        spread = f" ± {(summary['speedup_high'] - summary['speedup_low']) / 2:.2f}"
    return f"({summary['speedup']:.2f}x{spread}, {summary['efficiency']:.0%})"


SUSPECT_MARK = "?"
"""Appended to a suspect figure in the terminal tables; the table's caption says why."""
NOISY_MARK = "!"
"""Appended to a figure measured while other processes were busy; the caption says how busy."""
DRIFT_MARK = "~"
"""Appended to a figure whose baseline moved more than the figure's own interval is wide."""
STRAGGLER_MARK = "^"
"""Appended to a figure whose slowest rank took 1.2x the ranks' median or more."""
MARKS = ((SUSPECT_MARK, "suspect"), (NOISY_MARK, "noisy"), (DRIFT_MARK, "drifted"),
         (STRAGGLER_MARK, "straggler"))
"""Each mark and the summary field that holds its reason."""


def cell_text(summary: Dict) -> str:
    if summary["status"] != "ok":
        return summary["status"].upper()
    text = f"{figure_text(summary)} {scaling_text(summary)}"
    if summary["seconds_per_batch"] is not None:
        text += f" {summary['seconds_per_batch']:.4f} s/batch"
    marks = "".join(mark for mark, name in MARKS if summary[name])
    return text + (f" {marks}" if marks else "")


def workload_groups(rows: List[Dict]) -> Dict[Tuple, List[Dict]]:
    """Rows by (workload, image size, device type): the unit of every per-workload table and
    figure."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row["workload"], row["image_size"], row["device_type"])].append(row)
    return dict(sorted(groups.items()))


def report(out_dir, records: List[Dict], prices: Optional[Dict[str, float]] = None
           ) -> Tuple[List[Dict], Path]:
    rows = with_costs(with_input_verdicts(with_predictions(with_scaling(records))),
                      {**sweep_prices(out_dir), **(prices or {})})
    path = Path(out_dir) / "results.csv"
    write_csv(rows, path)
    return rows, path
