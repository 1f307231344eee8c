"""The max-batch table that ``maxbatch`` and a sweep's ``max`` batches print."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Dict

from rich.table import Table

from scaling.maxbatch.search import write_maxbatch_csv
from scaling.report.terminal import console
from scaling.units import format_bytes

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


def max_batch_table(results) -> Table:
    """The table of ``results``: search results, or the rows of a maxbatch.csv."""
    rows = [asdict(r) if is_dataclass(r) else r for r in results]
    table = Table(title="Largest per-device batch that fits")
    for header, _ in MAXBATCH_COLUMNS:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(*(_maxbatch_cell(key, row) for _, key in MAXBATCH_COLUMNS))
    return table


def print_max_batches(results, out_dir=None) -> None:
    """The max-batch table of ``results``; with ``out_dir``, the results are also written to
    OUT/maxbatch.csv."""
    console.print(max_batch_table(results))
    if out_dir is not None:
        console.print(f"wrote {write_maxbatch_csv(results, out_dir)}")
