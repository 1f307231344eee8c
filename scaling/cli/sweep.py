"""``scaling sweep`` (every cell of a sweep file) and ``scaling report`` (what they gave)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from scaling.backends import backend_option, open_backend
from scaling.cli.options import (ALLOW_OVERSUBSCRIBE, HISTORY, add_to_history, history_later,
                                 parse_prices, pop_scheduler_flags, scheduler_options,
                                 watch_options, watch_settings)
from scaling.cli.output import console, prepare_out_dir, print_counts, print_report
from scaling.cli.preflight import preflight_first
from scaling.cli.runs import report_runs
from scaling.errors import ScalingError, exit_status
from scaling.execute.runner import check_resumable
from scaling.execute.store import ResultStore
from scaling.report.provenance import keep_sweep_file
from scaling.report.summary import summary_lines
from scaling.sweep import REFERENCES, load_sweep


PLOT = click.option(
    "--plot", is_flag=True,
    help="Also draw throughput, speedup and efficiency against device count as PNGs.")
HTML = click.option(
    "--html", is_flag=True,
    help="Also write OUT_DIR/report.html: one self-contained page with the grids, figures, "
         "max-batch table and provenance.")


def write_figures(out_dir, rows, plot: bool, html: Optional[str]):
    """The PNGs and the HTML page of a report, as asked (``html``: None for no page, "" for
    OUT/report.html, or the page's path); the page's path, or None."""
    if plot:
        from scaling.report.figures import plot_scaling

        for path in plot_scaling(rows, out_dir):
            console.print(f"wrote {path}")
    if html is not None:
        from scaling.report.html import write_html

        page = write_html(out_dir, rows, ResultStore(out_dir).records(), path=html)
        console.print(f"wrote {page}")
        return page
    return None


def print_summary(rows, page) -> None:
    """The answer, last: :func:`scaling.report.summary.summary_lines`, and where the HTML
    report is (or how to write it)."""
    lines = summary_lines(rows)
    lines.append(f"Report: {page}" if page else "Report: add --html for report.html")
    console.print("\n".join(lines))


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder [default: runs/NAME].")
@click.option("--resume", is_flag=True, help="Skip the cells already recorded in OUT.")
@PLOT
@HTML
@ALLOW_OVERSUBSCRIBE
@watch_options
@click.option("--preflight", is_flag=True,
              help="With --backend slurm: first check the partition's nodes (scaling "
                   "preflight) and keep the cells off those it flags; with --one-allocation, "
                   "check the allocation's nodes inside it and run the cells on those it does "
                   "not flag.")
@backend_option
@click.option("--one-allocation", is_flag=True,
              help="With --backend slurm: submit one job that holds the sweep's largest node "
                   "count and run every cell inside it as an srun step, a curve's cells on the "
                   "same nodes (as slurm: {allocation: one}; default: one job array per group "
                   "of cells).")
@click.option("--references", type=click.Choice(list(REFERENCES)), default=None,
              help="Which repeats time the references after their window (the scaling "
                   "model's local steps and allreduce, the input verdict's loader and "
                   "synthetic figures): first (each point's first repeat), every, or none "
                   "(throughput alone) [default: the sweep file's, or first].")
@scheduler_options
@HISTORY
@click.pass_context
def sweep(ctx, config, out_dir, resume, plot, html, allow_oversubscribe, wait_for_quiet_s,
          no_telemetry, preflight, backend, one_allocation, references, wait, history_path,
          **slurm_flags):
    """Run every cell of the sweep file CONFIG, then print the scaling report (and with --plot
    or --html write its figures, as `scaling report` does).

    With --backend slurm, submit the cells as job arrays (one per group of cells that need the
    same resources) and return, or with --wait block until they end; --resume skips cells that
    are recorded or still queued. With --one-allocation, submit one job instead, which runs the
    cells one after another on the first nodes of its allocation: no queue wait between cells,
    and a curve's cells on the same nodes.

    Ends with a count of cells by status, and exits 0 when every cell is ok (or, with --backend
    slurm and no --wait, once every cell is submitted), 1 when a cell ended otherwise (oom,
    crashed, timeout, ...), 3 when a cell's environment is missing (env_error)."""
    slurm = pop_scheduler_flags(slurm_flags)
    slurm["allocation"] = "one" if one_allocation else None
    runner = open_backend(backend, slurm)
    spec = load_sweep(config)
    if allow_oversubscribe:
        spec.allow_oversubscribe = True
    spec.references = references or spec.references
    if spec.data:
        runner.check_data(spec.data)
    out_dir = out_dir or f"runs/{spec.name}"
    prepare_out_dir(out_dir)
    check_resumable(out_dir, resume)
    keep_sweep_file(out_dir, config)
    if preflight:
        preflight_first(spec, out_dir, runner)
    cells, ended = runner.sweep(spec, out_dir, watch_settings(wait_for_quiet_s, no_telemetry),
                                wait)
    if ended:
        rows = print_report(out_dir)
        page = write_figures(out_dir, rows, plot, "" if html else None)
        counts = print_counts([cell.cell_id for cell in cells], out_dir)
        if history_path:
            add_to_history(history_path, out_dir)
        print_summary(rows, page)
        ctx.exit(exit_status(counts))
    elif history_path:
        console.print(history_later(history_path, out_dir))


@click.command(name="report")
@click.argument("out_dirs", nargs=-1, required=True, metavar="OUT_DIR...",
                type=click.Path(file_okay=False, exists=True))
@PLOT
@click.option("--html", "html", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="Also write one self-contained HTML page: OUT_DIR/report.html for one folder "
                   "(the grids, figures, max-batch table and provenance), or FILE. For several "
                   "folders FILE is needed: one page with every run's curves and the runs' "
                   "machines side by side.")
@click.option("--price", "price_pairs", multiple=True, metavar="KEY=USD_PER_HOUR",
              help="Price per device-hour of a device type (cpu, gpu) or device name, or per "
                   "node-hour of an instance (instance=...); repeatable; over the sweep's "
                   "prices:.")
def report_command(out_dirs, plot, html, price_pairs):
    """Print the scaling tables of OUT_DIR and write OUT_DIR/results.csv with speedup and
    efficiency (weak scaling: per-device batch fixed, baseline = measured one device), and,
    where prices are known, the cost of a million images against the reference cell.

    With several folders (runs on other hosts, dates or versions), print each run's tables
    under its label (name, hosts, dates) and the fields in which the runs' machines differ,
    and with --html FILE write one page that draws the curves of every run; the folders are
    only read."""
    if html and Path(html).is_dir():
        raise ScalingError(f"--html {html} is a folder; give the page's file name (--html FILE "
                           f"after the run folders)")
    if html and not Path(html).resolve().parent.is_dir():
        raise ScalingError(f"--html {html}: folder {Path(html).parent} does not exist")
    if len(out_dirs) > 1:
        report_runs(out_dirs, plot, html, price_pairs)
        return
    [out_dir] = out_dirs
    rows = print_report(out_dir, parse_prices(price_pairs))
    print_summary(rows, write_figures(out_dir, rows, plot, html))
