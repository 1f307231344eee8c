"""``scaling compare BASE NEW``: the cells two output folders share, new against base.

A cell is matched on what it measures (framework, launcher, workload, per-device batch, image
size, device type, options, mode, device unit, nodes and total devices), not on the framework
version or the repeat, so an upgrade is compared against what it replaced. Each side's figure
is the median images/sec over its successful repeats, with the interval of
``figure_interval``: the spread between the repeats combined with their windows' own where
there are several, from the record's chunk times otherwise (a record without one has an
interval of zero width).

Verdicts: a change within the threshold is ``same``. A larger change whose intervals overlap is
``within noise``. Otherwise it is a ``regression`` or an ``improvement``. A cell that was ok and
now fails is a regression, and one that failed and is now ok an improvement.

The nodes' fingerprints that each folder's records reference are compared too: a field whose
values over one folder's fingerprints differ from those over the other's is named.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from scaling.errors import ScalingError
from scaling.execute.fingerprint import differing_fields, read_fingerprints
from scaling.report.baseline import figure_interval
from scaling.report.curves import curve_fields

VERDICTS = ("regression", "improvement", "within noise", "same", "still failing")
COMPARE_COLUMNS = ["framework", "launcher", "workload", "batch_size", "image_size",
                   "device_type", "options", "mode", "threads_per_device", "nodes",
                   "total_devices", "base_status",
                   "base_images_per_sec", "base_low", "base_high", "new_status",
                   "new_images_per_sec", "new_low", "new_high", "change", "verdict"]


@dataclass(frozen=True)
class Figure:
    """One side of a compared cell."""

    status: str
    images_per_sec: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None

    def text(self) -> str:
        if self.status != "ok":
            return self.status.upper()
        half = (self.high - self.low) / 2
        return f"{self.images_per_sec:,.1f}" + (f" ± {half:,.1f}" if half > 0 else "")


def parse_threshold(text: str) -> float:
    """``"5%"`` -> 0.05; a bare number is a fraction (``"0.05"``)."""
    value = text.strip()
    try:
        fraction = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        fraction = -1.0
    if not 0 <= fraction < 1:
        raise ScalingError(f"--threshold takes a percentage such as 5% or a fraction such as "
                           f"0.05, got {text!r}")
    return fraction


def cell_key(record: Dict) -> Tuple:
    return (*curve_fields(record), record.get("nodes", 1), record["total_devices"])


def figures(records: List[Dict]) -> Dict[Tuple, Figure]:
    """The figure of each sweep cell of ``records`` (max-batch trials are left out)."""
    groups = defaultdict(list)
    for record in records:
        if record.get("purpose", "sweep") == "sweep":
            groups[cell_key(record)].append(record)
    result = {}
    for key, group in groups.items():
        ok = [record for record in group if record["status"] == "ok"]
        if not ok:
            result[key] = Figure(group[-1]["status"])
            continue
        median = statistics.median(record["images_per_sec"] for record in ok)
        low, high = figure_interval(ok) or (median, median)
        result[key] = Figure("ok", median, low, high)
    return result


def verdict(base: Figure, new: Figure, threshold: float) -> Tuple[Optional[float], str]:
    """(relative change of images/sec or None, verdict)."""
    if base.status != "ok" or new.status != "ok":
        if base.status == new.status or "ok" not in (base.status, new.status):
            return None, "still failing"
        return None, "regression" if base.status == "ok" else "improvement"
    change = new.images_per_sec / base.images_per_sec - 1
    if abs(change) <= threshold:
        return change, "same"
    if new.low <= base.high and base.low <= new.high:
        return change, "within noise"
    return change, "regression" if change < 0 else "improvement"


@dataclass
class Comparison:
    rows: List[Dict]
    only_base: int
    only_new: int

    def count(self, name: str) -> int:
        return sum(row["verdict"] == name for row in self.rows)


def compare(base_records: List[Dict], new_records: List[Dict], threshold: float) -> Comparison:
    base, new = figures(base_records), figures(new_records)
    rows = []
    for key in sorted(base.keys() & new.keys(), key=str):
        change, name = verdict(base[key], new[key], threshold)
        fields = dict(zip(COMPARE_COLUMNS[:11], key))
        rows.append({**fields, "base": base[key], "new": new[key], "change": change,
                     "verdict": name})
    return Comparison(rows, len(base.keys() - new.keys()), len(new.keys() - base.keys()))


def fingerprint_differences(base_dir, base_records: List[Dict], new_dir,
                            new_records: List[Dict]) -> List[str]:
    """The fingerprint fields in which the two folders' nodes differ (none where either
    folder's records reference no fingerprint)."""
    base = read_fingerprints(base_dir, base_records)
    new = read_fingerprints(new_dir, new_records)
    return differing_fields(base.values(), new.values()) if base and new else []


def cell_label(row: Dict) -> str:
    label = (f"{row['workload']} {row['image_size']}px {row['framework']}/{row['launcher']}, "
             f"batch {row['batch_size']}, {row['total_devices']} {row['device_type'].upper()}")
    if row["options"] != "{}":
        label += f" {row['options']}"
    if row["mode"] != "train":
        label += f", {row['mode']}"
    return label + (f", {row['nodes']} nodes" if row["nodes"] > 1 else "")


def write_comparison_csv(comparison: Comparison, path) -> Path:
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=COMPARE_COLUMNS)
        writer.writeheader()
        for row in comparison.rows:
            base, new = row["base"], row["new"]
            writer.writerow({
                **{column: row[column] for column in COMPARE_COLUMNS[:11]},
                "base_status": base.status, "base_images_per_sec": base.images_per_sec,
                "base_low": base.low, "base_high": base.high,
                "new_status": new.status, "new_images_per_sec": new.images_per_sec,
                "new_low": new.low, "new_high": new.high,
                "change": row["change"], "verdict": row["verdict"],
            })
    return Path(path)
