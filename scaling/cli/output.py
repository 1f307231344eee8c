"""Where the command line writes: the console, the output folder it prepares, and what it prints
of records, reports and max-batch searches."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional


from scaling.errors import ScalingError
from scaling.execute.store import ResultStore
from scaling.report import many_records
from scaling.report.provenance import note_command
from scaling.report.tables import report
from scaling.report.terminal import TERMINAL_WIDTH, console, curve_ends_table
from scaling.units import format_bytes



def prepare_out_dir(out_dir: str) -> None:
    """Create the output folder, or say in one line why it cannot be; note the command in it."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ScalingError(f"--out {out_dir} exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ScalingError(f"cannot create output folder {out_dir}: {error.strerror}") from None
    note_command(path, sys.argv[1:])


def print_record(record: Dict) -> None:
    """One line: a cell's result, or what this node's part of it ended as."""
    if "node_rank" in record:
        console.print(f"node {record['node_rank']}: this node's ranks ended {record['status']}"
                      f"{': ' + record['error'] if record['error'] else ''}; node 0 records "
                      "the cell")
    elif record["status"] == "ok":
        console.print(
            f"ok: {record['images_per_sec']:.1f} images/sec on {record['total_devices']} "
            f"{record['device_type']} device(s), global batch {record['global_batch_size']}, "
            f"median step {record['step_time_median_s'] * 1000:.1f} ms, "
            f"peak memory {format_bytes(record['peak_memory_bytes'])} per rank"
        )
    else:
        console.print(f"{record['status']}: {record['error']}")


def print_counts(cell_ids: List[str], out_dir) -> Counter:
    """``N cells: 3 ok, 1 oom``, and those not recorded (a whole-sweep allocation ended before
    them); returns the counts by status."""
    recorded = ResultStore(out_dir).done()
    counts = Counter(recorded[cell_id]["status"] if cell_id in recorded else "not recorded"
                     for cell_id in cell_ids)
    console.print(f"{len(cell_ids)} cells: " + ", ".join(
        f"{count} {status}" for status, count in counts.most_common()))
    return counts


MORE = ("Every point of every curve, the scaling model, overheads, input verdicts and costs: "
        "results.csv and the HTML report.")
"""The terminal report's one line on where the rest of it is."""


def print_curve_ends(rows: List[Dict]) -> None:
    """The terminal's table of a run's rows, bounded whatever the run's size: each curve at
    its largest device count (:func:`scaling.report.terminal.curve_ends_table`), then the
    reasons of its marks, in ``TERMINAL_WIDTH`` columns at most."""
    table, lines = curve_ends_table(rows)
    if table is not None:
        console.print(table, width=min(console.width, TERMINAL_WIDTH))
    for line in lines:
        console.print(line, markup=False, highlight=False)


def print_report(out_dir, prices: Optional[Dict[str, float]] = None) -> List[Dict]:
    """The terminal report of OUT: each curve at its largest device count, and where every
    other point and table is (:data:`MORE`); writes OUT/results.csv. Its length does not grow
    with the records: a run of 100,000 prints as much as the quickstart's 14 at most."""
    with many_records():
        records = ResultStore(out_dir).records()
        if not records:
            raise ScalingError(f"no results in {out_dir}")
        rows, path = report(out_dir, records, prices)
    print_curve_ends(rows)
    console.print(MORE)
    console.print(f"wrote {path}")
    return rows
