"""Acceptance of a run against a reference: a verdict per point (curve, device count and node)
from the intervals, against ``tolerance`` x the reference's images/sec.

- ``pass``: the point's whole interval is at or above the required figure;
- ``fail``: its whole interval is below it, or none of its cells ended ``ok`` (crashed, out of
  memory, timed out); *confirmed* once two or more measurements of the point (its repeats, and
  those ``--confirm`` adds) give it together;
- ``inconclusive``: the interval straddles the required figure, or has no ends;
- ``no reference``: the reference has no figure for the point.

A reference is a previous run's folder (its points, pooled over its nodes), a history file
(each series' current level, pooled over nodes), or a device model of the shipped reference
table (``published.yaml``: this project's H100 figures and published ones, each with its
source and what differs).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional
from xml.etree import ElementTree

import yaml

from scaling.errors import ScalingError
from scaling.report import history

TOLERANCE = 0.95
"""The share of the reference a point must reach by default (NVIDIA's Exemplar rule)."""
TABLE = Path(__file__).with_name("published.yaml")


def published() -> Dict:
    return yaml.safe_load(TABLE.read_text())


def reference(ref: str) -> Callable[[Dict], Optional[Dict]]:
    """The reference ``ref`` as a lookup: a point to its reference figure (images_per_sec,
    source, differs), or None."""
    path = Path(ref)
    if path.is_dir():
        return pooled(history.run_points(path), f"the run {ref}")
    if path.is_file():
        levels = [level(points) for points in history.trends(history.read_points(path)).values()]
        return pooled([point for point in levels if point], f"the history {ref}")
    table = published()
    if ref.lower() not in table:
        raise ScalingError(f"unknown reference {ref!r}: give a run folder, a history file or "
                           f"a device model of the reference table ({', '.join(table)})")
    return from_table(table[ref.lower()])


def level(points: List[Dict]) -> Optional[Dict]:
    """A judged series' current level: the run that confirmed its last change, else its first
    point."""
    ok = [point for point in points if point["status"] == "ok"]
    found = ok[0] if ok else None
    for index, point in enumerate(ok[:-1]):
        if point["verdict"] == "change":
            found = ok[index + 1]
    return found


def pooled(points: List[Dict], source: str) -> Callable[[Dict], Optional[Dict]]:
    """Reference figures by curve and device count: the median over the nodes' points."""
    found = defaultdict(list)
    for point in points:
        if point["status"] == "ok" and point["images_per_sec"]:
            found[(point["curve"], point["devices"])].append(point["images_per_sec"])
    figures = {key: {"images_per_sec": statistics.median(values), "source": source,
                     "differs": ""} for key, values in found.items()}
    return lambda point: figures.get((point["curve"], point["devices"]))


def from_table(model: Dict) -> Callable[[Dict], Optional[Dict]]:
    """A model's table figures: a point matches one with its device, device count and every
    field the figure names."""
    def lookup(point: Dict) -> Optional[Dict]:
        if not re.search(rf"\b{re.escape(model['device'])}\b", point.get("device_name") or "",
                         re.IGNORECASE):
            return None
        for figure in model["points"]:
            named = {key: value for key, value in figure.items()
                     if key in history.MATCHED}
            if figure["devices"] == point["devices"] and \
                    all(point.get(key) == value for key, value in named.items()):
                return figure
        return None
    return lookup


def verdict(point: Dict, figure: Optional[Dict], tolerance: float) -> Dict:
    """The point's verdict against ``figure`` (None: no reference)."""
    judged = {**point, "reference": figure, "confirmed": False}
    if figure is None:
        return {**judged, "verdict": "no reference", "required": None}
    required = tolerance * figure["images_per_sec"]
    judged["required"] = required
    if point["status"] != "ok":
        return {**judged, "verdict": "fail", "confirmed": point["records"] >= 2}
    if point["low"] is None or point["high"] is None:
        return {**judged, "verdict": "inconclusive"}
    if point["low"] >= required:
        return {**judged, "verdict": "pass"}
    if point["high"] < required:
        return {**judged, "verdict": "fail", "confirmed": point["measurements"] >= 2}
    return {**judged, "verdict": "inconclusive"}


def judge(out_dir, lookup: Callable[[Dict], Optional[Dict]], tolerance: float) -> List[Dict]:
    return [verdict(point, lookup(point), tolerance) for point in history.run_points(out_dir)]


def failing_records(out_dir, verdicts: List[Dict]) -> List[tuple]:
    """(node, the point's latest record) of each failing point not yet confirmed."""
    failing = {(v["curve"], v["devices"], v["node"]) for v in verdicts
               if v["verdict"] == "fail" and not v["confirmed"]}
    groups = history.point_groups(history.sweep_records(out_dir))
    return [(key[2], max(groups[key], key=lambda row: row.get("repeat", 0)))
            for key in sorted(failing)]


def junit(verdicts: List[Dict], tolerance: float) -> str:
    """The verdicts as JUnit XML: a test case per point, a failure for a confirmed fail, a
    skip for anything else that is not a pass."""
    suite = ElementTree.Element("testsuite", name="scaling accept", tests=str(len(verdicts)),
                                failures=str(sum(failed(v) for v in verdicts)),
                                skipped=str(sum(v["verdict"] != "pass" and not failed(v)
                                                for v in verdicts)))
    for v in verdicts:
        case = ElementTree.SubElement(suite, "testcase", classname=v["curve"],
                                      name=f"{v['devices']} device(s) on {v['node']}")
        if failed(v):
            ElementTree.SubElement(case, "failure", message=describe(v, tolerance))
        elif v["verdict"] != "pass":
            ElementTree.SubElement(case, "skipped", message=describe(v, tolerance))
    return ElementTree.tostring(suite, encoding="unicode")


def failed(v: Dict) -> bool:
    return v["verdict"] == "fail" and v["confirmed"]


def describe(v: Dict, tolerance: float) -> str:
    if v["reference"] is None:
        return "no reference figure for this point"
    if v["status"] != "ok":
        return (f"fail{' (confirmed)' if failed(v) else ''}: {v['status']} in every "
                f"measurement")
    text = (f"{v['verdict']}{' (confirmed)' if failed(v) else ''}: "
            f"{v['images_per_sec'] or 0:,.1f} img/s")
    if v["low"] is not None:
        text += f" [{v['low']:,.1f}, {v['high']:,.1f}]"
    return (text + f" against {tolerance:.0%} of {v['reference']['images_per_sec']:,.1f} "
            f"({v['reference']['source']})")
