"""What ``scaling report`` prints, whatever the run's size: each curve at its largest device
count, with the larger counts that failed, and the reasons of its marked points, in
``TERMINAL_WIDTH`` columns. Every point and every other table is in results.csv and the HTML
page."""

from __future__ import annotations

import sys
import textwrap
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scaling.report.curves import curve_label, series_key
from scaling.report.tables import MARKS, cell_summary, cell_text, workload_groups

TERMINAL_CURVES = 40
"""The most curves the terminal lists; results.csv and the HTML report have every point."""
TERMINAL_NOTES = 12
"""The most marked points whose reasons the terminal gives, in one or two lines each."""
TERMINAL_WIDTH = 120
"""The terminal report's lines fit in this many columns."""

# Piped output (a log, a notebook cell) is not cut to 80 columns, so wide tables stay whole.
console = Console(width=None if sys.stdout.isatty() else 200)
progress = Console(stderr=True)
"""Where the work before the cells says what it did, beside the progress bar (standard error),
so that standard output holds the results alone."""


def curve_ends(rows: List[Dict]) -> List[Dict]:
    """Each curve at its largest device count, in the order of the report's tables (by
    workload, then by curve): ``group`` (workload, image size, device type), ``key`` (the
    series key), ``devices`` (its largest count with an ok point, or its largest count where
    none is ok), ``summary`` (the :func:`cell_summary` of that point) and ``beyond``: each
    larger count, every one failed, with its status."""
    ends = []
    for group_key, group in workload_groups(rows).items():
        points: Dict[Tuple, Dict[int, List[Dict]]] = defaultdict(lambda: defaultdict(list))
        for row in group:
            points[series_key(row)][row["total_devices"]].append(row)
        for key in sorted(points, key=str):
            by_count = points[key]
            ok = [count for count, found in by_count.items()
                  if any(row["status"] == "ok" for row in found)]
            devices = max(ok) if ok else max(by_count)
            ends.append({"group": group_key, "key": key, "devices": devices,
                         "summary": cell_summary(by_count[devices]),
                         "beyond": [(count, by_count[count][0]["status"])
                                    for count in sorted(by_count) if count > devices]})
    return ends


def _note_lines(text: str, width: int = TERMINAL_WIDTH) -> List[str]:
    """A note in at most two lines of ``width`` columns, the second indented, cut short with
    ``…`` beyond."""
    lines = textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)
    if len(lines) > 2:
        lines = [lines[0], lines[1][:width - 1] + "…"]
    return lines


def curve_ends_table(rows: List[Dict], limit: int = TERMINAL_CURVES
                     ) -> Tuple[Optional[Table], List[str]]:
    """The terminal's one table, whatever the run's size: the first ``limit`` curves of
    :func:`curve_ends`, each at its largest device count, with the larger counts that failed;
    and the lines under it: the reasons of its marked points (at most ``TERMINAL_NOTES``, in
    two lines each at most) and how many curves it leaves out. None for the table where no
    curve is."""
    ends = curve_ends(rows)
    if not ends:
        return None, []
    shown = ends[:limit]
    table = Table(title="Each curve at its largest device count: images/sec ± 95% interval "
                        "(speedup, efficiency)")
    table.add_column("workload")
    table.add_column("curve")
    table.add_column("devices", justify="right")
    table.add_column("images/sec (speedup, efficiency)", justify="right")
    failed = any(end["beyond"] for end in shown)
    if failed:
        table.add_column("larger counts")
    notes, previous = [], None
    for index, end in enumerate(shown):
        workload, size, device_type = end["group"]
        unit = device_type.upper()
        label = escape(curve_label(end["key"]))
        last = index + 1 == len(shown) or shown[index + 1]["group"] != end["group"]
        table.add_row(escape(f"{workload} {size}px") if end["group"] != previous else "",
                      label, f"{end['devices']} {unit}", escape(cell_text(end["summary"])),
                      *([", ".join(f"{count}: {status.upper()}"
                                   for count, status in end["beyond"])] if failed else []),
                      end_section=last)
        previous = end["group"]
        notes += [_note_lines(f"{mark} {workload}, {curve_label(end['key'])}, "
                              f"{end['devices']} {unit}: {end['summary'][name]}")
                  for mark, name in MARKS if end["summary"].get(name)]
    lines = [line for note in notes[:TERMINAL_NOTES] for line in note]
    if len(notes) > TERMINAL_NOTES:
        lines.append(f"... and {len(notes) - TERMINAL_NOTES} more marked points (their reasons: "
                     "results.csv and the HTML report)")
    if len(ends) > len(shown):
        lines.append(f"{len(shown)} of {len(ends)} curves shown")
    return table, lines
