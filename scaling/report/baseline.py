"""Each curve's baseline, and what going parallel costs at one device.

A curve (a launcher's cells of one framework, workload, batch, image size, device type,
options, threads and mode) is measured against the ``single`` cell that shares all of these but
the launcher: one process on one device with no data-parallel wrapper, and only the options of
the framework (a launcher's own, such as Horovod's timeline, do not apply to it). Where that
cell did not run or failed, the launcher's own one-device point is the baseline, and the row
says why. ``parallel_overhead`` = 1 - (launcher at one device / single): what the wrapper costs
before any second device is there.

A sweep measures each baseline several times, spread over the time its curve runs (the
``single`` cell before each round of the curve's cells and once after the last,
``scaling.sweep``). Their spread, ``baseline_drift`` ((largest - smallest) / median), is what the
machine's speed did between cells; it enters the baseline's interval, and a point whose own
interval is narrower than the drift is marked ``drifted``.
"""

from __future__ import annotations

import bisect
import datetime
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from scaling.frameworks import FRAMEWORKS
from scaling.launchers.single import BASELINE_LAUNCHER
from scaling.report import json_text
from scaling.uncertainty import ratio_interval, repeats_and_window_interval


@dataclass(frozen=True)
class Baseline:
    launcher: str
    """``single``, or the curve's own launcher where no ``single`` cell is ok."""
    images_per_sec: float
    ci95: Optional[List[float]]
    reason: Optional[str] = None
    """Why the curve is not measured against ``single``, or None."""
    parallel_overhead: Optional[float] = None
    parallel_overhead_ci95: Optional[List[float]] = None
    local_step_s: Optional[float] = None
    """The single cell's forward and backward pass alone (``local_step_s``), where timed."""
    drift: Optional[float] = None
    """(largest - smallest) / median of the baseline's measurements; None for fewer than two."""
    measurements: Tuple[Dict, ...] = ()
    """The baseline's ok measurements (records), in the order they ran."""
    starts: Tuple[float, ...] = field(init=False, repr=False, compare=False)
    """The measurements' starts (seconds since the epoch), sorted; those without one left
    out."""
    cells: frozenset = field(init=False, repr=False, compare=False)
    """The measurements' cell ids."""
    hosts: Tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The hosts the measurements ran on, sorted."""

    def __post_init__(self):
        # Once per baseline, so that each of its curve's rows looks them up rather than
        # scanning every measurement.
        object.__setattr__(self, "starts", start_times(self.measurements))
        object.__setattr__(self, "cells", frozenset(row["cell"] for row in self.measurements))
        object.__setattr__(self, "hosts", tuple(sorted(
            {host for row in self.measurements for host in row.get("hosts") or []})))


def figure_interval(group: List[Dict]) -> Optional[List[float]]:
    """The interval of the median figure of a group of ok repeats (separate processes): the
    spread between the repeats combined with the windows' own intervals
    (:func:`scaling.uncertainty.repeats_and_window_interval`); a single record's own interval
    (from its chunk times) where there is one repeat."""
    return repeats_and_window_interval([row["images_per_sec"] for row in group],
                                       [row.get("images_per_sec_ci95") for row in group])


def drift(group: List[Dict]) -> Optional[float]:
    """(largest - smallest) / median of the figures of ``group``; None for fewer than two."""
    if len(group) < 2:
        return None
    figures = [row["images_per_sec"] for row in group]
    return (max(figures) - min(figures)) / statistics.median(figures)


def started(row: Dict) -> Optional[float]:
    """A record's start, in seconds since the epoch; None where it has none."""
    text = row.get("started_at")
    return datetime.datetime.fromisoformat(text).timestamp() if text else None


def start_times(records) -> Tuple[float, ...]:
    """The starts of ``records`` that have one, sorted."""
    return tuple(sorted(start for start in map(started, records) if start is not None))


def nearest_gap_s(start: Optional[float], starts: Tuple[float, ...]) -> Optional[float]:
    """Seconds from ``start`` to the nearest of the sorted ``starts`` (a binary search);
    None where either is missing."""
    if start is None or not starts:
        return None
    index = bisect.bisect_left(starts, start)
    return min(abs(start - other) for other in starts[max(0, index - 1):index + 1])


def drift_reason(baseline_drift: Optional[float], measurements: int,
                 interval: Optional[List[float]], images_per_sec: float) -> Optional[str]:
    """Why a point is ``drifted``: its baseline moved between its measurements by more than
    the point's own interval is wide; None otherwise."""
    if baseline_drift is None or not interval:
        return None
    width = (interval[1] - interval[0]) / images_per_sec
    if baseline_drift <= width:
        return None
    return (f"the baseline moved {baseline_drift:.0%} between its {measurements} measurements, "
            f"more than this point's own interval ({width:.0%} wide)")


def input_label(record: Dict) -> str:
    """``real data, 2 loader workers`` for a cell on real images; empty on synthetic data."""
    if not record.get("data"):
        return ""
    workers = record.get("loader_workers", 0)
    return f"real data, {workers} loader worker{'s' if workers != 1 else ''}"


def single_key(row: Dict) -> Tuple:
    """What a curve's ``single`` baseline shares with it: everything but the launcher, the
    device and node counts, and the launcher's own options (the real data with its loader
    workers, and the collectives' settings from the environment, included, as in the same
    sweep)."""
    options = row.get("options")
    if options:
        framework_options = FRAMEWORKS.get(row["framework"]).options \
            if row["framework"] in FRAMEWORKS else {}
        options = {key: value for key, value in options.items() if key in framework_options}
    environment = row.get("collective_env")
    threads = row.get("threads_per_device") if row["device_type"] == "cpu" else None
    return (row.get("variant") or row["framework"], row["framework_version"], row["workload"],
            row["batch_size"], row["image_size"], row["device_type"],
            json_text(options) if options else "{}", threads, row.get("mode", "train"),
            input_label(row), json_text(environment) if environment else "{}")


def _median_figure(group: List[Dict]) -> Tuple[float, Optional[List[float]]]:
    return statistics.median(row["images_per_sec"] for row in group), figure_interval(group)


def _overhead(own: Tuple[float, Optional[List[float]]],
              single: Tuple[float, Optional[List[float]]]) -> Tuple[float, Optional[List[float]]]:
    ratio = own[0] / single[0]
    bounds = ratio_interval(ratio, own[1], own[0], single[1], single[0])
    return 1 - ratio, [1 - bounds[1], 1 - bounds[0]] if bounds else None


def _in_order(group: List[Dict]) -> Tuple[Dict, ...]:
    return tuple(sorted(group, key=lambda row: row.get("started_at") or ""))


def _reason(single_rows: List[Dict]) -> str:
    if not single_rows:
        return "no single cell was measured"
    failed = single_rows[0]
    return f"the single cell ended {failed['status']}: {failed.get('error') or ''}".rstrip(": ")


def baselines(rows: List[Dict], curve_key: Callable[[Dict], Tuple],
              keys: Optional[List[Tuple]] = None) -> Dict[Tuple, Baseline]:
    """The baseline of each curve (rows that share ``curve_key``) that has one. ``keys``: each
    row's ``curve_key``, where the caller has them already. Each curve's baseline is worked
    out once, from its first row."""
    keys = [curve_key(row) for row in rows] if keys is None else keys
    singles, own, first = defaultdict(list), defaultdict(list), {}
    for row, key in zip(rows, keys):
        if row["launcher"] == BASELINE_LAUNCHER and row["total_devices"] == 1:
            singles[single_key(row)].append(row)
        if row["total_devices"] == 1 and row["status"] == "ok":
            own[key].append(row)
        first.setdefault(key, row)
    found = {}
    for key, row in first.items():
        single_rows = singles.get(single_key(row), [])
        single_ok = [r for r in single_rows if r["status"] == "ok"]
        own_figure = _median_figure(own[key]) if own[key] else None
        if single_ok:
            figure = _median_figure(single_ok)
            overhead = _overhead(own_figure, figure) if own_figure \
                and row["launcher"] != BASELINE_LAUNCHER else (None, None)
            local = [r["local_step_s"] for r in single_ok if r.get("local_step_s")]
            found[key] = Baseline(BASELINE_LAUNCHER, *figure, None, *overhead,
                                  statistics.median(local) if local else None,
                                  drift(single_ok), _in_order(single_ok))
        elif own_figure:
            found[key] = Baseline(row["launcher"], *own_figure, _reason(single_rows),
                                  drift=drift(own[key]), measurements=_in_order(own[key]))
    return found


OVERHEAD_TITLE = "What going parallel costs at one device: each launcher against single"
OVERHEAD_HEADERS = ("workload", "curve", "single images/sec", "parallel overhead (95% interval)")


def overhead_lines(rows: List[Dict], label: Callable[[Dict], str]) -> List[Tuple[str, ...]]:
    """One line per curve with a ``single`` baseline, in ``OVERHEAD_HEADERS`` order: its
    one-device images/sec against the baseline. ``label`` names a row's curve."""
    lines = {}
    for row in rows:
        if row.get("parallel_overhead") is not None and row["total_devices"] == 1 \
                and row["status"] == "ok":
            workload = f"{row['workload']} at {row['image_size']}px on {row['device_type']}"
            lines.setdefault((workload, label(row)), row)
    formatted = []
    for (workload, name), row in sorted(lines.items()):
        low, high = row.get("parallel_overhead_low"), row.get("parallel_overhead_high")
        spread = f" [{low:+.1%}, {high:+.1%}]" if low is not None else ""
        formatted.append((workload, name, f"{row['baseline_images_per_sec']:,.1f}",
                          f"{row['parallel_overhead']:+.1%}{spread}"))
    return formatted
