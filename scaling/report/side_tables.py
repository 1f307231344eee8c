"""The report's images/sec against threads on one CPU device (the cost study's vCPUs), per
workload, for the HTML page."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Dict, List, Optional

from scaling.report import json_text

THREADS_TITLE = ("Images/sec (speedup, efficiency) against threads on one CPU device, over the "
                 "fewest threads")


def thread_grid(rows: List[Dict]) -> Optional[Dict]:
    """For the one-device CPU cells of one workload measured at several thread counts: the
    thread counts (``counts``) and one line per curve, its label and its cell at each count
    (median images/sec, speedup and efficiency over its fewest threads, or ``-``); None where
    no curve has two thread counts."""
    lines = defaultdict(dict)
    for row in rows:
        if row["device_type"] == "cpu" and row["total_devices"] == 1 and row["status"] == "ok":
            key = (row.get("variant") or row["framework"], row["launcher"],
                   row["batch_size"], json_text(row.get("options") or {}))
            lines[key].setdefault(row["threads_per_device"], []).append(row["images_per_sec"])
    lines = {key: points for key, points in lines.items() if len(points) > 1}
    if not lines:
        return None
    counts = sorted({count for points in lines.values() for count in points})
    found = []
    for (framework, launcher, batch, options), points in sorted(lines.items(), key=str):
        fewest = min(points)
        base = statistics.median(points[fewest])
        cells = []
        for count in counts:
            if count not in points:
                cells.append("-")
                continue
            ips = statistics.median(points[count])
            speedup = ips / base
            cells.append(f"{ips:,.1f} ({speedup:.2f}x, {speedup * fewest / count:.0%})")
        label = f"{framework} / {launcher}, batch {batch}" + \
            (f" {options}" if options != "{}" else "")
        found.append([label, *cells])
    return {"counts": [f"{count} thread" + ("s" if count > 1 else "") for count in counts],
            "lines": found}
