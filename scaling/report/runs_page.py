"""``scaling report DIR1 DIR2 ... --html FILE``: several runs in one self-contained page.

It opens with the runs, each labelled by its name, hosts and dates, and their machines side by
side with the differences marked (see :mod:`scaling.report.runs`). Then, per workload, image
size and device type, one scaling figure holds the curves of every run (the same curve of two
runs stays two curves, one line style per run), and each run's images/sec grids follow, their
curves named ``RUN: CURVE``. Speedup and efficiency are each run's own, against its own
baselines. Like ``report.html``, the page has inline SVG and no script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from scaling.report.figures import scaling_figure
from scaling.report.html import inline_figure, grids, marked_cells, page_header, templates
from scaling.report.runs import Run, side_by_side
from scaling.report.tables import workload_groups


def _section(key, rows: List[Dict], runs: List[Run]) -> Dict:
    workload, size, device_type = key
    figure = scaling_figure(rows, f"{workload}, {size}x{size}, per-device batch fixed: "
                                  f"{len(runs)} runs", by_run=True)
    section = {"title": f"{workload} at {size}x{size} on {device_type}",
               "anchor": f"{workload}-{size}-{device_type}",
               "scaling": inline_figure(figure), "grids": []}
    for run in runs:
        for grid in grids([row for row in rows if row["run"] == run.name]):
            section["grids"].append({**grid, "label": f"{run.name}: {grid['label']}"})
    return section


def render_runs(runs: List[Run]) -> str:
    rows = [row for run in runs for row in run.rows]
    sections = [_section(key, group, runs) for key, group in workload_groups(rows).items()]
    lines = side_by_side(runs)
    return templates().get_template("runs.html").render(
        title=f"Scaling report: {', '.join(run.name for run in runs)}",
        **page_header(), **marked_cells(sections, rows),
        runs=runs, fields=lines, differing=[line["field"] for line in lines if line["differs"]],
        sections=sections)


def write_runs_page(runs: List[Run], path) -> Path:
    path = Path(path)
    path.write_text(render_runs(runs))
    return path
