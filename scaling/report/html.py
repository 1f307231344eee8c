"""``scaling report DIR --html``: one self-contained page, ``DIR/report.html``.

Per workload: the images/sec grid (per-device batch by device count, failures marked), the
scaling curves and efficiency against linear, and the frameworks and launchers side by side.
Then the speedup of each model at its largest device count, the max-batch table, and the
provenance. Figures are inline SVG and the page has no script, so it reads offline and mailed.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from scaling import __version__
from scaling.execute.allreduce import allreduce_rows, marks
from scaling.execute.matmul import crossover, matmul_records
from scaling.execute.preflight import FIGURES as PREFLIGHT_FIGURES
from scaling.execute.preflight import read_preflight
from scaling.maxbatch.search import MAXBATCH_FILE, read_maxbatch_csv
from scaling.report.summary import summary_lines
from scaling.report.baseline import OVERHEAD_HEADERS, OVERHEAD_TITLE, overhead_lines
from scaling.report.input import INPUT_HEADERS, INPUT_TITLE, input_lines
from scaling.report.extrapolation import predicted_curves
from scaling.report.model import MODEL_HEADERS, MODEL_TITLE, model_lines
from scaling.report.provenance import provenance
from scaling.report.side_tables import THREADS_TITLE, thread_grid
from scaling.report.curves import curve_label, family_key, family_label, series_key
from scaling.report.tables import cell_summary, figure_text, scaling_text, workload_groups
from scaling.schema import STATUSES
from scaling.units import format_bytes

REPORT_FILE = "report.html"


def grids(rows: List[Dict]) -> List[Dict]:
    """One grid per curve family of a workload: rows are per-device batches, columns are device
    counts, and each cell is the ``cell_summary`` of its repeats (absent where nothing ran)."""
    families = defaultdict(lambda: defaultdict(list))
    for row in rows:
        families[family_key(series_key(row))][(row["batch_size"], row["total_devices"])] \
            .append(row)
    return [{
        "label": family_label(family),
        "batches": sorted({batch for batch, _ in cells}),
        "counts": sorted({count for _, count in cells}),
        "cells": {point: cell_summary(group) for point, group in cells.items()},
    } for family, cells in sorted(families.items(), key=lambda item: str(item[0]))]


def _share(key: str) -> Callable[[Dict, Dict, Dict], Optional[str]]:
    return lambda t, b, w: f"{b[key]:.0%}" if key in b else None


DETAIL_COLUMNS: List[Tuple[str, Callable[[Dict, Dict, Dict], Optional[str]]]] = [
    ("wall in window", lambda t, b, w: f"{w['window'] / w['total']:.0%} of {w['total']:,.1f} s"
     if w.get("total") and "window" in w else None),
    ("CPU use", lambda t, b, w: f"{t['cpu_util_mean']:.0f}%" if "cpu_util_mean" in t else None),
    ("RSS per rank (max)", lambda t, b, w: format_bytes(max(t["rss_max_bytes_per_rank"]))
     if t.get("rss_max_bytes_per_rank") else None),
    ("GPU use", lambda t, b, w: f"{t['gpu_util_mean']:.0f}%" if "gpu_util_mean" in t else None),
    ("GPU memory", lambda t, b, w: format_bytes(t["gpu_memory_max_bytes"])
     if "gpu_memory_max_bytes" in t else None),
    ("power", lambda t, b, w: f"{t['power_mean_w']:.0f} W" if "power_mean_w" in t else None),
    ("energy", lambda t, b, w: f"{t['energy_j']:,.0f} J" if "energy_j" in t else None),
    ("compute", _share("compute")),
    ("communication", _share("communication")),
    ("idle", _share("idle")),
]
"""The measured columns of the details table: a header, and the text of a record's telemetry,
step breakdown and wall breakdown (None where the record has no such figure)."""


def measured_details(rows: List[Dict]) -> Dict:
    """One line per ok record with telemetry, a step breakdown or a wall breakdown: the share
    of its wall time inside the window, what the machine did during the window, and where the
    step time went. Columns that no line has (the GPU columns of a
    CPU run) are left out."""
    lines = []
    for row in sorted(rows, key=lambda r: (str(series_key(r)), r["total_devices"], r["repeat"])):
        telemetry, breakdown = row.get("telemetry") or {}, row.get("step_breakdown") or {}
        wall = row.get("wall_breakdown") or {}
        if row["status"] != "ok" or not (telemetry or breakdown or wall):
            continue
        lines.append([family_label(family_key(series_key(row))), row["batch_size"],
                      row["total_devices"], row["repeat"],
                      *(text(telemetry, breakdown, wall) for _, text in DETAIL_COLUMNS)])
    kept = [index for index in range(len(DETAIL_COLUMNS))
            if any(line[4 + index] is not None for line in lines)]
    return {"headers": [DETAIL_COLUMNS[index][0] for index in kept],
            "lines": [[*line[:4], *(line[4 + index] or "-" for index in kept)]
                      for line in lines]}


def inline_figure(figure) -> Markup:
    from scaling.report.figures import svg

    return Markup(svg(figure)) if figure is not None else None


def _curve_of(row: Dict) -> str:
    return curve_label(series_key(row))


def _workload_section(key, rows: List[Dict], model: Dict) -> Dict:
    from scaling.report.figures import cost_figure, frameworks_figure, scaling_figure

    workload, size, device_type = key
    pairs = {(row["framework"], row["launcher"]) for row in rows}
    return {
        "title": f"{workload} at {size}x{size} on {device_type}",
        "anchor": f"{workload}-{size}-{device_type}",
        "grids": grids(rows),
        "details": measured_details(rows),
        "model": [line[1:] for line in model_lines(rows, _curve_of)],
        "input": [line[1:] for line in input_lines(rows, _curve_of)],
        "overheads": [line[1:] for line in overhead_lines(rows, _curve_of)],
        "threads": thread_grid(rows),
        "cost_figure": inline_figure(cost_figure(rows, f"{workload}: time and cost of a million "
                                                 "images, relative to the reference")),
        "costs": sorted((row for row in rows if row.get("price_per_hour") is not None),
                        key=lambda r: (str(series_key(r)), r["total_devices"])),
        "scaling": inline_figure(scaling_figure(rows, f"{workload}, {size}x{size}, "
                                                "per-device batch fixed",
                                          predicted_curves(rows, series_key, **model))),
        "frameworks": inline_figure(frameworks_figure(rows, f"{workload}: frameworks and launchers"))
        if len(pairs) > 1 else None,
    }


def templates() -> Environment:
    """The report's templates, with the helpers they format figures with."""
    environment = Environment(loader=PackageLoader("scaling.report", "templates"),
                              autoescape=select_autoescape(["html"]))
    environment.globals.update(scaling_text=scaling_text, figure_text=figure_text,
                               format_bytes=format_bytes, curve_label=curve_label,
                               series_key=series_key)
    return environment


def page_header() -> Dict:
    """When and by which harness version a page is generated."""
    return {"generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "harness_version": __version__}


def marked_cells(sections: List[Dict], rows: List[Dict]) -> Dict:
    """The count of cells by status, and what the footnotes under the grids of ``sections``
    explain: each failed status, and the suspect, noisy, drifted and straggler cells."""
    statuses = sorted({row["status"] for row in rows})
    return {"statuses": {status: STATUSES.get(status, "") for status in statuses
                         if status != "ok"},
            "suspects": _notes(sections, "suspect"), "noisy": _notes(sections, "noisy"),
            "drifted": _notes(sections, "drifted"), "stragglers": _notes(sections, "straggler"),
            "counts": {status: sum(row["status"] == status for row in rows)
                       for status in statuses}}


def _notes(sections: List[Dict], name: str) -> List[str]:
    """``TITLE, CURVE, batch B, N devices: REASON`` for each cell with a ``name`` reason."""
    return [f"{section['title']}, {grid['label']}, batch {batch}, {count} devices: {cell[name]}"
            for section in sections for grid in section["grids"]
            for (batch, count), cell in sorted(grid["cells"].items()) if cell.get(name)]


def matmul_section(records: List[Dict]) -> Dict:
    """The matrix benchmark's two figures and each framework's crossover, where it ran."""
    from scaling.report.figures import matmul_figures, svg

    measured = matmul_records(records)
    return {"figures": [Markup(svg(figure)) for _, figure in matmul_figures(measured)],
            "crossovers": {framework: crossover(measured, framework)
                           for framework in sorted({r["framework"] for r in measured})}}


def allreduce_section(records: List[Dict]):
    """The bandwidth-versus-size figure of the store's allreduce measurements, marked with the
    gradient sizes and the buckets of their launchers; None without one."""
    from scaling.report.figures import allreduce_figure

    rows = allreduce_rows(records)
    found = {}
    for launcher in sorted({row["launcher"] for row in rows}):
        found.update(marks(launcher))
    return inline_figure(allreduce_figure(rows, found)) if rows else None


def render_html(out_dir, rows: List[Dict], records: List[Dict],
                model: Optional[Dict] = None) -> str:
    """The report's page. ``model`` holds :func:`predicted_curves`' options for the dashed
    predictions beyond each curve's measured points (by default, its measured bus bandwidth
    at 2, 4 and 8 times its largest device count)."""
    from scaling.report.figures import workloads_figure
    from scaling.report.tuning import tuning_section

    out_dir = Path(out_dir)
    sections = [_workload_section(key, group, model or {})
                for key, group in workload_groups(rows).items()]
    return templates().get_template("report.html").render(
        title=f"Scaling report: {out_dir.resolve().name}",
        **page_header(), **marked_cells(sections, rows),
        sections=sections, summary=summary_lines(rows) if rows else [],
        overhead_title=OVERHEAD_TITLE, overhead_headers=OVERHEAD_HEADERS[1:],
        model_title=MODEL_TITLE, model_headers=MODEL_HEADERS[1:],
        input_title=INPUT_TITLE, input_headers=INPUT_HEADERS[1:],
        threads_title=THREADS_TITLE,
        workloads=inline_figure(workloads_figure(rows)) if len(sections) > 1 else None,
        matmul=matmul_section(records),
        allreduce=allreduce_section(records),
        maxbatch=read_maxbatch_csv(out_dir) if (out_dir / MAXBATCH_FILE).exists() else [],
        preflight=read_preflight(out_dir), preflight_figures=PREFLIGHT_FIGURES,
        tuning=tuning_section(out_dir),
        provenance=provenance(out_dir, records),
    )


def write_html(out_dir, rows: List[Dict], records: List[Dict],
               model: Optional[Dict] = None, path=None) -> Path:
    """Write the report's page to ``path`` (by default OUT/report.html); its path."""
    path = Path(path or Path(out_dir) / REPORT_FILE)
    path.write_text(render_html(out_dir, rows, records, model))
    return path
