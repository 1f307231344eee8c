"""Speedup and efficiency against a measured one-device baseline, as tables and CSV.

Scaling here is weak scaling: the per-device batch is fixed, so N devices process N times the
images per step. Speedup = images/sec on N devices / images/sec on one device, for the same
framework, launcher, workload, per-device batch, image size and device type. Efficiency =
speedup / N. A cell with no successful one-device baseline has no speedup, and a failed cell
shows its status; neither is ever shown as 0.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from rich.table import Table

CSV_COLUMNS = [
    "cell", "framework", "launcher", "workload", "device_type", "devices", "nodes",
    "total_devices", "batch_size", "global_batch_size", "image_size", "repeat", "status",
    "images_per_sec", "baseline_images_per_sec", "speedup", "efficiency",
    "step_time_median_s", "step_time_p95_s", "peak_memory_bytes", "params", "error",
    "steps", "warmup", "threads_per_device", "memory_limit", "options", "device_name",
    "versions", "host", "harness_version", "started_at",
]


def series_key(record: Dict) -> Tuple:
    """Records that share this key form one scaling curve."""
    return (record["framework"], record["launcher"], record["workload"], record["batch_size"],
            record["image_size"], record["device_type"],
            json.dumps(record.get("options") or {}, sort_keys=True))


def baselines(records: List[Dict]) -> Dict[Tuple, float]:
    """Median one-device images/sec of each curve, over its successful repeats."""
    ones = defaultdict(list)
    for record in records:
        if record["total_devices"] == 1 and record["status"] == "ok":
            ones[series_key(record)].append(record["images_per_sec"])
    return {key: statistics.median(values) for key, values in ones.items()}


def speedup_vs_linear(images_per_sec: Optional[float], baseline: Optional[float],
                      devices: int) -> Tuple[Optional[float], Optional[float]]:
    """(speedup, efficiency); None for each when the cell failed or has no baseline."""
    if images_per_sec is None or baseline is None:
        return None, None
    speedup = images_per_sec / baseline
    return speedup, speedup / devices


def with_scaling(records: List[Dict]) -> List[Dict]:
    """Sweep records with ``baseline_images_per_sec``, ``speedup`` and ``efficiency`` added."""
    base = baselines(records)
    rows = []
    for record in records:
        if record.get("purpose", "sweep") != "sweep":
            continue
        baseline = base.get(series_key(record))
        ips = record["images_per_sec"] if record["status"] == "ok" else None
        speedup, efficiency = speedup_vs_linear(ips, baseline, record["total_devices"])
        rows.append({**record, "baseline_images_per_sec": baseline, "speedup": speedup,
                     "efficiency": efficiency})
    return rows


def write_csv(rows: List[Dict], path) -> None:
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({
                key: (json.dumps(value, sort_keys=True) if isinstance(value, (dict, list))
                      else "" if value is None else value)
                for key, value in row.items()
            })


def _cell_text(group: List[Dict]) -> str:
    ok = [row for row in group if row["status"] == "ok"]
    if not ok:
        return group[0]["status"].upper()
    ips = statistics.median(row["images_per_sec"] for row in ok)
    speedups = [row["speedup"] for row in ok if row["speedup"] is not None]
    if not speedups:
        return f"{ips:,.1f} (no baseline)"
    speedup = statistics.median(speedups)
    return f"{ips:,.1f} ({speedup:.2f}x, {speedup / ok[0]['total_devices']:.0%})"


def scaling_tables(rows: List[Dict]) -> List[Table]:
    """One table per workload and image size, like the published ones: images/sec by
    (framework, launcher, per-device batch) and device count, with speedup and efficiency, and
    failed cells marked OOM, TIMEOUT, CRASHED or ERROR."""
    by_workload = defaultdict(list)
    for row in rows:
        by_workload[(row["workload"], row["image_size"], row["device_type"])].append(row)
    tables = []
    for (workload, size, device_type), group in sorted(by_workload.items()):
        counts = sorted({row["total_devices"] for row in group})
        table = Table(title=f"{workload} at {size}x{size} on {device_type}: images/sec "
                            "(speedup, efficiency), per-device batch")
        for header in ("framework", "launcher", "batch"):
            table.add_column(header)
        for count in counts:
            table.add_column(f"{count} {device_type.upper()}", justify="right")
        cells = defaultdict(list)
        for row in group:
            cells[(row["framework"], row["launcher"], row["batch_size"], row["total_devices"])
                  ].append(row)
        for framework, launcher, batch in sorted({key[:3] for key in cells}):
            table.add_row(framework, launcher, str(batch), *(
                _cell_text(cells[(framework, launcher, batch, count)])
                if (framework, launcher, batch, count) in cells else "-"
                for count in counts
            ))
        tables.append(table)
    return tables


def report(out_dir, records: List[Dict]) -> Tuple[List[Dict], Path]:
    rows = with_scaling(records)
    path = Path(out_dir) / "results.csv"
    write_csv(rows, path)
    return rows, path
