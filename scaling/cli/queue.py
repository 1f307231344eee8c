"""``scaling status`` and ``scaling cancel``: the cells that a folder submitted to a
scheduler, through the backend that submitted them."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Dict

import click
from rich.table import Table

from scaling.backends import submitting_backend
from scaling.cli.output import console
from scaling.errors import exit_status


def print_state_counts(states: Dict[str, Dict]) -> Dict[str, int]:
    """``N cells: 1 ok, 2 running``; returns the counts by state."""
    counts = Counter(state["state"] for state in states.values())
    console.print(f"{len(states)} cells: " + ", ".join(
        f"{count} {name}" for name, count in sorted(counts.items())))
    return dict(counts)


@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--wait", is_flag=True, help="Block, with a progress bar, until every cell ended.")
def status(out_dir, wait):
    """Where the cells that OUT_DIR submitted to Slurm stand: pending, running, missing,
    not_run (a whole-sweep allocation ended before running it; `sweep --resume` runs it), or
    their final status. One squeue and one scontrol call per poll; a cell whose job ended
    without a record (timeout, cancelled, node failure, out of memory) is recorded here with the
    reason, and one that vanished from the controller once two polls, a grace period apart,
    and sacct do not know it (SCALING_SLURM_VANISH_GRACE_S, default 120).

    Exits 0; 2 when OUT_DIR submitted nothing; 3 when Slurm could not be asked (nothing is
    recorded then). With --wait, a controller that does not answer is asked again for up to
    10 minutes, and the exit status is that of the cells' ends, as for `scaling sweep`: 0 when
    all are ok, 1 when one is not, 3 when one's environment is missing."""
    backend = submitting_backend(out_dir)
    states = backend.status(out_dir, wait)
    table = Table(title=f"{out_dir}: cells submitted to {backend.name.capitalize()}")
    for header in ("cell", "job", "state"):
        table.add_column(header)
    for cell_id, state in states.items():
        table.add_row(f"{state['what']} ({cell_id})", state["job"] or "-", state["state"])
    console.print(table)
    counts = print_state_counts(states)
    if wait:
        sys.exit(exit_status(counts))


@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False, exists=True))
def cancel(out_dir):
    """Cancel the Slurm jobs of OUT_DIR and record their unfinished cells as cancelled.

    A later `sweep --resume` skips them, as it skips every recorded cell. A whole-sweep
    allocation (--one-allocation) is different: its finished cells stay recorded and the rest
    are left not_run, unrecorded, so that `sweep --resume` runs them. Exits 0; 2 when OUT_DIR
    submitted nothing; 3 when Slurm could not be asked."""
    print_state_counts(submitting_backend(out_dir).cancel(out_dir))
