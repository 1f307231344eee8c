"""A history's page: one trend figure per curve, each device count and node a line of
images/sec with its intervals by date, the changes marked (``scaling history --html``)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Dict, List

from markupsafe import Markup

from scaling.report.figures import plt, svg
from scaling.report.history import pending
from scaling.report.html import page_header, templates

PLOTTED_CURVES = 50
"""The most curves the page draws (those with a change, or one pending, first)."""
MARK = {"change": "changed", "unconfirmed": "unconfirmed", "not confirmed": "one-off"}


def trend_figure(curve: str, series: Dict[tuple, List[Dict]]):
    """``series``: each (devices, node) line's judged points of one curve."""
    figure, axis = plt.subplots(figsize=(8, 3.5))
    for (devices, node), points in sorted(series.items()):
        ok = [point for point in points if point["images_per_sec"] is not None]
        dates = [point["started_at"][:16] for point in ok]
        values = [point["images_per_sec"] for point in ok]
        errors = [[value - (point["low"] or value) for value, point in zip(values, ok)],
                  [(point["high"] or value) - value for value, point in zip(values, ok)]]
        axis.errorbar(dates, values, yerr=errors, marker="o", capsize=3,
                      label=f"{devices} device(s), {node}")
        for date, value, point in zip(dates, values, ok):
            if point["verdict"] in MARK:
                axis.annotate(MARK[point["verdict"]], (date, value), color="red",
                              textcoords="offset points", xytext=(0, 8), ha="center")
    axis.set_title(curve, fontsize=9)
    axis.set_ylabel("images/sec")
    axis.legend(fontsize=7)
    axis.tick_params(axis="x", labelrotation=30, labelsize=7)
    figure.tight_layout()
    return figure


def write_history_page(trends: Dict[tuple, List[Dict]], summary: str, source, path) -> Path:
    """The page of ``trends`` (judged series by curve, devices and node) at ``path``."""
    curves = defaultdict(dict)
    for (curve, devices, node), points in trends.items():
        curves[curve][(devices, node)] = points
    order = sorted(curves, key=lambda c: (not any(map(pending, curves[c].values())), c))
    sections = [{"curve": curve, "figure": Markup(svg(trend_figure(curve, curves[curve])))}
                for curve in order[:PLOTTED_CURVES]]
    path = Path(path)
    path.write_text(templates().get_template("history.html").render(
        title=f"History: {source}", **page_header(), summary=summary, sections=sections,
        left=len(order) - len(sections), source=source))
    return path
