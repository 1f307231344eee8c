"""Every figure of the report, in one visual language.

The device axis is log2 with a tick at each measured count, linear scaling is a dashed grey
line, each framework keeps one colour in every figure (curves of one framework differ by marker
and line style), axes carry units, and legends sit beside the axes, never over data. The PNGs
of ``scaling report --plot`` and the SVGs inlined in ``report.html`` come from these functions.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter  # noqa: E402

from scaling.frameworks import FRAMEWORKS, get_framework  # noqa: E402
from scaling.report.curves import curve_label, series_key  # noqa: E402
from scaling.report.tables import cell_summary, workload_groups  # noqa: E402
from scaling.units import format_bytes  # noqa: E402

_SPARE_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#17becf")
"""Colours of frameworks that records name but this installation does not register."""
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_LINESTYLES = ("-", "-.", ":")
_HATCHES = ("", "//", "..", "xx")
LINEAR_STYLE = {"linestyle": "--", "color": "grey", "linewidth": 1}


def framework_colour(framework: str) -> str:
    """The framework's registered colour, the same in every figure; a variant
    (``tensorflow@tf215``) keeps its framework's."""
    framework = framework.split("@")[0]
    if framework in FRAMEWORKS:
        return get_framework(framework).colour
    return _SPARE_COLOURS[sum(map(ord, framework)) % len(_SPARE_COLOURS)]


def device_unit(device_type: str) -> str:
    return "GPUs" if device_type == "gpu" else "CPU devices"


def _device_axis(axis, counts: List[int], device_type: str) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(counts, [str(count) for count in counts])
    axis.minorticks_off()
    axis.set_xlabel(f"number of {device_unit(device_type)}")
    axis.grid(True, which="major", alpha=0.3)


def _legend_beside(axis) -> None:
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                borderaxespad=0.0)


def _finish(figure, axis, title: str, ylabel: str, grid: str = "both"):
    """Title, y label, a light grid (on ``grid``), the legend beside the axes; the figure."""
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, axis=grid, which="major", alpha=0.3)
    _legend_beside(axis)
    figure.tight_layout()
    return figure


def _curves(rows: List[Dict], key=series_key) -> Dict[Tuple, Dict[int, Dict]]:
    """Curve key (by default the series key) -> {devices: the point's summary (median
    images/sec and speedup, with their 95% intervals)}, ok cells only."""
    points = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["status"] == "ok":
            points[key(row)][row["total_devices"]].append(row)
    return {key: {devices: cell_summary(group) for devices, group in sorted(by_devices.items())}
            for key, by_devices in points.items()}


def _plot_with_interval(axis, points: List[Tuple[int, float, Optional[float],
                                                 Optional[float]]], scale: float = 1.0,
                        per_device: bool = False, **style) -> None:
    """A curve with error bars for its 95% intervals: ``points`` are (devices, figure, low,
    high), with low and high None where the figure has no interval."""
    xs = [devices for devices, *_ in points]
    divide = [devices if per_device else 1 for devices in xs]
    ys = [scale * value / d for (_, value, _, _), d in zip(points, divide)]
    below = [scale * (value - low) / d if low is not None else 0.0
             for (_, value, low, _), d in zip(points, divide)]
    above = [scale * (high - value) / d if high is not None else 0.0
             for (_, value, _, high), d in zip(points, divide)]
    axis.errorbar(xs, ys, yerr=[below, above], capsize=3, **style)


def _rank_within_framework(keys) -> Dict[Tuple, int]:
    """0, 1, 2, ... for the curves of each framework (a key starts with its framework)."""
    seen = defaultdict(int)
    ranks = {}
    for key in sorted(keys, key=str):
        ranks[key] = seen[key[0]]
        seen[key[0]] += 1
    return ranks


def _styles(keys) -> Dict[Tuple, Dict]:
    """The framework's colour, and a marker and line style per curve within the framework."""
    return {key: {"color": framework_colour(key[0]), "marker": _MARKERS[rank % 7],
                  "linestyle": _LINESTYLES[rank // 7 % 3]}
            for key, rank in _rank_within_framework(keys).items()}


def _run_styles(keys) -> Dict[Tuple, Dict]:
    """For curves of several runs (a series key and the run's name): the framework's colour and
    a marker per curve within the framework, as in one run, and a line style per run."""
    runs = sorted({key[-1] for key in keys})
    curves = _styles({key[:-1] for key in keys})
    return {key: {**curves[key[:-1]], "linestyle": _LINESTYLES[runs.index(key[-1]) % len(_LINESTYLES)]}
            for key in keys}


def _run_key(row: Dict) -> Tuple:
    return (*series_key(row), row["run"])


def _run_label(key: Tuple) -> str:
    return f"{key[-1]}: {curve_label(key[:-1])}"


def _plot_predicted(axis, curve: Dict, style: Dict) -> None:
    """The model's extrapolation of a curve, dashed from its last measured point, with its band
    shaded (to the prediction itself at an open end)."""
    last = max(curve["measured"])
    xs = [last] + [line["devices"] for line in curve["lines"]]
    middle = [curve["measured"][last]] + [line["images_per_sec"] for line in curve["lines"]]
    low, high = ([curve["measured"][last]] + [
        line[f"images_per_sec_{end}"] if line[f"images_per_sec_{end}"] is not None
        else line["images_per_sec"] for line in curve["lines"]] for end in ("low", "high"))
    axis.plot(xs, middle, color=style["color"], linestyle="--")
    axis.fill_between(xs, low, high, color=style["color"], alpha=0.12, linewidth=0)


def scaling_figure(rows: List[Dict], title: str, predicted: Optional[Dict] = None,
                   by_run: bool = False):
    """Throughput, speedup and efficiency against device count for the rows of one workload,
    image size and device type, each point with its 95% interval as an error bar, and the
    throughput's ``predicted`` curves (from :func:`~scaling.report.extrapolation.predicted_curves`)
    dashed beyond the measured points; None when no cell of them is ok. ``by_run``: the rows
    come from several runs (each names its ``run``), and the same curve of two runs is two
    curves, labelled ``RUN: CURVE``, one line style per run."""
    curves = _curves(rows, _run_key if by_run else series_key)
    if not curves:
        return None
    device_type = rows[0]["device_type"]
    counts = sorted({devices for curve in curves.values() for devices in curve})
    predicted = {key: curve for key, curve in (predicted or {}).items() if key in curves}
    styles = _run_styles(curves) if by_run else _styles(curves)
    figure, (throughput, speedup, efficiency) = plt.subplots(1, 3, figsize=(14, 4.2))
    for key, curve in sorted(curves.items(), key=lambda item: str(item[0])):
        label = _run_label(key) if by_run else curve_label(key)
        _plot_with_interval(throughput, [
            (devices, point["images_per_sec"], *(point["interval"] or (None, None)))
            for devices, point in curve.items()], label=label, **styles[key])
        with_speedup = [(devices, point["speedup"], point["speedup_low"], point["speedup_high"])
                        for devices, point in curve.items() if point["speedup"] is not None]
        if with_speedup:
            _plot_with_interval(speedup, with_speedup, label=label, **styles[key])
            _plot_with_interval(efficiency, with_speedup, scale=100, per_device=True,
                                label=label, **styles[key])
        if key in predicted:
            _plot_predicted(throughput, predicted[key], styles[key])
    speedup.plot(counts, counts, label="linear", **LINEAR_STYLE)
    efficiency.axhline(100, label="linear", **LINEAR_STYLE)
    extended = sorted({*counts, *(line["devices"] for curve in predicted.values()
                                  for line in curve["lines"])})
    for axis, name, ticks in ((throughput, "Throughput" + (" (dashed: predicted)" if predicted
                                                           else ""), extended),
                              (speedup, "Speedup vs 1 device", counts),
                              (efficiency, "Scaling efficiency", counts)):
        _device_axis(axis, ticks, device_type)
        axis.set_title(name)
    throughput.set_ylabel("images/sec")
    speedup.set_ylabel("speedup (x, weak scaling)")
    efficiency.set_ylabel("efficiency (% of linear)")
    efficiency.set_ylim(bottom=0)
    _legend_beside(efficiency)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def frameworks_figure(rows: List[Dict], title: str):
    """Frameworks and launchers side by side: for each, the best images/sec over its batches
    at each device count, as grouped bars; None when no cell is ok."""
    best = defaultdict(dict)
    for row in rows:
        if row["status"] == "ok":
            name = (row["framework"], row["launcher"])
            best[name][row["total_devices"]] = max(best[name].get(row["total_devices"], 0.0),
                                                   row["images_per_sec"])
    if not best:
        return None
    counts = sorted({devices for by_count in best.values() for devices in by_count})
    names = sorted(best)
    width = 0.8 / len(names)
    ranks = _rank_within_framework(names)
    figure, axis = plt.subplots(figsize=(9, 4.2))
    for index, name in enumerate(names):
        positions = [counts.index(d) + (index - (len(names) - 1) / 2) * width
                     for d in best[name]]
        axis.bar(positions, list(best[name].values()), width, color=framework_colour(name[0]),
                 hatch=_HATCHES[ranks[name] % len(_HATCHES)], edgecolor="white",
                 label=f"{name[0]} / {name[1]}")
    axis.set_xticks(range(len(counts)), [str(count) for count in counts])
    axis.set_xlabel(f"number of {device_unit(rows[0]['device_type'])}")
    return _finish(figure, axis, title, "images/sec (best per-device batch)", grid="y")


def workloads_figure(rows: List[Dict]):
    """Speedup at each curve's largest device count, per workload and framework (the
    multi-model chart of published benchmarks); None when no curve has a speedup."""
    largest: Dict[Tuple[str, str], Tuple[int, float]] = {}
    for row in rows:
        if row["status"] == "ok" and row["speedup"] is not None:
            name = (row["workload"], row["framework"])
            devices, speedup = largest.get(name, (0, 0.0))
            if row["total_devices"] > devices or (row["total_devices"] == devices
                                                  and row["speedup"] > speedup):
                largest[name] = (row["total_devices"], row["speedup"])
    if not largest:
        return None
    workloads = sorted({workload for workload, _ in largest})
    frameworks = sorted({framework for _, framework in largest})
    width = 0.8 / len(frameworks)
    figure, axis = plt.subplots(figsize=(9, 4.2))
    for index, framework in enumerate(frameworks):
        bars = [(workloads.index(w) + (index - (len(frameworks) - 1) / 2) * width, value)
                for (w, f), value in largest.items() if f == framework]
        axis.bar([x for x, _ in bars], [speedup for _, (_, speedup) in bars], width,
                 color=framework_colour(framework), label=framework)
        for x, (devices, speedup) in bars:
            axis.annotate(f"{devices}", (x, speedup), ha="center", va="bottom",
                          fontsize="x-small")
            axis.plot([x - width / 2, x + width / 2], [devices, devices], **LINEAR_STYLE)
    axis.set_xticks(range(len(workloads)), workloads)
    return _finish(figure, axis, "Speedup per model; dashed: linear at that count (the number "
                   "above a bar)", "speedup at the largest device count (x)", grid="y")


def svg(figure) -> str:
    """The figure as inline SVG text, and the figure closed."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def save_png(figure, path: Path) -> Path:
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path


def plot_scaling(rows: List[Dict], out_dir) -> List[Path]:
    """Write one scaling PNG per workload, image size and device type; return their paths."""
    paths = []
    for (workload, size, device_type), group in workload_groups(rows).items():
        figure = scaling_figure(group, f"{workload}, {size}x{size}, per-device batch fixed")
        if figure is not None:
            paths.append(save_png(figure, Path(out_dir) /
                                  f"scaling-{workload}-{size}-{device_type}.png"))
    return paths


_DEVICE_STYLE = {"cpu": {"marker": "o", "linestyle": "-"},
                 "gpu": {"marker": "s", "linestyle": "-."}}


def matmul_figures(records: List[Dict]) -> List[Tuple[str, object]]:
    """The reference's two matrix-benchmark figures: time against n for each framework and
    device, and, where both devices ran, the CPU/GPU time ratio against n."""
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return []
    curves = defaultdict(dict)
    for record in ok:
        curves[(record["framework"], record["device_type"])][record["n"]] = record["seconds"]
    figure, axis = plt.subplots(figsize=(9, 4.2))
    for (framework, device), points in sorted(curves.items()):
        sizes = sorted(points)
        axis.plot(sizes, [points[n] for n in sizes], label=f"{framework} on {device.upper()}",
                  color=framework_colour(framework), **_DEVICE_STYLE.get(device, {}))
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("matrix side n (n x n times its transpose, then summed)")
    figures = [("matmul-time", _finish(figure, axis, "Matrix product time",
                                       "seconds (median of repeats)"))]
    frameworks = sorted({f for f, d in curves if (f, "cpu") in curves and (f, "gpu") in curves})
    if frameworks:
        figure, axis = plt.subplots(figsize=(9, 4.2))
        for framework in frameworks:
            cpu, gpu = curves[(framework, "cpu")], curves[(framework, "gpu")]
            sizes = sorted(cpu.keys() & gpu.keys())
            axis.plot(sizes, [cpu[n] / gpu[n] for n in sizes], label=framework, marker="o",
                      color=framework_colour(framework))
        axis.axhline(1, color="grey", linestyle=":", linewidth=1, label="equal time")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("matrix side n")
        figures.append(("matmul-ratio", _finish(figure, axis, "How many times faster the GPU is",
                                                "CPU time / GPU time (x)")))
    return figures


def cost_figure(rows: List[Dict], title: str):
    """The cost study's chart: training time and cost relative to the reference cell, one pair
    of bars per priced cell; None when no cell has a price."""
    priced = sorted((row for row in rows if row.get("cost_relative") is not None),
                    key=lambda row: (row["framework"], row["device_type"], row["total_devices"]))
    if not priced:
        return None
    figure, axis = plt.subplots(figsize=(9, 4.2))
    positions = range(len(priced))
    for offset, name, hatch in ((-0.2, "time_relative", ""), (0.2, "cost_relative", "//")):
        axis.bar([p + offset for p in positions], [row[name] for row in priced], 0.4,
                 color=[framework_colour(row["framework"]) for row in priced], hatch=hatch,
                 edgecolor="white", label=name.replace("_", " "))
    axis.axhline(1, color="grey", linestyle=":", linewidth=1)
    axis.set_xticks(list(positions), [f"{row['framework']}\n{row['total_devices']} "
                                      f"{row['device_type'].upper()}" for row in priced],
                    fontsize="small")
    return _finish(figure, axis, title, "relative to the reference cell (x)", grid="y")


def _grouped_marks(marks: Dict[str, int], within: float = 0.2) -> List[Tuple[int, List[str]]]:
    """Marks in size order, those within ``within`` of the group's first size under one line."""
    groups: List[Tuple[int, List[str]]] = []
    for label, size in sorted(marks.items(), key=lambda item: item[1]):
        if groups and size <= groups[-1][0] * (1 + within):
            groups[-1][1].append(label)
        else:
            groups.append((size, [label]))
    return groups


def allreduce_figure(rows: List[Dict], marks: Dict[str, int]):
    """Bus bandwidth against message size, one curve per measured collective, with the 95%
    interval of each size's median time as error bars; dotted lines mark ``marks`` (gradient
    and bucket sizes). None without an ok row."""
    curves = defaultdict(list)
    for row in rows:
        if row.get("busbw_GBps") is not None:
            curves[(row["framework"], row["launcher"], row["total_devices"], row["nodes"],
                    row["device_type"])].append(row)
    if not curves:
        return None
    figure, axis = plt.subplots(figsize=(9, 4.2))
    for index, (key, points) in enumerate(sorted(curves.items())):
        framework, launcher, devices, nodes, device_type = key
        points.sort(key=lambda row: row["bytes"])
        sizes = [row["bytes"] for row in points]
        busbw = [row["busbw_GBps"] for row in points]
        errors = [[value - value * row["time_s"] / row["time_s_ci95"][1] if row["time_s_ci95"]
                   else 0 for value, row in zip(busbw, points)],
                  [value * row["time_s"] / row["time_s_ci95"][0] - value if row["time_s_ci95"]
                   else 0 for value, row in zip(busbw, points)]]
        where = f"{devices} {device_unit(device_type)}" + (f", {nodes} nodes" if nodes > 1
                                                            else "")
        axis.errorbar(sizes, busbw, yerr=errors, capsize=3, label=f"{framework}/{launcher}, "
                      f"{where}", color=framework_colour(framework),
                      marker=_MARKERS[index % len(_MARKERS)])
    for size, labels in _grouped_marks(marks):
        axis.axvline(size, color="grey", linestyle=":", linewidth=1)
        axis.annotate(", ".join(labels), (size, 1.0), xycoords=("data", "axes fraction"),
                      rotation=90, fontsize="x-small", va="top", ha="right", color="grey")
    axis.set_xscale("log", base=2)
    axis.xaxis.set_major_formatter(FuncFormatter(
        lambda value, _: format_bytes(int(value)).replace(".00", "")))
    axis.set_xlabel("message size (float32)")
    return _finish(figure, axis, "Allreduce bus bandwidth, algbw x 2(n-1)/n",
                   "bus bandwidth (GB/s)")
