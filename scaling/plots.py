"""Scaling plots in the style of published benchmarks: throughput and speedup against device
count, one line per curve (``scaling.report.series_key``), with the linear ideal dashed."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

from scaling.report import curve_label, series_key


def _curves(rows: List[Dict]) -> Dict:
    """Series key -> {devices: (median images/sec, median speedup)}."""
    points = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["status"] == "ok":
            points[series_key(row)][row["total_devices"]].append(row)
    curves = {}
    for key, by_devices in points.items():
        curves[key] = {
            devices: (statistics.median(r["images_per_sec"] for r in group),
                      statistics.median(r["speedup"] for r in group)
                      if all(r["speedup"] is not None for r in group) else None)
            for devices, group in sorted(by_devices.items())
        }
    return curves


def plot_scaling(rows: List[Dict], out_dir) -> List[Path]:
    """Write one PNG per workload, image size and device type; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = defaultdict(list)
    for row in rows:
        groups[(row["workload"], row["image_size"], row["device_type"])].append(row)
    paths = []
    for (workload, size, device_type), group in sorted(groups.items()):
        curves = _curves(group)
        if not curves:
            continue
        counts = sorted({d for curve in curves.values() for d in curve})
        figure, (throughput, speedup) = plt.subplots(1, 2, figsize=(11, 4.2))
        for key, curve in sorted(curves.items(), key=lambda item: str(item[0])):
            label = curve_label(key)
            devices = list(curve)
            throughput.plot(devices, [ips for ips, _ in curve.values()], marker="o", label=label)
            with_speedup = [(d, s) for d, (_, s) in curve.items() if s is not None]
            if with_speedup:
                speedup.plot(*zip(*with_speedup), marker="o", label=label)
        speedup.plot(counts, counts, linestyle="--", color="grey", label="linear")
        unit = "GPUs" if device_type == "gpu" else "CPU devices"
        for axis, title in ((throughput, "Throughput"), (speedup, "Speedup vs 1 device")):
            axis.set_xscale("log", base=2)
            axis.set_xticks(counts, [str(c) for c in counts])
            axis.set_xlabel(f"number of {unit}")
            axis.set_title(title)
            axis.grid(True, which="major", alpha=0.3)
        throughput.set_ylabel("images/sec")
        speedup.set_ylabel("speedup (weak scaling)")
        speedup.legend(fontsize="small")
        figure.suptitle(f"{workload}, {size}x{size}, per-device batch fixed")
        figure.tight_layout()
        path = Path(out_dir) / f"scaling-{workload}-{size}-{device_type}.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        paths.append(path)
    return paths
