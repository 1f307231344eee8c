"""The report's per-workload side tables: what a million images cost against the workload's
reference cell, and images/sec against threads on one CPU device (the cost study's vCPUs)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Dict, List

from rich.table import Table

from scaling.report.curves import curve_label, series_key
from scaling.report.tables import workload_groups


def cost_tables(rows: List[Dict]) -> List[Table]:
    """Per workload, where any cell has a price: what a million images cost and take, against
    the workload's reference cell."""
    tables = []
    for (workload, size, _), group in workload_groups(rows).items():
        priced = [row for row in group if row.get("price_per_hour") is not None]
        if not priced:
            continue
        table = Table(title=f"{workload} at {size}x{size}: cost of a million images")
        for header in ("curve", "devices", "images/sec", "$/hour", "$ per 1M images",
                       "time to 1M", "cost vs reference", "time vs reference", "images/J"):
            table.add_column(header, justify="left" if header == "curve" else "right")
        for row in sorted(priced, key=lambda r: (str(series_key(r)), r["total_devices"])):
            table.add_row(
                curve_label(series_key(row)), f"{row['total_devices']} {row['device_type']}",
                f"{row['images_per_sec']:,.1f}", f"{row['price_per_hour']:.2f}",
                f"{row['cost_per_million_images']:.3f}",
                f"{row['time_to_million_images_s']:,.0f} s",
                f"{row['cost_relative']:.2f}x" if row["cost_relative"] is not None else "-",
                f"{row['time_relative']:.2f}x",
                f"{row['images_per_joule']:.2f}" if row.get("images_per_joule") else "-")
        tables.append(table)
    return tables


def thread_tables(rows: List[Dict]) -> List[Table]:
    """Per workload, for one-device CPU cells measured at several thread counts (the cost
    study's vCPUs): images/sec against threads, with speedup and efficiency over the fewest."""
    tables = []
    for (workload, size, device_type), group in workload_groups(rows).items():
        lines = defaultdict(dict)
        for row in group:
            if device_type == "cpu" and row["total_devices"] == 1 and row["status"] == "ok":
                key = (row.get("variant") or row["framework"], row["launcher"],
                       row["batch_size"], json.dumps(row.get("options") or {}, sort_keys=True))
                lines[key].setdefault(row["threads_per_device"], []).append(
                    row["images_per_sec"])
        lines = {key: points for key, points in lines.items() if len(points) > 1}
        if not lines:
            continue
        counts = sorted({count for points in lines.values() for count in points})
        table = Table(title=f"{workload} at {size}x{size} on one CPU device: images/sec "
                            "(speedup, efficiency) against threads")
        table.add_column("curve")
        for count in counts:
            table.add_column(f"{count} thread" + ("s" if count > 1 else ""), justify="right")
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
            table.add_row(label, *cells)
        tables.append(table)
    return tables
