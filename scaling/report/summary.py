"""The answer first: a few lines that close a report in the terminal and open its HTML page.

- how well the largest device count scales: its best and worst efficiency, with intervals;
- where the rest of the step goes there: the largest loss term and its share of the step;
- what is marked (noisy, drifted, suspect, straggler), or that nothing is;
- the share of the cells' wall time inside their timed windows;
- in the terminal, where the HTML report is.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Dict, List, Optional, Tuple

from scaling.execute.wall import window_share
from scaling.launchers.single import BASELINE_LAUNCHER
from scaling.report.curves import curve_label, series_key
from scaling.report.tables import cell_summary

MARKS = ("noisy", "drifted", "suspect", "straggler")
WIDTH = 120
"""The summary's lines fit in this many columns (the terminal report's width)."""


def label(row: Dict) -> str:
    """``resnet50, torch 2.14.1 / torchrun, batch 32``: the row's workload and curve."""
    return f"{row['workload']}, {curve_label(series_key(row))}"


def _points(rows: List[Dict]) -> Dict[Tuple, List[Dict]]:
    """(curve's label, devices) -> the rows of that point, for the curves' own (not single)
    points."""
    points: Dict[Tuple, List[Dict]] = {}
    labels: Dict[Tuple, str] = {}
    for row in rows:
        if row.get("purpose", "sweep") == "sweep" and row["launcher"] != BASELINE_LAUNCHER:
            key = series_key(row)
            if key not in labels:
                labels[key] = f"{row['workload']}, {curve_label(key)}"
            points.setdefault((labels[key], row["total_devices"]), []).append(row)
    return points


def _efficiency(summary: Dict) -> str:
    low, high = summary.get("efficiency_low"), summary.get("efficiency_high")
    interval = f" [{low:.0%}, {high:.0%}]" if low is not None and high is not None else ""
    return f"{summary['efficiency']:.0%}{interval}"


def efficiency_line(points: Dict[Tuple, Dict]) -> Optional[str]:
    """The best and worst efficiency at the largest device count that has one."""
    scaled = {key: s for key, s in points.items()
              if s["status"] == "ok" and s.get("efficiency") is not None and key[1] > 1}
    if not scaled:
        return None
    largest = max(devices for _, devices in scaled)
    at = sorted(((s["efficiency"], key[0], s) for key, s in scaled.items() if key[1] == largest),
                key=lambda found: found[0])
    (_, worst_key, worst), (_, best_key, best) = at[0], at[-1]
    if len(at) == 1:
        return f"At {largest} devices: efficiency {_efficiency(best)} ({best_key})."
    first = f"At {largest} devices: efficiency from {_efficiency(best)} ({best_key})"
    second = f"down to {_efficiency(worst)} ({worst_key})."
    return f"{first} {second}" if len(first) + 1 + len(second) <= WIDTH else \
        f"{first}\n  {second}"


def loss_line(rows: List[Dict]) -> Optional[str]:
    """The largest loss term at the largest device count, with its share of the step."""
    losing = [row for row in rows if row.get("loss_term") and row.get("loss_term_share")]
    if not losing:
        return None
    largest = max(row["total_devices"] for row in losing)
    row = max((r for r in losing if r["total_devices"] == largest),
              key=lambda r: r["loss_term_share"])
    return (f"Largest loss at {largest} devices: {row['loss_term']}, "
            f"{row['loss_term_share']:.0%} of the step ({label(row)}).")


def marks_line(points: Dict[Tuple, Dict]) -> str:
    counts = Counter(mark for s in points.values() for mark in MARKS if s.get(mark))
    if not counts:
        return "Nothing is marked noisy, drifted, suspect or a straggler."
    return ("Marked: " + ", ".join(f"{count} {mark}" for mark, count in counts.items())
            + " (the reasons are under the tables).")


def window_line(rows: List[Dict]) -> Optional[str]:
    """The share of the cells' wall time that their timed windows took, and the largest other
    phase (``scaling.execute.wall``)."""
    share = window_share(rows)
    if share is None:
        return None
    others: Counter = Counter()
    for row in rows:
        for name, seconds in (row.get("wall_breakdown") or {}).items():
            if name not in ("window", "total"):
                others[name] += seconds
    largest = others.most_common(1)
    rest = f"; the most of the rest went to {largest[0][0]} ({largest[0][1]:,.0f} s)" \
        if largest else ""
    return (f"Windows: {share['window_s']:,.0f} s of the cells' {share['wall_s']:,.0f} s of "
            f"wall time ({share['share']:.0%}){rest}.")


def fitted(line: str) -> str:
    """``line`` in lines of at most ``WIDTH`` columns, each after the first indented (its own
    line breaks kept)."""
    return "\n".join(textwrap.fill(part, WIDTH, initial_indent="" if index == 0 else "  ",
                                    subsequent_indent="  ", break_on_hyphens=False,
                                    break_long_words=False)
                      for index, part in enumerate(
                          piece.strip() for piece in line.split("\n")))


def summary_lines(rows: List[Dict]) -> List[str]:
    """Up to four lines: efficiency, the largest loss where the model found one, the marks,
    and the share of wall time inside the windows, each in ``WIDTH`` columns (where it is
    longer, a line holds a line break and indents what follows). The terminal adds the HTML
    report's path."""
    points = {key: cell_summary(group) for key, group in _points(rows).items()}
    lines = [efficiency_line(points) or "No point scales beyond one device yet.",
             loss_line(rows), marks_line(points), window_line(rows)]
    return [fitted(line) for line in lines if line]
