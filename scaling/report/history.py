"""A history of runs in one DuckDB file, and each curve's trend over it.

Each run adds its points: one per curve, device count and node (the repeats of a point pooled
as the report pools them), with images/sec and efficiency and their 95% intervals, the run's
date, the node names, and the framework and driver versions. A trend is one such series in
date order. A point *changes* the series where its interval and the level before it separate
and it differs by at least ``min_change``; the change is *confirmed* once the next point
separates from that level the same way, and the level moves to that confirming point (the
change's size is where it settled). The first point sets the first level. Until a later run
says, the change is ``unconfirmed``; a point that the next run does not follow is ``not
confirmed`` (a one-off, such as a run beside a busy neighbour) and the level stays.
"""

from __future__ import annotations

import datetime
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence

from scaling.errors import ScalingError
from scaling.execute.store import ResultStore
from scaling.report.curves import curve_label, series_key
from scaling.report.tables import cell_summary, with_scaling

COLUMNS = (("run", "VARCHAR"), ("started_at", "VARCHAR"), ("added_at", "VARCHAR"),
           ("curve", "VARCHAR"), ("devices", "INTEGER"), ("node", "VARCHAR"),
           ("framework_version", "VARCHAR"), ("driver", "VARCHAR"),
           ("images_per_sec", "DOUBLE"), ("low", "DOUBLE"), ("high", "DOUBLE"),
           ("efficiency", "DOUBLE"), ("efficiency_low", "DOUBLE"),
           ("efficiency_high", "DOUBLE"), ("noisy", "VARCHAR"), ("status", "VARCHAR"))
"""The ``points`` table: one row per run, curve, device count and node."""
MIN_CHANGE = 0.05
"""The smallest relative change a history reports, beside separate intervals."""


def point_curve(row: Dict) -> str:
    """A curve's name across runs: its workload and size, framework and launcher, batch,
    options, mode and nodes, without the framework version, which a trend shows beside it."""
    key = list(series_key(row))
    key[1] = ""
    return f"{row['workload']} {row['image_size']}px, {curve_label(tuple(key))}"


def run_points(out_dir) -> List[Dict]:
    """The points of the run in ``out_dir``, each one's repeats pooled."""
    records = sweep_records(out_dir)
    started = min(r["started_at"] for r in records if r.get("started_at"))
    return [summarize_point(key, group, str(Path(out_dir).resolve()), started)
            for key, group in sorted(point_groups(records).items())]


def sweep_records(out_dir) -> List[Dict]:
    records = [r for r in ResultStore(out_dir).records() if r.get("purpose", "sweep") == "sweep"]
    if not records:
        raise ScalingError(f"{out_dir} holds no sweep records")
    return records


def point_groups(records: List[Dict]) -> Dict[tuple, List[Dict]]:
    """The records' rows (with their baselines) by point: curve, device count and node."""
    groups = defaultdict(list)
    for row in with_scaling(records):
        node = ",".join(row.get("node_names") or row.get("hosts") or [row.get("host", "")])
        groups[(point_curve(row), row["total_devices"], node)].append(row)
    return groups


def summarize_point(key: tuple, group: List[Dict], run: str, started: str) -> Dict:
    """One point of a run: its repeats pooled as the report pools them, with what a history
    keeps and what a reference table matches on."""
    curve, devices, node = key
    summary = {name: finite(value) for name, value in cell_summary(group).items()}
    interval = [finite(bound) for bound in summary.get("interval") or (None, None)]
    first = group[0]
    versions = first.get("versions") or {}
    return {
        "run": run, "started_at": started, "curve": curve, "devices": devices, "node": node,
        "framework_version": first.get("framework_version") or "",
        "driver": versions.get("driver") or versions.get("cuda") or "",
        "images_per_sec": summary.get("images_per_sec"), "low": interval[0],
        "high": interval[1], "efficiency": summary.get("efficiency"),
        "efficiency_low": summary.get("efficiency_low"),
        "efficiency_high": summary.get("efficiency_high"),
        "noisy": summary.get("noisy") or "", "status": summary["status"],
        "measurements": sum(row["status"] == "ok" for row in group),
        "records": len(group),
        **{name: first.get(name) for name in MATCHED}}


MATCHED = ("workload", "image_size", "batch_size", "precision", "launcher", "device_name")
"""What a reference table's point is matched on, beside the device count."""


def finite(value):
    """``value``, with an unbounded interval's infinite end as None."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def connect(path, create: bool = False):
    """The history's database; a missing file is a one-line error unless ``create``."""
    if not create and not Path(path).is_file():
        raise ScalingError(f"no history file {path}: make one with scaling history add "
                           f"{path} DIR, or a sweep's --history {path}")
    import duckdb

    try:
        db = duckdb.connect(str(path))
    except duckdb.Error as error:
        raise ScalingError(f"{path} is not a history: {error}") from None
    db.execute("CREATE TABLE IF NOT EXISTS points (" +
               ", ".join(f"{name} {kind}" for name, kind in COLUMNS) + ")")
    return db


def add_runs(path, out_dirs: Sequence) -> int:
    """Add each run's points to the history at ``path`` (made if missing), in place of any
    it held for the same run; the count of points added."""
    rows = [point for out_dir in out_dirs for point in run_points(out_dir)]
    added = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    import pyarrow

    db = connect(path, create=True)
    try:
        for run in {row["run"] for row in rows}:
            db.execute("DELETE FROM points WHERE run = ?", [run])
        types = {"VARCHAR": pyarrow.string(), "INTEGER": pyarrow.int32(),
                 "DOUBLE": pyarrow.float64()}
        db.register("added", pyarrow.table({
            name: pyarrow.array([{**row, "added_at": added}[name] for row in rows],
                                type=types[kind])
            for name, kind in COLUMNS}))
        db.execute("INSERT INTO points SELECT * FROM added")
    finally:
        db.close()
    return len(rows)


def read_points(path) -> List[Dict]:
    db = connect(path)
    try:
        cursor = db.execute("SELECT * FROM points ORDER BY curve, devices, node, started_at")
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, values)) for values in cursor.fetchall()]
    finally:
        db.close()


def separates(point: Dict, level: Dict, min_change: float) -> int:
    """+1 or -1 where ``point`` lies wholly above or below ``level`` by their intervals and
    differs from it by at least ``min_change``; 0 otherwise."""
    if None in (point["low"], point["high"], level["low"], level["high"]):
        return 0
    if abs(point["images_per_sec"] / level["images_per_sec"] - 1) < min_change:
        return 0
    if point["low"] > level["high"]:
        return 1
    if point["high"] < level["low"]:
        return -1
    return 0


def judged(series: List[Dict], min_change: float = MIN_CHANGE) -> List[Dict]:
    """The series' points in date order, each with ``verdict`` (``same``, ``change``,
    ``unconfirmed``, ``not confirmed`` or ``failed``) and, for a change, ``since`` (the
    level's run) and ``ratio`` (its images/sec over the level's)."""
    ok = [point for point in series if point["status"] == "ok"]
    following = dict(zip(map(id, ok), ok[1:] + [None]))
    out, level = [], None
    for point in series:
        judged_point = dict(point, verdict="same" if point["status"] == "ok" else "failed")
        out.append(judged_point)
        if point["status"] != "ok":
            continue
        direction = separates(point, level, min_change) if level else 0
        if level is None:
            level = point
        elif direction:
            judged_point.update(since=level["run"],
                                ratio=point["images_per_sec"] / level["images_per_sec"])
            later = following[id(point)]
            if later is None:
                judged_point["verdict"] = "unconfirmed"
            elif separates(later, level, min_change) == direction:
                # The change's size is where the confirming run settled, which the level
                # moves to: a dip that half recovers is one change, not two.
                judged_point.update(verdict="change", ratio=later["images_per_sec"] /
                                    level["images_per_sec"])
                level = later
            else:
                judged_point["verdict"] = "not confirmed"
    return out


def trends(points: List[Dict], min_change: float = MIN_CHANGE) -> Dict[tuple, List[Dict]]:
    """Each series (curve, devices, node) of the history, judged."""
    series = defaultdict(list)
    for point in points:
        series[(point["curve"], point["devices"], point["node"])].append(point)
    return {key: judged(sorted(found, key=lambda p: p["started_at"]), min_change)
            for key, found in sorted(series.items())}


def pending(points: List[Dict]) -> bool:
    """Whether a judged series holds a change, or one the next run will tell."""
    return any(point["verdict"] in ("change", "unconfirmed") for point in points)


def changes(judged_trends: Dict[tuple, List[Dict]]) -> List[Dict]:
    """The confirmed changes, each with its series."""
    return [{**point, "series": key} for key, points in judged_trends.items()
            for point in points if point["verdict"] == "change"]


def to_json(judged_trends: Dict[tuple, List[Dict]]) -> str:
    return json.dumps([{"curve": curve, "devices": devices, "node": node, "points": points}
                       for (curve, devices, node), points in judged_trends.items()], indent=1)
