"""``scaling status``, ``scaling cancel`` and the batch scripts' ``scaling slurm-task`` and
``scaling slurm-allocation``."""

from __future__ import annotations

import sys
from typing import Dict

import click
from rich.table import Table

from scaling.cli.output import console
from scaling.errors import exit_status


def print_state_counts(states: Dict[str, Dict]) -> Dict[str, int]:
    """``N cells: 1 ok, 2 running``; returns the counts by state."""
    from scaling.slurm import queue as slurm_queue

    counts = slurm_queue.counts(states)
    console.print(f"{len(states)} cells: " + ", ".join(
        f"{count} {name}" for name, count in sorted(counts.items())))
    return counts


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

    Exits 0; 3 when Slurm could not be asked (nothing is recorded then). With --wait, a
    controller that does not answer is asked again for up to 10 minutes, and the exit status
    is that of the cells' ends, as for `scaling sweep`: 0 when all are ok, 1 when one is not,
    3 when one's environment is missing."""
    from scaling.slurm import backend as slurm_backend
    from scaling.slurm import queue as slurm_queue

    slurm_backend.require_slurm()
    if wait:
        states = slurm_backend.wait(out_dir, slurm_queue.submitted(out_dir), console)
    else:
        states = slurm_queue.poll(out_dir)
    table = Table(title=f"{out_dir}: cells submitted to Slurm")
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
    are left not_run, unrecorded, so that `sweep --resume` runs them. Exits 0; 3 when Slurm
    could not be asked."""
    from scaling.slurm import backend as slurm_backend
    from scaling.slurm import queue as slurm_queue

    slurm_backend.require_slurm()
    states = slurm_queue.cancel(out_dir)
    print_state_counts(states)


@click.command(name="slurm-task", hidden=True)
@click.argument("out_dir")
@click.argument("group_file")
@click.argument("index", type=int)
def slurm_task(out_dir, group_file, index):
    """Run cell INDEX of GROUP_FILE on this node of a Slurm allocation (batch scripts call it)."""
    from scaling.slurm.task import run_task

    record = run_task(out_dir, group_file, index)
    console.print(f"{record['cell']}: {record.get('status')}")
    sys.exit(record.get("exit_code", 0))


@click.command(name="slurm-allocation", hidden=True)
@click.argument("out_dir")
@click.argument("group_file")
def slurm_allocation(out_dir, group_file):
    """Run every unrecorded cell of GROUP_FILE, one srun step each, inside this whole-sweep
    allocation (its batch script calls it)."""
    from scaling.slurm.steps import run_allocation

    sys.exit(run_allocation(out_dir, group_file))
