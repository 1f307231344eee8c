"""Several runs at once: ``scaling report DIR1 DIR2 ...`` and ``scaling export DIR... --to``."""

from __future__ import annotations

from typing import Optional

import click
from rich.table import Table

from scaling.cli.output import console, print_curve_ends
from scaling.errors import ScalingError
from scaling.report import many_records


def report_runs(out_dirs, plot: bool, html: Optional[str], price_pairs) -> None:
    """The report of several run folders: a table of the runs, under each run's label its
    curves at their largest device counts (as for one run, bounded whatever the run's size),
    the fields in which the runs' machines differ, and with ``html`` (a path) the page of every
    run's curves."""
    from scaling.report.runs import load_runs, side_by_side

    if plot or price_pairs:
        raise ScalingError("--plot and --price take one run folder; for several, --html FILE "
                           "draws every run's curves in one page")
    if html == "":
        raise ScalingError("with several run folders, --html needs the page's path: "
                           "--html FILE")
    with many_records():
        runs = load_runs(out_dirs)
    table = Table(title="Runs")
    for header in ("run", "hosts", "cells started", "folder", "sweep cells"):
        table.add_column(header, justify="right" if header == "sweep cells" else "left")
    for run in runs:
        table.add_row(run.name, run.hosts, run.dates, str(run.path), str(len(run.rows)))
    console.print(table)
    for run in runs:
        console.rule(run.label)
        print_curve_ends(run.rows)
    differing = [line for line in side_by_side(runs) if line["differs"]]
    console.print("The runs differ in: " + "; ".join(
        f"{line['field']} ({' / '.join(line['values'])})" for line in differing)
        if differing else "The runs' machines, as recorded, do not differ.", soft_wrap=True)
    if html:
        from scaling.report.runs_page import write_runs_page

        console.print(f"Report: {write_runs_page(runs, html)}")
    else:
        console.print("Report: add --html FILE for one page with every run's curves")


@click.command(name="export")
@click.argument("out_dirs", nargs=-1, required=True, metavar="OUT_DIR...",
                type=click.Path(file_okay=False, exists=True))
@click.option("--to", "target", required=True, metavar="FILE",
              type=click.Path(dir_okay=False, writable=True),
              help="The file to write, its format by its suffix: .parquet (pandas, polars, "
                   "DuckDB read it) or .duckdb (a DuckDB database with the table records).")
def export_command(out_dirs, target):
    """Write every record of the OUT_DIR folders (sweep cells, max-batch trials, allreduce and
    matrix measurements) into one table, one row per record, with run (the folder's name) and
    run_dir (its path) in front. Nested fields (options, versions, telemetry, intervals) are
    JSON text. Needs the export extra: pip install 'scaling[export]'.

    Exits 0 once written, 2 for bad input: an unknown format, a folder without results, or
    the format's library missing."""
    from scaling.report.export import export

    with many_records():
        count = export(out_dirs, target)
    console.print(f"wrote {count} records of {len(out_dirs)} runs to {target}")
