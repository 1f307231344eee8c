"""Where the command line writes: the console, the output folder it prepares, and what it prints
of records, reports and max-batch searches."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Dict, List, Optional

from rich.console import Console
from rich.table import Table

from scaling.errors import ScalingError
from scaling.execute.store import ResultStore
from scaling.maxbatch.search import write_maxbatch_csv
from scaling.report.provenance import note_command
from scaling.report.baseline import OVERHEAD_HEADERS, OVERHEAD_TITLE, overhead_lines
from scaling.report.input import INPUT_HEADERS, INPUT_TITLE, input_lines
from scaling.report.model import MODEL_HEADERS, MODEL_TITLE, model_lines
from scaling.report.side_tables import cost_tables, thread_tables
from scaling.report.curves import curve_label, series_key
from scaling.report.tables import report, scaling_tables
from scaling.units import format_bytes

# Piped output (a log, a notebook cell) is not cut to 80 columns, so wide tables stay whole.
console = Console(width=None if sys.stdout.isatty() else 200)


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


def _curve_of(row: Dict) -> str:
    return curve_label(series_key(row))


def line_table(title: str, headers, lines) -> Optional[Table]:
    """``lines`` under ``headers`` as a terminal table, figures to the right; None without a
    line."""
    if not lines:
        return None
    table = Table(title=title)
    for index, header in enumerate(headers):
        table.add_column(header, justify="right" if lines[0][index][:1].isdigit() else "left")
    for line in lines:
        table.add_row(*line)
    return table


def print_report(out_dir, prices: Optional[Dict[str, float]] = None) -> List[Dict]:
    """The scaling, threads and cost tables of OUT; writes OUT/results.csv."""
    records = ResultStore(out_dir).records()
    if not records:
        raise ScalingError(f"no results in {out_dir}")
    rows, path = report(out_dir, records, prices)
    extra = [line_table(title, headers, lines(rows, _curve_of)) for title, headers, lines in (
        (OVERHEAD_TITLE, OVERHEAD_HEADERS, overhead_lines),
        (MODEL_TITLE, MODEL_HEADERS, model_lines), (INPUT_TITLE, INPUT_HEADERS, input_lines))]
    for table in [*scaling_tables(rows), *filter(None, extra), *thread_tables(rows),
                  *cost_tables(rows)]:
        console.print(table)
    console.print(f"wrote {path}")
    return rows


MAXBATCH_COLUMNS = (
    ("framework", "framework"), ("launcher", "launcher"), ("workload", "workload"),
    ("devices", "devices"), ("max batch", "max_batch"), ("smallest OOM", "min_oom_batch"),
    ("safe batch", "safe_batch"), ("images/sec", "images_per_sec"),
    ("peak memory", "peak_memory_bytes"), ("confirmed", "confirmations"), ("trials", "trials"),
    ("seconds", "seconds"), ("status", "status"))


def _maxbatch_cell(key: str, row: Dict) -> str:
    value = row.get(key)
    if value in (None, ""):
        return "-"
    if key == "images_per_sec":
        return f"{float(value):,.1f}"
    if key == "peak_memory_bytes":
        return format_bytes(int(float(value)))
    if key == "seconds":
        return f"{float(value):.0f}"
    if key == "status" and row.get("error"):
        return f"{value}: {row['error']}"
    return str(value)


def print_max_batches(results, out_dir=None) -> None:
    """The max-batch table of ``results`` (search results, or the rows of a maxbatch.csv);
    with ``out_dir``, the results are also written to OUT/maxbatch.csv."""
    rows = [asdict(r) if is_dataclass(r) else r for r in results]
    table = Table(title="Largest per-device batch that fits")
    for header, _ in MAXBATCH_COLUMNS:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(*(_maxbatch_cell(key, row) for _, key in MAXBATCH_COLUMNS))
    console.print(table)
    if out_dir is not None:
        console.print(f"wrote {write_maxbatch_csv(results, out_dir)}")
