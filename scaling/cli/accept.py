"""``scaling accept RUN --reference REF``: does each point of a run reach its reference, node by
node and device count by device count?"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from scaling.backends import backend_option, open_backend
from scaling.cell import Cell
from scaling.cli.options import pop_scheduler_flags, scheduler_options
from scaling.cli.output import console
from scaling.report import accept as acceptance
from scaling.report.history import sweep_records


@click.command()
@click.argument("run_dir", metavar="RUN", type=click.Path(file_okay=False, exists=True))
@click.option("--reference", "ref", required=True,
              help="A previous run's folder, a history file, or a device model of the shipped "
                   "reference table (h100, a100, h200, v100).")
@click.option("--tolerance", type=click.FloatRange(0, 1, min_open=True),
              default=acceptance.TOLERANCE, show_default=True,
              help="The share of the reference's images/sec a point must reach, in (0, 1].")
@click.option("--confirm", type=click.IntRange(min=0), default=0, show_default=True,
              help="Measure each failing point this many times more, on its node, before "
                   "calling it failed.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the verdicts to this JSON file.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
              help="Also write the verdicts as JUnit XML, for CI.")
@backend_option
@scheduler_options
@click.pass_context
def accept(ctx, run_dir, ref, tolerance, confirm, json_path, junit_path, backend, wait,
           **flags):
    """Judge each point of RUN (curve, device count and node) against --reference: pass
    (its whole interval at or above --tolerance x the reference), fail (wholly below), or
    inconclusive (straddling). A fail is confirmed once two or more measurements of the point
    give it together: its own repeats, and those --confirm adds on its node (here, or with
    --backend slurm as a job kept to that node).

    Prints a table, and writes JSON (--json) and JUnit XML (--junit). Exits 0 unless a fail
    is confirmed (1); 2 for bad input, such as an unknown reference model."""
    lookup = acceptance.reference(ref)
    verdicts = acceptance.judge(run_dir, lookup, tolerance)
    if confirm and any(v["verdict"] == "fail" and not v["confirmed"] for v in verdicts):
        remeasure(open_backend(backend, pop_scheduler_flags(flags)), run_dir, verdicts, confirm)
        verdicts = acceptance.judge(run_dir, lookup, tolerance)
    console.print(verdict_table(verdicts, ref, tolerance))
    if json_path:
        Path(json_path).write_text(json.dumps(verdicts, indent=1, default=str))
        console.print(f"wrote {json_path}")
    if junit_path:
        Path(junit_path).write_text(acceptance.junit(verdicts, tolerance))
        console.print(f"wrote {junit_path}")
    counts = {name: sum(v["verdict"] == name for v in verdicts)
              for name in ("pass", "fail", "inconclusive", "no reference")}
    confirmed = sum(acceptance.failed(v) for v in verdicts)
    console.print(", ".join(f"{count} {name}" for name, count in counts.items() if count) +
                  (f" ({confirmed} confirmed)" if counts["fail"] else ""))
    ctx.exit(1 if confirmed else 0)


def remeasure(backend, run_dir, verdicts, times: int) -> None:
    """Each failing point's cell, ``times`` more repeats on its node."""
    repeats = max(record.get("repeat", 0) for record in sweep_records(run_dir))
    for node, record in acceptance.failing_records(run_dir, verdicts):
        fields = {name: record[name] for name in Cell.__dataclass_fields__ if name in record}
        for _ in range(times):
            repeats += 1
            cell = Cell(**fields).with_changes(repeat=repeats)
            console.print(f"measuring {record['workload']} x{record['total_devices']} again "
                          f"on {node} (repeat {repeats})")
            backend.run_on(cell, run_dir, node)


def verdict_table(verdicts, ref, tolerance) -> Table:
    table = Table(title=f"Acceptance against {ref}, at {tolerance:.0%} of each reference")
    for header in ("curve", "devices", "node", "verdict"):
        table.add_column(header)
    for v in verdicts:
        table.add_row(v["curve"], str(v["devices"]), v["node"],
                      acceptance.describe(v, tolerance))
    return table
