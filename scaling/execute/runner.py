"""Run a list of cells in order, with a progress bar, recording each one as it finishes."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from scaling.cell import Cell, describe
from scaling.errors import ScalingError
from scaling.execute.monitor import WatchSettings
from scaling.execute.run import run_and_record
from scaling.execute.store import ResultStore
from scaling.placement import Placement


def check_resumable(out_dir, resume: bool) -> None:
    """Without ``resume``, an output folder that already holds results is an error."""
    done = ResultStore(out_dir).done()
    if done and not resume:
        raise ScalingError(
            f"{out_dir} already holds {len(done)} results; pass --resume to continue that sweep "
            "or choose another --out"
        )


def pending_cells(cells: List[Cell], out_dir) -> List[Cell]:
    done = ResultStore(out_dir).done()
    return [cell for cell in cells if cell.cell_id not in done]


def progress_bar(console: Console) -> Progress:
    """The progress bar of long work: what runs now, a bar, done of all, time elapsed."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


def outcome_line(record: Dict) -> str:
    """What an ended cell measured, or its error, in a few words."""
    if record["status"] != "ok":
        return record["error"]
    if record.get("purpose") == "allreduce":
        largest = record["allreduce"][-1]
        return f"{largest['busbw_GBps']:.3f} GB/s bus bandwidth at {largest['bytes']} bytes"
    return f"{record['images_per_sec']:.1f} img/s"


def run_cells(cells: List[Cell], out_dir, pythons: Optional[Dict[str, str]] = None,
              console: Optional[Console] = None,
              placement: Optional[Placement] = None,
              watch: WatchSettings = WatchSettings(),
              run: Callable[..., Dict] = run_and_record) -> List[Dict]:
    """Run and record each cell in turn; ``placement`` defaults to every rank on this machine,
    ``watch`` says how cells are watched. While a cell waits for quiet, each look at a busy
    machine is said on the console. ``run``: how one cell runs and is recorded (as
    :func:`scaling.execute.run.run_and_record`; a backend may run it elsewhere)."""
    console = console or Console(stderr=True)
    pythons = pythons or {}
    records = []
    with progress_bar(console) as progress:
        def waiting(cores: float) -> None:
            progress.console.print(f"waiting for quiet: other processes use {cores:.2f} cores")

        task = progress.add_task("cells", total=len(cells))
        for cell in cells:
            progress.update(task, description=describe(cell.to_dict()))
            record = run(cell, out_dir, python=pythons.get(cell.environment),
                         placement=placement, watch=watch, on_busy=waiting)
            records.append(record)
            rate = outcome_line(record)
            if record.get("noisy"):
                rate += f" (noisy: {record['noise']})"
            progress.console.print(f"{describe(cell.to_dict())}: {record['status']} {rate}")
            progress.advance(task)
    return records
